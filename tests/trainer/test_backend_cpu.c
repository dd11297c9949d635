// test_backend_cpu.c — the OpenBLAS backend: gradients against central
// finite differences, sum semantics (what the server and the reference
// rely on), evaluation, bogus inputs, and an SGD run that learns.
#include <math.h>
#include <string.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

struct fix {
	struct tr_arch     a;
	struct tr_dataset  ds;
	struct tr_params   w, g;
	struct tr_backend *b;
};

static void
fix_open(struct fix *f, const char *layers, size_t n, size_t max_batch,
    uint64_t seed)
{
	struct tr_backend_opts o        = TR_BACKEND_OPTS_INIT;
	char                   err[256] = "";
	memset(f, 0, sizeof(*f));
	PT_OK(tr_arch_parse(layers, &f->a, NULL, 0));
	PT_OK(tr_dataset_synthetic(&f->ds, n, f->a.sizes[0],
	    (int) f->a.sizes[f->a.n_layers], seed));
	PT_OK(tr_params_init(&f->w, &f->a));
	PT_OK(tr_params_init(&f->g, &f->a));
	tr_params_randomize(&f->w, seed);
	o.max_batch = max_batch;
	PT_OK(tr_backend_alloc("cpu", &f->a, &o, &f->b, err, sizeof(err)));
	PT_OK(tr_backend_set_weights(f->b, tr_params_cptrs(&f->w)));
}

static void
fix_close(struct fix *f)
{
	tr_backend_free(f->b);
	tr_params_fini(&f->w);
	tr_params_fini(&f->g);
	tr_dataset_fini(&f->ds);
}

// The analytic summed gradient of every parameter of a small 3-layer net
// matches central differences of the summed loss (eps 1e-3) within 1e-2
// relative; a wrong transpose, bias or ReLU mask fails this.
START_TEST(test_cpu_grad_finite_differences)
{
	struct fix    f;
	uint32_t      idx[6] = { 0, 3, 5, 7, 9, 11 };
	double        loss, lp, lm, worst = 0;
	struct tr_rng r;
	fix_open(&f, "7,6,5,4", 12, 8, 21);
	// non-zero biases so their gradients and the ReLU masks are tested
	tr_rng_seed(&r, 5);
	for (size_t i = 1; i < f.w.n_tensors; i += 2) {
		for (size_t j = 0; j < f.w.len[i]; j++) {
			f.w.t[i][j] = 0.2f * (tr_rng_uniform(&r) - 0.5f);
		}
	}
	PT_OK(tr_backend_grad(f.b, &f.ds, idx, 6, f.g.t, &loss));
	ck_assert(loss > 0 && isfinite(loss));
	for (size_t i = 0; i < f.w.n_tensors; i++) {
		for (size_t j = 0; j < f.w.len[i]; j++) {
			float            save = f.w.t[i][j], eps = 1e-3f;
			struct tr_params tmp;
			PT_OK(tr_params_init(&tmp, &f.a));
			f.w.t[i][j] = save + eps;
			PT_OK(tr_backend_grad(f.b, &f.ds, idx, 6, tmp.t, &lp));
			f.w.t[i][j] = save - eps;
			PT_OK(tr_backend_grad(f.b, &f.ds, idx, 6, tmp.t, &lm));
			f.w.t[i][j] = save;
			tr_params_fini(&tmp);
			double num = (lp - lm) / (2.0 * eps);
			double ana = f.g.t[i][j];
			double den = fmax(fmax(fabs(num), fabs(ana)), 0.1);
			double rel = fabs(num - ana) / den;
			worst      = fmax(worst, rel);
			ck_assert_msg(rel <= 1e-2,
			    "tensor %zu elem %zu: analytic %g numeric %g", i,
			    j, ana, num);
		}
	}
	ck_assert(worst < 1e-2);
	fix_close(&f);
}
END_TEST

// Gradients are sums: the gradient on a union of index lists equals the
// sum of the gradients on the parts (what a sync step of two trainers
// against one process on the union relies on), and the loss is a sum too.
START_TEST(test_cpu_grad_is_sum)
{
	struct fix       f;
	struct tr_params g1, g2;
	uint32_t         idx[40];
	double           l, l1, l2;
	fix_open(&f, "16,12,3", 64, 40, 4);
	for (int i = 0; i < 40; i++) {
		idx[i] = (uint32_t) ((i * 13) % 64);
	}
	PT_OK(tr_params_init(&g1, &f.a));
	PT_OK(tr_params_init(&g2, &f.a));
	PT_OK(tr_backend_grad(f.b, &f.ds, idx, 40, f.g.t, &l));
	PT_OK(tr_backend_grad(f.b, &f.ds, idx, 17, g1.t, &l1));
	PT_OK(tr_backend_grad(f.b, &f.ds, idx + 17, 23, g2.t, &l2));
	ck_assert(fabs(l - (l1 + l2)) <= 1e-5 * fabs(l));
	for (size_t i = 0; i < f.g.n_tensors; i++) {
		double num = 0, den = 0;
		for (size_t j = 0; j < f.g.len[i]; j++) {
			double d = f.g.t[i][j] - (g1.t[i][j] + g2.t[i][j]);
			num += d * d;
			den += (double) f.g.t[i][j] * f.g.t[i][j];
		}
		ck_assert_msg(sqrt(num) <= 1e-5 * sqrt(den) + 1e-7,
		    "tensor %zu: rel err %g", i, sqrt(num / (den + 1e-30)));
	}
	tr_params_fini(&g1);
	tr_params_fini(&g2);
	fix_close(&f);
}
END_TEST

