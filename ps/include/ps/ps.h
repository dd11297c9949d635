// ps/ps.h — the two roles of ps-server as embeddable objects: the
// scheduler (membership, job table, placement) and the parameter server
// (shards, aggregation, optimizer). ps-server's main() is a thin shell over
// these; tests run them in-process.
//
// Threading: open/close from one thread; the objects serve requests on nng
// callback threads in between.
#ifndef PS_PS_H
#define PS_PS_H

#include <stddef.h>
#include <stdint.h>

#include "fb/fb.h"
#include "obs/obs.h"

struct ps_scheduler;
struct ps_server;

enum ps_placement {
	PS_PLACEMENT_UNIFORM = 0, // round-robin over shards (the baseline)
	PS_PLACEMENT_LATENCY = 1, // probe links, minimise the slowest trainer
};

struct ps_scheduler_opts {
	const char *url;         // listen URL, e.g. "tcp://127.0.0.1:0"
	int         trainers;    // trainers expected before training starts
	int         servers;     // servers expected before training starts
	uint64_t    shard_bytes; // max bytes per shard
	int         contexts;    // REP contexts (requests in flight)
	size_t      max_msg;     // receive size cap in bytes
	int         placement;   // enum ps_placement
	uint32_t    probe_count; // RTT samples per link (latency placement)
	uint64_t    probe_bytes; // bulk transfer size per link
	uint64_t    seed;        // solver multi-start seed
	uint32_t    reprobe_s;   // trainers re-probe this often (0: never)
	uint32_t    reprobe_change_pct; // link change that triggers a replan
	// A member that heartbeats and then sends nothing for this long (ms)
	// is declared dead (0 = never). Members that never heartbeat are not
	// tracked.
	uint32_t    dead_after_ms;
	// The job's key (--secret-file): every request must be signed with
	// it and every reply is (docs/security.md). NULL: off.
	const char *secret_file;
	// The members' heartbeat period (ms). A member whose heartbeat
	// connection closes (a killed process closes its sockets at once)
	// is declared dead when no heartbeat comes on a new connection
	// within twice this (capped at dead_after_ms; 0 = only
	// dead_after_ms counts).
	uint32_t    heartbeat_ms;
	// Copies of each shard (--replicas): a primary and replicas - 1
	// backups on other servers (1: no backups; capped at the servers).
	uint32_t    replicas;
	// Directory of the scheduler's state file (docs/operations.md §12):
	// the job, members and map are written there whenever they change,
	// and a scheduler opened on a directory holding one carries on from
	// it. NULL: nothing persisted.
	const char *state_dir;
	// Limits (docs/operations.md §13): a job's declared tensors may total
	// at most max_job_bytes and be cut into at most max_shards shards,
	// checked before anything is built; calls in progress may hold at
	// most max_inflight bytes in all (0: no cap).
	uint64_t    max_job_bytes;
	uint32_t    max_shards;
	size_t      max_inflight;
	// The largest learning rate a job may declare (--max-lr; at most
	// 1e6, 0: 1e6).
	double      max_lr;
	// Mutual TLS (--tls-cert, --tls-key, --tls-ca; docs/security.md):
	// our certificate, its key and the job's CA, PEM files. All NULL:
	// plain tcp; all set: every connection is tls+tcp:// and the peer
	// must present a certificate signed by the CA.
	const char *tls_cert, *tls_key, *tls_ca;
	// With a secret: how far (ms) a request's signing time may be from
	// our clock, either way (--auth-window-ms; 0: no bound).
	uint32_t    auth_window_ms;
	// Elastic jobs (--trainers MIN:MAX): trainers is MAX, the rank
	// slots; the job starts once min_trainers have registered (0: as
	// many as trainers, a fixed job).
	int         min_trainers;
	// Flapping (docs/operations.md): a host whose trainers died (not a
	// Leave) flap_deaths times within flap_window_ms has its next
	// registrations refused for flap_base_ms, doubled per further
	// death up to flap_max_ms. 0: 3 deaths, 60000, 1000 and 10000 ms.
	uint32_t    flap_deaths, flap_window_ms, flap_base_ms, flap_max_ms;
	// Untrusted trainers (issue 31; docs/security.md): the share of
	// sync pushes the servers keep for verification (--spot-check; 0:
	// off), whether trainers declaring an attack may join
	// (--allow-attacks, benchmarks only), and the rounds in a row a
	// trainer's pushes may be outliers before it is quarantined
	// (--quarantine-outliers; 0: never).
	double      spot_check;
	int         allow_attacks;
	uint32_t    quarantine_outliers;
};
#define PS_SCHEDULER_OPTS_INIT                                                \
	{                                                                     \
		NULL, 1, 1, 1u << 20, 64, 64u << 20, PS_PLACEMENT_UNIFORM, 7, \
		    1u << 20, 1, 0, 50, 5000, NULL, 1000, 1, NULL,            \
		    16ull << 30, 1u << 20, 1ull << 30, 10.0, NULL, NULL,      \
		    NULL, 120000, 0, 0, 0, 0, 0, 0.0, 0, 0                    \
	}

