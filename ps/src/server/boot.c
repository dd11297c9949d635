// boot.c — the scheduler watch: the thread that registers this server with
// the scheduler, installs the first placement (until then requests get
// UNAVAILABLE), then watches for every later map epoch and hands it to
// ps__map_apply.
//
// DESIGN. The thread makes only short calls (1 s) so that close is noticed
// quickly; a GetPlacement the scheduler parks until a new epoch exists is
// simply re-sent on timeout. It owns the peer connections that moves use,
// and closes them when it exits.
#include "server_impl.h"

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

	if (psw_req_open(s->opts.scheduler_url, s->opts.max_msg, 50, 1000,
	        &sock, &ctx, &aio) != FB_OK) {
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
			h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
			h.placement_req = &gp;
			method          = PSWIRE__METHOD__GET_PLACEMENT;
		}
		// Short timeouts so that close is noticed quickly; the
		// parked GetPlacement is simply re-sent.
		rv = psw_call_header(ctx, aio, &h.base, method, h.request_id,
		    1000, &ph, &why);
		if (rv == FB_ENOMEM) {
			break;
		}
		if (rv == FB_OK && !registered) {
			Pswire__Header *rh = (Pswire__Header *) ph;
			if (rh->body_case ==
			    PSWIRE__HEADER__BODY_REGISTER_REP) {
				s->index   = rh->register_rep->id;
				s->late    = rh->register_rep->late;
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
