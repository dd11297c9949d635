// ferry/ferry_cuda.h — libferry for weights and gradients that live on a
// CUDA GPU (libferry_cuda.so; docs/libferry.md, "Weights on a GPU").
//
// A program (a PyTorch trainer through python/ferry/cuda.py, say) declares
// its tensors with libferry as usual, then hands libferry_cuda two device
// buffers: d_w, the weights, and d_g, the gradient, each holding every
// declared tensor packed back to back in declare order. From then on one
// call per step pushes d_g and leaves the next version in d_w:
// - with a push codec the device can encode (fp16, bf16, q8, q4, q2), the
//   gradient is encoded on the GPU with error feedback (the residual stays
//   on the device) and only the codes cross PCIe
//   (ferry_client_push_pull_encoded); during the job's warm-up, or with
//   another codec or none, d_g is copied to a page-locked host buffer and
//   pushed in fp32 (libferry encodes it there when the job has a codec);
// - with a pull codec the device can decode (none, fp16, bf16, q8, q4,
//   q2), the pull goes through a device pull sink: full pulls go H2D,
//   deltas are decoded and added on the GPU and their CRC-32 checked
//   there; otherwise the weights arrive in the page-locked buffer and are
//   copied to d_w.
// The device encoders and decoders are those of the C trainer
// (clients/cuda/), bit for bit compression/'s CPU codecs.
//
// Limits: opts.clip_norm is not applied to device-encoded pushes (libferry
// cannot see an encoded gradient); use a job without it, or no push codec.
// A ferry_cuda and its client are used by one host thread at a time.
#ifndef FERRY_FERRY_CUDA_H
#define FERRY_FERRY_CUDA_H

#include <stdint.h>

#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_cuda ferry_cuda;

// ferry_cuda_available returns 1 when a CUDA device is usable (the driver
// loads and reports at least one device), else 0. Never fails.
FERRY_API int ferry_cuda_available(void);

// ferry_cuda_open ties the declared client c to the device buffers d_w and
// d_g (on the current CUDA device; each holds every declared tensor packed
// back to back in declare order: tensor t at the sum of the lengths before
// it), working on `stream` (a cudaStream_t; NULL: the legacy default
// stream). Call it after ferry_client_declare and before the first pull:
// it sets c's pull sink when the pull codec can be decoded on the device.
// It allocates the page-locked staging buffer, the device residuals and
// codes, and blocks while it does. *out receives the handle; release it
// with ferry_cuda_close before ferry_client_close. Errors: FERRY_EINVAL
// (NULL argument), FERRY_ESTATE (c not declared), FERRY_EUNSUPP (no usable
// CUDA device), FERRY_ENOMEM, FERRY_ESINK (a CUDA error), with the reason
// in ferry_cuda_last_error(NULL) (per thread).
FERRY_API int ferry_cuda_open(ferry_client *c, float *d_w, float *d_g,
    void *stream, ferry_cuda **out);

// ferry_cuda_init_weights offers the values in d_w as the job's version 0
// (ferry_client_init_weights; the first offer to reach each server wins).
// Blocks until the servers acknowledged. Errors: those of
// ferry_client_init_weights, FERRY_ESINK (a CUDA error).
FERRY_API int ferry_cuda_init_weights(ferry_cuda *x);

// ferry_cuda_pull pulls the version the client is due (ferry_client_pull)
// into d_w, and returns when d_w holds it. Errors: those of
// ferry_client_pull, FERRY_ESINK (a CUDA error).
FERRY_API int ferry_cuda_pull(ferry_cuda *x);

// ferry_cuda_push_pull pushes d_g, the SUM of the per-sample gradients over
// n_samples samples (as ferry_client_push_pull), and returns when d_w holds
// the next version. d_g is read, never written; the caller may overwrite
// it once the call returned. Errors: those of ferry_client_push_pull
// (FERRY_EBEHIND, FERRY_EROLLBACK: call ferry_cuda_pull and go on),
// FERRY_EINVAL (a non-finite gradient met by the device encoder: the step
// is abandoned), FERRY_ESINK (a CUDA error).
FERRY_API int ferry_cuda_push_pull(ferry_cuda *x, uint32_t n_samples);

// ferry_cuda_last_error returns the reason of x's last failed call (empty
// string if none); for x == NULL, that of the calling thread's last failed
// ferry_cuda_open. Borrowed: valid until the next call on x (or open).
FERRY_API const char *ferry_cuda_last_error(const ferry_cuda *x);

// ferry_cuda_close waits for x's work on its stream, removes its pull sink
// from the client and frees everything; the client is left open (with no
// sink: a later host pull gets full shards). NULL is a no-op.
FERRY_API void ferry_cuda_close(ferry_cuda *x);

#ifdef __cplusplus
}
#endif
#endif // FERRY_FERRY_CUDA_H
