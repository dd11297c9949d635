// float16_kern.c — the fp16 kernels (struct comp__f16): the portable
// bit-pattern conversions (comp__f32_to_f16, comp__f16_to_f32) and the
// portable table, beside their twins with the x86 F16C conversions
// (vcvtps2ph, vcvtph2ps), eight values an instruction, and the bf16
// encoder built for AVX2 (and for AVX-512 where the CPU has it).
//
// The F16C kernels are compiled with per-function target attributes and
// picked at run time (comp__f16, kern.c, behind comp_simd_set), as the
// AVX-512 quantizer kernels are. Their bytes and floats equal the portable
// conversions': the encoder rounds with an explicit round-to-nearest-even
// immediate (not MXCSR), which gives the same overflow to Inf at 65520, the
// same subnormals and the same quiet NaN (sign, 0x7c00, 0x200 and the top
// mantissa bits) as comp__f32_to_f16. The decoder is exact for every
// finite half; the hardware would quiet a signalling NaN where the portable
// decoder keeps its bits, so any group of eight holding an Inf or NaN half
// is decoded by the portable code. tests/compression/test_float16.c
// compares the two over every half and many floats.
//
// Conversions are done on bit patterns, so they give the same bytes on every
// machine regardless of compiler flags.
#include <string.h>

#include "comp_impl.h"

uint16_t
comp__f32_to_f16(float f)
{
	uint32_t u    = comp__f2u(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a    = u & 0x7fffffffu;
	if (a >= 0x7f800000u) // Inf or NaN
		return (uint16_t) (sign | 0x7c00u |
		    (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
	if (a >= 0x477ff000u) // rounds to >= 65520: overflow to Inf
		return (uint16_t) (sign | 0x7c00u);
	if (a < 0x38800000u) {       // below 2^-14: subnormal half (or zero)
		if (a < 0x33000000u) // below 2^-25: rounds to zero
			return (uint16_t) sign;
		uint32_t e     = a >> 23; // 102..112
		uint32_t m     = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e; // 14..24
		uint32_t h     = m >> shift;
		uint32_t rem   = m & ((1u << shift) - 1);
		uint32_t half  = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t) (sign | h);
	}
	// normal: rebias exponent 127 -> 15 and round 13 mantissa bits away
	uint32_t h   = (a - 0x38000000u) >> 13;
	uint32_t rem = a & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; // a carry into the exponent is the right answer
	return (uint16_t) (sign | h);
}

float
comp__f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
	uint32_t e    = (h >> 10) & 0x1fu;
	uint32_t m    = h & 0x3ffu;
	if (e == 0x1f)
		return comp__u2f(sign | 0x7f800000u | (m << 13));
	if (e == 0) {
		// subnormal: m * 2^-24, exact in fp32
		float v = (float) m * 0x1p-24f;
		return sign ? -v : v;
	}
	return comp__u2f(sign | ((e + 112) << 23) | (m << 13));
}

static void
f16_enc_c(const float *x, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++)
		fb_put_u16le(out + 2 * i, comp__f32_to_f16(x[i]));
}

static void
f16_dec_c(const uint8_t *in, size_t n, float *out, int mode)
{
	for (size_t i = 0; i < n; i++)
		comp__store(out, i, comp__f16_to_f32(fb_get_u16le(in + 2 * i)),
		    mode);
}

static void
bf16_enc_c(const float *x, size_t n, uint8_t *out)
{
	comp__bf16_enc_loop(x, n, out);
}

const struct comp__f16 comp__f16_portable = {
	.enc      = f16_enc_c,
	.dec      = f16_dec_c,
	.bf16_enc = bf16_enc_c,
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define F16C __attribute__((target("avx2,f16c")))

F16C static void
f16_enc_f16c(const float *x, size_t n, uint8_t *out)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
		    _MM_FROUND_TO_NEAREST_INT);
		__m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(x + i + 8),
		    _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *) (out + 2 * i), a);
		_mm_storeu_si128((__m128i *) (out + 2 * i + 16), b);
	}
	for (; i < n; i++)
		fb_put_u16le(out + 2 * i, comp__f32_to_f16(x[i]));
}

