// test_cost.c — cost models, capacity check and lower bound (cost.c).
#include <math.h>
#include <stdint.h>

#include <shard/shard.h>

#include "gen.h"
#include "pt.h"
#include "sharding_tests.h"

#define EPS 1e-12

// Two shards (1000 and 3000 bytes), two servers, one trainer;
// L = 10 ms / 20 ms, B = 1 MB/s / 2 MB/s, ρ = 2, k = 1.
static uint64_t size2[] = { 1000, 3000 };
static double   lat2[]  = { 0.01, 0.02 };
static double   bw2[]   = { 1e6, 2e6 };

static struct shard_inst
inst2(int model)
{
	struct shard_inst in = SHARD_INST_INIT;
	in.n_shards          = 2;
	in.n_servers         = 2;
	in.n_trainers        = 1;
	in.size              = size2;
	in.lat               = lat2;
	in.bw                = bw2;
	in.model             = model;
	return in;
}

// A failure means a cost formula of §3.3 is computed wrongly.
START_TEST(test_cost_models)
{
	struct shard_inst in      = inst2(SHARD_MODEL_B);
	uint32_t          split[] = { 0, 1 }, same[] = { 0, 0 };
	double            f, s, tt[1];
	// B: max(0.01 + 2·1000/1e6, 0.02 + 2·3000/2e6) = 0.023
	PT_OK(shard_cost(&in, split, &f, &s, tt));
	ck_assert_double_eq_tol(f, 0.023, EPS);
	ck_assert_double_eq_tol(s, 0.023, EPS);
	ck_assert_double_eq_tol(tt[0], 0.023, EPS);
	// B: one message to server 0: 0.01 + 2·4000/1e6 = 0.018
	PT_OK(shard_cost(&in, same, &f, NULL, NULL));
	ck_assert_double_eq_tol(f, 0.018, EPS);
	// k = 2 doubles the latency part
	in.k = 2;
	PT_OK(shard_cost(&in, same, &f, NULL, NULL));
	ck_assert_double_eq_tol(f, 0.028, EPS);
	// A: serial per-shard RPCs: 0.012 + 0.023 and 2·0.01 + 0.008
	in = inst2(SHARD_MODEL_A);
	PT_OK(shard_cost(&in, split, &f, NULL, NULL));
	ck_assert_double_eq_tol(f, 0.035, EPS);
	PT_OK(shard_cost(&in, same, &f, NULL, NULL));
	ck_assert_double_eq_tol(f, 0.028, EPS);
}
END_TEST

// A failure means the NIC terms are missing or wrong (model B).
START_TEST(test_cost_nic)
{
	struct shard_inst in   = inst2(SHARD_MODEL_B);
	double            nt[] = { 1e5 }, ns[] = { 1e4, 0 };
	uint32_t          split[] = { 0, 1 };
	double            f;
	in.nic_trainer = nt; // 2·4000/1e5 = 0.08 dominates
	PT_OK(shard_cost(&in, split, &f, NULL, NULL));
	ck_assert_double_eq_tol(f, 0.08, EPS);
	in.nic_trainer = NULL;
	in.nic_server  = ns; // server 0 egress: 2·1·1000/1e4 = 0.2
	PT_OK(shard_cost(&in, split, &f, NULL, NULL));
	ck_assert_double_eq_tol(f, 0.2, EPS);
}
END_TEST

// A failure means over-capacity placements pass or legal ones fail.
START_TEST(test_assign_check)
{
	struct shard_inst in    = inst2(SHARD_MODEL_B);
	uint64_t          cap[] = { 3000, 0 }; // server 1 unbounded
	uint32_t          a[] = { 1, 0 }, b[] = { 0, 0 }, c[] = { 1, 1 };
	in.cap = cap;
	PT_OK(shard_assign_check(&in, a));
	PT_OK(shard_assign_check(&in, c));
	PT_FAIL(shard_assign_check(&in, b), FB_ENOSPC);
	cap[0] = 4000;
	PT_OK(shard_assign_check(&in, b));
	cap[1] = UINT64_MAX;
	PT_OK(shard_assign_check(&in, c));
	in.cap = NULL;
	PT_OK(shard_assign_check(&in, b));
}
END_TEST

// A failure means the lower bound formula is wrong.
START_TEST(test_lower_bound)
{
	struct shard_inst in = inst2(SHARD_MODEL_B);
	double            lb;
	// §3.3 gives max(2·4000/3e6, min(0.01 + 0.006, 0.02 + 0.003)) =
	// 0.016; the fill bound is tight here: below F = 0.02 only server 0
	// takes load, (F − 0.01)·1e6/2 ≥ 4000 ⇒ F ≥ 0.018 = OPT.
	PT_OK(shard_lower_bound(&in, &lb));
	ck_assert_double_eq_tol(lb, 0.018, EPS);
	in.k = 2; // (F − 0.02)·5e5 ≥ 4000 ⇒ 0.028
	PT_OK(shard_lower_bound(&in, &lb));
	ck_assert_double_eq_tol(lb, 0.028, EPS);
	// A: Σ_i min_m: 0.012 + 0.016
	in = inst2(SHARD_MODEL_A);
	PT_OK(shard_lower_bound(&in, &lb));
	ck_assert_double_eq_tol(lb, 0.028, EPS);
	// zero latency: water-filling, 2·6000 / (1e6 + 2e6)
	double z[] = { 0, 0 };
	in         = inst2(SHARD_MODEL_B);
	in.lat     = z;
	size2[0]   = 3000;
	PT_OK(shard_lower_bound(&in, &lb));
	size2[0] = 1000;
	ck_assert_double_eq_tol(lb, 2.0 * 6000 / 3e6, EPS);
}
END_TEST

