// codec_cuda_q.cu — the bucketed quantizers q8, q4 and q2 as CUDA kernels,
// and their launches for codec_cuda.cu's entry points (codec_cuda.h says
// what they do, codec_cuda_impl.h how the two files meet).
//
// DESIGN
// Byte identity with the CPU encoder rests on doing the same IEEE fp32
// operations: the per-bucket scale is the largest |x| taken on bit
// patterns (as comp's absmax_bits), inv = L / s is one correctly rounded
// fp32 division (nvcc's default -prec-div=true), t = x * inv one fp32
// multiply, clamped to [-L, L] and rounded to nearest even
// (__float2int_rn, which is what comp's rne() trick computes for |t| <
// 2^22). When L / s overflows the CPU falls back to double, and so do we.
// Dequantizing is (float) q * (s / L), added or subtracted with separate
// operations: the file is compiled with -fmad=false so nvcc cannot fuse
// them into an FMA, which would round once instead of twice.
//
// Work split. A bucketed encode is two kernels: (1) per-bucket absmax,
// written straight into the output's scale words (one block per bucket for
// buckets of 64 and more, one thread per bucket below), which also raises
// the error flag on a non-finite value; (2) one thread per 32-bit word of
// packed codes (4, 8 or 16 values), which re-reads its values (from L2,
// usually), quantizes them and stores the word with one aligned store.
// Codes are packed by global index, so a word may span two buckets: each
// value looks up its own bucket's scale. The same word-per-thread shape
// serves error feedback (e = p - deq(q), written in the same pass) and
// decode-add (validated first by a kernel that only raises the flag).
// Every kernel that writes reads the context's flag first (codec_cuda.cu).
#include <math.h>
#include <stdint.h>

#include "codec_cuda_impl.h"

// ---- bucketed quantizer ----------------------------------------------------

__device__ static inline float
pval(const float *x, const float *e, size_t i)
{
	return e != NULL ? x[i] + e[i] : x[i];
}

// abs_bits is |v|'s bit pattern: ordered as the magnitudes (NaN above Inf).
__device__ static inline uint32_t
abs_bits(float v)
{
	return __float_as_uint(v) & 0x7fffffffu;
}

// warp_max returns the largest mx of the warp's lanes in lane 0.
__device__ static inline uint32_t
warp_max(uint32_t mx)
{
	for (int o = 16; o > 0; o >>= 1) {
		uint32_t v = __shfl_down_sync(0xffffffffu, mx, o);
		mx         = v > mx ? v : mx;
	}
	return mx;
}

// k_absmax_block: one block per bucket (grid-stride over buckets). Writes
// the bit pattern of max |p| into scales[j].
__global__ static void
k_absmax_block(const float *x, const float *e, size_t n, uint32_t bucket,
    size_t nb, uint32_t *scales, int *flag)
{
	__shared__ uint32_t red[FCUDA_DC_THREADS / 32];
	for (size_t j = blockIdx.x; j < nb; j += gridDim.x) {
		size_t   i0 = j * bucket;
		size_t   m  = n - i0 < bucket ? n - i0 : bucket;
		uint32_t mx = 0;
		for (size_t i = threadIdx.x; i < m; i += blockDim.x) {
			uint32_t u = abs_bits(pval(x, e, i0 + i));
			mx         = u > mx ? u : mx;
		}
		mx = warp_max(mx);
		if ((threadIdx.x & 31) == 0) {
			red[threadIdx.x >> 5] = mx;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			for (int w = 1; w < FCUDA_DC_THREADS / 32; w++) {
				mx = red[w] > mx ? red[w] : mx;
			}
			scales[j] = mx;
			if (mx >= FCUDA_DC_INF_BITS) {
				atomicOr(flag, FCUDA_DC_FLAG_EINVAL);
			}
		}
		__syncthreads();
	}
}

// k_absmax_thread: one thread per (small) bucket.
__global__ static void
k_absmax_thread(const float *x, const float *e, size_t n, uint32_t bucket,
    size_t nb, uint32_t *scales, int *flag)
{
	size_t stride = (size_t) gridDim.x * blockDim.x;
	for (size_t j = (size_t) blockIdx.x * blockDim.x + threadIdx.x; j < nb;
	     j += stride) {
		size_t   i0 = j * bucket;
		size_t   m  = n - i0 < bucket ? n - i0 : bucket;
		uint32_t mx = 0;
		for (size_t i = 0; i < m; i++) {
			uint32_t u = abs_bits(pval(x, e, i0 + i));
			mx         = u > mx ? u : mx;
		}
		scales[j] = mx;
		if (mx >= FCUDA_DC_INF_BITS) {
			atomicOr(flag, FCUDA_DC_FLAG_EINVAL);
		}
	}
}

