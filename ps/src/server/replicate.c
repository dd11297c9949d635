// replicate.c — --replicas on a server: the primary's forwarding of each
// applied sync update to its backups (Replicate, method 23), the backup's
// apply, and the rule that no trainer sees a version before every backup
// holds it.
//
// DESIGN. A shard's primary applies a sync round with apply_agg
// from the round's aggregate (the staged pushes summed in rank order).
// ps__repl_apply first packs that aggregate, its sample count and the
// CRC-32 of the weights it applies to (the base) into one Replicate per
// backup (a second backup's copies the first's floats instead of summing
// again) and hands them to nng threads, then applies the aggregate itself
// while they travel; the apply's pass also leaves the new weights' CRC,
// the next forward's base. A backup checks the base against its own
// weights and the floats for NaN/Inf, acknowledges, and only then runs the
// same apply_agg on the same floats, read in place from the
// request it keeps (under mu, so nothing sees the shard before it is
// applied; its pass leaves the CRC the next update's base is checked
// against): weights, optimizer state, pull reference and delta log stay
// bit-identical. Until every backup answered, the shard's fwd_pending is
// non-zero and pulls of it park (pull.c's readiness check), so a version a
// trainer has seen is held by every live copy: when the primary dies the
// scheduler promotes a backup (scheduler_live.c) and nothing acknowledged
// is lost. So the wait a forward adds to a round is the aggregate's write,
// its trip and the backup's checks, with the backup's apply and both CRCs
// off it. (Answering pulls before the acknowledgement would let a trainer
// hold a version that a primary's death loses: the backup may never have
// read the bytes, e.g. still in the dead primary's send buffer. It is not
// done.)
//
// The forward runs on nng aios (one REQ context per shard and backup, on
// one socket per peer server, opened on first use), so the thread that
// completed the round never blocks. The nng message of each forward is
// the one allocation per update (nng owns and frees a sent message) and
// the aggregate is copied once, into it; nothing is kept for a resend.
// Instead a backup that did not acknowledge (no answer, behind, diverged:
// DATA_LOSS) is resynced: the primary sends it the shard's whole state as
// a backup Transfer (transfer.c replaces the copy held there), asked again
// every PS_FWD_RETRY_MS for as long as the map still names the backup.
// The version-0 weights (the init offer) are forwarded the same way.
//
// The backup's side (the checks and the apply) is replicate_backup.c's.
//
// A map that takes a backup out of a shard's copies (it died, or came back
// empty) ends the forwards to it at once (ps__repl_map closes their
// contexts: nothing in flight waits for a timeout, and a send started
// after the close fails at once), so no version waits for a server that
// no longer holds the shard.
#include <stdio.h>
#include <string.h>

#include "server_impl.h"
#include "test_hooks.h"

#define PS_FWD_RETRY_MS 20
#define PS_FWD_TIMEOUT_MS 2000
#define PS_FWD_REFUSED_MS 200 // before a refused resync is tried again

// What a forward's aio is doing.
enum ps_fwd_stage {
	PS_FWD_IDLE,
	PS_FWD_KICK, // built under mu; an nng thread sends it
	PS_FWD_SEND,
	PS_FWD_RECV,
	PS_FWD_SLEEP, // before a resync (a Transfer of the shard's state)
};

// One shard's forward to one of its backups. While stage is not IDLE the
// forward belongs to its aio's callbacks; stage becomes IDLE, and stale is
// read and written, only under mu.
struct ps_fwd {
	struct ps_server *s;
	uint32_t          id;  // shard
	uint32_t          to;  // backup's server index
	nng_ctx           ctx; // on repl->sock[to]
	nng_aio          *aio;
	nng_msg          *req;      // KICK: the request an nng thread sends
	uint64_t          rid;      // of the request in flight
	uint64_t          counter;  // the signed send's counter (auth on)
	uint8_t           method;   // REPLICATE, or TRANSFER for a resync
	int               table;    // id is a table shard (rows_repl.c)
	int               stage;    // an enum ps_fwd_stage
	int               stale;    // a later version came while this one flew
	int               cut;      // ctx closed: a map dropped the backup
	uint32_t          refusals; // resyncs refused (logged 1 in 16)
};

