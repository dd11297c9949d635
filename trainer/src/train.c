// train.c — the trainer's loop over libferry (the only network-facing file
// of the trainer library): set-up, one step, evaluation, teardown. What
// the loop prints and writes is report.c's.
//
// DESIGN
// Start-up does everything that can fail locally first (the backend, so a
// CUDA request without a GPU fails at once; then the data), then talks to
// the job: open, declare fc*.weight/fc*.bias, rank 0 offers the initial
// weights (tr_params_randomize with --seed), everybody pulls version 0.
// Each step: next local minibatch (tr_partition_batch), summed gradient at
// the current weights (backend), one push-pull that returns the next
// version into the same weight buffers, then set_weights (a pointer swap on
// the CPU). Nothing on that path allocates.
//
// A backend with an on-device data path (tr_backend_ops.ondevice,
// ondevice.h: the CUDA one) keeps the data on the device where it can:
// gradients are encoded there when it accepts the job's push codec (but
// not during warm-up, which pushes fp32 from the host), and, when it
// accepts the pull codec, pulls go to its libferry pull sink, set before
// version 0: the codes are decoded straight into the backend's device
// weights, which are the shared reference, and no set_weights follows.
// The host weight buffers are stale in that mode and are refreshed only
// for --weights-out (evaluation runs on the device). The loop asks the
// backend's table, never its name.
//
// Every trainer runs tr_partition_steps() steps per epoch, computed from
// the smallest partition, because sync mode waits for every trainer.
// Only rank 0 evaluates on the test set, before each progress line.
//
// Steps are job steps. In sync mode version v means v steps done by every
// rank, so the loop is driven by the version the trainer holds: step v
// runs minibatch v mod steps_per_epoch of epoch v / steps_per_epoch
// (tr_job_position), and the job ends at tr_job_steps(). A trainer that
// (re)joins under its rank pulls the job's current version v first, so it
// resumes at job step v with the minibatch it would have used anyway, and
// ends when the job does; when v is already the last step it exits at
// once. In async mode versions count every rank's pushes, at each rank's
// own pace, so they name no position of one rank: an async trainer starts
// at step 0 and counts its own steps (a restarted one runs a full
// --epochs/--max-steps again; nobody waits for it in async mode). A
// trainer that stops, done or signalled, leaves the job so that the other
// ranks' sync rounds never wait for it. When the job rolls back to a
// snapshot (FERRY_EROLLBACK: a server without replicas restarted), a sync
// trainer pulls that version and moves its step back to it, so the same
// minibatches are redone and the job ends at the same step.
//
// Errors: local failures return their FB_E* code; a failed libferry call
// is logged with libferry's own code name and message and returns
// FB_EREMOTE (no translation of one error space into the other).
#include <ferry/ferry.h>
#include <signal.h>
#include <string.h>

#include "metrics.h"
#include "ondevice.h"
#include "overlap.h"
#include "report.h"
#include "tr_impl.h"

#define MOD "train"

// lockstep reports whether versions are job steps: sync mode, and SSP with
// --staleness 0 (which runs the sync rounds). SSP with K > 0 counts each
// trainer's own steps, as async mode does.
static int
lockstep(const struct tr_config *cfg)
{
	return cfg->mode == TR_MODE_SYNC ||
	    (cfg->mode == TR_MODE_SSP && cfg->staleness == 0);
}

// One training run: what set-up made, what the steps use, what teardown
// releases.
struct run {
	const struct tr_config        *cfg;
	struct tr_backend             *be;
	const struct tr__ondevice_ops *dev; // backend's on-device path or NULL
	ferry_client                  *fc;
	struct tr_dataset              train, test;
	struct tr_params               w, g;
	struct tr_partition            part;
	int                            trainers;
	size_t                         steps_per_epoch;
	uint64_t                       total; // job steps to run
	uint64_t                       start; // job step to start at
	// tensor t starts tensor_base[t] floats into the parameter block
	size_t                         tensor_base[TR_MAX_TENSORS];
	void       *dev_push; // on-device gradient encoder, or NULL
	void       *dev_pull; // on-device pull sink (weights on the device)
	const char *sink_err; // the device pull's reason, or NULL
	struct tr__report  rep;
	struct tr__metrics met;      // the HTTP endpoints (--http-listen)
	char               err[512]; // the reason of a failed set-up call
	int                layer_fe; // --overlap-layers: a start's error
};

