// test_codec.c — the public entry points of codec.c: parsing, naming,
// checking, sizing, argument errors, and corrupt/truncated input for every
// codec.
#include <stdlib.h>
#include <string.h>

#include <comp/comp.h>

#include "compression_tests.h"
#include "pt.h"

static const char *const specs[] = { "none", "fp16", "bf16", "q8", "q4", "q2",
	"sign", "topk:0.1", "q4:sr", "topk:0.1+q8", "topk:0.1+q4", "randk:0.1",
	"randk:0.1+q8", "randk:0.2+q4" };
#define NSPECS (sizeof specs / sizeof specs[0])

// Every codec name parses to its id with the right parameters.
START_TEST(test_codec_parse)
{
	struct comp_codec c;
	PT_OK(comp_codec_parse("q4", 0, &c));
	ck_assert_uint_eq(c.id, COMP_Q4);
	ck_assert_uint_eq(c.bucket, COMP_BUCKET_DEFAULT);
	ck_assert_int_eq(c.stochastic, 0);
	PT_OK(comp_codec_parse("q8:sr", 128, &c));
	ck_assert_uint_eq(c.id, COMP_Q8);
	ck_assert_uint_eq(c.bucket, 128);
	ck_assert_int_eq(c.stochastic, 1);
	PT_OK(comp_codec_parse("topk:0.01", 0, &c));
	ck_assert_uint_eq(c.id, COMP_TOPK);
	ck_assert_float_eq(c.topk_ratio, 0.01f);
	PT_OK(comp_codec_parse("fp32", 0, &c));
	ck_assert_uint_eq(c.id, COMP_NONE);
	PT_OK(comp_codec_parse("topk:1", COMP_BUCKET_MAX, &c));
	for (uint32_t id = 0; id < COMP_TOPK; id++) {
		PT_OK(comp_codec_parse(comp_codec_name(id), 1, &c));
		ck_assert_uint_eq(c.id, id);
		PT_OK(comp_codec_check(&c));
	}
}
END_TEST

// Bad specs are refused with a reason, and *out is left alone.
START_TEST(test_codec_parse_bogus)
{
	const char       *bad[] = { "", "q3", "Q4", "q4:", "q4:rs", "sign:sr",
		      "fp16:sr", "topk", "topk:", "topk:0", "topk:-0.5", "topk:1.5",
		      "topk:abc", "topk:0.1x", "topk:nan", "topk:1e-50", "q44",
		      "none:1" };
	struct comp_codec c     = COMP_CODEC_INIT, keep;
	c.id                    = COMP_Q2;
	keep                    = c;
	char why[128];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why[0] = '\0';
		PT_FAIL(comp_codec_parse_msg(bad[i], 0, &c, why, sizeof why),
		    FB_EINVAL);
		TR_ASSERT_MSG(strlen(why) > 10, "no reason for '%s'", bad[i]);
		ck_assert_mem_eq(&c, &keep, sizeof c);
	}
	PT_FAIL(comp_codec_parse_msg("q4", COMP_BUCKET_MAX + 1, &c, why,
	            sizeof why),
	    FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "bucket"));
	PT_FAIL(comp_codec_parse_msg("topk:2", 0, &c, why, sizeof why),
	    FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "(0, 1]"));
	PT_FAIL(comp_codec_parse(NULL, 0, &c), FB_EINVAL);
	PT_FAIL(comp_codec_parse("q4", 0, NULL), FB_EINVAL);
	PT_FAIL(comp_codec_parse_msg("zz", 0, &c, why, 1), FB_EINVAL);
	ck_assert_str_eq(why, ""); // truncated, still terminated
}
END_TEST

START_TEST(test_codec_name)
{
	ck_assert_str_eq(comp_codec_name(COMP_NONE), "none");
	ck_assert_str_eq(comp_codec_name(COMP_Q4), "q4");
	ck_assert_str_eq(comp_codec_name(COMP_TOPK), "topk");
}
END_TEST

START_TEST(test_codec_name_bogus)
{
	ck_assert_str_eq(comp_codec_name(COMP_CODEC_COUNT), "unknown");
	ck_assert_str_eq(comp_codec_name(UINT32_MAX), "unknown");
}
END_TEST

// format prints what parse reads back.
START_TEST(test_codec_format)
{
	char buf[64];
	for (size_t i = 0; i < NSPECS; i++) {
		struct comp_codec c, d;
		PT_OK(comp_codec_parse(specs[i], 64, &c));
		PT_OK(comp_codec_format(&c, buf, sizeof buf));
		PT_OK(comp_codec_parse(buf, 64, &d));
		ck_assert_mem_eq(&c, &d, sizeof c);
	}
	struct comp_codec c;
	PT_OK(comp_codec_parse("topk:0.01", 0, &c));
	PT_OK(comp_codec_format(&c, buf, sizeof buf));
	ck_assert_str_eq(buf, "topk:0.00999999978");
}
END_TEST

