// test_replicas.c — --replicas on an in-process job: backups hold every
// acknowledged version, so a job whose server dies mid-training (its
// heartbeats stop, the scheduler promotes the backups, the trainers
// re-route and re-send) ends with bit-identical weights to a job where
// nothing failed; and a replicated job without a fault trains exactly
// like an unreplicated one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>
#include <nng/nng.h>

#include "cluster.h"
#include "harness.h"
#include "ps_tests.h"
#include "test_hooks.h"
#include "pt.h"

// One trainer of a replicated run: a pt_rank whose before_step injects
// rank 0's fault (ctx points back here).
struct rep_trainer {
	struct pt_rank  base;
	struct cluster *cl;      // rank 0: the cluster, for the fault
	int             kill_at; // rank 0: close server 1 before this step
	int             restart; // rank 0: then open a new one on its URL
	int      corrupt_at; // rank 0: corrupt the other servers' backups then
	int      corrupted;  // backup shards corrupted
	unsigned backups1;   // rank 0: backups server 1 held at the end
};

// rep_fault is rank 0's before_step: the fault its rep_trainer names.
static void
rep_fault(struct pt_rank *base, int k)
{
	struct rep_trainer *a = base->ctx;

	if (k == a->kill_at) {
		// Server 1 dies: no Leave, its heartbeats stop, its socket
		// closes with whatever was parked on it.
		char url[64];
		snprintf(url, sizeof(url), "%s", ps_server_url(a->cl->srv[1]));
		ps_server_close(a->cl->srv[1]);
		a->cl->srv[1] = NULL;
		if (a->restart) {
			// A new, empty server on the same URL: it takes the
			// dead one's slot back.
			struct ps_server_opts o = PS_SERVER_OPTS_INIT;
			o.url                   = url;
			o.scheduler_url = ps_scheduler_url(a->cl->sched);
			o.max_msg       = 1u << 20;
			o.heartbeat_ms  = 100;
			PT_OK(ps_server_open(&o, &a->cl->srv[1]));
		}
	}
	if (k == a->corrupt_at) {
		for (int m = 0; m < a->cl->n_srv; m++) {
			if (m != 1 && a->cl->srv[m] != NULL) {
				a->corrupted += ps_server_test_corrupt_backups(
				    a->cl->srv[m]);
			}
		}
	}
}

// server_backups returns the backups server srv holds (its stats page).
static unsigned
server_backups(struct ps_server *srv)
{
	char text[2048];
	ps_server_stats(srv, text, sizeof(text));
	const char *q = strstr(text, "\r\nbackups:");
	ck_assert_ptr_nonnull(q);
	return (unsigned) strtoul(q + 10, NULL, 10);
}

// rep_run_full trains 2 ranks for `steps` on `servers` servers with
// `replicas` copies; kill_at > 0 closes server 1 before that step (and
// with restart opens a new, empty one on its URL), and corrupt_at > 0
// corrupts the backups on the other servers before that step. a[0]
// records the backups server 1 holds at the end.
static void
rep_run_full(struct rep_trainer a[2], int servers, uint32_t replicas,
    const char *codec, int steps, int kill_at, int corrupt_at, int restart)
{
	struct cluster cl;
	struct pt_rank ranks[2];
	cluster_open_replicas(&cl, 2, servers, PS_PLACEMENT_UNIFORM, replicas,
	    kill_at > 0 ? 500 : 0);
	memset(a, 0, 2 * sizeof(*a));
	memset(ranks, 0, sizeof(ranks));
	for (int r = 0; r < 2; r++) {
		ranks[r].url   = ps_scheduler_url(cl.sched);
		ranks[r].steps = steps;
		ranks[r].codec = codec;
	}
	if (kill_at > 0 || corrupt_at > 0) {
		a[0].cl              = &cl;
		a[0].kill_at         = kill_at > 0 ? kill_at : -1;
		a[0].corrupt_at      = corrupt_at > 0 ? corrupt_at : -1;
		a[0].restart         = restart;
		ranks[0].before_step = rep_fault;
		ranks[0].ctx         = &a[0];
	}
	pt_ranks_run(ranks, 2);
	ck_assert_msg(ranks[0].rv == 0 && ranks[1].rv == 0,
	    "R=%u, %s: rank 0: %s: %s; rank 1: %s: %s", replicas, codec,
	    ferry_strerror(ranks[0].rv), ranks[0].err,
	    ferry_strerror(ranks[1].rv), ranks[1].err);
	unsigned backups1 = cl.srv[1] != NULL ? server_backups(cl.srv[1]) : 0;
	for (int r = 0; r < 2; r++) {
		a[r].base = ranks[r];
	}
	a[0].backups1 = backups1;
	cluster_stop(&cl);
}

