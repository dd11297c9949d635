// optim.c — what a row is before and after an update: the table's
// configuration check, each row's initial values (a function of the job's
// seed, the table and the key only) and the row optimizers' update rules
// (docs/algorithms.md §7.2).
//
// Every server runs the same code on the same floats in the same order,
// so a backup or a restarted server computes the same row bit for bit;
// the expressions are written out one operation at a time for that
// reason (and for the tests' hand-computed references).
#include <math.h>

#include "tbl_impl.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL

const char *
tbl_conf_check(const struct tbl_conf *c)
{
	if (c == NULL)
		return "no table configuration";
	if (c->dim < 1 || c->dim > 4096)
		return "dim must be 1..4096";
	if (c->init != TBL_INIT_ZEROS && c->init != TBL_INIT_UNIFORM &&
	    c->init != TBL_INIT_NORMAL)
		return "unknown init";
	if (!isfinite(c->init_scale) || c->init_scale < 0)
		return "init_scale must be finite and >= 0";
	switch (c->optim) {
	case TBL_OPT_SGD:
		break;
	case TBL_OPT_ADAGRAD:
		if (!(c->eps > 0) || !isfinite(c->eps))
			return "eps must be > 0";
		if (!(c->adagrad_init >= 0) || !isfinite(c->adagrad_init))
			return "adagrad_init must be >= 0";
		break;
	case TBL_OPT_ADAM:
		if (!(c->eps > 0) || !isfinite(c->eps))
			return "eps must be > 0";
		if (!(c->beta1 >= 0 && c->beta1 < 1))
			return "beta1 must be in [0, 1)";
		if (!(c->beta2 >= 0 && c->beta2 < 1))
			return "beta2 must be in [0, 1)";
		break;
	case TBL_OPT_FTRL:
		if (!(c->ftrl_beta >= 0) || !isfinite(c->ftrl_beta))
			return "ftrl_beta must be >= 0";
		if (!(c->ftrl_l1 >= 0) || !isfinite(c->ftrl_l1))
			return "ftrl_l1 must be >= 0";
		if (!(c->ftrl_l2 >= 0) || !isfinite(c->ftrl_l2))
			return "ftrl_l2 must be >= 0";
		break;
	default:
		return "unknown optim";
	}
	if (!(c->admit_prob >= 0 && c->admit_prob <= 1))
		return "admit_prob must be in [0, 1]";
	return NULL;
}

size_t
tbl_state_floats(enum tbl_optim optim, uint32_t dim)
{
	switch (optim) {
	case TBL_OPT_ADAGRAD:
		return 1;
	case TBL_OPT_ADAM:
		return 2 * (size_t) dim + 1;
	case TBL_OPT_FTRL:
		return 2 * (size_t) dim;
	default:
		return 0;
	}
}

size_t
tbl_row_bytes(const struct tbl_conf *conf)
{
	return ((size_t) conf->dim +
	           tbl_state_floats(conf->optim, conf->dim)) *
	    4;
}

uint64_t
tbl__row_seed(const struct tbl_conf *conf, uint64_t key)
{
	uint64_t s = tbl_key_hash(conf->seed + GOLDEN * (conf->table + 1));
	return tbl_key_hash(key ^ s);
}

// unit: 24 random bits of h as a float in [0, 1).
static float
unit(uint64_t h)
{
	return (float) (h >> 40) * 0x1p-24f;
}

void
tbl_row_init(const struct tbl_conf *conf, uint64_t key, float *out)
{
	uint32_t dim = conf->dim;
	float    sc  = conf->init_scale;
	if (conf->init == TBL_INIT_ZEROS || sc == 0) {
		memset(out, 0, (size_t) dim * 4);
		return;
	}
	uint64_t base = tbl__row_seed(conf, key);
	if (conf->init == TBL_INIT_UNIFORM) {
		for (uint32_t j = 0; j < dim; j++) {
			float u = unit(tbl_key_hash(base + GOLDEN * (j + 1)));
			out[j]  = (2.0f * u - 1.0f) * sc;
		}
		return;
	}
	// Normal: the sum of 12 uniforms minus 6 (mean 0, variance 1, tails
	// cut at 6), in integers: twelve 16-bit draws b_k, each uniform on
	// (b_k + 1/2) / 2^16, sum to (S + 6) / 2^16, so the value is
	// (S - 393210) / 2^16, exact in a float. No libm call: glibc picks
	// logf/cosf variants by CPU, and rows must match bit for bit on
	// every server.
	for (uint32_t j = 0; j < dim; j++) {
		int32_t sum = 0;
		for (uint32_t k = 0; k < 3; k++) {
			uint64_t h = tbl_key_hash(
			    base + GOLDEN * (3 * j + k + 1));
			for (int q = 0; q < 4; q++, h >>= 16)
				sum += (int32_t) (h & 0xffff);
		}
		out[j] = (float) (sum - 393210) * 0x1p-16f * sc;
	}
}