// libferry_failed logs a failed libferry call op with libferry's code
// name, its last message and the pull sink's reason, and returns
// FB_EREMOTE: the trainer reports libferry's failures, it does not
// translate them.
static int
libferry_failed(struct run *r, const char *op, int fe)
{
	const char *msg = r->fc ? ferry_client_last_error(r->fc) : "";
	FB_LOG(FB_LOG_ERR, MOD, "%s: %s%s%s%s%s", op, ferry_strerror(fe),
	    *msg ? ": " : "", msg, r->sink_err && *r->sink_err ? ": " : "",
	    r->sink_err ? r->sink_err : "");
	return FB_EREMOTE;
}

// open_local makes everything that needs no network: the backend, the
// data, the weight and gradient buffers and the report's files.
static int
open_local(struct run *r, FILE *out)
{
	const struct tr_config *cfg = r->cfg;
	const struct tr_arch   *a   = &cfg->arch;
	struct tr_backend_opts  bo  = TR_BACKEND_OPTS_INIT;
	int                     rv;

	bo.rank         = cfg->rank;
	bo.blas_threads = cfg->blas_threads;
	bo.max_batch    = cfg->batch;
	rv              = tr_backend_alloc(cfg->device, a, &bo, &r->be, r->err,
	                 sizeof(r->err));
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "backend: %s", r->err);
		return rv;
	}
	r->dev = r->be->ops->ondevice;
	rv     = tr_data_load(cfg->data_dir, (int) a->sizes[a->n_layers],
	        &r->train, &r->test, r->err, sizeof(r->err));
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "load data: %s", r->err);
		return rv;
	}
	if (r->train.dim != a->sizes[0]) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--layers: input width %zu does not match the data's %zu "
		    "pixels per sample",
		    a->sizes[0], r->train.dim);
		return FB_EINVAL;
	}
	if ((rv = tr_params_init(&r->w, a)) != FB_OK ||
	    (rv = tr_params_init(&r->g, a)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "params: %s", fb_strerror(rv));
		return rv;
	}
	// A GPU backend then copies weights and gradients straight between
	// these and the device (no staging copy); not pinned, they stage.
	if (tr_backend_pin(r->be, &r->w) != FB_OK ||
	    tr_backend_pin(r->be, &r->g) != FB_OK) {
		FB_LOG(FB_LOG_INFO, MOD,
		    "weights/gradients not page-locked: copies stage");
	}
	if ((rv = tr__metrics_open(&r->met, cfg, r->w.total)) != FB_OK) {
		return rv;
	}
	return tr__report_open(&r->rep, cfg, out);
}

// ferry_log prints what libferry reports through ferry_opts.log (it
// never prints itself), e.g. a call near its deadline naming the server
// and shards it waits for, as the trainer's own log lines (module
// "ferry").
static void
ferry_log(void *arg, int level, const char *msg)
{
	(void) arg;
	switch (level) {
	case FERRY_LOG_ERR:
		FB_LOG(FB_LOG_ERR, "ferry", "%s", msg);
		break;
	case FERRY_LOG_WARN:
		FB_LOG(FB_LOG_WARN, "ferry", "%s", msg);
		break;
	case FERRY_LOG_NOTICE:
		FB_LOG(FB_LOG_NOTICE, "ferry", "%s", msg);
		break;
	default:
		FB_LOG(FB_LOG_INFO, "ferry", "%s", msg);
		break;
	}
}

