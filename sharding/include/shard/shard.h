// shard/shard.h — Ferry's placement library: cutting tensors into shards,
// assigning shards to servers, and the scheduler's placement policy.
//
// Pure code: no I/O, no threads, no global state. Every function is
// reentrant and may be called from any thread; calls that share no output
// memory may run concurrently. Nothing here blocks.
//
// Conventions (see docs/style.md): functions return 0 (FB_OK) or a
// positive FB_E* code from <fb/fb.h>; out-params are written only on
// success; heap memory comes from fb_alloc and each allocating call names
// its release call.
#ifndef SHARD_SHARD_H
#define SHARD_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include <fb/fb.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- shards ---------------------------------------------------------------

// shard_desc describes one shard: a contiguous slice of one float32 tensor.
// The shard key is (tensor, index). offset and len count float32 elements
// within the tensor (multiply by 4 for bytes).
struct shard_desc {
	uint32_t tensor; // tensor id = position in the tensor table
	uint32_t index;  // slice index within the tensor, 0-based
	uint64_t offset; // first element of the slice
	uint64_t len;    // number of elements, always > 0
};

// shard_split cuts n_tensors tensors, whose lengths in float32 elements are
// tensor_lens[0..n_tensors-1], into shards of at most shard_bytes bytes.
//
// Output order: tensors in table order; the shards of one tensor are
// contiguous, in index order, and together cover the tensor exactly without
// overlap. A tensor of at most shard_bytes bytes is one shard. A larger one
// is cut into p = ceil(4·len / shard_bytes) pieces of equal length where
// possible (the first len mod p pieces are one element longer), so every
// piece is at most shard_bytes bytes.
//
// On success *out points to an array of *n_out descriptors allocated with
// fb_alloc; the caller owns it and releases it with fb_free.
//
// Errors: FB_EINVAL if tensor_lens, out or n_out is NULL, n_tensors is 0 or
// above UINT32_MAX, any length is 0, or shard_bytes is not a multiple of 4
// or is below 4. FB_ERANGE if a length exceeds 2^61 elements or a tensor
// needs more than UINT32_MAX shards. FB_ENOMEM if allocation fails.
int shard_split(const uint64_t *tensor_lens, size_t n_tensors,
    uint64_t shard_bytes, struct shard_desc **out, size_t *n_out);

// shard_count writes into *n_out how many shards shard_split would cut the
// same tensors into, without building them: a caller checks a declared
// job against its caps before allocating anything. Errors: as shard_split
// (FB_EINVAL, FB_ERANGE), never FB_ENOMEM.
int shard_count(const uint64_t *tensor_lens, size_t n_tensors,
    uint64_t shard_bytes, uint64_t *n_out);

// SHARD_LINK_S is the time on the slowest link that shard_link_bytes aims
// a shard at; SHARD_LINK_MIN_BYTES its smallest shard (below it per-shard
// costs, not the link, dominate).
#define SHARD_LINK_S 0.002
#define SHARD_LINK_MIN_BYTES 4096u

// shard_link_bytes is the shard size for a job whose slowest probed link
// moves bw_bps bytes/s, given the operator's max_bytes (--shard-bytes):
// in a sync job a shard's reply can only leave once every trainer pushed
// all of it, so the exchange overlaps its two directions only to the grain
// of a shard, and one shard's transfer is the step's tail beyond the link
// bound. A link that moves max_bytes in SHARD_LINK_S or less (loopback, a
// data centre) keeps max_bytes; a slower one gets the largest power of two
// it moves in SHARD_LINK_S, at least SHARD_LINK_MIN_BYTES (and never above
// max_bytes). bw_bps <= 0 or not finite (not measured) keeps max_bytes.
// The result is a multiple of 4 when max_bytes is.
uint64_t shard_link_bytes(double bw_bps, uint64_t max_bytes);

// ---- uniform placement (baseline) ----------------------------------------

