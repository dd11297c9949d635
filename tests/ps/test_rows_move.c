// test_rows_move.c — sparse table shards when servers change: a server
// that leaves under async load (a pushing thread) hands its table shards
// over whole, and afterwards every row, the key set and the optimizer
// state (row-wise Adagrad: later pushes read it) equal a reference table
// in this process that applied the same pushes; under two sync trainers
// the rows equal a run where nobody left; a re-sent sync push (the round
// staged it, or applied it) is answered OK and counted once; a table
// shard Transfer that does not fit is refused with nothing installed.
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
#include "tbl/tbl.h"

#define DIM 4
#define NK 64   // keys 1..NK
#define BATCH 8 // keys per push
#define SEED 99
#define SLOT_PUSHED 2 // a rank's push staged (TransferRequest.state)

static const struct ferry_table_spec spec_ada = {
	.name       = "emb",
	.dim        = DIM,
	.init       = FERRY_ROW_UNIFORM,
	.init_scale = 0.05f,
	.optimizer  = "adagrad",
	.lr         = 0.5,
	.shards     = 4,
};

// ref_conf is spec's store conf as the servers derive it (jobconf.c's
// defaults), written out here.
static struct tbl_conf
ref_conf(const struct ferry_table_spec *sp, enum tbl_optim optim)
{
	struct tbl_conf c;
	memset(&c, 0, sizeof(c));
	c.dim        = sp->dim;
	c.seed       = SEED;
	c.init       = (enum tbl_init) sp->init;
	c.init_scale = sp->init_scale;
	c.optim      = optim;
	c.beta1      = 0.9f;
	c.beta2      = 0.999f;
	c.eps        = 1e-8f;
	c.ftrl_beta  = 1.0f;
	return c;
}

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

// open_client opens rank's client of an n-trainer job in mode and
// declares the table.
static ferry_client *
open_client(const char *url, int rank, int mode,
    const struct ferry_table_spec *sp)
{
	struct ferry_opts        o  = FERRY_OPTS_INIT;
	struct ferry_tensor_spec ts = { .name = "dense", .len = 8 };
	ferry_client            *c  = NULL;
	o.scheduler_url             = url;
	o.rank                      = rank;
	o.mode                      = mode;
	o.timeout_ms                = 20000;
	o.seed                      = SEED;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_msg(ferry_client_declare_tables(c, &ts, 1, sp, 1) ==
	        FERRY_OK,
	    "%s", ferry_client_last_error(c));
	return c;
}

// table_rows returns the rows server s holds of table "emb" and, in
// *shards, its table shards (Stats).
static uint64_t
table_rows(struct ps_server *s, uint64_t *shards)
{
	char        st[8192];
	const char *p;
	ps_server_stats(s, st, sizeof(st));
	*shards = pt_stat(st, "table_shards:");
	p       = strstr(st, "table_emb:rows=");
	return p != NULL ? strtoull(p + strlen("table_emb:rows="), NULL, 10)
	                 : 0;
}

// The pushing thread: async pushes until told to stop.
struct pusher {
	ferry_client *c;
	atomic_int    steps, stop;
	atomic_int    rv; // stored after err is written
	char          err[256];
};

static void *
pusher_main(void *arg)
{
	struct pusher *p = arg;
	uint64_t       keys[BATCH];
	float          g[BATCH * DIM];
	for (int k = 0; !atomic_load(&p->stop); k++) {
		struct ferry_rows push = { .table = 0,
			.keys                     = keys,
			.n                        = BATCH,
			.grads                    = g };
		step_batch(k, keys, g);
		int rv = ferry_client_rows_push_pull(p->c, &push, 1, 1, NULL,
		    0);
		if (rv != FERRY_OK) {
			snprintf(p->err, sizeof(p->err), "push %d: %s", k,
			    ferry_client_last_error(p->c));
			atomic_store(&p->rv, rv);
			break;
		}
		atomic_fetch_add(&p->steps, 1);
	}
	return NULL;
}

// wait_steps waits until the pusher has made n pushes (or failed).
static void
wait_steps(struct pusher *p, int n)
{
	for (int t = 0; t < 60000 && atomic_load(&p->steps) < n &&
	     atomic_load(&p->rv) == FERRY_OK;
	     t++) {
		fb_sleep_us(1000);
	}
	ck_assert_msg(atomic_load(&p->rv) == FERRY_OK, "%s", p->err);
	ck_assert_int_ge(atomic_load(&p->steps), n);
}

