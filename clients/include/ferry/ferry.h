// ferry/ferry.h — libferry, the C client library of the Ferry parameter
// server. A trainer opens a client on the scheduler's address, declares its
// tensors, then loops: compute gradients, push them, pull the new weights
// (or do both in one round trip with ferry_client_push_pull).
//
// Threading: a ferry_client is used by one thread at a time (the trainer's
// loop). Different clients are independent. Every call below blocks the
// calling thread until it finishes or its deadline (opts.timeout_ms) passes
// (except ferry_client_push_pull_start, which sends and returns);
// internally the client talks to all servers in parallel, with several
// requests in flight to each.
//
// Errors: every function returns 0 (FERRY_OK) or a positive ferry_err.
// When a server or the scheduler answered with an error status,
// ferry_client_last_error() holds its message. Codes are append-only.
//
// Tensors are float32 and addressed by their id, the index in the order of
// declaration (0, 1, ...). Calls that move weights or gradients take an
// array of n_tensors pointers, one caller buffer per tensor, each holding
// the tensor's full length; the client scatters/gathers shards itself.
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FERRY_BUILDING)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

// The version of this header. CMake refuses to configure when these differ
// from the project's version (clients/CMakeLists.txt), so they cannot
// drift. The ABI promise (docs/libferry.md): within one MAJOR version
// (the SONAME, libferry.so.MAJOR) a program built against an older MINOR
// runs unchanged against a newer one.
#define FERRY_VERSION_MAJOR 1
#define FERRY_VERSION_MINOR 0
#define FERRY_VERSION_PATCH 0
// The three as one comparable number, e.g. 0.1.0 -> 100.
#define FERRY_VERSION_NUMBER                                                  \
	(FERRY_VERSION_MAJOR * 10000 + FERRY_VERSION_MINOR * 100 +            \
	    FERRY_VERSION_PATCH)

typedef enum ferry_err {
	FERRY_OK = 0,
	FERRY_EINVAL,    // bad argument (message in last_error)
	FERRY_ENOMEM,    // out of memory
	FERRY_ECONNECT,  // cannot reach the scheduler or a server
	FERRY_ETIMEDOUT, // the deadline passed
	FERRY_EREMOTE,   // the peer answered an error status (see last_error)
	FERRY_EPROTO,    // malformed reply from a peer
	FERRY_EMISMATCH, // tensor table differs from the job's
	FERRY_ESTATE,    // call out of order (e.g. push before declare)
	FERRY_ECORRUPT,  // a checksum (pull reference CRC) failed
	FERRY_ECLOSED,   // the job or client was closed
	FERRY_EUNSUPP,   // option not supported by this build
	FERRY_EBEHIND,   // sync push for a version the job has passed: pull
	                 // (ferry_client_pull) and compute the step again
	FERRY_ESINK,     // the pull sink failed (its own error, e.g. a
	                 // device error; see ferry_pull_sink)
	FERRY_EROLLBACK, // the job rolled back to a snapshot (a server
	                 // restarted without replicas): the call did
	                 // nothing; pull (ferry_client_pull) and go on from
	                 // the version in ferry_client_stats
	FERRY_ERR_COUNT
} ferry_err;

// ferry_strerror returns a static description of err; never NULL.
FERRY_API const char *ferry_strerror(int err);

// ferry_version returns the version of the libferry that is running, as
// "MAJOR.MINOR.PATCH" (static storage, never NULL). The FERRY_VERSION_*
// macros say which header a program was built against; this says which
// library it loaded (the SONAME guarantees the same MAJOR only).
FERRY_API const char *ferry_version(void);

typedef struct ferry_client ferry_client;

// Consistency modes of a job.
enum ferry_mode {
	FERRY_MODE_SYNC =
	    0, // BSP: version v+1 = v - lr * (sum of pushes) / samples
	FERRY_MODE_ASYNC = 1, // each push is applied as it arrives
	// SSP: pushes apply as they arrive, and a trainer at clock c (its
	// c-th push done) reads weights that hold every push of every rank
	// up to clock c - staleness - 1, waiting on the servers otherwise.
	// staleness 0 is FERRY_MODE_SYNC, bit for bit.
	FERRY_MODE_SSP = 2,
};

// Levels of the messages libferry hands to ferry_opts.log (most severe
// first, as syslog's).
enum ferry_log_level {
	FERRY_LOG_ERR    = 0,
	FERRY_LOG_WARN   = 1,
	FERRY_LOG_NOTICE = 2,
	FERRY_LOG_INFO   = 3,
};

