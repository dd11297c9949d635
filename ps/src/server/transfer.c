// transfer.c — a shard's full state on the wire, as an encode/decode pair:
// ps__transfer_encode packs a leaving shard into a Transfer request (the
// weights, the optimizer state, the pull reference, the delta log, the
// version and the pushes
// staged for the current version), and ps__on_transfer checks such a
// request from a peer and installs the shard it carries.
//
// DESIGN. The payload is laid out in a fixed order, both halves reading
// the same fields: x [len floats], the optimizer state [optim_bufs x len
// floats: velocity, or Adam's m then v; none for an average shard], then with
// a pull codec ref [len floats] and the log_k delta-log entries (log_len[k]
// bytes each, 0 for an empty entry), then one staged slot [len floats] per
// rank in state PS_SLOT_PUSHED, in rank order. The receiver checks every count
// and length against its own job before it allocates or copies.
#include <stdio.h>
#include <string.h>

#include "server_impl.h"

int
ps__transfer_encode(struct ps_server *s, struct srv_shard *sh, int backup,
    nng_msg **out)
{
	Pswire__Header          h = PSWIRE__HEADER__INIT;
	Pswire__TransferRequest t = PSWIRE__TRANSFER_REQUEST__INIT;
	uint64_t                lb[PS_DELTA_LOG], ll[PS_DELTA_LOG];
	uint32_t                lc[PS_DELTA_LOG];
	size_t                  plen = sh->len * 4, hl, off = 0;
	uint8_t                *payload;

	t.shard      = sh->id;
	t.version    = sh->version;
	t.init       = sh->init != 0;
	t.samples    = sh->samples;
	t.backup     = backup != 0;
	t.state.len  = s->trainers;
	t.state.data = sh->state;
	t.n_clocks   = s->trainers;
	t.clocks     = sh->clock;
	t.optim_bufs = ps__shard_opt_bufs(s, sh);
	t.optim      = (char *) fb_optim_name(s->job.optim.kind);
	plen += (size_t) t.optim_bufs * sh->len * 4;
	if (!s->job.pull_none) {
		plen += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			lb[k] = sh->log_base[k];
			lc[k] = sh->log_crc[k];
			ll[k] = sh->log_base[k] == UINT64_MAX ? 0
			                                      : sh->log_len[k];
			plen += ll[k];
		}
		t.ref_crc    = sh->ref_crc;
		t.n_log_base = t.n_log_crc = t.n_log_len = s->log_k;
		t.log_base                               = lb;
		t.log_crc                                = lc;
		t.log_len                                = ll;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		plen += sh->state[r] == PS_SLOT_PUSHED ? sh->len * 4 : 0;
	}
	h.epoch        = s->pl->epoch;
	h.body_case    = PSWIRE__HEADER__BODY_TRANSFER_REQ;
	h.transfer_req = &t;
	h.request_id   = 1; // the sender sets the real id
	hl             = pswire__header__get_packed_size(&h) + 10;
	if (psw_msg_begin(out, hl, plen, &payload) != FB_OK) {
		return FB_ENOMEM;
	}
	memcpy(payload, sh->x, sh->len * 4);
	off = sh->len * 4;
	if (t.optim_bufs > 0) {
		memcpy(payload + off, sh->opt,
		    (size_t) t.optim_bufs * sh->len * 4);
		off += (size_t) t.optim_bufs * sh->len * 4;
	}
	if (!s->job.pull_none) {
		memcpy(payload + off, sh->ref, sh->len * 4);
		off += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			memcpy(payload + off,
			    sh->log + (size_t) k * sh->log_cap, ll[k]);
			off += ll[k];
		}
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] == PS_SLOT_PUSHED) {
			// A push lent by its parked call (push.c's BORROWING)
			// is read where it is; a seeding shard's offers (in
			// x) hold no slot: zeros.
			const void *g = sh->src[r] != NULL
			    ? (const void *) sh->src[r]
			    : (const void *) sh->slot[r];
			if (g != NULL) {
				memcpy(payload + off, g, sh->len * 4);
			} else {
				memset(payload + off, 0, sh->len * 4);
			}
			off += sh->len * 4;
		}
	}
	return psw_msg_finish(*out, PSWIRE__METHOD__TRANSFER, 0, &h.base, hl,
	    plen);
}

