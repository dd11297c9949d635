// test_attack.c — the trainer's attacks (attack.c; benchmarks and tests
// of robust aggregation only): --attack specs good and bad (with what the
// message names), each transform exact on a small known gradient, the
// falsified pushes' draw reproducible from (seed, rank, step) and near
// --attack-rate, the lazy ring's order, label flips on falsified steps
// only, and the loops --attack is refused with.
#include <math.h>
#include <string.h>

#include "attack.h"
#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

#define ARGC(v) ((int) (sizeof(v) / sizeof((v)[0])))

// make_grad lays out two tensors of 5 and 3 floats (aligned apart, as the
// trainer's), each coordinate base + a small distinct value.
static void
make_grad(struct tr_params *p, float base)
{
	memset(p, 0, sizeof(*p));
	p->n_tensors = 2;
	p->len[0]    = 5;
	p->len[1]    = 3;
	PT_OK(tr__params_alloc(p));
	for (size_t t = 0; t < 2; t++) {
		for (size_t i = 0; i < p->len[t]; i++) {
			p->t[t][i] = base +
			    (float) sin((double) (t * 7 + i + 1)) * 0.75f;
		}
	}
}

// setup parses spec and makes its state for gradients shaped as g
// (batch 8, seed 42, rank 3, rate `rate`, no data set).
static void
setup(struct tr__attack *a, const char *spec, double rate,
    const struct tr_params *g)
{
	struct tr__attack_spec sp;
	char                   err[256] = "";
	ck_assert_msg(tr__attack_parse(spec, &sp, err, sizeof(err)) == FB_OK,
	    "%s: %s", spec, err);
	PT_OK(tr__attack_init(a, &sp, rate, 42, 3, 8, g, NULL, err,
	    sizeof(err)));
}

