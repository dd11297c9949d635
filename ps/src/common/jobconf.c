// jobconf.c — reading a job's optimizer and lr schedule out of its
// JobConfig, shared by the scheduler (which checks a job before it runs
// it) and every server (which sets up the update from the first map), so
// that both read the same fields the same way.
#include <stdio.h>

#include "fb/fb.h"
#include "jobconf.h"

int
ps__job_optim(const Pswire__JobConfig *job, struct fb_optim *o,
    struct fb_lr_sched *sc, char *why, size_t n)
{
	const Pswire__OptimConfig *oc = job->optim;
	const Pswire__LrSchedule  *ls = job->lr_schedule;
	struct fb_optim            ko = FB_OPTIM_INIT;
	struct fb_lr_sched         ks = FB_LR_SCHED_INIT;

	ks.lr = job->lr;
	if (oc != NULL) { // absent: SGD (a job from before optimizers)
		ko.momentum     = oc->momentum;
		ko.beta1        = oc->beta1;
		ko.beta2        = oc->beta2;
		ko.eps          = oc->eps;
		ko.weight_decay = oc->weight_decay;
	}
	if (ls != NULL) { // absent: constant
		ks.warmup     = ls->lr_warmup;
		ks.step_every = ls->step_every;
		ks.gamma      = ls->gamma;
		ks.lr_min     = ls->lr_min;
		ks.total      = ls->total_steps;
	}
	if (!(job->clip_norm >= 0 && job->clip_norm < 1e30)) {
		snprintf(why, n, "clip norm %g not in [0, 1e30)",
		    job->clip_norm);
		return FB_EINVAL;
	}
	if (fb_optim_finish(oc != NULL ? oc->name : NULL,
	        ls != NULL ? ls->kind : NULL, &ko, &ks, why, n) != FB_OK) {
		return FB_EINVAL;
	}
	*o  = ko;
	*sc = ks;
	return FB_OK;
}
