// backend_cuda.cu — the cuBLAS implementation of struct tr_backend_ops.
//
// DESIGN
// Same algebra as backend_cpu.c (read its DESIGN first). Activations are
// row-major [rows x width] and W_l is row-major [out x in]; cuBLAS is
// column-major, where a row-major [r x c] matrix reads as its transpose
// [c x r] with the same leading dimension. So, with no explicit transpose:
//   Z = A W^T   (row-major [n x out])  ==  col-major Z^T = op_T(W) A^T
//       sgemm(T, N, m=out, n=n, k=in, W ld in, A ld in, Z ld out)
//   dW = D^T A  (row-major [out x in]) ==  col-major dW^T = A^T op_T(D^T)
//       sgemm(N, T, m=in, n=out, k=n, A ld in, D ld out, dW ld in)
//   dA = D W    (row-major [n x in])   ==  col-major dA^T = W^T D^T
//       sgemm(N, N, m=in, n=n, k=out, W ld in, D ld out, dA ld in)
// Kernels: bias (+ReLU) in one pass, the ReLU mask of the backward pass,
// softmax cross-entropy (one warp a row; the max and the sum of
// exponentials are reduced with shuffles in a fixed pattern, the sum in
// double as on the CPU), the bias gradient as column sums (each thread
// sums a fixed set of rows, then a fixed-order reduction), and the
// summed loss by one block in a fixed order: every result is
// deterministic run to run.
//
// Memory. Weights, gradients, activations and deltas live on the device,
// allocated once in alloc for `cap` rows; the training set is uploaded
// once per data set (two slots, keyed by pointer: train and test) and a
// minibatch is gathered on the device from the uploaded row indices. Host
// traffic per step: the indices in, the gradient and the loss out.
// Overlap: the backward pass runs from the last layer to the first, and as
// soon as layer l's dW and db are done (an event on the compute stream), a
// second stream copies them into a pinned buffer while the device goes on
// with layer l-1; the host copies each layer from pinned memory into the
// caller's g[] as soon as that layer's copy has landed. Nothing on the
// per-step path allocates.
//
// Errors: a CUDA or cuBLAS failure during a step gives FB_ETRANSPORT (the
// device is treated like a failed link: the trainer stops).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend_cuda.h"
#include "tr_impl.h"

#define EVAL_CHUNK 1024
#define WARPS 8   // warps per block in the row kernels
#define CS_T 32   // k_colsum tile
#define CU_PINS 4 // pinned host ranges (weights, gradients, spares)

struct dscache {
	const struct tr_dataset *key;
	size_t                   n, dim;
	float                   *x;
	int32_t                 *y;
	uint64_t                 used;
};

struct cu {
	struct tr_arch a;
	int            dev;
	size_t         cap, max_batch, max_width, np;
	size_t         off[TR_MAX_TENSORS];
	size_t         len[TR_MAX_TENSORS];
	cublasHandle_t blas;
	cudaStream_t   s;                        // compute
	cudaStream_t   sc;                       // gradient copies to the host
	cudaEvent_t    ev_wup;                   // weights uploaded
	cudaEvent_t    ev_idx;                   // h_idx read by the device
	cudaEvent_t    ev_gready[TR_MAX_LAYERS]; // layer's grad computed
	cudaEvent_t    ev_gcopied[TR_MAX_LAYERS]; // layer's grad on host
	int            have_w;
	float         *d_w, *d_g;
	float         *d_act[TR_MAX_LAYERS + 1];
	float         *d_d0, *d_d1;
	uint32_t      *d_idx;
	double        *d_rowloss;
	double        *d_correct;
	double        *d_red; // [0] loss sum, [1] correct count
	float         *h_w, *h_g;
	uint32_t      *h_idx;
	double        *h_red;
	struct dscache ds[2];
	uint64_t       tick;
	// Host ranges page-locked by pin: weights and gradients inside one
	// are copied straight to and from the device, not through h_w/h_g.
	struct {
		char  *base;
		size_t bytes;
	} pins[CU_PINS];
	int n_pins;
};

// ---- kernels --------------------------------------------------------------

__global__ static void
k_gather(const float *x, const uint32_t *idx, size_t n, size_t d, float *out)
{
	size_t total = n * d, stride = (size_t) gridDim.x * blockDim.x;
	for (size_t t = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	     t < total; t += stride) {
		size_t r = t / d, c = t - r * d;
		out[t] = x[(size_t) idx[r] * d + c];
	}
}

