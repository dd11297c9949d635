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
//
// Lease marks (issue 27): each heartbeat also carries, for every rank, the
// newest lease mark of a push this server admitted (ps__lease_mark, set on
// the push path into an array sized at the first map: no allocation
// there) and installed_epoch, the newest map installed here (a push of a
// rank that map marks gone is refused from then on). The scheduler
// reclaims a dead trainer's lease from them. They are copied under mu
// with the same trylock: when mu is busy, the previous copy is sent again
// (an older mark is never wrong, only late; the scheduler keeps the
// newest it saw).
//
// Outliers (issue 31): with a robust --aggregate each heartbeat also
// carries, per rank scored here, its outlier counts (robust.c's
// RankOutliers, copied under the same trylock into an array made at the
// first map), which the scheduler's quarantine reads.
#include "robust.h"
#include "server_impl.h"

// The most snapshot versions a heartbeat reports (snapshot.h keeps 2).
#define HB_SNAP_MAX 4

// What one heartbeat reports besides liveness, kept from one to the next
// (sent again when mu is busy).
struct hb_view {
	uint64_t               sent; // the sent epoch (no Transfer pending)
	uint64_t               installed; // the newest map installed
	size_t                 n_marks;   // s->hb_marks[0..n_marks)
	size_t                 n_outl;    // robust.c's RankOutliers
	Pswire__RankOutliers **outl;
};

void
ps__lease_mark(struct ps_server *s, uint32_t rank, uint64_t id, uint64_t end)
{
	struct ps_lease_mark *m = &s->marks[rank]; // rank checked on admit
	if (id == 0 || id < m->id || (id == m->id && end <= m->end)) {
		return;
	}
	m->id  = id;
	m->end = end;
}

// hb_refresh updates v from the server: the epoch of the map in force as
// the sent epoch when no Transfer out of this server is pending, the
// installed epoch and the lease marks (copied into s->hb_marks, which only
// this thread writes once the first map made them). Takes mu, when it is
// free: a heartbeat never waits for it (v is then sent again as it was).
static void
hb_refresh(struct ps_server *s, struct hb_view *v)
{
	if (pthread_mutex_trylock(&s->mu) != 0) {
		return;
	}
	// map_mark installs a map and map_pack counts its Transfers under
	// one hold of mu: no Transfer of s->pl is missed here.
	if (s->pl != NULL && atomic_load(&s->transfers) == 0) {
		v->sent = s->pl->epoch;
	}
	if (s->pl != NULL) {
		// The arrays exist before s->pl is set (ps__ranks_alloc).
		v->installed = s->pl->epoch;
		v->n_marks   = 0;
		for (uint32_t r = 0; r < s->trainers; r++) {
			if (s->marks[r].id == 0) {
				continue;
			}
			Pswire__LeaseMark *m = &s->hb_marks[v->n_marks];
			s->hb_mark_ptrs[v->n_marks++] = m;
			m->rank                       = r;
			m->lease_id                   = s->marks[r].id;
			m->end                        = s->marks[r].end;
		}
		v->n_outl = ps__robust_outliers(s, &v->outl);
	}
	pthread_mutex_unlock(&s->mu);
}

// beat sends one Heartbeat (deadline wait_ms, answered within answer_ms)
// with this server's view v (sent epoch, installed epoch, lease marks,
// outlier counts). A
// lost or refused heartbeat is only logged at debug level: the scheduler
// judges.
static void
beat(struct ps_server *s, nng_ctx ctx, nng_aio *aio, uint64_t rid,
    const struct hb_view *v, int wait_ms, int answer_ms)
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
	l.installed_epoch     = v->installed;
	l.n_lease_marks       = v->n_marks;
	l.lease_marks         = v->n_marks > 0 ? s->hb_mark_ptrs : NULL;
	l.n_outliers          = v->n_outl;
	l.outliers            = v->outl;
	h.request_id          = rid;
	h.deadline_ms         = (uint32_t) wait_ms;
	h.epoch               = v->sent;
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
	uint64_t          rid = 1, next = 0;
	struct hb_view    v = { 0, 0, 0, 0, NULL };
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
			hb_refresh(s, &v);
			beat(s, ctx, aio, rid++, &v, wait, answer_ms);
			continue;
		}
		fb_sleep_us(5000); // close is noticed within 5 ms
	}
	nng_aio_free(aio);
	nng_close(sock);
	return NULL;
}
