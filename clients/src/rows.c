// rows.c — the sparse tables' exchange: ferry_client_rows_pull,
// ferry_client_rows_push_pull and ferry_client_step. A call's key blocks
// are de-duplicated and routed (rows_dedup.c), one Rows request per server
// carries every table shard of that server it concerns, the requests go
// to every server at once on each connection's rows slot, and the replies'
// rows are decoded and scattered back to the caller's key order.
//
// DESIGN. One request per server per call: a server holds a table shard's
// whole push (its distinct keys, their counts and summed gradients) and
// the pull of its wanted keys in one message, so a sync round's push and
// its pull travel together and the server answers once the round closes.
// In sync mode (and SSP with staleness 0) every table shard of the job
// gets a push block each step, empty or not, so every round closes; the
// push names the version held (c->rows_version, one for every table shard)
// and the pull waits for the next. A request goes out on the
// connection's rows slot (FERRY_ROWS_SLOT), which the dense exchange never
// touches: ferry_client_step sends the rows requests, runs the dense
// push-pull while they are in flight, then takes the rows replies. A
// server that answers UNAVAILABLE gets its request again after a
// back-off; STALE_EPOCH (a table shard moved) re-fetches the map first and
// sends the shards still owed to their new servers; only the servers that
// did not answer OK are asked again, so a push is never applied twice:
// ABORTED (a shard moved after the request was applied) re-sends only the
// pulls, and a request re-sent after a lost reply or a move is marked
// `resend` (a sync server then skips pushes it counted already).
// Nothing here allocates in a steady state: the de-dup buffers, the block
// arrays and the request message (the last reply, reused) all persist.
#include <math.h>
#include <stdio.h>

#include "client_impl.h"

// ROWS_KEYS_MAX: the keys one Rows request may carry (the servers' limit).
#define ROWS_KEYS_MAX (1u << 22)

// One rows exchange: the caller's blocks and what the requests carry.
struct rowsx {
	const struct ferry_rows *push;
	size_t                   n_push;
	uint32_t                 n_samples;
	int                      pushing;
	struct ferry_rows       *pull;
	size_t                   n_pull;
	uint64_t                 deadline; // fb_clock_ms
	int                      refetch;  // a shard moved: new map first
	int                      backoff;  // UNAVAILABLE: wait, then re-send
	int                      resend;   // a push may have been counted:
	                                   // RowsRequest.resend from now on
	int                      probe;    // no keys: every table shard's
	                                   // version (learn_version)
};

// rslot is server m's rows slot.
static struct slot *
rslot(ferry_client *c, size_t m)
{
	return &c->conns[m].slots[FERRY_ROWS_SLOT];
}

static int
rslot_state(ferry_client *c, struct slot *s)
{
	int st;
	nng_mtx_lock(c->pipe->mu);
	st = s->state;
	nng_mtx_unlock(c->pipe->mu);
	return st;
}

static void
rslot_set(ferry_client *c, struct slot *s, int st)
{
	nng_mtx_lock(c->pipe->mu);
	s->state = st;
	nng_mtx_unlock(c->pipe->mu);
}

// rows_busy counts the rows requests in flight.
static size_t
rows_busy(ferry_client *c)
{
	size_t n = 0;
	for (size_t m = 0; m < c->n_conns; m++) {
		n += rslot_state(c, rslot(c, m)) != SLOT_IDLE;
	}
	return n;
}

// rows_abort cancels every rows request in flight and waits for them.
static void
rows_abort(ferry_client *c)
{
	while (c->pipe != NULL && rows_busy(c) > 0) {
		for (size_t m = 0; m < c->n_conns; m++) {
			struct slot *s  = rslot(c, m);
			int          st = rslot_state(c, s);
			if (st == SLOT_SEND || st == SLOT_RECV) {
				nng_aio_cancel(s->aio);
			} else if (st == SLOT_DONE) {
				nng_msg *q = nng_aio_get_msg(s->aio);
				if (q != NULL) {
					nng_msg_free(q);
					nng_aio_set_msg(s->aio, NULL);
				}
				rslot_set(c, s, SLOT_IDLE);
			}
		}
		nng_mtx_lock(c->pipe->mu);
		(void) nng_cv_until(c->pipe->cv, nng_clock() + 10);
		nng_mtx_unlock(c->pipe->mu);
	}
	for (size_t i = 0; c->rsent != NULL && i < c->n_tshards; i++) {
		c->rsent[i] = 0;
	}
}

