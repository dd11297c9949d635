// quant_kern.c — the kernels behind q8, q4, q2, sign, top-k's candidate
// pass and randk's seed hash (struct comp__kern): the portable C ones and
// their AVX-512 (F, BW, VL) twins, side by side.
//
// The AVX-512 kernels are compiled with per-function target attributes, so
// the library still runs on any x86-64 (and builds on other architectures,
// where that table is just absent); comp__kern() (kern.c) picks it at run
// time with __builtin_cpu_supports. Each computes exactly what its portable
// twin here computes: rounding uses the explicit round-to-nearest-even
// conversion, and decoding multiplies then adds in two instructions (no
// FMA), so the floats are the same bits. The AVX-512 kernels hand their
// tails to the portable ones. tests/compression/test_quant_avx512.c
// compares the two.
#include <math.h>
#include <string.h>

#include "comp_impl.h"

// ---- portable kernels -----------------------------------------------------

static uint32_t
absmax_bits_c(const float *x, size_t m)
{
	uint32_t mx = 0;
	for (size_t i = 0; i < m; i++) {
		uint32_t u = comp__f2u(x[i]) & 0x7fffffffu;
		mx         = u > mx ? u : mx;
	}
	return mx;
}

static void
q8_enc_c(const float *x, size_t m, float inv, uint8_t *codes)
{
	for (size_t i = 0; i < m; i++)
		codes[i] = (uint8_t) (int8_t) comp__qround(x[i] * inv, 127.0f);
}

static void
q4_enc_c(const float *x, size_t m, float inv, uint8_t *codes)
{
	size_t i = 0;
	for (; i + 2 <= m; i += 2) {
		unsigned lo = (unsigned) comp__qround(x[i] * inv, 7.0f) & 0xfu;
		unsigned hi = (unsigned) comp__qround(x[i + 1] * inv, 7.0f) &
		    0xfu;
		codes[i / 2] = (uint8_t) (lo | (hi << 4));
	}
	if (i < m)
		codes[i / 2] = (uint8_t) ((unsigned) comp__qround(x[i] * inv,
		                              7.0f) &
		    0xfu);
}

static void
q8_dec_c(const uint8_t *codes, size_t m, float step, float *out, int mode)
{
	// One loop per mode so that each one vectorises on its own.
	if (mode == COMP__SET) {
		for (size_t i = 0; i < m; i++)
			out[i] = (float) (int8_t) codes[i] * step;
	} else if (mode == COMP__ADD) {
		for (size_t i = 0; i < m; i++)
			out[i] = out[i] + (float) (int8_t) codes[i] * step;
	} else {
		for (size_t i = 0; i < m; i++)
			out[i] = out[i] - (float) (int8_t) codes[i] * step;
	}
}

static inline int
nib(unsigned v)
{
	return (int) ((v & 0xfu) ^ 0x8u) - 8;
}

static void
q4_dec_c(const uint8_t *codes, size_t m, float step, float *out, int mode)
{
	for (size_t i = 0; i < m; i++) {
		int q = nib(codes[i / 2] >> ((i & 1) * 4));
		comp__store(out, i, (float) q * step, mode);
	}
}

static int
q8_bad_c(const uint8_t *codes, size_t nbytes)
{
	unsigned bad = 0;
	for (size_t i = 0; i < nbytes; i++)
		bad |= codes[i] == 0x80;
	return (int) bad;
}

// A nibble is 0b1000 when its top bit is set and its three low bits clear.
static inline unsigned
q4_bad_byte(unsigned c)
{
	return c & 0x88u & ~((c << 1) | (c << 2) | (c << 3));
}

static int
q4_bad_c(const uint8_t *codes, size_t nbytes)
{
	unsigned bad = 0;
	for (size_t i = 0; i < nbytes; i++)
		bad |= q4_bad_byte(codes[i]);
	return bad != 0;
}

static void
q2_enc_c(const float *x, size_t m, float inv, uint8_t *codes)
{
	for (size_t i = 0; i < m; i += 4) {
		unsigned byte = 0;
		for (size_t r = 0; r < 4 && i + r < m; r++)
			byte |= ((unsigned) comp__qround(x[i + r] * inv,
			             1.0f) &
			            3u)
			    << (2 * r);
		codes[i / 4] = (uint8_t) byte;
	}
}

