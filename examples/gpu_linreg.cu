// gpu_linreg.cu: a trainer whose weights never leave the GPU. It fits a
// linear model y = X w to data generated on the device (features hashed
// into [-1, 1), w_true[j] = 1 + (j % 7) / 7), computes its gradient with two
// small kernels, and registers a pull sink (ferry_client_set_pull_sink) so
// that every pull copies the servers' weights straight into device memory: the
// host only ever holds the gradient it pushes. It owns the kernels, the sink
// and the loop; it is built only when CUDA is enabled
// (examples/CMakeLists.txt).
//
// usage: gpu_linreg SCHEDULER_URL RANK
// Exits 77 with a message when there is no usable CUDA device (the skip
// code ctest and automake know), 1 when the job fails, 0 after printing
//   rank R: max |w - w_true| = E
// The sink takes full fp32 pulls only: the job it declares has no pull
// codec, so a delta never arrives (the trainer in trainer/ shows a sink
// that decodes deltas on the device, trainer/src/devpull.cu).
#include <ferry/ferry.h>

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum {
	DIM   = 256, // weights
	BATCH = 64,  // examples per rank and step
	STEPS = 300,
};

// The sink's state: the device copy of the weights.
struct gpu_weights {
	float      *w;    // DIM floats on the device
	cudaError_t last; // the CUDA error that failed a callback
};

// Example i of the data: x_ij, a hash of (i, j) mapped into [-1, 1), and
// y_i = x_i . w_true; every rank computes the same values.
__device__ static float
feature(int i, int j)
{
	unsigned h = (unsigned) i * 2654435761u ^ (unsigned) j * 2246822519u;
	h ^= h >> 15;
	h *= 2246822519u;
	h ^= h >> 13;
	return (float) (h & 0xffffff) / 8388608.0f - 1.0f;
}

__device__ static float
w_true(int j)
{
	return 1.0f + (float) (j % 7) / 7.0f;
}

// r[k] = x_i . w - y_i for the BATCH examples i = first + k.
__global__ static void
residuals(const float *w, int first, float *r)
{
	int k = blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= BATCH)
		return;
	float z = 0;
	for (int j = 0; j < DIM; j++)
		z += feature(first + k, j) * (w[j] - w_true(j));
	r[k] = z;
}

// g[j] = sum_k 2 r[k] x_(first+k),j: the squared error's gradient, SUMMED
// over the batch (the servers divide by the samples).
__global__ static void
gradient(const float *r, int first, float *g)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= DIM)
		return;
	float s = 0;
	for (int k = 0; k < BATCH; k++)
		s += 2 * r[k] * feature(first + k, j);
	g[j] = s;
}

// max_j |w[j] - w_true(j)| into *e (one thread: run once at the end).
__global__ static void
max_error(const float *w, float *e)
{
	float m = 0;
	for (int j = 0; j < DIM; j++)
		m = fmaxf(m, fabsf(w[j] - w_true(j)));
	*e = m;
}

// Pull sink: a full piece is the shard's fp32 weights; copy them to the
// device at the shard's offset (the host bytes are not aligned, which
// cudaMemcpy does not mind).
static int
sink_full(void *arg, const struct ferry_pull_piece *p)
{
	struct gpu_weights *gw = (struct gpu_weights *) arg;
	gw->last = cudaMemcpy(gw->w + p->offset, p->data, p->bytes,
	    cudaMemcpyHostToDevice);
	return gw->last == cudaSuccess ? FERRY_OK : FERRY_ESINK;
}

// Deltas and CRC checks come only with a pull codec, which this job does
// not declare: refuse them (unnamed parameters: this file is C++).
static int
sink_delta(void *, const struct ferry_pull_piece *)
{
	return FERRY_ESINK;
}

static int
sink_check(void *, uint32_t, uint64_t, uint32_t)
{
	return FERRY_ESINK;
}

