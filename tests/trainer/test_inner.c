// test_inner.c — the inner optimizer of local steps (inner.c): SGD and
// the accumulator exact (H = 1 pushes the plain loop's gradient bytes),
// momentum, nesterov and adamw against a plain double reference of the
// contract's maths (docs/algorithms.md §7), over steps whose lr and batch
// change (c_k != 1) and a pseudo-gradient of a partial phase.
#include <math.h>
#include <string.h>

#include "inner.h"
#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

#define STEPS 5
#define B 8

// make_params lays out two tensors of 5 and 3 floats (aligned apart, as
// the trainer's), filled from seed.
static void
make_params(struct tr_params *p, int seed)
{
	memset(p, 0, sizeof(*p));
	p->n_tensors = 2;
	p->len[0]    = 5;
	p->len[1]    = 3;
	PT_OK(tr__params_alloc(p));
	for (size_t i = 0; i < 2; i++) {
		for (size_t j = 0; j < p->len[i]; j++) {
			double v = sin(
			    (double) (seed * 31 + (int) (i * 7 + j)));
			p->t[i][j] = (float) (v * (seed ? 3.0 : 0.5));
		}
	}
}

// opts is an inner optimizer's flags: kind at lr 0.1, a step schedule
// halving every 2 steps (so eta_k changes), weight decay wd.
static struct ferry_opts
opts(const char *kind, double wd)
{
	struct ferry_opts fo = FERRY_OPTS_INIT;
	fo.optimizer         = kind;
	fo.lr                = 0.1;
	fo.momentum          = 0.9;
	fo.weight_decay      = wd;
	fo.lr_schedule       = "step";
	fo.lr_step_every     = 2;
	fo.lr_gamma          = 0.5;
	return fo;
}

// SGD with a constant lr and full batches: the weights move with the
// server's float arithmetic and A is the gradient bit for bit after one
// step (P is A itself), the float sum of the gradients after two.
START_TEST(test_inner_sgd_exact)
{
	struct ferry_opts fo = FERRY_OPTS_INIT;
	struct tr__inner  in;
	struct tr_params  w, ref, g1, g2;
	char              why[128];
	fo.optimizer = "sgd";
	fo.lr        = 0.1;
	make_params(&w, 0);
	make_params(&ref, 0);
	make_params(&g1, 1);
	make_params(&g2, 2);
	PT_OK(tr__inner_init(&in, &fo, B, &w, why, sizeof(why)));
	tr__inner_step(&in, &w, &g1, B, 0);
	float scale = (float) (0.1 * (1.0 / (double) B));
	for (size_t i = 0; i < 2; i++) {
		for (size_t j = 0; j < w.len[i]; j++) {
			ref.t[i][j] -= scale * g1.t[i][j];
		}
		ck_assert(memcmp(w.t[i], ref.t[i], w.len[i] * 4) == 0);
		ck_assert(memcmp(in.acc.t[i], g1.t[i], w.len[i] * 4) == 0);
	}
	ck_assert_ptr_eq(tr__inner_pseudo(&in, B), &in.acc);
	tr__inner_step(&in, &w, &g2, B, 1);
	const struct tr_params *p = tr__inner_pseudo(&in, 2 * B);
	for (size_t i = 0; i < 2; i++) {
		for (size_t j = 0; j < w.len[i]; j++) {
			float a = g1.t[i][j] + g2.t[i][j];
			ck_assert(in.acc.t[i][j] == a);
			ck_assert(p->t[i][j] == 2.0f * a);
		}
	}
	// A reset: the next step stores, the state-free SGD has no more.
	tr__inner_reset(&in);
	tr__inner_step(&in, &w, &g2, B, 2);
	ck_assert(memcmp(in.acc.t[0], g2.t[0], w.len[0] * 4) == 0);
	tr__inner_fini(&in);
	tr_params_fini(&w);
	tr_params_fini(&ref);
	tr_params_fini(&g1);
	tr_params_fini(&g2);
}
END_TEST

