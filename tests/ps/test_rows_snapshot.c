// test_rows_snapshot.c — table shards in snapshots, with a scheduler, one
// server (two table shards of an Adagrad table) and one libferry trainer
// in this process: a snapshot taken while a thread pushes rows (async)
// restores into a new job with the same keys, rows and optimizer state as
// a reference that applied exactly the pushes before the snapshot's
// version, both table shards at that one version; a sync job's periodic
// snapshot at V restores rows equal to a reference at V; a running
// server's rollback (two servers, one restarted from its snapshots) puts
// its table shards back at the job's version; a corrupted rows image and
// a table of another dim are refused with nothing loaded; a file without
// table records (format 2) still restores.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fb/fb.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"
#include "tbl/tbl.h"
#include "test_hooks.h"

#define DIM 4
#define NS 4    // samples per push: scale 1/4, exact
#define POOL 50 // keys per table shard the batches draw from
#define HALF 4  // keys per batch in each table shard
#define PUSHES 3000
#define TTAG 0xffffffffu

// keys routing to table shard 0 and 1 (range i of 2 is table shard i).
static uint64_t pool[2][POOL];

static void
pool_fill(void)
{
	int n[2] = { 0, 0 };
	for (uint64_t k = 1; n[0] < POOL || n[1] < POOL; k++) {
		uint32_t s = tbl_key_shard(k, 2);
		if (n[s] < POOL) {
			pool[s][n[s]++] = k;
		}
	}
}

// batch fills push i's keys (HALF in each table shard, distinct) and
// dyadic gradients.
static void
batch(int i, uint64_t *keys, float *g)
{
	for (int s = 0; s < 2; s++) {
		for (int j = 0; j < HALF; j++) {
			keys[s * HALF + j] =
			    pool[s][(i * 3 + j * 7 + s) % POOL];
		}
	}
	for (int j = 0; j < 2 * HALF; j++) {
		for (int d = 0; d < DIM; d++) {
			g[j * DIM + d] = (float) ((i * 7 + j * 3 + d) % 9 -
			                     4) /
			    16.0f;
		}
	}
}

struct tjob {
	struct ps_scheduler *sched;
	struct ps_server    *srv;
	ferry_client        *c;
	float                w[8];
};

// tjob_open starts a job on dir (mode, --snapshot-every, restore) whose
// trainer declares "w" (8 floats) and the table "emb" (dim, Adagrad, 2
// shards), offers its weights and pulls. Returns the trainer's result.
static int
tjob_open(struct tjob *j, const char *dir, int mode, uint64_t every,
    int restore, uint32_t dim, uint32_t timeout_ms)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ferry_opts        fo = FERRY_OPTS_INIT;
	struct ferry_tensor_spec d  = { .name = "w", .len = 8 };
	struct ferry_table_spec  tb = { .name = "emb",
		 .dim                         = dim,
		 .init                        = FERRY_ROW_UNIFORM,
		 .init_scale                  = 0.1f,
		 .optimizer                   = "adagrad",
		 .lr                          = 0.1,
		 .shards                      = 2 };
	char                     url[64], surl[64];
	float                   *wp[1] = { j->w };
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
	fo.mode          = mode;
	fo.lr            = 0.1;
	fo.timeout_ms    = timeout_ms;
	ck_assert_int_eq(ferry_client_open(&fo, &j->c), 0);
	for (int i = 0; i < 8; i++) {
		j->w[i] = 0.25f * (float) i;
	}
	if ((rv = ferry_client_declare_tables(j->c, &d, 1, &tb, 1)) != 0 ||
	    (rv = ferry_client_init_weights(j->c,
	         (const float *const *) wp)) != 0) {
		return rv;
	}
	return ferry_client_pull(j->c, wp);
}

static void
tjob_close(struct tjob *j)
{
	ferry_client_close(j->c);
	ps_server_close(j->srv);
	ps_scheduler_close(j->sched);
}

