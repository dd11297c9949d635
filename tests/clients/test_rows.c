// test_rows.c — the sparse tables' client side without servers: table
// specs checked (tables.c), the routing read from a map's table_shards,
// and a batch's keys de-duplicated, routed, summed and scattered back
// (rows_dedup.c), and the rows calls' argument checks (rows.c).
#include <stdio.h>
#include <string.h>

#include "clients_tests.h"
#include "fake.h"
#include "tbl/tbl.h"

static const uint64_t          lens[1] = { 8 };
static const struct fake_shard one[1]  = { { 0, 0, 8, 0 } };

// two_tables gives c tables "a" (dim 2, S ranges from id 0) and "b" (dim
// 3, T ranges after them) as declare and a map would.
static void
two_tables(ferry_client *c, uint32_t s, uint32_t t)
{
	struct ferry_table_spec sp[2] = {
		{ .name = "a", .dim = 2 },
		{ .name = "b", .dim = 3, .codec_pull = "q8" },
	};
	Pswire__TableDesc td[2];
	ck_assert_int_eq(ferry__tables_take(c, sp, 2, td), FERRY_OK);
	c->tables[0].shards = s;
	c->tables[0].first  = 0;
	c->tables[1].shards = t;
	c->tables[1].first  = s;
	c->n_tshards        = s + t;
}

// check_spec asserts that spec (as table 1 after a good table 0) is
// refused naming `word`.
static void
check_spec(ferry_client *c, struct ferry_table_spec bad, const char *word)
{
	struct ferry_table_spec sp[2] = { { .name = "ok", .dim = 4 }, bad };
	Pswire__TableDesc       td[2];
	c->err[0] = '\0';
	ck_assert_int_eq(ferry__tables_take(c, sp, 2, td), FERRY_EINVAL);
	ck_assert_msg(strstr(c->err, word) != NULL, "err '%s' lacks '%s'",
	    c->err, word);
	ck_assert_msg(strstr(c->err, "table 1") != NULL, "err '%s'", c->err);
}

START_TEST(test_spec_check)
{
	ferry_client *c = fake_client(NULL, NULL, lens, 1, 1, one, 1);
	struct ferry_table_spec b = { .name = "t", .dim = 0 };
	check_spec(c, b, "dim");
	b.dim = 4097;
	check_spec(c, b, "dim");
	b = (struct ferry_table_spec) { .name = "t", .dim = 8, .init = 3 };
	check_spec(c, b, "init");
	b = (struct ferry_table_spec) { .name = "t",
		.dim                          = 8,
		.optimizer                    = "rmsprop" };
	check_spec(c, b, "optimizer");
	b = (struct ferry_table_spec) { .name = "t",
		.dim                          = 8,
		.admit_prob                   = 1.5 };
	check_spec(c, b, "admit_prob");
	b = (struct ferry_table_spec) { .name = "t", .dim = 8, .lr = -1 };
	check_spec(c, b, "lr");
	b = (struct ferry_table_spec) { .name = "t", .dim = 8, .beta1 = 1 };
	check_spec(c, b, "beta1");
	b = (struct ferry_table_spec) { .name = "t",
		.dim                          = 8,
		.codec_push                   = "q4" };
	check_spec(c, b, "codec_push");
	b = (struct ferry_table_spec) { .name = "t",
		.dim                          = 8,
		.codec_pull                   = "topk:0.1" };
	check_spec(c, b, "codec_pull");
	b = (struct ferry_table_spec) { .name = "ok", .dim = 8 };
	check_spec(c, b, "name");
	b = (struct ferry_table_spec) { .name = NULL, .dim = 8 };
	check_spec(c, b, "name");

	// Defaults travel as "" whichever way they are spelled.
	struct ferry_table_spec sp[2] = {
		{ .name         = "x",
		    .dim        = 4,
		    .optimizer  = "sgd",
		    .codec_push = "none",
		    .codec_pull = "bf16" },
		{ .name         = "y",
		    .dim        = 16,
		    .optimizer  = "adagrad",
		    .admit_prob = 0.25,
		    .shards     = 3 },
	};
	Pswire__TableDesc td[2];
	ck_assert_int_eq(ferry__tables_take(c, sp, 2, td), FERRY_OK);
	ck_assert_str_eq(td[0].optim, "");
	ck_assert_str_eq(td[0].codec_push, "");
	ck_assert_str_eq(td[0].codec_pull, "bf16");
	ck_assert_str_eq(td[1].optim, "adagrad");
	ck_assert_uint_eq(td[1].dim, 16);
	ck_assert_uint_eq(td[1].shards, 3);
	ck_assert_float_eq(td[1].admit_prob, 0.25f);
	ck_assert_uint_eq(c->n_tables, 2);
	ck_assert_int_eq(c->tables[0].cpull.id, COMP_BF16);
	ck_assert_uint_eq(c->tables[0].cpull.bucket, 4); // a scale per row
	ferry_client_close(c);
}
END_TEST

