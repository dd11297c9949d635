// test_store.c — tbl_open/close, the index under inserts, tbl_bytes and
// tbl_rows, tbl_each, and the key routing of <tbl/tbl.h>.
#include <stdlib.h>
#include <string.h>

#include "tables_tests.h"
#include "tbl_impl.h"

// tbl_key_shard puts every key in the range tbl_range_start bounds, for
// many shard counts. Failure: a client and a server would disagree on a
// key's shard, or a key would fall between two ranges.
START_TEST(test_key_shard_ranges)
{
	static const uint32_t shards[] = { 1, 2, 3, 5, 7, 8, 13, 64, 100, 1000,
		65537, 4000000000u };
	for (size_t si = 0; si < sizeof(shards) / sizeof(shards[0]); si++) {
		uint32_t S = shards[si];
		ck_assert_uint_eq(tbl_range_start(0, S), 0);
		ck_assert_uint_eq(tbl_range_start(S, S), UINT64_C(1) << 32);
		for (uint64_t k = 0; k < 20000; k++) {
			uint64_t key = k * 0x9e3779b97f4a7c15ULL + si;
			uint32_t i   = tbl_key_shard(key, S);
			uint64_t top = tbl_key_hash(key) >> 32;
			ck_assert_uint_lt(i, S);
			ck_assert_uint_ge(top, tbl_range_start(i, S));
			ck_assert_uint_lt(top, tbl_range_start(i + 1, S));
		}
		// Range edges: the first value of each range routes to it.
		for (uint32_t i = 0; i < S && i < 1000; i++) {
			uint64_t st = tbl_range_start(i, S);
			ck_assert_uint_eq(
			    (uint32_t) ((st * (uint64_t) S) >> 32), i);
			if (st > 0)
				ck_assert_uint_eq(
				    (uint32_t) (((st - 1) * (uint64_t) S) >>
				        32),
				    i - 1);
		}
	}
}
END_TEST

// Row r's chunk is r / chunk_rows, computed without dividing, for every
// record size and rows up to 2^31. Failure: rows would overlap or land
// outside their chunk.
START_TEST(test_chunk_of_exact)
{
	for (uint32_t dim = 1; dim <= 4096; dim = dim * 3 + 1) {
		for (int o = TBL_OPT_SGD; o <= TBL_OPT_FTRL; o++) {
			struct tbl_conf c  = tt_conf(dim, (enum tbl_optim) o);
			struct tbl     *t  = tt_open(&c);
			size_t          cr = t->chunk_rows;
			ck_assert_uint_ge(cr, 1);
			ck_assert_uint_le(cr * t->rec, TBL_CHUNK_BYTES);
			uint64_t x = dim * 31 + (uint64_t) o;
			for (int i = 0; i < 20000; i++) {
				x          = tbl_key_hash(x + 1);
				size_t r   = (size_t) (x >> 33); // < 2^31
				size_t k   = r / cr;
				size_t e[] = { r, k * cr, k * cr + cr - 1 };
				for (int j = 0; j < 3; j++)
					if (e[j] < TBL_MAX_ROWS)
						ck_assert_uint_eq(
						    tbl__chunk_of(t, e[j]),
						    e[j] / cr);
			}
			ck_assert_uint_eq(tbl__chunk_of(t, TBL_MAX_ROWS - 1),
			    (TBL_MAX_ROWS - 1) / cr);
			tbl_close(t);
		}
	}
}
END_TEST

// An empty shard: no rows, a little memory; NULL closes. Failure: open
// or close broke.
START_TEST(test_open_close)
{
	struct tbl_conf c = tt_conf(16, TBL_OPT_ADAGRAD);
	struct tbl     *t = tt_open(&c);
	ck_assert_uint_eq(tbl_rows(t), 0);
	ck_assert_uint_lt(tbl_bytes(t), 64 * 1024);
	struct tbl_stats st;
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.rows, 0);
	ck_assert_uint_eq(st.bytes, tbl_bytes(t));
	tbl_close(t);
	tbl_close(NULL);
}
END_TEST

static void
count_row(void *arg, uint64_t key, const float *row, const float *state)
{
	(void) row;
	(void) state;
	uint64_t *acc = arg;
	acc[0]++;
	acc[1] += key;
}

// Many inserts (index growth, chunk 0 growth, full chunks): every key is
// found with its row, tbl_each visits each once. Failure: a rehash or a
// new chunk lost rows.
START_TEST(test_insert_many)
{
	struct tbl_conf c = tt_conf(3, TBL_OPT_SGD);
	c.init            = TBL_INIT_ZEROS;
	struct tbl *t     = tt_open(&c);
	size_t      n     = 200000;
	uint64_t   *keys  = malloc(n * 8);
	float      *g     = malloc(n * 3 * 4);
	float      *out   = malloc(n * 3 * 4);
	uint64_t    sum   = 0;
	for (size_t i = 0; i < n; i++) {
		keys[i] = i * 7919 + 3;
		sum += keys[i];
		for (int j = 0; j < 3; j++)
			g[i * 3 + j] = -(float) (i % 1000) - (float) j;
	}
	for (size_t b = 0; b < n; b += 1000)
		ck_assert_int_eq(
		    tbl_apply(t, keys + b, 1000, g + b * 3, NULL, 1, 1, 1), 0);
	ck_assert_uint_eq(tbl_rows(t), n);
	tbl_lookup(t, keys, n, out);
	for (size_t i = 0; i < n * 3; i++)
		ck_assert(out[i] == -g[i]);
	uint64_t acc[2] = { 0, 0 };
	tbl_each(t, count_row, acc);
	ck_assert_uint_eq(acc[0], n);
	ck_assert_uint_eq(acc[1], sum);
	struct tbl_stats st;
	tbl_get_stats(t, &st);
	ck_assert_uint_eq(st.admitted, n);
	ck_assert_uint_eq(st.lookups, n);
	ck_assert_uint_eq(st.hits, n);
	free(keys);
	free(g);
	free(out);
	tbl_close(t);
}
END_TEST

// 1M rows of dim 16 with Adagrad take at most 1.3x their raw bytes
// (rows, index, everything tbl_bytes counts). Failure: the layout grew.
START_TEST(test_bytes_per_row)
{
	struct tbl_conf c = tt_conf(16, TBL_OPT_ADAGRAD);
	struct tbl     *t = tt_open(&c);
	size_t          n = 1000000, B = 4096;
	uint64_t        keys[4096];
	static float    g[4096 * 16];
	for (size_t b = 0; b < n; b += B) {
		size_t m = n - b < B ? n - b : B;
		for (size_t i = 0; i < m; i++)
			keys[i] = (b + i) * 0x9e3779b97f4a7c15ULL;
		ck_assert_int_eq(tbl_apply(t, keys, m, g, NULL, 1, 0.1f, 1),
		    0);
	}
	ck_assert_uint_eq(tbl_rows(t), n);
	double raw = (double) n * (double) tbl_row_bytes(&c);
	ck_assert_msg(tbl_bytes(t) <= 1.3 * raw, "bytes %zu raw %.0f",
	    tbl_bytes(t), raw);
	tbl_close(t);
}
END_TEST

Suite *
suite_store(void)
{
	Suite *s  = suite_create("store");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_key_shard_ranges);
	tcase_add_test(tc, test_chunk_of_exact);
	tcase_add_test(tc, test_open_close);
	tcase_add_test(tc, test_insert_many);
	tcase_add_test(tc, test_bytes_per_row);
	suite_add_tcase(s, tc);
	return s;
}
