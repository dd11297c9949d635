// test_rows.c — sparse tables on the servers, spoken to with raw Rows
// requests: a sync round of two ranks equals a reference computed here
// with tbl_* directly (rank-order sum, scale 1/samples; SGD and Adagrad)
// bit for bit, and a pull for the round's version parks until it closes;
// async pushes apply at once; every bad input of the contract is refused
// naming it with nothing applied; --sparse-capacity-mb holds the tables
// under one budget (LRU and LFU): a small hot table keeps every row while
// a streaming one is evicted, and evictions are counted; the scheduler
// refuses a bad TableDesc naming the field; table shards stay on their
// servers when a trainer leaves (and the round no longer waits for it).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "comp/comp.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"
#include "tbl/tbl.h"

#define DIM 4
#define SEED 7
#define MAXK 64

// The job: one dense tensor, one table "emb" (DIM floats, uniform init).
struct rjob {
	struct ps_scheduler *sched;
	struct ps_server    *srv[2];
	Pswire__Header      *map; // the first map (its placement)
	const char          *surl[2];
	uint32_t             S; // the table's shards
};

// job_desc fills the job's JobConfig (d, td: storage) for mode and the
// table's optim and shards.
static void
job_desc(Pswire__JobConfig *j, Pswire__TensorDesc *td, Pswire__TensorDesc **tp,
    Pswire__TableDesc *tb, Pswire__TableDesc **tbp, int mode,
    const char *optim, uint32_t shards)
{
	pswire__job_config__init(j);
	pswire__tensor_desc__init(td);
	pswire__table_desc__init(tb);
	td->name       = "w";
	td->len        = 8;
	*tp            = td;
	tb->name       = "emb";
	tb->dim        = DIM;
	tb->init       = PSWIRE__ROW_INIT__ROW_INIT_UNIFORM;
	tb->init_scale = 0.1f;
	tb->optim      = (char *) optim;
	tb->shards     = shards;
	*tbp           = tb;
	j->n_tensors   = 1;
	j->tensors     = tp;
	j->n_tables    = 1;
	j->tables      = tbp;
	j->lr          = 0.1;
	j->mode        = mode;
	j->seed        = SEED;
	j->codec_push  = "none";
	j->codec_pull  = "none";
}

// reg sends rank's Register with job j; returns the reply's status and
// its error text in err.
static int
reg(const char *url, uint32_t rank, Pswire__JobConfig *j, char *err, size_t n)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	rr.role                    = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank                    = rank;
	rr.job                     = j;
	h.body_case                = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req             = &rr;
	Pswire__Header *rh = pt_call(url, PSWIRE__METHOD__REGISTER, &h);
	ck_assert_ptr_nonnull(rh);
	int st = (int) rh->status;
	snprintf(err, n, "%s", rh->error != NULL ? rh->error : "");
	pswire__header__free_unpacked(rh, NULL);
	return st;
}

// job_open starts a scheduler and two servers (capacity MiB of tables
// each, evicted by policy evict; with a capacity, a second table "hot"
// like "emb"), registers two trainers and waits for the servers to serve.
static void
job_open(struct rjob *jb, int mode, const char *optim, uint32_t shards,
    uint64_t capacity_mb, int evict)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	Pswire__JobConfig        j;
	Pswire__TensorDesc       td, *tp;
	Pswire__TableDesc        tb[2], *tbp[2];
	char                     url[64], err[256];
	memset(jb, 0, sizeof(*jb));
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = 2;
	so.shard_bytes = 64;
	so.placement   = PS_PLACEMENT_UNIFORM;
	so.probe_bytes = 0; // no link probes: raw trainers send none
	PT_OK(ps_scheduler_open(&so, &jb->sched));
	for (int i = 0; i < 2; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url             = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url   = ps_scheduler_url(jb->sched);
		o.sparse_capacity = capacity_mb << 20;
		o.sparse_evict    = evict;
		PT_OK(ps_server_open(&o, &jb->srv[i]));
	}
	job_desc(&j, &td, &tp, &tb[0], &tbp[0], mode, optim, shards);
	tb[1]      = tb[0];
	tb[1].name = "hot";
	tbp[1]     = &tb[1];
	j.n_tables = capacity_mb > 0 ? 2 : 1;
	j.tables   = tbp;
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(
		    reg(ps_scheduler_url(jb->sched), r, &j, err, sizeof(err)),
		    PSWIRE__STATUS__OK);
	}
	jb->map = map_at_least(ps_scheduler_url(jb->sched), 1, 10000);
	const Pswire__Placement *pl = jb->map->placement;
	jb->S                       = shards != 0 ? shards : 2;
	ck_assert_uint_eq(pl->n_table_shards, jb->S * j.n_tables);
	for (int i = 0; i < 2; i++) {
		for (int k = 0; k < 1000 &&
		     !ps_server_ready(jb->srv[i], err, sizeof(err));
		     k++) {
			fb_sleep_us(10000);
		}
		ck_assert_msg(ps_server_ready(jb->srv[i], err, sizeof(err)),
		    "%s", err);
	}
	for (size_t m = 0; m < pl->n_servers; m++) {
		// The servers registered in some order: name them by URL.
		for (int i = 0; i < 2; i++) {
			char st[8192];
			ps_server_stats(jb->srv[i], st, sizeof(st));
			if (pt_stat(st, "index:") == m) {
				jb->surl[i] = pl->servers[m];
			}
		}
	}
}