F16C static void
f16_dec_f16c(const uint8_t *in, size_t n, float *out, int mode)
{
	const __m128i expm = _mm_set1_epi16(0x7c00);
	size_t        i    = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *) (in + 2 * i));
		__m128i special = _mm_cmpeq_epi16(_mm_and_si128(h, expm),
		    expm);
		if (_mm_movemask_epi8(special) != 0) {
			// Inf or NaN in this group: the portable bits
			comp__f16_portable.dec(in + 2 * i, 8, out + i, mode);
			continue;
		}
		__m256 v = _mm256_cvtph_ps(h);
		if (mode == COMP__ADD)
			v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
		else if (mode == COMP__SUB)
			v = _mm256_sub_ps(_mm256_loadu_ps(out + i), v);
		_mm256_storeu_ps(out + i, v);
	}
	if (i < n)
		comp__f16_portable.dec(in + 2 * i, n - i, out + i, mode);
}

// bf16_8 rounds 8 floats to bf16 (in the low 16 bits of each lane) as
// comp__f32_to_bf16: u + 0x7fff + lsb, top half; NaN: top half | 0x40.
F16C static inline __m256i
bf16_8(const float *x)
{
	const __m256i one  = _mm256_set1_epi32(1),
	              bias = _mm256_set1_epi32(0x7fff);
	const __m256i abs  = _mm256_set1_epi32(0x7fffffff);
	const __m256i inf  = _mm256_set1_epi32(0x7f800000);
	__m256i       u    = _mm256_loadu_si256((const __m256i *) x);
	__m256i       lsb  = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
	__m256i       r    = _mm256_srli_epi32(
	             _mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
	__m256i q   = _mm256_or_si256(_mm256_srli_epi32(u, 16),
	      _mm256_set1_epi32(0x40));
	__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
	return _mm256_blendv_epi8(r, q, nan);
}

F16C static void
bf16_enc_avx2(const float *x, size_t n, uint8_t *out)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		// packus interleaves 128-bit lanes: 0 2 1 3 puts them back
		__m256i p = _mm256_packus_epi32(bf16_8(x + i),
		    bf16_8(x + i + 8));
		_mm256_storeu_si256((__m256i *) (out + 2 * i),
		    _mm256_permute4x64_epi64(p, 0xd8));
	}
	comp__bf16_enc_loop(x + i, n - i, out + 2 * i);
}

#define BF16_512 __attribute__((target("avx2,f16c,avx512f,avx512bw")))

// bf16_enc_512 is bf16_enc_avx2 sixteen lanes wide: the NaN lanes take
// top half | 0x40 under a mask, and one narrowing move (vpmovdw, exact:
// every lane is below 2^16) replaces the pack and lane permute.
BF16_512 static void
bf16_enc_512(const float *x, size_t n, uint8_t *out)
{
	const __m512i one  = _mm512_set1_epi32(1),
	              bias = _mm512_set1_epi32(0x7fff);
	const __m512i abs  = _mm512_set1_epi32(0x7fffffff);
	const __m512i inf  = _mm512_set1_epi32(0x7f800000);
	const __m512i qb   = _mm512_set1_epi32(0x40);
	size_t        i    = 0;
	for (; i + 16 <= n; i += 16) {
		__m512i u   = _mm512_loadu_si512((const void *) (x + i));
		__m512i top = _mm512_srli_epi32(u, 16);
		__m512i r   = _mm512_srli_epi32(
		      _mm512_add_epi32(_mm512_add_epi32(u, bias),
		          _mm512_and_si512(top, one)),
		      16);
		__mmask16 nan = _mm512_cmpgt_epu32_mask(
		    _mm512_and_si512(u, abs), inf);
		r = _mm512_mask_or_epi32(r, nan, top, qb);
		_mm256_storeu_si256((__m256i *) (void *) (out + 2 * i),
		    _mm512_cvtepi32_epi16(r));
	}
	comp__bf16_enc_loop(x + i, n - i, out + 2 * i);
}

static const struct comp__f16 f16_f16c = {
	.enc      = f16_enc_f16c,
	.dec      = f16_dec_f16c,
	.bf16_enc = bf16_enc_avx2,
};

static const struct comp__f16 f16_f16c_512 = {
	.enc      = f16_enc_f16c,
	.dec      = f16_dec_f16c,
	.bf16_enc = bf16_enc_512,
};

const struct comp__f16 *
comp__f16_f16c(void)
{
	// F16C from CPUID leaf 1 (ECX bit 29): clang's
	// __builtin_cpu_supports has no "f16c"; "avx2" also tells that the OS
	// saves the AVX registers.
	unsigned a = 0, b = 0, c = 0, d = 0;
	__builtin_cpu_init();
	if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0 &&
	    __builtin_cpu_supports("avx2")) {
		if (__builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw"))
			return &f16_f16c_512;
		return &f16_f16c;
	}
	return NULL;
}

#else

const struct comp__f16 *
comp__f16_f16c(void)
{
	return NULL;
}

#endif
