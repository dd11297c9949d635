// optim.c — the server-side optimizers: the one function that applies a
// gradient to a shard's weights and its optimizer state (SGD, momentum,
// Nesterov, Adam, AdamW, Adagrad; docs/algorithms.md §5), at the learning
// rate the job's schedule gives for the shard's version (fb_lr_at), times
// the local-steps job's inner lr (ps__optim_lr).
//
// DESIGN.
// - One entry point, ps__optim_apply, used by the sync round (store.c),
//   the async push (push.c) and anything else that must replay an update
//   exactly (a backup applying what its primary applied): the same bytes
//   in give the same bytes out.
// - The state (velocity, Adam's m and v, Adagrad's sum of squares) is
//   sh->opt: fb_optim_state_bufs(kind) buffers of sh->len floats, allocated
//   with the shard (store.c), moved by Transfer and written in snapshots,
//   so a step allocates nothing.
// - Plain SGD keeps its float arithmetic (x -= (float)(lr / samples) * g),
//   bit for bit what servers did before optimizers existed. The others
//   compute each element in double and round the weight and state to
//   float once, so they track the textbook update in double within float
//   rounding (tests/ps/test_optim.c holds them to 1e-6 relative).
// - Adam's bias correction uses t = version + 1: the version counts the
//   updates a shard has had (it moves and snapshots with it), so no extra
//   step counter is kept.
// - Weight decay is L2 on the gradient (g += wd x) except for AdamW, which
//   decays the weights directly (x -= lr wd x), as PyTorch's optimizers.
// - An average shard (its tensor is TENSOR_AVERAGE: BatchNorm running
//   statistics and the like) runs no optimizer: every entry point sets x
//   to the pushed sum over the samples (apply_average), with no lr,
//   schedule or decay, and it has no state (ps__shard_opt_bufs).
// This file is a hot loop: ps/CMakeLists.txt compiles it with -O3.
#include <math.h>
#include <string.h>

#include "server_impl.h"

// grad_at returns the i-th element of the gradient sum: g0 alone, or
// g0 + g1 in float (the rank-order sum of a two-trainer round, fused here
// so that it costs no pass of its own).
static inline float
grad_at(const float *g0, const float *g1, size_t i)
{
	return g1 != NULL ? g0[i] + g1[i] : g0[i];
}

// apply_sgd is plain SGD, with L2 decay when wd > 0.
static void
apply_sgd(struct srv_shard *sh, const float *g0, const float *g1, double lr,
    double inv, double wd, size_t lo, size_t n)
{
	if (wd == 0) {
		float scale = (float) (lr * inv);
		for (size_t i = lo; i < n; i++) {
			sh->x[i] -= scale * grad_at(g0, g1, i);
		}
		return;
	}
	for (size_t i = lo; i < n; i++) {
		double g = (double) grad_at(g0, g1, i) * inv + wd * sh->x[i];
		sh->x[i] = (float) (sh->x[i] - lr * g);
	}
}

// apply_momentum is heavy-ball momentum (nesterov 0) or Nesterov's (1),
// PyTorch's form: v = mu v + g; x -= lr v (or lr (g + mu v)).
static void
apply_momentum(const struct fb_optim *o, struct srv_shard *sh, const float *g0,
    const float *g1, double lr, double inv, int nesterov, size_t lo, size_t n)
{
	float *v  = sh->opt;
	double mu = o->momentum, wd = o->weight_decay;
	for (size_t i = lo; i < n; i++) {
		double g  = (double) grad_at(g0, g1, i) * inv + wd * sh->x[i];
		double vi = mu * v[i] + g;
		v[i]      = (float) vi;
		sh->x[i]  = (float) (sh->x[i] -
                    lr * (nesterov ? g + mu * vi : vi));
	}
}

// apply_adam is Adam with bias correction at step t; decoupled (AdamW)
// decays x by lr wd first, else wd is L2 on the gradient.
static void
apply_adam(const struct fb_optim *o, struct srv_shard *sh, const float *g0,
    const float *g1, double lr, double inv, int decoupled, size_t lo, size_t n)
{
	float   *m = sh->opt, *v = sh->opt + sh->len;
	double   b1 = o->beta1, b2 = o->beta2, eps = o->eps;
	double   wd     = o->weight_decay;
	uint64_t t      = sh->version + 1;
	double   c1     = 1.0 - pow(b1, (double) t);
	double   c2     = sqrt(1.0 - pow(b2, (double) t));
	double   l2     = decoupled ? 0.0 : wd;
	double   shrink = decoupled ? 1.0 - lr * wd : 1.0;
	for (size_t i = lo; i < n; i++) {
		double x  = (double) sh->x[i] * shrink;
		double g  = (double) grad_at(g0, g1, i) * inv + l2 * sh->x[i];
		double mi = b1 * m[i] + (1.0 - b1) * g;
		double vi = b2 * v[i] + (1.0 - b2) * g * g;
		m[i]      = (float) mi;
		v[i]      = (float) vi;
		sh->x[i]  = (float) (x -
                    (lr / c1) * mi / (sqrt(vi) / c2 + eps));
	}
}

// apply_adagrad accumulates squares: G += g^2; x -= lr g / (sqrt(G) + eps).
static void
apply_adagrad(const struct fb_optim *o, struct srv_shard *sh, const float *g0,
    const float *g1, double lr, double inv, size_t lo, size_t n)
{
	float *acc = sh->opt;
	double eps = o->eps, wd = o->weight_decay;
	for (size_t i = lo; i < n; i++) {
		double g  = (double) grad_at(g0, g1, i) * inv + wd * sh->x[i];
		double gi = acc[i] + g * g;
		acc[i]    = (float) gi;
		sh->x[i]  = (float) (sh->x[i] - lr * g / (sqrt(gi) + eps));
	}
}

