// devpull.h — pulled deltas decoded on the GPU, so only codes cross PCIe
// (private to libferry_cuda and tr; built only with CUDA).
//
// A libferry pull sink (ferry_client_set_pull_sink) whose reference is the
// caller's device weight block itself (the trainer's backend, libferry_cuda's
// d_w: a trainer computes its gradient at the reference, docs/algorithms.md
// §2.4, so the two are one buffer):
// - full: the fp32 values go H2D through a pinned staging buffer;
// - delta: the codes are copied into the same pinned staging buffer (one,
//   allocated at open, sized for a chain of FCUDA_DEVPULL_CHAIN deltas of the
//   largest shard; a longer chain waits for the stream and reuses it), sent
//   H2D and added with fcuda__dcodec_decode_add, bit for bit comp_decode_add;
// - check: a kernel computes the CRC-32 of each 4 KiB chunk of the shard's
//   device reference (crc.h), only those chunk CRCs come back, and the host
//   folds them with crc32_combine and compares with the server's CRC. A
//   mismatch answers FERRY_ECORRUPT and libferry re-pulls the shard in
//   full.
// Everything runs on the caller's compute stream, so decoding is ordered
// after the gradient that read the old weights and before the next one.
// The host copy of the weights is refreshed only on demand
// (fcuda__devpull_fetch: --weights-out).
#ifndef FCUDA_DEVPULL_H
#define FCUDA_DEVPULL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FCUDA_DEVPULL_CHAIN                                                   \
	4 // deltas a pull chain usually has at most
	  // (the server's PS_DELTA_LOG)

struct fcuda__devpull;

// fcuda__devpull_supported says whether pulls in codec_id can be decoded on
// the device: none (fp32: every pull is full), fp16, bf16, q8, q4, q2.
int fcuda__devpull_supported(uint32_t codec_id);

// fcuda__devpull_open prepares a sink for the n shards sh of a job whose
// weights are the device block d_w (tensor t at tensor_base[t] floats, on
// the current CUDA device), decoding on `stream` (a cudaStream_t, NULL:
// the legacy default stream). Errors: FB_EUNSUPP (codec), FB_ENOMEM,
// FB_ETRANSPORT (CUDA), with a reason in err. Blocks (allocation).
// Release with fcuda__devpull_close.
int fcuda__devpull_open(float *d_w, void *stream, const struct ferry_shard *sh,
    size_t n, uint32_t codec_id, uint32_t bucket, const size_t *tensor_base,
    struct fcuda__devpull **out, char *err, size_t errlen);

// fcuda__devpull_sink fills *sink with d's callbacks (arg = d), for
// ferry_client_set_pull_sink. A callback that fails with FERRY_ESINK
// leaves its reason in fcuda__devpull_error(d).
void fcuda__devpull_sink(struct fcuda__devpull *d,
    struct ferry_pull_sink                     *sink);

// fcuda__devpull_error returns the reason of the last FERRY_ESINK or
// FERRY_EPROTO answer ("" if none). Borrowed until the next callback.
const char *fcuda__devpull_error(const struct fcuda__devpull *d);

// fcuda__devpull_fetch copies the device weights of every shard into the
// host tensors w (w[t] holds tensor t). Blocks. Errors: FB_ETRANSPORT.
int fcuda__devpull_fetch(struct fcuda__devpull *d, float *const *w);

// fcuda__devpull_crc computes, on the device, the CRC-32 (= fb_crc32) of the
// n floats at d_x (at most the largest shard given to open), through the
// chunk kernel and the host fold. Blocks. Errors: FB_EINVAL (n too large),
// FB_ETRANSPORT.
int fcuda__devpull_crc(struct fcuda__devpull *d, const float *d_x, size_t n,
    uint32_t *crc);

// fcuda__devpull_close frees everything; NULL is a no-op.
void fcuda__devpull_close(struct fcuda__devpull *d);

#ifdef __cplusplus
}
#endif
#endif // FCUDA_DEVPULL_H
