// test_snapshot.c — snapshots with a scheduler, one server and one trainer
// (libferry) in this process: a snapshot read back into a new job holds
// bit-identical state (with and without a pull codec), a truncated or
// corrupted file is refused naming the file, a failed write keeps the
// previous snapshot, and --snapshot-every writes at the right versions;
// the Snapshot rpc sent to the scheduler cuts one version on every server.
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "fb/fb.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

// One job: a scheduler, one server with a snapshot directory, a trainer.
struct snapjob {
	struct ps_scheduler *sched;
	struct ps_server    *srv;
	ferry_client        *c;
	float                w[NT][40];
	float               *wp[NT];
};

// The optimizer job_open declares (NULL: sgd); the optimizer tests set it.
static const char *job_optimizer;

// job_open starts a job on dir; the trainer declares the 3-tensor table
// (the last tensor last_len long), offers its initial weights and pulls.
// Returns the trainer's result (the job is up either way).
static int
job_open(struct snapjob *j, const char *dir, uint64_t every, int restore,
    const char *pull, size_t last_len, uint32_t timeout_ms)
{
	struct ps_scheduler_opts so    = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o     = PS_SERVER_OPTS_INIT;
	struct ferry_opts        fo    = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", lens[0] }, { "b", lens[1] },
		{ "c", last_len } };
	char                     url[64], surl[64];
	int                      rv;

	memset(j, 0, sizeof(*j));
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 1;
	so.servers     = 1;
	so.shard_bytes = 64;
	so.probe_bytes = 64 << 10;
	PT_OK(ps_scheduler_open(&so, &j->sched));
	o.url            = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url  = ps_scheduler_url(j->sched);
	o.snapshot_dir   = dir;
	o.snapshot_every = every;
	o.restore        = restore;
	PT_OK(ps_server_open(&o, &j->srv));
	fo.scheduler_url = ps_scheduler_url(j->sched);
	fo.codec_pull    = pull;
	fo.timeout_ms    = timeout_ms;
	fo.optimizer     = job_optimizer;
	ck_assert_int_eq(ferry_client_open(&fo, &j->c), 0);
	for (int t = 0; t < NT; t++) {
		j->wp[t] = j->w[t];
		for (size_t i = 0; i < 40; i++) {
			j->w[t][i] = 0.5f - (float) i * 0.01f + (float) t;
		}
	}
	if ((rv = ferry_client_declare(j->c, d, NT)) != 0 ||
	    (rv = ferry_client_init_weights(j->c,
	         (const float *const *) j->wp)) != 0) {
		return rv;
	}
	return ferry_client_pull(j->c, j->wp);
}

static void
job_close(struct snapjob *j)
{
	ferry_client_close(j->c);
	ps_server_close(j->srv);
	ps_scheduler_close(j->sched);
}

// job_step runs sync step k (a push-pull of rank 0's gradient).
static void
job_step(struct snapjob *j, int k)
{
	float  g[NT][40];
	float *gp[NT];
	for (int t = 0; t < NT; t++) {
		gp[t] = g[t];
		for (size_t i = 0; i < 40; i++) {
			g[t][i] = grad_for(0, k, t, i);
		}
	}
	ck_assert_msg(ferry_client_push_pull(j->c, (const float *const *) gp,
	                  10, j->wp) == 0,
	    "step %d: %s", k, ferry_client_last_error(j->c));
}

// stat_u64 reads "key:value" from the server's stats text.
static uint64_t
stat_u64(struct ps_server *s, const char *key)
{
	char        text[4096], pat[64];
	const char *p;
	ps_server_stats(s, text, sizeof(text));
	snprintf(pat, sizeof(pat), "\n%s:", key);
	p = strstr(text, pat);
	ck_assert_msg(p != NULL, "no %s in stats", key);
	return strtoull(p + strlen(pat), NULL, 10);
}

static void
tmpdir(char *buf, size_t n)
{
	snprintf(buf, n, "/tmp/ferry-snap-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(buf));
}

static void
rmdir_all(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

// read_all returns the bytes of path (caller frees) and their count.
static uint8_t *
read_all(const char *path, size_t *n)
{
	FILE    *f = fopen(path, "rb");
	uint8_t *b;
	long     len;
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t) len + 1);
	ck_assert_int_eq(fread(b, 1, (size_t) len, f), (size_t) len);
	fclose(f);
	*n = (size_t) len;
	return b;
}

static void
write_all(const char *path, const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fwrite(b, 1, n, f), n);
	fclose(f);
}