static void
q2_dec_c(const uint8_t *codes, size_t m, float step, float *out, int mode)
{
	for (size_t i = 0; i < m; i++) {
		int q = comp__sext(comp__get_code(2, codes, i), 2);
		comp__store(out, i, (float) q * step, mode);
	}
}

static void
sign_enc_c(const float *x, size_t m, uint8_t *codes)
{
	for (size_t i = 0; i < m; i += 8) {
		unsigned byte = 0;
		for (size_t r = 0; r < 8 && i + r < m; r++)
			byte |= (unsigned) (x[i + r] < 0.0f) << r;
		codes[i / 8] = (uint8_t) byte;
	}
}

static void
sign_dec_c(const uint8_t *codes, size_t m, float s, float *out, int mode)
{
	for (size_t i = 0; i < m; i++)
		comp__store(out, i, comp__get_code(1, codes, i) ? -s : s,
		    mode);
}

static double
abs_sum_c(const float *x, size_t m)
{
	double lane[8] = { 0 };
	for (size_t i = 0; i < m; i++)
		lane[i & 7] += fabs((double) x[i]);
	double sum = lane[0];
	for (int r = 1; r < 8; r++)
		sum += lane[r];
	return sum;
}

static size_t
collect_ge_c(const float *x, size_t n, uint32_t t, uint32_t *idx,
    uint32_t *bits, size_t cap, uint32_t *maxbits)
{
	size_t   c  = 0;
	uint32_t mx = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t a = comp__f2u(x[i]) & 0x7fffffffu;
		mx         = a > mx ? a : mx;
		if (a >= t) {
			if (c == cap)
				return cap + 1;
			idx[c]    = (uint32_t) i;
			bits[c++] = a;
		}
	}
	*maxbits = mx;
	return c;
}

static size_t
count_ge_c(const uint32_t *a, size_t m, uint32_t t)
{
	if (t > 0x7fffffffu)
		return 0;
	// signed compares (every pattern < 2^31) and a u32 count (m < 2^32)
	// so that the loop vectorises on plain SSE2
	int32_t  st = (int32_t) t;
	uint32_t c  = 0;
	for (size_t i = 0; i < m; i++)
		c += (int32_t) a[i] >= st;
	return c;
}

static void
seed_sums_c(const float *x, size_t n, uint32_t *s1, uint32_t *s2)
{
	uint32_t a = 0, b = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u = comp__f2u(x[i]);
		a += u;
		b += u ^ (uint32_t) i;
	}
	*s1 = a;
	*s2 = b;
}

const struct comp__kern comp__kern_portable = {
	.name        = "portable",
	.absmax_bits = absmax_bits_c,
	.q8_enc      = q8_enc_c,
	.q4_enc      = q4_enc_c,
	.q8_dec      = q8_dec_c,
	.q4_dec      = q4_dec_c,
	.q8_bad      = q8_bad_c,
	.q4_bad      = q4_bad_c,
	.q2_enc      = q2_enc_c,
	.q2_dec      = q2_dec_c,
	.sign_enc    = sign_enc_c,
	.sign_dec    = sign_dec_c,
	.abs_sum     = abs_sum_c,
	.collect_ge  = collect_ge_c,
	.count_ge    = count_ge_c,
	.seed_sums   = seed_sums_c,
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

AVX512 static uint32_t
absmax_bits_512(const float *x, size_t m)
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	__m512i       mx0 = _mm512_setzero_si512();
	__m512i       mx1 = _mm512_setzero_si512();
	size_t        i   = 0;
	for (; i + 32 <= m; i += 32) {
		__m512i a = _mm512_loadu_si512((const void *) (x + i));
		__m512i b = _mm512_loadu_si512((const void *) (x + i + 16));
		mx0       = _mm512_max_epu32(mx0, _mm512_and_si512(a, abs));
		mx1       = _mm512_max_epu32(mx1, _mm512_and_si512(b, abs));
	}
	for (; i < m; i += 16) {
		__mmask16 k = m - i >= 16 ? (__mmask16) 0xffff
		                          : (__mmask16) ((1u << (m - i)) - 1);
		__m512i   a = _mm512_maskz_loadu_epi32(k, x + i);
		mx0         = _mm512_max_epu32(mx0, _mm512_and_si512(a, abs));
	}
	return _mm512_reduce_max_epu32(_mm512_max_epu32(mx0, mx1));
}

