// test_evict.c — tbl_evict_idle, tbl_evict_to, and the many-shard budget's
// tbl_evict_hist and tbl_evict_below: exact counts, the right rows gone
// (the oldest, the least frequent), the index intact after many single
// removals.
#include <stdlib.h>
#include <string.h>

#include "tables_tests.h"
#include "tbl_impl.h"

// fill updates keys[0..n) once each, key i at version vers[i].
static void
fill(struct tbl *t, const uint64_t *keys, const uint64_t *vers,
    const uint32_t *counts, size_t n)
{
	static const float g[16] = { 0.5f, 0.25f, -1, 2 }; // dim <= 16
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(tbl_apply(t, keys + i, 1, g,
		                     counts ? counts + i : NULL, 1, 0.1f,
		                     vers[i]),
		    0);
}

// present: whether key has a row.
static bool
present(struct tbl *t, uint64_t key)
{
	struct tbl_stats a, b;
	float            out[16]; // dim <= 16
	tbl_get_stats(t, &a);
	tbl_lookup(t, &key, 1, out);
	tbl_get_stats(t, &b);
	return b.hits > a.hits;
}

// Rows untouched for evict_after versions go, exactly those. Failure:
// idle rows stay (memory grows for ever) or fresh ones go.
START_TEST(test_evict_idle_counts)
{
	struct tbl_conf c = tt_conf(4, TBL_OPT_ADAGRAD);
	c.evict_after     = 5;
	struct tbl *t     = tt_open(&c);
	uint64_t    keys[100], vers[100];
	for (int i = 0; i < 100; i++) {
		keys[i] = (uint64_t) i * 1000003;
		vers[i] = 1 + (uint64_t) (i % 10);
	}
	fill(t, keys, vers, NULL, 100);
	ck_assert_uint_eq(tbl_evict_idle(t, 5), 0);
	ck_assert_uint_eq(tbl_evict_idle(t, 9), 30); // touched at 1..3
	ck_assert_uint_eq(tbl_evict_idle(t, 9), 0);
	ck_assert_uint_eq(tbl_evict_idle(t, 10), 10); // at 4
	ck_assert_uint_eq(tbl_rows(t), 60);
	// A late update stamped with an old version is still found.
	uint64_t late = 77777, v2 = 2;
	fill(t, &late, &v2, NULL, 1);
	ck_assert_uint_eq(tbl_evict_idle(t, 10), 1);
	ck_assert(!present(t, late));
	for (int i = 0; i < 100; i++)
		ck_assert(present(t, keys[i]) == (vers[i] >= 5));
	struct tbl_stats st;
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.evicted, 41);
	tbl_close(t);
	c.evict_after = 0;
	t             = tt_open(&c);
	fill(t, keys, vers, NULL, 100);
	ck_assert_uint_eq(tbl_evict_idle(t, 1000), 0);
	tbl_close(t);
}
END_TEST

// Under a budget the least recently touched rows go first, just enough
// of them. Failure: recent rows evicted, the budget missed, or more rows
// removed than the budget needs.
START_TEST(test_evict_to_lru)
{
	struct tbl_conf c    = tt_conf(16, TBL_OPT_ADAGRAD);
	struct tbl     *t    = tt_open(&c);
	size_t          n    = 30000;
	uint64_t       *keys = malloc(n * 8), *vers = malloc(n * 8);
	for (size_t i = 0; i < n; i++) {
		keys[i] = tbl_key_hash(i + 1);
		vers[i] = 1 + (i * 7919) % 300; // 300 versions, shuffled
	}
	fill(t, keys, vers, NULL, n);
	size_t budget = tbl_bytes(t) / 2;
	size_t fit    = 0; // the most rows the budget holds
	while (tbl__bytes_at(t, fit + 1) <= budget)
		fit++;
	size_t gone = tbl_evict_to(t, budget, TBL_EVICT_LRU);
	ck_assert_uint_eq(gone, n - fit);
	ck_assert_uint_eq(tbl_rows(t), fit);
	ck_assert_uint_le(tbl_bytes(t), budget);
	uint64_t max_gone = 0, min_kept = UINT64_MAX;
	for (size_t i = 0; i < n; i++) {
		if (present(t, keys[i]))
			min_kept = vers[i] < min_kept ? vers[i] : min_kept;
		else
			max_gone = vers[i] > max_gone ? vers[i] : max_gone;
	}
	ck_assert_uint_le(max_gone, min_kept);
	struct tbl_stats st;
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.evicted, gone);
	// A budget below the fixed part: every row goes.
	ck_assert_uint_eq(tbl_evict_to(t, 0, TBL_EVICT_LRU), n - gone);
	ck_assert_uint_eq(tbl_rows(t), 0);
	ck_assert_uint_eq(tbl_evict_to(t, 0, TBL_EVICT_LRU), 0);
	free(keys);
	free(vers);
	tbl_close(t);
}
END_TEST

