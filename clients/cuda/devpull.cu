// devpull.cu — see devpull.h. The decode kernels are codec_cuda's; this
// file adds the chunked CRC-32 kernel and the sink's host side.
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codec_cuda.h"
#include "crc.h"
#include "devpull.h"
#include "fb/fb.h"

#define CRC_THREADS 128

struct fcuda__devpull {
	struct fcuda__dctx   ctx;
	struct fcuda__dcodec codec;
	cudaStream_t         s;
	float               *d_w; // the reference: the backend's weights
	size_t               n;
	size_t              *base;     // [n] shard's offset in d_w (floats)
	size_t              *len;      // [n] elements
	uint32_t            *tensor;   // [n]
	uint64_t            *offset;   // [n] first element within the tensor
	size_t               max_len;  // largest shard
	size_t               code_len; // bytes of a delta of the largest shard
	uint8_t             *h_stage;  // pinned staging for codes and fulls
	uint8_t             *d_stage;  // its device twin
	size_t               stage_cap, stage_off;
	uint32_t            *d_tab; // crc.h slice-by-4 tables (1024)
	uint32_t            *d_crc; // per-chunk CRCs of one shard
	uint32_t            *h_crc; // pinned
	char                 err[256];
};

// k_crc_chunks: out[c] = CRC-32 of chunk c (FCUDA_CRC_CHUNK bytes, the last
// one shorter) of the n_words words at w; one thread per chunk, the
// tables in shared memory.
__global__ static void
k_crc_chunks(const uint32_t *tab, const uint32_t *w, size_t n_words,
    size_t n_chunks, uint32_t *out)
{
	__shared__ uint32_t t[1024];
	for (unsigned i = threadIdx.x; i < 1024; i += blockDim.x) {
		t[i] = tab[i];
	}
	__syncthreads();
	size_t c = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= n_chunks) {
		return;
	}
	size_t per = FCUDA_CRC_CHUNK / 4, first = c * per;
	size_t m = n_words - first < per ? n_words - first : per;
	out[c]   = fcuda__crc_words(t, w + first, m);
}

static int set_err(struct fcuda__devpull *d, int rv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
set_err(struct fcuda__devpull *d, int rv, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->err, sizeof(d->err), fmt, ap);
	va_end(ap);
	return rv;
}

extern "C" int
fcuda__devpull_supported(uint32_t codec_id)
{
	struct fcuda__dcodec c = { codec_id, 512 };
	return fcuda__dcodec_valid(&c) == FB_OK;
}

extern "C" void
fcuda__devpull_close(struct fcuda__devpull *d)
{
	if (d == NULL) {
		return;
	}
	if (d->ctx.d_flag != NULL) {
		cudaStreamSynchronize(d->s); // nothing may still read buffers
	}
	fcuda__dctx_fini(&d->ctx);
	cudaFreeHost(d->h_stage);
	cudaFree(d->d_stage);
	cudaFree(d->d_tab);
	cudaFree(d->d_crc);
	cudaFreeHost(d->h_crc);
	cudaGetLastError();
	fb_free(d->base);
	fb_free(d->len);
	fb_free(d->tensor);
	fb_free(d->offset);
	fb_free(d);
}

extern "C" int
fcuda__devpull_open(float *d_w, void *stream, const struct ferry_shard *sh,
    size_t n, uint32_t codec_id, uint32_t bucket, const size_t *tensor_base,
    struct fcuda__devpull **out, char *err, size_t errlen)
{
	struct fcuda__devpull *d;
	uint32_t               tab[1024];
	size_t                 chunks;
	int                    rv;

