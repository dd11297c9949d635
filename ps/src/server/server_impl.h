// server_impl.h — the parameter-server role's private header: the shard and
// server structs, the named states, the lock order, and the functions the
// server's files call across each other (prefix ps__). Only the files of
// the server role include it; the public face is ps/ps.h.
//
// DESIGN.
// - State: one mutex (s->mu) guards the shard table, versions and the
//   parked list. Gradient bytes are decoded OUTSIDE the lock into a
//   per-rank staging slot that only that rank writes for that version (a
//   push first reserves its slot under the lock), so trainers decode in
//   parallel.
// - Sync mode: when every trainer's push for version v of a shard is in,
//   the slots are summed in rank order (reproducible), divided by the
//   total samples and applied by the job's optimizer (optim.c; SGD:
//   x -= lr * sum / samples); version = v + 1. Async mode: each push is
//   applied under the lock as it arrives.
// - A round never completes while one of its slots is PS_SLOT_DECODING,
//   even when a new map marks that slot's rank gone: the decoder's commit
//   (or its refusal of a bad gradient) closes the round instead. So a
//   decoder always commits into the version it was admitted for (a rank
//   that was in a round when it left keeps its push in it), and a shard
//   with a decoding slot is never released (moves.c waits on s->decoded
//   for the slots of leaving shards).
// - Pulls for a version not reached yet are parked (their nng context is
//   simply not answered) and answered when the version exists, from the
//   thread that applied the update; a sweeper thread answers parked calls
//   whose deadline passed with DEADLINE_EXCEEDED. A reply is built in its
//   request's buffer when that is large enough (a push-pull's is), so a
//   step allocates and zeroes no reply message.
// - Every length, id, version and count from the network is checked before
//   use; a bad request gets INVALID_ARGUMENT (or the precise status) and
//   changes nothing.
// - A background thread registers with the scheduler and fetches the
//   placement (until it arrives requests get UNAVAILABLE), then watches
//   for every later map epoch and moves shards (moves.c).
// - Compression (docs/algorithms.md §2.4): pushes arrive as the job's push
//   codec (or fp32 during warm-up) and are decoded into fp32. With a pull
//   codec, each shard keeps a reference `ref` that every trainer also
//   holds; after each update the server encodes d = Q(x - ref), applies
//   ref += deq(d) (comp_ref_encode) and keeps the last `log_k` encoded
//   deltas, so a pull sends the chain of deltas the trainer is missing, or
//   the full reference when it is too far behind, asks for it, or the job
//   is in warm-up.
//
// LOCK ORDER. s->mu is the role's only mutex; nothing else is taken while
// it is held except nng's internal locks: replies are sent under mu, which
// is safe because nng_ctx_send is asynchronous. No call that blocks on the
// network (peer Transfers, scheduler calls) is made with mu held. The two
// condition variables (decoded, delivered) wait on mu. Disk I/O is not
// done under mu either, except reading the snapshot at restore, which runs
// in ps__map_install before the server serves.
//
// Files: server.c (open/close, dispatch, probe, stats), errors.c (the
// error reply), owner.c (shard admission), finite.c (finite checks on
// a round's update), store.c (a round's completion and sum, clocks, shard
// buffers), mapinstall.c (map checks, the first placement), optim.c (the
// optimizers and their state), pull_ref.c (pull reference and delta log),
// pull.c (pulls, parking, the deadline sweeper), push.c (pushes: async,
// stage, commit), seed.c (re-seeding a lost shard from the trainers'
// offers), transfer.c (a shard's state on the wire), moves.c
// (re-placement and leave), replicate.c (--replicas: forwards and the
// backup's apply), audit.c (spot checks: the pushes kept for a verifier
// and the Audit rpc), boot.c (the scheduler watch), server_obs.c (metrics),
// snapshot.c (snapshots on disk; its writer thread waits on its own
// condition variables, on mu), snapshot_load.c (checking and restoring);
// rows.c (sparse tables: Rows calls, rounds), rows_map.c (the table shards
// held as maps change), rows_park.c (parked Rows calls, stats, metrics),
// rows_move.c (table shards moving between servers), rows_repl.c (their
// replicas), rows_snap.c (their snapshot records): their struct and
// functions are in rows_impl.h, audit.c's in audit.h; test_hooks.h
// declares the entry points only tests call.
// What the scheduler shares with the server (rpc.h, durable.h,
// jobconf.h) is in ../common/.
#ifndef PS_SERVER_IMPL_H
#define PS_SERVER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <nng/nng.h>

#include "comp/comp.h"
#include "fb/optim.h"
#include "jobconf.h"
#include "ps/ps.h"
#include "rpc.h"
#include "audit.h"
#include "rows_impl.h"
#include "tbl/tbl.h"

// s->local[id]: the shard's index in s->shards (== id) when held here,
// else one of these.
#define PS_SHARD_ABSENT (-1) // placed elsewhere
#define PS_OWNERS_SEEN 4
#define PS_SHARD_ARRIVING (-2) // placed here by a new map; state in transit
#define PS_SHARD_LEAVING (-3)  // placed elsewhere by a new map; moving out

// The longest stuck-round warning (longer lists of shards or ranks end in
// "...").
#define PS_STALL_LINE 384

// Pull deltas kept per shard for trainers a few versions behind: past
// this a full reference costs less than replaying (docs/algorithms.md
// §2.4, LOG_K). The most: a job keeps fewer when their codes would not
// fit in PS_DELTA_LOG_BUDGET of the shard's fp32 bytes, at least one
// (ps__delta_log_depth): 4 deep fp16 deltas were 2 x the weights
// (issue 30).
#define PS_DELTA_LOG 4
#define PS_DELTA_LOG_BUDGET 0.25

