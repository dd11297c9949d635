// rpc.c — REP contexts with aio state machines (see rpc.h DESIGN).
#include <stdarg.h>
#include <stdio.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "fb/fb.h"
#include "refusals.h"
#include "rpc.h"
#include "rpclimits.h"

enum { ST_INIT, ST_RECV, ST_WAIT, ST_SEND };

// The methods and statuses the metrics name: index 0 of each stands for
// any number the wire enum does not know.
static const int methods[] = { 0, PSWIRE__METHOD__REGISTER,
	PSWIRE__METHOD__HEARTBEAT, PSWIRE__METHOD__GET_PLACEMENT,
	PSWIRE__METHOD__REPORT_LINKS, PSWIRE__METHOD__LEAVE,
	PSWIRE__METHOD__PULL, PSWIRE__METHOD__PUSH, PSWIRE__METHOD__PUSH_PULL,
	PSWIRE__METHOD__SNAPSHOT, PSWIRE__METHOD__STATS, PSWIRE__METHOD__PROBE,
	PSWIRE__METHOD__TRANSFER, PSWIRE__METHOD__LEASE,
	PSWIRE__METHOD__REPLICATE, PSWIRE__METHOD__ROWS, PSWIRE__METHOD__AUDIT,
	PSWIRE__METHOD__VERIFIED };
#define N_METHODS (sizeof(methods) / sizeof(methods[0]))
#define N_STATUSES 18 // 0..16, then STALE_EPOCH (100)

static size_t
status_ix(int status)
{
	if (status >= 0 && status <= 16) {
		return (size_t) status;
	}
	return N_STATUSES - 1; // STALE_EPOCH, or a number we never send
}

static int
method_ix(int method)
{
	for (size_t i = 1; i < N_METHODS; i++) {
		if (methods[i] == method) {
			return (int) i;
		}
	}
	return 0;
}

struct rpc_metrics {
	struct obs_metric  *requests[N_METHODS];
	struct obs_metric  *errors[N_METHODS][N_STATUSES];
	struct obs_metric  *seconds[N_METHODS];
	struct obs_metric  *bytes_in, *bytes_out;
	struct obs_metric  *unauthenticated;
	struct obs_metric  *denied;
	struct ps_refusals *refusals; // per reason and peer; throttled log
};

// Calls live in chunks that never move: ps__rpc_grow adds contexts while
// the others serve. 65536 at most.
#define RPC_CHUNK 256
#define RPC_CHUNKS 256

struct ps_rpc {
	nng_socket         sock;
	nng_listener       listener;
	_Atomic int        n; // contexts started (grow-only)
	struct ps_call    *chunk[RPC_CHUNKS];
	ps_rpc_handler     handler;
	void              *arg;
	struct psw_auth   *auth; // borrowed; NULL: requests are not signed
	// borrowed; NULL: plain tcp. With auth too, a request's signed
	// identity must be its connection's certificate's; without, the
	// certificate is its identity (identity.c).
	struct psw_tls    *tls;
	char               url[256];
	struct rpc_metrics m;
	// Connection-closed hooks, both called from one nng callback
	// (on_pipe_rem: nng keeps one per event): the role's LIMITS hook
	// (set once just after open, while contexts may already be serving,
	// hence atomic) and the liveness watcher (ps__rpc_on_pipe_closed).
	_Atomic size_t     conn_bytes, total_bytes;
	void (*_Atomic pipe_gone)(void *arg, uint32_t pipe);
	void (*_Atomic pipe_watch)(void *arg, uint32_t pipe);
	void          *pipe_watch_arg;
	atomic_int     in_gone; // hook calls running (on_pipe_rem)
	struct ps_lim *lim;     // LIMITS counts (rpclimits.c)
};

static void call_cb(void *arg);

// call_at returns call i (< r->n) of r.
static inline struct ps_call *
call_at(const struct ps_rpc *r, int i)
{
	return &r->chunk[i / RPC_CHUNK][i % RPC_CHUNK];
}

// call_unhold ends c's LIMITS accounting.
static void
call_unhold(struct ps_call *c)
{
	ps__lim_release(c->rpc->lim, c);
}

