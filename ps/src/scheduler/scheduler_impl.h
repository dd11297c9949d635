// scheduler_impl.h — the scheduler role's private header: its state and
// the functions its files share.
//
// The scheduler is split by concern, and calls run one way:
//   scheduler.c         open/close, request dispatch, Stats
//   scheduler_members.c Register, Leave, ReportLinks, the start barrier
//   scheduler_elastic.c elastic membership: MIN:MAX, free ranks, flapping
//   scheduler_job.c     the job declaration: checks, comparison, copy
//   scheduler_place.c   the placement map: build, replan, publish
//   scheduler_reply.c   GetPlacement (parked until a map exists), and the
//                       acknowledgements of Heartbeat, Leave, ReportLinks
//   scheduler_live.c    liveness: heartbeats, the sweeper thread that
//                       declares silent members dead and expires parked
//                       calls
//   scheduler_obs.c     metrics read at scrape time, readiness, the
//                       /debug/state JSON
//   scheduler_state.c   the job, members and map on disk (--state-dir)
//   scheduler_snapshot.c the Snapshot rpc forwarded to every server
//   scheduler_reseed.c  lost shards re-seeded from the trainers' copies
//   scheduler_quarantine.c untrusted trainers: evidence, suspicion,
//                       quarantine, allowed attacks, the audit key
// dispatch -> members -> place -> reply; members -> job; members, live ->
// elastic; dispatch, members, obs -> quarantine -> live, place, reply,
// state; live -> members,
// place, reply; members, live -> reseed -> place. The placement
// policy itself (the 10% rule, capacities, round-robin over live servers)
// is pure code in sharding/ (shard_policy_*).
//
// LOCKING. One mutex, s->mu, guards every field below except opts, rpc
// and reg, which are set at open and never change. Requests are tiny and rare
// (registration, placement fetches), so there is nothing to stripe. The
// functions below say whether they take mu or expect it held; none blocks
// while holding it.
#ifndef PS_SCHEDULER_IMPL_H
#define PS_SCHEDULER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/ps.h"
#include "rpc.h"
#include "shard/shard.h"

// Members of each role the options may ask for.
#define PS_MAX_MEMBERS 4096
// Snapshot versions a server reports that the scheduler keeps (servers
// keep 2 files).
#define PS_SNAP_REPORTED 4
// Shards per job: every map lists them all, and servers keep a slot each.
#define PS_MAX_SHARDS (1u << 20)
// A parked GetPlacement without a deadline (or with a longer one) is
// answered DEADLINE_EXCEEDED after this long, so that abandoned calls
// cannot hold every REP context.
#define PS_SCHED_PARK_MAX_MS 60000u

// A member's heartbeat connection (scheduler_live.c).
struct ps_sched_conn {
	uint32_t pipe;      // nng pipe id of its last heartbeat, 0 = none
	uint64_t closed_ms; // fb_clock_ms() when that pipe closed, 0 = open
	// Suspect: the connection closed, or no heartbeat for 2 periods;
	// cleared by its next heartbeat. No shard moves to or from a
	// suspect server (ps__sched_server_usable).
	uint8_t  suspect;
	// A server's last heartbeat's Header.epoch: the newest map whose
	// Transfers out of it were all delivered (0: none known). Kept
	// when the member is declared dead: ps__sched_moves_unwind reads it.
	uint64_t sent_epoch;
};

// Rank slots whose deaths the scheduler remembers for flapping
// (scheduler_elastic.c; the oldest is forgotten first), and the deaths
// kept for each.
#define PS_FLAP_HOSTS 64
#define PS_FLAP_DEATHS 32

// One rank slot's recent deaths (scheduler_elastic.c).
struct ps_sched_flap {
	uint64_t key;                  // flap_key(); 0: a free slot
	uint64_t died[PS_FLAP_DEATHS]; // fb_clock_ms() of each, a ring
	uint32_t n;                    // deaths recorded (ring head: n %)
};