START_TEST(test_codec_format_bogus)
{
	char              buf[4];
	struct comp_codec c = COMP_CODEC_INIT;
	c.id                = 99;
	PT_FAIL(comp_codec_format(&c, buf, sizeof buf), FB_EINVAL);
	PT_FAIL(comp_codec_format(NULL, buf, sizeof buf), FB_EINVAL);
	PT_OK(comp_codec_parse("topk:0.5", 0, &c));
	PT_FAIL(comp_codec_format(&c, buf, sizeof buf), FB_ENOSPC);
	PT_FAIL(comp_codec_format(&c, NULL, 0), FB_EINVAL);
}
END_TEST

START_TEST(test_codec_check)
{
	struct comp_codec c = COMP_CODEC_INIT;
	PT_OK(comp_codec_check(&c));
	c.bucket = 0; // unused by none
	PT_OK(comp_codec_check(&c));
	c.id     = COMP_Q2;
	c.bucket = 1;
	PT_OK(comp_codec_check(&c));
	c.bucket     = COMP_BUCKET_MAX;
	c.stochastic = 1;
	PT_OK(comp_codec_check(&c));
}
END_TEST

// Network-supplied codec parameters out of range are refused.
START_TEST(test_codec_check_bogus)
{
	struct comp_codec c = COMP_CODEC_INIT;
	PT_FAIL(comp_codec_check(NULL), FB_EINVAL);
	c.id = COMP_CODEC_COUNT;
	PT_FAIL(comp_codec_check(&c), FB_EINVAL);
	c.id     = COMP_Q4;
	c.bucket = 0;
	PT_FAIL(comp_codec_check(&c), FB_EINVAL);
	c.bucket = COMP_BUCKET_MAX + 1;
	PT_FAIL(comp_codec_check(&c), FB_EINVAL);
	c.bucket     = 512;
	c.stochastic = 2;
	PT_FAIL(comp_codec_check(&c), FB_EINVAL);
	c.id         = COMP_SIGN;
	c.stochastic = 1;
	PT_FAIL(comp_codec_check(&c), FB_EINVAL);
	c.stochastic      = 0;
	c.id              = COMP_TOPK;
	const float bad[] = { 0.0f, -0.1f, 1.0001f, NAN, INFINITY };
	for (int i = 0; i < 5; i++) {
		c.topk_ratio = bad[i];
		PT_FAIL(comp_codec_check(&c), FB_EINVAL);
	}
}
END_TEST

// The sizes of the sanity table (docs/algorithms.md §4), exactly.
START_TEST(test_codec_bound)
{
	struct comp_codec c;
	// §4 lists fp16 scales (2 bytes); ours are fp32: 2 more per bucket.
	PT_OK(comp_codec_parse("q8", 512, &c));
	ck_assert_uint_eq(comp_bound(&c, 1000000), 1003908 + 2 * 1954);
	PT_OK(comp_codec_parse("q4", 128, &c));
	ck_assert_uint_eq(comp_bound(&c, 1000000), 515626 + 2 * 7813);
	PT_OK(comp_codec_parse("q2", 128, &c));
	ck_assert_uint_eq(comp_bound(&c, 1000000), 265626 + 2 * 7813);
	PT_OK(comp_codec_parse("q4", 512, &c));
	ck_assert_uint_eq(comp_bound(&c, 1000000), 503908 + 2 * 1954);
	PT_OK(comp_codec_parse("sign", 128, &c));
	ck_assert_uint_eq(comp_bound(&c, 1000), 32 + 125);
	PT_OK(comp_codec_parse("fp16", 0, &c));
	ck_assert_uint_eq(comp_bound(&c, 7), 14);
	PT_OK(comp_codec_parse("none", 0, &c));
	ck_assert_uint_eq(comp_bound(&c, 7), 28);
	PT_OK(comp_codec_parse("topk:0.01", 0, &c));
	ck_assert_uint_eq(comp_bound(&c, 1000), 4 + 8 * 10);
	ck_assert_uint_eq(comp_bound(&c, 1), 4 + 8);
	ck_assert_uint_eq(comp_bound(&c, 0), 4);
	ck_assert_uint_eq(comp_topk_k(0.01f, 150), 2);
	ck_assert_uint_eq(comp_topk_k(1.0f, 150), 150);
}
END_TEST

START_TEST(test_codec_bound_bogus)
{
	struct comp_codec c = COMP_CODEC_INIT;
	c.id                = 42;
	ck_assert_uint_eq(comp_bound(&c, 10), 0);
	ck_assert_uint_eq(comp_bound(NULL, 10), 0);
	c.id = COMP_NONE;
	ck_assert_uint_eq(comp_bound(&c, COMP_MAX_N + 1), 0);
	ck_assert_uint_eq(comp_topk_k(0.0f, 10), 0);
	ck_assert_uint_eq(comp_topk_k(NAN, 10), 0);
}
END_TEST