// k_bias_act: z[i][j] = z[i][j] + b[j], then max(., 0) when relu.
__global__ static void
k_bias_act(float *z, const float *b, size_t n, size_t no, int relu)
{
	size_t total = n * no, stride = (size_t) gridDim.x * blockDim.x;
	for (size_t t = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	     t < total; t += stride) {
		float v = z[t] + b[t % no];
		z[t]    = relu ? (v > 0.0f ? v : 0.0f) : v;
	}
}

// k_relu_mask: d[i] = a[i] > 0 ? d[i] : 0.
__global__ static void
k_relu_mask(float *d, const float *a, size_t cnt)
{
	size_t stride = (size_t) gridDim.x * blockDim.x;
	for (size_t t = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	     t < cnt; t += stride) {
		d[t] = a[t] > 0.0f ? d[t] : 0.0f;
	}
}

// k_xent: one warp per row of logits z [n x k]. Row i's label is
// y[idx[i]] (idx != NULL) or y[i]. Writes rowloss[i] = log(sum exp(z -
// max)) - (z_y - max). grad: the row becomes softmax - onehot (the CPU's
// operation order: e = expf(z - m), p = e * (float) (1 / s), p_y -= 1).
// correct != NULL: correct[i] = 1 when the first largest logit is y.
__global__ static void
k_xent(float *z, size_t n, size_t k, const int32_t *y, const uint32_t *idx,
    double *rowloss, double *correct, int grad)
{
	size_t lane = threadIdx.x & 31;
	size_t row  = (size_t) blockIdx.x * WARPS + (threadIdx.x >> 5);
	size_t rs   = (size_t) gridDim.x * WARPS;
	for (; row < n; row += rs) {
		float *r    = z + row * k;
		int    lab  = y[idx != NULL ? idx[row] : row];
		float  m    = -INFINITY;
		size_t best = (size_t) -1;
		for (size_t j = lane; j < k; j += 32) {
			if (best == (size_t) -1 || r[j] > m) {
				m    = r[j];
				best = j;
			}
		}
		for (int o = 16; o > 0; o >>= 1) {
			float  om = __shfl_down_sync(0xffffffffu, m, o);
			size_t ob = __shfl_down_sync(0xffffffffu, best, o);
			if (ob != (size_t) -1 &&
			    (best == (size_t) -1 || om > m ||
			        (om == m && ob < best))) {
				m    = om;
				best = ob;
			}
		}
		m        = __shfl_sync(0xffffffffu, m, 0);
		best     = __shfl_sync(0xffffffffu, best, 0);
		float zy = r[lab] - m; // read before the row is overwritten
		__syncwarp();
		double s = 0.0;
		for (size_t j = lane; j < k; j += 32) {
			float e = expf(r[j] - m);
			if (grad) {
				r[j] = e;
			}
			s += (double) e;
		}
		for (int o = 16; o > 0; o >>= 1) {
			s += __shfl_down_sync(0xffffffffu, s, o);
		}
		s = __shfl_sync(0xffffffffu, s, 0);
		if (grad) {
			float inv = (float) (1.0 / s);
			for (size_t j = lane; j < k; j += 32) {
				float p = r[j] * inv;
				r[j]    = j == (size_t) lab ? p - 1.0f : p;
			}
		}
		if (lane == 0) {
			rowloss[row] = log(s) - (double) zy;
			if (correct != NULL) {
				correct[row] = best == (size_t) lab ? 1.0
				                                    : 0.0;
			}
		}
	}
}

// k_colsum: gb[j] = sum_i d[i][j] for d [n x no]. Block (CS_T, CS_T):
// thread (tx, ty) sums rows ty, ty + CS_T, ... of column tx in order, then
// thread ty == 0 adds the CS_T partials in order: deterministic.
__global__ static void
k_colsum(const float *d, size_t n, size_t no, float *gb)
{
	__shared__ float part[CS_T][CS_T + 1];
	size_t           col = (size_t) blockIdx.x * CS_T + threadIdx.x;
	float            acc = 0.0f;
	if (col < no) {
		for (size_t i = threadIdx.y; i < n; i += CS_T) {
			acc += d[i * no + col];
		}
	}
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && col < no) {
		float s = part[0][threadIdx.x];
		for (int t = 1; t < CS_T; t++) {
			s += part[t][threadIdx.x];
		}
		gb[col] = s;
	}
}