static void
job_close(struct rjob *jb)
{
	pswire__header__free_unpacked(jb->map, NULL);
	ps_server_close(jb->srv[0]);
	ps_server_close(jb->srv[1]);
	ps_scheduler_close(jb->sched);
}

// srv_of returns the index (0, 1) of the server holding table shard id.
static int
srv_of(const struct rjob *jb, uint32_t id)
{
	const Pswire__Placement *pl = jb->map->placement;
	const char              *u = pl->servers[pl->table_shards[id]->server];
	return strcmp(u, jb->surl[0]) == 0 ? 0 : 1;
}

// One block to send: n keys with counts and fp32 grads (push), or keys
// only (pull).
struct blk {
	uint32_t        shard;
	uint64_t        version;
	uint32_t        n;
	const uint64_t *keys;
	const uint32_t *counts;
	const float    *grads;
	uint32_t        codec; // push: COMP_NONE or a row codec
	uint32_t        trim;  // bytes short of the rows' length (bad)
};

// A call's outcome: status, error, and the reply's blocks and payload.
struct rres {
	int             status;
	char            err[512];
	Pswire__Header *h;
	uint8_t        *payload;
	size_t          plen;
};

// rows_call sends a Rows request (push blocks, pull blocks, n_samples) as
// rank under the map's epoch to url and waits (30 s) for the answer.
static void
rows_call(const char *url, uint32_t rank, uint64_t epoch,
    const struct blk *push, size_t np, const struct blk *pull, size_t nq,
    uint32_t n_samples, struct rres *res)
{
	Pswire__Header      h  = PSWIRE__HEADER__INIT;
	Pswire__RowsRequest rq = PSWIRE__ROWS_REQUEST__INIT;
	Pswire__RowBlock    b[8], *bp[8], q[8], *qp[8];
	uint8_t            *pay = malloc(1u << 22), *p;
	size_t              off = 0;
	nng_socket          s;
	nng_msg            *m;
	struct psw_frame    f;
	const char         *why;
	ck_assert(np <= 8 && nq <= 8 && pay != NULL);
	for (size_t i = 0; i < np + nq; i++) {
		const struct blk *x = i < np ? &push[i] : &pull[i - np];
		Pswire__RowBlock *o = i < np ? &b[i] : &q[i - np];
		pswire__row_block__init(o);
		o->shard       = x->shard;
		o->version     = x->version;
		o->n           = x->n;
		o->keys_offset = off;
		memcpy(pay + off, x->keys, 8 * (size_t) x->n);
		off += 8 * (size_t) x->n;
		if (i < np) {
			struct comp_codec cc = COMP_CODEC_INIT;
			size_t            w  = 0;
			cc.id                = x->codec;
			cc.bucket            = DIM;
			o->counts_offset     = off;
			memcpy(pay + off, x->counts, 4 * (size_t) x->n);
			off += 4 * (size_t) x->n;
			o->rows_offset = off;
			o->codec       = x->codec;
			if (x->codec == COMP_NONE) {
				w = 4 * (size_t) x->n * DIM;
				memcpy(pay + off, x->grads, w);
			} else if (x->n > 0) {
				PT_OK(comp_encode(&cc, x->grads,
				    (size_t) x->n * DIM, NULL, pay + off,
				    (1u << 22) - off, &w));
			}
			o->rows_length = w - x->trim;
			off += w;
			bp[i] = o;
		} else {
			qp[i - np] = o;
		}
	}
	rq.n_push     = np;
	rq.push       = bp;
	rq.n_pull     = nq;
	rq.pull       = qp;
	rq.n_samples  = n_samples;
	h.request_id  = 1;
	h.rank        = rank;
	h.epoch       = epoch;
	h.deadline_ms = 20000;
	h.body_case   = PSWIRE__HEADER__BODY_ROWS_REQ;
	h.rows_req    = &rq;
	size_t hl     = pswire__header__get_packed_size(&h);
	PT_OK(psw_msg_begin(&m, hl, off, &p));
	memcpy(p, pay, off);
	PT_OK(psw_msg_finish(m, PSWIRE__METHOD__ROWS, 0, &h.base, hl, off));
	free(pay);
	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 30000);
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	ck_assert_int_eq(nng_sendmsg(s, m, 0), 0);
	ck_assert_int_eq(nng_recvmsg(s, &m, 0), 0);
	PT_OK(psw_msg_parse(m, &f, &why));
	res->h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	ck_assert_ptr_nonnull(res->h);
	res->status = (int) res->h->status;
	snprintf(res->err, sizeof(res->err), "%s",
	    res->h->error != NULL ? res->h->error : "");
	res->plen    = f.payload_len;
	res->payload = malloc(f.payload_len + 1);
	memcpy(res->payload, f.payload, f.payload_len);
	nng_msg_free(m);
	nng_close(s);
}

