// client_impl.h — libferry's private header: the client object, one
// server connection, one operation in flight, and the functions the files
// of clients/src call across each other (prefix ferry__). Nothing here is
// part of the public API (ferry/ferry.h); the unit tests in tests/clients
// include it to test the pieces without a cluster.
//
// DESIGN. Dependencies point one way: ops.c → exchange.c → request.c,
// reply.c, sched.c, probe.c → client.c (errors, options). A ferry_client
// is used by one thread at a time, so nothing here takes a lock; the
// heartbeat thread (heartbeat.c) shares nothing with it but its own
// struct, started and stopped from the caller's thread.
#ifndef FERRY_CLIENT_IMPL_H
#define FERRY_CLIENT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <nng/nng.h>

#include "comp/comp.h"
#include "fb/fb.h"
#include "fb/optim.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "psw/psw.h"

// One server of the placement map: its REQ socket and the shards the map
// gives it, plus the state of the current round's request to it.
struct conn {
	nng_socket sock;
	nng_ctx    ctx;
	nng_aio   *aio;
	uint32_t  *shards; // global shard ids held by this server
	size_t     n;
	uint64_t   bytes; // fp32 bytes of its shards
	// per-round state
	uint32_t  *req; // shards in this round's request
	size_t     req_n;
	uint8_t    method;
	int        pending;
	int        rv;
	uint64_t   rid;
	uint64_t   ctr; // the signed request's counter (0: unsigned)
	nng_msg   *rep;
	nng_msg   *spare; // the last reply, reused for the next push body
	// With opts.log set: tells when the aio's operation ends, so that a
	// call can wake up at 80% of its deadline (NULL without opts.log).
	struct ferry__watch *watch;
};

// Where a shard's pull reference lives: nowhere yet (its first pull asks
// for FULL), in the client (c->ref, or the caller's buffers without a pull
// codec), or in the pull sink.
enum { REF_NONE = 0, REF_HOST, REF_SINK };

struct ferry_client {
	struct ferry_opts   opts;
	char                url[256];
	char                codec_push[32], codec_pull[32];
	struct psw_auth    *auth; // ferry_client_set_secret_file (NULL: off)
	char                optimizer[16], lr_schedule[16];
	struct fb_optim     optim;    // opts' optimizer, parsed
	struct fb_lr_sched  lr_sched; // opts' lr schedule, parsed
	float              *clip;     // clip_norm with a push codec: one
	                              // shard's scaled gradient (or NULL)
	nng_socket          sched;
	nng_ctx             sched_ctx;
	nng_aio            *sched_aio;
	size_t              n_tensors;
	uint64_t           *tensor_len;
	Pswire__Placement  *pl;
	struct conn        *conns;
	size_t              n_conns;
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
	uint8_t           *ref_at; // per global shard: REF_* (who holds it)
	uint64_t           rng;    // stochastic rounding state
	uint32_t           probe_count, reprobe_s;
	uint64_t           probe_bytes, last_probe_ms;
	int                declared;
	uint64_t           next_rid;
	struct ferry__hb  *hb; // heartbeat thread (heartbeat.c), or NULL
	// The map names backups (--replicas): a wait on a server that may
	// have died checks for a newer map (exchange.c); such a job's
	// servers count a re-sent push once.
	int                replicated;
	// A dead server's shards can come back in a later map (replicas, or
	// a restart from snapshots with a rollback): a failed connection
	// waits for that map, until the call's deadline (exchange.c).
	int                recoverable;
	struct ferry_stats stats;
	// Sync rounds (FERRY_MODE_SYNC, or SSP with staleness 0): pushes name
	// the version held and pulls wait for the next one.
	int                lockstep;
	// This pull's staleness so far (the most over its shards).
	uint64_t           pull_stale;
	char               err[512];
};

// The operations a public call runs (OP_PULL_FULL: the resync of the
// shards flagged in need_full).
enum op { OP_INIT, OP_PULL, OP_PULL_FULL, OP_PUSH, OP_PUSH_PULL };

// What a shard still needs within one operation.
enum { NEED_NONE = 0, NEED_MAIN, NEED_PULL };

// One operation in flight: the caller's buffers and what the requests of
// every round carry.
struct xfer {
	enum op                  op;
	const float *const      *g;
	float *const            *w;
	uint32_t                 n_samples;
	uint64_t                 pull_want; // version a (re-)pull waits for
	const struct comp_codec *codec;     // push codec of this operation
	int                      staged;    // codes are in c->codes
	const uint8_t *const    *codes; // caller's codes per shard, or NULL
	float clip_scale; // opts.clip_norm: factor on g (0: unclipped)
};

// ---- client.c: errors and options ------------------------------------------

// ferry__clip_prepare sets x->clip_scale for a push of the caller's fp32
// gradients x->g over x->n_samples samples: with opts.clip_norm > 0 and a
// per-sample global L2 norm above it, clip_norm / norm; else 0 (no
// scaling). One read of the gradient; no allocation. (ops.c)
void ferry__clip_prepare(ferry_client *c, struct xfer *x);

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
// or 60 s when it is 0.
uint32_t ferry__timeout(const ferry_client *c);

// ---- sched.c: scheduler calls and the placement map ------------------------