// shard_place_uniform is the hash baseline (--placement=uniform): it writes
// assign[i] = i mod n_servers for i in [0, n_shards), i.e. round-robin in
// shard order. The caller owns assign (n_shards entries).
//
// Errors: FB_EINVAL if n_servers is 0, or assign is NULL while n_shards > 0.
// n_shards == 0 succeeds and writes nothing.
int shard_place_uniform(size_t n_shards, uint32_t n_servers, uint32_t *assign);

// ---- latency-aware placement (docs/algorithms.md §3.3) ---------------------

// Cost models. Let load_m = Σ_{i→m} b_i.
//  SHARD_MODEL_B (default): one batched message per server over parallel
//   connections: time_t = max_{m: load_m>0} (k·L[t][m] + ρ·load_m/B[t][m]),
//   plus the optional NIC bottlenecks (see struct shard_inst).
//  SHARD_MODEL_A: serial per-shard RPCs:
//   time_t = Σ_i (L[t][a(i)] + ρ·b_i/B[t][a(i)]). k and the NIC terms are
//   not used.
// The objective is F(a) = max_t time_t, ties broken by Σ_t time_t.
enum shard_model {
	SHARD_MODEL_B = 0,
	SHARD_MODEL_A = 1,
};

// shard_inst is one placement problem. All arrays are borrowed: the caller
// owns them and must keep them unchanged for the duration of a call that
// takes the instance. Matrices are row-major with one row per trainer:
// L[t][m] = lat[t * n_servers + m].
struct shard_inst {
	size_t          n_shards;   // S ≥ 1
	uint32_t        n_servers;  // M ≥ 1
	uint32_t        n_trainers; // T ≥ 1
	const uint64_t *size;       // [S] b_i in bytes (fp32: 4·len), > 0
	// [M] C_m in bytes; NULL, 0 or UINT64_MAX mean unbounded. Compared
	// with load_m, so divide server memory by the copies kept per byte
	// (about 2+opt) before passing it.
	const uint64_t *cap;
	const double   *lat; // [T·M] L[t][m], seconds, finite, ≥ 0
	const double   *bw;  // [T·M] B[t][m], bytes/s, > 0 (may be +inf)
	// [T] trainer NIC bytes/s, or NULL; an entry ≤ 0 means unknown.
	// Model B adds the term ρ·Σ_m load_m / NIC_t to time_t (as a max).
	const double   *nic_trainer;
	// [M] server egress bytes/s, or NULL; ≤ 0 unknown. Model B adds
	// ρ·T·load_m / NIC_m to server m's term (as a max).
	const double   *nic_server;
	double          rho;   // wire factor ρ > 0 (2 = fp32 push + pull)
	uint32_t        k;     // round trips per step ≥ 1 (model B)
	int             model; // enum shard_model
};

#define SHARD_INST_INIT                                                       \
	{                                                                     \
		0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, 2.0, 1,          \
		    SHARD_MODEL_B                                             \
	}

// shard_solve_opts tunes shard_solve. Start from SHARD_SOLVE_OPTS_INIT.
struct shard_solve_opts {
	uint32_t starts;     // K random feasible starts for multi-start (20)
	uint32_t max_passes; // local-search passes per start (100); 0 turns
	                     // local search off (with starts = 0: greedy only)
	uint64_t seed; // seed of the random starts; same seed, same result
};

#define SHARD_SOLVE_OPTS_INIT                                                 \
	{                                                                     \
		20, 100, UINT64_C(0x5eed)                                     \
	}

// shard_report describes a solution. Times are in seconds.
struct shard_report {
	double   f;        // F = max_t time_t
	double   f_sum;    // Σ_t time_t (the tie-break)
	double   lb;       // lower bound on F (shard_lower_bound)
	double   ratio;    // F / LB; 1 if both are 0, +inf if only LB is 0
	double   greedy_f; // F of the greedy start before local search (or of
	                   // its capacity fallback; +inf if greedy found no
	                   // feasible start). Brute force: equals f.
	uint32_t passes;   // local-search passes run, over all starts
	uint32_t starts;   // random starts that were feasible and searched
};

