// test_format.c — the human-readable placement report (format.c).
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <shard/shard.h>

#include "gen.h"
#include "pt.h"
#include "sharding_tests.h"

// A failure means the report lacks a required part or overflows its
// advertised bound.
START_TEST(test_format_report)
{
	uint64_t        rng = 21;
	struct gen_inst g;
	gen_random(&g, &rng, 12, 3, 2, SHARD_MODEL_B, 0.7);
	uint32_t a[12];
	PT_OK(shard_solve(&g.in, NULL, a, NULL, NULL));
	size_t n = shard_format_bound(&g.in), len;
	ck_assert_uint_gt(n, 0);
	char *buf = fb_alloc(n);
	ck_assert_ptr_nonnull(buf);
	PT_OK(shard_format(&g.in, a, buf, n, &len));
	ck_assert_uint_eq(len, strlen(buf));
	ck_assert_uint_lt(len, n);
	const char *want[] = { "placement: 12 shards",
		"L[t][m] (ms):", "B[t][m] (MB/s):", "  t1 ",
		"servers:", "  m2 ",
		"assign: ", "trainer time (ms): t0=", " t1=", "F ", "LB ",
		"F/LB " };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(strstr(buf, want[i]) != NULL,
		    "missing '%s' in:\n%s", want[i], buf);
	// the assignment line lists every shard's server
	const char *p = strstr(buf, "assign:") + 7;
	for (int i = 0; i < 12; i++) {
		char tok[8];
		snprintf(tok, sizeof(tok), " %u", (unsigned) a[i]);
		ck_assert_int_eq(strncmp(p, tok, strlen(tok)), 0);
		p += strlen(tok);
	}
	ck_assert_int_eq(*p, '\n');
	// extreme values stay within the bound
	for (size_t j = 0; j < 6; j++) {
		g.lat[j] = 1e300;
		g.bw[j]  = 1e-300;
	}
	g.in.nic_trainer = NULL;
	PT_OK(shard_format(&g.in, a, buf, n, &len));
	ck_assert_uint_lt(len, n);
	fb_free(buf);
}
END_TEST

// A failure means a too-small buffer was overrun or not reported.
START_TEST(test_format_bogus)
{
	uint64_t        rng = 22;
	struct gen_inst g;
	gen_random(&g, &rng, 5, 2, 2, SHARD_MODEL_A, 0);
	uint32_t a[5] = { 0, 1, 0, 1, 0 }, oob[5] = { 0, 2, 0, 0, 0 };
	char     buf[64];
	size_t   len = 1234;
	memset(buf, 'x', sizeof(buf));
	PT_FAIL(shard_format(&g.in, a, buf, 20, &len), FB_ENOSPC);
	ck_assert_uint_eq(strlen(buf), 19); // truncated, terminated
	ck_assert_int_eq(buf[20], 'x');     // nothing written past len
	ck_assert_uint_eq(len, 1234);
	PT_FAIL(shard_format(&g.in, a, buf, 0, &len), FB_ENOSPC);
	PT_FAIL(shard_format(&g.in, a, NULL, 64, &len), FB_EINVAL);
	PT_FAIL(shard_format(&g.in, NULL, buf, 64, &len), FB_EINVAL);
	PT_FAIL(shard_format(&g.in, oob, buf, 64, &len), FB_EINVAL);
	PT_FAIL(shard_format(NULL, a, buf, 64, &len), FB_EINVAL);
	ck_assert_uint_eq(shard_format_bound(NULL), 0);
	g.in.n_servers = 0;
	ck_assert_uint_eq(shard_format_bound(&g.in), 0);
}
END_TEST

Suite *
suite_format(void)
{
	Suite *s  = suite_create("format");
	TCase *tc = tcase_create("format");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_format_report);
	tcase_add_test(tc, test_format_bogus);
	suite_add_tcase(s, tc);
	return s;
}