// fwd_post signs request m (a no-op with authentication off) and sends it
// on f's context (nng owns m from here); the reply must answer that
// signature. No lock.
static void
fwd_post(struct ps_fwd *f, nng_msg *m)
{
	struct ps_server *s = f->s;
	f->counter          = 0;
	if (psw_auth_sign(s->auth, m, psw_auth_channel(s->auth, f->ctx), 0,
	        &f->counter) != FB_OK) {
		nng_msg_free(m);
		f->stage = PS_FWD_SLEEP;
		nng_sleep_aio(PS_FWD_RETRY_MS, f->aio);
		return;
	}
	f->stage = PS_FWD_SEND;
	nng_aio_set_msg(f->aio, m);
	nng_aio_set_timeout(f->aio, PS_FWD_TIMEOUT_MS);
	nng_ctx_send(f->ctx, f->aio);
}

struct ps_repl {
	size_t             n_peers;
	nng_socket        *sock; // [n_peers]
	uint8_t           *open; // [n_peers]
	struct ps_fwd    **fwd;  // [n_global] NULL or PS_MAX_BACKUPS each
	struct ps_fwd    **tfwd; // [n_tglobal] the same, table shards
	uint64_t           rid;
	struct obs_metric *forwards, *resyncs;
};

int
ps__shard_backups(const struct ps_server *s, uint32_t id,
    const uint32_t **list)
{
	const Pswire__ShardInfo *si = s->pl->shards[id];
	size_t                   n  = si->n_backups;
	*list                       = si->backups;
	return (int) (n > PS_MAX_BACKUPS ? PS_MAX_BACKUPS : n);
}

int
ps__repl_open(struct ps_server *s)
{
	struct ps_repl *r = fb_zalloc(sizeof(*r));
	if (r == NULL) {
		return FB_ENOMEM;
	}
	r->fwd = fb_zalloc(s->n_global * sizeof(*r->fwd));
	if (r->fwd == NULL ||
	    obs_metric_add(s->reg, OBS_COUNTER, "ferry_replica_forwards_total",
	        "Updates a shard's primary forwarded to a backup and the "
	        "backup acknowledged.",
	        NULL, NULL, 0, 0, &r->forwards) != FB_OK ||
	    obs_metric_add(s->reg, OBS_COUNTER, "ferry_replica_resyncs_total",
	        "Backups a shard's primary resynced with the shard's whole "
	        "state after a forward they did not acknowledge.",
	        NULL, NULL, 0, 0, &r->resyncs) != FB_OK) {
		fb_free(r->fwd);
		fb_free(r);
		return FB_ENOMEM;
	}
	s->repl = r;
	return FB_OK;
}

// fwds_end stops (free: then frees) the n shards' forwards of fw.
static void
fwds_end(struct ps_fwd **fw, size_t n, int free)
{
	for (size_t i = 0; fw != NULL && i < n; i++) {
		for (int k = 0; fw[i] != NULL && k < PS_MAX_BACKUPS; k++) {
			if (!free && fw[i][k].aio != NULL) {
				nng_aio_stop(fw[i][k].aio);
			} else if (free) {
				nng_aio_free(fw[i][k].aio);
				if (fw[i][k].req != NULL) {
					nng_msg_free(fw[i][k].req);
				}
			}
		}
		if (free) {
			fb_free(fw[i]);
		}
	}
}

void
ps__repl_close(struct ps_server *s)
{
	struct ps_repl *r = s->repl;
	if (r == NULL) {
		return;
	}
	fwds_end(r->fwd, s->n_global, 0);
	fwds_end(r->tfwd, s->n_tglobal, 0);
	fwds_end(r->fwd, s->n_global, 1);
	fwds_end(r->tfwd, s->n_tglobal, 1);
	fb_free(r->tfwd);
	for (size_t m = 0; m < r->n_peers; m++) {
		if (r->open[m]) {
			nng_close(r->sock[m]);
		}
	}
	fb_free(r->fwd);
	fb_free(r->sock);
	fb_free(r->open);
	fb_free(r);
	s->repl = NULL;
}

// still_backup reports whether the map in force still makes this server
// the primary of f's shard and server f->to one of its backups. mu held.
static int
still_backup(const struct ps_server *s, const struct ps_fwd *f)
{
	const uint32_t *b;
	int             n;
	if (f->table) {
		int32_t l = s->tlocal[f->id];
		n         = ps__tshard_backups(s, f->id, &b);
		if (s->pl->table_shards[f->id]->server != s->index || l < 0 ||
		    s->tshards[l].backup) {
			return 0;
		}
	} else if ((n = ps__shard_backups(s, f->id, &b)) >= 0 &&
	    (s->pl->shards[f->id]->server != s->index ||
	        s->local[f->id] < 0)) {
		return 0;
	}
	for (int k = 0; k < n; k++) {
		if (b[k] == f->to) {
			return 1;
		}
	}
	return 0;
}

