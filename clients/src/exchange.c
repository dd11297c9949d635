// exchange.c — running one operation (init, pull, push, push-pull) over
// every server in rounds, with the retries a moving job needs, and the
// bookkeeping after a pull (resync, the version held).
//
// DESIGN. Each round sends one batched message to every server that holds
// a shard still pending, then waits for all the replies, so the servers
// work in parallel and a round costs the slowest server, not the sum.
// Replies that say UNAVAILABLE (not started, shard arriving) are retried;
// STALE_EPOCH (shard moved) re-fetches the map and re-batches; ABORTED
// (push applied, shard moved) turns into a pull.
//
// Deadline warning: with opts.log set, each connection's aio reports its
// completions (struct ferry__watch), so the wait for a reply can wake at
// 80% of the call's deadline and name, once per call, every server still
// owing a reply and its shards: "it stopped and I don't know who it is
// waiting for" gets an answer before the call fails. 80% rather than a
// fixed margin: it scales from a test's 1 s deadline to a job's minutes,
// and still leaves a fifth of the deadline to see the call end. Without
// opts.log nothing of this runs (plain aios, plain nng_aio_wait).
#include <stdio.h>

#include "client_impl.h"
// after <nng/nng.h> (client_impl.h), which defines what it needs
#include <nng/supplemental/util/platform.h>

// WARN_PCT is the share of a call's deadline after which it warns.
#define WARN_PCT 80

// A connection's completion flag, at a fixed address (the conns array
// moves when it grows), with its own lock and condition variable.
struct ferry__watch {
	nng_mtx *mu;
	nng_cv  *cv;
	int      busy; // an operation is in flight on the aio (under mu)
};

// watch_done is the aio callback (an nng thread): the operation ended.
static void
watch_done(void *arg)
{
	struct ferry__watch *w = arg;
	nng_mtx_lock(w->mu);
	w->busy = 0;
	nng_cv_wake(w->cv);
	nng_mtx_unlock(w->mu);
}

int
ferry__conn_watch(struct conn *cn)
{
	struct ferry__watch *w = fb_zalloc(sizeof(*w));
	nng_aio             *aio;
	if (w == NULL || nng_mtx_alloc(&w->mu) != 0) {
		fb_free(w);
		return FERRY_ENOMEM;
	}
	if (nng_cv_alloc(&w->cv, w->mu) != 0) {
		nng_mtx_free(w->mu);
		fb_free(w);
		return FERRY_ENOMEM;
	}
	if (nng_aio_alloc(&aio, watch_done, w) != 0) {
		nng_cv_free(w->cv);
		nng_mtx_free(w->mu);
		fb_free(w);
		return FERRY_ENOMEM;
	}
	nng_aio_free(cn->aio);
	cn->aio   = aio;
	cn->watch = w;
	return FERRY_OK;
}

void
ferry__conn_unwatch(struct conn *cn)
{
	struct ferry__watch *w = cn->watch;
	if (w == NULL) {
		return;
	}
	nng_cv_free(w->cv);
	nng_mtx_free(w->mu);
	fb_free(w);
	cn->watch = NULL;
}

// watch_start marks an operation in flight on cn's aio; call it just
// before starting one.
static void
watch_start(struct conn *cn)
{
	if (cn->watch != NULL) {
		nng_mtx_lock(cn->watch->mu);
		cn->watch->busy = 1;
		nng_mtx_unlock(cn->watch->mu);
	}
}

// watch_busy reports whether cn's operation is still in flight.
static int
watch_busy(struct conn *cn)
{
	int busy;
	nng_mtx_lock(cn->watch->mu);
	busy = cn->watch->busy;
	nng_mtx_unlock(cn->watch->mu);
	return busy;
}