// k_sum: out[0] = sum of v[0..n) (and out[1] of w[0..n) when w != NULL),
// one block of 1024 threads in a fixed order.
__global__ static void
k_sum(const double *v, const double *w, size_t n, double *out)
{
	__shared__ double sv[1024], sw[1024];
	double            a = 0.0, b = 0.0;
	for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
		a += v[i];
		if (w != NULL) {
			b += w[i];
		}
	}
	sv[threadIdx.x] = a;
	sw[threadIdx.x] = b;
	__syncthreads();
	for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
		if (threadIdx.x < o) {
			sv[threadIdx.x] += sv[threadIdx.x + o];
			sw[threadIdx.x] += sw[threadIdx.x + o];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[0] = sv[0];
		if (w != NULL) {
			out[1] = sw[0];
		}
	}
}

// ---- host side ------------------------------------------------------------

static unsigned
blocks_for(size_t work, unsigned threads)
{
	size_t g = (work + threads - 1) / threads;
	g        = g < 1 ? 1 : g;
	return g > 65535u * 16u ? 65535u * 16u : (unsigned) g;
}

extern "C" int
tr__cuda_device_count(char *why, size_t whylen)
{
	int         n  = 0;
	cudaError_t rv = cudaGetDeviceCount(&n);
	if (rv != cudaSuccess) {
		tr__errf(0, why, whylen, "cudaGetDeviceCount: %s",
		    cudaGetErrorString(rv));
		cudaGetLastError();
		return 0;
	}
	if (n <= 0) {
		tr__errf(0, why, whylen,
		    "cudaGetDeviceCount reports 0 devices");
		return 0;
	}
	return n;
}

static void
cuda_free(void *state)
{
	struct cu *c = (struct cu *) state;
	if (c == NULL) {
		return;
	}
	cudaSetDevice(c->dev);
	if (c->s != NULL) {
		cudaStreamSynchronize(c->s);
	}
	if (c->sc != NULL) {
		cudaStreamSynchronize(c->sc);
	}
	for (int i = 0; i < 2; i++) {
		cudaFree(c->ds[i].x);
		cudaFree(c->ds[i].y);
	}
	cudaFree(c->d_w);
	cudaFree(c->d_g);
	for (int l = 0; l <= c->a.n_layers; l++) {
		cudaFree(c->d_act[l]);
	}
	cudaFree(c->d_d0);
	cudaFree(c->d_d1);
	cudaFree(c->d_idx);
	cudaFree(c->d_rowloss);
	cudaFree(c->d_correct);
	cudaFree(c->d_red);
	for (int i = 0; i < c->n_pins; i++) {
		cudaHostUnregister(c->pins[i].base);
	}
	cudaFreeHost(c->h_w);
	cudaFreeHost(c->h_g);
	cudaFreeHost(c->h_idx);
	cudaFreeHost(c->h_red);
	if (c->ev_wup != NULL) {
		cudaEventDestroy(c->ev_wup);
	}
	if (c->ev_idx != NULL) {
		cudaEventDestroy(c->ev_idx);
	}
	for (int l = 0; l < TR_MAX_LAYERS; l++) {
		if (c->ev_gready[l] != NULL) {
			cudaEventDestroy(c->ev_gready[l]);
		}
		if (c->ev_gcopied[l] != NULL) {
			cudaEventDestroy(c->ev_gcopied[l]);
		}
	}
	if (c->blas != NULL) {
		cublasDestroy(c->blas);
	}
	if (c->s != NULL) {
		cudaStreamDestroy(c->s);
	}
	if (c->sc != NULL) {
		cudaStreamDestroy(c->sc);
	}
	cudaGetLastError();
	fb_free(c);
}

