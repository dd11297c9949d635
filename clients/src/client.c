// client.c — libferry: a trainer's connection to a Ferry job.
//
// DESIGN. The client holds one REQ socket to the scheduler and one REQ
// socket (one context, one aio) per server. An operation (pull, push,
// push-pull, init) runs in rounds: each round sends one batched message to
// every server that holds a shard still pending, then waits for all the
// replies, so the servers work in parallel and a round costs the slowest
// server, not the sum. fp32 gradients go straight from the caller's tensor
// into the outgoing nng message, built in the last reply from that server
// when it is large enough (psw_msg_reuse; else psw_msg_begin), so a step
// allocates and zeroes no message of its own; with a push codec
// the codes are staged once per operation (stage_codes) so that a re-sent
// request carries the same codes and the error-feedback residual moves
// once. Pulled shards are copied from the reply into the caller's tensors
// (with a pull codec, the deltas are first applied to the client's copy of
// the shared reference, whose CRC is checked in the same pass as that
// copy: fb_crc32_copy), or, with a pull sink set,
// handed to the sink, which then holds the reference (a GPU trainer
// decodes on the device); the versions, the chain checks and the full
// resyncs stay here either way, and a shard whose reference lives on the
// other side of that switch is resynced rather than patched. Replies that say
// UNAVAILABLE (not started, shard arriving) are retried; STALE_EPOCH (shard
// moved) re-fetches the map and re-batches; ABORTED (push applied, shard
// moved) turns into a pull. The client also measures its links to the
// servers when the scheduler asks (probe_links).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "comp/comp.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "fb/fb.h"
#include "psw/psw.h"

struct conn {
	nng_socket sock;
	nng_ctx    ctx;
	nng_aio   *aio;
	uint32_t  *shards;  // global shard ids held by this server
	size_t     n;
	uint64_t   bytes;   // fp32 bytes of its shards
	// per-round state
	uint32_t  *req;     // shards in this round's request
	size_t     req_n;
	uint8_t    method;
	int        pending;
	int        rv;
	uint64_t   rid;
	nng_msg   *rep;
	nng_msg   *spare;   // the last reply, reused for the next push body
};

// Where a shard's pull reference lives: nowhere yet (its first pull asks
// for FULL), in the client (c->ref, or the caller's buffers without a pull
// codec), or in the pull sink.
enum { REF_NONE = 0, REF_HOST, REF_SINK };

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
	uint64_t           version; // of the weights held (min over shards)
	uint64_t           want;    // version the next pull asks for
	uint64_t          *shard_ver; // per global shard: version held
	uint8_t           *need;      // per global shard: NEED_* this op
	uint8_t           *need_full; // per global shard: resync in full
	uint8_t           *codes;     // staged push codes (EF codecs)
	size_t            *code_off;  // per global shard: offset in codes
	struct ferry_shard *layout;   // per global shard, for the caller
	struct comp_codec  cpush, cpull, cnone;
	float            **resid;   // per tensor: push error feedback (or NULL)
	float            **ref;     // per tensor: pull reference (or NULL)
	struct ferry_pull_sink sink; // pulls go here when has_sink
	int                has_sink;
	uint8_t           *ref_at;   // per global shard: REF_* (who holds it)
	uint64_t           rng;     // stochastic rounding state
	uint32_t           probe_count, reprobe_s;
	uint64_t           probe_bytes, last_probe_ms;
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
	[FERRY_EBEHIND]   = "behind the job's version: pull and recompute",
	[FERRY_ESINK]     = "the pull sink failed",
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
	case FB_OK:
		return FERRY_OK;
	case FB_ETIMEDOUT:
		return FERRY_ETIMEDOUT;
	case FB_EREMOTE:
		return FERRY_EREMOTE;
	case FB_EPROTO:
		return FERRY_EPROTO;
	case FB_ENOMEM:
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

FERRY_API int
ferry_opts_check(const struct ferry_opts *o, char *why, size_t n)
{
	struct comp_codec cc;
	char              cwhy[128] = "";
	const char       *msg = NULL;
	char              buf[256];

	if (o == NULL) {
		msg = "opts is NULL";
	} else if (o->scheduler_url == NULL || *o->scheduler_url == '\0' ||
	    strlen(o->scheduler_url) >= 256) {
		msg = "scheduler_url must be a URL of 1..255 bytes";
	} else if (o->rank < 0) {
		msg = "rank must be >= 0";
	} else if (!(o->lr > 0 && o->lr < 1e6)) {
		msg = "lr must be in (0, 1e6)";
	} else if (o->mode != FERRY_MODE_SYNC && o->mode != FERRY_MODE_ASYNC) {
		msg = "mode must be FERRY_MODE_SYNC or FERRY_MODE_ASYNC";
	} else if (comp_codec_parse_msg(o->codec_push ? o->codec_push : "none",
	               o->bucket, &cc, cwhy, sizeof(cwhy)) != FB_OK) {
		snprintf(buf, sizeof(buf), "codec_push '%s': %s", o->codec_push,
		    cwhy);
		msg = buf;
	} else if (comp_codec_parse_msg(o->codec_pull ? o->codec_pull : "none",
	               o->bucket, &cc, cwhy, sizeof(cwhy)) != FB_OK) {
		snprintf(buf, sizeof(buf), "codec_pull '%s': %s", o->codec_pull,
		    cwhy);
		msg = buf;
	} else if (cc.stochastic) {
		msg = "codec_pull cannot use stochastic rounding (:sr): both "
		      "sides must round the same way";
	}
	if (msg != NULL && why != NULL && n > 0) {
		snprintf(why, n, "%s", msg);
	}
	return msg != NULL ? FERRY_EINVAL : FERRY_OK;
}

