// rows_repl.c — applying an update to a sparse table shard: the
// primary's forward of it to the shard's backups (--replicas) first, the
// apply and the eviction after it (ps__rows_apply, for rows.c's rounds and
// async pushes), and the backup's side: checking and applying a forward.
//
// DESIGN. A table shard's update is n rows (distinct keys, counts, fp32
// gradients) applied with tbl_apply at a scale and an lr (a sync round's
// rank-order sum, or one async push). The
// store is deterministic (the same inputs give the same bits, rows of
// absent keys created from (seed, table, key)), so a backup that applies
// the same updates in the same order holds the same rows and optimizer
// state. ps__rows_apply forwards each update BEFORE it applies it: one
// Replicate per backup (ReplicateRequest.table; payload keys, counts,
// gradients), sent on replicate.c's forwards (one nng context per shard
// and backup; a backup that does not acknowledge, or misses an update, is
// resynced with a backup Transfer of the whole shard, rows_move.c's
// image). Until every backup answered, ts->fwd_pending is non-zero and
// the Rows calls that would show the version (its pulls; async: the
// push's reply) park (rows_park.c), so a version a trainer saw is held by
// every live copy: when the primary dies or leaves the scheduler promotes
// a backup (scheduler_tables.c) and no acknowledged update is lost. A
// round that never completed on the old primary (its staged pushes die
// with it) is pushed again by the trainers (RowsRequest.resend).
//
// A backup checks an update before it acknowledges it: the next version
// (a retry of one it holds is answered OK; one further ahead, or any
// while it awaits a resync, UNAVAILABLE: the primary resyncs it), its
// length, keys in the shard's range, counts >= 1, finite floats. It
// never serves trainers (rows.c's block_owner) and evicts only as its
// primary does (the idle sweep at the same versions; the capacity budget
// does not touch replicated shards: an eviction for it depends on the
// server's other shards, so a copy would diverge).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server_impl.h"
#include "test_hooks.h"

// The most rows of one forwarded update (a Rows request's limit).
#define REPL_MAX_KEYS (1u << 22)

// ---- after an update: eviction -------------------------------------------

// evictable: whether table shard k may lose rows for the budget (not a
// replicated one: its copies would diverge). mu held.
static bool
evictable(struct ps_server *s, uint32_t k)
{
	const uint32_t *bl;
	return !s->tshards[k].backup &&
	    ps__tshard_backups(s, s->tshards[k].id, &bl) == 0;
}

// capacity_pass removes the least valuable rows of all the evictable
// shards (by --sparse-evict: last touch or the sketch's count, which
// compare across shards) whose bytes (tbl_evict_hist's estimate) cover
// `need`, hist's buckets zeroed first. Returns the rows removed. mu held.
static size_t
capacity_pass(struct ps_server *s, uint64_t *hist, uint64_t need,
    uint64_t newest)
{
	enum tbl_evict pol = s->opts.sparse_evict == 1 ? TBL_EVICT_LFU
	                                               : TBL_EVICT_LRU;
	uint64_t       acc = 0;
	size_t         n   = 0;
	memset(hist, 0, TBL_EVICT_BUCKETS * sizeof(*hist));
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		if (evictable(s, k)) {
			tbl_evict_hist(s->tshards[k].t, pol, newest, hist);
		}
	}
	// The least valuable buckets whose bytes cover need; of the last,
	// the share still needed (every row when nothing covers it).
	uint32_t b = 0;
	while (b < TBL_EVICT_BUCKETS && acc + hist[b] < need) {
		acc += hist[b++];
	}
	double frac = b < TBL_EVICT_BUCKETS
	    ? (double) (need - acc) / (double) hist[b]
	    : 1.0;
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		if (evictable(s, k)) {
			n += tbl_evict_below(s->tshards[k].t, pol, newest, b,
			    frac);
		}
	}
	return n;
}

// evict_to_capacity holds the table shards under --sparse-capacity-mb as
// one budget: past it, the least valuable rows of all the evictable
// shards go until the tables hold at most 90% of it (so that the next
// updates do not evict again at once). Not a share per shard: a shard's
// memory is page and chunk granular, and a small shard (a small
// vocabulary: the hottest rows) held to a share of it lost every row at
// every update. The bytes a removal frees are estimated (rows free
// memory in steps): passes repeat while the tables are over the budget
// and rows go, a few at most; the next update checks again. mu held.
static void
evict_to_capacity(struct ps_server *s)
{
	uint64_t *hist = s->evict_hist; // made at the first eviction, kept
	for (int pass = 0; pass < 8; pass++) {
		uint64_t total = 0, newest = 0, rows = 0;
		for (uint32_t k = 0; k < s->n_tshards; k++) {
			total += tbl_bytes(s->tshards[k].t);
			rows += evictable(s, k) ? tbl_rows(s->tshards[k].t)
			                        : 0;
			if (s->tshards[k].version > newest) {
				newest = s->tshards[k].version;
			}
		}
		if (total <= s->opts.sparse_capacity || rows == 0) {
			break; // under the budget, or nothing to evict
		}
		if (hist == NULL &&
		    (hist = s->evict_hist = fb_alloc(
		         TBL_EVICT_BUCKETS * sizeof(*hist))) == NULL) {
			FB_LOG(FB_LOG_ERR, "tables",
			    "out of memory for the eviction histogram: the "
			    "tables stay over --sparse-capacity-mb until the "
			    "next update");
			break;
		}
		size_t n = capacity_pass(s, hist,
		    total - s->opts.sparse_capacity / 10 * 9, newest);
		s->cap_evicted += n;
	}
}