// member_key names the member whose certificate is on pipe: role and
// index folded into 64 bits (never 0), or 0 without TLS, with a
// certificate that names no member or one several share ("ferry-server").
static uint64_t
member_key(const struct ps_rpc *r, nng_pipe pipe, char *name, size_t n)
{
	struct psw_ident who;
	char             cn[PSW_TLS_NAME_MAX];

	if (r->tls == NULL ||
	    psw_tls_peer(pipe, &who, cn, sizeof(cn)) != FB_OK ||
	    (who.role == PSW_ROLE_SERVER && who.id == PSW_ID_UNASSIGNED)) {
		return 0;
	}
	if (name != NULL) {
		psw_ident_format(who, name, n);
	}
	return 1ull << 63 | (uint64_t) (uint32_t) who.role << 32 | who.id;
}

size_t
ps__rpc_pipe_held(const struct ps_call *c)
{
	uint32_t pipe = atomic_load_explicit(&c->pipe, memory_order_relaxed);
	size_t   mine = atomic_load_explicit(&c->held, memory_order_relaxed);
	size_t   all  = ps__lim_conn_bytes(c->rpc->lim, pipe);
	return pipe != 0 && all >= mine ? all - mine : 0;
}

static void
call_release(struct ps_call *c)
{
	if (c->hdr != NULL) {
		pswire__header__free_unpacked(c->hdr, NULL);
		c->hdr = NULL;
	}
	if (c->req != NULL) {
		nng_msg_free(c->req);
		c->req = NULL;
	}
}

int
ps__role_of(int wire_role)
{
	switch (wire_role) {
	case PSWIRE__ROLE__ROLE_SERVER:
		return PSW_ROLE_SERVER;
	case PSWIRE__ROLE__ROLE_TRAINER:
		return PSW_ROLE_TRAINER;
	default:
		return PSW_ROLE_NONE;
	}
}

int
ps__call_acts_as(struct ps_call *c, int role, uint32_t id, int operator_ok)
{
	char             who[48], as[48];
	struct psw_ident want = { role, id };

	// Without a secret the identity, if any, is the certificate's
	// (identity.c): "ferry-server" names a server but no slot.
	int cert_only = c->rpc->auth == NULL;
	// A trainer without a rank (an any_rank Register's signer) acts for
	// no rank: only ps__call_may_join admits it.
	int rankless = role == PSW_ROLE_TRAINER && id == PSW_ID_UNASSIGNED;
	if ((cert_only && c->peer.role == PSW_ROLE_NONE) ||
	    (c->peer.role == role && !rankless &&
	        (c->peer.id == id ||
	            (cert_only && role == PSW_ROLE_SERVER &&
	                c->peer.id == PSW_ID_UNASSIGNED))) ||
	    (operator_ok && c->peer.role == PSW_ROLE_OPERATOR)) {
		return 1;
	}
	ps__call_reply_err(c, PSWIRE__STATUS__PERMISSION_DENIED,
	    "%s may not %s for %s",
	    psw_ident_format(c->peer, who, sizeof(who)),
	    psw_method_name(c->frame.method),
	    psw_ident_format(want, as, sizeof(as)));
	return 0;
}

int
ps__call_may_join(struct ps_call *c, uint32_t *rank)
{
	char who[48];

	*rank = PSW_ID_UNASSIGNED;
	if (c->rpc->auth == NULL && c->peer.role == PSW_ROLE_NONE) {
		return 1; // no identity: authentication off, or a shared cert
	}
	if (c->peer.role == PSW_ROLE_TRAINER) {
		// Signed as trainer-r, or over trainer-r's certificate: r.
		*rank = c->peer.id != PSW_ID_UNASSIGNED
		    ? c->peer.id
		    : ps__call_cert_rank(c);
		return 1;
	}
	ps__call_reply_err(c, PSWIRE__STATUS__PERMISSION_DENIED,
	    "%s may not register as a trainer (any_rank)",
	    psw_ident_format(c->peer, who, sizeof(who)));
	return 0;
}