// A server leaves while a trainer pushes asynchronously: its table shards
// move whole to the other server, and afterwards the rows, the key set
// and the Adagrad state equal a reference that applied the same pushes in
// the same order.
START_TEST(test_rows_leave_async_keeps_rows)
{
	struct cluster  cl;
	struct pusher   p;
	pthread_t       th;
	uint64_t        sh0, sh1, keys[NK], bk[BATCH];
	float           got[NK * DIM], want[NK * DIM], g[BATCH * DIM];
	struct tbl_conf conf = ref_conf(&spec_ada, TBL_OPT_ADAGRAD);
	struct tbl     *ref  = tbl_open(&conf);
	ck_assert_ptr_nonnull(ref);
	memset(&p, 0, sizeof(p));
	cluster_open(&cl, 1, 2, PS_PLACEMENT_UNIFORM);
	p.c = open_client(ps_scheduler_url(cl.sched), 0, FERRY_MODE_ASYNC,
	    &spec_ada);
	pthread_create(&th, NULL, pusher_main, &p);
	wait_steps(&p, 20);
	(void) table_rows(cl.srv[1], &sh1);
	ck_assert_uint_gt(sh1, 0); // it has table shards to hand over
	ck_assert_int_eq(ps_server_leave(cl.srv[1], 20000), FB_OK);
	wait_steps(&p, atomic_load(&p.steps) + 20);
	atomic_store(&p.stop, 1);
	pthread_join(th, NULL);
	ck_assert_msg(p.rv == FERRY_OK, "%s", p.err);

	// The reference: the same pushes, in order (scale 1, lr 0.5).
	for (int k = 0; k < atomic_load(&p.steps); k++) {
		uint32_t cnt[BATCH];
		for (int i = 0; i < BATCH; i++) {
			cnt[i] = 1;
		}
		step_batch(k, bk, g);
		ck_assert_int_eq(tbl_apply(ref, bk, BATCH, g, cnt, 1.0f, 0.5f,
		                     (uint64_t) k + 1),
		    0);
	}
	for (int i = 0; i < NK; i++) {
		keys[i] = (uint64_t) i + 1;
	}
	struct ferry_rows pull = { .table = 0,
		.keys                     = keys,
		.n                        = NK,
		.rows                     = got };
	ck_assert_msg(ferry_client_rows_pull(p.c, &pull, 1) == FERRY_OK, "%s",
	    ferry_client_last_error(p.c));
	tbl_lookup(ref, keys, NK, want);
	for (int i = 0; i < NK * DIM; i++) {
		ck_assert_msg(memcmp(&got[i], &want[i], 4) == 0,
		    "key %d dim %d: %.9g, reference %.9g", i / DIM + 1,
		    i % DIM, (double) got[i], (double) want[i]);
	}
	// The same key set: every row on the server that stayed.
	ck_assert_uint_eq(table_rows(cl.srv[1], &sh1), 0);
	ck_assert_uint_eq(sh1, 0);
	ck_assert_uint_eq(table_rows(cl.srv[0], &sh0), tbl_rows(ref));
	ck_assert_uint_eq(sh0, spec_ada.shards);
	ferry_client_close(p.c);
	tbl_close(ref);
	cluster_stop(&cl);
}
END_TEST

// A sync trainer of the leave test: STEPS push-pulls of its batches
// (overlapping keys between the ranks), then every row.
#define STEPS 30
struct strainer {
	const char *url;
	int         rank;
	atomic_int *gate; // rank 1 waits for it before step 10
	atomic_int  steps;
	float       rows[NK * DIM];
	atomic_int  rv; // read by the main thread while it runs
	char        err[256];
};

