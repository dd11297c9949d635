// train.c — the trainer's loop over libferry (the only network-facing file
// of the trainer library).
//
// DESIGN
// Start-up does everything that can fail locally first (the backend, so a
// CUDA request without a GPU fails at once; then the data), then talks to
// the job: open, declare fc*.weight/fc*.bias, rank 0 offers the initial weights
// (tr_params_randomize with --seed), everybody pulls version 0.
// Each step: next local minibatch (tr_partition_batch), summed gradient at
// the current weights (backend), one push-pull that returns the next
// version into the same weight buffers, then set_weights (a pointer swap on
// the CPU). Nothing on that path allocates.
//
// With the CUDA backend the data path stays on the device where it can:
// gradients are quantized there (devpush.h, with a push codec the device
// encodes) and, with a pull codec the device decodes (or none), pulls go
// to a libferry pull sink (devpull.h) set before version 0: the delta
// codes are decoded straight into the backend's device weights, which are
// the shared reference, and its CRC is checked on the device; no
// set_weights then. The host weight buffers are stale in that mode and
// are refreshed only for --weights-out (evaluation runs on the device).
//
// Every trainer runs tr_partition_steps() steps per epoch, computed from
// the smallest partition, because sync mode waits for every trainer.
//
// --step-times FILE writes one CSV row per step: the compute time (minibatch
// and gradient, on the device: also its encoding) and the push-pull time.
// Output: every --log-interval steps and at the end of each epoch one line
//   step 100 | train_loss 0.7557 | test_loss 0.7426 | test_acc 0.8123 |
//   step 2.1 ms | sent 0.93 MB
// where train_loss is the mean loss of the interval's minibatches (at the
// weights they were computed on), step is the mean step time of the
// interval (evaluation excluded) and sent is the cumulative bytes pushed.
// Only rank 0 evaluates on the test set; other ranks print the same line
// without the test_loss and test_acc fields. The last line is a JSON
// summary; samples_per_s = samples this trainer processed / wall_s, where
// wall_s runs from version 0 to the last step and includes rank 0's
// evaluations (reported separately as eval_s).
#include <ferry/ferry.h>
#include <math.h>
#include <signal.h>
#include <string.h>

#include "tr_impl.h"
#ifdef TR_HAVE_CUDA
#include "backend_cuda.h"
#include "devpull.h"
#include "devpush.h"
#endif

#define MOD "train"

struct run {
	const struct tr_config *cfg;
	FILE                   *out, *curve, *step_times;
	struct tr_backend      *be;
	ferry_client           *fc;
	const char             *sink_err; // device pull's reason, or NULL
	struct tr_dataset       train, test;
	int                     trainers;
	uint64_t                t0;         // ns at version 0
	uint64_t                step;       // steps done
	uint64_t                samples;    // samples processed
	uint64_t                eval_ns;    // time spent evaluating
	// interval accumulators
	double                  iv_loss;
	uint64_t                iv_samples, iv_steps, iv_ns;
	uint64_t                last_report;
	double                  test_loss, test_acc;
	int                     have_test;
};

static int
ferry_to_ps(int fe)
{
	switch (fe) {
	case FERRY_OK:
		return FB_OK;
	case FERRY_EINVAL:
		return FB_EINVAL;
	case FERRY_ENOMEM:
		return FB_ENOMEM;
	case FERRY_ECONNECT:
		return FB_ETRANSPORT;
	case FERRY_ETIMEDOUT:
		return FB_ETIMEDOUT;
	case FERRY_EREMOTE:
		return FB_EREMOTE;
	case FERRY_EPROTO:
		return FB_EPROTO;
	case FERRY_ECORRUPT:
		return FB_ECORRUPT;
	case FERRY_ECLOSED:
		return FB_ECLOSED;
	case FERRY_EUNSUPP:
		return FB_EUNSUPP;
	case FERRY_ESINK:
		return FB_ETRANSPORT; // the device failed, as in the backend
	default:
		return FB_ESTATE;
	}
}

static int
ferry_fail(struct run *r, const char *op, int fe)
{
	const char *msg = r->fc ? ferry_client_last_error(r->fc) : "";
	FB_LOG(FB_LOG_ERR, MOD, "%s: %s%s%s%s%s", op, ferry_strerror(fe),
	    *msg ? ": " : "", msg,
	    r->sink_err && *r->sink_err ? ": " : "",
	    r->sink_err ? r->sink_err : "");
	return ferry_to_ps(fe);
}

