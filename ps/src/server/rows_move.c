// rows_move.c — moving a sparse table's shard between live servers: the
// sender packs the whole shard (its tbl_save image, version, clocks and
// the sync pushes staged for its current round) into a Transfer, and the
// receiver checks all of it and installs it before it serves the range.
//
// DESIGN.
// - A map that re-places a table shard with the same seed_gen moves it
//   live (the scheduler raises seed_gen only when the old server is lost).
//   Its old server keeps serving it until ps__map_apply packs it (under
//   mu, after the dense shards': a request it applied meanwhile travels
//   with it), then frees it; its new server holds it ARRIVING from the
//   map's install until the Transfer comes, answering UNAVAILABLE (the
//   client retries). So a range moves whole: no key is lost or held
//   twice.
// - Rows calls parked on a packed shard (pulls waiting for a version)
//   were applied: they are answered ABORTED, and the client pulls again
//   from the new server (the round's staged pushes moved with it), as
//   dense pulls are (pull.c).
// - Transfers travel through moves.c's sender (retries, following a shard
//   that a later map moved on); their ids carry PS_TABLE_ID. A receiver
//   accepts one for a shard ARRIVING here, or absent when the sender's map
//   is later than its own (the map placing it here is on its way); else
//   STALE_EPOCH, and the sender follows the shard.
// - Payload: per rank whose sync push is staged (t->state), in rank order,
//   n (u64 LE), n keys (u64), n counts (u32) and n * dim fp32 gradients;
//   then the store's tbl_save image. Every length, key, count and float is
//   checked before anything is installed; tbl_load checks the image whole.
#include <stdio.h>
#include <string.h>

#include "server_impl.h"

// The most rows of one staged push in a Transfer (a Rows request's
// limit).
#define MOVE_MAX_KEYS (1u << 22)

// staged_bytes is the payload bytes of ts's staged pushes. mu held.
static size_t
staged_bytes(const struct ps_server *s, const struct srv_tshard *ts)
{
	size_t b = 0, row = 12 + (size_t) ts->tb.conf.dim * 4;
	for (uint32_t r = 0; r < s->trainers; r++) {
		b += ts->pushed[r] ? 8 + ts->stage[r].n * row : 0;
	}
	return b;
}

int
ps__rows_encode(struct ps_server *s, const struct srv_tshard *ts, int backup,
    nng_msg **out)
{
	Pswire__Header          h = PSWIRE__HEADER__INIT;
	Pswire__TransferRequest t = PSWIRE__TRANSFER_REQUEST__INIT;
	size_t   img = tbl_save_size(ts->t), plen = staged_bytes(s, ts) + img;
	size_t   dim = ts->tb.conf.dim, off = 0, hl;
	uint8_t *state = fb_zalloc(s->trainers), *p;
	int      rv;
	if (state == NULL) {
		return FB_ENOMEM;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		state[r] = ts->pushed[r] ? PS_SLOT_PUSHED : PS_SLOT_FREE;
	}
	t.shard        = ts->id;
	t.version      = ts->version;
	t.init         = !ts->adopt;
	t.samples      = ts->samples;
	t.table        = 1;
	t.backup       = backup != 0;
	t.state.len    = s->trainers;
	t.state.data   = state;
	t.n_clocks     = s->trainers;
	t.clocks       = ts->clock;
	h.epoch        = s->pl->epoch;
	h.body_case    = PSWIRE__HEADER__BODY_TRANSFER_REQ;
	h.transfer_req = &t;
	h.request_id   = 1; // the sender's; echoed
	hl             = pswire__header__get_packed_size(&h) + 10;
	if ((rv = psw_msg_begin(out, hl, plen, &p)) != FB_OK) {
		fb_free(state);
		return rv;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		const struct srv_rstage *st = &ts->stage[r];
		uint64_t                 n  = st->n;
		if (!ts->pushed[r]) {
			continue;
		}
		memcpy(p + off, &n, 8);
		off += 8;
		memcpy(p + off, st->keys, st->n * 8);
		off += st->n * 8;
		memcpy(p + off, st->counts, st->n * 4);
		off += st->n * 4;
		memcpy(p + off, st->grads, st->n * dim * 4);
		off += st->n * dim * 4;
	}
	tbl_save(ts->t, p + off);
	rv = psw_msg_finish(*out, PSWIRE__METHOD__TRANSFER, 0, &h.base, hl,
	    plen);
	fb_free(state);
	if (rv != FB_OK) {
		nng_msg_free(*out);
		*out = NULL;
	}
	return rv;
}

