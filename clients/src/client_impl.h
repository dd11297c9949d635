// client_impl.h — libferry's private header: the client object, one
// server connection, one operation in flight, and the functions the files
// of clients/src call across each other (prefix ferry__). Nothing here is
// part of the public API (ferry/ferry.h); the unit tests in tests/clients
// include it to test the pieces without a cluster.
//
// DESIGN. Dependencies point one way, and no two files call each other's
// ferry__ functions: client.c → heartbeat.c, exchange.c, conn.c; ops.c →
// pull.c → exchange.c → request.c, reply.c, sched.c → conn.c; declare.c →
// sched.c, conn.c, probe.c, codec_auto.c, heartbeat.c; lease.c →
// sched.c; fragment.c → pull.c, exchange.c, request.c; and every file →
// errors.c, which calls none of them. A ferry_client is used by one thread at
// a time, so nothing here takes a lock; the heartbeat thread (heartbeat.c)
// shares nothing with it but its own struct, started and stopped from the
// caller's thread.
#ifndef FERRY_CLIENT_IMPL_H
#define FERRY_CLIENT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <nng/nng.h>
// after <nng/nng.h>, which defines what it needs (nng_mtx, nng_cv)
#include <nng/supplemental/util/platform.h>

#include "comp/comp.h"
#include "fb/fb.h"
#include "fb/init.h"
#include "fb/optim.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "psw/psw.h"

// FERRY_PIPE_SLOTS is the most requests one connection keeps in flight
// (exchange.c): an operation is split into about that many requests per
// server, so that the server works on one while the next arrives and its
// reply travels while the client still sends.
#define FERRY_PIPE_SLOTS 8

// The most fragments a job may have (the scheduler's PS_MAX_FRAGMENTS).
#define FERRY_MAX_FRAGMENTS 4096u

// FERRY_ROWS_SLOT: one more slot per connection, after the pipe's, for
// the sparse tables' Rows request (rows.c): one per server per exchange,
// in flight beside the dense exchange's slots (ferry_client_step), which
// never look past FERRY_PIPE_SLOTS. FERRY_SLOTS_ALL counts both.
#define FERRY_ROWS_SLOT FERRY_PIPE_SLOTS
#define FERRY_SLOTS_ALL (FERRY_PIPE_SLOTS + 1)

// The client's completion lock (conn.c): every slot's callback flips its
// state under mu and wakes cv, so the caller waits for whichever ends
// first (exchange.c).
struct ferry__pipe {
	nng_mtx *mu;
	nng_cv  *cv;
};

// The states of a slot (under the pipe's lock while an operation runs).
enum { SLOT_IDLE = 0, SLOT_SEND, SLOT_RECV, SLOT_DONE };

// One request in flight to a server: its own REQ context (nng matches the
// reply to it) and aio, whose callback (conn.c) turns a finished send
// into the receive, so a request proceeds while the caller computes. The
// slots of a connection are one allocation of fixed address: callbacks
// hold pointers to them while c->conns grows.
struct slot {
	nng_ctx             ctx;
	nng_aio            *aio;
	struct ferry__pipe *pipe; // the client's completion lock
	size_t              m;    // index of the server (c->conns)
	uint32_t           *req;  // shards in this request (cap: conn.n)
	size_t              req_n;
	uint8_t             method;
	int                 state;   // SLOT_* (under pipe->mu when busy)
	int                 res;     // the aio's nng result once DONE
	int                 in_send; // it ended while sending (own the msg)
	uint64_t            expire;  // the receive's deadline (nng_clock)
	uint64_t            rid;
	uint64_t            ctr; // the signed request's counter (0: unsigned)
	nng_msg            *spare; // the last reply, reused for the next push
	int pull_weights; // codec "auto": this pull asked for the weights
};

// One server of the placement map: its REQ socket, the shards the map
// gives it, and the slots of the requests in flight to it.
struct conn {
	nng_socket   sock;
	nng_ctx      ctx; // probes (probe.c)
	nng_aio     *aio;
	uint32_t    *shards; // global shard ids held by this server
	size_t       n;
	uint64_t     bytes; // fp32 bytes of its shards
	struct slot *slots; // FERRY_PIPE_SLOTS of them
	size_t       busy;  // slots not SLOT_IDLE
	// The link to this server as last probed (probe.c; 0: not yet) and,
	// with codec "auto", the rungs chosen for it (codec_auto.c) and the
	// payload bytes moved since that choice.
	double       rtt_s, bw_bps;
	uint8_t      push_rung, pull_rung;
	uint64_t     link_push_bytes, link_pull_bytes, link_steps;
};

// Codec "auto"'s ladders: rungs, least lossy first (which codecs, and why
// in this order: codec_auto.c).
#define FERRY_AUTO_PUSH_RUNGS 7
#define FERRY_AUTO_PULL_RUNGS 2