const uint8_t *
ps__shard_load_state(struct ps_server *s, struct srv_shard *sh,
    const Pswire__TransferRequest *t, const uint8_t *p)
{
	memcpy(sh->x, p, sh->len * 4);
	p += sh->len * 4;
	sh->crc_ok = 0; // the weights changed under the same version
	if (ps__shard_opt_bufs(s, sh) > 0) {
		size_t ob = (size_t) ps__shard_opt_bufs(s, sh) * sh->len * 4;
		memcpy(sh->opt, p, ob);
		p += ob;
	}
	if (!s->job.pull_none) {
		memcpy(sh->ref, p, sh->len * 4);
		p += sh->len * 4;
		// A snapshot's log of another depth than the job's is
		// skipped (empty log: pulls behind get the full reference).
		int same = t->n_log_len == s->log_k;
		for (size_t k = 0; k < t->n_log_len; k++) {
			if (same) {
				sh->log_base[k] = t->log_base[k];
				sh->log_crc[k]  = t->log_crc[k];
				sh->log_len[k]  = t->log_len[k];
				memcpy(sh->log + k * sh->log_cap, p,
				    t->log_len[k]);
			}
			p += t->log_len[k];
		}
		if (!same) {
			ps__ref_log_reset(s, sh);
		}
		sh->ref_crc = t->ref_crc;
	}
	return p;
}

int
ps__optim_state_fits(const struct ps_server *s, const struct srv_shard *sh,
    const Pswire__TransferRequest *t, char *why, size_t n)
{
	const char *name = t->optim != NULL && *t->optim != '\0' ? t->optim
	                                                         : "sgd";
	int         kind;
	if (sh->average) {
		// No optimizer runs on an average shard: no state, whatever
		// the job's optimizer is.
		if (t->optim_bufs == 0) {
			return 0;
		}
		snprintf(why, n,
		    "carries %u optimizer state buffers; the shard's tensor "
		    "is averaged (none)",
		    t->optim_bufs);
		return -1;
	}
	if (fb_optim_parse(name, &kind) != FB_OK ||
	    kind != s->job.optim.kind || t->optim_bufs != s->job.optim_bufs) {
		snprintf(why, n,
		    "carries %u optimizer state buffers of '%.32s', the job "
		    "runs %s (%u)",
		    t->optim_bufs, name, fb_optim_name(s->job.optim.kind),
		    s->job.optim_bufs);
		return -1;
	}
	return 0;
}

int
ps__transfer_restamp(nng_msg *m0, uint64_t epoch, nng_msg **out)
{
	struct psw_frame f;
	const char      *why;
	Pswire__Header  *h;
	uint8_t         *payload;
	size_t           hl;
	int              rv;

	if (psw_msg_parse(m0, &f, &why) != FB_OK) {
		return FB_EPROTO;
	}
	if ((h = pswire__header__unpack(NULL, f.hdr_len, f.hdr)) == NULL) {
		return FB_EPROTO;
	}
	h->epoch = epoch;
	hl       = pswire__header__get_packed_size(h);
	// The payload's layout is relative to its start: copied as is.
	if ((rv = psw_msg_begin(out, hl, f.payload_len, &payload)) == FB_OK) {
		memcpy(payload, f.payload, f.payload_len);
		rv = psw_msg_finish(*out, PSWIRE__METHOD__TRANSFER, 0,
		    &h->base, hl, f.payload_len);
		if (rv != FB_OK) {
			nng_msg_free(*out);
			*out = NULL;
		}
	}
	pswire__header__free_unpacked(h, NULL);
	return rv;
}

// A version past this is refused in a Transfer: no job gets there, and
// version + 1 (and the pull log's base + 1) must not wrap.
#define PS_MAX_VERSION (UINT64_C(1) << 62)

