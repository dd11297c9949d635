// test_solve.c — the placement heuristic (solve.c), held against brute
// force, Graham's bound and hand-built instances (docs/algorithms.md §3.3).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <shard/shard.h>

#include "gen.h"
#include "pt.h"
#include "sharding_tests.h"

#define N_RANDOM 200
#define REL 1e-9

// run_vs_brute checks the heuristic against brute force on N_RANDOM seeded
// instances (S 3–8, M 2–3, T 1–3, capacity 0.7·Σb) of one model and returns
// the number solved optimally.
static int
run_vs_brute(int model, double *worst)
{
	uint64_t rng     = UINT64_C(0x243f6a8885a308d3) + (uint64_t) model;
	int      optimal = 0, feasible = 0;
	*worst = 1;
	for (int n = 0; n < N_RANDOM; n++) {
		struct gen_inst g;
		size_t          S = 3 + gen_rand(&rng) % 6;
		uint32_t        M = 2 + (uint32_t) (gen_rand(&rng) % 2);
		uint32_t        T = 1 + (uint32_t) (gen_rand(&rng) % 3);
		gen_random(&g, &rng, S, M, T, model, 0.7);
		uint32_t            ha[GEN_MAX_S], ba[GEN_MAX_S];
		struct shard_report hr, br;
		double              tt[GEN_MAX_M], f;
		int brv = shard_solve_brute(&g.in, ba, NULL, &br);
		int hrv = shard_solve(&g.in, NULL, ha, tt, &hr);
		if (brv == FB_ENOSPC) {
			// nothing fits: the heuristic must say so too
			PT_FAIL(hrv, FB_ENOSPC);
			continue;
		}
		PT_OK(brv);
		ck_assert_msg(hrv == FB_OK,
		    "instance %d: heuristic %s but "
		    "brute force found a placement",
		    n, fb_strerror(hrv));
		feasible++;
		PT_OK(shard_assign_check(&g.in, ha));
		// the report is what the cost model says about the assignment
		PT_OK(shard_cost(&g.in, ha, &f, NULL, NULL));
		ck_assert_double_eq(f, hr.f);
		double tmax = 0;
		for (uint32_t t = 0; t < T; t++)
			tmax = tt[t] > tmax ? tt[t] : tmax;
		ck_assert_double_eq(tmax, hr.f);
		ck_assert_msg(hr.f >= br.f * (1 - REL),
		    "instance %d: F %.9g below OPT %.9g", n, hr.f, br.f);
		ck_assert_msg(hr.f <= 1.10 * br.f,
		    "instance %d: F %.9g > 1.10·OPT %.9g", n, hr.f, br.f);
		ck_assert_msg(hr.lb <= br.f * (1 + REL),
		    "instance %d: LB %.9g > OPT %.9g", n, hr.lb, br.f);
		ck_assert_double_eq(hr.lb, br.lb);
		ck_assert(hr.ratio >= 1 - REL);
		ck_assert(hr.f <= hr.greedy_f * (1 + REL));
		optimal += hr.f <= br.f * (1 + REL);
		*worst = fmax(*worst, hr.f / br.f);
	}
	ck_assert_int_gt(feasible, N_RANDOM / 2);
	return optimal;
}

// A failure means the heuristic is infeasible, beats the true optimum (a
// cost-model bug), or is more than 10% above it (model B).
START_TEST(test_solve_vs_brute_b)
{
	double worst;
	int    opt = run_vs_brute(SHARD_MODEL_B, &worst);
	// the reference simulation found 194/196 optimal with multi-start
	ck_assert_msg(opt >= N_RANDOM * 8 / 10, "only %d optimal (worst %g)",
	    opt, worst);
}
END_TEST

// Same under model A.
START_TEST(test_solve_vs_brute_a)
{
	double worst;
	int    opt = run_vs_brute(SHARD_MODEL_A, &worst);
	ck_assert_msg(opt >= N_RANDOM * 8 / 10, "only %d optimal (worst %g)",
	    opt, worst);
}
END_TEST

