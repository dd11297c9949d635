// overlap.h — `--overlap 1` (private to tr): one-step delayed weights.
// overlap.c has the loop that computes step s+1's gradient on version s
// while step s's push-pull runs, and the communication thread that runs
// those push-pulls. train.c hands it its run through struct tr__ov_run.
#ifndef TR_OVERLAP_H
#define TR_OVERLAP_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "metrics.h"
#include "report.h"
#include "tr/tr.h"

// What the overlapped loop borrows from train.c's run: its parts, and the
// three steps train.c takes the same way in both loops (arg is train.c's
// run): failed logs a failed libferry call op and returns FB_EREMOTE;
// next_step returns the job step reached after a step; report prints a
// progress line (rank 0 evaluates first).
struct tr__ov_run {
	const struct tr_config  *cfg;
	struct tr_backend       *be;
	ferry_client            *fc;
	const struct tr_dataset *train;
	struct tr_partition     *part;
	struct tr_params        *w, *g; // the backend reads w; g is scratch
	struct tr__report       *rep;
	struct tr__metrics      *met;
	size_t                   steps_per_epoch;
	uint64_t                 total; // job steps in all
	volatile sig_atomic_t   *stop;  // set by SIGINT/SIGTERM
	void                    *arg;
	int (*failed)(void *arg, const char *op, int fe);
	uint64_t (*next_step)(void *arg);
	int (*report)(void *arg);
};

// tr__train_overlapped runs job steps from o->rep->step to o->total (or a
// signal) with one-step delayed weights (docs/algorithms.md §6.3), with
// the same reports as train.c's loop, and leaves the newest version in
// o->w (and the backend). Returns FB_OK, a local FB_E* code, or
// o->failed's.
int tr__train_overlapped(const struct tr__ov_run *o);

// A libferry client is used by one thread at a time: between
// tr__comm_push_pull and tr__comm_wait it belongs to the communication
// thread, and the training thread must not call it; otherwise it is the
// training thread's. The mutex hand-off orders the two threads' accesses.
struct tr__comm {
	pthread_t           th;
	pthread_mutex_t     mu;
	pthread_cond_t      cv;
	ferry_client       *fc;
	const float *const *g; // the queued push-pull's arguments
	uint32_t            n;
	float *const       *w;
	int                 state;   // enum in overlap.c
	int                 fe;      // the finished push-pull's ferry_err
	uint64_t            end_ns;  // when it finished (fb_clock_ns)
	int                 running; // th was started
};

// tr__comm_open starts the communication thread for fc (which it does not
// own). Errors: FB_ENOMEM (no thread). Release with tr__comm_close,
// which is safe on a zeroed struct.
int tr__comm_open(struct tr__comm *c, ferry_client *fc);

// tr__comm_push_pull hands ferry_client_push_pull(fc, g, n, w) to the
// communication thread and returns at once. g and w must stay untouched
// by the caller until tr__comm_wait returns; at most one call in flight.
void tr__comm_push_pull(struct tr__comm *c, const float *const *g, uint32_t n,
    float *const *w);

// tr__comm_wait blocks until the push-pull in flight is done, gives the
// client back to the caller and returns its ferry_err; *end_ns (may be
// NULL) gets the time it finished.
int tr__comm_wait(struct tr__comm *c, uint64_t *end_ns);

// tr__comm_close waits for a push-pull in flight, stops the thread and
// releases c. Safe twice and on a zeroed struct.
void tr__comm_close(struct tr__comm *c);

#endif // TR_OVERLAP_H
