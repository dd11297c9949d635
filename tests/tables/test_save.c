// test_save.c — tbl_save_size, tbl_save and tbl_load: a bit-exact round
// trip, and bad images refused with the shard unchanged.
#include <stdlib.h>
#include <string.h>

#include <fb/fb.h>

#include "tables_tests.h"

// image: t saved into a fresh buffer (*len its size).
static uint8_t *
image(const struct tbl *t, size_t *len)
{
	*len       = tbl_save_size(t);
	uint8_t *p = malloc(*len);
	tbl_save(t, p);
	return p;
}

// busy: an Adam shard with admission, rows at several versions, some
// updates refused and some lookups.
static struct tbl *
busy(void)
{
	struct tbl_conf c = tt_conf(5, TBL_OPT_ADAM);
	c.admit_count     = 2;
	struct tbl *t     = tt_open(&c);
	uint64_t    keys[64];
	float       g[64 * 5], out[64 * 5];
	for (int v = 1; v <= 4; v++) {
		for (int i = 0; i < 64; i++)
			keys[i] = (uint64_t) (i * v + 1);
		tt_grads(g, 64 * 5, (uint32_t) v);
		ck_assert_int_eq(
		    tbl_apply(t, keys, 64, g, NULL, 0.5f, 0.01f, (uint64_t) v),
		    0);
		tbl_lookup(t, keys, 64, out);
	}
	return t;
}

static void
same_stats(const struct tbl *a, const struct tbl *b)
{
	struct tbl_stats x, y;
	tbl_get_stats(a, &x);
	tbl_get_stats(b, &y);
	ck_assert_uint_eq(x.rows, y.rows);
	ck_assert_uint_eq(x.admitted, y.admitted);
	ck_assert_uint_eq(x.rejected, y.rejected);
	ck_assert_uint_eq(x.evicted, y.evicted);
	ck_assert_uint_eq(x.lookups, y.lookups);
	ck_assert_uint_eq(x.hits, y.hits);
}

// A loaded image is the saved shard: the same keys, rows, state, touches,
// sketch and counters (its own image is byte for byte the same), and it
// trains on identically. Failure: a snapshot or a move changes the shard.
START_TEST(test_save_round_trip)
{
	struct tbl *a = busy();
	size_t      len, len2;
	uint8_t    *img = image(a, &len);
	ck_assert_uint_gt(tbl_rows(a), 0);
	struct tbl_stats st;
	tbl_get_stats(a, &st);
	ck_assert_uint_gt(st.rejected, 0);
	struct tbl_conf c = tt_conf(5, TBL_OPT_ADAM);
	c.admit_count     = 2;
	struct tbl *b     = tt_open(&c);
	ck_assert_ptr_null(tbl_load(b, img, len));
	same_stats(a, b);
	uint8_t *img2 = image(b, &len2);
	ck_assert_uint_eq(len, len2);
	ck_assert(memcmp(img, img2, len) == 0);
	// The same next step on both: the same rows (admission included).
	uint64_t keys[8] = { 1, 2, 3, 500, 501, 7, 9, 11 };
	float    g[40], x[40], y[40];
	tt_grads(g, 40, 77);
	ck_assert_int_eq(tbl_apply(a, keys, 8, g, NULL, 1, 0.01f, 5), 0);
	ck_assert_int_eq(tbl_apply(b, keys, 8, g, NULL, 1, 0.01f, 5), 0);
	tbl_lookup(a, keys, 8, x);
	tbl_lookup(b, keys, 8, y);
	ck_assert(memcmp(x, y, sizeof(x)) == 0);
	same_stats(a, b);
	free(img);
	free(img2);
	tbl_close(a);
	tbl_close(b);
}
END_TEST

// Truncated, corrupted, foreign or mismatched images are refused with a
// message and the shard keeps what it had. Failure: a bad snapshot
// half-loaded.
START_TEST(test_load_bogus)
{
	struct tbl *a = busy();
	size_t      len, before_len, after_len;
	uint8_t    *img    = image(a, &len);
	uint8_t    *before = image(a, &before_len);
	uint8_t    *bad    = malloc(len);
	const char *err;

	ck_assert_ptr_nonnull(err = tbl_load(a, img, len - 1));
	ck_assert_ptr_nonnull(err = tbl_load(a, img, 10));
	ck_assert_str_eq(err, "table image: truncated header");
	memcpy(bad, img, len);
	bad[len / 2] ^= 1;
	ck_assert_str_eq(tbl_load(a, bad, len),
	    "table image: checksum mismatch");
	memcpy(bad, img, len);
	bad[0] ^= 1;
	ck_assert_str_eq(tbl_load(a, bad, len), "table image: bad magic");
	memcpy(bad, img, len);
	bad[24] ^= 1; // the row count
	ck_assert_str_eq(tbl_load(a, bad, len),
	    "table image: length does not match its row count");
	// A duplicated key behind a valid checksum.
	memcpy(bad, img, len);
	size_t rec = 12 + 4 * (5 + 11);
	memcpy(bad + 80 + rec, bad + 80, 8);
	fb_put_u32le(bad + len - 4, fb_crc32(0, bad, len - 4));
	ck_assert_str_eq(tbl_load(a, bad, len),
	    "table image: a key appears twice");
	// Another table's layout.
	struct tbl_conf c = tt_conf(6, TBL_OPT_ADAM);
	struct tbl     *o = tt_open(&c);
	ck_assert_str_eq(tbl_load(o, img, len),
	    "table image: dim differs from the table's");
	tbl_close(o);
	c = tt_conf(5, TBL_OPT_FTRL);
	o = tt_open(&c);
	ck_assert_str_eq(tbl_load(o, img, len),
	    "table image: optimizer differs from the table's");
	tbl_close(o);

	uint8_t *after = image(a, &after_len);
	ck_assert_uint_eq(before_len, after_len);
	ck_assert(memcmp(before, after, before_len) == 0);
	free(img);
	free(before);
	free(after);
	free(bad);
	tbl_close(a);
}
END_TEST

Suite *
suite_save(void)
{
	Suite *s  = suite_create("save");
	TCase *tc = tcase_create("save");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_save_round_trip);
	tcase_add_test(tc, test_load_bogus);
	suite_add_tcase(s, tc);
	return s;
}
