// attack.c — the trainer's attacks on robust aggregation and spot checks,
// for benchmarks and tests only (attack.h defines each): parsing --attack,
// the seeded draw of the falsified pushes, and the transforms of a step's
// gradient, over buffers made at set-up.
#include "attack.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tr_impl.h"

static const struct {
	const char          *name;
	enum tr__attack_kind kind;
	int                  takes; // 1: NAME:VALUE, 0: NAME alone
} kinds[] = {
	{ "none", TR__ATTACK_NONE, 0 },
	{ "sign-flip", TR__ATTACK_SIGN_FLIP, 0 },
	{ "scale", TR__ATTACK_SCALE, 1 },
	{ "noise", TR__ATTACK_NOISE, 1 },
	{ "alie", TR__ATTACK_ALIE, 1 },
	{ "ipm", TR__ATTACK_IPM, 1 },
	{ "label-flip", TR__ATTACK_LABEL_FLIP, 0 },
	{ "lazy", TR__ATTACK_LAZY, 1 },
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))
#define CHOICES                                                               \
	"none, sign-flip, scale:S, noise:SIGMA, alie:Z, ipm:EPS, "            \
	"label-flip, lazy:L"

// check_param checks a parsed parameter against its attack's range.
static int
check_param(const char *name, enum tr__attack_kind kind, double v,
    const char *text, char *err, size_t errlen)
{
	switch (kind) {
	case TR__ATTACK_NOISE:
	case TR__ATTACK_ALIE:
		if (v < 0) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--attack %s:%s: the %s must be >= 0", name, text,
			    kind == TR__ATTACK_NOISE ? "standard deviation"
			                             : "z");
		}
		break;
	case TR__ATTACK_IPM:
		if (v <= 0) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--attack ipm:%s: epsilon must be > 0", text);
		}
		break;
	case TR__ATTACK_LAZY:
		if (v != floor(v) || v < 1 || v > TR__ATTACK_LAZY_MAX) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--attack lazy:%s: L must be a whole number of "
			    "steps, 1..%d",
			    text, TR__ATTACK_LAZY_MAX);
		}
		break;
	default:
		break;
	}
	return FB_OK;
}

int
tr__attack_parse(const char *spec, struct tr__attack_spec *out, char *err,
    size_t errlen)
{
	const char *colon;
	size_t      nlen;

	if (spec == NULL || *spec == '\0') {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--attack: empty; one of " CHOICES);
	}
	colon = strchr(spec, ':');
	nlen  = colon != NULL ? (size_t) (colon - spec) : strlen(spec);
	for (size_t i = 0; i < N_KINDS; i++) {
		if (strlen(kinds[i].name) != nlen ||
		    strncmp(kinds[i].name, spec, nlen) != 0) {
			continue;
		}
		struct tr__attack_spec s = { .kind = kinds[i].kind };
		if (!kinds[i].takes) {
			if (colon != NULL) {
				return tr__errf(FB_EINVAL, err, errlen,
				    "--attack %s: %s takes no parameter", spec,
				    kinds[i].name);
			}
			*out = s;
			return FB_OK;
		}
		const char *text = colon != NULL ? colon + 1 : "";
		char       *end  = NULL;
		if (*text == '\0') {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--attack %s: needs a value (%s:VALUE)", spec,
			    kinds[i].name);
		}
		errno   = 0;
		s.param = strtod(text, &end);
		if (end == text || *end != '\0' || errno == ERANGE ||
		    !isfinite(s.param)) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--attack %s: '%s' is not a finite number", spec,
			    text);
		}
		int rv = check_param(kinds[i].name, s.kind, s.param, text, err,
		    errlen);
		if (rv != FB_OK) {
			return rv;
		}
		s.lag = s.kind == TR__ATTACK_LAZY ? (uint32_t) s.param : 0;
		*out  = s;
		return FB_OK;
	}
	return tr__errf(FB_EINVAL, err, errlen,
	    "--attack %s: unknown attack; one of " CHOICES, spec);
}