struct xfer;
struct ferry__table;

// One side (push or pull) of a rows exchange, de-duplicated
// (rows_dedup.c): the distinct (table, key) pairs of the caller's blocks
// in order of first occurrence, grouped by table shard. Grow-only: a
// steady state of equal batches allocates nothing.
struct ferry__dedup {
	// The open-addressing map (table, key) -> 1 + distinct index (0:
	// empty slot); mask + 1 slots, a power of two.
	uint32_t *map;
	size_t    mask;
	// Per distinct pair: key, table, occurrences, global table shard id,
	// and the offset (floats) of its row in `rows`.
	uint64_t *key;
	uint32_t *table, *count, *shard;
	size_t   *pos;
	size_t    n, cap;
	// Per occurrence (the caller's blocks in order): its distinct index.
	uint32_t *occ;
	size_t    n_occ, cap_occ;
	// Per table shard: its distinct pairs (in `order`, from sh_first),
	// and where its rows start in `rows` (floats).
	uint32_t *order;
	size_t   *sh_first, *sh_n, *sh_rows;
	size_t    sh_cap;
	// The rows, grouped by table shard (push: summed gradients; pull: the
	// rows received), `floats` of them.
	float    *rows;
	size_t    floats, cap_floats;
};

// Where a shard's pull reference lives: nowhere yet (its first pull asks
// for FULL), in the client (c->ref, or the caller's buffers without a pull
// codec), or in the pull sink.
enum { REF_NONE = 0, REF_HOST, REF_SINK };

