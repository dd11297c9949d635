// codec_cuda.h — gradient and weight codecs on the GPU (private to
// libferry_cuda and tr).
//
// The device twin of compression/'s CPU codecs: the bytes an encoder writes
// into device memory are identical to comp_encode / comp_ef_encode for the
// same codec and input, and decode-add performs the same float operations
// in the same order as comp_decode_add (the file is built with
// -fmad=false, so no multiply-add is contracted). Only the codes then need
// to cross PCIe. Supported: none (fp32), fp16, bf16, q8, q4, q2 with round
// to nearest; sign, topk and stochastic rounding are not (FB_EUNSUPP).
//
// Codec ids equal compression's `enum comp_codec_id` values (neither tr
// nor libferry_cuda links comp: both use libferry only), and the layout
// is the one in compression/FORMAT.md: for q8/q4/q2 ceil(n/bucket) fp32 LE
// scales, then the n codes packed by global index, b bits each, LSB first,
// zero padded.
//
// Asynchrony and errors: every call only enqueues kernels on the context's
// stream and returns FB_OK when its host-side arguments are valid. Errors
// the device finds (a non-finite value given to an encoder that refuses
// it, a malformed delta given to decode-add) set a sticky flag in the
// context: every later kernel of that context sees the flag and does
// nothing, so a failed ef_encode leaves e untouched and a failed
// decode-add leaves acc untouched, exactly as on the CPU. fcuda__dctx_check
// waits for the stream, reports and clears the flag.
//
// Pointers named d_* are device pointers on the context's device. d_out
// and d_in must be 4-byte aligned (cudaMalloc memory plus multiples of 4).
// Threading: a context is used by one host thread at a time.
#ifndef FCUDA_CODEC_CUDA_H
#define FCUDA_CODEC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Codec ids (same numbers as enum comp_codec_id in comp/comp.h).
enum fcuda__dc_id {
	FCUDA_DC_NONE = 0,
	FCUDA_DC_FP16 = 1,
	FCUDA_DC_BF16 = 2,
	FCUDA_DC_Q8   = 3,
	FCUDA_DC_Q4   = 4,
	FCUDA_DC_Q2   = 5,
};
#define FCUDA_DC_BUCKET_MAX (1u << 20) // == COMP_BUCKET_MAX

// A device codec: id and, for q8/q4/q2, the bucket size (1..2^20).
struct fcuda__dcodec {
	uint32_t id;
	uint32_t bucket;
};

// A codec context: the stream the kernels run on and the error flag.
// Caller storage; init/fini.
struct fcuda__dctx {
	void *stream; // cudaStream_t; NULL: the legacy default stream
	int   device; // CUDA ordinal the context belongs to
	int  *d_flag; // device: error bits since the last check
	int  *h_flag; // pinned host mirror of d_flag
};

// fcuda__dctx_init makes x use `stream` (a cudaStream_t or NULL) on the
// current CUDA device and allocates its flag (device + pinned host).
// Errors: FB_EUNSUPP (no CUDA device), FB_ENOMEM. Release with
// fcuda__dctx_fini, which is safe on a zeroed x. Blocks (allocation).
int  fcuda__dctx_init(struct fcuda__dctx *x, void *stream);
void fcuda__dctx_fini(struct fcuda__dctx *x);

// fcuda__dctx_check waits until every kernel enqueued on x has finished and
// returns FB_OK, FB_EINVAL (an encoder met a non-finite value it refuses),
// FB_EPROTO (decode-add met a malformed delta: bad scale, forbidden code,
// non-zero padding) or FB_ETRANSPORT (a CUDA error; not recoverable). The
// flag is cleared. Blocks.
int fcuda__dctx_check(struct fcuda__dctx *x);

// fcuda__dcodec_valid returns FB_OK if c is supported (see above), FB_EUNSUPP
// for sign/topk, FB_EINVAL for an unknown id or a bad bucket.
int fcuda__dcodec_valid(const struct fcuda__dcodec *c);

// fcuda__dcodec_bound returns the exact number of bytes an encoder writes for
// n values (== comp_bound for the same codec), or 0 for an invalid codec.
size_t fcuda__dcodec_bound(const struct fcuda__dcodec *c, size_t n);

// fcuda__dcodec_encode encodes d_x[0..n) into d_out (fcuda__dcodec_bound
// bytes), as comp_encode: for q8/q4/q2 a non-finite value sets the FB_EINVAL
// flag (the output is then unspecified); none/fp16/bf16 encode any value.
// Errors (immediate): FB_EINVAL (NULL pointers, misaligned d_out),
// FB_EUNSUPP (codec). Does not block or allocate.
int fcuda__dcodec_encode(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    const float *d_x, size_t n, uint8_t *d_out);

// fcuda__dcodec_ef_encode is comp_ef_encode on the device: p = g + e,
// d_out = Q(p), e = p - deq(d_out), e updated in place. A non-finite p
// (any codec) sets the FB_EINVAL flag and leaves d_e unchanged.
// d_g and d_e hold n floats. Immediate errors as fcuda__dcodec_encode.
int fcuda__dcodec_ef_encode(struct fcuda__dctx *x,
    const struct fcuda__dcodec *c, const float *d_g, float *d_e, size_t n,
    uint8_t *d_out);

// fcuda__dcodec_decode_add is comp_decode_add on the device:
// acc[i] = acc[i] + deq[i], for q8/q4/q2 acc[i] + (float) q * (s / L)
// with s / L computed once per bucket, bit-identical to the CPU. d_in
// holds len bytes; len != fcuda__dcodec_bound(c, n) is an immediate
// FB_EPROTO. A malformed delta (checked on the device before any float is
// written) sets the FB_EPROTO flag and leaves d_acc unchanged. Does not
// block or allocate.
int fcuda__dcodec_decode_add(struct fcuda__dctx *x,
    const struct fcuda__dcodec *c, const uint8_t *d_in, size_t len, size_t n,
    float *d_acc);

#ifdef __cplusplus
}
#endif
#endif // FCUDA_CODEC_CUDA_H
