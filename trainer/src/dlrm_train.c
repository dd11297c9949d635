// dlrm_train.c — the training loop of `trainer --model dlrm`: the
// DLRM-style CTR model of tr/ctr.h over libferry, its dense tensors on the
// dense shards and one embedding table per categorical field on the
// servers' sparse tables, all of a step in one ferry_client_step.
//
// DESIGN
// Set-up does what can fail locally first: the training file (every rank
// loads it whole and reads its own slices; a CTR file is read once, so
// there is nothing to shuffle or cache), the test file (rank 0, which
// alone evaluates), the model's workspace and buffers. Then the job:
// train.c's client opening, declare the dense tensors (bot*/top*, weights)
// and the tables emb0..emb25 (--emb-dim floats a row, uniform in
// +-(--table-init-scale), the --table-* optimizer, lr and codecs,
// --admit-count), rank 0 offers tr_dlrm_params_randomize(--seed), every
// rank pulls version 0 and its first batch's rows (ferry_client_rows_pull).
//
// The partition (issue 26's contract): with T trainers and batch B, job
// step k of an epoch covers samples [kBT, (k+1)BT) of the file in order,
// rank r taking [kBT + rB, kBT + (r+1)B); floor(n / BT) steps an epoch, a
// later epoch reads the file again. One trainer with batch 2B therefore
// sees the union of two trainers' batches of B, and in sync mode without
// codecs both end with the same weights up to the order of float sums.
//
// A step: tr_dlrm_grad at the weights and rows held (dense gradients and
// one row gradient per key occurrence, summed over the batch), then ONE
// ferry_client_step: the dense push-pull, 26 push blocks borrowing the
// batch's keys (tr_ctr_data's keys are field-major, so a field's batch is
// contiguous) and 26 pull blocks of the NEXT step's keys into the same row
// buffer (its gradients are computed by then), so the next step's rows
// arrive with the new version. Nothing on that path allocates.
//
// Versions are job steps in lockstep (sync) mode as in train.c: a trainer
// that joins a running job starts at the job's version; a rollback or a
// round closed without this trainer (FERRY_EROLLBACK, FERRY_EBEHIND) is
// answered by pulling the job's weights and the rows of the step it is at.
//
// Evaluation (rank 0, every --log-interval steps on the first --eval-rows
// test rows, and at the end on all of them): chunks of EVAL_CHUNK rows,
// their embeddings pulled with ferry_client_rows_pull at the version held,
// tr_dlrm_predict, then the exact AUC (tr_auc) and the log loss over the
// probabilities. Its time is kept out of wall_s and samples/s (report.c).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "step.h"
#include "tr/ctr.h"
#include "tr_impl.h"

#define MOD "train"

// Test rows evaluated per batch of pulled rows (and the model workspace's
// smallest batch).
#define EVAL_CHUNK 4096

// One --model dlrm run. r holds what it shares with the MLP loop (the
// configuration, the client, the report, the metrics); r's data, backend
// and partition stay unused.
struct dlrm_run {
	struct tr__run      r;
	struct tr_dlrm_arch arch;
	struct tr_ctr_data  train, test;
	struct tr_dlrm     *m;
	struct tr_params    w, g;
	size_t              batch;    // --batch
	float              *emb;      // the batch's rows, field-major
	float              *emb_grad; // their gradients, same layout
	float              *eval_emb; // EVAL_CHUNK samples' rows
	float              *prob;     // rank 0: every test sample's
	struct ferry_rows   push[TR_CTR_CAT], pull[TR_CTR_CAT];
	char                names[TR_MAX_TENSORS][32];
	char                tables[TR_CTR_CAT][8];
};

// alloc_floats allocates n zeroed floats into *p (n == 0: none).
static int
alloc_floats(float **p, size_t n)
{
	*p = NULL;
	if (n == 0) {
		return FB_OK;
	}
	if (n > SIZE_MAX / sizeof(float)) {
		return FB_ENOMEM;
	}
	*p = fb_zalloc(n * sizeof(float));
	return *p != NULL ? FB_OK : FB_ENOMEM;
}

// may_evaluate says whether this trainer may be rank 0, the one that
// evaluates: --rank 0, or --rank any (the rank is known only after
// declare, so the test set is loaded in case).
static int
may_evaluate(const struct tr_config *cfg)
{
	return cfg->fo.rank == 0 || cfg->fo.rank == FERRY_RANK_ANY;
}

