// test_placement.c — latency-aware placement on an in-process scheduler:
// link reports sent raw (so that the test, not a probe, supplies the
// figures), re-probes that re-place, and link-sized shards.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "harness.h"
#include "pair.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

// raw_register_trainer registers trainer `rank` of a job of nt one-shard
// tensors straight over the wire, so that the test, not a probe by
// libferry, supplies the link figures.
static void raw_register_job(const char *url, uint32_t rank, size_t nt,
    uint64_t len);

static void
raw_register_trainer(const char *url, uint32_t rank, size_t nt)
{
	raw_register_job(url, rank, nt, 16); // one 64-byte shard each
}

// raw_register_job is raw_register_trainer with tensors of len floats.
static void
raw_register_job(const char *url, uint32_t rank, size_t nt, uint64_t len)
{
	Pswire__Header *rh = pt_register_trainer(url, rank, nt, len);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	ck_assert(rh->register_rep->probe);
	pswire__header__free_unpacked(rh, NULL);
}

// wait_servers waits (10 s at most) until the scheduler has seen every
// server of cl: servers register from their own thread after
// ps_server_open returns, and the scheduler refuses a link report for
// more servers than it knows, so the raw trainers below wait first.
static void
wait_servers(struct cluster *cl)
{
	char text[8192], want[32];
	snprintf(want, sizeof(want), "servers:%d/%d\r\n", cl->n_srv,
	    cl->n_srv);
	for (int i = 0; i < 200; i++) {
		ps_scheduler_stats(cl->sched, text, sizeof(text));
		if (strstr(text, want) != NULL) {
			return;
		}
		nng_msleep(50);
	}
}

// Latency placement: with server 1 behind links 10x slower than server
// 0's, the solver gives server 1 less data; the scheduler's Stats report
// F, LB and F/LB. Bad link reports are refused with a reason.
START_TEST(test_cluster_latency_placement_slow_server)
{
	struct cluster cl;
	// Tiny RTTs so that bandwidth decides (shards are 64 bytes here).
	double         rtt[2] = { 1e-6, 1e-6 }, bw[2] = { 100e6, 10e6 };
	double         nan_bw[2] = { 100e6, NAN };

	cluster_open(&cl, 2, 2, PS_PLACEMENT_LATENCY);
	wait_servers(&cl);
	const char *url = ps_scheduler_url(cl.sched);
	for (uint32_t r = 0; r < 2; r++) {
		raw_register_trainer(url, r, 8);
	}
	ck_assert_int_eq(raw_report(url, 0, 1, rtt, bw),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(raw_report(url, 0, 2, rtt, nan_bw),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(raw_report(url, 5, 2, rtt, bw),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, bw),
		    PSWIRE__STATUS__OK);
	}
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = 1;
	h.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req                = &gp;
	Pswire__Header *rh = pt_call(url, PSWIRE__METHOD__GET_PLACEMENT, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	uint64_t load[2] = { 0, 0 };
	ck_assert_uint_eq(rh->placement->n_shards, 8);
	for (size_t i = 0; i < rh->placement->n_shards; i++) {
		load[rh->placement->shards[i]->server] +=
		    rh->placement->shards[i]->len * 4;
	}
	pswire__header__free_unpacked(rh, NULL);
	ck_assert_msg(load[1] < load[0],
	    "slow server got %llu bytes, fast %llu",
	    (unsigned long long) load[1], (unsigned long long) load[0]);
	char text[8192];
	ps_scheduler_stats(cl.sched, text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "f_over_lb:"));
	ck_assert_ptr_nonnull(strstr(text, "placement:latency"));
	ck_assert_ptr_nonnull(strstr(text, "link_t1_m1:rtt_s=0.000001"));
	cluster_stop(&cl);
}
END_TEST