static int
cuda_alloc(const struct tr_arch *a, const struct tr_backend_opts *o,
    void **state, char *err, size_t errlen)
{
	struct cu  *c        = NULL;
	char        why[160] = "";
	const char *op       = "";
	int         count, dev;
	if (a == NULL || o == NULL || o->max_batch == 0 || a->n_layers < 1 ||
	    a->n_layers > TR_MAX_LAYERS) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "cuda backend: bad architecture or max_batch");
	}
	if ((count = tr__cuda_device_count(why, sizeof(why))) == 0) {
		char dn[24] = "cuda";
		if (o->device >= 0) {
			snprintf(dn, sizeof(dn), "cuda:%d", o->device);
		}
		return tr__errf(FB_EUNSUPP, err, errlen,
		    "--device %s: no usable CUDA GPU on this machine (%s)", dn,
		    why);
	}
	if (o->device >= 0 && o->device >= count) {
		return tr__errf(FB_EUNSUPP, err, errlen,
		    "--device cuda:%d: no such CUDA device (this machine has "
		    "%d, cuda:0..cuda:%d)",
		    o->device, count, count - 1);
	}
	dev = o->device >= 0 ? o->device : (o->rank < 0 ? 0 : o->rank) % count;
	if (cudaSetDevice(dev) != cudaSuccess) {
		cudaGetLastError();
		return tr__errf(FB_EUNSUPP, err, errlen,
		    "--device cuda:%d: cannot select the CUDA device", dev);
	}
	if ((c = (struct cu *) fb_zalloc(sizeof(*c))) == NULL) {
		return tr__errf(FB_ENOMEM, err, errlen,
		    "cuda backend: no memory");
	}
	c->a         = *a;
	c->dev       = dev;
	c->max_batch = o->max_batch;
	c->cap       = o->max_batch > EVAL_CHUNK ? o->max_batch : EVAL_CHUNK;
	for (size_t i = 0; i < tr_arch_n_tensors(a); i++) {
		c->off[i] = c->np;
		c->len[i] = tr_arch_tensor_len(a, i);
		c->np += c->len[i];
	}
	for (int l = 1; l <= a->n_layers; l++) {
		c->max_width = a->sizes[l] > c->max_width ? a->sizes[l]
		                                          : c->max_width;
	}
#define TRY(what, call)                                                       \
	do {                                                                  \
		op = what;                                                    \
		if ((call) != 0) {                                            \
			goto fail;                                            \
		}                                                             \
	} while (0)
	TRY("stream", cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking));
	TRY("stream",
	    cudaStreamCreateWithFlags(&c->sc, cudaStreamNonBlocking));
	TRY("event",
	    cudaEventCreateWithFlags(&c->ev_wup, cudaEventDisableTiming));
	TRY("event",
	    cudaEventCreateWithFlags(&c->ev_idx, cudaEventDisableTiming));
	for (int l = 0; l < a->n_layers; l++) {
		TRY("event",
		    cudaEventCreateWithFlags(&c->ev_gready[l],
		        cudaEventDisableTiming));
		TRY("event",
		    cudaEventCreateWithFlags(&c->ev_gcopied[l],
		        cudaEventDisableTiming));
	}
	TRY("cublasCreate", cublasCreate(&c->blas));
	TRY("cublasSetStream", cublasSetStream(c->blas, c->s));
	TRY("weights", cudaMalloc((void **) &c->d_w, c->np * sizeof(float)));
	TRY("gradients", cudaMalloc((void **) &c->d_g, c->np * sizeof(float)));
	for (int l = 0; l <= a->n_layers; l++) {
		TRY("activations",
		    cudaMalloc((void **) &c->d_act[l],
		        c->cap * a->sizes[l] * sizeof(float)));
	}
	TRY("deltas",
	    cudaMalloc((void **) &c->d_d0,
	        c->cap * c->max_width * sizeof(float)));
	TRY("deltas",
	    cudaMalloc((void **) &c->d_d1,
	        c->cap * c->max_width * sizeof(float)));
	TRY("indices",
	    cudaMalloc((void **) &c->d_idx, c->max_batch * sizeof(uint32_t)));
	TRY("losses",
	    cudaMalloc((void **) &c->d_rowloss, c->cap * sizeof(double)));
	TRY("losses",
	    cudaMalloc((void **) &c->d_correct, c->cap * sizeof(double)));
	TRY("losses", cudaMalloc((void **) &c->d_red, 2 * sizeof(double)));
	TRY("pinned weights",
	    cudaMallocHost((void **) &c->h_w, c->np * sizeof(float)));
	TRY("pinned gradients",
	    cudaMallocHost((void **) &c->h_g, c->np * sizeof(float)));
	TRY("pinned indices",
	    cudaMallocHost((void **) &c->h_idx,
	        c->max_batch * sizeof(uint32_t)));
	TRY("pinned losses",
	    cudaMallocHost((void **) &c->h_red, 2 * sizeof(double)));
