// test_float16.c — fp16 and bf16 conversions (float16.c): exact values,
// ties to even, every half/bfloat pattern round-tripping, and the codec-
// level error bounds.
#include <stdlib.h>

#include <comp/comp.h>

#include "comp_impl.h"
#include "compression_tests.h"
#include "pt.h"

// Known fp16 encodings, including the overflow threshold, subnormals and
// ties. A failure means fp16 bytes differ from IEEE binary16.
START_TEST(test_float16_known)
{
	ck_assert_uint_eq(comp__f32_to_f16(1.0f), 0x3c00);
	ck_assert_uint_eq(comp__f32_to_f16(-2.0f), 0xc000);
	ck_assert_uint_eq(comp__f32_to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(comp__f32_to_f16(65519.99f), 0x7bff);
	ck_assert_uint_eq(comp__f32_to_f16(65520.0f), 0x7c00);
	ck_assert_uint_eq(comp__f32_to_f16(-1e10f), 0xfc00);
	ck_assert_uint_eq(comp__f32_to_f16(0x1p-24f), 0x0001);
	ck_assert_uint_eq(comp__f32_to_f16(0x1p-25f), 0x0000); // tie -> even
	ck_assert_uint_eq(comp__f32_to_f16(0x1.8p-24f), 0x0002);
	ck_assert_uint_eq(comp__f32_to_f16(0x1p-14f), 0x0400); // min normal
	ck_assert_uint_eq(comp__f32_to_f16(-0.0f), 0x8000);
	ck_assert_uint_eq(comp__f32_to_f16(1.0f + 0x1p-11f), 0x3c00); // tie
	ck_assert_uint_eq(comp__f32_to_f16(1.0f + 0x3p-11f), 0x3c02); // tie
	uint16_t h = comp__f32_to_f16(NAN);
	TR_ASSERT((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
	ck_assert_uint_eq(comp__f32_to_f16(INFINITY), 0x7c00);
	ck_assert_uint_eq(comp__f32_to_bf16(1.0f), 0x3f80);
	ck_assert_uint_eq(comp__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80); // tie
	ck_assert_uint_eq(comp__f32_to_bf16(1.0f + 0x3p-8f), 0x3f82); // tie
	ck_assert_uint_eq(comp__f32_to_bf16(-3.0f), 0xc040);
	uint16_t b = comp__f32_to_bf16(NAN);
	TR_ASSERT((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0);
}
END_TEST

// Every non-NaN half (and bfloat) decodes and re-encodes to itself, and the
// midpoint between neighbours rounds to the even one.
START_TEST(test_float16_exhaustive)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = comp__f16_to_f32((uint16_t) h);
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
			TR_ASSERT(isnan(f));
			continue;
		}
		ck_assert_uint_eq(comp__f32_to_f16(f), h);
		if ((h & 0x7fff) < 0x7bff) { // has a finite upper neighbour
			float g   = comp__f16_to_f32((uint16_t) (h + 1));
			float mid = (float) (((double) f + g) / 2);
			ck_assert_uint_eq(comp__f32_to_f16(mid),
			    (h & 1) ? h + 1 : h);
		}
		float bf = comp__bf16_to_f32((uint16_t) h);
		if (!isnan(bf))
			ck_assert_uint_eq(comp__f32_to_bf16(bf), h);
	}
}
END_TEST

// Codec-level relative error: 2^-11 for fp16 (normal range), 2^-8 for bf16.
START_TEST(test_float16_codec_bound)
{
	size_t   n = 1001;
	float   *x = malloc(n * 4), *y = malloc(n * 4);
	uint8_t *buf = malloc(2 * n);
	tr_fill(x, n, 10.0, 8);
	const char *sp[2]  = { "fp16", "bf16" };
	double      rel[2] = { 0x1p-11, 0x1p-8 };
	for (int k = 0; k < 2; k++) {
		struct comp_codec c;
		size_t            len;
		PT_OK(comp_codec_parse(sp[k], 0, &c));
		PT_OK(comp_encode(&c, x, n, NULL, buf, 2 * n, &len));
		ck_assert_uint_eq(len, 2 * n);
		PT_OK(comp_decode(&c, buf, len, n, y));
		for (size_t i = 0; i < n; i++)
			if (fabsf(x[i]) > 1e-4f)
				TR_ASSERT(fabs((double) x[i] - y[i]) <=
				    rel[k] * fabs(x[i]));
	}
	free(x);
	free(y);
	free(buf);
}
END_TEST

// f16c_floats fills x with floats that probe every fp16 path: each
// exponent from subnormal to overflow with random mantissas, the ties and
// both sides of them, the overflow edge, +-0, Inf, quiet and signalling NaN.
static size_t
f16c_floats(float *x, size_t cap, uint64_t seed)
{
	size_t n = 0;
	for (uint32_t e = 90; e < 160 && n + 64 <= cap; e++)
		for (int k = 0; k < 64; k++) {
			uint32_t m = (uint32_t) tr_next(&seed) & 0x7fffffu;
			if (k < 8) // ties: the 13 dropped bits 0x1000 (+-1)
				m = (m & ~0x1fffu) |
				    (0x1000u + (uint32_t) k % 3 - 1);
			x[n++] = comp__u2f(
			    (uint32_t) (k & 1) << 31 | e << 23 | m);
		}
	const uint32_t edge[] = { 0x477fefffu, 0x477ff000u, 0x477ff001u,
		0x7f800000u, 0xff800000u, 0x7fc00001u, 0x7f800001u,
		0xff812345u, 0x00000000u, 0x80000000u, 0x00000001u,
		0x33000000u, 0x33000001u, 0x387fffffu, 0x38800000u };
	for (size_t i = 0; i < sizeof edge / sizeof edge[0] && n < cap; i++)
		x[n++] = comp__u2f(edge[i]);
	return n;
}

// The F16C kernels give the portable bytes for every probed float, and the
// portable floats (in all three decode modes) for every one of the 65536
// halves, NaN bits included, at lengths that leave a scalar tail.
START_TEST(test_float16_f16c_same)
{
	if (comp__f16_f16c() == NULL)
		return; // no F16C here: the portable path is the only one
	enum { CAP = 6000 };
	float *x = malloc(CAP * 4), *a = malloc(0x10000 * 4),
	      *b    = malloc(0x10000 * 4);
	uint8_t *ba = malloc(0x10000 * 2), *bb = malloc(0x10000 * 2);
	size_t   n                   = f16c_floats(x, CAP, 5);
	const struct comp__f16 *fast = comp__f16_f16c();
	for (size_t len = n - 7; len <= n; len++) {
		comp__f16_portable.enc(x, len, ba);
		fast->enc(x, len, bb);
		ck_assert_mem_eq(ba, bb, 2 * len);
	}
	for (uint32_t h = 0; h < 0x10000; h++)
		fb_put_u16le(ba + 2 * h, (uint16_t) h);
	for (int mode = COMP__SET; mode <= COMP__SUB; mode++) {
		for (size_t i = 0; i < 0x10000; i++)
			a[i] = b[i] = (float) (i % 97) * 0.25f;
		comp__f16_portable.dec(ba, 0x10000 - 3, a, mode);
		fast->dec(ba, 0x10000 - 3, b, mode);
		ck_assert_mem_eq(a, b, 0x10000 * 4);
	}
	// and through the public calls with comp_simd_set
	struct comp_codec c;
	size_t            la, lb;
	PT_OK(comp_codec_parse("fp16", 0, &c));
	comp_simd_set(0);
	PT_OK(comp_encode(&c, x, n, NULL, ba, 2 * n, &la));
	comp_simd_set(1);
	PT_OK(comp_encode(&c, x, n, NULL, bb, 2 * n, &lb));
	ck_assert_mem_eq(ba, bb, la);
	free(x);
	free(a);
	free(b);
	free(ba);
	free(bb);
}
END_TEST

// bf16's vector encoders (AVX2 or AVX-512, whichever runs here) equal
// comp__f32_to_bf16 on every probe: as probed, and rotated so that the
// edge floats (Inf, NaN, ties, overflow) sit in the first vector, at every
// length up to 40 (shorter than a vector, and tails) and the full one.
START_TEST(test_float16_bf16_codec_bits)
{
	enum { CAP = 6000 };
	float            *x = malloc(CAP * 4), *y = malloc(CAP * 4);
	uint8_t          *out = malloc(CAP * 2);
	size_t            n   = f16c_floats(x, CAP, 9), len;
	struct comp_codec c;
	PT_OK(comp_codec_parse("bf16", 0, &c));
	for (size_t i = 0; i < n; i++)
		y[i] = x[(n - 15 + i) % n];
	for (int r = 0; r < 2; r++) {
		const float *v = r ? y : x;
		for (size_t m = 1; m <= n; m = m < 40 ? m + 1 : n) {
			PT_OK(comp_encode(&c, v, m, NULL, out, 2 * m, &len));
			for (size_t i = 0; i < m; i++)
				ck_assert_uint_eq(fb_get_u16le(out + 2 * i),
				    comp__f32_to_bf16(v[i]));
			if (m == n)
				break;
		}
	}
	free(x);
	free(y);
	free(out);
}
END_TEST

Suite *
suite_float16(void)
{
	Suite *s  = suite_create("float16");
	TCase *tc = tcase_create("float16");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_float16_known);
	tcase_add_test(tc, test_float16_exhaustive);
	tcase_add_test(tc, test_float16_codec_bound);
	tcase_add_test(tc, test_float16_f16c_same);
	tcase_add_test(tc, test_float16_bf16_codec_bits);
	suite_add_tcase(s, tc);
	return s;
}
