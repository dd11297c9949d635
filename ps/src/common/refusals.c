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
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fb/fb.h"
#include "refusals.h"
#include "rpc.h"

#define PEERS 32u

static const char *const reasons[] = { "unsigned", "bad_signature",
	"reply_as_request", "wrong_receiver", "wrong_run", "stale", "future",
	"replay", "internal", "identity" };
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
		    "Requests refused before any handler (UNAUTHENTICATED), "
		    "by reason.",
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

void
ps__refusals_note(struct ps_refusals *r, nng_pipe pipe, int method,
    struct psw_ident claim, const char *why)
{
	const char *reason = psw_auth_reason(why);
	uint64_t    host   = ps__host_key(pipe, NULL, 0);
	uint64_t    now    = fb_clock_ms();
	uint64_t    skipped;
	char        addr[48], as[48] = "";
	int         log = 0;

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