// spec_lb is the §3.3 formula, verbatim.
static double
spec_lb(const struct shard_inst *in)
{
	size_t   M   = in->n_servers;
	uint64_t sum = 0, bmax = 0;
	for (size_t i = 0; i < in->n_shards; i++) {
		sum += in->size[i];
		bmax = in->size[i] > bmax ? in->size[i] : bmax;
	}
	double lb = 0;
	for (size_t t = 0; t < in->n_trainers; t++) {
		double bs = 0, mn = INFINITY;
		for (size_t m = 0; m < M; m++) {
			double l = in->lat[t * M + m], b = in->bw[t * M + m];
			bs += b;
			mn = fmin(mn, in->k * l + in->rho * (double) bmax / b);
		}
		lb = fmax(lb, fmax(in->rho * (double) sum / bs, mn));
	}
	return lb;
}

// A failure means the bound is below the §3.3 formula or above the true
// optimum (checked by brute force) on seeded random instances.
START_TEST(test_lower_bound_vs_spec)
{
	uint64_t rng     = 77;
	int      sharper = 0;
	for (int n = 0; n < 100; n++) {
		struct gen_inst g;
		size_t          S = 3 + gen_rand(&rng) % 5;
		uint32_t        M = 2 + (uint32_t) (gen_rand(&rng) % 2);
		uint32_t        T = 1 + (uint32_t) (gen_rand(&rng) % 3);
		gen_random(&g, &rng, S, M, T, SHARD_MODEL_B, 0);
		uint32_t            a[GEN_MAX_S];
		struct shard_report r;
		double              lb, sl = spec_lb(&g.in);
		PT_OK(shard_lower_bound(&g.in, &lb));
		PT_OK(shard_solve_brute(&g.in, a, NULL, &r));
		ck_assert_msg(lb >= sl * (1 - 1e-12), "LB %g < §3.3 %g", lb,
		    sl);
		ck_assert_msg(lb <= r.f * (1 + 1e-12), "LB %g > OPT %g", lb,
		    r.f);
		sharper += lb > sl * 1.01;
	}
	ck_assert_int_gt(sharper, 10);
}
END_TEST

// A failure means an invalid instance or assignment was accepted, or an
// out-param was written on failure.
START_TEST(test_cost_bogus)
{
	struct shard_inst in  = inst2(SHARD_MODEL_B), bad;
	uint32_t          a[] = { 0, 1 }, oob[] = { 0, 2 };
	double            f = -1, lat_nan[] = { 0.01, NAN };
	double            bw0[] = { 1e6, 0 }, lat_neg[] = { -1, 0 };
	uint64_t          size0[] = { 1000, 0 };
	uint64_t          big[]   = { UINT64_MAX, 2 };
	PT_FAIL(shard_cost(NULL, a, &f, NULL, NULL), FB_EINVAL);
	PT_FAIL(shard_cost(&in, NULL, &f, NULL, NULL), FB_EINVAL);
	PT_FAIL(shard_cost(&in, oob, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.n_shards = 0;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.n_servers = 0;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.n_trainers = 0;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.size = NULL;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.lat = NULL;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.bw = NULL;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.model = 7;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.rho = 0;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.rho = INFINITY;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.k = 0;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.lat = lat_nan;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.lat = lat_neg;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.bw = bw0;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.size = size0;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_EINVAL);
	bad = in, bad.size = big;
	PT_FAIL(shard_cost(&bad, a, &f, NULL, NULL), FB_ERANGE);
	ck_assert_double_eq(f, -1);
	// model A ignores k, so k = 0 is fine there
	bad = in, bad.model = SHARD_MODEL_A, bad.k = 0;
	PT_OK(shard_cost(&bad, a, &f, NULL, NULL));
	// allocation failure is an error, not a crash
	fb_alloc_fail_after(0);
	int rv = shard_cost(&in, a, &f, NULL, NULL);
	fb_alloc_fail_after(-1);
	PT_FAIL(rv, FB_ENOMEM);
}
END_TEST

// A failure means bad input to the check or the bound was accepted.
START_TEST(test_check_lb_bogus)
{
	struct shard_inst in    = inst2(SHARD_MODEL_B), bad;
	uint32_t          oob[] = { 5, 0 };
	double            lb    = -1;
	PT_FAIL(shard_assign_check(NULL, oob), FB_EINVAL);
	PT_FAIL(shard_assign_check(&in, NULL), FB_EINVAL);
	PT_FAIL(shard_assign_check(&in, oob), FB_EINVAL);
	PT_FAIL(shard_lower_bound(&in, NULL), FB_EINVAL);
	PT_FAIL(shard_lower_bound(NULL, &lb), FB_EINVAL);
	bad = in, bad.n_trainers = 0;
	PT_FAIL(shard_lower_bound(&bad, &lb), FB_EINVAL);
	ck_assert_double_eq(lb, -1);
}
END_TEST

Suite *
suite_cost(void)
{
	Suite *s  = suite_create("cost");
	TCase *tc = tcase_create("cost");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_cost_models);
	tcase_add_test(tc, test_cost_nic);
	tcase_add_test(tc, test_assign_check);
	tcase_add_test(tc, test_lower_bound);
	tcase_add_test(tc, test_lower_bound_vs_spec);
	tcase_add_test(tc, test_cost_bogus);
	tcase_add_test(tc, test_check_lb_bogus);
	suite_add_tcase(s, tc);
	return s;
}