FERRY_API int
ferry_client_open(const struct ferry_opts *o, ferry_client **out)
{
	ferry_client *c;

	if (out == NULL || ferry_opts_check(o, NULL, 0) != FERRY_OK) {
		return FERRY_EINVAL;
	}
	if ((c = fb_zalloc(sizeof(*c))) == NULL) {
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
	c->rng = o->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t) (o->rank + 1));
	if (comp_codec_parse(c->codec_push, o->bucket, &c->cpush) != FB_OK ||
	    comp_codec_parse(c->codec_pull, o->bucket, &c->cpull) != FB_OK ||
	    c->cpull.stochastic ||
	    comp_codec_parse("none", 0, &c->cnone) != FB_OK) {
		fb_free(c);
		return FERRY_EINVAL;
	}
	if (psw_req_open(c->url, 1u << 30, 20, 500, &c->sched, &c->sched_ctx,
	        &c->sched_aio) != FB_OK) {
		fb_free(c);
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
		nng_msg_free(c->conns[i].spare);
		fb_free(c->conns[i].shards);
		fb_free(c->conns[i].req);
	}
	fb_free(c->conns);
	nng_close(c->sched);
	nng_aio_free(c->sched_aio);
	if (c->pl != NULL) {
		pswire__placement__free_unpacked(c->pl, NULL);
	}
	for (size_t t = 0; t < c->n_tensors; t++) {
		if (c->resid != NULL) {
			fb_free(c->resid[t]);
		}
		if (c->ref != NULL) {
			fb_free(c->ref[t]);
		}
	}
	fb_free(c->resid);
	fb_free(c->ref);
	fb_free(c->shard_ver);
	fb_free(c->need);
	fb_free(c->need_full);
	fb_free(c->ref_at);
	fb_free(c->codes);
	fb_free(c->code_off);
	fb_free(c->layout);
	fb_free(c->tensor_len);
	fb_free(c);
}

// sched_call sends h (no payload) to the scheduler and returns the reply
// header in *rh (free with pswire__header__free_unpacked).
static int
sched_call(ferry_client *c, Pswire__Header *h, uint8_t method,
    uint32_t tmo, Pswire__Header **rh)
{
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	int               rv;

	h->request_id  = c->next_rid++;
	h->deadline_ms = tmo;
	h->rank        = (uint32_t) c->opts.rank;
	c->stats.requests++;
	rv = psw_call_header(c->sched_ctx, c->sched_aio, &h->base, method,
	    h->request_id, (int) tmo, &ph, &why);
	if (rv == FB_EREMOTE) {
		Pswire__Header *r = (Pswire__Header *) ph;
		fail(c, FERRY_EREMOTE, "scheduler %s: %s: %s", c->url,
		    psw_status_name(r->status), r->error);
		int st = r->status;
		pswire__header__free_unpacked(r, NULL);
		return st == PSWIRE__STATUS__FAILED_PRECONDITION
		    ? FERRY_EMISMATCH
		    : FERRY_EREMOTE;
	}
	if (rv != FB_OK) {
		return fail(c, map_err(rv), "scheduler %s: %s", c->url,
		    why ? why : fb_strerror(rv));
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

// fetch_map asks the scheduler for the map of at least min_epoch (0: the
// membership map) and returns the reply header in *rh.
static int
fetch_map(ferry_client *c, uint64_t min_epoch, Pswire__Header **rh)
{
	Pswire__Header              g  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	int                         rv;
	gp.min_epoch    = min_epoch;
	g.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	g.placement_req = &gp;
	if ((rv = sched_call(c, &g, PSWIRE__METHOD__GET_PLACEMENT, timeout(c),
	         rh)) != FERRY_OK) {
		return rv;
	}
	if ((*rh)->body_case != PSWIRE__HEADER__BODY_PLACEMENT ||
	    (*rh)->placement->n_servers == 0 ||
	    (*rh)->placement->n_servers > 4096) {
		pswire__header__free_unpacked(*rh, NULL);
		*rh = NULL;
		return fail(c, FERRY_EPROTO, "GetPlacement reply has no map");
	}
	return FERRY_OK;
}

// open_conns dials every server of map p that is not dialed yet (a later
// map may list more servers: one joined the job).
static int
open_conns(ferry_client *c, const Pswire__Placement *p)
{
	size_t had = c->n_conns;
	if (p->n_servers < had) {
		return fail(c, FERRY_EPROTO, "map lists %zu servers, fewer than "
		    "the %zu known", p->n_servers, had);
	}
	if (p->n_servers > had) {
		struct conn *cs = fb_realloc(c->conns,
		    p->n_servers * sizeof(*c->conns));
		if (cs == NULL) {
			return fail(c, FERRY_ENOMEM, "out of memory");
		}
		memset(cs + had, 0, (p->n_servers - had) * sizeof(*cs));
		c->conns   = cs;
		c->n_conns = p->n_servers;
	}
	for (size_t m = had; m < c->n_conns; m++) {
		struct conn *cn = &c->conns[m];
		if (psw_req_open(p->servers[m], 1u << 30, 20, 500, &cn->sock,
		        &cn->ctx, &cn->aio) != FB_OK) {
			c->n_conns = m; // close only what was opened
			return fail(c, FERRY_ECONNECT, "cannot dial server %s",
			    p->servers[m]);
		}
	}
	return FERRY_OK;
}

// assign_conns lists, per server, the shards the current map gives it.
static int
assign_conns(ferry_client *c)
{
	for (size_t m = 0; m < c->n_conns; m++) {
		fb_free(c->conns[m].shards);
		c->conns[m].shards = NULL;
		c->conns[m].n      = 0;
		c->conns[m].bytes  = 0;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->conns[c->pl->shards[i]->server].n++;
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		struct conn *cn = &c->conns[m];
		cn->shards = fb_alloc((cn->n ? cn->n : 1) * sizeof(uint32_t));
		if (cn->req == NULL) {
			cn->req = fb_alloc(c->pl->n_shards * sizeof(uint32_t));
		}
		if (cn->shards == NULL || cn->req == NULL) {
			return fail(c, FERRY_ENOMEM, "out of memory");
		}
		cn->n = 0;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		struct conn *cn     = &c->conns[c->pl->shards[i]->server];
		cn->shards[cn->n++] = (uint32_t) i;
		cn->bytes += c->pl->shards[i]->len * 4;
	}
	return FERRY_OK;
}

// probe_call sends one Probe of `bytes` payload to server m and returns
// the round-trip time in seconds.
static int
probe_call(ferry_client *c, size_t m, uint64_t bytes, uint32_t tmo,
    double *secs)
{
	struct conn      *cn = &c->conns[m];
	Pswire__Header    h  = PSWIRE__HEADER__INIT;
	nng_msg          *req, *rep = NULL;
	uint8_t          *payload;
	struct psw_frame  f;
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	size_t            hl;
	int               rv;

	h.request_id  = c->next_rid++;
	h.deadline_ms = tmo;
	hl            = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&req, hl, bytes, &payload) != FB_OK) {
		return fail(c, FERRY_ENOMEM, "out of memory");
	}
	memset(payload, 0, bytes);
	psw_msg_finish(req, PSWIRE__METHOD__PROBE, 0, &h.base, hl, bytes);
	uint64_t t0 = fb_clock_ns();
	rv = psw_call(cn->ctx, cn->aio, req, PSWIRE__METHOD__PROBE,
	    h.request_id, (int) tmo, &rep, &f, &ph, &why);
	*secs = (double) (fb_clock_ns() - t0) * 1e-9;
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
	if (rep != NULL) {
		nng_msg_free(rep);
	}
	if (rv != FB_OK) {
		return fail(c, map_err(rv), "probe of server %zu: %s", m,
		    why ? why : fb_strerror(rv));
	}
	return FERRY_OK;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return x < y ? -1 : x > y;
}