// check_blocks checks the caller's blocks b[0..n) (pull: rows wanted,
// else gradients).
static int
check_blocks(ferry_client *c, const struct ferry_rows *b, size_t n, int pull)
{
	const char *what = pull ? "pull" : "push";
	if (b == NULL && n > 0) {
		return ferry__fail(c, FERRY_EINVAL, "%s blocks: NULL", what);
	}
	for (size_t j = 0; j < n; j++) {
		if (b[j].table >= c->n_tables) {
			return ferry__fail(c, FERRY_EINVAL,
			    "%s block %zu: unknown table %u (%zu declared)",
			    what, j, b[j].table, c->n_tables);
		}
		if (b[j].n == 0) {
			continue;
		}
		if (b[j].keys == NULL || (pull && b[j].rows == NULL) ||
		    (!pull && b[j].grads == NULL)) {
			return ferry__fail(c, FERRY_EINVAL,
			    "%s block %zu (table '%s'): %s is NULL with %zu "
			    "keys",
			    what, j, c->tables[b[j].table].name,
			    b[j].keys == NULL ? "keys"
			        : pull        ? "rows"
			                      : "grads",
			    b[j].n);
		}
	}
	return FERRY_OK;
}

// shard_on is the server table shard id lives on in the map held.
static uint32_t
shard_on(const ferry_client *c, size_t id)
{
	return c->pl->table_shards[id]->server;
}

// check_finite refuses a push whose summed row gradients hold a NaN or
// Inf before anything is sent: the servers refuse one too, but only for
// their own part of the call, and the others would apply theirs.
static int
check_finite(ferry_client *c)
{
	const struct ferry__dedup *d = &c->dd_push;
	for (size_t u = 0; u < d->n; u++) {
		const struct ferry__table *t = &c->tables[d->table[u]];
		const float               *r = d->rows + d->pos[u];
		for (uint32_t k = 0; k < t->dim; k++) {
			if (!isfinite(r[k])) {
				return ferry__fail(c, FERRY_EINVAL,
				    "push: table '%s', key %llu: the row "
				    "gradient (summed over %u occurrences) "
				    "holds a NaN or Inf; nothing was sent",
				    t->name, (unsigned long long) d->key[u],
				    d->count[u]);
			}
		}
	}
	return FERRY_OK;
}

// prepare checks and de-duplicates x's blocks, marks what each table
// shard needs, and refuses a request over the servers' key limit before
// anything is sent.
static int
prepare(ferry_client *c, struct rowsx *x)
{
	int rv;
	if ((rv = check_blocks(c, x->push, x->n_push, 0)) != FERRY_OK ||
	    (rv = check_blocks(c, x->pull, x->n_pull, 1)) != FERRY_OK ||
	    (rv = ferry__tables_route(c)) != FERRY_OK) {
		return rv;
	}
	if ((rv = ferry__dedup_build(&c->dd_push, c->tables, c->n_tshards,
	         x->push, x->n_push)) != FB_OK ||
	    (rv = ferry__dedup_build(&c->dd_pull, c->tables, c->n_tshards,
	         x->pull, x->n_pull)) != FB_OK) {
		return ferry__fail(c, ferry__map_err(rv),
		    "cannot de-duplicate the keys: %s", fb_strerror(rv));
	}
	ferry__dedup_sum(&c->dd_push, c->tables, x->push, x->n_push);
	if ((rv = check_finite(c)) != FERRY_OK) {
		return rv;
	}
	// Every table shard takes part in a sync round (and advances its
	// clock under SSP); async pushes go only where there are keys.
	int all = c->lockstep || c->opts.mode == FERRY_MODE_SSP;
	for (size_t i = 0; i < c->n_tshards; i++) {
		c->rsent[i] = 0;
		c->rneed[i] = 0;
		if (x->pushing && (all || c->dd_push.sh_n[i] > 0)) {
			c->rneed[i] |= RNEED_PUSH;
		}
		if (c->dd_pull.sh_n[i] > 0 || x->probe) {
			c->rneed[i] |= RNEED_PULL;
		}
		if (x->probe) {
			c->rver[i] =
			    0; // the versions it answers, not the highest
		}
	}
	for (size_t m = 0; m < c->pl->n_servers; m++) {
		size_t keys = 0;
		for (size_t i = 0; i < c->n_tshards; i++) {
			if (shard_on(c, i) == m) {
				keys += c->dd_push.sh_n[i] +
				    c->dd_pull.sh_n[i];
			}
		}
		if (keys > ROWS_KEYS_MAX) {
			return ferry__fail(c, FERRY_EINVAL,
			    "%zu distinct keys for server %s, over the %u of "
			    "one Rows request: split the batch",
			    keys, c->pl->servers[m], ROWS_KEYS_MAX);
		}
	}
	return FERRY_OK;
}