// round_trip: 5 steps, a snapshot, one more step; a new job restored from
// the snapshot pulls the same weights and, after the same sixth step, the
// same weights again, bit for bit (x, the pull reference and the delta
// log all came back). Fails if any of the state is lost or altered.
static void
round_trip(const char *pull)
{
	struct snapjob a, b;
	char           dir[64], path[128], msg[512];
	float          w5[NT][40], w6[NT][40];
	uint64_t       v = 0;

	tmpdir(dir, sizeof(dir));
	ck_assert_int_eq(job_open(&a, dir, 0, PS_RESTORE_AUTO, pull, 1, 20000),
	    0);
	for (int k = 0; k < 5; k++) {
		job_step(&a, k);
	}
	PT_OK(ps_server_snapshot(a.srv, 0, 10000, &v));
	ck_assert_uint_eq(v, 5);
	memcpy(w5, a.w, sizeof(w5));
	job_step(&a, 5);
	memcpy(w6, a.w, sizeof(w6));
	ck_assert_uint_eq(stat_u64(a.srv, "snapshots_written"), 1);
	job_close(&a);

	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	PT_OK(ps_snapshot_check(path, msg, sizeof(msg)));
	ck_assert_msg(strstr(msg, "version 5") != NULL, "%s", msg);
	// The new trainer offers other initial weights: the snapshot wins.
	ck_assert_int_eq(job_open(&b, dir, 0, PS_RESTORE_YES, pull, 1, 20000),
	    0);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_version"), 5);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_shards"), 5);
	ck_assert_msg(memcmp(b.w, w5, sizeof(w5)) == 0,
	    "restored weights differ");
	job_step(&b, 5);
	ck_assert_msg(memcmp(b.w, w6, sizeof(w6)) == 0,
	    "the step after the restore differs");
	job_close(&b);
	rmdir_all(dir);
}

// test_snapshot_round_trip: weights only (no pull codec).
START_TEST(test_snapshot_round_trip)
{
	round_trip(NULL);
}
END_TEST

// test_snapshot_round_trip_ref: with a pull codec (reference, delta log).
START_TEST(test_snapshot_round_trip_ref)
{
	round_trip("q8");
}
END_TEST

// test_snapshot_corrupt_bogus: a truncated file and a file with one byte
// flipped are refused by ps_snapshot_check naming the file, and a server
// told to restore the flipped file does not serve (nothing half-loaded
// is ever trained on). Fails if a damaged file passes or is used.
START_TEST(test_snapshot_corrupt_bogus)
{
	struct snapjob a, b;
	char           dir[64], path[128], msg[512];
	uint8_t       *bytes;
	size_t         n;

	tmpdir(dir, sizeof(dir));
	ck_assert_int_eq(job_open(&a, dir, 0, PS_RESTORE_AUTO, NULL, 1, 20000),
	    0);
	job_step(&a, 0);
	PT_OK(ps_server_snapshot(a.srv, 0, 10000, NULL));
	job_close(&a);
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	bytes = read_all(path, &n);

	write_all(path, bytes, n - 7); // truncated
	PT_FAIL(ps_snapshot_check(path, msg, sizeof(msg)), FB_ECORRUPT);
	ck_assert_msg(strstr(msg, path) != NULL, "%s", msg);
	write_all(path, bytes, 20); // shorter than a header
	PT_FAIL(ps_snapshot_check(path, msg, sizeof(msg)), FB_ECORRUPT);
	ck_assert_msg(strstr(msg, path) != NULL, "%s", msg);
	bytes[n / 2] ^= 0x10; // one bit flipped in the middle
	write_all(path, bytes, n);
	PT_FAIL(ps_snapshot_check(path, msg, sizeof(msg)), FB_ECORRUPT);
	ck_assert_msg(strstr(msg, path) != NULL && strstr(msg, "CRC"), "%s",
	    msg);
	bytes[n / 2] ^= 0x10;
	uint8_t fmt = bytes[8];
	bytes[8]    = 9; // a format this build does not read
	write_all(path, bytes, n);
	PT_FAIL(ps_snapshot_check(path, msg, sizeof(msg)), FB_EPROTO);
	ck_assert_msg(strstr(msg, "format version 9") != NULL, "%s", msg);
	bytes[8] = fmt;
	bytes[n / 2] ^= 0x10;
	write_all(path, bytes, n);
	free(bytes);

	// The server refuses it: no placement installed, the trainer's
	// calls find no server, the server never becomes ready.
	ck_assert_int_ne(job_open(&b, dir, 0, PS_RESTORE_YES, NULL, 1, 1500),
	    0);
	ck_assert_int_eq(ps_server_ready(b.srv, msg, sizeof(msg)), 0);
	job_close(&b);
	rmdir_all(dir);
}
END_TEST