// join_job opens the libferry client, declares the tensors and cuts this
// rank's partition of the training set.
static int
join_job(struct run *r)
{
	const struct tr_config  *cfg = r->cfg;
	struct ferry_opts        fo  = FERRY_OPTS_INIT;
	struct ferry_tensor_desc descs[TR_MAX_TENSORS];
	char                     names[TR_MAX_TENSORS][32];
	int                      rv, fe;

	fo.scheduler_url  = cfg->scheduler;
	fo.rank           = cfg->rank;
	fo.timeout_ms     = cfg->timeout_ms;
	fo.mode           = cfg->mode == TR_MODE_SSP ? FERRY_MODE_SSP
	              : cfg->mode == TR_MODE_ASYNC   ? FERRY_MODE_ASYNC
	                                             : FERRY_MODE_SYNC;
	fo.staleness      = cfg->staleness;
	fo.sync_quorum    = cfg->sync_quorum;
	fo.lr             = cfg->lr;
	fo.codec_push     = cfg->codec_push;
	fo.codec_pull     = cfg->codec_pull;
	fo.bucket         = cfg->bucket;
	fo.warmup_steps   = cfg->warmup_steps;
	fo.seed           = cfg->seed;
	fo.log            = ferry_log;
	fo.heartbeat_ms   = cfg->heartbeat_ms;
	fo.optimizer      = cfg->optimizer;
	fo.momentum       = cfg->momentum;
	fo.beta1          = cfg->beta1;
	fo.beta2          = cfg->beta2;
	fo.eps            = cfg->eps;
	fo.weight_decay   = cfg->weight_decay;
	fo.lr_schedule    = cfg->lr_schedule;
	fo.lr_warmup      = cfg->lr_warmup;
	fo.lr_step_every  = cfg->lr_step_every;
	fo.lr_gamma       = cfg->lr_gamma;
	fo.lr_min         = cfg->lr_min;
	fo.lr_total_steps = cfg->lr_total_steps;
	fo.clip_norm      = cfg->clip_norm;
	fo.link_budget    = cfg->link_budget;
	fo.tls_cert       = cfg->tls_cert;
	fo.tls_key        = cfg->tls_key;
	fo.tls_ca         = cfg->tls_ca;
	if (ferry_opts_check(&fo, r->err, sizeof(r->err)) != FERRY_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "bad options: %s", r->err);
		return FB_EINVAL;
	}
	if ((fe = ferry_client_open(&fo, &r->fc)) != FERRY_OK) {
		return libferry_failed(r, "open", fe);
	}
	if (cfg->secret_file != NULL && *cfg->secret_file != '\0' &&
	    (fe = ferry_client_set_secret_file(r->fc, cfg->secret_file)) !=
	        FERRY_OK) {
		return libferry_failed(r, "--secret-file", fe);
	}
	for (size_t i = 0; i < r->w.n_tensors; i++) {
		tr_arch_tensor_name(&cfg->arch, i, names[i], sizeof(names[i]));
		descs[i].name = names[i];
		descs[i].len  = r->w.len[i];
	}
	if ((fe = ferry_client_declare(r->fc, descs, r->w.n_tensors)) !=
	    FERRY_OK) {
		return libferry_failed(r, "declare", fe);
	}
	r->trainers = ferry_client_trainers(r->fc);
	rv = tr_partition_init(&r->part, r->train.n, cfg->rank, r->trainers,
	    cfg->seed);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "partition: rank %d of %d trainers: %s", cfg->rank,
		    r->trainers, fb_strerror(rv));
		return rv;
	}
	r->steps_per_epoch = tr_partition_steps(r->train.n, r->trainers,
	    cfg->batch);
	if (r->steps_per_epoch == 0) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--batch %zu: larger than a partition (%zu samples over "
		    "%d trainers)",
		    cfg->batch, r->train.n, r->trainers);
		return FB_EINVAL;
	}
	for (size_t t = 0, off = 0; t < r->w.n_tensors; t++) {
		r->tensor_base[t] = off;
		off += r->w.len[t];
	}
	return FB_OK;
}

