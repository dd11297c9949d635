// pair.h — what the cluster suites (test_training.c, test_rejoin.c,
// test_bad_input.c, test_codecs.c, test_placement.c, test_moves.c) share:
// two trainer threads (harness.h's pt_rank) run on a cluster and compared
// bit for bit, the wait for every server to apply the scheduler's map,
// and a link report sent raw.
#ifndef PS_PAIR_H
#define PS_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "harness.h"

// A run of two trainer threads on a cluster already started.
struct pair_opts {
	int         steps;
	const char *push, *pull;
	uint32_t    warmup;
	int         encoded;               // rank 0 and 1 encode pushes
	void (*hook)(void *arg, int step); // rank 0's hook, every hook_at
	void *hook_arg;                    // steps after the first, if any
	int   hook_at;
};

// pair_link_budget is every trainer's opts.link_budget in train_pair
// (codec "auto"; set by the test that uses it, 0 otherwise).
extern double pair_link_budget;

// servers_caught_up waits (5 s at most) until every server of cl has
// applied the scheduler's current map.
void servers_caught_up(struct cluster *cl);

// move_all is a pair_opts hook (arg: the cluster): it re-places every
// shard on the other server and waits until the servers have the new map.
void move_all(void *arg, int step);

// train_pair trains ranks 0 and 1 on cl with o and checks they succeeded.
void train_pair(struct cluster *cl, struct pt_rank a[2],
    const struct pair_opts *o);

// run_pair_hook trains 2 trainers x 2 servers for K steps with the
// codecs; with move_at > 0 rank 0 moves every shard every move_at steps.
void run_pair_hook(struct pt_rank a[2], int K, const char *push,
    const char *pull, uint32_t warmup, int move_at);

// run_pair is run_pair_hook without moves.
void run_pair(struct pt_rank a[2], int K, const char *push, const char *pull,
    uint32_t warmup);

// same_weights checks that two runs ended with bit-identical weights.
void same_weights(struct pt_rank x[2], struct pt_rank y[2]);

// raw_report sends rank's link measurements for n servers to the
// scheduler at url and returns the reply's status.
int raw_report(const char *url, uint32_t rank, size_t n, double *rtt,
    double *bw);

#endif // PS_PAIR_H