// Every codec round-trips through encode/decode/decode_add at awkward
// lengths, and decode_add equals acc + decode.
START_TEST(test_codec_encode_decode)
{
	size_t   n = 1031;
	float   *x = malloc(n * 4), *y = malloc(n * 4), *acc = malloc(n * 4);
	uint8_t *buf = malloc(8 * n + 8);
	tr_fill(x, n, 1.0, 3);
	for (size_t i = 0; i < NSPECS; i++) {
		struct comp_codec c;
		PT_OK(comp_codec_parse(specs[i], 100, &c));
		uint64_t rng = 1;
		size_t   len = 0;
		PT_OK(
		    comp_encode(&c, x, n, &rng, buf, comp_bound(&c, n), &len));
		ck_assert_uint_eq(len, comp_bound(&c, n));
		PT_OK(comp_decode(&c, buf, len, n, y));
		double e2 = 0, x2 = 0;
		for (size_t k = 0; k < n; k++) {
			e2 += ((double) x[k] - y[k]) * ((double) x[k] - y[k]);
			x2 += (double) x[k] * x[k];
			acc[k] = 0.25f * (float) k;
		}
		TR_ASSERT_MSG(e2 <= x2, "%s does not contract", specs[i]);
		if (c.id == COMP_NONE)
			ck_assert_mem_eq(x, y, n * 4);
		PT_OK(comp_decode_add(&c, buf, len, n, acc));
		for (size_t k = 0; k < n; k++)
			TR_ASSERT(acc[k] == 0.25f * (float) k + y[k]);
	}
	// n == 0 is a valid, empty message
	struct comp_codec c;
	PT_OK(comp_codec_parse("q4", 0, &c));
	size_t len = 99;
	PT_OK(comp_encode(&c, NULL, 0, NULL, NULL, 0, &len));
	ck_assert_uint_eq(len, 0);
	PT_OK(comp_decode(&c, NULL, 0, 0, NULL));
	free(x);
	free(y);
	free(acc);
	free(buf);
}
END_TEST

START_TEST(test_codec_encode_bogus)
{
	float             x[16] = { 1, 2, 3 };
	uint8_t           out[256];
	size_t            len = 7;
	struct comp_codec c;
	uint64_t          rng = 1;
	PT_OK(comp_codec_parse("q4", 8, &c));
	PT_FAIL(comp_encode(NULL, x, 16, NULL, out, sizeof out, &len),
	    FB_EINVAL);
	PT_FAIL(comp_encode(&c, NULL, 16, NULL, out, sizeof out, &len),
	    FB_EINVAL);
	PT_FAIL(comp_encode(&c, x, 16, NULL, NULL, sizeof out, &len),
	    FB_EINVAL);
	PT_FAIL(comp_encode(&c, x, 16, NULL, out, sizeof out, NULL),
	    FB_EINVAL);
	PT_FAIL(
	    comp_encode(&c, x, 16, NULL, out, comp_bound(&c, 16) - 1, &len),
	    FB_ENOSPC);
	PT_FAIL(
	    comp_encode(&c, x, COMP_MAX_N + 1, NULL, out, sizeof out, &len),
	    FB_EINVAL);
	ck_assert_uint_eq(len, 7); // untouched on failure
	c.stochastic = 1;
	PT_FAIL(comp_encode(&c, x, 16, NULL, out, sizeof out, &len),
	    FB_EINVAL);
	PT_OK(comp_encode(&c, x, 16, &rng, out, sizeof out, &len));
	// non-finite values cannot be scaled
	const char *nf[] = { "q8", "q4", "q2", "sign", "topk:0.5" };
	for (int k = 0; k < 5; k++) {
		PT_OK(comp_codec_parse(nf[k], 8, &c));
		x[11] = NAN;
		PT_FAIL(comp_encode(&c, x, 16, NULL, out, sizeof out, &len),
		    FB_EINVAL);
		x[11] = -INFINITY;
		PT_FAIL(comp_encode(&c, x, 16, NULL, out, sizeof out, &len),
		    FB_EINVAL);
		x[11] = 0;
	}
}
END_TEST

