// jobconf.c — reading a job's optimizer and lr schedule out of its
// JobConfig, shared by the scheduler (which checks a job before it runs
// it) and every server (which sets up the update from the first map), so
// that both read the same fields the same way; and the job as a server
// runs it (ps__job_read), so that a job option a server uses is read here
// and used where it matters, with no copy in between; and the check of the
// tensors' kinds and init rules both refuse an unknown one with.
#include <stdio.h>
#include <string.h>

#include "fb/fb.h"
#include "fb/init.h"
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
		// Seeded init (<fb/init.h>): the servers fill version 0 by
		// the rule, so a bad kind or scale is refused here, before
		// any server builds a shard from it.
		char iwhy[96];
		if (fb_init_check((uint32_t) t->init, t->init_scale, iwhy,
		        sizeof(iwhy)) != FB_OK) {
			snprintf(why, n, "tensor %zu ('%.127s'): %s", i,
			    t->name, iwhy);
			return FB_EINVAL;
		}
	}
	return FB_OK;
}

int
ps__job_local(const Pswire__JobConfig *job, char *why, size_t n)
{
	if (job->local_steps > 0 &&
	    !(job->inner_lr > 0 && job->inner_lr < 1e6)) {
		snprintf(why, n,
		    "local_steps %u needs inner_lr in (0, 1e6), not %g",
		    job->local_steps, job->inner_lr);
		return FB_EINVAL;
	}
	if (job->local_steps == 0 && job->inner_lr != 0) {
		snprintf(why, n, "inner_lr %g needs local_steps > 0",
		    job->inner_lr);
		return FB_EINVAL;
	}
	if (job->fragments > PS_MAX_FRAGMENTS) {
		snprintf(why, n, "fragments %u over %u", job->fragments,
		    PS_MAX_FRAGMENTS);
		return FB_EINVAL;
	}
	if (job->fragments <= 1) {
		return FB_OK;
	}
	if (job->local_steps == 0) {
		snprintf(why, n, "fragments %u needs local_steps > 0",
		    job->fragments);
		return FB_EINVAL;
	}
	if (job->mode != PSWIRE__MODE__MODE_SYNC) {
		snprintf(why, n,
		    "fragments %u needs sync mode (fragment rounds are sync "
		    "rounds)",
		    job->fragments);
		return FB_EINVAL;
	}
	if (job->local_steps % job->fragments != 0) {
		snprintf(why, n,
		    "fragments %u must divide local_steps %u (each fragment "
		    "is synced once per local_steps, staggered)",
		    job->fragments, job->local_steps);
		return FB_EINVAL;
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
	if (ps__job_local(job, why, n) != FB_OK) {
		return FB_EINVAL;
	}
	j->local_steps = job->local_steps;
	j->fragments   = job->fragments;
	j->inner_lr    = job->inner_lr;
	j->lr_mul      = job->local_steps > 0 ? job->inner_lr : 1.0;
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

// row_codec parses a table's row codec spec ("" is "none") with one scale
// per row: FB_OK, or FB_EINVAL for anything but none/fp16/bf16/q8.
static int
row_codec(const char *spec, uint32_t dim, struct comp_codec *out)
{
	if (*spec == '\0') {
		spec = "none";
	}
	if (comp_codec_parse(spec, dim, out) != FB_OK || out->stochastic ||
	    (out->id != COMP_NONE && out->id != COMP_FP16 &&
	        out->id != COMP_BF16 && out->id != COMP_Q8)) {
		return FB_EINVAL;
	}
	return FB_OK;
}

// dflt returns v, or d when v is 0 (TableDesc's "zero takes the
// default").
static float
dflt(double v, double d)
{
	return (float) (v != 0 ? v : d);
}

int
ps__table_read(const Pswire__JobConfig *job, size_t t, struct ps_table *out,
    char *why, size_t n)
{
	const Pswire__TableDesc *d    = job->tables[t];
	struct tbl_conf         *c    = &out->conf;
	const char              *name = d->name != NULL ? d->name : "";
	const char              *bad;
	static const char *const optims[] = { "sgd", "adagrad", "adam",
		"ftrl" };

	memset(out, 0, sizeof(*out));
	if (*name == '\0' || strlen(name) > 127) {
		snprintf(why, n, "table %zu: name must be 1..127 bytes", t);
		return FB_EINVAL;
	}
	if (d->dim == 0 || d->dim > 4096) {
		snprintf(why, n, "table %zu ('%s'): dim %u not in 1..4096", t,
		    name, d->dim);
		return FB_EINVAL;
	}
	c->optim = (enum tbl_optim) 4;
	for (int k = 0; k < 4; k++) {
		if (strcmp(d->optim, optims[k]) == 0 ||
		    (k == 0 && *d->optim == '\0')) {
			c->optim = (enum tbl_optim) k;
		}
	}
	if ((int) c->optim == 4) {
		snprintf(why, n,
		    "table %zu ('%s'): optim '%.32s' is not sgd, adagrad, "
		    "adam or ftrl",
		    t, name, d->optim);
		return FB_EINVAL;
	}
	if (d->init < 0 || d->init > 2) {
		snprintf(why, n,
		    "table %zu ('%s'): init %d not in 0..2 (zeros, uniform, "
		    "normal)",
		    t, name, (int) d->init);
		return FB_EINVAL;
	}
	if (row_codec(d->codec_push, d->dim, &out->cpush) != FB_OK ||
	    row_codec(d->codec_pull, d->dim, &out->cpull) != FB_OK) {
		snprintf(why, n,
		    "table %zu ('%s'): codec_push '%.32s' / codec_pull "
		    "'%.32s': a row codec is none, fp16, bf16 or q8",
		    t, name, d->codec_push, d->codec_pull);
		return FB_EINVAL;
	}
	if (!(d->admit_prob >= 0 && d->admit_prob <= 1)) {
		snprintf(why, n,
		    "table %zu ('%s'): admit_prob %g not in [0, 1]", t, name,
		    (double) d->admit_prob);
		return FB_EINVAL;
	}
	if (d->shards > PS_TABLE_MAX_SHARDS) {
		snprintf(why, n, "table %zu ('%s'): shards %u over %u", t,
		    name, d->shards, PS_TABLE_MAX_SHARDS);
		return FB_EINVAL;
	}
	if (!(d->lr >= 0 && d->lr < 1e6)) {
		snprintf(why, n, "table %zu ('%s'): lr %g not in [0, 1e6)", t,
		    name, d->lr);
		return FB_EINVAL;
	}
	c->dim          = d->dim;
	c->table        = (uint32_t) t;
	c->seed         = job->seed;
	c->init         = (enum tbl_init) d->init;
	c->init_scale   = d->init_scale;
	c->beta1        = dflt(d->beta1, 0.9);
	c->beta2        = dflt(d->beta2, 0.999);
	c->eps          = dflt(d->eps, 1e-8);
	c->adagrad_init = (float) d->adagrad_init;
	c->ftrl_beta    = dflt(d->ftrl_beta, 1.0);
	c->ftrl_l1      = (float) d->ftrl_l1;
	c->ftrl_l2      = (float) d->ftrl_l2;
	c->admit_count  = d->admit_count;
	c->admit_prob   = d->admit_prob;
	c->evict_after  = d->evict_after;
	if ((bad = tbl_conf_check(c)) != NULL) {
		snprintf(why, n, "table %zu ('%s'): %s", t, name, bad);
		return FB_EINVAL;
	}
	out->lr            = d->lr;
	out->shards        = d->shards;
	out->expected_rows = d->expected_rows != 0 ? d->expected_rows
	                                           : 1000000u;
	return FB_OK;
}

int
ps__job_tables(const Pswire__JobConfig *job, char *why, size_t n)
{
	struct ps_table tb;
	if (job->n_tables > PS_MAX_TABLES) {
		snprintf(why, n, "%zu tables; the cap is %u", job->n_tables,
		    PS_MAX_TABLES);
		return FB_EINVAL;
	}
	for (size_t t = 0; t < job->n_tables; t++) {
		if (ps__table_read(job, t, &tb, why, n) != FB_OK) {
			return FB_EINVAL;
		}
		// Quadratic, but only at declaration, over at most
		// PS_MAX_TABLES tables.
		for (size_t u = 0; u < t; u++) {
			if (strcmp(job->tables[u]->name,
			        job->tables[t]->name) == 0) {
				snprintf(why, n,
				    "table %zu: name '%s' is also table %zu's",
				    t, job->tables[t]->name, u);
				return FB_EINVAL;
			}
		}
	}
	return FB_OK;
}