size_t
ps__rows_pack(struct ps_server *s, const Pswire__Placement *old, nng_msg **out,
    uint32_t *dest, uint32_t *ids, size_t n_out, size_t cap)
{
	const Pswire__Placement *pl = s->pl;
	for (uint32_t k = 0; k < s->n_tshards && n_out < cap;) {
		struct srv_tshard       *ts = &s->tshards[k];
		const Pswire__ShardInfo *si = pl->table_shards[ts->id];
		if (si->server == s->index ||
		    si->seed_gen != old->table_shards[ts->id]->seed_gen) {
			k++;
			continue;
		}
		if (ts->backup) {
			k++; // a backup copy: nothing to move (rows_map.c)
			continue;
		}
		if (ps__rows_encode(s, ts, 0, &out[n_out]) != FB_OK) {
			// Kept rather than lost; its new server waits.
			FB_LOG(FB_LOG_ERR, "move",
			    "table shard %u: out of memory packing its %zu "
			    "rows; it stays here",
			    ts->id, tbl_rows(ts->t));
			k++;
			continue;
		}
		FB_LOG(FB_LOG_NOTICE, "move",
		    "table shard %u: moving %zu rows at version %llu to "
		    "server %u",
		    ts->id, tbl_rows(ts->t), (unsigned long long) ts->version,
		    si->server);
		if (s->opts.max_msg != 0 &&
		    nng_msg_len(out[n_out]) > s->opts.max_msg) {
			// Sent whole or not at all: a receiver with the same
			// cap refuses it, and its rows stay lost there.
			FB_LOG(FB_LOG_ERR, "move",
			    "table shard %u: its %zu-byte Transfer is over "
			    "--max-msg-mb (%zu bytes); raise it on the servers",
			    ts->id, nng_msg_len(out[n_out]), s->opts.max_msg);
		}
		ids[n_out]    = ts->id | PS_TABLE_ID;
		dest[n_out++] = si->server;
		atomic_fetch_add(&s->transfers, 1);
		obs_counter_add(s->moves_out, 1);
		ps__rows_drop_parked(s, ts->id, pl->epoch, 1);
		ps__tshard_drop(s, k);
	}
	return n_out;
}

// staged_check checks the staged pushes of Transfer t (payload in c,
// state and samples already sized) for table shard id of this map (range
// [lo, hi), dim): lengths, keys in the range, counts >= 1, finite
// gradients. Returns the image's offset, or replies and returns -1. mu
// held.
static int64_t
staged_check(struct ps_server *s, struct ps_call *c,
    const Pswire__TransferRequest *t, const Pswire__ShardInfo *si,
    uint32_t dim)
{
	const uint8_t *p   = c->frame.payload;
	uint64_t       len = c->frame.payload_len, off = 0;
	const char    *bad = NULL;
	for (uint32_t r = 0; r < s->trainers && bad == NULL; r++) {
		uint64_t n;
		if (t->state.data[r] != PS_SLOT_PUSHED) {
			continue;
		}
		if (len - off < 8) {
			bad = "a staged push is cut short";
			break;
		}
		memcpy(&n, p + off, 8);
		off += 8;
		if (n > MOVE_MAX_KEYS ||
		    n * (12 + 4 * (uint64_t) dim) > len - off) {
			bad = "a staged push's rows do not fit the payload";
			break;
		}
		for (uint64_t j = 0; j < n && bad == NULL; j++) {
			uint64_t key, top;
			uint32_t cnt;
			memcpy(&key, p + off + 8 * j, 8);
			memcpy(&cnt, p + off + 8 * n + 4 * j, 4);
			top = tbl_key_hash(key) >> 32;
			if (top < si->offset || top >= si->offset + si->len) {
				bad = "a staged key is outside the range";
			} else if (cnt == 0) {
				bad = "a staged count is 0";
			}
		}
		if (bad == NULL &&
		    !fb_all_finite(p + off + 12 * n, (size_t) n * dim)) {
			bad = "a staged push holds NaN or Inf";
		}
		off += n * (12 + 4 * (uint64_t) dim);
	}
	if (bad != NULL) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of table shard %u: %s", t->shard, bad);
		return -1;
	}
	return (int64_t) off;
}