// shard_cost evaluates assignment assign[0..S-1] (server of each shard) on
// inst. Capacities are ignored (see shard_assign_check). Writes F to *f,
// Σ_t time_t to *f_sum and, when trainer_time is not NULL, time_t to
// trainer_time[0..T-1]. f and f_sum may be NULL.
//
// Errors: FB_EINVAL if inst is invalid (see shard_inst above), assign is
// NULL or names a server ≥ M. FB_ERANGE if Σ b_i overflows 64 bits.
// FB_ENOMEM if the working arrays cannot be allocated.
int shard_cost(const struct shard_inst *inst, const uint32_t *assign,
    double *f, double *f_sum, double *trainer_time);

// shard_assign_check returns FB_OK if assign respects every capacity,
// FB_ENOSPC if some server's load exceeds its capacity, FB_EINVAL if inst
// has no shards, no servers or a zero size, or assign is NULL or names a
// server >= M. It reads no link data (lat, bw: a uniform placement is
// checked before any link is measured) and does not allocate.
int shard_assign_check(const struct shard_inst *inst, const uint32_t *assign);

// shard_lower_bound writes a lower bound on the optimal F of inst to *lb.
// It ignores capacities, so it bounds the capacitated optimum as well.
// Model B: the maximum of
//   * §3.3's water-filling term max_t ρ·Σ_i b_i / Σ_m B[t][m],
//   * the largest-shard term min_m max_t (k·L[t][m] + ρ·b_max/B[t][m])
//     (≥ §3.3's max_t min_m form: that shard has one server for everyone),
//   * the NIC terms when given, and
//   * the multi-trainer water-filling bound: the least F for which
//     Σ_m min_t (F − k·L[t][m])⁺·B[t][m]/ρ ≥ Σ_i b_i (bisection),
// so it is never below the §3.3 formula and much tighter when trainers see
// different links. Model A: LB = max_t Σ_i min_m (L[t][m] + ρ·b_i/B[t][m]).
// Errors: as shard_cost (no allocation, so never FB_ENOMEM).
int shard_lower_bound(const struct shard_inst *inst, double *lb);

// shard_solve places the shards of inst on its servers, minimising F under
// the capacities (docs/algorithms.md §3.3): LPT greedy (largest shard first,
// to the feasible server giving the least F, ties to the least own time, then
// the lowest index; first-fit-decreasing if greedy gets stuck), then local
// search (per pass: the best strictly improving single-shard move, then the
// best strictly improving pairwise swap; at most opts->max_passes passes),
// then the same local search from opts->starts random feasible starts drawn
// with opts->seed; the best result wins, earlier ones on ties.
//
// On success writes the server of shard i to assign[i] (S entries), time_t
// to trainer_time[0..T-1] if it is not NULL, and the report to *rep if it
// is not NULL. opts may be NULL for the defaults. The result is a pure
// function of inst and opts. Working arrays are allocated once per call.
// Cost: O(S log S + S·M·T) greedy; per pass O(S·M·T + S²·T).
//
// Errors: FB_EINVAL as shard_cost, or assign NULL. FB_ENOSPC if no feasible
// assignment was found: always when Σ b_i exceeds Σ C_m or a shard is larger
// than every capacity; otherwise when greedy, first-fit-decreasing and every
// random start fail. FB_ENOMEM. Outputs are untouched on error.
int shard_solve(const struct shard_inst *inst,
    const struct shard_solve_opts *opts, uint32_t *assign,
    double *trainer_time, struct shard_report *rep);

// shard_solve_brute finds an exact optimum by enumerating all M^S
// assignments within capacity (lexicographic on F, then Σ_t time_t; the
// first in enumeration order on exact ties). For tests and benchmarks.
// Outputs as shard_solve (rep->passes and rep->starts are 0).
//
// Errors: FB_ERANGE if S > 12 or M^S > 2,000,000. FB_ENOSPC if no
// assignment fits. Otherwise as shard_solve.
int shard_solve_brute(const struct shard_inst *inst, uint32_t *assign,
    double *trainer_time, struct shard_report *rep);