// A failure means greedy is not LPT: with L = 0 and identical links it
// must stay within Graham's bound 4/3 − 1/(3M) of the optimum, and match
// a textbook LPT exactly.
START_TEST(test_solve_graham)
{
	uint64_t                rng  = 42;
	struct shard_solve_opts only = SHARD_SOLVE_OPTS_INIT;
	only.starts                  = 0;
	only.max_passes              = 0;
	for (int n = 0; n < N_RANDOM; n++) {
		struct gen_inst g;
		size_t          S = 3 + gen_rand(&rng) % 6;
		uint32_t        M = 2 + (uint32_t) (gen_rand(&rng) % 2);
		uint32_t        T = 1 + (uint32_t) (gen_rand(&rng) % 3);
		gen_random(&g, &rng, S, M, T, SHARD_MODEL_B, 0);
		for (size_t j = 0; j < (size_t) T * M; j++) {
			g.lat[j] = 0;
			g.bw[j]  = 1e8;
		}
		// small integer sizes make LPT ties (and tie-breaking) common
		for (size_t i = 0; i < S; i++)
			g.size[i] = 1 + gen_rand(&rng) % 10;
		uint32_t            ha[GEN_MAX_S], ba[GEN_MAX_S];
		struct shard_report hr, br;
		PT_OK(shard_solve(&g.in, &only, ha, NULL, &hr));
		PT_OK(shard_solve_brute(&g.in, ba, NULL, &br));
		ck_assert_uint_eq(hr.passes, 0);
		ck_assert_uint_eq(hr.starts, 0);
		ck_assert_double_eq(hr.f, hr.greedy_f);
		double bound = 4.0 / 3.0 - 1.0 / (3.0 * M);
		ck_assert_msg(hr.f <= bound * br.f * (1 + REL),
		    "instance %d: LPT %g > %g·OPT %g", n, hr.f, bound, br.f);
		// textbook LPT: largest first (stable), to the least-loaded
		// server, lowest index on ties
		uint64_t load[GEN_MAX_M] = { 0 };
		int      used[GEN_MAX_S] = { 0 };
		for (size_t k = 0; k < S; k++) {
			size_t bi = SIZE_MAX;
			for (size_t i = 0; i < S; i++)
				if (!used[i] &&
				    (bi == SIZE_MAX || g.size[i] > g.size[bi]))
					bi = i;
			used[bi]   = 1;
			uint32_t m = 0;
			for (uint32_t q = 1; q < M; q++)
				if (load[q] < load[m])
					m = q;
			load[m] += g.size[bi];
			ck_assert_uint_eq(ha[bi], m);
		}
	}
}
END_TEST

// (a) A failure means the big shard was not put on the one close server
// that has room for just one shard.
START_TEST(test_solve_close_server)
{
	struct shard_inst in = SHARD_INST_INIT;
	// only one shard fits on server 0 (any two exceed 100000)
	uint64_t          size[] = { 60000, 100000, 60000, 60000, 60000 };
	uint64_t          cap[]  = { 100000, 0, 0 };
	double            lat[6], bw[6];
	for (int t = 0; t < 2; t++) {
		lat[t * 3 + 0] = 0.001, bw[t * 3 + 0] = 1e9; // close, fast
		lat[t * 3 + 1] = 0.1, bw[t * 3 + 1] = 1e6;
		lat[t * 3 + 2] = 0.1, bw[t * 3 + 2] = 1e6;
	}
	in.n_shards   = 5;
	in.n_servers  = 3;
	in.n_trainers = 2;
	in.size = size, in.cap = cap, in.lat = lat, in.bw = bw;
	for (int model = 0; model < 2; model++) {
		uint32_t            a[5], b[5];
		struct shard_report r;
		in.model = model;
		PT_OK(shard_solve(&in, NULL, a, NULL, &r));
		ck_assert_uint_eq(a[1], 0);
		for (int i = 0; i < 5; i++)
			if (i != 1)
				ck_assert_uint_ne(a[i], 0);
		PT_OK(shard_solve_brute(&in, b, NULL, NULL));
		ck_assert_uint_eq(b[1], 0);
		PT_OK(shard_assign_check(&in, a));
	}
}
END_TEST

