// replicate.c — --replicas on a server: the primary's forwarding of each
// applied sync update to its backups (Replicate, method 23), the backup's
// apply, and the rule that no trainer sees a version before every backup
// holds it.
//
// DESIGN. A shard's primary applies a sync round with ps__shard_apply_agg from
// the round's aggregate (the staged pushes summed in rank order) and
// forwards that aggregate, its sample count and the CRC-32 of the weights
// after the update to every backup the map names. A backup runs the same
// ps__shard_apply_agg on the same floats, so its weights, pull reference and
// delta log are bit-identical; it checks the CRC and answers DATA_LOSS
// when it diverged. Until every backup answered, the shard's fwd_pending
// is non-zero and pulls of it park (pull.c's readiness check), so a
// version a trainer has seen is held by every live copy: when the primary
// dies the scheduler promotes a backup (scheduler_live.c) and nothing
// acknowledged is lost. The forward runs on nng aios (one REQ context per
// shard and backup, on one socket per peer server, opened on first use),
// so the thread that completed the round never blocks; a backup that does
// not answer (UNAVAILABLE while its rebuild is in flight, or no answer at
// all) is asked again every PS_FWD_RETRY_MS for as long as the map still
// names it. The nng message of each forward is the one allocation per
// update (nng owns a sent message); the aggregate is copied once into it.
// The version-0 weights (the init offer) are forwarded the same way.
#include <stdio.h>
#include <string.h>

#include "server_impl.h"

#define PS_FWD_RETRY_MS 20
#define PS_FWD_TIMEOUT_MS 2000

// What a forward's aio is doing.
enum ps_fwd_stage {
	PS_FWD_IDLE,
	PS_FWD_SEND,
	PS_FWD_RECV,
	PS_FWD_SLEEP,
};

// One shard's forward to one of its backups.
struct ps_fwd {
	struct ps_server *s;
	uint32_t          id;  // shard
	uint32_t          to;  // backup's server index
	nng_ctx           ctx; // on repl->sock[to]
	nng_aio          *aio;
	nng_msg          *req; // the packed request, kept for retries
	uint64_t          rid;
	uint64_t          counter; // the signed send's counter (auth on)
	int               stage;   // an enum ps_fwd_stage
};

// fwd_post signs copy d of f's request (a no-op with authentication off)
// and sends it on f's context; the reply must answer that signature.
static void
fwd_post(struct ps_fwd *f, nng_msg *d)
{
	struct ps_server *s = f->s;
	f->counter          = 0;
	if (psw_auth_sign(s->auth, d, psw_auth_channel(s->auth, f->ctx), 0,
	        &f->counter) != FB_OK) {
		nng_msg_free(d);
		f->stage = PS_FWD_SLEEP;
		nng_sleep_aio(PS_FWD_RETRY_MS, f->aio);
		return;
	}
	nng_aio_set_msg(f->aio, d);
	nng_aio_set_timeout(f->aio, PS_FWD_TIMEOUT_MS);
	nng_ctx_send(f->ctx, f->aio);
}

struct ps_repl {
	size_t             n_peers;
	nng_socket        *sock; // [n_peers]
	uint8_t           *open; // [n_peers]
	struct ps_fwd    **fwd;  // [n_global] NULL or PS_MAX_BACKUPS each
	uint64_t           rid;
	struct obs_metric *forwards;
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
	        NULL, NULL, 0, 0, &r->forwards) != FB_OK) {
		fb_free(r->fwd);
		fb_free(r);
		return FB_ENOMEM;
	}
	s->repl = r;
	return FB_OK;
}

