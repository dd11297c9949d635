// test_rejoin.c — trainers (threads using libferry, harness.h) that leave
// an in-process job and come back under the same rank, also while their
// push is decoding on a server.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "test_hooks.h"
#include "pt.h"

// A trainer that leaves stops the sync rounds from waiting for it: the
// other trainer goes on alone, and the weights are SGD on both ranks'
// gradients before the leave and on rank 0's alone after it.
START_TEST(test_cluster_trainer_leave)
{
	struct cluster cl;
	struct pt_rank a[2];
	pthread_t      th[2];
	const int      K = 8, L = 3;

	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url      = ps_scheduler_url(cl.sched);
		a[r].rank     = r;
		a[r].steps    = K;
		a[r].leave_at = r == 1 ? L : 0;
		pthread_create(&th[r], NULL, pt_rank_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			float x = (float) i;
			for (int k = 0; k < K; k++) {
				if (k < L) {
					x -= (float) (0.5 / 20.0) *
					    (grad_for(0, k, t, i) +
					        grad_for(1, k, t, i));
				} else {
					x -= (float) (0.5 / 10.0) *
					    grad_for(0, k, t, i);
				}
			}
			ck_assert_msg(fabsf(a[0].w[t][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "tensor %d[%zu] = %g, expected %g", t, i,
			    a[0].w[t][i], x);
		}
	}
	cluster_stop(&cl);
}
END_TEST

struct rejoin_arg {
	const char *url;
	int         rank, before, after, leave_at_end;
	uint64_t    version;
	int         rv;
	char        err[256];
};

// rejoin_step is rejoin_main's step: the step-0 gradient every time,
// pulling when told it is behind.
static int
rejoin_step(struct pt_rank *a, ferry_client *c, int k, float *const *g,
    float *const *w)
{
	if (k < 0) {
		return ferry_client_pull(c, w);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			g[t][i] = grad_for(a->rank, 0, t, i);
		}
	}
	int rv = ferry_client_push_pull(c, (const float *const *) g, 10, w);
	if (rv == FERRY_EBEHIND) {
		rv = ferry_client_pull(c, w);
	}
	return rv;
}

// rejoin_main trains `before` steps, leaves, opens a new client for the
// same rank, and trains `after` more (pulling when told it is behind);
// with leave_at_end it leaves after its last step.
static void *
rejoin_main(void *arg)
{
	struct rejoin_arg *a = arg;
	struct pt_rank     r = {
		    .url          = a->url,
		    .rank         = a->rank,
		    .steps        = a->before,
		    .step         = rejoin_step,
		    .leave_at_end = a->after > 0 || a->leave_at_end,
	};
	pt_rank_main(&r);
	if (r.rv == 0 && a->after > 0) {
		r = (struct pt_rank) {
			.url          = a->url,
			.rank         = a->rank,
			.steps        = a->after,
			.step         = rejoin_step,
			.leave_at_end = a->leave_at_end,
		};
		pt_rank_main(&r);
	}
	a->rv      = r.rv;
	a->version = r.stats.version;
	snprintf(a->err, sizeof(a->err), "%s", r.err);
	return NULL;
}