// ferry__sched_call sends h (a Header with no payload; its request id,
// deadline tmo and rank are filled in here) to the scheduler and waits
// for the reply. On FERRY_OK *rh is the reply header (the caller frees it
// with pswire__header__free_unpacked). Errors: FERRY_EMISMATCH (the
// scheduler refused with FAILED_PRECONDITION: the tensor table differs),
// FERRY_EREMOTE (any other error status), or ferry__map_err's translation
// of a transport failure; the message is in c->err.
// ferry__hb_start starts the heartbeat thread (heartbeat.c) when
// opts.heartbeat_ms > 0 and it is not running. Errors: FERRY_ENOMEM,
// FERRY_ECONNECT (with the reason set).
int ferry__hb_start(ferry_client *c);

// ferry__hb_stop stops and frees the heartbeat thread (a no-op when none
// runs). Returns once the thread has exited.
void ferry__hb_stop(ferry_client *c);

int ferry__sched_call(ferry_client *c, Pswire__Header *h, uint8_t method,
    uint32_t tmo, Pswire__Header **rh);

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

// ferry__conns_open dials every server of map p that has no connection
// yet (a later map may list more: a server joined). Errors: FERRY_EPROTO
// (p lists fewer servers than known), FERRY_ENOMEM, FERRY_ECONNECT.
int ferry__conns_open(ferry_client *c, const Pswire__Placement *p);

// ferry__conns_assign lists, per connection, the shards c->pl gives that
// server (conn.shards, .n, .bytes) and sizes its request list. Errors:
// FERRY_ENOMEM.
int ferry__conns_assign(ferry_client *c);

// ferry__map_refetch replaces c->pl with the scheduler's next epoch (a
// shard moved), dials any new server and re-assigns the shards. Errors:
// those of ferry__map_fetch, FERRY_EPROTO (the new map does not match the
// job), and those of ferry__conns_open and ferry__conns_assign.
int ferry__map_refetch(ferry_client *c);

// ---- probe.c: link measurement ---------------------------------------------

// ferry__links_probe measures the RTT (median of cnt probes, 1..64) and
// the bandwidth (best of two probes of `bytes`) to every connected server
// and reports them to the scheduler. A server that does not answer is
// reported as unusable rather than failing. Errors: FERRY_ENOMEM, or
// those of ferry__sched_call for the report.
int ferry__links_probe(ferry_client *c, uint32_t cnt, uint64_t bytes);

// ferry__links_reprobe runs ferry__links_probe when the scheduler asked
// for re-probes every reprobe_s seconds and that long has passed since
// the last one; FERRY_OK otherwise.
int ferry__links_reprobe(ferry_client *c);

// ---- request.c: building requests ------------------------------------------

// ferry__codes_stage encodes every shard's gradient x->g with x->codec
// and error feedback (c->resid) into c->codes and sets x->staged. Errors:
// FERRY_EINVAL (a gradient cannot be encoded: NaN or Inf).
int ferry__codes_stage(ferry_client *c, struct xfer *x);

// ferry__request_build creates in *out the request for the shards in
// cn->req with method cn->method (PULL: a header only; PUSH, PUSH_PULL:
// one ShardRef and the bytes per shard), with a new request id stored in
// cn->rid. A push may be built in cn->spare, which it then takes. The
// caller owns *out on FB_OK. Returns an fb_ error (FB_ENOMEM, or psw's).
int ferry__request_build(ferry_client *c, struct conn *cn, struct xfer *x,
    nng_msg **out);

// ---- reply.c: taking replies apart -----------------------------------------

// ferry__reply_take checks server m's reply (header rh, frame f) to the
// shards in c->conns[m].req and applies them: into x->w, or through the
// pull sink. Nothing to do for a PUSH. A shard whose reference no longer
// matches the server's is flagged in c->need_full. Errors: FERRY_EPROTO
// (malformed reply), or the pull sink's error.
int ferry__reply_take(ferry_client *c, size_t m, struct xfer *x,
    Pswire__Header *rh, const struct psw_frame *f);

// ---- exchange.c: running operations ----------------------------------------

// ferry__conn_watch gives cn a completion watch (cn->watch): its aio is
// replaced by one whose callback reports each completion, so an exchange
// can wait with a timeout and warn, through opts.log, before its
// deadline. Call right after the connection is opened (no operation in
// flight). Errors: FERRY_ENOMEM (cn unchanged).
int ferry__conn_watch(struct conn *cn);

// ferry__conn_unwatch frees cn's watch; call after nng_aio_free(cn->aio).
// NULL watch: no-op.
void ferry__conn_unwatch(struct conn *cn);

// ferry__op_run picks the push codec of x (none during warm-up and for
// init), marks every shard (OP_PULL_FULL: those flagged in need_full),
// stages the codes when a push needs them, and exchanges with every
// server until each shard is done or the deadline passes. Errors: any
// ferry_err, with the message in c->err.
int ferry__op_run(ferry_client *c, struct xfer *x);

// ferry__pull_finish resyncs, in full, the shards a pull flagged (CRC
// mismatch or a gap in the delta chain), then records the version held
// (c->version, c->want, stats.version). Errors: those of ferry__op_run,
// FERRY_ECORRUPT (still mismatched after the resync).
int ferry__pull_finish(ferry_client *c, struct xfer *x);

#endif // FERRY_CLIENT_IMPL_H
