// report.c — the training loop's outputs besides its log: the progress
// lines, the --curve and --step-times CSV files, the final JSON summary
// and the --weights-out file (see report.h).
//
// Formats. Every --log-interval steps and at the end of each epoch one line
//   step 100 | train_loss 0.7557 | test_loss 0.7426 | test_acc 0.8123 |
//   step 2.1 ms | sent 0.93 MB
// where train_loss is the mean loss of the interval's minibatches (at the
// weights they were computed on), step is the mean step time of the
// interval (evaluation excluded) and sent is the cumulative bytes pushed;
// the test fields appear once an evaluation was recorded (rank 0 only).
// --curve FILE gets the same as a CSV row; --step-times FILE one row per
// step: the compute time (minibatch and gradient, on the device: also its
// encoding) and the push-pull time. The last line of out is a JSON
// summary; samples_per_s = samples this trainer processed / wall_s, where
// wall_s runs from the first pulled version to the last step and includes
// rank 0's evaluations (reported separately as eval_s). --model dlrm's
// lines show AUC and log loss instead (`step 100 | train_loss 0.4712 |
// auc 0.7401 | logloss 0.4690 | step 3.2 ms | 41230 samples/s`), its
// curve is `step,wall_s,samples,auc,logloss`, and its summary adds
// "model", "auc" and "logloss" and counts the job's samples (every
// rank's) over wall_s WITHOUT the evaluations, as CTR benchmarks compare
// systems.
//
// Steps are job steps everywhere (lines, CSVs, the summary's "steps" and
// "epochs"): in sync mode the version the trainer holds, so a trainer that
// rejoined at version 300 prints step 301 after its first step. The
// summary adds "resumed_at" (the job step this process started at, 0 for
// a fresh start), "steps_run" (the steps this process ran: "samples" and
// samples_per_s count those) and "version" (the version held at the end),
// then "staleness" (--staleness), "staleness_mean" and "staleness_max"
// (over this process's pulls: how many clocks the slowest trainer's
// pushes in the weights it read lagged its own clock; 0 in sync mode) and
// "dropped_pushes" (pushes refused as late for a round a --sync-quorum
// closed). With --local-steps (local.c) steps are inner steps, test
// figures are the global weights' at outer-round ends, and "local_steps",
// "fragments" and "outer_rounds" say so (0, 1, 0 for a per-step run);
// "bytes_sent" and "bytes_received" repeat libferry's byte counts under
// the names the benchmarks read. "attack" is --attack ("none" when honest)
// and "attacked_steps" the pushes it falsified (benchmarks of robust
// aggregation, attack.h).
#include <math.h>
#include <string.h>

#include "report.h"
#include "tr_impl.h"

#define MOD "train"

int
tr__report_open(struct tr__report *rep, const struct tr_config *cfg, FILE *out)
{
	memset(rep, 0, sizeof(*rep));
	rep->out = out;
	if (cfg->curve != NULL) {
		if ((rep->curve = fopen(cfg->curve, "w")) == NULL) {
			FB_LOG(FB_LOG_ERR, MOD, "--curve %s: cannot open",
			    cfg->curve);
			return FB_EINVAL;
		}
		fprintf(rep->curve, "%s\n",
		    cfg->model == TR_MODEL_DLRM
		        ? "step,wall_s,samples,auc,logloss"
		        : "step,wall_s,train_loss,test_loss,test_acc,"
		          "bytes_sent");
	}
	if (cfg->step_times != NULL) {
		if ((rep->step_times = fopen(cfg->step_times, "w")) == NULL) {
			FB_LOG(FB_LOG_ERR, MOD, "--step-times %s: cannot open",
			    cfg->step_times);
			return FB_EINVAL;
		}
		fprintf(rep->step_times, "step,compute_ms,push_pull_ms\n");
	}
	return FB_OK;
}

