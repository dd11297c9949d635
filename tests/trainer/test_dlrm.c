// test_dlrm.c — the DLRM model (tr/ctr.h): arch parsing, tensor table and
// init, the interaction's term order, and its gradients against central
// finite differences, against single-sample runs and against predict.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pt.h"
#include "tr/ctr.h"
#include "ctr_tests.h"

#define FX_N 5 // samples in the gradient checks' batch
#define FX_D 3 // their emb_dim (odd: gram_back's tail runs)
#define FX_EMB (TR_CTR_CAT * FX_N * FX_D)

// A small model (emb 3, bottom 8,3, top 8,1) with random weights, NONZERO
// biases (Xavier leaves them 0, which would hide a bias bug) and a random
// batch of FX_N samples.
struct fx {
	struct tr_dlrm_arch a;
	struct tr_params    w, g, g2; // weights, gradients, scratch
	struct tr_dlrm     *m;
	float               dense[FX_N * TR_CTR_DENSE];
	float               emb[FX_EMB], eg[FX_EMB], eg2[FX_EMB];
	float               label[FX_N];
};

static void
fx_init(struct fx *f, int interaction)
{
	struct tr_rng r;
	char          err[256] = "";
	memset(f, 0, sizeof(*f));
	PT_OK(tr_dlrm_arch_parse("8,3", "8,1", FX_D,
	    interaction == TR_DLRM_DOT ? "dot" : "cat", &f->a, err,
	    sizeof(err)));
	PT_OK(tr_dlrm_params_init(&f->w, &f->a));
	PT_OK(tr_dlrm_params_init(&f->g, &f->a));
	PT_OK(tr_dlrm_params_init(&f->g2, &f->a));
	tr_dlrm_params_randomize(&f->w, &f->a, 7);
	tr_rng_seed(&r, 99 + (uint64_t) interaction);
	for (size_t t = 1; t < f->w.n_tensors; t += 2) {
		for (size_t j = 0; j < f->w.len[t]; j++) {
			f->w.t[t][j] = 0.2f * (tr_rng_uniform(&r) - 0.5f);
		}
	}
	for (size_t i = 0; i < FX_N * TR_CTR_DENSE; i++) {
		f->dense[i] = 3.0f * tr_rng_uniform(&r);
	}
	for (size_t i = 0; i < FX_EMB; i++) {
		f->emb[i] = 2.0f * tr_rng_uniform(&r) - 1.0f;
	}
	for (size_t i = 0; i < FX_N; i++) {
		f->label[i] = (float) (i % 2);
	}
	PT_OK(tr_dlrm_alloc(&f->a, FX_N, 1, &f->m, err, sizeof(err)));
}

static void
fx_fini(struct fx *f)
{
	tr_dlrm_free(f->m);
	tr_params_fini(&f->w);
	tr_params_fini(&f->g);
	tr_params_fini(&f->g2);
}

// fx_loss returns the summed loss at the current weights and inputs.
static double
fx_loss(struct fx *f)
{
	double loss = 0.0;
	PT_OK(tr_dlrm_grad(f->m, tr_params_cptrs(&f->w), f->dense, f->emb,
	    f->label, FX_N, f->g2.t, f->eg2, &loss));
	return loss;
}

// The tally of a finite-difference check: the loss at the unperturbed
// point, derivatives off, and those skipped at a ReLU kink.
struct fd_tally {
	double l0;
	int    bad, kinks;
};

// fd_check compares the analytic derivative an of the loss by *x with a
// central difference. The model runs in float: rounding of about 1e-6 in
// a logit over a step of 2e-3 leaves ~1e-4 of noise in the difference,
// hence 3e-4 absolute or 1% relative. Where the two one-sided differences
// disagree, a ReLU switched inside +-eps and the loss has no derivative
// to compare there: counted as a kink, not checked.
static void
fd_check(struct fx *f, float *x, float an, const char *what, size_t j,
    struct fd_tally *t)
{
	const float eps  = 1e-3f;
	float       keep = *x, hi = keep + eps, lo = keep - eps;
	*x           = hi;
	double lp    = fx_loss(f);
	*x           = lo;
	double lm    = fx_loss(f);
	*x           = keep;
	double fd    = (lp - lm) / ((double) hi - (double) lo);
	double up    = (lp - t->l0) / ((double) hi - (double) keep);
	double down  = (t->l0 - lm) / ((double) keep - (double) lo);
	double diff  = fabs(fd - (double) an);
	double scale = fmax(fabs(fd), fabs((double) an));
	if (fabs(up - down) > 2e-4 + 1e-2 * scale) {
		t->kinks++;
		return;
	}
	if (diff > 3e-4 && diff > 1e-2 * scale) {
		if (t->bad < 5) {
			fprintf(stderr, "dlrm fd: %s[%zu] analytic %g fd %g\n",
			    what, j, (double) an, fd);
		}
		t->bad++;
	}
}