// push_one pushes batch i and pulls its rows; with dense, a dense
// push-pull first (sync: the dense shard reaches each version before the
// table shards do).
static int
push_one(struct tjob *j, int i, int dense)
{
	uint64_t     keys[2 * HALF];
	float        g[2 * HALF * DIM], out[2 * HALF * DIM], gd[8] = { 0 };
	float       *wp[1]     = { j->w };
	const float *gp[1]     = { gd };
	struct ferry_rows push = { .table = 0,
		.keys                     = keys,
		.n                        = 2 * HALF,
		.grads                    = g };
	struct ferry_rows pull = { .table = 0,
		.keys                     = keys,
		.n                        = 2 * HALF,
		.rows                     = out };
	int               rv;
	batch(i, keys, g);
	if (dense && (rv = ferry_client_push_pull(j->c, gp, NS, wp)) != 0) {
		return rv;
	}
	return ferry_client_rows_push_pull(j->c, &push, 1, NS, &pull, 1);
}

static uint64_t
stat_u64(struct ps_server *s, const char *key)
{
	char        text[8192], pat[64];
	const char *p;
	ps_server_stats(s, text, sizeof(text));
	snprintf(pat, sizeof(pat), "\n%s:", key);
	p = strstr(text, pat);
	ck_assert_msg(p != NULL, "no %s in stats", key);
	return strtoull(p + strlen(pat), NULL, 10);
}

// ---- a table's rows, sorted by key -------------------------------------------

struct rowset {
	size_t    n, cap, w; // rows, room, floats per row (row + state)
	uint32_t  dim;
	uint64_t *keys;
	float    *vals;
};

static void
collect(void *arg, uint64_t key, const float *row, const float *state)
{
	struct rowset *r = arg;
	if (r->n == r->cap) {
		r->cap  = r->cap ? 2 * r->cap : 64;
		r->keys = realloc(r->keys, r->cap * sizeof(*r->keys));
		r->vals = realloc(r->vals, r->cap * r->w * sizeof(float));
	}
	r->keys[r->n] = key;
	memcpy(r->vals + r->n * r->w, row, r->dim * sizeof(float));
	memcpy(r->vals + r->n * r->w + r->dim, state,
	    (r->w - r->dim) * sizeof(float));
	r->n++;
}

// rows_sort sorts r by key (insertion sort: a few hundred rows).
static void
rows_sort(struct rowset *r)
{
	float *tmp = malloc(r->w * sizeof(float));
	for (size_t i = 1; i < r->n; i++) {
		for (size_t k = i; k > 0 && r->keys[k - 1] > r->keys[k]; k--) {
			uint64_t t     = r->keys[k];
			r->keys[k]     = r->keys[k - 1];
			r->keys[k - 1] = t;
			memcpy(tmp, r->vals + k * r->w, r->w * sizeof(float));
			memcpy(r->vals + k * r->w, r->vals + (k - 1) * r->w,
			    r->w * sizeof(float));
			memcpy(r->vals + (k - 1) * r->w, tmp,
			    r->w * sizeof(float));
		}
	}
	free(tmp);
}

static void
rows_init(struct rowset *r, const struct tbl_conf *conf)
{
	memset(r, 0, sizeof(*r));
	r->dim = conf->dim;
	r->w   = conf->dim + tbl_state_floats(conf->optim, conf->dim);
}

static void
rows_free(struct rowset *r)
{
	free(r->keys);
	free(r->vals);
}

// check_shard compares table shard id of srv with a reference store
// that applied pushes 0..v-1 (the keys of each in that shard), v being
// the shard's version there; returns v.
static uint64_t
check_shard(struct ps_server *srv, uint32_t id)
{
	struct tbl_conf conf;
	struct rowset   got, want;
	uint64_t        v;

	// The conf first (the rows come with the second call).
	v = ps_server_test_table_each(srv, id, NULL, NULL, &conf);
	ck_assert_uint_ne(v, UINT64_MAX);
	rows_init(&got, &conf);
	ck_assert_uint_eq(
	    ps_server_test_table_each(srv, id, collect, &got, NULL), v);
	struct tbl *ref = tbl_open(&conf);
	ck_assert_ptr_nonnull(ref);
	for (uint64_t i = 0; i < v; i++) {
		uint64_t keys[2 * HALF];
		float    g[2 * HALF * DIM];
		batch((int) i, keys, g);
		ck_assert_int_eq(tbl_apply(ref, keys + id * HALF, HALF,
		                     g + id * HALF * DIM, NULL,
		                     1.0f / (float) NS, 0.1f, i + 1),
		    0);
	}
	rows_init(&want, &conf);
	tbl_each(ref, collect, &want);
	tbl_close(ref);
	rows_sort(&got);
	rows_sort(&want);
	ck_assert_uint_gt(want.n, 0);
	ck_assert_uint_eq(got.n, want.n);
	ck_assert_msg(memcmp(got.keys, want.keys, got.n * 8) == 0,
	    "table shard %u: another key set than the reference's at "
	    "version %llu",
	    id, (unsigned long long) v);
	ck_assert_msg(
	    memcmp(got.vals, want.vals, got.n * got.w * sizeof(float)) == 0,
	    "table shard %u: rows or optimizer state differ from the "
	    "reference's at version %llu",
	    id, (unsigned long long) v);
	rows_free(&got);
	rows_free(&want);
	return v;
}