	if (d_w == NULL || sh == NULL || n == 0 || tensor_base == NULL ||
	    out == NULL) {
		snprintf(err, errlen, "device pull: bad arguments");
		return FB_EINVAL;
	}
	if ((d = (struct fcuda__devpull *) fb_zalloc(sizeof(*d))) == NULL) {
		return FB_ENOMEM;
	}
	d->codec.id     = codec_id;
	d->codec.bucket = bucket;
	d->s            = (cudaStream_t) stream;
	d->d_w          = d_w;
	d->n            = n;
	if (!fcuda__devpull_supported(codec_id) ||
	    fcuda__dcodec_valid(&d->codec) != FB_OK) {
		snprintf(err, errlen,
		    "pull codec %u cannot be decoded on the "
		    "device (use none, fp16, bf16, q8, q4 or q2)",
		    codec_id);
		fb_free(d);
		return FB_EUNSUPP;
	}
	d->base   = (size_t *) fb_alloc(n * sizeof(size_t));
	d->len    = (size_t *) fb_alloc(n * sizeof(size_t));
	d->tensor = (uint32_t *) fb_alloc(n * sizeof(uint32_t));
	d->offset = (uint64_t *) fb_alloc(n * sizeof(uint64_t));
	if (d->base == NULL || d->len == NULL || d->tensor == NULL ||
	    d->offset == NULL) {
		fcuda__devpull_close(d);
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		d->base[i]   = tensor_base[sh[i].tensor] + sh[i].offset;
		d->len[i]    = sh[i].len;
		d->tensor[i] = sh[i].tensor;
		d->offset[i] = sh[i].offset;
		d->max_len   = sh[i].len > d->max_len ? sh[i].len : d->max_len;
	}
	// Deltas: a chain of FCUDA_DEVPULL_CHAIN of the largest shard, each
	// 4-aligned (decode_add wants aligned input). Fulls go through the
	// same buffer in slices, so without a pull codec (fulls only) a
	// smaller one does.
	d->code_len = fcuda__dcodec_bound(&d->codec, d->max_len);
	if (codec_id == FCUDA_DC_NONE) {
		d->stage_cap = d->code_len < (4u << 20) ? d->code_len
		                                        : (4u << 20);
	} else {
		d->stage_cap = FCUDA_DEVPULL_CHAIN *
		    ((d->code_len + 3) & ~(size_t) 3);
	}
	d->stage_cap = (d->stage_cap + 3) & ~(size_t) 3;
	chunks = (d->max_len * 4 + FCUDA_CRC_CHUNK - 1) / FCUDA_CRC_CHUNK;
	fcuda__crc_tables(tab);
	if ((rv = fcuda__dctx_init(&d->ctx, stream)) != FB_OK ||
	    cudaMallocHost((void **) &d->h_stage, d->stage_cap) !=
	        cudaSuccess ||
	    cudaMalloc((void **) &d->d_stage, d->stage_cap) != cudaSuccess ||
	    cudaMalloc((void **) &d->d_tab, sizeof(tab)) != cudaSuccess ||
	    cudaMalloc((void **) &d->d_crc, chunks * 4) != cudaSuccess ||
	    cudaMallocHost((void **) &d->h_crc, chunks * 4) != cudaSuccess ||
	    cudaMemcpy(d->d_tab, tab, sizeof(tab), cudaMemcpyHostToDevice) !=
	        cudaSuccess) {
		snprintf(err, errlen,
		    "cannot allocate device pull buffers "
		    "(%zu staging bytes, %zu chunk CRCs)",
		    d->stage_cap, chunks);
		fcuda__devpull_close(d);
		return rv != FB_OK ? rv : FB_ENOMEM;
	}
	*out = d;
	return FB_OK;
}