// ps__delta_log_depth returns the delta log depth of a job whose pull
// codec is c and whose largest shard has maxlen elements: the most
// entries of comp_bound(c, maxlen) bytes that fit in PS_DELTA_LOG_BUDGET
// x 4 x maxlen bytes, between 1 and PS_DELTA_LOG. Every server of a job
// gets the same depth (Transfers carry the log as is).
uint32_t ps__delta_log_depth(const struct comp_codec *c, size_t maxlen);

// Backups per shard a server forwards to (--replicas caps at 16 copies).
#define PS_MAX_BACKUPS 15

// The state of one rank's staging slot of a shard (sh->state[rank]) for
// the shard's current version. The values travel in a Transfer's `state`
// bytes (FREE and PUSHED only), so they must not be renumbered.
enum ps_slot_state {
	PS_SLOT_FREE     = 0, // no push yet for this version
	PS_SLOT_DECODING = 1, // reserved: the push decodes outside the lock
	PS_SLOT_PUSHED   = 2, // staged; waits for the round to complete
};

struct srv_shard {
	uint32_t id; // global shard id
	uint32_t tensor;
	uint64_t offset; // elements within the tensor
	uint64_t len;    // elements
	float   *x;      // master weights
	float   *opt;    // optimizer state: ps__shard_opt_bufs x len (optim.c)
	int      average; // its tensor is TENSOR_AVERAGE: updates set x to
	                  // the pushes' mean, no optimizer (optim.c)
	// [trainers] sync staging slots: a chunk of the server's stage pool
	// (store.c's POOL) while the rank's push is staged there, else NULL
	float  **slot;
	// [trainers]: where a PS_SLOT_PUSHED rank's fp32 gradient is when it
	// was not copied into its slot: borrowed from the request of its
	// parked PushPull (any alignment; push.c's BORROWING), else NULL.
	const uint8_t **src;
	uint8_t        *state; // per rank: an enum ps_slot_state
	// [trainers], for a PS_SLOT_PUSHED rank: its push's n_samples (0:
	// not known, a push that arrived staged in a Transfer) and its
	// PushRequest.data_step (1 + the data step it claims; 0: none), for
	// robust aggregation and spot checks (robust.c, audit.c)
	uint32_t       *n_samp;
	uint64_t       *claim;
	// --aggregate cclip: the shard's last aggregate, and with worker
	// momentum (BETA > 0) one block of [trainers] momentum rows of
	// ps__agg_cc_ld(len) floats followed by [trainers] bytes, 1 once the
	// rank's row is set (robust.c)
	float          *prev;
	float          *mom;
	uint32_t        n_pushed;
	uint64_t        samples;
	uint64_t        version;
	int             init; // version-0 weights have arrived
	uint64_t        seen; // duplicate check stamp
	// Async and SSP: pushes applied per rank ([trainers]): a rank's
	// clock. An SSP pull waits until the slowest rank still in the job
	// is at most K clocks behind the puller (pull.c).
	uint64_t       *clock;
	// The current sync round's wait: when its first push was committed
	// (fb_clock_ns; 0: none), for the round-wait histogram and the
	// stuck-round sweeper, and the round already warned about, as
	// version + 1 (0: none).
	uint64_t        round_t0;
	uint64_t        stall_warned;
	// pull reference and delta log (only with a pull codec)
	float          *ref;
	uint32_t        ref_crc;
	uint8_t        *log; // log_k entries of log_cap bytes
	size_t          log_cap;
	uint64_t *log_base; // base version of each entry (UINT64_MAX: empty)
	uint32_t *log_crc;  // crc of ref after the entry
	size_t   *log_len;
	// --replicas (replicate.c): held here as a backup (never served to
	// trainers; it applies its primary's Replicate requests), and, on a
	// primary, the forwards of the current version not yet acknowledged
	// (pulls of the shard park until it is 0).
	int       backup;
	uint32_t  fwd_pending;
	// The CRC-32 of x at version crc_at, when crc_ok (replicate.c): a
	// Replicate names the CRC of the weights it applies to, so that a
	// backup checks it has the same base before it applies the update.
	// Computed after each replicated update (off the forward's critical
	// path); ps__shard_load_state clears crc_ok.
	uint32_t  crc;
	int       crc_ok;
	uint64_t  crc_at;
	// Re-seeding (seed.c): the shard's only copy was lost and it waits
	// for the trainers' offers of theirs since seed_t0 (fb_clock_ms);
	// seed_have: an offer was taken (its values in x, its version in
	// seed_version); seed_told: when the wait was last logged. While
	// seeding, state[r] != PS_SLOT_FREE marks the ranks that offered.
	int       seeding, seed_have;
	uint64_t  seed_version, seed_t0, seed_told;
};

// The newest lease mark of a rank's admitted pushes (heartbeat.c): the
// samples of lease `id` up to position `end` were in them (0, 0: none).
struct ps_lease_mark {
	uint64_t id, end;
};

// join_at of a rank that a map added and that has not joined yet: no sync
// round of this server waits for it (store.c's JOINS).
#define PS_JOIN_PENDING UINT64_MAX

// A table shard id in a move's list of Transfers (moves.c), beside dense
// shard ids.
#define PS_TABLE_ID 0x80000000u

