// moves.c — re-placement: applying a later placement map (which shards
// leave, which arrive), the REQ connections to peer servers that carry the
// Transfers, and ps_server_leave, which waits for this server's shards to
// be delivered elsewhere.
//
// DESIGN. When the scheduler publishes a new map, the boot thread (which
// watches for maps) calls ps__map_apply. Under the lock it marks the shards
// that leave LEAVING (new requests for them are refused with STALE_EPOCH or
// UNAVAILABLE, so clients re-fetch the map or retry), waits for pushes
// that are decoding into those shards outside the lock (on s->decoded,
// which push_commit signals), then serialises each leaving shard with its
// full state (weights, pull reference, delta log, version and the pushes
// staged for the current version) and frees it. Parked pulls on a
// leaving shard are answered ABORTED ("your push was applied; pull again
// from the new server") or STALE_EPOCH. Shards that arrive are marked
// ARRIVING until their Transfer comes (requests get UNAVAILABLE
// meanwhile). Outside the lock it sends the Transfers to the new servers,
// retrying while a receiver cannot be reached. A shard that a later map
// moved on while its Transfer was in flight (the receiver marks an
// ARRIVING shard placed elsewhere ABSENT and answers STALE_EPOCH) is
// followed: the sender fetches the later map from the scheduler and
// re-sends, stamped with that map's epoch, to the shard's owner there; a
// receiver accepts a Transfer stamped with a later map than its own.
// Every push is thus applied exactly once: a refused request changed
// nothing, and the staged pushes travel with the shard. Table shards move
// the same way (rows_move.c packs them; their ids carry PS_TABLE_ID). Each
// delivered (or abandoned) Transfer signals s->delivered, on which a leaving
// server waits.
#include <string.h>
#include <time.h>

#include "server_impl.h"

void
ps__peers_close(struct ps_peers *p)
{
	for (size_t i = 0; i < p->n; i++) {
		if (p->open[i]) {
			// The socket first: its pipe events use the aio.
			nng_close(p->sock[i]);
			nng_aio_free(p->aio[i]);
			ps__peer_watch_free(p->watch[i]);
		}
	}
	fb_free(p->watch);
	fb_free(p->sock);
	fb_free(p->ctx);
	fb_free(p->aio);
	fb_free(p->open);
	memset(p, 0, sizeof(*p));
}

// peer_get makes sure p has an open REQ context to server m (opened on
// first use, p's arrays grown to the map's server count). FB_ENOMEM,
// FB_ETRANSPORT.
static int
peer_get(struct ps_server *s, struct ps_peers *p, const Pswire__Placement *pl,
    size_t m)
{
	if (m >= p->n) {
		size_t      n  = pl->n_servers;
		nng_socket *so = fb_realloc(p->sock, n * sizeof(*so));
		if (so != NULL) {
			p->sock = so;
		}
		nng_ctx *cx = fb_realloc(p->ctx, n * sizeof(*cx));
		if (cx != NULL) {
			p->ctx = cx;
		}
		nng_aio **ai = fb_realloc(p->aio, n * sizeof(*ai));
		if (ai != NULL) {
			p->aio = ai;
		}
		struct ps_peer_watch **wa = fb_realloc(p->watch,
		    n * sizeof(*wa));
		if (wa != NULL) {
			p->watch = wa;
		}
		uint8_t *op = fb_realloc(p->open, n);
		if (op != NULL) {
			p->open = op;
		}
		if (so == NULL || cx == NULL || ai == NULL || wa == NULL ||
		    op == NULL) {
			return FB_ENOMEM;
		}
		memset(p->open + p->n, 0, n - p->n);
		p->n = n;
	}
	if (!p->open[m]) {
		if (ps__peer_watch_open(s, pl->servers[m], &p->sock[m],
		        &p->ctx[m], &p->aio[m], &p->watch[m]) != FB_OK) {
			return FB_ETRANSPORT;
		}
		p->open[m] = 1;
		// Signed for server m alone (auth.c).
		if (psw_auth_set_peer(s->auth, p->ctx[m], PSW_ROLE_SERVER,
		        (uint32_t) m) != FB_OK) {
			return FB_ENOMEM;
		}
	}
	return FB_OK;
}

