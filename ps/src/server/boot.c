// boot.c — the scheduler watch: the thread that registers this server with
// the scheduler, installs the first placement (until then requests get
// UNAVAILABLE), then watches for every later map epoch and hands it to
// ps__map_apply.
//
// DESIGN. No reply is ever left in flight when the socket closes (nng
// 1.5.2 can then hang for good: PSW_ANSWER_MARGIN_MS, seen in CI): every
// call's deadline for the scheduler is shorter than the time this thread
// waits for its answer, so the scheduler answers each call, a parked
// GetPlacement with DEADLINE_EXCEEDED after PS_BOOT_PARK_MS (or one
// heartbeat period when shorter), and the watch re-sends it; and
// ps_server_close lets the call in flight end before the socket closes
// (it stops the call only when the scheduler has not answered by then).
// Heartbeats are not sent from here: applying a map can block on Transfers
// for seconds, so they have their own thread (heartbeat.c), which starts
// once Register gave this server its index. This thread owns the peer
// connections that moves use, and closes them when it exits.
#include "server_impl.h"

// The most snapshot versions a restart reports (snapshot.h keeps 2).
#define SNAP_KEEP_MAX 4

// nap waits ms milliseconds before a retry, in 10 ms slices so that a
// close is not held by it.
static void
nap(struct ps_server *s, int ms)
{
	for (int t = 0; t < ms && !atomic_load(&s->closing); t += 10) {
		fb_sleep_us(10000);
	}
}

// scan reads the versions of this server's snapshot files (its index
// known) into held, newest first, and returns how many there are.
static size_t
scan(struct ps_server *s, uint64_t *held)
{
	uint64_t v[2];
	size_t   n = 0;
	pthread_mutex_lock(&s->mu);
	ps__snap_scan(s, v);
	pthread_mutex_unlock(&s->mu);
	for (size_t k = 0; k < 2; k++) {
		if (v[k] != UINT64_MAX) {
			held[n++] = v[k];
		}
	}
	return n;
}

// map_next applies a later map: a rollback it orders first (so that no
// request under the new epoch sees the undone versions: until the map is
// applied they get UNAVAILABLE), then the moves.
static int
map_next(struct ps_server *s, Pswire__Placement *pl, struct ps_peers *peers)
{
	if (pl->rollback_gen > s->rollback_gen) {
		FB_LOG(FB_LOG_NOTICE, "boot",
		    "placement epoch %llu rolls the job back to version %llu",
		    (unsigned long long) pl->epoch,
		    (unsigned long long) pl->rollback_version);
		// A failure is logged; the shards keep their versions and
		// the trainers' pushes for the rollback version are refused
		// (OUT_OF_RANGE) rather than trained on wrong weights.
		(void) ps__snap_rollback(s, pl->rollback_version, pl->epoch);
		pthread_mutex_lock(&s->mu);
		s->rollback_gen = pl->rollback_gen;
		pthread_mutex_unlock(&s->mu);
	}
	return ps__map_apply(s, pl, peers);
}

// The watch's state between its calls (ps__boot_main's loop). A server
// restarted in a running job with snapshots on disk registers twice:
// first to learn its index (which names its files), then with the
// versions they hold, so that the scheduler can roll the job back to one
// every server holds.
struct boot {
	int             registered, scanned, restarted;
	uint64_t        held[SNAP_KEEP_MAX];
	size_t          n_held;
	// A restart from snapshots: the first map to install is the one
	// that rolls the job back (epoch >= first_epoch, rollback_gen >
	// first_gen).
	uint64_t        first_epoch, first_gen;
	struct ps_peers peers;
};

