// train.c — one training run over libferry: set-up, the plain loop,
// --weights-out, teardown. A step and the step end both loops take are
// step.c's, the loop with one-step delayed weights (--overlap 1) is
// overlap.c's, the local-steps loop (--local-steps) local.c's, and what
// the loop prints and writes is report.c's.
// --model dlrm runs dlrm_train.c's loop instead; what both loops do alike
// (the client's opening, signals, leaving) is run.c's.
//
// DESIGN
// Start-up does everything that can fail locally first (the backend, so a
// CUDA request without a GPU fails at once; then the data), then talks to
// the job: open, declare fc*.weight/fc*.bias with their seeded init rule
// (tr_params_init_rule with --seed), everybody pulls version 0.
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
// With data leases (--leases, an elastic job: lease.c) there is no
// partition and no job step: each batch is the next positions of the
// lease the scheduler gave (a piece of the epoch's permutation of the
// whole set), and the job ends when the scheduler says every epoch is
// consumed. The rest of this comment is about runs without leases.
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

#include "overlap.h"
#include "step.h"
#include "tr_impl.h"
#include "verify.h"

#define MOD "train"

// open_local makes everything that needs no network: the backend, the
// data, the weight and gradient buffers and the report's files.
static int
open_local(struct tr__run *r, FILE *out)
{
	const struct tr_config *cfg = r->cfg;
	const struct tr_arch   *a   = &cfg->arch;
	struct tr_backend_opts  bo  = TR_BACKEND_OPTS_INIT;
	int                     rv;

	bo.rank         = cfg->fo.rank;
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

// lease_data prepares a run with leases: the cursor over the whole data
// set (no partition), and the loops' options it does not take.
static int
lease_data(struct tr__run *r)
{
	const struct tr_config *cfg = r->cfg;
	int                     rv;

	if (cfg->overlap || cfg->overlap_layers) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--overlap and --overlap-layers do not take data leases "
		    "yet: run with --leases off (a job of fixed ranks)");
		return FB_EINVAL;
	}
	if ((rv = tr_lease_cursor_init(&r->lc, r->train.n)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "leases: %s", fb_strerror(rv));
		return rv;
	}
	// Only the summary's "epochs" reads it: one batch per step.
	r->steps_per_epoch = r->train.n / cfg->batch > 0
	    ? r->train.n / cfg->batch
	    : 1;
	for (size_t t = 0, off = 0; t < r->w.n_tensors; t++) {
		r->tensor_base[t] = off;
		off += r->w.len[t];
	}
	return FB_OK;
}

// join_job opens the libferry client, declares the tensors and cuts this
// rank's partition of the training set.
static int
join_job(struct tr__run *r)
{
	const struct tr_config  *cfg = r->cfg;
	struct ferry_tensor_spec descs[TR_MAX_TENSORS];
	char                     names[TR_MAX_TENSORS][32];
	int                      rv, fe;

	if ((rv = tr__run_open_client(r)) != FB_OK) {
		return rv;
	}
	for (size_t i = 0; i < r->w.n_tensors; i++) {
		tr_arch_tensor_name(&cfg->arch, i, names[i], sizeof(names[i]));
		descs[i] = (struct ferry_tensor_spec) { .name = names[i],
			.len                                  = r->w.len[i] };
		// Seeded version 0 (tr_params_randomize's rule): no trainer
		// offers the weights and no pull of version 0 carries them.
		tr_params_init_rule(&r->w, i, &descs[i].init,
		    &descs[i].init_scale);
	}
	r->t_declare_ns = fb_clock_ns();
	if ((fe = ferry_client_declare_specs(r->fc, descs, r->w.n_tensors)) !=
	    FERRY_OK) {
		return tr__run_failed(r, "declare", fe);
	}
	r->trainers = ferry_client_trainers(r->fc);
	tr__run_given_rank(r);
	if (tr__run_leased(r)) {
		return lease_data(r);
	}
	rv = tr_partition_init(&r->part, r->train.n, r->rank, r->trainers,
	    cfg->fo.seed);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "partition: rank %d of %d trainers: %s", r->rank,
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
open_device_pull(struct tr__run *r)
{
	const struct ferry_shard *sh;
	struct ferry_pull_sink    sink;
	size_t                    ns;
	uint32_t                  cid, bucket, pid, pbucket;
	int                       rv, fe;

	// Codec "auto" pulls the weights over fast links: the host path.
	// --overlap's next pull must not overwrite the weights in use.
	// Local steps keep their own weights on the host (local.c).
	if (r->dev == NULL || strcmp(r->cfg->fo.codec_pull, "auto") == 0 ||
	    r->cfg->overlap || r->cfg->local_steps > 0 ||
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
		return tr__run_failed(r, "set_pull_sink", fe);
	}
	r->sink_err = r->dev->pull_error(r->dev_pull);
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "pulled weights are decoded on the device (%zu shards)", ns);
	return FB_OK;
}

// log_start says where this trainer starts when that is not a fresh job's
// step 0: resuming inside the job, or with nothing left to do.
static void
log_start(const struct tr__run *r, uint64_t version)
{
	struct tr_position pos;
	if (r->leased) {
		return; // the leases say where the job is
	}
	if (r->start >= r->total) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d: the job is at version %llu, its last step is "
		    "%llu: nothing left to train",
		    r->rank, (unsigned long long) version,
		    (unsigned long long) r->total);
	} else if (r->start > 0 &&
	    tr_job_position(r->start, r->steps_per_epoch, r->total, &pos) ==
	        FB_OK) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d resumes at version %llu: epoch %ld, minibatch "
		    "%zu of %zu (%llu job steps in all)",
		    r->rank, (unsigned long long) version, pos.epoch, pos.k,
		    r->steps_per_epoch, (unsigned long long) r->total);
	}
}