// Every dense weight and bias and every embedding input's gradient
// matches central differences of the summed loss (both interactions).
START_TEST(test_grad_finite_difference)
{
	struct fx       f;
	struct fd_tally t       = { 0 };
	size_t          checked = 0;
	fx_init(&f, _i);
	PT_OK(tr_dlrm_grad(f.m, tr_params_cptrs(&f.w), f.dense, f.emb, f.label,
	    FX_N, f.g.t, f.eg, &t.l0));
	ck_assert(isfinite(t.l0) && t.l0 > 0.0);
	for (size_t i = 0; i < f.w.n_tensors; i++) {
		char name[32];
		tr_dlrm_tensor_name(&f.a, i, name, sizeof(name));
		for (size_t j = 0; j < f.w.len[i]; j++, checked++) {
			fd_check(&f, &f.w.t[i][j], f.g.t[i][j], name, j, &t);
		}
	}
	for (size_t j = 0; j < FX_EMB; j++, checked++) {
		fd_check(&f, &f.emb[j], f.eg[j], "emb", j, &t);
	}
	ck_assert_msg(t.bad == 0, "%d of %zu derivatives off (%s)", t.bad,
	    checked, _i == TR_DLRM_DOT ? "dot" : "cat");
	// kinks are rare: the check must not skip its way to a pass
	ck_assert_msg((size_t) t.kinks * 50 <= checked,
	    "%d of %zu derivatives at a kink", t.kinks, checked);
	fx_fini(&f);
}
END_TEST

// A batch's gradients are the sums of its samples' single-sample
// gradients, and its embedding gradients are theirs, per occurrence.
START_TEST(test_grad_sums_samples)
{
	struct fx        f;
	struct tr_params acc;
	double           loss, one, sum = 0.0;
	float            emb1[TR_CTR_CAT * FX_D], eg1[TR_CTR_CAT * FX_D];
	fx_init(&f, _i);
	PT_OK(tr_dlrm_params_init(&acc, &f.a));
	PT_OK(tr_dlrm_grad(f.m, tr_params_cptrs(&f.w), f.dense, f.emb, f.label,
	    FX_N, f.g.t, f.eg, &loss));
	for (size_t i = 0; i < FX_N; i++) {
		for (size_t c = 0; c < TR_CTR_CAT; c++) {
			memcpy(emb1 + c * FX_D, f.emb + (c * FX_N + i) * FX_D,
			    sizeof(float) * FX_D);
		}
		PT_OK(tr_dlrm_grad(f.m, tr_params_cptrs(&f.w),
		    f.dense + i * TR_CTR_DENSE, emb1, f.label + i, 1, f.g2.t,
		    eg1, &one));
		sum += one;
		for (size_t t = 0; t < f.w.n_tensors; t++) {
			for (size_t j = 0; j < f.w.len[t]; j++) {
				acc.t[t][j] += f.g2.t[t][j];
			}
		}
		for (size_t c = 0; c < TR_CTR_CAT; c++) {
			for (size_t k = 0; k < FX_D; k++) {
				ck_assert_float_eq_tol(eg1[c * FX_D + k],
				    f.eg[(c * FX_N + i) * FX_D + k], 1e-6);
			}
		}
	}
	ck_assert_double_eq_tol(sum, loss, 1e-9 * FX_N);
	for (size_t t = 0; t < f.w.n_tensors; t++) {
		for (size_t j = 0; j < f.w.len[t]; j++) {
			ck_assert_float_eq_tol(acc.t[t][j], f.g.t[t][j], 1e-5);
		}
	}
	tr_params_fini(&acc);
	fx_fini(&f);
}
END_TEST

