// test_exchange.c — exchange.c's request sizing: how big a request to a
// server is (ferry__req_bytes) for the link the client probed, and what an
// exchange then sends: a fast or unmeasured link gets one request per
// server for a small model (loopback's optimum), a slow one many small
// requests, so that replies travel while later shards are still sent.
#include <math.h>

#include "clients_tests.h"
#include "fake.h"
#include "ferry/ferry.h"
#include "ps/ps.h"
#include "pt.h"

#define MIB (UINT64_C(1) << 20)

// A failure means a fast or unmeasured link no longer gets today's
// requests (conn_bytes / w, at least 1 MiB and at most 1 MiB), or a slow one
// no longer what it moves in 2 ms (or a round trip's worth over the window).
START_TEST(test_req_bytes)
{
	// unmeasured (0, NaN) or fast: conn_bytes / w, at least 1 MiB ...
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 0, 0), MIB);
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, NAN, 0), MIB);
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 2e9, 1e-4), MIB);
	// ... and at most 1 MiB however big the server's share (issue 30:
	// a 1 GB model on 4 servers is not 8 requests of 32 MiB each, whose
	// messages in flight outweighed the servers' own state)
	ck_assert_uint_eq(ferry__req_bytes(64 * MIB, 8, 2e9, 1e-4), MIB);
	ck_assert_uint_eq(ferry__req_bytes(64 * MIB, 8, 0, 0), MIB);
	ck_assert_uint_eq(ferry__req_bytes(64 * MIB, 0, 0, 0), MIB);
	ck_assert_uint_eq(ferry__req_bytes(256 * MIB, 8, NAN, 0), MIB);
	ck_assert_uint_eq(ferry__req_bytes(256 * MIB, 8, 1e10, 1e-4), MIB);
	// slow: what the link moves in 2 ms (100 Mbit/s shared, 10 Mbit/s)
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 6.5e6, 1e-4), 13000);
	ck_assert_uint_eq(ferry__req_bytes(64 * MIB, 8, 6.5e6, 1e-4), 13000);
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 1.25e6, 1e-4), 2500);
	// a long round trip: 2 * rtt / w of the link, so that w requests in
	// flight cover two round trips (50 ms at 6.5 MB/s over 8: 81250)
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 6.5e6, 0.05), 81250);
	// ... until that reaches 1 MiB: then today's size again
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 6.5e6, 2.0), MIB);
	// a link that moves barely under 1 MiB in 2 ms
	ck_assert_uint_lt(ferry__req_bytes(900000, 8, 5e8, 1e-4), MIB);
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 5.3e8, 1e-4), MIB);
	// never 0, whatever the link
	ck_assert_uint_eq(ferry__req_bytes(900000, 8, 1e-3, 0), 1);
}
END_TEST

// 64 shards of 4 KiB (1024 floats) on one server.
#define N_SHARDS 64
#define SHARD_LEN 1024

static float buf[N_SHARDS * SHARD_LEN];

// start opens a fake client of one tensor cut into N_SHARDS shards on one
// server, sets its link to bw bytes/s and rtt seconds, and starts a
// push-pull of it: nobody answers, so the requests stay in flight and the
// slots show how the exchange cut them.
static ferry_client *
start(double bw, double rtt)
{
	static struct fake_shard sh[N_SHARDS];
	const uint64_t           len = N_SHARDS * SHARD_LEN;
	for (uint32_t i = 0; i < N_SHARDS; i++) {
		sh[i] = (struct fake_shard) { 0, (uint64_t) i * SHARD_LEN,
			SHARD_LEN, 0 };
	}
	ferry_client *c    = fake_client(NULL, NULL, &len, 1, 1, sh, N_SHARDS);
	float        *w[1] = { buf };
	const float  *g[1] = { buf };
	c->conns[0].bw_bps = bw;
	c->conns[0].rtt_s  = rtt;
	int rv             = ferry_client_push_pull_start(c, g, 1, w, 0, 1);
	ck_assert_msg(rv == FERRY_OK, "push_pull_start: %s",
	    ferry_client_last_error(c));
	return c;
}

// shards_in counts the shards of slot k's request.
static size_t
shards_in(ferry_client *c, size_t k)
{
	return c->conns[0].slots[k].req_n;
}