// open_device_pull sets the backend's pull sink when it has one for the
// job's pull codec; before version 0, so that every pull, warm-up and
// resyncs included, lands in the backend's device weights. Not with
// --overlap, whose next pull must not overwrite the weights in use.
static int
open_device_pull(struct run *r)
{
	const struct ferry_shard *sh;
	struct ferry_pull_sink    sink;
	size_t                    ns;
	uint32_t                  cid, bucket, pid, pbucket;
	int                       rv, fe;

	// Codec "auto" pulls the weights over fast links: the host path.
	// --overlap's next pull must not overwrite the weights in use.
	if (r->dev == NULL || strcmp(r->cfg->codec_pull, "auto") == 0 ||
	    r->cfg->overlap ||
	    ferry_client_pull_codec(r->fc, &pid, &pbucket) != FERRY_OK ||
	    !r->dev->pull_supported(pid) ||
	    ferry_client_shards(r->fc, &sh, &ns, &cid, &bucket) != FERRY_OK) {
		return FB_OK; // the host path
	}
	if ((rv = r->dev->pull_open(r->be, sh, ns, pid, pbucket,
	         r->tensor_base, &r->dev_pull, &sink, r->err,
	         sizeof(r->err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "device pull: %s", r->err);
		return rv;
	}
	if ((fe = ferry_client_set_pull_sink(r->fc, &sink)) != FERRY_OK) {
		return libferry_failed(r, "set_pull_sink", fe);
	}
	r->sink_err = r->dev->pull_error(r->dev_pull);
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "pulled weights are decoded on the device (%zu shards)", ns);
	return FB_OK;
}

// set_weights hands the pulled host weights to the backend, unless they
// were pulled straight into it.
static int
set_weights(struct run *r)
{
	if (r->dev_pull != NULL) {
		return FB_OK;
	}
	return tr_backend_set_weights(r->be, tr_params_cptrs(&r->w));
}

// log_start says where this trainer starts when that is not a fresh job's
// step 0: resuming inside the job, or with nothing left to do.
static void
log_start(const struct run *r, uint64_t version)
{
	struct tr_position pos;
	if (r->start >= r->total) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d: the job is at version %llu, its last step is "
		    "%llu: nothing left to train",
		    r->cfg->rank, (unsigned long long) version,
		    (unsigned long long) r->total);
	} else if (r->start > 0 &&
	    tr_job_position(r->start, r->steps_per_epoch, r->total, &pos) ==
	        FB_OK) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d resumes at version %llu: epoch %ld, minibatch "
		    "%zu of %zu (%llu job steps in all)",
		    r->cfg->rank, (unsigned long long) version, pos.epoch,
		    pos.k, r->steps_per_epoch, (unsigned long long) r->total);
	}
}

// start_weights has rank 0 offer the initial weights, then pulls the
// job's current version (0 unless this rank rejoins a running job) into
// the backend and finds the job step to start at.
static int
start_weights(struct run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct ferry_stats      st;
	int                     fe;

	if (cfg->rank == 0) {
		tr_params_randomize(&r->w, cfg->seed);
		fe = ferry_client_init_weights(r->fc, tr_params_cptrs(&r->w));
		if (fe != FERRY_OK) {
			return libferry_failed(r, "init_weights", fe);
		}
	}
	if ((fe = ferry_client_pull(r->fc, r->w.t)) != FERRY_OK) {
		return libferry_failed(r, "pull the first version", fe);
	}
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "rank %d of %d: %zu samples in partition, %zu steps per epoch, "
	    "%zu parameters, device %s",
	    cfg->rank, r->trainers, r->part.count, r->steps_per_epoch,
	    r->w.total, cfg->device);
	ferry_client_stats(r->fc, &st);
	r->total = tr_job_steps(r->steps_per_epoch, cfg->epochs,
	    cfg->max_steps);
	r->start = lockstep(cfg) ? st.version : 0;
	log_start(r, st.version);
	return set_weights(r);
}