// LFU: the keys with the lowest sketch estimates go first, and the
// estimates are the keys' update counts (never below; exact for most keys
// of a sparse sketch). Failure: frequent rows evicted before rare ones.
START_TEST(test_evict_to_lfu)
{
	struct tbl_conf c = tt_conf(16, TBL_OPT_SGD);
	struct tbl     *t = tt_open(&c);
	size_t          n = 600, exact = 0;
	uint64_t        keys[600], vers[600];
	uint32_t        counts[600], est[600];
	for (size_t i = 0; i < n; i++) {
		keys[i]   = tbl_key_hash(i + 99);
		vers[i]   = n - i; // the rare keys are the most recent
		counts[i] = 1 + (uint32_t) ((i * 13) % 10);
	}
	fill(t, keys, vers, counts, n);
	ck_assert_uint_eq(tbl_rows(t), n);
	for (size_t i = 0; i < n; i++) {
		est[i] = tbl__sketch_est(t, keys[i]);
		ck_assert_uint_ge(est[i], counts[i]);
		exact += est[i] == counts[i];
	}
	ck_assert_uint_ge(exact, n * 95 / 100);
	size_t gone = tbl_evict_to(t, tbl_bytes(t) * 2 / 3, TBL_EVICT_LFU);
	ck_assert_uint_gt(gone, 0);
	ck_assert_uint_eq(gone, n - tbl_rows(t));
	uint32_t max_gone = 0, min_kept = UINT32_MAX;
	for (size_t i = 0; i < n; i++) {
		if (present(t, keys[i]))
			min_kept = est[i] < min_kept ? est[i] : min_kept;
		else
			max_gone = est[i] > max_gone ? est[i] : max_gone;
	}
	ck_assert_uint_le(max_gone, min_kept);
	tbl_close(t);
}
END_TEST

// Many single removals (backward shift, the last row moved into the hole)
// and one compaction keep every remaining key findable with its own row
// and every removed key gone. Failure: a probe run broken by a removal.
START_TEST(test_remove_keeps_index)
{
	struct tbl_conf c = tt_conf(2, TBL_OPT_SGD);
	c.evict_after     = 1;
	struct tbl *t     = tt_open(&c);
	size_t      n     = 100000;
	uint64_t   *keys = malloc(n * 8), *vers = malloc(n * 8);
	float      *out = malloc(n * 2 * 4), *ref = malloc(n * 2 * 4);
	for (size_t i = 0; i < n; i++) {
		keys[i] = tbl_key_hash(i ^ 0xabcdef) >> (i % 7);
		vers[i] = 1 + (tbl_key_hash(i) % 100);
	}
	fill(t, keys, vers, NULL, n);
	tbl_lookup(t, keys, n, ref);
	// A hundredth each (versions 1..50): removed one at a time.
	for (uint64_t v = 3; v <= 52; v++)
		tbl_evict_idle(t, v);
	for (int pass = 0; pass < 2; pass++) {
		size_t kept = 0;
		for (size_t i = 0; i < n; i++) {
			bool want = vers[i] >= (pass == 0 ? 51 : 76);
			ck_assert(present(t, keys[i]) == want);
			kept += want;
		}
		ck_assert_uint_eq(tbl_rows(t), kept);
		tbl_lookup(t, keys, n, out);
		for (size_t i = 0; i < n; i++)
			if (vers[i] >= (pass == 0 ? 51u : 76u))
				ck_assert(
				    memcmp(out + 2 * i, ref + 2 * i, 8) == 0);
		tbl_evict_idle(t, 77); // half the rest at once: compaction
	}
	free(keys);
	free(vers);
	free(out);
	free(ref);
	tbl_close(t);
}
END_TEST