static void
rres_free(struct rres *r)
{
	pswire__header__free_unpacked(r->h, NULL);
	free(r->payload);
}

// rows_of copies pull block i's rows (fp32) of reply r into out.
static void
rows_of(const struct rres *r, size_t i, float *out)
{
	ck_assert_int_eq(r->status, PSWIRE__STATUS__OK);
	ck_assert_int_eq(r->h->body_case, PSWIRE__HEADER__BODY_ROWS_REP);
	ck_assert_uint_gt(r->h->rows_rep->n_rows, i);
	const Pswire__RowBlock *b = r->h->rows_rep->rows[i];
	ck_assert_uint_eq(b->codec, COMP_NONE);
	ck_assert_uint_eq(b->rows_length, 4 * (size_t) b->n * DIM);
	ck_assert_uint_le(b->rows_offset + b->rows_length, r->plen);
	memcpy(out, r->payload + b->rows_offset, b->rows_length);
}

// ref_conf is the table's store conf, written out here (not read through
// the server's code).
static struct tbl_conf
ref_conf(enum tbl_optim optim)
{
	struct tbl_conf c;
	memset(&c, 0, sizeof(c));
	c.dim        = DIM;
	c.table      = 0;
	c.seed       = SEED;
	c.init       = TBL_INIT_UNIFORM;
	c.init_scale = 0.1f;
	c.optim      = optim;
	c.beta1      = 0.9f;
	c.beta2      = 0.999f;
	c.eps        = 1e-8f;
	c.ftrl_beta  = 1.0f;
	return c;
}

// A rank's batch for one table shard: keys with counts and grads.
struct batch {
	uint64_t keys[MAXK];
	uint32_t counts[MAXK];
	float    grads[MAXK * DIM];
	uint32_t n;
};

// make_batch fills rank's batch of step k for table shard id of S: keys
// 0..99 that route there, rank 0 the even ones, rank 1 every third (so
// some overlap), with counts and grads from (rank, step, key).
static void
make_batch(struct batch *b, uint32_t id, uint32_t S, int rank, int k)
{
	b->n = 0;
	for (uint64_t key = 0; key < 200 && b->n < MAXK; key++) {
		if (tbl_key_shard(key, S) != id ||
		    (rank == 0 ? key % 2 != 0 : key % 3 != 0)) {
			continue;
		}
		b->keys[b->n]   = key;
		b->counts[b->n] = (uint32_t) (1 + (key + (uint64_t) rank) % 3);
		for (int d = 0; d < DIM; d++) {
			b->grads[b->n * DIM + d] = (float) rank * 0.25f -
			    (float) k * 0.125f + (float) (key % 7) * 0.0625f -
			    (float) d * 0.5f;
		}
		b->n++;
	}
}