// probe_links measures every server and reports to the scheduler. First
// the RTTs of all servers (median of cnt empty probes each), then the
// bandwidths (the best of two bulk probes of `bytes`, less one RTT): round
// trips never queue behind this trainer's own bulk transfers, and the best
// of two discounts a transfer that shared the link with another trainer's
// probe. A server that does not answer (it left) is reported as
// unusable (RTT 3600 s, 1 B/s) rather than failing the step.
static int
probe_links(ferry_client *c, uint32_t cnt, uint64_t bytes)
{
	double  *rtt = fb_zalloc(c->n_conns * sizeof(double));
	double  *bw  = fb_zalloc(c->n_conns * sizeof(double));
	uint8_t *bad = fb_zalloc(c->n_conns);
	double   samples[64];
	int      rv  = FERRY_OK;
	// The first probing also waits for connections; re-probes are quick
	// or the server is gone.
	uint32_t tmo = c->last_probe_ms == 0 ? timeout(c)
	    : (timeout(c) < 2000 ? timeout(c) : 2000);

	if (rtt == NULL || bw == NULL || bad == NULL) {
		rv = fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	cnt = cnt < 1 ? 1 : cnt > 64 ? 64 : cnt;
	for (size_t m = 0; m < c->n_conns; m++) {
		double t = 0;
		// The first call may wait for the connection: not timed.
		int ok = probe_call(c, m, 0, tmo, &t) == FERRY_OK;
		for (uint32_t i = 0; i < cnt && ok; i++) {
			ok = probe_call(c, m, 0, tmo, &samples[i]) == FERRY_OK;
		}
		if (!ok) {
			bad[m] = 1;
			continue;
		}
		qsort(samples, cnt, sizeof(double), cmp_double);
		rtt[m] = samples[cnt / 2];
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		for (int k = 0; k < 2 && !bad[m]; k++) {
			double t  = 0;
			if (probe_call(c, m, bytes, timeout(c), &t) != FERRY_OK) {
				bad[m] = 1;
				break;
			}
			double tx = t - rtt[m];
			double b  = (double) bytes / (tx > 1e-7 ? tx : t);
			bw[m]     = b > bw[m] ? b : bw[m];
		}
		if (bad[m]) {
			rtt[m] = 3600.0;
			bw[m]  = 1.0;
		}
	}
	{
		Pswire__Header             h = PSWIRE__HEADER__INIT;
		Pswire__ReportLinksRequest r = PSWIRE__REPORT_LINKS_REQUEST__INIT;
		Pswire__Header            *rh = NULL;
		r.rank      = (uint32_t) c->opts.rank;
		r.n_rtt_s   = c->n_conns;
		r.rtt_s     = rtt;
		r.n_bw_bps  = c->n_conns;
		r.bw_bps    = bw;
		h.body_case = PSWIRE__HEADER__BODY_LINKS_REQ;
		h.links_req = &r;
		rv = sched_call(c, &h, PSWIRE__METHOD__REPORT_LINKS, timeout(c),
		    &rh);
		if (rh != NULL) {
			pswire__header__free_unpacked(rh, NULL);
		}
	}
done:
	fb_free(rtt);
	fb_free(bw);
	fb_free(bad);
	return rv;
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
	c->tensor_len = fb_alloc(n * sizeof(*c->tensor_len));
	tds           = fb_alloc(n * sizeof(*tds));
	tdp           = fb_alloc(n * sizeof(*tdp));
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

	if (rh->body_case == PSWIRE__HEADER__BODY_REGISTER_REP &&
	    rh->register_rep->probe) {
		c->probe_count = rh->register_rep->probe_count;
		c->probe_bytes = rh->register_rep->probe_bytes;
		c->reprobe_s   = rh->register_rep->reprobe_s;
		pswire__header__free_unpacked(rh, NULL);
		rh = NULL;
		if ((rv = fetch_map(c, 0, &rh)) != FERRY_OK ||
		    (rv = open_conns(c, rh->placement)) != FERRY_OK ||
		    (rv = probe_links(c, c->probe_count, c->probe_bytes)) !=
		        FERRY_OK) {
			goto done;
		}
		c->last_probe_ms = fb_clock_ms();
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
		rh = NULL;
	}

	// Wait (server-side, parked) for every member, then fetch the map.
	if ((rv = fetch_map(c, 1, &rh)) != FERRY_OK) {
		goto done;
	}
	c->pl         = rh->placement;
	rh->placement = NULL;
	rh->body_case = PSWIRE__HEADER__BODY__NOT_SET;
	if ((rv = check_placement(c, c->pl)) != FERRY_OK ||
	    (rv = open_conns(c, c->pl)) != FERRY_OK ||
	    (rv = assign_conns(c)) != FERRY_OK) {
		goto done;
	}
	c->shard_ver = fb_zalloc(c->pl->n_shards * sizeof(uint64_t));
	c->need      = fb_zalloc(c->pl->n_shards);
	c->need_full = fb_zalloc(c->pl->n_shards);
	c->ref_at    = fb_zalloc(c->pl->n_shards);
	c->code_off  = fb_zalloc(c->pl->n_shards * sizeof(size_t));
	c->layout    = fb_zalloc(c->pl->n_shards * sizeof(*c->layout));
	if (c->need == NULL || c->need_full == NULL || c->code_off == NULL ||
	    c->layout == NULL || c->ref_at == NULL) {
		rv = fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->layout[i].tensor     = c->pl->shards[i]->tensor;
		c->layout[i].offset     = c->pl->shards[i]->offset;
		c->layout[i].len        = c->pl->shards[i]->len;
		c->layout[i].code_bytes = comp_bound(&c->cpush,
		    c->pl->shards[i]->len);
	}
	if (c->cpush.id != COMP_NONE) {
		size_t total = 0;
		for (size_t i = 0; i < c->pl->n_shards; i++) {
			c->code_off[i] = total;
			total += comp_bound(&c->cpush, c->pl->shards[i]->len);
		}
		if ((c->codes = fb_alloc(total ? total : 1)) == NULL) {
			rv = fail(c, FERRY_ENOMEM, "out of memory");
			goto done;
		}
	}
	c->resid     = fb_zalloc(n * sizeof(float *));
	c->ref       = fb_zalloc(n * sizeof(float *));
	if (c->shard_ver == NULL || c->resid == NULL || c->ref == NULL) {
		rv = fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t t = 0; t < n; t++) {
		if (c->cpush.id != COMP_NONE &&
		    (c->resid[t] = fb_zalloc(d[t].len * sizeof(float))) == NULL) {
			rv = fail(c, FERRY_ENOMEM, "out of memory");
			goto done;
		}
		if (c->cpull.id != COMP_NONE &&
		    (c->ref[t] = fb_zalloc(d[t].len * sizeof(float))) == NULL) {
			rv = fail(c, FERRY_ENOMEM, "out of memory");
			goto done;
		}
	}
	c->declared = 1;
	rv          = FERRY_OK;
done:
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	fb_free(tds);
	fb_free(tdp);
	return rv;
}

// ---- batched exchanges with every server ----------------------------------

enum op { OP_INIT, OP_PULL, OP_PULL_FULL, OP_PUSH, OP_PUSH_PULL };

// What a shard still needs within one operation.
enum { NEED_NONE = 0, NEED_MAIN, NEED_PULL };

struct xfer {
	enum op                  op;
	const float *const      *g;
	float *const            *w;
	uint32_t                 n_samples;
	uint64_t                 pull_want; // version a (re-)pull waits for
	const struct comp_codec *codec;     // push codec of this operation
	int                      staged;    // codes are in c->codes
	const uint8_t *const    *codes;     // caller's codes per shard, or NULL
};

// stage_codes encodes every shard's gradient once per operation, with
// error feedback, into c->codes: a request that must be re-sent (the
// server was not ready, or the shard moved) sends the same codes again,
// so the residual is updated exactly once.
static int
stage_codes(ferry_client *c, struct xfer *x)
{
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[i];
		size_t                   out;
		int rv = comp_ef_encode(x->codec, x->g[si->tensor] + si->offset,
		    c->resid[si->tensor] + si->offset, si->len, &c->rng,
		    c->codes + c->code_off[i], comp_bound(x->codec, si->len),
		    &out);
		if (rv != FB_OK) {
			return fail(c, FERRY_EINVAL, "gradient of tensor %u "
			    "cannot be encoded (%s): NaN or Inf?", si->tensor,
			    fb_strerror(rv));
		}
	}
	x->staged = 1;
	return FERRY_OK;
}