// transfer_values_check checks the values a Transfer for sh carries, its
// lengths already checked: versions that cannot wrap, samples that match
// the staged pushes (a round of `pushed` ranks with 0 samples would
// divide by 0), and weights, reference and staged gradients all finite.
// mu held. Returns 0, or replies an error and returns -1.
static int
transfer_values_check(struct ps_server *s, struct ps_call *c,
    const Pswire__TransferRequest *t, const struct srv_shard *sh,
    uint32_t pushed)
{
	const uint8_t *p   = c->frame.payload;
	size_t         len = sh->len * 4;
	const char    *bad = NULL;
	if (t->version > PS_MAX_VERSION) {
		bad = "version out of range";
	} else if (pushed > 0
	        ? t->samples == 0 || t->samples > (uint64_t) pushed << 30
	        : t->samples != 0) {
		bad = "samples do not match the staged pushes";
	}
	for (uint32_t k = 0; bad == NULL && !s->job.pull_none && k < s->log_k;
	     k++) {
		if (t->log_base[k] != UINT64_MAX &&
		    t->log_base[k] >= t->version) {
			bad = "delta log entry past the version";
		}
	}
	if (bad == NULL && !fb_all_finite(p, sh->len)) {
		bad = "weights hold NaN or Inf";
	}
	if (bad == NULL && !s->job.pull_none) {
		if (!fb_all_finite(p + len, sh->len)) {
			bad = "pull reference holds NaN or Inf";
		}
		p += len;
		for (uint32_t k = 0; k < s->log_k; k++) {
			p += t->log_len[k];
		}
	}
	p += len;
	for (uint32_t r = 0; bad == NULL && r < s->trainers; r++) {
		if (t->state.data[r] == PS_SLOT_PUSHED) {
			if (!fb_all_finite(p, sh->len)) {
				bad = "a staged push holds NaN or Inf";
			}
			p += len;
		}
	}
	if (bad != NULL) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: %s", t->shard, bad);
		return -1;
	}
	return 0;
}

// transfer_decode checks Transfer t (payload in c) against this job and
// installs the state it carries into shard sh (placed here, ARRIVING).
// mu held. Returns 0, or replies an error and returns -1 with sh holding
// no buffers.
static int
transfer_decode(struct ps_server *s, struct ps_call *c,
    const Pswire__TransferRequest *t, struct srv_shard *sh)
{
	const uint8_t *p      = c->frame.payload;
	uint64_t       need   = sh->len * 4;
	uint32_t       pushed = 0;
	char           why[128];

	if (t->state.len != s->trainers ||
	    (t->n_clocks != 0 && t->n_clocks != s->trainers) ||
	    (!s->job.pull_none &&
	        (t->n_log_base != s->log_k || t->n_log_crc != s->log_k ||
	            t->n_log_len != s->log_k)) ||
	    (s->job.pull_none && t->n_log_len != 0)) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: state for %zu ranks, log of %zu",
		    t->shard, t->state.len, t->n_log_len);
		return -1;
	}
	if (ps__optim_state_fits(s, sh, t, why, sizeof(why)) != 0) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: %s", t->shard, why);
		return -1;
	}
	need += (uint64_t) ps__shard_opt_bufs(s, sh) * sh->len * 4;
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (t->state.data[r] != PS_SLOT_FREE &&
		    t->state.data[r] != PS_SLOT_PUSHED) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "transfer of shard %u: bad rank state", t->shard);
			return -1;
		}
		pushed += t->state.data[r] == PS_SLOT_PUSHED;
		need += t->state.data[r] == PS_SLOT_PUSHED ? sh->len * 4 : 0;
	}
	if (!s->job.pull_none) {
		need += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			if (t->log_len[k] >
			    comp_bound(&s->job.cpull, sh->len)) {
				ps__server_reply_err(s, c,
				    PSWIRE__STATUS__INVALID_ARGUMENT,
				    "transfer of shard %u: log entry too long",
				    t->shard);
				return -1;
			}
			need += t->log_len[k];
		}
	}
	if (need != c->frame.payload_len || pushed >= s->trainers) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: %u payload bytes, expected %llu",
		    t->shard, c->frame.payload_len, (unsigned long long) need);
		return -1;
	}
	if (transfer_values_check(s, c, t, sh, pushed) != 0) {
		return -1;
	}
	if (ps__shard_alloc(s, sh) != FB_OK) {
		ps__shard_release(s, sh);
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory for shard %u", t->shard);
		return -1;
	}
	p = ps__shard_load_state(s, sh, t, p);
	for (uint32_t r = 0; r < s->trainers; r++) {
		// Clocks travel with the shard, so SSP reads stay bounded
		// across a move (a sender without them: all zero).
		sh->clock[r] = t->n_clocks != 0 ? t->clocks[r] : 0;
		sh->state[r] = t->state.data[r];
		sh->src[r]   = NULL;
		if (sh->state[r] != PS_SLOT_PUSHED) {
			continue;
		}
		float *d = ps__stage_take(s, sh, r);
		if (d == NULL) {
			ps__shard_release(s, sh);
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory for shard %u's staged pushes",
			    t->shard);
			return -1;
		}
		memcpy(d, p, sh->len * 4);
		p += sh->len * 4;
	}
	sh->version  = t->version;
	sh->init     = t->init;
	sh->samples  = t->samples;
	sh->n_pushed = pushed;
	sh->round_t0 = pushed ? fb_clock_ns() : 0; // waited elsewhere before
	return 0;
}

