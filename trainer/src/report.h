// report.h — what the training loop writes besides its log (private to
// tr): the progress lines, the --curve and --step-times CSV files, the
// final JSON summary and the --weights-out file. report.c has the formats.
#ifndef TR_REPORT_H
#define TR_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "ferry/ferry.h"
#include "tr/tr.h"

// The run's counters as the report sees them. The loop owns the struct
// and reads step (steps done) to decide when to report; everything else
// is updated through the functions below.
struct tr__report {
	FILE    *out;        // progress lines and the summary
	FILE    *curve;      // --curve CSV, or NULL
	FILE    *step_times; // --step-times CSV, or NULL
	uint64_t t0;         // ns at the first pulled version
	uint64_t step;       // job steps done (the version reached, sync)
	uint64_t resumed_at; // job step this process started at
	uint64_t steps_run;  // steps this process ran
	uint64_t samples;    // samples this process processed
	uint64_t dropped;    // pushes refused as late (--sync-quorum)
	uint64_t eval_ns;    // time spent evaluating
	// the current interval, since the last progress line
	double   iv_loss;
	uint64_t iv_samples, iv_steps, iv_ns;
	uint64_t last_report; // step of the last progress line
	double   test_loss, test_acc;
	int      have_test; // test_loss and test_acc hold a result
	// --model dlrm: samples of one job step (batch x trainers), and the
	// last evaluation's AUC and log loss (have_test set)
	uint64_t job_batch;
	double   auc, logloss;
	int      rank;         // this trainer's rank (given, with --rank any)
	uint64_t xchg_max_ns;  // the longest exchange of a step (0: unknown)
	uint64_t outer_rounds; // local steps: outer rounds done (local.c)
	uint64_t attacked;     // --attack: pushes falsified (attack.h)
};

// tr__report_open zeroes rep, points it at out, and creates the CSV files
// cfg asks for (--curve, --step-times), each with its header row.
// Errors: FB_EINVAL (a file cannot be created; logged with its flag and
// path). Release with tr__report_close either way.
int tr__report_open(struct tr__report *rep, const struct tr_config *cfg,
    FILE *out);

// tr__report_close closes the CSV files (not out).
void tr__report_close(struct tr__report *rep);

// tr__report_start marks the start of training at job step `at` (0, or
// where a rejoining trainer resumes): wall time counts from here.
void tr__report_start(struct tr__report *rep, uint64_t at);

// tr__report_step_time writes the --step-times row of the current step
// (started at ts ns, push-pull started at tx ns, finished now). Buffered
// by stdio: no allocation and no system call per step.
void tr__report_step_time(struct tr__report *rep, uint64_t ts, uint64_t tx);

// tr__report_step counts a finished step of n samples whose summed loss
// was loss and which took ns nanoseconds, after which the job is at job
// step `step` (one more than before, or further when a round finished
// without this trainer).
void tr__report_step(struct tr__report *rep, uint64_t step, size_t n,
    double loss, uint64_t ns);

// tr__report_test records an evaluation on the test set that took
// eval_ns nanoseconds; later progress lines and the summary show it.
void tr__report_test(struct tr__report *rep, double loss, double acc,
    uint64_t eval_ns);

// tr__report_ctr_test records an evaluation of the CTR model (--model
// dlrm) that took eval_ns nanoseconds: its AUC and log loss, shown by the
// next progress line, --curve row and the summary.
void tr__report_ctr_test(struct tr__report *rep, double auc, double logloss,
    uint64_t eval_ns);

// tr__report_ctr_progress is tr__report_progress for --model dlrm: one
// line with the interval's train loss, the last evaluation and the job's
// samples/s, and a --curve row `step,wall_s,samples,auc,logloss` (wall
// time and samples/s without evaluations; samples: the job's, every
// rank's).
void tr__report_ctr_progress(struct tr__report *rep);

// tr__report_progress prints one progress line and a --curve row, with
// bytes_pushed so far and lr, the learning rate of the next update
// (ferry_client_lr), and starts a new interval.
void tr__report_progress(struct tr__report *rep, uint64_t bytes_pushed,
    double lr);

// tr__report_summary prints the final JSON summary line for a run of
// cfg among `trainers` trainers, steps_per_epoch steps an epoch (--model
// dlrm: "model", "auc", "logloss", and samples, wall_s and samples_per_s
// are the job's without evaluations), with
// libferry's byte counts st and, from fc (NULL: none), each server
// link's codecs and payload bytes per step ("links"; with codec "auto"
// also a "links |" line before it, for people).
void tr__report_summary(struct tr__report *rep, const struct tr_config *cfg,
    int trainers, size_t steps_per_epoch, const struct ferry_stats *st,
    const ferry_client *fc);

// tr__report_weights saves w to path as raw float32 (host order), tensor
// after tensor. Errors: FB_EINVAL (cannot write; logged with the path).
int tr__report_weights(const char *path, const struct tr_params *w);

#endif // TR_REPORT_H