// open_local loads the data and makes the model, its buffers and the
// report's files: everything that needs no network.
static int
open_local(struct dlrm_run *d, FILE *out)
{
	const struct tr_config *cfg = d->r.cfg;
	size_t                  dim = cfg->emb_dim, max_batch = d->batch, nt;
	int                     rv;

	rv = tr_dlrm_arch_parse(cfg->bottom, cfg->top, cfg->emb_dim,
	    cfg->interaction, &d->arch, d->r.err, sizeof(d->r.err));
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "%s", d->r.err);
		return rv;
	}
	if ((rv = tr_ctr_load(cfg->data_dir, 0, &d->train, d->r.err,
	         sizeof(d->r.err))) != FB_OK ||
	    (may_evaluate(cfg) &&
	        (rv = tr_ctr_load(cfg->test_data, 0, &d->test, d->r.err,
	             sizeof(d->r.err))) != FB_OK)) {
		FB_LOG(FB_LOG_ERR, MOD, "load data: %s", d->r.err);
		return rv;
	}
	if (may_evaluate(cfg) && max_batch < EVAL_CHUNK) {
		max_batch = EVAL_CHUNK;
	}
	if ((rv = tr_dlrm_alloc(&d->arch, max_batch, cfg->blas_threads, &d->m,
	         d->r.err, sizeof(d->r.err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "model: %s", d->r.err);
		return rv;
	}
	nt = TR_CTR_CAT * dim;
	if ((rv = tr_dlrm_params_init(&d->w, &d->arch)) != FB_OK ||
	    (rv = tr_dlrm_params_init(&d->g, &d->arch)) != FB_OK ||
	    (rv = alloc_floats(&d->emb, nt * d->batch)) != FB_OK ||
	    (rv = alloc_floats(&d->emb_grad, nt * d->batch)) != FB_OK ||
	    (may_evaluate(cfg) &&
	        ((rv = alloc_floats(&d->eval_emb, nt * EVAL_CHUNK)) != FB_OK ||
	            (rv = alloc_floats(&d->prob, d->test.n)) != FB_OK))) {
		FB_LOG(FB_LOG_ERR, MOD, "buffers: %s", fb_strerror(rv));
		return rv;
	}
	if ((rv = tr__metrics_open(&d->r.met, cfg, d->w.total)) != FB_OK) {
		return rv;
	}
	return tr__report_open(&d->r.rep, cfg, out);
}

// declare_job opens the client and declares the dense tensors and the
// tables.
static int
declare_job(struct dlrm_run *d)
{
	const struct tr_config  *cfg = d->r.cfg;
	struct ferry_tensor_spec specs[TR_MAX_TENSORS];
	struct ferry_table_spec  tables[TR_CTR_CAT];
	int                      rv, fe;

	if ((rv = tr__run_open_client(&d->r)) != FB_OK) {
		return rv;
	}
	for (size_t i = 0; i < d->w.n_tensors; i++) {
		tr_dlrm_tensor_name(&d->arch, i, d->names[i],
		    sizeof(d->names[i]));
		specs[i] = (struct ferry_tensor_spec) { .name = d->names[i],
			.len                                  = d->w.len[i],
			.kind = FERRY_TENSOR_WEIGHTS };
	}
	for (int f = 0; f < TR_CTR_CAT; f++) {
		snprintf(d->tables[f], sizeof(d->tables[f]), "emb%d", f);
		tables[f] = (struct ferry_table_spec) { .name = d->tables[f],
			.dim                                  = cfg->emb_dim,
			.init        = FERRY_ROW_UNIFORM,
			.init_scale  = (float) cfg->table_init_scale,
			.optimizer   = cfg->table_optimizer,
			.lr          = cfg->table_lr,
			.admit_count = cfg->admit_count,
			.codec_push  = cfg->table_codec_push,
			.codec_pull  = cfg->table_codec_pull };
	}
	fe = ferry_client_declare_tables(d->r.fc, specs, d->w.n_tensors,
	    tables, TR_CTR_CAT);
	if (fe != FERRY_OK) {
		return tr__run_failed(&d->r, "declare", fe);
	}
	d->r.trainers = ferry_client_trainers(d->r.fc);
	tr__run_given_rank(&d->r);
	if (d->r.leased) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--model dlrm does not take data leases yet: run it with "
		    "--leases off in a job of fixed ranks");
		return FB_EINVAL;
	}
	d->r.steps_per_epoch = d->train.n /
	    (d->batch * (size_t) d->r.trainers);
	if (d->r.steps_per_epoch == 0) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--batch %zu: %d trainers need %zu samples a step, the "
		    "file has %zu",
		    d->batch, d->r.trainers, d->batch * (size_t) d->r.trainers,
		    d->train.n);
		return FB_EINVAL;
	}
	d->r.rep.job_batch = (uint64_t) d->batch * (uint64_t) d->r.trainers;
	return FB_OK;
}