// apply_average sets x to the mean the pushes carry: their sum (each is
// a trainer's value times its samples) divided by the samples, rounded to
// float once.
static void
apply_average(struct srv_shard *sh, const float *g0, const float *g1,
    double samples, size_t lo, size_t n)
{
	for (size_t i = lo; i < n; i++) {
		sh->x[i] = (float) ((double) grad_at(g0, g1, i) / samples);
	}
}

// apply_range applies the update to elements [lo, hi) of sh: each
// element's arithmetic depends on that element alone, so any split of the
// shard into ranges gives the same bits as one pass.
static void
apply_range(const struct fb_optim *o, struct srv_shard *sh, const float *g0,
    const float *g1, double lr, uint64_t samples, size_t lo, size_t hi)
{
	double inv = 1.0 / (double) samples;
	if (sh->average) {
		apply_average(sh, g0, g1, (double) samples, lo, hi);
		return;
	}
	switch (o->kind) {
	case FB_OPTIM_MOMENTUM:
	case FB_OPTIM_NESTEROV:
		apply_momentum(o, sh, g0, g1, lr, inv,
		    o->kind == FB_OPTIM_NESTEROV, lo, hi);
		break;
	case FB_OPTIM_ADAM:
	case FB_OPTIM_ADAMW:
		apply_adam(o, sh, g0, g1, lr, inv, o->kind == FB_OPTIM_ADAMW,
		    lo, hi);
		break;
	case FB_OPTIM_ADAGRAD:
		apply_adagrad(o, sh, g0, g1, lr, inv, lo, hi);
		break;
	default:
		apply_sgd(sh, g0, g1, lr, inv, o->weight_decay, lo, hi);
		break;
	}
}

double
ps__optim_lr(const struct ps_server *s, uint64_t version)
{
	// A local-steps job's pushes are pseudo-gradients in gradient units
	// (docs/algorithms.md §7): the outer step is the schedule's lr times
	// the inner lr. lr_mul is 1.0 otherwise, and x * 1.0 == x: a job
	// without local steps gets the very bits it got before.
	return fb_lr_at(&s->job.lr_sched, version) * s->job.lr_mul;
}

void
ps__optim_apply(const struct ps_server *s, struct srv_shard *sh,
    const float *g0, const float *g1, uint64_t samples)
{
	double lr = ps__optim_lr(s, sh->version);
	apply_range(&s->job.optim, sh, g0, g1, lr, samples, 0, sh->len);
}

// sgd_checked is apply_sgd without decay, fused with the overflow check
// of the round (ps__update_finite): each weight's old value goes into g0's
// slot as that slot is read, so a refused update is put back from there
// instead of being checked in a pass of its own first. Returns 1 if every
// new weight is finite, else 0 with x as it was; g0 holds the old weights
// either way.
static int
sgd_checked(float *restrict x, float *restrict g0, const float *restrict g1,
    float scale, size_t n)
{
	uint32_t bad = 0;
	if (g1 == NULL) {
		for (size_t i = 0; i < n; i++) {
			float    old = x[i], v = old - scale * g0[i];
			uint32_t u;
			memcpy(&u, &v, 4);
			bad |= (u & 0x7f800000u) == 0x7f800000u;
			g0[i] = old;
			x[i]  = v;
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			float    old = x[i], v = old - scale * (g0[i] + g1[i]);
			uint32_t u;
			memcpy(&u, &v, 4);
			bad |= (u & 0x7f800000u) == 0x7f800000u;
			g0[i] = old;
			x[i]  = v;
		}
	}
	if (bad) {
		memcpy(x, g0, n * sizeof(float));
	}
	return !bad;
}

int
ps__optim_apply_checked(const struct ps_server *s, struct srv_shard *sh,
    float check_scale, float *g0, const float *g1, uint64_t samples)
{
	const struct fb_optim *o  = &s->job.optim;
	double                 lr = ps__optim_lr(s, sh->version);
	// apply_sgd's step, computed as it computes it: when it is the step
	// the check would test, the one fused pass decides and applies alike.
	float                  scale = (float) (lr * (1.0 / (double) samples));
	if (sh->average || o->kind != FB_OPTIM_SGD || o->weight_decay != 0 ||
	    scale != check_scale) {
		return -1;
	}
	return sgd_checked(sh->x, g0, g1, scale, sh->len);
}

// The block ps__optim_apply_crc checksums right after updating it: small
// enough to be read back from L1 (16 KiB), large enough that the CRC's
// per-call set-up does not show.
#define PS_CRC_BLOCK 4096

uint32_t
ps__optim_apply_crc(const struct ps_server *s, struct srv_shard *sh,
    const float *g0, const float *g1, uint64_t samples)
{
	double   lr  = ps__optim_lr(s, sh->version);
	uint32_t crc = 0;
	for (size_t lo = 0; lo < sh->len; lo += PS_CRC_BLOCK) {
		size_t hi = sh->len - lo > PS_CRC_BLOCK ? lo + PS_CRC_BLOCK
		                                        : sh->len;
		apply_range(&s->job.optim, sh, g0, g1, lr, samples, lo, hi);
		crc = fb_crc32(crc, sh->x + lo, (hi - lo) * 4);
	}
	return crc;
}
