// scheduler_quarantine.c — untrusted trainers (issue 31), the scheduler's
// side: the evidence against each trainer rank, its suspicion, its
// quarantine, the attacks a job allows and the spot checks' audit key.
//
// DESIGN. Two kinds of evidence reach the scheduler. A verifier (an
// operator-run process, trusted: it signs as an operator) recomputes
// pushes the servers kept and sends its verdict (Verified): a mismatch
// quarantines the rank at once. The servers' heartbeats carry, per rank,
// how many of their scored sync rounds flagged its push an outlier and
// how many in a row up to the last (RankOutliers, cumulative per server):
// the latest report of each server is kept, and a streak of at least
// --quarantine-outliers on any server quarantines the rank.
//
// A quarantine takes the trainer out of the job exactly as a death does
// (ps__sched_drop_trainer: rounds stop waiting, a new map lists it gone),
// adds it to Placement.quarantined in every later map (servers refuse it
// once they install one) and makes this scheduler's rpc refuse its
// identity on every method (ps__rpc_quarantine): Register included, so
// it cannot come back. It is never lifted while the job lives; with
// --state-dir it survives a restart (a trainer flag in the state file).
//
// The audit key is drawn at open and not kept on disk: a restarted
// scheduler hands servers that register afterwards a new key, so their
// draws differ from the older servers' (each still keeps its share of
// pushes; a verifier only sees fewer pushes kept by all servers at once).
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "obs/obs.h"
#include "scheduler_quarantine.h"

int
ps__sched_quar_open(struct ps_scheduler *s)
{
	s->quar = fb_zalloc((size_t) s->opts.trainers * sizeof(*s->quar));
	if (s->quar == NULL) {
		return FB_ENOMEM;
	}
	// Unknown to trainers, so that no trainer can tell which of its
	// pushes will be kept; a clock-mixed fallback only when the kernel
	// has no entropy to give (never on Linux past early boot).
	if (getrandom(&s->audit_key, sizeof(s->audit_key), 0) !=
	    (ssize_t) sizeof(s->audit_key)) {
		uint64_t z   = fb_clock_ns() + 0x9e3779b97f4a7c15ull;
		z            = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z            = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		s->audit_key = z ^ (z >> 31);
	}
	return FB_OK;
}

void
ps__sched_quar_close(struct ps_scheduler *s)
{
	for (int r = 0; s->quar != NULL && r < s->opts.trainers; r++) {
		fb_free(s->quar[r].srv);
	}
	fb_free(s->quar);
	s->quar = NULL;
}

void
ps__sched_quar_arm(struct ps_scheduler *s)
{
	pthread_mutex_lock(&s->mu);
	for (uint32_t r = 0; r < (uint32_t) s->opts.trainers; r++) {
		if (s->quar[r].quarantined) {
			ps__rpc_quarantine(s->rpc, &r, 1);
		}
	}
	pthread_mutex_unlock(&s->mu);
}

void
ps__sched_quarantine(struct ps_scheduler *s, uint32_t r, const char *fmt, ...)
{
	char    ev[400];
	va_list ap;

	if (r >= (uint32_t) s->opts.trainers || s->quar[r].quarantined) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(ev, sizeof(ev), fmt, ap);
	va_end(ap);
	ps__sched_quar_set(s, r);
	FB_LOG(FB_LOG_WARN, "quarantine", "trainer rank %u quarantined: %s", r,
	    ev);
	ps__rpc_quarantine(s->rpc, &r, 1);
	int was_gone = s->trainer_gone[r];
	ps__sched_drop_trainer(s, r); // publishes the map that says so
	if (was_gone && s->placement != NULL) {
		// Already out (it died or left): the servers still learn
		// that its identity is refused.
		ps__sched_republish(s, s->assign);
	} else if (s->placement == NULL) {
		ps__sched_state_save(s); // no map yet: the flag alone
	}
}