// quant16 returns the 16 codes of x[0..16) as int32 in [-L, L].
AVX512 static inline __m512i
quant16(__m512 x, __m512 inv, __m512 L, __m512 nL)
{
	__m512 t = _mm512_mul_ps(x, inv);
	t        = _mm512_min_ps(t, L);
	t        = _mm512_max_ps(t, nL);
	return _mm512_cvt_roundps_epi32(t,
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

AVX512 static void
q8_enc_512(const float *x, size_t m, float inv, uint8_t *codes)
{
	const __m512 vi = _mm512_set1_ps(inv);
	const __m512 L = _mm512_set1_ps(127.0f), nL = _mm512_set1_ps(-127.0f);
	size_t       i = 0;
	for (; i + 16 <= m; i += 16) {
		__m512i q = quant16(_mm512_loadu_ps(x + i), vi, L, nL);
		_mm_storeu_si128((__m128i *) (codes + i),
		    _mm512_cvtepi32_epi8(q));
	}
	if (i < m) {
		__mmask16 k = (__mmask16) ((1u << (m - i)) - 1);
		__m512i   q = quant16(_mm512_maskz_loadu_ps(k, x + i), vi, L,
		      nL);
		_mm512_mask_cvtepi32_storeu_epi8(codes + i, k, q);
	}
}

// pack4 turns 16 int32 codes into 8 bytes, element 2j in the low nibble of
// byte j and element 2j+1 in its high nibble.
AVX512 static inline __m128i
pack4(__m512i q)
{
	__m512i m = _mm512_and_si512(q,
	    _mm512_set1_epi64(0x0000000f0000000fll));
	m         = _mm512_or_si512(m, _mm512_srli_epi64(m, 28));
	return _mm512_cvtepi64_epi8(m);
}

AVX512 static void
q4_enc_512(const float *x, size_t m, float inv, uint8_t *codes)
{
	const __m512 vi = _mm512_set1_ps(inv);
	const __m512 L = _mm512_set1_ps(7.0f), nL = _mm512_set1_ps(-7.0f);
	size_t       i = 0;
	for (; i + 32 <= m; i += 32) {
		__m128i a = pack4(quant16(_mm512_loadu_ps(x + i), vi, L, nL));
		__m128i b = pack4(
		    quant16(_mm512_loadu_ps(x + i + 16), vi, L, nL));
		_mm_storeu_si128((__m128i *) (codes + i / 2),
		    _mm_unpacklo_epi64(a, b));
	}
	if (i < m) {
		// up to 31 left: at most two masked groups of 16.
		for (; i < m; i += 16) {
			size_t    r = m - i < 16 ? m - i : 16;
			__mmask16 k = (__mmask16) ((1u << r) - 1);
			__m128i   p = pack4(quant16(
			      _mm512_maskz_loadu_ps(k, x + i), vi, L, nL));
			// masked-out lanes quantize 0 -> code 0, so the
			// high nibble of an odd tail byte is 0.
			__mmask16 kb = (__mmask16) ((1u << ((r + 1) / 2)) - 1);
			_mm_mask_storeu_epi8(codes + i / 2, kb, p);
		}
	}
}

// bytes64 narrows q[0..4) (64 int32 codes in [-7, 7], values 16r..16r+15
// in q[r]) to 64 int8 codes in value order. Saturating packs narrow in-lane
// (one uop each, where pack4's cross-lane narrowing costs two per 16
// values); packs_epi16(packs_epi32(a, b), packs_epi32(c, d)) holds in
// dword 4L+P the values 4L..4L+3 of the P-th input, which one dword
// permute puts at 4P+L.
AVX512 static inline __m512i
bytes64(const __m512i q[4])
{
	const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
	    10, 14, 3, 7, 11, 15);
	return _mm512_permutexvar_epi32(tr,
	    _mm512_packs_epi16(_mm512_packs_epi32(q[0], q[1]),
	        _mm512_packs_epi32(q[2], q[3])));
}

// pack4x128 turns the 128 int32 codes of q[0..8) (values 16r..16r+15 in
// q[r]) into q4_enc's 64 bytes.
AVX512 static inline __m512i
pack4x128(const __m512i q[8])
{
	const __m512i lo = _mm512_set1_epi16(0x000f);
	const __m512i hi = _mm512_set1_epi16(0x00f0);
	__m512i       u[2];
	for (int h = 0; h < 2; h++) {
		__m512i b = bytes64(q + 4 * h); // values 64h.. in order
		// word = byte 2j | byte 2j+1 << 8 -> low nibbles side by side
		u[h] = _mm512_or_si512(_mm512_and_si512(b, lo),
		    _mm512_and_si512(_mm512_srli_epi16(b, 4), hi));
	}
	// packus: qword 2L+p = output bytes 8(4p+L)..; back in order.
	return _mm512_permutexvar_epi64(
	    _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7),
	    _mm512_packus_epi16(u[0], u[1]));
}