int
tr__attack_init(struct tr__attack *a, const struct tr__attack_spec *spec,
    double rate, uint64_t seed, int rank, size_t batch,
    const struct tr_params *g, const struct tr_dataset *train, char *err,
    size_t errlen)
{
	memset(a, 0, sizeof(*a));
	a->spec  = *spec;
	a->rate  = rate;
	a->seed  = seed;
	a->rank  = rank;
	a->batch = batch;
	switch (spec->kind) {
	case TR__ATTACK_LAZY:
		if (spec->lag < 1 || spec->lag > TR__ATTACK_LAZY_MAX) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--attack lazy:%u: L out of 1..%d", spec->lag,
			    TR__ATTACK_LAZY_MAX);
		}
		a->ring = fb_zalloc(spec->lag * sizeof(*a->ring));
		if (a->ring == NULL) {
			return tr__errf(FB_ENOMEM, err, errlen,
			    "--attack lazy: no memory for the ring");
		}
		for (uint32_t k = 0; k < spec->lag; k++) {
			if (tr__params_shaped(&a->ring[k], g) != FB_OK) {
				return tr__errf(FB_ENOMEM, err, errlen,
				    "--attack lazy:%u: no memory for %u "
				    "gradient copies",
				    spec->lag, spec->lag);
			}
		}
		break;
	case TR__ATTACK_ALIE:
	case TR__ATTACK_IPM:
		for (size_t k = 0; k < TR__ATTACK_ALIE_M - 1; k++) {
			if (tr__params_shaped(&a->more[k], g) != FB_OK) {
				return tr__errf(FB_ENOMEM, err, errlen,
				    "--attack alie: no memory for the "
				    "estimate's gradients");
			}
		}
		break;
	case TR__ATTACK_LABEL_FLIP:
		a->flipped   = *train;
		a->flipped.y = fb_alloc(train->n * sizeof(*train->y) + 1);
		if (a->flipped.y == NULL) {
			a->flipped = (struct tr_dataset) { 0 };
			return tr__errf(FB_ENOMEM, err, errlen,
			    "--attack label-flip: no memory for the labels");
		}
		for (size_t i = 0; i < train->n; i++) {
			a->flipped.y[i] = train->classes - 1 - train->y[i];
		}
		break;
	default:
		break;
	}
	return FB_OK;
}

void
tr__attack_fini(struct tr__attack *a)
{
	if (a == NULL) {
		return;
	}
	if (a->ring != NULL) {
		for (uint32_t k = 0; k < a->spec.lag; k++) {
			tr_params_fini(&a->ring[k]);
		}
		fb_free(a->ring);
	}
	for (size_t k = 0; k < TR__ATTACK_ALIE_M - 1; k++) {
		tr_params_fini(&a->more[k]);
	}
	fb_free(a->flipped.y); // x is the honest set's
	memset(a, 0, sizeof(*a));
}

int
tr__attack_on(const struct tr__attack *a)
{
	return a->spec.kind != TR__ATTACK_NONE;
}

void
tr__attack_rng(struct tr_rng *g, uint64_t seed, int rank, uint64_t step,
    enum tr__attack_stream stream)
{
	// Chained splitmix64 rounds: each input is mixed in whole before
	// the next, so nearby triples give unrelated streams.
	tr_rng_seed(g, seed ^ (0x61747461636bull << 8) ^ (uint64_t) stream);
	uint64_t h = tr_rng_next(g);
	tr_rng_seed(g, h ^ (uint64_t) (uint32_t) rank);
	h = tr_rng_next(g);
	tr_rng_seed(g, h ^ step);
}

int
tr__attack_falsify(const struct tr__attack *a, uint64_t step)
{
	struct tr_rng g;
	if (a->spec.kind == TR__ATTACK_NONE || a->rate <= 0) {
		return 0;
	}
	tr__attack_rng(&g, a->seed, a->rank, step, TR__ATTACK_STREAM_RATE);
	// 53 bits: u in [0, 1), so rate 1 falsifies every push.
	double u = (double) (tr_rng_next(&g) >> 11) * 0x1p-53;
	return u < a->rate;
}

const struct tr_dataset *
tr__attack_data(const struct tr__attack *a, const struct tr_dataset *honest,
    int falsified)
{
	return falsified && a->spec.kind == TR__ATTACK_LABEL_FLIP ? &a->flipped
	                                                          : honest;
}

size_t
tr__attack_more(const struct tr__attack *a, int falsified)
{
	return falsified &&
	        (a->spec.kind == TR__ATTACK_ALIE ||
	            a->spec.kind == TR__ATTACK_IPM)
	    ? TR__ATTACK_ALIE_M - 1
	    : 0;
}

// scale multiplies every coordinate of g by f.
static void
scale(struct tr_params *g, float f)
{
	for (size_t t = 0; t < g->n_tensors; t++) {
		for (size_t i = 0; i < g->len[t]; i++) {
			g->t[t][i] *= f;
		}
	}
}