// start_weights pulls the job's current version (0 unless this rank
// rejoins a running job) into the backend and finds the job step to start
// at. Version 0 is seeded (join_job declares tr_params_init_rule with
// --seed): the servers fill it and libferry's first pull fills this copy,
// so nobody offers it.
static int
start_weights(struct tr__run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct ferry_stats      st;
	int                     fe;

	if ((fe = ferry_client_pull(r->fc, r->w.t)) != FERRY_OK) {
		return tr__run_failed(r, "pull the first version", fe);
	}
	if (r->leased) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d of up to %d: data leases over %zu samples, "
		    "%zu parameters, device %s",
		    r->rank, r->trainers, r->train.n, r->w.total, cfg->device);
	} else {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d of %d: %zu samples in partition, %zu steps per "
		    "epoch, %zu parameters, device %s",
		    r->rank, r->trainers, r->part.count, r->steps_per_epoch,
		    r->w.total, cfg->device);
	}
	ferry_client_stats(r->fc, &st);
	r->total = tr_job_steps(r->steps_per_epoch, cfg->epochs,
	    cfg->max_steps);
	r->start = cfg->local_steps > 0 ? tr__local_start(r, st.version)
	    : tr__run_lockstep(cfg)     ? st.version
	                                : 0;
	log_start(r, st.version);
	return tr__run_set_weights(r, &r->w);
}

// train runs job steps from r->start, reporting every --log-interval
// steps and at the end of each epoch, until the job's last step
// (--epochs, --max-steps) or a signal.
static int
train(struct tr__run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct tr_position      pos;
	int                     rv;

	volatile sig_atomic_t *stop = r->stop;
	tr__report_start(&r->rep, r->start);
	// The overlapped loop runs to the job's end or a signal, so the
	// loop below then has nothing left to do.
	if (cfg->overlap && (rv = tr__train_overlapped(r, stop)) != FB_OK) {
		return rv;
	}
	if (r->leased && (rv = tr__train_leased(r, stop)) != FB_OK) {
		return rv; // lease.c
	}
	if (cfg->local_steps > 0 && (rv = tr__train_local(r, stop)) != FB_OK) {
		return rv; // local.c
	}
	while (!r->leased && cfg->local_steps == 0 && !*stop &&
	    tr_job_position(r->rep.step, r->steps_per_epoch, r->total, &pos) ==
	        FB_OK) {
		if ((rv = tr__step(r, pos.epoch, pos.k)) != FB_OK) {
			return rv;
		}
	}
	if (r->rep.steps_run > 0 && r->rep.last_report != r->rep.step) {
		return tr__run_report(r);
	}
	return FB_OK;
}

// finish prints the summary and writes --weights-out: everything the run
// produced is saved before the trainer leaves (tr__run_end).
static int
finish(struct tr__run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct ferry_stats      st;
	int                     rv;

	ferry_client_stats(r->fc, &st);
	r->rep.xchg_max_ns = r->leased ? r->xchg_max_ns : 0;
	r->rep.attacked    = r->atk.attacked;
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

// close_run releases everything open_* made; safe on a partial set-up.
static void
close_run(struct tr__run *r)
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
	tr_lease_cursor_fini(&r->lc);
	tr_backend_free(r->be); // first: it may have pinned w and g
	tr_params_fini(&r->w);
	tr_params_fini(&r->g);
	tr__attack_fini(&r->atk); // label-flip borrows train's x
	tr_dataset_fini(&r->train);
	tr_dataset_fini(&r->test);
}

int
tr_train_run(const struct tr_config *cfg, FILE *out)
{
	struct tr__run r = { 0 };
	int            rv;

	r.cfg        = cfg;
	r.rank       = cfg->fo.rank;
	r.stop       = tr__run_catch_signals(); // before joining: run.c
	r.t_start_ns = fb_clock_ns();
	if (cfg->fo.scheduler_url == NULL) {
		FB_LOG(FB_LOG_ERR, MOD, "--scheduler is required");
		return FB_EINVAL;
	}
	if (cfg->verify) {
		return tr__verify_run(cfg, out); // verify.c: trains nothing
	}
	if (cfg->model == TR_MODEL_DLRM) {
		return tr__dlrm_train_run(cfg, out); // dlrm_train.c
	}
	if ((rv = open_local(&r, out)) == FB_OK &&
	    (rv = join_job(&r)) == FB_OK &&
	    (rv = tr__run_open_attack(&r)) == FB_OK &&
	    (rv = open_device_pull(&r)) == FB_OK &&
	    (rv = start_weights(&r)) == FB_OK &&
	    (rv = tr__run_open_device_push(&r)) == FB_OK) {
		// The first version is here: the job runs (/readyz turns
		// ready).
		tr__metrics_phase(&r.met, TR_PHASE_RUNNING, r.fc);
		int trained = (rv = train(&r)) == FB_OK;
		if (trained) {
			rv = finish(&r);
		}
		tr__run_end(&r, rv, trained);
	}
	close_run(&r);
	return rv;
}