// Options for ferry_client_open. Initialise with FERRY_OPTS_INIT and set
// what you need. The job fields (mode, lr, codecs, bucket, warmup_steps,
// the optimizer, lr schedule and clip_norm) are fixed by the first trainer
// to declare; later trainers must match.
// New fields are only ever added at the end, with FERRY_OPTS_INIT giving
// them their "off" value.
struct ferry_opts {
	const char *scheduler_url; // e.g. "tcp://127.0.0.1:7000" (required)
	int         rank;          // this trainer's rank, 0..trainers-1, or
	                           // FERRY_RANK_ANY (the scheduler gives one)
	uint32_t    timeout_ms;    // deadline for each call (0 = 60000)
	int         mode;          // enum ferry_mode
	double      lr;           // base learning rate (server-side optimizer)
	const char *codec_push;   // "none", "fp16", "q8", ... (NULL = "none")
	const char *codec_pull;   // same values (NULL = "none")
	uint32_t    bucket;       // quantization bucket (0 = codec default)
	uint32_t    warmup_steps; // steps sent uncompressed first
	uint64_t    seed;         // seed for stochastic codecs
	// Optional log hook (NULL = silent: libferry never prints). libferry
	// calls log(log_arg, level, msg) on the thread of the call it is in,
	// with an enum ferry_log_level and a one-line message (no newline,
	// borrowed for the callback). It must not call back into the client.
	// What it reports today: a model call (init, pull, push, push-pull)
	// that has waited 80% of its deadline (timeout_ms) for servers logs,
	// once per call, at FERRY_LOG_WARN, each server it still waits for and
	// that server's shards (docs/operations.md §7.1).
	void (*log)(void *log_arg, int level, const char *msg);
	void       *log_arg;
	// Heartbeat the scheduler this often (ms) from a background thread
	// with its own connection, from ferry_client_declare until
	// ferry_client_leave or ferry_client_close, so that the scheduler
	// notices when this trainer dies and stops the sync rounds from
	// waiting for it (0 = off: the scheduler never declares it dead).
	uint32_t    heartbeat_ms;
	// FERRY_MODE_SSP: how many clocks a trainer may run ahead of the
	// slowest one (a job field; 0 = lockstep, as sync mode).
	uint32_t    staleness;
	// FERRY_MODE_SYNC: a round closes once this many ranks pushed; the
	// others' pushes for it fail with FERRY_EBEHIND (pull, go on). A job
	// field; 0 = every rank still in the job (backup trainers off).
	uint32_t    sync_quorum;
	// ---- added in 0.x (issue 13): the servers' optimizer, the lr
	// schedule and gradient clipping; job fields like lr (the first
	// trainer's values are the job's, later ones must match). A program
	// built against an older header passes a shorter struct: rebuild it
	// before it runs with this library. docs/algorithms.md §5 states
	// each rule.
	// The optimizer the servers run: "sgd" (NULL), "momentum",
	// "nesterov", "adam", "adamw" or "adagrad".
	const char *optimizer;
	double      momentum;     // momentum, nesterov (0.9)
	double      beta1, beta2; // adam, adamw (0.9, 0.999)
	double      eps;          // adam, adamw, adagrad (1e-8)
	double      weight_decay; // L2 on g; decoupled for adamw (0)
	// The learning rate by version: "constant" (NULL), "step" (times
	// lr_gamma every lr_step_every updates) or "cosine" (to lr_min at
	// lr_total_steps), after lr_warmup updates of linear ramp (0: none).
	const char *lr_schedule;
	uint64_t    lr_warmup;
	uint64_t    lr_step_every; // (1000)
	double      lr_gamma;      // (0.1)
	double      lr_min;        // (0)
	uint64_t    lr_total_steps;
	// > 0: before each push, scale the gradient so that its global L2
	// norm over every tensor, per sample (the gradient sum / n_samples),
	// is at most clip_norm (0: off). Not applied to
	// ferry_client_push_pull_encoded, whose caller encodes.
	double      clip_norm;
	// ---- added in 0.x (issue 14): with codec_push and/or codec_pull
	// "auto", each server link gets the least lossy codec whose step
	// exchange (bytes over the probed bandwidth, plus a round trip)
	// takes at most link_budget times the measured compute time per step
	// (docs/algorithms.md §2.8). 0 = 1.0.
	double      link_budget;
	// ---- added in 0.x (issue 12): mutual TLS (docs/security.md). PEM
	// files: this trainer's certificate, its unencrypted private key and
	// the job's CA. All NULL: plain tcp. All set: every connection is
	// tls+tcp:// (tcp:// URLs are mapped), this client presents its
	// certificate and requires the peers' to be signed by the CA.
	const char *tls_cert;
	const char *tls_key;
	const char *tls_ca;
	// ---- added in 1.0 (issue 28): local steps (docs/algorithms.md §8),
	// job fields. local_steps > 0: the job's optimizer and lr above are
	// the OUTER ones, the pushes are pseudo-gradients in gradient units
	// (each trainer's summed inner directions), and the servers multiply
	// every update's lr by inner_lr. fragments > 1 (streaming): the
	// shards are synced in that many fragments by
	// ferry_client_fragment_start/_wait (sync mode only).
	uint32_t    local_steps; // 0 = off
	double      inner_lr;    // the trainers' base inner lr (0 = off)
	uint32_t    fragments;   // 0, 1 = the whole model at once
	// ---- added in 1.1 (issue 31): untrusted trainers. The attack this
	// trainer runs (benchmarks and tests of robust aggregation only;
	// NULL or "": honest), sent on Register: the scheduler refuses it
	// unless the job allows attacks (ps-server --allow-attacks 1).
	const char *attack;
};
#define FERRY_OPTS_INIT                                                       \
	{                                                                     \
		NULL, 0, 0, FERRY_MODE_SYNC, 0.1, NULL, NULL, 0, 0, 0, NULL,  \
		    NULL, 0, 0, 0, NULL, 0.9, 0.9, 0.999, 1e-8, 0.0, NULL, 0, \
		    1000, 0.1, 0.0, 0, 0.0, 0.0, NULL, NULL, NULL, 0, 0.0, 0, \
		    NULL                                                      \
	}

// What the servers do with a tensor's pushes (docs/libferry.md, "Tensor
// kinds"). A zero-initialised spec is WEIGHTS; every tensor that
// ferry_client_declare declares is.
enum ferry_tensor_kind {
	// Trained: the job's optimizer (lr, schedule, decay, clipping)
	// applies the pushed gradients.
	FERRY_TENSOR_WEIGHTS = 0,
	// Averaged (e.g. BatchNorm running statistics): each update sets the
	// values to the sum of the pushed values over the sum of the pushes'
	// n_samples, so a trainer pushes value * n_samples and pulls the
	// samples-weighted mean (sync: of the round's pushes; async and SSP:
	// of each push alone). No optimizer, lr, clipping or decay applies.
	FERRY_TENSOR_AVERAGE = 1,
};