// staged_load copies the staged pushes of checked Transfer t into ts.
// FB_ENOMEM. mu held.
static int
staged_load(struct ps_server *s, const struct ps_call *c,
    const Pswire__TransferRequest *t, struct srv_tshard *ts)
{
	const uint8_t *p   = c->frame.payload;
	size_t         dim = ts->tb.conf.dim;
	for (uint32_t r = 0; r < s->trainers; r++) {
		struct srv_rstage *st = &ts->stage[r];
		uint64_t           n;
		if (t->state.data[r] != PS_SLOT_PUSHED) {
			continue;
		}
		memcpy(&n, p, 8);
		p += 8;
		st->keys   = fb_alloc((n > 0 ? n : 1) * 8);
		st->counts = fb_alloc((n > 0 ? n : 1) * 4);
		st->grads  = fb_alloc((n > 0 ? n : 1) * dim * 4);
		if (st->keys == NULL || st->counts == NULL ||
		    st->grads == NULL) {
			return FB_ENOMEM; // tshard_close frees them
		}
		st->cap = st->n = n;
		memcpy(st->keys, p, n * 8);
		memcpy(st->counts, p + n * 8, n * 4);
		memcpy(st->grads, p + n * 12, n * dim * 4);
		p += n * (12 + dim * 4);
		ts->pushed[r] = 1;
		ts->n_pushed++;
	}
	return FB_OK;
}

// transfer_expected checks that table shard Transfer t may be installed
// here: from a server, for a shard of the job ARRIVING here (or absent
// while the sender's map is later), state and clocks sized for the job.
// mu held. 0, or replies and -1.
static int
transfer_expected(struct ps_server *s, struct ps_call *c,
    const Pswire__TransferRequest *t)
{
	uint32_t pushed = 0;
	if (t->shard >= s->n_tglobal) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of table shard %u: the job has %zu", t->shard,
		    s->n_tglobal);
		return -1;
	}
	int32_t l = s->tlocal[t->shard];
	// From the server the map moved it from (docs/security.md); one sent
	// under a map this server has not seen yet, from any other server.
	if (l == PS_SHARD_ARRIVING
	        ? !ps__call_acts_as(c, PSW_ROLE_SERVER, s->tfrom[t->shard], 0)
	        : ps__rpc_auth_on(s->rpc) &&
	            !(c->peer.role == PSW_ROLE_SERVER &&
	                c->peer.id != s->index)) {
		if (l != PS_SHARD_ARRIVING) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__PERMISSION_DENIED,
			    "transfer of table shard %u: only another server "
			    "may send one",
			    t->shard);
		}
		return -1;
	}
	if (l == PS_SHARD_ABSENT && c->hdr->epoch <= s->pl->epoch) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
		    "table shard %u is not placed here in epoch %llu "
		    "(transfer stamped %llu)",
		    t->shard, (unsigned long long) s->pl->epoch,
		    (unsigned long long) c->hdr->epoch);
		return -1;
	}
	if (l != PS_SHARD_ARRIVING && l != PS_SHARD_ABSENT) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "table shard %u is not expected here", t->shard);
		return -1;
	}
	for (size_t r = 0; r < t->state.len; r++) {
		pushed += t->state.data[r] == PS_SLOT_PUSHED;
		if (t->state.data[r] > PS_SLOT_PUSHED ||
		    t->state.data[r] == PS_SLOT_DECODING) {
			pushed = UINT32_MAX - 1;
			break;
		}
	}
	if (t->state.len != s->trainers ||
	    (t->n_clocks != 0 && t->n_clocks != s->trainers) ||
	    pushed >= s->trainers || (pushed == 0) != (t->samples == 0) ||
	    t->samples > (uint64_t) pushed << 30 ||
	    t->version > (UINT64_C(1) << 62)) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of table shard %u: state for %zu ranks, %zu "
		    "clocks, %llu samples or version %llu do not fit the job",
		    t->shard, t->state.len, t->n_clocks,
		    (unsigned long long) t->samples,
		    (unsigned long long) t->version);
		return -1;
	}
	return 0;
}