// ref_round applies a sync round of the two ranks' batches to ref as the
// servers must: per key, rank 0's gradient then rank 1's added, counts
// summed; scale 1/samples; lr 0.1; version v + 1.
static void
ref_round(struct tbl *ref, const struct batch *b0, const struct batch *b1,
    uint32_t samples, uint64_t v)
{
	uint64_t            keys[2 * MAXK];
	uint32_t            counts[2 * MAXK];
	float               g[2 * MAXK * DIM];
	uint32_t            m     = 0;
	const struct batch *bs[2] = { b0, b1 };
	for (int r = 0; r < 2; r++) {
		for (uint32_t j = 0; j < bs[r]->n; j++) {
			uint32_t at = m;
			for (uint32_t u = 0; u < m; u++) {
				if (keys[u] == bs[r]->keys[j]) {
					at = u;
				}
			}
			const float *x = &bs[r]->grads[j * DIM];
			if (at == m) {
				keys[m]   = bs[r]->keys[j];
				counts[m] = bs[r]->counts[j];
				memcpy(&g[m * DIM], x, DIM * 4);
				m++;
				continue;
			}
			counts[at] += bs[r]->counts[j];
			for (int d = 0; d < DIM; d++) {
				g[at * DIM + d] += x[d];
			}
		}
	}
	ck_assert_int_eq(tbl_apply(ref, keys, m, g, counts,
	                     (float) (1.0 / (double) samples), (float) 0.1,
	                     v + 1),
	    0);
}

// parked_on returns the server's parked-calls count (Stats "parked:").
static uint64_t
parked_on(struct ps_server *s)
{
	char st[8192];
	ps_server_stats(s, st, sizeof(st));
	return pt_stat(st, "parked:");
}

// A rank's Rows call on its own thread (it parks).
struct rcall {
	const char *url;
	uint32_t    rank;
	uint64_t    epoch;
	struct blk  push, pull;
	uint32_t    samples;
	struct rres res;
};

static void *
rcall_main(void *arg)
{
	struct rcall *c = arg;
	rows_call(c->url, c->rank, c->epoch, &c->push, 1, &c->pull, 1,
	    c->samples, &c->res);
	return NULL;
}

// sync_rounds runs two sync rounds of both ranks on every table shard
// and checks each pulled row against the reference bit for bit.
static void
sync_rounds(const char *optim, enum tbl_optim ro)
{
	struct rjob     jb;
	struct batch    b[2];
	struct tbl_conf rc  = ref_conf(ro);
	struct tbl     *ref = tbl_open(&rc);
	float           got[MAXK * DIM], want[MAXK * DIM];
	ck_assert_ptr_nonnull(ref);
	job_open(&jb, PSWIRE__MODE__MODE_SYNC, optim, 0, 0, 0);
	uint64_t epoch = jb.map->placement->epoch;
	for (int k = 0; k < 2; k++) {
		for (uint32_t id = 0; id < jb.S; id++) {
			int          sv = srv_of(&jb, id);
			struct rcall c[2];
			pthread_t    th;
			for (int r = 0; r < 2; r++) {
				make_batch(&b[r], id, jb.S, r, k);
				c[r] = (struct rcall) { .url = jb.surl[sv],
					.rank                = (uint32_t) r,
					.epoch               = epoch,
					.samples = (uint32_t) (3 + 2 * r) };
				c[r].push = (struct blk) { id, (uint64_t) k,
					b[r].n, b[r].keys, b[r].counts,
					b[r].grads, COMP_NONE, 0 };
				c[r].pull = (struct blk) { id,
					(uint64_t) k + 1, b[r].n, b[r].keys,
					NULL, NULL, 0, 0 };
			}
			// The first rank's pull of version k + 1 parks until
			// the other one closes the round (rank 0 first at
			// step 0, rank 1 first at step 1).
			int      first = k % 2;
			uint64_t p0    = parked_on(jb.srv[sv]);
			pthread_create(&th, NULL, rcall_main, &c[first]);
			for (int t = 0;
			     t < 1000 && parked_on(jb.srv[sv]) == p0; t++) {
				fb_sleep_us(5000);
			}
			ck_assert_uint_eq(parked_on(jb.srv[sv]), p0 + 1);
			rcall_main(&c[1 - first]);
			pthread_join(th, NULL);
			ref_round(ref, &b[0], &b[1], 3 + 5, (uint64_t) k);
			for (int r = 0; r < 2; r++) {
				ck_assert_msg(c[r].res.status ==
				        PSWIRE__STATUS__OK,
				    "rank %d: %s", r, c[r].res.err);
				ck_assert_uint_eq(
				    c[r].res.h->rows_rep->rows[0]->version,
				    (uint64_t) k + 1);
				rows_of(&c[r].res, 0, got);
				tbl_lookup(ref, b[r].keys, b[r].n, want);
				ck_assert_msg(memcmp(got, want,
				                  4 * (size_t) b[r].n * DIM) ==
				        0,
				    "step %d shard %u rank %d: rows differ "
				    "(%g vs %g)",
				    k, id, r, (double) got[0],
				    (double) want[0]);
				rres_free(&c[r].res);
			}
		}
	}
	tbl_close(ref);
	job_close(&jb);
}

