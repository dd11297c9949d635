// scheduler_quarantine.h — the scheduler's side of untrusted trainers
// (issue 31): the evidence against each trainer rank (verifiers'
// verdicts, the servers' outlier counts), its suspicion, its quarantine,
// the attacks a job allows and the spot checks' audit key. The hooks the
// other scheduler files call (scheduler_quarantine.c).
#ifndef PS_SCHEDULER_QUARANTINE_H
#define PS_SCHEDULER_QUARANTINE_H

#include "scheduler_impl.h"

struct obs_writer;

// ps__sched_quar_open allocates the per-rank tables and draws the audit
// key (a random 64-bit key servers draw the pushes they keep with). At
// open, before the state file is loaded. Errors: FB_ENOMEM.
int ps__sched_quar_open(struct ps_scheduler *s);

// ps__sched_quar_close frees what ps__sched_quar_open allocated.
void ps__sched_quar_close(struct ps_scheduler *s);

// ps__sched_quar_arm makes the rpc refuse the ranks a loaded state file
// quarantined. At open, once the rpc exists. Takes mu.
void ps__sched_quar_arm(struct ps_scheduler *s);

// What the scheduler knows against one trainer rank (s->quar[rank]).
struct ps_sched_outl {
	uint64_t rounds, outliers, streak; // a server's latest RankOutliers
};
struct ps_sched_quar {
	uint8_t               quarantined;
	uint8_t               attack_logged; // its declared attack was logged
	uint64_t              verified_ok, verified_bad;
	struct ps_sched_outl *srv; // [n_srv] by server index (zero: none)
	uint32_t              n_srv;
};

// The lookups below are inline, beside the state they read, so that the
// map builder, the state file and elastic ranks need not call into
// scheduler_quarantine.c (which calls them: scripts/import-circles.sh).

// ps__sched_quarantined says whether trainer rank r is quarantined. mu
// held.
static inline int
ps__sched_quarantined(const struct ps_scheduler *s, uint32_t r)
{
	return r < (uint32_t) s->opts.trainers && s->quar[r].quarantined;
}

// ps__sched_quar_set marks rank r (< trainers) quarantined without the
// rest of ps__sched_quarantine: a state file being loaded (the rpc
// refuses it from ps__sched_quar_arm on). At open.
static inline void
ps__sched_quar_set(struct ps_scheduler *s, uint32_t r)
{
	if (!s->quar[r].quarantined) {
		s->quar[r].quarantined = 1;
		s->n_quarantined++;
	}
}

// ps__sched_quar_list writes the quarantined ranks, ascending, into out
// (room for opts.trainers) and returns how many, for a map. mu held.
static inline size_t
ps__sched_quar_list(const struct ps_scheduler *s, uint32_t *out)
{
	size_t n = 0;
	for (uint32_t r = 0; r < (uint32_t) s->opts.trainers; r++) {
		if (s->quar[r].quarantined) {
			out[n++] = r;
		}
	}
	return n;
}

// ps__sched_quarantine quarantines trainer r (< trainers) on the evidence
// (printf-style): idempotent; logs `trainer rank R quarantined: <evidence>`
// at WARN, takes the trainer out of the job as a death does (rounds stop
// waiting; a new map lists it gone and quarantined) and refuses its
// identity on every rpc from now on. mu held.
void ps__sched_quarantine(struct ps_scheduler *s, uint32_t r, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));

// ps__sched_quar_attack checks the attack a trainer's Register declares:
// 0 when it declares none or the job allows attacks (the first Register
// of rank that declares one is logged at NOTICE), else a refusal written
// into no, and its status (PERMISSION_DENIED). mu held.
int ps__sched_quar_attack(struct ps_scheduler *s, uint32_t rank,
    const Pswire__RegisterRequest *r, struct ps_sched_refusal *no);

// ps__sched_quar_server_reply fills a server's RegisterReply with the
// spot checks' share (opts.spot_check) and the audit key.
void ps__sched_quar_server_reply(const struct ps_scheduler *s,
    Pswire__RegisterReply                                  *rep);

// ps__sched_quar_heartbeat reads a Heartbeat before it is served
// (scheduler.c's dispatch): a known server's (sent by that server, or by
// a sender without identity) outlier counts are kept, the latest per rank
// (ranks outside the job are skipped), and a rank whose streak reached
// opts.quarantine_outliers (when non-zero) is quarantined. Any other
// request is left alone. Takes mu.
void ps__sched_quar_heartbeat(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_on_verified serves Verified: a verifier's verdict on one kept
// push. Refused PERMISSION_DENIED unless the sender is an operator (when
// requests are authenticated), INVALID_ARGUMENT for a rank that is no
// trainer slot; counted per rank; a mismatch quarantines the rank.
// Answers a RegisterReply with the job's counts. Takes mu.
void ps__sched_on_verified(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_quar_suspicion is rank r's suspicion in [0, 1]: 1 when
// quarantined, else the highest of the servers' streak /
// quarantine_outliers (outliers / rounds when quarantine_outliers is 0),
// 0 without reports. mu held.
double ps__sched_quar_suspicion(const struct ps_scheduler *s, uint32_t r);

// ps__sched_quar_metrics writes ferry_trainer_suspicion,
// ferry_trainer_outliers_total, ferry_trainer_verifications_total and
// ferry_trainers_quarantined. mu held.
void ps__sched_quar_metrics(struct ps_scheduler *s, struct obs_writer *w);

// ps__sched_quar_json writes `,"trainer_trust":[{"rank":R,
// "quarantined":..,"suspicion":..,"outliers":..,"verified_ok":..,
// "verified_mismatch":..},...]` for /debug/state: the ranks that
// registered or have evidence. mu held.
void ps__sched_quar_json(struct ps_scheduler *s, struct obs_writer *w);

// ps__sched_quar_stats writes the Stats lines (trainers_quarantined, and
// one trainer_R line per rank with evidence) into buf (n bytes) and
// returns the bytes written (as snprintf, cut at n). mu held.
size_t ps__sched_quar_stats(const struct ps_scheduler *s, char *buf, size_t n);

#endif // PS_SCHEDULER_QUARANTINE_H