uint32_t
ps__call_pipe(const struct ps_call *c)
{
	if (c->req == NULL) {
		return 0;
	}
	int id = nng_pipe_id(nng_msg_get_pipe(c->req));
	return id > 0 ? (uint32_t) id : 0;
}

static void on_pipe_rem(nng_pipe p, nng_pipe_ev ev, void *arg);

void
ps__rpc_on_pipe_closed(struct ps_rpc *r,
    void (*gone)(void *arg, uint32_t pipe_id), void *arg)
{
	r->pipe_watch_arg = arg;
	atomic_store(&r->pipe_watch, gone);
	// nng runs NNG_PIPE_EV_REM_POST before it takes the pipe off the
	// socket; ps__rpc_close clears the hooks and waits for the calls in
	// flight, so none outlives close.
	nng_pipe_notify(r->sock, NNG_PIPE_EV_REM_POST, on_pipe_rem, r);
}

nng_msg *
ps__call_take_req(struct ps_call *c)
{
	nng_msg *m = c->req;
	c->req     = NULL;
	return m;
}

// count records the answer of c with status, m bytes long.
static void
count(struct ps_call *c, int status, const nng_msg *m)
{
	struct rpc_metrics *rm = &c->rpc->m;
	obs_counter_add(rm->requests[c->mix], 1);
	if (status != PSWIRE__STATUS__OK) {
		obs_counter_add(rm->errors[c->mix][status_ix(status)], 1);
	}
	if (status == PSWIRE__STATUS__PERMISSION_DENIED) {
		obs_counter_add(rm->denied, 1);
	}
	obs_counter_add(rm->bytes_out, nng_msg_len(m));
	obs_histogram_observe(rm->seconds[c->mix],
	    (double) (fb_clock_ns() - c->t0_ns) * 1e-9);
}

// send_reply sends m, the answer of c with status.
static void
send_reply(struct ps_call *c, nng_msg *m, int status)
{
	// The one place replies are signed. Out of memory leaves it
	// unsigned: the caller refuses it, as it would a lost reply.
	(void) psw_auth_sign(c->rpc->auth, m, c->chan, c->ctr, NULL);
	count(c, status, m);
	call_release(c);
	ps__lim_resize(c->rpc->lim, c, nng_msg_len(m));
	c->state = ST_SEND;
	nng_aio_set_msg(c->aio, m);
	nng_ctx_send(c->ctx, c->aio);
}

void
ps__call_reply_msg(struct ps_call *c, nng_msg *m)
{
	send_reply(c, m, PSWIRE__STATUS__OK);
}

static void
reply_status(struct ps_call *c, uint64_t req_id, int status, const char *err)
{
	Pswire__Header h = PSWIRE__HEADER__INIT;
	nng_msg       *m;
	uint8_t       *payload;
	size_t         hl;

	h.request_id = req_id;
	h.status     = status;
	h.error      = (char *) (err ? err : "");
	hl           = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&m, hl, 0, &payload) != 0) {
		// Out of memory: drop the request; the client's deadline
		// fires. Go back to receiving.
		call_release(c);
		call_unhold(c);
		c->state = ST_RECV;
		nng_ctx_recv(c->ctx, c->aio);
		return;
	}
	if (psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h.base, hl,
	        0) != FB_OK) {
		// Cannot happen (the text is at most 512 bytes, hl is exact),
		// but a frameless reply must never go out: drop it instead.
		nng_msg_free(m);
		call_release(c);
		call_unhold(c);
		c->state = ST_RECV;
		nng_ctx_recv(c->ctx, c->aio);
		return;
	}
	send_reply(c, m, status);
}

void
ps__call_reply_err(struct ps_call *c, int status, const char *fmt, ...)
{
	char    msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	FB_LOG(FB_LOG_INFO, "rpc", "%s -> %s: %s",
	    psw_method_name(c->frame.method), psw_status_name(status), msg);
	reply_status(c, c->hdr ? c->hdr->request_id : 0, status, msg);
}

