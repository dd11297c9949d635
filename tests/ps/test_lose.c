// test_lose.c — a job without replicas or snapshots that loses a server
// (in-process, libferry trainers of harness.h): the trainers wait for the
// map that gives the dead server's shards a home again, offer their copies
// to the re-seed, and the job goes on. In sync mode with SGD and a
// lossless pull the weights equal a run where nothing failed, bit for bit
// (issue: "lose a server, keep the job").
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "cluster.h"
#include "harness.h"
#include "ps_tests.h"
#include "pt.h"

// DEAD_AFTER_MS: the liveness the tests run with (the scheduler declares a
// silent server dead after it; servers heartbeat 5 times in it).
#define DEAD_AFTER_MS 600

// The fault rank 0 injects before step kill_at (ctx of its pt_rank).
struct lose_fault {
	struct cluster *cl;
	int             kill_at;
	int             restart; // start a server again on the same URL
};

// lose_server is rank 0's before_step: server 1 dies (no Leave: its
// heartbeats stop, its sockets close with whatever was parked on them);
// with restart a new, empty server comes up on the same URL.
static void
lose_server(struct pt_rank *base, int k)
{
	struct lose_fault *f = base->ctx;
	char               url[64];
	if (k != f->kill_at) {
		return;
	}
	snprintf(url, sizeof(url), "%s", ps_server_url(f->cl->srv[1]));
	ps_server_close(f->cl->srv[1]);
	f->cl->srv[1] = NULL;
	if (f->restart) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		o.url                   = url;
		o.scheduler_url         = ps_scheduler_url(f->cl->sched);
		o.max_msg               = 1u << 20;
		o.heartbeat_ms          = DEAD_AFTER_MS / 5;
		PT_OK(ps_server_open(&o, &f->cl->srv[1]));
	}
}

// lose_run trains 2 ranks for `steps` steps on 2 servers (codec for both
// directions, NULL: none); kill_at > 0 loses server 1 before that step of
// rank 0, restarted on its URL with restart. Fails the test unless both
// ranks finish.
static void
lose_run(struct pt_rank a[2], const char *codec, int steps, int kill_at,
    int restart)
{
	struct cluster    cl;
	struct lose_fault f = { &cl, kill_at, restart };
	cluster_open_replicas(&cl, 2, 2, PS_PLACEMENT_UNIFORM, 1,
	    DEAD_AFTER_MS);
	memset(a, 0, 2 * sizeof(*a));
	for (int r = 0; r < 2; r++) {
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].steps = steps;
		a[r].codec = codec;
	}
	if (kill_at > 0) {
		a[0].before_step = lose_server;
		a[0].ctx         = &f;
	}
	pt_ranks_train(a, 2);
	cluster_stop(&cl);
}

// same_weights checks that two runs' ranks ended with bit-identical
// weights.
static void
same_weights(const struct pt_rank x[2], const struct pt_rank y[2])
{
	for (int r = 0; r < 2; r++) {
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(x[r].w[t], y[r].w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "rank %d tensor %d differs from the fault-free run",
			    r, t);
		}
	}
}

// A server killed mid-job and started again empty on its URL takes its
// slot back; its shards are re-seeded from the trainers' copies, and the
// job ends with the weights of a fault-free run. Both trainers offered
// their copies.
START_TEST(test_lose_server_restarted_on_its_url)
{
	struct pt_rank ref[2], got[2];
	lose_run(ref, NULL, 24, 0, 0);
	lose_run(got, NULL, 24, 10, 1);
	same_weights(ref, got);
	for (int r = 0; r < 2; r++) {
		ck_assert_uint_eq(got[r].stats.version, 24);
		ck_assert_uint_ge(got[r].recovery.seeds_offered, 1);
	}
	// Rank 1 was in a step when the server died; rank 0, which killed it
	// between steps, may find the new one already listening there.
	ck_assert_uint_ge(got[1].recovery.server_losses, 1);
}
END_TEST

// A server killed mid-job and never back: once it is declared dead its
// shards are re-seeded on the survivor, and the job ends with the weights
// of a fault-free run.
START_TEST(test_lose_server_reseeded_on_survivor)
{
	struct pt_rank ref[2], got[2];
	lose_run(ref, NULL, 24, 0, 0);
	lose_run(got, NULL, 24, 10, 0);
	same_weights(ref, got);
	ck_assert_uint_ge(
	    got[0].recovery.seeds_offered + got[1].recovery.seeds_offered, 1);
}
END_TEST

// With a pull codec the re-seed takes the reference both sides kept (not
// the server's exact weights, which died with it): the job finishes and
// both ranks hold the same weights.
START_TEST(test_lose_server_with_a_pull_codec)
{
	struct pt_rank got[2];
	lose_run(got, "q8", 24, 10, 1);
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(memcmp(got[0].w[t], got[1].w[t],
		                  lens[t] * sizeof(float)) == 0,
		    "the ranks' tensor %d differs", t);
	}
	ck_assert_uint_eq(got[0].stats.version, 24);
}
END_TEST

Suite *
suite_lose(void)
{
	Suite *s  = suite_create("lose");
	TCase *tc = tcase_create("lose_server");

	// A server lost without replicas or snapshots: the job goes on.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_lose_server_restarted_on_its_url);
	tcase_add_test(tc, test_lose_server_reseeded_on_survivor);
	tcase_add_test(tc, test_lose_server_with_a_pull_codec);
	suite_add_tcase(s, tc);
	return s;
}