// warn_waiting logs, through opts.log, each server that still owes this
// round a reply, with its shards.
static void
warn_waiting(ferry_client *c, uint32_t tmo)
{
	for (size_t m = 0; m < c->n_conns; m++) {
		struct conn     *cn = &c->conns[m];
		struct fb_ranges ids;
		char             b_ids[160], msg[512];
		if (!cn->pending || cn->watch == NULL || !watch_busy(cn)) {
			continue;
		}
		fb_ranges_init(&ids, b_ids, sizeof(b_ids));
		for (size_t k = 0; k < cn->req_n; k++) {
			fb_ranges_add(&ids, cn->req[k]);
		}
		snprintf(msg, sizeof(msg),
		    "%s: %d%% of the %u ms deadline passed, still waiting "
		    "for server %s (shard(s) %s)",
		    psw_method_name(cn->method), WARN_PCT, tmo,
		    c->pl->servers[m], fb_ranges_end(&ids));
		c->opts.log(c->opts.log_arg, FERRY_LOG_WARN, msg);
	}
}

// conn_wait waits for the operation on connection m's aio to end. With a
// watch, it first waits until warn_at at most; still waiting then (and
// not warned yet in this call), it warns about every server it waits for.
static void
conn_wait(ferry_client *c, size_t m, nng_time warn_at, uint32_t tmo,
    int *warned)
{
	struct conn         *cn = &c->conns[m];
	struct ferry__watch *w  = cn->watch;
	if (w != NULL && !*warned) {
		int busy;
		nng_mtx_lock(w->mu);
		while (w->busy && nng_clock() < warn_at) {
			nng_cv_until(w->cv, warn_at);
		}
		busy = w->busy;
		nng_mtx_unlock(w->mu);
		if (busy) {
			*warned = 1;
			warn_waiting(c, tmo);
		}
	}
	nng_aio_wait(cn->aio);
}

// REROUTE_POLL_MS is how long a replicated job's wait for one server lets
// pass before (and between) asking the scheduler whether a newer map
// exists: a dead primary's backup may have been promoted.
#define REROUTE_POLL_MS 500

// map_newer asks the scheduler, briefly, whether a map later than the one
// held exists. It leaves the client's last error alone: a "no" here is
// no failure.
static int
map_newer(ferry_client *c)
{
	Pswire__Header              g  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	ProtobufCMessage           *ph = NULL;
	const char                 *why;
	gp.min_epoch    = c->pl->epoch + 1;
	g.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	g.placement_req = &gp;
	g.request_id    = c->next_rid++;
	g.deadline_ms   = 50; // parked at most this long (plus a sweep)
	g.rank          = (uint32_t) c->opts.rank;
	int rv = psw_call_header(c->auth, c->sched_ctx, c->sched_aio, &g.base,
	    PSWIRE__METHOD__GET_PLACEMENT, g.request_id, 400, &ph, &why);
	Pswire__Header *rh    = (Pswire__Header *) ph;
	int             newer = rv == FB_OK &&
	    rh->body_case == PSWIRE__HEADER__BODY_PLACEMENT &&
	    rh->placement->epoch > c->pl->epoch;
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	return newer;
}

// await_newer_map is what a replicated job does when a server's
// connection fails (reset, refused: it may have died): it asks the
// scheduler every 100 ms, until the call's deadline, for a map later
// than the one held (the dead server's backups promoted). Returns 1 when
// one exists (the caller re-fetches and re-sends), 0 at the deadline.
static int
await_newer_map(ferry_client *c, uint64_t deadline)
{
	while (fb_clock_ms() < deadline) {
		if (map_newer(c)) {
			return 1;
		}
		fb_sleep_us(100000);
	}
	return 0;
}