START_TEST(test_rows_sync_sgd_exact)
{
	sync_rounds("sgd", TBL_OPT_SGD);
}
END_TEST

START_TEST(test_rows_sync_adagrad_exact)
{
	sync_rounds("adagrad", TBL_OPT_ADAGRAD);
}
END_TEST

// An async push applies on arrival: the pull in the same call sees it.
START_TEST(test_rows_async_applies_at_once)
{
	struct rjob     jb;
	struct batch    b;
	struct tbl_conf rc  = ref_conf(TBL_OPT_SGD);
	struct tbl     *ref = tbl_open(&rc);
	float           got[MAXK * DIM], want[MAXK * DIM];
	struct rres     res;
	job_open(&jb, PSWIRE__MODE__MODE_ASYNC, "", 0, 0, 0);
	make_batch(&b, 0, jb.S, 0, 0);
	struct blk push = { 0, 0, b.n, b.keys, b.counts, b.grads, COMP_NONE,
		0 };
	struct blk pull = { 0, 0, b.n, b.keys, NULL, NULL, 0, 0 };
	rows_call(jb.surl[srv_of(&jb, 0)], 0, jb.map->placement->epoch, &push,
	    1, &pull, 1, 4, &res);
	ck_assert_msg(res.status == PSWIRE__STATUS__OK, "%s", res.err);
	ck_assert_int_eq(tbl_apply(ref, b.keys, b.n, b.grads, b.counts, 0.25f,
	                     (float) 0.1, 1),
	    0);
	rows_of(&res, 0, got);
	tbl_lookup(ref, b.keys, b.n, want);
	ck_assert_int_eq(memcmp(got, want, 4 * (size_t) b.n * DIM), 0);
	ck_assert_uint_eq(res.h->rows_rep->rows[0]->version, 1);
	rres_free(&res);
	tbl_close(ref);
	job_close(&jb);
}
END_TEST

// A bad-input case: the block spec to mutate and what the refusal says.
struct bad {
	const char *what; // expected in the error text
	int         status;
};