// open_device_push prepares on-device gradient encoding when the backend
// can encode the job's push codec.
static int
open_device_push(struct run *r)
{
	const struct ferry_shard *sh;
	size_t                    ns;
	uint32_t                  cid, bucket;
	int                       rv;

	// --clip-norm scales the gradient before it is encoded, which
	// libferry does on the host path only; codec "auto" picks a codec
	// per link there too; --overlap double-buffers the host weights and
	// gradients.
	if (r->dev == NULL || r->cfg->clip_norm > 0 || r->cfg->overlap ||
	    strcmp(r->cfg->codec_push, "auto") == 0 ||
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

// step_failed logs a local failure of the current step.
static int
step_failed(struct run *r, int rv)
{
	FB_LOG(FB_LOG_ERR, MOD, "step %llu: %s",
	    (unsigned long long) r->rep.step, fb_strerror(rv));
	return rv;
}

// next_step returns the job step reached after a step: the version now
// held in sync mode (one more, or more after a round finished without this
// trainer), one more in async mode.
static uint64_t
next_step(const struct run *r)
{
	struct ferry_stats st;
	if (!lockstep(r->cfg)) {
		return r->rep.step + 1;
	}
	ferry_client_stats(r->fc, &st);
	return st.version;
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
	struct run *r = arg;
	r->layer_fe   = ferry_client_push_pull_start(r->fc,
	      tr_params_cptrs(&r->g), (uint32_t) r->cfg->batch, r->w.t,
	      2 * (size_t) layer, 2);
	return r->layer_fe == FERRY_OK ? FB_OK : FB_EREMOTE;
}

// grad_layered computes the gradient with --overlap-layers 1: each
// layer's push-pull starts as soon as backward made it (layer_push); then
// it waits for the layers in the order the next forward reads them.
// Returns an fb_ error of the backend in *rv, else libferry's result.
static int
grad_layered(struct run *r, const uint32_t *idx, double *loss, int *rv,
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

// rolled_back takes the job's rollback (a server restarted from its
// snapshot; FERRY_EROLLBACK): it pulls the rollback version in full and,
// in sync mode, moves the job step back to it, so that the next steps
// redo that version's minibatches and the job still ends at its last
// step. An async trainer keeps counting its own steps (versions name no
// position of one rank). The step that got the rollback is not counted.
static int
rolled_back(struct run *r)
{
	struct ferry_stats st;
	int                fe;

	FB_LOG(FB_LOG_WARN, MOD, "rank %d: %s", r->cfg->rank,
	    ferry_client_last_error(r->fc));
	// A second rollback during the pull: pull again (bounded).
	for (int k = 0; k < 4; k++) {
		if ((fe = ferry_client_pull(r->fc, r->w.t)) !=
		    FERRY_EROLLBACK) {
			break;
		}
	}
	if (fe != FERRY_OK) {
		return libferry_failed(r, "pull after a rollback", fe);
	}
	ferry_client_stats(r->fc, &st);
	if (lockstep(r->cfg)) {
		r->rep.step = st.version;
	}
	if (r->dev_push != NULL) {
		// The device encoder's error-feedback residuals belong to the
		// undone steps too: start it afresh, as libferry's own.
		r->dev->push_close(r->dev_push);
		r->dev_push = NULL;
		int rv      = open_device_push(r);
		if (rv != FB_OK) {
			return rv;
		}
	}
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "rank %d resumes at version %llu (step %llu)", r->cfg->rank,
	    (unsigned long long) st.version, (unsigned long long) r->rep.step);
	return set_weights(r);
}

// step runs minibatch k of epoch e: gradient, push-pull, new weights.
static int
step(struct run *r, long e, size_t k)
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
		if ((rv = tr_backend_grad(r->be, &r->train, idx, cfg->batch,
		         r->g.t, &loss)) != FB_OK) {
			return step_failed(r, rv);
		}
		straggle(cfg);
		tx = fb_clock_ns();
		fe = ferry_client_push_pull(r->fc, tr_params_cptrs(&r->g),
		    (uint32_t) cfg->batch, r->w.t);
	}
	tr__report_step_time(&r->rep, ts, tx);
	if (fe == FERRY_EROLLBACK) {
		return rolled_back(r);
	}
	if (fe == FERRY_EBEHIND) {
		// Rejoined while a round finished without us, or a
		// --sync-quorum closed the round first (the push is dropped):
		// take the job's weights and go on.
		r->rep.dropped++;
		FB_LOG(FB_LOG_NOTICE, MOD, "behind the job: %s; pulling",
		    ferry_client_last_error(r->fc));
		if ((fe = ferry_client_pull(r->fc, r->w.t)) == FERRY_OK &&
		    (rv = set_weights(r)) != FB_OK) {
			return rv;
		}
	}
	if (fe != FERRY_OK) {
		return libferry_failed(r, "push_pull", fe);
	}
	if ((rv = set_weights(r)) != FB_OK) {
		return rv;
	}
	tr__report_step(&r->rep, next_step(r), cfg->batch, loss,
	    fb_clock_ns() - ts);
	tr__metrics_step(&r->met, r->fc, cfg->batch, tx - ts,
	    fb_clock_ns() - tx, r->rep.dropped);
	return FB_OK;
}