// route_map fills pl (on the caller's stack) with n ranges per table of
// counts cnt[0..nt), on servers round robin over 2.
static void
route_map(Pswire__Placement *pl, Pswire__ShardInfo *si, Pswire__ShardInfo **sp,
    const uint32_t *cnt, size_t nt, uint64_t epoch)
{
	size_t id = 0;
	for (size_t t = 0; t < nt; t++) {
		for (uint32_t i = 0; i < cnt[t]; i++, id++) {
			pswire__shard_info__init(&si[id]);
			si[id].tensor = (uint32_t) t;
			si[id].index  = i;
			si[id].offset = tbl_range_start(i, cnt[t]);
			si[id].len    = tbl_range_start(i + 1, cnt[t]) -
			    si[id].offset;
			si[id].server = (uint32_t) (id % 2);
			sp[id]        = &si[id];
		}
	}
	pl->n_table_shards = id;
	pl->table_shards   = sp;
	pl->epoch          = epoch;
}

START_TEST(test_route)
{
	static const struct fake_shard two[2] = { { 0, 0, 4, 0 },
		{ 0, 4, 4, 1 } };
	ferry_client      *c    = fake_client(NULL, NULL, lens, 1, 2, two, 2);
	Pswire__Placement *held = c->pl, pl = *held;
	Pswire__ShardInfo  si[8], *sp[8];
	uint32_t           cnt[2] = { 3, 2 };
	two_tables(c, 1, 1);
	c->n_tshards = 0;
	route_map(&pl, si, sp, cnt, 2, 5);
	c->pl = &pl;
	ck_assert_int_eq(ferry__tables_route(c), FERRY_OK);
	ck_assert_uint_eq(c->tables[0].shards, 3);
	ck_assert_uint_eq(c->tables[0].first, 0);
	ck_assert_uint_eq(c->tables[1].shards, 2);
	ck_assert_uint_eq(c->tables[1].first, 3);
	ck_assert_uint_eq(c->n_tshards, 5);
	// A later map moves range 1 of table b: routed to its new server.
	si[4].server = 0;
	pl.epoch     = 6;
	ck_assert_int_eq(ferry__tables_route(c), FERRY_OK);
	ck_assert_uint_eq(c->pl->table_shards[4]->server, 0);
	// A map that is not the contract's: refused, naming what.
	si[1].offset++;
	pl.epoch = 7;
	ck_assert_int_eq(ferry__tables_route(c), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "not hash range"));
	si[1].offset--;
	si[3].index = 1;
	ck_assert_int_eq(ferry__tables_route(c), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "out of order"));
	si[3].index       = 0;
	pl.n_table_shards = 3; // table b's ranges missing
	ck_assert_int_eq(ferry__tables_route(c), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "table 'b'"));
	c->pl = held;
	ferry_client_close(c);
}
END_TEST

