// inner.c — the inner optimizer of local steps (see inner.h): each inner
// step turns the summed gradient G into a direction d in summed units,
// moves the trainer's own weights by (float) (eta_k / B_k) * d and adds
// c_k d to the accumulator A, which the outer round pushes as P = (n/B) A
// (docs/algorithms.md §8).
//
// DESIGN. The arithmetic is the contract's, written so that the common
// case is exact: SGD moves the weights with the server's own float form
// (x -= (float) (lr * (1 / samples)) * g), A takes d unmultiplied when c_k
// is 1 (constant lr, full batches) and is stored, not added, into a zero
// accumulator, and P is A itself when the phase had one full batch: with
// H = 1, an SGD inner and an SGD outer at lr 1 the pushed bytes are the
// plain loop's gradient. The stateful kinds compute in double and store
// floats, as the servers' optimizers do. Tensors are aligned apart in
// their block, so every loop runs tensor by tensor over len[].
#include "inner.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tr_impl.h"

int
tr__inner_opts(const struct ferry_opts *fo, struct fb_optim *o,
    struct fb_lr_sched *sc, char *why, size_t n)
{
	struct fb_optim    ko = FB_OPTIM_INIT;
	struct fb_lr_sched ks = FB_LR_SCHED_INIT;
	ko.momentum           = fo->momentum;
	ko.beta1              = fo->beta1;
	ko.beta2              = fo->beta2;
	ko.eps                = fo->eps;
	ko.weight_decay       = fo->weight_decay;
	ks.lr                 = fo->lr;
	ks.warmup             = fo->lr_warmup;
	ks.step_every         = fo->lr_step_every;
	ks.gamma              = fo->lr_gamma;
	ks.lr_min             = fo->lr_min;
	ks.total              = fo->lr_total_steps;
	if (fb_optim_finish(fo->optimizer, fo->lr_schedule, &ko, &ks, why,
	        n) != FB_OK) {
		return FB_EINVAL;
	}
	if (ko.kind == FB_OPTIM_ADAM || ko.kind == FB_OPTIM_ADAGRAD) {
		return tr__errf(FB_EINVAL, why, n,
		    "--local-steps: the inner --optimizer %s is not one the "
		    "trainer runs (sgd, momentum, nesterov, adamw)",
		    fb_optim_name(ko.kind));
	}
	*o  = ko;
	*sc = ks;
	return FB_OK;
}

int
tr__inner_init(struct tr__inner *in, const struct ferry_opts *fo, size_t batch,
    const struct tr_params *w, char *why, size_t n)
{
	int rv;
	memset(in, 0, sizeof(*in));
	if ((rv = tr__inner_opts(fo, &in->o, &in->sc, why, n)) != FB_OK) {
		return rv;
	}
	in->batch     = (double) batch;
	in->fresh     = 1;
	uint32_t bufs = fb_optim_state_bufs(in->o.kind);
	if ((rv = tr__params_shaped(&in->acc, w)) != FB_OK ||
	    (rv = tr__params_shaped(&in->p, w)) != FB_OK ||
	    (bufs > 0 && (rv = tr__params_shaped(&in->s1, w)) != FB_OK) ||
	    (bufs > 1 && (rv = tr__params_shaped(&in->s2, w)) != FB_OK)) {
		tr__inner_fini(in);
		return tr__errf(rv, why, n, "inner optimizer: %s",
		    fb_strerror(rv));
	}
	return FB_OK;
}

void
tr__inner_fini(struct tr__inner *in)
{
	tr_params_fini(&in->acc);
	tr_params_fini(&in->p);
	tr_params_fini(&in->s1);
	tr_params_fini(&in->s2);
}

// accumulate adds c d into a (stores when fresh; no multiply when c is
// 1, so that A is d bit for bit).
static inline void
accumulate(float *a, float d, float c, int fresh, int unit)
{
	float v = unit ? d : c * d;
	*a      = fresh ? v : *a + v;
}

