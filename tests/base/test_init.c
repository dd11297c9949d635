// test_init.c — the seeded init rule (<fb/init.h>): element i of a tensor
// depends on (seed, tensor, i) alone, so filling a tensor at once or in
// any two pieces gives the same bits; values lie in [-scale, scale);
// seeds and tensors give different values; the checks refuse unknown
// kinds and bad scales.
#include <math.h>
#include <string.h>

#include "base_tests.h"
#include "fb/fb.h"
#include "fb/init.h"

#define N 1000

START_TEST(test_init_split)
{
	static float whole[N], parts[N];
	fb_init_fill(FB_INIT_UNIFORM, 0.25f, 42, 3, 0, whole, N);
	for (size_t cut = 0; cut <= N; cut += 137) {
		memset(parts, 0xff, sizeof(parts));
		fb_init_fill(FB_INIT_UNIFORM, 0.25f, 42, 3, 0, parts, cut);
		fb_init_fill(FB_INIT_UNIFORM, 0.25f, 42, 3, cut, parts + cut,
		    N - cut);
		ck_assert_msg(memcmp(whole, parts, sizeof(whole)) == 0,
		    "cut at %zu", cut);
	}
}
END_TEST

START_TEST(test_init_range)
{
	static float v[N];
	double       sum = 0;
	float        lo = 1, hi = -1;
	fb_init_fill(FB_INIT_UNIFORM, 0.5f, 7, 0, 0, v, N);
	for (size_t i = 0; i < N; i++) {
		ck_assert_msg(v[i] >= -0.5f && v[i] < 0.5f, "v[%zu] = %g", i,
		    (double) v[i]);
		sum += v[i];
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	// Uniform: the mean near 0, both ends reached.
	ck_assert_msg(fabs(sum / N) < 0.05, "mean %g", sum / N);
	ck_assert(lo < -0.45f && hi > 0.45f);
	fb_init_fill(FB_INIT_ZEROS, 0, 7, 0, 0, v, N);
	for (size_t i = 0; i < N; i++) {
		ck_assert(v[i] == 0.0f && !signbit(v[i]));
	}
}
END_TEST

START_TEST(test_init_differ)
{
	static float a[N], b[N], c[N];
	size_t       same_b = 0, same_c = 0;
	fb_init_fill(FB_INIT_UNIFORM, 1, 1, 0, 0, a, N);
	fb_init_fill(FB_INIT_UNIFORM, 1, 2, 0, 0, b, N); // another seed
	fb_init_fill(FB_INIT_UNIFORM, 1, 1, 1, 0, c, N); // another tensor
	for (size_t i = 0; i < N; i++) {
		same_b += a[i] == b[i];
		same_c += a[i] == c[i];
	}
	ck_assert_uint_lt(same_b, 5);
	ck_assert_uint_lt(same_c, 5);
	// Reproducible: the same arguments, the same bits.
	fb_init_fill(FB_INIT_UNIFORM, 1, 1, 0, 0, b, N);
	ck_assert(memcmp(a, b, sizeof(a)) == 0);
}
END_TEST

START_TEST(test_init_check)
{
	char why[96];
	ck_assert_int_eq(fb_init_check(FB_INIT_OFFER, 0, why, sizeof(why)),
	    FB_OK);
	ck_assert_int_eq(fb_init_check(FB_INIT_ZEROS, 0, why, sizeof(why)),
	    FB_OK);
	ck_assert_int_eq(
	    fb_init_check(FB_INIT_UNIFORM, 0.1f, why, sizeof(why)), FB_OK);
	ck_assert_int_eq(fb_init_check(99, 0, why, sizeof(why)), FB_EINVAL);
	ck_assert(strstr(why, "kind 99") != NULL);
	ck_assert_int_eq(fb_init_check(FB_INIT_UNIFORM, -1, why, sizeof(why)),
	    FB_EINVAL);
	ck_assert_int_eq(fb_init_check(FB_INIT_UNIFORM, NAN, why, sizeof(why)),
	    FB_EINVAL);
	ck_assert_int_eq(fb_init_check(FB_INIT_UNIFORM, 0, why, sizeof(why)),
	    FB_EINVAL);
	ck_assert_int_eq(
	    fb_init_check(FB_INIT_ZEROS, INFINITY, why, sizeof(why)),
	    FB_EINVAL);
}
END_TEST

Suite *
suite_init(void)
{
	Suite *s  = suite_create("init");
	TCase *tc = tcase_create("init");
	tcase_add_test(tc, test_init_split);
	tcase_add_test(tc, test_init_range);
	tcase_add_test(tc, test_init_differ);
	tcase_add_test(tc, test_init_check);
	suite_add_tcase(s, tc);
	return s;
}
