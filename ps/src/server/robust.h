// robust.h — robust aggregation of a sync round's pushes (issue 31,
// docs/algorithms.md "Robust aggregation"): the rules of --aggregate, the
// pure kernels (coordinate-wise median and trimmed mean, centered
// clipping, outlier scores) over k pushes of one shard, which tests call
// directly, and the server's use of them (robust.c's second half: scratch,
// per-rank outlier counts, the heartbeat's RankOutliers).
//
// Kernels read the pushes as floats at any alignment (payload bytes lent
// by a parked PushPull, or staging slots) with memcpy, allocate nothing,
// and are deterministic: the same inputs give the same bits.
#ifndef PS_ROBUST_H
#define PS_ROBUST_H

#include <stddef.h>
#include <stdint.h>

// Coordinates per block: a block of each push is gathered before the
// per-coordinate sorts (ps__agg_coord's scratch is k x PS_AGG_BLOCK).
#define PS_AGG_BLOCK 256

// Squared distances (cclip's norms, outlier scores) are summed in this
// many float lanes, element i in lane i mod 16 (each d * d added in
// float), and the lanes then added in double, lane 0 first.
#define PS_AGG_LANES 16

enum ps_agg_kind {
	PS_AGG_MEAN = 0, // the rank-order sum (store.c's path)
	PS_AGG_MEDIAN,   // coordinate-wise median
	PS_AGG_TRIMMED,  // coordinate-wise mean without B largest, B smallest
	PS_AGG_CCLIP,    // centered clipping around the last aggregate
};

// A parsed --aggregate.
struct ps_agg_rule {
	enum ps_agg_kind kind;
	uint32_t         trim; // trimmed:B
	float            tau;  // cclip:TAU (per shard, per-sample units)
	float            beta; // cclip's worker momentum, [0, 1) (0: none)
	int              rel;  // cclip:TAUx: TAU times the median distance
};

// The default worker momentum of cclip:TAU (Karimireddy et al. 2021 use
// 0.9; 0.95 held ALIE off on bench/byzantine.py where 0.9 did not).
#define PS_AGG_BETA 0.95

// ps__agg_parse parses text ("mean", "median", "trimmed:B" with integer
// B >= 1, "cclip:TAU[x][:BETA]" with finite TAU > 0 (TAUx: a radius of
// TAU times the round's median distance) and BETA in [0, 1), PS_AGG_BETA
// when left out; NULL or "" is mean) into *r: FB_OK, or
// FB_EINVAL with the reason, naming the text, in why (n bytes).
int ps__agg_parse(const char *text, struct ps_agg_rule *r, char *why,
    size_t n);

// ps__agg_name returns the rule's name ("mean", "median", "trimmed",
// "cclip"): the metrics' rule label.
const char *ps__agg_name(enum ps_agg_kind kind);

// The k pushes of one shard of n floats a kernel reads: v[j] points at
// push j's floats (any alignment); div[j], when div is not NULL, is its
// n_samples: the kernels work on v[j][i] / div[j] (a float division, the
// per-sample mean), else on v[j][i] as it is.
struct ps_agg_in {
	uint32_t           k;
	size_t             n;
	const void *const *v;
	const float       *div;
};

// ps__agg_value returns push j's value at coordinate i as the kernels see
// it (divided by div[j] when div is set).
float ps__agg_value(const struct ps_agg_in *in, uint32_t j, size_t i);

// ps__agg_coord writes in's coordinate-wise median (kind PS_AGG_MEDIAN)
// or trimmed mean (PS_AGG_TRIMMED, trim B) into out (n floats). The
// median of an even count is the mean of the two middle values computed
// as lo + (hi - lo) / 2 in float; the trimmed mean sums the k - 2B middle
// values in ascending order in float and divides by k - 2B. With k <= 2B
// a trimmed mean falls back to the median: returns 1 then, else 0. tmp:
// k * (PS_AGG_BLOCK + 1) floats. k >= 1.
int ps__agg_coord(const struct ps_agg_rule *r, const struct ps_agg_in *in,
    float *out, float *tmp);

// ps__agg_cclip writes one iteration of centered clipping (Karimireddy et
// al. 2021) into out: out[i] = prev[i] + (sum_j d_j[i] * c_j) / k, d_j =
// value_j - prev (float), c_j = min(1, tau / ||d_j||) (the norm over the
// shard's n coordinates, accumulated in double, c_j rounded to float; 1
// when d_j is 0), the sum in float in push order. prev and out do not
// overlap. c: k floats of scratch (left holding the c_j). k >= 1.
void ps__agg_cclip(float tau, const struct ps_agg_in *in, const float *prev,
    float *out, float *c);

// The centered-clipping state of one shard (n floats): prev, the last
// aggregate; with worker momentum (beta > 0) rank r's momentum, ld floats
// at m + r * ld (ld >= n), and init[r], whether it is set (the rank has
// pushed since the shard was made). With beta 0, m and init are NULL.
struct ps_agg_cc {
	float    tau, beta;
	int      rel; // the radius is tau x the round's median distance
	float   *prev;
	float   *m;
	size_t   ld;
	uint8_t *init;
};

