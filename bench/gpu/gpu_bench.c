// gpu_bench.c — GPU figures for issue 6.
//
// 1. MLP training step (forward + backward, summed gradient left on the
//    device: tr__cuda_grad_device) for hidden sizes 256..8192 and batches
//    64..4096, in TFLOP/s, beside the same sequence of plain cuBLAS SGEMMs
//    (same shapes, same transposes, same stream discipline) timed in the
//    same run; the ratio is what the 60% target is about. The
//    full tr_backend_grad (gradient copied to host buffers) is reported
//    too.
// 2. Device codecs (encode, error-feedback encode, decode-add) in GB/s of
//    fp32 input, beside a device-to-device cudaMemcpy of the same buffer.
//
// Every figure is the median of --repeats timed runs after one warm-up,
// timed with CUDA events on the stream doing the work. Output: a markdown
// table on stdout, and with --json FILE the same records as JSON.
// Without a usable GPU it prints why and exits 0 (a skip).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend_cuda.h"
#include "codec_cuda.h"
#include "tr_impl.h"

#define MAXREP 101

static int repeats = 10;

static double
now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int
cmp_f(const void *a, const void *b)
{
	float x = *(const float *) a, y = *(const float *) b;
	return x < y ? -1 : x > y;
}

static float
median(float *v, int n)
{
	qsort(v, (size_t) n, sizeof(float), cmp_f);
	return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

#define CK(call)                                                              \
	do {                                                                  \
		if ((call) != 0) {                                            \
			fprintf(stderr, "gpu_bench: %s failed at line %d\n",  \
			    #call, __LINE__);                                 \
			exit(1);                                              \
		}                                                             \
	} while (0)

// gemm_seq runs the step's SGEMMs (forward, dW, dA) on plain buffers.
static void
gemm_seq(cublasHandle_t h, const struct tr_arch *a, size_t n, float *w,
    float *act, float *d, float *g)
{
	const float one = 1.0f, zero = 0.0f;
	for (int l = 1; l <= a->n_layers; l++) {
		int ni = (int) a->sizes[l - 1], no = (int) a->sizes[l];
		CK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, no, (int) n, ni,
		    &one, w, ni, act, ni, &zero, d, no));
	}
	for (int l = a->n_layers; l >= 1; l--) {
		int ni = (int) a->sizes[l - 1], no = (int) a->sizes[l];
		CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, ni, no, (int) n,
		    &one, act, ni, d, no, &zero, g, ni));
		if (l > 1) {
			CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, ni,
			    (int) n, no, &one, w, ni, d, no, &zero, act, ni));
		}
	}
}

static double
step_flops(const struct tr_arch *a, size_t n)
{
	double f = 0;
	for (int l = 1; l <= a->n_layers; l++) {
		double mn = (double) a->sizes[l - 1] * (double) a->sizes[l];
		f += 2.0 * n * mn * (l > 1 ? 3 : 2);
	}
	return f;
}

static FILE *json;
static int   json_first = 1;