// fetch_epoch asks the scheduler for the map of at least min_epoch and
// returns each server's bytes in load[0..1], its shard count in *n_shards
// (when not NULL) and the map's epoch.
static uint64_t
fetch_epoch(const char *url, uint64_t min_epoch, uint64_t load[2],
    size_t *n_shards)
{
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = min_epoch;
	h.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req                = &gp;
	Pswire__Header *rh = pt_call(url, PSWIRE__METHOD__GET_PLACEMENT, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	load[0] = load[1] = 0;
	for (size_t i = 0; i < rh->placement->n_shards; i++) {
		load[rh->placement->shards[i]->server] +=
		    rh->placement->shards[i]->len * 4;
	}
	uint64_t e = rh->placement->epoch;
	if (n_shards != NULL) {
		*n_shards = rh->placement->n_shards;
	}
	pswire__header__free_unpacked(rh, NULL);
	return e;
}

// A re-probe that finds the links changed (server 0 became the slow one)
// makes the latency scheduler publish a new map that shifts data to
// server 1; a re-probe with unchanged links does not.
START_TEST(test_cluster_reprobe_replaces)
{
	struct cluster cl;
	// Tiny RTTs so that bandwidth decides (shards are 64 bytes here).
	double         rtt[2] = { 1e-6, 1e-6 }, bw[2] = { 100e6, 10e6 };
	double         flip[2] = { 10e6, 100e6 };
	uint64_t       load[2];

	cluster_open(&cl, 2, 2, PS_PLACEMENT_LATENCY);
	wait_servers(&cl);
	const char *url = ps_scheduler_url(cl.sched);
	for (uint32_t r = 0; r < 2; r++) {
		raw_register_trainer(url, r, 8);
	}
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, bw),
		    PSWIRE__STATUS__OK);
	}
	ck_assert_uint_eq(fetch_epoch(url, 1, load, NULL), 1);
	ck_assert_uint_lt(load[1], load[0]);
	ck_assert_int_eq(raw_report(url, 0, 2, rtt, bw), PSWIRE__STATUS__OK);
	ck_assert_uint_eq(fetch_epoch(url, 1, load, NULL), 1); // unchanged
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, flip),
		    PSWIRE__STATUS__OK);
	}
	ck_assert_uint_ge(fetch_epoch(url, 2, load, NULL), 2);
	ck_assert_msg(load[0] < load[1], "after the flip: %llu vs %llu",
	    (unsigned long long) load[0], (unsigned long long) load[1]);
	cluster_stop(&cl);
}
END_TEST

// link_cut_job starts a latency scheduler with 1 MiB --shard-bytes and two
// servers, registers two raw trainers of one 256 KiB tensor, has both
// report links at bw bytes/s to both servers and returns the first map's
// shard count (the cluster stays up in *cl).
static size_t
link_cut_job(struct cluster *cl, double bw)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64];
	double                   rtt[2] = { 1e-4, 1e-4 }, b[2] = { bw, bw };
	so.placement   = PS_PLACEMENT_LATENCY;
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = 2;
	so.shard_bytes = 1u << 20;
	so.probe_bytes = 64 << 10;
	PT_OK(ps_scheduler_open(&so, &cl->sched));
	cl->n_srv = 2;
	for (int i = 0; i < 2; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url           = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url = ps_scheduler_url(cl->sched);
		PT_OK(ps_server_open(&o, &cl->srv[i]));
	}
	wait_servers(cl);
	const char *su = ps_scheduler_url(cl->sched);
	for (uint32_t r = 0; r < 2; r++) {
		raw_register_job(su, r, 1, 65536);
	}
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(su, r, 2, rtt, b),
		    PSWIRE__STATUS__OK);
	}
	uint64_t load[2];
	size_t   n;
	ck_assert_uint_eq(fetch_epoch(su, 1, load, &n), 1);
	return n;
}

// Link-sized shards: a job whose trainers probed ~100 Mbit/s links (6.5
// MB/s each, two sharing the server) gets 8 KiB shards instead of one 1
// MiB shard per tensor, so a sync exchange can overlap its directions;
// one on loopback-fast links keeps --shard-bytes. A later map (the links
// changed: re-placement) keeps the first map's cut.
START_TEST(test_cluster_link_sized_shards)
{
	struct cluster cl;
	double         rtt[2] = { 1e-4, 1e-4 }, slower[2] = { 6.5e6, 0.5e6 };

	ck_assert_uint_eq(link_cut_job(&cl, 2e9), 1);
	cluster_stop(&cl);

	ck_assert_uint_eq(link_cut_job(&cl, 6.5e6), 262144 / 8192);
	const char *url = ps_scheduler_url(cl.sched);
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, slower),
		    PSWIRE__STATUS__OK);
	}
	uint64_t load[2];
	size_t   n = 0;
	ck_assert_uint_ge(fetch_epoch(url, 2, load, &n), 2);
	ck_assert_uint_eq(n, 262144 / 8192);
	cluster_stop(&cl);
}
END_TEST

// One test case, tagged "cluster" as every test case of the cluster
// suites is (ctest's ps entry runs them), so that CK_RUN_CASE=<name> runs
// one theme. Each test starts its own scheduler and servers; 60 s is ample
// for the slowest (two runs each).
Suite *
suite_placement(void)
{
	Suite *s  = suite_create("placement");
	TCase *tc = tcase_create("placement");

	// Latency-aware placement from link reports, and re-probes.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_latency_placement_slow_server);
	tcase_add_test(tc, test_cluster_reprobe_replaces);
	tcase_add_test(tc, test_cluster_link_sized_shards);
	suite_add_tcase(s, tc);
	return s;
}