// from_owner tells whether c's sender may hand over shard id: with
// authentication on, a server that held it in one of the maps installed
// here (any server when none but this one is known: a server joining a
// running job never saw the previous owner). Else it answers c
// PERMISSION_DENIED and returns 0. mu held.
static int
from_owner(struct ps_server *s, struct ps_call *c, uint32_t id)
{
	const uint32_t *ow    = s->owners + (size_t) id * PS_OWNERS_SEEN;
	int             known = 0;

	if (!ps__rpc_auth_on(s->rpc)) {
		return 1;
	}
	for (int k = 0; k < PS_OWNERS_SEEN; k++) {
		if (ow[k] == PSW_ID_UNASSIGNED || ow[k] == s->index) {
			continue;
		}
		known = 1;
		if (c->peer.role == PSW_ROLE_SERVER && c->peer.id == ow[k]) {
			return 1;
		}
	}
	if (!known && c->peer.role == PSW_ROLE_SERVER &&
	    c->peer.id != s->index) {
		return 1;
	}
	// The previous owner as the map said, named in the refusal.
	return ps__call_acts_as(c, PSW_ROLE_SERVER,
	    ow[1] != PSW_ID_UNASSIGNED ? ow[1] : ow[0], 0);
}

void
ps__on_transfer(struct ps_server *s, struct ps_call *c)
{
	Pswire__TransferRequest *t;
	Pswire__Header           h = PSWIRE__HEADER__INIT;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_TRANSFER_REQ) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Transfer needs a transfer_req body");
		return;
	}
	t = c->hdr->transfer_req;
	pthread_mutex_lock(&s->mu);
	if (t->table) {
		ps__rows_on_transfer(s, c, t); // a table shard (rows_move.c)
		goto out;
	}
	if (t->shard >= s->n_global) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: the job has %zu", t->shard,
		    s->n_global);
		goto out;
	}
	if (!from_owner(s, c, t->shard)) {
		goto out;
	}
	if (t->backup && s->local[t->shard] >= 0 &&
	    s->shards[t->shard].backup) {
		// A primary's resync of the backup held here (replicate.c),
		// or a rebuild copy that a resync overtook: a copy older
		// than ours changes nothing, any other replaces ours.
		struct srv_shard *sh = &s->shards[t->shard];
		if (sh->init && t->version < sh->version) {
			h.request_id = c->hdr->request_id;
			ps__call_reply(c, &h);
			goto out;
		}
		ps__shard_release(s, sh);
		s->local[t->shard] = PS_SHARD_ARRIVING;
		s->n_backup_shards--;
	}
	// Accepted when this server's map expects it (ARRIVING), or when the
	// sender's map is later than ours (it names us as the owner there;
	// the map that says so is on its way). A shard our later map placed
	// elsewhere gets STALE_EPOCH: the sender follows it to the new owner.
	if (t->backup && s->local[t->shard] != PS_SHARD_ARRIVING &&
	    !(s->local[t->shard] == PS_SHARD_ABSENT &&
	        c->hdr->epoch > s->pl->epoch)) {
		// A rebuild copy is never followed to another server.
		ps__server_reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "shard %u: no backup expected here (epoch %llu)", t->shard,
		    (unsigned long long) s->pl->epoch);
		goto out;
	}
	if (s->local[t->shard] == PS_SHARD_ABSENT &&
	    c->hdr->epoch <= s->pl->epoch) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
		    "shard %u is not placed here in epoch %llu (transfer "
		    "stamped %llu)",
		    t->shard, (unsigned long long) s->pl->epoch,
		    (unsigned long long) c->hdr->epoch);
		goto out;
	}
	if (s->local[t->shard] != PS_SHARD_ARRIVING &&
	    s->local[t->shard] != PS_SHARD_ABSENT) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "shard %u is not expected here", t->shard);
		goto out;
	}
	if (transfer_decode(s, c, t, &s->shards[t->shard]) != 0) {
		goto out;
	}
	s->local[t->shard] = (int32_t) t->shard;
	if (t->backup) {
		// A backup applies its primary's rounds, never its own.
		struct srv_shard *sh = &s->shards[t->shard];
		memset(sh->state, PS_SLOT_FREE, s->trainers);
		ps__stage_drop(s, sh);
		sh->n_pushed = 0;
		sh->samples  = 0;
		sh->round_t0 = 0;
		sh->backup   = 1;
		s->n_backup_shards++;
	} else {
		s->n_shards++;
	}
	obs_counter_add(s->moves_in, 1);
	FB_LOG(FB_LOG_INFO, "move", "shard %u arrived at version %llu",
	    t->shard, (unsigned long long) t->version);
	h.request_id = c->hdr->request_id;
	ps__call_reply(c, &h);
	ps__pull_wake(s);