// build_request creates the message for the shards in cn->req (method
// cn->method).
static int
build_request(ferry_client *c, struct conn *cn, struct xfer *x, nng_msg **out)
{
	Pswire__Header      h  = PSWIRE__HEADER__INIT;
	Pswire__PushRequest pr = PSWIRE__PUSH_REQUEST__INIT;
	Pswire__PullRequest pl = PSWIRE__PULL_REQUEST__INIT;
	Pswire__ShardRef    refs_stack[64], *refs = refs_stack;
	Pswire__ShardRef   *ptr_stack[64], **ptrs = ptr_stack;
	uint8_t            *payload;
	size_t              hl, plen = 0;
	int                 rv = FB_OK;
	const struct comp_codec *codec = x->codec;

	h.request_id  = cn->rid = c->next_rid++;
	h.deadline_ms = timeout(c);
	h.epoch       = c->pl->epoch;
	h.rank        = (uint32_t) c->opts.rank;
	if (cn->method == PSWIRE__METHOD__PULL) {
		uint64_t have = UINT64_MAX;
		for (size_t i = 0; i < cn->req_n; i++) {
			uint64_t v = c->shard_ver[cn->req[i]];
			have       = v < have ? v : have;
		}
		pl.n_shards     = cn->req_n;
		pl.shards       = cn->req;
		pl.version      = x->pull_want;
		pl.have_version = have;
		pl.full         = x->op == OP_PULL_FULL || c->cpull.id ==
		    COMP_NONE;
		for (size_t i = 0; i < cn->req_n && !pl.full; i++) {
			// A shard never pulled has no reference to patch.
			pl.full = c->ref_at[cn->req[i]] == REF_NONE;
		}
		h.body_case     = PSWIRE__HEADER__BODY_PULL_REQ;
		h.pull_req      = &pl;
		hl              = pswire__header__get_packed_size(&h);
		if (psw_msg_begin(out, hl, 0, &payload) != FB_OK) {
			return FB_ENOMEM;
		}
		return psw_msg_finish(*out, cn->method, 0, &h.base, hl, 0);
	}
	if (cn->req_n > 64) {
		refs = fb_alloc(cn->req_n * sizeof(*refs));
		ptrs = fb_alloc(cn->req_n * sizeof(*ptrs));
		if (refs == NULL || ptrs == NULL) {
			rv = FB_ENOMEM;
			goto done;
		}
	}
	for (size_t i = 0; i < cn->req_n; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[cn->req[i]];
		pswire__shard_ref__init(&refs[i]);
		refs[i].shard   = cn->req[i];
		refs[i].version = c->shard_ver[cn->req[i]];
		refs[i].codec   = codec->id;
		refs[i].bucket  = codec->bucket;
		refs[i].offset  = plen;
		refs[i].length  = comp_bound(codec, si->len);
		plen += refs[i].length;
		ptrs[i] = &refs[i];
	}
	pr.n_shards  = cn->req_n;
	pr.shards    = ptrs;
	pr.n_samples = x->n_samples;
	pr.init      = x->op == OP_INIT;
	h.body_case  = PSWIRE__HEADER__BODY_PUSH_REQ;
	h.push_req   = &pr;
	hl           = pswire__header__get_packed_size(&h);
	// A push body is about as large as the last reply from this server
	// (same shards): build it there, with no allocation and no zeroing.
	if (cn->spare != NULL && psw_msg_reuse(cn->spare, hl, plen, &payload) ==
	                             FB_OK) {
		*out      = cn->spare;
		cn->spare = NULL;
	} else if ((rv = psw_msg_begin(out, hl, plen, &payload)) != FB_OK) {
		goto done;
	}
	for (size_t i = 0; i < cn->req_n; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[cn->req[i]];
		// fp32 goes straight from the caller's tensor; codes from the
		// staging area (see stage_codes).
		const void *src = x->codes != NULL
		    ? (const void *) x->codes[cn->req[i]]
		    : x->staged ? (const void *) (c->codes +
		                      c->code_off[cn->req[i]])
		                : (const void *) (x->g[si->tensor] + si->offset);
		memcpy(payload + refs[i].offset, src, refs[i].length);
	}
	rv = psw_msg_finish(*out, cn->method, 0, &h.base, hl, plen);
	if (rv != FB_OK) {
		nng_msg_free(*out);
	}
done:
	if (refs != refs_stack) {
		fb_free(refs);
		fb_free(ptrs);
	}
	return rv;
}