// Per-bucket constants, recomputed only when a word crosses a bucket.
struct bk {
	size_t j;    // bucket
	float  s;    // scale
	float  inv;  // L / s (0 when s == 0)
	float  step; // s / L
	int    slow; // inv overflowed: quantize in double
};

__device__ static inline void
bk_load(struct bk *k, const uint32_t *scales, size_t j, float L)
{
	k->j    = j;
	k->s    = __uint_as_float(scales[j]);
	k->inv  = k->s > 0.0f ? L / k->s : 0.0f;
	k->slow = isinf(k->inv);
	k->step = k->s / L;
}

__device__ static inline int
qround(float t, float L)
{
	t = t > L ? L : t;
	t = t < -L ? -L : t;
	return __float2int_rn(t);
}

// q_code quantizes p (b-bit codes, L = 2^(b-1) - 1) with bucket
// constants k: the code's low bits, and p minus what it decodes to in
// *resid. The one place the encoders (general and float4) round.
__device__ static inline uint32_t
q_code(const struct bk *k, float p, float L, uint32_t mask, float *resid)
{
	int q;
	if (k->slow) {
		double tt = (double) p * (double) L / (double) k->s;
		q         = qround((float) tt, L);
	} else {
		q = qround(p * k->inv, L);
	}
	*resid = p - (float) q * k->step;
	return (uint32_t) q & mask;
}

// q_add returns a + (float) q * step for the b-bit code t of word: the one
// place the decoders (general and float4) dequantize; b is a constant
// where the caller's is.
__device__ static inline float
q_add(unsigned b, float a, uint32_t word, unsigned t, float step)
{
	const uint32_t mask = (1u << b) - 1, sign = 1u << (b - 1);
	uint32_t       c = (word >> (t * b)) & mask;
	int            q = (int) (c ^ sign) - (int) sign;
	float          v = (float) q * step;
	return a + v;
}

