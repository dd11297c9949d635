// ferry_verify.h — libferry's calls for a spot-check verifier (issue 31,
// docs/security.md), part of the public API: <ferry/ferry.h> includes it,
// and it may be included alone. Kept apart only to keep ferry.h readable.
#ifndef FERRY_FERRY_VERIFY_H
#define FERRY_FERRY_VERIFY_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- spot checks: a verifier's calls (issue 31, docs/security.md) ---------
//
// A verifier (trainer --verify 1) is run by the job's operator: it
// collects the pushes the servers kept for verification, recomputes each
// from the weights of its version and the batch its data step names, and
// tells the scheduler whether the pushed values match. It signs as the
// operator (the job's secret file; under TLS its certificate must name
// "ferry-operator"): the servers' Audit and the scheduler's Verified rpcs
// refuse anyone else when authentication is on. One thread at a time.
typedef struct ferry_verifier ferry_verifier;

// The job as a verifier sees it (ferry_verifier_map). Arrays borrowed:
// valid until the next ferry_verifier_map or ferry_verifier_close.
struct ferry_verifier_job {
	uint64_t                  epoch;    // the map's epoch
	uint32_t                  trainers; // ranks of the job
	uint32_t                  servers;  // ferry_verifier_audit's indexes
	size_t                    n_tensors;
	const uint64_t           *tensor_len; // elements, by tensor id
	size_t                    n_shards;
	const struct ferry_shard *shards; // by global shard id (code_bytes:
	                                  // the shard's fp32 bytes)
	const uint32_t           *shard_server; // by global shard id
	uint64_t                  seed;         // the job's declared seed
	// 1: sync mode, fp32 pushes, no clipping, no local steps (pushes a
	// verifier can recompute exactly); 0: spot checks cannot hold.
	int                       plain;
	// 1: every rank left the job or was quarantined: once the servers'
	// kept pushes are drained, nothing more will come.
	int                       ended;
	size_t                    n_quarantined;
	const uint32_t           *quarantined; // ranks, as the map lists them
};

// One shard of one kept push (ferry_verifier_audit). The floats are
// borrowed: valid until the next ferry_verifier_audit or close.
struct ferry_audit_record {
	uint32_t     rank;
	uint64_t     version;   // the sync round's version
	uint64_t     data_step; // as pushed: 1 + the claimed data step
	uint32_t     shard;     // global shard id (ferry_verifier_job.shards)
	uint64_t     len;       // floats in weights and in push
	uint32_t     n_samples; // the push's sample count
	uint32_t     reason;    // 1: the random draw; 2: an outlier
	uint32_t     server;    // the server that kept it
	const float *weights;   // the shard's weights at version
	const float *push;      // the pushed values, decoded to fp32
};

// A verifier's verdict on one record (ferry_verifier_report): its rank,
// version, data_step, shard and server as the record said, and the
// evidence. pushed_crc and recomputed_crc are CRC-32s (zlib's) of the
// shard's pushed and recomputed fp32 bytes; differing counts the elements
// whose bits differ, max_abs_diff the largest |pushed - recomputed|.
struct ferry_verdict {
	uint32_t rank;
	uint64_t version;
	uint64_t data_step;
	uint32_t shard;
	uint32_t server;
	int      mismatch; // 1: the push is not what the trainer's step gives
	uint32_t pushed_crc, recomputed_crc;
	uint64_t differing;
	float    max_abs_diff;
};

// ferry_verifier_open makes a verifier for the job of o->scheduler_url
// (o->timeout_ms bounds each call; o->tls_cert, tls_key and tls_ca give
// the operator's certificate under TLS), signing as the operator with the
// job's key from secret_file (NULL or "": no signing). Nothing is sent
// yet. Errors: FERRY_EINVAL (a NULL argument, an empty URL, an unreadable
// key or TLS file), FERRY_ENOMEM, FERRY_ECONNECT.
FERRY_API int ferry_verifier_open(const struct ferry_opts *o,
    const char *secret_file, ferry_verifier **out);

// ferry_verifier_map fetches the scheduler's map in force (the first call
// waits, up to the deadline, for the job to start) into *job, and dials
// the servers it names. Errors: FERRY_EINVAL, FERRY_ECONNECT,
// FERRY_ETIMEDOUT (the job did not start in time: call again),
// FERRY_EREMOTE, FERRY_EPROTO (a map that makes no sense).
FERRY_API int ferry_verifier_map(ferry_verifier *v,
    struct ferry_verifier_job                   *job);

// ferry_verifier_audit collects up to max (0: as many as one reply
// holds) pushes that server `server` (an index of the map) kept for
// verification, each handed out once, oldest first: *n records in *recs,
// and in *dropped (may be NULL) how many kept pushes the server lost so
// far because its store was full. Nothing is allocated once the buffers
// fit the largest reply. Errors: FERRY_ESTATE (no map yet), FERRY_EINVAL,
// FERRY_ECONNECT, FERRY_ETIMEDOUT, FERRY_EREMOTE (PERMISSION_DENIED: not
// signed as the operator; FAILED_PRECONDITION: spot checks are off),
// FERRY_EPROTO (a record outside the map or the payload).
FERRY_API int ferry_verifier_audit(ferry_verifier *v, uint32_t server,
    uint32_t max, const struct ferry_audit_record **recs, size_t *n,
    uint64_t *dropped);

// ferry_verifier_report sends one verdict to the scheduler (the Verified
// rpc): a mismatch is evidence the scheduler may quarantine the rank on.
// Errors: FERRY_EINVAL, FERRY_ECONNECT, FERRY_ETIMEDOUT, FERRY_EREMOTE.
FERRY_API int ferry_verifier_report(ferry_verifier *v,
    const struct ferry_verdict                     *vd);

// ferry_verifier_last_error returns the message of the last failed call
// ("" if none; "" for NULL). Borrowed: valid until the next call on v.
FERRY_API const char *ferry_verifier_last_error(const ferry_verifier *v);

// ferry_verifier_close closes the connections and frees v (NULL: no-op).
FERRY_API void ferry_verifier_close(ferry_verifier *v);

#ifdef __cplusplus
}
#endif
#endif // FERRY_FERRY_VERIFY_H
