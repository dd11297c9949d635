// heartbeat.c — the trainer's heartbeat: a background thread that tells
// the scheduler every opts.heartbeat_ms that this trainer is alive, so
// that the scheduler can declare it dead (and stop the sync rounds from
// waiting for it) when it stops.
//
// DESIGN. The thread has its own REQ socket to the scheduler: the client's
// socket is used by the caller's thread (a ferry_client is used by one
// thread at a time), and a heartbeat must go out while that thread waits
// in a long push-pull. It sleeps in short slices so that stopping is quick,
// and stopping cancels a heartbeat in flight and joins the thread before it
// closes the socket.
// A refused or lost heartbeat is not an error of any call: the scheduler
// judges liveness, and a trainer it declared dead learns it from its next
// push or from ferry_client_declare.
#include <pthread.h>
#include <stdatomic.h>

#include "client_impl.h"

struct ferry__hb {
	pthread_t        thread;
	nng_socket       sock;
	nng_ctx          ctx;
	nng_aio         *aio;
	uint32_t         period_ms;
	uint32_t         rank;
	atomic_int       stop;
	int              halted; // the thread has been joined
	struct psw_auth *auth;   // the client's (borrowed; thread-safe)
};

// beat sends one Heartbeat and waits (at most a period, at most 1 s) for
// its answer.
static void
beat(struct ferry__hb *hb, uint64_t rid)
{
	Pswire__Header       h   = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l   = PSWIRE__LEAVE_REQUEST__INIT;
	ProtobufCMessage    *ph  = NULL;
	const char          *why = "";
	int tmo = hb->period_ms < 1000 ? (int) hb->period_ms : 1000;

	l.role        = PSWIRE__ROLE__ROLE_TRAINER;
	l.id          = hb->rank;
	h.body_case   = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req   = &l;
	h.request_id  = rid;
	h.deadline_ms = (uint32_t) tmo;
	h.rank        = hb->rank;
	(void) psw_call_header(hb->auth, hb->ctx, hb->aio, &h.base,
	    PSWIRE__METHOD__HEARTBEAT, rid, tmo, &ph, &why);
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
}

static void *
hb_main(void *arg)
{
	struct ferry__hb *hb  = arg;
	uint64_t          rid = ((uint64_t) hb->rank << 48) | (1ull << 47);
	while (!atomic_load(&hb->stop)) {
		uint64_t next = fb_clock_ms() + hb->period_ms;
		beat(hb, rid++);
		for (uint64_t now = fb_clock_ms();
		     now < next && !atomic_load(&hb->stop);
		     now = fb_clock_ms()) {
			uint64_t left = next - now;
			fb_sleep_us((left < 20 ? left : 20) * 1000);
		}
	}
	return NULL;
}

int
ferry__hb_start(ferry_client *c)
{
	struct ferry__hb *hb;
	if (c->hb != NULL && c->hb->halted) {
		ferry__hb_stop(c); // left, now declared again
	}
	if (c->opts.heartbeat_ms == 0 || c->hb != NULL) {
		return FERRY_OK;
	}
	if ((hb = fb_zalloc(sizeof(*hb))) == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	hb->period_ms = c->opts.heartbeat_ms;
	hb->rank      = (uint32_t) c->opts.rank;
	hb->auth      = c->auth;
	if (psw_req_open(c->tls, c->url, 1u << 20, 20, 500, &hb->sock,
	        &hb->ctx, &hb->aio) != FB_OK) {
		fb_free(hb);
		return ferry__fail(c, FERRY_ECONNECT,
		    "scheduler %s: cannot open the heartbeat connection",
		    c->url);
	}
	if (pthread_create(&hb->thread, NULL, hb_main, hb) != 0) {
		nng_aio_free(hb->aio);
		nng_close(hb->sock);
		fb_free(hb);
		return ferry__fail(c, FERRY_ENOMEM,
		    "cannot start the heartbeat thread");
	}
	c->hb = hb;
	return FERRY_OK;
}

void
ferry__hb_halt(ferry_client *c)
{
	struct ferry__hb *hb = c->hb;
	if (hb == NULL || hb->halted) {
		return;
	}
	atomic_store(&hb->stop, 1);
	nng_aio_cancel(hb->aio);
	pthread_join(hb->thread, NULL);
	hb->halted = 1;
}

void
ferry__hb_stop(ferry_client *c)
{
	struct ferry__hb *hb = c->hb;
	if (hb == NULL) {
		return;
	}
	// Stop the thread before closing its socket: nng 1.5's nng_close can
	// deadlock with a request in flight on a socket still being dialed
	// (seen in test_live: nng_close, the reaper and every aio expiry
	// stuck), so cancel the heartbeat in flight, wait for the thread to
	// see the stop flag (at most one heartbeat's timeout), then close an
	// idle socket.
	ferry__hb_halt(c);
	nng_close(hb->sock);
	nng_aio_free(hb->aio);
	fb_free(hb);
	c->hb = NULL;
}