// fwd_done ends f's forward (acknowledged or given up): the shard's
// version becomes visible once no forward is pending. A forward that went
// stale (a later version was not sent to its backup while it flew) resyncs
// the backup instead. Takes mu.
static void
fwd_done(struct ps_fwd *f, int acked)
{
	struct ps_server *s = f->s;
	pthread_mutex_lock(&s->mu);
	struct srv_shard *sh = f->table ? NULL : &s->shards[f->id];
	if (acked) {
		obs_counter_add(s->repl->forwards, 1);
	}
	if (f->stale && !atomic_load(&s->closing) && still_backup(s, f)) {
		f->stale = 0;
		f->stage = PS_FWD_SLEEP;
		pthread_mutex_unlock(&s->mu);
		nng_sleep_aio(0, f->aio);
		return;
	}
	f->stale    = 0;
	f->refusals = 0;
	f->stage    = PS_FWD_IDLE;
	if (f->table) {
		int32_t l = s->tlocal[f->id];
		if (l >= 0 && s->tshards[l].fwd_pending > 0 &&
		    --s->tshards[l].fwd_pending == 0) {
			ps__rows_wake(s);
		}
	} else if (sh->fwd_pending > 0 && --sh->fwd_pending == 0) {
		ps__pull_wake(s);
		pthread_cond_broadcast(&s->decoded);
	}
	pthread_mutex_unlock(&s->mu);
}

// fwd_ctx_ready reopens f's context after ps__repl_map closed it (a later
// map names the backup again). 0, or -1 when it cannot. mu held.
static int
fwd_ctx_ready(struct ps_server *s, struct ps_fwd *f)
{
	if (f->cut) {
		if (nng_ctx_open(&f->ctx, s->repl->sock[f->to]) != 0) {
			return -1;
		}
		f->cut = 0;
		// Signed for server `to` alone, as a new context (auth.c).
		if (psw_auth_set_peer(s->auth, f->ctx, PSW_ROLE_SERVER,
		        f->to) != FB_OK) {
			nng_ctx_close(f->ctx);
			f->cut = 1;
			return -1;
		}
	}
	return 0;
}

// fwd_resync sends f's backup the shard's whole state (a backup Transfer,
// as a new backup's rebuild): after a forward the backup did not
// acknowledge (no answer, behind, diverged), a resend of the aggregate
// would not be enough or is gone (nng owned the sent message). Ends the
// forward when the map no longer names the backup or the server closes.
// Takes mu.
static void
fwd_resync(struct ps_fwd *f)
{
	struct ps_server *s = f->s;
	nng_msg          *m = NULL;
	int               rv;
	pthread_mutex_lock(&s->mu);
	int go = !atomic_load(&s->closing) && still_backup(s, f);
	rv     = !go                       ? 0
	        : fwd_ctx_ready(s, f) != 0 ? FB_ENOMEM
	        : f->table
	        ? ps__rows_encode(s, &s->tshards[s->tlocal[f->id]], 1, &m)
	        : ps__transfer_encode(s, &s->shards[f->id], 1, &m);
	pthread_mutex_unlock(&s->mu);
	if (!go) {
		fwd_done(f, 0);
		return;
	}
	if (rv != FB_OK) {
		f->stage = PS_FWD_SLEEP;
		nng_sleep_aio(PS_FWD_RETRY_MS, f->aio);
		return;
	}
	f->method = PSWIRE__METHOD__TRANSFER;
	f->rid    = 1; // ps__transfer_encode packs request id 1
	fwd_post(f, m);
}

