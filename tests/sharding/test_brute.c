// test_brute.c — the exact reference solver (brute.c).
#include <math.h>
#include <stdint.h>

#include <shard/shard.h>

#include "gen.h"
#include "pt.h"
#include "sharding_tests.h"

// A failure means brute force missed the optimum of a small instance
// whose optimum is known by hand.
START_TEST(test_brute_known)
{
	// L = 0, identical links, sizes 3 3 2 2 2 on 2 servers: the best
	// split is 6 | 6 (3+3 vs 2+2+2), which LPT misses (3+2+2 | 3+2).
	struct shard_inst   in     = SHARD_INST_INIT;
	uint64_t            size[] = { 3, 3, 2, 2, 2 };
	double              lat[] = { 0, 0 }, bw[] = { 1, 1 }, tt[1];
	uint32_t            a[5];
	struct shard_report r;
	in.n_shards = 5, in.n_servers = 2, in.n_trainers = 1;
	in.size = size, in.lat = lat, in.bw = bw, in.rho = 1;
	PT_OK(shard_solve_brute(&in, a, tt, &r));
	ck_assert_double_eq(r.f, 6);
	ck_assert_double_eq(tt[0], 6);
	ck_assert_uint_eq(a[0], a[1]);
	ck_assert_uint_ne(a[0], a[2]);
	ck_assert_uint_eq(a[2], a[3]);
	ck_assert_uint_eq(a[3], a[4]);
	ck_assert_uint_eq(r.passes, 0);
	ck_assert_double_eq_tol(r.lb, 6, 1e-9); // water-filling: 12 / 2
	ck_assert_double_eq_tol(r.ratio, 1, 1e-9);
	// greedy alone gives 7; local search (a swap) repairs it
	struct shard_solve_opts o = SHARD_SOLVE_OPTS_INIT;
	o.starts = 0, o.max_passes = 0;
	PT_OK(shard_solve(&in, &o, a, NULL, &r));
	ck_assert_double_eq(r.f, 7);
	o.max_passes = 100;
	PT_OK(shard_solve(&in, &o, a, NULL, &r));
	ck_assert_double_eq(r.f, 6);
	ck_assert_double_eq(r.greedy_f, 7);
}
END_TEST

// A failure means brute force ignored capacity or the lower bound was
// above the optimum on the seeded instances.
START_TEST(test_brute_capacity_lb)
{
	uint64_t rng = 5;
	for (int n = 0; n < 100; n++) {
		struct gen_inst g;
		size_t          S = 3 + gen_rand(&rng) % 6;
		uint32_t        M = 2 + (uint32_t) (gen_rand(&rng) % 2);
		uint32_t        T = 1 + (uint32_t) (gen_rand(&rng) % 3);
		gen_random(&g, &rng, S, M, T, n % 2, 0.7);
		uint32_t            a[GEN_MAX_S];
		struct shard_report r;
		double              lb;
		int                 rv = shard_solve_brute(&g.in, a, NULL, &r);
		if (rv == FB_ENOSPC)
			continue;
		PT_OK(rv);
		PT_OK(shard_assign_check(&g.in, a));
		PT_OK(shard_lower_bound(&g.in, &lb));
		ck_assert_double_eq(lb, r.lb);
		ck_assert_msg(lb <= r.f * (1 + 1e-12), "LB %g > OPT %g", lb,
		    r.f);
		// without capacity the optimum can only be as good or better
		struct shard_report u;
		g.in.cap = NULL;
		PT_OK(shard_solve_brute(&g.in, a, NULL, &u));
		ck_assert(u.f <= r.f);
	}
}
END_TEST

// A failure means an oversized or invalid problem was accepted.
START_TEST(test_brute_bogus)
{
	uint64_t        rng = 9;
	struct gen_inst g;
	uint32_t        a[GEN_MAX_S] = { 0 };
	gen_random(&g, &rng, 13, 2, 1, SHARD_MODEL_B, 0);
	PT_FAIL(shard_solve_brute(&g.in, a, NULL, NULL), FB_ERANGE); // S > 12
	gen_random(&g, &rng, 11, 4, 1, SHARD_MODEL_B, 0);
	PT_FAIL(shard_solve_brute(&g.in, a, NULL, NULL), FB_ERANGE); // 4^11
	gen_random(&g, &rng, 10, 5, 1, SHARD_MODEL_B, 0);
	PT_FAIL(shard_solve_brute(&g.in, a, NULL, NULL), FB_ERANGE); // 5^10
	gen_random(&g, &rng, 4, 3, 1, SHARD_MODEL_B, 0);
	PT_FAIL(shard_solve_brute(&g.in, NULL, NULL, NULL), FB_EINVAL);
	PT_FAIL(shard_solve_brute(NULL, a, NULL, NULL), FB_EINVAL);
	g.in.n_trainers = 0;
	PT_FAIL(shard_solve_brute(&g.in, a, NULL, NULL), FB_EINVAL);
	g.in.n_trainers = 1;
	fb_alloc_fail_after(0);
	int rv = shard_solve_brute(&g.in, a, NULL, NULL);
	fb_alloc_fail_after(-1);
	PT_FAIL(rv, FB_ENOMEM);
}
END_TEST

Suite *
suite_brute(void)
{
	Suite *s  = suite_create("brute");
	TCase *tc = tcase_create("brute");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_brute_known);
	tcase_add_test(tc, test_brute_capacity_lb);
	tcase_add_test(tc, test_brute_bogus);
	suite_add_tcase(s, tc);
	return s;
}