// evaluate_and_report prints a progress line; rank 0 evaluates on the
// test set first.
static int
evaluate_and_report(struct run *r)
{
	struct ferry_stats st;
	double             loss, acc;
	int                rv;

	if (r->cfg->rank == 0) {
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

// A signal stops the loop between steps; the trainer then leaves the job
// so that the other trainers' sync rounds do not wait for it.
static volatile sig_atomic_t stop_requested;

static void
on_stop_signal(int sig)
{
	(void) sig;
	stop_requested = 1;
}

// ov_failed, ov_next_step and ov_report are libferry_failed, next_step
// and evaluate_and_report for overlap.c's loop.
static int
ov_failed(void *r, const char *op, int fe)
{
	return libferry_failed(r, op, fe);
}

static uint64_t
ov_next_step(void *r)
{
	return next_step(r);
}

static int
ov_report(void *r)
{
	return evaluate_and_report(r);
}

// train_overlapped runs overlap.c's loop (--overlap 1) on this run.
static int
train_overlapped(struct run *r)
{
	const struct tr__ov_run o = {
		.cfg             = r->cfg,
		.be              = r->be,
		.fc              = r->fc,
		.train           = &r->train,
		.part            = &r->part,
		.w               = &r->w,
		.g               = &r->g,
		.rep             = &r->rep,
		.met             = &r->met,
		.steps_per_epoch = r->steps_per_epoch,
		.total           = r->total,
		.stop            = &stop_requested,
		.arg             = r,
		.failed          = ov_failed,
		.next_step       = ov_next_step,
		.report          = ov_report,
	};
	return tr__train_overlapped(&o);
}

// train runs job steps from r->start, reporting every --log-interval
// steps and at the end of each epoch, until the job's last step
// (--epochs, --max-steps) or a signal.
static int
train(struct run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct tr_position      pos;
	int                     rv;

	stop_requested = 0;
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
	tr__report_start(&r->rep, r->start);
	// The overlapped loop runs to the job's end or a signal, so the
	// loop below then has nothing left to do.
	if (cfg->overlap && (rv = train_overlapped(r)) != FB_OK) {
		return rv;
	}
	while (!stop_requested &&
	    tr_job_position(r->rep.step, r->steps_per_epoch, r->total, &pos) ==
	        FB_OK) {
		if ((rv = step(r, pos.epoch, pos.k)) != FB_OK) {
			return rv;
		}
		int due = cfg->log_interval > 0 &&
		    r->rep.step % (uint64_t) cfg->log_interval == 0;
		int epoch_end = r->rep.step / r->steps_per_epoch >
		    (uint64_t) pos.epoch;
		if ((due || epoch_end) && r->rep.last_report != r->rep.step &&
		    (rv = evaluate_and_report(r)) != FB_OK) {
			return rv;
		}
	}
	if (r->rep.steps_run > 0 && r->rep.last_report != r->rep.step) {
		return evaluate_and_report(r);
	}
	return FB_OK;
}

// finish prints the summary and writes --weights-out: everything the run
// produced is saved before the trainer leaves (leave_job).
static int
finish(struct run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct ferry_stats      st;
	int                     rv;

	ferry_client_stats(r->fc, &st);
	tr__report_summary(&r->rep, cfg, r->trainers, r->steps_per_epoch, &st,
	    r->fc);
	if (cfg->weights_out == NULL) {
		return FB_OK;
	}
	// The host copy of device-pulled weights is refreshed only here.
	if (r->dev_pull != NULL &&
	    (rv = r->dev->pull_fetch(r->dev_pull, r->w.t)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--weights-out: copying the device weights: %s",
		    fb_strerror(rv));
		return rv;
	}
	return tr__report_weights(cfg->weights_out, &r->w);
}

// leave_job leaves the job (done or stopped by a signal: either way the
// other ranks must not wait for this one). A failed leave is logged: the
// scheduler also notices a silent trainer by its heartbeats.
static void
leave_job(struct run *r)
{
	int fe;
	if (stop_requested) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "stopped by a signal; leaving the job");
	} else {
		FB_LOG(FB_LOG_INFO, MOD,
		    "done at job step %llu; leaving the job",
		    (unsigned long long) r->rep.step);
	}
	if ((fe = ferry_client_leave(r->fc)) != FERRY_OK) {
		FB_LOG(FB_LOG_WARN, MOD, "leave: %s: %s", ferry_strerror(fe),
		    ferry_client_last_error(r->fc));
	}
}