// report prints one progress line (rank 0 evaluates first) and a curve row.
static int
report(struct run *r)
{
	struct ferry_stats st;
	double             wall, step_ms, loss;
	int                rv;
	if (r->cfg->rank == 0) {
		uint64_t t = fb_clock_ns();
		rv = tr_backend_evaluate(r->be, &r->test, &r->test_loss,
		    &r->test_acc);
		r->eval_ns += fb_clock_ns() - t;
		if (rv != FB_OK) {
			FB_LOG(FB_LOG_ERR, MOD, "evaluate: %s", fb_strerror(rv));
			return rv;
		}
		r->have_test = 1;
	}
	ferry_client_stats(r->fc, &st);
	wall    = (double) (fb_clock_ns() - r->t0) * 1e-9;
	step_ms = r->iv_steps ? (double) r->iv_ns * 1e-6 / (double) r->iv_steps
	                      : 0.0;
	loss = r->iv_samples ? r->iv_loss / (double) r->iv_samples : NAN;
	fprintf(r->out, "step %llu | train_loss %.4f", (unsigned long long) r->step,
	    loss);
	if (r->have_test) {
		fprintf(r->out, " | test_loss %.4f | test_acc %.4f",
		    r->test_loss, r->test_acc);
	}
	fprintf(r->out, " | step %.1f ms | sent %.2f MB\n", step_ms,
	    (double) st.bytes_pushed * 1e-6);
	fflush(r->out);
	if (r->curve != NULL) {
		fprintf(r->curve, "%llu,%.6f,%.6f,", (unsigned long long) r->step,
		    wall, loss);
		if (r->have_test) {
			fprintf(r->curve, "%.6f,%.6f,", r->test_loss,
			    r->test_acc);
		} else {
			fprintf(r->curve, ",,");
		}
		fprintf(r->curve, "%llu\n", (unsigned long long) st.bytes_pushed);
		fflush(r->curve);
	}
	r->iv_loss = 0.0;
	r->iv_samples = r->iv_steps = r->iv_ns = 0;
	r->last_report = r->step;
	return FB_OK;
}

static void
summary(struct run *r, size_t steps_per_epoch)
{
	struct ferry_stats st;
	double             wall = (double) (fb_clock_ns() - r->t0) * 1e-9;
	ferry_client_stats(r->fc, &st);
	fprintf(r->out,
	    "{\"summary\": {\"epochs\": %.6g, \"steps\": %llu, \"samples\": "
	    "%llu, \"wall_s\": %.3f, \"samples_per_s\": %.1f, ",
	    steps_per_epoch ? (double) r->step / (double) steps_per_epoch : 0.0,
	    (unsigned long long) r->step, (unsigned long long) r->samples, wall,
	    wall > 0 ? (double) r->samples / wall : 0.0);
	if (r->have_test) {
		fprintf(r->out, "\"test_acc\": %.4f, \"test_loss\": %.4f, ",
		    r->test_acc, r->test_loss);
	}
	fprintf(r->out,
	    "\"bytes_pushed\": %llu, \"bytes_pulled\": %llu, \"rank\": %d, "
	    "\"trainers\": %d, \"eval_s\": %.3f, \"batch\": %zu, \"mode\": "
	    "\"%s\", \"device\": \"%s\"}}\n",
	    (unsigned long long) st.bytes_pushed,
	    (unsigned long long) st.bytes_pulled, r->cfg->rank, r->trainers,
	    (double) r->eval_ns * 1e-9, r->cfg->batch,
	    r->cfg->mode == TR_MODE_ASYNC ? "async" : "sync", r->cfg->device);
	fflush(r->out);
}

