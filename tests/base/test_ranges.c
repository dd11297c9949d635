// test_ranges.c — struct fb_ranges: ascending ids written as compact
// ranges for log lines, and cut with "..." (never mid-number) when the
// buffer is short.
#include <string.h>

#include "base_tests.h"
#include "pt.h"

// ranges_of writes ids[0..n) through an fb_ranges into buf (size len).
static const char *
ranges_of(const uint64_t *ids, size_t n, char *buf, size_t len)
{
	struct fb_ranges r;
	fb_ranges_init(&r, buf, len);
	for (size_t i = 0; i < n; i++) {
		fb_ranges_add(&r, ids[i]);
	}
	return fb_ranges_end(&r);
}

// Runs collapse to "a-b", lone ids stay alone, no ids is "".
START_TEST(test_ranges_format)
{
	static const uint64_t run[] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	static const uint64_t mix[] = { 1, 3, 4, 9, 10, 11, 40 };
	static const uint64_t big[] = { UINT64_MAX - 1, UINT64_MAX };
	char                  buf[64];
	ck_assert_str_eq(ranges_of(run, 8, buf, sizeof(buf)), "0-7");
	ck_assert_str_eq(ranges_of(mix, 7, buf, sizeof(buf)), "1,3-4,9-11,40");
	ck_assert_str_eq(ranges_of(run, 1, buf, sizeof(buf)), "0");
	ck_assert_str_eq(ranges_of(run, 0, buf, sizeof(buf)), "");
	ck_assert_str_eq(ranges_of(big, 2, buf, sizeof(buf)),
	    "18446744073709551614-18446744073709551615");
}
END_TEST

// A short buffer keeps the ranges that fit and ends in "...".
START_TEST(test_ranges_truncated_bogus)
{
	static const uint64_t ids[] = { 1, 3, 5, 7, 9, 11, 13 };
	char                  buf[12];
	ck_assert_str_eq(ranges_of(ids, 7, buf, sizeof(buf)), "1,3,5,7...");
	ck_assert_str_eq(ranges_of(ids, 7, buf, 4), "...");
	ck_assert_str_eq(ranges_of(ids, 1, buf, 4), "...");
}
END_TEST

Suite *
suite_ranges(void)
{
	Suite *s  = suite_create("ranges");
	TCase *tc = tcase_create("ranges");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_ranges_format);
	tcase_add_test(tc, test_ranges_truncated_bogus);
	suite_add_tcase(s, tc);
	return s;
}