static void
tmpdir(char *buf, size_t n)
{
	snprintf(buf, n, "/tmp/ferry-tsnap-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(buf));
}

static void
rmdir_all(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

// ---- async: a snapshot under load ---------------------------------------------

struct pusher {
	struct tjob *j;
	atomic_int   done; // pushes answered
	int          rv;
	char         err[256];
};

static void *
pusher_main(void *arg)
{
	struct pusher *p = arg;
	for (int i = 0; i < PUSHES; i++) {
		if ((p->rv = push_one(p->j, i, 0)) != 0) {
			snprintf(p->err, sizeof(p->err), "push %d: %s", i,
			    ferry_client_last_error(p->j->c));
			break;
		}
		atomic_store(&p->done, i + 1);
	}
	return NULL;
}

// test_rows_snapshot_async_load: while a thread pushes rows (async), a
// snapshot "now"; a new job restored from it holds, in both table shards,
// the rows, keys and Adagrad accumulators of a reference that applied
// exactly the pushes before the snapshot, both shards at one version.
// Fails without table records in snapshots (the restored table is empty),
// or with rows and state taken at different moments.
START_TEST(test_rows_snapshot_async_load)
{
	struct tjob   a, b;
	struct pusher p = { 0 };
	pthread_t     th;
	char          dir[64];

	pool_fill();
	tmpdir(dir, sizeof(dir));
	ck_assert_int_eq(tjob_open(&a, dir, FERRY_MODE_ASYNC, 0,
	                     PS_RESTORE_AUTO, DIM, 20000),
	    0);
	p.j = &a;
	pthread_create(&th, NULL, pusher_main, &p);
	while (atomic_load(&p.done) < 100 && p.rv == 0) {
		fb_sleep_us(1000); // waits for the pusher's progress
	}
	PT_OK(ps_server_snapshot(a.srv, 0, 20000, NULL));
	int at_snap = atomic_load(&p.done);
	pthread_join(th, NULL);
	ck_assert_msg(p.rv == 0, "%s", p.err);
	tjob_close(&a);

	ck_assert_int_eq(tjob_open(&b, dir, FERRY_MODE_ASYNC, 0,
	                     PS_RESTORE_YES, DIM, 20000),
	    0);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_table_shards"), 2);
	uint64_t v0 = check_shard(b.srv, 0), v1 = check_shard(b.srv, 1);
	// One moment: every push updates both shards under one lock.
	ck_assert_uint_eq(v0, v1);
	// Under load: taken after push 100 and before the last.
	ck_assert_uint_ge(v0, 100);
	ck_assert_msg(v0 < PUSHES,
	    "snapshot at %llu of %d pushes (%d at "
	    "its return): not under load",
	    (unsigned long long) v0, PUSHES, at_snap);
	tjob_close(&b);
	rmdir_all(dir);
}
END_TEST

// ---- sync: a periodic snapshot at V ---------------------------------------------

// test_rows_snapshot_sync_version: a sync job with --snapshot-every 3
// runs 5 steps, each a dense push-pull and then a rows push-pull (so the
// dense shard reaches 3 while the table shards are at 2); the snapshot of
// version 3 restores both table shards at version 3 with the rows and
// state of a reference at 3. Fails if the table records are taken at
// another version than the dense shards', or never (no file written).
START_TEST(test_rows_snapshot_sync_version)
{
	struct tjob a, b;
	char        dir[64];

	pool_fill();
	tmpdir(dir, sizeof(dir));
	ck_assert_int_eq(tjob_open(&a, dir, FERRY_MODE_SYNC, 3,
	                     PS_RESTORE_AUTO, DIM, 20000),
	    0);
	for (int k = 0; k < 5; k++) {
		ck_assert_msg(push_one(&a, k, 1) == 0, "step %d: %s", k,
		    ferry_client_last_error(a.c));
	}
	for (int k = 0; k < 5000 && stat_u64(a.srv, "snapshots_written") < 1;
	     k++) {
		fb_sleep_us(2000); // waits for the writer
	}
	ck_assert_msg(stat_u64(a.srv, "snapshots_written") == 1,
	    "the snapshot of version 3 was not written");
	ck_assert_uint_eq(stat_u64(a.srv, "snapshot_version"), 3);
	tjob_close(&a);

	ck_assert_int_eq(
	    tjob_open(&b, dir, FERRY_MODE_SYNC, 0, PS_RESTORE_YES, DIM, 20000),
	    0);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_version"), 3);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_table_shards"), 2);
	ck_assert_uint_eq(check_shard(b.srv, 0), 3);
	ck_assert_uint_eq(check_shard(b.srv, 1), 3);
	tjob_close(&b);
	rmdir_all(dir);
}
END_TEST