// reference runs the contract's maths in double for kind over STEPS
// steps of gradients g (per step, summed over bk[k] samples) from w0:
// the final weights into x and P = (n/B) sum c_k d_k into p (flat).
static void
reference(int kind, double wd, const float *w0, float g[STEPS][8],
    const size_t *bk, double *x, double *p, size_t n)
{
	double s1[8] = { 0 }, s2[8] = { 0 }, acc[8] = { 0 };
	double mu = 0.9, b1 = 0.9, b2 = 0.999, eps = 1e-8;
	size_t samples = 0;
	for (size_t j = 0; j < n; j++) {
		x[j] = w0[j];
	}
	for (int k = 0; k < STEPS; k++) {
		double eta = 0.1 * pow(0.5, (double) (k / 2));
		double b   = (double) bk[k];
		double c   = (eta / 0.1) * ((double) B / b);
		samples += bk[k];
		for (size_t j = 0; j < n; j++) {
			double gj = g[k][j], d;
			if (kind == FB_OPTIM_ADAMW) {
				double gs = gj / b;
				s1[j]     = b1 * s1[j] + (1 - b1) * gs;
				s2[j]     = b2 * s2[j] + (1 - b2) * gs * gs;
				double mh = s1[j] / (1 - pow(b1, k + 1));
				double vh = s2[j] / (1 - pow(b2, k + 1));
				d = b * (mh / (sqrt(vh) + eps) + wd * x[j]);
			} else {
				gj += wd * b * x[j];
				s1[j] = mu * s1[j] + gj;
				d     = kind == FB_OPTIM_MOMENTUM
				        ? s1[j]
				        : gj + mu * s1[j];
			}
			x[j] -= eta / b * d;
			acc[j] += c * d;
		}
	}
	for (size_t j = 0; j < n; j++) {
		p[j] = (double) samples / B * acc[j];
	}
}

// Momentum, nesterov and adamw (with weight decay) over steps whose lr
// halves and whose batch changes: weights and P within float rounding of
// the double reference.
START_TEST(test_inner_stateful_vs_reference)
{
	static const char *const kinds[] = { "momentum", "nesterov", "adamw" };
	static const int ids[]     = { FB_OPTIM_MOMENTUM, FB_OPTIM_NESTEROV,
		    FB_OPTIM_ADAMW };
	const size_t     bk[STEPS] = { B, B, 3, B, 5 };
	for (int kind = 0; kind < 3; kind++) {
		struct ferry_opts fo = opts(kinds[kind], 0.01);
		struct tr__inner  in;
		struct tr_params  w, g;
		float             w0[8], gs[STEPS][8];
		double            x[8], p[8];
		char              why[128];
		size_t            n = 0;
		make_params(&w, 0);
		make_params(&g, 0);
		for (size_t i = 0, f = 0; i < 2; i++) {
			for (size_t j = 0; j < w.len[i]; j++) {
				w0[f++] = w.t[i][j];
			}
		}
		PT_OK(tr__inner_init(&in, &fo, B, &w, why, sizeof(why)));
		for (int k = 0; k < STEPS; k++) {
			tr_params_fini(&g);
			make_params(&g, k + 1);
			for (size_t i = 0, f = 0; i < 2; i++) {
				for (size_t j = 0; j < g.len[i]; j++) {
					gs[k][f++] = g.t[i][j];
				}
			}
			tr__inner_step(&in, &w, &g, bk[k], (uint64_t) k);
			n += bk[k];
		}
		reference(ids[kind], 0.01, w0, gs, bk, x, p, 8);
		const struct tr_params *pp = tr__inner_pseudo(&in, n);
		for (size_t i = 0, f = 0; i < 2; i++) {
			for (size_t j = 0; j < w.len[i]; j++, f++) {
				ck_assert_msg(fabs(w.t[i][j] - x[f]) <=
				        1e-5 * (1 + fabs(x[f])),
				    "%s: w[%zu] %.9g vs %.9g", kinds[kind], f,
				    w.t[i][j], x[f]);
				ck_assert_msg(fabs(pp->t[i][j] - p[f]) <=
				        1e-5 * (1 + fabs(p[f])),
				    "%s: P[%zu] %.9g vs %.9g", kinds[kind], f,
				    pp->t[i][j], p[f]);
			}
		}
		tr__inner_fini(&in);
		tr_params_fini(&w);
		tr_params_fini(&g);
	}
}
END_TEST

