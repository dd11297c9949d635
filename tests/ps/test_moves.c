// test_moves.c — shards moving between in-process servers while two
// trainer threads train (pair.h): re-placement, servers that leave and
// join, back-to-back maps and re-sent requests lose nothing: the weights
// are bit-identical to a run without moves.
#include <pthread.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "fb/fb.h"
#include "harness.h"
#include "pair.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

struct leave_ctx {
	struct cluster *cl;
	int             rv;
};

// leave_one is a trainer hook: server 1 leaves the job mid-training.
static void
leave_one(void *arg, int step)
{
	struct leave_ctx *lc = arg;
	(void) step;
	lc->rv = ps_server_leave(lc->cl->srv[1], 20000);
}

// A server that leaves mid-training hands its shards to the others first:
// the weights are bit-identical to a run where nobody left, the leaver
// holds nothing, and the last server may not leave.
START_TEST(test_cluster_server_leave_without_loss)
{
	struct pt_rank   still[2], left[2];
	struct cluster   cl;
	struct leave_ctx lc = { &cl, -1 };
	char             text[2048];

	struct pair_opts o = { 10, "q8", "q8", 0, 0, leave_one, &lc, 4 };
	run_pair(still, 10, "q8", "q8", 0);
	cluster_open(&cl, 2, 3, PS_PLACEMENT_UNIFORM);
	train_pair(&cl, left, &o);
	ck_assert_msg(lc.rv == FB_OK, "leave: %s", fb_strerror(lc.rv));
	ps_server_stats(cl.srv[1], text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "shards:0\r\n"));
	same_weights(still, left);
	// Servers 0 and 2 remain; after 0 leaves too, 2 is the last.
	ck_assert_int_eq(ps_server_leave(cl.srv[0], 20000), FB_OK);
	ck_assert_int_eq(ps_server_leave(cl.srv[2], 2000), FB_EREMOTE);
	cluster_stop(&cl);
}
END_TEST

// join_one is a trainer hook: a third server joins the running job.
static void
join_one(void *arg, int step)
{
	struct cluster       *cl = arg;
	struct ps_server_opts o  = PS_SERVER_OPTS_INIT;
	char                  url[64];
	(void) step;
	if (cl->n_srv >= 3) {
		return; // join once
	}
	o.url           = pt_addr(url, sizeof(url), "tcp");
	o.scheduler_url = ps_scheduler_url(cl->sched);
	o.max_msg       = 1u << 20;
	PT_OK(ps_server_open(&o, &cl->srv[cl->n_srv]));
	cl->n_srv++;
}

// A server that joins mid-training receives shards from the others (the
// uniform map is dealt again over three servers): the weights are
// bit-identical to a run where nobody joined, and the newcomer holds
// some of the shards.
START_TEST(test_cluster_server_join_without_loss)
{
	struct pt_rank still[2], joined[2];
	struct cluster cl;
	char           text[2048];

	struct pair_opts o = { 10, "q8", "q8", 0, 0, join_one, &cl, 4 };
	run_pair(still, 10, "q8", "q8", 0);
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	train_pair(&cl, joined, &o);
	same_weights(still, joined);
	ck_assert_int_eq(cl.n_srv, 3);
	// The move runs beside training: on a loaded machine the 10 steps
	// can end before the Transfers land, so wait for them (10 s at most).
	for (int i = 0; i < 200; i++) {
		ps_server_stats(cl.srv[2], text, sizeof(text));
		if (strstr(text, "shards:0\r\n") == NULL) {
			break;
		}
		nng_msleep(50);
	}
	ck_assert_msg(strstr(text, "shards:0\r\n") == NULL,
	    "the new server holds nothing: %s", text);
	cluster_stop(&cl);
}
END_TEST

// Re-placement without loss: moving every shard to the other server
// (three times, mid-training, while the other trainer is pushing) gives
// bit-identical weights to a run without moves: no update is lost or
// applied twice. Checked in fp32 and with q4 pushes + q8 pulls (the
// reference, delta log and staged pushes travel with the shard).
START_TEST(test_cluster_move_without_loss)
{
	static const char *codecs[][2] = { { "none", "none" },
		{ "q4", "q8" } };
	for (size_t k = 0; k < 2; k++) {
		struct pt_rank still[2], moved[2];
		run_pair(still, 12, codecs[k][0], codecs[k][1], 0);
		run_pair_hook(moved, 12, codecs[k][0], codecs[k][1], 0, 3);
		ck_assert_uint_ge(moved[0].stats.map_changes +
		        moved[1].stats.map_changes,
		    2);
		same_weights(still, moved);
	}
}
END_TEST

// move_twice is a trainer hook: two maps published back to back, the
// second moving every shard on again while the first's Transfers are in
// flight (a shard ARRIVING at its first new server must go on to its
// second, and a server that skips the first map must not drop it).
static void
move_twice(void *arg, int step)
{
	struct cluster *cl = arg;
	uint32_t        assign[5];
	for (uint32_t k = 1; k <= 2; k++) {
		for (uint32_t i = 0; i < 5; i++) {
			assign[i] = (i + (uint32_t) step / 2 + k) % 3;
		}
		PT_OK(ps_scheduler_replace(cl->sched, assign, 5));
	}
	servers_caught_up(cl);
}

