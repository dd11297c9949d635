// rows.c — sparse tables on a server: the Rows call's checks, its pushes
// (staged for a sync round or applied at once) and the round's rank-order
// sum, and eviction after each update. Which table shards are held is
// rows_map.c's, moving them rows_move.c's, answering and parking the
// pulls rows_park.c's.
//
// DESIGN.
// - Every block of a Rows call is checked before anything changes
//   (table shard held here, payload bounds, codec, lengths, keys in the
//   shard's hash range and distinct, counts >= 1, versions), then every
//   push block is decoded into its rank's staging buffer and checked
//   finite; only when all are good do the pushes commit. So a bad request
//   applies nothing. Decoding runs under mu (unlike dense pushes, which
//   decode outside it): a table push is a few rows per shard.
// - Sync: a rank's push of a shard's version v stays in its staging
//   buffer until every rank still in the job has pushed v (trainers that
//   left, Placement.gone_trainers, and ranks a map added that have not
//   joined yet, store.c's JOINS, do not hold a round; sync_quorum is not
//   applied to tables). The round then sums the staged rows per key
//   in rank order (rank 0's keys first, each key's first gradient copied,
//   the next ones added), so the float sum is the same whatever the
//   arrival order, scales by 1 / (the round's samples) and applies it
//   with tbl_apply at version v + 1. The merge map (open addressing, key
//   -> accumulator row) and the staging buffers grow only: a step in
//   steady state allocates nothing.
// - Async and SSP (K > 0): each push applies on arrival (scale
//   1 / n_samples) and advances the shard's version and the rank's clock.
// - lr: TableDesc.lr when > 0, else the job's schedule at the version.
// - After each update (rows_repl.c's ps__rows_apply): the idle sweep
// (tbl_evict_idle, at most every
//   evict_after / 4 versions) and the --sparse-capacity-mb budget over
//   all table shards held here, one pool (tbl_evict_hist, then
//   tbl_evict_below in each shard: the least valuable rows of all of
//   them go, down to 90% of the budget). Everything under mu, so an
//   eviction never races an update.
// - Resends (RowsRequest.resend, sync): a push block of a round that
//   counted the rank's push (staged, or applied: the shard one version
//   past it, the rank's slot free) is skipped and its pull served.
// - Moves: a shard re-placed on a live server travels whole in a Transfer
//   (rows_move.c), ARRIVING (UNAVAILABLE) on its new server until then.
//   One re-placed here after its server was lost starts empty and adopts
//   the first sync push's version (`adopt`).
// - Replicas: every update is forwarded to the shard's backups before it
//   applies (rows_repl.c). So that a backup's store stays
//   bit-identical, the idle sweep runs at the versions that are
//   multiples of its period (on every copy alike), and the capacity
//   budget does not evict replicated shards (an eviction depends on the
//   server's other shards: a copy would diverge).
#include <stdio.h>
#include <string.h>

#include "server_impl.h"

// The most keys one Rows request may carry, over all its blocks.
#define ROWS_MAX_KEYS (1u << 22)

// get_u64 and get_u32 read little-endian payload words (any alignment;
// little-endian hosts only, checked at start-up).
static inline uint64_t
get_u64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t
get_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

// ---- the merge map: key -> row of accumulators, grow-only ----------------

// merge_reserve makes room for `rows` distinct keys of dim floats.
// FB_ENOMEM leaves the old room. mu held.
static int
merge_reserve(struct ps_server *s, size_t rows, uint32_t dim)
{
	size_t slots = 16;
	while (slots < 2 * rows) {
		slots *= 2;
	}
	if (rows > s->mcap) {
		uint64_t *k = fb_realloc(s->mkeys, rows * sizeof(*k));
		if (k == NULL) {
			return FB_ENOMEM;
		}
		s->mkeys    = k;
		uint32_t *c = fb_realloc(s->mcnt, rows * sizeof(*c));
		if (c == NULL) {
			return FB_ENOMEM;
		}
		s->mcnt = c;
		s->mcap = rows;
	}
	if (rows * dim > s->mdim_cap) {
		float *a = fb_realloc(s->macc, rows * dim * sizeof(*a));
		if (a == NULL) {
			return FB_ENOMEM;
		}
		s->macc     = a;
		s->mdim_cap = rows * dim;
	}
	if (slots > s->mslots) {
		uint32_t *sl = fb_zalloc(slots * sizeof(*sl));
		if (sl == NULL) {
			return FB_ENOMEM;
		}
		fb_free(s->mslot);
		s->mslot  = sl;
		s->mslots = slots;
	}
	return FB_OK;
}

