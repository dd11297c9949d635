// float16_f16c.c — fp16 encode and decode with the x86 F16C conversions
// (vcvtps2ph, vcvtph2ps), eight values an instruction.
//
// Compiled with per-function target attributes and picked at run time
// (comp__f16_kern, behind comp_simd_set), as the AVX-512 quantizer kernels
// are. The bytes and floats equal float16.c's portable conversions: the
// encoder rounds with an explicit round-to-nearest-even immediate (not
// MXCSR), which gives the same overflow to Inf at 65520, the same
// subnormals and the same quiet NaN (sign, 0x7c00, 0x200 and the top
// mantissa bits) as comp__f32_to_f16. The decoder is exact for every
// finite half; the hardware would quiet a signalling NaN where the portable
// decoder keeps its bits, so any group of eight holding an Inf or NaN half
// is decoded by the portable code. tests/compression/test_float16.c
// compares the two over every half and many floats.
#include "comp_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
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
		__m128i special = _mm_cmpeq_epi16(_mm_and_si128(h, expm), expm);
		if (_mm_movemask_epi8(special) != 0) {
			// Inf or NaN in this group: the portable bits
			comp__f16_portable.dec(in + 2 * i, 8, out + i,
			    mode);
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

static const struct comp__f16 f16_f16c = {
	.enc = f16_enc_f16c,
	.dec = f16_dec_f16c,
};

const struct comp__f16 *
comp__f16_f16c(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2"))
		return &f16_f16c;
	return NULL;
}

#else

const struct comp__f16 *
comp__f16_f16c(void)
{
	return NULL;
}

#endif
