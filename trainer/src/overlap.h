// overlap.h — `--overlap 1` (private to tr): one-step delayed weights.
// overlap.c has the loop that computes step s+1's gradient on version s
// while step s's push-pull runs, and the communication thread that runs
// those push-pulls. train.c hands it its run; step.c ends its steps.
#ifndef TR_OVERLAP_H
#define TR_OVERLAP_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "step.h"

// tr__train_overlapped runs r's job steps from r->rep.step to r->total
// (or until *stop is set, by SIGINT/SIGTERM) with one-step delayed weights
// (docs/algorithms.md §6.3), each ended by tr__step_end as the plain
// loop's are, and leaves the newest version in r->w (and the backend).
// Returns FB_OK, a local FB_E* code, or FB_EREMOTE (logged).
int tr__train_overlapped(struct tr__run *r, const volatile sig_atomic_t *stop);

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