// merge_find returns the row of key among the m keys in the map, or
// inserts it as row *m (and raises *m) when absent, with *fresh set.
// Room reserved (merge_reserve). mu held.
static uint32_t
merge_find(struct ps_server *s, uint64_t key, uint32_t *m, int *fresh)
{
	size_t mask = s->mslots - 1;
	size_t i    = (size_t) tbl_key_hash(key) & mask;
	for (;; i = (i + 1) & mask) {
		uint32_t v = s->mslot[i];
		if (v == 0) {
			s->mslot[i]  = *m + 1;
			s->mkeys[*m] = key;
			*fresh       = 1;
			return (*m)++;
		}
		if (s->mkeys[v - 1] == key) {
			*fresh = 0;
			return v - 1;
		}
	}
}

// merge_clear empties the map of its m keys (only their slots: the map
// may be much larger than one round). mu held.
static void
merge_clear(struct ps_server *s, uint32_t m)
{
	size_t mask = s->mslots - 1;
	for (uint32_t j = 0; j < m; j++) {
		size_t i = (size_t) tbl_key_hash(s->mkeys[j]) & mask;
		while (s->mslot[i] != j + 1) {
			i = (i + 1) & mask;
		}
		s->mslot[i] = 0; // the probe above skips cleared slots
	}
}

// ---- sync rounds ---------------------------------------------------------

// round_complete reports whether ts's sync round can close: a push is
// staged and every rank still in the job pushed. mu held.
static int
round_complete(const struct ps_server *s, const struct srv_tshard *ts)
{
	if (ts->n_pushed == 0) {
		return 0;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (!ts->pushed[r] && ps__rank_waited(s, r, ts->version)) {
			return 0;
		}
	}
	return 1;
}

static void round_close(struct ps_server *s, struct srv_tshard *ts);

void
ps__rows_round_try(struct ps_server *s, struct srv_tshard *ts)
{
	if (s->job.mode == PSWIRE__MODE__MODE_SYNC && round_complete(s, ts)) {
		round_close(s, ts);
	}
}

// table_lr is the lr of ts's update that makes version v + 1.
static float
table_lr(const struct ps_server *s, const struct srv_tshard *ts)
{
	return (float) (ts->tb.lr > 0
	        ? ts->tb.lr
	        : fb_lr_at(&s->job.lr_sched, ts->version));
}

// round_close sums ts's staged pushes per key in rank order, applies the
// sum / samples and opens the next round. mu held; round_complete.
static void
round_close(struct ps_server *s, struct srv_tshard *ts)
{
	uint32_t dim = ts->tb.conf.dim, m = 0;
	size_t   rows = 0;
	for (uint32_t r = 0; r < s->trainers; r++) {
		rows += ts->pushed[r] ? ts->stage[r].n : 0;
	}
	if (merge_reserve(s, rows, dim) != FB_OK) {
		// The round stays open; the next push or map retries.
		FB_LOG(FB_LOG_ERR, "tables",
		    "table shard %u: out of memory summing round %llu", ts->id,
		    (unsigned long long) ts->version);
		return;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		const struct srv_rstage *st = &ts->stage[r];
		if (!ts->pushed[r]) {
			continue;
		}
		for (size_t j = 0; j < st->n; j++) {
			int      fresh;
			uint32_t row = merge_find(s, st->keys[j], &m, &fresh);
			float   *acc = s->macc + (size_t) row * dim;
			const float *g = st->grads + j * dim;
			if (fresh) {
				memcpy(acc, g, dim * sizeof(float));
				s->mcnt[row] = st->counts[j];
				continue;
			}
			for (uint32_t d = 0; d < dim; d++) {
				acc[d] += g[d];
			}
			s->mcnt[row] += st->counts[j];
		}
	}
	float scale = (float) (1.0 / (double) ts->samples);
	ps__rows_apply(s, ts, s->mkeys, m, s->macc, s->mcnt, scale,
	    table_lr(s, ts));
	merge_clear(s, m);
	for (uint32_t r = 0; r < s->trainers; r++) {
		ts->pushed[r]  = 0;
		ts->stage[r].n = 0;
	}
	ts->n_pushed = 0;
	ts->samples  = 0;
}