// pack2x128 is pack4x128 for q2_enc: the 128 codes into 32 bytes, four
// codes a byte.
AVX512 static inline __m256i
pack2x128(const __m512i q[8])
{
	const __m512i m2 = _mm512_set1_epi32(0x03030303);
	__m128i       o[2];
	for (int h = 0; h < 2; h++) {
		__m512i b = _mm512_and_si512(bytes64(q + 4 * h), m2);
		// dword = codes 4j..4j+3 in its bytes -> bits 0-7 of byte 0
		b    = _mm512_or_si512(b, _mm512_srli_epi32(b, 6));
		b    = _mm512_or_si512(b, _mm512_srli_epi32(b, 12));
		o[h] = _mm512_cvtepi32_epi8(b);
	}
	return _mm256_set_m128i(o[1], o[0]);
}

// load128 loads the 128 values of a bucket into v and returns the largest
// bit pattern of their |x| (as absmax_bits does).
AVX512 static inline uint32_t
load128(const float *p, __m512 v[8])
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	__m512i       mx  = _mm512_setzero_si512();
	for (int r = 0; r < 8; r++) {
		v[r] = _mm512_loadu_ps(p + 16 * r);
		mx   = _mm512_max_epu32(mx,
		      _mm512_and_si512(_mm512_castps_si512(v[r]), abs));
	}
	return _mm512_reduce_max_epu32(mx);
}

// q_enc_b128_512 is comp__kern.q4_enc_b128 (b = 4) and q2_enc_b128 (b =
// 2): the eight registers that give a bucket's absmax are quantized
// straight away, one load per value.
AVX512 static inline size_t
q_enc_b128_512(unsigned b, const float *x, size_t nbk, uint8_t *scales,
    uint8_t *codes)
{
	const float  lv = b == 4 ? 7.0f : 1.0f;
	const __m512 L = _mm512_set1_ps(lv), nL = _mm512_set1_ps(-lv);
	for (size_t j = 0; j < nbk; j++) {
		__m512   v[8];
		__m512i  q[8];
		uint32_t bits = load128(x + 128 * j, v);
		if (bits >= COMP__INF_BITS)
			return j;
		float s   = comp__u2f(bits);
		float inv = s > 0.0f ? lv / s : 0.0f;
		if (isinf(inv))
			return j;
		fb_put_f32le(scales + 4 * j, s);
		__m512 vi = _mm512_set1_ps(inv);
		for (int r = 0; r < 8; r++)
			q[r] = quant16(v[r], vi, L, nL);
		if (b == 4)
			_mm512_storeu_si512((void *) (codes + 64 * j),
			    pack4x128(q));
		else
			_mm256_storeu_si256((__m256i *) (codes + 32 * j),
			    pack2x128(q));
	}
	return nbk;
}

AVX512 static size_t
q4_enc_b128_512(const float *x, size_t nbk, uint8_t *scales, uint8_t *codes)
{
	return q_enc_b128_512(4, x, nbk, scales, codes);
}

AVX512 static size_t
q2_enc_b128_512(const float *x, size_t nbk, uint8_t *scales, uint8_t *codes)
{
	return q_enc_b128_512(2, x, nbk, scales, codes);
}

AVX512 static inline __m512
apply(__m512 acc, __m512 v, int mode)
{
	if (mode == COMP__ADD)
		return _mm512_add_ps(acc, v);
	return _mm512_sub_ps(acc, v);
}