// k_q_encode: one thread per 32-bit word of codes, from word w0 on; e !=
// NULL is error feedback (p = x + e, then e = p - deq). The general case:
// any bucket, any alignment (k_q_encode_vec is the fast one).
__global__ static void
k_q_encode(unsigned b, const float *x, float *e, size_t n, uint32_t bucket,
    const uint32_t *scales, uint8_t *codes, size_t nbytes, size_t w0,
    const int *flag)
{
	if (*flag != 0) {
		return;
	}
	const unsigned per    = 32 / b;
	const float    L      = (float) ((1u << (b - 1)) - 1);
	const uint32_t mask   = (1u << b) - 1;
	size_t         nwords = (nbytes + 3) / 4;
	size_t         stride = (size_t) gridDim.x * blockDim.x;
	for (size_t w = w0 + (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	     w < nwords; w += stride) {
		size_t    i0   = w * per;
		uint32_t  word = 0;
		struct bk k;
		bk_load(&k, scales, i0 / bucket, L);
		size_t next = (k.j + 1) * (size_t) bucket;
		for (unsigned t = 0; t < per; t++) {
			size_t i = i0 + t;
			if (i >= n) {
				break;
			}
			if (i >= next) {
				bk_load(&k, scales, k.j + 1, L);
				next += bucket;
			}
			float p = e != NULL ? x[i] + e[i] : x[i];
			float r;
			word |= q_code(&k, p, L, mask, &r) << (t * b);
			if (e != NULL) {
				e[i] = r;
			}
		}
		if (w * 4 + 4 <= nbytes) {
			((uint32_t *) codes)[w] = word;
		} else {
			for (size_t y = w * 4; y < nbytes; y++) {
				codes[y] = (uint8_t) (word >>
				    (8 * (y - w * 4)));
			}
		}
	}
}

// k_q_validate raises FCUDA_DC_FLAG_EPROTO for a scale that is not a finite
// number
// >= 0, a forbidden code (-2^(b-1)) or non-zero padding bits. The codes
// are read a 32-bit word a thread (the checks below hold for every code in
// a word at once: bits shifted across a code's edge land outside the
// mask), then the last 0-3 bytes one at a time.
__global__ static void
k_q_validate(unsigned b, const uint8_t *in, size_t n, size_t nb, int *flag)
{
	const float    *sc     = (const float *) in;
	const uint8_t  *codes  = in + 4 * nb;
	const uint32_t *words  = (const uint32_t *) codes;
	size_t          nbytes = (n * b + 7) / 8, nw = nbytes / 4;
	unsigned        tail   = (unsigned) ((n * b) & 7);
	size_t          stride = (size_t) gridDim.x * blockDim.x;
	int             bad    = 0;
	size_t          tid = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	for (size_t j = tid; j < nb; j += stride) {
		float s = sc[j];
		bad |= !(s >= 0.0f) || isinf(s);
	}
	for (size_t w = tid; w < nw + (nbytes - 4 * nw); w += stride) {
		uint32_t c;
		if (w < nw) {
			c = words[w];
		} else {
			c = codes[4 * nw + (w - nw)];
		}
		if (b == 8) {
			if (w < nw) {
				uint32_t t = c ^
				    0x80808080u; // a 0x80 byte -> 0
				bad |= ((t - 0x01010101u) & ~t &
				           0x80808080u) != 0;
			} else {
				bad |= c == 0x80u;
			}
		} else if (b == 4) {
			bad |= (c & 0x88888888u &
			           ~((c << 1) | (c << 2) | (c << 3))) != 0;
		} else {
			bad |= (c & 0xaaaaaaaau & ~(c << 1)) != 0;
		}
	}
	if (tid == 0 && tail != 0) {
		bad |= (codes[nbytes - 1] >> tail) != 0;
	}
	if (__syncthreads_or(bad) && threadIdx.x == 0) {
		atomicOr(flag, FCUDA_DC_FLAG_EPROTO);
	}
}

// k_q_decode_add: acc[i] = acc[i] + (float) q * (s / L), a word a thread,
// from word w0 on; any bucket, any alignment (k_q_decode_add_vec is the
// fast one).
__global__ static void
k_q_decode_add(unsigned b, const uint8_t *in, size_t n, uint32_t bucket,
    size_t nb, float *acc, size_t w0, const int *flag)
{
	if (*flag != 0) {
		return;
	}
	const uint32_t *scales = (const uint32_t *) in;
	const uint8_t  *codes  = in + 4 * nb;
	const unsigned  per    = 32 / b;
	const float     L      = (float) ((1u << (b - 1)) - 1);
	size_t          nbytes = (n * b + 7) / 8;
	size_t          nwords = (nbytes + 3) / 4;
	size_t          stride = (size_t) gridDim.x * blockDim.x;
	for (size_t w = w0 + (size_t) blockIdx.x * blockDim.x + threadIdx.x;
	     w < nwords; w += stride) {
		uint32_t word = 0;
		if (w * 4 + 4 <= nbytes) {
			word = ((const uint32_t *) codes)[w];
		} else {
			for (size_t y = w * 4; y < nbytes; y++) {
				word |= (uint32_t) codes[y]
				    << (8 * (y - w * 4));
			}
		}
		size_t    i0 = w * per;
		struct bk k;
		bk_load(&k, scales, i0 / bucket, L);
		size_t next = (k.j + 1) * (size_t) bucket;
		for (unsigned t = 0; t < per; t++) {
			size_t i = i0 + t;
			if (i >= n) {
				break;
			}
			if (i >= next) {
				bk_load(&k, scales, k.j + 1, L);
				next += bucket;
			}
			acc[i] = q_add(b, acc[i], word, t, k.step);
		}
	}
}

// ---- the fast cases: 16-byte loads -----------------------------------------
//
// The kernels above read a thread's 32 / b floats one at a time, 32 / b
// floats apart across a warp, and spend most of their time on load
// instructions. When the floats are 16-byte aligned and no 32-bit word of
// codes straddles a bucket (bucket % (32 / b) == 0), a thread reads its
// word's floats as float4s instead; the arithmetic is the general
// kernels', operation for operation, so the bytes are the same.
// k_absmax_warp: one warp per bucket, float4 loads (x and e 16-byte
// aligned, bucket % 4 == 0); the last bucket's tail is read a float at a
// time.
__global__ static void
k_absmax_warp(const float *x, const float *e, size_t n, uint32_t bucket,
    size_t nb, uint32_t *scales, int *flag)
{
	const unsigned lane = threadIdx.x & 31;
	size_t warp   = ((size_t) blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	size_t stride = ((size_t) gridDim.x * blockDim.x) >> 5;
	for (size_t j = warp; j < nb; j += stride) {
		size_t   i0 = j * bucket;
		size_t   m  = n - i0 < bucket ? n - i0 : bucket;
		size_t   m4 = m & ~(size_t) 3;
		uint32_t mx = 0;
		for (size_t i = 4 * (size_t) lane; i < m4; i += 128) {
			float4 v = *(const float4 *) (x + i0 + i);
			if (e != NULL) {
				float4 r = *(const float4 *) (e + i0 + i);
				v.x      = v.x + r.x;
				v.y      = v.y + r.y;
				v.z      = v.z + r.z;
				v.w      = v.w + r.w;
			}
			uint32_t a = abs_bits(v.x), b = abs_bits(v.y);
			uint32_t c = abs_bits(v.z), d = abs_bits(v.w);
			a  = a > b ? a : b;
			c  = c > d ? c : d;
			a  = a > c ? a : c;
			mx = a > mx ? a : mx;
		}
		for (size_t i = m4 + lane; i < m; i += 32) {
			uint32_t u = abs_bits(pval(x, e, i0 + i));
			mx         = u > mx ? u : mx;
		}
		mx = warp_max(mx);
		if (lane == 0) {
			scales[j] = mx;
			if (mx >= FCUDA_DC_INF_BITS) {
				atomicOr(flag, FCUDA_DC_FLAG_EINVAL);
			}
		}
	}
}

// k_q_encode_vec: words [0, nw) of B-bit codes, each from 32 / B floats
// read as float4s; bucket % (32 / B) == 0, x and e 16-byte aligned.
template <unsigned B>
__global__ static void
k_q_encode_vec(const float *x, float *e, size_t nw, uint32_t bucket,
    const uint32_t *scales, uint32_t *codes, const int *flag)
{
	if (*flag != 0) {
		return;
	}
	constexpr unsigned PER    = 32 / B;
	const float        L      = (float) ((1u << (B - 1)) - 1);
	const uint32_t     mask   = (1u << B) - 1;
	size_t             stride = (size_t) gridDim.x * blockDim.x;
	for (size_t w = (size_t) blockIdx.x * blockDim.x + threadIdx.x; w < nw;
	     w += stride) {
		size_t    i0   = w * PER;
		uint32_t  word = 0;
		struct bk k;
		bk_load(&k, scales, i0 / bucket, L);
#pragma unroll
		for (unsigned v = 0; v < PER / 4; v++) {
			float4 p = *(const float4 *) (x + i0 + 4 * v);
			float4 r;
			if (e != NULL) {
				r   = *(const float4 *) (e + i0 + 4 * v);
				p.x = p.x + r.x;
				p.y = p.y + r.y;
				p.z = p.z + r.z;
				p.w = p.w + r.w;
			}
			word |= q_code(&k, p.x, L, mask, &r.x) << (4 * v * B);
			word |= q_code(&k, p.y, L, mask, &r.y)
			    << ((4 * v + 1) * B);
			word |= q_code(&k, p.z, L, mask, &r.z)
			    << ((4 * v + 2) * B);
			word |= q_code(&k, p.w, L, mask, &r.w)
			    << ((4 * v + 3) * B);
			if (e != NULL) {
				*(float4 *) (e + i0 + 4 * v) = r;
			}
		}
		codes[w] = word;
	}
}

// k_q_decode_add_vec: elements [0, G * ng) in groups of G, a group a
// thread: its G codes are one 32-bit word (q8: G = 4, q4: G = 8) or one
// byte (q2: G = 4; measured faster than a word of 16 codes), its
// accumulator G / 4 float4s. bucket % G == 0 (a group never straddles a
// bucket), acc 16-byte aligned.
template <unsigned B, unsigned G>
__global__ static void
k_q_decode_add_vec(const uint8_t *in, size_t ng, uint32_t bucket, size_t nb,
    float *acc, const int *flag)
{
	if (*flag != 0) {
		return;
	}
	const float     L      = (float) ((1u << (B - 1)) - 1);
	const uint32_t *scales = (const uint32_t *) in;
	const uint8_t  *codes  = in + 4 * nb;
	size_t          stride = (size_t) gridDim.x * blockDim.x;
	for (size_t g = (size_t) blockIdx.x * blockDim.x + threadIdx.x; g < ng;
	     g += stride) {
		uint32_t  word = G * B == 32 ? ((const uint32_t *) codes)[g]
		                             : codes[g];
		struct bk k;
		bk_load(&k, scales, G * g / bucket, L);
#pragma unroll
		for (unsigned v = 0; v < G / 4; v++) {
			float4 *p = (float4 *) (acc + G * g) + v;
			float4  a = *p;
			a.x       = q_add(B, a.x, word, 4 * v, k.step);
			a.y       = q_add(B, a.y, word, 4 * v + 1, k.step);
			a.z       = q_add(B, a.z, word, 4 * v + 2, k.step);
			a.w       = q_add(B, a.w, word, 4 * v + 3, k.step);
			*p        = a;
		}
	}
}

// ---- launches --------------------------------------------------------------

int
fcuda__dq_encode(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    unsigned b, const float *d_x, float *d_e, size_t n, uint8_t *d_out)
{
	cudaStream_t s      = (cudaStream_t) x->stream;
	size_t       nb     = n / c->bucket + (n % c->bucket != 0);
	size_t       nbytes = (n * b + 7) / 8;
	size_t       nwords = (nbytes + 3) / 4, nvec = 0;
	int          al = fcuda__dc_aligned16(d_x) &&
	    (d_e == NULL || fcuda__dc_aligned16(d_e));
	if (al && c->bucket >= 32 && c->bucket % 4 == 0) {
		k_absmax_warp<<<fcuda__dc_grid(32 * nb), FCUDA_DC_THREADS, 0,
		    s>>>(d_x, d_e, n, c->bucket, nb, (uint32_t *) d_out,
		    x->d_flag);
	} else if (c->bucket >= 64) {
		unsigned g = nb > 65535u * 8u ? 65535u * 8u : (unsigned) nb;
		k_absmax_block<<<g, FCUDA_DC_THREADS, 0, s>>>(d_x, d_e, n,
		    c->bucket, nb, (uint32_t *) d_out, x->d_flag);
	} else {
		k_absmax_thread<<<fcuda__dc_grid(nb), FCUDA_DC_THREADS, 0,
		    s>>>(d_x, d_e, n, c->bucket, nb, (uint32_t *) d_out,
		    x->d_flag);
	}
	if (al && c->bucket % (32 / b) == 0) {
		uint32_t *codes = (uint32_t *) (d_out + 4 * nb);
		nvec            = n / (32 / b); // words with all their floats
		if (nvec > 0) {
			unsigned g = fcuda__dc_grid(nvec);
			if (b == 8) {
				k_q_encode_vec<8>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_x, d_e,
				        nvec, c->bucket,
				        (const uint32_t *) d_out, codes,
				        x->d_flag);
			} else if (b == 4) {
				k_q_encode_vec<4>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_x, d_e,
				        nvec, c->bucket,
				        (const uint32_t *) d_out, codes,
				        x->d_flag);
			} else {
				k_q_encode_vec<2>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_x, d_e,
				        nvec, c->bucket,
				        (const uint32_t *) d_out, codes,
				        x->d_flag);
			}
		}
	}
	if (nvec < nwords) {
		k_q_encode<<<fcuda__dc_grid(nwords - nvec), FCUDA_DC_THREADS,
		    0, s>>>(b, d_x, d_e, n, c->bucket,
		    (const uint32_t *) d_out, d_out + 4 * nb, nbytes, nvec,
		    x->d_flag);
	}
	return fcuda__dc_launched();
}

