// test_training.c — a scheduler and servers in this process, trainers as
// threads using libferry (harness.h): aggregation and the optimizer in
// sync and async mode, and non-finite pushes refused.
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cluster.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

// Sync mode: after K steps every trainer holds the same weights, equal to
// SGD on the sum of all ranks' gradients divided by the total samples.
START_TEST(test_cluster_sync_aggregation)
{
	struct cluster cl;
	struct pt_rank a[2];
	pthread_t      th[2];
	const int      K = 5;

	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].rank  = r;
		a[r].steps = K;
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
				float sum = grad_for(0, k, t, i) +
				    grad_for(1, k, t, i);
				x -= (float) (0.5 / 20.0) * sum;
			}
			ck_assert_msg(a[0].w[t][i] == a[1].w[t][i],
			    "ranks disagree at %d/%zu", t, i);
			ck_assert_msg(fabsf(a[0].w[t][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "tensor %d[%zu] = %g, expected %g", t, i,
			    a[0].w[t][i], x);
		}
	}
	cluster_stop(&cl);
}
END_TEST

// A gradient holding NaN or Inf is refused, with a message naming it, in
// sync and async mode; the round it was pushed to still completes with
// the trainers' real gradients, so the weights come out exact.
START_TEST(test_cluster_nonfinite_push_refused)
{
	for (int mode = 0; mode < 2; mode++) {
		struct cluster cl;
		struct pt_rank a[2];
		pthread_t      th[2];
		const int      K = 4, T = mode == 0 ? 2 : 1;
		cluster_open(&cl, T, 1, PS_PLACEMENT_UNIFORM);
		for (int r = 0; r < T; r++) {
			memset(&a[r], 0, sizeof(a[r]));
			a[r].url    = ps_scheduler_url(cl.sched);
			a[r].rank   = r;
			a[r].steps  = K;
			a[r].mode   = mode == 0 ? FERRY_MODE_SYNC
			                        : FERRY_MODE_ASYNC;
			a[r].nan_at = 2;
			pthread_create(&th[r], NULL, pt_rank_main, &a[r]);
		}
		for (int r = 0; r < T; r++) {
			pthread_join(th[r], NULL);
			ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
			    ferry_strerror(a[r].rv), a[r].err);
			ck_assert_msg(a[r].nan_refused,
			    "rank %d: non-finite push not refused (%s)", r,
			    a[r].err);
		}
		for (size_t i = 0; i < lens[0]; i++) {
			float x = (float) i;
			for (int k = 0; k < K; k++) {
				float sum = grad_for(0, k, 0, i);
				if (T == 2) {
					sum += grad_for(1, k, 0, i);
				}
				x -= (float) (0.5 / (10.0 * T)) * sum;
			}
			ck_assert_msg(fabsf(a[0].w[0][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "mode %d: a[%zu] = %g, expected %g", mode, i,
			    a[0].w[0][i], x);
		}
		cluster_stop(&cl);
	}
}
END_TEST

// Async mode with one trainer: each push is applied at once.
START_TEST(test_cluster_async_single)
{
	struct cluster cl;
	struct pt_rank a;
	pthread_t      th;

	cluster_open(&cl, 1, 2, PS_PLACEMENT_UNIFORM);
	memset(&a, 0, sizeof(a));
	a.url   = ps_scheduler_url(cl.sched);
	a.steps = 3;
	a.mode  = FERRY_MODE_ASYNC;
	pthread_create(&th, NULL, pt_rank_main, &a);
	pthread_join(th, NULL);
	ck_assert_msg(a.rv == 0, "%s: %s", ferry_strerror(a.rv), a.err);
	for (size_t i = 0; i < lens[0]; i++) {
		float x = (float) i;
		for (int k = 0; k < 3; k++) {
			x -= (float) (0.5 / 10.0) * grad_for(0, k, 0, i);
		}
		ck_assert(fabsf(a.w[0][i] - x) <= 1e-5f * (1 + fabsf(x)));
	}
	cluster_stop(&cl);
}
END_TEST

// One test case, tagged "cluster" as every test case of the cluster
// suites is (ctest's ps entry runs them), so that CK_RUN_CASE=<name> runs
// one theme. Each test starts its own scheduler and servers; 60 s is ample
// for the slowest (two runs each).
Suite *
suite_training(void)
{
	Suite *s  = suite_create("training");
	TCase *tc = tcase_create("training");

	// Aggregation and the optimizer in sync and async mode.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_sync_aggregation);
	tcase_add_test(tc, test_cluster_nonfinite_push_refused);
	tcase_add_test(tc, test_cluster_async_single);
	suite_add_tcase(s, tc);
	return s;
}