// predict's probabilities are the sigmoids of the logits grad's loss
// came from: their cross-entropy is loss_sum, and a sample's probability
// does not depend on the batch around it.
START_TEST(test_predict_matches_grad)
{
	struct fx f;
	double    loss, ce = 0.0;
	float     p[FX_N], p1;
	float     emb1[TR_CTR_CAT * FX_D];
	fx_init(&f, _i);
	PT_OK(tr_dlrm_grad(f.m, tr_params_cptrs(&f.w), f.dense, f.emb, f.label,
	    FX_N, f.g.t, f.eg, &loss));
	PT_OK(tr_dlrm_predict(f.m, tr_params_cptrs(&f.w), f.dense, f.emb, FX_N,
	    p));
	for (size_t i = 0; i < FX_N; i++) {
		ck_assert(p[i] > 0.0f && p[i] < 1.0f);
		ce -= f.label[i] > 0.5f ? log((double) p[i])
		                        : log(1.0 - (double) p[i]);
	}
	ck_assert_double_eq_tol(ce, loss, 1e-5 * loss);
	for (size_t c = 0; c < TR_CTR_CAT; c++) {
		memcpy(emb1 + c * FX_D, f.emb + (c * FX_N + 3) * FX_D,
		    sizeof(float) * FX_D);
	}
	PT_OK(tr_dlrm_predict(f.m, tr_params_cptrs(&f.w),
	    f.dense + 3 * TR_CTR_DENSE, emb1, 1, &p1));
	ck_assert_float_eq_tol(p1, p[3], 1e-6);
	fx_fini(&f);
}
END_TEST

// logit_of turns a probability back into its logit.
static double
logit_of(float p)
{
	return log((double) p / (1.0 - (double) p));
}

// The interaction's terms come in tr/ctr.h's order: z_0 first, then
// <z_a, z_b> for a = 1..26 outer, b < a inner (dot), or the fields'
// rows in field order (cat). A top MLP of one linear layer whose weight
// picks one term reads each back through predict's logit.
START_TEST(test_interaction_order)
{
	struct tr_dlrm_arch a;
	struct tr_params    w;
	struct tr_dlrm     *m;
	const size_t        n = 2, d = 2;
	float               dense[2 * TR_CTR_DENSE] = { 0 };
	float               emb[TR_CTR_CAT * 2 * 2], p[2];
	struct tr_rng       r;
	PT_OK(tr_dlrm_arch_parse("2", "1", (uint32_t) d, _i ? "cat" : "dot",
	    &a, NULL, 0));
	ck_assert_uint_eq(a.top[0], _i ? 2 + 26 * 2 : 2 + 351);
	PT_OK(tr_dlrm_params_init(&w, &a));
	PT_OK(tr_dlrm_alloc(&a, n, 1, &m, NULL, 0));
	// dense inputs 0 and no bottom weights: z_0 = relu(b) = (0.5, 0).
	w.t[1][0] = 0.5f;
	w.t[1][1] = -0.25f;
	tr_rng_seed(&r, 5);
	for (size_t j = 0; j < sizeof(emb) / sizeof(emb[0]); j++) {
		emb[j] = 2.0f * tr_rng_uniform(&r) - 1.0f;
	}
	for (size_t o = 0; o < a.top[0]; o++) {
		memset(w.t[2], 0, a.top[0] * sizeof(float));
		w.t[2][o] = 1.0f;
		PT_OK(
		    tr_dlrm_predict(m, tr_params_cptrs(&w), dense, emb, n, p));
		for (size_t i = 0; i < n; i++) {
			double want                 = 0.0;
			float  z[TR_CTR_CAT + 1][2] = { { 0.5f, 0.0f } };
			for (size_t c = 0; c < TR_CTR_CAT; c++) {
				memcpy(z[c + 1], emb + (c * n + i) * d,
				    sizeof(z[0]));
			}
			if (o < 2) {
				want = z[0][o];
			} else if (_i == TR_DLRM_CAT) {
				want = z[(o - 2) / d + 1][(o - 2) % d];
			} else {
				size_t q = o - 2, ai = 1;
				while (q >= ai) { // row ai holds ai terms
					q -= ai++;
				}
				want = (double) z[ai][0] * z[q][0] +
				    (double) z[ai][1] * z[q][1];
			}
			ck_assert_msg(fabs(logit_of(p[i]) - want) < 1e-4,
			    "term %zu sample %zu: %g, want %g", o, i,
			    logit_of(p[i]), want);
		}
	}
	tr_dlrm_free(m);
	tr_params_fini(&w);
}
END_TEST

