// jobconf.c — reading a job's optimizer and lr schedule out of its
// JobConfig, shared by the scheduler (which checks a job before it runs
// it) and every server (which sets up the update from the first map), so
// that both read the same fields the same way; and the job as a server
// runs it (ps__job_read), so that a job option a server uses is read here
// and used where it matters, with no copy in between; and the check of the
// tensors' kinds both refuse an unknown one with.
#include <stdio.h>
#include <string.h>

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

int
ps__job_kinds(const Pswire__JobConfig *job, char *why, size_t n)
{
	for (size_t i = 0; i < job->n_tensors; i++) {
		const Pswire__TensorDesc *t = job->tensors[i];
		if (t->kind != PSWIRE__TENSOR_KIND__TENSOR_WEIGHTS &&
		    t->kind != PSWIRE__TENSOR_KIND__TENSOR_AVERAGE) {
			snprintf(why, n,
			    "tensor %zu ('%.127s'): unknown kind %d (0: "
			    "weights, 1: average)",
			    i, t->name, (int) t->kind);
			return FB_EINVAL;
		}
	}
	return FB_OK;
}

int
ps__job_read(const Pswire__JobConfig *job, struct ps_job *j, char *why,
    size_t n)
{
	char owhy[128], kwhy[224];
	memset(j, 0, sizeof(*j));
	j->ssp       = job->mode == PSWIRE__MODE__MODE_SSP;
	j->staleness = job->staleness;
	j->quorum    = job->sync_quorum;
	j->mode      = job->mode == PSWIRE__MODE__MODE_SSP
	         ? (job->staleness == 0 ? PSWIRE__MODE__MODE_SYNC
	                                : PSWIRE__MODE__MODE_ASYNC)
	         : job->mode;
	j->lr        = job->lr;
	j->warmup    = job->warmup_steps;
	if (ps__job_optim(job, &j->optim, &j->lr_sched, owhy, sizeof(owhy)) !=
	    FB_OK) {
		snprintf(why, n, "the job's optimizer: %s", owhy);
		return FB_EINVAL;
	}
	j->optim_bufs = fb_optim_state_bufs(j->optim.kind);
	if (ps__job_kinds(job, kwhy, sizeof(kwhy)) != FB_OK) {
		snprintf(why, n, "the job's table: %s", kwhy);
		return FB_EINVAL;
	}
	// The scheduler validated the codecs; a server still refuses a job
	// it cannot serve rather than trusting it.
	if (comp_codec_parse(job->codec_push, job->bucket, &j->cpush) !=
	        FB_OK ||
	    comp_codec_parse(job->codec_pull, job->bucket, &j->cpull) !=
	        FB_OK) {
		snprintf(why, n, "the job's codecs: push '%s', pull '%s'",
		    job->codec_push, job->codec_pull);
		return FB_EINVAL;
	}
	j->pull_none = j->cpull.id == COMP_NONE;
	j->push_auto = strcmp(job->codec_push, COMP_AUTO_SPEC) == 0;
	return FB_OK;
}
