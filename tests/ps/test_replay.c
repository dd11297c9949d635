// test_replay.c — real signed traffic, recorded and replayed byte for
// byte (issue 32). A job with a secret trains with every member's
// requests going through recording proxies (tap.h): the trainers' and
// servers' to the scheduler, the trainers' to each server. Then each
// recorded request is sent again, as it was: to the server that took it,
// to the other servers after every shard moved (one of them is now the
// shard's owner), to the scheduler, to the scheduler restarted on its
// --state-dir, and to a new job's scheduler under the same key. Every
// one is refused UNAUTHENTICATED before any handler (a new job answers a
// recorded Stats, which changes nothing), the map and the members stay
// as they were, and a rank that comes back pulls bit-identical weights.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "obs/obs.h"
#include "ps/ps.h"
#include "harness.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"
#include "scrape.h"
#include "tap.h"

#define KEY "the replay test's job key, 16+ bytes"
#define STEPS 3
#define UNAUTH PSWIRE__STATUS__UNAUTHENTICATED

struct job {
	char                     key[64], dir[64], dir2[64], surl[64];
	struct ps_scheduler_opts so;
	struct ps_scheduler     *sched;
	struct ps_server        *srv[3];
	char                     url[3][64]; // server i's own URL
	struct pt_tap           *stap, *tap[3];
	int                      index[3]; // server i's slot in the map
};

static void
job_open(struct job *j)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;

	snprintf(j->key, sizeof(j->key), "/tmp/ferry-replay-XXXXXX");
	int fd = mkstemp(j->key);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, KEY, strlen(KEY)), (ssize_t) strlen(KEY));
	close(fd);
	snprintf(j->dir, sizeof(j->dir), "/tmp/ferry-replay-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(j->dir));
	so.url         = pt_addr(j->surl, sizeof(j->surl), "tcp");
	so.trainers    = 2;
	so.servers     = 3;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	so.secret_file = j->key;
	so.state_dir   = j->dir;
	j->so          = so;
	j->stap        = pt_tap_open(j->surl);
	PT_OK(ps_scheduler_open(&j->so, &j->sched));
	for (int i = 0; i < 3; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		o.url           = pt_addr(j->url[i], sizeof(j->url[i]), "tcp");
		j->tap[i]       = pt_tap_open(j->url[i]);
		o.advertise_url = pt_tap_url(j->tap[i]);
		o.scheduler_url = pt_tap_url(j->stap);
		o.secret_file   = j->key;
		PT_OK(ps_server_open(&o, &j->srv[i]));
	}
}

// rm_state removes a state dir's files and the dir.
static void
rm_state(const char *dir)
{
	static const char *files[] = { "scheduler.state", "auth.run",
		"auth.floors", "auth.floors.log" };
	char               p[128];
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		unlink(p);
	}
	rmdir(dir);
}

// stat_line copies the line of the scheduler's stats that starts with
// key into out (size n).
static void
stat_line(struct ps_scheduler *s, const char *key, char *out, size_t n)
{
	char text[8192];
	ps_scheduler_stats(s, text, sizeof(text));
	const char *p = strstr(text, key);
	ck_assert_msg(p != NULL, "no %s in %s", key, text);
	size_t len = strcspn(p, "\r\n");
	snprintf(out, n, "%.*s", (int) len, p);
}

// members_and_map writes the scheduler's epoch, servers and trainers
// lines into out: what a replay must not change.
static void
members_and_map(struct ps_scheduler *s, char *out, size_t n)
{
	char e[64], sv[64], tr[64];
	stat_line(s, "epoch:", e, sizeof(e));
	stat_line(s, "servers:", sv, sizeof(sv));
	stat_line(s, "trainers:", tr, sizeof(tr));
	snprintf(out, n, "%s %s %s", e, sv, tr);
}

// replay_all sends every request tap t recorded (method 0: any) to url
// and checks each answer: want, or OK for a Stats when stats_ok. Returns
// how many it sent.
static size_t
replay_all(struct pt_tap *t, uint8_t method, const char *url, int want,
    int stats_ok)
{
	size_t   n = 0;
	nng_msg *m;
	while ((m = pt_tap_get(t, method, n)) != NULL) {
		uint8_t mt  = ((const uint8_t *) nng_msg_body(m))[5];
		int     got = pt_replay(url, m);
		int     exp = stats_ok && mt == PSWIRE__METHOD__STATS
		        ? PSWIRE__STATUS__OK
		        : want;
		ck_assert_msg(got == exp, "%s #%zu to %s: status %d, want %d",
		    psw_method_name(mt), n, url, got, exp);
		nng_msg_free(m);
		n++;
	}
	return n;
}

