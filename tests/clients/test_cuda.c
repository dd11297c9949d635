// test_cuda.c — libferry_cuda (<ferry/ferry_cuda.h>) against the host path:
// the same 2-trainer sync job (the in-process cluster's 3 tensors,
// cluster.h's gradients) run once through ferry_client_push_pull with host
// buffers and once through ferry_cuda_push_pull with the weights and
// gradients in device memory must end with the same weights: bit for bit
// without a codec; with q8 both ways (gradients encoded and deltas decoded
// on the GPU) within 1e-3, trainer_gpu_vs_cpu's bound. Its own program
// (test_cuda, ctest `clients_cuda`), linked with libferry.so and
// libferry_cuda.so as a user's program is; without a usable CUDA device it
// says why and exits 77 (ctest: skipped). Check runs in-process
// (CK_NOFORK): CUDA does not survive a fork.
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "cluster.h"
#include "ferry/ferry.h"
#include "ferry/ferry_cuda.h"
#include "pt.h"

#define STEPS 6
#define TOTAL (40 + 7 + 1)

// One rank of a run: the options, and out: the weights it ends with (the
// tensors back to back) and its first error.
struct rank {
	const char *url;
	int         rank, device; // device: through libferry_cuda
	const char *push, *pull;  // codecs (NULL: none)
	uint32_t    warmup;
	float       w[TOTAL];
	int         rv;
	char        err[320];
};

static int
rank_fail(struct rank *a, int rv, const char *what, const char *why)
{
	snprintf(a->err, sizeof(a->err), "%s: %s (%s)", what,
	    ferry_strerror(rv), why);
	return a->rv = rv;
}

// host_steps trains with host buffers (the reference).
static int
host_steps(struct rank *a, ferry_client *c)
{
	float  g[TOTAL];
	float *wp[NT], *gp[NT];
	size_t off = 0;
	int    rv;
	for (int t = 0; t < NT; t++) {
		wp[t] = a->w + off;
		gp[t] = g + off;
		off += lens[t];
	}
	if (a->rank == 0 &&
	    (rv = ferry_client_init_weights(c, (const float *const *) wp)) !=
	        FERRY_OK) {
		return rank_fail(a, rv, "init_weights",
		    ferry_client_last_error(c));
	}
	if ((rv = ferry_client_pull(c, wp)) != FERRY_OK) {
		return rank_fail(a, rv, "pull", ferry_client_last_error(c));
	}
	for (int k = 0; k < STEPS; k++) {
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				gp[t][i] = grad_for(a->rank, k, t, i);
			}
		}
		if ((rv = ferry_client_push_pull(c, (const float *const *) gp,
		         10, wp)) != FERRY_OK) {
			return rank_fail(a, rv, "push_pull",
			    ferry_client_last_error(c));
		}
	}
	return FERRY_OK;
}

// device_steps trains through libferry_cuda: rank 0 on the legacy default
// stream, rank 1 on a stream of its own.
static int
device_steps(struct rank *a, ferry_client *c)
{
	float        g[TOTAL];
	float       *d_w = NULL, *d_g = NULL;
	cudaStream_t s  = NULL;
	ferry_cuda  *x  = NULL;
	int          rv = FERRY_OK;

	if (cudaMalloc((void **) &d_w, sizeof(a->w)) != cudaSuccess ||
	    cudaMalloc((void **) &d_g, sizeof(g)) != cudaSuccess ||
	    cudaMemcpy(d_w, a->w, sizeof(a->w), cudaMemcpyHostToDevice) !=
	        cudaSuccess ||
	    (a->rank == 1 && cudaStreamCreate(&s) != cudaSuccess)) {
		rv = rank_fail(a, FERRY_ESINK, "cuda set-up",
		    cudaGetErrorString(cudaGetLastError()));
		goto out;
	}
	if ((rv = ferry_cuda_open(c, d_w, d_g, s, &x)) != FERRY_OK) {
		rank_fail(a, rv, "ferry_cuda_open",
		    ferry_cuda_last_error(NULL));
		goto out;
	}
	if ((a->rank == 0 && (rv = ferry_cuda_init_weights(x)) != FERRY_OK) ||
	    (rv = ferry_cuda_pull(x)) != FERRY_OK) {
		rank_fail(a, rv, "init/pull", ferry_cuda_last_error(x));
		goto out;
	}
	for (int k = 0; k < STEPS; k++) {
		size_t off = 0;
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				g[off++] = grad_for(a->rank, k, t, i);
			}
		}
		if (cudaMemcpy(d_g, g, sizeof(g), cudaMemcpyHostToDevice) !=
		    cudaSuccess) {
			rv = rank_fail(a, FERRY_ESINK,
			    "gradient to the device",
			    cudaGetErrorString(cudaGetLastError()));
			goto out;
		}
		if ((rv = ferry_cuda_push_pull(x, 10)) != FERRY_OK) {
			rank_fail(a, rv, "ferry_cuda_push_pull",
			    ferry_cuda_last_error(x));
			goto out;
		}
	}
	if (cudaMemcpy(a->w, d_w, sizeof(a->w), cudaMemcpyDeviceToHost) !=
	    cudaSuccess) {
		rv = rank_fail(a, FERRY_ESINK, "weights to the host",
		    cudaGetErrorString(cudaGetLastError()));
	}
out:
	ferry_cuda_close(x);
	cudaFree(d_w);
	cudaFree(d_g);
	if (s != NULL) {
		cudaStreamDestroy(s);
	}
	return a->rv = rv;
}