// chunk_crc enqueues the chunk kernel over n floats at d_x, copies the
// chunk CRCs back and waits; then folds them into *crc. The wait also
// covers every decode enqueued before: the codec context's flag is
// checked (and cleared) at the same time, into *dec.
static int
chunk_crc(struct fcuda__devpull *d, const float *d_x, size_t n, uint32_t *crc,
    int *dec)
{
	size_t chunks = (n * 4 + FCUDA_CRC_CHUNK - 1) / FCUDA_CRC_CHUNK;
	if (chunks > 0) {
		unsigned blocks = (unsigned) ((chunks + CRC_THREADS - 1) /
		    CRC_THREADS);
		k_crc_chunks<<<blocks, CRC_THREADS, 0, d->s>>>(d->d_tab,
		    (const uint32_t *) d_x, n, chunks, d->d_crc);
		if (cudaGetLastError() != cudaSuccess ||
		    cudaMemcpyAsync(d->h_crc, d->d_crc, chunks * 4,
		        cudaMemcpyDeviceToHost, d->s) != cudaSuccess) {
			return FB_ETRANSPORT;
		}
	}
	*dec         = fcuda__dctx_check(&d->ctx); // waits for the stream
	d->stage_off = 0;
	if (*dec == FB_ETRANSPORT) {
		return FB_ETRANSPORT;
	}
	*crc = fcuda__crc32_fold(d->h_crc, n * 4);
	return FB_OK;
}

extern "C" int
fcuda__devpull_crc(struct fcuda__devpull *d, const float *d_x, size_t n,
    uint32_t *crc)
{
	int dec, rv;
	if (d == NULL || d_x == NULL || crc == NULL || n > d->max_len) {
		return FB_EINVAL;
	}
	if ((rv = chunk_crc(d, d_x, n, crc, &dec)) != FB_OK) {
		return rv;
	}
	return dec == FB_ETRANSPORT ? dec : FB_OK;
}

// shard_ok checks a piece against the layout given to open.
static int
shard_ok(struct fcuda__devpull *d, const struct ferry_pull_piece *p)
{
	if (p->shard >= d->n || p->len != d->len[p->shard] ||
	    p->tensor != d->tensor[p->shard] ||
	    p->offset != d->offset[p->shard]) {
		return set_err(d, 0,
		    "shard %u is not the job's shard the device "
		    "pull was set up for",
		    p->shard);
	}
	return 1;
}

static int
sink_full(void *arg, const struct ferry_pull_piece *p)
{
	struct fcuda__devpull *d = (struct fcuda__devpull *) arg;
	uint8_t               *dst;
	if (!shard_ok(d, p)) {
		return FERRY_ESINK;
	}
	if (p->bytes != p->len * 4) {
		return set_err(d, FERRY_EPROTO, "full shard %u has %llu bytes",
		    p->shard, (unsigned long long) p->bytes);
	}
	// A chain abandoned mid-way (this is its resync) may have left
	// decodes and a flag behind: wait, and forget them.
	if (fcuda__dctx_check(&d->ctx) == FB_ETRANSPORT) {
		return set_err(d, FERRY_ESINK,
		    "CUDA error before the full copy of shard %u: %s",
		    p->shard, cudaGetErrorString(cudaGetLastError()));
	}
	dst = (uint8_t *) (d->d_w + d->base[p->shard]);
	for (uint64_t o = 0; o < p->bytes; o += d->stage_cap) {
		size_t m = p->bytes - o < d->stage_cap
		    ? (size_t) (p->bytes - o)
		    : d->stage_cap;
		memcpy(d->h_stage, p->data + o, m);
		if (cudaMemcpyAsync(dst + o, d->h_stage, m,
		        cudaMemcpyHostToDevice, d->s) != cudaSuccess ||
		    cudaStreamSynchronize(d->s) != cudaSuccess) {
			return set_err(d, FERRY_ESINK,
			    "full copy of shard %u: %s", p->shard,
			    cudaGetErrorString(cudaGetLastError()));
		}
	}
	d->stage_off = 0;
	return FERRY_OK;
}

