// codec_cuda.cu — compression/'s codecs as CUDA kernels (see codec_cuda.h):
// the contexts and their error flag, the element-wise codecs (none, fp16,
// bf16) and the entry points, which hand the bucketed quantizers (q8, q4,
// q2) to codec_cuda_q.cu.
//
// DESIGN
// Byte identity with the CPU encoder rests on doing the same IEEE fp32
// operations; codec_cuda_q.cu says how for the quantizers. fp16/bf16 are
// the same bit-pattern conversions as compression/src/float16.c, and error
// feedback and decode-add are one fp32 subtraction or addition a value, as
// on the CPU.
//
// Error flag. Kernels that write anything first read the context's flag
// and return when it is set; the flag is cleared only by fcuda__dctx_check.
// This is how "e / acc untouched on error" is kept without a host round
// trip between the check and the write.
#include <stdint.h>
#include <string.h>

#include "codec_cuda_impl.h"

// ---- fp16 / bf16 conversions (bit-exact twins of float16.c) -------------

__device__ static inline uint16_t
f32_to_f16(float f)
{
	uint32_t u    = __float_as_uint(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a    = u & 0x7fffffffu;
	if (a >= 0x7f800000u) {
		return (uint16_t) (sign | 0x7c00u |
		    (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
	}
	if (a >= 0x477ff000u) {
		return (uint16_t) (sign | 0x7c00u);
	}
	if (a < 0x38800000u) {
		if (a < 0x33000000u) {
			return (uint16_t) sign;
		}
		uint32_t e     = a >> 23;
		uint32_t m     = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e;
		uint32_t h     = m >> shift;
		uint32_t rem   = m & ((1u << shift) - 1);
		uint32_t half  = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1))) {
			h++;
		}
		return (uint16_t) (sign | h);
	}
	uint32_t h   = (a - 0x38000000u) >> 13;
	uint32_t rem = a & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) {
		h++;
	}
	return (uint16_t) (sign | h);
}

__device__ static inline float
f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
	uint32_t e    = (h >> 10) & 0x1fu;
	uint32_t m    = h & 0x3ffu;
	if (e == 0x1f) {
		return __uint_as_float(sign | 0x7f800000u | (m << 13));
	}
	if (e == 0) {
		float v = (float) m * 0x1p-24f;
		return sign ? -v : v;
	}
	return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}

__device__ static inline uint16_t
f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (uint16_t) ((u >> 16) | 0x40u);
	}
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t) (u >> 16);
}

__device__ static inline float
bf16_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t) h << 16);
}

// flt_round returns the value id's encoding of v decodes to, and its code.
__device__ static inline float
flt_code(uint32_t id, float v, uint32_t *code)
{
	if (id == FCUDA_DC_NONE) {
		*code = __float_as_uint(v);
		return v;
	}
	if (id == FCUDA_DC_FP16) {
		uint16_t h = f32_to_f16(v);
		*code      = h;
		return f16_to_f32(h);
	}
	uint16_t h = f32_to_bf16(v);
	*code      = h;
	return bf16_to_f32(h);
}

// ---- element-wise codecs -------------------------------------------------

