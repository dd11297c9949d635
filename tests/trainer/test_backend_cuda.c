// test_backend_cuda.c — the CUDA backend against the CPU one: gradients,
// losses and evaluation on random inputs of several (odd) shapes, the
// device-only gradient, the on-device encoder, bogus inputs, and SGD steps
// that learn. Every TCase but the ops-table one skips, with a message,
// when no CUDA device is found.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend_cuda.h"
#include "ondevice.h"
#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

#include <comp/comp.h>
#include <cuda_runtime_api.h>

// gpu_or_skip returns 1 when a CUDA device is usable; otherwise it prints
// why the test is skipped and returns 0.
static int
gpu_or_skip(const char *test)
{
	char why[160] = "";
	if (tr__cuda_device_count(why, sizeof(why)) > 0) {
		return 1;
	}
	fprintf(stderr, "SKIP %s: no CUDA device (%s)\n", test, why);
	return 0;
}

struct pair {
	struct tr_arch     a;
	struct tr_dataset  ds;
	struct tr_params   w, gc, gg;
	struct tr_backend *cpu, *gpu;
};

static void
pair_open(struct pair *p, const char *layers, size_t n, size_t max_batch,
    uint64_t seed)
{
	struct tr_backend_opts o        = TR_BACKEND_OPTS_INIT;
	char                   err[256] = "";
	struct tr_rng          r;
	memset(p, 0, sizeof(*p));
	PT_OK(tr_arch_parse(layers, &p->a, NULL, 0));
	PT_OK(tr_dataset_synthetic(&p->ds, n, p->a.sizes[0],
	    (int) p->a.sizes[p->a.n_layers], seed));
	PT_OK(tr_params_init(&p->w, &p->a));
	PT_OK(tr_params_init(&p->gc, &p->a));
	PT_OK(tr_params_init(&p->gg, &p->a));
	tr_params_randomize(&p->w, seed);
	tr_rng_seed(&r, seed + 1);
	for (size_t i = 1; i < p->w.n_tensors; i += 2) {
		for (size_t j = 0; j < p->w.len[i]; j++) {
			p->w.t[i][j] = 0.2f * (tr_rng_uniform(&r) - 0.5f);
		}
	}
	o.max_batch = max_batch;
	PT_OK(tr_backend_alloc("cpu", &p->a, &o, &p->cpu, err, sizeof(err)));
	ck_assert_msg(tr_backend_alloc("cuda", &p->a, &o, &p->gpu, err,
	                  sizeof(err)) == FB_OK,
	    "cuda backend: %s", err);
	ck_assert_str_eq(p->gpu->ops->name, "cuda");
	PT_OK(tr_backend_set_weights(p->cpu, tr_params_cptrs(&p->w)));
	PT_OK(tr_backend_set_weights(p->gpu, tr_params_cptrs(&p->w)));
}

static void
pair_close(struct pair *p)
{
	tr_backend_free(p->cpu);
	tr_backend_free(p->gpu);
	tr_params_fini(&p->w);
	tr_params_fini(&p->gc);
	tr_params_fini(&p->gg);
	tr_dataset_fini(&p->ds);
}

// assert_close checks every gradient value within 1e-4 relative (the
// denominator floored at 1e-3 of the tensor's largest |value|, since
// values near zero are sums that cancel).
static void
assert_close(const struct tr_params *want, const struct tr_params *got,
    const char *what)
{
	for (size_t i = 0; i < want->n_tensors; i++) {
		double mx = 0;
		for (size_t j = 0; j < want->len[i]; j++) {
			mx = fmax(mx, fabs(want->t[i][j]));
		}
		for (size_t j = 0; j < want->len[i]; j++) {
			double c = want->t[i][j], g = got->t[i][j];
			double den = fmax(fmax(fabs(c), 1e-3 * mx), 1e-12);
			ck_assert_msg(fabs(c - g) / den <= 1e-4,
			    "%s: tensor %zu[%zu]: cpu %.9g gpu %.9g", what, i,
			    j, c, g);
		}
	}
}