void
tr__report_close(struct tr__report *rep)
{
	if (rep->curve != NULL) {
		fclose(rep->curve);
		rep->curve = NULL;
	}
	if (rep->step_times != NULL) {
		fclose(rep->step_times);
		rep->step_times = NULL;
	}
}

void
tr__report_start(struct tr__report *rep, uint64_t at)
{
	rep->t0          = fb_clock_ns();
	rep->step        = at;
	rep->resumed_at  = at;
	rep->last_report = at;
}

void
tr__report_step_time(struct tr__report *rep, uint64_t ts, uint64_t tx)
{
	if (rep->step_times != NULL) {
		uint64_t te = fb_clock_ns();
		fprintf(rep->step_times, "%llu,%.4f,%.4f\n",
		    (unsigned long long) rep->step, (double) (tx - ts) * 1e-6,
		    (double) (te - tx) * 1e-6);
	}
}

void
tr__report_step(struct tr__report *rep, uint64_t step, size_t n, double loss,
    uint64_t ns)
{
	rep->step = step;
	rep->steps_run++;
	rep->samples += n;
	rep->iv_loss += loss;
	rep->iv_samples += n;
	rep->iv_steps++;
	rep->iv_ns += ns;
}

void
tr__report_test(struct tr__report *rep, double loss, double acc,
    uint64_t eval_ns)
{
	rep->test_loss = loss;
	rep->test_acc  = acc;
	rep->have_test = 1;
	rep->eval_ns += eval_ns;
}

void
tr__report_ctr_test(struct tr__report *rep, double auc, double logloss,
    uint64_t eval_ns)
{
	rep->auc       = auc;
	rep->logloss   = logloss;
	rep->have_test = 1;
	rep->eval_ns += eval_ns;
}

// train_wall is the seconds since training began less the evaluations.
static double
train_wall(const struct tr__report *rep)
{
	return (double) (fb_clock_ns() - rep->t0 - rep->eval_ns) * 1e-9;
}

void
tr__report_ctr_progress(struct tr__report *rep)
{
	double   wall = train_wall(rep);
	uint64_t js   = rep->steps_run * rep->job_batch;
	double   loss, step_ms;
	step_ms = rep->iv_steps
	    ? (double) rep->iv_ns * 1e-6 / (double) rep->iv_steps
	    : 0.0;
	loss = rep->iv_samples ? rep->iv_loss / (double) rep->iv_samples : NAN;
	fprintf(rep->out, "step %llu | train_loss %.4f",
	    (unsigned long long) rep->step, loss);
	if (rep->have_test) {
		fprintf(rep->out, " | auc %.4f | logloss %.4f", rep->auc,
		    rep->logloss);
	}
	fprintf(rep->out, " | step %.1f ms | %.0f samples/s\n", step_ms,
	    wall > 0 ? (double) js / wall : 0.0);
	fflush(rep->out);
	if (rep->curve != NULL) {
		fprintf(rep->curve, "%llu,%.6f,%llu,",
		    (unsigned long long) rep->step, wall,
		    (unsigned long long) js);
		if (rep->have_test) {
			fprintf(rep->curve, "%.6f,%.6f\n", rep->auc,
			    rep->logloss);
		} else {
			fprintf(rep->curve, ",\n");
		}
		fflush(rep->curve);
	}
	rep->iv_loss    = 0.0;
	rep->iv_samples = rep->iv_steps = rep->iv_ns = 0;
	rep->last_report                             = rep->step;
}

