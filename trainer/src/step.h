// step.h — one training run and its steps (private to tr). train.c sets
// a run up, drives the plain loop and tears it down (run.c has what the
// CTR loop, dlrm_train.c, shares with it); step.c has the plain
// loop's step and the step end both loops take (rollback, behind, new
// weights, report); overlap.c has the loop with one-step delayed weights.
#ifndef TR_STEP_H
#define TR_STEP_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "attack.h"
#include "ferry/ferry.h"
#include "metrics.h"
#include "ondevice.h"
#include "report.h"
#include "tr/tr.h"

// One training run: what set-up made, what the steps use, what teardown
// releases. train.c owns it.
struct tr__run {
	const struct tr_config        *cfg;
	struct tr_backend             *be;
	const struct tr__ondevice_ops *dev; // backend's on-device path or NULL
	ferry_client                  *fc;
	struct tr_dataset              train, test;
	struct tr_params               w, g;
	struct tr_partition            part;
	int                            trainers;
	int         rank; // cfg->fo.rank, or the rank the scheduler gave (any)
	size_t      steps_per_epoch;
	uint64_t    total; // job steps to run
	uint64_t    start; // job step to start at
	// tensor t starts tensor_base[t] floats into the parameter block
	size_t      tensor_base[TR_MAX_TENSORS];
	void       *dev_push; // on-device gradient encoder, or NULL
	void       *dev_pull; // on-device pull sink (weights on the device)
	const char *sink_err; // the device pull's reason, or NULL
	struct tr__report      rep;
	struct tr__metrics     met;      // the HTTP endpoints (--http-listen)
	char                   err[512]; // the reason of a failed set-up call
	int                    layer_fe; // --overlap-layers: a start's error
	struct ferry_recovery  recovery; // libferry's, as last logged
	// Data leases (lease.c): on when --leases says so, or auto and the
	// job is elastic; then part is unused and lc walks the held lease.
	int                    leased;
	int                    left; // left the job while idle (no lease)
	// Set by SIGINT/SIGTERM from start-up on (tr__run_catch_signals).
	volatile sig_atomic_t *stop;
	int                    stale;  // idle: pull before the next gradient
	int                    shut;   // idle, and its rank could not rejoin
	size_t                 step_n; // samples of this step (0: --batch)
	struct tr_lease_cursor lc;
	uint64_t               t_start_ns;   // the run's start
	uint64_t               t_declare_ns; // registration (declare) start
	uint64_t               xchg_max_ns;  // longest exchange of a step
	// --attack (benchmarks and tests only, attack.h): zeroed when
	// honest; made after the partition (tr__run_open_attack)
	struct tr__attack      atk;
};

// tr__run_lockstep reports whether versions are job steps: sync mode, and
// SSP with --staleness 0 (which runs the sync rounds). SSP with K > 0
// counts each trainer's own steps, as async mode does.
int tr__run_lockstep(const struct tr_config *cfg);

// tr__scale_for_members applies --lr-scale-trainers N to the summed
// gradient g: scaled by the live trainers of the client's map over N, so
// that the step follows the linear scaling rule as the job grows and
// shrinks (docs/algorithms.md §6.4). No-op when N is 0.
void tr__scale_for_members(struct tr__run *r, struct tr_params *g);

// tr__run_failed logs a failed libferry call op with libferry's code
// name, its last message and the pull sink's reason, and returns
// FB_EREMOTE: the trainer reports libferry's failures, it does not
// translate them.
int tr__run_failed(struct tr__run *r, const char *op, int fe);

// run.c: what both loops (train.c's, dlrm_train.c's) do around steps.

// tr__run_open_client checks the job's and the client's options
// (cfg->fo), opens the libferry client into r->fc with the trainer's log
// hook and reads --secret-file. Errors: FB_EINVAL (bad options, logged),
// FB_EREMOTE (a failed libferry call, logged).
int tr__run_open_client(struct tr__run *r);

// tr__run_catch_signals makes SIGINT and SIGTERM set the flag it returns
// (cleared here) instead of killing the process: the loop stops between
// steps and the trainer leaves the job (tr__run_end).
volatile sig_atomic_t *tr__run_catch_signals(void);