START_TEST(test_attack_parse_good)
{
	static const struct {
		const char          *spec;
		enum tr__attack_kind kind;
		double               param;
		uint32_t             lag;
	} cases[] = {
		{ "none", TR__ATTACK_NONE, 0, 0 },
		{ "sign-flip", TR__ATTACK_SIGN_FLIP, 0, 0 },
		{ "scale:-10", TR__ATTACK_SCALE, -10, 0 },
		{ "scale:2.5", TR__ATTACK_SCALE, 2.5, 0 },
		{ "noise:0.5", TR__ATTACK_NOISE, 0.5, 0 },
		{ "alie:1.5", TR__ATTACK_ALIE, 1.5, 0 },
		{ "ipm:0.1", TR__ATTACK_IPM, 0.1, 0 },
		{ "label-flip", TR__ATTACK_LABEL_FLIP, 0, 0 },
		{ "lazy:3", TR__ATTACK_LAZY, 3, 3 },
		{ "lazy:1024", TR__ATTACK_LAZY, 1024, 1024 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tr__attack_spec sp;
		char                   err[256] = "";
		ck_assert_msg(tr__attack_parse(cases[i].spec, &sp, err,
		                  sizeof(err)) == FB_OK,
		    "%s: %s", cases[i].spec, err);
		ck_assert_int_eq(sp.kind, cases[i].kind);
		ck_assert(sp.param == cases[i].param);
		ck_assert_uint_eq(sp.lag, cases[i].lag);
	}
}
END_TEST

// Bad specs are refused with a message that names what is wrong, and
// leave the output alone.
START_TEST(test_attack_parse_bad)
{
	static const char *cases[][2] = {
		{ "", "empty" },
		{ "bogus", "unknown attack; one of none, sign-flip" },
		{ "sign", "unknown attack" },
		{ "sign-flip:2", "sign-flip takes no parameter" },
		{ "label-flip:", "label-flip takes no parameter" },
		{ "scale", "needs a value (scale:VALUE)" },
		{ "scale:", "needs a value" },
		{ "scale:abc", "'abc' is not a finite number" },
		{ "scale:1x", "'1x' is not a finite number" },
		{ "scale:inf", "not a finite number" },
		{ "noise:nan", "not a finite number" },
		{ "scale:1e999", "not a finite number" },
		{ "noise:-1", "standard deviation must be >= 0" },
		{ "alie:-0.5", "z must be >= 0" },
		{ "ipm:0", "epsilon must be > 0" },
		{ "ipm:-1", "epsilon must be > 0" },
		{ "lazy:0", "L must be a whole number of steps, 1..1024" },
		{ "lazy:2.5", "whole number" },
		{ "lazy:1025", "1..1024" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tr__attack_spec sp       = { .kind = TR__ATTACK_LAZY,
			      .lag                        = 77 };
		char                   err[256] = "";
		PT_FAIL(tr__attack_parse(cases[i][0], &sp, err, sizeof(err)),
		    FB_EINVAL);
		ck_assert_msg(strstr(err, cases[i][1]) != NULL,
		    "'%s': message '%s' lacks '%s'", cases[i][0], err,
		    cases[i][1]);
		ck_assert_uint_eq(sp.lag, 77);
	}
	PT_FAIL(
	    tr__attack_parse(NULL, &(struct tr__attack_spec) { 0 }, NULL, 0),
	    FB_EINVAL);
}
END_TEST

// sign-flip and scale:S are exact float products; an honest step is left
// alone and not counted.
START_TEST(test_attack_linear)
{
	static const struct {
		const char *spec;
		float       f;
	} cases[] = {
		{ "sign-flip", -1.0f },
		{ "scale:-10", -10.0f },
		{ "scale:3", 3.0f },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct tr_params  g, h;
		struct tr__attack a;
		make_grad(&g, 0.25f);
		make_grad(&h, 0.25f);
		setup(&a, cases[c].spec, 1.0, &g);
		tr__attack_apply(&a, 5, 0, &g);
		for (size_t t = 0; t < 2; t++) {
			ck_assert_mem_eq(g.t[t], h.t[t],
			    g.len[t] * sizeof(float));
		}
		ck_assert_uint_eq(a.attacked, 0);
		tr__attack_apply(&a, 5, 1, &g);
		for (size_t t = 0; t < 2; t++) {
			for (size_t i = 0; i < g.len[t]; i++) {
				ck_assert_msg(g.t[t][i] ==
				        cases[c].f * h.t[t][i],
				    "%s: [%zu][%zu] %.9g", cases[c].spec, t, i,
				    (double) g.t[t][i]);
			}
		}
		ck_assert_uint_eq(a.attacked, 1);
		tr__attack_fini(&a);
		tr_params_fini(&g);
		tr_params_fini(&h);
	}
}
END_TEST

// noise:SIGMA adds sigma * batch times the step's normals, tensor after
// tensor, from the (seed, rank, step) noise stream: exact, and the same
// again for the same step.
START_TEST(test_attack_noise)
{
	struct tr_params  g, h;
	struct tr__attack a;
	struct tr_rng     r;
	make_grad(&g, 1.0f);
	make_grad(&h, 1.0f);
	setup(&a, "noise:0.5", 1.0, &g);
	tr__attack_apply(&a, 17, 1, &g);
	tr__attack_rng(&r, 42, 3, 17, TR__ATTACK_STREAM_NOISE);
	for (size_t t = 0; t < 2; t++) {
		for (size_t i = 0; i < g.len[t]; i++) {
			float want = h.t[t][i] +
			    (float) (0.5 * 8.0 * (double) tr_rng_normal(&r));
			ck_assert(g.t[t][i] == want);
			ck_assert(g.t[t][i] != h.t[t][i]);
		}
	}
	// Step 18 draws other noise; step 17 again the same.
	struct tr_params g2, g3;
	make_grad(&g2, 1.0f);
	make_grad(&g3, 1.0f);
	tr__attack_apply(&a, 18, 1, &g2);
	tr__attack_apply(&a, 17, 1, &g3);
	ck_assert(memcmp(g2.t[0], g.t[0], 5 * sizeof(float)) != 0);
	ck_assert_mem_eq(g3.t[0], g.t[0], 5 * sizeof(float));
	ck_assert_mem_eq(g3.t[1], g.t[1], 3 * sizeof(float));
	tr__attack_fini(&a);
	tr_params_fini(&g);
	tr_params_fini(&h);
	tr_params_fini(&g2);
	tr_params_fini(&g3);

	// Over many coordinates the added noise has sd sigma * batch.
	struct tr_params big = { .n_tensors = 1, .len = { 100000 } };
	PT_OK(tr__params_alloc(&big));
	setup(&a, "noise:0.25", 1.0, &big);
	tr__attack_apply(&a, 3, 1, &big);
	double s = 0, s2 = 0;
	for (size_t i = 0; i < big.len[0]; i++) {
		s += big.t[0][i];
		s2 += (double) big.t[0][i] * big.t[0][i];
	}
	double mean = s / 1e5, sd = sqrt(s2 / 1e5 - mean * mean);
	ck_assert_msg(fabs(mean) < 0.05 && fabs(sd - 2.0) < 0.05,
	    "mean %g sd %g (want 0, 2)", mean, sd);
	tr__attack_fini(&a);
	tr_params_fini(&big);
}
END_TEST

// alie:Z pushes mu - Z * sigma of the step's and the 3 further batches'
// gradients, per coordinate (sigma unbiased), against a double reference.
START_TEST(test_attack_alie)
{
	struct tr_params  g, h[4];
	struct tr__attack a;
	make_grad(&g, 0.0f);
	setup(&a, "alie:1.5", 1.0, &g);
	ck_assert_uint_eq(tr__attack_more(&a, 1), 3);
	ck_assert_uint_eq(tr__attack_more(&a, 0), 0);
	for (size_t k = 0; k < 4; k++) {
		make_grad(&h[k], (float) k * 0.5f - 0.3f);
		h[k].t[1][2] = k == 2 ? 9.0f : -1.0f; // an outlying batch
	}
	for (size_t t = 0; t < 2; t++) {
		memcpy(g.t[t], h[0].t[t], g.len[t] * sizeof(float));
		for (size_t k = 1; k < 4; k++) {
			memcpy(a.more[k - 1].t[t], h[k].t[t],
			    g.len[t] * sizeof(float));
		}
	}
	tr__attack_apply(&a, 0, 1, &g);
	for (size_t t = 0; t < 2; t++) {
		for (size_t i = 0; i < g.len[t]; i++) {
			double mu = 0, var = 0;
			for (size_t k = 0; k < 4; k++) {
				mu += h[k].t[t][i];
			}
			mu /= 4;
			for (size_t k = 0; k < 4; k++) {
				var += (h[k].t[t][i] - mu) *
				    (h[k].t[t][i] - mu);
			}
			float want = (float) (mu - 1.5 * sqrt(var / 3));
			ck_assert_msg(g.t[t][i] == want,
			    "[%zu][%zu] %.9g %.9g", t, i, (double) g.t[t][i],
			    (double) want);
		}
	}
	// The outlying coordinate: mu 1.5, sigma 5 -> 1.5 - 1.5 * 5.
	ck_assert(g.t[1][2] == -6.0f);
	tr__attack_fini(&a);
	tr_params_fini(&g);
	for (size_t k = 0; k < 4; k++) {
		tr_params_fini(&h[k]);
	}
}
END_TEST

// ipm:EPS pushes -EPS times the mean of the step's and the next batches'
// gradients (its estimate of the honest mean), per coordinate in double:
// exact, and not the step's own gradient scaled.
START_TEST(test_attack_ipm)
{
	struct tr_params  g, h[4];
	struct tr__attack a;
	make_grad(&g, 0.0f);
	setup(&a, "ipm:4", 1.0, &g);
	ck_assert_uint_eq(tr__attack_more(&a, 1), 3);
	ck_assert_uint_eq(tr__attack_more(&a, 0), 0);
	for (size_t k = 0; k < 4; k++) {
		make_grad(&h[k], (float) k * 0.5f - 0.3f);
	}
	for (size_t t = 0; t < 2; t++) {
		memcpy(g.t[t], h[0].t[t], g.len[t] * sizeof(float));
		for (size_t k = 1; k < 4; k++) {
			memcpy(a.more[k - 1].t[t], h[k].t[t],
			    g.len[t] * sizeof(float));
		}
	}
	tr__attack_apply(&a, 0, 1, &g);
	int differs = 0;
	for (size_t t = 0; t < 2; t++) {
		for (size_t i = 0; i < g.len[t]; i++) {
			double mu = h[0].t[t][i];
			for (size_t k = 1; k < 4; k++) {
				mu += h[k].t[t][i];
			}
			float want = (float) (-4.0 * (mu / 4.0));
			ck_assert_msg(g.t[t][i] == want,
			    "[%zu][%zu] %.9g %.9g", t, i, (double) g.t[t][i],
			    (double) want);
			differs |= g.t[t][i] != -4.0f * h[0].t[t][i];
		}
	}
	ck_assert_msg(differs, "ipm pushed the step's own gradient scaled");
	ck_assert_uint_eq(a.attacked, 1);
	tr__attack_fini(&a);
	tr_params_fini(&g);
	for (size_t k = 0; k < 4; k++) {
		tr_params_fini(&h[k]);
	}
}
END_TEST

// The draw depends on (seed, rank, step) alone, and falsifies about
// --attack-rate of the steps; rate 0 none, rate 1 all, honest none.
START_TEST(test_attack_rate)
{
	struct tr_params  g;
	struct tr__attack a, b, c;
	make_grad(&g, 0.0f);
	setup(&a, "sign-flip", 0.1, &g);
	setup(&b, "scale:2", 0.1, &g); // same seed and rank: same draws
	setup(&c, "sign-flip", 0.1, &g);
	c.rank     = 4;
	uint64_t n = 0, same_rank = 0, other_rank = 0, runs = 0;
	int      was = 0;
	for (uint64_t s = 0; s < 100000; s++) {
		int f = tr__attack_falsify(&a, s);
		n += (uint64_t) f;
		same_rank += f == tr__attack_falsify(&b, s);
		other_rank += f && tr__attack_falsify(&c, s);
		runs += f && was;
		was = f;
		ck_assert_int_eq(f, tr__attack_falsify(&a, s));
	}
	ck_assert_msg(n > 9700 && n < 10300, "%llu of 100000 at 0.1",
	    (unsigned long long) n);
	ck_assert_uint_eq(same_rank, 100000);
	// Another rank's draws are independent: about 0.1 * 0.1 overlap,
	// and so are consecutive steps.
	ck_assert_msg(other_rank > 800 && other_rank < 1200, "%llu",
	    (unsigned long long) other_rank);
	ck_assert_msg(runs > 800 && runs < 1200, "%llu",
	    (unsigned long long) runs);
	// Another seed draws otherwise.
	b.seed       = 43;
	uint64_t dif = 0;
	for (uint64_t s = 0; s < 1000; s++) {
		dif += tr__attack_falsify(&a, s) != tr__attack_falsify(&b, s);
	}
	ck_assert_uint_gt(dif, 100);
	a.rate = 0;
	b.rate = 1;
	for (uint64_t s = 0; s < 1000; s++) {
		ck_assert(!tr__attack_falsify(&a, s));
		ck_assert(tr__attack_falsify(&b, s));
	}
	tr__attack_fini(&a);
	tr__attack_fini(&b);
	tr__attack_fini(&c);
	struct tr__attack honest = { 0 };
	honest.rate              = 1;
	ck_assert(!tr__attack_falsify(&honest, 0));
	ck_assert(!tr__attack_on(&honest));
	tr_params_fini(&g);
}
END_TEST

// lazy:L pushes the gradient of step max(0, s - L); honest steps push
// their own and are recorded all the same.
START_TEST(test_attack_lazy)
{
	struct tr_params  g;
	struct tr__attack a;
	make_grad(&g, 0.0f);
	setup(&a, "lazy:3", 1.0, &g);
	// Step s's honest gradient is s in every coordinate; at steps 4
	// and 8 the push is honest.
	for (int s = 0; s < 12; s++) {
		int bad = s != 4 && s != 8;
		for (size_t t = 0; t < 2; t++) {
			for (size_t i = 0; i < g.len[t]; i++) {
				g.t[t][i] = (float) s;
			}
		}
		tr__attack_apply(&a, (uint64_t) s, bad, &g);
		float want = bad ? (float) (s > 3 ? s - 3 : 0) : (float) s;
		for (size_t t = 0; t < 2; t++) {
			for (size_t i = 0; i < g.len[t]; i++) {
				ck_assert_msg(g.t[t][i] == want,
				    "step %d: %g, want %g", s,
				    (double) g.t[t][i], (double) want);
			}
		}
	}
	ck_assert_uint_eq(a.attacked, 10);
	tr__attack_fini(&a);
	tr_params_fini(&g);
}
END_TEST

// label-flip computes falsified steps' gradients on labels
// classes - 1 - y (same pixels), honest steps on the honest set.
START_TEST(test_attack_label_flip)
{
	struct tr_dataset      ds = { 0 };
	struct tr_params       g;
	struct tr__attack      a;
	struct tr__attack_spec sp;
	char                   err[256] = "";
	make_grad(&g, 0.0f);
	PT_OK(tr_dataset_synthetic(&ds, 200, 4, 10, 7));
	PT_OK(tr__attack_parse("label-flip", &sp, err, sizeof(err)));
	PT_OK(
	    tr__attack_init(&a, &sp, 0.5, 1, 0, 8, &g, &ds, err, sizeof(err)));
	ck_assert_uint_eq(tr__attack_more(&a, 1), 0);
	int seen[2] = { 0, 0 };
	for (uint64_t s = 0; s < 64; s++) {
		int                      bad = tr__attack_falsify(&a, s);
		const struct tr_dataset *d   = tr__attack_data(&a, &ds, bad);
		seen[bad]++;
		ck_assert_ptr_eq(d->x, ds.x);
		ck_assert_uint_eq(d->n, ds.n);
		ck_assert_int_eq(d->classes, 10);
		for (size_t i = 0; i < ds.n; i++) {
			ck_assert_int_eq(d->y[i], bad ? 9 - ds.y[i] : ds.y[i]);
		}
	}
	ck_assert(seen[0] > 10 && seen[1] > 10);
	tr__attack_fini(&a);
	// Another attack never swaps the data set.
	setup(&a, "sign-flip", 1.0, &g);
	ck_assert_ptr_eq(tr__attack_data(&a, &ds, 1), &ds);
	tr__attack_fini(&a);
	tr_dataset_fini(&ds);
	tr_params_fini(&g);
}
END_TEST

// --attack is checked at start, handed to libferry (declared on
// Register), and refused beside the loops it cannot falsify.
START_TEST(test_attack_config)
{
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	ck_assert_str_eq(c.fo.attack, "none");
	char *ok[] = { "trainer", "--attack", "alie:1", "--attack-rate",
		"0.25", "--mode", "async" };
	PT_OK(tr_config_parse(&c, ARGC(ok), ok, err, sizeof(err)));
	ck_assert_str_eq(c.fo.attack, "alie:1");
	ck_assert(c.attack_rate == 0.25);
	tr_config_fini(&c);

	static const char *bad[][4] = {
		{ "--attack", "scale:x", "--mode", "sync" },
		{ "--attack", "sign-flip", "--overlap", "1" },
		{ "--attack", "sign-flip", "--overlap-layers", "1" },
		{ "--attack", "sign-flip", "--local-steps", "4" },
		{ "--attack", "sign-flip", "--leases", "on" },
		{ "--attack", "sign-flip", "--verify", "1" },
		{ "--attack", "sign-flip", "--attack-rate", "1.5" },
	};
	static const char *why[] = { "'x' is not a finite number",
		"not with --overlap 1", "not with --overlap-layers 1",
		"not with --local-steps", "not with --leases on",
		"not with --verify 1", "attack-rate" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *argv[] = { "trainer", (char *) bad[i][0],
			(char *) bad[i][1], (char *) bad[i][2],
			(char *) bad[i][3] };
		tr_config_defaults(&c);
		ck_assert_msg(tr_config_parse(&c, ARGC(argv), argv, err,
		                  sizeof(err)) != FB_OK,
		    "%s %s accepted", bad[i][1], bad[i][2]);
		ck_assert_msg(strstr(err, why[i]) != NULL, "'%s' lacks '%s'",
		    err, why[i]);
		tr_config_fini(&c);
	}
	// None runs with anything.
	char *none[] = { "trainer", "--attack", "none", "--overlap", "1" };
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, ARGC(none), none, err, sizeof(err)));
	tr_config_fini(&c);
}
END_TEST

Suite *
suite_attack(void)
{
	Suite *s  = suite_create("attack");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_attack_parse_good);
	tcase_add_test(tc, test_attack_parse_bad);
	tcase_add_test(tc, test_attack_linear);
	tcase_add_test(tc, test_attack_noise);
	tcase_add_test(tc, test_attack_alie);
	tcase_add_test(tc, test_attack_ipm);
	tcase_add_test(tc, test_attack_rate);
	tcase_add_test(tc, test_attack_lazy);
	tcase_add_test(tc, test_attack_label_flip);
	tcase_add_test(tc, test_attack_config);
	suite_add_tcase(s, tc);
	return s;
}