// test_snapshot_other_job_bogus: a sound file whose shards do not match
// the job (the last tensor is longer) is refused whole, and restore=yes
// without a file is refused. Fails if it is loaded anyway.
START_TEST(test_snapshot_other_job_bogus)
{
	struct snapjob a, b;
	char           dir[64], msg[128];

	tmpdir(dir, sizeof(dir));
	ck_assert_int_ne(job_open(&a, dir, 0, PS_RESTORE_YES, NULL, 1, 1500),
	    0);
	ck_assert_int_eq(ps_server_ready(a.srv, msg, sizeof(msg)), 0);
	job_close(&a);

	ck_assert_int_eq(job_open(&a, dir, 0, PS_RESTORE_AUTO, NULL, 1, 20000),
	    0);
	job_step(&a, 0);
	PT_OK(ps_server_snapshot(a.srv, 0, 10000, NULL));
	job_close(&a);
	ck_assert_int_ne(job_open(&b, dir, 0, PS_RESTORE_AUTO, NULL, 2, 1500),
	    0);
	ck_assert_int_eq(ps_server_ready(b.srv, msg, sizeof(msg)), 0);
	job_close(&b);
	rmdir_all(dir);
}
END_TEST

// test_snapshot_write_error_keeps_old: when the new file cannot be
// written (its temp name is taken by a directory; or, when not root, the
// directory is read-only) the snapshot call fails and the previous
// snapshot is left byte for byte. Fails if a failed write replaces or
// removes the good file.
START_TEST(test_snapshot_write_error_keeps_old)
{
	struct snapjob a;
	char           dir[64], path[128], tmp[140];
	uint8_t       *before, *after;
	size_t         n0, n1;
	uint64_t       v = 0;

	tmpdir(dir, sizeof(dir));
	ck_assert_int_eq(job_open(&a, dir, 0, PS_RESTORE_AUTO, NULL, 1, 20000),
	    0);
	job_step(&a, 0);
	PT_OK(ps_server_snapshot(a.srv, 0, 10000, &v));
	ck_assert_uint_eq(v, 1);
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	before = read_all(path, &n0);
	job_step(&a, 1);

	ck_assert_int_eq(mkdir(tmp, 0755), 0);
	ck_assert_int_ne(ps_server_snapshot(a.srv, 0, 10000, NULL), FB_OK);
	ck_assert_int_eq(rmdir(tmp), 0);
	if (geteuid() != 0) {
		ck_assert_int_eq(chmod(dir, 0555), 0);
		ck_assert_int_ne(ps_server_snapshot(a.srv, 0, 10000, NULL),
		    FB_OK);
		ck_assert_int_eq(chmod(dir, 0755), 0);
	}
	after = read_all(path, &n1);
	ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0,
	    "a failed write changed the previous snapshot");
	ck_assert_int_eq(access(tmp, F_OK), -1);
	ck_assert_uint_ge(stat_u64(a.srv, "snapshots_failed"), 1);
	// Once the directory is writable again, snapshots work.
	PT_OK(ps_server_snapshot(a.srv, 0, 10000, &v));
	ck_assert_uint_eq(v, 2);
	free(before);
	free(after);
	job_close(&a);
	rmdir_all(dir);
}
END_TEST

// test_snapshot_every: with --snapshot-every 3, versions 3 and 6 are
// written, versions in between are not. Fails on a snapshot at the wrong
// version, a missing one, or an extra one.
START_TEST(test_snapshot_every)
{
	struct snapjob a;
	char           dir[64], path[128], msg[512], want[32];

	tmpdir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	ck_assert_int_eq(job_open(&a, dir, 3, PS_RESTORE_AUTO, NULL, 1, 20000),
	    0);
	for (int k = 0; k < 7; k++) {
		uint64_t v = (uint64_t) k + 1, written = v / 3;
		job_step(&a, k);
		// The writer runs in the background: wait for it.
		for (int i = 0;
		     i < 500 && stat_u64(a.srv, "snapshots_written") < written;
		     i++) {
			fb_sleep_us(10000);
		}
		ck_assert_uint_eq(stat_u64(a.srv, "snapshots_written"),
		    written);
		if (written > 0) {
			ck_assert_uint_eq(stat_u64(a.srv, "snapshot_version"),
			    written * 3);
			PT_OK(ps_snapshot_check(path, msg, sizeof(msg)));
			snprintf(want, sizeof(want), "version %llu,",
			    (unsigned long long) written * 3);
			ck_assert_msg(strstr(msg, want) != NULL, "%s", msg);
		} else {
			ck_assert_int_eq(access(path, F_OK), -1);
		}
	}
	ck_assert_uint_eq(stat_u64(a.srv, "snapshots_skipped"), 0);
	job_close(&a);
	rmdir_all(dir);
}
END_TEST