#define NB TBL_EVICT_BUCKETS

// hist_rows: the rows hist counts in bucket b for a shard whose rows
// weigh w each, asserting that w divides it.
static uint64_t
hist_rows(const uint64_t *hist, uint32_t b, uint64_t w)
{
	ck_assert_uint_eq(hist[b] % w, 0);
	return hist[b] / w;
}

// tbl_evict_hist (LRU): each row lands in NB - 1 - its age behind newest
// (too old: bucket 0; newer: NB - 1) weighed by its share of the shard's
// row memory, at least its record; two shards (other dims) add into one
// histogram. Failure: buckets by raw touch (not comparable across
// shards), or bytes that ignore the rows' size.
START_TEST(test_evict_hist_lru)
{
	struct tbl_conf ca = tt_conf(4, TBL_OPT_SGD);
	struct tbl_conf cb = tt_conf(16, TBL_OPT_ADAGRAD);
	struct tbl     *a = tt_open(&ca), *b = tt_open(&cb);
	uint64_t        keys[211], vers[211], newest = 70000;
	uint64_t       *hist = calloc(NB, 8);
	for (size_t i = 0; i < 211; i++) {
		keys[i] = tbl_key_hash(i + 5);
		vers[i] = i < 200 ? newest - i % 50 : i < 210 ? 1 : newest + 5;
	}
	fill(a, keys, vers, NULL, 211);
	for (size_t i = 0; i < 100; i++)
		vers[i] = newest - 10;
	fill(b, keys, vers, NULL, 100); // the same keys: other shards
	ck_assert_uint_eq(tbl_evict_hist(a, TBL_EVICT_LRU, newest, hist), 211);
	uint64_t tot = 0, wa, wb;
	for (uint32_t k = 0; k < NB; k++)
		tot += hist[k];
	ck_assert_uint_eq(tot % 211, 0);
	wa = tot / 211;
	ck_assert_uint_ge(wa, a->rec);
	ck_assert_uint_ge(wa * 211 + 211, tbl_bytes(a) - tbl__bytes_at(a, 0));
	ck_assert_uint_eq(tbl_evict_hist(b, TBL_EVICT_LRU, newest, hist), 100);
	tot = 0;
	for (uint32_t k = 0; k < NB; k++)
		tot += hist[k];
	wb = (tot - wa * 211) / 100;
	ck_assert_uint_eq(wb * 100, tot - wa * 211);
	ck_assert_uint_ge(wb, b->rec);
	ck_assert_uint_gt(b->rec, a->rec);
	ck_assert_uint_eq(hist_rows(hist, 0, wa), 10);
	ck_assert_uint_eq(hist_rows(hist, NB - 1, wa), 4 + 1);
	for (uint32_t age = 1; age < 50; age++) {
		uint64_t want = 4 * wa + (age == 10 ? 100 * wb : 0);
		ck_assert_uint_eq(hist[NB - 1 - age], want);
	}
	ck_assert_uint_eq(hist[NB - 51], 0);
	free(hist);
	tbl_close(a);
	tbl_close(b);
}
END_TEST