// call_next sends the watch's next call, request id rid with the
// scheduler's deadline wait_ms, answered within answer_ms: Register until
// registered, then a GetPlacement for the next map. Returns as
// psw_call_header, the reply in *ph and a refusal's reason in *why.
static int
call_next(struct ps_server *s, const struct boot *b, nng_ctx ctx, nng_aio *aio,
    uint64_t rid, int wait_ms, int answer_ms, ProtobufCMessage **ph,
    const char **why)
{
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest     rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	uint8_t                     method;

	h.request_id  = rid;
	h.deadline_ms = (uint32_t) wait_ms;
	if (!b->registered) {
		rr.role                = PSWIRE__ROLE__ROLE_SERVER;
		rr.url                 = s->url;
		rr.capacity_bytes      = s->opts.capacity;
		rr.has_snapshots       = s->snap != NULL;
		rr.restarted           = b->restarted;
		rr.slot                = s->opts.server_index >= 0
		                   ? (uint32_t) s->opts.server_index + 1
		                   : 0;
		rr.snapshot_versions   = (uint64_t *) b->held;
		rr.n_snapshot_versions = b->n_held;
		h.body_case            = PSWIRE__HEADER__BODY_REGISTER_REQ;
		h.register_req         = &rr;
		method                 = PSWIRE__METHOD__REGISTER;
	} else {
		// Watch for the next map: the first (epoch 1), then every
		// re-placement.
		gp.min_epoch    = s->pl ? s->pl->epoch + 1
		       : b->first_epoch ? b->first_epoch
		                        : 1;
		h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
		h.placement_req = &gp;
		method          = PSWIRE__METHOD__GET_PLACEMENT;
	}
	// Short waits so that close is noticed quickly; the expired
	// GetPlacement is simply re-sent.
	return psw_call_header(s->auth, ctx, aio, &h.base, method,
	    h.request_id, answer_ms, ph, why);
}

// on_registered takes the scheduler's answer rh to Register: this
// server's index, whether the job runs, and for a restart from snapshots
// the map to wait for; a server restarted with a snapshot dir registers
// again, with the versions it holds (none: the scheduler says the job
// cannot go on).
static void
on_registered(struct ps_server *s, struct boot *b, const Pswire__Header *rh)
{
	if (rh->body_case != PSWIRE__HEADER__BODY_REGISTER_REP) {
		return;
	}
	// Read by the stats and /debug/state under mu.
	pthread_mutex_lock(&s->mu);
	s->index       = rh->register_rep->id;
	s->late        = rh->register_rep->late;
	b->first_epoch = rh->register_rep->wait_epoch;
	b->first_gen   = rh->register_rep->rollback_gen;
	if (!s->audit_set) {
		// Spot checks (audit.c): set up with the first map.
		s->audit_rate = rh->register_rep->audit_rate;
		s->audit_key  = rh->register_rep->audit_key;
	}
	pthread_mutex_unlock(&s->mu);
	psw_auth_set_self(s->auth, PSW_ROLE_SERVER, rh->register_rep->id);
	atomic_store(&s->hb_index, (int) rh->register_rep->id); // heartbeat.c
	b->registered = 1;
	FB_LOG(FB_LOG_NOTICE, "boot", "registered as server %u%s", s->index,
	    s->late ? " (the job is running)" : "");
	if (!b->scanned) {
		b->scanned    = 1;
		b->n_held     = scan(s, b->held);
		b->restarted  = s->late && s->snap != NULL;
		b->registered = !b->restarted;
	}
}

// Contexts kept beyond one per trainer: pulls, probes, stats, Transfers
// and Replicates of the other servers.
#define PS_CTX_SPARE 64

// fit_contexts grows the rpc's contexts, once the first map told
// s->trainers, when the trainers are more than half of --contexts: to one
// per trainer and a spare, as the three quarters one host may hold. Before
// the server serves the map; mu not held.
static void
fit_contexts(struct ps_server *s)
{
	// A sync push-pull holds its context until its round closes, so
	// every trainer holds one at once (libferry keeps 128 / trainers
	// requests in flight per server, at least one: exchange.c), and
	// trainers that share a host may hold three quarters of the
	// contexts (rpc.h LIMITS). --contexts 256 fits 128 trainers; past
	// half the contexts the job would stall (or be refused) on its
	// first round, so the server makes room for a context per trainer
	// and the spare, as a host's three quarters.
	int want = (int) (((uint64_t) s->trainers + PS_CTX_SPARE) * 4 / 3 + 1);
	int have = ps__rpc_contexts(s->rpc);
	if (s->trainers <= (uint32_t) s->opts.contexts / 2 || want <= have) {
		return;
	}
	int rv = ps__rpc_grow(s->rpc, want);
	FB_LOG(rv == FB_OK ? FB_LOG_INFO : FB_LOG_WARN, "server",
	    "%d contexts for %u trainers (--contexts %d)%s",
	    ps__rpc_contexts(s->rpc), s->trainers, s->opts.contexts,
	    rv == FB_OK ? "" : ": out of memory for more");
}