// GPU gradients and losses equal the CPU's within 1e-4 relative for odd
// shapes and batch sizes; a wrong transpose, bias or mask fails this.
START_TEST(test_cuda_grad_matches_cpu)
{
	static const char  *shapes[]  = { "7,5,3", "33,17,10", "1,1,2",
		  "100,129,65,10", "784,256,10", "31,8,8,8,40" };
	static const size_t batches[] = { 1, 13, 64 };
	if (!gpu_or_skip("test_cuda_grad_matches_cpu")) {
		return;
	}
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		struct pair p;
		pair_open(&p, shapes[s], 200, 64, 100 + s);
		for (size_t b = 0; b < 3; b++) {
			uint32_t idx[64];
			double   lc, lg;
			char     what[64];
			for (size_t i = 0; i < batches[b]; i++) {
				idx[i] = (uint32_t) ((i * 37 + b) % 200);
			}
			PT_OK(tr_backend_grad(p.cpu, &p.ds, idx, batches[b],
			    p.gc.t, &lc));
			PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, batches[b],
			    p.gg.t, &lg));
			ck_assert_msg(fabs(lc - lg) <= 1e-4 * fabs(lc),
			    "%s n=%zu: loss cpu %.9g gpu %.9g", shapes[s],
			    batches[b], lc, lg);
			snprintf(what, sizeof(what), "%s n=%zu", shapes[s],
			    batches[b]);
			assert_close(&p.gc, &p.gg, what);
		}
		pair_close(&p);
	}
}
END_TEST

// Evaluation (chunked on the device) gives the CPU's mean loss and
// accuracy; 2500 samples span three evaluation chunks.
START_TEST(test_cuda_evaluate_matches_cpu)
{
	struct pair p;
	double      lc, ac, lg, ag;
	if (!gpu_or_skip("test_cuda_evaluate_matches_cpu")) {
		return;
	}
	pair_open(&p, "20,33,7", 2500, 16, 7);
	PT_OK(tr_backend_evaluate(p.cpu, &p.ds, &lc, &ac));
	PT_OK(tr_backend_evaluate(p.gpu, &p.ds, &lg, &ag));
	ck_assert_msg(fabs(lc - lg) <= 1e-4 * fabs(lc), "loss %.9g vs %.9g",
	    lc, lg);
	// an argmax may flip on a float tie-break: allow one sample
	ck_assert_msg(fabs(ac - ag) <= 1.0 / 2500 + 1e-12, "acc %g vs %g", ac,
	    ag);
	pair_close(&p);
}
END_TEST

// assert_same fails on the first element of got that differs, bit for
// bit, from want, naming its tensor and index.
static void
assert_same(const struct tr_params *want, const struct tr_params *got,
    const char *what)
{
	for (size_t t = 0; t < want->n_tensors; t++) {
		for (size_t j = 0; j < want->len[t]; j++) {
			ck_assert_msg(memcmp(&want->t[t][j], &got->t[t][j],
			                  sizeof(float)) == 0,
			    "%s: tensor %zu [%zu] is %.9g, expected %.9g",
			    what, t, j, (double) got->t[t][j],
			    (double) want->t[t][j]);
		}
	}
}

// tr__cuda_grad_device leaves the same gradient in device memory that
// grad copies to the host.
START_TEST(test_cuda_grad_device)
{
	struct pair p;
	uint32_t    idx[16];
	float      *dg = NULL;
	double      l1, l2;
	if (!gpu_or_skip("test_cuda_grad_device")) {
		return;
	}
	pair_open(&p, "9,11,3", 50, 16, 3);
	for (uint32_t i = 0; i < 16; i++) {
		idx[i] = i * 3;
	}
	PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 16, p.gg.t, &l1));
	PT_OK(tr__cuda_grad_device(p.gpu, &p.ds, idx, 16, &dg, &l2));
	ck_assert_ptr_nonnull(dg);
	ck_assert(l1 == l2);
	// The device buffer is the tensors back to back; tr_params pads
	// each tensor to 64 bytes.
	for (size_t t = 0, at = 0; t < p.gc.n_tensors; at += p.gc.len[t++]) {
		ck_assert_int_eq(cudaMemcpy(p.gc.t[t], dg + at,
		                     p.gc.len[t] * sizeof(float),
		                     cudaMemcpyDeviceToHost),
		    cudaSuccess);
	}
	assert_same(&p.gg, &p.gc, "device vs host gradient");
	// and the host path again gives the same bits
	PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 16, p.gc.t, &l2));
	ck_assert(l1 == l2);
	assert_same(&p.gg, &p.gc, "host gradient, twice");
	PT_OK(tr__cuda_sync(p.gpu));
	ck_assert_ptr_nonnull(tr__cuda_stream(p.gpu));
	PT_FAIL(tr__cuda_grad_device(p.cpu, &p.ds, idx, 16, &dg, NULL),
	    FB_EINVAL);
	pair_close(&p);
}
END_TEST