// One tensor of the job's table (for ferry_client_declare: a tensor of
// kind FERRY_TENSOR_WEIGHTS).
struct ferry_tensor_desc {
	const char *name; // unique name, at most 127 bytes
	size_t      len;  // number of float32 elements (> 0)
};

// One tensor of the job's table with its kind (for
// ferry_client_declare_specs; since 0.2). A new struct rather than a
// grown ferry_tensor_desc, whose size callers built against 0.1 rely on.
struct ferry_tensor_spec {
	const char *name; // unique name, at most 127 bytes
	size_t      len;  // number of float32 elements (> 0)
	uint32_t    kind; // an enum ferry_tensor_kind (0: weights)
	// Since 1.0: how version 0 is made (an enum ferry_tensor_init; 0:
	// offered by ferry_client_init_weights, as before) and the bound of
	// FERRY_INIT_UNIFORM (> 0; ignored by the others).
	uint32_t    init;
	float       init_scale;
};

// How a tensor's version-0 weights are made (ferry_tensor_spec.init).
// Seeded ones (ZEROS, UNIFORM) cross no link: every server fills its
// shards and every client its copy from (ferry_opts.seed, tensor id,
// element index) alone, the same bits on every machine for any cut into
// shards (docs/protocol.md, "Seeded initial weights"). Every trainer of
// the job must then declare the same ferry_opts.seed.
enum ferry_tensor_init {
	FERRY_INIT_OFFER = 0, // ferry_client_init_weights offers the values
	FERRY_INIT_ZEROS,     // every element 0
	FERRY_INIT_UNIFORM,   // uniform in [-init_scale, init_scale), seeded
};

// Counters of one client. Bytes are as on the wire (frame headers
// included).
struct ferry_stats {
	uint64_t bytes_pushed; // bytes sent to servers by push/push-pull
	uint64_t bytes_pulled; // bytes received from servers by pull/push-pull
	uint64_t requests;     // requests sent (all kinds)
	uint64_t version;      // version of the weights this client holds
	uint64_t resyncs;      // full pulls after a reference CRC mismatch
	uint64_t map_changes;  // placement maps re-fetched (shards moved)
	uint64_t reprobes;     // link re-measurements sent to the scheduler
	// Pull staleness: for each pull (or push-pull), the most clocks any
	// shard's data lagged this rank's clock (the slowest rank's pushes
	// it holds vs this rank's; always 0 in sync mode, <= K in SSP).
	uint64_t pulls;          // pulls counted below
	uint64_t staleness_last; // the last pull's
	uint64_t staleness_max;  // the largest
	uint64_t staleness_sum;  // their sum (mean = sum / pulls)
};

// ferry_opts_check validates opts without connecting: the URL, rank, lr,
// mode, both codec specs and the local-steps fields (local_steps > 0 and
// inner_lr > 0 go together; fragments > 1 needs local steps, sync mode
// and local_steps % fragments == 0; fragments <= 4096). On failure it writes a
// one-line reason into why (size n, NUL-terminated; why may be NULL) and
// returns FERRY_EINVAL.
FERRY_API int ferry_opts_check(const struct ferry_opts *opts, char *why,
    size_t n);

// ferry_client_open checks opts (ferry_opts_check) and starts dialing the
// scheduler in the background; it does not register yet (that is
// ferry_client_declare) and does not block on the network.
// The first call also sets glibc's allocator to keep large freed blocks
// for reuse (every reply is a fresh ~1 MiB message: without it each one
// is faulted in and handed back, 3x the client's CPU per push-pull with
// 4 trainers in one process); malloc settings in GLIBC_TUNABLES win
// (docs/operations.md, "Memory").
// On success *out receives a client to release with ferry_client_close.
// Errors: FERRY_EINVAL (bad opts: call ferry_opts_check for the reason),
// FERRY_ENOMEM, FERRY_ECONNECT (the URL cannot be dialed).
FERRY_API int ferry_client_open(const struct ferry_opts *opts,
    ferry_client                                       **out);

// ferry_client_set_secret_file reads the job's key from path (the file
// every process of the job was given with --secret-file, 16 to 4096
// bytes): from then on every request c sends is signed as
// "trainer-<rank>" and every reply must be signed by the scheduler or a
// server (docs/security.md). Call it after ferry_client_open and before
// ferry_client_declare. Errors: FERRY_EINVAL (unreadable or short file,
// empty path; the reason in ferry_client_last_error; NULL c),
// FERRY_ESTATE (after declare), FERRY_ENOMEM.
FERRY_API int ferry_client_set_secret_file(ferry_client *c, const char *path);

// ferry_client_close stops the heartbeat thread, closes the connections
// and frees the client. It sends nothing: in a sync job stopping early,
// call ferry_client_leave first, or the other trainers wait for this
// rank's pushes until their deadline (or, with opts.heartbeat_ms, until
// the scheduler declares this rank dead). NULL is a no-op. Never fails.
FERRY_API void ferry_client_close(ferry_client *c);

// ferry_client_declare registers this trainer with the job's tensor table
// (n tensors, ids 0..n-1 in this order), measures its links to every
// server when the scheduler asks for it, then waits until every expected
// member has registered and the placement map is published, and fetches
// it. The first trainer's table (and job options) is the job's; a later
// one that differs gets FERRY_EMISMATCH; a rank out of range gets
// FERRY_EREMOTE. Call once, before anything else. Every tensor is of
// kind FERRY_TENSOR_WEIGHTS (ferry_client_declare_specs for others).
FERRY_API int ferry_client_declare(ferry_client *c,
    const struct ferry_tensor_desc *descs, size_t n);