#undef TRY
	*state = c;
	return FB_OK;
fail:
	cudaGetLastError();
	cuda_free(c);
	return tr__errf(FB_ENOMEM, err, errlen,
	    "cuda backend on cuda:%d: %s failed (device memory?)", dev, op);
}

static int
cuda_pin(void *state, void *base, size_t bytes)
{
	struct cu *c = (struct cu *) state;
	if (base == NULL || bytes == 0) {
		return FB_EINVAL;
	}
	if (c->n_pins == CU_PINS) {
		return FB_EUNSUPP;
	}
	cudaSetDevice(c->dev);
	if (cudaHostRegister(base, bytes, cudaHostRegisterDefault) !=
	    cudaSuccess) {
		cudaGetLastError(); // e.g. overlaps a range already pinned
		return FB_EUNSUPP;
	}
	c->pins[c->n_pins].base    = (char *) base;
	c->pins[c->n_pins++].bytes = bytes;
	return FB_OK;
}

// all_pinned says whether every tensor t[i] lies in one pinned range.
static int
all_pinned(const struct cu *c, const float *const *t)
{
	for (size_t i = 0; i < tr_arch_n_tensors(&c->a); i++) {
		const char *p  = (const char *) t[i];
		int         in = 0;
		for (int k = 0; k < c->n_pins && !in; k++) {
			in = p >= c->pins[k].base &&
			    p + c->len[i] * sizeof(float) <=
			        c->pins[k].base + c->pins[k].bytes;
		}
		if (!in) {
			return 0;
		}
	}
	return c->n_pins > 0;
}

static int
cuda_set_weights(void *state, const float *const *w)
{
	struct cu *c = (struct cu *) state;
	if (w == NULL) {
		return FB_EINVAL;
	}
	cudaSetDevice(c->dev);
	// The previous upload must have left h_w before it is overwritten.
	if (cudaEventSynchronize(c->ev_wup) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	for (size_t i = 0; i < tr_arch_n_tensors(&c->a); i++) {
		if (w[i] == NULL) {
			return FB_EINVAL;
		}
	}
	if (all_pinned(c, w)) {
		// Straight from the caller's page-locked tensors; waited for,
		// since the caller may change w once this returns.
		for (size_t i = 0; i < tr_arch_n_tensors(&c->a); i++) {
			if (cudaMemcpyAsync(c->d_w + c->off[i], w[i],
			        c->len[i] * sizeof(float),
			        cudaMemcpyHostToDevice, c->s) != cudaSuccess) {
				return FB_ETRANSPORT;
			}
		}
		if (cudaEventRecord(c->ev_wup, c->s) != cudaSuccess ||
		    cudaEventSynchronize(c->ev_wup) != cudaSuccess) {
			return FB_ETRANSPORT;
		}
		c->have_w = 1;
		return FB_OK;
	}
	for (size_t i = 0; i < tr_arch_n_tensors(&c->a); i++) {
		memcpy(c->h_w + c->off[i], w[i], c->len[i] * sizeof(float));
	}
	if (cudaMemcpyAsync(c->d_w, c->h_w, c->np * sizeof(float),
	        cudaMemcpyHostToDevice, c->s) != cudaSuccess ||
	    cudaEventRecord(c->ev_wup, c->s) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	c->have_w = 1;
	return FB_OK;
}

// ds_get returns the device copy of ds, uploading it on first use (the
// only allocation after alloc; once per data set).
static const struct dscache *
ds_get(struct cu *c, const struct tr_dataset *ds)
{
	struct dscache *e = NULL;
	for (int i = 0; i < 2; i++) {
		if (c->ds[i].key == ds && c->ds[i].n == ds->n &&
		    c->ds[i].dim == ds->dim) {
			c->ds[i].used = ++c->tick;
			return &c->ds[i];
		}
	}
	e = c->ds[0].used <= c->ds[1].used ? &c->ds[0] : &c->ds[1];
	cudaFree(e->x);
	cudaFree(e->y);
	memset(e, 0, sizeof(*e));
	if (cudaMalloc((void **) &e->x, ds->n * ds->dim * sizeof(float)) !=
	        cudaSuccess ||
	    cudaMalloc((void **) &e->y, ds->n * sizeof(int32_t)) !=
	        cudaSuccess ||
	    cudaMemcpyAsync(e->x, ds->x, ds->n * ds->dim * sizeof(float),
	        cudaMemcpyHostToDevice, c->s) != cudaSuccess ||
	    cudaMemcpyAsync(e->y, ds->y, ds->n * sizeof(int32_t),
	        cudaMemcpyHostToDevice, c->s) != cudaSuccess ||
	    cudaStreamSynchronize(c->s) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(e->x);
		cudaFree(e->y);
		memset(e, 0, sizeof(*e));
		return NULL;
	}
	e->key  = ds;
	e->n    = ds->n;
	e->dim  = ds->dim;
	e->used = ++c->tick;
	return e;
}

// forward computes d_act[1..L] for n rows of device input x (row stride
// sizes[0]); d_act[L] holds the logits.
static int
forward(struct cu *c, const float *x, size_t n)
{
	const struct tr_arch *a   = &c->a;
	const float          *in  = x;
	const float           one = 1.0f, zero = 0.0f;
	for (int l = 1; l <= a->n_layers; l++) {
		size_t ni = a->sizes[l - 1], no = a->sizes[l];
		float *z = c->d_act[l];
		if (cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int) no,
		        (int) n, (int) ni, &one, c->d_w + c->off[2 * (l - 1)],
		        (int) ni, in, (int) ni, &zero, z,
		        (int) no) != CUBLAS_STATUS_SUCCESS) {
			return FB_ETRANSPORT;
		}
		k_bias_act<<<blocks_for(n * no, 256), 256, 0, c->s>>>(z,
		    c->d_w + c->off[2 * (l - 1) + 1], n, no, l < a->n_layers);
		in = z;
	}
	return cudaGetLastError() == cudaSuccess ? FB_OK : FB_ETRANSPORT;
}

