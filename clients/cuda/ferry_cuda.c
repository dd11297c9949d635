// ferry_cuda.c — <ferry/ferry_cuda.h>: one step of libferry for weights
// and gradients on a GPU, over the device push encoder (devpush.h) and
// pull sink (devpull.h) the trainer uses too. Host C over cudart; every
// copy and kernel runs on the caller's stream, and each call waits for
// that stream before it returns, so d_w is ready and d_g free again.
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devpull.h"
#include "devpush.h"
#include "fb/fb.h"
#include "ferry/ferry_cuda.h"

struct ferry_cuda {
	ferry_client *c;
	float        *d_w, *d_g;
	cudaStream_t  s;
	int           device;
	size_t        n_tensors;
	size_t       *base;  // [n_tensors] offset of tensor t in d_w, d_g
	size_t        total; // floats in d_w (and d_g)
	// One page-locked buffer stages both directions on the host path:
	// the gradient goes out of it and the weights come back into it
	// (ferry_client_push_pull accepts g == w).
	float        *h_stage;
	float       **h_t; // [n_tensors] tensor t in h_stage
	struct fcuda__devpush *push;
	const uint8_t        **codes; // [n shards] from fcuda__devpush_encode
	struct fcuda__devpull *pull;  // NULL: pulls go through h_stage
	uint32_t               push_codec, push_bucket;
	char                   err[256];
};

// The reason of the calling thread's last failed ferry_cuda_open, which
// has no handle to keep it in (ferry_cuda_last_error(NULL)).
static _Thread_local char open_err[256];

static int set_err(ferry_cuda *x, int rv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
set_err(ferry_cuda *x, int rv, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->err, sizeof(x->err), fmt, ap);
	va_end(ap);
	return rv;
}

// from_fb maps the fb codes devpush and devpull answer to ferry_err: a
// CUDA failure (FB_ETRANSPORT) is the sink's own error, FERRY_ESINK.
static int
from_fb(int rv)
{
	switch (rv) {
	case FB_OK:
		return FERRY_OK;
	case FB_EINVAL:
		return FERRY_EINVAL;
	case FB_ENOMEM:
		return FERRY_ENOMEM;
	case FB_EUNSUPP:
		return FERRY_EUNSUPP;
	case FB_EPROTO:
		return FERRY_EPROTO;
	default:
		return FERRY_ESINK;
	}
}

// cuda_fail records a failed CUDA call (and clears CUDA's sticky last
// error) as FERRY_ESINK.
static int
cuda_fail(ferry_cuda *x, const char *what, cudaError_t e)
{
	cudaGetLastError();
	return set_err(x, FERRY_ESINK, "CUDA: %s: %s", what,
	    cudaGetErrorString(e));
}

// client_fail records the client's failed call `what` with its reason
// (the sink's, for FERRY_ESINK from the device pull sink).
static int
client_fail(ferry_cuda *x, const char *what, int fe)
{
	const char *why = x->pull != NULL && fe == FERRY_ESINK
	    ? fcuda__devpull_error(x->pull)
	    : ferry_client_last_error(x->c);
	if (why == NULL || why[0] == '\0') {
		return set_err(x, fe, "%s", what);
	}
	return set_err(x, fe, "%s: %s", what, why);
}

FERRY_API int
ferry_cuda_available(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n > 0;
}