// shard_format_bound returns a buffer size that is always enough for
// shard_format on inst, or 0 if inst is invalid.
size_t shard_format_bound(const struct shard_inst *inst);

// shard_format writes a human-readable, multi-line description of a
// placement into buf (len bytes, NUL-terminated): the problem, the L (ms) and
// B (MB/s) matrices, per-server shard counts and loads, the assignment,
// the predicted time of each trainer, and F, LB and F/LB. It does not print
// anything itself; the scheduler logs the text. When written is not NULL,
// *written receives the string length.
//
// Errors: FB_EINVAL as shard_cost, or buf NULL. FB_ENOSPC if len is too
// small (buf then holds a truncated, NUL-terminated prefix when len > 0).
// FB_ENOMEM.
int shard_format(const struct shard_inst *inst, const uint32_t *assign,
    char *buf, size_t len, size_t *written);

// ---- placement policy (the scheduler's decisions) ------------------------

// Link probes are noisy: a new placement replaces round-robin, or the map
// in force, only when its predicted F is clearly lower, by this factor
// (10% better). See shard_policy_place and shard_policy_gains for the
// exact comparison each makes.
#define SHARD_POLICY_GAIN 0.9

// shard_policy_caps derives the capacities of a placement problem (the cap
// array of struct shard_inst) from the servers' memory. A server keeps
// `copies` bytes per shard byte (weights, staging slots, the pull
// reference and its delta log), so cap[m] = memory[m] / copies, rounded
// down; memory[m] == 0 means unbounded (cap[m] = UINT64_MAX); a server that
// left (gone[m] != 0) gets cap[m] = 1, which no shard fits. *bounded is
// set to 1 when some server has memory given or left (pass cap as the
// instance's cap), 0 otherwise (pass NULL: every server is unbounded).
// Writes n_servers entries of cap; the caller owns cap, memory and gone.
//
// Errors: FB_EINVAL if memory, gone, cap or bounded is NULL, n_servers is
// 0, or copies is not finite or below 1. Outputs are untouched on error.
int shard_policy_caps(uint32_t n_servers, const uint64_t *memory,
    const uint8_t *gone, double copies, uint64_t *cap, int *bounded);

// shard_place_live is shard_place_uniform over the servers still in the
// job: with the live servers (gone[m] == 0) numbered 0..L-1 in index order,
// shard i goes to the live server numbered i mod L. gone has n_servers
// entries; the caller owns assign (n_shards entries).
//
// Errors: FB_EINVAL if gone is NULL, assign is NULL while n_shards > 0, or
// no server is live (n_servers 0 included). n_shards == 0 succeeds and
// writes nothing.
int shard_place_live(size_t n_shards, uint32_t n_servers, const uint8_t *gone,
    uint32_t *assign);

// shard_policy selects what shard_policy_place does.
struct shard_policy {
	int      solve;    // 1: latency-aware (shard_solve, checked against
	                   // round-robin); 0: round-robin over live servers
	int      measured; // the instance's links were measured: report F,
	                   // Σ and LB of a round-robin answer too
	uint64_t seed;     // shard_solve's seed (struct shard_solve_opts)
};

// shard_policy_note says how shard_policy_place reached its answer, for
// the caller's log.
struct shard_policy_note {
	int    kept_rr;  // solve: the solver's gain was under 10%, so the
	                 // round-robin answer was kept
	double f_solver; // F of the solver's own answer (when kept_rr)
	double f_rr;     // F of the round-robin answer (when kept_rr)
};