void
tr__report_progress(struct tr__report *rep, uint64_t bytes_pushed, double lr)
{
	double wall, step_ms, loss;
	wall    = (double) (fb_clock_ns() - rep->t0) * 1e-9;
	step_ms = rep->iv_steps
	    ? (double) rep->iv_ns * 1e-6 / (double) rep->iv_steps
	    : 0.0;
	loss = rep->iv_samples ? rep->iv_loss / (double) rep->iv_samples : NAN;
	fprintf(rep->out, "step %llu | train_loss %.4f",
	    (unsigned long long) rep->step, loss);
	if (rep->have_test) {
		fprintf(rep->out, " | test_loss %.4f | test_acc %.4f",
		    rep->test_loss, rep->test_acc);
	}
	fprintf(rep->out, " | lr %.6g | step %.1f ms | sent %.2f MB\n", lr,
	    step_ms, (double) bytes_pushed * 1e-6);
	fflush(rep->out);
	if (rep->curve != NULL) {
		fprintf(rep->curve, "%llu,%.6f,%.6f,",
		    (unsigned long long) rep->step, wall, loss);
		if (rep->have_test) {
			fprintf(rep->curve, "%.6f,%.6f,", rep->test_loss,
			    rep->test_acc);
		} else {
			fprintf(rep->curve, ",,");
		}
		fprintf(rep->curve, "%llu\n",
		    (unsigned long long) bytes_pushed);
		fflush(rep->curve);
	}
	rep->iv_loss    = 0.0;
	rep->iv_samples = rep->iv_steps = rep->iv_ns = 0;
	rep->last_report                             = rep->step;
}

// report_links prints, with codec "auto", one line naming each server
// link's codecs and payload bytes per step.
static void
report_links(struct tr__report *rep, const struct tr_config *cfg,
    const ferry_client *fc)
{
	struct ferry_link l;
	if (fc == NULL ||
	    (strcmp(cfg->fo.codec_push, "auto") != 0 &&
	        strcmp(cfg->fo.codec_pull, "auto") != 0)) {
		return;
	}
	fprintf(rep->out, "links");
	for (size_t m = 0; ferry_client_link(fc, m, &l) == FERRY_OK; m++) {
		fprintf(rep->out,
		    " | %s: push %s %.1f kB/step, pull %s %.1f kB/step (%.1f "
		    "MB/s, rtt %.2f ms)",
		    l.server, l.codec_push, l.push_bytes_per_step * 1e-3,
		    l.codec_pull, l.pull_bytes_per_step * 1e-3,
		    l.bw_bps * 1e-6, l.rtt_s * 1e3);
	}
	fprintf(rep->out, "\n");
}