// Weights and gradients in page-locked buffers (tr_backend_pin, as the
// trainer pins its own) go straight to and from the device: the same
// bits as through the staging buffers. The CPU backend has nothing to pin.
START_TEST(test_cuda_pinned_same_bits)
{
	struct pair      p;
	struct tr_params wp, gp;
	uint32_t         idx[16];
	double           l1, l2;
	if (!gpu_or_skip("test_cuda_pinned_same_bits")) {
		return;
	}
	pair_open(&p, "9,11,3", 50, 16, 5);
	PT_OK(tr_params_init(&wp, &p.a));
	PT_OK(tr_params_init(&gp, &p.a));
	for (size_t t = 0; t < p.w.n_tensors; t++) {
		memcpy(wp.t[t], p.w.t[t], p.w.len[t] * sizeof(float));
	}
	PT_OK(tr_backend_pin(p.cpu, &wp)); // a no-op
	PT_OK(tr_backend_pin(p.gpu, &wp));
	PT_OK(tr_backend_pin(p.gpu, &gp));
	for (uint32_t i = 0; i < 16; i++) {
		idx[i] = i * 3 + 1;
	}
	PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 16, p.gg.t, &l1));
	PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 16, gp.t, &l2));
	ck_assert(l1 == l2);
	assert_same(&p.gg, &gp, "pinned vs staged gradient");
	// new weights through the pinned path, then the staged one
	for (size_t t = 0; t < wp.n_tensors; t++) {
		for (size_t j = 0; j < wp.len[t]; j++) {
			wp.t[t][j] *= 0.5f;
			p.w.t[t][j] *= 0.5f;
		}
	}
	PT_OK(tr_backend_set_weights(p.gpu, tr_params_cptrs(&wp)));
	PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 16, gp.t, &l1));
	PT_OK(tr_backend_set_weights(p.gpu, tr_params_cptrs(&p.w)));
	PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 16, p.gg.t, &l2));
	ck_assert(l1 == l2);
	assert_same(&p.gg, &gp, "after pinned vs staged set_weights");
	pair_close(&p); // frees the backends, then the pinned buffers
	tr_params_fini(&wp);
	tr_params_fini(&gp);
}
END_TEST

// The backend offers its on-device data path, every op filled in; the
// encoder refuses fp32 (nothing to encode), the pull sink takes it.
// Needs no device.
START_TEST(test_cuda_ondevice_table)
{
	const struct tr__ondevice_ops *d = tr__backend_cuda_ops.ondevice;
	ck_assert_ptr_eq(d, &tr__cuda_ondevice_ops);
	ck_assert(d->push_supported != NULL && d->push_open != NULL &&
	    d->push_grad != NULL && d->push_close != NULL);
	ck_assert(d->pull_supported != NULL && d->pull_open != NULL &&
	    d->pull_error != NULL && d->pull_fetch != NULL &&
	    d->pull_close != NULL);
	ck_assert(!d->push_supported(COMP_NONE));
	ck_assert(d->push_supported(COMP_Q8));
	ck_assert(!d->push_supported(COMP_SIGN));
	ck_assert(d->pull_supported(COMP_NONE));
	ck_assert(d->pull_supported(COMP_Q4));
	d->push_close(NULL);
	d->pull_close(NULL);
}
END_TEST