// tr__run_end ends a run whose loop returned rv: it arms the exit
// watchdog (leaving and teardown may hang on a dead peer) and, when the
// run trained (its outputs are written), leaves the job so that the other
// ranks' sync rounds do not wait for this one.
void tr__run_end(struct tr__run *r, int rv, int trained);

// tr__run_given_rank sets r->rank once declare returned (the rank the
// scheduler gave for --rank any, logged), and whether the run takes data
// leases (r->leased).
void tr__run_given_rank(struct tr__run *r);

// tr__run_leased reports whether the run takes its batches from data
// leases: --leases on, or auto in an elastic job (after declare).
int tr__run_leased(const struct tr__run *r);

// tr__train_leased is the loop of a run with leases (lease.c): each batch
// the next positions of the held lease, marked before its step, until the
// scheduler says every epoch is consumed (then, in sync mode, the weights
// are evaluated when this trainer was in the last rounds) or a signal
// (the step finishes and the lease goes back). An idle trainer leaves the
// sync rounds until it gets a lease again.
int tr__train_leased(struct tr__run *r, volatile sig_atomic_t *stop);

// tr__train_local is the loop of a local-steps run (--local-steps H,
// local.c): inner steps on the trainer's own weights from r->rep.step,
// an outer round (or a fragment's) when due, until the job's last inner
// step or a signal; r->w ends as the global weights.
int tr__train_local(struct tr__run *r, volatile sig_atomic_t *stop);

// tr__local_start returns the inner step a local-steps run starts at when
// it holds the job's version `version` (r->total set): version H in
// lockstep (a version is an outer round), capped at the last step; 0
// otherwise.
uint64_t tr__local_start(const struct tr__run *r, uint64_t version);

// tr__dlrm_train_run is tr_train_run for --model dlrm (dlrm_train.c).
int tr__dlrm_train_run(const struct tr_config *cfg, FILE *out);

// tr__run_set_weights hands the pulled host weights w to the backend,
// unless they were pulled straight into it (r->dev_pull).
int tr__run_set_weights(struct tr__run *r, const struct tr_params *w);

// tr__run_open_device_push prepares on-device gradient encoding when the
// backend can encode the job's push codec; r->dev_push stays NULL when it
// cannot (the host path). Released by r->dev->push_close.
int tr__run_open_device_push(struct tr__run *r);

// tr__run_report prints a progress line; rank 0 evaluates on the test
// set first.
int tr__run_report(struct tr__run *r);

// struct tr__step_times is when a step's parts ran, for --step-times, the
// progress lines and the metrics: its gradient from start_ns, its
// push-pull from xchg_ns to end_ns (0: when the step end has set the new
// weights, as the plain loop counts it). Its period runs from since_ns:
// the plain loop's step start, the overlapped loop's step before's end.
struct tr__step_times {
	uint64_t since_ns, start_ns, xchg_ns, end_ns;
};

// tr__step_end finishes a step of epoch e (summed loss `loss`, times t)
// whose push-pull returned fe into w (r->w, or the overlapped loop's spare
// buffer): after a rollback it pulls the job's version and, in lockstep,
// moves the job step back to it (the step is not counted); when the job
// went on without this trainer it pulls the job's weights into w; then it
// sets the backend's weights from w, counts the step and prints a
// progress line every --log-interval steps and at an epoch's end.
// Returns FB_OK, a local FB_E* code, or FB_EREMOTE (logged).
int tr__step_end(struct tr__run *r, int fe, struct tr_params *w, long e,
    double loss, const struct tr__step_times *t);

// tr__run_open_attack prepares --attack's state in r->atk once the rank
// and the partition are known (a no-op when honest). Errors: FB_EINVAL
// (an attack in a run that takes data leases, which config.c cannot see
// coming with --leases auto), FB_ENOMEM; logged.
int tr__run_open_attack(struct tr__run *r);

// tr__step runs the plain loop's step: minibatch k of epoch e, claimed as
// data step e * steps_per_epoch + k (ferry_client_data_step, for spot
// checks), gradient (--attack: falsified with --attack-rate's odds),
// push-pull into r->w, then tr__step_end.
int tr__step(struct tr__run *r, long e, size_t k);

#endif // TR_STEP_H
