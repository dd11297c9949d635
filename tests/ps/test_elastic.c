// test_elastic.c — scheduler membership of elastic jobs (--trainers MIN:MAX,
// ranks given, MAX, flapping) (issue 27): the job starts at MIN, any_rank
// gets the lowest free rank (a freed one again), joins beyond MAX, ranks
// out of range and unsigned or rankless requests are refused, a flapping
// rank slot is refused until its delay passes, and MIN:MAX carry over a
// scheduler restart on --state-dir. Raw rpcs: no trainer behind a rank.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry.pb-c.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

#define KEY "an elastic job's key, more than 16 bytes"

// join registers a trainer of the one-tensor job (test_live.c's) as peer
// `as` (NULL: plain), with any_rank or for `rank`; returns the status and
// leaves the reply's id in *id and its error in err (n bytes).
static int
join(const char *url, const struct pt_peer *as, int any, uint32_t rank,
    uint32_t *id, char *err, size_t n)
{
	Pswire__Header          h = PSWIRE__HEADER__INIT, *rep = NULL;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       j  = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td = PSWIRE__TENSOR_DESC__INIT, *tp = &td;
	static uint64_t         rid;
	td.name        = "w";
	td.len         = 16;
	j.n_tensors    = 1;
	j.tensors      = &tp;
	j.lr           = 0.1;
	j.codec_push   = "none";
	j.codec_pull   = "none";
	rr.role        = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank        = rank;
	rr.any_rank    = any;
	rr.job         = &j;
	h.request_id   = ++rid;
	h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req = &rr;
	int st = pt_rpc(as, url, PSWIRE__METHOD__REGISTER, &h, NULL, 0, &rep);
	ck_assert_int_ge(st, 0);
	*id = UINT32_MAX;
	snprintf(err, n, "%s", rep->error);
	if (st == PSWIRE__STATUS__OK) {
		ck_assert_int_eq(rep->body_case,
		    PSWIRE__HEADER__BODY_REGISTER_REP);
		*id = rep->register_rep->id;
	}
	pswire__header__free_unpacked(rep, NULL);
	return st;
}

// any_ok registers with any_rank, plainly, and returns the rank given.
static uint32_t
any_ok(const char *url)
{
	char     err[512];
	uint32_t id;
	int      st = join(url, NULL, 1, 0, &id, err, sizeof(err));
	ck_assert_msg(st == PSWIRE__STATUS__OK, "any_rank: %d %s", st, err);
	return id;
}

static struct ps_scheduler_opts
opts(char *url, size_t n, int min, int max)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	o.url                      = pt_addr(url, n, "tcp");
	o.trainers                 = max;
	o.min_trainers             = min;
	o.servers                  = 1;
	o.shard_bytes              = 16;
	o.probe_bytes              = 0;
	return o;
}

static double
metric(struct ps_scheduler *s, const char *name)
{
	return pt_metric(ps_scheduler_metrics(s), name);
}

// gone_has says whether map h lists rank r as gone.
static int
gone_has(const Pswire__Header *h, uint32_t r)
{
	for (size_t i = 0; i < h->placement->n_gone_trainers; i++) {
		if (h->placement->gone_trainers[i] == r) {
			return 1;
		}
	}
	return 0;
}