// k_flt_encode: plain encode (ef == 0) or error feedback (ef == 1, x = g,
// e updated), elements i0..n-1. Refusal of a non-finite p for ef was done
// by k_finite. Any alignment (k_flt_encode_vec is the fast case).
__global__ static void
k_flt_encode(uint32_t id, const float *x, float *e, size_t n, size_t i0,
    uint8_t *out, const int *flag, int ef)
{
	if (*flag != 0) {
		return;
	}
	size_t stride = (size_t) gridDim.x * blockDim.x;
	for (size_t i = i0 + (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	     i < n; i += stride) {
		float    p = ef ? x[i] + e[i] : x[i];
		uint32_t code;
		float    back = flt_code(id, p, &code);
		if (id == FCUDA_DC_NONE) {
			((uint32_t *) out)[i] = code;
		} else {
			((uint16_t *) out)[i] = (uint16_t) code;
		}
		if (ef) {
			e[i] = p - back;
		}
	}
}

// k_flt_decode_add: acc[i] += decoded in[i] for i in i0..n-1; any
// alignment (k_flt_decode_add_vec is the fast case).
__global__ static void
k_flt_decode_add(uint32_t id, const uint8_t *in, size_t n, size_t i0,
    float *acc, const int *flag)
{
	if (*flag != 0) {
		return;
	}
	size_t stride = (size_t) gridDim.x * blockDim.x;
	for (size_t i = i0 + (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	     i < n; i += stride) {
		float v;
		if (id == FCUDA_DC_NONE) {
			v = __uint_as_float(((const uint32_t *) in)[i]);
		} else if (id == FCUDA_DC_FP16) {
			v = f16_to_f32(((const uint16_t *) in)[i]);
		} else {
			v = bf16_to_f32(((const uint16_t *) in)[i]);
		}
		acc[i] = acc[i] + v;
	}
}

// k_finite raises FCUDA_DC_FLAG_EINVAL when some g[i] (+ e[i]) is Inf or NaN.
__global__ static void
k_finite(const float *g, const float *e, size_t n, int *flag)
{
	size_t stride = (size_t) gridDim.x * blockDim.x;
	int    bad    = 0;
	for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float p = e != NULL ? g[i] + e[i] : g[i];
		bad |= (__float_as_uint(p) & 0x7fffffffu) >= FCUDA_DC_INF_BITS;
	}
	if (__syncthreads_or(bad) && threadIdx.x == 0) {
		atomicOr(flag, FCUDA_DC_FLAG_EINVAL);
	}
}

// ---- the fast cases: 16-byte loads -----------------------------------------
//
// The kernels above read a thread's floats one at a time. When the floats
// are 16-byte aligned, a thread reads and writes them as float4s instead;
// the arithmetic is the general kernels', operation for operation, so the
// bytes are the same.

// flt_out4 stores the codes of p (4 floats) at group g of out: 16 bytes
// for FCUDA_DC_NONE, 8 for the 16-bit formats; returns the decoded values.
template <uint32_t ID>
__device__ static inline float4
flt_out4(float4 p, uint8_t *out, size_t g)
{
	uint32_t c0, c1, c2, c3;
	float4   back;
	back.x = flt_code(ID, p.x, &c0);
	back.y = flt_code(ID, p.y, &c1);
	back.z = flt_code(ID, p.z, &c2);
	back.w = flt_code(ID, p.w, &c3);
	if (ID == FCUDA_DC_NONE) {
		((uint4 *) out)[g] = make_uint4(c0, c1, c2, c3);
	} else {
		((uint2 *) out)[g] = make_uint2(c0 | (c1 << 16),
		    c2 | (c3 << 16));
	}
	return back;
}

// k_flt_encode_vec: elements [0, 4 * n4) as float4 groups; x and e 16-byte
// aligned, out 16 (NONE) or 8 (16-bit formats) bytes aligned.
template <uint32_t ID>
__global__ static void
k_flt_encode_vec(const float *x, float *e, size_t n4, uint8_t *out,
    const int *flag)
{
	if (*flag != 0) {
		return;
	}
	size_t stride = (size_t) gridDim.x * blockDim.x;
	for (size_t g = (size_t) blockIdx.x * blockDim.x + threadIdx.x; g < n4;
	     g += stride) {
		float4 p = ((const float4 *) x)[g];
		if (e == NULL) {
			flt_out4<ID>(p, out, g);
			continue;
		}
		float4 r          = ((const float4 *) e)[g];
		p.x               = p.x + r.x;
		p.y               = p.y + r.y;
		p.z               = p.z + r.z;
		p.w               = p.w + r.w;
		float4 b          = flt_out4<ID>(p, out, g);
		r.x               = p.x - b.x;
		r.y               = p.y - b.y;
		r.z               = p.z - b.z;
		r.w               = p.w - b.w;
		((float4 *) e)[g] = r;
	}
}

// flt_in returns the value of code c (a 32- or 16-bit pattern).
template <uint32_t ID>
__device__ static inline float
flt_in(uint32_t c)
{
	if (ID == FCUDA_DC_NONE) {
		return __uint_as_float(c);
	}
	if (ID == FCUDA_DC_FP16) {
		return f16_to_f32((uint16_t) c);
	}
	return bf16_to_f32((uint16_t) c);
}

// k_flt_decode_add_vec: elements [0, 4 * n4) as float4 groups; acc
// 16-byte aligned, in aligned as out is for k_flt_encode_vec.
template <uint32_t ID>
__global__ static void
k_flt_decode_add_vec(const uint8_t *in, size_t n4, float *acc, const int *flag)
{
	if (*flag != 0) {
		return;
	}
	size_t stride = (size_t) gridDim.x * blockDim.x;
	for (size_t g = (size_t) blockIdx.x * blockDim.x + threadIdx.x; g < n4;
	     g += stride) {
		uint32_t c0, c1, c2, c3;
		if (ID == FCUDA_DC_NONE) {
			uint4 w = ((const uint4 *) in)[g];
			c0 = w.x, c1 = w.y, c2 = w.z, c3 = w.w;
		} else {
			uint2 w = ((const uint2 *) in)[g];
			c0 = w.x & 0xffffu, c1 = w.x >> 16;
			c2 = w.y & 0xffffu, c3 = w.y >> 16;
		}
		float4 a            = ((float4 *) acc)[g];
		a.x                 = a.x + flt_in<ID>(c0);
		a.y                 = a.y + flt_in<ID>(c1);
		a.z                 = a.z + flt_in<ID>(c2);
		a.w                 = a.w + flt_in<ID>(c3);
		((float4 *) acc)[g] = a;
	}
}

// ---- host side -------------------------------------------------------------

extern "C" int
fcuda__dctx_init(struct fcuda__dctx *x, void *stream)
{
	int dev = 0;
	if (x == NULL) {
		return FB_EINVAL;
	}
	memset(x, 0, sizeof(*x));
	if (cudaGetDevice(&dev) != cudaSuccess) {
		cudaGetLastError();
		return FB_EUNSUPP;
	}
	x->stream = stream;
	x->device = dev;
	if (cudaMalloc((void **) &x->d_flag, sizeof(int)) != cudaSuccess) {
		cudaGetLastError();
		x->d_flag = NULL;
		return FB_ENOMEM;
	}
	if (cudaMallocHost((void **) &x->h_flag, sizeof(int)) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(x->d_flag);
		memset(x, 0, sizeof(*x));
		return FB_ENOMEM;
	}
	*x->h_flag = 0;
	if (cudaMemset(x->d_flag, 0, sizeof(int)) != cudaSuccess) {
		cudaGetLastError();
		fcuda__dctx_fini(x);
		return FB_ENOMEM;
	}
	return FB_OK;
}

extern "C" void
fcuda__dctx_fini(struct fcuda__dctx *x)
{
	if (x == NULL) {
		return;
	}
	if (x->d_flag != NULL) {
		cudaFree(x->d_flag);
	}
	if (x->h_flag != NULL) {
		cudaFreeHost(x->h_flag);
	}
	memset(x, 0, sizeof(*x));
}

extern "C" int
fcuda__dctx_check(struct fcuda__dctx *x)
{
	cudaStream_t s = (cudaStream_t) x->stream;
	int          f;
	if (cudaMemcpyAsync(x->h_flag, x->d_flag, sizeof(int),
	        cudaMemcpyDeviceToHost, s) != cudaSuccess ||
	    cudaStreamSynchronize(s) != cudaSuccess) {
		cudaGetLastError();
		return FB_ETRANSPORT;
	}
	f = *x->h_flag;
	if (f != 0 &&
	    cudaMemsetAsync(x->d_flag, 0, sizeof(int), s) != cudaSuccess) {
		return FB_ETRANSPORT;
	}
	if (f & FCUDA_DC_FLAG_EPROTO) {
		return FB_EPROTO;
	}
	return (f & FCUDA_DC_FLAG_EINVAL) ? FB_EINVAL : FB_OK;
}

extern "C" int
fcuda__dcodec_valid(const struct fcuda__dcodec *c)
{
	if (c == NULL) {
		return FB_EINVAL;
	}
	if (c->id == 6 || c->id == 7) { // comp's sign, topk
		return FB_EUNSUPP;
	}
	if (c->id > FCUDA_DC_Q2) {
		return FB_EINVAL;
	}
	if (fcuda__dc_qbits(c->id) != 0 &&
	    (c->bucket < 1 || c->bucket > FCUDA_DC_BUCKET_MAX)) {
		return FB_EINVAL;
	}
	return FB_OK;
}

extern "C" size_t
fcuda__dcodec_bound(const struct fcuda__dcodec *c, size_t n)
{
	unsigned b;
	if (fcuda__dcodec_valid(c) != FB_OK || n > (size_t) UINT32_MAX) {
		return 0;
	}
	if (c->id == FCUDA_DC_NONE) {
		return 4 * n;
	}
	if ((b = fcuda__dc_qbits(c->id)) == 0) {
		return 2 * n;
	}
	return 4 * (n / c->bucket + (n % c->bucket != 0)) + (n * b + 7) / 8;
}

static int
encode(struct fcuda__dctx *x, const struct fcuda__dcodec *c, const float *d_x,
    float *d_e, size_t n, uint8_t *d_out)
{
	cudaStream_t s = (cudaStream_t) x->stream;
	unsigned     b;
	int          rv;
	if ((rv = fcuda__dcodec_valid(c)) != FB_OK) {
		return rv;
	}
	if (x->d_flag == NULL || n > (size_t) UINT32_MAX) {
		return FB_EINVAL;
	}
	if (n == 0) {
		return FB_OK;
	}
	if (d_x == NULL || d_out == NULL || ((uintptr_t) d_out & 3) != 0) {
		return FB_EINVAL;
	}
	if ((b = fcuda__dc_qbits(c->id)) == 0) {
		if (d_e != NULL) {
			k_finite<<<fcuda__dc_grid(n), FCUDA_DC_THREADS, 0,
			    s>>>(d_x, d_e, n, x->d_flag);
		}
		size_t n4 = 0;
		if (fcuda__dc_aligned16(d_x) &&
		    (d_e == NULL || fcuda__dc_aligned16(d_e)) &&
		    ((uintptr_t) d_out & (c->id == FCUDA_DC_NONE ? 15 : 7)) ==
		        0) {
			n4 = n / 4;
		}
		if (n4 > 0) {
			unsigned g = fcuda__dc_grid(n4);
			if (c->id == FCUDA_DC_NONE) {
				k_flt_encode_vec<FCUDA_DC_NONE>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_x, d_e,
				        n4, d_out, x->d_flag);
			} else if (c->id == FCUDA_DC_FP16) {
				k_flt_encode_vec<FCUDA_DC_FP16>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_x, d_e,
				        n4, d_out, x->d_flag);
			} else {
				k_flt_encode_vec<FCUDA_DC_BF16>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_x, d_e,
				        n4, d_out, x->d_flag);
			}
		}
		if (4 * n4 < n) {
			k_flt_encode<<<fcuda__dc_grid(n - 4 * n4),
			    FCUDA_DC_THREADS, 0, s>>>(c->id, d_x, d_e, n,
			    4 * n4, d_out, x->d_flag, d_e != NULL);
		}
		return fcuda__dc_launched();
	}
	return fcuda__dq_encode(x, c, b, d_x, d_e, n, d_out);
}