// map_same_cut checks that later map pl is valid and cuts the job into the
// same shards as the current one (shards are never re-cut). No lock
// needed: the shards' identity never changes.
static int
map_same_cut(const struct ps_server *s, const Pswire__Placement *pl)
{
	if (ps__map_check(pl) != FB_OK || pl->n_shards != s->n_global ||
	    pl->n_table_shards != s->n_tglobal || pl->epoch <= s->pl->epoch) {
		return FB_EPROTO;
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		if (pl->shards[i]->len != s->shards[i].len ||
		    pl->shards[i]->offset != s->shards[i].offset ||
		    pl->shards[i]->tensor != s->shards[i].tensor) {
			return FB_EPROTO;
		}
	}
	return FB_OK;
}

// in_list reports whether server m is among the n entries of b.
static int
in_list(const uint32_t *b, size_t n, uint32_t m)
{
	for (size_t k = 0; k < n; k++) {
		if (b[k] == m) {
			return 1;
		}
	}
	return 0;
}

// map_mark_backup applies map pl to shard i where replicas are concerned
// and reports whether it did: a backup held here is promoted (pl makes
// this server its primary: it holds every acknowledged version), kept, or
// dropped; a shard pl newly backs up here is ARRIVING until its primary's
// rebuild copy comes. mu held.
static int
map_mark_backup(struct ps_server *s, const Pswire__Placement *pl, size_t i)
{
	const Pswire__ShardInfo *si = pl->shards[i];
	struct srv_shard        *sh = &s->shards[i];
	int mine_b = in_list(si->backups, si->n_backups, s->index);
	if (s->local[i] >= 0 && sh->backup) {
		if (si->server == s->index) {
			sh->backup = 0;
			s->n_backup_shards--;
			s->n_shards++;
			FB_LOG(FB_LOG_NOTICE, "replica",
			    "shard %zu: promoted from backup to primary at "
			    "version %llu (epoch %llu)",
			    i, (unsigned long long) sh->version,
			    (unsigned long long) pl->epoch);
		} else if (!mine_b) {
			ps__shard_release(s, sh);
			s->local[i] = PS_SHARD_ABSENT;
			s->n_backup_shards--;
		}
		return 1;
	}
	if (mine_b &&
	    (s->local[i] == PS_SHARD_ABSENT ||
	        s->local[i] == PS_SHARD_ARRIVING)) {
		s->local[i] = PS_SHARD_ARRIVING;
		return 1;
	}
	return 0;
}

// map_rebuilds packs a rebuild copy of every shard this server is the
// primary of in pl for each backup pl names that the old map did not
// (the replacement of a dead one) into out[] from n_out on (with dest[],
// ids[]), and returns the new count. A copy that cannot be packed is
// logged: that backup stays missing. mu held.
static size_t
map_rebuilds(struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl, nng_msg **out, uint32_t *dest, uint32_t *ids,
    size_t n_out, size_t cap)
{
	for (size_t i = 0; i < s->n_global; i++) {
		const Pswire__ShardInfo *si = pl->shards[i];
		const Pswire__ShardInfo *so = old->shards[i];
		// A shard being re-seeded has no values to copy yet: its
		// new backups are rebuilt by the resync after it opens (their
		// first Replicate finds them behind).
		if (s->local[i] < 0 || s->shards[i].backup ||
		    s->shards[i].seeding || si->server != s->index) {
			continue;
		}
		for (size_t k = 0; k < si->n_backups && n_out < cap; k++) {
			uint32_t b = si->backups[k];
			if (b == so->server ||
			    in_list(so->backups, so->n_backups, b)) {
				continue; // it holds the shard already
			}
			if (ps__transfer_encode(s, &s->shards[i], 1,
			        &out[n_out]) != FB_OK) {
				FB_LOG(FB_LOG_ERR, "replica",
				    "shard %zu: out of memory packing the "
				    "copy for new backup %u",
				    i, b);
				continue;
			}
			ids[n_out]    = (uint32_t) i;
			dest[n_out++] = b;
			atomic_fetch_add(&s->transfers, 1);
			FB_LOG(FB_LOG_NOTICE, "replica",
			    "shard %zu: rebuilding a backup on server %u at "
			    "version %llu",
			    i, b, (unsigned long long) s->shards[i].version);
		}
	}
	return n_out;
}