// rep_run_corrupt is rep_run_full without a restart.
static void
rep_run_corrupt(struct rep_trainer a[2], int servers, uint32_t replicas,
    const char *codec, int steps, int kill_at, int corrupt_at)
{
	rep_run_full(a, servers, replicas, codec, steps, kill_at, corrupt_at,
	    0);
}

// rep_run is rep_run_corrupt without corruption.
static void
rep_run(struct rep_trainer a[2], int servers, uint32_t replicas,
    const char *codec, int steps, int kill_at)
{
	rep_run_corrupt(a, servers, replicas, codec, steps, kill_at, 0);
}

// rep_same checks that two runs ended with bit-identical weights.
static void
rep_same(struct rep_trainer x[2], struct rep_trainer y[2])
{
	for (int r = 0; r < 2; r++) {
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(x[r].base.w[t], y[r].base.w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "rank %d tensor %d differs", r, t);
		}
	}
}

// A replicated job without a fault trains exactly as an unreplicated one
// (fp32, and q8 both ways: the pull reference and delta log too), and
// its servers hold backups.
START_TEST(test_replicas_no_fault_same_weights)
{
	struct rep_trainer one[2], two[2];
	const char        *codecs[] = { "none", "q8" };
	for (int k = 0; k < 2; k++) {
		rep_run(one, 2, 1, codecs[k], 12, 0);
		rep_run(two, 2, 2, codecs[k], 12, 0);
		rep_same(one, two);
	}
}
END_TEST

// Each server of a 2-server R=2 job backs up the shards the other holds;
// with R=1 nobody does; R above the servers is capped.
START_TEST(test_replicas_servers_hold_backups)
{
	struct cluster cl;
	char           text[2048];
	cluster_open_replicas(&cl, 1, 2, PS_PLACEMENT_UNIFORM, 5, 0);
	struct pt_rank a = { 0 };
	a.url            = ps_scheduler_url(cl.sched);
	a.steps          = 3;
	a.codec          = "none";
	pt_ranks_train(&a, 1);
	unsigned held[2], backups[2];
	for (int m = 0; m < 2; m++) {
		ps_server_stats(cl.srv[m], text, sizeof(text));
		const char *p = strstr(text, "\r\nshards:");
		const char *q = strstr(text, "\r\nbackups:");
		ck_assert_ptr_nonnull(p);
		ck_assert_ptr_nonnull(q);
		held[m]    = (unsigned) strtoul(p + 9, NULL, 10);
		backups[m] = (unsigned) strtoul(q + 10, NULL, 10);
	}
	ck_assert_uint_gt(held[0], 0);
	ck_assert_uint_gt(held[1], 0);
	ck_assert_uint_eq(backups[0], held[1]);
	ck_assert_uint_eq(backups[1], held[0]);
	cluster_stop(&cl);
}
END_TEST

// Server 1 of 3 dies mid-training (sync, R=2): the scheduler promotes
// its shards' backups, the trainers re-route, and the weights at the end
// are bit-identical to a run without the fault. Checked in fp32 and with
// q8 both ways.
START_TEST(test_replicas_server_death_same_weights)
{
	struct rep_trainer still[2], died[2];
	const char        *codecs[] = { "none", "q8" };
	for (int k = 0; k < 2; k++) {
		rep_run(still, 3, 1, codecs[k], 14, 0);
		rep_run(died, 3, 2, codecs[k], 14, 6);
		rep_same(still, died);
		ck_assert_msg(died[0].base.stats.map_changes > 0 ||
		        died[1].base.stats.map_changes > 0,
		    "nobody saw the promotion map");
	}
}
END_TEST