// rows_send sends every idle server its request for what it still owes.
static int
rows_send(ferry_client *c, struct rowsx *x)
{
	for (size_t m = 0; m < c->n_conns; m++) {
		struct slot *s = rslot(c, m);
		nng_msg     *req;
		uint64_t     now = fb_clock_ms();
		int          rv;
		if (rslot_state(c, s) != SLOT_IDLE) {
			continue;
		}
		struct ferry__rows_kind k = { x->pushing, x->n_samples,
			x->probe, x->resend };
		if ((rv = ferry__rows_build(c, &k, m, &req)) != FERRY_OK) {
			return rv;
		}
		if (req == NULL) {
			continue;
		}
		if (now >= x->deadline) {
			nng_msg_free(req);
			return ferry__fail(c, FERRY_ETIMEDOUT,
			    "Rows: deadline passed waiting for server %s",
			    c->pl->servers[m]);
		}
		if (psw_auth_sign(c->auth, req,
		        psw_auth_channel(c->auth, s->ctx), 0,
		        &s->ctr) != FB_OK) {
			nng_msg_free(req);
			return ferry__fail(c, FERRY_ENOMEM,
			    "cannot sign a request");
		}
		c->stats.bytes_pushed += nng_msg_len(req);
		c->stats.requests++;
		s->method = PSWIRE__METHOD__ROWS;
		s->expire = nng_clock() + (nng_time) (x->deadline - now);
		nng_aio_set_timeout(s->aio,
		    (nng_duration) (x->deadline - now));
		nng_aio_set_msg(s->aio, req);
		rslot_set(c, s, SLOT_SEND);
		nng_ctx_send(s->ctx, s->aio);
	}
	return FERRY_OK;
}

// unsend forgets which of server m's table shards were in flight (their
// needs stay: a retry sends them again).
static void
unsend(ferry_client *c, size_t m)
{
	for (size_t i = 0; i < c->n_tshards; i++) {
		if (c->rsent[i] == m + 1) {
			c->rsent[i] = 0;
		}
	}
}

// pushed_only marks server m's table shards of the request just answered
// ABORTED as pushed (the server applied the whole request, then a shard
// moved before its pull could be answered): only their pulls are sent
// again, to the shards' new servers.
static void
pushed_only(ferry_client *c, size_t m)
{
	for (size_t i = 0; i < c->n_tshards; i++) {
		if (c->rsent[i] == m + 1) {
			c->rneed[i] &= (uint8_t) ~RNEED_PUSH;
		}
	}
	unsend(c, m);
}