struct ferry_client {
	struct ferry_opts  opts;
	char               url[256];
	char               codec_push[32], codec_pull[32];
	char               attack[32]; // opts.attack ("": honest)
	struct psw_auth   *auth; // ferry_client_set_secret_file (NULL: off)
	struct psw_tls    *tls;  // opts.tls_* (NULL: plain tcp)
	char               optimizer[16], lr_schedule[16];
	struct fb_optim    optim;    // opts' optimizer, parsed
	struct fb_lr_sched lr_sched; // opts' lr schedule, parsed
	float             *clip;     // clip_norm with a push codec: one
	                             // shard's scaled gradient (or NULL)
	nng_socket         sched;
	nng_ctx            sched_ctx;
	nng_aio           *sched_aio;
	size_t             n_tensors;
	uint64_t          *tensor_len;
	uint8_t           *tensor_avg;   // per tensor: FERRY_TENSOR_AVERAGE
	                                 // (never clipped)
	uint8_t           *tensor_init;  // per tensor: enum ferry_tensor_init
	float             *tensor_scale; // per tensor: its init_scale
	int                any_seeded; // a tensor's init is seeded (not OFFER)
	// The first pull filled the seeded shards locally (pull.c).
	int                seeded_filled;
	Pswire__Placement *pl;
	struct conn       *conns;
	size_t             n_conns;
	struct ferry__pipe *pipe;      // completions of every slot (conn.c)
	uint64_t            version;   // of the weights held (min over shards)
	uint64_t            want;      // version the next pull asks for
	uint64_t           *shard_ver; // per global shard: version held
	uint8_t            *need;      // per global shard: NEED_* this op
	uint8_t            *need_full; // per global shard: resync in full
	uint8_t            *codes;     // staged push codes (EF codecs)
	size_t             *code_off;  // per global shard: offset in codes
	struct ferry_shard *layout;    // per global shard, for the caller
	struct comp_codec   cpush, cpull, cnone;
	float             **resid; // per tensor: push error feedback (or NULL)
	float             **ref;   // per tensor: pull reference (or NULL)
	struct ferry_pull_sink sink; // pulls go here when has_sink
	int                    has_sink;
	uint8_t              *ref_at; // per global shard: REF_* (who holds it)
	uint64_t              rng;    // stochastic rounding state
	uint32_t              probe_count, reprobe_s;
	uint64_t              probe_bytes, last_probe_ms;
	int                   declared;
	uint64_t              next_rid;
	struct ferry__hb     *hb; // heartbeat thread (heartbeat.c), or NULL
	// The map names backups (--replicas): its servers count a re-sent
	// push once, so a wait may cancel and re-send (exchange.c).
	int                   replicated;
	struct ferry_stats    stats;
	struct ferry_recovery recovery; // ferry_client_recovery
	// Per global shard: where the values of the version held are, to
	// offer when the shard is re-seeded (seed.c): the pull reference with
	// a pull codec, else the caller's buffer its last pull wrote (NULL:
	// none); and the shard's ShardInfo.seed_gen last seen.
	const float         **held;
	uint64_t             *seed_seen;
	// Sync rounds (FERRY_MODE_SYNC, or SSP with staleness 0): pushes name
	// the version held and pulls wait for the next one.
	int                   lockstep;
	// This pull's staleness so far (the most over its shards).
	uint64_t              pull_stale;
	// codec_push / codec_pull "auto" (codec_auto.c): the rung each
	// shard's staged codes use, the compute time per step (an average of
	// the gaps between push-pulls), the one the last choice used, and
	// whether links were re-probed since.
	int                   auto_push, auto_pull;
	uint8_t              *staged_rung;
	struct comp_codec    auto_codec[FERRY_AUTO_PUSH_RUNGS]; // parsed rungs
	double               compute_s, chosen_compute_s;
	uint64_t             steps_since_choice;
	uint64_t             op_end_ns;
	int                  links_new;
	// A layer-wise push-pull in progress (ferry_client_push_pull_start):
	// its operation, and per tensor 0 (not started), 1 (started) or 2
	// (waited for); the step ends when every tensor was waited for.
	struct xfer         *ax;
	uint8_t             *ax_started;
	size_t               ax_n_started, ax_n_waited;
	// Sparse tables (tables.c, rows.c): the declared tables, the
	// table-shard routing of the map held (rebuilt when its epoch
	// changes), the version held (sync: all table shards move together),
	// per table shard what a rows exchange still needs (RNEED_*) and the
	// server its request went to (1 + index, 0: none in flight), the
	// last version each table shard answered (async pushes carry it),
	// and the two de-duplicated sides of an exchange.
	struct ferry__table *tables;
	size_t               n_tables;
	size_t               n_tshards;
	uint64_t             route_epoch;
	uint64_t             rows_version;
	// Lockstep: rows_version is not known to match the servers' (after
	// declare, a rollback, or a push they found behind): the next rows
	// call asks every table shard its version first (rows.c).
	int                  rows_probe;
	uint8_t             *rneed;
	uint32_t            *rsent;
	uint64_t            *rver;
	struct ferry__dedup  dd_push, dd_pull;
	Pswire__RowBlock    *rblk;  // 2 * n_tshards: one request's blocks
	Pswire__RowBlock   **rblkp; // pointers to them (push, then pull)
	// Elastic jobs (declare.c, lease.c). any_rank: opts.rank was
	// FERRY_RANK_ANY (opts.rank holds the rank given once registered);
	// elastic: RegisterReply.elastic; left: ferry_client_leave ran (a
	// rejoin may follow); join_pending: a lockstep client that has not
	// joined the rounds yet (after declare or a rejoin): its next pull
	// sends the join pulls (pull.c), and a push that went through
	// clears it. job_packed: the JobConfig declare registered, which a
	// rejoin registers again.
	int                  any_rank, elastic, left, join_pending;
	uint8_t             *job_packed;
	size_t               job_packed_len;
	// Data leases (lease.c): the lease held (0: none) and the mark the
	// pushes carry (lease_id/lease_end on every PushRequest).
	uint64_t             lease_held;
	uint64_t             mark_id, mark_end;
	// ferry_client_data_step: 1 + the data step the pushes claim (0:
	// none), written into every PushRequest (audit.c)
	uint64_t             data_step;
	// Fragments (opts.fragments > 1, fragment.c): the fragment round in
	// flight (fx_busy: started, not yet waited for), and whether the
	// first whole-model pull went (the whole-model step calls are
	// refused from then on: a fragment's shards move one version ahead
	// of the others', which c->version, their minimum, cannot say).
	struct xfer         *fx;
	int                  fx_busy;
	int                  frag_pulled;
	char                 err[512];
};

// The operations a public call runs (OP_PULL_FULL: the resync of the
// shards flagged in need_full).
enum op { OP_INIT, OP_PULL, OP_PULL_FULL, OP_PUSH, OP_PUSH_PULL };

// What a shard still needs within one operation; NEED_SENT is or-ed in
// while a request for it is in flight.
enum { NEED_NONE = 0, NEED_MAIN, NEED_PULL, NEED_SENT = 0x10 };