// ferry_client_declare_specs is ferry_client_declare with a kind per
// tensor (enum ferry_tensor_kind): FERRY_TENSOR_AVERAGE tensors are
// averaged by the servers instead of trained. The kind is part of the
// job's table: a later trainer declaring another kind for a tensor gets
// FERRY_EMISMATCH. An unknown kind gets FERRY_EINVAL naming the tensor.
// Everything else is as for ferry_client_declare; where the calls below
// say descs[i].len, read specs[i].len. Since 0.2 (FERRY_VERSION_NUMBER
// >= 200).
FERRY_API int ferry_client_declare_specs(ferry_client *c,
    const struct ferry_tensor_spec *specs, size_t n);

// ferry_client_init_weights offers the initial values of every tensor
// (w[i] holds descs[i].len floats). The first offer to reach each server
// becomes version 0; later offers are ignored. Ranks that do not offer just
// pull version 0. Blocks until the servers acknowledged. Seeded tensors
// (ferry_tensor_spec.init, since 1.0) are not offered: w[i] of one may be
// NULL, and a job whose tensors are all seeded sends nothing.
FERRY_API int ferry_client_init_weights(ferry_client *c,
    const float *const                               *w);

// ferry_client_pull fills w[i] (descs[i].len floats each) with the weights
// of the version this client is due (0 after declare, v+1 after a push for
// v in sync mode; the newest in async mode), waiting on the servers until
// it exists. Updates the client's version. With a pull sink set
// (ferry_client_set_pull_sink) the weights go to the sink and w may be
// NULL.
// Keep the buffers a pull (or push-pull) wrote unchanged until the next
// one returns: without a pull codec they are the copy libferry offers when
// a server dies with the only copy of a shard and the shard is re-seeded
// from the trainers (docs/operations.md §12). Computing a gradient into
// them is fine (the next push forgets them as a copy); changing the
// weights in place offers the changed values. A pull codec keeps its own
// reference, which is what it offers; a pull sink without one offers
// nothing (ferry_recovery.seeds_unheld).
FERRY_API int ferry_client_pull(ferry_client *c, float *const *w);

// ferry_client_push sends gradients for the client's current version:
// g[i] holds descs[i].len floats, the SUM of the per-sample gradients over
// n_samples samples (the server divides the total by the total samples).
// Does not wait for other trainers. g is not modified.
FERRY_API int ferry_client_push(ferry_client *c, const float *const *g,
    uint32_t n_samples);

// ferry_client_push_pull pushes g (as ferry_client_push) and, in the same
// round trip, receives the next version into w (as ferry_client_pull).
// g and w may be the same buffers only if the caller no longer needs g.
// With a pull sink set, the weights go to the sink and w may be NULL.
FERRY_API int ferry_client_push_pull(ferry_client *c, const float *const *g,
    uint32_t n_samples, float *const *w);

// ---- layer-wise push-pull (overlap with compute) ---------------------------
//
// A step's push-pull can be cut by tensors, so that a trainer pushes each
// layer's gradient as soon as backward produced it (the last layer first)
// and waits for each layer's new weights just before the next forward
// needs them: the exchange of one layer overlaps the compute of the
// others. Each tensor of a step is started exactly once and waited for,
// in any order; the step (the client's version, as after
// ferry_client_push_pull) ends with the wait after which every tensor of
// the step has been waited for. The weights are those ferry_client_push_pull
// gives, bit for bit: a sync round still closes only when every trainer's
// gradient of that shard is in. Requests for the started tensors travel while
// the caller computes; replies are taken apart inside ferry_client_wait.
// Between the first start and the step's end no other step call is
// accepted (FERRY_ESTATE). Any error abandons the step: nothing stays in
// flight, and the caller pulls (ferry_client_pull) before going on.

// ferry_client_push_pull_start pushes the gradients of tensors [first,
// first + count) (g as ferry_client_push_pull; one step passes the same g,
// w and n_samples to every start) and returns without waiting for their
// replies. Errors: FERRY_EINVAL (range outside the declared tensors, a
// tensor started twice in one step, g/w/n_samples differing within the
// step), FERRY_ESTATE (not declared; opts.clip_norm > 0, which needs every
// gradient before the first push), and those of ferry_client_push_pull.
// g[first..first+count) must stay unchanged until the step ends.
FERRY_API int ferry_client_push_pull_start(ferry_client *c,
    const float *const *g, uint32_t n_samples, float *const *w, size_t first,
    size_t count);

// ferry_client_wait blocks until the new weights of tensors [first, first +
// count), all started in this step, are in w (or the pull sink), while the
// other tensors' requests keep travelling. Errors: FERRY_ESTATE (no step in
// progress, or a tensor of the range not started), FERRY_EINVAL, and those
// of ferry_client_push_pull.
FERRY_API int ferry_client_wait(ferry_client *c, size_t first, size_t count);

// ---- fragments (streaming local steps, issue 28) ----------------------------
//
// In a job with opts.fragments = F > 1 the declared shards are cut into F
// fragments: global shard i (in the order the job's tensors are cut) is
// in fragment i % F. Each fragment has its own sync rounds: a fragment's
// push-pull pushes and pulls only its shards, which move one version per
// fragment round, so fragments may be one version apart. The whole-model
// step calls (push, pull, push_pull, the layer-wise calls) are refused in
// such a job after the first pull (FERRY_ESTATE): declare, init_weights
// and one ferry_client_pull bring every shard at version 0, then each
// fragment moves by its own rounds. Every trainer must sync the fragments
// in the same order (each round is a sync round of that fragment's
// shards). With a push codec, each shard's error feedback and pull
// reference move only in its fragment's rounds, as in whole-model steps.
// ferry_stats.version stays the minimum over every shard.

// One contiguous run of a fragment's elements: floats [offset, offset +
// len) of tensor `tensor`.
struct ferry_span {
	uint32_t tensor;
	uint64_t offset;
	uint64_t len;
};

