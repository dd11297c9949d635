// step.c — the training step: the plain loop's step (gradient, push-pull)
// and the step end that both loops take, the plain one here and the
// overlapped one in overlap.c: a rollback or a dropped push answered by a
// pull, the new weights handed to the backend, the step counted and a
// progress line when one is due. One step end, so that both loops resume,
// count and report alike. train.c's DESIGN says what a step is. The plain
// step claims its data step (spot checks) and, with --attack (benchmarks
// and tests only), falsifies its gradient as attack.h says.
#include "step.h"

#include <string.h>

#include "tr_impl.h"

#define MOD "train"

int
tr__run_lockstep(const struct tr_config *cfg)
{
	return cfg->fo.mode == TR_MODE_SYNC ||
	    (cfg->fo.mode == TR_MODE_SSP && cfg->fo.staleness == 0);
}

void
tr__scale_for_members(struct tr__run *r, struct tr_params *g)
{
	uint32_t n = r->cfg->lr_scale_trainers;
	if (n == 0) {
		return;
	}
	int   m = ferry_client_members(r->fc);
	float f = (float) ((double) (m > 0 ? m : 1) / (double) n);
	if (f == 1.0f) {
		return;
	}
	for (size_t k = 0; k < g->n_tensors; k++) {
		for (size_t i = 0; i < g->len[k]; i++) {
			g->t[k][i] *= f; // tensors are aligned apart in data
		}
	}
}

int
tr__run_failed(struct tr__run *r, const char *op, int fe)
{
	const char *msg = r->fc ? ferry_client_last_error(r->fc) : "";
	FB_LOG(FB_LOG_ERR, MOD, "%s: %s%s%s%s%s", op, ferry_strerror(fe),
	    *msg ? ": " : "", msg, r->sink_err && *r->sink_err ? ": " : "",
	    r->sink_err ? r->sink_err : "");
	return FB_EREMOTE;
}

int
tr__run_set_weights(struct tr__run *r, const struct tr_params *w)
{
	if (r->dev_pull != NULL) {
		return FB_OK;
	}
	return tr_backend_set_weights(r->be, tr_params_cptrs(w));
}