static void *
strainer_main(void *arg)
{
	struct strainer  *a = arg;
	ferry_client     *c = open_client(a->url, a->rank, FERRY_MODE_SYNC,
	        &spec_ada);
	uint64_t          keys[NK];
	float             g[BATCH * DIM], out[BATCH * DIM];
	struct ferry_rows push = { .table = 0, .n = BATCH, .grads = g };
	struct ferry_rows pull = { .table = 0, .n = BATCH, .rows = out };
	push.keys = pull.keys = keys;
	for (int k = 0; k < STEPS && a->rv == FERRY_OK; k++) {
		while (k == 10 && a->rank == 1 && !atomic_load(a->gate)) {
			fb_sleep_us(1000);
		}
		step_batch(2 * k + a->rank, keys, g);
		a->rv = ferry_client_rows_push_pull(c, &push, 1, 4, &pull, 1);
		atomic_fetch_add(&a->steps, 1);
	}
	for (int i = 0; a->rv == FERRY_OK && i < NK; i++) {
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

// parked_on returns server s's parked calls (Stats "parked:").
static uint64_t
parked_on(struct ps_server *s)
{
	char st[8192];
	ps_server_stats(s, st, sizeof(st));
	return pt_stat(st, "parked:");
}

// sync_run trains two sync ranks on a 2-server cluster into a[2]. With
// leave, server 1 leaves while rank 0's step-10 push is staged there (its
// pull parked) and rank 1 holds back its own until the leave is done.
static void
sync_run(struct strainer *a, int leave)
{
	struct cluster    cl;
	pthread_t         th[2];
	uint64_t          sh;
	static atomic_int gate;
	atomic_store(&gate, !leave);
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url  = ps_scheduler_url(cl.sched);
		a[r].rank = r;
		a[r].gate = &gate;
		pthread_create(&th[r], NULL, strainer_main, &a[r]);
	}
	if (leave) {
		for (int t = 0; t < 60000 &&
		     (atomic_load(&a[0].steps) < 10 ||
		         parked_on(cl.srv[1]) == 0) &&
		     a[0].rv == FERRY_OK;
		     t++) {
			fb_sleep_us(1000);
		}
		ck_assert_uint_gt(parked_on(cl.srv[1]), 0);
		ck_assert_int_eq(ps_server_leave(cl.srv[1], 20000), FB_OK);
		ck_assert_uint_eq(table_rows(cl.srv[1], &sh), 0);
		ck_assert_uint_eq(sh, 0);
		atomic_store(&gate, 1);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == FERRY_OK, "rank %d: %s", r, a[r].err);
	}
	cluster_stop(&cl);
}

// A server leaves while two sync trainers step, in the middle of a round
// (one rank's push staged, its pull parked): its table shards move with
// the staged pushes, the parked pulls are answered ABORTED and asked
// again of the new server, and the rows equal a run where nobody left bit
// for bit.
START_TEST(test_rows_leave_sync_same_rows)
{
	static struct strainer still[2], left[2];
	sync_run(still, 0);
	sync_run(left, 1);
	ck_assert_mem_eq(still[0].rows, still[1].rows, sizeof(still[0].rows));
	ck_assert_mem_eq(left[0].rows, left[1].rows, sizeof(left[0].rows));
	for (int i = 0; i < NK * DIM; i++) {
		ck_assert_msg(memcmp(&still[0].rows[i], &left[0].rows[i], 4) ==
		        0,
		    "key %d dim %d: %.9g after the leave, %.9g without",
		    i / DIM + 1, i % DIM, (double) left[0].rows[i],
		    (double) still[0].rows[i]);
	}
}
END_TEST

// One declared trainer of a 2-trainer sync job, on its own thread
// (declaring waits for every rank).
struct decl {
	const char                    *url;
	int                            rank;
	const struct ferry_table_spec *spec;
	ferry_client                  *c;
};

static void *
decl_main(void *arg)
{
	struct decl *d = arg;
	d->c = open_client(d->url, d->rank, FERRY_MODE_SYNC, d->spec);
	return NULL;
}

// push_raw sends rank's Rows push of key (count 1, gradient g in every
// dim, 1 sample) for table shard 0 at version to url under epoch;
// returns the status.
static int
push_raw(const char *url, uint64_t epoch, uint32_t rank, uint64_t version,
    uint64_t key, float g, int resend)
{
	Pswire__Header      h  = PSWIRE__HEADER__INIT;
	Pswire__RowsRequest rq = PSWIRE__ROWS_REQUEST__INIT;
	Pswire__RowBlock    b = PSWIRE__ROW_BLOCK__INIT, *bp = &b;
	uint8_t             pay[12 + DIM * 4];
	uint32_t            one = 1;
	memcpy(pay, &key, 8);
	memcpy(pay + 8, &one, 4);
	for (int d = 0; d < DIM; d++) {
		memcpy(pay + 12 + 4 * d, &g, 4);
	}
	b.shard         = 0;
	b.version       = version;
	b.n             = 1;
	b.keys_offset   = 0;
	b.counts_offset = 8;
	b.rows_offset   = 12;
	b.rows_length   = DIM * 4;
	rq.n_push       = 1;
	rq.push         = &bp;
	rq.n_samples    = 1;
	rq.resend       = resend != 0;
	h.request_id    = 7;
	h.rank          = rank;
	h.epoch         = epoch;
	h.deadline_ms   = 5000;
	h.body_case     = PSWIRE__HEADER__BODY_ROWS_REQ;
	h.rows_req      = &rq;
	return pt_rpc(NULL, url, PSWIRE__METHOD__ROWS, &h, pay, sizeof(pay),
	    NULL);
}