// ferry_client_fragment_spans writes the spans of fragment f (0..F-1) of
// the declared job into spans (at most cap), in tensor and offset order,
// and their count into *n (the count needed when it exceeds cap: call
// again with a larger array; FERRY_OK is returned only when every span
// fit). Errors: FERRY_EINVAL (f >= F, NULL n, *n > cap), FERRY_ESTATE
// (not declared, or the job has no fragments).
FERRY_API int ferry_client_fragment_spans(ferry_client *c, uint32_t f,
    struct ferry_span *spans, size_t cap, size_t *n);

// ferry_client_fragment_start pushes fragment f's part of g (whole-model
// buffers, as ferry_client_push_pull: the sum of per-sample values over
// n_samples) and asks for that fragment's next version, without waiting:
// requests travel while the caller computes. At most one fragment is in
// flight; g must stay unchanged until ferry_client_fragment_wait. The
// pulled weights go into w's fragment-f elements only (or the pull sink).
// Errors: FERRY_EINVAL (f >= F, NULL buffers), FERRY_ESTATE (not
// declared, fragments <= 1, a fragment or a layer-wise step in flight),
// and those of ferry_client_push_pull.
FERRY_API int ferry_client_fragment_start(ferry_client *c, uint32_t f,
    const float *const *g, uint32_t n_samples, float *const *w);

// ferry_client_fragment_wait blocks until the fragment in flight has its
// new weights in w, as ferry_client_push_pull would have written them.
// Any error abandons the fragment round: nothing stays in flight, and the
// caller pulls that fragment again (ferry_client_fragment_pull).
// Errors: FERRY_ESTATE (none in flight) and those of
// ferry_client_push_pull (FERRY_EBEHIND: this rank's push came too late
// for the round, FERRY_EROLLBACK, ...).
FERRY_API int ferry_client_fragment_wait(ferry_client *c);

// ferry_client_fragment_pull pulls fragment f's newest version into w's
// fragment-f elements (after a failed fragment round, or to start).
// Errors: as ferry_client_pull.
FERRY_API int ferry_client_fragment_pull(ferry_client *c, uint32_t f,
    float *const *w);

// ---- encoded pushes (for trainers that quantize on a GPU) ------------------
//
// A trainer can encode its gradients itself, shard by shard, in the job's
// push codec (keeping the error-feedback residual wherever it computes) and
// hand libferry the codes: then only codes cross PCIe. The layout of the
// shards is fixed for the job (maps may move shards between servers but
// never re-cut them). Codec ids and byte formats: docs/protocol.md.

// One shard of the job as the trainer encodes it.
struct ferry_shard {
	uint32_t tensor;     // tensor id
	uint64_t offset;     // first element within the tensor
	uint64_t len;        // elements
	uint64_t code_bytes; // exact encoded size in the push codec
};

// ferry_client_shards returns the job's shards (after declare) in *shards
// (borrowed; valid until ferry_client_close) and their count in *n, plus
// the push codec's wire id and bucket (codec_id 0 = fp32: no codec).
// Errors: FERRY_ESTATE before declare, FERRY_EINVAL for NULL outputs.
FERRY_API int ferry_client_shards(const ferry_client *c,
    const struct ferry_shard **shards, size_t *n, uint32_t *codec_id,
    uint32_t *bucket);

// ferry_client_in_warmup returns 1 while the job's first --warmup-steps
// versions run uncompressed (push fp32 with ferry_client_push_pull then),
// else 0.
FERRY_API int ferry_client_in_warmup(const ferry_client *c);

// ferry_client_push_pull_encoded is ferry_client_push_pull with gradients
// already encoded: codes[i] holds shard i's code_bytes bytes (error
// feedback is the caller's business). Not during warm-up (FERRY_ESTATE)
// and not for a job without a push codec (FERRY_ESTATE). codes are not
// modified and may be freed when the call returns. With a pull sink set,
// the weights go to the sink and w may be NULL.
FERRY_API int ferry_client_push_pull_encoded(ferry_client *c,
    const uint8_t *const *codes, uint32_t n_samples, float *const *w);

// ---- pull sinks (for trainers that keep their weights on a GPU) -----------
//
// By default a pull writes the weights into the caller's host buffers and,
// with a pull codec, libferry keeps the shared reference (docs/
// algorithms.md §2.4) in host memory and checks its CRC-32. A trainer
// whose weights live on a device can instead register a pull sink: then
// libferry hands the sink what each pull reply carries, shard by shard, and
// the sink owns the reference (which is also the shard's weights). Only the
// codes need to cross PCIe. libferry keeps all the bookkeeping as before:
// versions, skipping entries already applied, gaps in a chain, and the
// full resync of a shard whose reference does not match the server's.

// One piece of a pull reply, for one shard. Borrowed: valid only during
// the callback that receives it.
struct ferry_pull_piece {
	uint32_t       shard;  // global shard id (ferry_client_shards)
	uint32_t       tensor; // tensor id
	uint64_t       offset; // first element within the tensor
	uint64_t       len;    // elements of the shard
	uint32_t       codec;  // delta: the pull codec's wire id; full: 0
	uint32_t       bucket; // delta: the pull codec's bucket; full: 0
	uint64_t       base_version; // delta: version the reference holds now
	uint64_t       version;      // version after this piece
	const uint8_t *data;         // full: 4*len bytes of fp32 (little
	                             // endian); delta: the codes. Not aligned.
	uint64_t       bytes;        // bytes at data
};

