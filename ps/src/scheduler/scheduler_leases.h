// scheduler_leases.h — the scheduler's data leases (issue 27): each
// epoch's sample positions handed out to trainers in pieces, given back,
// and reclaimed from trainers that went away, exactly once. The hooks
// the other scheduler files call; all expect s->mu held.
#ifndef PS_SCHEDULER_LEASES_H
#define PS_SCHEDULER_LEASES_H

#include "scheduler_impl.h"

// Free pieces the pool keeps, all epochs together: a return that would
// need more is refused (RESOURCE_EXHAUSTED), a reclaim waits.
#define PS_LEASE_PIECES_MAX 65536u
// Lease records kept: held, being reclaimed, and the newest finished ones
// (to count marks that arrive after their positions were returned). A
// grant that finds no room (every record held or being reclaimed) is
// refused (RESOURCE_EXHAUSTED).
#define PS_LEASE_RECORDS_MAX 8192u
// What a trainer that finds nothing free is told to wait (ms).
#define PS_LEASE_RETRY_MS 200u

struct obs_writer;

// A lease record's state.
enum { PS_LEASE_HELD = 1, PS_LEASE_RECLAIM = 2, PS_LEASE_DONE = 3 };

// Words per lease record in SchedulerState.lease_records.
#define PS_LEASE_REC_WORDS 9

// A lease record (SchedulerState.lease_records: PS_LEASE_REC_WORDS words
// each).
struct ps_lease {
	uint64_t id;
	uint32_t rank, epoch;
	uint64_t start, count;
	uint64_t consumed; // consumed end: positions [start, consumed)
	uint64_t marked;   // highest mark seen (<= start + count)
	uint32_t state;
	uint64_t gone_epoch; // PS_LEASE_RECLAIM: the map that marked it gone
};

// The lease state of a scheduler (s->leases), under s->mu.
struct ps_sched_leases {
	uint64_t         size; // dataset_size; 0: not fixed yet
	uint32_t         epochs;
	uint64_t         seed;
	uint64_t         next_id;
	uint32_t         next_epoch;
	uint64_t        *pc; // free pieces: (epoch, a, b) triples, sorted
	size_t           n_pc, cap_pc;
	struct ps_lease *ls;
	size_t           n_ls, cap_ls;
	uint64_t        *rec;  // [cap_ls * PS_LEASE_REC_WORDS] save scratch
	uint64_t        *prev; // [trainers] last lease given back or lost
	uint64_t         consumed, returned, doubled, bad_marks;
	// Each server's last installed_epoch; not saved: a restarted
	// scheduler waits for fresh heartbeats.
	uint64_t         installed[PS_MAX_MEMBERS];
};

// ps__sched_leases_get returns s's lease state, made on first use (NULL:
// out of memory; release with ps__sched_leases_free). mu held.
struct ps_sched_leases *ps__sched_leases_get(struct ps_scheduler *s);

// ps__sched_leases_reserve makes room for n pieces and r records.
// Returns FB_OK or FB_ENOMEM (nothing changed; the table may move).
int ps__sched_leases_reserve(struct ps_sched_leases *L, size_t n, size_t r);

// ps__sched_on_lease serves Lease (LeaseRequest, proto/ferry.proto): a
// live trainer gives back its lease (done_id, done_end) and gets the
// lowest free piece (lowest epoch, then lowest start), at most `want`
// positions; or id 0 with done or retry_ms. Bad input is refused with a
// status naming it and changes nothing. The state is saved before a
// reply that changed it. Takes mu.
void ps__sched_on_lease(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_leases_marks takes a server's heartbeat: the newest map it
// installed (installed_epoch) and its lease marks (each raises the
// consumed end of a lease still held or being reclaimed; one past a
// returned position counts as doubled), then reclaims what became
// reclaimable. m is a known server index. mu held.
void ps__sched_leases_marks(struct ps_scheduler *s, uint32_t m,
    const Pswire__LeaveRequest *l);

// ps__sched_leases_gone notes that trainer `rank` left the job (death or
// Leave) in the map in force: its held lease is reclaimed once every
// live server has installed that map (so none admits more of its
// pushes), from the highest mark seen for it. mu held; after the map
// that marks it gone was published.
void ps__sched_leases_gone(struct ps_scheduler *s, uint32_t rank);

// ---- scheduler_leases_state.c: the leases on disk ----------------------

// ps__sched_leases_save points the lease fields (940..959) of st at the
// lease state; they stay valid until the next call that changes leases.
// A no-op before the first Lease. mu held.
void ps__sched_leases_save(struct ps_scheduler *s, Pswire__SchedulerState *st);

// ps__sched_leases_load checks the lease fields of a loaded state
// against s's options and installs them. Errors: FB_EPROTO (logged,
// naming what is wrong), FB_ENOMEM. At open, from state_apply.
int ps__sched_leases_load(struct ps_scheduler *s,
    const Pswire__SchedulerState              *st);

// ---- scheduler_leases.c: what an operator sees ------------------------

// ps__sched_leases_metrics writes the lease families (ferry_scheduler_
// leases_outstanding, lease_positions_*, data_epoch...). mu held.
void ps__sched_leases_metrics(struct ps_scheduler *s, struct obs_writer *w);

// ps__sched_leases_json writes `,"leases":[...],"lease_pool":{...}` for
// /debug/state. mu held.
void ps__sched_leases_json(struct ps_scheduler *s, struct obs_writer *w);

// ps__sched_leases_track_holders times the silence of every trainer that
// holds a lease from now, after a restart loaded the leases (a holder
// that died while the scheduler was down is then declared dead and its
// lease reclaimed). mu held, or before the scheduler serves.
void ps__sched_leases_track_holders(struct ps_scheduler *s);

// ps__sched_leases_free releases s's lease state (none: a no-op). At
// close.
void ps__sched_leases_free(struct ps_scheduler *s);

#endif // PS_SCHEDULER_LEASES_H