// wait_or_reroute waits for connection m's operation like conn_wait,
// except that in a replicated job, every REROUTE_POLL_MS of waiting, it
// asks the scheduler for a newer map; when one exists it cancels every
// pending operation (their servers count a re-sent push once) and
// returns 1: the caller fetches the map and re-sends. Returns 0 when the
// operation ended by itself.
static int
wait_or_reroute(ferry_client *c, size_t m)
{
	struct conn         *cn = &c->conns[m];
	struct ferry__watch *w  = cn->watch;
	for (;;) {
		nng_time until = nng_clock() + REROUTE_POLL_MS;
		int      busy;
		nng_mtx_lock(w->mu);
		while (w->busy && nng_clock() < until) {
			nng_cv_until(w->cv, until);
		}
		busy = w->busy;
		nng_mtx_unlock(w->mu);
		if (!busy) {
			return 0;
		}
		if (map_newer(c)) {
			for (size_t k = 0; k < c->n_conns; k++) {
				if (c->conns[k].pending) {
					nng_aio_cancel(c->conns[k].aio);
				}
			}
			return 1;
		}
	}
}

// main_method is the rpc that carries op's requests (a shard whose push
// was applied but whose reply was lost is then pulled with PULL).
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
	uint32_t tmo      = ferry__timeout(c);
	uint64_t deadline = fb_clock_ms() + tmo;
	nng_time warn_at  = nng_clock() + (nng_time) tmo * WARN_PCT / 100;
	int      rv = FERRY_OK, warned = 0;

	for (;;) {
		int      sent = 0, refetch = 0, wait = 0;
		uint64_t now = fb_clock_ms();
		for (size_t m = 0; m < c->n_conns; m++) {
			struct conn *cn = &c->conns[m];
			nng_msg     *req;
			cn->req_n  = 0;
			cn->method = main_method(x->op);
			for (int pass = 0; pass < 2 && cn->req_n == 0;
			     pass++) {
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
				return ferry__fail(c, FERRY_ETIMEDOUT,
				    "%s: "
				    "deadline passed waiting for server %s",
				    psw_method_name(cn->method),
				    c->pl->servers[m]);
			}
			if ((rv = ferry__request_build(c, cn, x, &req)) !=
			    FB_OK) {
				return ferry__fail(c, ferry__map_err(rv),
				    "cannot build a request: %s",
				    fb_strerror(rv));
			}
			if (cn->method != PSWIRE__METHOD__PULL) {
				c->stats.bytes_pushed += nng_msg_len(req);
			}
			c->stats.requests++;
			if (psw_auth_sign(c->auth, req,
			        psw_auth_channel(c->auth, cn->ctx), 0,
			        &cn->ctr) != FB_OK) {
				nng_msg_free(req);
				return ferry__fail(c, FERRY_ENOMEM,
				    "cannot sign a request");
			}
			nng_aio_set_timeout(cn->aio, (int) (deadline - now));
			nng_aio_set_msg(cn->aio, req);
			watch_start(cn);
			nng_ctx_send(cn->ctx, cn->aio);
			sent++;
		}
		if (sent == 0) {
			break;
		}
		int rerouted = 0; // a newer map: pending operations cancelled
		for (size_t m = 0; m < c->n_conns; m++) {
			struct conn *cn = &c->conns[m];
			cn->rv          = FB_OK;
			if (!cn->pending) {
				continue;
			}
			if (c->replicated && !rerouted) {
				rerouted = wait_or_reroute(c, m);
			}
			conn_wait(c, m, warn_at, tmo, &warned);
			if (rerouted) {
				// Sent or cancelled, it is sent again after
				// the refetch (a server counts a re-sent push
				// once).
				if (nng_aio_result(cn->aio) != 0) {
					nng_msg_free(nng_aio_get_msg(cn->aio));
				}
				cn->rv = FB_EBUSY;
				continue;
			}
			if (nng_aio_result(cn->aio) != 0) {
				nng_msg_free(nng_aio_get_msg(cn->aio));
				cn->rv = nng_aio_result(cn->aio) ==
				        NNG_ETIMEDOUT
				    ? FB_ETIMEDOUT
				    : FB_ETRANSPORT;
				continue;
			}
			watch_start(cn);
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
			if (cn->rv == FB_EBUSY) {
				refetch = 1; // cancelled for a newer map
				continue;
			}
			if (cn->rv == FB_ETRANSPORT && c->recoverable &&
			    await_newer_map(c, deadline)) {
				refetch = 1; // its backups took over
				continue;
			}
			if (cn->rv != FB_OK) {
				rv = ferry__fail(c, ferry__map_err(cn->rv),
				    "server %s: %s", c->pl->servers[m],
				    fb_strerror(cn->rv));
				continue;
			}
			if (c->replicated && !rerouted) {
				rerouted = wait_or_reroute(c, m);
			}
			conn_wait(c, m, warn_at, tmo, &warned);
			if (rerouted && nng_aio_result(cn->aio) != 0) {
				refetch = 1; // cancelled for a newer map
				continue;
			}
			if ((r = nng_aio_result(cn->aio)) != 0 &&
			    r != NNG_ETIMEDOUT && c->recoverable &&
			    await_newer_map(c, deadline)) {
				refetch = 1; // its backups took over
				continue;
			}
			if (r != 0) {
				rv = ferry__fail(c,
				    r == NNG_ETIMEDOUT ? FERRY_ETIMEDOUT
				                       : FERRY_ECONNECT,
				    "server %s: %s", c->pl->servers[m],
				    nng_strerror(r));
				continue;
			}
			nng_msg *rep = nng_aio_get_msg(cn->aio);
			if (cn->method != PSWIRE__METHOD__PUSH) {
				c->stats.bytes_pulled += nng_msg_len(rep);
			}
			r = psw_reply_open(c->auth, rep, cn->method, cn->rid,
			    cn->ctr, &f, &ph, &why);
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
				rv = ferry__fail(c, FERRY_EBEHIND,
				    "server %s: %s", c->pl->servers[m],
				    rh->error);
			} else if (r == FB_EREMOTE) {
				rv = ferry__fail(c, FERRY_EREMOTE,
				    "server %s: %s: %s", c->pl->servers[m],
				    psw_status_name(st), rh->error);
			} else if (r != FB_OK) {
				rv = ferry__fail(c, FERRY_EPROTO,
				    "server %s: %s", c->pl->servers[m], why);
			} else if ((r = ferry__reply_take(c, m, x, rh, &f)) !=
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
		if (refetch && (rv = ferry__map_refetch(c)) != FERRY_OK) {
			return rv;
		}
		if (wait) {
			fb_sleep_us(5000);
		}
	}
	return FERRY_OK;
}