AVX512 static void
q8_dec_512(const uint8_t *codes, size_t m, float step, float *out, int mode)
{
	const __m512 vs = _mm512_set1_ps(step);
	size_t       i  = 0;
	if (mode == COMP__SET) {
		for (; i + 16 <= m; i += 16) {
			__m512i q = _mm512_cvtepi8_epi32(
			    _mm_loadu_si128((const __m128i *) (codes + i)));
			_mm512_storeu_ps(out + i,
			    _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs));
		}
	} else {
		for (; i + 32 <= m; i += 32) {
			__m512i q0 = _mm512_cvtepi8_epi32(
			    _mm_loadu_si128((const __m128i *) (codes + i)));
			__m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(
			    (const __m128i *) (codes + i + 16)));
			__m512  v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(q0), vs);
			__m512  v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(q1), vs);
			_mm512_storeu_ps(out + i,
			    apply(_mm512_loadu_ps(out + i), v0, mode));
			_mm512_storeu_ps(out + i + 16,
			    apply(_mm512_loadu_ps(out + i + 16), v1, mode));
		}
	}
	for (; i < m; i += 16) {
		size_t    r = m - i < 16 ? m - i : 16;
		__mmask16 k = (__mmask16) (r == 16 ? 0xffffu : (1u << r) - 1);
		__m512i   q = _mm512_cvtepi8_epi32(
		      _mm_maskz_loadu_epi8(k, codes + i));
		__m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs);
		if (mode != COMP__SET)
			v = apply(_mm512_maskz_loadu_ps(k, out + i), v, mode);
		_mm512_mask_storeu_ps(out + i, k, v);
	}
}

// unpack4 expands 8 bytes (16 nibbles) to 16 sign-extended int32 codes.
AVX512 static inline __m512i
unpack4(__m128i bytes)
{
	__m512i b = _mm512_cvtepu8_epi64(bytes);
	// low dword gets the low nibble in bits 28..31, high dword the high
	// nibble in bits 28..31; an arithmetic shift sign-extends both.
	__m512i v = _mm512_or_si512(_mm512_slli_epi64(b, 28),
	    _mm512_slli_epi64(b, 56));
	return _mm512_srai_epi32(v, 28);
}

AVX512 static void
q4_dec_512(const uint8_t *codes, size_t m, float step, float *out, int mode)
{
	const __m512 vs = _mm512_set1_ps(step);
	size_t       i  = 0;
	for (; i + 16 <= m; i += 16) {
		__m512i q = unpack4(
		    _mm_loadl_epi64((const __m128i *) (codes + i / 2)));
		__m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs);
		if (mode != COMP__SET)
			v = apply(_mm512_loadu_ps(out + i), v, mode);
		_mm512_storeu_ps(out + i, v);
	}
	if (i < m) {
		size_t    r  = m - i;
		__mmask16 k  = (__mmask16) ((1u << r) - 1);
		__mmask16 kb = (__mmask16) ((1u << ((r + 1) / 2)) - 1);
		__m512i   q = unpack4(_mm_maskz_loadu_epi8(kb, codes + i / 2));
		__m512    v = _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs);
		if (mode != COMP__SET)
			v = apply(_mm512_maskz_loadu_ps(k, out + i), v, mode);
		_mm512_mask_storeu_ps(out + i, k, v);
	}
}

AVX512 static int
q8_bad_512(const uint8_t *codes, size_t nbytes)
{
	const __m512i bad = _mm512_set1_epi8((char) 0x80);
	__mmask64     hit = 0;
	size_t        i   = 0;
	for (; i + 64 <= nbytes; i += 64)
		hit |= _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(codes + i),
		    bad);
	if (i < nbytes) {
		__mmask64 k = ((1ull << (nbytes - i)) - 1);
		hit |= _mm512_mask_cmpeq_epi8_mask(k,
		    _mm512_maskz_loadu_epi8(k, codes + i), bad);
	}
	return hit != 0;
}