// take_rows checks server m's reply body (one block per pull block sent,
// in their order) and decodes its rows into the pull side's rows.
static int
take_rows(ferry_client *c, size_t m, const Pswire__Header *rh,
    const struct psw_frame *f)
{
	const char *srv = c->pl->servers[m];
	size_t      j   = 0;
	if (rh->body_case != PSWIRE__HEADER__BODY_ROWS_REP) {
		return ferry__fail(c, FERRY_EPROTO,
		    "server %s: Rows reply without rows", srv);
	}
	const Pswire__RowsReply *rp = rh->rows_rep;
	for (size_t i = 0; i < c->n_tshards; i++) {
		if (c->rsent[i] != m + 1 || !(c->rneed[i] & RNEED_PULL)) {
			continue;
		}
		const struct ferry__table *t = ferry__rows_table(c, i);
		const Pswire__RowBlock    *b = j < rp->n_rows ? rp->rows[j]
		                                              : NULL;
		size_t                     n = c->dd_pull.sh_n[i];
		j++;
		if (b == NULL || b->n != n || b->codec != t->cpull.id ||
		    b->rows_offset > f->payload_len ||
		    b->rows_length > f->payload_len - b->rows_offset ||
		    b->rows_length != comp_bound(&t->cpull, n * t->dim) ||
		    (n > 0 && // no key (a version probe): nothing to decode
		        comp_decode(&t->cpull, f->payload + b->rows_offset,
		            b->rows_length, n * t->dim,
		            c->dd_pull.rows + c->dd_pull.sh_rows[i]) !=
		            FB_OK)) {
			return ferry__fail(c, FERRY_EPROTO,
			    "server %s: Rows reply block %zu (table '%s') "
			    "is malformed",
			    srv, j - 1, t->name);
		}
		if (b->version > c->rver[i]) {
			c->rver[i] = b->version;
		}
	}
	if (j != rp->n_rows) {
		return ferry__fail(c, FERRY_EPROTO,
		    "server %s: Rows reply has %zu blocks, %zu asked for", srv,
		    rp->n_rows, j);
	}
	for (size_t i = 0; i < c->n_tshards; i++) {
		if (c->rsent[i] == m + 1) {
			c->rsent[i] = 0;
			c->rneed[i] = 0;
		}
	}
	return FERRY_OK;
}

// await_newer_map is what a lost connection (reset, refused: the server
// may have died) waits for: a map later than the one held, which gives
// the server's table shards a new home (re-placed, their rows starting
// over). It asks every 100 ms until x's deadline: 1 once one exists.
static int
await_newer_map(ferry_client *c, const struct rowsx *x)
{
	while (fb_clock_ms() < x->deadline) {
		if (ferry__map_newer(c)) {
			return 1;
		}
		fb_sleep_us(100000);
	}
	return 0;
}