// Here rather than with train.c's set-up: a rollback opens it afresh.
int
tr__run_open_device_push(struct tr__run *r)
{
	const struct ferry_shard *sh;
	size_t                    ns;
	uint32_t                  cid, bucket;
	int                       rv;

	// --clip-norm scales the gradient before it is encoded, which
	// libferry does on the host path only; codec "auto" picks a codec
	// per link there too; --overlap double-buffers the host weights and
	// gradients; --lr-scale-trainers scales the host gradient.
	// Local steps push pseudo-gradients from the host (local.c), and
	// --attack falsifies the host gradient.
	if (r->dev == NULL || r->cfg->fo.clip_norm > 0 || r->cfg->overlap ||
	    tr__attack_on(&r->atk) || r->cfg->lr_scale_trainers != 0 ||
	    r->cfg->local_steps > 0 ||
	    strcmp(r->cfg->fo.codec_push, "auto") == 0 ||
	    ferry_client_shards(r->fc, &sh, &ns, &cid, &bucket) != FERRY_OK ||
	    !r->dev->push_supported(cid)) {
		return FB_OK; // the host path
	}
	if ((rv = r->dev->push_open(r->be, sh, ns, cid, bucket, r->tensor_base,
	         &r->dev_push, r->err, sizeof(r->err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "device push: %s", r->err);
		return rv;
	}
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "gradients are quantized on the device (%zu shards)", ns);
	return FB_OK;
}

int
tr__run_report(struct tr__run *r)
{
	struct ferry_stats st;
	double             loss, acc;
	int                rv;

	if (r->rank == 0) {
		uint64_t t = fb_clock_ns();
		rv         = tr_backend_evaluate(r->be, &r->test, &loss, &acc);
		if (rv != FB_OK) {
			FB_LOG(FB_LOG_ERR, MOD, "evaluate: %s",
			    fb_strerror(rv));
			return rv;
		}
		tr__report_test(&r->rep, loss, acc, fb_clock_ns() - t);
	}
	ferry_client_stats(r->fc, &st);
	tr__report_progress(&r->rep, st.bytes_pushed, ferry_client_lr(r->fc));
	return FB_OK;
}

// next_step returns the job step reached after a step: the version now
// held in sync mode (one more, or more after a round finished without this
// trainer), one more in async mode.
static uint64_t
next_step(const struct tr__run *r)
{
	struct ferry_stats st;
	if (!tr__run_lockstep(r->cfg)) {
		return r->rep.step + 1;
	}
	ferry_client_stats(r->fc, &st);
	return st.version;
}

// rolled_back takes the job's rollback (a server restarted from its
// snapshot; FERRY_EROLLBACK): it pulls the rollback version in full into
// w and, in sync mode, moves the job step back to it, so that the next
// steps redo that version's minibatches and the job still ends at its
// last step. An async trainer keeps counting its own steps (versions name
// no position of one rank). The step that got the rollback is not
// counted. libferry dropped its own residuals.
static int
rolled_back(struct tr__run *r, struct tr_params *w)
{
	struct ferry_stats st;
	int                fe;

	FB_LOG(FB_LOG_WARN, MOD, "rank %d: %s", r->rank,
	    ferry_client_last_error(r->fc));
	// A second rollback during the pull: pull again (bounded).
	for (int k = 0; k < 4; k++) {
		if ((fe = ferry_client_pull(r->fc, w->t)) != FERRY_EROLLBACK) {
			break;
		}
	}
	if (fe != FERRY_OK) {
		return tr__run_failed(r, "pull after a rollback", fe);
	}
	ferry_client_stats(r->fc, &st);
	if (tr__run_lockstep(r->cfg)) {
		r->rep.step = st.version;
	}
	if (r->dev_push != NULL) {
		// The device encoder's error-feedback residuals belong to the
		// undone steps too: start it afresh, as libferry's own.
		r->dev->push_close(r->dev_push);
		r->dev_push = NULL;
		int rv      = tr__run_open_device_push(r);
		if (rv != FB_OK) {
			return rv;
		}
	}
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "rank %d resumes at version %llu (step %llu)", r->rank,
	    (unsigned long long) st.version, (unsigned long long) r->rep.step);
	return tr__run_set_weights(r, w);
}

// log_recovery says when libferry rode out a fault during this step
// (ferry.h, struct ferry_recovery): shards left out of the push because
// they had closed its round already (after a rejoin, the round the dead
// process's last push reached only in part), shards offered to a
// re-seed after a server's loss.
static void
log_recovery(struct tr__run *r)
{
	struct ferry_recovery n, *o = &r->recovery;
	ferry_client_recovery(r->fc, &n);
	if (n.pushes_skipped != o->pushes_skipped) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "step %llu: %llu shard(s) had already closed this "
		    "round; pushed to the others, pulled those",
		    (unsigned long long) r->rep.step,
		    (unsigned long long) (n.pushes_skipped -
		        o->pushes_skipped));
	}
	if (n.seeds_offered != o->seeds_offered ||
	    n.seeds_unheld != o->seeds_unheld) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "step %llu: offered %llu shard(s) to a re-seed after a "
		    "server's loss (%llu not held here)",
		    (unsigned long long) r->rep.step,
		    (unsigned long long) (n.seeds_offered - o->seeds_offered),
		    (unsigned long long) (n.seeds_unheld - o->seeds_unheld));
	}
	*o = n;
}