// A pull sink: three callbacks and their argument. For each shard of a
// pull, libferry calls either
//   full(arg, p) once: the reference becomes the fp32 values at p->data
//     (with a pull codec libferry has already checked their CRC-32), or
//   delta(arg, p) zero or more times, in order, then check(arg, shard,
//     version, crc) once (only when the job has a pull codec):
//     delta adds the decoded codes to the reference, exactly as
//     comp_decode_add (bit for bit, in the same float order), and check
//     compares the CRC-32 (zlib's polynomial) of the reference's fp32
//     bytes with crc.
// The codes of a delta are checked for their exact length only (never
// zero: "no change" entries are not passed on); their contents are bytes
// from the network: a sink decodes them without trusting them (a decode
// that goes wrong is caught by the CRC).
// Each callback returns FERRY_OK; FERRY_ECORRUPT when the reference does
// not match (CRC mismatch, or the codes could not be applied): libferry
// then re-pulls that shard in full, as after its own CRC mismatch
// (counted in ferry_stats.resyncs; a mismatch after the full pull fails
// the call with FERRY_ECORRUPT); any other ferry_err fails the call with
// that code (FERRY_ESINK for the sink's own failure, a device error say;
// FERRY_EPROTO for codes it found malformed), with the shard named in
// last_error.
// Callbacks run on the thread that called the pull, one at a time, and
// must not call back into the client.
struct ferry_pull_sink {
	int (*full)(void *arg, const struct ferry_pull_piece *p);
	int (*delta)(void *arg, const struct ferry_pull_piece *p);
	int (
	    *check)(void *arg, uint32_t shard, uint64_t version, uint32_t crc);
	void *arg;
};

// ferry_client_set_pull_sink makes every later pull of c (ferry_client_pull,
// the pull half of ferry_client_push_pull and _encoded, and the full
// resyncs libferry does inside them) deliver to *sink instead of the weight
// buffers: those calls then accept w == NULL and leave any w untouched.
// sink == NULL goes back to the buffers. *sink is copied; sink->arg must
// stay valid while it is set. Set it before the first pull: a shard whose
// reference was last set through the other path (sink or buffers) gets a
// full pull the next time (counted as a resync), never a delta on top of a
// reference that is not there. Does not block or allocate.
// Errors: FERRY_EINVAL (c is NULL, or a callback of sink is NULL).
FERRY_API int ferry_client_set_pull_sink(ferry_client *c,
    const struct ferry_pull_sink                      *sink);

// One server link of a declared client, as ferry_client_link reports
// it: the codecs in use on it (the job's, or with "auto" this link's
// choice: "none" for the pull means the weights in fp32), the link as
// last probed (0: never probed), and the payload bytes per push-pull
// since that choice was made (averages over `steps`).
struct ferry_link {
	const char *server;     // URL (borrowed; valid until the next call)
	const char *codec_push; // e.g. "q4" (borrowed, static or the opts')
	const char *codec_pull;
	double      bw_bps, rtt_s;
	double      push_bytes_per_step, pull_bytes_per_step;
	uint64_t    steps;
};

// ferry_client_link fills *out for server link m (0 .. servers-1 of the
// current map). Errors: FERRY_EINVAL (c or out NULL, not declared, m out
// of range: a caller lists links by counting up until this).
FERRY_API int ferry_client_link(const ferry_client *c, size_t m,
    struct ferry_link *out);

// ferry_client_pull_codec returns the job's pull codec: its wire id (0 =
// fp32: every pull is full) and bucket, as a sink will see them in
// ferry_pull_piece. Valid after ferry_client_open.
// Errors: FERRY_EINVAL (a NULL argument).
FERRY_API int ferry_client_pull_codec(const ferry_client *c,
    uint32_t *codec_id, uint32_t *bucket);

// ferry_client_leave tells the scheduler this trainer leaves the job: sync
// rounds stop waiting for its pushes (rounds it already pushed to still
// count them). Call it before ferry_client_close when stopping early.
// Errors: FERRY_ESTATE before declare, FERRY_ECONNECT, FERRY_ETIMEDOUT,
// FERRY_EREMOTE.
FERRY_API int ferry_client_leave(ferry_client *c);

// ferry_client_stats copies the client's counters into *st.
FERRY_API void ferry_client_stats(const ferry_client *c,
    struct ferry_stats                               *st);

// What a client did to ride out faults (ferry_client_recovery): counters
// since ferry_client_open.
struct ferry_recovery {
	// A server's connection failed during a call (reset, refused: it died
	// or restarted): the call waited for a map that gives the server's
	// shards a home again (a restart in its slot, a replica promoted, a
	// re-seed from the trainers) and re-sent, within its deadline.
	uint64_t server_losses;
	// Shard pushes that sync mode (and SSP with staleness 0) left out
	// because the shard had already closed the round they were for: a
	// rank that rejoined after its dead process's last push reached only
	// some shards, or a --sync-quorum round closed without it. Those
	// shards were pulled instead and the others' round got the push.
	uint64_t pushes_skipped;
	// Shards this client offered its copy of to a re-seed (their only
	// copy was lost with a server; docs/operations.md §12).
	uint64_t seeds_offered;
	// Shards being re-seeded that this client held no copy of to offer
	// (never pulled, or pulled through a pull sink without a pull codec).
	uint64_t seeds_unheld;
};

// ferry_client_recovery copies the client's fault counters into *st
// (zeroes for a NULL c).
FERRY_API void ferry_client_recovery(const ferry_client *c,
    struct ferry_recovery                               *st);

// ferry_client_last_error returns the message of the last failed call
// (empty string if none). Borrowed: valid until the next call on c.
FERRY_API const char *ferry_client_last_error(const ferry_client *c);

// ferry_client_trainers returns the number of trainers in the job (known
// after ferry_client_declare; 0 before).
FERRY_API int ferry_client_trainers(const ferry_client *c);

