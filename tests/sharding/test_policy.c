// test_policy.c — the scheduler's placement policy (policy.c): capacities
// from memory and copies, round-robin over live servers, the solver kept
// only on a clear gain, and the 10% rule for replacing a map in force.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <shard/shard.h>

#include "pt.h"
#include "sharding_tests.h"

// three_shards is 3 shards of 1 MB on 2 servers seen by 1 trainer with no
// latency: server 0 at 1 GB/s, server 1 at bw1. Round-robin puts 2 MB on
// server 0 (F = 4 ms at ρ = 2); moving a shard to a faster server 1 gives
// F = 4 MB / bw1.
struct three_shards {
	struct shard_inst in;
	uint64_t          size[3];
	double            lat[2], bw[2];
	uint64_t          cap[2];
	uint8_t           gone[2];
};

static void
three_shards_init(struct three_shards *t, double bw1)
{
	struct shard_inst in = SHARD_INST_INIT;
	memset(t, 0, sizeof(*t));
	t->size[0] = t->size[1] = t->size[2] = 1000000;
	t->bw[0]                             = 1e9;
	t->bw[1]                             = bw1;
	in.n_shards                          = 3;
	in.n_servers                         = 2;
	in.n_trainers                        = 1;
	in.size                              = t->size;
	in.lat                               = t->lat;
	in.bw                                = t->bw;
	t->in                                = in;
}

// A failure means capacities ignore the copies a server keeps, treat "no
// memory given" as bounded, or let a server that left take shards.
START_TEST(test_policy_caps)
{
	uint64_t mem[]  = { 0, 3000, 2999, 0, 5000 };
	uint8_t  gone[] = { 0, 0, 0, 1, 1 };
	uint64_t cap[5];
	int      bounded = -1;
	PT_OK(shard_policy_caps(5, mem, gone, 3.0, cap, &bounded));
	ck_assert_uint_eq(cap[0], UINT64_MAX);
	ck_assert_uint_eq(cap[1], 1000);
	ck_assert_uint_eq(cap[2], 999); // rounded down
	ck_assert_uint_eq(cap[3], 1);
	ck_assert_uint_eq(cap[4], 1);
	ck_assert_int_eq(bounded, 1);

	uint64_t none[] = { 0, 0 };
	uint8_t  live[] = { 0, 0 };
	PT_OK(shard_policy_caps(2, none, live, 2.5, cap, &bounded));
	ck_assert_uint_eq(cap[0], UINT64_MAX);
	ck_assert_uint_eq(cap[1], UINT64_MAX);
	ck_assert_int_eq(bounded, 0);
	live[1] = 1; // a server that left bounds the problem on its own
	PT_OK(shard_policy_caps(2, none, live, 2.5, cap, &bounded));
	ck_assert_uint_eq(cap[1], 1);
	ck_assert_int_eq(bounded, 1);
}
END_TEST

// A failure means shard_policy_caps accepts inputs it cannot use, or
// writes its outputs when it fails.
START_TEST(test_policy_caps_bogus)
{
	uint64_t mem[]   = { 100 };
	uint8_t  gone[]  = { 0 };
	uint64_t cap[1]  = { 42 };
	int      bounded = 42;
	PT_FAIL(shard_policy_caps(0, mem, gone, 2, cap, &bounded), FB_EINVAL);
	PT_FAIL(shard_policy_caps(1, NULL, gone, 2, cap, &bounded), FB_EINVAL);
	PT_FAIL(shard_policy_caps(1, mem, NULL, 2, cap, &bounded), FB_EINVAL);
	PT_FAIL(shard_policy_caps(1, mem, gone, 2, NULL, &bounded), FB_EINVAL);
	PT_FAIL(shard_policy_caps(1, mem, gone, 2, cap, NULL), FB_EINVAL);
	PT_FAIL(shard_policy_caps(1, mem, gone, 0.5, cap, &bounded),
	    FB_EINVAL);
	PT_FAIL(shard_policy_caps(1, mem, gone, NAN, cap, &bounded),
	    FB_EINVAL);
	PT_FAIL(shard_policy_caps(1, mem, gone, INFINITY, cap, &bounded),
	    FB_EINVAL);
	ck_assert_uint_eq(cap[0], 42);
	ck_assert_int_eq(bounded, 42);
}
END_TEST