void
tbl__state_init(const struct tbl *t, float *state)
{
	memset(state, 0, (size_t) t->state * 4);
	if (t->conf.optim == TBL_OPT_ADAGRAD)
		state[0] = t->conf.adagrad_init;
}

static void
adagrad(const struct tbl *t, float *w, float *s, const float *g, float scale,
    float lr)
{
	// The squares summed in 8 lanes (lane j % 8), then the lanes
	// pairwise: a fixed order (the same sum on every server) that the
	// compiler can keep in one vector register.
	uint32_t dim    = t->dim;
	float    acc[8] = { 0 };
	for (uint32_t j = 0; j < dim; j++) {
		float gj = g[j] * scale;
		acc[j & 7] += gj * gj;
	}
	float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
	    ((acc[4] + acc[5]) + (acc[6] + acc[7]));
	float a = s[0] + sum / (float) dim;
	s[0]    = a;
	float k = lr / (sqrtf(a) + t->conf.eps);
	for (uint32_t j = 0; j < dim; j++)
		w[j] -= k * (g[j] * scale);
}

// powi: b^n by squaring, IEEE multiplications only (glibc's powf has
// per-CPU variants; a backup must compute the same bias correction).
static float
powi(float b, uint32_t n)
{
	float r = 1.0f;
	for (; n != 0; n >>= 1, b *= b)
		if (n & 1)
			r *= b;
	return r;
}

static void
adam(const struct tbl *t, float *w, float *s, const float *g, float scale,
    float lr)
{
	uint32_t dim = t->dim;
	float    b1 = t->conf.beta1, b2 = t->conf.beta2, eps = t->conf.eps;
	float   *m = s, *v = s + dim;
	float    step = s[2 * dim] + 1.0f;
	s[2 * dim]    = step;
	// The count as an integer (a state from a bad image: no correction).
	uint32_t n  = step >= 1 && step < 4e9f ? (uint32_t) step : UINT32_MAX;
	float    c1 = 1.0f - powi(b1, n);
	float    c2 = 1.0f - powi(b2, n);
	for (uint32_t j = 0; j < dim; j++) {
		float gj = g[j] * scale;
		m[j]     = b1 * m[j] + (1.0f - b1) * gj;
		v[j]     = b2 * v[j] + (1.0f - b2) * (gj * gj);
		w[j] -= lr * (m[j] / c1) / (sqrtf(v[j] / c2) + eps);
	}
}

static void
ftrl(const struct tbl *t, float *w, float *s, const float *g, float scale,
    float alpha)
{
	uint32_t dim  = t->dim;
	float    beta = t->conf.ftrl_beta, l1 = t->conf.ftrl_l1;
	float    l2 = t->conf.ftrl_l2;
	float   *z = s, *n = s + dim;
	if (!(alpha > 0))
		return; // no step at a zero rate (and no division by it)
	for (uint32_t j = 0; j < dim; j++) {
		float gj    = g[j] * scale;
		float n_new = n[j] + gj * gj;
		float sigma = (sqrtf(n_new) - sqrtf(n[j])) / alpha;
		z[j]        = z[j] + (gj - sigma * w[j]);
		n[j]        = n_new;
		if (fabsf(z[j]) <= l1)
			w[j] = 0.0f;
		else
			w[j] = -(z[j] - copysignf(l1, z[j])) /
			    ((beta + sqrtf(n_new)) / alpha + l2);
	}
}

void
tbl__optim_row(const struct tbl *t, float *w, float *s, const float *g,
    float scale, float lr)
{
	switch (t->conf.optim) {
	case TBL_OPT_ADAGRAD:
		adagrad(t, w, s, g, scale, lr);
		break;
	case TBL_OPT_ADAM:
		adam(t, w, s, g, scale, lr);
		break;
	case TBL_OPT_FTRL:
		ftrl(t, w, s, g, scale, lr);
		break;
	default:
		for (uint32_t j = 0; j < t->dim; j++)
			w[j] -= lr * (g[j] * scale);
		break;
	}
}