// tbl_evict_below (LRU): the rows below the bucket go, and of those in it
// the share asked, rounded up; bucket NB takes every row. Failure: a
// share of the wrong bucket, rows above it touched, the index broken.
START_TEST(test_evict_below_lru)
{
	struct tbl_conf c = tt_conf(4, TBL_OPT_ADAGRAD);
	struct tbl     *t = tt_open(&c);
	uint64_t        keys[1000], vers[1000], newest = 500;
	for (size_t i = 0; i < 1000; i++) {
		keys[i] = tbl_key_hash(i * 77 + 1);
		vers[i] = newest - i % 10; // ages 0..9, 100 rows each
	}
	fill(t, keys, vers, NULL, 1000);
	// Ages 6..9 go, and a quarter of age 5.
	ck_assert_uint_eq(
	    tbl_evict_below(t, TBL_EVICT_LRU, newest, NB - 6, 0.25), 425);
	size_t at5 = 0;
	for (size_t i = 0; i < 1000; i++) {
		size_t age = i % 10;
		if (age == 5)
			at5 += !present(t, keys[i]);
		else
			ck_assert(present(t, keys[i]) == (age < 5));
	}
	ck_assert_uint_eq(at5, 25);
	ck_assert_uint_eq(tbl_rows(t), 575);
	struct tbl_stats st;
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.evicted, 425);
	// A sliver rounds up to a row; share 0 of the lowest: none.
	ck_assert_uint_eq(
	    tbl_evict_below(t, TBL_EVICT_LRU, newest, NB - 6, 0.001), 1);
	ck_assert_uint_eq(tbl_evict_below(t, TBL_EVICT_LRU, newest, 0, 0), 0);
	ck_assert_uint_eq(tbl_evict_below(t, TBL_EVICT_LRU, newest, NB, 0),
	    574);
	ck_assert_uint_eq(tbl_rows(t), 0);
	tbl_close(t);
}
END_TEST

// LFU: rows bucket by the sketch's estimate of their key's updates, and
// tbl_evict_below removes exactly those estimated below the bucket,
// whatever their touch. Failure: the estimate not used, or recent rare
// rows kept over older frequent ones.
START_TEST(test_evict_below_lfu)
{
	struct tbl_conf c = tt_conf(8, TBL_OPT_SGD);
	struct tbl     *t = tt_open(&c);
	uint64_t        keys[500], vers[500];
	uint32_t        counts[500], est[500];
	uint64_t       *hist = calloc(NB, 8), want[64] = { 0 };
	for (size_t i = 0; i < 500; i++) {
		keys[i]   = tbl_key_hash(i + 4242);
		vers[i]   = 1000 - i; // the rare keys are the most recent
		counts[i] = 1 + (uint32_t) ((i * 7) % 12);
	}
	fill(t, keys, vers, counts, 500);
	tbl_evict_hist(t, TBL_EVICT_LFU, 1000, hist);
	uint64_t tot = 0;
	for (uint32_t k = 0; k < NB; k++)
		tot += hist[k];
	uint64_t w = tot / 500;
	for (size_t i = 0; i < 500; i++) {
		est[i] = tbl__sketch_est(t, keys[i]);
		ck_assert_uint_ge(est[i], counts[i]);
		ck_assert_uint_lt(est[i], 64);
		want[est[i]]++;
	}
	for (uint32_t k = 0; k < 64; k++)
		ck_assert_uint_eq(hist_rows(hist, k, w), want[k]);
	size_t below = want[0] + want[1] + want[2] + want[3] + want[4];
	ck_assert_uint_eq(tbl_evict_below(t, TBL_EVICT_LFU, 1000, 5, 0),
	    below);
	for (size_t i = 0; i < 500; i++)
		ck_assert(present(t, keys[i]) == (est[i] >= 5));
	free(hist);
	tbl_close(t);
}
END_TEST

Suite *
suite_evict(void)
{
	Suite *s  = suite_create("evict");
	TCase *tc = tcase_create("evict");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_evict_idle_counts);
	tcase_add_test(tc, test_evict_to_lru);
	tcase_add_test(tc, test_evict_to_lfu);
	tcase_add_test(tc, test_remove_keeps_index);
	tcase_add_test(tc, test_evict_hist_lru);
	tcase_add_test(tc, test_evict_below_lru);
	tcase_add_test(tc, test_evict_below_lfu);
	suite_add_tcase(s, tc);
	return s;
}
