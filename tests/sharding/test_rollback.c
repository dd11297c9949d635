// test_rollback.c — the version a job rolls back to (rollback.c): the
// newest snapshot version every server holding shards has, whatever the
// order of the lists; servers without shards do not count; no common
// version, or a server in use that reported none, is FB_ENOTFOUND naming
// a server that lacks it.
#include <stdint.h>

#include <shard/shard.h>

#include "pt.h"
#include "sharding_tests.h"

#define K 4

START_TEST(test_rollback_newest_common)
{
	// Server 0 wrote 180 (server 1 died before it): 160 is common.
	uint64_t held[3 * K] = { 180, 160, 0, 0, 160, 140, 0, 0, 999, 0, 0,
		0 };
	uint32_t n[3]        = { 2, 2, 1 };
	uint8_t  use[3]      = { 1, 1, 0 }; // server 2 holds no shard
	uint64_t v           = 0;
	uint32_t missing     = 7;
	PT_OK(shard_rollback_pick(3, use, held, n, K, &v, &missing));
	ck_assert_uint_eq(v, 160);
	// Any order; an older common one when the newest is not shared.
	uint64_t held2[2 * K] = { 140, 160, 0, 0, 120, 140, 0, 0 };
	uint32_t n2[2]        = { 2, 2 };
	uint8_t  use2[2]      = { 1, 1 };
	PT_OK(shard_rollback_pick(2, use2, held2, n2, K, &v, &missing));
	ck_assert_uint_eq(v, 140);
	// A server that holds no shard but is the only one with a newer
	// version does not count; nor does one listed last.
	use[2] = 1;
	ck_assert_int_eq(shard_rollback_pick(3, use, held, n, K, &v, &missing),
	    FB_ENOTFOUND);
	ck_assert_uint_eq(missing, 2);
}
END_TEST

START_TEST(test_rollback_none_common)
{
	uint64_t held[2 * K] = { 200, 180, 0, 0, 160, 140, 0, 0 };
	uint32_t n[2]        = { 2, 2 };
	uint8_t  use[2]      = { 1, 1 };
	uint64_t v           = 42;
	uint32_t missing     = 7;
	ck_assert_int_eq(shard_rollback_pick(2, use, held, n, K, &v, &missing),
	    FB_ENOTFOUND);
	ck_assert_uint_eq(v, 42); // untouched
	ck_assert_uint_eq(missing, 1);
	// A server in use that reported nothing.
	n[0] = 0;
	ck_assert_int_eq(shard_rollback_pick(2, use, held, n, K, &v, &missing),
	    FB_ENOTFOUND);
	ck_assert_uint_eq(missing, 0);
	n[0] = 2;
	n[1] = 0;
	ck_assert_int_eq(shard_rollback_pick(2, use, held, n, K, &v, &missing),
	    FB_ENOTFOUND);
	ck_assert_uint_eq(missing, 1);
	// Version 0 (a snapshot before the first step) is a version.
	uint64_t h0[2 * K] = { 0, 0, 0, 0, 20, 0, 0, 0 };
	uint32_t n0[2]     = { 1, 2 };
	PT_OK(shard_rollback_pick(2, use, h0, n0, K, &v, &missing));
	ck_assert_uint_eq(v, 0);
	// Bad arguments.
	uint8_t none[2] = { 0, 0 };
	ck_assert_int_eq(
	    shard_rollback_pick(2, none, held, n, K, &v, &missing), FB_EINVAL);
	ck_assert_int_eq(shard_rollback_pick(2, use, held, n, 0, &v, &missing),
	    FB_EINVAL);
	ck_assert_int_eq(shard_rollback_pick(2, use, NULL, n, K, &v, &missing),
	    FB_EINVAL);
}
END_TEST

Suite *
suite_rollback(void)
{
	Suite *s  = suite_create("rollback");
	TCase *tc = tcase_create("rollback");
	tcase_add_test(tc, test_rollback_newest_common);
	tcase_add_test(tc, test_rollback_none_common);
	suite_add_tcase(s, tc);
	return s;
}