// ferry_client_ef_residual_norm returns the L2 norm, over every declared
// tensor, of the push side's error-feedback residual (what quantization
// left out of the pushes so far and will add to the next ones). 0 before
// ferry_client_declare, without a push codec, and when the caller encodes
// its own gradients (ferry_client_push_pull_encoded keeps its residual
// itself). It reads the whole residual, O(model size): call it every few
// steps, not on every one. Same thread as the step calls.
FERRY_API double ferry_client_ef_residual_norm(const ferry_client *c);

// ferry_client_lr returns the learning rate the servers apply to the next
// update of the weights this client holds: the job's schedule
// (opts.lr_schedule, with its warm-up) at the client's version, computed
// by the same function the servers use. 0 for NULL. Same thread as the
// step calls.
FERRY_API double ferry_client_lr(const ferry_client *c);

// ---- sparse embedding tables (since 0.3) -----------------------------------
//
// A sparse table holds rows of `dim` floats keyed by uint64, created on
// first (admitted) update with values that depend only on (opts.seed,
// table, key), its keys hashed into hash-range shards placed on the
// servers like dense shards (docs/libferry.md, "Sparse tables"). A step
// pulls the rows of its batch's keys and pushes their gradients; the
// servers apply the table's row optimizer to the rows present.

// A row's initial values.
enum ferry_row_init {
	FERRY_ROW_ZEROS   = 0,
	FERRY_ROW_UNIFORM = 1, // uniform in [-init_scale, init_scale)
	FERRY_ROW_NORMAL  = 2, // normal, mean 0, stddev init_scale
};

// One sparse table of the job (ferry_client_declare_tables). Zero fields
// take the defaults named; the whole spec is part of the job (a later
// trainer that differs gets FERRY_EMISMATCH).
struct ferry_table_spec {
	const char *name;       // unique among tables, at most 127 bytes
	uint32_t    dim;        // floats per row, 1..4096
	uint32_t    init;       // enum ferry_row_init
	float       init_scale; // FERRY_ROW_UNIFORM / _NORMAL
	// The row optimizer: "sgd" (NULL), "adagrad" (one accumulator per
	// row), "adam" (lazy: only rows in a step, per-row step counts) or
	// "ftrl" (FTRL-Proximal; lr is its alpha).
	const char *optimizer;
	double      lr;           // 0: the job's lr (and schedule)
	double      beta1, beta2; // adam (0.9, 0.999)
	double      eps;          // adam, adagrad (1e-8)
	double      adagrad_init; // adagrad's first accumulator (0)
	double      ftrl_beta, ftrl_l1, ftrl_l2; // ftrl (1, 0, 0)
	uint32_t    shards;        // hash ranges (0: one per server)
	uint64_t    expected_rows; // placement weight (0: 1,000,000)
	// Admission: a row is created once its key was pushed admit_count
	// times (0, 1: at once), or with probability admit_prob per push
	// (0: off); until then a pull returns the initial row and a push of
	// the key is dropped (counted).
	uint32_t    admit_count;
	double      admit_prob;
	uint64_t    evict_after; // evict rows untouched this many versions
	                         // (0: never)
	// Row codecs: "none" (NULL), "fp16", "bf16" or "q8" (a scale per
	// row), for pushed gradients and pulled rows.
	const char *codec_push;
	const char *codec_pull;
};

// ferry_client_declare_tables is ferry_client_declare_specs with sparse
// tables (ids 0..n_tables-1 in this order) beside the dense tensors.
// Errors as ferry_client_declare_specs; a bad table spec gets FERRY_EINVAL
// naming the table and the field.
FERRY_API int ferry_client_declare_tables(ferry_client *c,
    const struct ferry_tensor_spec *specs, size_t n,
    const struct ferry_table_spec *tables, size_t n_tables);

// One table's keys in a step. Keys may repeat and come in any order.
struct ferry_rows {
	uint32_t        table; // declared table id
	const uint64_t *keys;
	size_t          n;
	// pull: n * dim floats written, row i for keys[i] (repeated keys get
	// the same row); push: NULL.
	float          *rows;
	// push: n * dim floats, the gradient for keys[i] (a key's
	// occurrences are summed); pull: NULL.
	const float    *grads;
};

// ferry_client_rows_pull fetches the rows of every block's keys at the
// version this client holds (sync: the round its last push closed).
// Absent rows come back as their initial values.
FERRY_API int ferry_client_rows_pull(ferry_client *c, struct ferry_rows *r,
    size_t n_blocks);

// ferry_client_rows_push_pull pushes row gradients (push: n_push blocks,
// n_samples samples) and then fetches the rows of the pull blocks as the
// push left them (sync: after the round closes, which needs every trainer's
// push of every table: a trainer with no keys for a table still calls this
// each step, with n_push 0 or empty blocks). push or pull may be NULL
// with a zero count.
FERRY_API int ferry_client_rows_push_pull(ferry_client *c,
    const struct ferry_rows *push, size_t n_push, uint32_t n_samples,
    struct ferry_rows *pull, size_t n_pull);

// ferry_client_step is one step of a model with dense tensors and sparse
// tables in one round: ferry_client_push_pull(g, n_samples, w) and
// ferry_client_rows_push_pull(push, n_push, n_samples, pull, n_pull), the
// requests of both in flight together.
FERRY_API int ferry_client_step(ferry_client *c, const float *const *g,
    uint32_t n_samples, float *const *w, const struct ferry_rows *push,
    size_t n_push, struct ferry_rows *pull, size_t n_pull);

// Counters of one sparse table as this client saw them.
struct ferry_table_stats {
	uint64_t keys_pulled; // keys asked for, before de-duplication
	uint64_t rows_pulled; // distinct rows received
	uint64_t keys_pushed; // keys pushed, before de-duplication
	uint64_t rows_pushed; // distinct row gradients sent
};