extern "C" int
fcuda__dcodec_encode(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    const float *d_x, size_t n, uint8_t *d_out)
{
	if (x == NULL) {
		return FB_EINVAL;
	}
	return encode(x, c, d_x, NULL, n, d_out);
}

extern "C" int
fcuda__dcodec_ef_encode(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    const float *d_g, float *d_e, size_t n, uint8_t *d_out)
{
	if (x == NULL || (n > 0 && d_e == NULL)) {
		return FB_EINVAL;
	}
	return encode(x, c, d_g, d_e, n, d_out);
}

extern "C" int
fcuda__dcodec_decode_add(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    const uint8_t *d_in, size_t len, size_t n, float *d_acc)
{
	cudaStream_t s = (cudaStream_t) x->stream;
	unsigned     b;
	int          rv;
	if (x == NULL || x->d_flag == NULL) {
		return FB_EINVAL;
	}
	if ((rv = fcuda__dcodec_valid(c)) != FB_OK) {
		return rv;
	}
	if (n > (size_t) UINT32_MAX) {
		return FB_EINVAL;
	}
	if (len != fcuda__dcodec_bound(c, n)) {
		return FB_EPROTO;
	}
	if (n == 0) {
		return FB_OK;
	}
	if (d_in == NULL || d_acc == NULL || ((uintptr_t) d_in & 3) != 0) {
		return FB_EINVAL;
	}
	if ((b = fcuda__dc_qbits(c->id)) == 0) {
		size_t n4 = 0;
		if (fcuda__dc_aligned16(d_acc) &&
		    ((uintptr_t) d_in & (c->id == FCUDA_DC_NONE ? 15 : 7)) ==
		        0) {
			n4 = n / 4;
		}
		if (n4 > 0) {
			unsigned g = fcuda__dc_grid(n4);
			if (c->id == FCUDA_DC_NONE) {
				k_flt_decode_add_vec<FCUDA_DC_NONE>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_in, n4,
				        d_acc, x->d_flag);
			} else if (c->id == FCUDA_DC_FP16) {
				k_flt_decode_add_vec<FCUDA_DC_FP16>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_in, n4,
				        d_acc, x->d_flag);
			} else {
				k_flt_decode_add_vec<FCUDA_DC_BF16>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_in, n4,
				        d_acc, x->d_flag);
			}
		}
		if (4 * n4 < n) {
			k_flt_decode_add<<<fcuda__dc_grid(n - 4 * n4),
			    FCUDA_DC_THREADS, 0, s>>>(c->id, d_in, n, 4 * n4,
			    d_acc, x->d_flag);
		}
		return fcuda__dc_launched();
	}
	return fcuda__dq_decode_add(x, c, b, d_in, n, d_acc);
}