int
ps__sched_quar_attack(struct ps_scheduler *s, uint32_t rank,
    const Pswire__RegisterRequest *r, struct ps_sched_refusal *no)
{
	if (r->attack == NULL || r->attack[0] == '\0') {
		return 0;
	}
	if (!s->opts.allow_attacks) {
		no->status = PSWIRE__STATUS__PERMISSION_DENIED;
		snprintf(no->msg, sizeof(no->msg),
		    "trainer declares --attack %.100s; this job does not "
		    "allow attacks (ps-server --allow-attacks 1)",
		    r->attack);
		return no->status;
	}
	if (rank < (uint32_t) s->opts.trainers &&
	    !s->quar[rank].attack_logged) {
		s->quar[rank].attack_logged = 1;
		FB_LOG(FB_LOG_NOTICE, "quarantine",
		    "trainer rank %u declares --attack %.100s (allowed: "
		    "--allow-attacks; benchmarks and tests only)",
		    rank, r->attack);
	}
	return 0;
}

void
ps__sched_quar_server_reply(const struct ps_scheduler *s,
    Pswire__RegisterReply                             *rep)
{
	rep->audit_rate = s->opts.spot_check;
	rep->audit_key  = s->audit_key;
}

// outl_of returns rank r's slot for server m's reports, growing the
// rank's table (NULL: out of memory; the report is dropped). mu held.
static struct ps_sched_outl *
outl_of(struct ps_scheduler *s, uint32_t r, uint32_t m)
{
	struct ps_sched_quar *q = &s->quar[r];
	if (m >= q->n_srv) {
		uint32_t              n = (uint32_t) s->n_servers_seen > m + 1
		                 ? (uint32_t) s->n_servers_seen
		                 : m + 1;
		struct ps_sched_outl *g = fb_realloc(q->srv, n * sizeof(*g));
		if (g == NULL) {
			return NULL;
		}
		memset(g + q->n_srv, 0, (n - q->n_srv) * sizeof(*g));
		q->srv   = g;
		q->n_srv = n;
	}
	return &q->srv[m];
}

// counts_from_server says whether c is a Heartbeat of server l->id, sent
// by it (or by a sender without identity), carrying outlier counts. Reads
// the request only: no lock.
static int
counts_from_server(const struct ps_call *c)
{
	const Pswire__LeaveRequest *l = c->hdr->leave_req;
	if (c->hdr->body_case != PSWIRE__HEADER__BODY_LEAVE_REQ ||
	    l->role != PSWIRE__ROLE__ROLE_SERVER || l->n_outliers == 0) {
		return 0;
	}
	return c->peer.role == PSW_ROLE_NONE ||
	    (c->peer.role == PSW_ROLE_SERVER &&
	        (c->peer.id == l->id || c->peer.id == PSW_ID_UNASSIGNED));
}

void
ps__sched_quar_heartbeat(struct ps_scheduler *s, struct ps_call *c)
{
	if (!counts_from_server(c)) {
		return; // most heartbeats: no lock taken
	}
	const Pswire__LeaveRequest *l = c->hdr->leave_req;
	uint64_t                    k = s->opts.quarantine_outliers;
	uint32_t                    m = l->id;
	pthread_mutex_lock(&s->mu);
	if (m >= (uint32_t) s->n_servers_seen) {
		pthread_mutex_unlock(&s->mu);
		return; // on_heartbeat answers it
	}
	for (size_t i = 0; i < l->n_outliers; i++) {
		const Pswire__RankOutliers *o = l->outliers[i];
		struct ps_sched_outl       *e;
		if (o->rank >= (uint32_t) s->opts.trainers ||
		    (e = outl_of(s, o->rank, m)) == NULL) {
			continue;
		}
		e->rounds   = o->rounds;
		e->outliers = o->outliers;
		e->streak   = o->streak;
		if (k > 0 && o->streak >= k) {
			ps__sched_quarantine(s, o->rank,
			    "outlier streak %llu on server %u (%llu of %llu "
			    "scored rounds outliers; --quarantine-outliers "
			    "%llu)",
			    (unsigned long long) o->streak, m,
			    (unsigned long long) o->outliers,
			    (unsigned long long) o->rounds,
			    (unsigned long long) k);
		}
	}
	pthread_mutex_unlock(&s->mu);
}