// write_weights saves w as raw float32 (host order), tensor after tensor.
static int
write_weights(const char *path, const struct tr_params *w)
{
	FILE *f = fopen(path, "wb");
	int   ok = f != NULL;
	for (size_t i = 0; ok && i < w->n_tensors; i++) {
		ok = fwrite(w->t[i], sizeof(float), w->len[i], f) == w->len[i];
	}
	if (f != NULL && fclose(f) != 0) {
		ok = 0;
	}
	if (!ok) {
		FB_LOG(FB_LOG_ERR, MOD, "--weights-out %s: cannot write", path);
		return FB_EINVAL;
	}
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

int
tr_train_run(const struct tr_config *cfg, FILE *out)
{
	struct run               r    = { 0 };
	struct tr_params         w    = { 0 }, g = { 0 };
	struct tr_partition      part = { 0 };
	struct tr_backend_opts   bo   = TR_BACKEND_OPTS_INIT;
	struct ferry_opts        fo   = FERRY_OPTS_INIT;
	struct ferry_tensor_desc descs[TR_MAX_TENSORS];
	char                     names[TR_MAX_TENSORS][32];
	char                     err[512] = "";
	const struct tr_arch    *a        = &cfg->arch;
	size_t                   spe      = 0;
	int                      rv, fe, stop = 0;
#ifdef TR_HAVE_CUDA
	struct tr__devpush      *dp     = NULL;
	struct tr__devpull      *dpull  = NULL;
	const uint8_t          **dcodes = NULL;
	size_t                   tbase[TR_MAX_TENSORS];
#endif
	int                      dev_w = 0; // weights live on the device only

	r.cfg = cfg;
	r.out = out;
	if (cfg->scheduler == NULL) {
		FB_LOG(FB_LOG_ERR, MOD, "--scheduler is required");
		return FB_EINVAL;
	}
	bo.rank         = cfg->rank;
	bo.blas_threads = cfg->blas_threads;
	bo.max_batch    = cfg->batch;
	rv = tr_backend_alloc(cfg->device, a, &bo, &r.be, err, sizeof(err));
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "backend: %s", err);
		return rv;
	}
	rv = tr_data_load(cfg->data_dir, (int) a->sizes[a->n_layers], &r.train,
	    &r.test, err, sizeof(err));
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "load data: %s", err);
		goto done;
	}
	if (r.train.dim != a->sizes[0]) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--layers: input width %zu does not match the data's %zu "
		    "pixels per sample",
		    a->sizes[0], r.train.dim);
		rv = FB_EINVAL;
		goto done;
	}
	if ((rv = tr_params_init(&w, a)) != FB_OK ||
	    (rv = tr_params_init(&g, a)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "params: %s", fb_strerror(rv));
		goto done;
	}
	if (cfg->curve != NULL) {
		if ((r.curve = fopen(cfg->curve, "w")) == NULL) {
			FB_LOG(FB_LOG_ERR, MOD, "--curve %s: cannot open",
			    cfg->curve);
			rv = FB_EINVAL;
			goto done;
		}
		fprintf(r.curve,
		    "step,wall_s,train_loss,test_loss,test_acc,bytes_sent\n");
	}
	if (cfg->step_times != NULL) {
		if ((r.step_times = fopen(cfg->step_times, "w")) == NULL) {
			FB_LOG(FB_LOG_ERR, MOD, "--step-times %s: cannot open",
			    cfg->step_times);
			rv = FB_EINVAL;
			goto done;
		}
		fprintf(r.step_times, "step,compute_ms,push_pull_ms\n");
	}

	fo.scheduler_url = cfg->scheduler;
	fo.rank          = cfg->rank;
	fo.timeout_ms    = cfg->timeout_ms;
	fo.mode = cfg->mode == TR_MODE_ASYNC ? FERRY_MODE_ASYNC : FERRY_MODE_SYNC;
	fo.lr           = cfg->lr;
	fo.codec_push   = cfg->codec_push;
	fo.codec_pull   = cfg->codec_pull;
	fo.bucket       = cfg->bucket;
	fo.warmup_steps = cfg->warmup_steps;
	fo.seed         = cfg->seed;
	if (ferry_opts_check(&fo, err, sizeof(err)) != FERRY_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "bad options: %s", err);
		rv = FB_EINVAL;
		goto done;
	}
	if ((fe = ferry_client_open(&fo, &r.fc)) != FERRY_OK) {
		rv = ferry_fail(&r, "open", fe);
		goto done;
	}
	for (size_t i = 0; i < w.n_tensors; i++) {
		tr_arch_tensor_name(a, i, names[i], sizeof(names[i]));
		descs[i].name = names[i];
		descs[i].len  = w.len[i];
	}
	if ((fe = ferry_client_declare(r.fc, descs, w.n_tensors)) != FERRY_OK) {
		rv = ferry_fail(&r, "declare", fe);
		goto done;
	}
	r.trainers = ferry_client_trainers(r.fc);
	rv = tr_partition_init(&part, r.train.n, cfg->rank, r.trainers,
	    cfg->seed);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "partition: rank %d of %d trainers: %s",
		    cfg->rank, r.trainers, fb_strerror(rv));
		goto done;
	}
	spe = tr_partition_steps(r.train.n, r.trainers, cfg->batch);
	if (spe == 0) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--batch %zu: larger than a partition (%zu samples over %d "
		    "trainers)",
		    cfg->batch, r.train.n, r.trainers);
		rv = FB_EINVAL;
		goto done;
	}