// evict_after_update runs ts's idle sweep when due and holds the table
// shards under --sparse-capacity-mb. mu held.
static void
evict_after_update(struct ps_server *s, struct srv_tshard *ts)
{
	uint64_t every = ts->tb.conf.evict_after / 4;
	if (ts->tb.conf.evict_after > 0 &&
	    ts->version % (every > 0 ? every : 1) == 0) {
		tbl_evict_idle(ts->t, ts->version);
		ts->idle_at = ts->version;
	}
	if (s->opts.sparse_capacity != 0) {
		evict_to_capacity(s);
	}
}

void
ps__rows_apply(struct ps_server *s, struct srv_tshard *ts,
    const uint64_t *keys, size_t n, const float *grads, const uint32_t *counts,
    float scale, float lr)
{
	if (!ts->backup) {
		ps__rows_forward(s, ts, keys, n, grads, counts, scale, lr);
	}
	if (tbl_apply(ts->t, keys, n, grads, counts, scale, lr,
	        ts->version + 1) != 0) {
		FB_LOG(FB_LOG_ERR, "tables",
		    "table shard %u: out of memory for new rows at version "
		    "%llu (the rows that fit were applied)",
		    ts->id, (unsigned long long) ts->version + 1);
	}
	ts->version++;
	atomic_fetch_add_explicit(&s->n_applied, 1, memory_order_relaxed);
	evict_after_update(s, ts);
	ps__snap_on_tversion(s, ts); // snapshots (rows_snap.c)
}

// update_build packs ts's update (n rows; scale, lr; it makes version
// ts->version + 1) into a Replicate in *out with request id rid.
// FB_ENOMEM. mu held.
static int
update_build(struct ps_server *s, const struct srv_tshard *ts,
    const uint64_t *keys, size_t n, const float *grads, const uint32_t *counts,
    float scale, float lr, uint64_t rid, nng_msg **out)
{
	Pswire__Header           h = PSWIRE__HEADER__INIT;
	Pswire__ReplicateRequest q = PSWIRE__REPLICATE_REQUEST__INIT;
	size_t   dim = ts->tb.conf.dim, plen = n * (12 + 4 * dim), hl;
	uint8_t *p;
	q.shard         = ts->id;
	q.version       = ts->version + 1;
	q.table         = 1;
	q.n             = (uint32_t) n;
	q.scale         = scale;
	q.lr            = lr;
	h.request_id    = rid;
	h.epoch         = s->pl->epoch;
	h.body_case     = PSWIRE__HEADER__BODY_REPLICATE_REQ;
	h.replicate_req = &q;
	hl              = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(out, hl, plen, &p) != FB_OK) {
		return FB_ENOMEM;
	}
	memcpy(p, keys, n * 8);
	memcpy(p + n * 8, counts, n * 4);
	memcpy(p + n * 12, grads, n * dim * 4);
	if (psw_msg_finish(*out, PSWIRE__METHOD__REPLICATE, 0, &h.base, hl,
	        plen) != FB_OK) {
		nng_msg_free(*out);
		return FB_ENOMEM;
	}
	return FB_OK;
}

void
ps__rows_forward(struct ps_server *s, struct srv_tshard *ts,
    const uint64_t *keys, size_t n, const float *grads, const uint32_t *counts,
    float scale, float lr)
{
	const uint32_t *b;
	int             nb = ps__tshard_backups(s, ts->id, &b);
	nng_msg        *m0 = NULL;
	uint64_t        rid;
	if (nb == 0 || s->repl == NULL) {
		return;
	}
	rid = (ts->version + 1) << 4;
	if (update_build(s, ts, keys, n, grads, counts, scale, lr, rid, &m0) !=
	    FB_OK) {
		m0 = NULL;
	}
	for (int k = 0; k < nb; k++) {
		nng_msg *m = NULL;
		if (m0 != NULL && k + 1 < nb && nng_msg_dup(&m, m0) != 0) {
			m = NULL;
		} else if (m0 != NULL && k + 1 == nb) {
			m  = m0; // the last backup takes the original
			m0 = NULL;
		}
		if (m == NULL) {
			// The backup misses this version and refuses the
			// next (UNAVAILABLE): it is resynced then.
			FB_LOG(FB_LOG_ERR, "replica",
			    "table shard %u: out of memory forwarding version "
			    "%llu to server %u",
			    ts->id, (unsigned long long) ts->version + 1,
			    b[k]);
			continue;
		}
		if (ps__repl_tsend(s, ts, k, b[k], m, rid) < 0) {
			FB_LOG(FB_LOG_ERR, "replica",
			    "table shard %u: cannot forward version %llu to "
			    "server %u (no connection)",
			    ts->id, (unsigned long long) ts->version + 1,
			    b[k]);
		}
	}
	if (m0 != NULL) {
		nng_msg_free(m0);
	}
}

