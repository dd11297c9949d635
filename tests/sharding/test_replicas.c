// test_replicas.c — backups and promotion (replicas.c): a first map's
// backups follow the primary on other servers, a dead primary is replaced
// by its first live backup, lists are filled up at their end only, R is
// capped by the live servers, and a shard with no live copy is counted
// lost.
#include <stdint.h>
#include <string.h>

#include <shard/shard.h>

#include "pt.h"
#include "sharding_tests.h"

#define NO SHARD_NO_SERVER

START_TEST(test_replicas_first_map)
{
	// 4 shards round-robin on 3 servers, R = 3: backups p+1, p+2.
	uint32_t a[4] = { 0, 1, 2, 0 };
	uint32_t b[8];
	uint8_t  gone[3] = { 0 };
	size_t   lost    = 99;
	memset(b, 0xff, sizeof(b));
	PT_OK(shard_replicas_repair(4, 3, gone, 2, a, b, &lost));
	ck_assert_uint_eq(lost, 0);
	const uint32_t want_a[4] = { 0, 1, 2, 0 };
	const uint32_t want_b[8] = { 1, 2, 2, 0, 0, 1, 1, 2 };
	ck_assert_mem_eq(a, want_a, sizeof(a));
	ck_assert_mem_eq(b, want_b, sizeof(b));
}
END_TEST

START_TEST(test_replicas_capped_by_servers)
{
	// R = 4 on 2 live servers of 3: one backup each, the rest empty.
	uint32_t a[2] = { 0, 2 };
	uint32_t b[6];
	uint8_t  gone[3] = { 0, 1, 0 };
	size_t   lost;
	memset(b, 0xff, sizeof(b));
	PT_OK(shard_replicas_repair(2, 3, gone, 3, a, b, &lost));
	const uint32_t want_b[6] = { 2, NO, NO, 0, NO, NO };
	ck_assert_mem_eq(b, want_b, sizeof(b));
	// One live server: no backup at all.
	uint8_t  one[3] = { 1, 1, 0 };
	uint32_t a1[1] = { 2 }, b1[2] = { NO, NO };
	PT_OK(shard_replicas_repair(1, 3, one, 2, a1, b1, &lost));
	ck_assert_uint_eq(b1[0], NO);
	ck_assert_uint_eq(a1[0], 2);
}
END_TEST

START_TEST(test_replicas_promote)
{
	// Server 1 dies: shard 1 (primary 1, backups 2, 0) is promoted to 2
	// and keeps 0; shard 0 (primary 0, backups 1, 2) loses backup 1 and
	// keeps 2 first, then gets 3 (the next live after 0 not holding it).
	uint32_t a[2]    = { 0, 1 };
	uint32_t b[4]    = { 1, 2, 2, 0 };
	uint8_t  gone[4] = { 0, 1, 0, 0 };
	size_t   lost;
	PT_OK(shard_replicas_repair(2, 4, gone, 2, a, b, &lost));
	ck_assert_uint_eq(lost, 0);
	ck_assert_uint_eq(a[0], 0);
	ck_assert_uint_eq(a[1], 2);
	const uint32_t want_b[4] = { 2, 3, 0, 3 };
	ck_assert_mem_eq(b, want_b, sizeof(b));
}
END_TEST

START_TEST(test_replicas_skip_dead_backup)
{
	// Primary and first backup both dead: the second backup takes over.
	uint32_t a[1]    = { 0 };
	uint32_t b[2]    = { 1, 2 };
	uint8_t  gone[3] = { 1, 1, 0 };
	size_t   lost;
	PT_OK(shard_replicas_repair(1, 3, gone, 2, a, b, &lost));
	ck_assert_uint_eq(a[0], 2);
	ck_assert_uint_eq(b[0], NO);
	ck_assert_uint_eq(lost, 0);
}
END_TEST

START_TEST(test_replicas_lost)
{
	// R = 1 (no backups): a dead primary's shard is lost and stays put.
	uint32_t a[2]    = { 0, 1 };
	uint8_t  gone[2] = { 1, 0 };
	size_t   lost;
	PT_OK(shard_replicas_repair(2, 2, gone, 0, a, NULL, &lost));
	ck_assert_uint_eq(lost, 1);
	ck_assert_uint_eq(a[0], 0);
	ck_assert_uint_eq(a[1], 1);
}
END_TEST

START_TEST(test_replicas_bogus)
{
	uint32_t a[1] = { 0 }, b[1] = { NO };
	uint8_t  gone[2] = { 1, 1 };
	size_t   lost    = 7;
	PT_FAIL(shard_replicas_repair(1, 2, gone, 1, a, b, &lost), FB_EINVAL);
	ck_assert_uint_eq(lost, 7);
	gone[0] = 0;
	PT_FAIL(shard_replicas_repair(1, 2, NULL, 1, a, b, &lost), FB_EINVAL);
	PT_FAIL(shard_replicas_repair(1, 2, gone, 1, a, NULL, &lost),
	    FB_EINVAL);
	PT_FAIL(shard_replicas_repair(1, 2, gone, 1, a, b, NULL), FB_EINVAL);
	PT_OK(shard_replicas_repair(0, 2, gone, 1, NULL, NULL, &lost));
}
END_TEST

Suite *
suite_replicas(void)
{
	Suite *s  = suite_create("replicas");
	TCase *tc = tcase_create("replicas");
	tcase_add_test(tc, test_replicas_first_map);
	tcase_add_test(tc, test_replicas_capped_by_servers);
	tcase_add_test(tc, test_replicas_promote);
	tcase_add_test(tc, test_replicas_skip_dead_backup);
	tcase_add_test(tc, test_replicas_lost);
	tcase_add_test(tc, test_replicas_bogus);
	suite_add_tcase(s, tc);
	return s;
}