// ps_scheduler_open starts a scheduler listening on opts->url. With
// opts->state_dir holding a state file it first loads the job, members
// and map from it (the epoch carries on). *out is released with
// ps_scheduler_close. Errors: FB_EINVAL (bad opts, or state_dir is not a
// directory), FB_ECORRUPT / FB_EPROTO (the state file is damaged or is
// another job's: logged naming the file, nothing loaded), FB_ETRANSPORT
// (cannot listen), FB_ENOMEM.
int ps_scheduler_open(const struct ps_scheduler_opts *opts,
    struct ps_scheduler                             **out);

// ps_scheduler_url returns the URL it listens on, with the bound port.
// Borrowed; valid until close.
const char *ps_scheduler_url(const struct ps_scheduler *s);

// ps_scheduler_stats writes the scheduler's INFO-style text (members, the
// link matrices, the assignment, F, LB and F/LB) into buf (size n,
// NUL-terminated, truncated if needed).
void ps_scheduler_stats(struct ps_scheduler *s, char *buf, size_t n);

// ps_scheduler_replace publishes a new placement epoch that puts shard i
// on server assign[i] (n must be the job's shard count). Servers move the
// shards between them with their full state; clients re-fetch the map when
// told STALE_EPOCH. For operators and tests; the scheduler also re-places
// by itself when links change. Errors: FB_EINVAL (bad n or server index),
// FB_ESTATE (the job has not started), FB_ENOMEM.
int ps_scheduler_replace(struct ps_scheduler *s, const uint32_t *assign,
    size_t n);

// ps_scheduler_metrics returns the scheduler's metrics registry (its
// requests, members, map epoch, measured links) for obs_http_open.
// Borrowed; valid until ps_scheduler_close (close the HTTP server first).
struct obs_registry *ps_scheduler_metrics(struct ps_scheduler *s);

// ps_scheduler_ready returns 1 once the job runs (the first map is
// published), else 0 with the reason in why (n bytes). Any thread; takes
// the scheduler's lock.
int ps_scheduler_ready(struct ps_scheduler *s, char *why, size_t n);

// ps_scheduler_state_json writes the scheduler's state as one JSON object
// (job, members, map epoch, parked GetPlacements) to w. Any thread; takes
// the scheduler's lock.
void ps_scheduler_state_json(struct ps_scheduler *s, struct obs_writer *w);

// What one snapshot of a whole job wrote (ps_job_snapshot).
struct ps_job_snapshot {
	uint64_t version; // the version every server wrote
	uint32_t shards;  // summed over the servers
	uint64_t bytes;   // summed file sizes
};

// How ps_job_snapshot authenticates, as the operator: the job's key
// (--secret-file) and an operator certificate of the job's CA
// (--tls-cert, --tls-key, --tls-ca; CN "ferry-operator" under
// docs/security.md's names). Each NULL or "": off; TLS needs all three.
struct ps_job_snapshot_auth {
	const char *secret_file;
	const char *tls_cert, *tls_key, *tls_ca;
};