// A fragment's spans: P over them only, and a reset of them only.
START_TEST(test_inner_spans)
{
	struct ferry_opts fo = FERRY_OPTS_INIT;
	struct tr__inner  in;
	struct tr_params  w, g, out;
	char              why[128];
	struct ferry_span sp[] = { { 0, 1, 2 }, { 1, 0, 1 } };
	fo.optimizer           = "sgd";
	make_params(&w, 0);
	make_params(&g, 1);
	make_params(&out, 0);
	memset(out.data, 0, 32 * sizeof(float));
	PT_OK(tr__inner_init(&in, &fo, B, &w, why, sizeof(why)));
	tr__inner_step(&in, &w, &g, B, 0);
	tr__inner_pseudo_spans(&in, 3 * B, sp, 2, &out);
	ck_assert(out.t[0][0] == 0 && out.t[0][3] == 0 && out.t[1][1] == 0);
	ck_assert(out.t[0][1] == 3.0f * g.t[0][1]);
	ck_assert(out.t[0][2] == 3.0f * g.t[0][2]);
	ck_assert(out.t[1][0] == 3.0f * g.t[1][0]);
	tr__inner_reset_spans(&in, sp, 2);
	ck_assert(in.acc.t[0][1] == 0 && in.acc.t[1][0] == 0);
	ck_assert(in.acc.t[0][0] == g.t[0][0]);
	tr__inner_fini(&in);
	tr_params_fini(&w);
	tr_params_fini(&g);
	tr_params_fini(&out);
}
END_TEST

// The fragment schedule: H = 8, F = 4 syncs fragments 0, 1, 2, 3 after
// steps 2, 4, 6, 8 (mod 8); F = 1 after every 8th step.
START_TEST(test_inner_fragment_schedule)
{
	for (uint64_t s = 1; s <= 24; s++) {
		int n = 0;
		for (uint32_t f = 0; f < 4; f++) {
			if (tr__inner_fragment_due(s, f, 8, 4)) {
				ck_assert_uint_eq(s % 8, (2 * (f + 1)) % 8);
				n++;
			}
		}
		ck_assert_int_eq(n, s % 2 == 0);
		ck_assert_int_eq(tr__inner_fragment_due(s, 0, 8, 1),
		    s % 8 == 0);
	}
}
END_TEST

// adam and adagrad are the servers' only: refused for the inner loop.
START_TEST(test_inner_refused)
{
	struct ferry_opts  fo = FERRY_OPTS_INIT;
	struct fb_optim    o;
	struct fb_lr_sched sc;
	char               why[256] = "";
	fo.optimizer                = "adagrad";
	PT_FAIL(tr__inner_opts(&fo, &o, &sc, why, sizeof(why)), FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "adagrad"));
	fo.optimizer = "nesterov";
	PT_OK(tr__inner_opts(&fo, &o, &sc, why, sizeof(why)));
	ck_assert_int_eq(o.kind, FB_OPTIM_NESTEROV);
}
END_TEST

Suite *
suite_inner(void)
{
	Suite *s  = suite_create("inner");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_inner_sgd_exact);
	tcase_add_test(tc, test_inner_stateful_vs_reference);
	tcase_add_test(tc, test_inner_spans);
	tcase_add_test(tc, test_inner_refused);
	tcase_add_test(tc, test_inner_fragment_schedule);
	suite_add_tcase(s, tc);
	return s;
}