// test_snapshot_bogus: the API refuses a server without a snapshot
// directory and a version the shards are already past; the checker
// refuses a missing file. Fails if any is accepted.
START_TEST(test_snapshot_bogus)
{
	struct snapjob a;
	char           dir[64], msg[256];

	tmpdir(dir, sizeof(dir));
	ck_assert_int_eq(job_open(&a, dir, 0, PS_RESTORE_AUTO, NULL, 1, 20000),
	    0);
	job_step(&a, 0);
	job_step(&a, 1);
	PT_FAIL(ps_server_snapshot(a.srv, 1, 1000, NULL), FB_ESTATE);
	job_close(&a);
	ck_assert_int_eq(
	    job_open(&a, NULL, 0, PS_RESTORE_AUTO, NULL, 1, 20000), 0);
	PT_FAIL(ps_server_snapshot(a.srv, 0, 1000, NULL), FB_ESTATE);
	job_close(&a);
	PT_FAIL(
	    ps_snapshot_check("/nonexistent/server-0.snap", msg, sizeof(msg)),
	    FB_ENOTFOUND);
	ck_assert_msg(strstr(msg, "/nonexistent/server-0.snap") != NULL, "%s",
	    msg);
	rmdir_all(dir);
}
END_TEST

// test_snapshot_round_trip_optim: Adam's moments and momentum's velocity
// are in the snapshot: the step after a restore is bit-identical to the
// step the original job took (zeroed or lost state would change it).
START_TEST(test_snapshot_round_trip_optim)
{
	job_optimizer = "adam";
	round_trip(NULL);
	job_optimizer = "momentum";
	round_trip("q8");
	job_optimizer = NULL;
}
END_TEST

// test_snapshot_format1: a format 1 file (before optimizers: no state)
// still restores into an sgd job, and is refused by an adam job, whose
// server then does not serve. Fails if old files stop loading or are
// loaded without the state the optimizer needs.
START_TEST(test_snapshot_format1)
{
	struct snapjob a, b;
	char           dir[64], path[128], msg[512];
	uint8_t       *bytes;
	size_t         n;

	tmpdir(dir, sizeof(dir));
	ck_assert_int_eq(job_open(&a, dir, 0, PS_RESTORE_AUTO, NULL, 1, 20000),
	    0);
	for (int k = 0; k < 3; k++) {
		job_step(&a, k);
	}
	PT_OK(ps_server_snapshot(a.srv, 0, 10000, NULL));
	job_close(&a);
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	bytes = read_all(path, &n);
	// Format 3 without table records is format 2's layout.
	ck_assert_uint_eq(fb_get_u32le(bytes + 8), 3);
	fb_put_u32le(bytes + 8, 1); // as format 1 wrote it: no state
	fb_put_u32le(bytes + n - 4, fb_crc32(0, bytes, n - 4));
	write_all(path, bytes, n);
	free(bytes);
	PT_OK(ps_snapshot_check(path, msg, sizeof(msg)));

	ck_assert_int_eq(job_open(&b, dir, 0, PS_RESTORE_YES, NULL, 1, 20000),
	    0);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_version"), 3);
	job_close(&b);

	job_optimizer = "adam";
	ck_assert_int_ne(job_open(&b, dir, 0, PS_RESTORE_YES, NULL, 1, 1500),
	    0);
	job_optimizer = NULL;
	ck_assert_int_eq(ps_server_ready(b.srv, msg, sizeof(msg)), 0);
	job_close(&b);
	rmdir_all(dir);
}
END_TEST

// snap_rpc sends Snapshot(version) to url and returns the reply header
// (free with pswire__header__free_unpacked), failing the test when none
// came within 30 s.
static Pswire__Header *
snap_rpc(const char *url, uint64_t version)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__SnapshotRequest r  = PSWIRE__SNAPSHOT_REQUEST__INIT;
	ProtobufCMessage       *ph = NULL;
	nng_socket              sock;
	nng_ctx                 ctx;
	nng_aio                *aio;
	const char             *why = "";
	r.version                   = version;
	h.request_id                = 7;
	h.deadline_ms               = 20000;
	h.body_case                 = PSWIRE__HEADER__BODY_SNAPSHOT_REQ;
	h.snapshot_req              = &r;
	PT_OK(psw_req_open(NULL, url, 0, 50, 1000, &sock, &ctx, &aio));
	int rv = psw_call_header(NULL, ctx, aio, &h.base,
	    PSWIRE__METHOD__SNAPSHOT, 7, 30000, &ph, &why);
	ck_assert_msg(rv == FB_OK || rv == FB_EREMOTE, "Snapshot: %s", why);
	nng_aio_free(aio);
	nng_close(sock);
	return (Pswire__Header *) ph;
}