// A failure means round-robin over live servers differs from
// shard_place_uniform when everyone is in, or puts a shard on a server
// that left, or does not spread over the rest in index order.
START_TEST(test_policy_place_live)
{
	uint8_t  all[4] = { 0, 0, 0, 0 };
	uint8_t  gone[] = { 0, 1, 0, 0 };
	uint32_t a[7], u[7];
	PT_OK(shard_place_live(7, 4, all, a));
	PT_OK(shard_place_uniform(7, 4, u));
	ck_assert_mem_eq(a, u, sizeof(a));
	PT_OK(shard_place_live(7, 4, gone, a));
	uint32_t want[] = { 0, 2, 3, 0, 2, 3, 0 };
	ck_assert_mem_eq(a, want, sizeof(want));
	uint8_t last[] = { 1, 1, 0 };
	PT_OK(shard_place_live(3, 3, last, a));
	ck_assert_uint_eq(a[0], 2);
	ck_assert_uint_eq(a[1], 2);
	ck_assert_uint_eq(a[2], 2);
	PT_OK(shard_place_live(0, 3, last, NULL)); // nothing to place
	uint8_t dead[] = { 1, 1 };
	PT_FAIL(shard_place_live(2, 2, dead, a), FB_EINVAL);
	PT_FAIL(shard_place_live(2, 0, all, a), FB_EINVAL);
	PT_FAIL(shard_place_live(2, 2, NULL, a), FB_EINVAL);
	PT_FAIL(shard_place_live(2, 2, all, NULL), FB_EINVAL);
}
END_TEST

// A failure means the map in force is replaced for a gain of 10% or
// less, kept for a gain above 10%, or replaced on a NaN.
START_TEST(test_policy_gains)
{
	ck_assert_int_eq(shard_policy_gains(0.89, 1.0), 1);
	ck_assert_int_eq(shard_policy_gains(0.91, 1.0), 0);
	ck_assert_int_eq(shard_policy_gains(0.9, 1.0), 0); // exactly 10%
	ck_assert_int_eq(shard_policy_gains(1.0, 1.0), 0);
	ck_assert_int_eq(shard_policy_gains(2.0, 1.0), 0);
	ck_assert_int_eq(shard_policy_gains(8.9e-3, 1e-2), 1);
	ck_assert_int_eq(shard_policy_gains(9.1e-3, 1e-2), 0);
	ck_assert_int_eq(shard_policy_gains(1.0, HUGE_VAL), 1);
	ck_assert_int_eq(shard_policy_gains(HUGE_VAL, HUGE_VAL), 0);
	ck_assert_int_eq(shard_policy_gains(NAN, 1.0), 0);
	ck_assert_int_eq(shard_policy_gains(1.0, NAN), 0);
}
END_TEST

// A failure means the latency-aware policy drops a solver answer that is
// clearly (17%) better than round-robin.
START_TEST(test_policy_solver_clear_gain)
{
	struct three_shards      t;
	struct shard_policy      p = { 1, 1, 7 };
	struct shard_policy_note n = { 1, 1, 1 };
	struct shard_report      r;
	uint32_t                 a[3], rr[3];
	double                   f_rr;
	three_shards_init(&t, 1.2e9);
	PT_OK(shard_policy_place(&t.in, t.gone, &p, a, &r, &n));
	ck_assert_int_eq(n.kept_rr, 0);
	ck_assert_uint_eq((a[0] == 1) + (a[1] == 1) + (a[2] == 1), 2);
	ck_assert_double_eq_tol(r.f, 4e6 / 1.2e9, 1e-12);
	PT_OK(shard_place_live(3, 2, t.gone, rr));
	PT_OK(shard_cost(&t.in, rr, &f_rr, NULL, NULL));
	ck_assert_double_eq_tol(f_rr, 4e-3, 1e-12);
	ck_assert(r.f < SHARD_POLICY_GAIN * f_rr);
}
END_TEST