// A sync push re-sent (marked resend) while its round is open, and again
// after the round closed, is answered OK and counted once; unmarked, the
// same re-sends are refused (ALREADY_EXISTS, OUT_OF_RANGE).
START_TEST(test_rows_resend_counted_once)
{
	static const struct ferry_table_spec sgd = {
		.name       = "emb",
		.dim        = DIM,
		.init       = FERRY_ROW_UNIFORM,
		.init_scale = 0.05f,
		.lr         = 0.5,
		.shards     = 1,
	};
	struct cluster  cl;
	struct decl     d[2];
	pthread_t       th[2];
	const uint64_t  key = 17;
	float           row[DIM], init[DIM];
	struct tbl_conf conf = ref_conf(&sgd, TBL_OPT_SGD);
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		d[r] = (struct decl) { ps_scheduler_url(cl.sched), r, &sgd,
			NULL };
		pthread_create(&th[r], NULL, decl_main, &d[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
	}
	Pswire__Header *mh = map_at_least(ps_scheduler_url(cl.sched), 1,
	    10000);
	const Pswire__Placement *pl = mh->placement;
	const char *url             = pl->servers[pl->table_shards[0]->server];
	uint64_t    ep              = pl->epoch;
	ck_assert_int_eq(push_raw(url, ep, 0, 0, key, 1.0f, 0),
	    PSWIRE__STATUS__OK);
	// Staged: marked, counted already; unmarked, a second push.
	ck_assert_int_eq(push_raw(url, ep, 0, 0, key, 1.0f, 1),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(push_raw(url, ep, 0, 0, key, 1.0f, 0),
	    PSWIRE__STATUS__ALREADY_EXISTS);
	ck_assert_int_eq(push_raw(url, ep, 1, 0, key, 3.0f, 0),
	    PSWIRE__STATUS__OK); // the round closes: version 1
	// Applied: marked, counted already; unmarked, a rank behind.
	ck_assert_int_eq(push_raw(url, ep, 0, 0, key, 1.0f, 1),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(push_raw(url, ep, 0, 0, key, 1.0f, 0),
	    PSWIRE__STATUS__OUT_OF_RANGE);
	struct ferry_rows pull = { .table = 0,
		.keys                     = &key,
		.n                        = 1,
		.rows                     = row };
	ck_assert_msg(ferry_client_rows_pull(d[0].c, &pull, 1) == FERRY_OK,
	    "%s", ferry_client_last_error(d[0].c));
	// Once each: (1 + 3) / 2 samples at lr 0.5.
	tbl_row_init(&conf, key, init);
	for (int i = 0; i < DIM; i++) {
		ck_assert_float_eq(row[i], init[i] - 0.5f * 2.0f);
	}
	pswire__header__free_unpacked(mh, NULL);
	ferry_client_close(d[0].c);
	ferry_client_close(d[1].c);
	cluster_stop(&cl);
}
END_TEST

// transfer_raw sends a table shard Transfer of shard id (n_state ranks,
// rank 0's state st0, samples) with payload p (len bytes) to url under epoch;
// returns the status, and fails the test unless the error names `want`.
static int
transfer_raw(const char *url, uint64_t epoch, uint32_t id, uint8_t st0,
    size_t n_state, uint64_t samples, const void *p, size_t len,
    const char *want)
{
	uint8_t                 st[3] = { st0, 0, 0 };
	Pswire__Header          h     = PSWIRE__HEADER__INIT;
	Pswire__TransferRequest t     = PSWIRE__TRANSFER_REQUEST__INIT;
	t.shard                       = id;
	t.version                     = 3;
	t.init                        = 1;
	t.table                       = 1;
	t.samples                     = samples;
	t.state.len                   = n_state;
	t.state.data                  = st;
	h.request_id                  = 9;
	h.epoch                       = epoch;
	h.body_case                   = PSWIRE__HEADER__BODY_TRANSFER_REQ;
	h.transfer_req                = &t;
	Pswire__Header *rh            = NULL;
	int st_rep = pt_rpc(NULL, url, PSWIRE__METHOD__TRANSFER, &h, p, len,
	    &rh);
	ck_assert_ptr_nonnull(rh);
	ck_assert_msg(strstr(rh->error, want) != NULL, "'%s' lacks '%s'",
	    rh->error, want);
	pswire__header__free_unpacked(rh, NULL);
	return st_rep;
}

// A table shard Transfer that does not fit the job (rank states, a staged
// push cut short or holding a key of another range, a corrupt image) is
// refused INVALID_ARGUMENT with nothing installed; one for a shard not
// expected here is refused as a dense one is.
START_TEST(test_rows_transfer_bad)
{
	static const struct ferry_table_spec two = { .name = "emb",
		.dim                                       = DIM,
		.shards                                    = 2 };
	struct cluster                       cl;
	uint64_t                             sh;
	uint8_t                              pay[8 + 12 + DIM * 4 + 64];
	uint64_t                             n = 1, key = 0;
	uint32_t                             one    = 1;
	float                                g[DIM] = { 0 };
	struct decl                          d[2];
	pthread_t                            th[2];
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		d[r] = (struct decl) { ps_scheduler_url(cl.sched), r, &two,
			NULL };
		pthread_create(&th[r], NULL, decl_main, &d[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
	}
	Pswire__Header *mh = map_at_least(ps_scheduler_url(cl.sched), 1,
	    10000);
	const Pswire__Placement *pl = mh->placement;
	// Shard 1's range is on server b; send it to server a.
	uint32_t                 b   = pl->table_shards[1]->server;
	const char              *url = pl->servers[1 - b];
	// Not placed here under the sender's (current) map: STALE_EPOCH.
	ck_assert_int_eq(transfer_raw(url, pl->epoch, 1, 0, 2, 0, NULL, 0,
	                     "not placed here"),
	    PSWIRE__STATUS__STALE_EPOCH);
	// Under a later map: checked whole.
	ck_assert_int_eq(transfer_raw(url, pl->epoch + 1, 1, 0, 3, 0, NULL, 0,
	                     "state for 3 ranks"),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(transfer_raw(url, pl->epoch + 1, 1, SLOT_PUSHED, 2, 1,
	                     pay, 4, "cut short"),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	while (tbl_key_shard(key, 2) != 0) {
		key++; // a key of range 0, not 1
	}
	memcpy(pay, &n, 8);
	memcpy(pay + 8, &key, 8);
	memcpy(pay + 16, &one, 4);
	memcpy(pay + 20, g, sizeof(g));
	ck_assert_int_eq(transfer_raw(url, pl->epoch + 1, 1, SLOT_PUSHED, 2, 1,
	                     pay, sizeof(pay), "outside the range"),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	memset(pay, 0x5a, sizeof(pay));
	ck_assert_int_eq(transfer_raw(url, pl->epoch + 1, 1, 0, 2, 0, pay,
	                     sizeof(pay), "transfer of table shard 1: "),
	    PSWIRE__STATUS__INVALID_ARGUMENT); // not a tbl_save image
	// Nothing installed: each server still holds its one range.
	for (int i = 0; i < 2; i++) {
		(void) table_rows(cl.srv[i], &sh);
		ck_assert_uint_eq(sh, 1);
	}
	pswire__header__free_unpacked(mh, NULL);
	ferry_client_close(d[0].c);
	ferry_client_close(d[1].c);
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_rows_move(void)
{
	Suite *s  = suite_create("rows_move");
	TCase *tc = tcase_create("cluster");
	tcase_set_tags(tc, "cluster"); // see tests/ps/CMakeLists.txt
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_rows_leave_async_keeps_rows);
	tcase_add_test(tc, test_rows_leave_sync_same_rows);
	tcase_add_test(tc, test_rows_resend_counted_once);
	tcase_add_test(tc, test_rows_transfer_bad);
	suite_add_tcase(s, tc);
	return s;
}