// sink_rv turns a sink callback's result into the pull's: FERRY_OK and
// FERRY_ECORRUPT (resync the shard) pass; anything else fails the call.
static int
sink_rv(ferry_client *c, uint32_t id, const char *cb, int rv)
{
	if (rv == FERRY_OK || rv == FERRY_ECORRUPT) {
		return rv;
	}
	if (rv <= 0 || rv >= FERRY_ERR_COUNT) {
		return fail(c, FERRY_EINVAL, "pull sink: %s of shard %u returned "
		    "%d, not a ferry_err", cb, id, rv);
	}
	return fail(c, rv, "pull sink: %s of shard %u failed: %s", cb, id,
	    ferry_strerror(rv));
}

// take_shard applies the reply refs of one shard (r[0..k)): to the
// client's reference and the caller's tensor, or through the pull sink
// when one is set. Returns FERRY_OK, or FERRY_ECORRUPT when the reference
// no longer matches the server's (the caller resyncs), or FERRY_EPROTO for
// a malformed reply (or the sink's error).
static int
take_shard(ferry_client *c, size_t m, uint32_t id,
    Pswire__ShardRef *const *r, size_t k, const struct psw_frame *f,
    float *const *w)
{
	const Pswire__ShardInfo *si   = c->pl->shards[id];
	const int                sink = c->has_sink;
	float                   *dst  = sink ? NULL : w[si->tensor] + si->offset;
	float                   *ref  = sink ? NULL
	                      : c->cpull.id == COMP_NONE
	                      ? dst
	                      : c->ref[si->tensor] + si->offset;
	uint64_t                 ver = c->shard_ver[id];
	struct ferry_pull_piece  p   = { .shard = id, .tensor = si->tensor,
		   .offset = si->offset, .len = si->len };
	int                      rv;

	for (size_t j = 0; j < k; j++) {
		const Pswire__ShardRef *e = r[j];
		if (e->offset > f->payload_len ||
		    e->length > f->payload_len - e->offset) {
			return fail(c, FERRY_EPROTO, "server %s: shard %u bytes "
			    "outside the reply", c->pl->servers[m], id);
		}
		p.data  = f->payload + e->offset;
		p.bytes = e->length;
		if (e->kind == PSWIRE__SHARD_KIND__SHARD_KIND_FULL) {
			if (k != 1 || e->codec != COMP_NONE ||
			    e->length != si->len * 4) {
				return fail(c, FERRY_EPROTO, "server %s: bad full "
				    "shard %u", c->pl->servers[m], id);
			}
			ver = e->version;
			if (!sink) {
				memcpy(ref, p.data, e->length);
				c->ref_at[id] = REF_HOST;
				continue;
			}
			if (c->cpull.id != COMP_NONE &&
			    fb_crc32(0, p.data, e->length) != e->crc) {
				return FERRY_ECORRUPT;
			}
			p.base_version = p.version = e->version;
			rv = sink_rv(c, id, "full", c->sink.full(c->sink.arg, &p));
			if (rv != FERRY_OK) {
				return rv;
			}
			c->ref_at[id]    = REF_SINK;
			c->shard_ver[id] = ver;
			return FERRY_OK; // a FULL is alone and carries no check
		} else if (c->cpull.id == COMP_NONE || e->codec != c->cpull.id) {
			return fail(c, FERRY_EPROTO, "server %s: delta for shard "
			    "%u in codec %u", c->pl->servers[m], id, e->codec);
		} else if (e->base_version < ver && e->version <= ver) {
			continue; // already applied (async: shards drift apart)
		} else if (e->base_version != ver ||
		    c->ref_at[id] != (sink ? REF_SINK : REF_HOST)) {
			// A gap in the chain, or no reference on this path (the
			// sink was set or cleared since): resync.
			return FERRY_ECORRUPT;
		} else if (e->length > 0 && sink) {
			if (e->length != comp_bound(&c->cpull, si->len)) {
				return fail(c, FERRY_EPROTO, "server %s: delta for "
				    "shard %u has %llu bytes, not %zu",
				    c->pl->servers[m], id,
				    (unsigned long long) e->length,
				    comp_bound(&c->cpull, si->len));
			}
			p.codec        = c->cpull.id;
			p.bucket       = c->cpull.bucket;
			p.base_version = e->base_version;
			p.version      = e->version;
			rv = sink_rv(c, id, "delta", c->sink.delta(c->sink.arg, &p));
			if (rv != FERRY_OK) {
				return rv;
			}
			ver = e->version;
		} else {
			if (e->length > 0 &&
			    comp_decode_add(&c->cpull, p.data, e->length, si->len,
			        ref) != FB_OK) {
				return fail(c, FERRY_EPROTO, "server %s: corrupt "
				    "delta for shard %u", c->pl->servers[m], id);
			}
			ver = e->version;
		}
	}
	if (sink) {
		// Only chains get here (a FULL returned above), and a chain
		// needs a pull codec.
		rv = sink_rv(c, id, "check", c->sink.check(c->sink.arg, id, ver,
		    r[k - 1]->crc));
		if (rv != FERRY_OK) {
			return rv;
		}
	} else if (c->cpull.id != COMP_NONE) {
		// Check and hand over in one pass; on a mismatch dst holds a
		// wrong copy, which the resync this triggers overwrites.
		if (fb_crc32_copy(0, dst, ref, si->len * 4) != r[k - 1]->crc) {
			return FERRY_ECORRUPT;
		}
	}
	c->shard_ver[id] = ver;
	return FERRY_OK;
}