// Truncated, extended and randomly corrupted messages of every codec are
// either rejected with FB_EPROTO (output untouched) or decode to finite
// floats; nothing is read or written out of bounds (run under ASan).
START_TEST(test_codec_decode_bogus)
{
	size_t   n = 301;
	float    x[301], out[301], keep[301];
	uint8_t  buf[4096], cp[4096];
	uint64_t seed = 11;
	tr_fill(x, n, 1.0, 17);
	for (size_t i = 0; i < NSPECS; i++) {
		struct comp_codec c;
		PT_OK(comp_codec_parse(specs[i], 64, &c));
		uint64_t rng = 3;
		size_t   len;
		PT_OK(comp_encode(&c, x, n, &rng, buf, sizeof buf, &len));
		for (size_t k = 0; k < n; k++)
			out[k] = keep[k] = (float) k;
		for (size_t l = 0; l < len + 9; l++) {
			if (l == len)
				continue;
			// a heap copy of exactly l bytes, so ASan sees
			// overreads
			uint8_t *h = malloc(l + 1);
			memcpy(h, buf, l < len ? l : len);
			memset(h + (l < len ? l : len), 0,
			    l > len ? l - len : 0);
			PT_FAIL(comp_decode(&c, h, l, n, out), FB_EPROTO);
			PT_FAIL(comp_decode_add(&c, h, l, n, out), FB_EPROTO);
			free(h);
		}
		ck_assert_mem_eq(out, keep, sizeof out);
		int rejected = 0;
		for (int t = 0; t < 2000; t++) {
			memcpy(cp, buf, len);
			int flips = 1 + (int) (tr_next(&seed) % 4);
			for (int f = 0; f < flips; f++)
				cp[tr_next(&seed) % len] ^= (uint8_t) (1u
				    << (tr_next(&seed) % 8));
			int rv = comp_decode(&c, cp, len, n, out);
			TR_ASSERT(rv == FB_OK || rv == FB_EPROTO);
			if (rv == FB_EPROTO) {
				rejected++;
				ck_assert_mem_eq(out, keep, sizeof out);
			} else {
				memcpy(out, keep, sizeof out);
			}
		}
		if (c.id == COMP_TOPK || c.id == COMP_Q2 ||
		    c.id == COMP_TOPK_Q8 || c.id == COMP_TOPK_Q4)
			ck_assert_int_gt(rejected, 100);
	}
	struct comp_codec c = COMP_CODEC_INIT;
	PT_FAIL(comp_decode(&c, NULL, 8, 2, out), FB_EINVAL);
	PT_FAIL(comp_decode(&c, buf, 8, 2, NULL), FB_EINVAL);
	PT_FAIL(comp_decode(NULL, buf, 8, 2, out), FB_EINVAL);
	c.id = 77;
	PT_FAIL(comp_decode(&c, buf, 8, 2, out), FB_EINVAL);
}
END_TEST

START_TEST(test_codec_decode_add_bogus)
{
	float             acc[4]  = { 1, 2, 3, 4 };
	uint8_t           buf[16] = { 0 };
	struct comp_codec c       = COMP_CODEC_INIT;
	PT_FAIL(comp_decode_add(&c, buf, 15, 4, acc), FB_EPROTO);
	PT_FAIL(comp_decode_add(&c, buf, 16, 4, NULL), FB_EINVAL);
	PT_FAIL(comp_decode_add(&c, NULL, 16, 4, acc), FB_EINVAL);
	PT_FAIL(comp_decode_add(NULL, buf, 16, 4, acc), FB_EINVAL);
	TR_ASSERT(acc[0] == 1 && acc[3] == 4);
	PT_OK(comp_decode_add(&c, buf, 16, 4, acc)); // adds zeros
	TR_ASSERT(acc[0] == 1 && acc[3] == 4);
}
END_TEST

// Switching kernels changes the name reported; both names are known.
START_TEST(test_codec_simd)
{
	comp_simd_set(0);
	ck_assert_str_eq(comp_simd_name(), "portable");
	comp_simd_set(1);
	const char *n = comp_simd_name();
	TR_ASSERT(strcmp(n, "avx512") == 0 || strcmp(n, "portable") == 0);
}
END_TEST

Suite *
suite_codec(void)
{
	Suite *s  = suite_create("codec");
	TCase *tc = tcase_create("codec");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_codec_parse);
	tcase_add_test(tc, test_codec_parse_bogus);
	tcase_add_test(tc, test_codec_name);
	tcase_add_test(tc, test_codec_name_bogus);
	tcase_add_test(tc, test_codec_format);
	tcase_add_test(tc, test_codec_format_bogus);
	tcase_add_test(tc, test_codec_check);
	tcase_add_test(tc, test_codec_check_bogus);
	tcase_add_test(tc, test_codec_bound);
	tcase_add_test(tc, test_codec_bound_bogus);
	tcase_add_test(tc, test_codec_encode_decode);
	tcase_add_test(tc, test_codec_encode_bogus);
	tcase_add_test(tc, test_codec_decode_bogus);
	tcase_add_test(tc, test_codec_decode_add_bogus);
	tcase_add_test(tc, test_codec_simd);
	suite_add_tcase(s, tc);
	return s;
}
