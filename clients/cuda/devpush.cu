// devpush.cu — see devpush.h. Host code only: the kernels are codec_cuda's.
#include <cuda_runtime.h>
#include <stdio.h>

#include "codec_cuda.h"
#include "devpush.h"
#include "fb/fb.h"

struct fcuda__devpush {
	struct fcuda__dctx   ctx;
	struct fcuda__dcodec codec;
	size_t               n;
	float               *d_resid; // one residual per shard element
	size_t              *res_off; // [n] offset in d_resid
	size_t              *src_off; // [n] offset in the gradient block
	size_t  *code_off; // [n] offset in the code buffers (4-aligned)
	size_t  *code_len; // [n]
	size_t  *len;      // [n] elements
	uint8_t *d_codes;
	uint8_t *h_codes; // pinned
	size_t   total_codes;
};

extern "C" int
fcuda__devpush_supported(uint32_t codec_id)
{
	struct fcuda__dcodec c = { codec_id, 512 };
	return codec_id != FCUDA_DC_NONE && fcuda__dcodec_valid(&c) == FB_OK;
}

extern "C" void
fcuda__devpush_close(struct fcuda__devpush *d)
{
	if (d == NULL) {
		return;
	}
	fcuda__dctx_fini(&d->ctx);
	cudaFree(d->d_resid);
	cudaFree(d->d_codes);
	cudaFreeHost(d->h_codes);
	fb_free(d->res_off);
	fb_free(d->src_off);
	fb_free(d->code_off);
	fb_free(d->code_len);
	fb_free(d->len);
	fb_free(d);
}

extern "C" int
fcuda__devpush_open(void *stream, const struct ferry_shard *sh, size_t n,
    uint32_t codec_id, uint32_t bucket, const size_t *tensor_base,
    struct fcuda__devpush **out, char *err, size_t errlen)
{
	struct fcuda__devpush *d;
	size_t                 elems = 0, codes = 0;
	int                    rv;

	if ((d = (struct fcuda__devpush *) fb_zalloc(sizeof(*d))) == NULL) {
		return FB_ENOMEM;
	}
	d->codec.id     = codec_id;
	d->codec.bucket = bucket;
	d->n            = n;
	if (!fcuda__devpush_supported(codec_id) ||
	    fcuda__dcodec_valid(&d->codec) != FB_OK) {
		snprintf(err, errlen,
		    "push codec %u cannot be encoded on the "
		    "device (use fp16, bf16, q8, q4 or q2)",
		    codec_id);
		fb_free(d);
		return FB_EUNSUPP;
	}
	d->res_off  = (size_t *) fb_alloc(n * sizeof(size_t));
	d->src_off  = (size_t *) fb_alloc(n * sizeof(size_t));
	d->code_off = (size_t *) fb_alloc(n * sizeof(size_t));
	d->code_len = (size_t *) fb_alloc(n * sizeof(size_t));
	d->len      = (size_t *) fb_alloc(n * sizeof(size_t));
	if (d->res_off == NULL || d->src_off == NULL || d->code_off == NULL ||
	    d->code_len == NULL || d->len == NULL) {
		fcuda__devpush_close(d);
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		d->res_off[i]  = elems;
		d->src_off[i]  = tensor_base[sh[i].tensor] + sh[i].offset;
		d->code_off[i] = codes;
		d->code_len[i] = fcuda__dcodec_bound(&d->codec, sh[i].len);
		d->len[i]      = sh[i].len;
		if (d->code_len[i] != sh[i].code_bytes) {
			snprintf(err, errlen,
			    "shard %zu: device code size %zu "
			    "differs from libferry's %llu",
			    i, d->code_len[i],
			    (unsigned long long) sh[i].code_bytes);
			fcuda__devpush_close(d);
			return FB_EINVAL;
		}
		elems += sh[i].len;
		codes += (d->code_len[i] + 3) & ~(size_t) 3; // keep 4-aligned
	}
	d->total_codes = codes;
	if ((rv = fcuda__dctx_init(&d->ctx, stream)) != FB_OK ||
	    cudaMalloc((void **) &d->d_resid, elems * sizeof(float) + 4) !=
	        cudaSuccess ||
	    cudaMemset(d->d_resid, 0, elems * sizeof(float) + 4) !=
	        cudaSuccess ||
	    cudaMalloc((void **) &d->d_codes, codes + 4) != cudaSuccess ||
	    cudaMallocHost((void **) &d->h_codes, codes + 4) != cudaSuccess) {
		snprintf(err, errlen,
		    "cannot allocate device push buffers "
		    "(%zu floats, %zu code bytes)",
		    elems, codes);
		fcuda__devpush_close(d);
		return rv != FB_OK ? rv : FB_ENOMEM;
	}
	*out = d;
	return FB_OK;
}

extern "C" int
fcuda__devpush_encode(struct fcuda__devpush *d, const float *d_grad,
    const uint8_t **codes)
{
	int rv;
	// Everything is enqueued on the caller's stream, after the gradient:
	// one encode per shard, then a single copy of all the codes.
	for (size_t i = 0; i < d->n; i++) {
		rv = fcuda__dcodec_ef_encode(&d->ctx, &d->codec,
		    d_grad + d->src_off[i], d->d_resid + d->res_off[i],
		    d->len[i], d->d_codes + d->code_off[i]);
		if (rv != FB_OK) {
			return rv;
		}
	}
	if (cudaMemcpyAsync(d->h_codes, d->d_codes, d->total_codes,
	        cudaMemcpyDeviceToHost,
	        (cudaStream_t) d->ctx.stream) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	// Waits for the copy and reports a non-finite gradient (then the
	// step must be abandoned: shards before the bad one have moved their
	// residuals).
	if ((rv = fcuda__dctx_check(&d->ctx)) != FB_OK) {
		return rv;
	}
	for (size_t i = 0; i < d->n; i++) {
		codes[i] = d->h_codes + d->code_off[i];
	}
	return FB_OK;
}