// (b) A failure means model A with identical links does not cost every
// assignment the same (it must: Σ_i (L + ρ·b_i/B) does not depend on a).
START_TEST(test_solve_model_a_identical)
{
	struct shard_inst in     = SHARD_INST_INIT;
	uint64_t          size[] = { 100, 2000, 30000, 400000, 5 };
	double            lat[6], bw[6], f0 = -1, f, fs;
	for (int j = 0; j < 6; j++)
		lat[j] = 0.02, bw[j] = 5e6;
	in.n_shards = 5, in.n_servers = 3, in.n_trainers = 2;
	in.size = size, in.lat = lat, in.bw = bw;
	in.model      = SHARD_MODEL_A;
	uint32_t a[5] = { 0 };
	for (int n = 0; n < 243; n++) { // all 3^5 assignments
		int x = n;
		for (int i = 0; i < 5; i++, x /= 3)
			a[i] = (uint32_t) (x % 3);
		PT_OK(shard_cost(&in, a, &f, NULL, NULL));
		if (f0 < 0)
			f0 = f;
		ck_assert_double_eq_tol(f, f0, 1e-12);
	}
	struct shard_report r;
	PT_OK(shard_solve(&in, NULL, a, NULL, &r));
	ck_assert_double_eq_tol(r.f, f0, 1e-12);
	// ... and the bound is tight there
	ck_assert_double_eq_tol(r.lb, f0, 1e-12);
	PT_OK(shard_cost(&in, a, &f, &fs, NULL));
	ck_assert_double_eq_tol(fs, 2 * f0, 1e-12);
}
END_TEST

// (c) A failure means an infeasible instance crashed, succeeded, or wrote
// the outputs.
START_TEST(test_solve_infeasible)
{
	struct shard_inst   in     = SHARD_INST_INIT;
	uint64_t            size[] = { 600, 600, 600 };
	uint64_t            cap[]  = { 700, 700 };
	double              lat[] = { 0.01, 0.01 }, bw[] = { 1e6, 1e6 };
	uint32_t            a[3] = { 9, 9, 9 };
	struct shard_report r;
	memset(&r, 0x5a, sizeof(r));
	in.n_shards = 3, in.n_servers = 2, in.n_trainers = 1;
	in.size = size, in.cap = cap, in.lat = lat, in.bw = bw;
	// Σb = 1800 > ΣC = 1400
	PT_FAIL(shard_solve(&in, NULL, a, NULL, &r), FB_ENOSPC);
	PT_FAIL(shard_solve_brute(&in, a, NULL, &r), FB_ENOSPC);
	ck_assert_uint_eq(a[0], 9);
	ck_assert_uint_eq(r.starts, 0x5a5a5a5a);
	// Σb ≤ ΣC but the pieces do not pack: 600+600 > 1000, 600 > 500
	cap[0] = 1000, cap[1] = 500;
	size[2] = 10;
	PT_FAIL(shard_solve(&in, NULL, a, NULL, &r), FB_ENOSPC);
	PT_FAIL(shard_solve_brute(&in, a, NULL, &r), FB_ENOSPC);
	// a shard larger than every server
	size[0] = 5000, cap[0] = 4000, cap[1] = 4000;
	PT_FAIL(shard_solve(&in, NULL, a, NULL, &r), FB_ENOSPC);
	ck_assert_uint_eq(a[0], 9);
	// exactly full is feasible: 600 + 10 on one, 600 on the other
	size[0] = 600, cap[0] = 610, cap[1] = 600;
	PT_OK(shard_solve(&in, NULL, a, NULL, &r));
	PT_OK(shard_assign_check(&in, a));
}
END_TEST

// A failure means greedy got stuck on capacity and the first-fit-decreasing
// fallback did not rescue a tight but feasible instance.
START_TEST(test_solve_tight_capacity)
{
	// Greedy puts 6 on the fast server 1; then a 5 fits nowhere. FFD puts
	// 6 on server 0 (exactly full) and both 5s on server 1.
	struct shard_inst       in     = SHARD_INST_INIT;
	uint64_t                size[] = { 6, 5, 5 };
	uint64_t                cap[]  = { 6, 10 };
	double                  lat[] = { 0.05, 0.001 }, bw[] = { 1e2, 1e3 };
	uint32_t                a[3];
	struct shard_report     r;
	struct shard_solve_opts o = SHARD_SOLVE_OPTS_INIT;
	in.n_shards = 3, in.n_servers = 2, in.n_trainers = 1;
	in.size = size, in.cap = cap, in.lat = lat, in.bw = bw;
	o.starts = 0, o.max_passes = 0; // greedy or its FFD fallback alone
	PT_OK(shard_solve(&in, &o, a, NULL, &r));
	ck_assert_uint_eq(a[0], 0);
	ck_assert_uint_eq(a[1], 1);
	ck_assert_uint_eq(a[2], 1);
	ck_assert(isfinite(r.greedy_f));
	PT_OK(shard_solve(&in, NULL, a, NULL, NULL));
	PT_OK(shard_assign_check(&in, a));
}
END_TEST