AVX512 static int
q4_bad_512(const uint8_t *codes, size_t nbytes)
{
	// Per byte: c & 0x88 & ~((c<<1)|(c<<2)|(c<<3)). 16-bit shifts are
	// safe: the bits landing on 3 and 7 of a byte come from the same byte.
	const __m512i m88 = _mm512_set1_epi8((char) 0x88);
	__m512i       acc = _mm512_setzero_si512();
	for (size_t i = 0; i < nbytes; i += 64) {
		__mmask64 k = nbytes - i >= 64 ? ~0ull
		                               : ((1ull << (nbytes - i)) - 1);
		__m512i   c = _mm512_maskz_loadu_epi8(k, codes + i);
		__m512i   s = _mm512_or_si512(_mm512_slli_epi16(c, 1),
		      _mm512_or_si512(_mm512_slli_epi16(c, 2),
		          _mm512_slli_epi16(c, 3)));
		acc         = _mm512_or_si512(acc,
		            _mm512_andnot_si512(s, _mm512_and_si512(c, m88)));
	}
	return _mm512_test_epi64_mask(acc, acc) != 0;
}

// ---- q2 and the scaled sign ------------------------------------------------

AVX512 static void
q2_enc_512(const float *x, size_t m, float inv, uint8_t *codes)
{
	const __m512  vi = _mm512_set1_ps(inv);
	const __m512  L = _mm512_set1_ps(1.0f), nL = _mm512_set1_ps(-1.0f);
	const __m512i sh = _mm512_set_epi32(6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0,
	    6, 4, 2, 0);
	const __m512i three = _mm512_set1_epi32(3);
	// 64 values a step: the codes (q & 3) of four vectors packed to
	// bytes (packus works per 128-bit lane, so lane l's dword v then
	// holds the four codes of output byte 4v + l), each dword's four
	// codes merged into one byte by two multiply-adds, and the 4x4
	// transpose undone by one shuffle.
	const __m512i m14  = _mm512_set1_epi16(0x0401);
	const __m512i m116 = _mm512_set1_epi32(0x00100001);
	const __m128i tr   = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10,
	      14, 3, 7, 11, 15);
	size_t        i    = 0;
	for (; i + 64 <= m; i += 64) {
		__m512i q[4];
		for (int v = 0; v < 4; v++)
			q[v] = _mm512_and_si512(
			    quant16(_mm512_loadu_ps(x + i + 16 * v), vi, L,
			        nL),
			    three);
		__m512i b = _mm512_packus_epi16(
		    _mm512_packus_epi32(q[0], q[1]),
		    _mm512_packus_epi32(q[2], q[3]));
		b = _mm512_madd_epi16(_mm512_maddubs_epi16(b, m14), m116);
		__m128i o = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(b), tr);
		_mm_storeu_si128((__m128i *) (void *) (codes + i / 4), o);
	}
	for (; i + 16 <= m; i += 16) {
		__m512i q = quant16(_mm512_loadu_ps(x + i), vi, L, nL);
		q         = _mm512_sllv_epi32(_mm512_and_si512(q, three), sh);
		// 16 bytes, each a code in place; OR each 4 into one byte
		__m128i b  = _mm512_cvtepi32_epi8(q);
		b          = _mm_or_si128(b, _mm_srli_epi32(b, 8));
		b          = _mm_or_si128(b, _mm_srli_epi32(b, 16));
		uint32_t w = (uint32_t) _mm_cvtsi128_si32(
		    _mm_cvtepi32_epi8(b));
		memcpy(codes + i / 4, &w, 4);
	}
	if (i < m)
		comp__kern_portable.q2_enc(x + i, m - i, inv, codes + i / 4);
}

AVX512 static void
q2_dec_512(const uint8_t *codes, size_t m, float step, float *out, int mode)
{
	const __m512  vs = _mm512_set1_ps(step);
	const __m512i sh = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14,
	    12, 10, 8, 6, 4, 2, 0);
	const __m512i three = _mm512_set1_epi32(3), two = _mm512_set1_epi32(2);
	size_t        i = 0;
	for (; i + 16 <= m; i += 16) {
		uint32_t w;
		memcpy(&w, codes + i / 4, 4);
		__m512i c = _mm512_and_si512(
		    _mm512_srlv_epi32(_mm512_set1_epi32((int) w), sh), three);
		__m512i q = _mm512_sub_epi32(_mm512_xor_si512(c, two), two);
		__m512  v = _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs);
		if (mode != COMP__SET)
			v = apply(_mm512_loadu_ps(out + i), v, mode);
		_mm512_storeu_ps(out + i, v);
	}
	if (i < m)
		comp__kern_portable.q2_dec(codes + i / 4, m - i, step, out + i,
		    mode);
}