// push_grad returns grad's loss and, per shard (here one per tensor),
// the bytes comp_encode makes of the same gradient: the first step's
// residual is zero.
START_TEST(test_cuda_ondevice_push)
{
	static uint8_t                 want[4096];
	const struct tr__ondevice_ops *d  = tr__backend_cuda_ops.ondevice;
	struct comp_codec              cc = COMP_CODEC_INIT;
	struct ferry_shard             sh[TR_MAX_TENSORS];
	size_t                         base[TR_MAX_TENSORS];
	const uint8_t *const          *codes = NULL;
	struct pair                    p;
	uint32_t                       idx[16];
	void                          *push = NULL;
	double                         l1, l2;
	char                           err[256] = "";
	if (!gpu_or_skip("test_cuda_ondevice_push")) {
		return;
	}
	cc.id     = COMP_Q8;
	cc.bucket = 64;
	pair_open(&p, "9,11,3", 50, 16, 5);
	for (size_t t = 0, off = 0; t < p.w.n_tensors; t++) {
		sh[t].tensor     = (uint32_t) t;
		sh[t].offset     = 0;
		sh[t].len        = p.w.len[t];
		sh[t].code_bytes = comp_bound(&cc, p.w.len[t]);
		base[t]          = off;
		off += p.w.len[t];
	}
	for (uint32_t i = 0; i < 16; i++) {
		idx[i] = i * 3;
	}
	PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 16, p.gg.t, &l1));
	ck_assert_msg(d->push_open(p.gpu, sh, p.w.n_tensors, cc.id, cc.bucket,
	                  base, &push, err, sizeof(err)) == FB_OK,
	    "%s", err);
	PT_OK(d->push_grad(push, &p.ds, idx, 16, &codes, &l2));
	ck_assert(l1 == l2);
	for (size_t t = 0; t < p.w.n_tensors; t++) {
		size_t len = 0;
		PT_OK(comp_encode(&cc, p.gg.t[t], p.w.len[t], NULL, want,
		    sizeof(want), &len));
		ck_assert_uint_eq(len, sh[t].code_bytes);
		ck_assert_int_eq(memcmp(codes[t], want, len), 0);
	}
	d->push_close(push);
	pair_close(&p);
}
END_TEST

// Bad batches and an absent device ordinal are refused with the CPU
// backend's codes and a message.
START_TEST(test_cuda_grad_bogus)
{
	struct pair            p;
	struct tr_backend_opts o        = TR_BACKEND_OPTS_INIT;
	struct tr_backend     *b        = NULL;
	uint32_t               idx[4]   = { 0, 1, 2, 999 };
	char                   err[256] = "";
	if (!gpu_or_skip("test_cuda_grad_bogus")) {
		return;
	}
	pair_open(&p, "4,3,2", 10, 4, 1);
	PT_FAIL(tr_backend_grad(p.gpu, &p.ds, idx, 0, p.gg.t, NULL),
	    FB_EINVAL);
	PT_FAIL(tr_backend_grad(p.gpu, &p.ds, idx, 5, p.gg.t, NULL),
	    FB_EINVAL);
	PT_FAIL(tr_backend_grad(p.gpu, &p.ds, idx, 4, p.gg.t, NULL),
	    FB_ERANGE);
	PT_FAIL(tr_backend_alloc("cuda:1023", &p.a, &o, &b, err, sizeof(err)),
	    FB_EUNSUPP);
	ck_assert_ptr_nonnull(strstr(err, "cuda:1023"));
	ck_assert_ptr_null(b);
	pair_close(&p);
}
END_TEST

// A few SGD steps with the server's update on the GPU's summed gradients
// lower the loss of a fixed minibatch: an end-to-end training step.
START_TEST(test_cuda_sgd_learns)
{
	struct pair p;
	uint32_t    idx[64];
	double      first = 0, last = 0;
	if (!gpu_or_skip("test_cuda_sgd_learns")) {
		return;
	}
	pair_open(&p, "16,32,4", 256, 64, 11);
	for (uint32_t i = 0; i < 64; i++) {
		idx[i] = i * 4;
	}
	for (int s = 0; s < 20; s++) {
		double loss;
		PT_OK(tr_backend_set_weights(p.gpu, tr_params_cptrs(&p.w)));
		PT_OK(tr_backend_grad(p.gpu, &p.ds, idx, 64, p.gg.t, &loss));
		first = s == 0 ? loss : first;
		last  = loss;
		tr_params_sgd(&p.w, &p.gg, 0.1, 64);
	}
	ck_assert_msg(last < 0.8 * first, "loss %g -> %g", first, last);
	pair_close(&p);
}
END_TEST

Suite *
suite_backend_cuda(void)
{
	Suite *s  = suite_create("backend_cuda");
	TCase *tc = tcase_create("gpu_backend");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cuda_grad_matches_cpu);
	tcase_add_test(tc, test_cuda_evaluate_matches_cpu);
	tcase_add_test(tc, test_cuda_grad_device);
	tcase_add_test(tc, test_cuda_pinned_same_bits);
	tcase_add_test(tc, test_cuda_grad_bogus);
	tcase_add_test(tc, test_cuda_ondevice_push);
	suite_add_tcase(s, tc);
	tc = tcase_create("ondevice_table");
	tcase_add_test(tc, test_cuda_ondevice_table);
	suite_add_tcase(s, tc);
	tc = tcase_create("gpu_train");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cuda_sgd_learns);
	suite_add_tcase(s, tc);
	return s;
}