int
tr__step_end(struct tr__run *r, int fe, struct tr_params *w, long e,
    double loss, const struct tr__step_times *t)
{
	const struct tr_config *cfg = r->cfg;
	int                     rv;

	tr__report_step_time(&r->rep, t->start_ns, t->xchg_ns);
	if (fe == FERRY_EROLLBACK) {
		if ((rv = rolled_back(r, w)) != FB_OK) {
			return rv;
		}
	} else {
		if (fe == FERRY_EBEHIND) {
			// Rejoined while a round finished without us, or a
			// --sync-quorum closed the round first (the push is
			// dropped): take the job's weights and go on.
			r->rep.dropped++;
			FB_LOG(FB_LOG_NOTICE, MOD,
			    "behind the job: %s; pulling",
			    ferry_client_last_error(r->fc));
			fe = ferry_client_pull(r->fc, w->t);
		}
		if (fe != FERRY_OK) {
			return tr__run_failed(r, "push_pull", fe);
		}
		log_recovery(r);
		if ((rv = tr__run_set_weights(r, w)) != FB_OK) {
			return rv;
		}
		uint64_t end = t->end_ns != 0 ? t->end_ns : fb_clock_ns();
		size_t   n   = r->step_n != 0 ? r->step_n : cfg->batch;
		if (end - t->xchg_ns > r->xchg_max_ns) {
			r->xchg_max_ns = end - t->xchg_ns;
		}
		tr__report_step(&r->rep, next_step(r), n, loss,
		    end - t->since_ns);
		tr__metrics_step(&r->met, r->fc, n, t->xchg_ns - t->start_ns,
		    end - t->xchg_ns, r->rep.dropped);
	}
	int due = cfg->log_interval > 0 &&
	    r->rep.step % (uint64_t) cfg->log_interval == 0;
	int epoch_end = r->rep.step / r->steps_per_epoch > (uint64_t) e;
	if ((due || epoch_end) && r->rep.last_report != r->rep.step) {
		return tr__run_report(r);
	}
	return FB_OK;
}

// step_failed logs a local failure of the current step.
static int
step_failed(struct tr__run *r, int rv)
{
	FB_LOG(FB_LOG_ERR, MOD, "step %llu: %s",
	    (unsigned long long) r->rep.step, fb_strerror(rv));
	return rv;
}

// straggle sleeps --slow-ms in a step (benchmarks: a slow trainer); its
// time counts as compute in --step-times.
static void
straggle(const struct tr_config *cfg)
{
	if (cfg->slow_ms > 0) {
		fb_sleep_us((uint64_t) cfg->slow_ms * 1000u);
	}
}

// layer_push is the backend's per-layer hook with --overlap-layers 1: it
// starts the push-pull of layer l's weight and bias while backward goes
// on to the layers before.
static int
layer_push(void *arg, int layer)
{
	struct tr__run *r = arg;
	r->layer_fe       = ferry_client_push_pull_start(r->fc,
	          tr_params_cptrs(&r->g), (uint32_t) r->cfg->batch, r->w.t,
	          2 * (size_t) layer, 2);
	return r->layer_fe == FERRY_OK ? FB_OK : FB_EREMOTE;
}

// grad_layered computes the gradient with --overlap-layers 1: each
// layer's push-pull starts as soon as backward made it (layer_push); then
// it waits for the layers in the order the next forward reads them.
// Returns an fb_ error of the backend in *rv, else libferry's result.
static int
grad_layered(struct tr__run *r, const uint32_t *idx, double *loss, int *rv,
    uint64_t *tx)
{
	int fe      = FERRY_OK;
	r->layer_fe = FERRY_OK;
	*tx         = fb_clock_ns();
	if ((*rv = tr_backend_set_layer_hook(r->be, layer_push, r)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--overlap-layers 1 needs a backend with a layer hook "
		    "(the cpu backend): %s",
		    fb_strerror(*rv));
		return FERRY_OK;
	}
	*rv = tr_backend_grad(r->be, &r->train, idx, r->cfg->batch, r->g.t,
	    loss);
	if (*rv != FB_OK && r->layer_fe != FERRY_OK) {
		*rv = FB_OK; // libferry's failure, handled as the exchange's
		return r->layer_fe;
	}
	if (*rv != FB_OK) {
		return FERRY_OK;
	}
	straggle(r->cfg);
	*tx = fb_clock_ns();
	for (size_t l = 0; fe == FERRY_OK && 2 * l < r->w.n_tensors; l++) {
		fe = ferry_client_wait(r->fc, 2 * l, 2);
	}
	return fe;
}