// layout finds each tensor's length from the job's shards (they cut every
// tensor into pieces, end to end) and lays the tensors out back to back.
static int
layout(ferry_cuda *x, const struct ferry_shard *sh, size_t ns)
{
	size_t *len;
	for (size_t i = 0; i < ns; i++) {
		if (sh[i].tensor + (size_t) 1 > x->n_tensors) {
			x->n_tensors = sh[i].tensor + (size_t) 1;
		}
	}
	x->base = calloc(x->n_tensors + 1, sizeof(size_t));
	x->h_t  = calloc(x->n_tensors, sizeof(float *));
	if ((len = calloc(x->n_tensors, sizeof(size_t))) == NULL ||
	    x->base == NULL || x->h_t == NULL) {
		free(len);
		return set_err(x, FERRY_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < ns; i++) {
		size_t end = (size_t) (sh[i].offset + sh[i].len);
		if (end > len[sh[i].tensor]) {
			len[sh[i].tensor] = end;
		}
	}
	for (size_t t = 0; t < x->n_tensors; t++) {
		x->base[t + 1] = x->base[t] + len[t];
	}
	x->total = x->base[x->n_tensors];
	free(len);
	return FERRY_OK;
}

// open_device_halves opens the push encoder when the job's push codec can
// be encoded on the device and the pull sink when its pull codec can be
// decoded there; what cannot stays on the host path.
static int
open_device_halves(ferry_cuda *x, const struct ferry_shard *sh, size_t ns)
{
	struct ferry_pull_sink sink;
	uint32_t               pid, pbucket;
	int                    rv, fe;

	if (fcuda__devpush_supported(x->push_codec)) {
		if ((rv = fcuda__devpush_open(x->s, sh, ns, x->push_codec,
		         x->push_bucket, x->base, &x->push, x->err,
		         sizeof(x->err))) != FB_OK) {
			return from_fb(rv);
		}
		if ((x->codes = calloc(ns, sizeof(*x->codes))) == NULL) {
			return set_err(x, FERRY_ENOMEM, "out of memory");
		}
	}
	if ((fe = ferry_client_pull_codec(x->c, &pid, &pbucket)) != FERRY_OK) {
		return client_fail(x, "pull codec", fe);
	}
	if (!fcuda__devpull_supported(pid)) {
		return FERRY_OK;
	}
	if ((rv = fcuda__devpull_open(x->d_w, x->s, sh, ns, pid, pbucket,
	         x->base, &x->pull, x->err, sizeof(x->err))) != FB_OK) {
		return from_fb(rv);
	}
	fcuda__devpull_sink(x->pull, &sink);
	if ((fe = ferry_client_set_pull_sink(x->c, &sink)) != FERRY_OK) {
		return client_fail(x, "set_pull_sink", fe);
	}
	return FERRY_OK;
}

FERRY_API int
ferry_cuda_open(ferry_client *c, float *d_w, float *d_g, void *stream,
    ferry_cuda **out)
{
	const struct ferry_shard *sh;
	ferry_cuda               *x;
	size_t                    ns;
	cudaError_t               e;
	int                       rv;

	if (c == NULL || d_w == NULL || d_g == NULL || out == NULL) {
		snprintf(open_err, sizeof(open_err),
		    "ferry_cuda_open: NULL argument");
		return FERRY_EINVAL;
	}
	if ((x = calloc(1, sizeof(*x))) == NULL) {
		snprintf(open_err, sizeof(open_err), "out of memory");
		return FERRY_ENOMEM;
	}
	x->c   = c;
	x->d_w = d_w;
	x->d_g = d_g;
	x->s   = (cudaStream_t) stream;
	if ((rv = ferry_client_shards(c, &sh, &ns, &x->push_codec,
	         &x->push_bucket)) != FERRY_OK) {
		rv = client_fail(x,
		    "declare the tensors before ferry_cuda_open", rv);
	} else if (!ferry_cuda_available() ||
	    cudaGetDevice(&x->device) != cudaSuccess) {
		rv = set_err(x, FERRY_EUNSUPP, "no usable CUDA device");
	} else if ((rv = layout(x, sh, ns)) != FERRY_OK) {
		// set_err has the reason
	} else if ((e = cudaMallocHost((void **) &x->h_stage,
	                x->total * sizeof(float))) != cudaSuccess) {
		rv = cuda_fail(x, "page-locked staging buffer", e);
	} else {
		for (size_t t = 0; t < x->n_tensors; t++) {
			x->h_t[t] = x->h_stage + x->base[t];
		}
		rv = open_device_halves(x, sh, ns);
	}
	if (rv != FERRY_OK) {
		snprintf(open_err, sizeof(open_err), "%s", x->err);
		ferry_cuda_close(x);
		return rv;
	}
	open_err[0] = '\0';
	*out        = x;
	return FERRY_OK;
}

// d2h copies d (a device block) into the staging buffer and waits.
static int
d2h(ferry_cuda *x, const float *d)
{
	cudaError_t e = cudaMemcpyAsync(x->h_stage, d,
	    x->total * sizeof(float), cudaMemcpyDeviceToHost, x->s);
	if (e != cudaSuccess ||
	    (e = cudaStreamSynchronize(x->s)) != cudaSuccess) {
		return cuda_fail(x, "copy to the host", e);
	}
	return FERRY_OK;
}

// land finishes a pull: the staged weights go to d_w (host path), then
// the stream is drained so d_w holds them when the call returns.
static int
land(ferry_cuda *x)
{
	cudaError_t e = cudaSuccess;
	if (x->pull == NULL) {
		e = cudaMemcpyAsync(x->d_w, x->h_stage,
		    x->total * sizeof(float), cudaMemcpyHostToDevice, x->s);
	}
	if (e != cudaSuccess ||
	    (e = cudaStreamSynchronize(x->s)) != cudaSuccess) {
		return cuda_fail(x, "weights to the device", e);
	}
	return FERRY_OK;
}

// enter makes x's device current for the calling thread; *prev receives
// the device to give back with leave.
static int
enter(ferry_cuda *x, int *prev)
{
	cudaError_t e;
	x->err[0] = '\0';
	if ((e = cudaGetDevice(prev)) != cudaSuccess ||
	    (*prev != x->device &&
	        (e = cudaSetDevice(x->device)) != cudaSuccess)) {
		return cuda_fail(x, "selecting the device", e);
	}
	return FERRY_OK;
}

static int
leave(ferry_cuda *x, int prev, int rv)
{
	if (prev != x->device) {
		cudaSetDevice(prev);
	}
	return rv;
}

FERRY_API int
ferry_cuda_init_weights(ferry_cuda *x)
{
	int prev, rv, fe;
	if (x == NULL) {
		return FERRY_EINVAL;
	}
	if ((rv = enter(x, &prev)) != FERRY_OK) {
		return rv;
	}
	if ((rv = d2h(x, x->d_w)) == FERRY_OK &&
	    (fe = ferry_client_init_weights(x->c,
	         (const float *const *) x->h_t)) != FERRY_OK) {
		rv = client_fail(x, "init_weights", fe);
	}
	return leave(x, prev, rv);
}

FERRY_API int
ferry_cuda_pull(ferry_cuda *x)
{
	int prev, rv, fe;
	if (x == NULL) {
		return FERRY_EINVAL;
	}
	if ((rv = enter(x, &prev)) != FERRY_OK) {
		return rv;
	}
	if ((fe = ferry_client_pull(x->c, x->pull != NULL ? NULL : x->h_t)) !=
	    FERRY_OK) {
		rv = client_fail(x, "pull", fe);
	} else {
		rv = land(x);
	}
	return leave(x, prev, rv);
}

// reopen_push opens the device encoder afresh (zero residuals).
static int
reopen_push(ferry_cuda *x)
{
	const struct ferry_shard *sh;
	size_t                    ns;
	int                       rv;
	fcuda__devpush_close(x->push);
	x->push = NULL;
	if ((rv = ferry_client_shards(x->c, &sh, &ns, &x->push_codec,
	         &x->push_bucket)) != FERRY_OK) {
		return client_fail(x, "shards", rv);
	}
	rv = fcuda__devpush_open(x->s, sh, ns, x->push_codec, x->push_bucket,
	    x->base, &x->push, x->err, sizeof(x->err));
	return from_fb(rv);
}

// push_pull_device encodes d_g on the device (error feedback there) and
// pushes the codes.
static int
push_pull_device(ferry_cuda *x, uint32_t n_samples)
{
	int rv, fe;
	if ((rv = fcuda__devpush_encode(x->push, x->d_g, x->codes)) != FB_OK) {
		return set_err(x, from_fb(rv), "%s",
		    rv == FB_EINVAL
		        ? "a non-finite gradient (step abandoned)"
		        : "CUDA error while encoding the gradient");
	}
	fe = ferry_client_push_pull_encoded(x->c,
	    (const uint8_t *const *) x->codes, n_samples,
	    x->pull != NULL ? NULL : x->h_t);
	if (fe == FERRY_EROLLBACK) {
		// The job went back to a snapshot: so does the residual, as
		// the trainer's (an encoder opened afresh holds zeros).
		if ((rv = reopen_push(x)) != FERRY_OK) {
			return rv;
		}
	}
	return fe == FERRY_OK ? FERRY_OK : client_fail(x, "push_pull", fe);
}

FERRY_API int
ferry_cuda_push_pull(ferry_cuda *x, uint32_t n_samples)
{
	int prev, rv, fe;
	if (x == NULL) {
		return FERRY_EINVAL;
	}
	if ((rv = enter(x, &prev)) != FERRY_OK) {
		return rv;
	}
	if (x->push != NULL && !ferry_client_in_warmup(x->c)) {
		rv = push_pull_device(x, n_samples);
	} else if ((rv = d2h(x, x->d_g)) == FERRY_OK) {
		// fp32 from the staging buffer, the weights back into it
		fe = ferry_client_push_pull(x->c,
		    (const float *const *) x->h_t, n_samples,
		    x->pull != NULL ? NULL : x->h_t);
		rv = fe == FERRY_OK ? FERRY_OK
		                    : client_fail(x, "push_pull", fe);
	}
	if (rv == FERRY_OK) {
		rv = land(x);
	}
	return leave(x, prev, rv);
}

FERRY_API const char *
ferry_cuda_last_error(const ferry_cuda *x)
{
	return x != NULL ? x->err : open_err;
}

FERRY_API void
ferry_cuda_close(ferry_cuda *x)
{
	if (x == NULL) {
		return;
	}
	if (x->pull != NULL) {
		ferry_client_set_pull_sink(x->c, NULL);
	}
	if (x->h_stage != NULL) {
		cudaStreamSynchronize(x->s);
	}
	fcuda__devpull_close(x->pull);
	fcuda__devpush_close(x->push);
	cudaFreeHost(x->h_stage);
	cudaGetLastError();
	free(x->codes);
	free(x->h_t);
	free(x->base);
	free(x);
}