// take_reply checks server m's pull reply for the shards in cn->req and
// scatters them into w.
static int
take_reply(ferry_client *c, size_t m, struct xfer *x, Pswire__Header *rh,
    const struct psw_frame *f)
{
	struct conn *cn = &c->conns[m];
	size_t       j  = 0;
	if (cn->method == PSWIRE__METHOD__PUSH) {
		return FERRY_OK;
	}
	if (rh->body_case != PSWIRE__HEADER__BODY_PULL_REP) {
		return fail(c, FERRY_EPROTO, "server %s: reply has no pull "
		    "body", c->pl->servers[m]);
	}
	Pswire__PullReply *p = rh->pull_rep;
	for (size_t i = 0; i < cn->req_n; i++) {
		size_t k = 0;
		while (j + k < p->n_shards &&
		    p->shards[j + k]->shard == cn->req[i]) {
			k++;
		}
		if (k == 0) {
			return fail(c, FERRY_EPROTO, "server %s: reply lacks "
			    "shard %u", c->pl->servers[m], cn->req[i]);
		}
		int rv = take_shard(c, m, cn->req[i], p->shards + j, k, f,
		    x->w);
		if (rv == FERRY_ECORRUPT) {
			c->need_full[cn->req[i]] = 1;
		} else if (rv != FERRY_OK) {
			return rv;
		}
		j += k;
	}
	if (j != p->n_shards) {
		return fail(c, FERRY_EPROTO, "server %s: reply lists shards "
		    "not asked for", c->pl->servers[m]);
	}
	return FERRY_OK;
}

static uint8_t
main_method(enum op op)
{
	switch (op) {
	case OP_PULL:
	case OP_PULL_FULL:
		return PSWIRE__METHOD__PULL;
	case OP_PUSH_PULL:
		return PSWIRE__METHOD__PUSH_PULL;
	default:
		return PSWIRE__METHOD__PUSH;
	}
}

// refetch_map replaces the map with the scheduler's next epoch.
static int
refetch_map(ferry_client *c)
{
	Pswire__Header *rh = NULL;
	int             rv;
	if ((rv = fetch_map(c, c->pl->epoch + 1, &rh)) != FERRY_OK) {
		return rv;
	}
	Pswire__Placement *np = rh->placement;
	rh->placement         = NULL;
	rh->body_case         = PSWIRE__HEADER__BODY__NOT_SET;
	pswire__header__free_unpacked(rh, NULL);
	if (np->n_shards != c->pl->n_shards ||
	    check_placement(c, np) != FERRY_OK) {
		pswire__placement__free_unpacked(np, NULL);
		return fail(c, FERRY_EPROTO, "new placement map does not "
		    "match the job");
	}
	pswire__placement__free_unpacked(c->pl, NULL);
	c->pl = np;
	c->stats.map_changes++;
	if ((rv = open_conns(c, c->pl)) != FERRY_OK) {
		return rv;
	}
	return assign_conns(c);
}