// One operation in flight: the caller's buffers and what the requests of
// every round carry. A pull (pull.c) fills in only op and its pull part;
// the push staging stays zero (no codec, nothing staged or clipped), and a
// pull's path never stages, encodes or clips.
struct xfer {
	enum op                  op;
	// The pull part: where pulled shards go (or the pull sink), the
	// version a (re-)pull waits for, and whether it is a join pull
	// (PullRequest.join, join_version = pull_want; pull.c).
	float *const            *w;
	uint64_t                 pull_want;
	int                      join;
	// The push staging: the caller's gradients or codes, and how they
	// are encoded (request.c).
	const float *const      *g;
	uint32_t                 n_samples;
	const struct comp_codec *codec;  // push codec of this operation
	int                      staged; // codes are in c->codes
	const uint8_t *const    *codes;  // caller's codes per shard, or NULL
	float    clip_scale; // opts.clip_norm: factor on g (0: unclipped)
	// The exchange's clock and what it must do once nothing is in flight.
	uint32_t tmo;      // the deadline, ms
	uint64_t deadline; // fb_clock_ms
	uint64_t warn_at;  // when a wait warns (nng_clock; opts.log)
	int      warned;
	int      refetch;     // a newer map: fetch it, then re-send
	int      moved;       // a shard moved: re-fetch if a newer map exists
	int      backoff;     // a server said UNAVAILABLE: sleep, then re-send
	int      rerouted;    // requests were cancelled for a newer map
	int      lost_logged; // a lost server's connection was logged
	// A re-fetch or back-off waits for the requests in flight; those
	// still parked after REQUEUE_MS are cancelled and re-sent with the
	// rest (requeue), so two trainers never wait on each other's unsent
	// shards. stuck_since: when that wait began (nng_clock, 0: none);
	// requeued: this operation cancelled some (a server may then still
	// be taking the first copy in: ALREADY_EXISTS is retried).
	uint64_t stuck_since;
	int      requeue;
	int      requeued;
	// A fragment round (fragment.c): frag_n > 1 limits the push staging
	// to fragment frag_f's shards (global shard i % frag_n == frag_f),
	// and the lockstep version its pushes name and ferry__push_need
	// compares with is frag_ver, the fragment's (the minimum over its
	// shards), not c->version. frag_n 0: a whole-model operation.
	uint32_t frag_n, frag_f;
	uint64_t frag_ver;
};

// ferry__requeue_ms is REQUEUE_MS (exchange.c) unless a test lowered it.
extern unsigned ferry__requeue_ms;

// ---- errors.c: the error toolbox ------------------------------------------

