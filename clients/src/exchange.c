// exchange.c — running one operation (init, pull, push, push-pull) over
// every server as pipelined requests, with the retries a moving job
// needs; ferry__op_run sets up a push (its codec, the staged codes), and a
// pull comes in through pull.c. The slots themselves are conn.c's.
//
// DESIGN. Full duplex: each server's shards are cut into requests (whole
// shards, PIPE_MIN_BYTES to PIPE_MAX_BYTES each on a fast link) and up to
// FERRY_PIPE_SLOTS of them in flight: every free slot of every connection
// sends one at once; a slot's aio callback turns its finished send into the
// receive, so while the client still sends request k+1 the server already
// takes request k apart, and in a sync job it answers request k as soon as the
// rounds of its shards close, while the rest still arrive. The caller's thread
// builds requests and takes replies apart (the client has no lock: one thread
// at a time); nng's threads only move bytes and flip a slot's state under the
// pipe's lock. Replies that say UNAVAILABLE (not started, shard arriving) are
// retried; STALE_EPOCH (shard moved) re-fetches the map and re-sends (or,
// when the scheduler has no later map than the one held, only re-sends:
// the server has caught up with it);
// ABORTED (push applied, shard moved) turns into a pull. A re-fetch or a
// back-off first lets every request in flight end (the map owns the
// request lists), so those rules stay those of one round at a time. In a
// sync job a request parked at a server may wait for another trainer's
// push of a shard that trainer cannot send until its own parked requests
// end: each waiting for the other's unsent shards until the deadline
// (seen when two servers left at once). So requests still in flight
// REQUEUE_MS into such a wait are cancelled and re-sent after it; a
// server counts a re-sent push once (push_retried) and serves its pull.
//
// How big a request: PIPE_MIN_BYTES to PIPE_MAX_BYTES (today's loopback
// optimum; a big model's share goes as many such requests, not as w huge
// ones) on a link that moves that much in REQ_LINK_S; on a slower one
// (probed bandwidth, ferry__req_bytes) a request is what the link moves in
// REQ_LINK_S, or a round trip's worth over the window, so that many small
// requests follow each other and the replies of the first ones travel
// while the later ones are sent; the scheduler cuts the shards of such a
// job to the same grain (shard_link_bytes), since a request carries whole
// shards and a sync reply waits for all of them.
//
// How many in flight: a sync server parks a push-pull until its round
// closes, holding one of its --contexts (256 by default) until then, so
// every trainer's slots together must stay below that or the job stalls.
// A client keeps at most PIPE_CTX_BUDGET / trainers (1..FERRY_PIPE_SLOTS)
// requests in flight per server: half the default contexts, the rest for
// pulls, probes and other roles.
//
// Deadline warning: with opts.log set, the wait for replies wakes at 80%
// of the call's deadline and names, once per call, every server still
// owing a reply and its shards: "it stopped and I don't know who it is
// waiting for" gets an answer before the call fails. 80% rather than a
// fixed margin: it scales from a test's 1 s deadline to a job's minutes,
// and still leaves a fifth of the deadline to see the call end.
#include <stdio.h>

#include "client_impl.h"
#include "shard/shard.h"

// WARN_PCT is the share of a call's deadline after which it warns.
#define WARN_PCT 80

// PIPE_MIN_BYTES: a request carries at least this many fp32 bytes of
// shards (one default --shard-bytes) when the server holds that many, so
// a small model is not cut into messages whose fixed cost (a wake-up of
// the caller per reply, a parked call per request on the server)
// outweighs the overlap: on loopback, 128 KiB requests made the 0.9 MB
// MLP's step ~20% slower; 64 MiB in 8 requests doubled push-pull goodput.
#define PIPE_MIN_BYTES (1u << 20)

