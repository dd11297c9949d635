// test_sched.c — sched.c without a scheduler: a placement map checked
// against the declared tensor table, the connections a map asks for, and
// each server's list of shards.
#include <string.h>

#include "clients_tests.h"
#include "fake.h"

static const uint64_t          lens[2] = { 10, 5 };
static const struct fake_shard good[3] = { { 0, 0, 6, 0 }, { 0, 6, 4, 1 },
	{ 1, 0, 5, 1 } };

// check_map asserts what ferry__placement_check says of the map of
// n_tensors tensors, n_servers servers and shards sh (good with shard i
// replaced by *bad when bad != NULL).
static void
check_map(ferry_client *c, size_t n_tensors, size_t n_servers,
    const struct fake_shard *bad, size_t i, int want, const char *word)
{
	struct fake_shard sh[3];
	memcpy(sh, good, sizeof(sh));
	if (bad != NULL) {
		sh[i] = *bad;
	}
	Pswire__Placement *pl = fake_map(n_tensors, n_servers, sh, 3, 1);
	c->err[0]             = '\0';
	ck_assert_int_eq(ferry__placement_check(c, pl), want);
	ck_assert_msg(strstr(c->err, word) != NULL, "err '%s' lacks '%s'",
	    c->err, word);
	pswire__placement__free_unpacked(pl, NULL);
}

START_TEST(test_placement_check)
{
	ferry_client     *c = fake_client(NULL, NULL, lens, 2, 2, good, 3);
	struct fake_shard s;

	check_map(c, 2, 2, NULL, 0, FERRY_OK, "");
	// The last element of a tensor is in range; one more is not.
	s = (struct fake_shard) { 0, 9, 1, 0 };
	check_map(c, 2, 2, &s, 0, FERRY_OK, "");
	s = (struct fake_shard) { 0, 9, 2, 0 };
	check_map(c, 2, 2, &s, 0, FERRY_EPROTO, "shard 0 is out of range");
	s = (struct fake_shard) { 0, 11, 1, 0 };
	check_map(c, 2, 2, &s, 1, FERRY_EPROTO, "shard 1 is out of range");
	s = (struct fake_shard) { 1, 0, 0, 0 }; // empty
	check_map(c, 2, 2, &s, 2, FERRY_EPROTO, "shard 2 is out of range");
	s = (struct fake_shard) { 2, 0, 1, 0 }; // no such tensor
	check_map(c, 2, 2, &s, 2, FERRY_EPROTO, "shard 2 is out of range");
	s = (struct fake_shard) { 1, 0, 5, 2 }; // no such server
	check_map(c, 2, 2, &s, 2, FERRY_EPROTO, "shard 2 is out of range");
	// The table itself: tensor count, and 1..4096 servers.
	check_map(c, 3, 2, NULL, 0, FERRY_EPROTO, "declared tensor table");
	check_map(c, 2, 0, NULL, 0, FERRY_EPROTO, "declared tensor table");
	Pswire__Placement *pl = fake_map(2, 2, good, 3, 1);
	pl->n_servers         = 4097;
	ck_assert_int_eq(ferry__placement_check(c, pl), FERRY_EPROTO);
	pl->n_servers          = 2;
	Pswire__JobConfig *job = pl->job;
	pl->job                = NULL;
	ck_assert_int_eq(ferry__placement_check(c, pl), FERRY_EPROTO);
	pl->job = job;
	pswire__placement__free_unpacked(pl, NULL);
	ferry_client_close(c);
}
END_TEST

START_TEST(test_conns_assign)
{
	ferry_client *c = fake_client(NULL, NULL, lens, 2, 2, good, 3);

	ck_assert_uint_eq(c->n_conns, 2);
	ck_assert_uint_eq(c->conns[0].n, 1);
	ck_assert_uint_eq(c->conns[0].shards[0], 0);
	ck_assert_uint_eq(c->conns[0].bytes, 6 * 4);
	ck_assert_uint_eq(c->conns[1].n, 2);
	ck_assert_uint_eq(c->conns[1].shards[0], 1);
	ck_assert_uint_eq(c->conns[1].shards[1], 2);
	ck_assert_uint_eq(c->conns[1].bytes, (4 + 5) * 4);

	// A new map (shard 2 moved, a third server joined): one more
	// connection, and the lists follow the map.
	struct fake_shard moved[3] = { { 0, 0, 6, 0 }, { 0, 6, 4, 1 },
		{ 1, 0, 5, 2 } };
	pswire__placement__free_unpacked(c->pl, NULL);
	c->pl = fake_map(2, 3, moved, 3, 2);
	ck_assert_int_eq(ferry__conns_open(c, c->pl), FERRY_OK);
	ck_assert_int_eq(ferry__conns_assign(c), FERRY_OK);
	ck_assert_uint_eq(c->n_conns, 3);
	ck_assert_uint_eq(c->conns[1].n, 1);
	ck_assert_uint_eq(c->conns[1].bytes, 4 * 4);
	ck_assert_uint_eq(c->conns[2].n, 1);
	ck_assert_uint_eq(c->conns[2].shards[0], 2);
	ck_assert_uint_eq(c->conns[2].bytes, 5 * 4);

	// A map may not list fewer servers than are known.
	Pswire__Placement *fewer = fake_map(2, 2, good, 3, 3);
	ck_assert_int_eq(ferry__conns_open(c, fewer), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "fewer than"));
	ck_assert_uint_eq(c->n_conns, 3);
	pswire__placement__free_unpacked(fewer, NULL);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_sched(void)
{
	Suite *s  = suite_create("sched");
	TCase *tc = tcase_create("map");
	tcase_add_test(tc, test_placement_check);
	tcase_add_test(tc, test_conns_assign);
	suite_add_tcase(s, tc);
	return s;
}