// take_reply handles server m's ended rows slot: its shards are done,
// sent again (UNAVAILABLE: after a back-off; STALE_EPOCH, or a lost
// connection once a newer map exists: after that map), or the call fails.
static int
take_reply(ferry_client *c, struct rowsx *x, size_t m)
{
	struct slot      *s   = rslot(c, m);
	const char       *srv = c->pl->servers[m];
	const char       *why = "";
	ProtobufCMessage *ph  = NULL;
	struct psw_frame  f;
	int               r, rv = FERRY_OK;
	if (s->res != 0) {
		if (s->in_send && nng_aio_get_msg(s->aio) != NULL) {
			nng_msg_free(nng_aio_get_msg(s->aio));
			nng_aio_set_msg(s->aio, NULL);
		}
		if (s->res != NNG_ETIMEDOUT && await_newer_map(c, x)) {
			unsend(c, m); // its table shards have a new home
			x->refetch = 1;
			x->resend  = 1; // the push may have been counted
			return FERRY_OK;
		}
		return ferry__fail(c,
		    s->res == NNG_ETIMEDOUT ? FERRY_ETIMEDOUT : FERRY_ECONNECT,
		    "Rows: server %s: %s", srv, nng_strerror(s->res));
	}
	nng_msg *rep = nng_aio_get_msg(s->aio);
	nng_aio_set_msg(s->aio, NULL);
	c->stats.bytes_pulled += nng_msg_len(rep);
	r = psw_reply_open(c->auth, rep, PSWIRE__METHOD__ROWS, s->rid, s->ctr,
	    &f, &ph, &why);
	Pswire__Header *rh = (Pswire__Header *) ph;
	int             st = rh ? (int) rh->status : -1;
	if (rh != NULL && rh->epoch > c->pl->epoch) {
		x->refetch = 1; // a newer map exists
	}
	if (r == FB_EREMOTE && st == PSWIRE__STATUS__UNAVAILABLE) {
		unsend(c, m);
		x->backoff = 1;
	} else if (r == FB_EREMOTE && st == PSWIRE__STATUS__STALE_EPOCH) {
		unsend(c, m);
		x->refetch = 1;
		x->resend  = 1;
	} else if (r == FB_EREMOTE && st == PSWIRE__STATUS__ABORTED) {
		pushed_only(c, m); // a table shard moved after the push
		x->refetch = 1;
	} else if (r == FB_EREMOTE && st == PSWIRE__STATUS__ALREADY_EXISTS &&
	    !x->resend) {
		// This rank's push of the round is in already (an earlier
		// attempt whose answer was lost): send again as a re-send,
		// which the server counts once and answers.
		unsend(c, m);
		x->resend = 1;
	} else if (r == FB_EREMOTE && st == PSWIRE__STATUS__OUT_OF_RANGE) {
		c->rows_probe = 1; // the job went on without this push
		rv = ferry__fail(c, FERRY_EBEHIND, "Rows: server %s: %s", srv,
		    rh->error);
	} else if (r == FB_EREMOTE) {
		rv = ferry__fail(c, FERRY_EREMOTE, "Rows: server %s: %s: %s",
		    srv, psw_status_name(st), rh->error);
	} else if (r != FB_OK) {
		rv = ferry__fail(c, FERRY_EPROTO, "Rows: server %s: %s", srv,
		    why);
	} else {
		rv = take_rows(c, m, rh, &f);
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

// rows_cancel cancels every rows request in flight: each ends
// (cancelled) and take_reply sends it again under the newer map.
static void
rows_cancel(ferry_client *c)
{
	for (size_t m = 0; m < c->n_conns; m++) {
		struct slot *s  = rslot(c, m);
		int          st = rslot_state(c, s);
		if (st == SLOT_SEND || st == SLOT_RECV) {
			nng_aio_cancel(s->aio);
		}
	}
}

// reap waits until a rows request ends, then takes every ended one. In
// sync rounds and replicated jobs it asks for a newer map every
// ROWS_REROUTE_MS of waiting and, when there is one, cancels the requests
// in flight to send them again (resend: counted once): a server that died
// with a request parked never answers it, and its table shards were
// promoted elsewhere (exchange.c's reap does the same for dense shards).
#define ROWS_REROUTE_MS 500
static int
reap(ferry_client *c, struct rowsx *x)
{
	int      done = 0, rv = FERRY_OK, polls = c->lockstep || c->replicated;
	uint64_t poll = fb_clock_ms() + ROWS_REROUTE_MS;
	nng_mtx_lock(c->pipe->mu);
	while (!done) {
		for (size_t m = 0; m < c->n_conns; m++) {
			done |= rslot(c, m)->state == SLOT_DONE;
		}
		// The slots' own timeouts end them at the deadline; this
		// wait's bound is only a guard.
		if (done ||
		    nng_cv_until(c->pipe->cv,
		        nng_clock() + (polls ? 100 : 1000)) != NNG_ETIMEDOUT) {
			continue;
		}
		if (fb_clock_ms() > x->deadline + 5000) {
			break;
		}
		if (polls && fb_clock_ms() >= poll) {
			nng_mtx_unlock(c->pipe->mu);
			if (ferry__map_newer(c)) {
				rows_cancel(c);
			}
			poll = fb_clock_ms() + ROWS_REROUTE_MS;
			nng_mtx_lock(c->pipe->mu);
		}
	}
	nng_mtx_unlock(c->pipe->mu);
	if (!done) {
		return ferry__fail(c, FERRY_ETIMEDOUT,
		    "Rows: no reply by the deadline");
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		if (rslot_state(c, rslot(c, m)) == SLOT_DONE) {
			int r = take_reply(c, x, m);
			rslot_set(c, rslot(c, m), SLOT_IDLE);
			rv = rv != FERRY_OK ? rv : r;
		}
	}
	return rv;
}

// owed reports whether some table shard still needs a request.
static int
owed(const ferry_client *c)
{
	for (size_t i = 0; i < c->n_tshards; i++) {
		if (c->rneed[i] != 0) {
			return 1;
		}
	}
	return 0;
}

// rows_run drives x until every table shard is done: sending, taking
// replies, re-fetching the map, backing off. On an error every rows
// request in flight is cancelled and waited for.
static int
rows_run(ferry_client *c, struct rowsx *x)
{
	int rv = FERRY_OK;
	for (;;) {
		if (!x->refetch && !x->backoff &&
		    (rv = rows_send(c, x)) != FERRY_OK) {
			break;
		}
		if (rows_busy(c) == 0) {
			if (!owed(c)) {
				return FERRY_OK; // a newer map: the next call
			}
			if (x->refetch) {
				// The server may only be catching up with the
				// map held: re-send unless a later one exists.
				x->refetch = 0;
				if (ferry__map_newer(c) &&
				    ((rv = ferry__map_refetch(c)) !=
				            FERRY_OK ||
				        (rv = ferry__tables_route(c)) !=
				            FERRY_OK)) {
					break;
				}
				x->backoff = 1;
			}
			if (x->backoff) {
				x->backoff = 0;
				if (fb_clock_ms() >= x->deadline) {
					rv = ferry__fail(c, FERRY_ETIMEDOUT,
					    "Rows: deadline passed retrying");
					break;
				}
				fb_sleep_us(5000);
				continue;
			}
			rv = ferry__fail(c, FERRY_EPROTO,
			    "internal: table shards owed with no request");
			break;
		}
		if ((rv = reap(c, x)) != FERRY_OK) {
			break;
		}
	}
	rows_abort(c);
	return rv;
}

// count_stats adds a finished exchange's keys and rows to the tables'
// counters.
static void
count_stats(ferry_client *c, const struct rowsx *x)
{
	for (size_t j = 0; j < x->n_push; j++) {
		c->tables[x->push[j].table].stats.keys_pushed += x->push[j].n;
	}
	for (size_t j = 0; j < x->n_pull; j++) {
		c->tables[x->pull[j].table].stats.keys_pulled += x->pull[j].n;
	}
	for (size_t u = 0; u < c->dd_push.n; u++) {
		c->tables[c->dd_push.table[u]].stats.rows_pushed++;
	}
	for (size_t u = 0; u < c->dd_pull.n; u++) {
		c->tables[c->dd_pull.table[u]].stats.rows_pulled++;
	}
}

// rows_finish runs x to its end and hands the rows to the caller.
static int
rows_finish(ferry_client *c, struct rowsx *x)
{
	int rv;
	// A dense exchange in between may have installed a newer map.
	if ((rv = ferry__tables_route(c)) != FERRY_OK ||
	    (rv = rows_run(c, x)) != FERRY_OK) {
		rows_abort(c);
		return rv;
	}
	ferry__dedup_scatter(&c->dd_pull, c->tables, x->pull, x->n_pull);
	count_stats(c, x);
	if (c->lockstep && x->pushing) {
		c->rows_version++;
	}
	return FERRY_OK;
}

// check_client accepts a declared client with no layer-wise push-pull in
// progress.
static int
check_client(ferry_client *c)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return ferry__fail(c, FERRY_ESTATE,
		    "declare the tensors first");
	}
	if (c->ax_n_started > 0) {
		return ferry__fail(c, FERRY_ESTATE,
		    "a layer-wise push-pull is in progress: wait for every "
		    "started tensor first (ferry_client_wait)");
	}
	return FERRY_OK;
}