void
ps__call_reply(struct ps_call *c, Pswire__Header *h)
{
	nng_msg *m;
	uint8_t *payload;
	size_t   hl;

	h->request_id = c->hdr->request_id;
	h->status     = PSWIRE__STATUS__OK;
	hl            = pswire__header__get_packed_size(h);
	if (psw_msg_begin(&m, hl, 0, &payload) != 0) {
		ps__call_reply_err(c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory building the reply");
		return;
	}
	if (psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h->base, hl,
	        0) != FB_OK) {
		// A header over the cap (a Placement of more than ~60k
		// shards) cannot be framed: say so rather than send bytes
		// the caller cannot parse.
		nng_msg_free(m);
		ps__call_reply_err(c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "%s reply header of %zu bytes exceeds the %u-byte cap",
		    psw_method_name(c->frame.method), hl, PSW_MAX_HEADER);
		return;
	}
	ps__call_reply_msg(c, m);
}

void
ps__call_reply_stats(struct ps_call *c, const char *text)
{
	Pswire__Header     h   = PSWIRE__HEADER__INIT;
	Pswire__StatsReply rep = PSWIRE__STATS_REPLY__INIT;
	rep.text               = (char *) text;
	h.body_case            = PSWIRE__HEADER__BODY_STATS_REP;
	h.stats_rep            = &rep;
	ps__call_reply(c, &h);
}

// over_limits starts c's LIMITS accounting and answers it
// RESOURCE_EXHAUSTED (returning -1) when its connection, its member or
// host, or the whole rpc would hold more than the limits allow. A member
// its certificate names may park a quarter of the contexts over all its
// connections, wherever it is, and is then not held to its host's three
// quarters: one member cannot take what another on its host needs. A
// peer with no such certificate is held to its host's.
static int
over_limits(struct ps_call *c)
{
	struct ps_rpc     *r    = c->rpc;
	nng_pipe           np   = nng_msg_get_pipe(c->req);
	int                id   = nng_pipe_id(np);
	uint32_t           pipe = id > 0 ? (uint32_t) id : 0;
	size_t             mine = nng_msg_len(c->req);
	int                n    = atomic_load(&r->n);
	struct ps_lim_seen s;
	struct ps_lim_caps caps = {
		.conn_calls = n / 4 > 2 ? n / 4 : 2,
		.host_calls = n - n / 4 > 2 ? n - n / 4 : 2,
		.conn_bytes = atomic_load(&r->conn_bytes),
		.all_bytes  = atomic_load(&r->total_bytes),
	};
	char why[200], addr[64], name[48];

	if (!ps__lim_peer(r->lim, pipe, &c->host_key, &c->member_key)) {
		c->host_key   = ps__host_key(np, NULL, 0);
		c->member_key = member_key(r, np, NULL, 0);
		if (pipe != 0) {
			ps__lim_peer_put(r->lim, pipe, c->host_key,
			    c->member_key);
		}
	}
	switch (ps__lim_take(r->lim, c, pipe, c->host_key, c->member_key, mine,
	    &caps, &s)) {
	case PS_LIM_OK:
		return 0;
	case PS_LIM_CONN_CALLS:
		snprintf(why, sizeof(why),
		    "this connection already has %d calls in progress (cap %d)",
		    s.calls, caps.conn_calls);
		break;
	case PS_LIM_MEMBER_CALLS:
		member_key(r, np, name, sizeof(name));
		snprintf(why, sizeof(why),
		    "member %s (its certificate) already has %d calls in "
		    "progress over its connections (cap %d)",
		    name, s.calls, caps.conn_calls);
		break;
	case PS_LIM_HOST_CALLS:
		ps__host_key(np, addr, sizeof(addr));
		snprintf(why, sizeof(why),
		    "this host (%s) already has %d calls in progress over its "
		    "connections (cap %d)",
		    addr, s.calls, caps.host_calls);
		break;
	case PS_LIM_CONN_BYTES:
		snprintf(why, sizeof(why),
		    "this connection holds %zu bytes in calls in progress; "
		    "%zu more exceed its %zu-byte cap",
		    s.bytes, mine, caps.conn_bytes);
		break;
	default:
		snprintf(why, sizeof(why),
		    "calls in progress hold %zu bytes; %zu more exceed the "
		    "%zu-byte cap",
		    s.total, mine, caps.all_bytes);
		break;
	}
	reply_status(c, c->hdr->request_id, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
	    why);
	return -1;
}