// A failure means the latency-aware policy moves shards for a gain under
// 10% (5%) instead of keeping round-robin, or reports the solver's
// figures for the round-robin map it kept.
START_TEST(test_policy_solver_within_10pct)
{
	struct three_shards      t;
	struct shard_policy      p = { 1, 1, 7 };
	struct shard_policy_note n;
	struct shard_report      r;
	uint32_t                 a[3];
	uint32_t                 want[] = { 0, 1, 0 };
	three_shards_init(&t, 1.05e9);
	PT_OK(shard_policy_place(&t.in, t.gone, &p, a, &r, &n));
	ck_assert_int_eq(n.kept_rr, 1);
	ck_assert_mem_eq(a, want, sizeof(want));
	ck_assert_double_eq_tol(n.f_solver, 4e6 / 1.05e9, 1e-12);
	ck_assert_double_eq_tol(n.f_rr, 4e-3, 1e-12);
	ck_assert_double_eq_tol(r.f, 4e-3, 1e-12);
	ck_assert(r.lb > 0);
	ck_assert_double_eq_tol(r.ratio, r.f / r.lb, 1e-12);
	// The same answer with no note to fill in.
	PT_OK(shard_policy_place(&t.in, t.gone, &p, a, &r, NULL));
	ck_assert_mem_eq(a, want, sizeof(want));
}
END_TEST

// A failure means capacities (memory divided by copies) are not obeyed:
// round-robin over capacity must fail, and the solver must not fall back
// to a round-robin map that does not fit.
START_TEST(test_policy_capacity)
{
	struct three_shards      t;
	struct shard_policy      p = { 1, 1, 7 };
	struct shard_policy_note n;
	struct shard_report      r;
	uint32_t                 a[3];
	uint64_t                 mem[] = { 3000000, 6000000 };
	int                      bounded;
	// Server 0 fits one shard: round-robin (two there) is out, so the
	// solver's answer stands although it gains only 5%.
	three_shards_init(&t, 1.05e9);
	PT_OK(shard_policy_caps(2, mem, t.gone, 3.0, t.cap, &bounded));
	ck_assert_int_eq(bounded, 1);
	t.in.cap = t.cap;
	PT_OK(shard_policy_place(&t.in, t.gone, &p, a, &r, &n));
	ck_assert_int_eq(n.kept_rr, 0);
	ck_assert_uint_eq((a[0] == 0) + (a[1] == 0) + (a[2] == 0), 1);
	PT_OK(shard_assign_check(&t.in, a));
	p.solve = 0;
	PT_FAIL(shard_policy_place(&t.in, t.gone, &p, a, &r, &n), FB_ENOSPC);
	// Nothing fits 3 MB in 2 MB of capacity.
	t.cap[1] = 1000000;
	p.solve  = 1;
	PT_FAIL(shard_policy_place(&t.in, t.gone, &p, a, &r, &n), FB_ENOSPC);
	// Round-robin that fits is accepted.
	t.cap[0] = t.cap[1] = 2000000;
	p.solve             = 0;
	PT_OK(shard_policy_place(&t.in, t.gone, &p, a, &r, &n));
}
END_TEST