// The default arch's shape, tensor table and names.
START_TEST(test_arch_parse)
{
	struct tr_dlrm_arch a;
	char                name[32];
	PT_OK(tr_dlrm_arch_parse("64,16", "64,1", 16, "dot", &a, NULL, 0));
	ck_assert_int_eq(a.interaction, TR_DLRM_DOT);
	ck_assert_int_eq(a.n_bottom, 2);
	ck_assert_int_eq(a.n_top, 2);
	ck_assert_uint_eq(a.bottom[0], TR_CTR_DENSE);
	ck_assert_uint_eq(a.bottom[2], 16);
	ck_assert_uint_eq(a.top[0], 16 + 27 * 26 / 2);
	ck_assert_uint_eq(a.top[2], 1);
	ck_assert_uint_eq(tr_dlrm_n_tensors(&a), 8);
	ck_assert_uint_eq(tr_dlrm_tensor_len(&a, 0), 64 * 13);
	ck_assert_uint_eq(tr_dlrm_tensor_len(&a, 1), 64);
	ck_assert_uint_eq(tr_dlrm_tensor_len(&a, 2), 16 * 64);
	ck_assert_uint_eq(tr_dlrm_tensor_len(&a, 4), 64 * 367);
	ck_assert_uint_eq(tr_dlrm_tensor_len(&a, 7), 1);
	ck_assert_uint_eq(tr_dlrm_tensor_len(&a, 8), 0);
	static const char *names[] = { "bot1.weight", "bot1.bias",
		"bot2.weight", "bot2.bias", "top1.weight", "top1.bias",
		"top2.weight", "top2.bias" };
	for (size_t i = 0; i < 8; i++) {
		tr_dlrm_tensor_name(&a, i, name, sizeof(name));
		ck_assert_str_eq(name, names[i]);
	}
	PT_OK(tr_dlrm_arch_parse("32", "1", 8, "cat", &a, NULL, 0));
	ck_assert_int_eq(a.interaction, TR_DLRM_CAT);
	ck_assert_uint_eq(a.top[0], 32 + 26 * 8);
	ck_assert_int_eq(a.n_top, 1);
	ck_assert_uint_eq(tr_dlrm_n_tensors(&a), 4);
	tr_dlrm_tensor_name(&a, 3, name, sizeof(name));
	ck_assert_str_eq(name, "top1.bias");
	// 16 layers in all is the limit.
	PT_OK(tr_dlrm_arch_parse("4,4,4,4,4,4,4,4", "4,4,4,4,4,4,4,1", 4,
	    "dot", &a, NULL, 0));
	ck_assert_uint_eq(tr_dlrm_n_tensors(&a), 32);
}
END_TEST

// Bad shapes are refused with FB_EINVAL and a message naming the flag.
START_TEST(test_arch_parse_bogus)
{
	static const struct {
		const char *bottom, *top;
		uint32_t    emb;
		const char *inter, *flag;
	} bad[] = {
		{ "", "64,1", 16, "dot", "--bottom" },
		{ NULL, "64,1", 16, "dot", "--bottom" },
		{ "64,", "64,1", 16, "dot", "--bottom" },
		{ "64,,16", "64,1", 16, "dot", "--bottom" },
		{ "64,0,16", "64,1", 16, "dot", "--bottom" },
		{ "64,x", "64,1", 16, "dot", "--bottom" },
		{ "64,-16", "64,1", 16, "dot", "--bottom" },
		{ "64,8", "64,1", 16, "dot", "--bottom" },
		{ "4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4", "1", 4, "dot",
		    "--bottom" },
		{ "64,16", "", 16, "dot", "--top" },
		{ "64,16", "64,2", 16, "dot", "--top" },
		{ "64,16", "64,0", 16, "dot", "--top" },
		{ "64,16", ",1", 16, "dot", "--top" },
		{ "4,4,4,4,4,4,4,4", "4,4,4,4,4,4,4,4,1", 4, "dot", "--top" },
		{ "64,16", "64,1", 0, "dot", "--emb-dim" },
		{ "64,16", "64,1", 4096, "cat", "--emb-dim" },
		{ "64,16", "64,1", 16, "sum", "--interaction" },
		{ "64,16", "64,1", 16, "", "--interaction" },
		{ "64,16", "64,1", 16, NULL, "--interaction" },
	};
	struct tr_dlrm_arch a;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[256] = "";
		ck_assert_msg(tr_dlrm_arch_parse(bad[i].bottom, bad[i].top,
		                  bad[i].emb, bad[i].inter, &a, err,
		                  sizeof(err)) == FB_EINVAL,
		    "case %zu accepted", i);
		ck_assert_msg(strstr(err, bad[i].flag) != NULL,
		    "case %zu: '%s' does not name %s", i, err, bad[i].flag);
	}
	// cat does not tie bottom's last width to emb_dim.
	PT_OK(tr_dlrm_arch_parse("64,8", "64,1", 16, "cat", &a, NULL, 0));
	PT_FAIL(tr_dlrm_arch_parse("64", "1", 16, "dot", NULL, NULL, 0),
	    FB_EINVAL);
}
END_TEST