// ---- a Rows call -----------------------------------------------------------

// block_owner finds table shard id of block b here (*ts) or replies the
// status dense shards get (owner.c) and returns -1. mu held.
static int
block_owner(struct ps_server *s, struct ps_call *c, uint32_t id,
    struct srv_tshard **ts)
{
	uint64_t mine = s->pl->epoch, epoch = c->hdr->epoch;
	if (id >= s->n_tglobal) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u does not exist (the job has %zu)", id,
		    s->n_tglobal);
		return -1;
	}
	if (s->tlocal[id] >= 0 && !s->tshards[s->tlocal[id]].backup) {
		*ts = &s->tshards[s->tlocal[id]];
		return 0;
	}
	if (s->tlocal[id] >= 0) {
		// A backup here (rows_repl.c): the map making it the primary
		// may be on its way.
		ps__server_reply_err(s, c,
		    epoch > mine ? PSWIRE__STATUS__UNAVAILABLE
		                 : PSWIRE__STATUS__STALE_EPOCH,
		    "table shard %u is held here as a backup (epoch %llu)", id,
		    (unsigned long long) mine);
	} else if (s->tlocal[id] == PS_SHARD_ARRIVING) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "table shard %u is arriving here (epoch %llu); retry", id,
		    (unsigned long long) mine);
	} else if (epoch > mine) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "table shard %u: placement epoch %llu is not applied here "
		    "yet (have %llu); retry",
		    id, (unsigned long long) epoch, (unsigned long long) mine);
	} else if (epoch < mine) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
		    "table shard %u moved: request uses placement epoch %llu, "
		    "current is %llu",
		    id, (unsigned long long) epoch, (unsigned long long) mine);
	} else {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u is not placed on this server", id);
	}
	return -1;
}

// in_payload reports whether [off, off + len) lies in the payload.
static int
in_payload(const struct ps_call *c, uint64_t off, uint64_t len)
{
	uint64_t plen = c->frame.payload_len;
	return off <= plen && len <= plen - off;
}

// block_keys checks b's keys (n at keys_offset, in bounds): each in ts's
// hash range, distinct, and (a push) counted at least once. Uses the merge
// map as a set. mu held. Returns 0 or replies and returns -1.
static int
block_keys(struct ps_server *s, struct ps_call *c, const Pswire__RowBlock *b,
    const struct srv_tshard *ts, int push)
{
	const uint8_t *kp = c->frame.payload + b->keys_offset;
	uint32_t       m  = 0;
	int            fresh, rv = 0;
	if (merge_reserve(s, b->n, 1) != FB_OK) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory checking %u keys", b->n);
		return -1;
	}
	for (uint32_t j = 0; rv == 0 && j < b->n; j++) {
		uint64_t key = get_u64(kp + 8 * (size_t) j);
		uint64_t top = tbl_key_hash(key) >> 32;
		if (top < ts->lo || top >= ts->hi) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "table shard %u: key %llu is not in its hash range "
			    "[%llu, %llu)",
			    ts->id, (unsigned long long) key,
			    (unsigned long long) ts->lo,
			    (unsigned long long) ts->hi);
			rv = -1;
		} else if (merge_find(s, key, &m, &fresh), !fresh) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "table shard %u: key %llu appears twice in the block",
			    ts->id, (unsigned long long) key);
			rv = -1;
		} else if (push &&
		    get_u32(c->frame.payload + b->counts_offset +
		        4 * (size_t) j) == 0) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "table shard %u: key %llu has count 0", ts->id,
			    (unsigned long long) key);
			rv = -1;
		}
	}
	merge_clear(s, m);
	return rv;
}