START_TEST(test_dedup)
{
	ferry_client *c = fake_client(NULL, NULL, lens, 1, 1, one, 1);
	two_tables(c, 4, 3);
	// Table a: keys 7, 9, 7, 11, 9, 7; table b: 7 (not a's 7), 7.
	const uint64_t ka[6] = { 7, 9, 7, 11, 9, 7 }, kb[2] = { 7, 7 };
	float          ga[12], gb[6], ra[12], rb[6];
	for (int i = 0; i < 12; i++) {
		ga[i] = (float) (i + 1);
	}
	for (int i = 0; i < 6; i++) {
		gb[i] = (float) (100 + i);
	}
	struct ferry_rows b[2] = {
		{ .table = 0, .keys = ka, .n = 6, .grads = ga, .rows = ra },
		{ .table = 1, .keys = kb, .n = 2, .grads = gb, .rows = rb },
	};
	struct ferry__dedup *d = &c->dd_push;
	ck_assert_int_eq(ferry__dedup_build(d, c->tables, 7, b, 2), FB_OK);
	ck_assert_uint_eq(d->n, 4);
	ck_assert_uint_eq(d->n_occ, 8);
	// First occurrences in order, with their counts and shards.
	const uint64_t keys[4] = { 7, 9, 11, 7 };
	const uint32_t cnts[4] = { 3, 2, 1, 2 }, tabs[4] = { 0, 0, 0, 1 };
	size_t         in_shards = 0;
	for (size_t u = 0; u < 4; u++) {
		ck_assert_uint_eq(d->key[u], keys[u]);
		ck_assert_uint_eq(d->count[u], cnts[u]);
		ck_assert_uint_eq(d->table[u], tabs[u]);
		const struct ferry__table *t = &c->tables[tabs[u]];
		ck_assert_uint_eq(d->shard[u],
		    t->first + tbl_key_shard(keys[u], t->shards));
	}
	// Grouped by shard, first occurrence order inside each.
	for (size_t i = 0; i < 7; i++) {
		for (size_t k = 0; k < d->sh_n[i]; k++) {
			uint32_t u = d->order[d->sh_first[i] + k];
			ck_assert_uint_eq(d->shard[u], i);
			if (k > 0) {
				ck_assert_uint_lt(
				    d->order[d->sh_first[i] + k - 1], u);
			}
			in_shards++;
		}
	}
	ck_assert_uint_eq(in_shards, 4);
	ck_assert_uint_eq(d->floats, 3 * 2 + 3);
	// Sums: a/7 = g0 + g2 + g5, a/9 = g1 + g4, a/11 = g3, b/7 = both.
	ferry__dedup_sum(d, c->tables, b, 2);
	const float *r7 = d->rows + d->pos[0], *r9 = d->rows + d->pos[1];
	const float *r11 = d->rows + d->pos[2], *b7 = d->rows + d->pos[3];
	ck_assert_float_eq(r7[0], 1 + 5 + 11);
	ck_assert_float_eq(r7[1], 2 + 6 + 12);
	ck_assert_float_eq(r9[0], 3 + 9);
	ck_assert_float_eq(r9[1], 4 + 10);
	ck_assert_float_eq(r11[0], 7);
	ck_assert_float_eq(r11[1], 8);
	for (int k = 0; k < 3; k++) {
		ck_assert_float_eq(b7[k], (float) (100 + k + 103 + k));
	}
	// Scatter: every occurrence gets its distinct row.
	ferry__dedup_scatter(d, c->tables, b, 2);
	for (int i = 0; i < 6; i++) {
		const float *want = d->rows + d->pos[d->occ[i]];
		ck_assert_float_eq(ra[2 * i], want[0]);
		ck_assert_float_eq(ra[2 * i + 1], want[1]);
	}
	ck_assert_float_eq(ra[0], ra[4]);
	ck_assert_float_eq(rb[0], rb[3]);
	ck_assert_float_eq(rb[2], b7[2]);
	// The same batch again allocates nothing (grow-only buffers).
	void *m = d->map, *rw = d->rows, *ky = d->key;
	ck_assert_int_eq(ferry__dedup_build(d, c->tables, 7, b, 2), FB_OK);
	ck_assert_ptr_eq(d->map, m);
	ck_assert_ptr_eq(d->rows, rw);
	ck_assert_ptr_eq(d->key, ky);
	// An empty batch: nothing, every shard empty.
	ck_assert_int_eq(ferry__dedup_build(d, c->tables, 7, NULL, 0), FB_OK);
	ck_assert_uint_eq(d->n, 0);
	for (size_t i = 0; i < 7; i++) {
		ck_assert_uint_eq(d->sh_n[i], 0);
	}
	ferry_client_close(c);
}
END_TEST