// A failure means a server that left still gets shards, from round-robin
// or from the solver (even when its links are the fastest), or that the
// report of a round-robin map is wrong or written when links are not
// measured.
START_TEST(test_policy_server_left)
{
	struct shard_inst   in     = SHARD_INST_INIT;
	uint64_t            size[] = { 100, 100, 100, 100, 100 };
	uint64_t            mem[]  = { 0, 0, 0 };
	uint64_t            cap[3];
	uint8_t             gone[] = { 0, 1, 0 };
	double              lat[]  = { 1e-3, 1e-4, 1e-3 };
	double              bw[]   = { 1e6, 1e9, 1e6 };
	struct shard_policy p      = { 0, 1, 7 };
	struct shard_report r;
	uint32_t            a[5];
	uint32_t            want[] = { 0, 2, 0, 2, 0 };
	int                 bounded;
	double              f;
	in.n_shards = 5, in.n_servers = 3, in.n_trainers = 1;
	in.size = size, in.lat = lat, in.bw = bw;
	PT_OK(shard_policy_caps(3, mem, gone, 4.0, cap, &bounded));
	in.cap = bounded ? cap : NULL;
	ck_assert_ptr_nonnull(in.cap);

	PT_OK(shard_policy_place(&in, gone, &p, a, &r, NULL));
	ck_assert_mem_eq(a, want, sizeof(want));
	PT_OK(shard_cost(&in, a, &f, NULL, NULL));
	ck_assert_double_eq_tol(r.f, f, 1e-15);
	ck_assert(r.lb > 0 && r.lb <= r.f);
	ck_assert_double_eq_tol(r.ratio, r.f / r.lb, 1e-12);
	ck_assert_uint_eq(r.passes, 0);

	p.measured = 0; // unmeasured links: the report stays as it was
	memset(&r, 0, sizeof(r));
	r.f = 42;
	PT_OK(shard_policy_place(&in, gone, &p, a, &r, NULL));
	ck_assert_mem_eq(a, want, sizeof(want));
	ck_assert_double_eq(r.f, 42);

	p.solve = 1, p.measured = 1;
	PT_OK(shard_policy_place(&in, gone, &p, a, &r, NULL));
	for (size_t i = 0; i < 5; i++) {
		ck_assert_uint_ne(a[i], 1);
	}
}
END_TEST

// A failure means shard_policy_place accepts inputs it cannot use or
// hides an allocation failure of the solver.
START_TEST(test_policy_place_bogus)
{
	struct three_shards      t;
	struct shard_policy      p = { 1, 1, 7 };
	struct shard_policy_note n;
	struct shard_report      r;
	uint32_t                 a[3];
	three_shards_init(&t, 1.2e9);
	PT_FAIL(shard_policy_place(NULL, t.gone, &p, a, &r, &n), FB_EINVAL);
	PT_FAIL(shard_policy_place(&t.in, NULL, &p, a, &r, &n), FB_EINVAL);
	PT_FAIL(shard_policy_place(&t.in, t.gone, NULL, a, &r, &n), FB_EINVAL);
	PT_FAIL(shard_policy_place(&t.in, t.gone, &p, NULL, &r, &n),
	    FB_EINVAL);
	PT_FAIL(shard_policy_place(&t.in, t.gone, &p, a, NULL, &n), FB_EINVAL);
	t.in.n_trainers = 0;
	PT_FAIL(shard_policy_place(&t.in, t.gone, &p, a, &r, &n), FB_EINVAL);
	t.in.n_trainers = 1;
	t.bw[1]         = 0; // a link that was never measured
	PT_FAIL(shard_policy_place(&t.in, t.gone, &p, a, &r, &n), FB_EINVAL);
	t.bw[1]   = 1.2e9;
	t.gone[0] = t.gone[1] = 1;
	p.solve               = 0;
	PT_FAIL(shard_policy_place(&t.in, t.gone, &p, a, &r, &n), FB_EINVAL);
	t.gone[0] = t.gone[1] = 0;
	p.solve               = 1;
	fb_alloc_fail_after(0);
	int rv = shard_policy_place(&t.in, t.gone, &p, a, &r, &n);
	fb_alloc_fail_after(-1);
	PT_FAIL(rv, FB_ENOMEM);
}
END_TEST

Suite *
suite_policy(void)
{
	Suite *s  = suite_create("policy");
	TCase *tc = tcase_create("policy");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_policy_caps);
	tcase_add_test(tc, test_policy_caps_bogus);
	tcase_add_test(tc, test_policy_place_live);
	tcase_add_test(tc, test_policy_gains);
	tcase_add_test(tc, test_policy_solver_clear_gain);
	tcase_add_test(tc, test_policy_solver_within_10pct);
	tcase_add_test(tc, test_policy_capacity);
	tcase_add_test(tc, test_policy_server_left);
	tcase_add_test(tc, test_policy_place_bogus);
	suite_add_tcase(s, tc);
	return s;
}