// exchange runs one operation on every shard whose c->need is set, in
// rounds: each round sends one batched request per server (the shards'
// main method first; PULL for shards whose push was applied but whose
// reply was lost to a move), in parallel, and waits for all replies.
// UNAVAILABLE (not started, shard arriving) and STALE_EPOCH (shard moved:
// the map is re-fetched) leave shards pending for the next round, until
// the deadline. Requests refused with those statuses changed nothing on
// the server, so re-sending cannot apply a push twice.
static int
exchange(ferry_client *c, struct xfer *x)
{
	uint64_t deadline = fb_clock_ms() + timeout(c);
	int      rv       = FERRY_OK;

	for (;;) {
		int    sent = 0, refetch = 0, wait = 0;
		uint64_t now = fb_clock_ms();
		for (size_t m = 0; m < c->n_conns; m++) {
			struct conn *cn = &c->conns[m];
			nng_msg     *req;
			cn->req_n       = 0;
			cn->method      = main_method(x->op);
			for (int pass = 0; pass < 2 && cn->req_n == 0; pass++) {
				int want = pass == 0 ? NEED_MAIN : NEED_PULL;
				for (size_t k = 0; k < cn->n; k++) {
					if (c->need[cn->shards[k]] == want) {
						cn->req[cn->req_n++] =
						    cn->shards[k];
					}
				}
				if (pass == 1) {
					cn->method = PSWIRE__METHOD__PULL;
				}
			}
			cn->pending = cn->req_n > 0;
			if (!cn->pending) {
				continue;
			}
			if (now >= deadline) {
				return fail(c, FERRY_ETIMEDOUT, "%s: deadline "
				    "passed waiting for server %s",
				    psw_method_name(cn->method),
				    c->pl->servers[m]);
			}
			if ((rv = build_request(c, cn, x, &req)) != FB_OK) {
				return fail(c, map_err(rv), "cannot build a "
				    "request: %s", fb_strerror(rv));
			}
			if (cn->method != PSWIRE__METHOD__PULL) {
				c->stats.bytes_pushed += nng_msg_len(req);
			}
			c->stats.requests++;
			nng_aio_set_timeout(cn->aio, (int) (deadline - now));
			nng_aio_set_msg(cn->aio, req);
			nng_ctx_send(cn->ctx, cn->aio);
			sent++;
		}
		if (sent == 0) {
			break;
		}
		for (size_t m = 0; m < c->n_conns; m++) {
			struct conn *cn = &c->conns[m];
			cn->rv          = FB_OK;
			if (!cn->pending) {
				continue;
			}
			nng_aio_wait(cn->aio);
			if (nng_aio_result(cn->aio) != 0) {
				nng_msg_free(nng_aio_get_msg(cn->aio));
				cn->rv = nng_aio_result(cn->aio) ==
				        NNG_ETIMEDOUT ? FB_ETIMEDOUT
				                      : FB_ETRANSPORT;
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
			if (cn->rv != FB_OK) {
				rv = fail(c, map_err(cn->rv), "server %s: %s",
				    c->pl->servers[m], fb_strerror(cn->rv));
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
			if (cn->method != PSWIRE__METHOD__PUSH) {
				c->stats.bytes_pulled += nng_msg_len(rep);
			}
			r = psw_reply_open(rep, cn->method, cn->rid, &f, &ph,
			    &why);
			Pswire__Header *rh = (Pswire__Header *) ph;
			int             st = rh ? (int) rh->status : -1;
			if (rh != NULL && rh->epoch > c->pl->epoch) {
				refetch = 1; // a newer map exists
			}
			if (r == FB_EREMOTE &&
			    st == PSWIRE__STATUS__UNAVAILABLE) {
				wait = 1; // not started / shard arriving
			} else if (r == FB_EREMOTE &&
			    st == PSWIRE__STATUS__STALE_EPOCH) {
				refetch = 1;
			} else if (r == FB_EREMOTE &&
			    st == PSWIRE__STATUS__ABORTED &&
			    cn->method == PSWIRE__METHOD__PUSH_PULL) {
				// The push was applied; only the pull is left.
				for (size_t k = 0; k < cn->req_n; k++) {
					c->need[cn->req[k]] = NEED_PULL;
				}
				refetch = 1;
			} else if (r == FB_EREMOTE &&
			    st == PSWIRE__STATUS__OUT_OF_RANGE) {
				rv = fail(c, FERRY_EBEHIND, "server %s: %s",
				    c->pl->servers[m], rh->error);
			} else if (r == FB_EREMOTE) {
				rv = fail(c, FERRY_EREMOTE, "server %s: %s: %s",
				    c->pl->servers[m], psw_status_name(st),
				    rh->error);
			} else if (r != FB_OK) {
				rv = fail(c, FERRY_EPROTO, "server %s: %s",
				    c->pl->servers[m], why);
			} else if ((r = take_reply(c, m, x, rh, &f)) !=
			    FERRY_OK) {
				rv = r;
			} else {
				for (size_t k = 0; k < cn->req_n; k++) {
					c->need[cn->req[k]] = NEED_NONE;
				}
			}
			if (rh != NULL) {
				pswire__header__free_unpacked(rh, NULL);
			}
			nng_msg_free(cn->spare);
			cn->spare = rep;
		}
		if (rv != FERRY_OK) {
			return rv;
		}
		if (refetch && (rv = refetch_map(c)) != FERRY_OK) {
			return rv;
		}
		if (wait) {
			fb_sleep_us(5000);
		}
	}
	return FERRY_OK;
}

// run_op marks every shard (or only those flagged for a full resync) and
// runs the exchange.
static int
run_op(ferry_client *c, struct xfer *x)
{
	int rv;
	x->codec = x->op == OP_INIT || c->version < c->opts.warmup_steps
	    ? &c->cnone
	    : &c->cpush;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->need[i] = x->op != OP_PULL_FULL || c->need_full[i]
		    ? NEED_MAIN
		    : NEED_NONE;
		if (x->op == OP_PULL_FULL) {
			c->need_full[i] = 0;
		}
	}
	if ((x->op == OP_PUSH || x->op == OP_PUSH_PULL) && x->codes == NULL &&
	    x->codec->id != COMP_NONE && (rv = stage_codes(c, x)) != FERRY_OK) {
		return rv;
	}
	return exchange(c, x);
}

// finish_pull resyncs shards whose reference drifted (CRC mismatch or a
// gap), then records the version now held.
static int
finish_pull(ferry_client *c, struct xfer *x)
{
	int need = 0, rv;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		need |= c->need_full[i];
	}
	if (need) {
		struct xfer full = { .op = OP_PULL_FULL, .w = x->w,
			.pull_want = 0 };
		c->stats.resyncs++;
		if ((rv = run_op(c, &full)) != FERRY_OK) {
			return rv;
		}
		for (size_t i = 0; i < c->pl->n_shards; i++) {
			if (c->need_full[i]) {
				return fail(c, FERRY_ECORRUPT, "shard %zu: "
				    "reference CRC mismatch after a full "
				    "resync", i);
			}
		}
	}
	uint64_t v = UINT64_MAX;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		v = c->shard_ver[i] < v ? c->shard_ver[i] : v;
	}
	c->version       = v;
	c->want          = c->opts.mode == FERRY_MODE_SYNC ? c->version : 0;
	c->stats.version = c->version;
	return FERRY_OK;
}

// maybe_reprobe measures the links again every reprobe_s seconds (when
// the scheduler asks for it) and reports them; the scheduler re-places
// shards if they changed enough. Runs between operations, on the
// connections' idle contexts.
static int
maybe_reprobe(ferry_client *c)
{
	uint64_t now = fb_clock_ms();
	if (c->reprobe_s == 0 ||
	    now - c->last_probe_ms < (uint64_t) c->reprobe_s * 1000) {
		return FERRY_OK;
	}
	c->last_probe_ms = now;
	c->stats.reprobes++;
	return probe_links(c, c->probe_count, c->probe_bytes);
}

static int
check_declared(ferry_client *c)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return fail(c, FERRY_ESTATE, "declare the tensors first");
	}
	return FERRY_OK;
}

// check_ready accepts a declared client and a non-NULL input array.
static int
check_ready(ferry_client *c, const void *bufs)
{
	int rv = check_declared(c);
	if (rv == FERRY_OK && bufs == NULL) {
		rv = fail(c, FERRY_EINVAL, "tensor buffer array is NULL");
	}
	return rv;
}