// learn_version (lockstep) asks every table shard its version, with a
// pull block of no key and version 0 (answered at once), and holds the
// highest: a rank that joined a running or restored job, one whose push
// the servers found behind, or one after a rollback then pushes the round
// the servers are in. (Every rank pushes every table shard each round, so
// they share one version; a shard re-placed empty answers 0 and takes the
// version of its first push.)
static int
learn_version(ferry_client *c)
{
	struct rowsx x = { .probe = 1 };
	uint64_t     v = 0;
	int          rv;
	if ((rv = prepare(c, &x)) != FERRY_OK) {
		return rv;
	}
	x.deadline = fb_clock_ms() + ferry__timeout(c);
	if ((rv = rows_send(c, &x)) != FERRY_OK ||
	    (rv = rows_run(c, &x)) != FERRY_OK) {
		rows_abort(c);
		return rv;
	}
	for (size_t i = 0; i < c->n_tshards; i++) {
		v = c->rver[i] > v ? c->rver[i] : v;
	}
	c->rows_version = v;
	c->rows_probe   = 0;
	return FERRY_OK;
}

// rows_begin checks and prepares x and sends its first requests.
static int
rows_begin(ferry_client *c, struct rowsx *x)
{
	int rv;
	if (x->pushing && x->n_samples == 0) {
		return ferry__fail(c, FERRY_EINVAL, "n_samples must be > 0");
	}
	// The caller's blocks are checked before the version is learnt: a
	// bad argument is refused without a word to the servers.
	if ((rv = check_blocks(c, x->push, x->n_push, 0)) != FERRY_OK ||
	    (rv = check_blocks(c, x->pull, x->n_pull, 1)) != FERRY_OK) {
		return rv;
	}
	if (c->lockstep && c->rows_probe &&
	    (rv = learn_version(c)) != FERRY_OK) {
		return rv;
	}
	if ((rv = prepare(c, x)) != FERRY_OK) {
		return rv;
	}
	x->deadline = fb_clock_ms() + ferry__timeout(c);
	x->refetch = x->backoff = 0;
	if ((rv = rows_send(c, x)) != FERRY_OK) {
		rows_abort(c);
	}
	return rv;
}

