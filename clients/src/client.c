// client.c — libferry: a trainer's connection to a Ferry job.
//
// DESIGN. The client holds one REQ socket to the scheduler and one REQ
// socket (one context, one aio) per server. A call that touches the model
// (pull, push, push-pull, init) builds one batched message per server that
// holds any of the job's shards, sends them all, then waits for all the
// replies: the servers work in parallel and the round trip costs the
// slowest server, not the sum. Gradients are written straight into the
// outgoing nng message (psw_msg_begin/finish) and pulled shards are copied
// straight from the reply into the caller's tensor buffers: one copy each
// way, no staging. A server that answers UNAVAILABLE (not started yet) is
// asked again until the call's deadline.
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "comp/comp.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "ps/base.h"
#include "psw/psw.h"

struct conn {
	nng_socket sock;
	nng_ctx    ctx;
	nng_aio   *aio;
	uint32_t  *shards;  // global shard ids held by this server
	size_t     n;
	uint64_t   bytes;   // fp32 bytes of its shards
	// per-call state
	int        pending;
	int        rv;
	uint64_t   rid;
	nng_msg   *rep;
};

struct ferry_client {
	struct ferry_opts  opts;
	char               url[256];
	char               codec_push[32], codec_pull[32];
	nng_socket         sched;
	nng_ctx            sched_ctx;
	nng_aio           *sched_aio;
	size_t             n_tensors;
	uint64_t          *tensor_len;
	Pswire__Placement *pl;
	struct conn       *conns;
	size_t             n_conns;
	uint64_t           version; // of the weights held
	uint64_t           want;    // version the next pull asks for
	int                declared;
	uint64_t           next_rid;
	struct ferry_stats stats;
	char               err[512];
};

static const char *const ferry_err_text[FERRY_ERR_COUNT] = {
	[FERRY_OK]        = "ok",
	[FERRY_EINVAL]    = "invalid argument",
	[FERRY_ENOMEM]    = "out of memory",
	[FERRY_ECONNECT]  = "cannot connect",
	[FERRY_ETIMEDOUT] = "timed out",
	[FERRY_EREMOTE]   = "the peer returned an error",
	[FERRY_EPROTO]    = "malformed reply",
	[FERRY_EMISMATCH] = "tensor table does not match the job",
	[FERRY_ESTATE]    = "call out of order",
	[FERRY_ECORRUPT]  = "checksum mismatch",
	[FERRY_ECLOSED]   = "closed",
	[FERRY_EUNSUPP]   = "not supported",
};

FERRY_API const char *
ferry_strerror(int err)
{
	if (err >= 0 && err < FERRY_ERR_COUNT && ferry_err_text[err]) {
		return ferry_err_text[err];
	}
	return "unknown error";
}