// update_check checks Replicate q of backup ts (payload p, len bytes):
// lengths, scale, lr, keys in range, counts >= 1, finite gradients.
// NULL, or what is wrong. mu held.
static const char *
update_check(const struct srv_tshard *ts, const Pswire__ReplicateRequest *q,
    const uint8_t *p, uint64_t len)
{
	uint64_t n = q->n, dim = ts->tb.conf.dim;
	if (n > REPL_MAX_KEYS || len != n * (12 + 4 * dim)) {
		return "its rows do not match the payload";
	}
	if (!isfinite(q->scale) || q->scale <= 0 || !isfinite(q->lr)) {
		return "its scale or lr is not a finite number";
	}
	for (uint64_t j = 0; j < n; j++) {
		uint64_t key, top;
		uint32_t cnt;
		memcpy(&key, p + 8 * j, 8);
		memcpy(&cnt, p + 8 * n + 4 * j, 4);
		top = tbl_key_hash(key) >> 32;
		if (top < ts->lo || top >= ts->hi) {
			return "a key is outside the shard's range";
		}
		if (cnt == 0) {
			return "a count is 0";
		}
	}
	if (!fb_all_finite(p + 12 * n, (size_t) (n * dim))) {
		return "its gradients hold NaN or Inf";
	}
	return NULL;
}

void
ps__rows_on_replicate(struct ps_server *s, struct ps_call *c,
    const Pswire__ReplicateRequest *q)
{
	Pswire__Header     h = PSWIRE__HEADER__INIT;
	struct srv_tshard *ts;
	const char        *bad;
	uint64_t           len = c->frame.payload_len;
	if (q->shard >= s->n_tglobal) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "replicate table shard %u: the job has %zu", q->shard,
		    s->n_tglobal);
		return;
	}
	// Only the shard's primary in this server's map updates it.
	if (!ps__call_acts_as(c, PSW_ROLE_SERVER,
	        s->pl->table_shards[q->shard]->server, 0)) {
		return;
	}
	if (s->tlocal[q->shard] < 0 ||
	    !s->tshards[s->tlocal[q->shard]].backup) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "table shard %u is not held here as a backup (epoch %llu)",
		    q->shard, (unsigned long long) s->pl->epoch);
		return;
	}
	ts = &s->tshards[s->tlocal[q->shard]];
	if (ts->synced && q->version <= ts->version) {
		h.request_id = c->hdr->request_id;
		ps__call_reply(c, &h); // a retry of one applied
		return;
	}
	if (!ts->synced || q->version != ts->version + 1) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "table shard %u: backup at version %llu%s, update makes "
		    "%llu",
		    q->shard, (unsigned long long) ts->version,
		    ts->synced ? "" : " (awaiting a resync)",
		    (unsigned long long) q->version);
		return;
	}
	if ((bad = update_check(ts, q, c->frame.payload, len)) != NULL) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "replicate table shard %u: %s", q->shard, bad);
		return;
	}
	// Aligned copies (keys at 0, counts at 8n, gradients at 12n).
	if (len > s->trepl_cap) {
		uint8_t *nb = fb_realloc(s->trepl, len);
		if (nb == NULL) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory for table shard %u's update",
			    q->shard);
			return;
		}
		s->trepl     = nb;
		s->trepl_cap = len;
	}
	size_t n     = q->n;
	float  scale = q->scale, lr = q->lr;
	if (len > 0) {
		memcpy(s->trepl, c->frame.payload, len);
	}
	h.request_id = c->hdr->request_id;
	ps__call_reply(c, &h); // releases c (q with it)
	ps__rows_apply(s, ts, (const uint64_t *) (const void *) s->trepl, n,
	    (const float *) (const void *) (s->trepl + 12 * n),
	    (const uint32_t *) (const void *) (s->trepl + 8 * n), scale, lr);
	// The round it closed is over here too: pushes staged for it (a
	// resync's Transfer carries the primary's) must not count in the
	// next one, or, promoted, this copy would refuse a rank's first push
	// of the new round as already made (ALREADY_EXISTS).
	for (uint32_t r = 0; r < s->trainers; r++) {
		ts->pushed[r]  = 0;
		ts->stage[r].n = 0;
	}
	ts->n_pushed = 0;
	ts->samples  = 0;
}

int
ps_server_test_table_backups_behind(struct ps_server *s)
{
	int n = 0;
	pthread_mutex_lock(&s->mu);
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		struct srv_tshard *ts = &s->tshards[k];
		if (ts->backup && ts->synced && ts->version > 0) {
			tbl_evict_to(ts->t, 0, TBL_EVICT_LRU);
			ts->version--;
			n++;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return n;
}