// A failure means the exchange no longer cuts a slow link's push-pull into
// many small requests (or cuts a fast link's 256 KiB into more than one).
START_TEST(test_slow_link_more_requests)
{
	ferry_client *c = start(0, 0); // not probed: one request
	ck_assert_int_eq(c->stats.requests, 1);
	ck_assert_uint_eq(shards_in(c, 0), N_SHARDS);
	ferry_client_close(c);

	c = start(2e9, 1e-4); // loopback: the same
	ck_assert_int_eq(c->stats.requests, 1);
	ck_assert_uint_eq(shards_in(c, 0), N_SHARDS);
	ferry_client_close(c);

	// 100 Mbit/s shared by two trainers: 13000-byte requests, i.e. 4
	// shards each; the window (8 slots) fills, the rest waits its turn
	c = start(6.5e6, 1e-4);
	ck_assert_int_eq(c->stats.requests, FERRY_PIPE_SLOTS);
	for (size_t k = 0; k < FERRY_PIPE_SLOTS; k++) {
		ck_assert_uint_eq(shards_in(c, k), 4);
		ck_assert_uint_eq(c->conns[0].slots[k].req[0], 4 * k);
	}
	ferry_client_close(c);

	// the same link with a 50 ms round trip: 81250 bytes, 20 shards
	c = start(6.5e6, 0.05);
	ck_assert_int_eq(c->stats.requests, 4);
	ck_assert_uint_eq(shards_in(c, 0), 20);
	ck_assert_uint_eq(shards_in(c, 3), 4);
	ferry_client_close(c);
}
END_TEST

// BIG: a 40 MiB tensor, one server whose message cap is 4 MiB (and so
// whose connections may hold 9 MiB of calls in progress).
#define BIG (10u << 20)
#define BIG_MSG (4u << 20)

static float big_w[BIG], big_g[BIG];

// A server's share of a model many times its message cap still trains:
// requests are cut to 1 MiB, not conn_bytes / w (40 MiB / 8 = 5 MiB, each
// refused as oversized until the call's deadline). The same limits
// refused any model over 8 x --max-msg-mb per server (2 GB at the default
// 256), and one whose 8 requests in flight passed a connection's cap of
// calls in progress, 2 x --max-msg-mb + 1 MiB (a 1 GB model on one
// server: 8 x 128 MiB against 513 MiB).
START_TEST(test_big_share_under_msg_cap)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	struct ferry_opts        fo   = FERRY_OPTS_INIT;
	struct ferry_tensor_spec spec = { .name = "big",
		.len                            = BIG,
		.kind                           = FERRY_TENSOR_WEIGHTS,
		.init                           = FERRY_INIT_ZEROS };
	ferry_client            *c;
	char                     url[64], surl[64];
	float                   *w = big_w;
	const float             *g = big_g;

	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 1;
	so.servers     = 1;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sched);
	o.max_msg       = BIG_MSG;
	PT_OK(ps_server_open(&o, &srv));
	fo.scheduler_url = ps_scheduler_url(sched);
	fo.mode          = FERRY_MODE_SYNC;
	fo.lr            = 0.5;
	fo.timeout_ms    = 5000;
	ck_assert_int_eq(ferry_client_open(&fo, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_declare_specs(c, &spec, 1), FERRY_OK);
	ck_assert_int_eq(ferry_client_pull(c, &w), FERRY_OK);
	for (size_t i = 0; i < BIG; i++) {
		big_g[i] = 1.0f;
	}
	for (int k = 1; k <= 2; k++) {
		int rv = ferry_client_push_pull(c, &g, 1, &w);
		ck_assert_msg(rv == FERRY_OK, "step %d: %s: %s", k,
		    ferry_strerror(rv), ferry_client_last_error(c));
		ck_assert_float_eq(big_w[0], -0.5f * (float) k);
		ck_assert_float_eq(big_w[BIG - 1], -0.5f * (float) k);
	}
	(void) ferry_client_leave(c);
	ferry_client_close(c);
	ps_server_close(srv);
	ps_scheduler_close(sched);
}
END_TEST

Suite *
suite_exchange_cluster(void)
{
	Suite *s  = suite_create("exchange_cluster");
	TCase *tc = tcase_create("cluster");
	tcase_set_tags(tc, "cluster"); // see tests/clients/CMakeLists.txt
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_big_share_under_msg_cap);
	suite_add_tcase(s, tc);
	return s;
}

Suite *
suite_exchange(void)
{
	Suite *s  = suite_create("exchange");
	TCase *tc = tcase_create("sizing");
	tcase_add_test(tc, test_req_bytes);
	tcase_add_test(tc, test_slow_link_more_requests);
	suite_add_tcase(s, tc);
	return s;
}
