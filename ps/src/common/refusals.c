// refusals.c — what happens to a request refused before any handler
// (unsigned, a bad signature, a replay, for another receiver or run,
// stale, an identity its certificate denies) besides its answer: it is
// counted per reason (ferry_rpc_refused_total{reason}) and per peer
// (ferry_rpc_refused_peer_total{peer}, the host it came from: a peer
// without the key has no other name), and logged at most once per peer
// per PS_REFUSAL_LOG_MS, and PS_REFUSAL_LOG_MAX times in all per that
// interval, each line saying how many refusals went unlogged since. A
// flood of bad requests therefore writes a bounded number of lines while
// the counters stay exact.
//
// Peers are kept in a table of PEERS hosts; when it is full, the host
// refused least recently gives its slot up and its count goes to
// peer="other", so many source addresses cannot grow it either.
//
// QUARANTINE (issue 31). The trainer ranks the scheduler quarantined, and
// a server learned from a map, are bits of a fixed bitmap set with
// atomics and never cleared: every request of such a rank's identity
// (or, without identities, of its claim) is refused PERMISSION_DENIED
// before any handler, whatever its method, and counted under
// reason="quarantined" like the refusals above. A count of the ranks set
// lets the check cost one relaxed load while there are none.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "fb/fb.h"
#include "refusals.h"
#include "rpc.h"

#define PEERS 32u

static const char *const reasons[] = { "unsigned", "bad_signature",
	"reply_as_request", "wrong_receiver", "wrong_run", "stale", "future",
	"replay", "internal", "identity", "quarantined" };
#define N_REASONS (sizeof(reasons) / sizeof(reasons[0]))

struct peer {
	uint64_t host; // ps__host_key; 0: a free slot
	char     addr[48];
	uint64_t refused;
	uint64_t last_ms;   // its last refusal
	uint64_t logged_ms; // its last line (0: none yet)
	uint64_t unlogged;  // refusals since that line
};

struct ps_refusals {
	struct obs_metric *by_reason[N_REASONS];
	pthread_mutex_t    mu; // guards the rest
	struct peer        peer[PEERS];
	uint64_t           other;     // refusals of evicted peers
	uint64_t           window_ms; // start of the global interval
	uint32_t           lines;     // lines logged in it
	uint64_t           unlogged;  // refusals of no-line peers, all
	// QUARANTINE: bit r of quar set for each quarantined rank r.
	_Atomic uint32_t   n_quar;
	_Atomic uint64_t   quar[PS_QUARANTINE_RANKS / 64];
};

// collect writes the per-peer counters.
static void
collect(void *arg, struct obs_writer *w)
{
	struct ps_refusals *r = arg;
	char                lab[96];

	obs_write_family(w, "ferry_rpc_refused_peer_total",
	    "Requests refused before any handler, by the host they came from "
	    "(the 32 most recent; peer=\"other\" counts the rest).",
	    OBS_COUNTER);
	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < PEERS; i++) {
		if (r->peer[i].host != 0) {
			snprintf(lab, sizeof(lab), "peer=\"%s\"",
			    r->peer[i].addr);
			obs_write_sample(w, "ferry_rpc_refused_peer_total",
			    lab, (double) r->peer[i].refused);
		}
	}
	obs_write_sample(w, "ferry_rpc_refused_peer_total", "peer=\"other\"",
	    (double) r->other);
	pthread_mutex_unlock(&r->mu);
}

int
ps__refusals_open(struct obs_registry *reg, struct ps_refusals **out)
{
	struct ps_refusals *r = fb_zalloc(sizeof(*r));
	char                lab[64];
	int                 rv = FB_OK;

	if (r == NULL) {
		return FB_ENOMEM;
	}
	pthread_mutex_init(&r->mu, NULL);
	for (size_t i = 0; i < N_REASONS && rv == FB_OK; i++) {
		snprintf(lab, sizeof(lab), "reason=\"%s\"", reasons[i]);
		rv = obs_metric_add(reg, OBS_COUNTER,
		    "ferry_rpc_refused_total",
		    "Requests refused before any handler (UNAUTHENTICATED; "
		    "quarantined: PERMISSION_DENIED), by reason.",
		    lab, NULL, 0, OBS_HIDE_ZERO, &r->by_reason[i]);
	}
	if (rv == FB_OK) {
		rv = obs_collector_add(reg, collect, r);
	}
	if (rv != FB_OK) {
		ps__refusals_close(r);
		return rv;
	}
	*out = r;
	return FB_OK;
}

void
ps__refusals_close(struct ps_refusals *r)
{
	if (r != NULL) {
		pthread_mutex_destroy(&r->mu);
		fb_free(r);
	}
}

// slot finds host's entry, or takes a free or the stalest one; r->mu held.
static struct peer *
slot(struct ps_refusals *r, uint64_t host, nng_pipe pipe)
{
	struct peer *stale = &r->peer[0];
	for (size_t i = 0; i < PEERS; i++) {
		struct peer *p = &r->peer[i];
		if (p->host == host) {
			return p;
		}
		if (p->host == 0 ||
		    (stale->host != 0 && p->last_ms < stale->last_ms)) {
			stale = p;
		}
	}
	if (stale->host != 0) {
		r->other += stale->refused;
		r->unlogged += stale->unlogged;
	}
	memset(stale, 0, sizeof(*stale));
	stale->host = host;
	(void) ps__host_key(pipe, stale->addr, sizeof(stale->addr));
	return stale;
}