START_TEST(test_replay_recorded_traffic)
{
	struct job     j    = { 0 };
	struct pt_rank a[2] = { { 0 } };
	char           before[256], after[256];
	uint64_t       run, run2;

	job_open(&j);
	for (int r = 0; r < 2; r++) {
		a[r].url   = pt_tap_url(j.stap);
		a[r].key   = j.key;
		a[r].steps = STEPS;
	}
	pt_ranks_train(a, 2);
	Pswire__Placement *pl = pt_signed_map(j.surl, j.key, &run);
	ck_assert_uint_ne(run, 0);
	for (int i = 0; i < 3; i++) {
		j.index[i] = -1;
		for (size_t k = 0; k < pl->n_servers; k++) {
			if (strcmp(pl->servers[k], pt_tap_url(j.tap[i])) ==
			    0) {
				j.index[i] = (int) k;
			}
		}
		ck_assert_int_ge(j.index[i], 0);
	}
	// What was recorded: every member's Register (a Stats first, to
	// learn the run), the trainers' data calls.
	ck_assert_uint_ge(pt_tap_count(j.stap, PSWIRE__METHOD__REGISTER), 5);
	ck_assert_uint_ge(pt_tap_count(j.stap, PSWIRE__METHOD__STATS), 5);
	size_t data = 0;
	for (int i = 0; i < 3; i++) {
		data += pt_tap_count(j.tap[i], 0);
	}
	ck_assert_uint_gt(data, 0);
	struct obs_registry *sreg[3];
	double               unauth0[3];
	for (int i = 0; i < 3; i++) {
		sreg[i]    = ps_server_metrics(j.srv[i]);
		unauth0[i] = pt_metric(sreg[i],
		    "ferry_rpc_unauthenticated_total");
	}

	// To the server that took it: refused.
	size_t sent[3];
	for (int i = 0; i < 3; i++) {
		sent[i] = replay_all(j.tap[i], 0, j.url[i], UNAUTH, 0);
		ck_assert_double_eq(
		    pt_metric(sreg[i], "ferry_rpc_unauthenticated_total"),
		    unauth0[i] + (double) sent[i]);
	}

	// Every shard moves to the next server; then what was sent to
	// server i goes to the others (one is now the owner of its
	// shards) and to the scheduler: refused.
	uint32_t *assign = calloc(pl->n_shards, sizeof(*assign));
	for (size_t i = 0; i < pl->n_shards; i++) {
		assign[i] = (pl->shards[i]->server + 1) % 3;
	}
	PT_OK(ps_scheduler_replace(j.sched, assign, pl->n_shards));
	free(assign);
	members_and_map(j.sched, before, sizeof(before));
	for (int i = 0; i < 3; i++) {
		for (int k = 1; k < 3; k++) {
			replay_all(j.tap[i], 0, j.url[(i + k) % 3], UNAUTH, 0);
		}
		replay_all(j.tap[i], 0, j.surl, UNAUTH, 0);
	}

	// The scheduler's recorded requests, to the scheduler: refused, and
	// to a server: refused.
	struct obs_registry *reg = ps_scheduler_metrics(j.sched);
	double u0 = pt_metric(reg, "ferry_rpc_unauthenticated_total");
	size_t ns = replay_all(j.stap, 0, j.surl, UNAUTH, 0);
	ck_assert_double_eq(pt_metric(reg, "ferry_rpc_unauthenticated_total"),
	    u0 + (double) ns);
	replay_all(j.stap, PSWIRE__METHOD__REGISTER, j.url[0], UNAUTH, 0);
	members_and_map(j.sched, after, sizeof(after));
	ck_assert_str_eq(after, before);

	// A rank that comes back pulls exactly the weights the job ended
	// with: nothing above reached a handler.
	struct pt_rank back = { .url = j.surl, .key = j.key, .rejoin = 1 };
	pt_ranks_train(&back, 1);
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(
		    memcmp(back.w[t], a[0].w[t], lens[t] * sizeof(float)) == 0,
		    "tensor %d changed", t);
	}
	pswire__placement__free_unpacked(pl, NULL);

	// The scheduler restarts on its --state-dir: everything it took
	// before is refused, while a member's new request is served, in
	// the same run.
	for (int i = 0; i < 3; i++) {
		ps_server_close(j.srv[i]);
		j.srv[i] = NULL;
	}
	ps_scheduler_close(j.sched);
	PT_OK(ps_scheduler_open(&j.so, &j.sched));
	members_and_map(j.sched, before, sizeof(before));
	replay_all(j.stap, 0, j.surl, UNAUTH, 0);
	members_and_map(j.sched, after, sizeof(after));
	ck_assert_str_eq(after, before);
	pl = pt_signed_map(j.surl, j.key, &run2);
	ck_assert_uint_eq(run2, run);
	pswire__placement__free_unpacked(pl, NULL);

	// A new job (a new state dir) under the same key: a new run; every
	// recorded request is refused but the Stats (answered, it changes
	// nothing); no member joins.
	ps_scheduler_close(j.sched);
	snprintf(j.dir2, sizeof(j.dir2), "/tmp/ferry-replay-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(j.dir2));
	j.so.state_dir = j.dir2;
	PT_OK(ps_scheduler_open(&j.so, &j.sched));
	replay_all(j.stap, 0, j.surl, UNAUTH, 1);
	char stats[8192];
	ps_scheduler_stats(j.sched, stats, sizeof(stats));
	ck_assert_msg(strstr(stats, "servers:0/3") != NULL, "%s", stats);
	ck_assert_msg(strstr(stats, "trainers:0/2") != NULL, "%s", stats);

	ps_scheduler_close(j.sched);
	pt_tap_close(j.stap);
	for (int i = 0; i < 3; i++) {
		pt_tap_close(j.tap[i]);
	}
	rm_state(j.dir);
	rm_state(j.dir2);
	unlink(j.key);
}
END_TEST