// noise adds N(0, (sigma * batch)^2) to every coordinate, tensor after
// tensor, from the step's noise stream.
static void
noise(const struct tr__attack *a, uint64_t step, struct tr_params *g)
{
	struct tr_rng r;
	double        sd = a->spec.param * (double) a->batch;
	tr__attack_rng(&r, a->seed, a->rank, step, TR__ATTACK_STREAM_NOISE);
	for (size_t t = 0; t < g->n_tensors; t++) {
		for (size_t i = 0; i < g->len[t]; i++) {
			g->t[t][i] += (float) (sd *
			    (double) tr_rng_normal(&r));
		}
	}
}

// alie writes mu - z * sigma per coordinate into g, over g itself and the
// other batches' gradients in a->more (in double; sigma unbiased).
static void
alie(const struct tr__attack *a, struct tr_params *g)
{
	const size_t m = TR__ATTACK_ALIE_M;
	double       z = a->spec.param;
	for (size_t t = 0; t < g->n_tensors; t++) {
		for (size_t i = 0; i < g->len[t]; i++) {
			double v[TR__ATTACK_ALIE_M], mu = 0, var = 0;
			v[0] = g->t[t][i];
			for (size_t k = 1; k < m; k++) {
				v[k] = a->more[k - 1].t[t][i];
			}
			for (size_t k = 0; k < m; k++) {
				mu += v[k];
			}
			mu /= (double) m;
			for (size_t k = 0; k < m; k++) {
				var += (v[k] - mu) * (v[k] - mu);
			}
			var /= (double) (m - 1);
			g->t[t][i] = (float) (mu - z * sqrt(var));
		}
	}
}

// ipm writes -eps * mu per coordinate into g, mu the mean of g and the
// other batches' gradients in a->more (in double, as alie's): the
// attacker's estimate of the honest mean, steadier than its own batch's
// gradient alone (with which ipm would be scale:-EPS).
static void
ipm(const struct tr__attack *a, struct tr_params *g)
{
	const size_t m   = TR__ATTACK_ALIE_M;
	double       eps = a->spec.param;
	for (size_t t = 0; t < g->n_tensors; t++) {
		for (size_t i = 0; i < g->len[t]; i++) {
			double mu = g->t[t][i];
			for (size_t k = 1; k < m; k++) {
				mu += a->more[k - 1].t[t][i];
			}
			g->t[t][i] = (float) (-eps * (mu / (double) m));
		}
	}
}

// lazy records g, the step's honest gradient, in the ring and, when
// falsified, leaves in g the oldest gradient held: the one of L steps
// before once the ring is full (g itself at the very first step).
static void
lazy(struct tr__attack *a, int falsified, struct tr_params *g)
{
	uint32_t L = a->spec.lag;
	if (a->ring_n < L) {
		struct tr_params *slot = &a->ring[a->ring_n];
		for (size_t t = 0; t < g->n_tensors; t++) {
			memcpy(slot->t[t], g->t[t], g->len[t] * sizeof(float));
			if (falsified) {
				memcpy(g->t[t], a->ring[0].t[t],
				    g->len[t] * sizeof(float));
			}
		}
		a->ring_n++;
		return;
	}
	// Full: the oldest slot takes g's place, g takes the oldest's.
	struct tr_params *slot = &a->ring[a->ring_head];
	for (size_t t = 0; t < g->n_tensors; t++) {
		float *o = slot->t[t], *n = g->t[t];
		for (size_t i = 0; i < g->len[t]; i++) {
			float old = o[i];
			o[i]      = n[i];
			if (falsified) {
				n[i] = old;
			}
		}
	}
	a->ring_head = (a->ring_head + 1) % L;
}

void
tr__attack_apply(struct tr__attack *a, uint64_t step, int falsified,
    struct tr_params *g)
{
	if (a->spec.kind == TR__ATTACK_LAZY) {
		lazy(a, falsified, g); // records honest steps too
	}
	if (!falsified || a->spec.kind == TR__ATTACK_NONE) {
		return;
	}
	a->attacked++;
	switch (a->spec.kind) {
	case TR__ATTACK_SIGN_FLIP:
		scale(g, -1.0f);
		break;
	case TR__ATTACK_SCALE:
		scale(g, (float) a->spec.param);
		break;
	case TR__ATTACK_IPM:
		ipm(a, g);
		break;
	case TR__ATTACK_NOISE:
		noise(a, step, g);
		break;
	case TR__ATTACK_ALIE:
		alie(a, g);
		break;
	default:
		break; // label-flip: the gradient was; lazy: done above
	}
}
