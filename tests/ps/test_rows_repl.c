// test_rows_repl.c — --replicas for sparse table shards: two sync
// trainers on two servers with two copies of every table shard; server 1
// dies mid-training (closed: no Leave, its heartbeats stop), the
// scheduler promotes the backups of its table shards on server 0, the
// trainers re-send the open round, and at the end every row (values and,
// through the later Adagrad steps, the optimizer state) equals a run
// where no server died, bit for bit. A backup that missed an update is
// resynced whole by its primary (a backup Transfer) and, promoted later,
// holds the same rows; so does a backup a later map adds (empty: its
// primary resyncs it) when it is promoted in turn. A server that leaves
// hands its table shards to their backups the same way.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "fb/fb.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"
#include "test_hooks.h"

#define DIM 4
#define NK 64   // keys 1..NK
#define BATCH 8 // keys per push
#define SEED 77
#define STEPS 30

static const struct ferry_table_spec spec = {
	.name       = "emb",
	.dim        = DIM,
	.init       = FERRY_ROW_UNIFORM,
	.init_scale = 0.05f,
	.optimizer  = "adagrad",
	.lr         = 0.5,
	.shards     = 4,
};

// step_batch fills push k's distinct keys and dyadic gradients.
static void
step_batch(int k, uint64_t *keys, float *g)
{
	for (int i = 0; i < BATCH; i++) {
		keys[i] = (uint64_t) ((k * 5 + i * 7) % NK) + 1;
		for (int d = 0; d < DIM; d++) {
			g[i * DIM + d] = (float) ((k + 3 * i + d) % 9 - 4) /
			    16.0f;
		}
	}
}

// table_stat returns server s's Stats value `key` (e.g. "table_shards:").
static uint64_t
table_stat(struct ps_server *s, const char *key)
{
	char st[8192];
	ps_server_stats(s, st, sizeof(st));
	return pt_stat(st, key);
}

// One sync trainer: STEPS push-pulls, then every row. Rank 0 injects the
// run's faults before its steps.
struct rtrainer {
	const char     *url;
	int             rank;
	struct cluster *cl;
	int             kill_at;   // rank 0: close server 1 before this step
	int             kill2_at;  // rank 0: close server 2 before this one
	int             leave_at;  // rank 0: server 1 leaves before this one
	int             behind_at; // rank 0: server 0's backups miss one
	int             behind;    // backups made to miss an update
	float           rows[NK * DIM];
	int             rv;
	char            err[256];
};

// fault runs rank 0's faults before step k.
static void
fault(struct rtrainer *a, int k)
{
	if (a->rank != 0 || a->cl == NULL) {
		return;
	}
	if (k == a->behind_at) {
		a->behind = ps_server_test_table_backups_behind(a->cl->srv[0]);
	}
	if (k == a->kill_at || k == a->kill2_at) {
		int m = k == a->kill_at ? 1 : 2;
		ps_server_close(a->cl->srv[m]);
		a->cl->srv[m] = NULL;
	}
	if (k == a->leave_at) {
		// Done as soon as its shards are dropped (a missed wake-up
		// would hold it for the whole timeout).
		uint64_t t0 = fb_clock_ms();
		ck_assert_int_eq(ps_server_leave(a->cl->srv[1], 20000), FB_OK);
		ck_assert_uint_lt(fb_clock_ms() - t0, 10000);
	}
}

static void *
rtrainer_main(void *arg)
{
	struct rtrainer         *a  = arg;
	struct ferry_opts        o  = FERRY_OPTS_INIT;
	struct ferry_tensor_spec ts = { .name = "dense", .len = 8 };
	ferry_client            *c  = NULL;
	uint64_t                 keys[NK];
	float                    g[BATCH * DIM], out[BATCH * DIM];
	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.mode          = FERRY_MODE_SYNC;
	o.timeout_ms    = 30000;
	o.seed          = SEED;
	if ((a->rv = ferry_client_open(&o, &c)) != FERRY_OK) {
		snprintf(a->err, sizeof(a->err), "open");
		return NULL;
	}
	a->rv = ferry_client_declare_tables(c, &ts, 1, &spec, 1);
	struct ferry_rows push = { .table = 0, .n = BATCH, .grads = g };
	struct ferry_rows pull = { .table = 0, .n = BATCH, .rows = out };
	push.keys = pull.keys = keys;
	for (int k = 0; k < STEPS && a->rv == FERRY_OK; k++) {
		fault(a, k);
		step_batch(2 * k + a->rank, keys, g);
		a->rv = ferry_client_rows_push_pull(c, &push, 1, 4, &pull, 1);
	}
	for (int i = 0; i < NK; i++) {
		keys[i] = (uint64_t) i + 1;
	}
	pull.n    = NK;
	pull.rows = a->rows;
	if (a->rv == FERRY_OK) {
		a->rv = ferry_client_rows_pull(c, &pull, 1);
	}
	snprintf(a->err, sizeof(a->err), "%s", ferry_client_last_error(c));
	if (a->rv != FERRY_OK) {
		(void) ferry_client_leave(c); // the other rank stops waiting
	}
	ferry_client_close(c);
	return NULL;
}

