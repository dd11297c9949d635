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

// admit_count 3: the first two updates of a key are refused (counted),
// the third creates the row and applies only itself. Failure: admission
// off by one, or refused gradients applied.
START_TEST(test_admit_count_exact)
{
	struct tbl_conf c     = tt_conf(4, TBL_OPT_SGD);
	c.admit_count         = 3;
	struct tbl      *t    = tt_open(&c);
	uint64_t         k    = 31337;
	float            g[4] = { 1, 2, 3, 4 }, ref[4], out[4];
	struct tbl_stats st;
	for (int i = 1; i <= 2; i++) {
		ck_assert_int_eq(tbl_apply(t, &k, 1, g, NULL, 1, 1, 1), 0);
		ck_assert_uint_eq(tbl_rows(t), 0);
		tbl_get_stats(t, &st);
		ck_assert_uint_eq(st.rejected, (uint64_t) i);
	}
	ck_assert_int_eq(tbl_apply(t, &k, 1, g, NULL, 1, 1, 3), 0);
	ck_assert_uint_eq(tbl_rows(t), 1);
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.admitted, 1);
	ck_assert_uint_eq(st.rejected, 2);
	tbl_row_init(&c, k, ref);
	tbl_lookup(t, &k, 1, out);
	for (int j = 0; j < 4; j++)
		ck_assert(out[j] == ref[j] - 1.0f * (g[j] * 1.0f));
	// Counted occurrences: one update of count 3 admits at once.
	uint64_t k2 = 4242;
	uint32_t c3 = 3;
	ck_assert_int_eq(tbl_apply(t, &k2, 1, g, &c3, 1, 1, 4), 0);
	ck_assert_uint_eq(tbl_rows(t), 2);
	tbl_close(t);
}
END_TEST

// Probabilistic admission decides the same on two shards (a hash of seed,
// table, key and version) and admits about p of the keys. Failure:
// replicas would hold different key sets.
START_TEST(test_admit_prob_deterministic)
{
	struct tbl_conf c = tt_conf(2, TBL_OPT_SGD);
	c.admit_prob      = 0.25f;
	struct tbl  *a = tt_open(&c), *b = tt_open(&c);
	uint64_t     keys[2000];
	static float g[4000];
	for (int i = 0; i < 2000; i++)
		keys[i] = (uint64_t) i * 977 + 5;
	ck_assert_int_eq(tbl_apply(a, keys, 2000, g, NULL, 1, 1, 9), 0);
	ck_assert_int_eq(tbl_apply(b, keys, 2000, g, NULL, 1, 1, 9), 0);
	ck_assert_uint_eq(tbl_rows(a), tbl_rows(b));
	ck_assert_uint_gt(tbl_rows(a), 400);
	ck_assert_uint_lt(tbl_rows(a), 600);
	struct tbl_stats sa, sb;
	for (int i = 0; i < 2000; i++) {
		float out[2];
		tbl_lookup(a, keys + i, 1, out);
		tbl_lookup(b, keys + i, 1, out);
		tbl_get_stats(a, &sa);
		tbl_get_stats(b, &sb);
		ck_assert_uint_eq(sa.hits, sb.hits);
	}
	ck_assert_uint_eq(sa.admitted + sa.rejected, 2000);
	tbl_close(a);
	tbl_close(b);
}
END_TEST

Suite *
suite_apply(void)
{
	Suite *s  = suite_create("apply");
	TCase *tc = tcase_create("apply");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_lookup_absent_creates_nothing);
	tcase_add_test(tc, test_admit_count_exact);
	tcase_add_test(tc, test_admit_prob_deterministic);
	suite_add_tcase(s, tc);
	return s;
}
