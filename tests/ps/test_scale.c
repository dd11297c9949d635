// test_scale.c — how a server's cost grows with its trainers (issue 30),
// each against a live in-process sync job: a round of T push-pulls
// examines O(T) parked calls, not O(T^2) (the server's park_checks stat),
// a server makes room for more trainers than its --contexts fit, and a
// push-pull answered before its round closes still counts in it exactly.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

// A job of one 16-float tensor (one 64-byte shard) on one server.
#define LEN 16
#define MAX_T 32

// One sync trainer of the job: opens, declares, offers (rank 0), pulls,
// then push-pulls `steps` times.
struct trainer {
	const char   *url;
	int           rank, steps, rv;
	float         w[LEN];
	char          err[256];
	ferry_client *c;
};

static void *
trainer_main(void *arg)
{
	struct trainer          *t = arg;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d = { "a", LEN };
	float                    g[LEN];
	const float             *gp[1] = { g };
	float                   *wp[1] = { t->w };
	o.scheduler_url                = t->url;
	o.rank                         = t->rank;
	o.lr                           = 0.5;
	o.mode                         = FERRY_MODE_SYNC;
	o.timeout_ms                   = 20000;
	for (int i = 0; i < LEN; i++) {
		t->w[i] = (float) i;
		g[i]    = 0.25f * (float) (t->rank + 1);
	}
	if ((t->rv = ferry_client_open(&o, &t->c)) != 0 ||
	    (t->rv = ferry_client_declare(t->c, &d, 1)) != 0 ||
	    (t->rank == 0 &&
	        (t->rv = ferry_client_init_weights(t->c,
	             (const float *const *) wp)) != 0) ||
	    (t->rv = ferry_client_pull(t->c, wp)) != 0) {
		goto out;
	}
	for (int k = 0; k < t->steps; k++) {
		if ((t->rv = ferry_client_push_pull(t->c, gp, 1, wp)) != 0) {
			break;
		}
	}
out:
	if (t->rv != 0) {
		snprintf(t->err, sizeof(t->err), "%s",
		    t->c ? ferry_client_last_error(t->c) : "open");
	}
	return NULL;
}

// run_trainers runs n trainers of `steps` push-pulls each on job j and
// checks that every one succeeded and all hold the same weights.
static void
run_trainers(struct one_server *j, struct trainer *t, int n, int steps)
{
	pthread_t th[MAX_T];
	for (int r = 0; r < n; r++) {
		memset(&t[r], 0, sizeof(t[r]));
		t[r].url   = ps_scheduler_url(j->sched);
		t[r].rank  = r;
		t[r].steps = steps;
		ck_assert_int_eq(
		    pthread_create(&th[r], NULL, trainer_main, &t[r]), 0);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
	}
	for (int r = 0; r < n; r++) {
		ck_assert_msg(t[r].rv == 0, "rank %d: %s", r, t[r].err);
		ck_assert_msg(memcmp(t[r].w, t[0].w, sizeof(t[0].w)) == 0,
		    "rank %d's weights differ from rank 0's", r);
	}
}

// A sync round of T push-pulls: each is examined once when it parks and
// once by the wake of the push that closes the round, so the parked calls
// examined grow as T per round (about 2T). Before issue 30 every push
// woke every parked call (and parking one woke them all again): about
// T^2 per round, 256 at T = 16.
START_TEST(test_scale_park_checks_linear_in_trainers)
{
	enum { T = 16, STEPS = 20 };
	struct one_server j;
	struct trainer    t[T];
	one_server_open(&j, T, 0, 0);
	run_trainers(&j, t, T, STEPS);
	unsigned long long checks = server_stat(j.srv, "park_checks");
	unsigned long long rounds = server_stat(j.srv, "updates_applied");
	ck_assert_uint_eq(rounds, STEPS);
	// 3T per round, and as much again for the first pulls.
	ck_assert_msg(checks <= 3ull * T * (STEPS + 1),
	    "%llu parked calls examined for %llu rounds of %d trainers "
	    "(at most %d expected)",
	    checks, rounds, T, 3 * T * (STEPS + 1));
	for (int r = 0; r < T; r++) {
		ferry_client_close(t[r].c);
	}
	one_server_close(&j);
}
END_TEST

// A sync job with more trainers than half the server's --contexts: each
// trainer's push-pull parks a context until its round closes, and all of
// them on one host may hold three quarters of the contexts (12 of 16
// here), so without room made for them the rounds of 16 trainers stall
// or are refused. The server grows its contexts when the map tells it the
// trainers.
START_TEST(test_scale_contexts_grow_for_trainers)
{
	enum { T = 16, STEPS = 5 };
	struct one_server j;
	struct trainer    t[T];
	one_server_open(&j, T, 0, 16);
	run_trainers(&j, t, T, STEPS);
	ck_assert_uint_eq(server_stat(j.srv, "updates_applied"), STEPS);
	ck_assert_uint_ge(server_stat(j.srv, "contexts"), T + 64);
	for (int r = 0; r < T; r++) {
		ferry_client_close(t[r].c);
	}
	one_server_close(&j);
}
END_TEST