static int
check_samples(ferry_client *c, uint32_t n_samples)
{
	return n_samples > 0
	    ? FERRY_OK
	    : fail(c, FERRY_EINVAL, "n_samples must be > 0");
}

FERRY_API int
ferry_client_init_weights(ferry_client *c, const float *const *w)
{
	struct xfer x = { .op = OP_INIT, .g = w };
	int         rv;
	if ((rv = check_ready(c, w)) != FERRY_OK) {
		return rv;
	}
	return run_op(c, &x);
}

// check_pull_bufs accepts w unless it is NULL and no pull sink is set.
static int
check_pull_bufs(ferry_client *c, float *const *w)
{
	if (w == NULL && !c->has_sink) {
		return fail(c, FERRY_EINVAL, "weight buffer array is NULL (and "
		    "no pull sink is set)");
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_pull(ferry_client *c, float *const *w)
{
	struct xfer x = { .op = OP_PULL, .w = w };
	int         rv;
	if ((rv = check_declared(c)) != FERRY_OK ||
	    (rv = check_pull_bufs(c, w)) != FERRY_OK) {
		return rv;
	}
	x.pull_want = c->want;
	if ((rv = run_op(c, &x)) != FERRY_OK) {
		return rv;
	}
	return finish_pull(c, &x);
}

FERRY_API int
ferry_client_push(ferry_client *c, const float *const *g, uint32_t n_samples)
{
	struct xfer x = { .op = OP_PUSH, .g = g, .n_samples = n_samples };
	int         rv;
	if ((rv = check_ready(c, g)) != FERRY_OK ||
	    (rv = check_samples(c, n_samples)) != FERRY_OK) {
		return rv;
	}
	if ((rv = run_op(c, &x)) != FERRY_OK) {
		return rv;
	}
	if (c->opts.mode == FERRY_MODE_SYNC) {
		c->want = c->version + 1;
	}
	return FERRY_OK;
}

// push_pull_run is the common tail of the push-pull calls: re-probe when
// due, push for the held version, wait for the next one.
static int
push_pull_run(ferry_client *c, struct xfer *x)
{
	int rv;
	if ((rv = maybe_reprobe(c)) != FERRY_OK) {
		return rv;
	}
	x->pull_want = c->opts.mode == FERRY_MODE_SYNC ? c->version + 1 : 0;
	if ((rv = run_op(c, x)) != FERRY_OK) {
		return rv;
	}
	return finish_pull(c, x);
}

FERRY_API int
ferry_client_push_pull(ferry_client *c, const float *const *g,
    uint32_t n_samples, float *const *w)
{
	struct xfer x = { .op = OP_PUSH_PULL, .g = g, .w = w,
		.n_samples = n_samples };
	int rv;
	if ((rv = check_ready(c, g)) != FERRY_OK ||
	    (rv = check_pull_bufs(c, w)) != FERRY_OK ||
	    (rv = check_samples(c, n_samples)) != FERRY_OK) {
		return rv;
	}
	return push_pull_run(c, &x);
}

FERRY_API int
ferry_client_shards(const ferry_client *c, const struct ferry_shard **shards,
    size_t *n, uint32_t *codec_id, uint32_t *bucket)
{
	if (c == NULL || shards == NULL || n == NULL || codec_id == NULL ||
	    bucket == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return FERRY_ESTATE;
	}
	*shards   = c->layout;
	*n        = c->pl->n_shards;
	*codec_id = c->cpush.id;
	*bucket   = c->cpush.bucket;
	return FERRY_OK;
}

FERRY_API int
ferry_client_in_warmup(const ferry_client *c)
{
	return c != NULL && c->version < c->opts.warmup_steps;
}

FERRY_API int
ferry_client_push_pull_encoded(ferry_client *c, const uint8_t *const *codes,
    uint32_t n_samples, float *const *w)
{
	struct xfer x = { .op = OP_PUSH_PULL, .codes = codes, .w = w,
		.n_samples = n_samples };
	int rv;
	if ((rv = check_ready(c, codes)) != FERRY_OK ||
	    (rv = check_pull_bufs(c, w)) != FERRY_OK ||
	    (rv = check_samples(c, n_samples)) != FERRY_OK) {
		return rv;
	}
	if (c->cpush.id == COMP_NONE || ferry_client_in_warmup(c)) {
		return fail(c, FERRY_ESTATE, "encoded pushes need a push codec "
		    "and the end of warm-up");
	}
	return push_pull_run(c, &x);
}

FERRY_API int
ferry_client_set_pull_sink(ferry_client *c, const struct ferry_pull_sink *sink)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (sink == NULL) {
		c->has_sink = 0;
		return FERRY_OK;
	}
	if (sink->full == NULL || sink->delta == NULL || sink->check == NULL) {
		return fail(c, FERRY_EINVAL, "pull sink: full, delta and check "
		    "are all required");
	}
	c->sink     = *sink;
	c->has_sink = 1;
	return FERRY_OK;
}

FERRY_API int
ferry_client_pull_codec(const ferry_client *c, uint32_t *codec_id,
    uint32_t *bucket)
{
	if (c == NULL || codec_id == NULL || bucket == NULL) {
		return FERRY_EINVAL;
	}
	*codec_id = c->cpull.id;
	*bucket   = c->cpull.bucket;
	return FERRY_OK;
}

FERRY_API int
ferry_client_leave(ferry_client *c)
{
	Pswire__Header       h  = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l  = PSWIRE__LEAVE_REQUEST__INIT;
	Pswire__Header      *rh = NULL;
	int                  rv;
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return fail(c, FERRY_ESTATE, "declare the tensors first");
	}
	l.role      = PSWIRE__ROLE__ROLE_TRAINER;
	l.id        = (uint32_t) c->opts.rank;
	h.body_case = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req = &l;
	// Short: a trainer leaves while stopping, maybe with the job gone.
	rv = sched_call(c, &h, PSWIRE__METHOD__LEAVE,
	    timeout(c) < 3000 ? timeout(c) : 3000, &rh);
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	return rv;
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