// batch_start is the first sample of this rank's batch at job step s.
static size_t
batch_start(const struct dlrm_run *d, uint64_t s)
{
	size_t k = (size_t) (s % d->r.steps_per_epoch);
	return (k * (size_t) d->r.trainers + (size_t) d->r.rank) * d->batch;
}

// blocks points b at the n keys of every field of data from sample s,
// with their rows (pull) or gradients (push), field-major as the model's.
static void
blocks(struct ferry_rows *b, const struct tr_ctr_data *data, size_t s,
    size_t n, size_t dim, float *rows, const float *grads)
{
	for (uint32_t f = 0; f < TR_CTR_CAT; f++) {
		b[f].table = f;
		b[f].keys  = data->keys + (size_t) f * data->n + s;
		b[f].n     = n;
		b[f].rows  = rows != NULL ? rows + (size_t) f * n * dim : NULL;
		b[f].grads = grads != NULL ? grads + (size_t) f * n * dim
		                           : NULL;
	}
}

// pull_rows fetches the rows of this rank's batch at job step s (at the
// version held).
static int
pull_rows(struct dlrm_run *d, uint64_t s)
{
	int fe;
	blocks(d->pull, &d->train, batch_start(d, s), d->batch,
	    d->r.cfg->emb_dim, d->emb, NULL);
	if ((fe = ferry_client_rows_pull(d->r.fc, d->pull, TR_CTR_CAT)) !=
	    FERRY_OK) {
		return tr__run_failed(&d->r, "pull the batch's rows", fe);
	}
	return FB_OK;
}

// start_weights has rank 0 offer the initial weights, pulls the job's
// current version and finds the job step to start at, and pulls that
// step's rows.
static int
start_weights(struct dlrm_run *d)
{
	const struct tr_config *cfg = d->r.cfg;
	struct ferry_stats      st;
	int                     fe;

	if (d->r.rank == 0) {
		tr_dlrm_params_randomize(&d->w, &d->arch, cfg->fo.seed);
		fe = ferry_client_init_weights(d->r.fc,
		    tr_params_cptrs(&d->w));
		if (fe != FERRY_OK) {
			return tr__run_failed(&d->r, "init_weights", fe);
		}
	}
	if ((fe = ferry_client_pull(d->r.fc, d->w.t)) != FERRY_OK) {
		return tr__run_failed(&d->r, "pull the first version", fe);
	}
	ferry_client_stats(d->r.fc, &st);
	d->r.total = tr_job_steps(d->r.steps_per_epoch, cfg->epochs,
	    cfg->max_steps);
	d->r.start = tr__run_lockstep(cfg) ? st.version : 0;
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "rank %d of %d: dlrm, %zu training samples, %zu steps per "
	    "epoch, %llu job steps from %llu, %zu dense parameters",
	    d->r.rank, d->r.trainers, d->train.n, d->r.steps_per_epoch,
	    (unsigned long long) d->r.total, (unsigned long long) d->r.start,
	    d->w.total);
	return d->r.start < d->r.total ? pull_rows(d, d->r.start) : FB_OK;
}