// ps__agg_cclip_round runs one round of centered clipping with worker
// momentum over in's k pushes (push j from rank rank[j]) and writes the
// aggregate into out and into cc->prev. With cc->beta 0 it is
// ps__agg_cclip on the pushes (bit for bit). Otherwise each pushing rank's
// momentum first takes its push: m = value (a float division by div[j],
// as ps__agg_value) at the rank's first push, else m[i] = beta * m[i] +
// w * push[i] with w = (1 - beta) / div[j] (in double, rounded to float;
// 1 - beta without div); ranks that did not push keep theirs. Then
// ps__agg_cclip (ps__agg_cclip_rel when cc->rel) clips the k momenta (in
// push order) around prev. c: k floats, mv: k pointers, nn: 2k doubles of
// scratch. k >= 1.
void ps__agg_cclip_round(const struct ps_agg_cc *cc,
    const struct ps_agg_in *in, const uint32_t *rank, float *out, float *c,
    const void **mv, double *nn);

// ps__agg_cc_ld returns the momentum row stride for a shard of n floats:
// n rounded up to 16 floats (64 bytes), so every row keeps the alignment
// of the block's start.
size_t ps__agg_cc_ld(size_t n);

// ps__agg_cclip_rel is ps__agg_cclip with the radius tau x the median of
// the k distances ||d_j|| (in double; for even k the mean of the two
// middle ones): each shard and round gets a radius in its own scale, and
// with fewer than k / 2 attackers the median is an honest push's. A
// distance of 0 keeps factor 1 (a median of 0 clips every other push to
// prev). c: k floats, nn: 2k doubles of scratch (left holding the
// distances, then them sorted).
void ps__agg_cclip_rel(float tau, const struct ps_agg_in *in,
    const float *prev, float *out, float *c, double *nn);

// ps__agg_outliers scores each push against aggregate a (n floats, in the
// same units as the values): score_j = sum_i (value_j[i] - a[i])^2 in
// double, and flags push j (flag[j] = 1, else 0) when score_j > 9 x the
// median score (the mean of the two middle ones for even k) and score_j
// > 0. Needs k >= 3 (fewer: nothing flagged). score: 2k doubles of
// scratch (left holding the scores). Returns how many were flagged.
uint32_t ps__agg_outliers(const struct ps_agg_in *in, const float *a,
    double *score, uint8_t *flag);

// ---- the server's side (robust.c) ------------------------------------------

struct ps_server;
struct srv_shard;
struct Pswire__RankOutliers;

// ps__robust_open parses the server's --aggregate (s->opts.aggregate) and,
// for a rule other than mean, makes s->robust with its scratch sized for
// s->stage_len floats (the largest shard) and s->trainers pushes, and the
// per-rank outlier counts. A robust rule in a job that is not sync is
// refused: logged (naming the option and the mode) and FB_EINVAL, as is
// a bad rule; FB_ENOMEM. Once, from the first map (ps__ranks_alloc). mu
// held.
int ps__robust_open(struct ps_server *s);

// ps__robust_free frees s->robust (NULL: no-op). Server close.
void ps__robust_free(struct ps_server *s);

// ps__robust_shard_alloc gives shard sh its cclip buffers when the rule
// is cclip: sh->prev (the last aggregate, zero at first) and, with worker
// momentum, sh->mom (s->trainers momentum rows of ps__agg_cc_ld(sh->len)
// floats, then s->trainers "set" bytes; all zero): FB_OK or FB_ENOMEM.
// Once, with the shard (store.c frees them with it). mu held.
int ps__robust_shard_alloc(struct ps_server *s, struct srv_shard *sh);

// ps__robust_round aggregates sh's round (the ranks in PS_SLOT_PUSHED, k
// >= 1 of them) by s->robust's rule into s->sum, scores the pushes (k >=
// 3) and counts outliers per rank and version, and calls the audit hook
// (ps__audit_round) with the flags. Returns the samples the optimizer
// divides s->sum by. No allocation. mu held.
uint64_t ps__robust_round(struct ps_server *s, struct srv_shard *sh);

// ps__robust_active reports whether the job's rule is not mean (sync
// rounds go through ps__robust_round). mu held.
int ps__robust_active(const struct ps_server *s);

// ps__robust_mean_round counts a round closed by the mean (metrics). mu
// held.
void ps__robust_mean_round(struct ps_server *s);

// ps__robust_outliers copies this server's per-rank outlier counts for
// the ranks scored at least once into s->robust's heartbeat array and
// points *out at it: returns how many. Only the heartbeat thread calls it
// (and reads the array after), under mu; 0 and NULL without a robust
// rule.
size_t ps__robust_outliers(struct ps_server *s,
    struct Pswire__RankOutliers           ***out);

// ps__robust_totals reads the rule's name and the server's totals: sync
// rounds aggregated, pushes flagged as outliers (a shard's each), trimmed
// rounds that had too few pushes and took the median. mu held.
void ps__robust_totals(const struct ps_server *s, const char **rule,
    uint64_t *rounds, uint64_t *outliers, uint64_t *fallbacks);

// ps__robust_stats writes the "# Aggregate" stats section (aggregate,
// aggregate_rounds, push_outliers, aggregate_fallbacks) into buf (n
// bytes); server_obs.c. mu held.
void ps__robust_stats(const struct ps_server *s, char *buf, size_t n);

#endif // PS_ROBUST_H