static void json_rec(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static void
json_rec(const char *fmt, ...)
{
	va_list ap;
	if (json == NULL) {
		return;
	}
	fputs(json_first ? "\n  " : ",\n  ", json);
	json_first = 0;
	va_start(ap, fmt);
	vfprintf(json, fmt, ap);
	va_end(ap);
}

static void
bench_mlp(size_t hidden, size_t batch)
{
	struct tr_arch         a;
	struct tr_dataset      ds;
	struct tr_params       w, g, wp, gp; // wp, gp: pinned (the trainer's)
	struct tr_backend     *b = NULL;
	struct tr_backend_opts o = TR_BACKEND_OPTS_INIT;
	char                   spec[64], err[256];
	uint32_t              *idx;
	float                  t_step[MAXREP], t_gemm[MAXREP], t_host[MAXREP];
	float          t_hostp[MAXREP], t_setw[MAXREP], t_setwp[MAXREP];
	cudaEvent_t    e0, e1;
	cublasHandle_t h;
	float         *dw, *dact, *dd, *dg;
	snprintf(spec, sizeof(spec), "%zu,%zu,%zu,16", hidden, hidden, hidden);
	CK(tr_arch_parse(spec, &a, NULL, 0));
	CK(tr_dataset_synthetic(&ds, batch, hidden, 16, 1));
	CK(tr_params_init(&w, &a));
	CK(tr_params_init(&g, &a));
	CK(tr_params_init(&wp, &a));
	CK(tr_params_init(&gp, &a));
	tr_params_randomize(&w, 1);
	memcpy(wp.data, w.data,
	    (size_t) ((char *) (w.t[w.n_tensors - 1] +
	                  w.len[w.n_tensors - 1]) -
	        (char *) w.data));
	o.max_batch = batch;
	if (tr_backend_alloc("cuda", &a, &o, &b, err, sizeof(err)) != FB_OK) {
		fprintf(stderr, "gpu_bench: %s\n", err);
		exit(1);
	}
	CK(tr_backend_set_weights(b, tr_params_cptrs(&w)));
	idx = malloc(batch * sizeof(*idx));
	for (size_t i = 0; i < batch; i++) {
		idx[i] = (uint32_t) i;
	}
	cudaStream_t s = (cudaStream_t) tr__cuda_stream(b);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(tr__cuda_grad_device(b, &ds, idx, batch, NULL, NULL)); // warm-up
	CK(tr__cuda_sync(b));
	for (int r = 0; r < repeats; r++) {
		CK(cudaEventRecord(e0, s));
		CK(tr__cuda_grad_device(b, &ds, idx, batch, NULL, NULL));
		CK(cudaEventRecord(e1, s));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&t_step[r], e0, e1));
	}
	// The full grad into host buffers, staged (g) and straight into
	// page-locked ones (gp, as the trainer pins its own); set_weights
	// likewise. Wall clock: the host copies count.
	CK(tr_backend_pin(b, &wp));
	CK(tr_backend_pin(b, &gp));
	CK(tr_backend_grad(b, &ds, idx, batch, g.t, NULL));
	CK(tr_backend_grad(b, &ds, idx, batch, gp.t, NULL));
	for (int r = 0; r < repeats; r++) {
		double t0 = now_ms();
		CK(tr_backend_grad(b, &ds, idx, batch, g.t, NULL));
		t_host[r] = (float) (now_ms() - t0);
		t0        = now_ms();
		CK(tr_backend_grad(b, &ds, idx, batch, gp.t, NULL));
		t_hostp[r] = (float) (now_ms() - t0);
		t0         = now_ms();
		CK(tr_backend_set_weights(b, tr_params_cptrs(&w)));
		CK(tr__cuda_sync(b));
		t_setw[r] = (float) (now_ms() - t0);
		t0        = now_ms();
		CK(tr_backend_set_weights(b, tr_params_cptrs(&wp)));
		CK(tr__cuda_sync(b));
		t_setwp[r] = (float) (now_ms() - t0);
	}
	for (size_t i = 0; i < g.n_tensors; i++) { // same bits either way
		if (memcmp(g.t[i], gp.t[i], g.len[i] * sizeof(float)) != 0) {
			fprintf(stderr,
			    "gpu_bench: pinned gradient differs\n");
			exit(1);
		}
	}
	// Plain SGEMMs of the same shapes on buffers of the largest sizes.
	size_t mw = 0, ma = 0;
	for (int l = 1; l <= a.n_layers; l++) {
		size_t m = a.sizes[l - 1] * a.sizes[l];
		mw       = m > mw ? m : mw;
		ma       = batch * a.sizes[l] > ma ? batch * a.sizes[l] : ma;
		ma = batch * a.sizes[l - 1] > ma ? batch * a.sizes[l - 1] : ma;
	}
	CK(cudaMalloc((void **) &dw, mw * 4));
	CK(cudaMalloc((void **) &dg, mw * 4));
	CK(cudaMalloc((void **) &dact, ma * 4));
	CK(cudaMalloc((void **) &dd, ma * 4));
	CK(cudaMemset(dw, 0, mw * 4));
	CK(cudaMemset(dact, 0, ma * 4));
	CK(cudaMemset(dd, 0, ma * 4));
	CK(cublasCreate(&h));
	CK(cublasSetStream(h, s));
	gemm_seq(h, &a, batch, dw, dact, dd, dg);
	for (int r = 0; r < repeats; r++) {
		CK(cudaEventRecord(e0, s));
		gemm_seq(h, &a, batch, dw, dact, dd, dg);
		CK(cudaEventRecord(e1, s));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&t_gemm[r], e0, e1));
	}
	float  ms = median(t_step, repeats), mg = median(t_gemm, repeats);
	float  mh = median(t_host, repeats), mhp = median(t_hostp, repeats);
	float  msw = median(t_setw, repeats), mswp = median(t_setwp, repeats);
	double fl = step_flops(&a, batch);
	double ts = fl / (ms * 1e-3) / 1e12, tg = fl / (mg * 1e-3) / 1e12;
	printf("| %5zu | %5zu | %9.3f | %7.2f | %9.3f | %7.2f | %5.0f%% | "
	       "%10.3f | %10.3f | %9.3f | %9.3f |\n",
	    hidden, batch, ms, ts, mg, tg, 100.0 * ts / tg, mh, mhp, msw,
	    mswp);
	json_rec(
	    "{\"kind\": \"mlp_step\", \"layers\": \"%s\", \"hidden\": %zu, "
	    "\"batch\": %zu, \"step_ms\": %.4f, \"step_tflops\": %.3f, "
	    "\"gemm_ms\": %.4f, \"gemm_tflops\": %.3f, \"ratio\": %.3f, "
	    "\"grad_to_host_ms\": %.4f, \"grad_to_host_pinned_ms\": %.4f, "
	    "\"set_weights_ms\": %.4f, \"set_weights_pinned_ms\": %.4f}",
	    spec, hidden, batch, ms, ts, mg, tg, ts / tg, mh, mhp, msw, mswp);
	fflush(stdout);
	cublasDestroy(h);
	cudaFree(dw);
	cudaFree(dg);
	cudaFree(dact);
	cudaFree(dd);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	free(idx);
	tr_backend_free(b); // before the pinned buffers go
	tr_params_fini(&w);
	tr_params_fini(&g);
	tr_params_fini(&wp);
	tr_params_fini(&gp);
	tr_dataset_fini(&ds);
}