// Back-to-back moves over three servers (two maps at once, every other
// step) lose nothing: the weights are bit-identical to a run without
// moves.
START_TEST(test_cluster_back_to_back_moves_without_loss)
{
	struct pt_rank   still[2], moved[2];
	struct cluster   cl;
	struct pair_opts o = { 12, "q4", "q8", 0, 0, move_twice, &cl, 2 };

	run_pair(still, 12, "q4", "q8", 0);
	cluster_open(&cl, 2, 3, PS_PLACEMENT_UNIFORM);
	train_pair(&cl, moved, &o);
	ck_assert_uint_ge(
	    moved[0].stats.map_changes + moved[1].stats.map_changes, 2);
	same_weights(still, moved);
	cluster_stop(&cl);
}
END_TEST

// ferry__requeue_ms (clients/src/exchange.c): how long a re-fetch or
// back-off waits for the requests in flight before re-sending them.
extern unsigned ferry__requeue_ms;

// With every such wait cancelling and re-sending its requests at once
// (marked resend), the back-to-back moves still lose nothing: each server
// counts a re-sent push once, also after its round closed, and the weights
// are bit-identical to a run without moves.
START_TEST(test_cluster_moves_with_resends)
{
	struct pt_rank   still[2], moved[2];
	struct cluster   cl;
	struct pair_opts o = { 12, "q4", "q8", 0, 0, move_twice, &cl, 2 };

	run_pair(still, 12, "q4", "q8", 0);
	ferry__requeue_ms = 0;
	cluster_open(&cl, 2, 3, PS_PLACEMENT_UNIFORM);
	train_pair(&cl, moved, &o);
	ferry__requeue_ms = 250;
	ck_assert_uint_ge(
	    moved[0].stats.map_changes + moved[1].stats.map_changes, 2);
	same_weights(still, moved);
	cluster_stop(&cl);
}
END_TEST

struct leave_arg {
	struct ps_server *srv;
	int               rv;
};

static void *
leave_main(void *arg)
{
	struct leave_arg *l = arg;
	l->rv               = ps_server_leave(l->srv, 20000);
	return NULL;
}

// leave_two is a trainer hook: servers 1 and 2 leave at once (as a
// StatefulSet's parallel pod policy does), so the second map can move on
// shards the first one is still moving.
static void
leave_two(void *arg, int step)
{
	struct leave_ctx *lc = arg;
	struct leave_arg  l[2];
	pthread_t         th[2];
	if (step != 4) {
		return;
	}
	for (int i = 0; i < 2; i++) {
		l[i].srv = lc->cl->srv[1 + i];
		pthread_create(&th[i], NULL, leave_main, &l[i]);
	}
	lc->rv = FB_OK;
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		if (l[i].rv != FB_OK) {
			lc->rv = l[i].rv;
		}
	}
}

// Two of four servers leaving at once lose nothing: the weights are
// bit-identical to a run where nobody left, and the leavers hold nothing.
START_TEST(test_cluster_two_servers_leave_at_once)
{
	struct pt_rank   still[2], left[2];
	struct cluster   cl;
	struct leave_ctx lc = { &cl, -1 };
	char             text[2048];

	struct pair_opts o = { 10, "q4", "q8", 0, 0, leave_two, &lc, 4 };
	run_pair(still, 10, "q4", "q8", 0);
	cluster_open(&cl, 2, 4, PS_PLACEMENT_UNIFORM);
	train_pair(&cl, left, &o);
	ck_assert_msg(lc.rv == FB_OK, "leave: %s", fb_strerror(lc.rv));
	for (int i = 1; i <= 2; i++) {
		ps_server_stats(cl.srv[i], text, sizeof(text));
		ck_assert_ptr_nonnull(strstr(text, "shards:0\r\n"));
	}
	same_weights(still, left);
	cluster_stop(&cl);
}
END_TEST

// One test case, tagged "cluster" as every test case of the cluster
// suites is (ctest's ps entry runs them), so that CK_RUN_CASE=<name> runs
// one theme. Each test starts its own scheduler and servers; 60 s is ample
// for the slowest (two runs each).
Suite *
suite_moves(void)
{
	Suite *s  = suite_create("moves");
	TCase *tc = tcase_create("moves");

	// Shards moving between servers: re-placement, leaves and joins.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_move_without_loss);
	tcase_add_test(tc, test_cluster_server_leave_without_loss);
	tcase_add_test(tc, test_cluster_server_join_without_loss);
	tcase_add_test(tc, test_cluster_back_to_back_moves_without_loss);
	tcase_add_test(tc, test_cluster_moves_with_resends);
	tcase_add_test(tc, test_cluster_two_servers_leave_at_once);
	suite_add_tcase(s, tc);
	return s;
}