// ps_job_snapshot asks the scheduler at scheduler_url for one snapshot of
// the whole job (the Snapshot rpc: every server writes the same version
// in sync mode; version 0 lets the scheduler pick the next one) and waits
// up to timeout_ms for every file to be on disk. On FB_OK fills *out.
// Errors: FB_EINVAL (also a bad key or TLS file: err says which),
// FB_ETIMEDOUT, FB_EREMOTE (refused, failed, or an answer that is not the
// scheduler's: err, n bytes, says why and names the server).
// Blocks the calling thread. With auth (NULL: plain and unsigned) the
// call is signed as the operator and/or dialled over TLS with its
// certificate. This is `ps-server --role=snapshot`.
int ps_job_snapshot(const char        *scheduler_url,
    const struct ps_job_snapshot_auth *auth, uint64_t version,
    uint32_t timeout_ms, struct ps_job_snapshot *out, char *err, size_t n);

// ps_scheduler_close stops serving and frees. NULL is a no-op.
void ps_scheduler_close(struct ps_scheduler *s);

struct ps_server_opts {
	const char *url;           // listen URL for trainers
	const char *advertise_url; // URL given to the scheduler (NULL = url)
	const char *scheduler_url; // where to register
	int         contexts;      // REP contexts (requests in flight)
	size_t      max_msg;       // receive size cap in bytes
	uint32_t    timeout_ms;    // deadline of calls to the scheduler
	uint64_t    capacity;      // bytes of shard memory (0 = unbounded)
	// A sync round that waits longer than this (ms) for some ranks'
	// pushes logs, once, which ranks and since when (0 = never).
	uint32_t    stall_warn_ms;
	// Heartbeat the scheduler this often (ms) so that it can tell when
	// this server dies (0 = never).
	uint32_t    heartbeat_ms;
	// Snapshots (docs/operations.md "Snapshots"): the directory of this
	// server's snapshot file (NULL: no snapshots), the sync version
	// interval of automatic ones (0: only on request), and whether the
	// file is loaded when the job starts (enum ps_restore).
	const char *snapshot_dir;
	uint64_t    snapshot_every;
	int         restore;
	// The job's key (--secret-file), as for the scheduler. NULL: off.
	const char *secret_file;
	// Limits (docs/operations.md §13): the bytes calls in progress (parked
	// requests, replies being sent) may hold in all (0: no cap), and
	// the longest a call may stay parked (ms; a call without a deadline
	// gets this one).
	size_t      max_inflight;
	uint32_t    park_max_ms;
	// The most samples one push may declare (--max-samples-per-push;
	// 0: 2^30, the wire's cap).
	uint32_t    max_samples;
	// Mutual TLS, as for the scheduler (all NULL: off).
	const char *tls_cert, *tls_key, *tls_ca;
	// The slot to register into (--server-index; -1: any): a server
	// restarted under a new URL takes its dead predecessor's slot.
	int         server_index;
	// A lost shard re-seeded here from the trainers' offers opens this
	// long (ms) after the map that placed it here, with the newest offer,
	// when some trainers did not offer (docs/operations.md §12).
	uint32_t    reseed_wait_ms;
	// The freshness window, as for the scheduler (0: no bound).
	uint32_t    auth_window_ms;
	// Sparse tables (--sparse-capacity-mb, --sparse-evict): the bytes
	// the table shards held here may take (0: unbounded; past it the
	// least recently, or with sparse_evict 1 least frequently, used rows
	// are evicted after an update).
	uint64_t    sparse_capacity;
	int         sparse_evict; // 0: lru, 1: lfu
	// Untrusted trainers (issue 31): how a sync round combines its pushes
	// (--aggregate: "mean", "median", "trimmed:B", "cclip:TAU"; NULL:
	// mean) and how many pushes kept for spot checks wait for a verifier
	// (--audit-keep; 0: 64).
	const char *aggregate;
	uint32_t    audit_keep;
};
#define PS_SERVER_OPTS_INIT                                                   \
	{                                                                     \
		NULL, NULL, NULL, 256, 256u << 20, 10000, 0, 10000, 1000,     \
		    NULL, 0, PS_RESTORE_AUTO, NULL, 4ull << 30, 300000,       \
		    65536, NULL, NULL, NULL, -1, 5000, 120000, 0, 0, NULL, 0  \
	}