static void
handle(struct ps_call *c)
{
	const char *why = NULL;

	c->t0_ns = fb_clock_ns();
	c->mix   = 0;
	c->chan = c->ctr = 0;
	c->peer.role     = PSW_ROLE_NONE;
	obs_counter_add(c->rpc->m.bytes_in, nng_msg_len(c->req));
	if (psw_msg_parse(c->req, &c->frame, &why) != FB_OK) {
		c->frame.method = 0;
		reply_status(c, 0, PSWIRE__STATUS__INVALID_ARGUMENT, why);
		return;
	}
	if (c->frame.flags & PSW_FLAG_REPLY) {
		reply_status(c, 0, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "a reply frame was sent as a request");
		return;
	}
	c->mix = method_ix(c->frame.method);
	if (psw_auth_check_request(c->rpc->auth, &c->frame, &c->peer, &c->chan,
	        &c->ctr, &why) != FB_OK ||
	    (c->rpc->tls != NULL && c->rpc->auth != NULL &&
	        ps__call_cert_check(c, &why) != FB_OK)) {
		// A server still registering has no slot to check the
		// receiver against: the sender retries (UNAVAILABLE).
		int not_yet = strcmp(psw_auth_reason(why), "no_slot_yet") == 0;
		obs_counter_add(c->rpc->m.unauthenticated, 1);
		ps__refusals_note(c->rpc->m.refusals, nng_msg_get_pipe(c->req),
		    c->frame.method, c->peer, why);
		reply_status(c, 0,
		    not_yet ? PSWIRE__STATUS__UNAVAILABLE
		            : PSWIRE__STATUS__UNAUTHENTICATED,
		    why);
		return;
	}
	if (c->rpc->tls != NULL && c->rpc->auth == NULL) {
		ps__call_cert_ident(c); // TLS alone: who the certificate names
	}
	c->hdr = pswire__header__unpack(NULL, c->frame.hdr_len, c->frame.hdr);
	if (c->hdr == NULL) {
		reply_status(c, 0, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "header is not a valid protobuf Header");
		return;
	}
	c->deadline = c->hdr->deadline_ms ? fb_clock_ms() + c->hdr->deadline_ms
	                                  : 0;
	char qwhy[200]; // a quarantined trainer: refused whatever it asks
	if (ps__refusals_quarantined(c->rpc->m.refusals, c, qwhy,
	        sizeof(qwhy))) {
		reply_status(c, c->hdr->request_id,
		    PSWIRE__STATUS__PERMISSION_DENIED, qwhy);
		return;
	}
	if (over_limits(c) != 0) {
		return;
	}
	c->rpc->handler(c->rpc->arg, c);
}

static void call_step(struct ps_call *c);

// call_cb runs one step of c's state machine, then counts the step done:
// that atomic store is what ps__rpc_close's load after nng_aio_stop pairs
// with, the edge ThreadSanitizer can see (nng's own is uninstrumented).
static void
call_cb(void *arg)
{
	struct ps_call *c = arg;
	call_step(c);
	atomic_fetch_add(&c->steps, 1);
}

static void
call_step(struct ps_call *c)
{
	int rv;

	switch (atomic_load(&c->state)) {
	case ST_INIT:
		c->state = ST_RECV;
		nng_ctx_recv(c->ctx, c->aio);
		break;
	case ST_RECV:
		if ((rv = nng_aio_result(c->aio)) != 0) {
			if (rv == NNG_ECLOSED) {
				return;
			}
			nng_ctx_recv(c->ctx, c->aio);
			break;
		}
		c->req   = nng_aio_get_msg(c->aio);
		c->state = ST_WAIT;
		handle(c);
		break;
	case ST_SEND:
		call_unhold(c);
		if (nng_aio_result(c->aio) != 0) {
			nng_msg_free(nng_aio_get_msg(c->aio));
			if (nng_aio_result(c->aio) == NNG_ECLOSED) {
				return;
			}
		}
		c->state = ST_RECV;
		nng_ctx_recv(c->ctx, c->aio);
		break;
	default:
		break;
	}
}