// backup_expected checks that backup Transfer t (a primary's resync,
// rows_repl.c) may replace the copy of its shard held here: from the
// shard's primary, this server one of its backups in the map in force,
// the shard not held here as a primary. Drops the old copy. mu held. 0,
// or replies and -1.
static int
backup_expected(struct ps_server *s, struct ps_call *c,
    const Pswire__TransferRequest *t)
{
	const uint32_t *b;
	int             n, named = 0;
	if (t->shard >= s->n_tglobal) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of table shard %u: the job has %zu", t->shard,
		    s->n_tglobal);
		return -1;
	}
	if (!ps__call_acts_as(c, PSW_ROLE_SERVER,
	        s->pl->table_shards[t->shard]->server, 0)) {
		return -1;
	}
	n = ps__tshard_backups(s, t->shard, &b);
	for (int k = 0; k < n; k++) {
		named |= b[k] == s->index;
	}
	int32_t l = s->tlocal[t->shard];
	if (!named || (l >= 0 && !s->tshards[l].backup) || l < -1 ||
	    t->state.len != s->trainers || t->version > (UINT64_C(1) << 62)) {
		ps__server_reply_err(s, c,
		    c->hdr->epoch > s->pl->epoch
		        ? PSWIRE__STATUS__UNAVAILABLE
		        : PSWIRE__STATUS__FAILED_PRECONDITION,
		    "table shard %u: no backup expected here (epoch %llu)",
		    t->shard, (unsigned long long) s->pl->epoch);
		return -1;
	}
	if (l >= 0) {
		ps__tshard_drop(s, (uint32_t) l); // replaced whole
	}
	return 0;
}

void
ps__rows_on_transfer(struct ps_server *s, struct ps_call *c,
    const Pswire__TransferRequest *t)
{
	Pswire__Header h = PSWIRE__HEADER__INIT;
	if (t->backup ? backup_expected(s, c, t) != 0
	              : transfer_expected(s, c, t) != 0) {
		return;
	}
	const Pswire__ShardInfo *si  = s->pl->table_shards[t->shard];
	int32_t                  was = s->tlocal[t->shard];
	int64_t                  img;
	const char              *bad;
	struct ps_table          tb;
	char                     why[256];
	if (ps__table_read(s->pl->job, si->tensor, &tb, why, sizeof(why)) !=
	    FB_OK) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "transfer of table shard %u: %s", t->shard, why);
		return;
	}
	if ((img = staged_check(s, c, t, si, tb.conf.dim)) < 0) {
		return;
	}
	if (ps__tshard_add(s, s->pl, t->shard) != FB_OK) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory for table shard %u", t->shard);
		return;
	}
	uint32_t           k  = (uint32_t) s->tlocal[t->shard];
	struct srv_tshard *ts = &s->tshards[k];
	bad                   = tbl_load(ts->t, c->frame.payload + img,
	                      c->frame.payload_len - (size_t) img);
	if (bad == NULL && t->backup) {
		// A backup applies its primary's rounds, never its own
		// staged pushes.
		ts->backup   = 1;
		ts->synced   = 1;
		ts->version  = t->version;
		h.request_id = c->hdr->request_id;
		FB_LOG(FB_LOG_NOTICE, "replica",
		    "table shard %u: backup resynced, %zu rows at version %llu",
		    t->shard, tbl_rows(ts->t),
		    (unsigned long long) t->version);
		ps__call_reply(c, &h); // releases c, and t with it
		return;
	}
	if (bad != NULL || staged_load(s, c, t, ts) != FB_OK) {
		ps__tshard_drop(s, k);
		s->tlocal[t->shard] = was;
		ps__server_reply_err(s, c,
		    bad != NULL ? PSWIRE__STATUS__INVALID_ARGUMENT
		                : PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "transfer of table shard %u: %s", t->shard,
		    bad != NULL ? bad : "out of memory for its staged pushes");
		return;
	}
	ts->version = t->version;
	ts->idle_at = t->version;
	ts->adopt   = !t->init;
	ts->samples = t->samples;
	for (uint32_t r = 0; r < s->trainers; r++) {
		ts->clock[r] = t->n_clocks != 0 ? t->clocks[r] : 0;
	}
	obs_counter_add(s->moves_in, 1);
	FB_LOG(FB_LOG_NOTICE, "move",
	    "table shard %u arrived: %zu rows at version %llu, %u push(es) "
	    "staged",
	    t->shard, tbl_rows(ts->t), (unsigned long long) ts->version,
	    ts->n_pushed);
	ps__rows_round_try(s, ts); // ranks that left meanwhile
	h.request_id = c->hdr->request_id;
	ps__call_reply(c, &h);
	ps__rows_wake(s);
}
