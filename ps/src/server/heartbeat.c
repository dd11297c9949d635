// heartbeat.c — the heartbeat thread: tells the scheduler every
// --heartbeat-ms that this server is alive, on a connection of its own.
//
// DESIGN. Heartbeats never wait behind data-path work. The boot thread
// (boot.c) applies each new map, and applying one sends the leaving shards
// to their new servers: a Transfer to a peer that is slow, stopped or
// gone can take seconds. Heartbeats sent from that thread stopped for as
// long, and the scheduler declared this healthy server dead (issue 24's
// cascade). So they have a thread and a REQ socket of their own, hold
// s->mu only to read two fields, and their call is bounded like the
// watch's (a deadline the scheduler answers within, boot.c's DESIGN), so
// that ps_server_close joins the thread within one call and the socket is
// never closed with a reply in flight.
//
// Each heartbeat's Header.epoch is the newest map whose Transfers out of
// this server were all delivered (0 before the first): the scheduler
// reads it to know whether a move to a server that died was still in
// this server's hands (ps__sched_moves_unwind) and can go back here.
#include "server_impl.h"

// The most snapshot versions a heartbeat reports (snapshot.h keeps 2).
#define HB_SNAP_MAX 4

// sent_epoch returns the epoch of the map in force when no Transfer out
// of this server is pending, else prev. Takes mu, when it is free: a
// heartbeat never waits for it (prev is then sent again).
static uint64_t
sent_epoch(struct ps_server *s, uint64_t prev)
{
	if (pthread_mutex_trylock(&s->mu) != 0) {
		return prev;
	}
	// map_mark installs a map and map_pack counts its Transfers under
	// one hold of mu: no Transfer of s->pl is missed here.
	if (s->pl != NULL && atomic_load(&s->transfers) == 0) {
		prev = s->pl->epoch;
	}
	pthread_mutex_unlock(&s->mu);
	return prev;
}

// beat sends one Heartbeat (deadline wait_ms, answered within answer_ms)
// with this server's sent epoch. A lost or refused heartbeat is only
// logged at debug level: the scheduler judges.
static void
beat(struct ps_server *s, nng_ctx ctx, nng_aio *aio, uint64_t rid,
    uint64_t epoch, int wait_ms, int answer_ms)
{
	Pswire__Header       h   = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l   = PSWIRE__LEAVE_REQUEST__INIT;
	ProtobufCMessage    *ph  = NULL;
	const char          *why = "";
	uint64_t             held[HB_SNAP_MAX];

	l.role                = PSWIRE__ROLE__ROLE_SERVER;
	l.id                  = (uint32_t) atomic_load(&s->hb_index);
	l.snapshot_versions   = held;
	l.n_snapshot_versions = ps__snap_held(s, held, &l.has_snapshots);
	h.request_id          = rid;
	h.deadline_ms         = (uint32_t) wait_ms;
	h.epoch               = epoch;
	h.body_case           = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req           = &l;
	int rv                = psw_call_header(s->auth, ctx, aio, &h.base,
	                   PSWIRE__METHOD__HEARTBEAT, rid, answer_ms, &ph, &why);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_DEBUG, "heartbeat", "%s",
		    why && *why ? why : fb_strerror(rv));
	}
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
}

void *
ps__heartbeat_main(void *arg)
{
	struct ps_server *s     = arg;
	uint32_t          hb_ms = s->opts.heartbeat_ms;
	nng_socket        sock;
	nng_ctx           ctx;
	nng_aio          *aio = NULL;
	uint64_t          rid = 1, sent = 0, next = 0;
	// The scheduler answers within wait; we wait the margin longer.
	int wait = hb_ms < PS_BOOT_PARK_MS ? (int) hb_ms : PS_BOOT_PARK_MS;
	int answer_ms = wait + PSW_ANSWER_MARGIN_MS;

	if (hb_ms == 0 ||
	    psw_req_open(s->tls, s->opts.scheduler_url, s->opts.max_msg, 50,
	        1000, &sock, &ctx, &aio) != FB_OK) {
		if (hb_ms != 0) {
			FB_LOG(FB_LOG_ERR, "heartbeat",
			    "cannot dial scheduler %s: no heartbeats",
			    s->opts.scheduler_url);
		}
		return NULL;
	}
	while (!atomic_load(&s->closing)) {
		uint64_t now = fb_clock_ms();
		if (atomic_load(&s->hb_index) >= 0 && now >= next) {
			next = now + hb_ms;
			sent = sent_epoch(s, sent);
			beat(s, ctx, aio, rid++, sent, wait, answer_ms);
			continue;
		}
		fb_sleep_us(5000); // close is noticed within 5 ms
	}
	nng_aio_free(aio);
	nng_close(sock);
	return NULL;
}