void
ps__sched_on_verified(struct ps_scheduler *s, struct ps_call *c)
{
	char who[48];

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_VERIFIED_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Verified needs a verified_req body");
		return;
	}
	// Verifiers are operator-run and trusted: a trainer's verdict on
	// another trainer would let any member quarantine the others.
	if (ps__rpc_auth_on(c->rpc) && c->peer.role != PSW_ROLE_OPERATOR) {
		ps__call_reply_err(c, PSWIRE__STATUS__PERMISSION_DENIED,
		    "%s may not send Verified: verifiers sign as an operator",
		    psw_ident_format(c->peer, who, sizeof(who)));
		return;
	}
	const Pswire__VerifiedRequest *v = c->hdr->verified_req;
	pthread_mutex_lock(&s->mu);
	if (v->rank >= (uint32_t) s->opts.trainers) {
		int t = s->opts.trainers;
		pthread_mutex_unlock(&s->mu);
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Verified names rank %u: the job has %d trainer slots",
		    v->rank, t);
		return;
	}
	struct ps_sched_quar *q = &s->quar[v->rank];
	if (!v->mismatch) {
		q->verified_ok++;
	} else {
		q->verified_bad++;
		ps__sched_quarantine(s, v->rank,
		    "verified mismatch at version %llu (data step %llu) shard "
		    "%u of server %u by %s: %llu elements differ, max |diff| "
		    "%g (crc %08x pushed, %08x recomputed)",
		    (unsigned long long) v->version,
		    // the wire carries 1 + the step (0: no claim)
		    (unsigned long long) (v->data_step > 0 ? v->data_step - 1
		                                           : 0),
		    v->shard, v->server,
		    psw_ident_format(c->peer, who, sizeof(who)),
		    (unsigned long long) v->differing,
		    (double) v->max_abs_diff, v->pushed_crc,
		    v->recomputed_crc);
	}
	pthread_mutex_unlock(&s->mu);
	ps__sched_reply_counts(s, c);
}

double
ps__sched_quar_suspicion(const struct ps_scheduler *s, uint32_t r)
{
	const struct ps_sched_quar *q = &s->quar[r];
	uint64_t                    k = s->opts.quarantine_outliers;
	double                      x = 0;
	if (q->quarantined) {
		return 1.0;
	}
	for (uint32_t m = 0; m < q->n_srv; m++) {
		const struct ps_sched_outl *e = &q->srv[m];
		double y = k > 0    ? (double) e->streak / (double) k
		    : e->rounds > 0 ? (double) e->outliers / (double) e->rounds
		                    : 0.0;
		x        = y > x ? y : x;
	}
	return x < 1.0 ? x : 1.0;
}

// outliers_of sums rank r's flagged rounds over the servers. mu held.
static uint64_t
outliers_of(const struct ps_scheduler *s, uint32_t r)
{
	uint64_t n = 0;
	for (uint32_t m = 0; m < s->quar[r].n_srv; m++) {
		n += s->quar[r].srv[m].outliers;
	}
	return n;
}

// reported says whether the series of rank r are written: it registered,
// or there is evidence about it. mu held.
static int
reported(const struct ps_scheduler *s, uint32_t r)
{
	const struct ps_sched_quar *q = &s->quar[r];
	return s->trainer_seen[r] || q->quarantined || q->n_srv > 0 ||
	    q->verified_ok + q->verified_bad > 0;
}