// A Snapshot asked from another thread while the test trains: the rpc
// (version 0), or ps_job_snapshot (`ps-server --role=snapshot`) for
// version `version`.
struct snap_ask {
	const char            *url;
	uint64_t               version;
	Pswire__Header        *rep; // the rpc's reply
	struct ps_job_snapshot js;  // ps_job_snapshot's
	int                    rv;
	char                   err[256];
	atomic_int             done;
};

static void *
snap_ask_main(void *arg)
{
	struct snap_ask *a = arg;
	if (a->version == 0) {
		a->rep = snap_rpc(a->url, 0);
	} else {
		a->rv = ps_job_snapshot(a->url, NULL, a->version, 20000,
		    &a->js, a->err, sizeof(a->err));
	}
	atomic_store(&a->done, 1);
	return NULL;
}

// file_version reads the snapshot version in the header of dir's file of
// server m.
static uint64_t
file_version(const char *dir, int m)
{
	char   path[128];
	size_t n;
	snprintf(path, sizeof(path), "%s/server-%d.snap", dir, m);
	uint8_t *b = read_all(path, &n);
	ck_assert_uint_ge(n, 24);
	uint64_t v = (uint64_t) fb_get_u32le(b + 16) |
	    ((uint64_t) fb_get_u32le(b + 20) << 32);
	free(b);
	return v;
}

// The Snapshot rpc sent to the scheduler of a 2-server sync job while it
// trains: both servers write the same version (the one every shard held
// when asked, or the next), at least 3 after 3 steps, and the reply sums
// them.
// With training stopped it takes the version every shard holds at once.
// Before the job starts it is refused, and a version some shard is past
// is refused naming the server. Fails if the servers' files hold
// different versions (no consistent cut).
START_TEST(test_snapshot_scheduler_consistent_cut)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_server        *srv[2];
	struct ps_scheduler     *sched;
	struct snapjob           j;
	struct ferry_opts        fo    = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", lens[0] }, { "b", lens[1] },
		{ "c", lens[2] } };
	char                     dir[64], url[64], surl[2][64], msg[512];
	pthread_t                th;
	struct snap_ask          ask = { 0 };

	tmpdir(dir, sizeof(dir));
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 1;
	so.servers     = 2;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &sched));
	const char     *su = ps_scheduler_url(sched);
	Pswire__Header *rh = snap_rpc(su, 0);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__FAILED_PRECONDITION);
	pswire__header__free_unpacked(rh, NULL);
	for (int m = 0; m < 2; m++) {
		o.url           = pt_addr(surl[m], sizeof(surl[m]), "tcp");
		o.scheduler_url = su;
		o.snapshot_dir  = dir;
		PT_OK(ps_server_open(&o, &srv[m]));
	}
	memset(&j, 0, sizeof(j));
	fo.scheduler_url = su;
	fo.timeout_ms    = 20000;
	ck_assert_int_eq(ferry_client_open(&fo, &j.c), 0);
	for (int t = 0; t < NT; t++) {
		j.wp[t] = j.w[t];
		for (size_t i = 0; i < 40; i++) {
			j.w[t][i] = 0.5f - (float) i * 0.01f;
		}
	}
	ck_assert_int_eq(ferry_client_declare(j.c, d, NT), 0);
	ck_assert_int_eq(
	    ferry_client_init_weights(j.c, (const float *const *) j.wp), 0);
	ck_assert_int_eq(ferry_client_pull(j.c, j.wp), 0);
	for (int k = 0; k < 3; k++) {
		job_step(&j, k);
	}
	// Ask while training goes on; the cut is the next version.
	ask.url = su;
	ck_assert_int_eq(pthread_create(&th, NULL, snap_ask_main, &ask), 0);
	int k = 3;
	for (; k < 40 && !atomic_load(&ask.done); k++) {
		job_step(&j, k);
		fb_sleep_us(50000);
	}
	pthread_join(th, NULL);
	ck_assert_msg(ask.rep->status == PSWIRE__STATUS__OK, "%s: %s",
	    psw_status_name(ask.rep->status), ask.rep->error);
	ck_assert_int_eq(ask.rep->body_case,
	    PSWIRE__HEADER__BODY_SNAPSHOT_REP);
	uint64_t v = ask.rep->snapshot_rep->version;
	ck_assert_msg(v >= 4 && v <= (uint64_t) k,
	    "version %llu after %d "
	    "steps",
	    (unsigned long long) v, k);
	ck_assert_uint_eq(ask.rep->snapshot_rep->servers, 2);
	ck_assert_uint_eq(ask.rep->snapshot_rep->shards, 5);
	ck_assert_uint_gt(ask.rep->snapshot_rep->bytes, 0);
	pswire__header__free_unpacked(ask.rep, NULL);
	for (int m = 0; m < 2; m++) {
		char path[128];
		snprintf(path, sizeof(path), "%s/server-%d.snap", dir, m);
		PT_OK(ps_snapshot_check(path, msg, sizeof(msg)));
		ck_assert_uint_eq(file_version(dir, m), v);
	}
	// The one-shot client, for a version ahead: the test pauses so that
	// the request reaches the servers before the shards pass it, then
	// trains until the files move to it.
	struct snap_ask ask2 = { .url = su, .version = (uint64_t) k + 3 };
	ck_assert_int_eq(pthread_create(&th, NULL, snap_ask_main, &ask2), 0);
	fb_sleep_us(1000000);
	for (int e = k + 40; k < e && !atomic_load(&ask2.done); k++) {
		job_step(&j, k);
		fb_sleep_us(20000);
	}
	pthread_join(th, NULL);
	ck_assert_msg(ask2.rv == FB_OK, "%s (k %d, versions %llu %llu)",
	    ask2.err, k, (unsigned long long) stat_u64(srv[0], "version"),
	    (unsigned long long) stat_u64(srv[1], "version"));
	ck_assert_uint_eq(ask2.js.version, ask2.version);
	ck_assert_uint_eq(ask2.js.shards, 5);
	ck_assert_uint_eq(file_version(dir, 0), ask2.version);
	ck_assert_uint_eq(file_version(dir, 1), ask2.version);
	// Training stopped (as after the job's last step): every shard holds
	// one version, and the snapshot is of that version, at once; waiting
	// for the next would never end.
	uint64_t now = stat_u64(srv[0], "version");
	rh           = snap_rpc(su, 0);
	ck_assert_msg(rh->status == PSWIRE__STATUS__OK, "%s: %s",
	    psw_status_name(rh->status), rh->error);
	ck_assert_uint_eq(rh->snapshot_rep->version, now);
	ck_assert_uint_eq(file_version(dir, 1), now);
	pswire__header__free_unpacked(rh, NULL);
	// A version the shards are past is refused, naming a server.
	struct ps_job_snapshot js;
	PT_FAIL(ps_job_snapshot(su, NULL, 2, 5000, &js, msg, sizeof(msg)),
	    FB_EREMOTE);
	ck_assert_msg(strstr(msg, "FAILED_PRECONDITION") != NULL &&
	        strstr(msg, "server ") != NULL,
	    "%s", msg);
	rh = snap_rpc(su, 2);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__FAILED_PRECONDITION);
	ck_assert_msg(strstr(rh->error, "server ") != NULL, "%s", rh->error);
	pswire__header__free_unpacked(rh, NULL);
	ferry_client_close(j.c);
	ps_server_close(srv[0]);
	ps_server_close(srv[1]);
	ps_scheduler_close(sched);
	rmdir_all(dir);
}
END_TEST