// ferry__fail formats the message ferry_client_last_error returns into
// c->err and returns err (so `return ferry__fail(c, FERRY_E..., ...)`).
int ferry__fail(ferry_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// ferry__map_err translates an fb_ error code (from psw, comp or nng
// calls) into the ferry_err a caller of libferry sees: FB_OK, timeouts,
// remote errors, malformed replies and allocation failures keep their
// meaning; anything else is a connection failure (FERRY_ECONNECT). The
// only such translation in libferry.
int ferry__map_err(int rv);

// ferry__timeout returns the deadline of one call in ms: opts.timeout_ms,
// or 60 s when it is 0. Inline: every file reads it, and it is only the
// client's option.
static inline uint32_t
ferry__timeout(const ferry_client *c)
{
	return c->opts.timeout_ms ? c->opts.timeout_ms : 60000;
}

// ---- sched.c: scheduler calls and the placement map ------------------------

// ferry__sched_call sends h (a Header with no payload; its request id,
// deadline tmo and rank are filled in here) to the scheduler and waits
// for the reply. On FERRY_OK *rh is the reply header (the caller frees it
// with pswire__header__free_unpacked). Errors: FERRY_EMISMATCH (the
// scheduler refused with FAILED_PRECONDITION: the tensor table differs),
// FERRY_ETIMEDOUT (DEADLINE_EXCEEDED: the scheduler answers a call it
// parked at its deadline, and the client waits a margin longer so that the
// answer is never left in flight), FERRY_EREMOTE (any other error status),
// or ferry__map_err's translation of a transport failure; the message is
// in c->err.
int ferry__sched_call(ferry_client *c, Pswire__Header *h, uint8_t method,
    uint32_t tmo, Pswire__Header **rh);

// ferry__hb_start starts the heartbeat thread (heartbeat.c) when
// opts.heartbeat_ms > 0 and it is not running. Errors: FERRY_ENOMEM,
// FERRY_ECONNECT (with the reason set).
int ferry__hb_start(ferry_client *c);

// ferry__hb_halt stops the heartbeat thread and joins it, but keeps its
// socket for ferry__hb_stop: a leave must not wait behind an nng_close
// (nng 1.5.2 can hang in one, nanomsg/nng#1543), so the Leave goes out
// first and the socket is closed with the client. A no-op when none runs.
void ferry__hb_halt(ferry_client *c);

// ferry__hb_stop stops (if running) and frees the heartbeat thread and its
// socket (a no-op when none exists). Returns once the thread has exited.
void ferry__hb_stop(ferry_client *c);

// ferry__placement_check validates map pl against the declared tensor
// table (c->n_tensors, c->tensor_len): same tensor count, 1..4096 servers,
// every shard on a listed server and inside its tensor. Errors:
// FERRY_EPROTO. Does not take pl.
int ferry__placement_check(ferry_client *c, const Pswire__Placement *pl);

// ferry__map_fetch asks the scheduler for the map of epoch >= min_epoch
// (0: the membership map, before placement; 1 waits for every member) and
// returns the reply header, whose body is the map, in *rh (the caller
// frees it). Errors: those of ferry__sched_call, FERRY_EPROTO (no map).
int ferry__map_fetch(ferry_client *c, uint64_t min_epoch, Pswire__Header **rh);

// ferry__map_refetch replaces c->pl with the scheduler's next epoch (a
// shard moved), dials any new server and re-assigns the shards. Errors:
// those of ferry__map_fetch, FERRY_EPROTO (the new map does not match the
// job), and those of ferry__conns_open and ferry__conns_assign.
int ferry__map_refetch(ferry_client *c);

// ferry__map_catch_up installs the scheduler's map in force when it is
// newer than the one held (a rejoin: the map that lists this rank again
// may already be out), as ferry__map_refetch does, without waiting for a
// later one. Errors: those of ferry__map_refetch.
int ferry__map_catch_up(ferry_client *c);

// ---- conn.c: connections to the servers -----------------------------------

// ferry__conns_open dials every server of map p that has no connection
// yet (a later map may list more: a server joined). Errors: FERRY_EPROTO
// (p lists fewer servers than known), FERRY_ENOMEM, FERRY_ECONNECT.
int ferry__conns_open(ferry_client *c, const Pswire__Placement *p);

// ferry__conns_assign lists, per connection, the shards c->pl gives that
// server (conn.shards, .n, .bytes) and sizes its request list. Errors:
// FERRY_ENOMEM.
int ferry__conns_assign(ferry_client *c);

// ferry__conns_close stops and frees every connection's slots, closes its
// socket and frees the connections and the completion lock (a closing
// client; nothing in flight: ferry__xfer_abort first).
void ferry__conns_close(ferry_client *c);

// ---- probe.c: link measurement ---------------------------------------------

// ferry__links_probe measures the RTT (median of cnt probes, 1..64) and
// the bandwidth (best of two probes of `bytes`) to every connected server
// and reports them to the scheduler. A server that does not answer is
// reported as unusable rather than failing. Errors: FERRY_ENOMEM, or
// those of ferry__sched_call for the report.
int ferry__links_probe(ferry_client *c, uint32_t cnt, uint64_t bytes);

// ferry__links_measure is ferry__links_probe without the report: the
// figures stay in the connections (conn.rtt_s, .bw_bps), for codec
// "auto" in a job whose scheduler does not probe.
int ferry__links_measure(ferry_client *c, uint32_t cnt, uint64_t bytes);

// ferry__links_reprobe runs ferry__links_probe when the scheduler asked
// for re-probes every reprobe_s seconds and that long has passed since
// the last one; FERRY_OK otherwise.
int ferry__links_reprobe(ferry_client *c);

// ---- request.c: building requests ------------------------------------------

// ferry__codes_stage encodes the gradient x->g of every shard of tensors
// [t0, t1) with x->codec and error feedback (c->resid) into c->codes and
// sets x->staged. Errors: FERRY_EINVAL (a gradient cannot be encoded: NaN
// or Inf).
int ferry__codes_stage(ferry_client *c, struct xfer *x, size_t t0, size_t t1);

// ferry__request_build creates in *out the request for the shards in
// s->req with method s->method (PULL: a header only; PUSH, PUSH_PULL: one
// ShardRef and the bytes per shard), with a new request id stored in
// s->rid. A push may be built in s->spare, which it then takes. The
// caller owns *out on FB_OK. Returns an fb_ error (FB_ENOMEM, or psw's).
int ferry__request_build(ferry_client *c, struct slot *s, struct xfer *x,
    nng_msg **out);

// ---- reply.c: taking replies apart -----------------------------------------

// ferry__reply_take checks the reply (header rh, frame f) of server s->m
// to the shards in s->req and applies them: into x->w, or through the
// pull sink. Nothing to do for a PUSH. A shard whose reference no longer
// matches the server's is flagged in c->need_full. Errors: FERRY_EPROTO
// (malformed reply), or the pull sink's error.
int ferry__reply_take(ferry_client *c, struct slot *s, struct xfer *x,
    Pswire__Header *rh, const struct psw_frame *f);

// ---- codec_auto.c: link-aware codec choice ---------------------------------

// Hysteresis, so that a choice near the edge does not flap with the noise
// of a shared machine's compute time: a link moves to a less lossy
// choice only when that one fits FERRY_AUTO_UP of the budget, and to a
// more lossy one only when its current one takes more than the budget
// over FERRY_AUTO_UP. FERRY_AUTO_RECHOOSE: a change of the compute time
// by more than this share of the one the last choice used chooses again,
// at most once every FERRY_AUTO_DWELL push-pulls (re-probed links: at
// once).
#define FERRY_AUTO_UP 0.8
#define FERRY_AUTO_RECHOOSE 0.25
#define FERRY_AUTO_DWELL 50

// One server link as the chooser sees it: the probed bandwidth (bytes/s;
// 0: unknown) and round trip, and the payload bytes of one step at each
// rung for the shards on that server.
struct ferry__auto_link {
	double   bw_bps, rtt_s;
	uint64_t push_bytes[FERRY_AUTO_PUSH_RUNGS];
	uint64_t pull_bytes[FERRY_AUTO_PULL_RUNGS];
};

// ferry__auto_push_codec and ferry__auto_push_name return push rung r's
// codec (parsed with bucket) and name. ferry__auto_push_codec returns
// FB_EINVAL for r out of range.
int ferry__auto_push_codec(int r, uint32_t bucket, struct comp_codec *out);
const char *ferry__auto_push_name(int r);

// ferry__auto_costs fills l's bytes per rung for n shards of lens[i]
// values (exact: comp_bound per shard) with the job's bucket; bw and rtt
// are left alone.
void ferry__auto_costs(struct ferry__auto_link *l, const uint64_t *lens,
    size_t n, uint32_t bucket);

// ferry__auto_time is one step's exchange time on l at rungs (p, q): push
// and pull bytes over the bandwidth, plus one round trip (a push-pull
// sends, then receives).
double ferry__auto_time(const struct ferry__auto_link *l, int p, int q);

// ferry__auto_choose picks l's rungs for a step budget of budget_s
// seconds, from the current ones (cur_p < 0: none yet). Pure. The least
// lossy rungs whose time fits the budget, demoting from (0, 0) the
// direction with more bytes each time; the most compressed rungs when
// none fit; (0, 0) when the bandwidth or budget is unknown (<= 0). With
// hysteresis: a current choice within budget / FERRY_AUTO_UP stays
// unless the choice for FERRY_AUTO_UP of the budget is less lossy in
// both directions; one beyond it gets the choice for the budget.
void ferry__auto_choose(const struct ferry__auto_link *l, double budget_s,
    int cur_p, int cur_q, int *p, int *q);

// ferry__auto_init sets up "auto" after the map is known (declare.c):
// which directions are auto, the per-shard rung array. Errors:
// FERRY_ENOMEM.
int ferry__auto_init(ferry_client *c);

// ferry__auto_bound is the staging room one shard of len values needs:
// comp_bound of the push codec, or with "auto" the largest over the
// rungs (a sparse rung of a tiny shard outgrows fp32). After
// ferry__auto_init.
size_t ferry__auto_bound(const ferry_client *c, size_t len);

// ferry__auto_step runs at the start of each push-pull: it takes the gap
// since the last exchange ended (a push-pull or a pull) as a compute-time
// sample and chooses again when the links were re-probed or the compute
// time moved by more than FERRY_AUTO_RECHOOSE. ferry__auto_step_end marks
// the end of an exchange.
void ferry__auto_step(ferry_client *c);
void ferry__auto_step_end(ferry_client *c);

// ferry__auto_codec returns the codec shard i's staged codes use under
// "auto" push (x's codec otherwise), after ferry__codes_stage sets
// c->staged_rung[i].
const struct comp_codec *ferry__auto_codec(const ferry_client *c,
    const struct xfer *x, size_t i);

// ---- exchange.c: running operations ----------------------------------------

// ferry__req_bytes is the fp32 bytes a request to a server aims at (it
// carries whole shards until it reaches them): for a connection of
// conn_bytes over a window of w requests, on a link measured at bw_bps
// bytes/s with round trip rtt_s (0: not measured). A link that moves
// PIPE_MIN_BYTES (1 MiB) in REQ_LINK_S (2 ms) or more, or one not
// measured, gets conn_bytes / w but at least PIPE_MIN_BYTES and at most
// PIPE_MAX_BYTES (both 1 MiB: a big model's share is many requests, so
// that the messages in flight stay small beside its state); a slower one
// what it moves in REQ_LINK_S or in 2·rtt_s / w, whichever is longer, so
// a slow link is fed many small pipelined requests (exchange.c, DESIGN).
uint64_t ferry__req_bytes(uint64_t conn_bytes, size_t w, double bw_bps,
    double rtt_s);

// ferry__push_need is what shard i needs in a push of x's op: NEED_MAIN,
// except in lockstep when the shard is already past the version c holds
// (c->version, the minimum over its shards; in a fragment round, the
// fragment's). That shard closed round
// c->version without this push: a rejoined rank's dead predecessor pushed
// it there before it died (a push split across requests), or a
// --sync-quorum closed it. A push for a closed round is refused
// OUT_OF_RANGE, and one such shard in a request would fail the whole
// request, leaving the request's other shards, still at c->version,
// waiting for this rank forever. So the shard is left out of the push and
// only pulled (NEED_PULL; nothing for a plain push), the caller's buffers
// getting its newer weights. Counted in c->recovery.
static inline uint8_t
ferry__push_need(ferry_client *c, const struct xfer *x, size_t i)
{
	// A fragment round's shards move together: the round is the
	// fragment's (xfer.frag_ver), which may be one past c->version.
	uint64_t held = x->frag_n > 1 ? x->frag_ver : c->version;
	if (x->op == OP_INIT &&
	    fb_init_seeded(c->tensor_init[c->pl->shards[i]->tensor])) {
		return NEED_NONE; // the servers fill it by the rule
	}
	if (c->lockstep && x->op != OP_INIT && c->shard_ver[i] > held) {
		c->recovery.pushes_skipped++;
		return x->op == OP_PUSH ? NEED_NONE : NEED_PULL;
	}
	return NEED_MAIN;
}

// ferry__frag_in reports whether global shard i is in x's fragment (every
// shard when x is a whole-model operation).
static inline int
ferry__frag_in(const struct xfer *x, size_t i)
{
	return x->frag_n <= 1 || i % x->frag_n == x->frag_f;
}

// ---- seed.c: offering a lost shard's copy to its re-seed ------------------

// ferry__seed_seen records every shard's seed_gen in the map held as seen
// (a client that just joined has nothing to offer for earlier re-seeds).
void ferry__seed_seen(ferry_client *c);

// ferry__seed_offers offers, to each shard's server, the values c holds
// for every shard whose seed_gen the map held raised since it was last
// seen, at the version held; shards held nowhere are counted. Failures
// are logged (the server opens the shard with the other trainers'
// offers). Call with nothing in flight, after installing a map.
void ferry__seed_offers(ferry_client *c);

// ferry__seed_forget_aliases forgets the held copy of every shard whose
// values are in a gradient buffer of g (the caller computes gradients into
// the buffers the last pull wrote): they are no longer weights.
void ferry__seed_forget_aliases(ferry_client *c, const float *const *g);

// ferry__op_run runs push x (OP_INIT, OP_PUSH, OP_PUSH_PULL): it picks
// the push codec (none during warm-up and for init), marks every shard,
// stages the codes when the push needs them, and exchanges with every
// server until each shard is done or the deadline passes. Errors: any
// ferry_err, with the message in c->err.
int ferry__op_run(ferry_client *c, struct xfer *x);

// ferry__xfer_begin starts x's clock (deadline, warning time) and clears
// every shard's need; ferry__xfer_pump sends requests for the shards
// whose need is set while slots are free; ferry__xfer_until drives x
// (sending, waiting, taking replies, re-fetching maps, retrying) until
// every shard of tensors [t0, t1) is done, or with t0 == t1 until nothing
// is in flight. On an error every request in flight is cancelled and
// waited for. Errors: any ferry_err, with the message in c->err.
void ferry__xfer_begin(ferry_client *c, struct xfer *x);
int  ferry__xfer_pump(ferry_client *c, struct xfer *x);
int  ferry__xfer_until(ferry_client *c, struct xfer *x, size_t t0, size_t t1);

// ferry__map_newer asks the scheduler, briefly (50 ms parked), whether a
// map later than the one held exists: 1 if so. It leaves the client's
// last error alone: a "no" here is no failure.
int ferry__map_newer(ferry_client *c);

// ferry__xfer_abort cancels every request in flight and waits for them
// (an abandoned layer-wise push-pull, a closing client).
void ferry__xfer_abort(ferry_client *c);

// ---- pull.c: a pull's own path ---------------------------------------------

// ferry__pull_seed fills, before the client's first pull, its pull
// reference of every seeded tensor's shard (ferry_tensor_spec.init) with
// the version-0 weights by the job's rule, marking it held at version 0,
// so that the pull moves an empty delta for it (checked by the server's
// reference CRC) instead of the weights. Only with a pull codec, no pull
// sink and no "auto": otherwise the pull carries them as before.
void ferry__pull_seed(ferry_client *c);

// ferry__pull_run runs pull x (OP_PULL: every shard; OP_PULL_FULL: those
// flagged in need_full, whose flags it clears) until each shard is done or
// the deadline passes. It reads x's pull part only. Errors: any
// ferry_err, with the message in c->err.
int ferry__pull_run(ferry_client *c, struct xfer *x);

// ferry__pull_resync pulls in full, into x->w, the shards a pull flagged
// (CRC mismatch or a gap in the delta chain). Errors: those of
// ferry__pull_run, FERRY_ECORRUPT (still mismatched after the resync).
int ferry__pull_resync(ferry_client *c, struct xfer *x);

// ferry__pull_finish runs ferry__pull_resync, then records the version
// held (c->version, c->want, stats.version). Errors: those of
// ferry__pull_resync.
int ferry__pull_finish(ferry_client *c, struct xfer *x);

// ferry__join_due says whether the join pulls are due (contract: a
// client that declared into a running job, or rejoined, joins the sync
// rounds at J, the version its shards hold): 1 with *j = J when every
// shard is at J > 0 after a pull. 0 when no join is pending, when the
// job is at version 0 (a push for version 0 joins it), or when the
// shards' versions differ (a round is partly closed: the push for the
// oldest version joins at it, ferry__push_need leaving out the shards
// past it; a join at the newest would wait for shards that may be
// waiting for this rank's push, a rank restarted before it was found
// dead). Pure.
int ferry__join_due(const ferry_client *c, uint64_t *j);

// ferry__pull_join runs the join pull after a pull into w when
// ferry__join_due says so: a PullRequest{join, join_version J} to every
// server, waiting (each server) for every shard to reach J, so that the
// weights are one version's and the servers expect this rank's push for
// J. Errors: those of ferry__pull_run and ferry__pull_finish.
int ferry__pull_join(ferry_client *c, float *const *w);

// ---- tables.c: sparse tables and their routing -----------------------------

// One declared sparse table as the client routes it: its width and row
// codecs (bucket = dim: one q8 scale per row), and from the map held the
// number of its hash ranges (S) and the table shard id of range 0.
struct ferry__table {
	char                     name[128];
	uint32_t                 dim;
	struct comp_codec        cpush, cpull;
	uint32_t                 shards;
	uint32_t                 first;
	struct ferry_table_stats stats;
};

// RNEED_* (c->rneed): what a table shard still needs in a rows exchange.
enum { RNEED_PUSH = 1, RNEED_PULL = 2 };

// ferry__tables_take checks the n table specs t (FERRY_EINVAL naming the
// table and field), fills td[0..n) (their JobConfig.tables entries, whose
// strings point into t) and keeps the tables in c->tables. Errors:
// FERRY_EINVAL, FERRY_ENOMEM.
int ferry__tables_take(ferry_client *c, const struct ferry_table_spec *t,
    size_t n, Pswire__TableDesc *td);

// ferry__tables_route reads the map held's table_shards into each table's
// range count and first id (when its epoch differs from the last read),
// sizing the per-table-shard state on first use. Every table's ranges
// must be listed in order (table, then range 0..S-1) on listed servers.
// Errors: FERRY_EPROTO (with the reason), FERRY_ENOMEM.
int ferry__tables_route(ferry_client *c);

// ferry__tables_free frees the tables and their exchange state (a closing
// client, nothing in flight).
void ferry__tables_free(ferry_client *c);

// ---- rows_dedup.c: a rows exchange's keys, de-duplicated -------------------

// ferry__dedup_build fills d from the caller's nb blocks b (checked: known
// tables, keys present): the distinct (table, key) pairs in order of first
// occurrence with their counts, each routed to its table shard
// (tabs[t].first + tbl_key_shard(key, tabs[t].shards)), grouped by table
// shard in that order (n_shards of them), with room for their rows.
// Errors: FB_ENOMEM, FB_EINVAL (over UINT32_MAX distinct keys).
int ferry__dedup_build(struct ferry__dedup *d, const struct ferry__table *tabs,
    size_t n_shards, const struct ferry_rows *b, size_t nb);

// ferry__dedup_sum writes into d->rows each distinct pair's gradient: the
// sum of its occurrences' b[].grads, added in occurrence order.
void ferry__dedup_sum(struct ferry__dedup *d, const struct ferry__table *tabs,
    const struct ferry_rows *b, size_t nb);

// ferry__dedup_scatter copies each occurrence's row from d->rows into its
// place in b[].rows (repeated keys get the same row).
void ferry__dedup_scatter(const struct ferry__dedup *d,
    const struct ferry__table *tabs, struct ferry_rows *b, size_t nb);

// ferry__dedup_free frees d's buffers (d is left empty).
void ferry__dedup_free(struct ferry__dedup *d);

// ---- rows.c: the rows exchange ----------------------------------------------

// ferry__rows_close cancels a rows exchange in flight and frees the
// tables' state (a closing client, before ferry__conns_close).
void ferry__rows_close(ferry_client *c);

// ---- rows_build.c: one server's Rows request -------------------------------

// What a rows exchange's requests carry besides the blocks.
struct ferry__rows_kind {
	int      pushing;   // push blocks (every table shard owed one)
	uint32_t n_samples; // of the push
	int      probe;     // no keys: every table shard's version (version 0)
	int      resend;    // RowsRequest.resend: a push may have been counted
};

// ferry__rows_table is the table of table shard id in the map held.
const struct ferry__table *ferry__rows_table(const ferry_client *c, size_t id);

// ferry__rows_build makes in *out server m's Rows request for the blocks
// it is still owed (c->rneed, not in flight: c->rsent) and marks them in
// flight; *out stays NULL when it is owed nothing. Errors: FERRY_EINVAL (a
// gradient the push codec refuses), FERRY_ENOMEM, and psw's, mapped.
int ferry__rows_build(ferry_client *c, const struct ferry__rows_kind *k,
    size_t m, nng_msg **out);

#endif // FERRY_CLIENT_IMPL_H