struct ps_server {
	struct ps_server_opts opts;
	struct ps_rpc        *rpc;
	struct psw_auth      *auth; // --secret-file signing (NULL: off)
	struct psw_tls       *tls;  // --tls-* (NULL: plain tcp)
	char                  url[256];
	pthread_mutex_t       mu;
	// Signalled (under mu) when pushes that were decoding leave the
	// PS_SLOT_DECODING state: a map change waits for them (moves.c).
	pthread_cond_t        decoded;
	// Signalled (under mu) when a packed shard's Transfer is delivered
	// or given up: ps_server_leave waits for them (CLOCK_MONOTONIC).
	pthread_cond_t        delivered;
	pthread_t             boot_thread, sweep_thread;
	atomic_int            closing;
	// The boot thread's aio while it has one (boot_mu). ps_server_close
	// lets the call in flight end first (boot.c's DESIGN: closing its
	// socket while a reply arrives can hang nng 1.5.2) and stops it only
	// when the scheduler has not answered by then; later calls on a
	// stopped aio fail at once. boot_done: the boot thread has finished.
	pthread_mutex_t       boot_mu;
	nng_aio              *boot_aio;
	atomic_int            boot_done;
	// The heartbeat thread (heartbeat.c) and the index it reports, -1
	// until Register answered (set by the boot thread).
	pthread_t             hb_thread;
	atomic_int            hb_index;
	atomic_int            ready;
	uint32_t              index;
	Pswire__Placement    *pl;
	uint32_t              trainers;
	// The job as this server runs it (mode, staleness, quorum, lr,
	// warm-up, optimizer, codecs), read once from the first map
	// (ps__job_read, jobconf.c); the hot paths read s->job.x.
	struct ps_job         job;
	struct srv_shard     *shards; // mine
	uint32_t              n_shards;
	int32_t              *local; // global id -> index in shards, or -1
	// Per global shard, its last PS_OWNERS_SEEN servers in the maps
	// installed here, newest first (PSW_ID_UNASSIGNED: none known): a
	// Transfer must come from one of them (docs/security.md).
	uint32_t             *owners;
	size_t                n_global;
	float                *sum; // scratch: largest shard
	// The stage pool (store.c's POOL): free chunks of stage_len floats
	// (the largest shard), linked through their first bytes;
	// stage_chunks: how many exist, held by slots or free (stage_n_free).
	void                 *stage_free;
	size_t                stage_len;
	uint64_t              stage_chunks, stage_n_free;
	float                *scratch; // scratch: largest shard (ref encode)
	struct comp_codec     cnone;   // "none": the codec of fp32 pushes
	uint32_t              log_k;
	uint64_t              stamp;
	struct ps_call       *parked;
	// Sparse tables (rows.c): the table shards held here (tlocal[id]:
	// index in tshards, or -1), parked Rows calls, and the scratch a
	// round's rank-order sum and a reply use (grow-only: merge keys,
	// open-addressing slots -> row + 1, accumulators, counts; lookup
	// rows; reply keys).
	struct srv_tshard    *tshards;
	uint32_t              n_tshards;
	int32_t              *tlocal;
	uint32_t             *tfrom; // ARRIVING: the server moving it here
	size_t                n_tglobal;
	struct ps_call       *rows_parked;
	uint64_t             *mkeys;
	uint32_t             *mslot;
	float                *macc;
	uint32_t             *mcnt;
	size_t                mcap, mslots, mdim_cap;
	float                *rscratch;
	size_t                rscratch_cap;
	uint64_t             *kscratch;
	size_t                kscratch_cap;
	atomic_uint_fast64_t  n_rows_push, n_rows_pull;
	uint64_t              cap_evicted; // rows evicted for the budget
	uint8_t              *trepl;       // a table Replicate's rows
	size_t                trepl_cap;   // (rows_repl.c, grow-only)
	uint64_t             *evict_hist;  // --sparse-capacity-mb's histogram
	                                   // (rows_repl.c, made once)
	// stats (relaxed atomics)
	atomic_uint_fast64_t  n_push, n_pull, n_err, bytes_in, bytes_out;
	atomic_uint_fast64_t  n_applied;
	// time spent closing sync rounds (aggregate, update, publish;
	// store.c), ns, under mu: what a robust --aggregate adds is seen here
	uint64_t              close_ns;
	// parked calls examined for readiness (under mu): a sync round of T
	// pushes examines O(T) of them (pull.c, push.c)
	uint64_t              park_checks;
	atomic_uint_fast64_t  n_overflow; // updates refused: would overflow
	atomic_int            transfers;  // shards packed, not yet delivered
	int                   late;       // joined a running job
	uint8_t              *gone;       // [trainers] ranks that left
	// Sync joins (store.c's JOINS): join_at[r], the version from which
	// this server's rounds wait for rank r (0: from the start;
	// PS_JOIN_PENDING: added by a map, not joined yet); added: scratch
	// of ps__ranks_map.
	uint64_t             *join_at; // [trainers]
	// The ranks neither gone nor pending, and the latest join_at among
	// them: a round at version >= n_join_hi waits for n_joined ranks
	// (ps__shard_complete's shortcut; ps__ranks_count keeps them).
	uint32_t              n_joined;
	uint64_t              n_join_hi;
	uint8_t              *added; // [trainers]
	// Lease marks (heartbeat.c): each rank's newest (lease id, end) of an
	// admitted push, and the heartbeat thread's copy of them (only it
	// touches hb_marks after the first map made them).
	struct ps_lease_mark *marks;        // [trainers]
	Pswire__LeaseMark    *hb_marks;     // [trainers]
	Pswire__LeaseMark   **hb_mark_ptrs; // [trainers]
	uint64_t              started_ms;
	// stuck rounds: warnings logged, and the last one's text (under mu)
	atomic_uint_fast64_t  n_stalls;
	char                  stall_last[PS_STALL_LINE];
	// metrics (server_obs.c): the registry and the series the hot paths
	// update; last_rank[r] counts sync rounds rank r completed (under mu)
	struct obs_registry  *reg;
	struct obs_metric    *round_wait, *moves_out, *moves_in;
	struct obs_metric    *reseeded, *offers_ignored; // seed.c
	uint64_t             *last_rank;                 // [trainers]
	atomic_int            leaving; // ps_server_leave was called
	struct ps_snap       *snap;    // snapshot.c; NULL: no --snapshot-dir
	struct ps_robust     *robust;  // robust.c: --aggregate (the first map)
	// The last rollback this server applied (snapshot_load.c): its map
	// generation (Placement.rollback_gen) and placement epoch; a request
	// made under an older map is refused STALE_EPOCH.
	uint64_t              rollback_gen, rollback_epoch;
	struct ps_repl       *repl;       // replicate.c (after the first map)
	int                   replicated; // the first map named backups
	uint32_t              n_backup_shards; // held here as a backup
	// ps_server_test_stage_hook: called by a sync push between reserving
	// its slots and decoding (tests widen the race window with it)
	void (*stage_hook)(void *arg, uint32_t rank);
	void              *stage_hook_arg;
	// Spot checks (audit.h): the RegisterReply's draw (audit_set: a
	// test hook's), the kept pushes (NULL: off) and their metrics.
	double             audit_rate;
	uint64_t           audit_key;
	int                audit_set;
	struct ps_audit   *audit;
	struct obs_metric *audits_kept, *audits_dropped, *audits_served;
};

