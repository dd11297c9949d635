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

Suite *
suite_float16(void)
{
	Suite *s  = suite_create("float16");
	TCase *tc = tcase_create("float16");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_float16_known);
	tcase_add_test(tc, test_float16_exhaustive);
	tcase_add_test(tc, test_float16_codec_bound);
	suite_add_tcase(s, tc);
	return s;
}
