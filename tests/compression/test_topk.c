// test_topk.c — top-k selection (topk.c): the k largest magnitudes with
// ties to the lowest index, sorted indices, and corrupt-message rejection.
#include <stdlib.h>
#include <string.h>

#include <comp/comp.h>

#include "compression_tests.h"
#include "pt.h"

static const float *cmp_x;

// Order indices by |x| descending, then index ascending.
static int
cmp_idx(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *) a, j = *(const uint32_t *) b;
	float    xi = fabsf(cmp_x[i]), xj = fabsf(cmp_x[j]);
	if (xi != xj)
		return xi > xj ? -1 : 1;
	return i < j ? -1 : (i > j);
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *) a, j = *(const uint32_t *) b;
	return i < j ? -1 : (i > j);
}

// The kept set equals a sort-based reference, with many ties (values drawn
// from a few levels) and with mostly zeros, at sizes below and above the
// sampled fast path, on the SIMD and the portable kernels; topk:R+q8 keeps
// a subset of the same set. A failure means topk keeps the wrong values.
START_TEST(test_topk_select)
{
	size_t       nmax = 100003;
	float       *x = malloc(nmax * 4), *y = malloc(nmax * 4);
	uint32_t    *ref  = malloc(nmax * 4);
	uint8_t     *buf  = malloc(8 * nmax + 4);
	uint64_t     seed = 5;
	const size_t ns[] = { 1, 2, 10, 999, 3001, 40000, 100003 };
	const float  rs[] = { 0.001f, 0.01f, 0.3f, 1.0f };
	float       *y2   = malloc(nmax * 4);
	for (int ni = 0; ni < 7; ni++)
		for (int ri = 0; ri < 4; ri++)
			for (int ties = 0; ties < 3; ties++) {
				size_t n = ns[ni];
				comp_simd_set(ties != 1 || ri != 1);
				for (size_t i = 0; i < n; i++)
					x[i] = ties == 1
					    ? (float) ((int) (tr_next(&seed) %
					                   7) -
					          3)
					    : (float) tr_gauss(&seed);
				if (ties ==
				    2) // 99.5% zeros: T = 0, ties galore
					for (size_t i = 0; i < n; i++)
						if (tr_next(&seed) % 200 != 0)
							x[i] = 0.0f;
				struct comp_codec c = COMP_CODEC_INIT;
				c.id                = COMP_TOPK;
				c.topk_ratio        = rs[ri];
				size_t k = comp_topk_k(rs[ri], n), len;
				PT_OK(comp_encode(&c, x, n, NULL, buf,
				    comp_bound(&c, n), &len));
				ck_assert_uint_eq(fb_get_u32le(buf), k);
				for (size_t i = 0; i < n; i++)
					ref[i] = (uint32_t) i;
				cmp_x = x;
				qsort(ref, n, 4, cmp_idx);
				qsort(ref, k, 4, cmp_u32);
				for (size_t j = 0; j < k; j++) {
					ck_assert_uint_eq(
					    fb_get_u32le(buf + 4 + 4 * j),
					    ref[j]);
					TR_ASSERT(
					    fb_get_f32le(buf + 4 + 4 * k +
					        4 * j) == x[ref[j]]);
				}
				PT_OK(comp_decode(&c, buf, len, n, y));
				size_t nz = 0;
				for (size_t i = 0; i < n; i++)
					nz += y[i] != 0.0f;
				ck_assert_uint_le(nz, k);
				// the composite keeps indices of the same set
				struct comp_codec q = c;
				q.id                = COMP_TOPK_Q8;
				q.bucket            = 64;
				PT_OK(comp_encode(&q, x, n, NULL, buf,
				    comp_bound(&q, n), &len));
				PT_OK(comp_decode(&q, buf, len, n, y2));
				for (size_t i = 0; i < n; i++)
					TR_ASSERT_MSG(y2[i] == 0.0f ||
					        bsearch(&(uint32_t) { (
					                    uint32_t) i },
					            ref, k, 4,
					            cmp_u32) != NULL,
					    "topk+q8 kept %zu (n %zu)", i, n);
			}
	comp_simd_set(1);
	free(y2);
	free(x);
	free(y);
	free(ref);
	free(buf);
}
END_TEST

// Hand-made corrupt messages: k > n, length not 4 + 8k, an index out of
// range, repeated or decreasing, a NaN or Inf value. A failure means a
// malicious push could write outside the accumulator.
START_TEST(test_topk_corrupt)
{
	struct comp_codec c = COMP_CODEC_INIT;
	c.id                = COMP_TOPK;
	c.topk_ratio        = 0.5f;
	float   acc[4] = { 1, 2, 3, 4 }, keep[4] = { 1, 2, 3, 4 };
	uint8_t m[4 + 16];
	// valid: k = 2, indices 1, 3, values 0.5, -0.5
	fb_put_u32le(m, 2);
	fb_put_u32le(m + 4, 1);
	fb_put_u32le(m + 8, 3);
	fb_put_f32le(m + 12, 0.5f);
	fb_put_f32le(m + 16, -0.5f);
	PT_OK(comp_decode(&c, m, sizeof m, 4, acc));
	TR_ASSERT(acc[0] == 0 && acc[1] == 0.5f && acc[3] == -0.5f);
	memcpy(acc, keep, sizeof acc);
	uint8_t b[sizeof m];
#define CORRUPT(stmt)                                                         \
	do {                                                                  \
		memcpy(b, m, sizeof m);                                       \
		stmt;                                                         \
		PT_FAIL(comp_decode_add(&c, b, sizeof b, 4, acc), FB_EPROTO); \
		ck_assert_mem_eq(acc, keep, sizeof acc);                      \
	} while (0)
	CORRUPT(fb_put_u32le(b, 3));           // k disagrees with length
	CORRUPT(fb_put_u32le(b, 0xffffffffu)); // huge k
	CORRUPT(fb_put_u32le(b + 8, 4));       // index == n
	CORRUPT(fb_put_u32le(b + 8, 0xffffffffu));
	CORRUPT(fb_put_u32le(b + 8, 1)); // repeated
	CORRUPT(fb_put_u32le(b + 4, 3)); // decreasing
	CORRUPT(fb_put_f32le(b + 16, NAN));
	CORRUPT(fb_put_f32le(b + 12, -INFINITY));
#undef CORRUPT
	PT_FAIL(comp_decode_add(&c, m, sizeof m, 3, acc), FB_EPROTO); // 3 >= n
	PT_FAIL(comp_decode_add(&c, m, 3, 4, acc), FB_EPROTO);
	// k = 3 > n = 2 with a consistent length
	uint8_t big[4 + 24] = { 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0,
		0 };
	PT_FAIL(comp_decode_add(&c, big, sizeof big, 2, acc), FB_EPROTO);
	ck_assert_mem_eq(acc, keep, sizeof acc);
}
END_TEST

Suite *
suite_topk(void)
{
	Suite *s  = suite_create("topk");
	TCase *tc = tcase_create("topk");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_topk_select);
	tcase_add_test(tc, test_topk_corrupt);
	suite_add_tcase(s, tc);
	return s;
}