// EXIT_GRACE_S: how long leaving the job and tearing down may take once
// the run has ended (its outputs are written by then; fb_exit_watchdog
// says why a teardown needs a guard).
#define EXIT_GRACE_S 20

// close_run releases everything open_* made; safe on a partial set-up.
static void
close_run(struct run *r)
{
	tr__metrics_phase(&r->met, TR_PHASE_DONE, r->fc);
	tr__metrics_close(&r->met);
	tr__report_close(&r->rep);
	if (r->dev != NULL) {
		r->dev->push_close(r->dev_push);
		r->dev->pull_close(r->dev_pull);
	}
	ferry_client_close(r->fc);
	tr_partition_fini(&r->part);
	tr_backend_free(r->be); // first: it may have pinned w and g
	tr_params_fini(&r->w);
	tr_params_fini(&r->g);
	tr_dataset_fini(&r->train);
	tr_dataset_fini(&r->test);
}

int
tr_train_run(const struct tr_config *cfg, FILE *out)
{
	struct run r = { 0 };
	int        rv;

	r.cfg = cfg;
	if (cfg->scheduler == NULL) {
		FB_LOG(FB_LOG_ERR, MOD, "--scheduler is required");
		return FB_EINVAL;
	}
	if ((rv = open_local(&r, out)) == FB_OK &&
	    (rv = join_job(&r)) == FB_OK &&
	    (rv = open_device_pull(&r)) == FB_OK &&
	    (rv = start_weights(&r)) == FB_OK &&
	    (rv = open_device_push(&r)) == FB_OK) {
		// The first version is here: the job runs (/readyz turns
		// ready).
		tr__metrics_phase(&r.met, TR_PHASE_RUNNING, r.fc);
		int trained = (rv = train(&r)) == FB_OK;
		if (trained) {
			rv = finish(&r);
		}
		// Exit status as main.c maps it: 0 done, 1 failed.
		fb_exit_watchdog(EXIT_GRACE_S, rv == FB_OK ? 0 : 1,
		    "exit: leaving and closing the connections");
		if (trained) {
			leave_job(&r);
		}
	}
	close_run(&r);
	return rv;
}
