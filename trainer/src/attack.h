// attack.h — misbehaving trainers, for benchmarks and tests of robust
// aggregation and spot checks only (issue 31, docs/security.md; private to
// tr). The scheduler refuses a trainer that declares an attack unless the
// job allows attacks (ps-server --allow-attacks 1).
//
// --attack SPEC says what a falsified push carries instead of the honest
// gradient g of its step, a SUM over the step's batch samples (what the
// trainer pushes):
//   none        honest.
//   sign-flip   -g.
//   scale:S     S * g (S any finite number, e.g. -10).
//   noise:SIGMA g + N(0, SIGMA^2 * batch^2) per coordinate: SIGMA is in
//               per-sample units (the push is a sum over batch samples);
//               Box-Muller from the seeded stream of (--seed, rank, step).
//   alie:Z      "a little is enough" (Baruch et al. 2019): per coordinate
//               mu - Z * sigma, where mu and sigma are the mean and the
//               standard deviation (unbiased, over m - 1 as the authors'
//               torch.std) of this trainer's honest gradients on
//               TR__ATTACK_ALIE_M batches: the step's and the next
//               TR__ATTACK_ALIE_M - 1 of its own partition in the same
//               epoch (wrapping). Each is a sum over a batch, so mu and
//               sigma are in the push's sum units. Z >= 0.
//   ipm:EPS     inner-product manipulation (Xie et al. 2020): -EPS * g_hat,
//               where g_hat, the attacker's estimate of the honest mean,
//               is the mean of its honest gradients on alie's
//               TR__ATTACK_ALIE_M batches (in the push's sum units).
//               EPS > 0.
//   label-flip  the gradient computed on the same batch with every label
//               y replaced by classes - 1 - y (9 - y on Fashion-MNIST).
//   lazy:L      the gradient this trainer computed L steps earlier (its
//               L-th last honest one; in the first L steps the oldest it
//               has, the step's own at its first step). 1 <= L <= 1024.
// --attack-rate P falsifies each push with probability P, drawn from a
// stream keyed by (--seed, rank, data step): a run is reproducible and a
// verifier can never tell from the claim which pushes are false. The
// honest pushes in between are the honest gradients (lazy still records
// every step's). A falsified push still claims its data step
// (ferry_client_data_step), so that spot checks catch it.
//
// Everything is allocated by tr__attack_init (the lazy ring, alie's other
// batches, label-flip's labels); nothing on the step's path allocates.
#ifndef TR_ATTACK_H
#define TR_ATTACK_H

#include <stddef.h>
#include <stdint.h>

#include "tr/tr.h"

enum tr__attack_kind {
	TR__ATTACK_NONE,
	TR__ATTACK_SIGN_FLIP,
	TR__ATTACK_SCALE,
	TR__ATTACK_NOISE,
	TR__ATTACK_ALIE,
	TR__ATTACK_IPM,
	TR__ATTACK_LABEL_FLIP,
	TR__ATTACK_LAZY,
};

// alie's batches per estimate (the step's and the next m - 1)
#define TR__ATTACK_ALIE_M 4
// lazy:L's largest L (L gradient copies are held)
#define TR__ATTACK_LAZY_MAX 1024

// The streams keyed by (seed, rank, step) (tr__attack_rng): the rate's
// draw and noise's normals are independent.
enum tr__attack_stream {
	TR__ATTACK_STREAM_RATE  = 1,
	TR__ATTACK_STREAM_NOISE = 2,
};

// A parsed --attack: the kind and its parameter (S, SIGMA, Z, EPS; lazy's
// L in lag).
struct tr__attack_spec {
	enum tr__attack_kind kind;
	double               param;
	uint32_t             lag;
};

// One run's attack state (struct tr__run's atk). Zeroed: honest.
struct tr__attack {
	struct tr__attack_spec spec;
	double                 rate;  // --attack-rate
	uint64_t               seed;  // --seed
	int                    rank;  // this trainer's rank
	size_t                 batch; // samples per push (noise's scale)
	// lazy: the last honest gradients, ring_n of spec.lag held, the
	// oldest at ring_head once the ring is full
	struct tr_params      *ring;
	uint32_t               ring_n, ring_head;
	// alie: the honest gradients of the next TR__ATTACK_ALIE_M - 1
	// batches, which the step computes into these (tr__attack_apply
	// reads them with the step's own)
	struct tr_params       more[TR__ATTACK_ALIE_M - 1];
	// label-flip: the training set with flipped labels (x borrowed from
	// the honest set, y owned here)
	struct tr_dataset      flipped;
	uint64_t               attacked; // pushes falsified so far
};

// tr__attack_parse reads an --attack spec into *out (written only on
// success). Errors: FB_EINVAL with err naming what is wrong (an unknown
// attack with the choices, a missing, malformed, non-finite or
// out-of-range parameter, a parameter given to an attack that takes
// none).
int tr__attack_parse(const char *spec, struct tr__attack_spec *out, char *err,
    size_t errlen);

// tr__attack_init prepares a for spec: falsifying with probability rate,
// keyed by seed and rank, pushes of `batch` samples of gradients shaped
// as g; train is the training set (label-flip copies its labels, x stays
// borrowed: train must outlive a). Errors: FB_ENOMEM (err says what),
// FB_EINVAL (a bad spec). Release with tr__attack_fini either way.
int tr__attack_init(struct tr__attack *a, const struct tr__attack_spec *spec,
    double rate, uint64_t seed, int rank, size_t batch,
    const struct tr_params *g, const struct tr_dataset *train, char *err,
    size_t errlen);

// tr__attack_fini releases what tr__attack_init made; safe on zeroed a.
void tr__attack_fini(struct tr__attack *a);

// tr__attack_on reports whether a misbehaves at all (not none).
int tr__attack_on(const struct tr__attack *a);

// tr__attack_rng seeds *g with the stream `stream` of (seed, rank, step):
// the same triple gives the same stream on every platform.
void tr__attack_rng(struct tr_rng *g, uint64_t seed, int rank, uint64_t step,
    enum tr__attack_stream stream);

// tr__attack_falsify reports whether the push of data step `step` is
// falsified: never for none, else with probability a->rate, from the
// stream of (seed, rank, step) alone.
int tr__attack_falsify(const struct tr__attack *a, uint64_t step);

// tr__attack_data returns the data set a step's gradient is computed on:
// the flipped one for a falsified label-flip step, else honest.
const struct tr_dataset *tr__attack_data(const struct tr__attack *a,
    const struct tr_dataset *honest, int falsified);

// tr__attack_more reports how many more batches' gradients a falsified
// step must compute into a->more[] before tr__attack_apply (alie and ipm:
// m - 1; else 0).
size_t tr__attack_more(const struct tr__attack *a, int falsified);

// tr__attack_apply turns g, the step's gradient (honest, or label-flip's),
// into what the push of data step `step` carries: unchanged when not
// falsified (lazy records it all the same), else the attack's transform
// (counted in a->attacked). Does not allocate.
void tr__attack_apply(struct tr__attack *a, uint64_t step, int falsified,
    struct tr_params *g);

#endif // TR_ATTACK_H
