// optim.c — the names, checks and learning-rate schedule of a job's
// optimizer (<fb/optim.h>): the one implementation the servers (which
// apply lr(version)) and libferry (which reports it to the trainer) share,
// so the lr a trainer prints is the lr its servers used.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fb/fb.h"
#include "fb/optim.h"

// pi, which strict C11 does not name (M_PI is an XSI extension).
#define OPTIM_PI 3.14159265358979323846

static const char *const optim_names[FB_OPTIM_COUNT] = { "sgd", "momentum",
	"nesterov", "adam", "adamw", "adagrad" };
static const char *const lr_names[FB_LR_COUNT]       = { "constant", "step",
	      "cosine" };

// name_index finds name in names (n entries); NULL or "" is entry 0.
static int
name_index(const char *const *names, int n, const char *name, int *out)
{
	if (name == NULL || *name == '\0') {
		*out = 0;
		return FB_OK;
	}
	for (int i = 0; i < n; i++) {
		if (strcmp(names[i], name) == 0) {
			*out = i;
			return FB_OK;
		}
	}
	return FB_EINVAL;
}

int
fb_optim_parse(const char *name, int *kind)
{
	return name_index(optim_names, FB_OPTIM_COUNT, name, kind);
}

const char *
fb_optim_name(int kind)
{
	return kind >= 0 && kind < FB_OPTIM_COUNT ? optim_names[kind] : "?";
}

uint32_t
fb_optim_state_bufs(int kind)
{
	switch (kind) {
	case FB_OPTIM_MOMENTUM:
	case FB_OPTIM_NESTEROV:
	case FB_OPTIM_ADAGRAD:
		return 1;
	case FB_OPTIM_ADAM:
	case FB_OPTIM_ADAMW:
		return 2;
	default:
		return 0;
	}
}

int
fb_lr_parse(const char *name, int *kind)
{
	return name_index(lr_names, FB_LR_COUNT, name, kind);
}

const char *
fb_lr_name(int kind)
{
	return kind >= 0 && kind < FB_LR_COUNT ? lr_names[kind] : "?";
}

int
fb_optim_check(const struct fb_optim *o, const struct fb_lr_sched *sc,
    char *why, size_t n)
{
	const char *msg = NULL;
	// Written as !(in range) so that a NaN fails every test.
	if (o->kind < 0 || o->kind >= FB_OPTIM_COUNT) {
		msg = "unknown optimizer";
	} else if (!(o->momentum >= 0 && o->momentum < 1)) {
		msg = "momentum must be in [0, 1)";
	} else if (!(o->beta1 >= 0 && o->beta1 < 1)) {
		msg = "beta1 must be in [0, 1)";
	} else if (!(o->beta2 >= 0 && o->beta2 < 1)) {
		msg = "beta2 must be in [0, 1)";
	} else if (!(o->eps > 0 && o->eps <= 1)) {
		msg = "eps must be in (0, 1]";
	} else if (!(o->weight_decay >= 0 && o->weight_decay < 1e3)) {
		msg = "weight decay must be in [0, 1000)";
	} else if (sc->kind < 0 || sc->kind >= FB_LR_COUNT) {
		msg = "unknown lr schedule";
	} else if (!(sc->lr > 0 && sc->lr < 1e6)) {
		msg = "lr must be in (0, 1e6)";
	} else if (sc->kind == FB_LR_STEP && sc->step_every == 0) {
		msg = "the step schedule needs lr-step-every > 0";
	} else if (sc->kind == FB_LR_STEP &&
	    !(sc->gamma > 0 && sc->gamma <= 1)) {
		msg = "lr-gamma must be in (0, 1]";
	} else if (sc->kind == FB_LR_COSINE && sc->total <= sc->warmup) {
		msg = "the cosine schedule needs lr-total-steps > lr-warmup";
	} else if (sc->kind == FB_LR_COSINE &&
	    !(sc->lr_min >= 0 && sc->lr_min <= sc->lr)) {
		msg = "lr-min must be in [0, lr]";
	}
	if (msg != NULL && why != NULL && n > 0) {
		snprintf(why, n, "%s", msg);
	}
	return msg != NULL ? FB_EINVAL : FB_OK;
}

int
fb_optim_finish(const char *optimizer, const char *schedule,
    struct fb_optim *o, struct fb_lr_sched *sc, char *why, size_t n)
{
	if (fb_optim_parse(optimizer, &o->kind) != FB_OK) {
		if (why != NULL && n > 0) {
			snprintf(why, n,
			    "optimizer '%.32s': expected sgd, momentum, "
			    "nesterov, adam, adamw or adagrad",
			    optimizer);
		}
		return FB_EINVAL;
	}
	if (fb_lr_parse(schedule, &sc->kind) != FB_OK) {
		if (why != NULL && n > 0) {
			snprintf(why, n,
			    "lr schedule '%.32s': expected constant, step or "
			    "cosine",
			    schedule);
		}
		return FB_EINVAL;
	}
	return fb_optim_check(o, sc, why, n);
}

double
fb_lr_at(const struct fb_lr_sched *sc, uint64_t t)
{
	uint64_t u;
	if (t < sc->warmup) {
		// Linear ramp to the schedule's first value: the first
		// update already moves (lr / warmup), the warmup-th reaches
		// lr.
		return sc->lr * (double) (t + 1) / (double) sc->warmup;
	}
	u = t - sc->warmup;
	switch (sc->kind) {
	case FB_LR_STEP:
		return sc->lr *
		    pow(sc->gamma,
		        (double) (u / (sc->step_every ? sc->step_every : 1)));
	case FB_LR_COSINE: {
		uint64_t span = sc->total > sc->warmup ? sc->total - sc->warmup
		                                       : 1;
		double   f    = u >= span ? 1.0 : (double) u / (double) span;
		return sc->lr_min +
		    (sc->lr - sc->lr_min) * 0.5 * (1.0 + cos(OPTIM_PI * f));
	}
	default:
		return sc->lr;
	}
}