// block_version checks a block's version against ts (push: sync, the
// shard's round, not pushed yet by rank; async, not in the future; pull:
// sync, at most the next version). mu held. 0, or replies and -1.
static int
block_version(struct ps_server *s, struct ps_call *c,
    const Pswire__RowBlock *b, struct srv_tshard *ts, int push)
{
	int      sync = s->job.mode == PSWIRE__MODE__MODE_SYNC;
	uint32_t rank = c->hdr->rank;
	if (push && sync && c->hdr->rows_req->resend && !ts->adopt &&
	    ((b->version == ts->version && ts->pushed[rank]) ||
	        (b->version + 1 == ts->version && !ts->pushed[rank]))) {
		// A resend this round counted already (staged, or applied):
		// skipped, only its pull is left.
		ts->retried = s->stamp;
		return 0;
	}
	if (push && sync && ts->pushed[rank]) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__ALREADY_EXISTS,
		    "table shard %u: rank %u already pushed version %llu",
		    ts->id, rank, (unsigned long long) ts->version);
		return -1;
	}
	if (ts->adopt) {
		return 0; // re-placed empty: takes the push's version
	}
	if (push &&
	    ((sync && b->version != ts->version) ||
	        (!sync && b->version > ts->version))) {
		ps__server_reply_err(s, c,
		    b->version < ts->version
		        ? PSWIRE__STATUS__OUT_OF_RANGE
		        : PSWIRE__STATUS__FAILED_PRECONDITION,
		    "table shard %u: push for version %llu but the shard is at "
		    "version %llu",
		    ts->id, (unsigned long long) b->version,
		    (unsigned long long) ts->version);
		return -1;
	}
	if (!push && sync && b->version > ts->version + 1) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "table shard %u: pull for version %llu, which cannot exist "
		    "before version %llu is pushed",
		    ts->id, (unsigned long long) b->version,
		    (unsigned long long) ts->version);
		return -1;
	}
	return 0;
}

// block_check checks one block of a Rows call: its table shard, bounds,
// codec and lengths, keys, version. mu held. 0, or replies and -1.
static int
block_check(struct ps_server *s, struct ps_call *c, const Pswire__RowBlock *b,
    int push)
{
	struct srv_tshard *ts;
	if (block_owner(s, c, b->shard, &ts) != 0) {
		return -1;
	}
	if ((push ? ts->seen_push : ts->seen_pull) == s->stamp) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u has two %s blocks", b->shard,
		    push ? "push" : "pull");
		return -1;
	}
	*(push ? &ts->seen_push : &ts->seen_pull) = s->stamp;
	uint64_t vals = (uint64_t) b->n * ts->tb.conf.dim;
	if (b->n > ROWS_MAX_KEYS ||
	    !in_payload(c, b->keys_offset, 8 * (uint64_t) b->n) ||
	    (push && !in_payload(c, b->counts_offset, 4 * (uint64_t) b->n))) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u: %u keys (and counts) at offsets %llu, "
		    "%llu do not fit the %u-byte payload",
		    b->shard, b->n, (unsigned long long) b->keys_offset,
		    (unsigned long long) b->counts_offset,
		    c->frame.payload_len);
		return -1;
	}
	if (push && b->codec != ts->tb.cpush.id) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u: codec %u (%s) is not the table's push "
		    "codec %s",
		    b->shard, b->codec, comp_codec_name(b->codec),
		    comp_codec_name(ts->tb.cpush.id));
		return -1;
	}
	size_t want = push ? comp_bound(&ts->tb.cpush, vals) : 0;
	if (push && (b->rows_length != want || vals > COMP_MAX_N)) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u: %llu row bytes, expected %zu for %u rows "
		    "of dim %u in %s",
		    b->shard, (unsigned long long) b->rows_length, want, b->n,
		    ts->tb.conf.dim, comp_codec_name(b->codec));
		return -1;
	}
	if (push && !in_payload(c, b->rows_offset, b->rows_length)) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u: row bytes [%llu, +%llu) outside the "
		    "%u-byte payload",
		    b->shard, (unsigned long long) b->rows_offset,
		    (unsigned long long) b->rows_length, c->frame.payload_len);
		return -1;
	}
	if (block_keys(s, c, b, ts, push) != 0) {
		return -1;
	}
	return block_version(s, c, b, ts, push);
}