static int
sink_delta(void *arg, const struct ferry_pull_piece *p)
{
	struct fcuda__devpull *d = (struct fcuda__devpull *) arg;
	size_t                 need;
	if (!shard_ok(d, p)) {
		return FERRY_ESINK;
	}
	if (p->codec != d->codec.id || p->bucket != d->codec.bucket ||
	    p->bytes != fcuda__dcodec_bound(&d->codec, p->len)) {
		return set_err(d, FERRY_EPROTO,
		    "delta for shard %u: codec %u "
		    "bucket %u, %llu bytes; expected codec %u bucket %u",
		    p->shard, p->codec, p->bucket,
		    (unsigned long long) p->bytes, d->codec.id,
		    d->codec.bucket);
	}
	need = ((size_t) p->bytes + 3) & ~(size_t) 3;
	if (d->stage_off + need > d->stage_cap) {
		// A longer chain than planned: let the copies in flight land
		// before the staging buffer is reused.
		if (cudaStreamSynchronize(d->s) != cudaSuccess) {
			return set_err(d, FERRY_ESINK, "CUDA: %s",
			    cudaGetErrorString(cudaGetLastError()));
		}
		d->stage_off = 0;
	}
	memcpy(d->h_stage + d->stage_off, p->data, p->bytes);
	if (cudaMemcpyAsync(d->d_stage + d->stage_off,
	        d->h_stage + d->stage_off, p->bytes, cudaMemcpyHostToDevice,
	        d->s) != cudaSuccess ||
	    fcuda__dcodec_decode_add(&d->ctx, &d->codec,
	        d->d_stage + d->stage_off, p->bytes, p->len,
	        d->d_w + d->base[p->shard]) != FB_OK) {
		return set_err(d, FERRY_ESINK,
		    "delta for shard %u: cannot enqueue the decode: %s",
		    p->shard, cudaGetErrorString(cudaGetLastError()));
	}
	d->stage_off += need;
	return FERRY_OK;
}

static int
sink_check(void *arg, uint32_t shard, uint64_t version, uint32_t crc)
{
	struct fcuda__devpull *d   = (struct fcuda__devpull *) arg;
	uint32_t               got = 0;
	int                    dec;
	if (shard >= d->n) {
		return set_err(d, FERRY_ESINK, "check of unknown shard %u",
		    shard);
	}
	if (chunk_crc(d, d->d_w + d->base[shard], d->len[shard], &got, &dec) !=
	    FB_OK) {
		return set_err(d, FERRY_ESINK,
		    "CRC of shard %u on the device: %s", shard,
		    cudaGetErrorString(cudaGetLastError()));
	}
	if (dec == FB_EPROTO) {
		// Codes the device refused (bad scale, forbidden code): the
		// reference was left as it was; as comp_decode_add on the
		// host.
		return set_err(d, FERRY_EPROTO,
		    "corrupt delta for shard %u (version %llu)", shard,
		    (unsigned long long) version);
	}
	if (dec != FB_OK) {
		return set_err(d, FERRY_ESINK, "shard %u: device decode: %s",
		    shard, fb_strerror(dec));
	}
	return got == crc ? FERRY_OK : FERRY_ECORRUPT;
}

extern "C" void
fcuda__devpull_sink(struct fcuda__devpull *d, struct ferry_pull_sink *sink)
{
	sink->full  = sink_full;
	sink->delta = sink_delta;
	sink->check = sink_check;
	sink->arg   = d;
}

extern "C" const char *
fcuda__devpull_error(const struct fcuda__devpull *d)
{
	return d != NULL ? d->err : "";
}

extern "C" int
fcuda__devpull_fetch(struct fcuda__devpull *d, float *const *w)
{
	if (cudaStreamSynchronize(d->s) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	for (size_t i = 0; i < d->n; i++) {
		if (cudaMemcpy(w[d->tensor[i]] + d->offset[i],
		        d->d_w + d->base[i], d->len[i] * sizeof(float),
		        cudaMemcpyDeviceToHost) != cudaSuccess) {
			return FB_ETRANSPORT;
		}
	}
	return FB_OK;
}