int
fcuda__dq_decode_add(struct fcuda__dctx *x, const struct fcuda__dcodec *c,
    unsigned b, const uint8_t *d_in, size_t n, float *d_acc)
{
	cudaStream_t s      = (cudaStream_t) x->stream;
	size_t       nb     = n / c->bucket + (n % c->bucket != 0);
	size_t       nbytes = (n * b + 7) / 8;
	k_q_validate<<<fcuda__dc_grid(nb > nbytes / 4 ? nb : nbytes / 4 + 3),
	    FCUDA_DC_THREADS, 0, s>>>(b, d_in, n, nb, x->d_flag);
	size_t   nwords = (nbytes + 3) / 4, nvec = 0;
	unsigned grp = b == 4 ? 8 : 4; // k_q_decode_add_vec's G
	if (fcuda__dc_aligned16(d_acc) && c->bucket % grp == 0) {
		// whole words of codes here, the last partial one below
		nvec      = n / (32 / b);
		size_t ng = nvec * (32 / b) / grp;
		if (ng > 0) {
			unsigned g = fcuda__dc_grid(ng);
			if (b == 8) {
				k_q_decode_add_vec<8, 4>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_in, ng,
				        c->bucket, nb, d_acc, x->d_flag);
			} else if (b == 4) {
				k_q_decode_add_vec<4, 8>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_in, ng,
				        c->bucket, nb, d_acc, x->d_flag);
			} else {
				k_q_decode_add_vec<2, 4>
				    <<<g, FCUDA_DC_THREADS, 0, s>>>(d_in, ng,
				        c->bucket, nb, d_acc, x->d_flag);
			}
		}
	}
	if (nvec < nwords) {
		k_q_decode_add<<<fcuda__dc_grid(nwords - nvec),
		    FCUDA_DC_THREADS, 0, s>>>(b, d_in, n, c->bucket, nb, d_acc,
		    nvec, x->d_flag);
	}
	return fcuda__dc_launched();
}
