// test_apply.c — tbl_lookup and tbl_apply: absent keys, repeated keys,
// admission and its counters.
#include <string.h>

#include "tables_tests.h"

// A lookup of absent keys returns their initial rows and creates nothing.
// Failure: pulls would fill the shard with rows nobody trained.
START_TEST(test_lookup_absent_creates_nothing)
{
	struct tbl_conf c       = tt_conf(8, TBL_OPT_SGD);
	struct tbl     *t       = tt_open(&c);
	uint64_t        keys[3] = { 1, 2, 1 };
	float           out[24], ref[8];
	tbl_lookup(t, keys, 3, out);
	ck_assert_uint_eq(tbl_rows(t), 0);
	tbl_row_init(&c, 1, ref);
	ck_assert(memcmp(out, ref, sizeof(ref)) == 0);
	ck_assert(memcmp(out + 16, ref, sizeof(ref)) == 0);
	struct tbl_stats st;
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.lookups, 3);
	ck_assert_uint_eq(st.hits, 0);
	ck_assert_uint_eq(st.admitted, 0);
	float g[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	ck_assert_int_eq(tbl_apply(t, keys, 1, g, NULL, 1, 0.5f, 1), 0);
	ck_assert_uint_eq(tbl_rows(t), 1);
	tbl_lookup(t, keys, 3, out);
	for (int j = 0; j < 8; j++) {
		ck_assert(out[j] == ref[j] - 0.5f);
		ck_assert(out[16 + j] == ref[j] - 0.5f);
	}
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.hits, 2);
	ck_assert_uint_eq(st.admitted, 1);
	tbl_close(t);
}
END_TEST

Suite *
suite_apply(void)
{
	Suite *s  = suite_create("apply");
	TCase *tc = tcase_create("apply");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_lookup_absent_creates_nothing);
	suite_add_tcase(s, tc);
	return s;
}