// add registers one series of the request metrics; FB_ENOMEM or FB_OK.
static int
add(struct obs_registry *reg, enum obs_type type, const char *name,
    const char *help, const char *labels, unsigned flags,
    struct obs_metric **out)
{
	int hist = type == OBS_HISTOGRAM;
	return obs_metric_add(reg, type, name, help, labels,
	    hist ? obs_latency_buckets : NULL, hist ? obs_latency_nbuckets : 0,
	    flags, out);
}

// metrics_register registers every request series in reg. Methods and
// statuses nobody uses stay out of a scrape (OBS_HIDE_ZERO).
static int
metrics_register(struct rpc_metrics *m, struct obs_registry *reg)
{
	char lab[128];
	int  rv = FB_OK;
	for (size_t i = 0; i < N_METHODS && rv == FB_OK; i++) {
		const char *mn = i == 0 ? "unknown"
		                        : psw_method_name(methods[i]);
		snprintf(lab, sizeof(lab), "method=\"%s\"", mn);
		rv = add(reg, OBS_COUNTER, "ferry_rpc_requests_total",
		    "Requests answered, by method.", lab, OBS_HIDE_ZERO,
		    &m->requests[i]);
	}
	for (size_t i = 0; i < N_METHODS && rv == FB_OK; i++) {
		const char *mn = i == 0 ? "unknown"
		                        : psw_method_name(methods[i]);
		for (size_t k = 1; k < N_STATUSES && rv == FB_OK; k++) {
			int st = k < 17 ? (int) k
			                : PSWIRE__STATUS__STALE_EPOCH;
			snprintf(lab, sizeof(lab),
			    "method=\"%s\",status=\"%s\"", mn,
			    psw_status_name(st));
			rv = add(reg, OBS_COUNTER, "ferry_rpc_errors_total",
			    "Requests answered with a status other than OK, "
			    "by method and status.",
			    lab, OBS_HIDE_ZERO, &m->errors[i][k]);
		}
	}
	for (size_t i = 0; i < N_METHODS && rv == FB_OK; i++) {
		const char *mn = i == 0 ? "unknown"
		                        : psw_method_name(methods[i]);
		snprintf(lab, sizeof(lab), "method=\"%s\"", mn);
		rv = add(reg, OBS_HISTOGRAM,
		    "ferry_rpc_request_duration_seconds",
		    "Time from receiving a request to sending its answer, "
		    "parked time included, by method.",
		    lab, OBS_HIDE_ZERO, &m->seconds[i]);
	}
	if (rv == FB_OK) {
		rv = add(reg, OBS_COUNTER, "ferry_rpc_received_bytes_total",
		    "Bytes of requests received (frames included).", NULL, 0,
		    &m->bytes_in);
	}
	if (rv == FB_OK) {
		rv = add(reg, OBS_COUNTER, "ferry_rpc_sent_bytes_total",
		    "Bytes of answers sent (frames included).", NULL, 0,
		    &m->bytes_out);
	}
	if (rv == FB_OK) {
		rv = add(reg, OBS_COUNTER, "ferry_rpc_unauthenticated_total",
		    "Requests refused before any handler: not signed, a "
		    "bad signature, or a replayed or reordered counter.",
		    NULL, 0, &m->unauthenticated);
	}
	if (rv == FB_OK) {
		rv = add(reg, OBS_COUNTER, "ferry_rpc_denied_total",
		    "Authenticated requests refused because the sender may "
		    "not act for the member they name (PERMISSION_DENIED).",
		    NULL, 0, &m->denied);
	}
	if (rv == FB_OK) {
		rv = ps__refusals_open(reg, &m->refusals);
	}
	return rv;
}