// ---- rollback of a running server ------------------------------------------------

// test_rows_snapshot_rollback: two servers and a sync trainer run 5
// steps, with a job snapshot (the scheduler picks the version; one server
// holds only a table shard) after steps 2 and 4; a server that holds no
// table shard 0 is closed and restarted on its URL from its snapshots, so
// the job rolls back to version 4: the running server's table shards go
// back to their rows and state at 4 (a reference at 4), and so do the
// restarted one's. Fails if a rollback leaves the table shards at 5, or
// if the table-only server does not report its version to the scheduler
// (the job snapshot then waits for a version no step makes).
START_TEST(test_rows_snapshot_rollback)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ferry_opts        fo = FERRY_OPTS_INIT;
	struct ferry_tensor_spec d  = { .name = "w", .len = 8 };
	struct ferry_table_spec  tb = { .name = "emb",
		 .dim                         = DIM,
		 .init                        = FERRY_ROW_UNIFORM,
		 .init_scale                  = 0.1f,
		 .optimizer                   = "adagrad",
		 .lr                          = 0.1,
		 .shards                      = 2 };
	struct tjob              j;
	struct ps_server        *srv[2];
	char                     url[64], surl[2][64], dir[64], why[128];
	float                   *wp[1] = { j.w };

	pool_fill();
	tmpdir(dir, sizeof(dir));
	memset(&j, 0, sizeof(j));
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 1;
	so.servers     = 2;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &j.sched));
	o.scheduler_url = ps_scheduler_url(j.sched);
	o.snapshot_dir  = dir;
	o.heartbeat_ms  = 60;
	for (int m = 0; m < 2; m++) {
		o.url = pt_addr(surl[m], sizeof(surl[m]), "tcp");
		PT_OK(ps_server_open(&o, &srv[m]));
	}
	fo.scheduler_url = ps_scheduler_url(j.sched);
	fo.lr            = 0.1;
	fo.timeout_ms    = 20000;
	ck_assert_int_eq(ferry_client_open(&fo, &j.c), 0);
	ck_assert_int_eq(ferry_client_declare_tables(j.c, &d, 1, &tb, 1), 0);
	ck_assert_int_eq(
	    ferry_client_init_weights(j.c, (const float *const *) wp), 0);
	ck_assert_int_eq(ferry_client_pull(j.c, wp), 0);
	// Job snapshots (the scheduler picks the version both servers hold,
	// one of them holding only a table shard) after steps 2 and 4.
	for (int k = 0; k < 5; k++) {
		struct ps_job_snapshot js;
		char                   err[256];
		ck_assert_msg(push_one(&j, k, 1) == 0, "step %d: %s", k,
		    ferry_client_last_error(j.c));
		if (k == 1 || k == 3) {
			ck_assert_msg(
			    ps_job_snapshot(ps_scheduler_url(j.sched), NULL, 0,
			        5000, &js, err, sizeof(err)) == FB_OK,
			    "job snapshot after step %d: %s", k + 1, err);
			ck_assert_uint_eq(js.version, (uint64_t) k + 1);
		}
	}
	// The victim: a server not holding table shard 0.
	int keep   = ps_server_test_table_each(srv[0], 0, NULL, NULL, NULL) !=
                UINT64_MAX
	      ? 0
	      : 1;
	int victim = 1 - keep;
	ck_assert_uint_eq(
	    ps_server_test_table_each(srv[keep], 0, NULL, NULL, NULL), 5);
	ps_server_close(srv[victim]);
	o.url = surl[victim];
	PT_OK(ps_server_open(&o, &srv[victim]));
	for (int k = 0; k < 5000 && stat_u64(srv[keep], "rollbacks") < 1;
	     k++) {
		fb_sleep_us(2000); // waits for the rollback's map
	}
	ck_assert_uint_eq(stat_u64(srv[keep], "rollbacks"), 1);
	ck_assert_uint_eq(check_shard(srv[keep], 0), 4);
	for (uint32_t id = 1; id < 2; id++) {
		int m = ps_server_test_table_each(srv[keep], id, NULL, NULL,
		            NULL) != UINT64_MAX
		    ? keep
		    : victim;
		for (int k = 0;
		     k < 5000 && !ps_server_ready(srv[m], why, sizeof(why));
		     k++) {
			fb_sleep_us(2000); // waits for the restart's map
		}
		ck_assert_uint_eq(check_shard(srv[m], id), 4);
	}
	ferry_client_close(j.c);
	ps_server_close(srv[0]);
	ps_server_close(srv[1]);
	ps_scheduler_close(j.sched);
	rmdir_all(dir);
}
END_TEST