// snap_register registers a server at srv with a --snapshot-dir holding
// versions v[0..n) and returns the reply (free it), failing on a refusal.
static Pswire__Header *
snap_register(const char *url, const char *srv, uint64_t *v, size_t n)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	rr.role                    = PSWIRE__ROLE__ROLE_SERVER;
	rr.url                     = (char *) srv;
	rr.has_snapshots           = 1;
	rr.restarted               = n > 0;
	rr.snapshot_versions       = v;
	rr.n_snapshot_versions     = n;
	h.body_case                = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req             = &rr;
	Pswire__Header *rh = wire_call(url, PSWIRE__METHOD__REGISTER, &h,
	    3000);
	ck_assert_ptr_nonnull(rh);
	ck_assert_msg(rh->status == 0, "Register: %s", rh->error);
	ck_assert_int_eq(rh->body_case, PSWIRE__HEADER__BODY_REGISTER_REP);
	return rh;
}

// snap_heartbeat sends server id's heartbeat listing versions v[0..n).
static void
snap_heartbeat(const char *url, uint32_t id, uint64_t *v, size_t n)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	l.role                 = PSWIRE__ROLE__ROLE_SERVER;
	l.id                   = id;
	l.has_snapshots        = 1;
	l.snapshot_versions    = v;
	l.n_snapshot_versions  = n;
	h.body_case            = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req            = &l;
	ck_assert_int_eq(status_of(url, PSWIRE__METHOD__HEARTBEAT, &h), 0);
}

// sched_epoch returns the scheduler's map epoch from its stats.
static uint64_t
sched_epoch(struct ps_scheduler *s)
{
	char text[8192];
	ps_scheduler_stats(s, text, sizeof(text));
	return pt_stat(text, "epoch:");
}