// backward runs after k_xent turned d_act[L] into D_L; it writes the
// summed gradient into d_g and, when host, copies each layer's gradient on
// the copy stream as soon as it is computed: into g (direct: the caller's
// page-locked tensors), else into h_g.
static int
backward(struct cu *c, size_t n, int host, float *const *g, int direct)
{
	const struct tr_arch *a   = &c->a;
	const float           one = 1.0f, zero = 0.0f;
	float                *dz = c->d_act[a->n_layers], *dnext = c->d_d0;
	for (int l = a->n_layers; l >= 1; l--) {
		size_t       ni = a->sizes[l - 1], no = a->sizes[l];
		size_t       tw = 2 * (size_t) (l - 1);
		const float *in = c->d_act[l - 1];
		if (cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int) ni,
		        (int) no, (int) n, &one, in, (int) ni, dz, (int) no,
		        &zero, c->d_g + c->off[tw],
		        (int) ni) != CUBLAS_STATUS_SUCCESS) {
			return FB_ETRANSPORT;
		}
		k_colsum<<<dim3((unsigned) ((no + CS_T - 1) / CS_T)),
		    dim3(CS_T, CS_T), 0, c->s>>>(dz, n, no,
		    c->d_g + c->off[tw + 1]);
		if (host) {
			size_t bytes = (c->len[tw] + c->len[tw + 1]) *
			    sizeof(float);
			if (cudaEventRecord(c->ev_gready[l - 1], c->s) !=
			        cudaSuccess ||
			    cudaStreamWaitEvent(c->sc, c->ev_gready[l - 1],
			        0) != cudaSuccess) {
				return FB_ETRANSPORT;
			}
			cudaError_t e;
			if (direct) {
				e = cudaMemcpyAsync(g[tw], c->d_g + c->off[tw],
				    c->len[tw] * sizeof(float),
				    cudaMemcpyDeviceToHost, c->sc);
				if (e == cudaSuccess) {
					e = cudaMemcpyAsync(g[tw + 1],
					    c->d_g + c->off[tw + 1],
					    c->len[tw + 1] * sizeof(float),
					    cudaMemcpyDeviceToHost, c->sc);
				}
			} else {
				e = cudaMemcpyAsync(c->h_g + c->off[tw],
				    c->d_g + c->off[tw], bytes,
				    cudaMemcpyDeviceToHost, c->sc);
			}
			if (e != cudaSuccess ||
			    cudaEventRecord(c->ev_gcopied[l - 1], c->sc) !=
			        cudaSuccess) {
				return FB_ETRANSPORT;
			}
		}
		if (l == 1) {
			break;
		}
		if (cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int) ni,
		        (int) n, (int) no, &one, c->d_w + c->off[tw], (int) ni,
		        dz, (int) no, &zero, dnext,
		        (int) ni) != CUBLAS_STATUS_SUCCESS) {
			return FB_ETRANSPORT;
		}
		k_relu_mask<<<blocks_for(n * ni, 256), 256, 0, c->s>>>(dnext,
		    in, n * ni);
		dz    = dnext;
		dnext = (dnext == c->d_d0) ? c->d_d1 : c->d_d0;
	}
	return cudaGetLastError() == cudaSuccess ? FB_OK : FB_ETRANSPORT;
}