START_TEST(test_rows_bad_input_refused)
{
	struct rjob  jb;
	struct batch good, other;
	float        got[MAXK * DIM], init[MAXK * DIM];
	struct rres  res;
	// Four table shards: each server holds two, so a request carries a
	// good block beside the bad one.
	job_open(&jb, PSWIRE__MODE__MODE_ASYNC, "sgd", 4, 0, 0);
	const Pswire__Placement *pl = jb.map->placement;
	uint64_t                 ep = pl->epoch;
	uint32_t                 a = 0, c = 1, far = 0;
	while (c < jb.S && srv_of(&jb, c) != srv_of(&jb, a)) {
		c++;
	}
	ck_assert_uint_lt(c, jb.S); // two shards on one server
	while (far < jb.S && srv_of(&jb, far) == srv_of(&jb, a)) {
		far++;
	}
	ck_assert_uint_lt(far, jb.S);
	const char *url = jb.surl[srv_of(&jb, a)];
	make_batch(&good, a, jb.S, 0, 0);
	make_batch(&other, c, jb.S, 0, 0);
	ck_assert_uint_gt(good.n, 2);
	ck_assert_uint_gt(other.n, 2);
	struct blk g = { a, 0, good.n, good.keys, good.counts, good.grads,
		COMP_NONE, 0 };
	for (int k = 0; k < 12; k++) {
		struct batch x       = other;
		struct blk   bad     = { c, 0, x.n, x.keys, x.counts, x.grads,
			      COMP_NONE, 0 };
		struct blk   pair[2] = { g, bad };
		const char  *want    = NULL;
		int          st      = PSWIRE__STATUS__INVALID_ARGUMENT;
		switch (k) {
		case 0:
			pair[1].shard = jb.S + 5;
			want          = "does not exist";
			break;
		case 1:
			pair[1].shard = far;
			want          = "not placed on this server";
			break;
		case 2:
			pair[1].n = (1u << 22) + 1;
			want      = "limit";
			break;
		case 3:
			want = "payload"; // keys past the payload (raw)
			break;
		case 4:
			pair[1].codec = COMP_FP16; // not the table's codec
			want          = "push codec";
			break;
		case 5:
			x.counts[1] = 0;
			want        = "count 0";
			break;
		case 6:
			x.keys[1] = good.keys[0]; // another shard's key
			want      = "hash range";
			break;
		case 7:
			x.keys[1] = x.keys[0];
			want      = "twice";
			break;
		case 8:
			x.grads[5] = NAN;
			want       = "NaN or Inf";
			break;
		case 9:
			x.grads[2] = INFINITY;
			want       = "NaN or Inf";
			break;
		case 10:
			pair[1].version = 9;
			want            = "version";
			st              = PSWIRE__STATUS__FAILED_PRECONDITION;
			break;
		default:
			pair[1].trim = 4; // rows_length not n * dim floats
			want         = "row bytes";
			break;
		}
		if (k == 2 || k == 3) {
			// n over the limit, or keys outside the payload:
			// the block claims more keys than it carries.
			Pswire__Header      h  = PSWIRE__HEADER__INIT;
			Pswire__RowsRequest rq = PSWIRE__ROWS_REQUEST__INIT;
			Pswire__RowBlock    rb = PSWIRE__ROW_BLOCK__INIT,
			                 *rbp  = &rb;
			uint8_t pay[64]        = { 0 };
			rb.shard               = c;
			rb.n                   = k == 2 ? (1u << 22) + 1 : 100;
			rq.n_pull              = 1;
			rq.pull                = &rbp;
			h.rank                 = 0;
			h.epoch                = ep;
			h.body_case            = PSWIRE__HEADER__BODY_ROWS_REQ;
			h.rows_req             = &rq;
			Pswire__Header *rh     = NULL;
			ck_assert_int_eq(pt_rpc(NULL, url,
			                     PSWIRE__METHOD__ROWS, &h, pay,
			                     sizeof(pay), &rh),
			    st);
			ck_assert_msg(strstr(rh->error, want) != NULL,
			    "case %d: '%s' lacks '%s'", k, rh->error, want);
			pswire__header__free_unpacked(rh, NULL);
			continue;
		}
		rows_call(url, 0, ep, pair, 2, NULL, 0, 2, &res);
		ck_assert_msg(res.status == st && strstr(res.err, want),
		    "case %d: status %d '%s', want %d '%s'", k, res.status,
		    res.err, st, want);
		rres_free(&res);
	}
	// Nothing applied: the good block's rows are still their initial
	// values, and no row exists.
	struct tbl_conf rc  = ref_conf(TBL_OPT_SGD);
	struct tbl     *ref = tbl_open(&rc);
	struct blk      q   = { a, 0, good.n, good.keys, NULL, NULL, 0, 0 };
	rows_call(url, 0, ep, NULL, 0, &q, 1, 0, &res);
	rows_of(&res, 0, got);
	tbl_lookup(ref, good.keys, good.n, init);
	ck_assert_int_eq(memcmp(got, init, 4 * (size_t) good.n * DIM), 0);
	ck_assert_uint_eq(res.h->rows_rep->rows[0]->version, 0);
	rres_free(&res);
	char st[8192];
	ps_server_stats(jb.srv[srv_of(&jb, a)], st, sizeof(st));
	ck_assert_msg(strstr(st, "table_emb:rows=0,") != NULL, "%s", st);
	tbl_close(ref);
	job_close(&jb);
}
END_TEST