#ifdef TR_HAVE_CUDA
	for (size_t t = 0, off = 0; t < w.n_tensors; t++) {
		tbase[t] = off;
		off += w.len[t];
	}
	// With the CUDA backend and a pull codec the device can decode, the
	// pulls go to a sink that keeps the reference in the backend's device
	// weights (devpull.h): set before version 0, so that every pull,
	// warm-up and resyncs included, lands there.
	if (strcmp(r.be->ops->name, "cuda") == 0) {
		const struct ferry_shard *sh;
		struct ferry_pull_sink    sink;
		size_t                    ns;
		uint32_t                  cid, bucket, pid, pbucket;
		float                    *d_w;
		if (ferry_client_pull_codec(r.fc, &pid, &pbucket) == FERRY_OK &&
		    tr__devpull_supported(pid) &&
		    ferry_client_shards(r.fc, &sh, &ns, &cid, &bucket) ==
		        FERRY_OK) {
			if ((rv = tr__cuda_weights_device(r.be, &d_w)) != FB_OK ||
			    (rv = tr__devpull_open(d_w, tr__cuda_stream(r.be), sh,
			         ns, pid, pbucket, tbase, &dpull, err,
			         sizeof(err))) != FB_OK) {
				FB_LOG(FB_LOG_ERR, MOD, "device pull: %s", err);
				goto done;
			}
			tr__devpull_sink(dpull, &sink);
			if ((fe = ferry_client_set_pull_sink(r.fc, &sink)) !=
			    FERRY_OK) {
				rv = ferry_fail(&r, "set_pull_sink", fe);
				goto done;
			}
			r.sink_err = tr__devpull_error(dpull);
			dev_w      = 1;
			FB_LOG(FB_LOG_NOTICE, MOD, "pulled weights are decoded on "
			    "the device (%zu shards)", ns);
		}
	}
#endif
	if (cfg->rank == 0) {
		tr_params_randomize(&w, cfg->seed);
		fe = ferry_client_init_weights(r.fc, tr_params_cptrs(&w));
		if (fe != FERRY_OK) {
			rv = ferry_fail(&r, "init_weights", fe);
			goto done;
		}
	}
	if ((fe = ferry_client_pull(r.fc, w.t)) != FERRY_OK) {
		rv = ferry_fail(&r, "pull version 0", fe);
		goto done;
	}
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "rank %d of %d: %zu samples in partition, %zu steps per epoch, "
	    "%zu parameters, device %s",
	    cfg->rank, r.trainers, part.count, spe, w.total, cfg->device);
	if (!dev_w &&
	    (rv = tr_backend_set_weights(r.be, tr_params_cptrs(&w))) != FB_OK) {
		goto done;
	}

#ifdef TR_HAVE_CUDA
	// With the CUDA backend and a push codec the device can encode,
	// gradients are quantized on the GPU (devpush.h).
	if (strcmp(r.be->ops->name, "cuda") == 0) {
		const struct ferry_shard *sh;
		size_t                    ns;
		uint32_t                  cid, bucket;
		if (ferry_client_shards(r.fc, &sh, &ns, &cid, &bucket) ==
		        FERRY_OK &&
		    tr__devpush_supported(cid)) {
			if ((rv = tr__devpush_open(r.be, sh, ns, cid, bucket,
			         tbase, &dp, err, sizeof(err))) != FB_OK ||
			    (dcodes = fb_alloc(ns * sizeof(*dcodes))) == NULL) {
				FB_LOG(FB_LOG_ERR, MOD, "device push: %s", err);
				rv = rv != FB_OK ? rv : FB_ENOMEM;
				goto done;
			}
			FB_LOG(FB_LOG_NOTICE, MOD, "gradients are quantized on "
			    "the device (%zu shards)", ns);
		}
	}