// A failure means the same inputs and seed gave different placements.
START_TEST(test_solve_determinism)
{
	for (int model = 0; model < 2; model++) {
		uint64_t        rng = 7;
		struct gen_inst g, h;
		gen_random(&g, &rng, 40, 4, 3, model, 0.35);
		h = g;
		gen_reset(&h);
		uint32_t                a1[40], a2[40], a3[40];
		struct shard_report     r1, r2;
		struct shard_solve_opts o = SHARD_SOLVE_OPTS_INIT;
		o.seed                    = 99;
		PT_OK(shard_solve(&g.in, &o, a1, NULL, &r1));
		PT_OK(shard_solve(&h.in, &o, a2, NULL, &r2));
		ck_assert_mem_eq(a1, a2, sizeof(a1));
		ck_assert_mem_eq(&r1, &r2, sizeof(r1));
		ck_assert_uint_eq(r1.starts, 20);
		ck_assert(r1.f <= r1.greedy_f);
		ck_assert(r1.ratio >= 1);
		PT_OK(shard_assign_check(&g.in, a1));
		// another seed is still feasible and no worse than greedy
		o.seed = 100;
		PT_OK(shard_solve(&g.in, &o, a3, NULL, &r2));
		PT_OK(shard_assign_check(&g.in, a3));
		ck_assert(r2.f <= r2.greedy_f);
	}
}
END_TEST

// A failure means local search or multi-start made the result worse than
// greedy alone, or the pass cap was not honoured.
START_TEST(test_solve_improves)
{
	uint64_t rng = 11;
	for (int n = 0; n < 20; n++) {
		struct gen_inst g;
		gen_random(&g, &rng, 30, 5, 4, n % 2, 0);
		uint32_t                a[30];
		struct shard_report     rg, rl;
		struct shard_solve_opts o = SHARD_SOLVE_OPTS_INIT;
		o.starts = 0, o.max_passes = 0;
		PT_OK(shard_solve(&g.in, &o, a, NULL, &rg));
		o.max_passes = 3;
		PT_OK(shard_solve(&g.in, &o, a, NULL, &rl));
		ck_assert_uint_le(rl.passes, 3);
		ck_assert(rl.f <= rg.f);
		PT_OK(shard_solve(&g.in, NULL, a, NULL, &rl));
		ck_assert(rl.f <= rg.f);
		ck_assert_double_eq(rl.greedy_f, rg.f);
	}
}
END_TEST

// A failure means bad input was accepted or allocation failure crashed.
START_TEST(test_solve_bogus)
{
	uint64_t            rng = 3;
	struct gen_inst     g;
	uint32_t            a[8] = { 0 };
	struct shard_report r;
	gen_random(&g, &rng, 8, 2, 2, SHARD_MODEL_B, 0);
	PT_FAIL(shard_solve(&g.in, NULL, NULL, NULL, &r), FB_EINVAL);
	PT_FAIL(shard_solve(NULL, NULL, a, NULL, &r), FB_EINVAL);
	g.in.rho = -1;
	PT_FAIL(shard_solve(&g.in, NULL, a, NULL, &r), FB_EINVAL);
	g.in.rho = 2;
	fb_alloc_fail_after(0);
	int rv = shard_solve(&g.in, NULL, a, NULL, &r);
	fb_alloc_fail_after(-1);
	PT_FAIL(rv, FB_ENOMEM);
	PT_OK(shard_solve(&g.in, NULL, a, NULL, NULL)); // rep is optional
}
END_TEST

Suite *
suite_solve(void)
{
	Suite *s  = suite_create("solve");
	TCase *tc = tcase_create("solve");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_solve_vs_brute_b);
	tcase_add_test(tc, test_solve_vs_brute_a);
	tcase_add_test(tc, test_solve_graham);
	tcase_add_test(tc, test_solve_close_server);
	tcase_add_test(tc, test_solve_model_a_identical);
	tcase_add_test(tc, test_solve_infeasible);
	tcase_add_test(tc, test_solve_tight_capacity);
	tcase_add_test(tc, test_solve_determinism);
	tcase_add_test(tc, test_solve_improves);
	tcase_add_test(tc, test_solve_bogus);
	suite_add_tcase(s, tc);
	return s;
}