// step runs forward + backward for rows idx[0..n) of ds; host: also copy
// the gradient into g (host buffers); loss_sum != NULL: wait for the loss.
static int
step(struct cu *c, const struct tr_dataset *ds, const uint32_t *idx, size_t n,
    float *const *g, int host, double *loss_sum)
{
	const struct tr_arch *a = &c->a;
	const struct dscache *dc;
	size_t                d = a->sizes[0], k = a->sizes[a->n_layers];
	int                   rv;
	if (n == 0 || n > c->max_batch || ds == NULL || idx == NULL ||
	    (host && g == NULL) || !c->have_w || ds->dim != d) {
		return FB_EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		if (idx[i] >= ds->n || ds->y[idx[i]] < 0 ||
		    (size_t) ds->y[idx[i]] >= k) {
			return FB_ERANGE;
		}
	}
	cudaSetDevice(c->dev);
	if ((dc = ds_get(c, ds)) == NULL) {
		return FB_ENOMEM;
	}
	// h_idx may be overwritten once the previous step's copy of it has
	// left (the rest of that step may still run: d_idx is only rewritten
	// after it, in stream order).
	if (cudaEventSynchronize(c->ev_idx) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	memcpy(c->h_idx, idx, n * sizeof(uint32_t));
	if (cudaMemcpyAsync(c->d_idx, c->h_idx, n * sizeof(uint32_t),
	        cudaMemcpyHostToDevice, c->s) != cudaSuccess ||
	    cudaEventRecord(c->ev_idx, c->s) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	k_gather<<<blocks_for(n * d, 256), 256, 0, c->s>>>(dc->x, c->d_idx, n,
	    d, c->d_act[0]);
	if ((rv = forward(c, c->d_act[0], n)) != FB_OK) {
		return rv;
	}
	k_xent<<<blocks_for(n, WARPS), WARPS * 32, 0, c->s>>>(
	    c->d_act[a->n_layers], n, k, dc->y, c->d_idx, c->d_rowloss, NULL,
	    1);
	k_sum<<<1, 1024, 0, c->s>>>(c->d_rowloss, NULL, n, c->d_red);
	if (cudaMemcpyAsync(c->h_red, c->d_red, sizeof(double),
	        cudaMemcpyDeviceToHost, c->s) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	int direct = host && all_pinned(c, (const float *const *) g);
	if ((rv = backward(c, n, host, g, direct)) != FB_OK) {
		return rv;
	}
	if (host) {
		// Land each layer in the caller's buffers as soon as its copy
		// is done, last layer first, while the device works on.
		for (int l = a->n_layers; l >= 1; l--) {
			size_t tw = 2 * (size_t) (l - 1);
			if (cudaEventSynchronize(c->ev_gcopied[l - 1]) !=
			    cudaSuccess) {
				return FB_ETRANSPORT;
			}
			if (direct) {
				continue;
			}
			memcpy(g[tw], c->h_g + c->off[tw],
			    c->len[tw] * sizeof(float));
			memcpy(g[tw + 1], c->h_g + c->off[tw + 1],
			    c->len[tw + 1] * sizeof(float));
		}
	}
	if (loss_sum != NULL || host) {
		if (cudaStreamSynchronize(c->s) != cudaSuccess) {
			return FB_ETRANSPORT;
		}
		if (loss_sum != NULL) {
			*loss_sum = c->h_red[0];
		}
	}
	return FB_OK;
}

static int
cuda_grad(void *state, const struct tr_dataset *ds, const uint32_t *idx,
    size_t n, float *const *g, double *loss_sum)
{
	return step((struct cu *) state, ds, idx, n, g, 1, loss_sum);
}

static int
cuda_evaluate(void *state, const struct tr_dataset *ds, double *loss_mean,
    double *accuracy)
{
	struct cu            *c = (struct cu *) state;
	const struct tr_arch *a = &c->a;
	const struct dscache *dc;
	size_t                d = a->sizes[0], k = a->sizes[a->n_layers];
	double                loss = 0.0, correct = 0.0;
	int                   rv;
	if (ds == NULL || ds->n == 0 || ds->dim != d || !c->have_w) {
		return FB_EINVAL;
	}
	for (size_t i = 0; i < ds->n; i++) {
		if (ds->y[i] < 0 || (size_t) ds->y[i] >= k) {
			return FB_ERANGE;
		}
	}
	cudaSetDevice(c->dev);
	if ((dc = ds_get(c, ds)) == NULL) {
		return FB_ENOMEM;
	}
	for (size_t s = 0; s < ds->n; s += c->cap) {
		size_t n = ds->n - s < c->cap ? ds->n - s : c->cap;
		if ((rv = forward(c, dc->x + s * d, n)) != FB_OK) {
			return rv;
		}
		k_xent<<<blocks_for(n, WARPS), WARPS * 32, 0, c->s>>>(
		    c->d_act[a->n_layers], n, k, dc->y + s, NULL, c->d_rowloss,
		    c->d_correct, 0);
		k_sum<<<1, 1024, 0, c->s>>>(c->d_rowloss, c->d_correct, n,
		    c->d_red);
		if (cudaMemcpyAsync(c->h_red, c->d_red, 2 * sizeof(double),
		        cudaMemcpyDeviceToHost, c->s) != cudaSuccess ||
		    cudaStreamSynchronize(c->s) != cudaSuccess) {
			return FB_ETRANSPORT;
		}
		loss += c->h_red[0];
		correct += c->h_red[1];
	}
	if (loss_mean != NULL) {
		*loss_mean = loss / (double) ds->n;
	}
	if (accuracy != NULL) {
		*accuracy = correct / (double) ds->n;
	}
	return FB_OK;
}

extern "C" int
tr__cuda_grad_device(struct tr_backend *b, const struct tr_dataset *ds,
    const uint32_t *idx, size_t n, float **d_grad, double *loss_sum)
{
	int rv;
	if (b == NULL || b->ops != &tr__backend_cuda_ops) {
		return FB_EINVAL;
	}
	rv = step((struct cu *) b->state, ds, idx, n, NULL, 0, loss_sum);
	if (rv == FB_OK && d_grad != NULL) {
		*d_grad = ((struct cu *) b->state)->d_g;
	}
	return rv;
}

extern "C" int
tr__cuda_sync(struct tr_backend *b)
{
	struct cu *c;
	if (b == NULL || b->ops != &tr__backend_cuda_ops) {
		return FB_EINVAL;
	}
	c = (struct cu *) b->state;
	cudaSetDevice(c->dev);
	return cudaStreamSynchronize(c->s) == cudaSuccess &&
	        cudaStreamSynchronize(c->sc) == cudaSuccess
	    ? FB_OK
	    : FB_ETRANSPORT;
}

extern "C" int
tr__cuda_weights_device(struct tr_backend *b, float **d_w)
{
	struct cu *c;
	if (b == NULL || b->ops != &tr__backend_cuda_ops || d_w == NULL) {
		return FB_EINVAL;
	}
	c = (struct cu *) b->state;
	// The caller fills the block on c->s before the next grad (stream
	// order), so grad and evaluate may run from now on.
	c->have_w = 1;
	*d_w      = c->d_w;
	return FB_OK;
}

extern "C" void *
tr__cuda_stream(struct tr_backend *b)
{
	if (b == NULL || b->ops != &tr__backend_cuda_ops) {
		return NULL;
	}
	return (void *) ((struct cu *) b->state)->s;
}

extern "C" const struct tr_backend_ops tr__backend_cuda_ops = {
	"cuda",
	cuda_alloc,
	cuda_free,
	cuda_set_weights,
	cuda_grad,
	cuda_evaluate,
	&tr__cuda_ondevice_ops,
	NULL, // set_layer_hook: not offered
	cuda_pin,
};