#endif
	stop_requested = 0;
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
	r.t0 = fb_clock_ns();
	for (long e = 0; e < cfg->epochs && !stop; e++) {
		for (size_t k = 0; k < spe; k++) {
			const uint32_t *idx;
			double          loss;
			uint64_t        ts = fb_clock_ns(), tx = ts;
			if ((cfg->max_steps && r.step >= cfg->max_steps) ||
			    stop_requested) {
				stop = 1;
				break;
			}
			if ((rv = tr_partition_batch(&part, e, k, cfg->batch,
			         &idx)) != FB_OK) {
				FB_LOG(FB_LOG_ERR, MOD, "step %llu: %s",
				    (unsigned long long) r.step, fb_strerror(rv));
				goto done;
			}
#ifdef TR_HAVE_CUDA
			if (dp != NULL && !ferry_client_in_warmup(r.fc)) {
				// Gradient and quantization on the GPU: only
				// codes cross PCIe.
				float *d_grad;
				if ((rv = tr__cuda_grad_device(r.be, &r.train,
				         idx, cfg->batch, &d_grad, &loss)) !=
				        FB_OK ||
				    (rv = tr__devpush_encode(dp, d_grad,
				         dcodes)) != FB_OK) {
					FB_LOG(FB_LOG_ERR, MOD, "step %llu: %s",
					    (unsigned long long) r.step,
					    fb_strerror(rv));
					goto done;
				}
				tx = fb_clock_ns();
				fe = ferry_client_push_pull_encoded(r.fc, dcodes,
				    (uint32_t) cfg->batch, w.t);
				goto pushed;
			}
#endif
			if ((rv = tr_backend_grad(r.be, &r.train, idx,
			         cfg->batch, g.t, &loss)) != FB_OK) {
				FB_LOG(FB_LOG_ERR, MOD, "step %llu: %s",
				    (unsigned long long) r.step, fb_strerror(rv));
				goto done;
			}
			tx = fb_clock_ns();
			fe = ferry_client_push_pull(r.fc, tr_params_cptrs(&g),
			    (uint32_t) cfg->batch, w.t);
#ifdef TR_HAVE_CUDA
		pushed:
#endif
			if (r.step_times != NULL) {
				// stdio buffers: no allocation, no syscall per step
				uint64_t te = fb_clock_ns();
				fprintf(r.step_times, "%llu,%.4f,%.4f\n",
				    (unsigned long long) r.step,
				    (double) (tx - ts) * 1e-6,
				    (double) (te - tx) * 1e-6);
			}
			if (fe == FERRY_EBEHIND) {
				// Rejoined while a round finished without us:
				// take the job's weights and go on.
				FB_LOG(FB_LOG_NOTICE, MOD, "behind the job: %s; "
				    "pulling", ferry_client_last_error(r.fc));
				if ((fe = ferry_client_pull(r.fc, w.t)) ==
				        FERRY_OK &&
				    !dev_w &&
				    (rv = tr_backend_set_weights(r.be,
				         tr_params_cptrs(&w))) != FB_OK) {
					goto done;
				}
			}
			if (fe != FERRY_OK) {
				rv = ferry_fail(&r, "push_pull", fe);
				goto done;
			}
			if (!dev_w && (rv = tr_backend_set_weights(r.be,
			                   tr_params_cptrs(&w))) != FB_OK) {
				goto done;
			}
			r.step++;
			r.samples += cfg->batch;
			r.iv_loss += loss;
			r.iv_samples += cfg->batch;
			r.iv_steps++;
			r.iv_ns += fb_clock_ns() - ts;
			if (cfg->log_interval > 0 &&
			    r.step % (uint64_t) cfg->log_interval == 0 &&
			    (rv = report(&r)) != FB_OK) {
				goto done;
			}
		}
		if (r.last_report != r.step && (rv = report(&r)) != FB_OK) {
			goto done;
		}
	}
	if (r.step > 0 && r.last_report != r.step &&
	    (rv = report(&r)) != FB_OK) {
		goto done;
	}
	summary(&r, spe);
	if (stop_requested) {
		// Stopped early: do not leave the others waiting.
		FB_LOG(FB_LOG_NOTICE, MOD, "stopped by a signal; leaving the job");
		if ((fe = ferry_client_leave(r.fc)) != FERRY_OK) {
			FB_LOG(FB_LOG_WARN, MOD, "leave: %s: %s", ferry_strerror(fe),
			    ferry_client_last_error(r.fc));
		}
	}
#ifdef TR_HAVE_CUDA
	// The host copy of device-pulled weights is refreshed only here.
	if (cfg->weights_out != NULL && dpull != NULL &&
	    (rv = tr__devpull_fetch(dpull, w.t)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "--weights-out: copying the device "
		    "weights: %s", fb_strerror(rv));
		goto done;
	}
#endif
	if (cfg->weights_out != NULL &&
	    (rv = write_weights(cfg->weights_out, &w)) != FB_OK) {
		goto done;
	}
	rv = FB_OK;
done:
	if (r.curve != NULL) {
		fclose(r.curve);
	}
	if (r.step_times != NULL) {
		fclose(r.step_times);
	}
#ifdef TR_HAVE_CUDA
	tr__devpush_close(dp);
	tr__devpull_close(dpull);
	fb_free(dcodes);
#endif
	ferry_client_close(r.fc);
	tr_partition_fini(&part);
	tr_params_fini(&w);
	tr_params_fini(&g);
	tr_backend_free(r.be);
	tr_dataset_fini(&r.train);
	tr_dataset_fini(&r.test);
	return rv;
}