// step_tensor is one inner step over tensor i (n floats): x the weights,
// g the summed gradient, a the accumulator, s1/s2 the state (NULL where
// the kind keeps none). scale = (float) (eta * (1 / bk)); the rest in
// double, stored as float.
static void
step_tensor(const struct tr__inner *in, float *x, const float *g, float *a,
    float *s1, float *s2, size_t n, double eta, double bk, float c)
{
	const struct fb_optim *o     = &in->o;
	float                  scale = (float) (eta * (1.0 / bk));
	double                 mu = o->momentum, wd = o->weight_decay;
	int                    fresh = in->fresh, unit = c == 1.0f;
	double                 b1 = o->beta1, b2 = o->beta2, eps = o->eps;
	double                 c1 = 1.0 - pow(b1, (double) in->t);
	double                 c2 = 1.0 - pow(b2, (double) in->t);
	float                  d;

	for (size_t j = 0; j < n; j++) {
		switch (o->kind) {
		case FB_OPTIM_MOMENTUM:
		case FB_OPTIM_NESTEROV: {
			double gj = (double) g[j] + wd * bk * (double) x[j];
			double v  = mu * (double) s1[j] + gj;
			s1[j]     = (float) v;
			d         = o->kind == FB_OPTIM_MOMENTUM
			            ? s1[j]
			            : (float) (gj + mu * v);
			break;
		}
		case FB_OPTIM_ADAMW: {
			double gj = (double) g[j] / bk;
			double m  = b1 * (double) s1[j] + (1.0 - b1) * gj;
			double v  = b2 * (double) s2[j] + (1.0 - b2) * gj * gj;
			s1[j]     = (float) m;
			s2[j]     = (float) v;
			d         = (float) (bk *
                            ((m / c1) / (sqrt(v / c2) + eps) +
                                wd * (double) x[j]));
			break;
		}
		default: // sgd: L2 decay on the gradient, if any
			d = wd == 0 ? g[j]
			            : (float) ((double) g[j] +
			                  wd * bk * (double) x[j]);
			break;
		}
		x[j] -= scale * d;
		accumulate(&a[j], d, c, fresh, unit);
	}
}

void
tr__inner_step(struct tr__inner *in, struct tr_params *w,
    const struct tr_params *g, size_t bk, uint64_t k)
{
	double eta = fb_lr_at(&in->sc, k);
	double b   = (double) bk;
	float  c   = (float) ((eta / in->sc.lr) * (in->batch / b));
	in->t++;
	for (size_t i = 0; i < w->n_tensors; i++) {
		step_tensor(in, w->t[i], g->t[i], in->acc.t[i],
		    in->s1.data ? in->s1.t[i] : NULL,
		    in->s2.data ? in->s2.t[i] : NULL, w->len[i], eta, b, c);
	}
	in->fresh = 0;
}

const struct tr_params *
tr__inner_pseudo(struct tr__inner *in, uint64_t n)
{
	if ((double) n == in->batch) {
		return &in->acc;
	}
	float f = (float) ((double) n / in->batch);
	for (size_t i = 0; i < in->acc.n_tensors; i++) {
		const float *a = in->acc.t[i];
		float       *p = in->p.t[i];
		for (size_t j = 0; j < in->acc.len[i]; j++) {
			p[j] = f * a[j];
		}
	}
	return &in->p;
}

void
tr__inner_pseudo_spans(const struct tr__inner *in, uint64_t n,
    const struct ferry_span *spans, size_t ns, struct tr_params *out)
{
	int   unit = (double) n == in->batch;
	float f    = (float) ((double) n / in->batch);
	for (size_t s = 0; s < ns; s++) {
		const float *a = in->acc.t[spans[s].tensor] + spans[s].offset;
		float       *p = out->t[spans[s].tensor] + spans[s].offset;
		for (size_t j = 0; j < spans[s].len; j++) {
			p[j] = unit ? a[j] : f * a[j];
		}
	}
}

void
tr__inner_reset(struct tr__inner *in)
{
	in->fresh = 1;
}

void
tr__inner_reset_spans(struct tr__inner *in, const struct ferry_span *spans,
    size_t ns)
{
	if (in->fresh) {
		return; // all of A is zero already
	}
	for (size_t s = 0; s < ns; s++) {
		memset(in->acc.t[spans[s].tensor] + spans[s].offset, 0,
		    spans[s].len * sizeof(float));
	}
}

int
tr__inner_fragment_due(uint64_t s, uint32_t f, uint32_t h, uint32_t nf)
{
	uint64_t at = ((uint64_t) (f + 1) * h / nf) % h;
	return s % h == at;
}