// The faults of a run, by the step before which rank 0 injects them
// (-1: none).
struct faults {
	int kill_at, kill2_at, leave_at, behind_at;
};
static const struct faults none = { -1, -1, -1, -1 };

// run_n trains two sync ranks on n servers with `replicas` copies into
// a[2], with rank 0's faults f.
static void
run_n(struct rtrainer *a, int n, uint32_t replicas, struct faults f)
{
	struct cluster cl;
	pthread_t      th[2];
	cluster_open_replicas(&cl, 2, n, PS_PLACEMENT_UNIFORM, replicas,
	    f.kill_at >= 0 ? 500 : 0);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url       = ps_scheduler_url(cl.sched);
		a[r].rank      = r;
		a[r].cl        = &cl;
		a[r].kill_at   = f.kill_at;
		a[r].kill2_at  = f.kill2_at;
		a[r].leave_at  = f.leave_at;
		a[r].behind_at = f.behind_at;
		pthread_create(&th[r], NULL, rtrainer_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == FERRY_OK, "rank %d: %s", r, a[r].err);
	}
	if (replicas > 1 && n == 2 && f.leave_at < 0) {
		// Every table shard has its backup on the other server
		// (server 0 alone after the death: no backups).
		uint64_t p0 = table_stat(cl.srv[0], "table_shards:");
		uint64_t b0 = table_stat(cl.srv[0], "table_backups:");
		if (cl.srv[1] != NULL) {
			ck_assert_uint_eq(p0 +
			        table_stat(cl.srv[1], "table_shards:"),
			    spec.shards);
			ck_assert_uint_eq(b0 +
			        table_stat(cl.srv[1], "table_backups:"),
			    spec.shards);
		} else {
			ck_assert_uint_eq(p0, spec.shards);
		}
	}
	cluster_stop(&cl);
}

// run is run_n on 2 servers with a kill and a behind backup.
static void
run(struct rtrainer *a, uint32_t replicas, int kill_at, int behind_at)
{
	struct faults f = none;
	f.kill_at       = kill_at;
	f.behind_at     = behind_at;
	run_n(a, 2, replicas, f);
}

// same checks that the runs x and y ended with the same rows, bit for bit.
static void
same(const struct rtrainer *x, const struct rtrainer *y, const char *what)
{
	ck_assert_mem_eq(x[0].rows, x[1].rows, sizeof(x[0].rows));
	ck_assert_mem_eq(y[0].rows, y[1].rows, sizeof(y[0].rows));
	for (int i = 0; i < NK * DIM; i++) {
		ck_assert_msg(memcmp(&x[0].rows[i], &y[0].rows[i], 4) == 0,
		    "key %d dim %d: %.9g %s, %.9g without", i / DIM + 1,
		    i % DIM, (double) y[0].rows[i], what,
		    (double) x[0].rows[i]);
	}
}

// A replicated job's server dies mid-training: its table shards are
// promoted to their backups and no row is lost: the rows equal a run
// without replicas or faults, bit for bit.
START_TEST(test_rows_repl_death_same_rows)
{
	static struct rtrainer still[2], died[2];
	run(still, 1, -1, -1);
	run(died, 2, 12, -1);
	same(still, died, "after the death");
}
END_TEST

// A backup that missed an update (its rows gone, one version behind) is
// resynced whole by its primary at the next forward; promoted later
// (server 1 dies), it holds the same rows as a run without faults.
START_TEST(test_rows_repl_behind_backup_resynced)
{
	static struct rtrainer still[2], died[2];
	run(still, 1, -1, -1);
	run(died, 2, 16, 6);
	ck_assert_int_gt(died[0].behind, 0);
	same(still, died, "after the resync and the death");
}
END_TEST

// On 3 servers, server 1 dies: its table shards are promoted and every
// shard gets a new backup (an empty one, resynced whole by its primary);
// then server 2 dies too, promoting those: the rows still equal a run
// without faults.
START_TEST(test_rows_repl_new_backup_then_death)
{
	static struct rtrainer still[2], died[2];
	struct faults          f = none;
	f.kill_at                = 8;
	f.kill2_at               = 20;
	run(still, 1, -1, -1);
	run_n(died, 3, 2, f);
	same(still, died, "after two deaths");
}
END_TEST

// A server leaves mid-training: its table shards are promoted to their
// backups (not moved), its parked calls answered STALE_EPOCH, the open
// round pushed again: the rows equal a run without faults.
START_TEST(test_rows_repl_leave_same_rows)
{
	static struct rtrainer still[2], left[2];
	struct faults          f = none;
	f.leave_at               = 12;
	run(still, 1, -1, -1);
	run_n(left, 2, 2, f);
	same(still, left, "after the leave");
}
END_TEST

Suite *
suite_rows_repl(void)
{
	Suite *s  = suite_create("rows_repl");
	TCase *tc = tcase_create("rows_repl");
	tcase_set_timeout(tc, 120);
	tcase_set_tags(tc, "cluster");
	tcase_add_test(tc, test_rows_repl_death_same_rows);
	tcase_add_test(tc, test_rows_repl_behind_backup_resynced);
	tcase_add_test(tc, test_rows_repl_new_backup_then_death);
	tcase_add_test(tc, test_rows_repl_leave_same_rows);
	suite_add_tcase(s, tc);
	return s;
}