// map_mark installs map pl, its quarantined trainers and its set of
// departed trainers (an absence may complete a round), then marks the
// shards that leave LEAVING and those that arrive ARRIVING. mu held.
static void
map_mark(struct ps_server *s, Pswire__Placement *pl)
{
	s->pl = pl;
	// Quarantined trainers (issue 31) are refused from this map on.
	ps__rpc_quarantine(s->rpc, pl->quarantined, pl->n_quarantined);
	// Trainers that left (or came back: pending in a sync job, their
	// clocks raised in an SSP one): an absence may complete a round.
	ps__ranks_map(s, pl, 0);
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0 && ps__shard_complete(s, &s->shards[i])) {
			ps__shard_apply_sync(s, &s->shards[i]);
		}
	}
	ps__pull_wake(s);
	for (size_t i = 0; i < s->n_global; i++) {
		uint32_t  to = pl->shards[i]->server;
		uint32_t *ow = s->owners + i * PS_OWNERS_SEEN;
		if (ow[0] != to) {
			memmove(ow + 1, ow,
			    (PS_OWNERS_SEEN - 1) * sizeof(*ow));
			ow[0] = to;
		}
		if (map_mark_backup(s, pl, i)) {
			continue;
		}
		if (s->local[i] >= 0 && to != s->index) {
			s->local[i] = PS_SHARD_LEAVING;
		} else if (s->local[i] == PS_SHARD_ABSENT && to == s->index) {
			s->local[i] = PS_SHARD_ARRIVING;
		} else if (s->local[i] == PS_SHARD_ARRIVING &&
		    to != s->index) {
			// Still in flight from the previous owner, and
			// already placed elsewhere: its Transfer is refused
			// with STALE_EPOCH and its sender re-routes it.
			s->local[i] = PS_SHARD_ABSENT;
		}
	}
}

// leaving_busy reports whether a push is still decoding into a leaving
// shard (outside the lock). mu held.
static int
leaving_busy(const struct ps_server *s)
{
	int busy = 0;
	for (size_t i = 0; i < s->n_global && !busy; i++) {
		for (uint32_t r = 0;
		     s->local[i] == PS_SHARD_LEAVING && r < s->trainers; r++) {
			busy |= s->shards[i].state[r] == PS_SLOT_DECODING;
		}
		// Its backups acknowledge the last version before it leaves.
		busy |= s->local[i] == PS_SHARD_LEAVING &&
		    s->shards[i].fwd_pending > 0;
	}
	return busy;
}

// map_pack serialises every leaving shard into out[] (its new server in
// dest[], its id in ids[]) and frees it; a shard that cannot be
// serialised stays here. Returns how many were packed. mu held.
static size_t
map_pack(struct ps_server *s, const Pswire__Placement *pl, nng_msg **out,
    uint32_t *dest, uint32_t *ids)
{
	size_t n_out = 0;
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] != PS_SHARD_LEAVING) {
			continue;
		}
		struct srv_shard *sh = &s->shards[i];
		if (ps__transfer_encode(s, sh, 0, &out[n_out]) != FB_OK) {
			// Keep the shard rather than lose it; it stays
			// served here under its old ownership.
			FB_LOG(FB_LOG_ERR, "move",
			    "shard %zu: out of memory "
			    "serialising it; it stays here",
			    i);
			s->local[i] = (int32_t) i;
			continue;
		}
		ids[n_out]    = (uint32_t) i;
		dest[n_out++] = pl->shards[i]->server;
		atomic_fetch_add(&s->transfers, 1);
		obs_counter_add(s->moves_out, 1);
		ps__shard_release(s, sh);
		s->local[i] = PS_SHARD_ABSENT;
		s->n_shards--;
	}
	return n_out;
}