struct ps_scheduler {
	struct ps_scheduler_opts opts; // immutable after open
	struct ps_rpc           *rpc;  // immutable after open
	struct psw_auth         *auth; // --secret-file signing (NULL: off)
	struct ps_auth_state    *auth_state; // its run and floors on disk
	struct psw_tls          *tls;        // --tls-* (NULL: plain tcp)
	pthread_mutex_t          mu;
	uint8_t                 *trainer_seen; // [trainers]
	int                      n_trainers_seen;
	char                   **server_urls; // [servers]
	int                      n_servers_seen;
	Pswire__JobConfig       *job;       // owned (unpacked copy)
	Pswire__Placement       *placement; // owned when published
	uint8_t                 *placement_buf;
	size_t                   placement_len;
	uint64_t                 epoch;
	struct ps_call          *parked; // GetPlacement waiters
	// The GetPlacement answer's Header bytes (epoch and map, no request
	// id) for the map of epoch map_reply_epoch (scheduler_reply.c):
	// packed once per map, not once per member fetching it.
	uint8_t                 *map_reply;
	size_t                   map_reply_len;
	uint64_t                 map_reply_epoch;
	uint64_t                *capacity;   // [servers] bytes, 0 = unbounded
	double                  *lat, *bw;   // [trainers * servers]
	uint8_t                 *links_seen; // [trainers]
	int                      n_links_seen;
	uint32_t                *assign; // [n_assign] shard -> server
	size_t                   n_assign;
	uint64_t                *shard_size; // [n_assign] bytes
	// The last move of each shard (scheduler_place.c): the server it
	// left (SHARD_NO_SERVER: never moved) and the epoch of the map that
	// moved it; NULL until the first move (or out of memory: then
	// moves in flight are not unwound).
	uint32_t                *move_from;  // [n_assign]
	uint64_t                *move_epoch; // [n_assign]
	// --replicas: each shard's backups, n_backups per shard in promotion
	// order (SHARD_NO_SERVER: empty), kept valid by
	// shard_replicas_repair; n_backups is replicas - 1, capped.
	uint32_t                *backups; // [n_assign * n_backups]
	uint32_t                 n_backups;
	uint64_t                 n_promoted; // shards a backup took over
	struct shard_report      report;     // of the published placement
	int                      have_report;
	char                     start_error[256];
	uint8_t                 *gone;         // [servers] left the job
	uint8_t                 *trainer_gone; // [trainers] left the job
	// Liveness (scheduler_live.c): the fb_clock_ms() of each member's
	// last heartbeat or request, 0 while it is not tracked (it never
	// heartbeated, left, or was declared dead).
	uint64_t                *hb_trainer;  // [trainers]
	uint64_t                *hb_server;   // [n_servers_seen]
	uint8_t                 *server_dead; // [n_servers_seen] shards lost
	// The connection each tracked member heartbeats on and when it
	// closed (scheduler_live.c); trainers first, then servers, grown
	// by the heartbeat that needs a slot.
	struct ps_sched_conn    *hb_conn; // [n_hb_conn]
	size_t                   n_hb_conn;
	struct obs_registry     *reg;        // metrics; immutable after open
	pthread_t                sweeper;    // scheduler_live.c
	int                      sweeper_on; // the thread was started
	atomic_int               closing;    // tells the sweeper to stop
	// --state-dir (scheduler_state.c): the file ("" when off) and how
	// many writes succeeded and failed.
	char                     state_path[512], state_tmp[520];
	uint64_t                 state_saved, state_failed;
	// Rollbacks (scheduler_snapshot.c): each server's snapshot versions
	// (from its heartbeats and a restart's Register) and the rollback the
	// maps carry (Placement.rollback_version, rollback_gen).
	uint64_t                 snap_held[PS_MAX_MEMBERS][PS_SNAP_REPORTED];
	uint32_t                 n_snap_held[PS_MAX_MEMBERS];
	uint8_t                  snap_dir[PS_MAX_MEMBERS]; // registered
	                                                   // with one
	uint64_t                 rollback_version, rollback_gen;
	// A restart waiting for its rollback (scheduler_snapshot.c): server
	// rb_server + 1 (0: none) since rb_since_ms; rb_fresh[m] marks the
	// servers whose versions were reported after it.
	uint32_t                 rb_pending;
	uint64_t                 rb_since_ms;
	uint8_t                  rb_fresh[PS_MAX_MEMBERS];
	// The Snapshot forwarding thread (scheduler_snapshot.c): running
	// while it works, joinable until joined.
	pthread_t                snap_thread;
	int                      snap_running, snap_joinable;
	// Elastic membership (scheduler_elastic.c): the host each rank
	// registered from and the request id of its any_rank Register (a
	// re-sent one gets the same rank), the membership counters, and
	// the deaths of each recent rank slot (flapping).
	uint64_t                *trainer_host; // [trainers] ps__host_key
	uint64_t                *join_rid;     // [trainers] 0: none
	uint64_t                 n_joins, n_leaves, n_deaths, n_flap_refused;
	struct ps_sched_flap    *flap;   // [PS_FLAP_HOSTS]
	struct ps_sched_leases  *leases; // scheduler_leases.c (NULL: none)
	// Untrusted trainers (scheduler_quarantine.h): per rank its
	// quarantine and the evidence against it, how many are
	// quarantined, and the spot checks' audit key handed to servers.
	struct ps_sched_quar    *quar; // [trainers]
	uint32_t                 n_quarantined;
	uint64_t                 audit_key;
};

