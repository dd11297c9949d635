// test_rows_cluster.c — the sparse tables end to end against an
// in-process cluster (tests/support/cluster.h): rows created from (seed,
// table, key) alone, identical on every trainer; two sync trainers
// pushing overlapping keys leave exactly the rows of one trainer pushing
// the union of their batches (SGD and Adagrad), through ferry_client_step
// beside a dense tensor; bad row gradients refused with nothing applied.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "clients_tests.h"
#include "cluster.h"
#include "ferry/ferry.h"
#include "tbl/tbl.h"

#define DIM 4
#define NK 12   // keys 1..NK
#define BATCH 6 // keys per rank per step
#define STEPS 3
#define SEED 4242

// The job's two tables: SGD (uniform init) and row-wise Adagrad (normal).
static const struct ferry_table_spec specs[2] = {
	{ .name         = "sgd",
	    .dim        = DIM,
	    .init       = FERRY_ROW_UNIFORM,
	    .init_scale = 0.05f,
	    .lr         = 0.5 },
	{ .name         = "ada",
	    .dim        = DIM,
	    .init       = FERRY_ROW_NORMAL,
	    .init_scale = 0.01f,
	    .optimizer  = "adagrad",
	    .lr         = 0.1 },
};

// One trainer: rank, whether it pushes both ranks' batches (the union
// job's single trainer) and whether it steps with ferry_client_step.
struct rt {
	const char *url;
	int         rank, ranks, uni, step;
	float       init[2][NK][DIM]; // rows before any push
	float       rows[2][NK][DIM]; // rows after the steps
	int         rv;
	char        err[256];
};

// batch fills rank r's keys and gradients at step k: overlapping keys, a
// repeat inside the batch, and dyadic gradients (sums exact in any order).
static void
batch(int r, int k, uint64_t *keys, float *g)
{
	for (int i = 0; i < BATCH; i++) {
		keys[i] = (uint64_t) ((k * 3 + i * (r + 1)) % (NK - 2) + 1);
		for (int d = 0; d < DIM; d++) {
			g[i * DIM + d] =
			    (float) (((r + 1) * (i + 1) * (k + 2) + d) % 7 -
			        3) /
			    8.0f;
		}
	}
	keys[BATCH - 1] = keys[0]; // a repeat: summed by the client
}

// pull_all pulls keys 1..NK of both tables into out.
static int
pull_all(ferry_client *c, float out[2][NK][DIM])
{
	uint64_t          keys[NK];
	struct ferry_rows p[2];
	for (int i = 0; i < NK; i++) {
		keys[i] = (uint64_t) i + 1;
	}
	for (uint32_t t = 0; t < 2; t++) {
		p[t] = (struct ferry_rows) { .table = t,
			.keys                       = keys,
			.n                          = NK,
			.rows                       = &out[t][0][0] };
	}
	return ferry_client_rows_pull(c, p, 2);
}

// train runs one rt's steps: each pushes its batch (or the union of
// both ranks') into both tables and pulls the same keys back.
static int
train(struct rt *a, ferry_client *c)
{
	float             w[8] = { 0 }, gd[8] = { 0 };
	float            *wp[1] = { w };
	const float      *gp[1] = { gd };
	uint64_t          keys[2 * BATCH];
	float             g[2 * BATCH * DIM], out[2][2 * BATCH * DIM];
	struct ferry_rows push[2], pull[2];
	int               rv;
	if (a->step && a->rank == 0 &&
	    (rv = ferry_client_init_weights(c, gp)) != FERRY_OK) {
		return rv;
	}
	if (a->step && (rv = ferry_client_pull(c, wp)) != FERRY_OK) {
		return rv;
	}
	if ((rv = pull_all(c, a->init)) != FERRY_OK) {
		return rv;
	}
	for (int k = 0; k < STEPS; k++) {
		size_t n = BATCH;
		batch(a->uni ? 0 : a->rank, k, keys, g);
		if (a->uni) {
			batch(1, k, keys + BATCH, g + BATCH * DIM);
			n = 2 * BATCH;
		}
		for (uint32_t t = 0; t < 2; t++) {
			push[t] = (struct ferry_rows) { .table = t,
				.keys                          = keys,
				.n                             = n,
				.grads                         = g };
			pull[t] = (struct ferry_rows) { .table = t,
				.keys                          = keys,
				.n                             = n,
				.rows                          = out[t] };
		}
		uint32_t ns = (uint32_t) (10 * (a->uni ? 2 : 1));
		rv          = a->step
		             ? ferry_client_step(c, gp, ns, wp, push, 2, pull, 2)
		             : ferry_client_rows_push_pull(c, push, 2, ns, pull, 2);
		if (rv != FERRY_OK) {
			return rv;
		}
		// The repeated key (keys[0] again last in a batch) got the
		// same row twice.
		if (memcmp(out[0], out[0] + (BATCH - 1) * DIM, DIM * 4) != 0) {
			return FERRY_EPROTO;
		}
	}
	return pull_all(c, a->rows);
}