// ---- bad and old files -----------------------------------------------------------

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

// rec_len returns the length of the record at p; *table says whether it
// is a table shard's (then *image, *ilen: its rows image).
static size_t
rec_len(const uint8_t *p, int *table, size_t *image, size_t *ilen)
{
	*table = fb_get_u32le(p) == TTAG;
	if (*table) {
		size_t clocks = (size_t) fb_get_u32le(p + 28) * 8;
		*ilen         = fb_get_u64le(p + 56);
		*image        = 64 + clocks;
		return 64 + clocks + *ilen;
	}
	return 32 + fb_get_u32le(p + 4) + fb_get_u64le(p + 24);
}

// snap_small writes a snapshot of 10 async pushes into dir.
static void
snap_small(const char *dir)
{
	struct tjob a;
	pool_fill();
	ck_assert_int_eq(tjob_open(&a, dir, FERRY_MODE_ASYNC, 0,
	                     PS_RESTORE_AUTO, DIM, 20000),
	    0);
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(push_one(&a, i, 0), 0);
	}
	PT_OK(ps_server_snapshot(a.srv, 0, 20000, NULL));
	tjob_close(&a);
}

// test_rows_snapshot_bogus: a file whose table record's rows image has
// one bit flipped (the file's CRC made good again, so only the image's
// own check finds it) is refused whole: the server does not serve; so is
// a sound file restored into a job whose table has another dim, and one
// holding a table shard's record twice. Fails if any is loaded.
START_TEST(test_rows_snapshot_bogus)
{
	struct tjob b;
	char        dir[64], path[128], msg[512];
	uint8_t    *bytes;
	size_t      n, off = 32, image = 0, ilen = 0;
	int         table = 0, found = 0;

	tmpdir(dir, sizeof(dir));
	snap_small(dir);
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	bytes = read_all(path, &n);
	for (uint32_t r = 0; r < fb_get_u32le(bytes + 24) && !found; r++) {
		size_t len = rec_len(bytes + off, &table, &image, &ilen);
		if (table) {
			found = 1;
			bytes[off + image + ilen / 2] ^= 0x04;
		}
		off += len;
	}
	ck_assert_msg(found, "no table record in %s", path);
	fb_put_u32le(bytes + n - 4, fb_crc32(0, bytes, n - 4));
	write_all(path, bytes, n);
	PT_OK(ps_snapshot_check(path, msg, sizeof(msg)));
	ck_assert_int_ne(
	    tjob_open(&b, dir, FERRY_MODE_ASYNC, 0, PS_RESTORE_YES, DIM, 1500),
	    0);
	ck_assert_int_eq(ps_server_ready(b.srv, msg, sizeof(msg)), 0);
	tjob_close(&b);
	free(bytes);

	rmdir_all(dir);
	tmpdir(dir, sizeof(dir));
	snap_small(dir);
	ck_assert_int_ne(tjob_open(&b, dir, FERRY_MODE_ASYNC, 0,
	                     PS_RESTORE_YES, 2 * DIM, 1500),
	    0);
	ck_assert_int_eq(ps_server_ready(b.srv, msg, sizeof(msg)), 0);
	tjob_close(&b);

	// A table shard's record twice (the second appended).
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	bytes = read_all(path, &n);
	off   = 32;
	found = 0;
	for (uint32_t r = 0; r < fb_get_u32le(bytes + 24) && !found; r++) {
		size_t len = rec_len(bytes + off, &table, &image, &ilen);
		if (table) {
			uint8_t *dup = malloc(n + len);
			found        = 1;
			memcpy(dup, bytes, n - 4);
			memcpy(dup + n - 4, bytes + off, len);
			fb_put_u32le(dup + 24, fb_get_u32le(bytes + 24) + 1);
			fb_put_u32le(dup + n - 4 + len,
			    fb_crc32(0, dup, n - 4 + len));
			write_all(path, dup, n + len);
			free(dup);
		}
		off += len;
	}
	free(bytes);
	ck_assert(found);
	PT_OK(ps_snapshot_check(path, msg, sizeof(msg)));
	ck_assert_int_ne(
	    tjob_open(&b, dir, FERRY_MODE_ASYNC, 0, PS_RESTORE_YES, DIM, 1500),
	    0);
	ck_assert_int_eq(ps_server_ready(b.srv, msg, sizeof(msg)), 0);
	tjob_close(&b);
	rmdir_all(dir);
}
END_TEST