static int
fail(ferry_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fail(ferry_client *c, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err;
}

static int
map_err(int rv)
{
	switch (rv) {
	case PS_OK:
		return FERRY_OK;
	case PS_ETIMEDOUT:
		return FERRY_ETIMEDOUT;
	case PS_EREMOTE:
		return FERRY_EREMOTE;
	case PS_EPROTO:
		return FERRY_EPROTO;
	case PS_ENOMEM:
		return FERRY_ENOMEM;
	default:
		return FERRY_ECONNECT;
	}
}

static uint32_t
timeout(const ferry_client *c)
{
	return c->opts.timeout_ms ? c->opts.timeout_ms : 60000;
}

static int
open_req(const char *url, size_t max_msg, nng_socket *s, nng_ctx *ctx,
    nng_aio **aio)
{
	if (nng_req0_open(s) != 0) {
		return PS_ETRANSPORT;
	}
	// A request is never re-sent by nng: pushes are not idempotent.
	nng_socket_set_ms(*s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_ms(*s, NNG_OPT_RECONNMINT, 20);
	nng_socket_set_ms(*s, NNG_OPT_RECONNMAXT, 500);
	nng_socket_set_size(*s, NNG_OPT_RECVMAXSZ, max_msg);
	if (nng_dial(*s, url, NULL, NNG_FLAG_NONBLOCK) != 0 ||
	    nng_ctx_open(ctx, *s) != 0 || nng_aio_alloc(aio, NULL, NULL) != 0) {
		nng_close(*s);
		return PS_ETRANSPORT;
	}
	return PS_OK;
}

FERRY_API int
ferry_client_open(const struct ferry_opts *o, ferry_client **out)
{
	ferry_client *c;

	if (o == NULL || out == NULL || o->scheduler_url == NULL ||
	    strlen(o->scheduler_url) >= 256 || o->rank < 0 ||
	    !(o->lr > 0) || (o->mode != FERRY_MODE_SYNC &&
	    o->mode != FERRY_MODE_ASYNC)) {
		return FERRY_EINVAL;
	}
	if ((c = ps_zalloc(sizeof(*c))) == NULL) {
		return FERRY_ENOMEM;
	}
	c->opts = *o;
	snprintf(c->url, sizeof(c->url), "%s", o->scheduler_url);
	snprintf(c->codec_push, sizeof(c->codec_push), "%s",
	    o->codec_push ? o->codec_push : "none");
	snprintf(c->codec_pull, sizeof(c->codec_pull), "%s",
	    o->codec_pull ? o->codec_pull : "none");
	c->opts.scheduler_url = c->url;
	c->opts.codec_push    = c->codec_push;
	c->opts.codec_pull    = c->codec_pull;
	c->next_rid           = ((uint64_t) (unsigned) o->rank << 48) | 1;
	if (strcmp(c->codec_push, "none") != 0 ||
	    strcmp(c->codec_pull, "none") != 0) {
		ps_free(c);
		return FERRY_EUNSUPP;
	}
	if (open_req(c->url, 1u << 30, &c->sched, &c->sched_ctx,
	        &c->sched_aio) != PS_OK) {
		ps_free(c);
		return FERRY_ECONNECT;
	}
	*out = c;
	return FERRY_OK;
}

FERRY_API void
ferry_client_close(ferry_client *c)
{
	if (c == NULL) {
		return;
	}
	for (size_t i = 0; i < c->n_conns; i++) {
		nng_close(c->conns[i].sock);
		nng_aio_free(c->conns[i].aio);
		ps_free(c->conns[i].shards);
	}
	ps_free(c->conns);
	nng_close(c->sched);
	nng_aio_free(c->sched_aio);
	if (c->pl != NULL) {
		pswire__placement__free_unpacked(c->pl, NULL);
	}
	ps_free(c->tensor_len);
	ps_free(c);
}

// sched_call sends h (no payload) to the scheduler and returns the reply
// header in *rh (free with pswire__header__free_unpacked).
static int
sched_call(ferry_client *c, Pswire__Header *h, uint8_t method,
    uint32_t tmo, Pswire__Header **rh)
{
	nng_msg          *req, *rep = NULL;
	uint8_t          *payload;
	struct psw_frame  f;
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	size_t            hl;
	int               rv;

	h->request_id  = c->next_rid++;
	h->deadline_ms = tmo;
	h->rank        = (uint32_t) c->opts.rank;
	hl             = pswire__header__get_packed_size(h);
	if (psw_msg_begin(&req, hl, 0, &payload) != PS_OK) {
		return fail(c, FERRY_ENOMEM, "out of memory");
	}
	psw_msg_finish(req, method, 0, &h->base, hl, 0);
	c->stats.requests++;
	rv = psw_call(c->sched_ctx, c->sched_aio, req, method, h->request_id,
	    (int) tmo, &rep, &f, &ph, &why);
	if (rep != NULL) {
		nng_msg_free(rep);
	}
	if (rv == PS_EREMOTE) {
		Pswire__Header *r = (Pswire__Header *) ph;
		fail(c, FERRY_EREMOTE, "scheduler %s: %s: %s", c->url,
		    psw_status_name(r->status), r->error);
		int st = r->status;
		pswire__header__free_unpacked(r, NULL);
		return st == PSWIRE__STATUS__FAILED_PRECONDITION
		    ? FERRY_EMISMATCH
		    : FERRY_EREMOTE;
	}
	if (rv != PS_OK) {
		return fail(c, map_err(rv), "scheduler %s: %s", c->url,
		    why ? why : ps_strerror(rv));
	}
	*rh = (Pswire__Header *) ph;
	return FERRY_OK;
}

// check_placement validates the map against the declared table.
static int
check_placement(ferry_client *c, const Pswire__Placement *pl)
{
	if (pl->job == NULL || pl->job->n_tensors != c->n_tensors ||
	    pl->n_servers == 0 || pl->n_servers > 4096) {
		return fail(c, FERRY_EPROTO,
		    "placement does not match the declared tensor table");
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		const Pswire__ShardInfo *s = pl->shards[i];
		if (s->tensor >= c->n_tensors || s->server >= pl->n_servers ||
		    s->len == 0 || s->offset > c->tensor_len[s->tensor] ||
		    s->len > c->tensor_len[s->tensor] - s->offset) {
			return fail(c, FERRY_EPROTO,
			    "placement shard %zu is out of range", i);
		}
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_declare(ferry_client *c, const struct ferry_tensor_desc *d,
    size_t n)
{
	Pswire__Header          h   = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr  = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       job = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc     *tds = NULL, **tdp = NULL;
	Pswire__Header         *rh  = NULL;
	int                     rv;

	if (c == NULL || d == NULL || n == 0) {
		return FERRY_EINVAL;
	}
	if (c->declared) {
		return fail(c, FERRY_ESTATE, "tensors already declared");
	}
	c->tensor_len = ps_alloc(n * sizeof(*c->tensor_len));
	tds           = ps_alloc(n * sizeof(*tds));
	tdp           = ps_alloc(n * sizeof(*tdp));
	if (c->tensor_len == NULL || tds == NULL || tdp == NULL) {
		rv = fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		if (d[i].name == NULL || strlen(d[i].name) > 127 ||
		    d[i].len == 0) {
			rv = fail(c, FERRY_EINVAL,
			    "tensor %zu: needs a name of at most 127 bytes "
			    "and a length > 0", i);
			goto done;
		}
		pswire__tensor_desc__init(&tds[i]);
		tds[i].name      = (char *) d[i].name;
		tds[i].len       = d[i].len;
		tdp[i]           = &tds[i];
		c->tensor_len[i] = d[i].len;
	}
	c->n_tensors     = n;
	job.n_tensors    = n;
	job.tensors      = tdp;
	job.mode         = c->opts.mode;
	job.lr           = c->opts.lr;
	job.codec_push   = c->codec_push;
	job.codec_pull   = c->codec_pull;
	job.bucket       = c->opts.bucket;
	job.warmup_steps = c->opts.warmup_steps;
	rr.role          = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank          = (uint32_t) c->opts.rank;
	rr.job           = &job;
	h.body_case      = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req   = &rr;
	if ((rv = sched_call(c, &h, PSWIRE__METHOD__REGISTER, timeout(c),
	         &rh)) != FERRY_OK) {
		goto done;
	}
	pswire__header__free_unpacked(rh, NULL);
	rh = NULL;

	// Wait (server-side, parked) for every member, then fetch the map.
	Pswire__Header              g  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = 1;
	g.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	g.placement_req                = &gp;
	if ((rv = sched_call(c, &g, PSWIRE__METHOD__GET_PLACEMENT, timeout(c),
	         &rh)) != FERRY_OK) {
		goto done;
	}
	if (rh->body_case != PSWIRE__HEADER__BODY_PLACEMENT) {
		rv = fail(c, FERRY_EPROTO, "GetPlacement reply has no map");
		goto done;
	}
	c->pl         = rh->placement;
	rh->placement = NULL;
	rh->body_case = PSWIRE__HEADER__BODY__NOT_SET;
	if ((rv = check_placement(c, c->pl)) != FERRY_OK) {
		goto done;
	}
	c->n_conns = c->pl->n_servers;
	if ((c->conns = ps_zalloc(c->n_conns * sizeof(*c->conns))) == NULL) {
		rv = fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->conns[c->pl->shards[i]->server].n++;
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		struct conn *cn = &c->conns[m];
		cn->shards = ps_alloc((cn->n ? cn->n : 1) * sizeof(uint32_t));
		if (cn->shards == NULL) {
			rv = fail(c, FERRY_ENOMEM, "out of memory");
			goto done;
		}
		cn->n = 0;
		if (open_req(c->pl->servers[m], 1u << 30, &cn->sock, &cn->ctx,
		        &cn->aio) != PS_OK) {
			rv = fail(c, FERRY_ECONNECT, "cannot dial server %s",
			    c->pl->servers[m]);
			goto done;
		}
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		struct conn *cn       = &c->conns[c->pl->shards[i]->server];
		cn->shards[cn->n++]   = (uint32_t) i;
		cn->bytes += c->pl->shards[i]->len * 4;
	}
	c->declared = 1;
	rv          = FERRY_OK;
done:
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	ps_free(tds);
	ps_free(tdp);
	return rv;
}

// ---- batched exchanges with every server ----------------------------------

enum op { OP_INIT, OP_PULL, OP_PUSH, OP_PUSH_PULL };

struct xfer {
	enum op            op;
	const float *const *g;
	float *const      *w;
	uint32_t           n_samples;
	uint64_t           got_version;
	int                have_version;
};

// build_request creates server m's message for the operation.
static int
build_request(ferry_client *c, struct conn *cn, struct xfer *x, nng_msg **out)
{
	Pswire__Header      h = PSWIRE__HEADER__INIT;
	Pswire__PushRequest pr = PSWIRE__PUSH_REQUEST__INIT;
	Pswire__PullRequest pl = PSWIRE__PULL_REQUEST__INIT;
	Pswire__ShardRef    refs_stack[64], *refs = refs_stack;
	Pswire__ShardRef   *ptr_stack[64], **ptrs = ptr_stack;
	uint8_t            *payload;
	size_t              hl, plen = 0;
	uint8_t             method;
	int                 rv = PS_OK;

	h.request_id  = cn->rid = c->next_rid++;
	h.deadline_ms = timeout(c);
	h.epoch       = c->pl->epoch;
	h.rank        = (uint32_t) c->opts.rank;
	if (x->op == OP_PULL) {
		pl.n_shards     = cn->n;
		pl.shards       = cn->shards;
		pl.version      = c->want;
		pl.have_version = c->version;
		h.body_case     = PSWIRE__HEADER__BODY_PULL_REQ;
		h.pull_req      = &pl;
		method          = PSWIRE__METHOD__PULL;
		hl              = pswire__header__get_packed_size(&h);
		if (psw_msg_begin(out, hl, 0, &payload) != PS_OK) {
			return PS_ENOMEM;
		}
		return psw_msg_finish(*out, method, 0, &h.base, hl, 0);
	}
	if (cn->n > 64) {
		refs = ps_alloc(cn->n * sizeof(*refs));
		ptrs = ps_alloc(cn->n * sizeof(*ptrs));
		if (refs == NULL || ptrs == NULL) {
			rv = PS_ENOMEM;
			goto done;
		}
	}
	for (size_t i = 0; i < cn->n; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[cn->shards[i]];
		pswire__shard_ref__init(&refs[i]);
		refs[i].shard   = cn->shards[i];
		refs[i].version = c->version;
		refs[i].codec   = COMP_NONE;
		refs[i].offset  = plen;
		refs[i].length  = si->len * 4;
		plen += si->len * 4;
		ptrs[i] = &refs[i];
	}
	pr.n_shards  = cn->n;
	pr.shards    = ptrs;
	pr.n_samples = x->n_samples;
	pr.init      = x->op == OP_INIT;
	h.body_case  = PSWIRE__HEADER__BODY_PUSH_REQ;
	h.push_req   = &pr;
	method       = x->op == OP_PUSH_PULL ? PSWIRE__METHOD__PUSH_PULL
	                                     : PSWIRE__METHOD__PUSH;
	hl           = pswire__header__get_packed_size(&h);
	if ((rv = psw_msg_begin(out, hl, plen, &payload)) != PS_OK) {
		goto done;
	}
	for (size_t i = 0; i < cn->n; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[cn->shards[i]];
		memcpy(payload + refs[i].offset, x->g[si->tensor] + si->offset,
		    si->len * 4);
	}
	rv = psw_msg_finish(*out, method, 0, &h.base, hl, plen);
done:
	if (refs != refs_stack) {
		ps_free(refs);
		ps_free(ptrs);
	}
	return rv;
}

// take_reply checks server m's reply and scatters pulled shards into w.
static int
take_reply(ferry_client *c, size_t m, struct xfer *x, Pswire__Header *rh,
    const struct psw_frame *f)
{
	struct conn *cn = &c->conns[m];
	if (x->op == OP_INIT || x->op == OP_PUSH) {
		return FERRY_OK;
	}
	if (rh->body_case != PSWIRE__HEADER__BODY_PULL_REP ||
	    rh->pull_rep->n_shards != cn->n) {
		return fail(c, FERRY_EPROTO, "server %s: pull reply lists the "
		    "wrong shards", c->pl->servers[m]);
	}
	for (size_t i = 0; i < cn->n; i++) {
		const Pswire__ShardRef  *r  = rh->pull_rep->shards[i];
		const Pswire__ShardInfo *si;
		if (r->shard != cn->shards[i]) {
			return fail(c, FERRY_EPROTO, "server %s: reply shard %u "
			    "out of order", c->pl->servers[m], r->shard);
		}
		si = c->pl->shards[r->shard];
		if (r->codec != COMP_NONE || r->length != si->len * 4 ||
		    r->offset > f->payload_len ||
		    r->length > f->payload_len - r->offset) {
			return fail(c, FERRY_EPROTO, "server %s: shard %u bytes "
			    "do not match the map", c->pl->servers[m],
			    r->shard);
		}
		memcpy(x->w[si->tensor] + si->offset, f->payload + r->offset,
		    si->len * 4);
		if (!x->have_version || r->version < x->got_version) {
			x->got_version = r->version;
		}
		x->have_version = 1;
	}
	return FERRY_OK;
}

static void
nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

// exchange runs one operation against every server holding shards, in
// parallel, retrying servers that answer UNAVAILABLE until the deadline.
static int
exchange(ferry_client *c, struct xfer *x)
{
	uint64_t deadline = ps_clock_ms() + timeout(c);
	int      left     = 0, rv = FERRY_OK;
	uint8_t  method   = x->op == OP_PULL ? PSWIRE__METHOD__PULL
	        : x->op == OP_PUSH_PULL      ? PSWIRE__METHOD__PUSH_PULL
	                                     : PSWIRE__METHOD__PUSH;

	for (size_t m = 0; m < c->n_conns; m++) {
		c->conns[m].pending = c->conns[m].n > 0;
		left += c->conns[m].pending;
	}
	while (left > 0 && rv == FERRY_OK) {
		uint64_t now = ps_clock_ms();
		if (now >= deadline) {
			return fail(c, FERRY_ETIMEDOUT, "%s: deadline passed "
			    "waiting for %d server(s)", psw_method_name(method),
			    left);
		}
		int tmo = (int) (deadline - now);
		for (size_t m = 0; m < c->n_conns; m++) {
			struct conn *cn = &c->conns[m];
			nng_msg     *req;
			cn->rv = PS_OK;
			if (!cn->pending) {
				continue;
			}
			if ((cn->rv = build_request(c, cn, x, &req)) != PS_OK) {
				continue;
			}
			if (x->op != OP_PULL) {
				c->stats.bytes_pushed += nng_msg_len(req);
			}
			c->stats.requests++;
			nng_aio_set_timeout(cn->aio, tmo);
			nng_aio_set_msg(cn->aio, req);
			nng_ctx_send(cn->ctx, cn->aio);
		}
		for (size_t m = 0; m < c->n_conns; m++) {
			struct conn *cn = &c->conns[m];
			if (!cn->pending || cn->rv != PS_OK) {
				continue;
			}
			nng_aio_wait(cn->aio);
			if (nng_aio_result(cn->aio) != 0) {
				nng_msg_free(nng_aio_get_msg(cn->aio));
				cn->rv = nng_aio_result(cn->aio) ==
				        NNG_ETIMEDOUT ? PS_ETIMEDOUT
				                      : PS_ETRANSPORT;
				continue;
			}
			nng_ctx_recv(cn->ctx, cn->aio);
		}
		for (size_t m = 0; m < c->n_conns; m++) {
			struct conn      *cn = &c->conns[m];
			struct psw_frame  f;
			ProtobufCMessage *ph  = NULL;
			const char       *why = "";
			int               r;
			if (!cn->pending) {
				continue;
			}
			if (cn->rv != PS_OK) {
				rv = fail(c, map_err(cn->rv), "server %s: %s",
				    c->pl->servers[m], ps_strerror(cn->rv));
				continue;
			}
			nng_aio_wait(cn->aio);
			if ((r = nng_aio_result(cn->aio)) != 0) {
				rv = fail(c, r == NNG_ETIMEDOUT ? FERRY_ETIMEDOUT
				                                : FERRY_ECONNECT,
				    "server %s: %s", c->pl->servers[m],
				    nng_strerror(r));
				continue;
			}
			nng_msg *rep = nng_aio_get_msg(cn->aio);
			if (x->op != OP_PUSH && x->op != OP_INIT) {
				c->stats.bytes_pulled += nng_msg_len(rep);
			}
			r = psw_reply_open(rep, method, cn->rid, &f, &ph, &why);
			Pswire__Header *rh = (Pswire__Header *) ph;
			if (r == PS_EREMOTE &&
			    rh->status == PSWIRE__STATUS__UNAVAILABLE) {
				// Not started yet: ask again below.
			} else if (r == PS_EREMOTE) {
				rv = fail(c, FERRY_EREMOTE, "server %s: %s: %s",
				    c->pl->servers[m],
				    psw_status_name(rh->status), rh->error);
				cn->pending = 0;
				left--;
			} else if (r != PS_OK) {
				rv = fail(c, FERRY_EPROTO, "server %s: %s",
				    c->pl->servers[m], why);
				cn->pending = 0;
				left--;
			} else {
				int t = take_reply(c, m, x, rh, &f);
				if (t != FERRY_OK) {
					rv = t;
				}
				cn->pending = 0;
				left--;
			}
			if (rh != NULL) {
				pswire__header__free_unpacked(rh, NULL);
			}
			nng_msg_free(rep);
		}
		if (left > 0 && rv == FERRY_OK) {
			nap_ms(20);
		}
	}
	return rv;
}

static int
check_ready(ferry_client *c, const void *bufs)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return fail(c, FERRY_ESTATE, "declare the tensors first");
	}
	if (bufs == NULL) {
		return fail(c, FERRY_EINVAL, "tensor buffer array is NULL");
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_init_weights(ferry_client *c, const float *const *w)
{
	struct xfer x = { .op = OP_INIT, .g = w };
	int         rv;
	if ((rv = check_ready(c, w)) != FERRY_OK) {
		return rv;
	}
	return exchange(c, &x);
}

static int
finish_pull(ferry_client *c, struct xfer *x)
{
	if (x->have_version) {
		c->version = x->got_version;
	}
	c->want              = c->opts.mode == FERRY_MODE_SYNC ? c->version : 0;
	c->stats.version     = c->version;
	return FERRY_OK;
}

FERRY_API int
ferry_client_pull(ferry_client *c, float *const *w)
{
	struct xfer x = { .op = OP_PULL, .w = w };
	int         rv;
	if ((rv = check_ready(c, w)) != FERRY_OK) {
		return rv;
	}
	if ((rv = exchange(c, &x)) != FERRY_OK) {
		return rv;
	}
	return finish_pull(c, &x);
}

FERRY_API int
ferry_client_push(ferry_client *c, const float *const *g, uint32_t n_samples)
{
	struct xfer x = { .op = OP_PUSH, .g = g, .n_samples = n_samples };
	int         rv;
	if ((rv = check_ready(c, g)) != FERRY_OK) {
		return rv;
	}
	if (n_samples == 0) {
		return fail(c, FERRY_EINVAL, "n_samples must be > 0");
	}
	if ((rv = exchange(c, &x)) != FERRY_OK) {
		return rv;
	}
	if (c->opts.mode == FERRY_MODE_SYNC) {
		c->want = c->version + 1;
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_push_pull(ferry_client *c, const float *const *g,
    uint32_t n_samples, float *const *w)
{
	struct xfer x = { .op = OP_PUSH_PULL, .g = g, .w = w,
		.n_samples = n_samples };
	int rv;
	if ((rv = check_ready(c, g)) != FERRY_OK) {
		return rv;
	}
	if (w == NULL) {
		return fail(c, FERRY_EINVAL, "weight buffer array is NULL");
	}
	if (n_samples == 0) {
		return fail(c, FERRY_EINVAL, "n_samples must be > 0");
	}
	if ((rv = exchange(c, &x)) != FERRY_OK) {
		return rv;
	}
	return finish_pull(c, &x);
}

FERRY_API void
ferry_client_stats(const ferry_client *c, struct ferry_stats *st)
{
	if (c != NULL && st != NULL) {
		*st = c->stats;
	}
}

FERRY_API const char *
ferry_client_last_error(const ferry_client *c)
{
	return c != NULL ? c->err : "";
}

FERRY_API int
ferry_client_trainers(const ferry_client *c)
{
	return c != NULL && c->pl != NULL ? (int) c->pl->trainers : 0;
}
