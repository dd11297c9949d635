// ondevice.h — the on-device data path a compute backend may offer the
// training loop (private to tr): gradients encoded where they are
// computed, and pulled weights decoded where they are used, so that only
// codes cross the bus between host and device.
//
// DESIGN
// A backend that can do this points tr_backend_ops.ondevice at one of these
// tables (the CUDA backend: ondevice_cuda.c over devpush.h and devpull.h); a
// backend that cannot leaves it NULL, which means "the host path": the loop
// moves host buffers through libferry and calls set_weights. The loop asks the
// table, never the backend's name, so train.c and step.c need no #ifdef. The
// table lives here and not in tr.h because it speaks libferry's types (shards,
// pull sinks), which tr.h does not include. Each half is optional on its own:
// the loop uses the push half when push_supported accepts the job's push
// codec, and the pull half when pull_supported accepts its pull codec;
// otherwise that half stays on the host.
#ifndef TR_ONDEVICE_H
#define TR_ONDEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "tr/tr.h"

#ifdef __cplusplus
extern "C" {
#endif

// Both open calls take the job as libferry cut it: its n shards sh
// (ferry_client_shards), the codec (wire id) and bucket of that direction,
// and tensor_base[t], the offset in floats of tensor t in the backend's
// contiguous parameter block (tensors in order, W1, b1, W2, ...).
struct tr__ondevice_ops {
	// push_supported says whether gradients can be encoded on the device
	// in push codec codec_id.
	int (*push_supported)(uint32_t codec_id);
	// push_open prepares on-device encoding of b's gradients, with an
	// error-feedback residual per shard. *push receives the encoder.
	// Errors: FB_EUNSUPP (codec), FB_ENOMEM, FB_ETRANSPORT (device),
	// with a reason in err. Release with push_close.
	int (*push_open)(struct tr_backend *b, const struct ferry_shard *sh,
	    size_t n, uint32_t codec_id, uint32_t bucket,
	    const size_t *tensor_base, void **push, char *err, size_t errlen);
	// push_grad is tr_backend_grad with the gradient encoded on the
	// device: *codes receives n_shards host pointers (shard i's
	// code_bytes bytes, for ferry_client_push_pull_encoded), borrowed
	// until the next push_grad or push_close; *loss_sum the summed loss.
	// Blocks until the codes are on the host. Errors as tr_backend_grad,
	// and FB_EINVAL for a non-finite gradient (abandon the step).
	int (*push_grad)(void *push, const struct tr_dataset *ds,
	    const uint32_t *idx, size_t n, const uint8_t *const **codes,
	    double *loss_sum);
	// push_close frees the encoder; NULL is a no-op.
	void (*push_close)(void *push);

	// pull_supported says whether pulls in codec codec_id can be decoded
	// on the device.
	int (*pull_supported)(uint32_t codec_id);
	// pull_open makes b's device weights the pull reference and fills
	// *sink for ferry_client_set_pull_sink (sink->arg = *pull). From then
	// on the caller no longer calls set_weights: the sink writes the
	// weights b computes with. *pull receives the sink's state.
	// Errors: FB_EINVAL, FB_EUNSUPP (codec), FB_ENOMEM, FB_ETRANSPORT,
	// with a reason in err. Release with pull_close, after the last pull.
	int (*pull_open)(struct tr_backend *b, const struct ferry_shard *sh,
	    size_t n, uint32_t codec_id, uint32_t bucket,
	    const size_t *tensor_base, void **pull,
	    struct ferry_pull_sink *sink, char *err, size_t errlen);
	// pull_error returns the reason of the sink's last FERRY_ESINK or
	// FERRY_EPROTO answer ("" if none); the pointer stays valid until
	// pull_close and always shows the latest reason.
	const char *(*pull_error)(const void *pull);
	// pull_fetch copies the device weights into the host tensors w
	// (w[t] holds tensor t). Blocks. Errors: FB_ETRANSPORT.
	int (*pull_fetch)(void *pull, float *const *w);
	// pull_close frees the sink's state; NULL is a no-op.
	void (*pull_close)(void *pull);
};

#ifdef __cplusplus
}
#endif
#endif // TR_ONDEVICE_H