// ferry_client_table_stats fills *st for table id `table` (FERRY_EINVAL
// for an unknown id).
FERRY_API int ferry_client_table_stats(const ferry_client *c, uint32_t table,
    struct ferry_table_stats *st);

// ---- Elastic jobs (since 0.4): ranks given by the scheduler, data leases

// FERRY_RANK_ANY, as ferry_opts.rank, asks the scheduler for the lowest
// free rank at ferry_client_declare (a job started with --trainers
// MIN:MAX grows this way); ferry_client_rank tells which one it gave.
#define FERRY_RANK_ANY (-1)

// ferry_client_rank returns this client's rank: opts.rank, or the rank the
// scheduler gave (FERRY_RANK_ANY) once ferry_client_declare returned; -1
// before that.
FERRY_API int ferry_client_rank(const ferry_client *c);

// ferry_client_elastic returns 1 when the job's membership can change
// (--trainers MIN:MAX with MIN < MAX): its trainers should take their data
// from leases (ferry_client_lease_next) rather than from rank partitions.
// 0 otherwise, and before ferry_client_declare.
FERRY_API int ferry_client_elastic(const ferry_client *c);

// ferry_client_members returns the trainers live in the job by this
// client's map (MAX minus the ranks the map lists gone): a hook for
// learning-rate rules that scale with the trainer count (the servers
// divide each round by its samples, so the lr per sample does not move
// by itself; docs/algorithms.md §6.4). 0 before ferry_client_declare.
FERRY_API int ferry_client_members(const ferry_client *c);

// ferry_client_rejoin registers again, under the same rank, a client that
// called ferry_client_leave (an idle trainer that found work again), and
// installs the map that lists it again. In a sync job its next
// ferry_client_pull joins the rounds: it learns the shards' version J and
// tells every server that this rank pushes from J on (PullRequest.join),
// so pull before the next step (weights held from before the leave are
// stale: a push for them fails with FERRY_EBEHIND). A client that
// declared into a running sync job joins the same way at its first pull.
// Errors: FERRY_ESTATE (not left), FERRY_ECONNECT, FERRY_ETIMEDOUT,
// FERRY_EREMOTE (refused: the job is full, or the rank flapped and must
// wait; see ferry_client_last_error), FERRY_EROLLBACK (back in the job,
// which rolled back meanwhile: pull).
FERRY_API int ferry_client_rejoin(ferry_client *c);

// A data lease: the positions [start, start+count) of epoch `epoch`'s
// sample order (ferry_data_permutation(seed, epoch, ...)). id 0: none.
struct ferry_lease {
	uint64_t id;
	uint32_t epoch;
	uint64_t start;
	uint64_t count;
	uint64_t seed;
	int      done;     // (id 0) every sample of every epoch is consumed
	uint32_t retry_ms; // (id 0, not done) ask again after this long
};

// ferry_client_lease_next gives back the lease this client holds (its
// positions before the last ferry_client_lease_mark were consumed, the
// rest returns to the pool) and asks the scheduler for the next one of
// up to `want` positions of a data set of dataset_size samples trained
// for `epochs` epochs with data seed `seed` (the first trainer to ask
// fixes the three; a later one that differs gets FERRY_EMISMATCH). Fills
// *out; out->id 0 means nothing now: out->done (finished: leave) or
// out->retry_ms (ask again; in sync mode an idle trainer should
// ferry_client_leave first, so that rounds do not wait for it, and
// ferry_client_rejoin when it gets a lease). Errors: FERRY_ESTATE before
// declare, FERRY_EINVAL, FERRY_EMISMATCH, FERRY_ECONNECT,
// FERRY_ETIMEDOUT, FERRY_EREMOTE.
FERRY_API int ferry_client_lease_next(ferry_client *c, uint64_t dataset_size,
    uint32_t epochs, uint64_t seed, uint64_t want, struct ferry_lease *out);

// ferry_client_lease_mark says that the samples of this client's next
// push (or push-pull, or step) end at position `end` of lease `id`: every
// PushRequest of that step carries it (and of later steps, until the next
// mark), and the servers that admit the push report it to the scheduler,
// so that a trainer killed mid-lease returns exactly the positions no
// admitted push held. The sparse rows of a step (ferry_client_step,
// ferry_client_rows_push_pull) carry no mark: a step's dense push does.
// Never fails (id 0 clears it; NULL c: no-op).
FERRY_API void ferry_client_lease_mark(ferry_client *c, uint64_t id,
    uint64_t end);

// ferry_client_data_step says which of this trainer's data steps its next
// pushes' gradients were computed on (spot checks, docs/security.md): every
// PushRequest carries it until the next call, and a verifier recomputes a
// kept push from that step's batch and the weights of the push's version.
// Never fails (NULL c: no-op).
FERRY_API void ferry_client_data_step(ferry_client *c, uint64_t step);

// ferry_client_lease_release gives back the lease this client holds (the
// positions before its last mark consumed) without asking for another:
// call it before ferry_client_leave when stopping early. A client
// without a lease returns 0. Errors as ferry_client_lease_next.
FERRY_API int ferry_client_lease_release(ferry_client *c);

// ferry_data_permutation writes epoch `epoch`'s sample order for a data
// set of n samples under data seed `seed` into out[0..n-1] (a
// permutation of 0..n-1, the same on every machine and in the Python
// binding). n 0 or a NULL out: no-op.
FERRY_API void ferry_data_permutation(uint64_t seed, uint32_t epoch,
    uint64_t n, uint32_t *out);

// Spot checks' verifier (issue 31): ferry_verifier_*, in its own header.
#include "ferry_verify.h"

#ifdef __cplusplus
}
#endif
#endif // FERRY_FERRY_H