// test_rows_snapshot_format2: the same file with its table records cut
// out, as format 2 wrote it, still restores: the dense shards come back,
// the table shards start empty. Fails if old files stop loading into a
// job with tables.
START_TEST(test_rows_snapshot_format2)
{
	struct tjob b;
	char        dir[64], path[128], msg[512];
	uint8_t    *bytes, *old;
	size_t      n, off = 32, m = 32, image, ilen;
	uint32_t    dense = 0;
	int         table;

	tmpdir(dir, sizeof(dir));
	snap_small(dir);
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	bytes = read_all(path, &n);
	old   = malloc(n);
	memcpy(old, bytes, 32);
	for (uint32_t r = 0; r < fb_get_u32le(bytes + 24); r++) {
		size_t len = rec_len(bytes + off, &table, &image, &ilen);
		if (!table) {
			memcpy(old + m, bytes + off, len);
			m += len;
			dense++;
		}
		off += len;
	}
	ck_assert_uint_lt(dense, fb_get_u32le(bytes + 24));
	fb_put_u32le(old + 8, 2);
	fb_put_u32le(old + 24, dense);
	fb_put_u32le(old + m, fb_crc32(0, old, m));
	write_all(path, old, m + 4);
	free(bytes);
	free(old);
	PT_OK(ps_snapshot_check(path, msg, sizeof(msg)));

	ck_assert_int_eq(tjob_open(&b, dir, FERRY_MODE_ASYNC, 0,
	                     PS_RESTORE_YES, DIM, 20000),
	    0);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_shards"), dense);
	ck_assert_uint_eq(stat_u64(b.srv, "restore_table_shards"), 0);
	for (uint32_t id = 0; id < 2; id++) {
		struct tbl_conf conf;
		ck_assert_uint_eq(
		    ps_server_test_table_each(b.srv, id, NULL, NULL, &conf),
		    0);
	}
	tjob_close(&b);
	rmdir_all(dir);
}
END_TEST

Suite *
suite_rows_snapshot(void)
{
	Suite *s  = suite_create("rows_snapshot");
	TCase *tc = tcase_create("rows_snapshot");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_rows_snapshot_async_load);
	tcase_add_test(tc, test_rows_snapshot_sync_version);
	tcase_add_test(tc, test_rows_snapshot_rollback);
	tcase_add_test(tc, test_rows_snapshot_bogus);
	tcase_add_test(tc, test_rows_snapshot_format2);
	suite_add_tcase(s, tc);
	return s;
}