// note counts and logs one refusal for reason (one of reasons[]).
static void
note(struct ps_refusals *r, nng_pipe pipe, int method, struct psw_ident claim,
    const char *reason, const char *why)
{
	uint64_t host = ps__host_key(pipe, NULL, 0);
	uint64_t now  = fb_clock_ms();
	uint64_t skipped;
	char     addr[48], as[48] = "";
	int      log = 0;

	for (size_t i = 0; i < N_REASONS; i++) {
		if (strcmp(reasons[i], reason) == 0) {
			obs_counter_add(r->by_reason[i], 1);
		}
	}
	pthread_mutex_lock(&r->mu);
	struct peer *p = slot(r, host != 0 ? host : 1, pipe);
	p->refused++;
	p->last_ms = now;
	if (now - r->window_ms >= PS_REFUSAL_LOG_MS) {
		r->window_ms = now;
		r->lines     = 0;
	}
	if ((p->logged_ms == 0 || now - p->logged_ms >= PS_REFUSAL_LOG_MS) &&
	    r->lines < PS_REFUSAL_LOG_MAX) {
		log          = 1;
		skipped      = p->unlogged + r->unlogged;
		p->unlogged  = 0;
		r->unlogged  = 0;
		p->logged_ms = now;
		r->lines++;
		snprintf(addr, sizeof(addr), "%s", p->addr);
	} else {
		p->unlogged++;
	}
	pthread_mutex_unlock(&r->mu);
	if (!log) {
		return;
	}
	if (claim.role != PSW_ROLE_NONE) {
		char who[32];
		snprintf(as, sizeof(as), " signed as %s",
		    psw_ident_format(claim, who, sizeof(who)));
	}
	char more[96] = "";
	if (skipped > 0) {
		snprintf(more, sizeof(more),
		    " (and %llu more refusals not logged: "
		    "ferry_rpc_refused_total)",
		    (unsigned long long) skipped);
	}
	FB_LOG(FB_LOG_NOTICE, "rpc", "%s from %s%s refused: %s%s",
	    psw_method_name(method), addr, as, why, more);
}

void
ps__refusals_note(struct ps_refusals *r, nng_pipe pipe, int method,
    struct psw_ident claim, const char *why)
{
	note(r, pipe, method, claim, psw_auth_reason(why), why);
}

void
ps__refusals_quarantine(struct ps_refusals *r, const uint32_t *ranks, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t k = ranks[i];
		if (k >= PS_QUARANTINE_RANKS) {
			continue;
		}
		uint64_t bit = 1ull << (k % 64);
		if ((atomic_fetch_or(&r->quar[k / 64], bit) & bit) == 0) {
			atomic_fetch_add(&r->n_quar, 1);
		}
	}
}

int
ps__refusals_is_quarantined(const struct ps_refusals *r, uint32_t rank)
{
	return rank < PS_QUARANTINE_RANKS &&
	    (atomic_load_explicit(&r->quar[rank / 64], memory_order_relaxed) >>
	            (rank % 64) &
	        1) != 0;
}

// claimed_rank is the trainer rank c speaks for without an identity (see
// ps__refusals_quarantined), or PSW_ID_UNASSIGNED: requests servers and
// operators send too (GetPlacement, Stats, Probe, ...) name no trainer.
static uint32_t
claimed_rank(const struct ps_call *c)
{
	const Pswire__Header *h = c->hdr;
	if (h->body_case == PSWIRE__HEADER__BODY_REGISTER_REQ) {
		const Pswire__RegisterRequest *q = h->register_req;
		return q->role == PSWIRE__ROLE__ROLE_TRAINER && !q->any_rank
		    ? q->rank
		    : PSW_ID_UNASSIGNED;
	}
	if (h->body_case == PSWIRE__HEADER__BODY_LEAVE_REQ) {
		return h->leave_req->role == PSWIRE__ROLE__ROLE_TRAINER
		    ? h->leave_req->id
		    : PSW_ID_UNASSIGNED;
	}
	switch (c->frame.method) {
	case PSWIRE__METHOD__PULL:
	case PSWIRE__METHOD__PUSH:
	case PSWIRE__METHOD__PUSH_PULL:
	case PSWIRE__METHOD__ROWS:
	case PSWIRE__METHOD__LEASE:
	case PSWIRE__METHOD__REPORT_LINKS:
		return h->rank;
	default:
		return PSW_ID_UNASSIGNED;
	}
}

int
ps__refusals_quarantined(struct ps_refusals *r, struct ps_call *c, char *why,
    size_t n)
{
	if (atomic_load_explicit(&r->n_quar, memory_order_relaxed) == 0) {
		return 0;
	}
	uint32_t    rank;
	const char *how;
	if (c->peer.role == PSW_ROLE_TRAINER) {
		// A trainer signed without a rank (an any_rank Register)
		// is the one its certificate names, if any.
		rank = c->peer.id != PSW_ID_UNASSIGNED ? c->peer.id
		                                       : ps__call_cert_rank(c);
		how  = "its identity";
	} else if (c->peer.role == PSW_ROLE_NONE) {
		rank = claimed_rank(c);
		how  = "the rank it claims: without a secret or member "
		       "certificates ranks are claims";
	} else {
		return 0; // a server, an operator, the scheduler
	}
	if (rank == PSW_ID_UNASSIGNED ||
	    !ps__refusals_is_quarantined(r, rank)) {
		return 0;
	}
	snprintf(why, n,
	    "trainer rank %u is quarantined (refused by %s; "
	    "docs/security.md)",
	    rank, how);
	note(r, nng_msg_get_pipe(c->req), c->frame.method, c->peer,
	    "quarantined", why);
	return 1;
}