// A 2:3 job starts once 2 trainers registered (not before), with rank 2
// gone; a third joins (a new map), a fourth is refused (job full), rank 3
// is out of range, a live rank is taken; a rank freed by a Leave is the
// one any_rank gives next.
START_TEST(test_elastic_min_max)
{
	char                     url[64], err[512];
	struct ps_scheduler_opts o = opts(url, sizeof(url), 2, 3);
	struct ps_scheduler     *s;
	uint32_t                 id;

	PT_OK(ps_scheduler_open(&o, &s));
	const char *u = ps_scheduler_url(s);
	ck_assert_int_eq(register_server(u, "tcp://127.0.0.1:9"), 0);
	ck_assert_uint_eq(any_ok(u), 0);
	ck_assert(metric(s, "ferry_scheduler_job_running") == 0);
	ck_assert(metric(s, "ferry_scheduler_members_min") == 2);
	ck_assert(metric(s, "ferry_scheduler_members_max") == 3);
	ck_assert_uint_eq(any_ok(u), 1);
	ck_assert(metric(s, "ferry_scheduler_job_running") == 1);
	Pswire__Header *m = map_at_least(u, 1, 3000);
	ck_assert_uint_eq(m->placement->trainers, 3);
	ck_assert(gone_has(m, 2) && !gone_has(m, 0) && !gone_has(m, 1));
	uint64_t e1 = m->placement->epoch;
	pswire__header__free_unpacked(m, NULL);

	// A join after the start publishes a map without rank 2 gone.
	ck_assert_uint_eq(any_ok(u), 2);
	m = map_at_least(u, e1 + 1, 3000);
	ck_assert(!gone_has(m, 2));
	pswire__header__free_unpacked(m, NULL);

	ck_assert_int_eq(join(u, NULL, 1, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "job full: 3 trainers") != NULL, "%s", err);
	ck_assert_int_eq(join(u, NULL, 0, 3, &id, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_msg(strstr(err, "rank 3") && strstr(err, "MAX 3"), "%s",
	    err);

	// Rank 1 leaves: any_rank gives it back; rank 0, live, is taken.
	ck_assert_int_eq(member_call(u, PSWIRE__METHOD__LEAVE,
	                     PSWIRE__ROLE__ROLE_TRAINER, 1),
	    0);
	ck_assert(metric(s, "ferry_scheduler_leaves_total") == 1);
	ck_assert_int_eq(join(u, NULL, 0, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__ALREADY_EXISTS);
	ck_assert_msg(strstr(err, "rank 0") != NULL, "%s", err);
	ck_assert_uint_eq(any_ok(u), 1);
	ck_assert(metric(s, "ferry_scheduler_joins_total") == 4);
	ps_scheduler_close(s);
}
END_TEST

// With a job key an unsigned join is refused; one signed as a trainer
// without a rank gets a rank, and that signer may do nothing else (a
// Heartbeat, a Leave); a server may not join as a trainer.
START_TEST(test_elastic_auth)
{
	char                     url[64], key[64], err[512];
	struct ps_scheduler_opts o = opts(url, sizeof(url), 1, 2);
	struct ps_scheduler     *s;
	uint32_t                 id;

	snprintf(key, sizeof(key), "/tmp/ferry-elastic-XXXXXX");
	int fd = mkstemp(key);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, KEY, strlen(KEY)), (ssize_t) strlen(KEY));
	close(fd);
	o.secret_file = key;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *u = ps_scheduler_url(s);

	ck_assert_int_ne(join(u, NULL, 1, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	struct pt_peer rankless = { key,
		{ PSW_ROLE_TRAINER, PSW_ID_UNASSIGNED }, NULL, NULL, { 0, 0 },
		0 };
	ck_assert_int_eq(join(u, &rankless, 1, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	ck_assert_uint_eq(id, 0);
	// Rankless, it may not register a rank, nor act for one.
	ck_assert_int_eq(join(u, &rankless, 0, 1, &id, err, sizeof(err)),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	l.role                 = PSWIRE__ROLE__ROLE_TRAINER;
	l.id                   = PSW_ID_UNASSIGNED;
	h.body_case            = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req            = &l;
	ck_assert_int_eq(
	    pt_rpc(&rankless, u, PSWIRE__METHOD__HEARTBEAT, &h, NULL, 0, NULL),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	l.id = 0;
	ck_assert_int_eq(
	    pt_rpc(&rankless, u, PSWIRE__METHOD__LEAVE, &h, NULL, 0, NULL),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	// Signed as trainer-1: any_rank gives 1.
	struct pt_peer t1 = { key, { PSW_ROLE_TRAINER, 1 }, NULL, NULL,
		{ 0, 0 }, 0 };
	ck_assert_int_eq(join(u, &t1, 1, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	ck_assert_uint_eq(id, 1);
	struct pt_peer srv = { key, { PSW_ROLE_SERVER, 0 }, NULL, NULL,
		{ 0, 0 }, 0 };
	ck_assert_int_eq(join(u, &srv, 1, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ps_scheduler_close(s);
	unlink(key);
}
END_TEST

// die registers rank 0, heartbeats it (tracked) and waits until the
// scheduler declares it dead (the heartbeat's connection closed).
static void
die(struct ps_scheduler *s, const char *u, double deaths)
{
	char     err[512];
	uint32_t id;
	ck_assert_int_eq(join(u, NULL, 0, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(heartbeat(u, PSWIRE__ROLE__ROLE_TRAINER, 0), 0);
	for (int i = 0;
	     i < 500 && metric(s, "ferry_scheduler_deaths_total") < deaths;
	     i++) {
		fb_sleep_us(10000);
	}
	ck_assert(metric(s, "ferry_scheduler_deaths_total") == deaths);
}

// A rank slot whose member died twice (flap_deaths 2) is refused with
// UNAVAILABLE naming the delay; once it passed the rank registers again.
START_TEST(test_elastic_flapping)
{
	char                     url[64], err[512];
	struct ps_scheduler_opts o = opts(url, sizeof(url), 1, 2);
	struct ps_scheduler     *s;
	uint32_t                 id;

	o.dead_after_ms  = 2000;
	o.heartbeat_ms   = 50;
	o.flap_deaths    = 2;
	o.flap_base_ms   = 400;
	o.flap_window_ms = 60000;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *u = ps_scheduler_url(s);
	die(s, u, 1);
	die(s, u, 2);
	uint64_t t0 = fb_clock_ms();
	ck_assert_int_eq(join(u, NULL, 0, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__UNAVAILABLE);
	ck_assert_msg(strstr(err, "rank 0 flapping") != NULL &&
	        strstr(err, "retry in ") != NULL,
	    "%s", err);
	// any_rank lands on the same (lowest free) slot: refused too.
	ck_assert_int_eq(join(u, NULL, 1, 0, &id, err, sizeof(err)),
	    PSWIRE__STATUS__UNAVAILABLE);
	ck_assert(metric(s, "ferry_scheduler_flap_refusals_total") == 2);
	// Rank 1 never died: it registers.
	ck_assert_int_eq(join(u, NULL, 0, 1, &id, err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	int st;
	while ((st = join(u, NULL, 0, 0, &id, err, sizeof(err))) ==
	        PSWIRE__STATUS__UNAVAILABLE &&
	    fb_clock_ms() - t0 < 5000) {
		fb_sleep_us(20000);
	}
	ck_assert_msg(st == PSWIRE__STATUS__OK, "%d %s", st, err);
	ck_assert_uint_le(fb_clock_ms() - t0, 5000);
	ps_scheduler_close(s);
}
END_TEST

// MIN:MAX is in the state file: a scheduler restarted with another MIN
// refuses the file; with the same, the job carries on elastic.
START_TEST(test_elastic_state)
{
	char dir[64] = "/tmp/ferry-elastic-state-XXXXXX", url[64], cmd[160];
	struct ps_scheduler_opts o = opts(url, sizeof(url), 1, 3);
	struct ps_scheduler     *s;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	o.state_dir = dir;
	o.url       = "tcp://127.0.0.1:0";
	PT_OK(ps_scheduler_open(&o, &s));
	ck_assert_int_eq(
	    register_server(ps_scheduler_url(s), "tcp://127.0.0.1:9"), 0);
	ck_assert_uint_eq(any_ok(ps_scheduler_url(s)), 0);
	ps_scheduler_close(s);
	o.min_trainers = 2;
	PT_FAIL(ps_scheduler_open(&o, &s), FB_EPROTO);
	o.min_trainers = 1;
	PT_OK(ps_scheduler_open(&o, &s));
	ck_assert(metric(s, "ferry_scheduler_job_running") == 1);
	ck_assert(metric(s, "ferry_scheduler_members_min") == 1);
	ck_assert_uint_eq(any_ok(ps_scheduler_url(s)), 1);
	ps_scheduler_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *
suite_elastic(void)
{
	Suite *s  = suite_create("elastic");
	TCase *tc = tcase_create("membership");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_elastic_min_max);
	tcase_add_test(tc, test_elastic_auth);
	tcase_add_test(tc, test_elastic_flapping);
	tcase_add_test(tc, test_elastic_state);
	suite_add_tcase(s, tc);
	return s;
}