int
tr__run_open_attack(struct tr__run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct tr__attack_spec  sp;
	int                     rv;

	if ((rv = tr__attack_parse(cfg->attack != NULL ? cfg->attack : "none",
	         &sp, r->err, sizeof(r->err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "%s", r->err);
		return rv;
	}
	if (sp.kind == TR__ATTACK_NONE) {
		return FB_OK;
	}
	if (r->leased) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--attack %s falsifies the plain loop's steps: this job "
		    "is elastic and gives data leases; run with --leases off",
		    cfg->attack);
		return FB_EINVAL;
	}
	if ((rv = tr__attack_init(&r->atk, &sp, cfg->attack_rate, cfg->fo.seed,
	         r->rank, cfg->batch, &r->g, &r->train, r->err,
	         sizeof(r->err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "%s", r->err);
		return rv;
	}
	FB_LOG(FB_LOG_WARN, MOD,
	    "rank %d ATTACKS (benchmarks and tests only): --attack %s, "
	    "falsifying %.3g of its pushes",
	    r->rank, cfg->attack, cfg->attack_rate);
	return FB_OK;
}

// grad computes the plain host path's gradient of minibatch k of epoch e
// (indices idx) into r->g: honest, or as --attack falsifies it at the
// job step `step` (label-flip's labels, alie's further batches, then the
// transform). Returns an fb_ code.
static int
grad(struct tr__run *r, long e, size_t k, uint64_t step, const uint32_t *idx,
    double *loss)
{
	const struct tr_config *cfg  = r->cfg;
	int                     bad  = tr__attack_falsify(&r->atk, step);
	size_t                  more = tr__attack_more(&r->atk, bad);
	int                     rv;

	if ((rv = tr_backend_grad(r->be,
	         tr__attack_data(&r->atk, &r->train, bad), idx, cfg->batch,
	         r->g.t, loss)) != FB_OK) {
		return rv;
	}
	// alie's estimate: the next batches of the same epoch (wrapping),
	// whose indices leave idx valid (same epoch: no reshuffle).
	for (size_t j = 1; j <= more; j++) {
		const uint32_t *ix;
		double          l;
		if ((rv = tr_partition_batch(&r->part, e,
		         (k + j) % r->steps_per_epoch, cfg->batch, &ix)) !=
		        FB_OK ||
		    (rv = tr_backend_grad(r->be, &r->train, ix, cfg->batch,
		         r->atk.more[j - 1].t, &l)) != FB_OK) {
			return rv;
		}
	}
	tr__attack_apply(&r->atk, step, bad, &r->g);
	return FB_OK;
}

int
tr__step(struct tr__run *r, long e, size_t k)
{
	const struct tr_config *cfg = r->cfg;
	const uint32_t         *idx;
	double                  loss;
	uint64_t                ts = fb_clock_ns(), tx;
	int                     rv, fe;

	if ((rv = tr_partition_batch(&r->part, e, k, cfg->batch, &idx)) !=
	    FB_OK) {
		return step_failed(r, rv);
	}
	// What the pushes below were computed from (spot checks): the job
	// step, whose minibatch a verifier draws again (attacks claim it too).
	uint64_t step = (uint64_t) e * r->steps_per_epoch + k;
	ferry_client_data_step(r->fc, step);
	if (r->dev_push != NULL && !ferry_client_in_warmup(r->fc)) {
		// Gradient and encoding on the device: only codes cross.
		const uint8_t *const *codes;
		if ((rv = r->dev->push_grad(r->dev_push, &r->train, idx,
		         cfg->batch, &codes, &loss)) != FB_OK) {
			return step_failed(r, rv);
		}
		straggle(cfg);
		tx = fb_clock_ns();
		fe = ferry_client_push_pull_encoded(r->fc, codes,
		    (uint32_t) cfg->batch, r->w.t);
	} else if (cfg->overlap_layers) {
		fe = grad_layered(r, idx, &loss, &rv, &tx);
		if (rv != FB_OK) {
			return step_failed(r, rv);
		}
	} else {
		if ((rv = grad(r, e, k, step, idx, &loss)) != FB_OK) {
			return step_failed(r, rv);
		}
		straggle(cfg);
		tr__scale_for_members(r, &r->g);
		tx = fb_clock_ns();
		fe = ferry_client_push_pull(r->fc, tr_params_cptrs(&r->g),
		    (uint32_t) cfg->batch, r->w.t);
	}
	const struct tr__step_times t = { .since_ns = ts,
		.start_ns                           = ts,
		.xchg_ns                            = tx,
		.end_ns                             = 0 };
	return tr__step_end(r, fe, &r->w, e, loss, &t);
}