FERRY_API int
ferry_client_rows_pull(ferry_client *c, struct ferry_rows *r, size_t n_blocks)
{
	struct rowsx x = { .pull = r, .n_pull = n_blocks };
	int          rv;
	if ((rv = check_client(c)) != FERRY_OK ||
	    (rv = rows_begin(c, &x)) != FERRY_OK) {
		return rv;
	}
	return rows_finish(c, &x);
}

FERRY_API int
ferry_client_rows_push_pull(ferry_client *c, const struct ferry_rows *push,
    size_t n_push, uint32_t n_samples, struct ferry_rows *pull, size_t n_pull)
{
	struct rowsx x = {
		.push      = push,
		.n_push    = n_push,
		.n_samples = n_samples,
		.pushing   = 1,
		.pull      = pull,
		.n_pull    = n_pull,
	};
	int rv;
	if ((rv = check_client(c)) != FERRY_OK ||
	    (rv = rows_begin(c, &x)) != FERRY_OK) {
		return rv;
	}
	return rows_finish(c, &x);
}

// ferry_client_step checks the dense arguments before anything is sent (a
// refusal after the rows went out would leave a sync round half pushed),
// sends the rows requests, runs the dense push-pull while they are in
// flight, then takes the rows replies. A dense failure cancels the rows
// requests still in flight.
FERRY_API int
ferry_client_step(ferry_client *c, const float *const *g, uint32_t n_samples,
    float *const *w, const struct ferry_rows *push, size_t n_push,
    struct ferry_rows *pull, size_t n_pull)
{
	struct rowsx x = {
		.push      = push,
		.n_push    = n_push,
		.n_samples = n_samples,
		.pushing   = 1,
		.pull      = pull,
		.n_pull    = n_pull,
	};
	int rv;
	if ((rv = check_client(c)) != FERRY_OK) {
		return rv;
	}
	if (g == NULL || (w == NULL && !c->has_sink)) {
		return ferry__fail(c, FERRY_EINVAL, "step: %s is NULL",
		    g == NULL ? "the gradient array" : "the weight array");
	}
	if ((rv = rows_begin(c, &x)) != FERRY_OK) {
		return rv;
	}
	if ((rv = ferry_client_push_pull(c, g, n_samples, w)) != FERRY_OK) {
		char msg[sizeof(c->err)];
		snprintf(msg, sizeof(msg), "%s", c->err);
		rows_abort(c);
		(void) ferry__fail(c, rv, "%s", msg);
		return rv;
	}
	return rows_finish(c, &x);
}

void
ferry__rows_close(ferry_client *c)
{
	if (c->conns != NULL) {
		rows_abort(c);
	}
	ferry__tables_free(c);
}