// rpc_add opens contexts r->n .. n-1, then starts them; FB_ENOMEM stops
// at the first that cannot be opened (r->n counts those started).
static int
rpc_add(struct ps_rpc *r, int n)
{
	int old = atomic_load(&r->n), i, rv = FB_OK;
	for (i = old; i < n; i++) {
		struct ps_call **ch = &r->chunk[i / RPC_CHUNK];
		if (*ch == NULL &&
		    (*ch = fb_zalloc(sizeof(**ch) * RPC_CHUNK)) == NULL) {
			rv = FB_ENOMEM;
			break;
		}
		struct ps_call *c = call_at(r, i);
		c->rpc            = r;
		if (nng_aio_alloc(&c->aio, call_cb, c) != 0) {
			rv = FB_ENOMEM;
			break;
		}
		if (nng_ctx_open(&c->ctx, r->sock) != 0) {
			nng_aio_free(c->aio);
			c->aio = NULL;
			rv     = FB_ENOMEM;
			break;
		}
	}
	atomic_store(&r->n, i); // (they hold nothing until they receive)
	for (int k = old; k < i; k++) {
		call_cb(call_at(r, k));
	}
	return rv;
}

int
ps__rpc_open(struct psw_tls *tls, const char *url, int ncontexts,
    size_t max_msg, struct psw_auth *auth, ps_rpc_handler handler, void *arg,
    struct obs_registry *reg, struct ps_rpc **out)
{
	struct ps_rpc *r;
	int            rv;

	if (ncontexts < 1 || ncontexts > RPC_CHUNK * RPC_CHUNKS) {
		return FB_EINVAL;
	}
	if ((r = fb_zalloc(sizeof(*r))) == NULL) {
		return FB_ENOMEM;
	}
	if ((rv = metrics_register(&r->m, reg)) != FB_OK) {
		fb_free(r);
		return rv;
	}
	r->handler    = handler;
	r->arg        = arg;
	r->auth       = auth;
	r->tls        = tls;
	r->conn_bytes = 2 * max_msg + (1u << 20);
	if ((rv = ps__lim_open(ncontexts, &r->lim)) != FB_OK) {
		ps__refusals_close(r->m.refusals);
		fb_free(r);
		return rv;
	}
	if ((rv = nng_rep0_open(&r->sock)) != 0) {
		ps__lim_close(r->lim);
		ps__refusals_close(r->m.refusals);
		fb_free(r);
		return FB_ETRANSPORT;
	}
	nng_socket_set_size(r->sock, NNG_OPT_RECVMAXSZ, max_msg);
	if ((rv = psw_tls_listen(tls, r->sock, url, max_msg, &r->listener,
	         r->url, sizeof(r->url))) != FB_OK) {
		ps__rpc_close(r);
		return rv;
	}
	if ((rv = rpc_add(r, ncontexts)) != FB_OK) {
		ps__rpc_close(r);
		return rv;
	}
	*out = r;
	return FB_OK;
}

int
ps__rpc_grow(struct ps_rpc *r, int want)
{
	int n = want < RPC_CHUNK * RPC_CHUNKS ? want : RPC_CHUNK * RPC_CHUNKS;
	if (n <= atomic_load(&r->n)) {
		return FB_OK;
	}
	// The counts make room before the new contexts can take calls.
	int rv = ps__lim_grow(r->lim, n);
	return rv == FB_OK ? rpc_add(r, n) : rv;
}

int
ps__rpc_contexts(const struct ps_rpc *r)
{
	return atomic_load(&r->n);
}

int
ps__open_auth(const char *secret_file, int role, uint32_t id,
    uint32_t window_ms, struct psw_auth **out)
{
	char why[256];
	int  rv;

	*out = NULL;
	if (secret_file == NULL || secret_file[0] == '\0') {
		return FB_OK;
	}
	if ((rv = psw_auth_open(secret_file, role, id, out, why,
	         sizeof(why))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "rpc", "%s", why);
	} else {
		psw_auth_set_window(*out, window_ms);
	}
	return rv;
}

int
ps__open_tls(const char *cert, const char *key, const char *ca,
    struct psw_tls **out)
{
	char why[600];
	int  rv;

	if ((rv = psw_tls_open(cert, key, ca, out, why, sizeof(why))) !=
	    FB_OK) {
		FB_LOG(FB_LOG_ERR, "tls", "%s", why);
	}
	return rv;
}