// shard_policy_place places the shards of inst by policy p, never on a
// server that left (gone[m] != 0; gone has n_servers entries, and inst's
// cap should come from shard_policy_caps so that the solver avoids them).
//
// Round-robin (p->solve == 0): shard_place_live; then, if inst->cap is not
// NULL, the answer must pass shard_assign_check (any failure, an invalid
// instance included, is FB_ENOSPC); then, if p->measured, *rep is zeroed
// and gets F, Σ, LB and F/LB (0 when LB is 0) when those can be computed.
// Without p->measured *rep is left as it was, and without a cap the
// instance's links are not read (they may be unmeasured zeros).
//
// Latency-aware (p->solve != 0): shard_solve with p->seed writes assign
// and *rep; then round-robin over the live servers is evaluated and kept
// instead, with rep's f, f_sum and ratio (F/LB, 0 when LB is 0) its own,
// when it fits the capacities and the solver's F is above
// SHARD_POLICY_GAIN × round-robin's: a solver answer exactly 10% better
// wins. When round-robin cannot be evaluated (out of memory, an invalid
// instance) the solver's answer stands.
//
// On success writes the server of shard i to assign[i] (n_shards entries)
// and, when note is not NULL, *note. The result is a pure function of the
// inputs (and of *rep's prior value when it is left as it was).
//
// Errors: FB_EINVAL if inst, gone, p, assign or rep is NULL, (round-robin)
// no server is live, or (latency-aware) inst is invalid as for shard_solve.
// FB_ENOSPC: the solver found no assignment within capacity, or round-robin
// exceeds a capacity. FB_ENOMEM. On error assign is undefined and *rep
// untouched.
int shard_policy_place(const struct shard_inst *inst, const uint8_t *gone,
    const struct shard_policy *p, uint32_t *assign, struct shard_report *rep,
    struct shard_policy_note *note);

// shard_policy_gains is the rule for replacing the map in force: it
// returns 1 when a new placement's predicted F, f_new, is below
// SHARD_POLICY_GAIN × f_now, the F of the map in force under the same
// links (strictly more than 10% better), and 0 otherwise, NaN included.
// f_now = +inf (the map in force cannot be evaluated) loses to any finite
// f_new.
int shard_policy_gains(double f_new, double f_now);

// ---- replicas (--replicas R) -----------------------------------------------

// SHARD_NO_SERVER marks an empty backup entry.
#define SHARD_NO_SERVER UINT32_MAX

// shard_replicas_repair makes every shard's primary and backups valid for
// the servers live now (gone[m] == 0), changing as little as it can: a
// shard whose primary is gone is promoted to its first live backup (the
// backups are kept in promotion order); backups that are gone or equal to
// the primary are dropped and the list is filled up again, in order, with
// the live servers that follow the primary cyclically (so a first map's
// backups of shard i on primary p are p+1, p+2, ... over the live
// servers). assign has n_shards entries, backups n_shards × nb (shard i's
// at backups[i*nb], SHARD_NO_SERVER for an empty entry); both are updated
// in place. A shard keeps min(nb, live servers - 1) backups. *lost
// receives how many shards had no live primary nor backup (their primary
// is left as it was: nothing holds their state any more). The caller owns
// every array.
//
// Errors: FB_EINVAL if gone or lost is NULL, assign or backups is NULL
// while n_shards > 0 (backups only when nb > 0), or no server is live.
// Outputs are untouched on error.
int shard_replicas_repair(size_t n_shards, uint32_t n_servers,
    const uint8_t *gone, uint32_t nb, uint32_t *assign, uint32_t *backups,
    size_t *lost);

// ---- rollback (a server restarted from its snapshot, no replicas) ---------

// shard_rollback_pick chooses the version a job rolls back to: the newest
// snapshot version held by every server m with use[m] set (those holding
// shards). Server m's versions are held[m*k .. m*k + n_held[m]) (at most
// k, any order). On FB_OK *version receives it. Errors: FB_EINVAL (a NULL
// argument, k == 0, or no server in use), FB_ENOTFOUND (no version is
// held by every server in use: *missing names one that lacks the first
// server's versions, for the message). The caller owns every array.
int shard_rollback_pick(size_t n_servers, const uint8_t *use,
    const uint64_t *held, const uint32_t *n_held, uint32_t k,
    uint64_t *version, uint32_t *missing);

#ifdef __cplusplus
}
#endif
#endif // SHARD_SHARD_H
