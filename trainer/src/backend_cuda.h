// backend_cuda.h — extras of the CUDA backend beyond struct tr_backend_ops
// (private to tr; used by the benchmark and tests).
#ifndef TR_BACKEND_CUDA_H
#define TR_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tr/tr.h"

#ifdef __cplusplus
extern "C" {
#endif

// tr__cuda_device_count returns the number of usable CUDA devices, 0 when
// there is none or the driver cannot be loaded (never fails). When it
// returns 0 and why is non-NULL, a reason is written there (whylen bytes).
int tr__cuda_device_count(char *why, size_t whylen);

// tr__cuda_grad_device is the backend's grad without the copy to the host:
// forward + backward on rows idx[0..n) of ds, leaving the summed gradient
// in the backend's device memory. *d_grad (may be NULL) receives the
// device address of the gradient block: tr_arch_n_params floats, tensors
// in order W1, b1, W2, ... (tensor i at the sum of the earlier lengths),
// borrowed until the next grad or free. *loss_sum (may be NULL) gets the
// summed loss, which makes this call wait for the device; with loss_sum
// NULL it returns as soon as the work is enqueued (call
// tr__cuda_sync before reading *d_grad from another stream).
// b must be a "cuda" backend. Errors as tr_backend_grad.
int tr__cuda_grad_device(struct tr_backend *b, const struct tr_dataset *ds,
    const uint32_t *idx, size_t n, float **d_grad, double *loss_sum);

// tr__cuda_sync waits for every kernel and copy the backend enqueued.
// Returns FB_OK or FB_ETRANSPORT (a CUDA error).
int tr__cuda_sync(struct tr_backend *b);

// tr__cuda_weights_device returns in *d_w the device block the backend
// computes with: tr_arch_n_params floats, tensors in order (as d_grad).
// From this call on the caller owns its contents: it writes the weights
// there itself, on the backend's stream (tr__cuda_stream), before the next
// grad or evaluate, and no longer calls set_weights (which would overwrite
// them). devpull.h keeps the pull reference there. Borrowed until free.
// b must be a "cuda" backend. Errors: FB_EINVAL.
int tr__cuda_weights_device(struct tr_backend *b, float **d_w);

// tr__cuda_stream returns the backend's compute stream (a cudaStream_t),
// on which tr__cuda_grad_device's work runs; a device codec context made
// on it (codec_cuda.h) is ordered after the gradient without a sync.
void *tr__cuda_stream(struct tr_backend *b);

// tr__cuda_ondevice_ops is the backend's on-device data path (ondevice.h,
// ondevice_cuda.c): gradients encoded and pulls decoded on the device. The
// backend's ops table points at it.
struct tr__ondevice_ops;
extern const struct tr__ondevice_ops tr__cuda_ondevice_ops;

#ifdef __cplusplus
}
#endif
#endif // TR_BACKEND_CUDA_H