// When a server with a snapshot_dir loads its snapshot file.
enum ps_restore {
	PS_RESTORE_AUTO = 0, // when the file exists
	PS_RESTORE_YES  = 1, // always: a missing file is an error
	PS_RESTORE_NO   = 2, // never (a fresh job; the file is overwritten)
};

// ps_server_open starts a parameter server: it listens on opts->url,
// registers with the scheduler and, from a background thread, fetches the
// placement and creates its shards when the job starts. Requests that
// arrive before that get UNAVAILABLE. *out is released with
// ps_server_close. Errors: FB_EINVAL, FB_ETRANSPORT, FB_ENOMEM.
int ps_server_open(const struct ps_server_opts *opts, struct ps_server **out);

// ps_server_url returns the URL it listens on (bound port filled in).
const char *ps_server_url(const struct ps_server *s);

// ps_server_stats writes the INFO-style stats text into buf (size n,
// NUL-terminated, truncated if needed).
void ps_server_stats(struct ps_server *s, char *buf, size_t n);

// ps_server_leave asks the scheduler to take this server out of the job,
// then waits (up to timeout_ms) until every shard it held has been
// delivered to its new server, or its Transfer given up (logged as an
// error: that shard's state is lost). Call it before ps_server_close for
// a shutdown that loses nothing. Errors: FB_EREMOTE (the scheduler refused,
// e.g. this is the last server), FB_ETIMEDOUT, FB_ESTATE (the job has not
// started: nothing to move).
int ps_server_leave(struct ps_server *s, uint32_t timeout_ms);

// ps_server_stalls returns how many stuck-round warnings s has logged
// (see ps_server_opts.stall_warn_ms) and copies the last one's text into
// buf (size n, NUL-terminated, truncated if needed; "" when none). Any
// thread.
uint64_t ps_server_stalls(struct ps_server *s, char *buf, size_t n);

// ps_server_metrics returns the server's metrics registry (requests,
// bytes, latencies, round waits, shard versions and moves, parked calls)
// for obs_http_open. Borrowed; valid until ps_server_close (close the HTTP
// server first).
struct obs_registry *ps_server_metrics(struct ps_server *s);

// ps_server_ready returns 1 when the server serves its share of the job:
// it holds its first placement, no shard of it is still arriving, and it
// is not leaving (ps_server_leave). Else 0 with the reason in why (n
// bytes). Any thread; takes the server's lock.
int ps_server_ready(struct ps_server *s, char *why, size_t n);

// ps_server_state_json writes the server's state as one JSON object to w:
// map epoch, the job, each shard's state, version and (sync) the ranks
// that pushed it and that it waits for, and every parked call with the
// version it wants and the ranks that version still waits for. Any
// thread; takes the server's lock.
void ps_server_state_json(struct ps_server *s, struct obs_writer *w);

// ps_server_snapshot writes this server's shards to its snapshot file
// (opts.snapshot_dir) and waits up to timeout_ms for the file to be on
// disk: version 0 takes every shard as it is now; version V > 0 takes
// each shard as it reaches V (a sync job's consistent version). *written
// (may be NULL) receives the snapshot's version. The Snapshot rpc does the
// same. Errors: FB_ESTATE (no snapshot_dir, no placement yet, or a shard
// already past V), FB_EBUSY (another snapshot is in progress),
// FB_ETIMEDOUT, FB_ESYSERR|errno (the write failed; the previous file is
// kept). Any thread except the server's own.
int ps_server_snapshot(struct ps_server *s, uint64_t version,
    uint32_t timeout_ms, uint64_t *written);

// ps_snapshot_check validates the snapshot file at path (magic, format
// version, CRC, every record's bounds) without loading it. On error, msg
// (n bytes) names the file and what is wrong. Errors: FB_ENOTFOUND,
// FB_ECORRUPT, FB_EPROTO, FB_ENOMEM, FB_ESYSERR|errno.
int ps_snapshot_check(const char *path, char *msg, size_t n);

// ps_server_close stops serving and frees. NULL is a no-op.
void ps_server_close(struct ps_server *s);

#endif // PS_PS_H