void
ps__rpc_quarantine(struct ps_rpc *r, const uint32_t *ranks, size_t n)
{
	ps__refusals_quarantine(r->m.refusals, ranks, n);
}

int
ps__rpc_auth_on(const struct ps_rpc *r)
{
	return r->auth != NULL || r->tls != NULL;
}

// on_pipe_rem tells the role that connection p closed (LIMITS).
static void
on_pipe_rem(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct ps_rpc *r = arg;
	(void) ev;
	// nng may run this while the socket closes: ps__rpc_close clears
	// pipe_gone, then waits for the calls already in here (in_gone)
	// before the role frees what they use.
	if (atomic_load(&r->pipe_gone) == NULL &&
	    atomic_load(&r->pipe_watch) == NULL) {
		return; // (also the edge from ps__rpc_set_limits for TSan)
	}
	atomic_fetch_add(&r->in_gone, 1);
	int id                          = nng_pipe_id(p);
	void (*gone)(void *, uint32_t)  = atomic_load(&r->pipe_gone);
	void (*watch)(void *, uint32_t) = atomic_load(&r->pipe_watch);
	if (gone != NULL && id > 0) {
		gone(r->arg, (uint32_t) id);
	}
	if (watch != NULL && id > 0) {
		watch(r->pipe_watch_arg, (uint32_t) id);
	}
	atomic_fetch_sub(&r->in_gone, 1);
}

int
ps__call_list_drop_pipe(struct ps_call **pp, uint32_t pipe)
{
	int n = 0;
	while (*pp != NULL) {
		struct ps_call *c = *pp;
		if (atomic_load_explicit(&c->pipe, memory_order_relaxed) ==
		    pipe) {
			*pp = c->next;
			ps__call_reply_err(c, PSWIRE__STATUS__CANCELLED,
			    "connection closed");
			n++;
		} else {
			pp = &c->next;
		}
	}
	return n;
}

void
ps__rpc_set_limits(struct ps_rpc *r, size_t conn_bytes, size_t total_bytes,
    void (*pipe_gone)(void *arg, uint32_t pipe))
{
	atomic_store(&r->conn_bytes, conn_bytes);
	atomic_store(&r->total_bytes, total_bytes);
	atomic_store(&r->pipe_gone, pipe_gone);
	if (pipe_gone != NULL) {
		nng_pipe_notify(r->sock, NNG_PIPE_EV_REM_POST, on_pipe_rem, r);
	}
}

const char *
ps__rpc_url(const struct ps_rpc *r)
{
	return r->url;
}

void
ps__rpc_close(struct ps_rpc *r)
{
	if (r == NULL) {
		return;
	}
	atomic_store(&r->pipe_gone, NULL);
	atomic_store(&r->pipe_watch, NULL);
	while (atomic_load(&r->in_gone) > 0) {
		fb_sleep_us(1000);
	}
	// The socket closes first, then the calls stop: the order every CI
	// run has used. (ferry_client_close stops its slots first; trying
	// that here coincided with a CI hang later traced to the boot
	// socket, boot.c's DESIGN, so neither order is known to hang.)
	nng_close(r->sock);
	while (atomic_load(&r->in_gone) > 0) { // those the close ran
		fb_sleep_us(1000);
	}
	int n = atomic_load(&r->n);
	for (int i = 0; i < n; i++) {
		if (call_at(r, i)->aio != NULL) {
			nng_aio_stop(call_at(r, i)->aio);
		}
	}
	for (int i = 0; i < n; i++) {
		struct ps_call *c = call_at(r, i);
		// nng_aio_stop waited for the last callback; this load is the
		// edge ThreadSanitizer can see (the `state` comment in rpc.h).
		(void) atomic_load(&c->steps);
		call_release(c);
		if (c->aio != NULL) {
			nng_aio_free(c->aio);
		}
	}
	for (int k = 0; k < RPC_CHUNKS; k++) {
		fb_free(r->chunk[k]);
	}
	ps__lim_close(r->lim);
	ps__refusals_close(r->m.refusals);
	fb_free(r);
}