// tstat: field f of table name's stats line (st: ps_server_stats).
static uint64_t
tstat(const char *st, const char *name, const char *f)
{
	char        key[64];
	const char *p, *q;
	snprintf(key, sizeof(key), "\ntable_%s:", name);
	p = strstr(st, key);
	ck_assert_msg(p != NULL, "%s", st);
	snprintf(key, sizeof(key), ",%s=", f);
	q = strstr(p, key);
	ck_assert_msg(q != NULL && q < strchr(p + 1, '\n'), "%s", st);
	return strtoull(q + strlen(key), NULL, 10);
}

// --sparse-capacity-mb 1 (LRU, then LFU): streaming many more rows than
// fit through table "emb" while the 20 rows of table "hot" (2 shards each)
// are updated at every push keeps the server's tables under the budget by
// evicting old emb rows only: hot keeps every row. Failure: a budget split
// into shares per shard (hot's pages cannot shrink to its share, so it
// lost every row at every update), or the budget missed.
START_TEST(test_rows_capacity_evicts)
{
	struct rjob jb;
	struct rres res;
	enum { N = 4000, NH = 20 };
	uint64_t *keys   = malloc(N * 8), hkeys[NH];
	uint32_t *counts = malloc(N * 4), h = 2;
	float    *grads = calloc((size_t) N * DIM, 4);
	job_open(&jb, PSWIRE__MODE__MODE_ASYNC, "adagrad", 2, 1, _i);
	int         x   = srv_of(&jb, 0); // emb's range 0 and a hot range
	const char *url = jb.surl[x];
	while (h < 4 && srv_of(&jb, h) != x) {
		h++;
	}
	ck_assert_msg(h < 4, "no range of hot with emb's range 0");
	for (uint64_t k = 0, n = 0; n < NH; k++) {
		if (tbl_key_shard(k, 2) == h - 2) {
			hkeys[n++] = k;
		}
	}
	for (uint64_t round = 0, k = 0; round < 40; round++) {
		for (uint32_t i = 0; i < N; k++) {
			if (tbl_key_shard(k, 2) == 0) {
				keys[i]     = k;
				counts[i++] = 1;
			}
		}
		struct blk p[2] = { { 0, round, N, keys, counts, grads,
			                COMP_NONE, 0 },
			{ h, round, NH, hkeys, counts, grads, COMP_NONE, 0 } };
		rows_call(url, 0, jb.map->placement->epoch, p, 2, NULL, 0, 1,
		    &res);
		ck_assert_msg(res.status == PSWIRE__STATUS__OK, "%s", res.err);
		rres_free(&res);
	}
	char st[8192];
	ps_server_stats(jb.srv[x], st, sizeof(st));
	ck_assert_msg(pt_stat(st, "table_bytes:") <= 1u << 20, "%s", st);
	ck_assert_uint_gt(pt_stat(st, "capacity_evicted:"), 0);
	ck_assert_uint_gt(tstat(st, "emb", "evicted"), 40 * N / 2);
	ck_assert_uint_eq(tstat(st, "hot", "evicted"), 0);
	ck_assert_uint_eq(tstat(st, "hot", "admitted"), NH);
	struct obs_writer w = OBS_WRITER_INIT;
	PT_OK(obs_registry_write(ps_server_metrics(jb.srv[x]), &w));
	ck_assert_msg(
	    strstr(w.buf, "ferry_table_evicted_total{table=\"emb\"} 0\n") ==
	            NULL &&
	        strstr(w.buf, "ferry_table_evicted_total{table=\"emb\"}") !=
	            NULL,
	    "%s", w.buf);
	obs_writer_fini(&w);
	free(keys);
	free(counts);
	free(grads);
	job_close(&jb);
}
END_TEST