static void *
rt_main(void *arg)
{
	struct rt               *a  = arg;
	struct ferry_opts        o  = FERRY_OPTS_INIT;
	ferry_client            *c  = NULL;
	struct ferry_tensor_spec ts = { .name = "dense", .len = 8 };
	o.scheduler_url             = a->url;
	o.rank                      = a->rank;
	o.timeout_ms                = 20000;
	o.seed                      = SEED;
	if ((a->rv = ferry_client_open(&o, &c)) == FERRY_OK &&
	    (a->rv = ferry_client_declare_tables(c, &ts, 1, specs, 2)) ==
	        FERRY_OK) {
		a->rv = train(a, c);
	}
	snprintf(a->err, sizeof(a->err), "%s",
	    c ? ferry_client_last_error(c) : "open failed");
	if (c != NULL && a->rv != FERRY_OK) {
		(void) ferry_client_leave(c); // the other rank stops waiting
	}
	ferry_client_close(c);
	return NULL;
}

// run_job runs n trainers of a fresh 2-server cluster to their end.
static void
run_job(struct rt *a, int n)
{
	struct cluster cl;
	pthread_t      th[2];
	cluster_open(&cl, n, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < n; r++) {
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].rank  = r;
		a[r].ranks = n;
		pthread_create(&th[r], NULL, rt_main, &a[r]);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
	}
	cluster_stop(&cl);
	for (int r = 0; r < n; r++) {
		ck_assert_msg(a[r].rv == FERRY_OK, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
}

START_TEST(test_rows_sync_union)
{
	static struct rt two[2], one[1];
	memset(two, 0, sizeof(two));
	memset(one, 0, sizeof(one));
	two[0].step = two[1].step = 1; // dense and rows in one step
	one[0].uni                = 1;
	run_job(two, 2);
	run_job(one, 1);

	// Initial rows: the same on every trainer and every job, and
	// tbl_row_init's (seed, table, key) rows bit for bit.
	for (uint32_t t = 0; t < 2; t++) {
		struct tbl_conf conf    = { .dim = DIM,
			   .table                = t,
			   .seed                 = SEED,
			   .init                 = (enum tbl_init) specs[t].init,
			   .init_scale           = specs[t].init_scale };
		int             nonzero = 0;
		for (int i = 0; i < NK; i++) {
			float want[DIM];
			tbl_row_init(&conf, (uint64_t) i + 1, want);
			ck_assert_mem_eq(two[0].init[t][i], want,
			    sizeof(want));
			for (int d = 0; d < DIM; d++) {
				nonzero |= want[d] != 0;
				ck_assert(fabsf(want[d]) < 1);
			}
		}
		ck_assert_msg(nonzero, "table %u: all-zero initial rows", t);
	}
	ck_assert_mem_eq(two[0].init, two[1].init, sizeof(two[0].init));
	ck_assert_mem_eq(two[0].init, one[0].init, sizeof(two[0].init));

	// After the steps: both ranks see the same rows, the rows the one
	// trainer of the union batches got, and the pushed ones moved.
	ck_assert_mem_eq(two[0].rows, two[1].rows, sizeof(two[0].rows));
	ck_assert_mem_eq(two[0].rows, one[0].rows, sizeof(two[0].rows));
	for (uint32_t t = 0; t < 2; t++) {
		ck_assert(memcmp(two[0].rows[t][0], two[0].init[t][0],
		              DIM * 4) != 0);
		// Key NK is never pushed: still its initial row.
		ck_assert_mem_eq(two[0].rows[t][NK - 1],
		    two[0].init[t][NK - 1], DIM * 4);
	}
}
END_TEST

// one_client opens and declares a 1-trainer job's client with tables t.
static ferry_client *
one_client(const char *url, const struct ferry_table_spec *t, size_t n)
{
	struct ferry_opts        o  = FERRY_OPTS_INIT;
	struct ferry_tensor_spec ts = { .name = "dense", .len = 8 };
	ferry_client            *c  = NULL;
	o.scheduler_url             = url;
	o.timeout_ms                = 10000;
	o.seed                      = SEED;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_msg(ferry_client_declare_tables(c, &ts, 1, t, n) == FERRY_OK,
	    "%s", ferry_client_last_error(c));
	return c;
}

START_TEST(test_rows_bad)
{
	struct cluster                       cl;
	static const struct ferry_table_spec t[2] = {
		{ .name = "plain", .dim = DIM },
		{ .name         = "q",
		    .dim        = DIM,
		    .codec_push = "q8",
		    .codec_pull = "q8" },
	};
	cluster_open(&cl, 1, 2, PS_PLACEMENT_UNIFORM);
	ferry_client     *c = one_client(ps_scheduler_url(cl.sched), t, 2);
	uint64_t          keys[3] = { 5, 6, 5 };
	float             g[3 * DIM], rows[3 * DIM], before[3 * DIM];
	struct ferry_rows pull = { .table = 0,
		.keys                     = keys,
		.n                        = 3,
		.rows                     = before };
	struct ferry_rows push = { .table = 0,
		.keys                     = keys,
		.n                        = 3,
		.grads                    = g };
	for (int i = 0; i < 3 * DIM; i++) {
		g[i] = 1.0f;
	}
	ck_assert_int_eq(ferry_client_rows_pull(c, &pull, 1), FERRY_OK);
	for (int i = 0; i < 3 * DIM; i++) {
		ck_assert_float_eq(before[i], 0); // FERRY_ROW_ZEROS
	}
	// A NaN or Inf row gradient: refused before anything is sent (the
	// keys' shards are on both servers: one server's refusal alone would
	// leave the other's part applied), naming the table and key.
	g[DIM + 1] = NAN;
	for (uint32_t tb = 0; tb < 2; tb++) {
		push.table = tb;
		ck_assert_int_eq(
		    ferry_client_rows_push_pull(c, &push, 1, 1, NULL, 0),
		    FERRY_EINVAL);
		ck_assert_msg(strstr(ferry_client_last_error(c), "key 6"),
		    "%s", ferry_client_last_error(c));
		g[DIM + 1] = INFINITY;
	}
	// An unknown table, keys missing: refused.
	push.table = 2;
	ck_assert_int_eq(ferry_client_rows_push_pull(c, &push, 1, 1, NULL, 0),
	    FERRY_EINVAL);
	// Nothing was applied: a good push applies once, from the zeros.
	g[DIM + 1] = 1.0f;
	push.table = 0;
	pull.rows  = rows;
	ck_assert_msg(ferry_client_rows_push_pull(c, &push, 1, 1, &pull, 1) ==
	        FERRY_OK,
	    "%s", ferry_client_last_error(c));
	// key 5 twice (gradient 2), key 6 once; lr 0.1 over 1 sample.
	ck_assert_float_eq_tol(rows[0], -0.2f, 1e-6f);
	ck_assert_float_eq_tol(rows[DIM], -0.1f, 1e-6f);
	ck_assert_mem_eq(rows, rows + 2 * DIM, DIM * 4);
	struct ferry_table_stats st;
	ck_assert_int_eq(ferry_client_table_stats(c, 0, &st), FERRY_OK);
	ck_assert_uint_eq(st.keys_pushed, 3);
	ck_assert_uint_eq(st.rows_pushed, 2);
	ck_assert_uint_eq(st.keys_pulled, 6);
	ck_assert_uint_eq(st.rows_pulled, 4);
	ferry_client_close(c);
	cluster_stop(&cl);
}
END_TEST

// A trainer that joins a sync job whose tables are past version 0 (here
// the same rank after the first left; likewise after a restore) learns
// their version before its first push, so that push is the round the
// servers are in: it is applied (not refused as behind), on top of the
// first trainer's steps.
START_TEST(test_rows_rejoin_learns_version)
{
	struct cluster                       cl;
	static const struct ferry_table_spec t[1] = {
		{ .name = "plain", .dim = DIM, .lr = 1 },
	};
	cluster_open(&cl, 1, 2, PS_PLACEMENT_UNIFORM);
	uint64_t          keys[2] = { 3, 9 };
	float             g[2 * DIM], rows[2 * DIM];
	struct ferry_rows push = { .table = 0,
		.keys                     = keys,
		.n                        = 2,
		.grads                    = g };
	struct ferry_rows pull = { .table = 0,
		.keys                     = keys,
		.n                        = 2,
		.rows                     = rows };
	for (int i = 0; i < 2 * DIM; i++) {
		g[i] = 0.25f;
	}
	ferry_client *c = one_client(ps_scheduler_url(cl.sched), t, 1);
	for (int k = 0; k < 3; k++) {
		ck_assert_msg(ferry_client_rows_push_pull(c, &push, 1, 1, NULL,
		                  0) == FERRY_OK,
		    "%s", ferry_client_last_error(c));
	}
	ck_assert_int_eq(ferry_client_leave(c), FERRY_OK);
	ferry_client_close(c);

	c = one_client(ps_scheduler_url(cl.sched), t, 1);
	ck_assert_msg(ferry_client_rows_push_pull(c, &push, 1, 1, &pull, 1) ==
	        FERRY_OK,
	    "%s", ferry_client_last_error(c));
	// Four steps of -0.25 (lr 1, 1 sample) from the zeros.
	for (int i = 0; i < 2 * DIM; i++) {
		ck_assert_float_eq(rows[i], -1.0f);
	}
	ferry_client_close(c);
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_rows_cluster(void)
{
	Suite *s  = suite_create("rows_cluster");
	TCase *tc = tcase_create("cluster");
	tcase_set_tags(tc, "cluster"); // see tests/clients/CMakeLists.txt
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_rows_sync_union);
	tcase_add_test(tc, test_rows_bad);
	tcase_add_test(tc, test_rows_rejoin_learns_version);
	suite_add_tcase(s, tc);
	return s;
}
