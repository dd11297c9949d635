// ondevice_cuda.c — the CUDA backend's on-device data path (ondevice.h):
// ties the gradient encoder (devpush.h) and the pull sink (devpull.h) to
// the backend's device buffers and compute stream. Host code only, built
// only with the CUDA backend; the kernels are codec_cuda's.
#include "backend_cuda.h"
#include "devpull.h"
#include "devpush.h"
#include "fb/fb.h"
#include "ondevice.h"

// The encoder: devpush's state, the backend whose device gradient it
// encodes, and the array of code pointers it hands out.
struct push {
	struct tr_backend     *b;
	struct fcuda__devpush *dp;
	const uint8_t        **codes; // [n shards]
};

static void
push_close(void *arg)
{
	struct push *p = arg;
	if (p == NULL) {
		return;
	}
	fcuda__devpush_close(p->dp);
	fb_free(p->codes);
	fb_free(p);
}

static int
push_open(struct tr_backend *b, const struct ferry_shard *sh, size_t n,
    uint32_t codec_id, uint32_t bucket, const size_t *tensor_base, void **out,
    char *err, size_t errlen)
{
	struct push *p;
	int          rv;
	if ((p = fb_zalloc(sizeof(*p))) == NULL) {
		return FB_ENOMEM;
	}
	p->b = b;
	if ((rv = fcuda__devpush_open(tr__cuda_stream(b), sh, n, codec_id,
	         bucket, tensor_base, &p->dp, err, errlen)) != FB_OK) {
		push_close(p);
		return rv;
	}
	if ((p->codes = fb_alloc(n * sizeof(*p->codes))) == NULL) {
		push_close(p);
		return FB_ENOMEM;
	}
	*out = p;
	return FB_OK;
}

static int
push_grad(void *arg, const struct tr_dataset *ds, const uint32_t *idx,
    size_t n, const uint8_t *const **codes, double *loss_sum)
{
	struct push *p = arg;
	float       *d_grad;
	int          rv;
	if ((rv = tr__cuda_grad_device(p->b, ds, idx, n, &d_grad, loss_sum)) !=
	        FB_OK ||
	    (rv = fcuda__devpush_encode(p->dp, d_grad, p->codes)) != FB_OK) {
		return rv;
	}
	*codes = p->codes;
	return FB_OK;
}

static int
pull_open(struct tr_backend *b, const struct ferry_shard *sh, size_t n,
    uint32_t codec_id, uint32_t bucket, const size_t *tensor_base, void **out,
    struct ferry_pull_sink *sink, char *err, size_t errlen)
{
	struct fcuda__devpull *d;
	float                 *d_w;
	int                    rv;
	if ((rv = tr__cuda_weights_device(b, &d_w)) != FB_OK ||
	    (rv = fcuda__devpull_open(d_w, tr__cuda_stream(b), sh, n, codec_id,
	         bucket, tensor_base, &d, err, errlen)) != FB_OK) {
		return rv;
	}
	fcuda__devpull_sink(d, sink);
	*out = d;
	return FB_OK;
}

static const char *
pull_error(const void *pull)
{
	return fcuda__devpull_error(pull);
}

static int
pull_fetch(void *pull, float *const *w)
{
	return fcuda__devpull_fetch(pull, w);
}

static void
pull_close(void *pull)
{
	fcuda__devpull_close(pull);
}

const struct tr__ondevice_ops tr__cuda_ondevice_ops = {
	.push_supported = fcuda__devpush_supported,
	.push_open      = push_open,
	.push_grad      = push_grad,
	.push_close     = push_close,
	.pull_supported = fcuda__devpull_supported,
	.pull_open      = pull_open,
	.pull_error     = pull_error,
	.pull_fetch     = pull_fetch,
	.pull_close     = pull_close,
};