// evaluate (chunked over 1024 rows) gives the same mean loss as grad's
// summed loss over the whole set, and a plausible accuracy.
START_TEST(test_cpu_evaluate_matches_grad)
{
	struct fix f;
	uint32_t   idx[100];
	double     sum = 0, l, mean, acc;
	fix_open(&f, "10,8,4", 2500, 100, 8);
	for (size_t s = 0; s < 2500; s += 100) {
		for (uint32_t i = 0; i < 100; i++) {
			idx[i] = (uint32_t) s + i;
		}
		PT_OK(tr_backend_grad(f.b, &f.ds, idx, 100, f.g.t, &l));
		sum += l;
	}
	PT_OK(tr_backend_evaluate(f.b, &f.ds, &mean, &acc));
	ck_assert_msg(fabs(mean - sum / 2500) <= 1e-5 * mean, "%g vs %g", mean,
	    sum / 2500);
	ck_assert(acc >= 0.0 && acc <= 1.0);
	fix_close(&f);
}
END_TEST

// Bad batches are refused without touching memory out of range.
START_TEST(test_cpu_grad_bogus)
{
	struct fix f;
	uint32_t   idx[9] = { 0, 1, 2, 3, 4, 5, 6, 7, 8 };
	double     l;
	fix_open(&f, "5,4,3", 20, 8, 1);
	PT_FAIL(tr_backend_grad(f.b, &f.ds, idx, 9, f.g.t, &l), FB_EINVAL);
	PT_FAIL(tr_backend_grad(f.b, &f.ds, idx, 0, f.g.t, &l), FB_EINVAL);
	idx[2] = 20;
	PT_FAIL(tr_backend_grad(f.b, &f.ds, idx, 3, f.g.t, &l), FB_ERANGE);
	idx[2]    = 2;
	f.ds.y[1] = 3;
	PT_FAIL(tr_backend_grad(f.b, &f.ds, idx, 3, f.g.t, &l), FB_ERANGE);
	f.ds.y[1] = 0;
	f.ds.dim  = 6;
	PT_FAIL(tr_backend_grad(f.b, &f.ds, idx, 3, f.g.t, &l), FB_EINVAL);
	PT_FAIL(tr_backend_evaluate(f.b, &f.ds, &l, &l), FB_EINVAL);
	f.ds.dim = 5;
	fix_close(&f);
}
END_TEST

// Single-process SGD on a learnable synthetic set, with the same
// partition and update a trainer uses: the loss falls and accuracy rises.
START_TEST(test_cpu_sgd_learns)
{
	struct fix          f;
	struct tr_partition p;
	const uint32_t     *idx;
	double              l0, a0, l1, a1, loss;
	size_t              B = 32, spe;
	fix_open(&f, "20,32,4", 1024, 32, 3);
	PT_OK(tr_backend_evaluate(f.b, &f.ds, &l0, &a0));
	PT_OK(tr_partition_init(&p, f.ds.n, 0, 1, 3));
	spe = tr_partition_steps(f.ds.n, 1, B);
	for (long e = 0; e < 5; e++) {
		for (size_t k = 0; k < spe; k++) {
			PT_OK(tr_partition_batch(&p, e, k, B, &idx));
			PT_OK(
			    tr_backend_grad(f.b, &f.ds, idx, B, f.g.t, &loss));
			tr_params_sgd(&f.w, &f.g, 0.1, B);
		}
	}
	PT_OK(tr_backend_evaluate(f.b, &f.ds, &l1, &a1));
	ck_assert_msg(l1 < 0.5 * l0, "loss %g -> %g", l0, l1);
	ck_assert_msg(a1 > 0.9, "accuracy %g -> %g", a0, a1);
	tr_partition_fini(&p);
	fix_close(&f);
}
END_TEST

Suite *
suite_backend_cpu(void)
{
	Suite *s  = suite_create("backend_cpu");
	TCase *tc = tcase_create("math");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cpu_grad_finite_differences);
	tcase_add_test(tc, test_cpu_grad_is_sum);
	tcase_add_test(tc, test_cpu_evaluate_matches_grad);
	tcase_add_test(tc, test_cpu_grad_bogus);
	tcase_add_test(tc, test_cpu_sgd_learns);
	suite_add_tcase(s, tc);
	return s;
}