void
ps__repl_close(struct ps_server *s)
{
	struct ps_repl *r = s->repl;
	if (r == NULL) {
		return;
	}
	for (size_t i = 0; i < s->n_global; i++) {
		for (int k = 0; r->fwd[i] != NULL && k < PS_MAX_BACKUPS; k++) {
			if (r->fwd[i][k].aio != NULL) {
				nng_aio_stop(r->fwd[i][k].aio);
			}
		}
	}
	for (size_t i = 0; i < s->n_global; i++) {
		for (int k = 0; r->fwd[i] != NULL && k < PS_MAX_BACKUPS; k++) {
			nng_aio_free(r->fwd[i][k].aio);
			nng_msg_free(r->fwd[i][k].req);
		}
		fb_free(r->fwd[i]);
	}
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
	int             n = ps__shard_backups(s, f->id, &b);
	if (s->pl->shards[f->id]->server != s->index || s->local[f->id] < 0) {
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
// version becomes visible once no forward is pending. Takes mu.
static void
fwd_done(struct ps_fwd *f, int acked)
{
	struct ps_server *s = f->s;
	pthread_mutex_lock(&s->mu);
	nng_msg_free(f->req);
	f->req               = NULL;
	f->stage             = PS_FWD_IDLE;
	struct srv_shard *sh = &s->shards[f->id];
	if (acked) {
		obs_counter_add(s->repl->forwards, 1);
	}
	if (sh->fwd_pending > 0 && --sh->fwd_pending == 0) {
		ps__pull_wake(s);
		pthread_cond_broadcast(&s->decoded);
	}
	pthread_mutex_unlock(&s->mu);
}

// fwd_send (re)sends f's request, or ends the forward when the map no
// longer names its backup or the server closes. Takes mu.
static void
fwd_send(struct ps_fwd *f)
{
	struct ps_server *s = f->s;
	nng_msg          *m = NULL;
	pthread_mutex_lock(&s->mu);
	int go = !atomic_load(&s->closing) && still_backup(s, f);
	pthread_mutex_unlock(&s->mu);
	if (!go) {
		fwd_done(f, 0);
		return;
	}
	if (nng_msg_dup(&m, f->req) != 0) {
		f->stage = PS_FWD_SLEEP;
		nng_sleep_aio(PS_FWD_RETRY_MS, f->aio);
		return;
	}
	f->stage = PS_FWD_SEND;
	fwd_post(f, m);
}

// fwd_reply reads a backup's answer: 1 acknowledged, 0 retry, -1 refused
// for good (logged).
static int
fwd_reply(struct ps_fwd *f, nng_msg *rep)
{
	struct psw_frame  fr;
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	int rv = psw_reply_open(f->s->auth, rep, PSWIRE__METHOD__REPLICATE,
	    f->rid, f->counter, &fr, &ph, &why);
	Pswire__Header *rh  = (Pswire__Header *) ph;
	int             out = rv == FB_OK ? 1 : 0;
	if (rv == FB_EREMOTE && rh->status != PSWIRE__STATUS__UNAVAILABLE) {
		FB_LOG(FB_LOG_ERR, "replica",
		    "shard %u: backup server %u refused the update: %s: %s",
		    f->id, f->to, psw_status_name((int) rh->status),
		    rh->error);
		out = -1;
	} else if (rv == FB_EPROTO) {
		FB_LOG(FB_LOG_ERR, "replica",
		    "shard %u: backup server %u: bad reply: %s", f->id, f->to,
		    why);
		out = -1;
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	nng_msg_free(rep);
	return out;
}

// fwd_cb is f's aio callback (an nng thread): send, then receive, then
// done, or sleep and send again.
static void
fwd_cb(void *arg)
{
	struct ps_fwd *f = arg;
	int            r = nng_aio_result(f->aio);
	switch (f->stage) {
	case PS_FWD_SEND:
		if (r != 0) {
			nng_msg_free(nng_aio_get_msg(f->aio));
			break;
		}
		f->stage = PS_FWD_RECV;
		nng_ctx_recv(f->ctx, f->aio);
		return;
	case PS_FWD_RECV:
		if (r == 0) {
			int got = fwd_reply(f, nng_aio_get_msg(f->aio));
			if (got != 0) {
				fwd_done(f, got > 0);
				return;
			}
		}
		break;
	case PS_FWD_SLEEP:
		if (r == NNG_ECANCELED) {
			return; // stopped: the server is closing
		}
		fwd_send(f);
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
fwd_get(struct ps_server *s, uint32_t id, int k, uint32_t to)
{
	struct ps_repl *r = s->repl;
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
	if (r->fwd[id] == NULL &&
	    (r->fwd[id] = fb_zalloc(PS_MAX_BACKUPS * sizeof(struct ps_fwd))) ==
	        NULL) {
		return NULL;
	}
	struct ps_fwd *f = &r->fwd[id][k];
	if (f->aio != NULL && f->to != to) {
		// The k-th backup changed: a new context on its socket.
		nng_ctx_close(f->ctx);
		nng_aio_free(f->aio);
		f->aio = NULL;
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
	}
	f->s  = s;
	f->id = id;
	f->to = to;
	return f;
}

// fwd_build packs the Replicate request of shard sh (payload: n floats
// from src). mu held. FB_ENOMEM.
static int
fwd_build(struct ps_server *s, struct srv_shard *sh, const float *src,
    uint64_t samples, int init, uint64_t rid, nng_msg **out)
{
	Pswire__Header           h = PSWIRE__HEADER__INIT;
	Pswire__ReplicateRequest q = PSWIRE__REPLICATE_REQUEST__INIT;
	uint8_t                 *payload;
	size_t                   plen = sh->len * 4, hl;
	q.shard                       = sh->id;
	q.version                     = sh->version;
	q.samples                     = samples;
	q.crc                         = fb_crc32(0, sh->x, plen);
	q.init                        = init != 0;
	h.request_id                  = rid;
	h.epoch                       = s->pl->epoch;
	h.body_case                   = PSWIRE__HEADER__BODY_REPLICATE_REQ;
	h.replicate_req               = &q;
	hl                            = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(out, hl, plen, &payload) != FB_OK) {
		return FB_ENOMEM;
	}
	memcpy(payload, src, plen);
	if (psw_msg_finish(*out, PSWIRE__METHOD__REPLICATE, 0, &h.base, hl,
	        plen) != FB_OK) {
		nng_msg_free(*out);
		return FB_ENOMEM;
	}
	return FB_OK;
}

void
ps__repl_forward(struct ps_server *s, struct srv_shard *sh, const float *src,
    uint64_t samples, int init)
{
	const uint32_t *b;
	int             n = ps__shard_backups(s, sh->id, &b);
	for (int k = 0; k < n; k++) {
		struct ps_fwd *f   = fwd_get(s, sh->id, k, b[k]);
		nng_msg       *m   = NULL;
		uint64_t       rid = ++s->repl->rid;
		if (f == NULL || f->stage != PS_FWD_IDLE ||
		    fwd_build(s, sh, src, samples, init, rid, &m) != FB_OK) {
			// Cannot forward: the backup misses this version and
			// will refuse the next (UNAVAILABLE) until a rebuild.
			FB_LOG(FB_LOG_ERR, "replica",
			    "shard %u: cannot forward version %llu to server "
			    "%u (%s)",
			    sh->id, (unsigned long long) sh->version, b[k],
			    f == NULL ? "no connection" : "busy or no memory");
			continue;
		}
		f->req   = m;
		f->rid   = rid;
		f->stage = PS_FWD_SEND;
		sh->fwd_pending++;
		nng_msg *d = NULL;
		if (nng_msg_dup(&d, m) != 0) {
			f->stage = PS_FWD_SLEEP;
			nng_sleep_aio(PS_FWD_RETRY_MS, f->aio);
			continue;
		}
		fwd_post(f, d);
	}
}

// replicate_apply applies Replicate q (payload p, checked length) to
// backup shard sh. Returns the status to answer (OK: applied or already
// there) with a message in why. mu held.
static int
replicate_apply(struct ps_server *s, struct srv_shard *sh,
    const Pswire__ReplicateRequest *q, const uint8_t *p, char *why, size_t n)
{
	if (q->init) {
		if (!sh->init) {
			if (!ps__copy_finite(sh->x, p, sh->len)) {
				memset(sh->x, 0, sh->len * 4);
				snprintf(why, n,
				    "initial weights hold NaN or Inf");
				return PSWIRE__STATUS__INVALID_ARGUMENT;
			}
			sh->init = 1;
			ps__ref_publish(s, sh);
		}
		return PSWIRE__STATUS__OK;
	}
	if (!sh->init || q->version > sh->version + 1) {
		snprintf(why, n, "backup at version %llu, update makes %llu",
		    (unsigned long long) sh->version,
		    (unsigned long long) q->version);
		return PSWIRE__STATUS__UNAVAILABLE;
	}
	if (q->version <= sh->version) {
		return PSWIRE__STATUS__OK; // a retry of one applied
	}
	if (q->samples == 0 || q->samples > (1ull << 40)) {
		snprintf(why, n, "samples %llu out of range",
		    (unsigned long long) q->samples);
		return PSWIRE__STATUS__INVALID_ARGUMENT;
	}
	if (!ps__copy_finite(s->sum, p, sh->len)) {
		snprintf(why, n, "aggregate holds NaN or Inf");
		return PSWIRE__STATUS__INVALID_ARGUMENT;
	}
	ps__shard_apply_agg(s, sh, s->sum, q->samples);
	uint32_t crc = fb_crc32(0, sh->x, sh->len * 4);
	if (crc != q->crc) {
		FB_LOG(FB_LOG_ERR, "replica",
		    "shard %u diverged from its primary at version %llu "
		    "(crc %08x, primary %08x)",
		    sh->id, (unsigned long long) sh->version, crc, q->crc);
		sh->init = 0; // refuse later updates until rebuilt
		snprintf(why, n, "backup's weights differ (crc %08x vs %08x)",
		    crc, q->crc);
		return PSWIRE__STATUS__DATA_LOSS;
	}
	return PSWIRE__STATUS__OK;
}

void
ps__on_replicate(struct ps_server *s, struct ps_call *c)
{
	Pswire__ReplicateRequest *q;
	Pswire__Header            h = PSWIRE__HEADER__INIT;
	char                      why[160];
	int                       st;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_REPLICATE_REQ) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Replicate needs a replicate_req body");
		return;
	}
	q = c->hdr->replicate_req;
	pthread_mutex_lock(&s->mu);
	if (s->pl == NULL || q->shard >= s->n_global) {
		ps__server_reply_err(s, c,
		    s->pl == NULL ? PSWIRE__STATUS__UNAVAILABLE
		                  : PSWIRE__STATUS__INVALID_ARGUMENT,
		    "replicate shard %u: not started or no such shard",
		    q->shard);
		goto out;
	}
	struct srv_shard *sh = &s->shards[q->shard];
	if (s->local[q->shard] < 0 || !sh->backup) {
		// Not a backup here (yet): the rebuild or the map that makes
		// it one may be on its way.
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "shard %u is not held here as a backup (epoch %llu)",
		    q->shard, (unsigned long long) s->pl->epoch);
		goto out;
	}
	if (c->frame.payload_len != sh->len * 4) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u: %llu payload bytes, expected %llu", q->shard,
		    (unsigned long long) c->frame.payload_len,
		    (unsigned long long) sh->len * 4);
		goto out;
	}
	why[0] = '\0';
	st     = replicate_apply(s, sh, q, c->frame.payload, why, sizeof(why));
	if (st != PSWIRE__STATUS__OK) {
		ps__server_reply_err(s, c, st, "shard %u: %s", q->shard, why);
		goto out;
	}
	h.request_id = c->hdr->request_id;
	ps__call_reply(c, &h);
out:
	pthread_mutex_unlock(&s->mu);
}