void
tr__report_summary(struct tr__report *rep, const struct tr_config *cfg,
    int trainers, size_t steps_per_epoch, const struct ferry_stats *st,
    const ferry_client *fc)
{
	double            wall = (double) (fb_clock_ns() - rep->t0) * 1e-9;
	struct ferry_link l;
	uint64_t          samples = rep->samples;
	report_links(rep, cfg, fc);
	if (cfg->model == TR_MODEL_DLRM) {
		// The job's samples and time training (quality figures
		// compare systems at equal samples, evaluations aside).
		samples = rep->steps_run * rep->job_batch;
		wall    = train_wall(rep);
	}
	fprintf(rep->out,
	    "{\"summary\": {\"epochs\": %.6g, \"steps\": %llu, \"samples\": "
	    "%llu, \"wall_s\": %.3f, \"samples_per_s\": %.1f, ",
	    steps_per_epoch ? (double) rep->step / (double) steps_per_epoch
	                    : 0.0,
	    (unsigned long long) rep->step, (unsigned long long) samples, wall,
	    wall > 0 ? (double) samples / wall : 0.0);
	if (cfg->model == TR_MODEL_DLRM) {
		fprintf(rep->out, "\"model\": \"dlrm\", ");
		if (rep->have_test) {
			fprintf(rep->out, "\"auc\": %.6f, \"logloss\": %.6f, ",
			    rep->auc, rep->logloss);
		}
	} else if (rep->have_test) {
		fprintf(rep->out, "\"test_acc\": %.4f, \"test_loss\": %.4f, ",
		    rep->test_acc, rep->test_loss);
	}
	fprintf(rep->out,
	    "\"bytes_pushed\": %llu, \"bytes_pulled\": %llu, \"rank\": %d, "
	    "\"trainers\": %d, \"eval_s\": %.3f, \"batch\": %zu, \"mode\": "
	    "\"%s\", \"device\": \"%s\", \"resumed_at\": %llu, "
	    "\"steps_run\": %llu, \"version\": %llu, \"staleness\": %u, "
	    "\"staleness_mean\": %.3f, \"staleness_max\": %llu, "
	    "\"dropped_pushes\": %llu, ",
	    (unsigned long long) st->bytes_pushed,
	    (unsigned long long) st->bytes_pulled, rep->rank, trainers,
	    (double) rep->eval_ns * 1e-9, cfg->batch,
	    cfg->fo.mode == TR_MODE_SSP         ? "ssp"
	        : cfg->fo.mode == TR_MODE_ASYNC ? "async"
	                                        : "sync",
	    cfg->device, (unsigned long long) rep->resumed_at,
	    (unsigned long long) rep->steps_run,
	    (unsigned long long) st->version, cfg->fo.staleness,
	    st->pulls ? (double) st->staleness_sum / (double) st->pulls : 0.0,
	    (unsigned long long) st->staleness_max,
	    (unsigned long long) rep->dropped);
	if (rep->xchg_max_ns != 0) {
		fprintf(rep->out, "\"xchg_max_ms\": %.1f, ",
		    (double) rep->xchg_max_ns * 1e-6);
	}
	struct ferry_recovery rc;
	ferry_client_recovery(fc, &rc);
	fprintf(rep->out,
	    "\"local_steps\": %u, \"fragments\": %u, \"outer_rounds\": "
	    "%llu, \"bytes_sent\": %llu, \"bytes_received\": %llu, ",
	    cfg->local_steps, cfg->local_steps > 0 ? cfg->fragments : 1,
	    (unsigned long long) rep->outer_rounds,
	    (unsigned long long) st->bytes_pushed,
	    (unsigned long long) st->bytes_pulled);
	fprintf(rep->out, "\"attack\": \"%s\", \"attacked_steps\": %llu, ",
	    cfg->attack != NULL ? cfg->attack : "none",
	    (unsigned long long) rep->attacked);
	fprintf(rep->out,
	    "\"server_losses\": %llu, \"pushes_skipped\": %llu, "
	    "\"seeds_offered\": %llu, \"links\": [",
	    (unsigned long long) rc.server_losses,
	    (unsigned long long) rc.pushes_skipped,
	    (unsigned long long) rc.seeds_offered);
	for (size_t m = 0;
	     fc != NULL && ferry_client_link(fc, m, &l) == FERRY_OK; m++) {
		fprintf(rep->out,
		    "%s{\"server\": \"%s\", \"codec_push\": \"%s\", "
		    "\"codec_pull\": \"%s\", \"push_bytes_per_step\": %.0f, "
		    "\"pull_bytes_per_step\": %.0f, \"bw_bps\": %.0f, "
		    "\"rtt_ms\": %.3f}",
		    m ? ", " : "", l.server, l.codec_push, l.codec_pull,
		    l.push_bytes_per_step, l.pull_bytes_per_step, l.bw_bps,
		    l.rtt_s * 1e3);
	}
	fprintf(rep->out, "]}}\n");
	fflush(rep->out);
}

int
tr__report_weights(const char *path, const struct tr_params *w)
{
	FILE *f  = fopen(path, "wb");
	int   ok = f != NULL;
	for (size_t i = 0; ok && i < w->n_tensors; i++) {
		ok = fwrite(w->t[i], sizeof(float), w->len[i], f) == w->len[i];
	}
	if (f != NULL && fclose(f) != 0) {
		ok = 0;
	}
	if (!ok) {
		FB_LOG(FB_LOG_ERR, MOD, "--weights-out %s: cannot write",
		    path);
		return FB_EINVAL;
	}
	return FB_OK;
}