// One REQ context per peer server, opened on first use, for Transfers.
// Owned by the boot thread; zero-initialise, release with ps__peers_close.
struct ps_peers {
	size_t                 n;
	nng_socket            *sock;
	nng_ctx               *ctx;
	nng_aio              **aio;
	struct ps_peer_watch **watch; // transfer.c: its connections
	uint8_t               *open;
	uint64_t               rid;
};

// ps__shard_opt_bufs is the number of optimizer state buffers shard sh
// keeps (sh->opt, each sh->len floats): the job's, or none for an average
// shard, whose updates use no optimizer.
static inline uint32_t
ps__shard_opt_bufs(const struct ps_server *s, const struct srv_shard *sh)
{
	return sh->average ? 0 : s->job.optim_bufs;
}

// ---- errors.c --------------------------------------------------------------

// ps__server_reply_err answers c with status and a printf-style message
// and counts the error in the stats. Any thread; mu may or may not be held.
void ps__server_reply_err(struct ps_server *s, struct ps_call *c, int status,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

// ---- owner.c ---------------------------------------------------------------

// ps__server_own_shard checks that shard id can be served here for a
// request made with placement epoch `epoch`; otherwise it replies the
// status that tells the client what to do (STALE_EPOCH: fetch the new map;
// UNAVAILABLE: retry; INVALID_ARGUMENT: a bug or a hostile peer) and
// returns -1. mu held.
int ps__server_own_shard(struct ps_server *s, struct ps_call *c, uint32_t id,
    uint64_t epoch);

// ---- finite.c --------------------------------------------------------------

// ps__update_finite reports whether x - scale * g stays finite for every
// one of n elements, g being the floats at a (any alignment: payload
// bytes), or a + b when b is not NULL. Read-only: a check before an
// update that must change nothing when refused. No lock needed.
int ps__update_finite(const float *x, float scale, const void *a,
    const void *b, size_t n);

// ps__average_finite reports whether an average shard's update from a
// (+ b element-wise when b is not NULL; floats, any alignment) stays
// finite: whether the sum does (dividing by the samples cannot overflow).
// Read-only. No lock needed.
int ps__average_finite(const void *a, const void *b, size_t n);

// ---- store.c ---------------------------------------------------------------

// ps__shard_alloc gives shard sh (sh->len elements) its buffers: weights,
// staging slots, slot states and, with a pull codec, the reference and
// delta log. FB_ENOMEM leaves some allocated: ps__shard_release frees
// them. mu held (or the server not serving yet).
int ps__shard_alloc(struct ps_server *s, struct srv_shard *sh);

// ps__shard_release frees sh's buffers and zeroes its state, keeping its
// identity (id, tensor, offset, len); the stage chunks its slots hold go
// back to s's pool. Safe on a shard without buffers. mu held (or the
// server no longer serving).
void ps__shard_release(struct ps_server *s, struct srv_shard *sh);

// ps__stage_take gives rank r's staging slot of sh a chunk of the stage
// pool (store.c's POOL; allocated only while the pool grows) unless it
// holds one. Returns it, or NULL (out of memory). mu held.
float *ps__stage_take(struct ps_server *s, struct srv_shard *sh, uint32_t r);

// ps__stage_put hands rank r's chunk of sh (if any) back to the pool.
// mu held.
void ps__stage_put(struct ps_server *s, struct srv_shard *sh, uint32_t r);

// ps__stage_drop hands back the chunks of sh's ranks in PS_SLOT_FREE
// (after a round, or wherever the states are reset). mu held.
void ps__stage_drop(struct ps_server *s, struct srv_shard *sh);

// ps__stage_pool_free frees the pool's free chunks and the robust
// aggregation state (server close).
void ps__stage_pool_free(struct ps_server *s);

// ps__shard_complete reports whether every trainer still in the job (or,
// with a sync quorum Q, Q of them) has pushed the shard's current version
// and no push (even a departed rank's) is still decoding into it. mu held.
int ps__shard_complete(const struct ps_server *s, const struct srv_shard *sh);

// ps__shard_apply_sync closes a complete sync round: it sums the staged
// pushes in rank order and applies the sum through the job's optimizer
// (ps__optim_apply; through ps__repl_apply when the shard has backups;
// an update that would overflow is refused, the weights unchanged),
// advances the version, publishes the pull reference, frees the slots and
// tells the snapshot writer. mu held.
void ps__shard_apply_sync(struct ps_server *s, struct srv_shard *sh);

// ps__shard_unborrow copies into their staging slots the gradients that
// parked call c (a PushPull) still lends its shards' rounds (push.c's
// BORROWING): call it before answering c any other way than with the
// version it waits for (a deadline, a closed connection, an abort). A
// slot that gets no chunk (out of memory) withdraws its push from the
// round instead, as if never sent: returns how many were withdrawn (the
// caller answers UNAVAILABLE, so the trainer sends it again; 0 for any
// other call). mu held.
size_t ps__shard_unborrow(struct ps_server *s, struct ps_call *c);

// ps__rank_waited reports whether a sync round of this server at version
// `version` waits for rank r: it is in the job and joined at or before
// that version (store.c's JOINS). mu held.
static inline int
ps__rank_waited(const struct ps_server *s, uint32_t r, uint64_t version)
{
	return !s->gone[r] && s->join_at[r] <= version;
}

// ps__ranks_count recounts s->n_joined and s->n_join_hi after gone or
// join_at changed. O(trainers). mu held.
void ps__ranks_count(struct ps_server *s);

// ps__rank_join makes rank r expected from version v on (joined at v), or
// keeps an earlier join: a join pull, or a push staged at v. mu held.

static inline void
ps__rank_join(struct ps_server *s, uint32_t r, uint64_t v)
{
	if (s->join_at[r] > v) {
		s->join_at[r] = v;
		ps__ranks_count(s);
	}
}

// ps__ranks_alloc allocates the per-rank arrays of the first map
// (s->trainers known): gone, join_at, added, last_rank, the lease marks
// and the heartbeat's copy, and the robust aggregation's state
// (ps__robust_open). FB_ENOMEM; FB_EINVAL (logged: --aggregate refused).
// mu held, from ps__map_install.
int ps__ranks_alloc(struct ps_server *s);

// ps__ranks_map sets the departed trainers from map pl (the first one
// when first) and treats the ranks it adds (gone before, not now; in the
// first map, every rank it lists gone starts pending): in a sync job they
// are pending until they join, in an async or SSP job each one's clock on
// every held shard and table shard is raised to the slowest other rank's.
// The caller then closes the rounds an absence completes. mu held.
void ps__ranks_map(struct ps_server *s, const Pswire__Placement *pl,
    int first);

// ps__shard_min_clock returns the lowest clock (pushes applied) over the
// ranks still in the job (UINT64_MAX when none is). mu held.
uint64_t ps__shard_min_clock(const struct ps_server *s,
    const struct srv_shard                          *sh);

// ---- mapinstall.c ----------------------------------------------------------

// ps__map_check validates a placement map from the scheduler:
// FB_OK or FB_EPROTO. No lock needed.
int ps__map_check(const Pswire__Placement *pl);

// ps__map_install sets up the job from the first map: every shard
// gets a slot (indexed by global id), the ones placed here get buffers.
// Takes ownership of pl on FB_OK. Errors: FB_EPROTO, FB_ENOMEM. mu held.
int ps__map_install(struct ps_server *s, Pswire__Placement *pl);

// ---- optim.c ---------------------------------------------------------------

// ps__optim_lr is the lr of a dense update at version: the job's schedule
// (fb_lr_at) times its lr_mul (a local-steps job's inner lr, else 1.0).
double ps__optim_lr(const struct ps_server *s, uint64_t version);

// ps__optim_apply applies one update to sh->x and its optimizer state
// sh->opt from the gradient sum g0 (+ g1 element-wise when g1 is not NULL:
// a two-push round, summed in float as the rank-order sum) over `samples`
// samples, at lr = ps__optim_lr(s, sh->version). It does not advance
// the version. The single apply of every update (sync rounds, async
// pushes, replays), so the same inputs give the same bits. No allocation.
// mu held (or the shard otherwise private to the caller).
void ps__optim_apply(const struct ps_server *s, struct srv_shard *sh,
    const float *g0, const float *g1, uint64_t samples);

// ps__optim_apply_checked is a sync round's overflow check
// (ps__update_finite at check_scale) and its apply in one pass, for the
// job whose optimizer is plain SGD without decay at that very step (the
// default): it returns 1 when it applied the update (ps__optim_apply's
// bits), 0 when the update would overflow (sh->x unchanged: the check's
// verdict), and -1 without touching anything for any other job (check,
// then apply). g0 must be writable and is consumed: it ends holding the
// old weights. mu held.
int ps__optim_apply_checked(const struct ps_server *s, struct srv_shard *sh,
    float check_scale, float *g0, const float *g1, uint64_t samples);

// ps__optim_apply_crc is ps__optim_apply (the same bits) that also
// returns the CRC-32 of the new weights, each block checksummed while it
// is still in cache instead of in a second pass over the shard (a
// replicated shard's primary and backups check each other's weights).
uint32_t ps__optim_apply_crc(const struct ps_server *s, struct srv_shard *sh,
    const float *g0, const float *g1, uint64_t samples);

// ---- pull_ref.c ------------------------------------------------------------

// How ps__ref_plan brings a caller up to date.
enum ps_ref_plan {
	PS_PLAN_FULL,  // send the full reference (or weights)
	PS_PLAN_CHAIN, // send the chain of logged deltas
};

// ps__ref_log_reset empties sh's delta log. mu held.
void ps__ref_log_reset(struct ps_server *s, struct srv_shard *sh);

// ps__ref_publish updates the pull reference (and logs the delta) after
// sh->x changed and sh->version advanced; no-op without a pull codec.
// mu held.
void ps__ref_publish(struct ps_server *s, struct srv_shard *sh);

// ps__ref_plan decides how to bring a caller holding version `have` (or
// asking for a `full` resync) up to the shard's version: the chain of
// logged deltas when they are all there, else the full reference. *nrefs
// and *bytes receive its size. Returns an enum ps_ref_plan. mu held.
int ps__ref_plan(const struct ps_server *s, const struct srv_shard *sh,
    uint64_t have, int full, size_t *nrefs, size_t *bytes);

// ---- pull.c ----------------------------------------------------------------

// ps__on_pull serves a Pull: checks it, then answers or parks it. Called
// on an nng callback thread; takes mu.
void ps__on_pull(struct ps_server *s, struct ps_call *c);

// ps__call_n_shards returns how many shards parked (or parkable) call c,
// a Pull or PushPull, names. mu held (c is on s->parked) or c is ours.
size_t ps__call_n_shards(const struct ps_call *c);

// ps__call_shard returns the i-th shard id of such a call, with the
// version of the reference the caller holds (*have) and whether it asked
// for a full resync (*full).
uint32_t ps__call_shard(const struct ps_call *c, size_t i, uint64_t *have,
    int *full);

// ps__pull_wake answers every parked call whose shards are ready: call it
// after a change that can ready one (a version moved, a forward was
// acknowledged, a shard arrived or opened), not after every request. mu
// held.
void ps__pull_wake(struct ps_server *s);

// ps__pull_or_park answers c (a Pull or PushPull) now if its shards
// reached version want, else parks it until they do; it examines c alone
// (the caller wakes the others if it changed something). mu held.
void ps__pull_or_park(struct ps_server *s, struct ps_call *c, uint64_t want);

// ps__pull_pipe_gone answers CANCELLED to every parked call that came on
// connection pipe, which has closed, so that its context serves again
// (rpc.h LIMITS; the arg is the server). Called on an nng thread; takes
// mu.
void ps__pull_pipe_gone(void *arg, uint32_t pipe);
// ps__pull_abort_all answers every parked call STALE_EPOCH, naming map
// epoch `epoch` (a rollback: the versions they wait for are redone). mu
// held.
void ps__pull_abort_all(struct ps_server *s, uint64_t epoch);
// ps__pull_abort_leaving answers every parked call that involves a shard
// marked PS_SHARD_LEAVING (ABORTED for a PushPull, whose push was applied;
// STALE_EPOCH for a Pull), naming map epoch `epoch`. mu held.
void ps__pull_abort_leaving(struct ps_server *s, uint64_t epoch);

// ps__sweep_main is the deadline sweeper thread (arg: the server): every
// 100 ms it answers parked calls whose deadline passed with
// DEADLINE_EXCEEDED and, in a sync job, logs each round that has waited
// longer than opts.stall_warn_ms (once per round: one line per group of
// shards at the same version waiting for the same ranks), until
// s->closing. Takes mu (and logs after releasing it).
void *ps__sweep_main(void *arg);

// ---- push.c ----------------------------------------------------------------

// ps__on_push serves a Push or PushPull (including the init offer of
// version-0 weights). Called on an nng callback thread; takes mu, and
// releases it while a sync push decodes into its reserved slots.
void ps__on_push(struct ps_server *s, struct ps_call *c);

// ---- seed.c ----------------------------------------------------------------

// ps__seed_begin puts held shard sh (buffers allocated) in the SEEDING
// state for re-seed generation gen, ordered by map `epoch`: pushes and
// pulls of it get UNAVAILABLE until the trainers' offers open it (seed.c's
// DESIGN). mu held.
void ps__seed_begin(struct ps_server *s, struct srv_shard *sh, uint64_t gen,
    uint64_t epoch);

// ps__seed_map starts seeding every shard that later map pl (installed:
// s->pl == pl) places here with a seed_gen higher than old's, creating
// the ones not held here (their old server is gone: no Transfer comes).
// mu held.
void ps__seed_map(struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl);

// ps__seed_on_offer serves an offer (PushRequest.seed): checked like a
// push (an error reply changes nothing); the newest offer of each seeding
// shard is kept, the others are counted and ignored, and a shard every
// rank offered opens (the caller then wakes parked calls). Replies. mu
// held.
void ps__seed_on_offer(struct ps_server *s, struct ps_call *c,
    const Pswire__PushRequest *p);

// ps__seed_sweep opens the seeding shards whose --reseed-wait-ms passed
// with an offer, and logs once per interval those that have none; returns
// how many opened (the caller then wakes parked calls). From the sweeper
// thread (now: fb_clock_ms). mu held.
uint32_t ps__seed_sweep(struct ps_server *s, uint64_t now);

// ps__seed_count returns how many held shards are seeding. mu held.
uint32_t ps__seed_count(const struct ps_server *s);

// ---- transfer.c ------------------------------------------------------------

// ps__transfer_encode serialises shard sh with its full state (weights,
// optimizer state, pull reference, delta log, version, staged pushes) into
// a Transfer request in *out (release with nng_msg_free); with backup, a
// copy that rebuilds a backup (replicas). Errors: FB_ENOMEM. mu held.
int ps__transfer_encode(struct ps_server *s, struct srv_shard *sh, int backup,
    nng_msg **out);

// ps__shard_load_state copies into sh (buffers allocated) the weights, the
// optimizer state (ps__shard_opt_bufs buffers), and
// with a pull codec the reference and delta log, from payload p laid out as
// a Transfer's, with the log's bases, crcs and lengths and ref_crc from t;
// the caller has checked every length. Returns the first byte after them.
// Used by Transfers and snapshot restores. mu held.
const uint8_t *ps__shard_load_state(struct ps_server *s, struct srv_shard *sh,
    const Pswire__TransferRequest *t, const uint8_t *p);
// ps__optim_state_fits checks that Transfer or snapshot record t carries
// the state of this job's optimizer for shard sh (the same kind, as many
// buffers; none for an average shard): 0, or -1 with a reason in why (n
// bytes). mu held.
int ps__optim_state_fits(const struct ps_server *s, const struct srv_shard *sh,
    const Pswire__TransferRequest *t, char *why, size_t n);

// ps__transfer_restamp copies packed Transfer m0 into *out with its
// header's placement epoch set to epoch (a shard re-routed under a later
// map). Errors: FB_EPROTO (m0 is not a framed message), FB_ENOMEM. No lock.
int ps__transfer_restamp(nng_msg *m0, uint64_t epoch, nng_msg **out);

// ps__on_transfer installs a shard moved here by a new map (the decoding
// half of ps__transfer_encode). Called on an nng callback thread; takes mu.
void ps__on_transfer(struct ps_server *s, struct ps_call *c);

// ps__peer_watch_open opens the socket to peer url (psw_req_open's
// *sock, *ctx, *aio, with s's TLS and max_msg) and watches its
// connections from before it dials: a connection that closes cancels the
// call in flight on *aio (it fails FB_ETRANSPORT at once), and
// ps__peer_connected says whether one is up. Close *sock before freeing
// *aio and then the watch (ps__peer_watch_free). FB_ENOMEM,
// FB_ETRANSPORT, FB_EINVAL. Boot thread.
struct ps_peer_watch;
int ps__peer_watch_open(struct ps_server *s, const char *url, nng_socket *sock,
    nng_ctx *ctx, nng_aio **aio, struct ps_peer_watch **out);
void ps__peer_watch_free(struct ps_peer_watch *w);

// ps__peer_connected waits up to ms for watched peer w to have a
// connection: 1 when it has one, 0 when none came (its process is gone,
// or its address refuses) or s is closing. Boot thread.
int ps__peer_connected(struct ps_server *s, struct ps_peer_watch *w, int ms);

// ---- moves.c ---------------------------------------------------------------

// ps__map_apply switches to the later map pl (taking ownership of it on
// FB_OK) and moves shards: the leaving ones are packed and sent to their
// new servers through peers, the arriving ones await their Transfer.
// Errors: FB_EPROTO (bad or re-cut map), FB_ENOMEM. Boot thread only;
// takes mu (not held on entry) and blocks while Transfers are sent.
int ps__map_apply(struct ps_server *s, Pswire__Placement *pl,
    struct ps_peers *peers);

// ps__peers_close closes every open peer context and frees p's arrays,
// leaving p zeroed. Boot thread only.
void ps__peers_close(struct ps_peers *p);

// ---- replicate.c -----------------------------------------------------------

// ps__repl_open sets up forwarding after the first map (s->n_global
// known) and registers ferry_replica_forwards_total. FB_ENOMEM. Before
// the server serves the map.
int ps__repl_open(struct ps_server *s);

// ps__repl_close stops every forward in flight and closes the peer
// sockets. After the boot thread ended, before the rpc closes; mu not
// held. NULL repl: no-op.
void ps__repl_close(struct ps_server *s);

// ps__shard_backups returns how many backups the map in force names for
// shard id (at most PS_MAX_BACKUPS) and the list in *list (borrowed from
// s->pl). mu held.
int ps__shard_backups(const struct ps_server *s, uint32_t id,
    const uint32_t **list);

// ps__repl_map ends at once every forward to a server that map s->pl,
// just installed, no longer places shard's copy on (a backup it dropped):
// versions then stop waiting for it. mu held.
void ps__repl_map(struct ps_server *s);

// ps__repl_forward sends shard sh's version to each of its backups. With
// init: the version-0 weights src (sh->len floats). Otherwise src is the
// aggregate (`samples` samples) of the update that makes version
// sh->version + 1, sent BEFORE the primary applies it (ps__repl_apply
// forwards sync rounds). Each forward raises sh->fwd_pending until its
// backup answers (or the map drops it); pulls of sh park meanwhile. No
// blocking: the message is handed to an nng thread. mu held.
void ps__repl_forward(struct ps_server *s, struct srv_shard *sh,
    const float *src, uint64_t samples, int init);

// ps__repl_apply applies one sync update to a shard that has backups:
// forwards aggregate g0 (+ g1 element-wise when g1 is not NULL: a
// two-push round; `samples` samples) to them first, then applies it
// through the job's optimizer, as a backup will, while the forwards
// travel, and records the CRC of the new weights for the next forward. mu
// held.
void ps__repl_apply(struct ps_server *s, struct srv_shard *sh, const float *g0,
    const float *g1, uint64_t samples);

// ps__shard_crc returns the CRC-32 of sh's weights at its version,
// computed once per version. mu held.
uint32_t ps__shard_crc(struct srv_shard *sh);

// ps__repl_apply_agg applies one sync update (aggregate g0, + g1 when not
// NULL; `samples` samples) through the job's optimizer, advances the
// version, publishes the pull reference and leaves the new weights' CRC:
// what a primary and each of its backups run alike. mu held.
void ps__repl_apply_agg(struct ps_server *s, struct srv_shard *sh,
    const float *g0, const float *g1, uint64_t samples);

// ps__on_replicate serves Replicate on a backup (replicate_backup.c): checks
// that its weights are the update's base (CRC), acknowledges, then applies the
// update as its primary did (the same optimizer pass on the same floats).
// Called on an nng callback thread; takes mu.
void ps__on_replicate(struct ps_server *s, struct ps_call *c);

// ---- snapshot.c, snapshot_load.c ----------------------------------------

// ps__snap_open starts the snapshot writer when opts.snapshot_dir is set
// (s->snap stays NULL otherwise). Errors: FB_EINVAL (not a directory),
// FB_ENOMEM. Before the server serves.
int ps__snap_open(struct ps_server *s);

// ps__snap_close stops the writer (after the write in progress) and frees
// s->snap. Before the rpc closes. NULL snap: no-op.
void ps__snap_close(struct ps_server *s);

// ps__snap_on_version is told that shard sh reached a new version (sync
// apply): it copies the shard into the snapshot being taken, or starts
// one every opts.snapshot_every versions. No allocation but the first
// (the buffer is reused). s->snap non-NULL; mu held.
void ps__snap_on_version(struct ps_server *s, struct srv_shard *sh);

// ps__snap_on_tversion is told that table shard ts reached a new version
// (rows.c, after each update): as ps__snap_on_version, for its record.
// No-op without a snapshot dir. mu held.
void ps__snap_on_tversion(struct ps_server *s, struct srv_tshard *ts);

// ps__on_snapshot serves a Snapshot rpc: the writer thread answers once
// the file is on disk. Called on an nng callback thread; takes mu.
void ps__on_snapshot(struct ps_server *s, struct ps_call *c);

// ps__snap_restore names this server's snapshot file (s->index known) and,
// unless opts.restore says no, loads it into the shards and table shards
// (ps__rows_install done) first map pl places here, after checking all of
// it: the newest file (want UINT64_MAX)
// or, when the first map orders a rollback, the one of version want
// (whatever opts.restore says). Errors: FB_ENOTFOUND (no file with
// PS_RESTORE_YES, or none of version want), FB_EPROTO, FB_ECORRUPT,
// FB_ENOMEM, FB_ESYSERR; nothing is loaded then. mu held, from
// ps__map_install.
int ps__snap_restore(struct ps_server *s, const Pswire__Placement *pl,
    uint64_t want);

// ps__snap_scan names this server's snapshot files (s->index known) and
// reads the versions in their headers into held[0] (the newest file) and
// held[1] (the previous one), UINT64_MAX for none; also kept for the
// heartbeats. No snapshot dir: both UINT64_MAX. mu held.
void ps__snap_scan(struct ps_server *s, uint64_t *held);

// ps__snap_held copies the versions of this server's snapshot files,
// newest first, into held (room for 2) and returns how many; *has says
// whether the server has a --snapshot-dir. Takes mu.
size_t ps__snap_held(struct ps_server *s, uint64_t *held,
    protobuf_c_boolean *has);

// ps__snap_rollback rolls this running server back to snapshot `version` (a
// map of placement epoch `epoch` orders it): the file is read and checked as a
// file (format, checksums) without mu, the server still serving; then, under
// mu, its records are checked against the shards placed here and, once no push
// is decoding, every held shard and table shard gets the snapshot's state
// (table shards: their records' versions and clocks), its round in
// progress and clocks are forgotten, a snapshot being taken is abandoned (its
// Snapshot call answered ABORTED), every parked call is answered STALE_EPOCH,
// and requests made under an older map are refused from then on
// (s->rollback_epoch). Errors (logged; nothing changed): FB_ESTATE (no
// --snapshot-dir), FB_ENOTFOUND (no snapshot of that version), FB_EPROTO,
// FB_ECORRUPT, FB_ESYSERR. Boot thread; takes mu (not held on entry).
int ps__snap_rollback(struct ps_server *s, uint64_t version, uint64_t epoch);

// ps__snap_stats writes the "# Snapshot" stats section into buf (n bytes).
// mu held.
void ps__snap_stats(struct ps_server *s, char *buf, size_t n);

// ---- server_obs.c ----------------------------------------------------------

// ps__server_metrics_open makes s->reg and registers the server's series
// and its scrape-time collector (shards, versions, parked calls, rounds by
// last rank). Errors: FB_ENOMEM. Before the server serves.
int ps__server_metrics_open(struct ps_server *s);

// ---- heartbeat.c -----------------------------------------------------------

// ps__lease_mark records (id, end) as rank's lease mark when it is newer
// than the one held (a higher id, or the same id and a higher end); id 0
// is no mark. No allocation. mu held.
void ps__lease_mark(struct ps_server *s, uint32_t rank, uint64_t id,
    uint64_t end);

// ps__heartbeat_main is the heartbeat thread (arg: the server): once
// s->hb_index is set it sends a Heartbeat every opts.heartbeat_ms (none
// when 0) on its own connection to the scheduler, until s->closing; each
// call ends within PS_BOOT_PARK_MS + PSW_ANSWER_MARGIN_MS. Never waits for
// mu (reads it with trylock).
void *ps__heartbeat_main(void *arg);

// ---- boot.c ----------------------------------------------------------------

// The longest the scheduler parks the watch's GetPlacement (its deadline;
// the watch waits PSW_ANSWER_MARGIN_MS longer for the answer: boot.c's
// DESIGN).
#define PS_BOOT_PARK_MS 250

// ps__boot_main is the scheduler watch thread (arg: the server): it
// registers, installs the first placement, then applies every later map
// epoch, until s->closing; it sets s->boot_done as it returns. Takes mu
// while installing.
void *ps__boot_main(void *arg);

#endif // PS_SERVER_IMPL_H