// A trainer that left can come back under the same rank: rounds wait for
// it again; pushing for a round that finished without it says "behind",
// and a pull brings it up to date. Nobody hangs.
START_TEST(test_cluster_trainer_rejoin)
{
	struct cluster    cl;
	struct rejoin_arg a[2];
	pthread_t         th[2];
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	memset(a, 0, sizeof(a));
	a[0] = (struct rejoin_arg) {
		.rank         = 0,
		.before       = 12,
		.after        = 0,
		.leave_at_end = 1,
	};
	a[1] = (struct rejoin_arg) {
		.rank         = 1,
		.before       = 3,
		.after        = 4,
		.leave_at_end = 1,
	};
	for (int r = 0; r < 2; r++) {
		a[r].url = ps_scheduler_url(cl.sched);
		pthread_create(&th[r], NULL, rejoin_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	ck_assert_uint_ge(a[0].version, 12);
	ck_assert_uint_ge(a[1].version, 7);
	cluster_stop(&cl);
}
END_TEST

struct gone_mid_decode {
	struct cluster *cl;
	int             fired;
};

// stat_at returns the value of INFO field `key` ("pushes:") of server i.
static unsigned long long
stat_at(struct cluster *cl, int i, const char *key)
{
	char        text[2048];
	const char *p;
	ps_server_stats(cl->srv[i], text, sizeof(text));
	p = strstr(text, key);
	ck_assert_ptr_nonnull(p);
	return strtoull(p + strlen(key), NULL, 10);
}

// leave_while_decoding is server 0's stage hook: rank 1's first push,
// with its slots reserved but not yet decoded, waits for rank 0's push to
// be in, then rank 1 leaves the job and the hook returns only once the
// server holds the map that marks it gone.
static void
leave_while_decoding(void *arg, uint32_t rank)
{
	struct gone_mid_decode *g = arg;
	if (rank != 1 || g->fired++) {
		return;
	}
	for (int i = 0; i < 500 && stat_at(g->cl, 0, "pushes:") < 1; i++) {
		nng_msleep(10);
	}
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	l.role                 = PSWIRE__ROLE__ROLE_TRAINER;
	l.id                   = 1;
	h.body_case            = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req            = &l;
	Pswire__Header *rh     = pt_call(ps_scheduler_url(g->cl->sched),
	        PSWIRE__METHOD__LEAVE, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	pswire__header__free_unpacked(rh, NULL);
	for (int i = 0; i < 500 && stat_at(g->cl, 0, "map_epoch:") < 2; i++) {
		nng_msleep(10);
	}
}

// A rank that leaves while its sync push is decoding (outside the lock)
// keeps that push in the round it was admitted for: the round waits for
// the decode instead of closing without it (which used to stage the
// version-0 gradient into round 1 and free buffers under the decoder on a
// later move). Rank 0 then goes on alone.
START_TEST(test_cluster_leave_while_decoding)
{
	struct cluster         cl;
	struct pt_rank         a[2];
	pthread_t              th[2];
	struct gone_mid_decode g = { &cl, 0 };

	cluster_open(&cl, 2, 1, PS_PLACEMENT_UNIFORM);
	ps_server_test_stage_hook(cl.srv[0], leave_while_decoding, &g);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].rank  = r;
		a[r].steps = r == 0 ? 2 : 1;
		pthread_create(&th[r], NULL, pt_rank_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	ck_assert_int_eq(g.fired, 1);
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			float x = (float) i;
			x -= (float) (0.5 / 20.0) *
			    (grad_for(0, 0, t, i) + grad_for(1, 0, t, i));
			x -= (float) (0.5 / 10.0) * grad_for(0, 1, t, i);
			ck_assert_msg(fabsf(a[0].w[t][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "tensor %d[%zu] = %g, expected %g", t, i,
			    a[0].w[t][i], x);
		}
	}
	ps_server_test_stage_hook(cl.srv[0], NULL, NULL);
	cluster_stop(&cl);
}
END_TEST

struct split {
	int      second;  // rank 1's second life
	uint64_t skipped; // its ferry_recovery.pushes_skipped after the push
};

// split_step is the split-push test's rank 1: its first life pulls and
// pushes step 0's gradient for tensor 0 only (its shards' round closes,
// rank 0 having pushed everything), then dies without leaving; its second
// life pulls (versions 1 and 0: held version 0) and pushes step 0's
// gradient whole, failing on FERRY_EBEHIND.
static int
split_step(struct pt_rank *a, ferry_client *c, int k, float *const *g,
    float *const *w)
{
	struct split *sp = a->ctx;
	if (k < 0) {
		return ferry_client_pull(c, w);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			g[t][i] = grad_for(a->rank, 0, t, i);
		}
	}
	if (!sp->second) {
		int rv = ferry_client_push_pull_start(c,
		    (const float *const *) g, 10, w, 0, 1);
		if (rv == FERRY_OK) {
			rv = ferry_client_wait(c, 0, 1);
		}
		return rv == FERRY_OK ? PT_STOP : rv;
	}
	int rv = ferry_client_push_pull(c, (const float *const *) g, 10, w);
	struct ferry_recovery rc;
	ferry_client_recovery(c, &rc);
	sp->skipped = rc.pushes_skipped;
	return rv;
}

// A rank killed while its push had reached only some shards of a server
// (here: tensor 0's three, which closed their round) comes back and pulls
// shards at two versions. Its push for the older one goes to the shards
// still waiting for it, and the others, which would refuse it, are only
// pulled: the round closes everywhere, nobody waits for ever, and the
// weights are step 0's SGD on both ranks' gradients. (The whole request
// used to be refused, "behind the job", again after every pull.)
START_TEST(test_cluster_rejoin_after_split_push)
{
	struct cluster cl;
	struct pt_rank a0, a1;
	pthread_t      th0;
	struct split   sp = { 0 };
	cluster_open(&cl, 2, 1, PS_PLACEMENT_UNIFORM);
	a0 = (struct pt_rank) {
		.url   = ps_scheduler_url(cl.sched),
		.rank  = 0,
		.steps = 1,
	};
	a1 = (struct pt_rank) {
		.url   = a0.url,
		.rank  = 1,
		.steps = 1,
		.step  = split_step,
		.ctx   = &sp,
	};
	pthread_create(&th0, NULL, pt_rank_main, &a0);
	pt_rank_main(&a1); // the first life: tensor 0 only, then gone
	ck_assert_msg(a1.rv == 0, "rank 1's first life: %s: %s",
	    ferry_strerror(a1.rv), a1.err);
	ck_assert_uint_eq(a1.stats.version, 0); // tensors 1 and 2 at 0
	sp.second         = 1;
	a1.leave_on_error = 1; // so that rank 0 is not left waiting
	pt_rank_main(&a1);
	pthread_join(th0, NULL);
	ck_assert_msg(a1.rv == 0, "rank 1 after the rejoin: %s: %s",
	    ferry_strerror(a1.rv), a1.err);
	ck_assert_msg(a0.rv == 0, "rank 0: %s: %s", ferry_strerror(a0.rv),
	    a0.err);
	ck_assert_uint_eq(a1.stats.version, 1);
	ck_assert_uint_eq(a0.stats.version, 1);
	ck_assert_uint_eq(sp.skipped, 3); // tensor 0's shards
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			float x = (float) i -
			    (float) (0.5 / 20.0) *
			        (grad_for(0, 0, t, i) + grad_for(1, 0, t, i));
			ck_assert_msg(fabsf(a0.w[t][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "rank 0: tensor %d[%zu] = %g, expected %g", t, i,
			    a0.w[t][i], x);
			ck_assert_msg(a1.w[t][i] == a0.w[t][i],
			    "rank 1: tensor %d[%zu] = %g, rank 0 %g", t, i,
			    a1.w[t][i], a0.w[t][i]);
		}
	}
	cluster_stop(&cl);
}
END_TEST

// One test case, tagged "cluster" as every test case of the cluster
// suites is (ctest's ps entry runs them), so that CK_RUN_CASE=<name> runs
// one theme. Each test starts its own scheduler and servers; 60 s is ample
// for the slowest (two runs each).
Suite *
suite_rejoin(void)
{
	Suite *s  = suite_create("rejoin");
	TCase *tc = tcase_create("trainer_leave_rejoin");

	// Trainers that leave the job and come back under the same rank.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_trainer_leave);
	tcase_add_test(tc, test_cluster_trainer_rejoin);
	tcase_add_test(tc, test_cluster_leave_while_decoding);
	tcase_add_test(tc, test_cluster_rejoin_after_split_push);
	suite_add_tcase(s, tc);
	return s;
}