// rows_check checks the whole call before anything is applied. mu held.
// 0, or replies and -1.
static int
rows_check(struct ps_server *s, struct ps_call *c,
    const Pswire__RowsRequest *p)
{
	uint64_t keys  = 0;
	uint32_t rank  = c->hdr->rank;
	uint32_t max_s = s->opts.max_samples != 0 &&
	        s->opts.max_samples < (1u << 30)
	    ? s->opts.max_samples
	    : 1u << 30;
	if (s->n_tglobal == 0) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "the job declares no sparse table");
		return -1;
	}
	if (p->n_push + p->n_pull == 0 || p->n_push > s->n_tglobal ||
	    p->n_pull > s->n_tglobal) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Rows lists %zu push and %zu pull blocks; the job has %zu "
		    "table shards",
		    p->n_push, p->n_pull, s->n_tglobal);
		return -1;
	}
	if ((p->n_push > 0 || s->job.ssp) && rank >= s->trainers) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "rank %u out of range: job has %u trainers", rank,
		    s->trainers);
		return -1;
	}
	if (p->n_push > 0 && s->gone[rank]) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "rank %u is not in the job (left, or rejoining)", rank);
		return -1;
	}
	if (p->n_push > 0 && (p->n_samples == 0 || p->n_samples > max_s)) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "n_samples %u not in 1..%u (the server's "
		    "--max-samples-per-push)",
		    p->n_samples, max_s);
		return -1;
	}
	for (size_t i = 0; i < p->n_push; i++) {
		keys += p->push[i]->n;
	}
	for (size_t i = 0; i < p->n_pull; i++) {
		keys += p->pull[i]->n;
	}
	if (keys > ROWS_MAX_KEYS) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Rows carries %llu keys; the limit is %u per request",
		    (unsigned long long) keys, ROWS_MAX_KEYS);
		return -1;
	}
	s->stamp++;
	for (size_t i = 0; i < p->n_push; i++) {
		if (block_check(s, c, p->push[i], 1) != 0) {
			return -1;
		}
	}
	for (size_t i = 0; i < p->n_pull; i++) {
		if (block_check(s, c, p->pull[i], 0) != 0) {
			return -1;
		}
	}
	return 0;
}