void
ps__sched_quar_metrics(struct ps_scheduler *s, struct obs_writer *w)
{
	char lab[64];
	int  T = s->opts.trainers;

	obs_write_family(w, "ferry_trainers_quarantined",
	    "Trainer ranks quarantined (out of the job, their identity "
	    "refused; docs/security.md).",
	    OBS_GAUGE);
	obs_write_sample(w, "ferry_trainers_quarantined", NULL,
	    (double) s->n_quarantined);
	obs_write_family(w, "ferry_trainer_suspicion",
	    "How close each trainer is to quarantine, 0..1: 1 quarantined, "
	    "else the highest server's outlier streak / "
	    "--quarantine-outliers (outliers / rounds when that is 0).",
	    OBS_GAUGE);
	for (uint32_t r = 0; r < (uint32_t) T; r++) {
		if (reported(s, r)) {
			snprintf(lab, sizeof(lab), "rank=\"%u\"", r);
			obs_write_sample(w, "ferry_trainer_suspicion", lab,
			    ps__sched_quar_suspicion(s, r));
		}
	}
	obs_write_family(w, "ferry_trainer_outliers_total",
	    "Sync rounds whose robust aggregate flagged each trainer's push "
	    "an outlier, summed over the servers' reports.",
	    OBS_COUNTER);
	for (uint32_t r = 0; r < (uint32_t) T; r++) {
		if (reported(s, r)) {
			snprintf(lab, sizeof(lab), "rank=\"%u\"", r);
			obs_write_sample(w, "ferry_trainer_outliers_total",
			    lab, (double) outliers_of(s, r));
		}
	}
	obs_write_family(w, "ferry_trainer_verifications_total",
	    "Verifiers' verdicts on each trainer's kept pushes (Verified), "
	    "by result.",
	    OBS_COUNTER);
	for (uint32_t r = 0; r < (uint32_t) T; r++) {
		if (!reported(s, r)) {
			continue;
		}
		snprintf(lab, sizeof(lab), "rank=\"%u\",result=\"ok\"", r);
		obs_write_sample(w, "ferry_trainer_verifications_total", lab,
		    (double) s->quar[r].verified_ok);
		snprintf(lab, sizeof(lab), "rank=\"%u\",result=\"mismatch\"",
		    r);
		obs_write_sample(w, "ferry_trainer_verifications_total", lab,
		    (double) s->quar[r].verified_bad);
	}
}

void
ps__sched_quar_json(struct ps_scheduler *s, struct obs_writer *w)
{
	const char *sep = "";
	obs_writer_printf(w, ",\"trainer_trust\":[");
	for (uint32_t r = 0; r < (uint32_t) s->opts.trainers; r++) {
		const struct ps_sched_quar *q = &s->quar[r];
		if (!reported(s, r)) {
			continue;
		}
		obs_writer_printf(w,
		    "%s{\"rank\":%u,\"quarantined\":%s,\"suspicion\":%.6g,"
		    "\"outliers\":%llu,\"verified_ok\":%llu,"
		    "\"verified_mismatch\":%llu}",
		    sep, r, q->quarantined ? "true" : "false",
		    ps__sched_quar_suspicion(s, r),
		    (unsigned long long) outliers_of(s, r),
		    (unsigned long long) q->verified_ok,
		    (unsigned long long) q->verified_bad);
		sep = ",";
	}
	obs_writer_printf(w, "]");
}

size_t
ps__sched_quar_stats(const struct ps_scheduler *s, char *buf, size_t n)
{
	size_t off = 0;
#define OUT(...)                                                              \
	do {                                                                  \
		if (off < n) {                                                \
			int k_ = snprintf(buf + off, n - off, __VA_ARGS__);   \
			off += k_ > 0 ? (size_t) k_ : 0;                      \
		}                                                             \
	} while (0)
	OUT("# Trust\r\ntrainers_quarantined:%u\r\nspot_check:%g\r\n"
	    "quarantine_outliers:%u\r\n",
	    s->n_quarantined, s->opts.spot_check, s->opts.quarantine_outliers);
	for (uint32_t r = 0; r < (uint32_t) s->opts.trainers; r++) {
		const struct ps_sched_quar *q = &s->quar[r];
		if (q->quarantined || q->n_srv > 0 ||
		    q->verified_ok + q->verified_bad > 0) {
			OUT("trainer_%u:quarantined=%d,suspicion=%.4f,"
			    "outliers=%llu,verified_ok=%llu,"
			    "verified_mismatch=%llu\r\n",
			    r, q->quarantined, ps__sched_quar_suspicion(s, r),
			    (unsigned long long) outliers_of(s, r),
			    (unsigned long long) q->verified_ok,
			    (unsigned long long) q->verified_bad);
		}
	}
#undef OUT
	return off < n ? off : n;
}
