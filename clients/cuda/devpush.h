// devpush.h — gradients quantized on the GPU, so only codes cross PCIe
// (private to libferry_cuda and tr; built only with CUDA).
//
// For each shard of the job (ferry_client_shards) the device keeps the
// error-feedback residual; every step it encodes p = g + e in the job's
// push codec straight from a device gradient block (the trainer's
// tr__cuda_grad_device, libferry_cuda's d_g), copies all the codes to one
// pinned host buffer in a single transfer, and hands libferry the host
// pointers (ferry_client_push_pull_encoded). The bytes equal compression/'s
// CPU encoder for the same input (codec_cuda.h), so a server cannot tell.
#ifndef FCUDA_DEVPUSH_H
#define FCUDA_DEVPUSH_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

struct fcuda__devpush;

// fcuda__devpush_supported says whether codec_id can be encoded on the device
// (fp16, bf16, q8, q4, q2 with round to nearest).
int fcuda__devpush_supported(uint32_t codec_id);

// fcuda__devpush_open prepares device encoding for the n shards sh of a job
// whose gradient block on the device holds tensor t at tensor_base[t]
// floats, encoding on `stream` (a cudaStream_t, NULL: the legacy default
// stream; the one that computes the gradient, so that the encoding is
// ordered after it) on the current CUDA device. Errors: FB_EUNSUPP
// (codec), FB_ENOMEM, FB_ETRANSPORT (CUDA), with a reason in err. Release
// with fcuda__devpush_close.
int fcuda__devpush_open(void *stream, const struct ferry_shard *sh, size_t n,
    uint32_t codec_id, uint32_t bucket, const size_t *tensor_base,
    struct fcuda__devpush **out, char *err, size_t errlen);

// fcuda__devpush_encode encodes every shard of the device gradient d_grad
// with error feedback and copies the codes to the host; codes[i] receives
// shard i's host pointer (valid until the next encode or close). Blocks
// until the codes are on the host. Errors: FB_EINVAL (a non-finite
// gradient: abandon the step; residuals of earlier shards have moved),
// FB_ETRANSPORT.
int fcuda__devpush_encode(struct fcuda__devpush *d, const float *d_grad,
    const uint8_t **codes);

// fcuda__devpush_close frees everything; NULL is a no-op.
void fcuda__devpush_close(struct fcuda__devpush *d);

#ifdef __cplusplus
}
#endif
#endif // FCUDA_DEVPUSH_H