// Backups that diverged from their primaries (a flipped bit, as a
// corrupted apply would leave) are found by the next update's CRC check
// and resynced with the primary's whole state; server 1 then dies, its
// shards' resynced backups are promoted, and the weights still equal a
// fault-free run. Before resyncs the diverged backups refused every
// update, so the job stalled.
START_TEST(test_replicas_diverged_backup_resynced)
{
	struct rep_trainer still[2], died[2];
	const char        *codecs[] = { "none", "q8" };
	for (int k = 0; k < 2; k++) {
		rep_run(still, 3, 1, codecs[k], 14, 0);
		rep_run_corrupt(died, 3, 2, codecs[k], 14, 8, 3);
		ck_assert_int_gt(died[0].corrupted, 0);
		rep_same(still, died);
	}
}
END_TEST

// Server 1 of a 2-server R=2 job is killed mid-training and a new, empty
// server starts on its URL (it takes its slot back): the survivor is
// promoted for every shard and the new server becomes their backup again,
// rebuilt from the primary, so the job keeps 2 copies; the weights equal
// a fault-free run's. Before, the survivor kept waiting for the restarted
// server to acknowledge updates it refused, and the job hung.
START_TEST(test_replicas_server_restarted_on_its_url)
{
	struct rep_trainer still[2], back[2];
	rep_run(still, 2, 1, "none", 16, 0);
	rep_run_full(back, 2, 2, "none", 16, 6, 0, 1);
	rep_same(still, back);
	ck_assert_uint_gt(back[0].backups1, 0);
}
END_TEST

// A job that applies pushes asynchronously (async, SSP with K > 0) is
// refused at its declaration when the scheduler keeps replicas: backups
// follow sync rounds only, so a promoted one would hold stale weights.
// The same job declares fine without replicas, and SSP with K = 0 (sync
// rounds, bit for bit) declares with them.
START_TEST(test_replicas_refuse_async_job)
{
	struct ferry_tensor_desc d[1] = { { "a", 40, FERRY_TENSOR_WEIGHTS } };
	const int mode[] = { FERRY_MODE_ASYNC, FERRY_MODE_SSP, FERRY_MODE_SSP,
		FERRY_MODE_ASYNC };
	const uint32_t k[]    = { 0, 2, 0, 0 };
	const uint32_t reps[] = { 2, 2, 2, 1 };
	for (int i = 0; i < 4; i++) {
		struct cluster    cl;
		struct ferry_opts o = FERRY_OPTS_INIT;
		ferry_client     *c = NULL;
		cluster_open_replicas(&cl, 1, 2, PS_PLACEMENT_UNIFORM, reps[i],
		    0);
		o.scheduler_url = ps_scheduler_url(cl.sched);
		o.mode          = mode[i];
		o.staleness     = k[i];
		o.timeout_ms    = 5000;
		ck_assert_int_eq(ferry_client_open(&o, &c), 0);
		int rv = ferry_client_declare(c, d, 1);
		if (i < 2) {
			ck_assert_int_ne(rv, 0);
			ck_assert_msg(strstr(ferry_client_last_error(c),
			                  "sync jobs only") != NULL,
			    "case %d: %s", i, ferry_client_last_error(c));
		} else {
			ck_assert_msg(rv == 0, "case %d: %s", i,
			    ferry_client_last_error(c));
		}
		ferry_client_close(c);
		cluster_stop(&cl);
	}
}
END_TEST

Suite *
suite_replicas(void)
{
	Suite *s  = suite_create("replicas");
	TCase *tc = tcase_create("replicas");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_replicas_no_fault_same_weights);
	tcase_add_test(tc, test_replicas_servers_hold_backups);
	tcase_add_test(tc, test_replicas_server_death_same_weights);
	tcase_add_test(tc, test_replicas_diverged_backup_resynced);
	tcase_add_test(tc, test_replicas_server_restarted_on_its_url);
	tcase_add_test(tc, test_replicas_refuse_async_job);
	suite_add_tcase(s, tc);
	return s;
}