// A sync push-pull lends its fp32 gradient to its round from its own
// request (push.c's BORROWING). When the call is answered before the
// round closes (here its park expires: --park-max-ms 300 ms, while the
// other rank has not pushed), the server first copies the gradient into
// the rank's slot: the round, closed later by rank 1, still sums exactly
// x - lr * (g0 + g1) / 2 (integers here, so every float is exact).
enum { BIG = 1 << 16 };

struct lender {
	ferry_client *c;
	float        *g, *w;
	int           rv;
};

static void *
lender_main(void *arg)
{
	struct lender *l     = arg;
	const float   *gp[1] = { l->g };
	float         *wp[1] = { l->w };
	l->rv                = ferry_client_push_pull(l->c, gp, 1, wp);
	return NULL;
}

// big_open opens rank a->rank's client of the job at a->url into
// a->l->c (rank 0 offers a->l->w) and pulls into a->l->w; a->l->rv: 0 or
// the error.
struct big_arg {
	const char    *url;
	struct lender *l;
	int            rank;
};

static void *
big_open(void *arg)
{
	struct big_arg          *a     = arg;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d     = { "big", BIG };
	float                   *wp[1] = { a->l->w };
	o.scheduler_url                = a->url;
	o.rank                         = a->rank;
	o.lr                           = 0.5;
	o.mode                         = FERRY_MODE_SYNC;
	o.timeout_ms                   = 20000;
	if ((a->l->rv = ferry_client_open(&o, &a->l->c)) != 0 ||
	    (a->l->rv = ferry_client_declare(a->l->c, &d, 1)) != 0 ||
	    (a->rank == 0 &&
	        (a->l->rv = ferry_client_init_weights(a->l->c,
	             (const float *const *) wp)) != 0)) {
		return NULL;
	}
	a->l->rv = ferry_client_pull(a->l->c, wp);
	return NULL;
}

START_TEST(test_scale_expired_push_pull_still_counts)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	char                     url[64], surl[64];
	float                   *w0 = malloc(BIG * 4), *w1 = malloc(BIG * 4);
	float                   *g0 = malloc(BIG * 4), *g1 = malloc(BIG * 4);
	ck_assert(w0 != NULL && w1 != NULL && g0 != NULL && g1 != NULL);
	for (int i = 0; i < BIG; i++) {
		w0[i] = (float) i;
		g0[i] = 1.0f;
		g1[i] = 3.0f;
	}
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = 1;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sched);
	o.park_max_ms   = 300;
	PT_OK(ps_server_open(&o, &srv));
	struct lender  l = { NULL, g0, w0, 0 }, l1 = { NULL, g1, w1, 0 };
	struct big_arg a0 = { ps_scheduler_url(sched), &l, 0 };
	struct big_arg a1 = { ps_scheduler_url(sched), &l1, 1 };
	pthread_t      th;
	ck_assert_int_eq(pthread_create(&th, NULL, big_open, &a1), 0);
	big_open(&a0);
	pthread_join(th, NULL);
	ck_assert_msg(l.rv == 0 && l1.rv == 0, "open: %d %d", l.rv, l1.rv);
	ferry_client      *c0 = l.c, *c1 = l1.c;
	unsigned long long errs = server_stat(srv, "errors");
	ck_assert_int_eq(pthread_create(&th, NULL, lender_main, &l), 0);
	// Rank 0's push is in and its call answered DEADLINE_EXCEEDED.
	for (int i = 0; i < 1000 && server_stat(srv, "errors") == errs; i++) {
		fb_sleep_us(10000);
	}
	ck_assert_uint_gt(server_stat(srv, "errors"), errs);
	ck_assert_uint_eq(server_stat(srv, "updates_applied"), 0);
	const float *gp[1] = { g1 };
	float       *wp[1] = { w1 };
	PT_OK(ferry_client_push_pull(c1, gp, 1, wp));
	pthread_join(th, NULL);
	ck_assert_uint_eq(server_stat(srv, "updates_applied"), 1);
	for (int i = 0; i < BIG; i++) {
		ck_assert_msg(w1[i] == (float) i - 1.0f,
		    "element %d: %g, expected %g", i, (double) w1[i],
		    (double) ((float) i - 1.0f));
	}
	ferry_client_close(c0);
	ferry_client_close(c1);
	ps_server_close(srv);
	ps_scheduler_close(sched);
	free(w0);
	free(w1);
	free(g0);
	free(g1);
}
END_TEST

Suite *
suite_scale(void)
{
	Suite *s  = suite_create("scale");
	TCase *tc = tcase_create("scale");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_scale_park_checks_linear_in_trainers);
	tcase_add_test(tc, test_scale_contexts_grow_for_trainers);
	tcase_add_test(tc, test_scale_expired_push_pull_still_counts);
	suite_add_tcase(s, tc);
	return s;
}
