// boot.c — the scheduler watch: the thread that registers this server with
// the scheduler, installs the first placement (until then requests get
// UNAVAILABLE), then watches for every later map epoch and hands it to
// ps__map_apply.
//
// DESIGN. The thread makes only short calls (1 s, or one heartbeat
// period when shorter) so that close is noticed quickly; a GetPlacement
// the scheduler parks until a new epoch exists is simply re-sent on
// timeout, and carries a deadline just past that wait so that the
// scheduler frees the abandoned call soon after (its REP contexts are
// finite). Between two waits it sends a Heartbeat when one is due
// (opts.heartbeat_ms): one socket, one request at a time, and the map
// watch stays as responsive as the heartbeat period. It owns the peer
// connections that moves use, and closes them when it exits.
#include "server_impl.h"

// heartbeat tells the scheduler that server s->index is alive. A lost or
// refused heartbeat is only logged at debug level: the scheduler judges.
static void
heartbeat(struct ps_server *s, nng_ctx ctx, nng_aio *aio, uint64_t rid,
    int wait_ms)
{
	Pswire__Header       h   = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l   = PSWIRE__LEAVE_REQUEST__INIT;
	ProtobufCMessage    *ph  = NULL;
	const char          *why = "";
	int                  rv;

	l.role        = PSWIRE__ROLE__ROLE_SERVER;
	l.id          = s->index;
	h.request_id  = rid;
	h.deadline_ms = (uint32_t) wait_ms;
	h.body_case   = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req   = &l;
	rv            = psw_call_header(s->auth, ctx, aio, &h.base,
	               PSWIRE__METHOD__HEARTBEAT, rid, wait_ms, &ph, &why);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_DEBUG, "boot", "heartbeat: %s",
		    why && *why ? why : fb_strerror(rv));
	}
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
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
	struct ps_peers   peers = { 0 };
	uint32_t          hb_ms = s->opts.heartbeat_ms;
	int      wait    = hb_ms > 0 && hb_ms < 1000 ? (int) hb_ms : 1000;
	uint64_t next_hb = 0;

	if (psw_req_open(s->tls, s->opts.scheduler_url, s->opts.max_msg, 50,
	        1000, &sock, &ctx, &aio) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "boot", "cannot dial scheduler %s",
		    s->opts.scheduler_url);
		return NULL;
	}
	// Register, then wait for the placement; retry while not closing.
	int registered = 0;
	while (!atomic_load(&s->closing)) {
		Pswire__Header          h  = PSWIRE__HEADER__INIT;
		Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
		Pswire__GetPlacementRequest gp =
		    PSWIRE__GET_PLACEMENT_REQUEST__INIT;
		ProtobufCMessage *ph  = NULL;
		const char       *why = "";
		uint8_t           method;

		if (registered && hb_ms > 0 && fb_clock_ms() >= next_hb) {
			next_hb = fb_clock_ms() + hb_ms;
			heartbeat(s, ctx, aio, rid++, wait);
		}
		h.request_id  = rid++;
		h.deadline_ms = s->opts.timeout_ms;
		if (!registered) {
			rr.role           = PSWIRE__ROLE__ROLE_SERVER;
			rr.url            = s->url;
			rr.capacity_bytes = s->opts.capacity;
			h.body_case       = PSWIRE__HEADER__BODY_REGISTER_REQ;
			h.register_req    = &rr;
			method            = PSWIRE__METHOD__REGISTER;
		} else {
			// Watch for the next map: the first (epoch 1),
			// then every re-placement.
			gp.min_epoch    = s->pl ? s->pl->epoch + 1 : 1;
			h.deadline_ms   = (uint32_t) wait + 500;
			h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
			h.placement_req = &gp;
			method          = PSWIRE__METHOD__GET_PLACEMENT;
		}
		// Short timeouts so that close is noticed quickly; the
		// parked GetPlacement is simply re-sent.
		rv = psw_call_header(s->auth, ctx, aio, &h.base, method,
		    h.request_id, wait, &ph, &why);
		if (rv == FB_ENOMEM) {
			break;
		}
		if (rv == FB_OK && !registered) {
			Pswire__Header *rh = (Pswire__Header *) ph;
			if (rh->body_case ==
			    PSWIRE__HEADER__BODY_REGISTER_REP) {
				// Read by the stats and /debug/state under mu.
				pthread_mutex_lock(&s->mu);
				s->index = rh->register_rep->id;
				s->late  = rh->register_rep->late;
				pthread_mutex_unlock(&s->mu);
				psw_auth_set_self(s->auth, PSW_ROLE_SERVER,
				    rh->register_rep->id);
				registered = 1;
				FB_LOG(FB_LOG_NOTICE, "boot",
				    "registered as server %u", s->index);
			}
		} else if (rv == FB_OK) {
			Pswire__Header *rh = (Pswire__Header *) ph;
			if (rh->body_case == PSWIRE__HEADER__BODY_PLACEMENT) {
				Pswire__Placement *pl = rh->placement;
				rh->placement         = NULL; // keep it
				rh->body_case = PSWIRE__HEADER__BODY__NOT_SET;
				if (s->pl == NULL) {
					pthread_mutex_lock(&s->mu);
					rv = ps__map_install(s, pl);
					if (rv == FB_OK) {
						atomic_store(&s->ready, 1);
					}
					pthread_mutex_unlock(&s->mu);
				} else {
					rv = ps__map_apply(s, pl, &peers);
				}
				if (rv != FB_OK) {
					FB_LOG(FB_LOG_ERR, "boot",
					    "cannot install placement: %s",
					    fb_strerror(rv));
					pswire__placement__free_unpacked(pl,
					    NULL);
					if (s->pl == NULL) {
						// No first map: stop
						// (the reply is freed here,
						// the loop's end is skipped).
						pswire__header__free_unpacked(
						    rh, NULL);
						break;
					}
				}
			}
		} else if (rv == FB_EREMOTE && registered &&
		    ((Pswire__Header *) ph)->status ==
		        PSWIRE__STATUS__DEADLINE_EXCEEDED) {
			// The scheduler expired the parked watch: re-send.
		} else if (rv == FB_EREMOTE) {
			FB_LOG(FB_LOG_ERR, "boot", "scheduler refused: %s",
			    why);
			fb_sleep_us(1000000);
		} else if (rv != FB_ETIMEDOUT) {
			fb_sleep_us(100000);
		}
		if (ph != NULL) {
			pswire__header__free_unpacked((Pswire__Header *) ph,
			    NULL);
		}
	}
	ps__peers_close(&peers);
	nng_aio_free(aio);
	nng_close(sock);
	return NULL;
}