START_TEST(test_dedup_many)
{
	// 20000 keys, 5000 distinct, through the map's growth: each distinct
	// key once, counts summing to the batch.
	ferry_client *c = fake_client(NULL, NULL, lens, 1, 1, one, 1);
	two_tables(c, 4, 3);
	static uint64_t k[20000];
	for (size_t i = 0; i < 20000; i++) {
		k[i] = (i * 7919u) % 5000u * 0x9e3779b97f4a7c15ull;
	}
	struct ferry_rows b = { .table = 0, .keys = k, .n = 20000 };
	ck_assert_int_eq(ferry__dedup_build(&c->dd_pull, c->tables, 7, &b, 1),
	    FB_OK);
	ck_assert_uint_eq(c->dd_pull.n, 5000);
	uint64_t sum = 0;
	for (size_t u = 0; u < c->dd_pull.n; u++) {
		sum += c->dd_pull.count[u];
		ck_assert_uint_eq(c->dd_pull.count[u], 4);
	}
	ck_assert_uint_eq(sum, 20000);
	ferry_client_close(c);
}
END_TEST

START_TEST(test_rows_args)
{
	ferry_client *c   = fake_client(NULL, NULL, lens, 1, 1, one, 1);
	uint64_t      key = 1;
	float         row[2];
	two_tables(c, 1, 1);
	// fake_client declared without a scheduler: calls need `declared`.
	c->declared             = 1;
	struct ferry_rows bad[] = {
		{ .table = 2, .keys = &key, .n = 1, .rows = row },
		{ .table = 0, .keys = NULL, .n = 1, .rows = row },
		{ .table = 0, .keys = &key, .n = 1, .rows = NULL },
	};
	const char *words[] = { "unknown table 2", "keys is NULL",
		"rows is NULL" };
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(ferry_client_rows_pull(c, &bad[i], 1),
		    FERRY_EINVAL);
		ck_assert_msg(strstr(c->err, words[i]) != NULL, "'%s'",
		    c->err);
	}
	struct ferry_rows g = { .table = 0, .keys = &key, .n = 1 };
	ck_assert_int_eq(ferry_client_rows_push_pull(c, &g, 1, 1, NULL, 0),
	    FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(c->err, "grads is NULL"));
	g.grads = row;
	ck_assert_int_eq(ferry_client_rows_push_pull(c, &g, 1, 0, NULL, 0),
	    FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(c->err, "n_samples"));
	ck_assert_int_eq(ferry_client_step(c, NULL, 1, NULL, &g, 1, NULL, 0),
	    FERRY_EINVAL);
	struct ferry_table_stats st;
	ck_assert_int_eq(ferry_client_table_stats(c, 1, &st), FERRY_OK);
	ck_assert_uint_eq(st.keys_pulled, 0);
	ck_assert_int_eq(ferry_client_table_stats(c, 2, &st), FERRY_EINVAL);
	c->declared = 0;
	ck_assert_int_eq(ferry_client_rows_pull(c, &g, 1), FERRY_ESTATE);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_rows(void)
{
	Suite *s  = suite_create("rows");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_spec_check);
	tcase_add_test(tc, test_route);
	tcase_add_test(tc, test_dedup);
	tcase_add_test(tc, test_dedup_many);
	tcase_add_test(tc, test_rows_args);
	suite_add_tcase(s, tc);
	return s;
}