static void
bench_codecs(size_t n)
{
	static const struct {
		const char *name;
		uint32_t    id;
	} cs[] = { { "none", FCUDA_DC_NONE }, { "fp16", FCUDA_DC_FP16 },
		{ "bf16", FCUDA_DC_BF16 }, { "q8", FCUDA_DC_Q8 },
		{ "q4", FCUDA_DC_Q4 }, { "q2", FCUDA_DC_Q2 } };
	struct fcuda__dctx ctx;
	cudaStream_t       s;
	cudaEvent_t        e0, e1;
	float             *x, *y, *e, t[MAXREP], *hx;
	uint8_t           *out;
	CK(cudaStreamCreate(&s));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMalloc((void **) &x, n * 4));
	CK(cudaMalloc((void **) &y, n * 4));
	CK(cudaMalloc((void **) &e, n * 4));
	CK(cudaMalloc((void **) &out, n * 4 + 4096));
	hx = malloc(n * 4);
	struct tr_rng r;
	tr_rng_seed(&r, 9);
	for (size_t i = 0; i < n; i++) {
		hx[i] = tr_rng_normal(&r);
	}
	CK(cudaMemcpy(x, hx, n * 4, cudaMemcpyHostToDevice));
	CK(cudaMemset(e, 0, n * 4));
	CK(cudaMemset(y, 0, n * 4));
	CK(fcuda__dctx_init(&ctx, s));
	for (int k = 0; k <= repeats; k++) {
		CK(cudaEventRecord(e0, s));
		CK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice, s));
		CK(cudaEventRecord(e1, s));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&t[k > 0 ? k - 1 : 0], e0, e1));
	}
	float  mc       = median(t, repeats);
	double copy_gbs = (double) n * 4 / (mc * 1e-3) / 1e9;
	printf(
	    "\nDevice codecs, %zu floats (%.0f MiB), bucket 512; GB/s of "
	    "fp32 input; device-to-device cudaMemcpy of the buffer: %.3f ms "
	    "= %.1f GB/s\n\n",
	    n, n * 4.0 / (1 << 20), mc, copy_gbs);
	printf("| codec | op | ms | GB/s | vs memcpy |\n");
	printf("|---|---|---:|---:|---:|\n");
	json_rec("{\"kind\": \"memcpy_d2d\", \"n\": %zu, \"ms\": %.4f, "
	         "\"gbs\": %.2f}",
	    n, mc, copy_gbs);
	for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ci++) {
		struct fcuda__dcodec c     = { cs[ci].id, 512 };
		size_t               len   = fcuda__dcodec_bound(&c, n);
		static const char   *ops[] = { "encode", "ef_encode",
			  "decode_add" };
		for (int op = 0; op < 3; op++) {
			for (int k = 0; k <= repeats; k++) {
				CK(cudaEventRecord(e0, s));
				if (op == 0) {
					CK(fcuda__dcodec_encode(&ctx, &c, x, n,
					    out));
				} else if (op == 1) {
					CK(fcuda__dcodec_ef_encode(&ctx, &c, x,
					    e, n, out));
				} else {
					CK(fcuda__dcodec_decode_add(&ctx, &c,
					    out, len, n, y));
				}
				CK(cudaEventRecord(e1, s));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&t[k > 0 ? k - 1 : 0],
				    e0, e1));
			}
			CK(fcuda__dctx_check(&ctx));
			float  m   = median(t, repeats);
			double gbs = (double) n * 4 / (m * 1e-3) / 1e9;
			printf("| %s | %s | %.3f | %.1f | %.0f%% |\n",
			    cs[ci].name, ops[op], m, gbs,
			    100.0 * gbs / copy_gbs);
			json_rec(
			    "{\"kind\": \"codec\", \"codec\": \"%s\", \"op\": "
			    "\"%s\", \"n\": %zu, \"bucket\": 512, \"ms\": %.4f, "
			    "\"gbs\": %.2f, \"vs_memcpy\": %.3f}",
			    cs[ci].name, ops[op], n, m, gbs, gbs / copy_gbs);
		}
	}
	fcuda__dctx_fini(&ctx);
	free(hx);
	cudaFree(x);
	cudaFree(y);
	cudaFree(e);
	cudaFree(out);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaStreamDestroy(s);
}