// evaluate computes the AUC and log loss of the weights and rows held
// over the first n test samples (0: all). A set with one class has no
// AUC: NAN, logged.
static int
evaluate(struct dlrm_run *d, size_t n, double *auc, double *logloss)
{
	const float *const *w   = tr_params_cptrs(&d->w);
	size_t              dim = d->r.cfg->emb_dim;
	int                 rv, fe;

	if (n == 0 || n > d->test.n) {
		n = d->test.n;
	}
	for (size_t s = 0, c; s < n; s += c) {
		c = n - s < EVAL_CHUNK ? n - s : EVAL_CHUNK;
		blocks(d->pull, &d->test, s, c, dim, d->eval_emb, NULL);
		fe = ferry_client_rows_pull(d->r.fc, d->pull, TR_CTR_CAT);
		if (fe != FERRY_OK) {
			return tr__run_failed(&d->r, "pull test rows", fe);
		}
		rv = tr_dlrm_predict(d->m, w, d->test.dense + s * TR_CTR_DENSE,
		    d->eval_emb, c, d->prob + s);
		if (rv != FB_OK) {
			FB_LOG(FB_LOG_ERR, MOD, "predict: %s",
			    fb_strerror(rv));
			return rv;
		}
	}
	*logloss = tr_logloss(d->prob, d->test.label, n);
	if ((rv = tr_auc(d->prob, d->test.label, n, auc)) != FB_OK) {
		FB_LOG(FB_LOG_WARN, MOD, "AUC over %zu test samples: %s", n,
		    rv == FB_EINVAL ? "only one class" : fb_strerror(rv));
		*auc = NAN;
		return rv == FB_EINVAL ? FB_OK : rv;
	}
	return FB_OK;
}

// report prints a progress line; rank 0 evaluates on n test samples (0:
// all) first.
static int
report(struct dlrm_run *d, size_t n)
{
	double auc = NAN, logloss = NAN;
	int    rv;
	if (d->r.rank == 0) {
		uint64_t t = fb_clock_ns();
		if ((rv = evaluate(d, n, &auc, &logloss)) != FB_OK) {
			return rv;
		}
		tr__report_ctr_test(&d->r.rep, auc, logloss,
		    fb_clock_ns() - t);
	}
	tr__report_ctr_progress(&d->r.rep);
	return FB_OK;
}

// catch_up answers a step that did not apply (fe: FERRY_EROLLBACK, the
// job rolled back to a snapshot; FERRY_EBEHIND, the round closed without
// this trainer): it pulls the job's weights, moves a lockstep trainer to
// the job's version, and pulls the rows of the step it is at then.
static int
catch_up(struct dlrm_run *d, int fe)
{
	struct tr__report *rep = &d->r.rep;
	struct ferry_stats st;

	FB_LOG(FB_LOG_NOTICE, MOD, "rank %d: %s; pulling the job's weights",
	    d->r.rank, ferry_client_last_error(d->r.fc));
	if (fe == FERRY_EBEHIND) {
		rep->dropped++;
	}
	// A second rollback during the pull: pull again (bounded).
	for (int k = 0; k < 4; k++) {
		if ((fe = ferry_client_pull(d->r.fc, d->w.t)) !=
		    FERRY_EROLLBACK) {
			break;
		}
	}
	if (fe != FERRY_OK) {
		return tr__run_failed(&d->r, "pull the job's weights", fe);
	}
	ferry_client_stats(d->r.fc, &st);
	if (tr__run_lockstep(d->r.cfg)) {
		rep->step = st.version;
	}
	return rep->step < d->r.total ? pull_rows(d, rep->step) : FB_OK;
}

// step runs job step rep.step: gradient, then one exchange of the dense
// tensors and the tables that also fetches the next step's rows.
static int
step(struct dlrm_run *d)
{
	struct tr__report *rep = &d->r.rep;
	uint64_t           at  = rep->step, t0, tx, te, next;
	size_t             s   = batch_start(d, at);
	size_t             dim = d->r.cfg->emb_dim, n_pull = 0;
	struct ferry_stats st;
	double             loss;
	int                rv, fe;

	t0 = fb_clock_ns();
	rv = tr_dlrm_grad(d->m, tr_params_cptrs(&d->w),
	    d->train.dense + s * TR_CTR_DENSE, d->emb, d->train.label + s,
	    d->batch, d->g.t, d->emb_grad, &loss);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "gradient: %s", fb_strerror(rv));
		return rv;
	}
	tx = fb_clock_ns();
	blocks(d->push, &d->train, s, d->batch, dim, NULL, d->emb_grad);
	if (at + 1 < d->r.total) {
		blocks(d->pull, &d->train, batch_start(d, at + 1), d->batch,
		    dim, d->emb, NULL);
		n_pull = TR_CTR_CAT;
	}
	fe = ferry_client_step(d->r.fc, tr_params_cptrs(&d->g),
	    (uint32_t) d->batch, d->w.t, d->push, TR_CTR_CAT, d->pull, n_pull);
	te = fb_clock_ns();
	tr__report_step_time(rep, t0, tx);
	if (fe == FERRY_EROLLBACK || fe == FERRY_EBEHIND) {
		return catch_up(d, fe); // the step is not counted
	}
	if (fe != FERRY_OK) {
		return tr__run_failed(&d->r, "step", fe);
	}
	next = at + 1;
	if (tr__run_lockstep(d->r.cfg)) {
		ferry_client_stats(d->r.fc, &st);
		next = st.version;
	}
	tr__report_step(rep, next, d->batch, loss, te - t0);
	tr__metrics_step(&d->r.met, d->r.fc, d->batch, tx - t0, te - tx,
	    rep->dropped);
	// A round closed without this trainer moved the job further than
	// the rows it pulled.
	if (next != at + 1 && next < d->r.total) {
		return pull_rows(d, next);
	}
	return FB_OK;
}