// rolls_back_to_160 checks that scheduler s still holds map 1 (waiting
// for server 0's snapshot list) 200 ms on, then sends server 0's
// heartbeat listing a[0..2) and expects map 2 rolling the job back to
// version 160 (rollback generation 1).
static void
rolls_back_to_160(struct ps_scheduler *s, const char *url, uint64_t *a)
{
	Pswire__Header *rh;
	nng_msleep(200);
	ck_assert_uint_eq(sched_epoch(s), 1); // server 0 not fresh yet
	snap_heartbeat(url, 0, a, 2);
	rh = map_at_least(url, 2, 3000);
	ck_assert_uint_eq(rh->placement->epoch, 2);
	ck_assert_uint_eq(rh->placement->rollback_version, 160);
	ck_assert_uint_eq(rh->placement->rollback_gen, 1);
	pswire__header__free_unpacked(rh, NULL);
}

// The scheduler's choice of the rollback version, over the wire: both
// servers register with snapshots (the map says so); server 1 restarts
// with versions {160, 140} while server 0 last reported {180, 160}. The
// scheduler tells server 1 to restore (not late) and to wait for epoch
// 2, but decides only after server 0's next heartbeat (its list may have
// changed since), then publishes epoch 2 rolling back to 160, the newest
// common version. A second restart with {100, 80}, which server 0 does
// not hold, publishes nothing: the job is not rolled back to mixed
// versions, even after dead_after_ms. Fails on a wrong version, a map
// published before the fresh report, or a map without a common version.
START_TEST(test_snapshot_scheduler_rollback_choice)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	Pswire__Header          *rh;
	uint64_t                 a[2] = { 180, 160 }, b[2] = { 160, 140 },
	         old[2] = { 100, 80 };
	o.url           = "tcp://127.0.0.1:0";
	o.trainers      = 1;
	o.servers       = 2;
	o.probe_bytes   = 0;
	o.dead_after_ms = 1500;
	o.shard_bytes   = 32; // the 16 floats make 2 shards, one per server
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	pswire__header__free_unpacked(
	    snap_register(url, "tcp://127.0.0.1:1", NULL, 0), NULL);
	pswire__header__free_unpacked(
	    snap_register(url, "tcp://127.0.0.1:2", NULL, 0), NULL);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	rh = map_at_least(url, 1, 3000);
	ck_assert_uint_eq(rh->placement->n_shards, 2);
	ck_assert_uint_ne(rh->placement->shards[0]->server,
	    rh->placement->shards[1]->server);
	ck_assert(rh->placement->snapshots);
	ck_assert_uint_eq(rh->placement->rollback_gen, 0);
	pswire__header__free_unpacked(rh, NULL);
	snap_heartbeat(url, 0, a, 2);

	rh = snap_register(url, "tcp://127.0.0.1:2", b, 2);
	ck_assert_uint_eq(rh->register_rep->id, 1);
	ck_assert(!rh->register_rep->late);
	ck_assert_uint_eq(rh->register_rep->wait_epoch, 2);
	ck_assert_uint_eq(rh->register_rep->rollback_gen, 0);
	pswire__header__free_unpacked(rh, NULL);
	rolls_back_to_160(s, url, a);

	rh = snap_register(url, "tcp://127.0.0.1:2", old, 2);
	ck_assert_uint_eq(rh->register_rep->wait_epoch, 3);
	ck_assert_uint_eq(rh->register_rep->rollback_gen, 1);
	pswire__header__free_unpacked(rh, NULL);
	snap_heartbeat(url, 0, a, 2);
	nng_msleep(2000); // past dead_after_ms: decided, refused
	ck_assert_uint_eq(sched_epoch(s), 2);
	ps_scheduler_close(s);
}
END_TEST