// Tensors are aligned and zeroed; the same seed gives the same
// Xavier-uniform weights within +-sqrt(6/(fan_in+fan_out)), another seed
// others, and biases are 0.
START_TEST(test_params_randomize)
{
	struct tr_dlrm_arch a;
	struct tr_params    p, q;
	PT_OK(tr_dlrm_arch_parse("64,16", "64,1", 16, "dot", &a, NULL, 0));
	PT_OK(tr_dlrm_params_init(&p, &a));
	PT_OK(tr_dlrm_params_init(&q, &a));
	ck_assert_uint_eq(p.n_tensors, 8);
	ck_assert_uint_eq(p.total,
	    13 * 64 + 64 + 64 * 16 + 16 + 367 * 64 + 64 + 64 + 1);
	for (size_t i = 0; i < p.n_tensors; i++) {
		ck_assert_uint_eq((uintptr_t) p.t[i] % 64, 0);
		ck_assert_uint_eq(p.len[i], tr_dlrm_tensor_len(&a, i));
		for (size_t j = 0; j < p.len[i]; j++) {
			ck_assert(p.t[i][j] == 0.0f);
		}
	}
	tr_dlrm_params_randomize(&p, &a, 11);
	tr_dlrm_params_randomize(&q, &a, 11);
	for (size_t i = 0; i < p.n_tensors; i++) {
		ck_assert_mem_eq(p.t[i], q.t[i], p.len[i] * sizeof(float));
	}
	static const double fans[4] = { 13 + 64, 64 + 16, 367 + 64, 64 + 1 };
	for (size_t l = 0; l < 4; l++) {
		float  bound = (float) sqrt(6.0 / fans[l]);
		float  big   = 0.0f;
		float *wt = p.t[2 * l], *bt = p.t[2 * l + 1];
		for (size_t j = 0; j < p.len[2 * l]; j++) {
			ck_assert(fabsf(wt[j]) <= bound);
			big = fmaxf(big, fabsf(wt[j]));
		}
		// the weights fill their range (64 or more draws each)
		ck_assert(big > 0.8f * bound);
		for (size_t j = 0; j < p.len[2 * l + 1]; j++) {
			ck_assert(bt[j] == 0.0f);
		}
	}
	tr_dlrm_params_randomize(&q, &a, 12);
	ck_assert(memcmp(p.t[0], q.t[0], p.len[0] * sizeof(float)) != 0);
	tr_params_fini(&p);
	tr_params_fini(&q);
	PT_FAIL(tr_dlrm_params_init(&p, NULL), FB_EINVAL);
	PT_FAIL(tr_dlrm_params_init(NULL, &a), FB_EINVAL);
}
END_TEST

// grad and predict refuse an empty batch or one over max_batch; alloc
// refuses max_batch 0.
START_TEST(test_bad_batch)
{
	struct fx       f;
	struct tr_dlrm *m = NULL;
	double          loss;
	float           p[FX_N + 1];
	char            err[256] = "";
	fx_init(&f, TR_DLRM_DOT);
	PT_FAIL(tr_dlrm_grad(f.m, tr_params_cptrs(&f.w), f.dense, f.emb,
	            f.label, 0, f.g.t, f.eg, &loss),
	    FB_EINVAL);
	PT_FAIL(tr_dlrm_grad(f.m, tr_params_cptrs(&f.w), f.dense, f.emb,
	            f.label, FX_N + 1, f.g.t, f.eg, &loss),
	    FB_EINVAL);
	PT_FAIL(
	    tr_dlrm_predict(f.m, tr_params_cptrs(&f.w), f.dense, f.emb, 0, p),
	    FB_EINVAL);
	PT_FAIL(tr_dlrm_predict(f.m, tr_params_cptrs(&f.w), f.dense, f.emb,
	            FX_N + 1, p),
	    FB_EINVAL);
	PT_FAIL(tr_dlrm_alloc(&f.a, 0, 1, &m, err, sizeof(err)), FB_EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_str_ne(err, "");
	fx_fini(&f);
	tr_dlrm_free(NULL);
}
END_TEST

Suite *
suite_dlrm(void)
{
	Suite *s  = suite_create("dlrm");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_arch_parse);
	tcase_add_test(tc, test_arch_parse_bogus);
	tcase_add_test(tc, test_params_randomize);
	tcase_add_test(tc, test_bad_batch);
	// _i: the interaction (TR_DLRM_DOT, TR_DLRM_CAT)
	tcase_add_loop_test(tc, test_grad_finite_difference, 0, 2);
	tcase_add_loop_test(tc, test_grad_sums_samples, 0, 2);
	tcase_add_loop_test(tc, test_predict_matches_grad, 0, 2);
	tcase_add_loop_test(tc, test_interaction_order, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}
