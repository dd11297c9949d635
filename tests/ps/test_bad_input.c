// test_bad_input.c — bad declarations, hostile frames sent to a live
// server and an oversized map, each answered with a reason; the
// in-process job still trains afterwards (harness.h).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "pair.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

// A trainer whose table differs from the job's gets FERRY_EMISMATCH, and
// a rank out of range is refused with a message.
START_TEST(test_cluster_declare_mismatch_bogus)
{
	struct cluster           cl;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d1[1] = { { "w", 10, FERRY_TENSOR_WEIGHTS } };
	struct ferry_tensor_desc d2[1] = { { "w", 11, FERRY_TENSOR_WEIGHTS } };
	ferry_client            *c0, *c1, *c2;

	cluster_open(&cl, 2, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.timeout_ms    = 300; // declare of c0 waits for members: times out
	PT_OK(ferry_client_open(&o, &c0));
	// Either the client's own timer fires or the scheduler's sweeper
	// answers the parked call DEADLINE_EXCEEDED first (FERRY_EREMOTE).
	int rv = ferry_client_declare(c0, d1, 1);
	ck_assert_msg(rv == FERRY_ETIMEDOUT || rv == FERRY_EREMOTE,
	    "declare of c0: %d (%s)", rv, ferry_client_last_error(c0));
	// The refusals below come back at once: a long timeout keeps a
	// loaded machine from turning them into timeouts.
	o.rank       = 1;
	o.timeout_ms = 20000;
	PT_OK(ferry_client_open(&o, &c1));
	ck_assert_int_eq(ferry_client_declare(c1, d2, 1), FERRY_EMISMATCH);
	ck_assert_ptr_nonnull(strstr(ferry_client_last_error(c1), "len")
	        ? ferry_client_last_error(c1)
	        : strstr(ferry_client_last_error(c1), "floats"));
	o.rank = 7;
	PT_OK(ferry_client_open(&o, &c2));
	ck_assert_int_eq(ferry_client_declare(c2, d1, 1), FERRY_EREMOTE);
	ck_assert_ptr_nonnull(strstr(ferry_client_last_error(c2), "rank 7"));
	ck_assert_int_eq(ferry_client_push(c2, NULL, 1), FERRY_ESTATE);
	ferry_client_close(c0);
	ferry_client_close(c1);
	ferry_client_close(c2);
	ck_assert_int_eq(ferry_client_open(NULL, &c0), FERRY_EINVAL);
	o.scheduler_url = NULL;
	ck_assert_int_eq(ferry_client_open(&o, &c0), FERRY_EINVAL);
	cluster_stop(&cl);
}
END_TEST

// Garbage, truncated, wrong-version and lying frames get error replies
// with a reason, and the server still trains correctly afterwards.
START_TEST(test_cluster_hostile_frames_bogus)
{
	struct cluster cl;
	char           err[512];
	uint8_t        buf[64];
	const char    *url;

	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	url = ps_server_url(cl.srv[0]);
	memset(buf, 0xab, sizeof(buf));
	ck_assert_int_eq(pt_send_raw(url, buf, sizeof(buf), err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_ptr_nonnull(strstr(err, "magic"));
	ck_assert_int_eq(pt_send_raw(url, buf, 3, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	psw_frame_put(buf, PSWIRE__METHOD__PUSH, 0, 4, 0);
	buf[4] = 99; // protocol version
	ck_assert_int_eq(pt_send_raw(url, buf, 20, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_ptr_nonnull(strstr(err, "version"));
	psw_frame_put(buf, PSWIRE__METHOD__PUSH, 0, 40, 0); // header > frame
	ck_assert_int_eq(pt_send_raw(url, buf, 20, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	psw_frame_put(buf, PSWIRE__METHOD__PUSH, 0, 8, 0); // junk protobuf
	memset(buf + 16, 0xff, 8);
	ck_assert_int_eq(pt_send_raw(url, buf, 24, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	psw_frame_put(buf, 99, 0, 0, 0); // unknown method
	ck_assert_int_eq(pt_send_raw(url, buf, 16, err, sizeof(err)),
	    PSWIRE__STATUS__UNIMPLEMENTED);
	// Oversize: above the server's receive cap, nng drops the message
	// and the connection; the server must survive it.
	{
		size_t   big = 2u << 20;
		uint8_t *p   = malloc(big);
		ck_assert_ptr_nonnull(p);
		memset(p, 0, big);
		psw_frame_put(p, PSWIRE__METHOD__PUSH, 0, 0,
		    (uint32_t) (big - 16));
		ck_assert_int_eq(pt_send_raw(url, p, big, err, sizeof(err)),
		    -1);
		free(p);
	}
	// Still trains: one trainer, 2 steps, exact result.
	struct pt_rank a;
	pthread_t      th;
	memset(&a, 0, sizeof(a));
	a.url   = ps_scheduler_url(cl.sched);
	a.steps = 2;
	pthread_create(&th, NULL, pt_rank_main, &a);
	pthread_join(th, NULL);
	ck_assert_msg(a.rv == 0, "%s: %s", ferry_strerror(a.rv), a.err);
	float x = 5.0f;
	for (int k = 0; k < 2; k++) {
		x -= (float) (0.5 / 10.0) * grad_for(0, k, 0, 5);
	}
	ck_assert(fabsf(a.w[0][5] - x) <= 1e-5f * (1 + fabsf(x)));
	// Requests for shards, versions and ranks that do not exist.
	{
		Pswire__Header      h      = PSWIRE__HEADER__INIT;
		Pswire__PullRequest pr     = PSWIRE__PULL_REQUEST__INIT;
		uint32_t            ids[2] = { 999, 0 };
		uint8_t             out[256];
		h.epoch     = 1;
		h.body_case = PSWIRE__HEADER__BODY_PULL_REQ;
		h.pull_req  = &pr;
		pr.n_shards = 1;
		pr.shards   = ids;
		size_t hl   = pswire__header__pack(&h, out + 16);
		psw_frame_put(out, PSWIRE__METHOD__PULL, 0, (uint32_t) hl, 0);
		ck_assert_int_eq(
		    pt_send_raw(url, out, 16 + hl, err, sizeof(err)),
		    PSWIRE__STATUS__INVALID_ARGUMENT);
		ck_assert_ptr_nonnull(strstr(err, "shard 999"));
		ids[0]     = 0;
		pr.version = 1000; // far future in sync mode
		hl         = pswire__header__pack(&h, out + 16);
		psw_frame_put(out, PSWIRE__METHOD__PULL, 0, (uint32_t) hl, 0);
		ck_assert_int_eq(
		    pt_send_raw(url, out, 16 + hl, err, sizeof(err)),
		    PSWIRE__STATUS__FAILED_PRECONDITION);
	}
	cluster_stop(&cl);
}
END_TEST

// A reply whose header exceeds PSW_MAX_HEADER (a Placement of 100k
// one-float shards, about 1.8 MB packed) cannot be framed: the scheduler
// answers RESOURCE_EXHAUSTED naming the cap instead of sending bytes
// without a frame header (which the caller could not parse, or would
// drop as oversized and then time out).
START_TEST(test_cluster_oversized_reply_refused_bogus)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	char                     url[64], surl[64];

	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.shard_bytes = 4; // one float per shard
	PT_OK(ps_scheduler_open(&so, &sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sched);
	PT_OK(ps_server_open(&o, &srv));

	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       j  = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td = PSWIRE__TENSOR_DESC__INIT;
	Pswire__TensorDesc     *tp = &td;
	td.name                    = "big";
	td.len                     = 100000;
	j.n_tensors                = 1;
	j.tensors                  = &tp;
	j.lr                       = 0.1;
	j.codec_push               = "none";
	j.codec_pull               = "none";
	rr.role                    = PSWIRE__ROLE__ROLE_TRAINER;
	rr.job                     = &j;
	h.body_case                = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req             = &rr;
	Pswire__Header *rh         = pt_call(ps_scheduler_url(sched),
	            PSWIRE__METHOD__REGISTER, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	pswire__header__free_unpacked(rh, NULL);
	// The server registers from its own thread after ps_server_open
	// returns, and a link report naming more servers than the scheduler
	// knows is refused: wait for it (10 s at most).
	char text[8192];
	for (int i = 0; i < 200; i++) {
		ps_scheduler_stats(sched, text, sizeof(text));
		if (strstr(text, "servers:1/1\r\n") != NULL) {
			break;
		}
		nng_msleep(50);
	}
	double rtt = 1e-4, bw = 1e9; // the map waits for the link report
	ck_assert_int_eq(raw_report(ps_scheduler_url(sched), 0, 1, &rtt, &bw),
	    PSWIRE__STATUS__OK);

	Pswire__Header              g  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = 1;
	g.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	g.placement_req                = &gp;
	rh = pt_call(ps_scheduler_url(sched), PSWIRE__METHOD__GET_PLACEMENT,
	    &g);
	ck_assert_msg(rh != NULL, "no parseable reply to an oversized map");
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(rh->error, "exceeds the 1048576-byte cap"),
	    "error: %s", rh->error);
	pswire__header__free_unpacked(rh, NULL);
	ps_server_close(srv);
	ps_scheduler_close(sched);
}
END_TEST

// One test case, tagged "cluster" as every test case of the cluster
// suites is (ctest's ps entry runs them), so that CK_RUN_CASE=<name> runs
// one theme. Each test starts its own scheduler and servers; 60 s is ample
// for the slowest (two runs each).
Suite *
suite_bad_input(void)
{
	Suite *s  = suite_create("bad_input");
	TCase *tc = tcase_create("bad_input");

	// Bad declarations and hostile frames, answered with a reason.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_declare_mismatch_bogus);
	tcase_add_test(tc, test_cluster_hostile_frames_bogus);
	tcase_add_test(tc, test_cluster_oversized_reply_refused_bogus);
	suite_add_tcase(s, tc);
	return s;
}
