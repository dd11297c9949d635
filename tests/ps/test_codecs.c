// test_codecs.c — push and pull codecs on an in-process job, two trainer
// threads (pair.h): the reference-delta pulls stay in lockstep, caller-
// encoded pushes equal libferry's, codec "auto" follows its budget, every
// codec trains, and an unknown one is refused.
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cluster.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "pair.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

// With q4 pushes and q8 reference-delta pulls, both trainers end with
// bit-identical weights (the pull reference is in lockstep through the
// wire), close to the fp32 run, and the wire carries fewer bytes.
START_TEST(test_cluster_codecs_lockstep)
{
	struct pt_rank ref[2], q[2];
	const int      K = 12;
	run_pair(ref, K, "none", "none", 0);
	run_pair(q, K, "q4", "q8", 2);
	double err = 0, norm = 0;
	for (int t = 0; t < NT; t++) {
		ck_assert_int_eq(
		    memcmp(q[0].w[t], q[1].w[t], lens[t] * sizeof(float)), 0);
		for (size_t i = 0; i < lens[t]; i++) {
			double d = q[0].w[t][i] - ref[0].w[t][i];
			err += d * d;
			norm += (double) ref[0].w[t][i] * ref[0].w[t][i];
		}
	}
	ck_assert_msg(sqrt(err / norm) < 0.02, "q4/q8 drifted %.3g from fp32",
	    sqrt(err / norm));
	ck_assert_uint_lt(q[0].stats.bytes_pushed, ref[0].stats.bytes_pushed);
	ck_assert_uint_lt(q[0].stats.bytes_pulled, ref[0].stats.bytes_pulled);
}
END_TEST

// Gradients encoded by the caller (as a GPU trainer does on the device)
// and pushed with ferry_client_push_pull_encoded give bit-identical
// weights to libferry encoding them itself.
START_TEST(test_cluster_encoded_push)
{
	struct pt_rank   lib[2], own[2];
	struct cluster   cl;
	struct pair_opts o = { 8, "q4", "q8", 2, 1, NULL, NULL, 0 };
	run_pair(lib, 8, "q4", "q8", 2);
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	train_pair(&cl, own, &o);
	same_weights(lib, own);
	cluster_stop(&cl);
}
END_TEST

// Codec "auto": with a budget every link fits (the steps here compute
// for microseconds, 1e6 times that is seconds) every link keeps fp32
// pushes and pulls of the weights, bit-identical to none/none; with one
// nothing fits, every link moves, after the first step, to the top-1%
// pushes (each ShardRef naming its codec) and the shared reference's
// deltas (a full resync from the weights), so both ranks hold the same
// reference, near fp32, for fewer bytes.
START_TEST(test_cluster_codec_auto)
{
	struct pt_rank ref[2], fast[2], slow[2];
	const int      K = 10;
	run_pair(ref, K, "none", "none", 0);
	pair_link_budget = 1e6;
	run_pair(fast, K, "auto", "auto", 0);
	same_weights(ref, fast);
	pair_link_budget = 0.001;
	run_pair(slow, K, "auto", "auto", 0);
	pair_link_budget = 0;
	double err = 0, norm = 0;
	for (int t = 0; t < NT; t++) {
		ck_assert_int_eq(memcmp(slow[0].w[t], slow[1].w[t],
		                     lens[t] * sizeof(float)),
		    0);
		for (size_t i = 0; i < lens[t]; i++) {
			double d = slow[0].w[t][i] - ref[0].w[t][i];
			err += d * d;
			norm += (double) ref[0].w[t][i] * ref[0].w[t][i];
		}
	}
	ck_assert_msg(sqrt(err / norm) < 0.05, "auto drifted %.3g from fp32",
	    sqrt(err / norm));
	ck_assert_uint_lt(slow[0].stats.bytes_pushed,
	    ref[0].stats.bytes_pushed);
}
END_TEST

// Every codec trains without error in both directions.
START_TEST(test_cluster_codecs_all)
{
	static const char *push[] = { "fp16", "bf16", "q8", "q2", "sign",
		"topk:0.25", "q4:sr" };
	static const char *pull[] = { "bf16", "fp16", "q2", "q4", "q8", "fp16",
		"q8" };
	for (size_t i = 0; i < sizeof(push) / sizeof(push[0]); i++) {
		struct pt_rank a[2];
		run_pair(a, 4, push[i], pull[i], 1);
		for (int t = 0; t < NT; t++) {
			ck_assert_int_eq(memcmp(a[0].w[t], a[1].w[t],
			                     lens[t] * sizeof(float)),
			    0);
		}
	}
}
END_TEST

// A job with an unknown codec is refused at declaration, with the reason.
START_TEST(test_cluster_codec_bogus)
{
	struct cluster    cl;
	struct ferry_opts o = FERRY_OPTS_INIT;
	ferry_client     *c;
	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.codec_push    = "q3";
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_EINVAL);
	o.codec_push = "none";
	o.codec_pull = "q8:sr"; // pull side must round deterministically
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_EINVAL);
	cluster_stop(&cl);
}
END_TEST

// One test case, tagged "cluster" as every test case of the cluster
// suites is (ctest's ps entry runs them), so that CK_RUN_CASE=<name> runs
// one theme. Each test starts its own scheduler and servers; 60 s is ample
// for the slowest (two runs each).
Suite *
suite_codecs(void)
{
	Suite *s  = suite_create("codecs");
	TCase *tc = tcase_create("codecs");

	// Push and pull codecs: reference-delta lockstep, encoded pushes.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_codecs_lockstep);
	tcase_add_test(tc, test_cluster_codecs_all);
	tcase_add_test(tc, test_cluster_codec_auto);
	tcase_add_test(tc, test_cluster_encoded_push);
	tcase_add_test(tc, test_cluster_codec_bogus);
	suite_add_tcase(s, tc);
	return s;
}