// PIPE_MAX_BYTES: and at most this many on a fast link, however big the
// model. A request of conn_bytes / w held a big model's share in w
// messages: 32 MiB each for a 1 GB model on 4 servers, and every trainer's
// requests in flight, their replies and the freed blocks malloc keeps for
// the next ones live in the server's (and the client's) memory at once:
// 2 trainers x 8 requests x 2 directions. With 1 MiB requests a 256 MB
// model on 4 servers took the servers from 1543 to 922 MB of RSS (256 MB
// of weights, 512 MB of sync staging) and its client from 1.8 to 0.9 GB,
// at the same goodput; a 64 MiB push-pull to one server (transport_bench)
// went from 3.5-9.5 to 12.8-13.6 Gbit/s (blocks over glibc's 32 MiB mmap
// ceiling are faulted in afresh for every message).
#define PIPE_MAX_BYTES (1u << 20)

// REQ_LINK_S: the time on a slow link one request aims at (the same as the
// scheduler's SHARD_LINK_S). At 100 Mbit/s shared by two trainers, 8-16
// KiB requests measured 1.03x the link bound, 32 KiB shards 1.17x and one
// 1 MiB request 1.8x (docs/benchmarks.md).
#define REQ_LINK_S SHARD_LINK_S

// PIPE_CTX_BUDGET: the server contexts all trainers' slots may hold.
#define PIPE_CTX_BUDGET 128u

// window is how many requests the client keeps in flight per server.
static size_t
window(const ferry_client *c)
{
	uint32_t t = c->pl->trainers > 0 ? c->pl->trainers : 1;
	size_t   w = PIPE_CTX_BUDGET / t;
	return w < 1 ? 1 : w > FERRY_PIPE_SLOTS ? FERRY_PIPE_SLOTS : w;
}

// warn_waiting logs, through opts.log, each request still owing a reply,
// with its server and shards.
static void
warn_waiting(ferry_client *c, uint32_t tmo)
{
	for (size_t m = 0; m < c->n_conns; m++) {
		struct conn *cn = &c->conns[m];
		for (size_t k = 0; cn->busy > 0 && k < FERRY_PIPE_SLOTS; k++) {
			struct slot     *s = &cn->slots[k];
			struct fb_ranges ids;
			char             b_ids[160], msg[512];
			int              st;
			nng_mtx_lock(c->pipe->mu);
			st = s->state;
			nng_mtx_unlock(c->pipe->mu);
			if (st != SLOT_SEND && st != SLOT_RECV) {
				continue;
			}
			fb_ranges_init(&ids, b_ids, sizeof(b_ids));
			for (size_t i = 0; i < s->req_n; i++) {
				fb_ranges_add(&ids, s->req[i]);
			}
			snprintf(msg, sizeof(msg),
			    "%s: %d%% of the %u ms deadline passed, still "
			    "waiting for server %s (shard(s) %s)",
			    psw_method_name(s->method), WARN_PCT, tmo,
			    c->pl->servers[m], fb_ranges_end(&ids));
			c->opts.log(c->opts.log_arg, FERRY_LOG_WARN, msg);
		}
	}
}

// REROUTE_POLL_MS is how long a wait for servers lets pass before (and
// between) asking the scheduler whether a newer map exists: a dead
// primary's backup may have been promoted, or a lost shard re-seeded.
#define REROUTE_POLL_MS 500

// REQUEUE_MS: how long a re-fetch or back-off waits for the requests in
// flight before it cancels them to re-send (above). Long against a
// loopback round (~1 ms), short against a deadline (seconds).
#define REQUEUE_MS 250

// The value in force: a test lowers it to make every such wait requeue.
unsigned ferry__requeue_ms = REQUEUE_MS;

// ferry__map_newer asks the scheduler, briefly, whether a map later than
// the one held exists.
int
ferry__map_newer(ferry_client *c)
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