// The scheduler refuses a bad TableDesc at Register, naming the table and
// the field.
START_TEST(test_rows_scheduler_refuses_bad_table)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *sched;
	Pswire__JobConfig        j;
	Pswire__TensorDesc       td, *tp;
	Pswire__TableDesc        tb[2], *tbp[2];
	char                     url[64], err[256];
	so.url      = pt_addr(url, sizeof(url), "tcp");
	so.trainers = 1;
	so.servers  = 1;
	PT_OK(ps_scheduler_open(&so, &sched));
	for (int k = 0; k < 7; k++) {
		const char *want = NULL;
		job_desc(&j, &td, &tp, &tb[0], &tbp[0], 0, "sgd", 0);
		tb[1]      = tb[0];
		tb[1].name = "other";
		tbp[1]     = &tb[1];
		j.n_tables = 2;
		j.tables   = tbp;
		switch (k) {
		case 0:
			tb[1].dim = 0;
			want      = "table 1 ('other'): dim";
			break;
		case 1:
			tb[1].dim = 4097;
			want      = "dim 4097";
			break;
		case 2:
			tb[1].optim = "rmsprop";
			want        = "optim 'rmsprop'";
			break;
		case 3:
			tb[1].codec_pull = "q4";
			want             = "codec_pull 'q4'";
			break;
		case 4:
			tb[1].admit_prob = 1.5f;
			want             = "admit_prob";
			break;
		case 5:
			tb[1].name = "emb";
			want       = "name 'emb'";
			break;
		default:
			tb[1].shards = 70000;
			want         = "shards 70000";
			break;
		}
		ck_assert_int_eq(reg(url, 0, &j, err, sizeof(err)),
		    PSWIRE__STATUS__INVALID_ARGUMENT);
		ck_assert_msg(strstr(err, want) != NULL,
		    "case %d: '%s' lacks '%s'", k, err, want);
	}
	ps_scheduler_close(sched);
}
END_TEST

// A trainer leaves: the next map keeps every table shard where it was,
// and a sync round of the table no longer waits for the trainer.
START_TEST(test_rows_table_shards_stay)
{
	struct rjob  jb;
	struct batch b;
	struct rres  res;
	job_open(&jb, PSWIRE__MODE__MODE_SYNC, "sgd", 0, 0, 0);
	const Pswire__Placement *p1   = jb.map->placement;
	const char              *surl = ps_scheduler_url(jb.sched);
	ck_assert_int_eq(member_call(surl, PSWIRE__METHOD__LEAVE,
	                     PSWIRE__ROLE__ROLE_TRAINER, 1),
	    PSWIRE__STATUS__OK);
	Pswire__Header          *m2 = map_at_least(surl, p1->epoch + 1, 10000);
	const Pswire__Placement *p2 = m2->placement;
	ck_assert_uint_eq(p2->n_table_shards, p1->n_table_shards);
	for (size_t i = 0; i < p1->n_table_shards; i++) {
		ck_assert_uint_eq(p2->table_shards[i]->server,
		    p1->table_shards[i]->server);
		ck_assert_uint_eq(p2->table_shards[i]->offset,
		    p1->table_shards[i]->offset);
		ck_assert_uint_eq(p2->table_shards[i]->len,
		    p1->table_shards[i]->len);
		ck_assert_uint_eq(p2->table_shards[i]->seed_gen, 0);
	}
	// Rank 0 alone closes the round once the servers have the map.
	make_batch(&b, 0, jb.S, 0, 0);
	struct blk  push = { 0, 0, b.n, b.keys, b.counts, b.grads, COMP_NONE,
		 0 };
	struct blk  pull = { 0, 1, b.n, b.keys, NULL, NULL, 0, 0 };
	const char *url  = jb.surl[srv_of(&jb, 0)];
	for (int t = 0; t < 200; t++) {
		char st[8192];
		ps_server_stats(jb.srv[srv_of(&jb, 0)], st, sizeof(st));
		if (pt_stat(st, "map_epoch:") >= p2->epoch) {
			break;
		}
		fb_sleep_us(10000);
	}
	rows_call(url, 0, p2->epoch, &push, 1, &pull, 1, 2, &res);
	ck_assert_msg(res.status == PSWIRE__STATUS__OK, "%s", res.err);
	ck_assert_uint_eq(res.h->rows_rep->rows[0]->version, 1);
	rres_free(&res);
	pswire__header__free_unpacked(m2, NULL);
	job_close(&jb);
}
END_TEST

Suite *
suite_rows(void)
{
	Suite *s  = suite_create("rows");
	TCase *tc = tcase_create("rows");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_rows_sync_sgd_exact);
	tcase_add_test(tc, test_rows_sync_adagrad_exact);
	tcase_add_test(tc, test_rows_async_applies_at_once);
	tcase_add_test(tc, test_rows_bad_input_refused);
	tcase_add_loop_test(tc, test_rows_capacity_evicts, 0, 2);
	tcase_add_test(tc, test_rows_scheduler_refuses_bad_table);
	tcase_add_test(tc, test_rows_table_shards_stay);
	suite_add_tcase(s, tc);
	return s;
}