// on_placement installs the map a GetPlacement answered with (rh keeps
// it no longer): the first, or a later one. Returns 0, or -1 when the
// first map cannot be installed: the watch stops.
static int
on_placement(struct ps_server *s, struct boot *b, Pswire__Header *rh)
{
	Pswire__Placement *pl;
	int                rv = FB_OK;

	if (rh->body_case != PSWIRE__HEADER__BODY_PLACEMENT) {
		return 0;
	}
	pl            = rh->placement;
	rh->placement = NULL; // keep it
	rh->body_case = PSWIRE__HEADER__BODY__NOT_SET;
	if (s->pl == NULL && b->first_epoch != 0 &&
	    pl->rollback_gen <= b->first_gen) {
		// Published before the rollback: not this restart's map.
		b->first_epoch = pl->epoch + 1;
		pswire__placement__free_unpacked(pl, NULL);
	} else if (s->pl == NULL) {
		pthread_mutex_lock(&s->mu);
		rv = ps__map_install(s, pl);
		if (rv == FB_OK && ps__audit_open(s) != FB_OK) {
			// The job runs; this server keeps nothing to verify.
			FB_LOG(FB_LOG_ERR, "audit",
			    "out of memory for --audit-keep %u kept pushes: "
			    "spot checks off on this server",
			    s->opts.audit_keep);
		}
		pthread_mutex_unlock(&s->mu);
		if (rv == FB_OK) {
			// Room for the trainers' parked calls before they come
			// (s->trainers is set once, by the install).
			fit_contexts(s);
			atomic_store(&s->ready, 1);
		}
	} else {
		rv = map_next(s, pl, &b->peers);
	}
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, "boot", "cannot install placement: %s",
		    fb_strerror(rv));
		pswire__placement__free_unpacked(pl, NULL);
		if (s->pl == NULL) {
			return -1; // no first map: stop
		}
	}
	return 0;
}

void *
ps__boot_main(void *arg)
{
	struct ps_server *s = arg;
	nng_socket        sock;
	nng_ctx           ctx;
	nng_aio          *aio = NULL;
	uint64_t          rid = 1;
	int               rv;
	struct boot       b     = { 0 };
	uint32_t          hb_ms = s->opts.heartbeat_ms;
	// wait: the scheduler's deadline for a call; the thread waits
	// PSW_ANSWER_MARGIN_MS longer for its answer.
	int wait      = hb_ms > 0 && hb_ms < PS_BOOT_PARK_MS ? (int) hb_ms
	                                                     : PS_BOOT_PARK_MS;
	int answer_ms = wait + PSW_ANSWER_MARGIN_MS;

	if (psw_req_open(s->tls, s->opts.scheduler_url, s->opts.max_msg, 50,
	        1000, &sock, &ctx, &aio) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "boot", "cannot dial scheduler %s",
		    s->opts.scheduler_url);
		atomic_store(&s->boot_done, 1);
		return NULL;
	}
	pthread_mutex_lock(&s->boot_mu);
	s->boot_aio = aio; // ps_server_close may stop it from now on
	pthread_mutex_unlock(&s->boot_mu);
	// Register, then wait for the placement; retry while not closing.
	while (!atomic_load(&s->closing)) {
		ProtobufCMessage *ph  = NULL;
		const char       *why = "";

		rv = call_next(s, &b, ctx, aio, rid++, wait, answer_ms, &ph,
		    &why);
		if (rv == FB_ENOMEM) {
			break;
		}
		if (rv == FB_OK && !b.registered) {
			on_registered(s, &b, (Pswire__Header *) ph);
		} else if (rv == FB_OK) {
			if (on_placement(s, &b, (Pswire__Header *) ph) != 0) {
				pswire__header__free_unpacked(
				    (Pswire__Header *) ph, NULL);
				break;
			}
		} else if (rv == FB_EREMOTE && b.registered &&
		    ((Pswire__Header *) ph)->status ==
		        PSWIRE__STATUS__DEADLINE_EXCEEDED) {
			// The scheduler expired the parked watch: re-send.
		} else if (rv == FB_EREMOTE) {
			FB_LOG(FB_LOG_ERR, "boot", "scheduler refused: %s",
			    why);
			nap(s, 1000);
		} else if (rv != FB_ETIMEDOUT) {
			nap(s, 100);
		}
		if (ph != NULL) {
			pswire__header__free_unpacked((Pswire__Header *) ph,
			    NULL);
		}
	}
	ps__peers_close(&b.peers);
	pthread_mutex_lock(&s->boot_mu);
	s->boot_aio = NULL;
	pthread_mutex_unlock(&s->boot_mu);
	nng_aio_free(aio);
	nng_close(sock);
	atomic_store(&s->boot_done, 1);
	return NULL;
}