AVX512 static void
sign_enc_512(const float *x, size_t m, uint8_t *codes)
{
	const __m512 zero = _mm512_setzero_ps();
	size_t       i    = 0;
	for (; i + 16 <= m; i += 16) {
		__mmask16 neg = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i),
		    zero, _CMP_LT_OQ);
		fb_put_u16le(codes + i / 8, (uint16_t) neg);
	}
	if (i < m)
		comp__kern_portable.sign_enc(x + i, m - i, codes + i / 8);
}

AVX512 static void
sign_dec_512(const uint8_t *codes, size_t m, float s, float *out, int mode)
{
	const __m512 pos = _mm512_set1_ps(s), neg = _mm512_set1_ps(-s);
	size_t       i = 0;
	for (; i + 16 <= m; i += 16) {
		__mmask16 k = (__mmask16) fb_get_u16le(codes + i / 8);
		__m512    v = _mm512_mask_blend_ps(k, pos, neg);
		if (mode != COMP__SET)
			v = apply(_mm512_loadu_ps(out + i), v, mode);
		_mm512_storeu_ps(out + i, v);
	}
	if (i < m)
		comp__kern_portable.sign_dec(codes + i / 8, m - i, s, out + i,
		    mode);
}

// abs_sum_512 keeps the portable lane order: lane r of the accumulator
// adds x[i] for i % 8 == r, in order (the tail's missing lanes add 0).
AVX512 static double
abs_sum_512(const float *x, size_t m)
{
	__m512d acc = _mm512_setzero_pd();
	size_t  i   = 0;
	for (; i + 8 <= m; i += 8)
		acc = _mm512_add_pd(acc,
		    _mm512_abs_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i))));
	if (i < m) {
		__mmask8 k = (__mmask8) ((1u << (m - i)) - 1);
		acc        = _mm512_mask_add_pd(acc, k, acc,
		           _mm512_abs_pd(
		               _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, x + i))));
	}
	double lane[8];
	_mm512_storeu_pd(lane, acc);
	double sum = lane[0];
	for (int r = 1; r < 8; r++)
		sum += lane[r];
	return sum;
}

// collect_ge_512 compares 64 bit patterns a step into one 64-bit mask and
// extracts its set bits in scalar code, writing index and pattern of each
// (the top-k candidate pass), tracking the max. Compress instructions,
// stored or in registers, measured 3-4x slower here (AMD Zen 4), and a
// branch per vector is a coin flip at the 1-3% densities top-k asks for.
AVX512 static size_t
collect_ge_512(const float *x, size_t n, uint32_t t, uint32_t *idx,
    uint32_t *bits, size_t cap, uint32_t *maxbits)
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	const __m512i vt  = _mm512_set1_epi32((int) t);
	__m512i       mx  = _mm512_setzero_si512();
	size_t        c = 0, i = 0;
	for (; i + 64 <= n; i += 64) {
		__m512i a[4];
		for (int v = 0; v < 4; v++)
			a[v] = _mm512_and_si512(
			    _mm512_loadu_si512(
			        (const void *) (x + i + 16 * v)),
			    abs);
		mx         = _mm512_max_epu32(mx,
		            _mm512_max_epu32(_mm512_max_epu32(a[0], a[1]),
		                _mm512_max_epu32(a[2], a[3])));
		uint64_t m = 0;
		for (int v = 0; v < 4; v++)
			m |= (uint64_t) _mm512_cmpge_epu32_mask(a[v], vt)
			    << (16 * v);
		if (c + (size_t) __builtin_popcountll(m) > cap)
			return cap + 1;
		while (m != 0) {
			unsigned b = (unsigned) __builtin_ctzll(m);
			m &= m - 1;
			idx[c]    = (uint32_t) (i + b);
			bits[c++] = comp__f2u(x[i + b]) & 0x7fffffffu;
		}
	}
	uint32_t tail = 0;
	if (i < n) {
		size_t r = comp__kern_portable.collect_ge(x + i, n - i, t,
		    idx + c, bits + c, cap - c, &tail);
		if (r > cap - c)
			return cap + 1;
		for (size_t j = 0; j < r; j++) // rebase the tail's indices
			idx[c + j] += (uint32_t) i;
		c += r;
	}
	uint32_t m = _mm512_reduce_max_epu32(mx);
	*maxbits   = m > tail ? m : tail;
	return c;
}