// ferry__op_run marks every shard (or only those flagged for a full
// resync) and runs the exchange.
int
ferry__op_run(ferry_client *c, struct xfer *x)
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
	    x->codec->id != COMP_NONE &&
	    (rv = ferry__codes_stage(c, x)) != FERRY_OK) {
		return rv;
	}
	return exchange(c, x);
}

// ferry__pull_finish resyncs shards whose reference drifted (CRC mismatch or a
// gap), then records the version now held.
int
ferry__pull_finish(ferry_client *c, struct xfer *x)
{
	int need = 0, rv;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		need |= c->need_full[i];
	}
	if (need) {
		struct xfer full = {
			.op        = OP_PULL_FULL,
			.w         = x->w,
			.pull_want = 0,
		};
		c->stats.resyncs++;
		if ((rv = ferry__op_run(c, &full)) != FERRY_OK) {
			return rv;
		}
		for (size_t i = 0; i < c->pl->n_shards; i++) {
			if (c->need_full[i]) {
				return ferry__fail(c, FERRY_ECORRUPT,
				    "shard %zu: reference CRC mismatch after "
				    "a full resync",
				    i);
			}
		}
	}
	uint64_t v = UINT64_MAX;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		v = c->shard_ver[i] < v ? c->shard_ver[i] : v;
	}
	c->version = v;
	c->stats.pulls++;
	c->stats.staleness_last = c->pull_stale;
	c->stats.staleness_sum += c->pull_stale;
	if (c->pull_stale > c->stats.staleness_max) {
		c->stats.staleness_max = c->pull_stale;
	}
	c->pull_stale    = 0;
	c->want          = c->lockstep ? c->version : 0;
	c->stats.version = c->version;
	return FERRY_OK;
}