// train runs job steps from r.start to the job's end or a signal, with a
// progress line (and rank 0's evaluation on --eval-rows test samples)
// every --log-interval steps and at each epoch's end, and a last one
// evaluating on the whole test set.
static int
train(struct dlrm_run *d)
{
	const struct tr_config *cfg  = d->r.cfg;
	struct tr__report      *rep  = &d->r.rep;
	volatile sig_atomic_t  *stop = tr__run_catch_signals();
	uint64_t                spe  = d->r.steps_per_epoch;
	int                     rv;

	tr__report_start(rep, d->r.start);
	while (!*stop && rep->step < d->r.total) {
		if ((rv = step(d)) != FB_OK) {
			return rv;
		}
		if (rep->step < d->r.total && rep->step != rep->last_report &&
		    ((cfg->log_interval > 0 &&
		         rep->step % (uint64_t) cfg->log_interval == 0) ||
		        rep->step % spe == 0) &&
		    (rv = report(d, (size_t) cfg->eval_rows)) != FB_OK) {
			return rv;
		}
	}
	return report(d, 0);
}

// finish prints the summary and writes --weights-out (the dense tensors).
static int
finish(struct dlrm_run *d)
{
	const struct tr_config *cfg = d->r.cfg;
	struct ferry_stats      st;

	ferry_client_stats(d->r.fc, &st);
	tr__report_summary(&d->r.rep, cfg, d->r.trainers, d->r.steps_per_epoch,
	    &st, d->r.fc);
	if (cfg->weights_out == NULL) {
		return FB_OK;
	}
	return tr__report_weights(cfg->weights_out, &d->w);
}

// close_run releases what the set-up made; safe on a partial one.
static void
close_run(struct dlrm_run *d)
{
	tr__metrics_phase(&d->r.met, TR_PHASE_DONE, d->r.fc);
	tr__metrics_close(&d->r.met);
	tr__report_close(&d->r.rep);
	ferry_client_close(d->r.fc);
	tr_dlrm_free(d->m);
	tr_params_fini(&d->w);
	tr_params_fini(&d->g);
	fb_free(d->emb);
	fb_free(d->emb_grad);
	fb_free(d->eval_emb);
	fb_free(d->prob);
	tr_ctr_fini(&d->train);
	tr_ctr_fini(&d->test);
}

int
tr__dlrm_train_run(const struct tr_config *cfg, FILE *out)
{
	struct dlrm_run *d = fb_zalloc(sizeof(*d));
	int              rv;

	if (d == NULL) {
		return FB_ENOMEM;
	}
	d->r.cfg        = cfg;
	d->r.rank       = cfg->fo.rank;
	d->r.t_start_ns = fb_clock_ns();
	d->batch        = cfg->batch;
	if ((rv = open_local(d, out)) == FB_OK &&
	    (rv = declare_job(d)) == FB_OK &&
	    (rv = start_weights(d)) == FB_OK) {
		// The first version is here: the job runs (/readyz turns
		// ready).
		tr__metrics_phase(&d->r.met, TR_PHASE_RUNNING, d->r.fc);
		int trained = (rv = train(d)) == FB_OK;
		if (trained) {
			rv = finish(d);
		}
		tr__run_end(&d->r, rv, trained);
	}
	close_run(d);
	fb_free(d);
	return rv;
}
