// codec_cuda_impl.h — what the two files of the device codecs share
// (private to libferry_cuda and tr, CUDA only): codec_cuda.cu has the
// contexts, the element-wise codecs (none, fp16, bf16) and codec_cuda.h's
// entry points, which hand the bucketed quantizers (q8, q4, q2) to
// codec_cuda_q.cu.
#ifndef FCUDA_CODEC_CUDA_IMPL_H
#define FCUDA_CODEC_CUDA_IMPL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "codec_cuda.h"
#include "fb/fb.h"

// The bits of a context's error flag (fcuda__dctx_check maps them).
#define FCUDA_DC_FLAG_EINVAL 1
#define FCUDA_DC_FLAG_EPROTO 2
// |v|'s bit pattern at or above this: Inf or NaN.
#define FCUDA_DC_INF_BITS 0x7f800000u
// Threads per block of every kernel.
#define FCUDA_DC_THREADS 256

// fcuda__dc_qbits returns a quantizer's bits per code, 0 for the element-wise
// codecs.
static inline unsigned
fcuda__dc_qbits(uint32_t id)
{
	return id == FCUDA_DC_Q8 ? 8
	    : id == FCUDA_DC_Q4  ? 4
	    : id == FCUDA_DC_Q2  ? 2
	                         : 0;
}

// fcuda__dc_grid returns the blocks for `work` items, at most 65535 * 8: the
// kernels' grid-stride loops cover the rest.
static inline unsigned
fcuda__dc_grid(size_t work)
{
	size_t g = (work + FCUDA_DC_THREADS - 1) / FCUDA_DC_THREADS;
	if (g < 1) {
		g = 1;
	}
	return g > 65535u * 8u ? 65535u * 8u : (unsigned) g;
}

// fcuda__dc_aligned16 reports whether p allows 16-byte loads.
static inline int
fcuda__dc_aligned16(const void *p)
{
	return ((uintptr_t) p & 15) == 0;
}

// fcuda__dc_launched returns FB_OK, or FB_ETRANSPORT when a launch failed.
static inline int
fcuda__dc_launched(void)
{
	return cudaGetLastError() == cudaSuccess ? FB_OK : FB_ETRANSPORT;
}

// fcuda__dq_encode enqueues fcuda__dcodec_encode (d_e NULL) or
// fcuda__dcodec_ef_encode of quantizer c (b bits a code, fcuda__dc_qbits) on
// x's stream, its arguments checked by the caller (n > 0).
int fcuda__dq_encode(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    unsigned b, const float *d_x, float *d_e, size_t n, uint8_t *d_out);

// fcuda__dq_decode_add enqueues fcuda__dcodec_decode_add of quantizer c (b
// bits a code): a validating kernel, then the adds; arguments checked by the
// caller (n > 0, len matches).
int fcuda__dq_decode_add(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    unsigned b, const uint8_t *d_in, size_t n, float *d_acc);

#endif // FCUDA_CODEC_CUDA_IMPL_H