// A peer without the key sends FLOOD bad requests (signed with another
// key) as fast as it gets answers: every one is refused and counted,
// exactly, per reason and per peer, while the log gets at most one line
// per second for the peer.
#define FLOOD 100000
START_TEST(test_replay_flood_log_bounded)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *sched;
	char                     url[64], key[64] = "/tmp/ferry-replay-XXXXXX";
	char                     log[64]   = "/tmp/ferry-replay-log-XXXXXX";
	char                     other[64] = "/tmp/ferry-replay-other-XXXXXX";
	int                      fd;

	fd = mkstemp(key);
	ck_assert_int_eq(write(fd, KEY, strlen(KEY)), (ssize_t) strlen(KEY));
	close(fd);
	fd = mkstemp(other);
	ck_assert_int_eq(write(fd, "not the job's key, 16+", 22), 22);
	close(fd);
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.secret_file = key;
	PT_OK(ps_scheduler_open(&so, &sched));
	struct obs_registry *reg = ps_scheduler_metrics(sched);

	// The flood's request: a Heartbeat signed with the wrong key.
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	struct psw_auth     *au;
	nng_msg             *m, *copy, *rep;
	nng_socket           s;
	uint8_t             *p;
	char                 err[256];
	h.body_case = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req = &l;
	size_t hl   = pswire__header__get_packed_size(&h);
	PT_OK(
	    psw_auth_open(other, PSW_ROLE_TRAINER, 0, &au, err, sizeof(err)));
	PT_OK(psw_msg_begin(&m, hl, 0, &p));
	PT_OK(psw_msg_finish(m, PSWIRE__METHOD__HEARTBEAT, 0, &h.base, hl, 0));
	PT_OK(psw_auth_sign(au, m, 1, 0, NULL));

	// Its lines go to a file: stderr is the log.
	int logfd = mkstemp(log), saved = dup(2);
	ck_assert_int_ge(logfd, 0);
	fflush(stderr);
	ck_assert_int_ge(dup2(logfd, 2), 0);
	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	uint64_t t0 = fb_clock_ms();
	for (int i = 0; i < FLOOD; i++) {
		ck_assert_int_eq(nng_msg_dup(&copy, m), 0);
		ck_assert_int_eq(nng_sendmsg(s, copy, 0), 0);
		ck_assert_int_eq(nng_recvmsg(s, &rep, 0), 0);
		nng_msg_free(rep);
	}
	uint64_t secs = (fb_clock_ms() - t0) / 1000 + 1;
	nng_close(s);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);

	// Exact counters.
	struct obs_writer w = OBS_WRITER_INIT;
	double            v;
	PT_OK(obs_registry_write(reg, &w));
	ck_assert_int_eq(pt_prom_value(w.buf, "ferry_rpc_refused_total",
	                     "reason=\"bad_signature\"", &v),
	    0);
	ck_assert_double_eq(v, FLOOD);
	ck_assert_int_eq(pt_prom_value(w.buf, "ferry_rpc_refused_peer_total",
	                     "peer=\"127.0.0.1\"", &v),
	    0);
	ck_assert_double_eq(v, FLOOD);
	obs_writer_fini(&w);
	ck_assert_double_eq(pt_metric(reg, "ferry_rpc_unauthenticated_total"),
	    FLOOD);

	// At most one line a second, each saying how many it left out.
	FILE  *f = fdopen(logfd, "r");
	char   line[1024];
	size_t lines = 0, left_out = 0;
	ck_assert_ptr_nonnull(f);
	rewind(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		const char *q = strstr(line,
		    "Heartbeat from 127.0.0.1 refused");
		const char *k = q != NULL ? strstr(q, "(and ") : NULL;
		lines += q != NULL;
		left_out += k != NULL ? strtoull(k + 5, NULL, 10) : 0;
	}
	fclose(f);
	unlink(log);
	ck_assert_uint_ge(lines, 1);
	ck_assert_msg(lines <= secs, "%zu lines in %llu s", lines,
	    (unsigned long long) secs);
	ck_assert_uint_le(lines + left_out, FLOOD);
	nng_msg_free(m);
	psw_auth_close(au);
	ps_scheduler_close(sched);
	unlink(key);
	unlink(other);
}
END_TEST

Suite *
suite_replay(void)
{
	Suite *s  = suite_create("replay");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_replay_recorded_traffic);
	tcase_add_test(tc, test_replay_flood_log_bounded);
	suite_add_tcase(s, tc);
	return s;
}