// A rollback still waiting for a server's snapshot list outlives a
// scheduler restart (--state-dir): server 1 restarts with {160, 140}
// while server 0 has not reported since, the scheduler is closed and
// opened again on the same directory, and server 0's next heartbeat to
// the new one publishes epoch 2 rolling back to 160, as the first would
// have. Fails if the restarted scheduler forgot the rollback (no map 2:
// the restarted server would wait for ever) or decides it differently.
START_TEST(test_snapshot_scheduler_rollback_restart)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	Pswire__Header          *rh;
	uint64_t                 a[2] = { 180, 160 }, b[2] = { 160, 140 };
	char                     sdir[64], url[128];
	tmpdir(sdir, sizeof(sdir));
	o.url           = "tcp://127.0.0.1:0";
	o.trainers      = 1;
	o.servers       = 2;
	o.probe_bytes   = 0;
	o.dead_after_ms = 60000; // the wait never expires here
	o.shard_bytes   = 32;    // 2 shards, one per server
	o.state_dir     = sdir;
	PT_OK(ps_scheduler_open(&o, &s));
	snprintf(url, sizeof(url), "%s", ps_scheduler_url(s));
	pswire__header__free_unpacked(
	    snap_register(url, "tcp://127.0.0.1:1", NULL, 0), NULL);
	pswire__header__free_unpacked(
	    snap_register(url, "tcp://127.0.0.1:2", NULL, 0), NULL);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	pswire__header__free_unpacked(map_at_least(url, 1, 3000), NULL);
	snap_heartbeat(url, 0, a, 2);
	rh = snap_register(url, "tcp://127.0.0.1:2", b, 2);
	ck_assert_uint_eq(rh->register_rep->wait_epoch, 2);
	pswire__header__free_unpacked(rh, NULL);
	ck_assert_uint_eq(sched_epoch(s), 1); // waiting for server 0
	ps_scheduler_close(s);

	PT_OK(ps_scheduler_open(&o, &s));
	snprintf(url, sizeof(url), "%s", ps_scheduler_url(s));
	ck_assert_uint_eq(sched_epoch(s), 1);
	rolls_back_to_160(s, url, a);
	ps_scheduler_close(s);

	// Decided: a third scheduler on the directory has nothing pending.
	PT_OK(ps_scheduler_open(&o, &s));
	snprintf(url, sizeof(url), "%s", ps_scheduler_url(s));
	snap_heartbeat(url, 0, a, 2);
	nng_msleep(200);
	ck_assert_uint_eq(sched_epoch(s), 2);
	ps_scheduler_close(s);
	rmdir_all(sdir);
}
END_TEST

// A job whose servers keep snapshots is cut by --shard-bytes even when its
// probed links would make shards smaller: a restore needs the cut the
// snapshot was written from, and a new job with the same flags measures
// its links anew. (Loopback probed with 64 KiB moves far less than the 16
// MiB shard in SHARD_LINK_S, so without the rule the tensor is cut finer.)
START_TEST(test_snapshot_cut_ignores_links)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ferry_opts        fo = FERRY_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	ferry_client            *c;
	enum { N = 4u << 20 }; // 16 MiB: one shard of --shard-bytes
	struct ferry_tensor_desc d[1] = { { "big", N } };
	char                     dir[64], url[64], surl[64], text[4096];
	float                   *w = calloc(N, sizeof(float));
	ck_assert_ptr_nonnull(w);
	tmpdir(dir, sizeof(dir));
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 1;
	so.servers     = 1;
	so.shard_bytes = 16u << 20;
	so.probe_bytes = 64 << 10;
	so.max_msg     = 64u << 20;
	PT_OK(ps_scheduler_open(&so, &sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sched);
	o.snapshot_dir  = dir;
	o.max_msg       = 64u << 20;
	PT_OK(ps_server_open(&o, &srv));
	fo.scheduler_url = ps_scheduler_url(sched);
	fo.timeout_ms    = 20000;
	ck_assert_int_eq(ferry_client_open(&fo, &c), 0);
	const float *wp[1] = { w };
	ck_assert_msg(ferry_client_declare(c, d, 1) == 0 &&
	        ferry_client_init_weights(c, wp) == 0,
	    "%s", ferry_client_last_error(c));
	ps_server_stats(srv, text, sizeof(text));
	ck_assert_msg(pt_stat(text, "shards:") == 1, "%s", text);
	ferry_client_close(c);
	ps_server_close(srv);
	ps_scheduler_close(sched);
	free(w);
	rmdir_all(dir);
}
END_TEST

Suite *
suite_snapshot(void)
{
	Suite *s  = suite_create("snapshot");
	TCase *tc = tcase_create("snapshot");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_snapshot_round_trip);
	tcase_add_test(tc, test_snapshot_round_trip_ref);
	tcase_add_test(tc, test_snapshot_corrupt_bogus);
	tcase_add_test(tc, test_snapshot_other_job_bogus);
	tcase_add_test(tc, test_snapshot_write_error_keeps_old);
	tcase_add_test(tc, test_snapshot_every);
	tcase_add_test(tc, test_snapshot_bogus);
	tcase_add_test(tc, test_snapshot_round_trip_optim);
	tcase_add_test(tc, test_snapshot_format1);
	tcase_add_test(tc, test_snapshot_scheduler_consistent_cut);
	tcase_add_test(tc, test_snapshot_scheduler_rollback_choice);
	tcase_add_test(tc, test_snapshot_scheduler_rollback_restart);
	tcase_add_test(tc, test_snapshot_cut_ignores_links);
	suite_add_tcase(s, tc);
	return s;
}