// ps__sched_probing says whether trainers measure their links before the
// job starts (probe-bytes > 0). Reads opts only: no lock needed.
static inline int
ps__sched_probing(const struct ps_scheduler *s)
{
	return s->opts.probe_bytes > 0;
}

// ---- scheduler_members.c: the rpcs that change membership ----------------

// ps__sched_on_register serves Register: a server (by URL; a known URL
// keeps its slot, a new one joins a running job) or a trainer (by rank,
// with the job's tensor table; the first declaration becomes the job's).
// Replies with the member's id and the job's size, or an error status.
// Takes mu.
void ps__sched_on_register(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_on_leave serves Leave: a trainer stops being waited for, a
// server gets no shard in the next map (refused for the last server).
// Takes mu.
void ps__sched_on_leave(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_on_report_links serves ReportLinks: one trainer's measured
// RTT and bandwidth to each server. Counts towards the start barrier; once
// the job runs, a change above the threshold re-places (latency policy).
// Takes mu.
void ps__sched_on_report_links(struct ps_scheduler *s, struct ps_call *c);

// ---- scheduler_elastic.c: elastic membership ----------------------------

// ps__sched_elastic_open sets the membership defaults in s->opts
// (min_trainers 0: trainers; the flapping thresholds) and allocates the
// tables. Errors: FB_EINVAL (min_trainers out of 1..trainers), FB_ENOMEM.
// At open.
int ps__sched_elastic_open(struct ps_scheduler *s);

// ps__sched_elastic_close frees what ps__sched_elastic_open allocated.
void ps__sched_elastic_close(struct ps_scheduler *s);

// ps__sched_is_live says whether rank r is a live member: registered and
// not gone (left, declared dead, or never registered when the job
// started). mu held.
static inline int
ps__sched_is_live(const struct ps_scheduler *s, uint32_t r)
{
	return s->trainer_seen[r] && !s->trainer_gone[r];
}

// ps__sched_live_trainers counts the live members. mu held.
int ps__sched_live_trainers(const struct ps_scheduler *s);

// ps__sched_free_rank returns the lowest rank no live member holds and
// not quarantined, or -1 when there is none. mu held.
int ps__sched_free_rank(const struct ps_scheduler *s);

// ps__sched_flap_wait says how long (ms) a registration of rank r must
// still wait because the slot flaps (its members died flap_deaths times
// within flap_window_ms): 0 when it may register now. mu held.
uint64_t ps__sched_flap_wait(struct ps_scheduler *s, uint32_t r, uint64_t now);

// ps__sched_trainer_dead records that trainer r was declared dead (after
// ps__sched_drop_trainer): counted, logged, and a death of its slot for
// flapping. mu held.
void ps__sched_trainer_dead(struct ps_scheduler *s, uint32_t r);

// ---- scheduler_job.c: the job declaration --------------------------------

// ps__sched_job_check validates a trainer's job declaration (tensor count,
// lengths and names, learning rate, codecs, mode). Returns FB_OK, or
// FB_EINVAL with the reason in why (n bytes). Pure: no lock needed.
int ps__sched_job_check(const Pswire__JobConfig *j,
    const struct ps_scheduler_opts *o, char *why, size_t n);

// ps__sched_job_diff returns 1 and describes the first difference between
// the job a and a declaration b in why (n bytes), or returns 0 when they
// agree. Pure: no lock needed.
int ps__sched_job_diff(const Pswire__JobConfig *a, const Pswire__JobConfig *b,
    char *why, size_t n);

// ps__sched_job_copy deep-copies j (pack, then unpack) so that the request
// can be freed. Returns NULL when out of memory; release the copy with
// pswire__job_config__free_unpacked(copy, NULL). Pure: no lock needed.
Pswire__JobConfig *ps__sched_job_copy(const Pswire__JobConfig *j);

// ---- scheduler_place.c: the placement map --------------------------------

// ps__sched_publish cuts the job's tensors into shards, places them by the
// configured policy and publishes the first map (epoch 1). Called once
// every member (and every link report, when probing) is in. Returns FB_OK,
// or an error, with s->start_error set when the operator must act. Does
// not answer parked calls. mu held.
int ps__sched_publish(struct ps_scheduler *s);

// ps__sched_replan places the shards again after the links or the members
// changed and publishes the result when `force` (a server left and its
// shards must go, or one joined under uniform placement) or when
// shard_policy_gains says it beats the map in force under the new links.
// `why` is for the log. Errors are logged; the running job goes on with
// the map in force. mu held; the job has started (s->placement != NULL).
void ps__sched_replan(struct ps_scheduler *s, const char *why, int force);

// ps__sched_republish publishes the map in force with shard i moved to
// server assign[i] (one entry per shard, each a known server index) as the
// next epoch, with the current members and the trainers that left, and
// answers the parked calls it satisfies. Returns FB_OK or FB_ENOMEM (the
// map in force stays). mu held; the job has started.
int ps__sched_republish(struct ps_scheduler *s, const uint32_t *assign);

// ps__sched_server_usable says whether server m may send or receive a
// shard: it is a known server, has not left, was not declared dead and is
// not suspect (its heartbeat connection closed, or it missed 2 heartbeat
// periods, and it has not heartbeated since). Move planning places
// shards only on usable servers and leaves those of an unusable one
// where they are. Inline here, beside the state it reads, so that the
// placement need not call into scheduler_live.c. mu held.
static inline int
ps__sched_server_usable(const struct ps_scheduler *s, uint32_t m)
{
	size_t i = (size_t) s->opts.trainers + m;
	if (m >= (uint32_t) s->n_servers_seen || s->gone[m] ||
	    s->server_dead[m]) {
		return 0;
	}
	return i >= s->n_hb_conn || !s->hb_conn[i].suspect;
}

// ps__sched_moves_unwind re-plans the moves in flight through server m,
// which is being declared dead: a shard moving to m whose sender has not
// reported it delivered (its heartbeats' sent epoch) goes back to its
// sender, which still holds it, when that sender is usable; a shard
// moving away from m that m had not reported sent is m's again (lost
// with it). Publishes a new map when anything changed. mu held; a no-op
// before the job starts.
void ps__sched_moves_unwind(struct ps_scheduler *s, uint32_t m);

// ---- scheduler_tables.c: the sparse tables' ranges ---------------------

// The table shards of a map being built: infos[n] and ptrs[n] (ptrs[i] =
// &infos[i]), for Placement.table_shards. Release with
// ps__sched_tables_free.
struct ps_sched_tables {
	Pswire__ShardInfo  *infos;
	Pswire__ShardInfo **ptrs;
	uint32_t           *bk; // --replicas: n_backups per shard (the
	                        // infos' backups point into it)
	size_t              n;
};

// ps__sched_tables_place cuts every table of s->job into its ranges
// (TableDesc.shards, 0: one per server) and places each on the usable
// server holding the fewest expected bytes, counting the dense shards
// that assign (ns entries, sizes s->shard_size) places. Errors: FB_ENOMEM
// (*out empty). mu held; for the first map.
int ps__sched_tables_place(struct ps_scheduler *s, const uint32_t *assign,
    size_t ns, struct ps_sched_tables *out);

// ps__sched_tables_keep copies the map in force's table shards into *out,
// each on its server, except those whose server left or was declared
// dead: promoted to their first live backup (--replicas), else moved
// (left) or re-placed with seed_gen raised (dead: logged as an error,
// their rows are lost) on the usable server holding the fewest bytes;
// then their backups are repaired. assign: the next map's dense shards.
// Errors: FB_ENOMEM. mu held.
int ps__sched_tables_keep(struct ps_scheduler *s, const uint32_t *assign,
    struct ps_sched_tables *out);

// ps__sched_tables_free releases t's arrays (zeroed memory: no-op).
void ps__sched_tables_free(struct ps_sched_tables *t);

// ---- scheduler_snapshot.c: rollbacks ----------------------------------

// ps__sched_snap_held records the snapshot versions server m reported
// (n of them; more than PS_SNAP_REPORTED are cut) and checks a pending
// rollback with them. mu held.
void ps__sched_snap_held(struct ps_scheduler *s, uint32_t m, const uint64_t *v,
    size_t n);

// ps__sched_rollback_begin starts the rollback after server m, which had
// shards in a job without replicas, restarted with snapshots of versions
// v[0..n): the decision waits until every other server holding shards has
// reported its versions again (its next heartbeat: a list reported before
// the restart may name files rotated out since), or dead_after_ms. Sets
// rep's late (0: m restores its own shards) and wait_epoch (the map it
// must wait for). mu held; the job has started.
void ps__sched_rollback_begin(struct ps_scheduler *s, uint32_t m,
    const uint64_t *v, size_t n, Pswire__RegisterReply *rep);

// ps__sched_rollback_check decides a pending rollback once every server
// holding shards has reported fresh versions, or when `expired`: the
// newest version every such server holds (shard_rollback_pick), logged
// and published in a map carrying the rollback. No common version: the
// job cannot continue consistently; that is logged, naming the servers'
// versions, and nothing is published (the trainers fail at their
// deadline). mu held.
void ps__sched_rollback_check(struct ps_scheduler *s, int expired);

// ---- scheduler_reseed.c: lost shards re-seeded from the trainers -------

// ps__sched_reseed re-places server m's shards, whose only copy is gone:
// each is promoted to a usable backup when it has one, else re-seeded
// (seed_gen raised) onto m itself when `self` (m came back empty into its
// slot; the caller has made it usable), or onto the usable server other
// than m that holds the fewest bytes; then publishes the next map. Logs
// what it did. Returns how many shards were re-seeded (0 also when
// nothing changed or on FB_ENOMEM, logged; the map in force stays). mu
// held; the job has started.
size_t ps__sched_reseed(struct ps_scheduler *s, uint32_t m, int self);

// ps__sched_reseed_dead handles the shards of server m, just declared
// dead in a job without replicas: re-seeded (ps__sched_reseed) unless m
// keeps snapshots, whose restart rolls the job back instead. mu held.
void ps__sched_reseed_dead(struct ps_scheduler *s, uint32_t m);

// ---- scheduler_live.c: liveness ---------------------------------------

// ps__sched_live_start starts the sweeper thread. Errors: FB_ENOMEM (the
// thread cannot be created). At open.
int ps__sched_live_start(struct ps_scheduler *s);

// ps__sched_live_stop stops and joins the sweeper (a no-op when it never
// started). At close, before the rpc is closed.
void ps__sched_live_stop(struct ps_scheduler *s);

// ps__sched_touch records a sign of life from a member (any request
// naming it): it refreshes the member's time when the member is tracked
// and does nothing otherwise. mu held.
void ps__sched_touch(struct ps_scheduler *s, int role, uint32_t id);

// ps__sched_live_pipe_closed notes that connection pipe_id closed: a
// member whose heartbeats came on it is declared dead unless it
// heartbeats on a new connection within 2 x opts.heartbeat_ms. Called by
// the rpc on an nng thread (ps__rpc_on_pipe_closed). Takes mu.
void ps__sched_live_pipe_closed(void *s, uint32_t pipe_id);

// ps__sched_live_untrack stops tracking a member (it left). mu held.
void ps__sched_live_untrack(struct ps_scheduler *s, int role, uint32_t id);

// ps__sched_drop_trainer takes trainer id (< trainers) out of the job, as
// a Leave does: it is no longer tracked for liveness and, once the job
// runs, a new map lists it as gone (a no-op when it already is). The
// caller logs why. mu held.
void ps__sched_drop_trainer(struct ps_scheduler *s, uint32_t id);

// ps__sched_on_heartbeat serves Heartbeat: with a leave_req body naming a
// registered member (role, id), starts or refreshes its tracking; replies
// with the job's trainer and server counts. Without a body it only
// replies (a liveness probe of the scheduler). Takes mu.
void ps__sched_on_heartbeat(struct ps_scheduler *s, struct ps_call *c);

// ---- scheduler_state.c: the job on disk (--state-dir) --------------------

// ps__sched_state_open names the state file under opts.state_dir and, when
// one is there, loads it into s (job, members, epoch, map): the whole file
// is checked (magic, format, CRC, every count and index) before s is
// touched. A no-op without a state_dir. Errors: FB_EINVAL (state_dir is
// not a directory), FB_ECORRUPT or FB_EPROTO (the file is damaged or was
// written for another job; logged naming the file, nothing loaded),
// FB_ENOMEM, FB_ESYSERR|errno. At open, before the rpc serves.
int ps__sched_state_open(struct ps_scheduler *s);

// ps__sched_state_save writes the job, members, epoch and map to the state
// file (temp file, fsync, rename: durable.c) when --state-dir is set.
// Called whenever they change and before a new map is answered to anyone,
// so that a restarted scheduler never reuses an epoch. Returns FB_OK or
// FB_ENOMEM / FB_ESYSERR|errno (logged; the previous file is kept). Blocks
// on the disk for one small write: the scheduler is off the training hot
// path. mu held.
int ps__sched_state_save(struct ps_scheduler *s);

// ---- scheduler_snapshot.c: one snapshot of the whole job ----------------

// ps__sched_on_snapshot serves Snapshot: forwards it to every server of
// the map in force from a thread of its own (sync: one version V for all,
// the requested one, the version every shard holds, or the highest + 1;
// async: each server
// now) and answers with the version and the summed shards and bytes, or
// the first server's error naming it. One at a time: a second call gets
// UNAVAILABLE. Takes mu.
void ps__sched_on_snapshot(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_snapshot_stop waits for a forwarding in progress to end (its
// calls' deadline bounds it). At close, before the rpc is closed.
void ps__sched_snapshot_stop(struct ps_scheduler *s);

// ---- scheduler_obs.c: what an operator sees -----------------------------

// ps__sched_metrics_open makes s->reg with the scheduler's scrape-time
// collector (members, map epoch, links). Errors: FB_ENOMEM. At open.
int ps__sched_metrics_open(struct ps_scheduler *s);

// ---- scheduler_reply.c: answers ------------------------------------------

// ps__sched_answer_parked answers every parked GetPlacement that can be:
// with the start error, the map (once its epoch reaches the call's
// min_epoch) or the membership map (min_epoch 0, every server in). The
// others stay parked. mu held.
void ps__sched_answer_parked(struct ps_scheduler *s);

// ps__sched_on_get_placement serves GetPlacement: parks the call until a
// map of at least its min_epoch (1 without a body) exists, answering at
// once when one does. A parked call expires at its deadline, at most
// PS_SCHED_PARK_MAX_MS from now (ps__sched_expire_parked). Takes mu.
void ps__sched_on_get_placement(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_pipe_gone answers CANCELLED to every parked call that came
// on connection pipe, which has closed, so that its context serves again
// (rpc.h LIMITS). Called on an nng thread; takes mu.
void ps__sched_pipe_gone(void *arg, uint32_t pipe);
// ps__sched_expire_parked answers DEADLINE_EXCEEDED to every parked call
// whose deadline is at or before now_ms. mu held.
void ps__sched_expire_parked(struct ps_scheduler *s, uint64_t now_ms);

// ps__sched_reply_counts answers c with a RegisterReply that carries the
// job's trainer and server counts. Takes mu (call it without).
void ps__sched_reply_counts(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_reply_leave acknowledges a Leave that was applied, with the
// job's trainer and server counts. Called without mu, after the change.
void ps__sched_reply_leave(struct ps_scheduler *s, struct ps_call *c);

// ps__sched_reply_links acknowledges a ReportLinks that was applied, with
// the job's trainer and server counts. Called without mu, after the
// change.
void ps__sched_reply_links(struct ps_scheduler *s, struct ps_call *c);

// A refusal: an error reply a handler decides with mu held and sends
// after releasing it (scheduler_members.c's DESIGN). msg has the size of
// the rpc layer's message, so a reason is cut where it always was.
struct ps_sched_refusal {
	int  status; // PSWIRE__STATUS__*, never OK
	char msg[512];
};

// ps__sched_refuse records an error reply in no and returns its status
// (non-zero), so that a handler can `return ps__sched_refuse(...)`.
int ps__sched_refuse(struct ps_sched_refusal *no, int status, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));

#endif // PS_SCHEDULER_IMPL_H