// stage_block decodes push block b into rank's staging buffer of its
// shard and checks it finite. mu held. 0, or replies and -1 (the buffer's
// rows are then garbage, but not pushed).
static int
stage_block(struct ps_server *s, struct ps_call *c, const Pswire__RowBlock *b,
    uint32_t rank)
{
	struct srv_tshard *ts  = &s->tshards[s->tlocal[b->shard]];
	struct srv_rstage *st  = &ts->stage[rank];
	uint32_t           dim = ts->tb.conf.dim;
	size_t             n = b->n, vals = n * dim;
	const uint8_t     *pl = c->frame.payload;
	if (ts->retried == s->stamp) {
		return 0; // a resend counted already: nothing to stage
	}
	if (n > st->cap) {
		uint64_t *k = fb_realloc(st->keys, n * sizeof(*k));
		uint32_t *u = k != NULL ? fb_realloc(st->counts, n * 4) : NULL;
		float *g = u != NULL ? fb_realloc(st->grads, vals * 4) : NULL;
		st->keys = k != NULL ? k : st->keys;
		st->counts = u != NULL ? u : st->counts;
		if (g == NULL) {
			st->cap = 0; // some grew, some did not: start over
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory staging %zu rows", n);
			return -1;
		}
		st->grads = g;
		st->cap   = n;
	}
	st->n  = n;
	int ok = 1, code = 0;
	if (n == 0) {
		return 0; // an empty push still counts in a sync round
	}
	memcpy(st->keys, pl + b->keys_offset, n * 8);
	memcpy(st->counts, pl + b->counts_offset, n * 4);
	if (b->codec == COMP_NONE) {
		ok = fb_copy_finite(st->grads, pl + b->rows_offset, vals);
	} else if (comp_decode(&ts->tb.cpush, pl + b->rows_offset,
	               b->rows_length, vals, st->grads) != FB_OK) {
		ok   = 0;
		code = 1;
	} else {
		ok = fb_all_finite(st->grads, vals);
	}
	if (!ok) {
		st->n = 0;
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "table shard %u: row gradients are %s", b->shard,
		    code ? "a corrupt code" : "holding NaN or Inf");
		return -1;
	}
	return 0;
}

// rows_commit applies (async) or stages (sync, closing complete rounds)
// every push block of p, all checked and decoded. mu held.
static void
rows_commit(struct ps_server *s, struct ps_call *c,
    const Pswire__RowsRequest *p)
{
	uint32_t rank = c->hdr->rank;
	for (size_t i = 0; i < p->n_push; i++) {
		const Pswire__RowBlock *b  = p->push[i];
		struct srv_tshard      *ts = &s->tshards[s->tlocal[b->shard]];
		struct srv_rstage      *st = &ts->stage[rank];
		if (ts->retried == s->stamp) {
			continue; // counted already
		}
		if (ts->adopt) {
			// Re-placed empty: it goes on at the trainers'
			// version.
			ts->adopt   = 0;
			ts->version = b->version;
		}
		if (s->job.mode != PSWIRE__MODE__MODE_SYNC) {
			ps__rows_apply(s, ts, st->keys, st->n, st->grads,
			    st->counts, (float) (1.0 / (double) p->n_samples),
			    table_lr(s, ts));
			st->n = 0;
			ts->clock[rank]++;
			continue;
		}
		ts->pushed[rank] = 1;
		ps__rank_join(s, rank, ts->version); // store.c's JOINS
		ts->n_pushed++;
		ts->samples += p->n_samples;
		if (round_complete(s, ts)) {
			round_close(s, ts);
		}
	}
}

void
ps__on_rows(struct ps_server *s, struct ps_call *c)
{
	const Pswire__RowsRequest *p;
	if (c->hdr->body_case != PSWIRE__HEADER__BODY_ROWS_REQ) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Rows needs a rows_req body");
		return;
	}
	p = c->hdr->rows_req;
	// Only trainer r pushes for rank r.
	if (p->n_push > 0 &&
	    !ps__call_acts_as(c, PSW_ROLE_TRAINER, c->hdr->rank, 0)) {
		return;
	}
	atomic_fetch_add_explicit(&s->bytes_in, nng_msg_len(c->req),
	    memory_order_relaxed);
	pthread_mutex_lock(&s->mu);
	if (rows_check(s, c, p) != 0) {
		goto out;
	}
	for (size_t i = 0; i < p->n_push; i++) {
		if (stage_block(s, c, p->push[i], c->hdr->rank) != 0) {
			goto out;
		}
	}
	rows_commit(s, c, p);
	if (p->n_push > 0) {
		atomic_fetch_add_explicit(&s->n_rows_push, 1,
		    memory_order_relaxed);
	}
	ps__rows_park(s, c); // answers at once when ready
	ps__rows_wake(s);    // a round this push closed
out:
	pthread_mutex_unlock(&s->mu);
}