// map_fetch asks the scheduler for a map of epoch min_epoch or later
// (waiting up to 2 s for one to be published) and returns it in *out when
// it is valid and cuts the job as this server does. FB_OK, FB_ETIMEDOUT,
// FB_ETRANSPORT, FB_EPROTO. Boot thread; mu not held.
static int
map_fetch(struct ps_server *s, uint64_t min_epoch, Pswire__Placement **out)
{
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	ProtobufCMessage           *ph = NULL;
	const char                 *why;
	nng_socket                  sock;
	nng_ctx                     ctx;
	nng_aio                    *aio;
	int                         rv;

	if (psw_req_open(s->tls, s->opts.scheduler_url, s->opts.max_msg, 0, 0,
	        &sock, &ctx, &aio) != FB_OK) {
		return FB_ETRANSPORT;
	}
	gp.min_epoch       = min_epoch;
	h.request_id       = 1;
	h.deadline_ms      = 2000;
	h.body_case        = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req    = &gp;
	rv                 = psw_call_header(s->auth, ctx, aio, &h.base,
	                    PSWIRE__METHOD__GET_PLACEMENT, 1, 2000, &ph, &why);
	Pswire__Header *rh = (Pswire__Header *) ph;
	if (rv == FB_OK) {
		Pswire__Placement *pl = rh->placement;
		rv                    = FB_EPROTO;
		if (rh->body_case == PSWIRE__HEADER__BODY_PLACEMENT &&
		    ps__map_check(pl) == FB_OK &&
		    pl->n_shards == s->n_global &&
		    pl->n_table_shards == s->n_tglobal &&
		    pl->epoch >= min_epoch) {
			rh->placement = NULL; // keep it
			rh->body_case = PSWIRE__HEADER__BODY__NOT_SET;
			*out          = pl;
			rv            = FB_OK;
		}
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	nng_aio_free(aio);
	nng_close(sock);
	return rv;
}

// transfer_reroute handles a STALE_EPOCH answer to the Transfer of shard
// id sent under map *route: the receiver holds a later map that places
// the shard elsewhere (the shard was moved on while in flight). It fetches
// that map, makes it *route (freeing a map it fetched before, *newer),
// points *to at the shard's owner there and re-stamps the Transfer with
// its epoch into *mine (the owner accepts a Transfer stamped with a map
// it has not seen yet; a Transfer to this very server comes back here).
// Returns FB_OK or the error. Boot thread; mu not held.
static int
transfer_reroute(struct ps_server *s, uint32_t id,
    const Pswire__Placement **route, Pswire__Placement **newer, uint32_t *to,
    nng_msg *m0, nng_msg **mine)
{
	Pswire__Placement *np = NULL;
	nng_msg           *m  = NULL;
	int                rv;

	if ((rv = map_fetch(s, (*route)->epoch + 1, &np)) != FB_OK) {
		return rv;
	}
	if ((rv = ps__transfer_restamp(m0, np->epoch, &m)) != FB_OK) {
		pswire__placement__free_unpacked(np, NULL);
		return rv;
	}
	if (*newer != NULL) {
		pswire__placement__free_unpacked(*newer, NULL);
	}
	nng_msg_free(*mine);
	*newer = np;
	*mine  = m;
	*route = np;
	*to    = (id & PS_TABLE_ID) != 0
	       ? np->table_shards[id & ~PS_TABLE_ID]->server
	       : np->shards[id]->server;
	FB_LOG(FB_LOG_NOTICE, "move",
	    "shard %u moved on while in flight: forwarding it to server %u "
	    "(epoch %llu)",
	    id, *to, (unsigned long long) np->epoch);
	return FB_OK;
}

// transfer_send delivers packed Transfer m0 of shard id to server `to`,
// retrying (for up to a minute, until closing) while the receiver cannot
// be reached (each try bounded: 1 s without a connection, at once when
// it closes; then a later map is looked for, where the scheduler may have
// sent the shard back here or elsewhere), and following the shard to its
// newest owner when a later map moved it on (STALE_EPOCH). Returns FB_OK, or
// the last error (logged by the caller). Boot thread; mu not held.
static int
transfer_send(struct ps_server *s, struct ps_peers *peers,
    const Pswire__Placement *pl, uint32_t id, uint32_t to, nng_msg *m0)
{
	uint64_t                 give_up = fb_clock_ms() + 60000;
	int                      rv      = FB_ETRANSPORT;
	const Pswire__Placement *route   = pl;
	Pswire__Placement       *newer   = NULL; // a later map, fetched
	nng_msg                 *mine    = NULL; // m0 re-stamped for it
	int                      warned  = 0;
	while (!atomic_load(&s->closing) && fb_clock_ms() < give_up) {
		struct psw_frame  f;
		ProtobufCMessage *ph  = NULL;
		const char       *why = "";
		nng_msg          *rep = NULL, *m;
		if ((rv = peer_get(s, peers, route, to)) != FB_OK ||
		    nng_msg_dup(&m, mine != NULL ? mine : m0) != 0) {
			fb_sleep_us(100000);
			continue;
		}
		// The request id sits in the packed header; the receiver
		// echoes it, so keep the one packed (1). A peer with no
		// connection within 1 s (gone: its address refuses) is not
		// waited on for the call's 5 s; a connection that closes
		// during the call ends it at once (transfer.c's watch).
		if (!ps__peer_connected(s, peers->watch[to], 1000)) {
			nng_msg_free(m);
			rv  = FB_ETRANSPORT;
			why = "no connection";
		} else {
			rv = psw_call(s->auth, peers->ctx[to], peers->aio[to],
			    m, PSWIRE__METHOD__TRANSFER, 1, 5000, &rep, &f,
			    &ph, &why);
		}
		if (rv == FB_ETRANSPORT || rv == FB_ETIMEDOUT) {
			// Gone or stopped: the scheduler re-plans the move
			// when it declares the peer dead; follow its map.
			if (!warned++) {
				FB_LOG(FB_LOG_WARN, "move",
				    "shard %u: server %u unreachable (%s); "
				    "following later maps",
				    id, to, why ? why : fb_strerror(rv));
			}
			(void) transfer_reroute(s, id, &route, &newer, &to, m0,
			    &mine);
		}
		Pswire__Header *rh          = (Pswire__Header *) ph;
		int             unavailable = rv == FB_EREMOTE &&
		    rh->status == PSWIRE__STATUS__UNAVAILABLE;
		int stale = rv == FB_EREMOTE &&
		    rh->status == PSWIRE__STATUS__STALE_EPOCH;
		if (stale) {
			int r2 = transfer_reroute(s, id, &route, &newer, &to,
			    m0, &mine);
			if (r2 != FB_OK) {
				FB_LOG(FB_LOG_WARN, "move",
				    "shard %u: no later map to follow yet "
				    "(%s); retrying",
				    id, fb_strerror(r2));
			}
			unavailable = 1; // send again, to the new owner
		}
		if (rv == FB_EREMOTE && !unavailable) {
			FB_LOG(FB_LOG_ERR, "move",
			    "transfer to server %u refused: %s", to,
			    rh->error);
		}
		if (rh != NULL) {
			pswire__header__free_unpacked(rh, NULL);
		}
		if (rep != NULL) {
			nng_msg_free(rep);
		}
		if (rv == FB_OK || (rv == FB_EREMOTE && !unavailable)) {
			break;
		}
		fb_sleep_us(20000);
	}
	nng_msg_free(mine);
	if (newer != NULL) {
		pswire__placement__free_unpacked(newer, NULL);
	}
	return rv;
}

int
ps__map_apply(struct ps_server *s, Pswire__Placement *pl,
    struct ps_peers *peers)
{
	Pswire__Placement *old = s->pl;
	nng_msg          **out;
	uint32_t          *dest, *ids;
	size_t             n_out;

	if (map_same_cut(s, pl) != FB_OK) {
		return FB_EPROTO;
	}
	// Leaving shards, then rebuild copies for new backups.
	size_t cap = s->n_global * (s->replicated ? 1 + PS_MAX_BACKUPS : 1) +
	    s->n_tglobal;
	out  = fb_zalloc(cap * sizeof(*out));
	dest = fb_zalloc(cap * sizeof(*dest));
	ids  = fb_zalloc(cap * sizeof(*ids));
	if (out == NULL || dest == NULL || ids == NULL) {
		fb_free(out);
		fb_free(dest);
		fb_free(ids);
		return FB_ENOMEM;
	}
	pthread_mutex_lock(&s->mu);
	map_mark(s, pl);
	ps__repl_map(s);          // forwards to dropped backups end
	ps__seed_map(s, old, pl); // lost shards placed here: re-seeded
	ps__rows_map(s, old, pl); // table shards: rounds, re-placed ones
	// Pushes still decoding into a leaving shard finish first.
	while (leaving_busy(s)) {
		pthread_cond_wait(&s->decoded, &s->mu);
	}
	// Parked calls on leaving shards cannot be answered here any more.
	ps__pull_abort_leaving(s, pl->epoch);
	n_out        = map_pack(s, pl, out, dest, ids);
	size_t n_mov = n_out;
	n_out        = map_rebuilds(s, old, pl, out, dest, ids, n_out, cap);
	size_t n_reb = n_out - n_mov;
	n_out        = ps__rows_pack(s, old, out, dest, ids, n_out, cap);
	FB_LOG(FB_LOG_NOTICE, "move",
	    "placement epoch %llu: %zu shard(s) and %zu table shard(s) "
	    "leave, %zu backup(s) to rebuild, holding %u (and %u backups)",
	    (unsigned long long) pl->epoch, n_mov, n_out - n_mov - n_reb,
	    n_reb, s->n_shards, s->n_backup_shards);
	pthread_mutex_unlock(&s->mu);
	// The old map may still be referenced by nothing now: requests read
	// s->pl under the lock only.
	pswire__placement__free_unpacked(old, NULL);

	for (size_t k = 0; k < n_out; k++) {
		int rv = transfer_send(s, peers, pl, ids[k], dest[k], out[k]);
		if (rv != FB_OK) {
			FB_LOG(FB_LOG_ERR, "move",
			    "shard transfer to server %u failed: %s", dest[k],
			    fb_strerror(rv));
		}
		// Delivered or given up: a leaving server may be waiting.
		pthread_mutex_lock(&s->mu);
		atomic_fetch_sub(&s->transfers, 1);
		pthread_cond_broadcast(&s->delivered);
		pthread_mutex_unlock(&s->mu);
		nng_msg_free(out[k]);
	}
	fb_free(out);
	fb_free(dest);
	fb_free(ids);
	return FB_OK;
}

// wait_delivered waits until this server holds no shard and every packed
// shard has been delivered, or until fb_clock_ms() reaches end. Returns
// FB_OK or FB_ETIMEDOUT (with *left, the shards still here). Takes mu.
static int
wait_delivered(struct ps_server *s, uint64_t end, uint32_t *left)
{
	struct timespec ts = {
		.tv_sec  = (time_t) (end / 1000),
		.tv_nsec = (long) (end % 1000) * 1000000L,
	};
	int rv;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		// Done when nothing is held and every packed shard has been
		// delivered (closing earlier would cut the transfers short).
		*left = s->n_shards + s->n_tshards +
		    (uint32_t) atomic_load(&s->transfers);
		if (*left == 0) {
			rv = FB_OK;
			break;
		}
		if (fb_clock_ms() >= end) {
			rv = FB_ETIMEDOUT;
			break;
		}
		// s->delivered runs on CLOCK_MONOTONIC, as fb_clock_ms does.
		pthread_cond_timedwait(&s->delivered, &s->mu, &ts);
	}
	pthread_mutex_unlock(&s->mu);
	return rv;
}