static void
usage(void)
{
	fprintf(stderr,
	    "usage: gpu_bench [--json FILE] [--repeats N] [--quick] "
	    "[--device N]\n"
	    "  --quick: hidden 256..1024, batch 64..1024, 16M-float codecs\n");
}

int
main(int argc, char **argv)
{
	static const size_t   hiddens[] = { 256, 1024, 2048, 4096, 8192 };
	static const size_t   batches[] = { 64, 256, 1024, 4096 };
	const char           *json_path = NULL;
	int                   quick = 0, dev = 0;
	char                  why[160] = "";
	struct cudaDeviceProp prop;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
			json_path = argv[++i];
		} else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
			repeats = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
			dev = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--quick") == 0) {
			quick = 1;
		} else {
			usage();
			return 2;
		}
	}
	if (repeats < 1 || repeats > MAXREP - 1) {
		usage();
		return 2;
	}
	if (tr__cuda_device_count(why, sizeof(why)) <= dev) {
		printf("SKIP gpu_bench: no CUDA device %d (%s)\n", dev,
		    why[0] ? why : "ordinal out of range");
		return 0;
	}
	CK(cudaSetDevice(dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	if (json_path != NULL && (json = fopen(json_path, "w")) == NULL) {
		perror(json_path);
		return 1;
	}
	printf(
	    "# gpu_bench on %s (cuda:%d, sm_%d%d, %.0f GiB), median of %d\n\n",
	    prop.name, dev, prop.major, prop.minor,
	    prop.totalGlobalMem / 1073741824.0, repeats);
	printf("MLP step: layers hidden,hidden,hidden,16, FP32 (no TF32); "
	       "step = forward + backward with the gradient left on the "
	       "device; GEMM = the same SGEMMs alone; to-host = the full "
	       "tr_backend_grad into staged / page-locked (pinned) host "
	       "buffers; set_w = tr_backend_set_weights, staged / pinned\n\n");
	printf("| hidden | batch | step ms | TFLOP/s | GEMM ms | TFLOP/s | "
	       "step/GEMM | to-host ms | pinned ms | set_w ms | pinned ms "
	       "|\n");
	printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	if (json != NULL) {
		fprintf(json,
		    "{\"device\": \"%s\", \"repeats\": %d, \"records\": [",
		    prop.name, repeats);
	}
	for (size_t hi = 0; hi < sizeof(hiddens) / sizeof(hiddens[0]); hi++) {
		for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]);
		     bi++) {
			if (quick &&
			    (hiddens[hi] > 1024 || batches[bi] > 1024)) {
				continue;
			}
			bench_mlp(hiddens[hi], batches[bi]);
		}
	}
	bench_codecs(quick ? ((size_t) 1 << 24) : ((size_t) 1 << 26));
	if (json != NULL) {
		fprintf(json, "\n]}\n");
		fclose(json);
	}
	return 0;
}