// count_ge_512 counts 32 patterns a step.
AVX512 static size_t
count_ge_512(const uint32_t *a, size_t m, uint32_t t)
{
	const __m512i vt = _mm512_set1_epi32((int) t);
	size_t        c = 0, i = 0;
	for (; i + 32 <= m; i += 32) {
		__m512i u = _mm512_loadu_si512((const void *) (a + i));
		__m512i v = _mm512_loadu_si512((const void *) (a + i + 16));
		c += (size_t) __builtin_popcount(
		    (unsigned) _mm512_cmpge_epu32_mask(u, vt) |
		    (unsigned) _mm512_cmpge_epu32_mask(v, vt) << 16);
	}
	for (; i < m; i++)
		c += a[i] >= t;
	return c;
}

// hsum_u32_512 adds v's 16 lanes modulo 2^32. Not _mm512_reduce_add_epi32:
// GCC implements it with signed int additions, whose overflow is
// undefined (UBSan reports it), while these sums wrap on purpose.
AVX512 static uint32_t
hsum_u32_512(__m512i v)
{
	uint32_t lane[16], t = 0;
	_mm512_storeu_si512((void *) lane, v);
	for (int k = 0; k < 16; k++) {
		t += lane[k];
	}
	return t;
}

// seed_sums_512: the two wrap-around sums in 16 lanes, then added.
AVX512 static void
seed_sums_512(const float *x, size_t n, uint32_t *s1, uint32_t *s2)
{
	const __m512i sixteen = _mm512_set1_epi32(16);
	__m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5,
	    4, 3, 2, 1, 0);
	__m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
	__m512i b0 = _mm512_setzero_si512(), b1 = _mm512_setzero_si512();
	size_t  i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512i u = _mm512_loadu_si512((const void *) (x + i));
		__m512i v = _mm512_loadu_si512((const void *) (x + i + 16));
		__m512i j = _mm512_add_epi32(iota, sixteen);
		a0        = _mm512_add_epi32(a0, u);
		a1        = _mm512_add_epi32(a1, v);
		b0        = _mm512_add_epi32(b0, _mm512_xor_si512(u, iota));
		b1        = _mm512_add_epi32(b1, _mm512_xor_si512(v, j));
		iota      = _mm512_add_epi32(j, sixteen);
	}
	uint32_t ta = 0, tb = 0;
	for (; i < n; i++) {
		uint32_t u = comp__f2u(x[i]);
		ta += u;
		tb += u ^ (uint32_t) i;
	}
	*s1 = hsum_u32_512(_mm512_add_epi32(a0, a1)) + ta;
	*s2 = hsum_u32_512(_mm512_add_epi32(b0, b1)) + tb;
}

static const struct comp__kern kern_avx512 = {
	.name        = "avx512",
	.absmax_bits = absmax_bits_512,
	.q8_enc      = q8_enc_512,
	.q4_enc      = q4_enc_512,
	.q8_dec      = q8_dec_512,
	.q4_dec      = q4_dec_512,
	.q8_bad      = q8_bad_512,
	.q4_bad      = q4_bad_512,
	.q2_enc      = q2_enc_512,
	.q2_dec      = q2_dec_512,
	.sign_enc    = sign_enc_512,
	.sign_dec    = sign_dec_512,
	.abs_sum     = abs_sum_512,
	.collect_ge  = collect_ge_512,
	.count_ge    = count_ge_512,
	.seed_sums   = seed_sums_512,
	.q4_enc_b128 = q4_enc_b128_512,
	.q2_enc_b128 = q2_enc_b128_512,
};

const struct comp__kern *
comp__kern_avx512(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl"))
		return &kern_avx512;
	return NULL;
}

#else

const struct comp__kern *
comp__kern_avx512(void)
{
	return NULL;
}

#endif