int
ps_server_leave(struct ps_server *s, uint32_t timeout_ms)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	nng_socket           sock;
	nng_ctx              ctx;
	nng_aio             *aio = NULL;
	ProtobufCMessage    *ph  = NULL;
	const char          *why = "";
	uint64_t             end = fb_clock_ms() + timeout_ms;
	uint32_t             left;
	int                  rv;

	if (!atomic_load(&s->ready)) {
		return FB_ESTATE;
	}
	// Not ready from here on (/readyz): the shards are on their way out.
	atomic_store(&s->leaving, 1);
	if (psw_req_open(s->tls, s->opts.scheduler_url, 0, 0, 0, &sock, &ctx,
	        &aio) != FB_OK) {
		return FB_ETRANSPORT;
	}
	l.role        = PSWIRE__ROLE__ROLE_SERVER;
	l.id          = s->index;
	h.request_id  = 1;
	h.deadline_ms = timeout_ms;
	h.body_case   = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req   = &l;
	// A scheduler that is gone should not hold the shutdown for long.
	rv = psw_call_header(s->auth, ctx, aio, &h.base, PSWIRE__METHOD__LEAVE,
	    1, (int) (timeout_ms < 3000 ? timeout_ms : 3000), &ph, &why);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, "leave", "scheduler: %s", why ? why : "");
		goto done;
	}
	FB_LOG(FB_LOG_NOTICE, "leave", "leaving: moving my shards away");
	if ((rv = wait_delivered(s, end, &left)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "leave",
		    "%u shard(s) still here after %u ms", left, timeout_ms);
	}
done:
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
	nng_aio_free(aio);
	nng_close(sock);
	return rv;
}