// await_newer_map is what a call does when a server's connection fails
// (reset, refused: it may have died): it asks the scheduler every 100 ms,
// until the call's deadline, for a map later than the one held, which
// gives the server's shards a home again (a restart in its slot, a backup
// promoted, a re-seed from the trainers). Returns 1 when one exists (the
// caller re-fetches and re-sends), 0 at the deadline.
static int
await_newer_map(ferry_client *c, uint64_t deadline)
{
	while (fb_clock_ms() < deadline) {
		if (ferry__map_newer(c)) {
			return 1;
		}
		fb_sleep_us(100000);
	}
	return 0;
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

// slot_state reads s's state under the pipe's lock.
static int
slot_state(ferry_client *c, struct slot *s)
{
	int st;
	nng_mtx_lock(c->pipe->mu);
	st = s->state;
	nng_mtx_unlock(c->pipe->mu);
	return st;
}

// slot_idle frees s for the next request of its connection.
static void
slot_idle(ferry_client *c, struct slot *s)
{
	nng_mtx_lock(c->pipe->mu);
	s->state = SLOT_IDLE;
	nng_mtx_unlock(c->pipe->mu);
	c->conns[s->m].busy--;
}

// unsend puts s's shards back among those still to send (a retry).
static void
unsend(ferry_client *c, const struct slot *s)
{
	for (size_t i = 0; i < s->req_n; i++) {
		c->need[s->req[i]] &= (uint8_t) ~NEED_SENT;
	}
}

// busy_total counts the requests in flight over every connection.
static size_t
busy_total(const ferry_client *c)
{
	size_t n = 0;
	for (size_t m = 0; m < c->n_conns; m++) {
		n += c->conns[m].busy;
	}
	return n;
}

void
ferry__xfer_begin(ferry_client *c, struct xfer *x)
{
	x->tmo      = ferry__timeout(c);
	x->deadline = fb_clock_ms() + x->tmo;
	x->warn_at  = nng_clock() + (nng_time) x->tmo * WARN_PCT / 100;
	x->warned = x->refetch = x->backoff = x->rerouted = x->moved = 0;

	x->requeue = x->requeued = 0;
	x->stuck_since           = 0; // no wait on requests in flight yet
	memset(c->need, NEED_NONE, c->pl->n_shards);
}

uint64_t
ferry__req_bytes(uint64_t conn_bytes, size_t w, double bw_bps, double rtt_s)
{
	size_t   ww   = w ? w : 1;
	uint64_t fast = conn_bytes / ww + (conn_bytes % ww != 0);
	double   t    = rtt_s > 0 ? 2.0 * rtt_s / (double) ww : 0;
	double   link = bw_bps * (t > REQ_LINK_S ? t : REQ_LINK_S);
	fast          = fast < PIPE_MIN_BYTES ? PIPE_MIN_BYTES
	             : fast > PIPE_MAX_BYTES  ? PIPE_MAX_BYTES
	                                      : fast;
	// !(bw > 0) also catches NaN (not measured)
	if (!(bw_bps > 0) || !(link < (double) PIPE_MIN_BYTES)) {
		return fast;
	}
	return link < 1.0 ? 1 : (uint64_t) link;
}

// wire_ratio is the wire bytes per fp32 byte of x's requests to cn and
// their replies, both directions averaged (1 uncompressed; about 1/8 with
// q4/q4): a slow link's request size is its time on the link, so a
// compressed exchange packs more fp32 bytes into it. With "auto", the
// rungs chosen for cn's link.
static double
wire_ratio(const ferry_client *c, const struct xfer *x, const struct conn *cn)
{
	const size_t             n    = 1u << 16;
	const struct comp_codec *push = x->codec;
	double                   up = 4.0 * n, down = 4.0 * n;
	if (push == NULL) {
		// A pull chose no push codec (pull.c). Its requests are cut
		// to the grain of this version's push-pulls, as they always
		// were: the push codec a push now would use.
		push = c->version < c->opts.warmup_steps ? &c->cnone
		                                         : &c->cpush;
	}
	if (c->auto_push && push != &c->cnone) {
		push = &c->auto_codec[cn->push_rung];
	}
	if (push != NULL) {
		up = (double) comp_bound(push, n);
	}
	if (!c->auto_pull || cn->pull_rung != 0) {
		down = (double) comp_bound(&c->cpull, n);
	}
	double r = (up + down) / (8.0 * n);
	return r < 1e-3 ? 1e-3 : r > 1.0 ? 1.0 : r;
}

// fill lists in s the shards of cn's next request: those still to send
// with the operation's method (main) first, else those left to pull, in
// map order, until they reach `target` fp32 bytes. Returns how many.
static size_t
fill(ferry_client *c, struct conn *cn, struct slot *s, uint8_t main,
    uint64_t target)
{
	s->req_n = 0;
	for (int pass = 0; pass < 2 && s->req_n == 0; pass++) {
		uint8_t  want  = pass == 0 ? NEED_MAIN : NEED_PULL;
		uint64_t bytes = 0;
		for (size_t k = 0; k < cn->n && bytes < target; k++) {
			uint32_t id = cn->shards[k];
			if (c->need[id] == want) {
				s->req[s->req_n++] = id;
				bytes += c->pl->shards[id]->len * 4;
			}
		}
		s->method = pass == 0 ? main : PSWIRE__METHOD__PULL;
	}
	return s->req_n;
}

int
ferry__xfer_pump(ferry_client *c, struct xfer *x)
{
	size_t   w   = window(c);
	uint64_t now = fb_clock_ms();
	if (x->refetch || x->backoff || x->moved) {
		return FERRY_OK; // once every request in flight has ended
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		struct conn *cn = &c->conns[m];
		// the link's rate in fp32 bytes of this operation
		uint64_t     target = ferry__req_bytes(cn->bytes, w,
		        cn->bw_bps / wire_ratio(c, x, cn), cn->rtt_s);
		for (size_t k = 0; k < w && cn->busy < w; k++) {
			struct slot *s = &cn->slots[k];
			nng_msg     *req;
			int          rv;
			if (slot_state(c, s) != SLOT_IDLE) {
				continue;
			}
			if (fill(c, cn, s, main_method(x->op), target) == 0) {
				break;
			}
			if (now >= x->deadline) {
				return ferry__fail(c, FERRY_ETIMEDOUT,
				    "%s: deadline passed waiting for server %s",
				    psw_method_name(s->method),
				    c->pl->servers[m]);
			}
			if ((rv = ferry__request_build(c, s, x, &req)) !=
			    FB_OK) {
				return ferry__fail(c, ferry__map_err(rv),
				    "cannot build a request: %s",
				    fb_strerror(rv));
			}
			if (s->method != PSWIRE__METHOD__PULL) {
				c->stats.bytes_pushed += nng_msg_len(req);
			}
			c->stats.requests++;
			if (psw_auth_sign(c->auth, req,
			        psw_auth_channel(c->auth, s->ctx), 0,
			        &s->ctr) != FB_OK) {
				nng_msg_free(req);
				return ferry__fail(c, FERRY_ENOMEM,
				    "cannot sign a request");
			}
			for (size_t i = 0; i < s->req_n; i++) {
				c->need[s->req[i]] |= NEED_SENT;
			}
			s->expire = nng_clock() +
			    (nng_time) (x->deadline - now);
			nng_aio_set_timeout(s->aio,
			    (nng_duration) (x->deadline - now));
			nng_aio_set_msg(s->aio, req);
			nng_mtx_lock(c->pipe->mu);
			s->state = SLOT_SEND;
			nng_mtx_unlock(c->pipe->mu);
			cn->busy++;
			nng_ctx_send(s->ctx, s->aio);
		}
	}
	return FERRY_OK;
}

// take_failed handles slot s whose send or receive failed (nng result
// r): a request cancelled for a newer map, or lost with a server that
// may have died, is sent again after the re-fetch (a dead server's
// shards come back in a later map: docs/operations.md §12); its own
// deadline fails the call. The first loss of a call is logged; each is
// counted (ferry_recovery.server_losses).
static void
lost_server(ferry_client *c, struct xfer *x, const struct slot *s, int r)
{
	c->recovery.server_losses++;
	// The server may have taken the push before the connection failed
	// (a reset, not a death): the re-send says it may be a repeat.
	x->requeued = 1;
	if (c->opts.log != NULL && !x->lost_logged) {
		char msg[400];
		x->lost_logged = 1;
		snprintf(msg, sizeof(msg),
		    "server %s: %s: waiting up to %llu ms for a map that "
		    "gives its shards a home again, then sending again",
		    c->pl->servers[s->m], nng_strerror(r),
		    (unsigned long long) (x->deadline > fb_clock_ms()
		            ? x->deadline - fb_clock_ms()
		            : 0));
		c->opts.log(c->opts.log_arg, FERRY_LOG_WARN, msg);
	}
}

static int
take_failed(ferry_client *c, struct xfer *x, struct slot *s, int r)
{
	if (s->in_send && nng_aio_get_msg(s->aio) != NULL) {
		nng_msg_free(nng_aio_get_msg(s->aio));
		nng_aio_set_msg(s->aio, NULL);
	}
	if (x->requeue && r == NNG_ECANCELED) {
		unsend(c, s); // cancelled to be sent again (reap)
		return FERRY_OK;
	}
	if (!x->rerouted && r != NNG_ETIMEDOUT) {
		lost_server(c, x, s, r);
	}
	if (x->rerouted ||
	    (r != NNG_ETIMEDOUT && await_newer_map(c, x->deadline))) {
		unsend(c, s); // its backups took over: re-send
		x->refetch = 1;
		return FERRY_OK;
	}
	return ferry__fail(c,
	    r == NNG_ETIMEDOUT ? FERRY_ETIMEDOUT : FERRY_ECONNECT,
	    "server %s: %s", c->pl->servers[s->m], nng_strerror(r));
}

// take_reply handles the reply in slot s: its shards are done, retried
// (UNAVAILABLE: after a back-off; STALE_EPOCH: after a re-fetch), turned
// into pulls (ABORTED), or the call fails.
static int
take_reply(ferry_client *c, struct xfer *x, struct slot *s)
{
	struct psw_frame  f;
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	const char       *srv = c->pl->servers[s->m];
	int               r, rv = FERRY_OK;
	nng_msg          *rep = nng_aio_get_msg(s->aio);

	nng_aio_set_msg(s->aio, NULL);
	if (s->method != PSWIRE__METHOD__PUSH) {
		c->stats.bytes_pulled += nng_msg_len(rep);
	}
	r = psw_reply_open(c->auth, rep, s->method, s->rid, s->ctr, &f, &ph,
	    &why);
	Pswire__Header *rh = (Pswire__Header *) ph;
	int             st = rh ? (int) rh->status : -1;
	if (rh != NULL && rh->epoch > c->pl->epoch) {
		x->refetch = 1; // a newer map exists
	}
	if (r == FB_EREMOTE &&
	    (st == PSWIRE__STATUS__UNAVAILABLE ||
	        (st == PSWIRE__STATUS__ALREADY_EXISTS && x->requeued))) {
		// not started / shard arriving; or a cancelled copy of this
		// push still being taken in: once in, the re-send counts once
		unsend(c, s);
		x->backoff = 1;
	} else if (r == FB_EREMOTE && st == PSWIRE__STATUS__STALE_EPOCH) {
		unsend(c, s);
		x->moved = 1;
	} else if (r == FB_EREMOTE && st == PSWIRE__STATUS__ABORTED &&
	    s->method == PSWIRE__METHOD__PUSH_PULL) {
		// The push was applied; only the pull is left.
		for (size_t k = 0; k < s->req_n; k++) {
			c->need[s->req[k]] = NEED_PULL;
		}
		x->moved = 1;
	} else if (r == FB_EREMOTE && st == PSWIRE__STATUS__OUT_OF_RANGE) {
		rv = ferry__fail(c, FERRY_EBEHIND, "server %s: %s", srv,
		    rh->error);
	} else if (r == FB_EREMOTE) {
		rv = ferry__fail(c, FERRY_EREMOTE, "server %s: %s: %s", srv,
		    psw_status_name(st), rh->error);
	} else if (r != FB_OK) {
		rv = ferry__fail(c, FERRY_EPROTO, "server %s: %s", srv, why);
	} else if ((rv = ferry__reply_take(c, s, x, rh, &f)) == FERRY_OK) {
		for (size_t k = 0; k < s->req_n; k++) {
			c->need[s->req[k]] = NEED_NONE;
		}
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	if (s->spare != NULL) {
		nng_msg_free(s->spare);
	}
	s->spare = rep;
	return rv;
}

// reap waits until a request ends (warning at 80% of the deadline, and in
// sync rounds or a replicated job asking for a newer map every
// REROUTE_POLL_MS, which cancels everything in flight: a server that
// stopped answering may have been declared dead and its shards given a
// new home), then takes every ended one.
static int
reap(ferry_client *c, struct xfer *x)
{
	struct ferry__pipe *p    = c->pipe;
	nng_time            poll = nng_clock() + REROUTE_POLL_MS;
	int                 rv = FERRY_OK, done = 0;
	for (;;) {
		int      warn = c->opts.log != NULL && !x->warned;
		// Only where a re-sent push counts once (sync rounds, or a
		// replicated job's servers): elsewhere a push cancelled after
		// it was applied would be applied twice.
		int      polls = c->lockstep || c->replicated;
		nng_time until = warn && (!polls || x->warn_at < poll)
		    ? x->warn_at
		    : polls ? poll
		            : 0;
		// A re-fetch or back-off waits for these requests: after
		// REQUEUE_MS, cancel them (xfer's comment at the top).
		nng_time requeue_at = 0;
		if ((x->refetch || x->backoff || x->moved) && !x->requeue) {
			if (x->stuck_since == 0) {
				x->stuck_since = nng_clock();
			}
			requeue_at = x->stuck_since + ferry__requeue_ms;
			until = until == 0 || requeue_at < until ? requeue_at
			                                         : until;
		}
		nng_mtx_lock(p->mu);
		for (size_t m = 0; m < c->n_conns && !done; m++) {
			for (size_t k = 0; k < FERRY_PIPE_SLOTS; k++) {
				done |= c->conns[m].slots[k].state ==
				    SLOT_DONE;
			}
		}
		if (!done) {
			if (until == 0) {
				nng_cv_wait(p->cv);
			} else {
				(void) nng_cv_until(p->cv, until);
			}
		}
		nng_mtx_unlock(p->mu);
		if (done) {
			break;
		}
		nng_time now = nng_clock();
		if (warn && now >= x->warn_at) {
			x->warned = 1;
			warn_waiting(c, x->tmo);
		}
		if (requeue_at != 0 && now >= requeue_at) {
			x->requeue = x->requeued = 1;
			for (size_t m = 0; m < c->n_conns; m++) {
				for (size_t k = 0; k < FERRY_PIPE_SLOTS; k++) {
					nng_aio_cancel(
					    c->conns[m].slots[k].aio);
				}
			}
			if (c->opts.log != NULL) {
				char msg[160];
				snprintf(msg, sizeof(msg),
				    "%zu request(s) still in flight %u ms into "
				    "a map re-fetch or back-off: cancelled, to "
				    "be sent again",
				    busy_total(c), ferry__requeue_ms);
				c->opts.log(c->opts.log_arg, FERRY_LOG_INFO,
				    msg);
			}
		}
		if (polls && now >= poll) {
			poll = now + REROUTE_POLL_MS;
			if (!x->rerouted && ferry__map_newer(c)) {
				// Sent or cancelled, each is sent again after
				// the re-fetch, marked as a re-send: a server
				// that took it already counts it once.
				x->rerouted = x->refetch = x->requeued = 1;
				for (size_t m = 0; m < c->n_conns; m++) {
					for (size_t k = 0;
					     k < FERRY_PIPE_SLOTS; k++) {
						nng_aio_cancel(
						    c->conns[m].slots[k].aio);
					}
				}
			}
		}
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		for (size_t k = 0; k < FERRY_PIPE_SLOTS; k++) {
			struct slot *s = &c->conns[m].slots[k];
			int          r;
			if (slot_state(c, s) != SLOT_DONE) {
				continue;
			}
			r = s->res != 0 ? take_failed(c, x, s, s->res)
			                : take_reply(c, x, s);
			slot_idle(c, s);
			rv = rv != FERRY_OK ? rv : r;
		}
	}
	return rv;
}

void
ferry__xfer_abort(ferry_client *c)
{
	struct ferry__pipe *p = c->pipe;
	while (p != NULL && busy_total(c) > 0) {
		for (size_t m = 0; m < c->n_conns; m++) {
			for (size_t k = 0; k < FERRY_PIPE_SLOTS; k++) {
				struct slot *s  = &c->conns[m].slots[k];
				int          st = slot_state(c, s);
				if (st == SLOT_SEND || st == SLOT_RECV) {
					// Again each pass: a send that ended
					// just before may have become a
					// receive.
					nng_aio_cancel(s->aio);
				} else if (st == SLOT_DONE) {
					nng_msg *q = nng_aio_get_msg(s->aio);
					if (q != NULL) {
						nng_msg_free(q);
						nng_aio_set_msg(s->aio, NULL);
					}
					slot_idle(c, s);
				}
			}
		}
		nng_mtx_lock(p->mu);
		(void) nng_cv_until(p->cv, nng_clock() + 10);
		nng_mtx_unlock(p->mu);
	}
}

// range_done reports whether every shard of tensors [t0, t1) is done (with
// t0 == t1: every shard, and nothing is in flight).
static int
range_done(const ferry_client *c, size_t t0, size_t t1)
{
	int all = t0 == t1;
	if (all && busy_total(c) > 0) {
		return 0;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		uint32_t t = c->pl->shards[i]->tensor;
		if ((all || (t >= t0 && t < t1)) && c->need[i] != NEED_NONE) {
			return 0;
		}
	}
	return 1;
}

int
ferry__xfer_until(ferry_client *c, struct xfer *x, size_t t0, size_t t1)
{
	int rv;
	for (;;) {
		if ((rv = ferry__xfer_pump(c, x)) != FERRY_OK) {
			break;
		}
		if (busy_total(c) == 0) {
			x->stuck_since = 0; // nothing in flight to cancel
			x->requeue     = 0;
		}
		if (busy_total(c) == 0 && x->moved) {
			// The shard moved, but the map that moved it may be
			// the one held already: a server that was still
			// catching up with it answers so. Waiting for the next
			// epoch would wait for a map nobody publishes: re-send
			// unless a later one exists.
			x->moved = 0;
			if (x->refetch || ferry__map_newer(c)) {
				x->refetch = 1;
			} else {
				x->backoff = 1;
			}
		}
		if (busy_total(c) == 0 && x->refetch) {
			x->refetch = x->rerouted = 0;
			if ((rv = ferry__map_refetch(c)) != FERRY_OK) {
				break;
			}
			continue;
		}
		if (busy_total(c) == 0 && x->backoff) {
			x->backoff = 0;
			fb_sleep_us(5000);
			continue;
		}
		if (range_done(c, t0, t1)) {
			return FERRY_OK;
		}
		if (busy_total(c) == 0) {
			// Shards pending, none sendable, nothing to wait for:
			// a bookkeeping bug, reported rather than a hang.
			rv = ferry__fail(c, FERRY_EPROTO,
			    "internal: shards pending with no request to send");
			break;
		}
		if ((rv = reap(c, x)) != FERRY_OK) {
			break;
		}
	}
	ferry__xfer_abort(c);
	return rv;
}

// ferry__op_run picks the push codec, marks every shard, stages the codes
// when the push needs them and runs the exchange. Pushes only: a pull
// takes its own path (pull.c).
int
ferry__op_run(ferry_client *c, struct xfer *x)
{
	int rv;
	x->codec = x->op == OP_INIT || c->version < c->opts.warmup_steps
	    ? &c->cnone
	    : &c->cpush;
	ferry__xfer_begin(c, x);
	ferry__seed_forget_aliases(c, x->g);
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->need[i] = ferry__push_need(c, x, i);
	}
	if ((x->op == OP_PUSH || x->op == OP_PUSH_PULL) && x->codes == NULL &&
	    x->codec->id != COMP_NONE &&
	    (rv = ferry__codes_stage(c, x, 0, c->n_tensors)) != FERRY_OK) {
		return rv;
	}
	return ferry__xfer_until(c, x, 0, 0);
}