static void *
rank_main(void *arg)
{
	struct rank             *a     = arg;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", 40 }, { "b", 7 },
		{ "c", 1 } };
	ferry_client            *c     = NULL;
	size_t                   off   = 0;

	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.lr            = 0.5;
	o.timeout_ms    = 20000;
	o.codec_push    = a->push;
	o.codec_pull    = a->pull;
	o.warmup_steps  = a->warmup;
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			a->w[off++] = (float) i;
		}
	}
	if ((a->rv = ferry_client_open(&o, &c)) != FERRY_OK) {
		rank_fail(a, a->rv, "open", "");
	} else if ((a->rv = ferry_client_declare(c, d, NT)) != FERRY_OK) {
		rank_fail(a, a->rv, "declare", ferry_client_last_error(c));
	} else if (a->device) {
		device_steps(a, c);
	} else {
		host_steps(a, c);
	}
	if (a->rv != FERRY_OK && c != NULL) {
		(void) ferry_client_leave(c); // the other rank must not wait
	}
	ferry_client_close(c);
	return NULL;
}

// run trains a fresh 2-trainer job (2 servers) and leaves rank 0's final
// weights in w; both ranks must succeed and agree bit for bit.
static void
run(int device, const char *push, const char *pull, uint32_t warmup,
    float w[TOTAL])
{
	struct cluster cl;
	struct rank    a[2];
	pthread_t      th[2];

	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url    = ps_scheduler_url(cl.sched);
		a[r].rank   = r;
		a[r].device = device;
		a[r].push   = push;
		a[r].pull   = pull;
		a[r].warmup = warmup;
		ck_assert_int_eq(
		    pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
	}
	cluster_stop(&cl);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(a[r].rv == 0, "%s push %s pull %s rank %d: %s",
		    device ? "device" : "host", push ? push : "none",
		    pull ? pull : "none", r, a[r].err);
	}
	ck_assert_msg(memcmp(a[0].w, a[1].w, sizeof(a[0].w)) == 0,
	    "%s: the two ranks' weights differ (sync mode)",
	    device ? "device" : "host");
	memcpy(w, a[0].w, sizeof(a[0].w));
}

// compare trains the job both ways and checks max |w_host - w_device| <=
// bound (0: the same bits).
static void
compare(const char *push, const char *pull, uint32_t warmup, float bound)
{
	float  wh[TOTAL], wd[TOTAL], m = 0;
	size_t at = 0;
	run(0, push, pull, warmup, wh);
	run(1, push, pull, warmup, wd);
	for (size_t i = 0; i < TOTAL; i++) {
		float d = fabsf(wh[i] - wd[i]);
		ck_assert_msg(isfinite(wd[i]), "device weight %zu is %g", i,
		    (double) wd[i]);
		if (d > m || (bound == 0 && memcmp(&wh[i], &wd[i], 4) != 0)) {
			m  = d > m ? d : m;
			at = i;
		}
	}
	printf("push %s pull %s warmup %u: max |w_host - w_device| = %g (at "
	       "%zu: host %.9g device %.9g)\n",
	    push ? push : "none", pull ? pull : "none", warmup, (double) m, at,
	    (double) wh[at], (double) wd[at]);
	if (bound == 0) {
		ck_assert_msg(memcmp(wh, wd, sizeof(wh)) == 0,
		    "codec none: device weights differ from the host path's "
		    "(element %zu: %.9g vs %.9g)",
		    at, (double) wd[at], (double) wh[at]);
	} else {
		ck_assert_msg(m <= bound,
		    "push %s pull %s: |w_host - w_device| = %g > %g", push,
		    pull, (double) m, (double) bound);
	}
}

START_TEST(test_cuda_fp32_bitwise)
{
	compare(NULL, NULL, 0, 0);
}
END_TEST

START_TEST(test_cuda_q8_within_bound)
{
	compare("q8", "q8", 0, 1e-3f);
}
END_TEST

// Two warm-up steps push fp32 from the staging buffer, the rest q8 codes
// encoded on the device: the residual must start at zero after warm-up.
START_TEST(test_cuda_q8_warmup)
{
	compare("q8", "q8", 2, 1e-3f);
}
END_TEST

// q4 pushes encoded on the device, with "sign" pulls, which the device
// cannot decode: the weights come through the page-locked buffer.
START_TEST(test_cuda_host_pull)
{
	compare("q4", "sign", 0, 1e-3f);
}
END_TEST

// Bad arguments answer FERRY_EINVAL with a reason, never touch the GPU.
START_TEST(test_cuda_errors)
{
	ferry_cuda *x = NULL;
	ck_assert_int_eq(ferry_cuda_open(NULL, NULL, NULL, NULL, &x),
	    FERRY_EINVAL);
	ck_assert_ptr_null(x);
	ck_assert_str_ne(ferry_cuda_last_error(NULL), "");
	ck_assert_int_eq(ferry_cuda_push_pull(NULL, 1), FERRY_EINVAL);
	ferry_cuda_close(NULL);
}
END_TEST

int
main(void)
{
	int         n = 0, failed;
	// Asked in a child-free process: Check runs the cases in-process.
	cudaError_t e = cudaGetDeviceCount(&n);
	if (!ferry_cuda_available()) {
		printf("SKIP: no usable CUDA device (ferry_cuda_available() = "
		       "0; cudaGetDeviceCount: %s, %d devices)\n",
		    cudaGetErrorString(e), n);
		return 77;
	}
	printf("CUDA devices: %d\n", n);
	Suite *s  = suite_create("cuda");
	TCase *tc = tcase_create("cuda");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cuda_errors);
	tcase_add_test(tc, test_cuda_fp32_bitwise);
	tcase_add_test(tc, test_cuda_q8_within_bound);
	tcase_add_test(tc, test_cuda_q8_warmup);
	tcase_add_test(tc, test_cuda_host_pull);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_VERBOSE);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	nng_fini();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