int
main(int argc, char **argv)
{
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_desc t = { "w", DIM, FERRY_TENSOR_WEIGHTS };
	struct ferry_pull_sink   sink;
	struct gpu_weights       gw = { NULL, cudaSuccess };
	ferry_client            *c  = NULL;
	float                   *g = NULL, *dg = NULL, *dr = NULL, e = 0, *de;
	int                      devices = 0, rv = 1;
	cudaError_t              ce;

	if (argc != 3) {
		fprintf(stderr, "usage: gpu_linreg SCHEDULER_URL RANK\n");
		return 2;
	}
	if ((ce = cudaGetDeviceCount(&devices)) != cudaSuccess ||
	    devices == 0) {
		fprintf(stderr, "gpu_linreg: no CUDA device (%s)\n",
		    ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
		return 77;
	}
	if (cudaMalloc(&gw.w, DIM * sizeof(float)) != cudaSuccess ||
	    cudaMalloc(&dg, DIM * sizeof(float)) != cudaSuccess ||
	    cudaMalloc(&dr, BATCH * sizeof(float)) != cudaSuccess ||
	    cudaMemset(gw.w, 0, DIM * sizeof(float)) != cudaSuccess ||
	    (g = (float *) malloc(DIM * sizeof(float))) == NULL) {
		fprintf(stderr, "gpu_linreg: cannot allocate its buffers\n");
		goto out;
	}
	o.scheduler_url = argv[1];
	o.rank          = atoi(argv[2]);
	o.lr            = 0.1;
	sink.full       = sink_full;
	sink.delta      = sink_delta;
	sink.check      = sink_check;
	sink.arg        = &gw;
	if (ferry_client_open(&o, &c) != FERRY_OK ||
	    ferry_client_set_pull_sink(c, &sink) != FERRY_OK ||
	    ferry_client_declare(c, &t, 1) != FERRY_OK)
		goto fail;
	if (o.rank == 0) { // version 0: zeros, offered from the host
		const float *w0 = g;
		for (int j = 0; j < DIM; j++)
			g[j] = 0;
		if (ferry_client_init_weights(c, &w0) != FERRY_OK)
			goto fail;
	}
	if (ferry_client_pull(c, NULL) != FERRY_OK) // into gw.w, on the device
		goto fail;
	for (int s = 0; s < STEPS; s++) {
		int first = (s * ferry_client_trainers(c) + o.rank) * BATCH;
		const float *gp = g;
		residuals<<<1, BATCH>>>(gw.w, first, dr);
		gradient<<<(DIM + 255) / 256, 256>>>(dr, first, dg);
		if ((ce = cudaMemcpy(g, dg, DIM * sizeof(float),
		         cudaMemcpyDeviceToHost)) != cudaSuccess) {
			fprintf(stderr, "gpu_linreg: %s\n",
			    cudaGetErrorString(ce));
			goto out;
		}
		if (ferry_client_push_pull(c, &gp, BATCH, NULL) != FERRY_OK)
			goto fail;
	}
	de = dr; // reuse: one float
	max_error<<<1, 1>>>(gw.w, de);
	if ((ce = cudaMemcpy(&e, de, sizeof(e), cudaMemcpyDeviceToHost)) !=
	    cudaSuccess) {
		fprintf(stderr, "gpu_linreg: %s\n", cudaGetErrorString(ce));
		goto out;
	}
	printf("rank %d: max |w - w_true| = %.4f\n", o.rank, e);
	rv = 0;
	goto out;
fail:
	fprintf(stderr, "gpu_linreg: %s%s%s\n",
	    c ? ferry_client_last_error(c) : "cannot open the client",
	    gw.last != cudaSuccess ? "; CUDA: " : "",
	    gw.last != cudaSuccess ? cudaGetErrorString(gw.last) : "");
out:
	ferry_client_close(c);
	free(g);
	cudaFree(dg);
	cudaFree(dr);
	cudaFree(gw.w);
	return rv;
}