// fwd_reply reads a backup's answer: 1 acknowledged, 0 not (a resync
// follows), -1 a resync refused (logged; it is tried again, more slowly:
// giving up would let trainers see a version the backup lacks).
static int
fwd_reply(struct ps_fwd *f, nng_msg *rep)
{
	struct psw_frame  fr;
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	int rv = psw_reply_open(f->s->auth, rep, f->method, f->rid, f->counter,
	    &fr, &ph, &why);
	Pswire__Header *rh     = (Pswire__Header *) ph;
	int             out    = rv == FB_OK ? 1 : 0;
	int             resync = f->method == PSWIRE__METHOD__TRANSFER;
	if (rv == FB_EREMOTE && rh->status != PSWIRE__STATUS__UNAVAILABLE) {
		if (!resync || f->refusals++ % 16 == 0) {
			FB_LOG(FB_LOG_ERR, "replica",
			    "shard %u: backup server %u refused the %s: %s: "
			    "%s",
			    f->id, f->to, resync ? "resync" : "update",
			    psw_status_name((int) rh->status), rh->error);
		}
		out = resync ? -1 : 0;
	} else if (rv == FB_EPROTO) {
		FB_LOG(FB_LOG_ERR, "replica",
		    "shard %u: backup server %u: bad reply: %s", f->id, f->to,
		    why);
	} else if (rv == FB_OK && resync) {
		obs_counter_add(f->s->repl->resyncs, 1);
		FB_LOG(FB_LOG_NOTICE, "replica",
		    "shard %u: backup server %u resynced from this primary",
		    f->id, f->to);
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	nng_msg_free(rep);
	return out;
}

// fwd_cb is f's aio callback (an nng thread): send, then receive, then
// done; on any failure sleep, then resync the backup.
static void
fwd_cb(void *arg)
{
	struct ps_fwd *f = arg;
	int            r = nng_aio_result(f->aio);
	nng_msg       *m;
	switch (f->stage) {
	case PS_FWD_KICK:
		m      = f->req;
		f->req = NULL;
		if (r != 0) {
			nng_msg_free(m);
			return; // stopped: the server is closing
		}
		fwd_post(f, m);
		return;
	case PS_FWD_SEND:
		if (r != 0) {
			nng_msg_free(nng_aio_get_msg(f->aio));
			nng_aio_set_msg(f->aio, NULL);
			break;
		}
		f->stage = PS_FWD_RECV;
		nng_ctx_recv(f->ctx, f->aio);
		return;
	case PS_FWD_RECV:
		if (r == 0 && nng_aio_get_msg(f->aio) == NULL) {
			// nng ended the receive without a reply (seen after
			// a backup stopped past the forward's timeout, then
			// resumed): no answer, so resync as after a timeout.
			break;
		}
		if (r == 0) {
			nng_msg *rep = nng_aio_get_msg(f->aio);
			nng_aio_set_msg(f->aio, NULL);
			int got = fwd_reply(f, rep);
			if (got > 0) {
				fwd_done(f, 1);
				return;
			}
			if (got < 0) {
				// Refused: the version stays hidden while the
				// map names this backup (fwd_resync ends the
				// forward when it no longer does).
				f->stage = PS_FWD_SLEEP;
				nng_sleep_aio(PS_FWD_REFUSED_MS, f->aio);
				return;
			}
		}
		break;
	case PS_FWD_SLEEP:
		if (r == NNG_ECANCELED) {
			return; // stopped: the server is closing
		}
		fwd_resync(f);
		return;
	default:
		return;
	}
	if (r == NNG_ECANCELED) {
		return;
	}
	f->stage = PS_FWD_SLEEP;
	nng_sleep_aio(PS_FWD_RETRY_MS, f->aio);
}

// fwd_get returns shard id's forward to its k-th backup `to`, opening the
// peer socket and the context on first use. NULL: out of memory or the
// peer cannot be dialed (logged by the caller). mu held.
static struct ps_fwd *
fwd_get(struct ps_server *s, uint32_t id, int k, uint32_t to, int table)
{
	struct ps_repl *r  = s->repl;
	struct ps_fwd **fw = table ? r->tfwd : r->fwd;
	if (fw == NULL &&
	    (fw = r->tfwd = fb_zalloc(s->n_tglobal * sizeof(*fw))) == NULL) {
		return NULL;
	}
	if (to >= r->n_peers) {
		size_t      n  = s->pl->n_servers;
		nng_socket *so = fb_realloc(r->sock, n * sizeof(*so));
		if (so == NULL) {
			return NULL;
		}
		r->sock     = so;
		uint8_t *op = fb_realloc(r->open, n);
		if (op == NULL) {
			return NULL;
		}
		r->open = op;
		memset(r->open + r->n_peers, 0, n - r->n_peers);
		r->n_peers = n;
	}
	if (!r->open[to]) {
		nng_ctx  cx;
		nng_aio *a;
		if (psw_req_open(s->tls, s->pl->servers[to], s->opts.max_msg,
		        20, 500, &r->sock[to], &cx, &a) != FB_OK) {
			return NULL;
		}
		nng_aio_free(a);
		nng_ctx_close(cx);
		r->open[to] = 1;
	}
	if (fw[id] == NULL &&
	    (fw[id] = fb_zalloc(PS_MAX_BACKUPS * sizeof(struct ps_fwd))) ==
	        NULL) {
		return NULL;
	}
	struct ps_fwd *f = &fw[id][k];
	if (f->aio != NULL && f->to != to) {
		if (f->stage != PS_FWD_IDLE) {
			// Still busy with the old backup: it ends on its own
			// (still_backup fails) and the caller skips this
			// version for slot k (a busy forward). Freeing the aio
			// now would abort it without fwd_done (fwd_pending
			// never drops, the stage never returns to idle) and
			// wait, with mu held, for a callback that takes mu.
			return f;
		}
		// The k-th backup changed: a new context on its socket.
		if (!f->cut) {
			nng_ctx_close(f->ctx);
		}
		f->cut = 0;
		nng_aio_free(f->aio);
		f->aio = NULL;
	}
	if (f->aio != NULL && f->stage == PS_FWD_IDLE &&
	    fwd_ctx_ready(s, f) != 0) {
		return NULL;
	}
	if (f->aio == NULL) {
		if (nng_aio_alloc(&f->aio, fwd_cb, f) != 0) {
			return NULL;
		}
		if (nng_ctx_open(&f->ctx, r->sock[to]) != 0) {
			nng_aio_free(f->aio);
			f->aio = NULL;
			return NULL;
		}
		f->cut = 0;
		// Its forwards are signed for server `to` alone (auth.c).
		if (psw_auth_set_peer(s->auth, f->ctx, PSW_ROLE_SERVER,
		        (uint32_t) to) != FB_OK) {
			nng_ctx_close(f->ctx);
			nng_aio_free(f->aio);
			f->aio = NULL;
			return NULL;
		}
	}
	f->s     = s;
	f->id    = id;
	f->to    = to;
	f->table = table;
	return f;
}

// placed_copy reports whether map shard si places server m, as its
// primary or a backup.
static int
placed_copy(const Pswire__ShardInfo *si, uint32_t m)
{
	for (size_t k = 0; k < si->n_backups; k++) {
		if (si->backups[k] == m) {
			return 1;
		}
	}
	return si->server == m;
}

// fwds_cut closes the forwards of fw (n shards, map entries sis) to
// servers the map no longer places a copy on. mu held.
static void
fwds_cut(struct ps_server *s, struct ps_fwd **fw, size_t n,
    Pswire__ShardInfo **sis)
{
	for (size_t i = 0; fw != NULL && i < n; i++) {
		const Pswire__ShardInfo *si = sis[i];
		for (int k = 0; fw[i] != NULL && k < PS_MAX_BACKUPS; k++) {
			struct ps_fwd *f = &fw[i][k];
			if (f->aio == NULL || f->cut ||
			    f->stage == PS_FWD_IDLE ||
			    placed_copy(si, f->to)) {
				continue;
			}
			// Whatever it waits on fails now, and so does any
			// send it starts next: it sleeps once, finds the
			// backup gone (fwd_resync) and ends. The context is
			// opened again only if a later map names the backup.
			nng_ctx_close(f->ctx);
			f->cut = 1;
			FB_LOG(FB_LOG_INFO, "replica",
			    "%sshard %zu: server %u is no longer a backup "
			    "(epoch %llu): its forward ends",
			    f->table ? "table " : "", i, f->to,
			    (unsigned long long) s->pl->epoch);
		}
	}
}

void
ps__repl_map(struct ps_server *s)
{
	if (s->repl != NULL) {
		fwds_cut(s, s->repl->fwd, s->n_global, s->pl->shards);
		fwds_cut(s, s->repl->tfwd, s->n_tglobal, s->pl->table_shards);
	}
}

int
ps__repl_tsend(struct ps_server *s, struct srv_tshard *ts, int k, uint32_t to,
    nng_msg *m, uint64_t rid)
{
	struct ps_fwd *f = fwd_get(s, ts->id, k, to, 1);
	if (f == NULL || f->stage != PS_FWD_IDLE) {
		nng_msg_free(m);
		if (f != NULL) {
			f->stale = 1; // resynced when the last one ends
		}
		return f == NULL ? -1 : 1;
	}
	if (!nng_aio_begin(f->aio)) {
		nng_msg_free(m); // stopped: the server is closing
		return -1;
	}
	f->req    = m;
	f->rid    = rid;
	f->method = PSWIRE__METHOD__REPLICATE;
	f->stage  = PS_FWD_KICK;
	f->stale  = 0;
	ts->fwd_pending++;
	nng_aio_finish(f->aio, 0);
	return 0;
}

// ps__shard_crc returns the CRC-32 of sh's weights at its version, computed
// once per version. mu held.
uint32_t
ps__shard_crc(struct srv_shard *sh)
{
	if (!sh->crc_ok || sh->crc_at != sh->version) {
		sh->crc    = fb_crc32(0, sh->x, sh->len * 4);
		sh->crc_at = sh->version;
		sh->crc_ok = 1;
	}
	return sh->crc;
}

// fwd_payload writes the aggregate g0 (+ g1 element-wise when not NULL)
// of n floats to payload bytes p, the sum computed as the optimizer does.
static void
fwd_payload(uint8_t *p, const float *g0, const float *g1, size_t n)
{
	if (g1 == NULL) {
		memcpy(p, g0, n * 4);
		return;
	}
	if (((uintptr_t) p & (_Alignof(float) - 1)) == 0) {
		float *d = (float *) (void *) p;
		for (size_t i = 0; i < n; i++) {
			d[i] = g0[i] + g1[i];
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float v = g0[i] + g1[i];
		memcpy(p + i * 4, &v, 4);
	}
}

// fwd_build packs the Replicate request of shard sh: the update making
// `version` (payload: g0 + g1, n floats, left at *pay: packing the header
// in front does not move it) applied to weights of CRC base. mu held.
// FB_ENOMEM.
static int
fwd_build(struct ps_server *s, struct srv_shard *sh, const float *g0,
    const float *g1, uint64_t samples, int init, uint32_t base, uint64_t rid,
    nng_msg **out, const uint8_t **pay)
{
	Pswire__Header           h = PSWIRE__HEADER__INIT;
	Pswire__ReplicateRequest q = PSWIRE__REPLICATE_REQUEST__INIT;
	uint8_t                 *payload;
	size_t                   plen = sh->len * 4, hl;
	q.shard                       = sh->id;
	q.version                     = init ? sh->version : sh->version + 1;
	q.samples                     = samples;
	q.crc                         = base;
	q.init                        = init != 0;
	h.request_id                  = rid;
	h.epoch                       = s->pl->epoch;
	h.body_case                   = PSWIRE__HEADER__BODY_REPLICATE_REQ;
	h.replicate_req               = &q;
	// Room rounded up to whole floats: the header is packed right in
	// front of the payload, which then starts float-aligned (nng's
	// message bodies are).
	hl = (pswire__header__get_packed_size(&h) + 3) & ~(size_t) 3;
	if (psw_msg_begin(out, hl, plen, &payload) != FB_OK) {
		return FB_ENOMEM;
	}
	fwd_payload(payload, g0, g1, sh->len);
	*pay = payload;
	if (psw_msg_finish(*out, PSWIRE__METHOD__REPLICATE, 0, &h.base, hl,
	        plen) != FB_OK) {
		nng_msg_free(*out);
		return FB_ENOMEM;
	}
	return FB_OK;
}

// forward_build packs shard sh's update (the aggregate g0 + g1, or with
// init the weights) into one Replicate per backup and leaves each in its
// forward's req, stage KICK, counted in fwd_pending, to be sent by
// forward_kick; returns the set of backups it built for (bit k: the k-th).
// *agg gets the first message's payload as floats (the aggregate, summed
// once) when it is float-aligned, else NULL; it may be read only until
// forward_kick. mu held, and kept until forward_kick.
static unsigned
forward_build(struct ps_server *s, struct srv_shard *sh, const float *g0,
    const float *g1, uint64_t samples, int init, const float **agg)
{
	const uint32_t *b;
	int             n     = ps__shard_backups(s, sh->id, &b);
	unsigned        built = 0;
	*agg                  = NULL;
	// The base: the weights the update applies to (with init, the
	// weights themselves), its CRC known from the last update's apply.
	uint32_t base = n > 0 ? ps__shard_crc(sh) : 0;
	for (int k = 0; k < n; k++) {
		struct ps_fwd *f   = fwd_get(s, sh->id, k, b[k], 0);
		nng_msg       *m   = NULL;
		const uint8_t *p   = NULL;
		uint64_t       rid = ++s->repl->rid;
		if (f != NULL && f->stage != PS_FWD_IDLE) {
			// Still busy with the last version (a retry): it
			// resyncs the backup when it ends.
			f->stale = 1;
			continue;
		}
		// A second backup's message copies the first's floats
		// instead of summing again.
		if (f == NULL ||
		    fwd_build(s, sh, *agg != NULL ? *agg : g0,
		        *agg != NULL ? NULL : g1, samples, init, base, rid, &m,
		        &p) != FB_OK) {
			// Cannot forward: the backup misses this version and
			// refuses the next (UNAVAILABLE), which resyncs it.
			FB_LOG(FB_LOG_ERR, "replica",
			    "shard %u: cannot forward version %llu to server "
			    "%u (%s)",
			    sh->id, (unsigned long long) sh->version, b[k],
			    f == NULL ? "no connection" : "no memory");
			continue;
		}
		if (*agg == NULL && !init &&
		    ((uintptr_t) p & (_Alignof(float) - 1)) == 0) {
			*agg = (const float *) (const void *) p;
		}
		f->req    = m;
		f->rid    = rid;
		f->method = PSWIRE__METHOD__REPLICATE;
		f->stage  = PS_FWD_KICK;
		f->stale  = 0;
		sh->fwd_pending++;
		built |= 1u << k;
	}
	return built;
}

// forward_kick hands the forwards forward_build built (set `built`) to
// an nng thread, which sends each (a write of the whole aggregate on
// loopback) while this thread goes on. From here nng owns the messages:
// nothing may read them. mu held.
static void
forward_kick(struct ps_server *s, struct srv_shard *sh, unsigned built)
{
	struct ps_fwd *fw = s->repl->fwd[sh->id];
	for (int k = 0; fw != NULL && k < PS_MAX_BACKUPS; k++) {
		struct ps_fwd *f = &fw[k];
		if (!(built & (1u << k))) {
			continue;
		}
		if (!nng_aio_begin(f->aio)) {
			// Stopped: the server is closing.
			nng_msg_free(f->req);
			f->req   = NULL;
			f->stage = PS_FWD_IDLE;
			if (sh->fwd_pending > 0) {
				sh->fwd_pending--;
			}
			continue;
		}
		nng_aio_finish(f->aio, 0);
	}
}

// ps__repl_apply_agg applies one sync update from aggregate g0 (the round's
// pushes summed in rank order, `samples` samples; + g1 element-wise when g1 is
// not NULL: a two-push round, the same floats as their sum) through the
// job's optimizer, then advances the version and publishes the pull
// reference. A primary with backups and each backup run exactly this, so
// their weights, optimizer state and references stay bit-identical; it
// leaves the new weights' CRC-32 in sh->crc (crc_at, crc_ok), computed in
// the optimizer's pass. mu held.
void
ps__repl_apply_agg(struct ps_server *s, struct srv_shard *sh, const float *g0,
    const float *g1, uint64_t samples)
{
	sh->crc = ps__optim_apply_crc(s, sh, g0, g1, samples);
	sh->version++;
	sh->crc_at = sh->version;
	sh->crc_ok = 1;
	ps__ref_publish(s, sh);
}

void
ps__repl_forward(struct ps_server *s, struct srv_shard *sh, const float *src,
    uint64_t samples, int init)
{
	const float *agg;
	forward_kick(s, sh,
	    forward_build(s, sh, src, NULL, samples, init, &agg));
}

void
ps__repl_apply(struct ps_server *s, struct srv_shard *sh, const float *g0,
    const float *g1, uint64_t samples)
{
	const float *agg;
	forward_kick(s, sh, forward_build(s, sh, g0, g1, samples, 0, &agg));
	// The forwards travel while the primary applies; from the kick nng
	// owns their bytes, so the apply reads the staged pushes.
	ps__repl_apply_agg(s, sh, g0, g1, samples);
}