out:
	pthread_mutex_unlock(&s->mu);
}

// ---- the connection a Transfer travels on --------------------------------

// ps_peer_watch counts one peer socket's live connections (nng pipe
// events) and stops the call in flight on it when one closes.
struct ps_peer_watch {
	// the peer's call aio, outlives the socket; set once it exists
	// (events may come first: nothing to cancel then)
	_Atomic(nng_aio *) aio;
	atomic_int         pipes; // connections up now
};

// peer_event is nng's pipe callback (on an nng thread): a closed
// connection cancels the call waiting on it, so that a Transfer to a
// killed peer fails at once instead of at its timeout.
static void
peer_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct ps_peer_watch *w = arg;
	(void) p;
	if (ev == NNG_PIPE_EV_ADD_POST) {
		atomic_fetch_add(&w->pipes, 1);
	} else if (ev == NNG_PIPE_EV_REM_POST) {
		atomic_fetch_sub(&w->pipes, 1);
		nng_aio *aio = atomic_load(&w->aio);
		if (aio != NULL) {
			nng_aio_cancel(aio);
		}
	}
}

int
ps__peer_watch_open(struct ps_server *s, const char *url, nng_socket *sock,
    nng_ctx *ctx, nng_aio **aio, struct ps_peer_watch **out)
{
	struct ps_peer_watch *w = fb_zalloc(sizeof(*w));
	int                   rv;
	if (w == NULL) {
		return FB_ENOMEM;
	}
	atomic_init(&w->aio, NULL);
	atomic_init(&w->pipes, 0);
	if ((rv = psw_req_open_watched(s->tls, url, s->opts.max_msg, 20, 500,
	         peer_event, w, sock, ctx, aio)) != FB_OK) {
		fb_free(w);
		return rv;
	}
	atomic_store(&w->aio, *aio);
	*out = w;
	return FB_OK;
}

void
ps__peer_watch_free(struct ps_peer_watch *w)
{
	fb_free(w);
}

int
ps__peer_connected(struct ps_server *s, struct ps_peer_watch *w, int ms)
{
	for (int t = 0; atomic_load(&w->pipes) <= 0; t += 10) {
		if (t >= ms || atomic_load(&s->closing)) {
			return 0;
		}
		fb_sleep_us(10000);
	}
	return 1;
}
