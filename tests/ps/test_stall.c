// test_stall.c — stuck-round diagnostics, with a scheduler, one server and
// two trainers (threads on libferry) in this process: when rank 1 stops
// pushing, the server logs once which rank its round waits for
// (--stall-warn-ms; 0 turns it off), and rank 0's libferry reports,
// through ferry_opts.log, the server and shards its call waits on once
// 80% of its deadline has passed.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "ferry/ferry.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

// One stalled job: rank 0 pushes step 0 and waits; rank 1 pulled version
// 0 but never pushes until rank 0's call has ended.
struct stall_job {
	const char *url;
	uint32_t    timeout_ms; // rank 0's deadline
	atomic_int  rank0_done;
	atomic_int  rank1_left; // rank 0 closes only after this
	int         rv[2];
	char        err[2][256];
	char        logged[4][512]; // rank 0's libferry warnings
	int         n_logged, levels;
};

// capture is rank 0's ferry_opts.log: it keeps the messages.
static void
capture(void *arg, int level, const char *msg)
{
	struct stall_job *j = arg;
	if (j->n_logged < 4) {
		snprintf(j->logged[j->n_logged++], sizeof(j->logged[0]), "%s",
		    msg);
	}
	j->levels |= 1 << level;
}

struct stall_rank {
	struct stall_job *job;
	int               rank;
};

static void *
stall_trainer(void *arg)
{
	struct stall_rank       *a     = arg;
	struct stall_job        *j     = a->job;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", 40, FERRY_TENSOR_WEIGHTS },
		{ "b", 7, FERRY_TENSOR_WEIGHTS },
		{ "c", 1, FERRY_TENSOR_WEIGHTS } };
	ferry_client            *c     = NULL;
	float                    w[NT][40] = { { 0 } }, g[NT][40] = { { 0 } };
	float                   *wp[NT], *gp[NT];
	int                      rv;
	for (int t = 0; t < NT; t++) {
		wp[t]   = w[t];
		gp[t]   = g[t];
		g[t][0] = 1;
	}
	o.scheduler_url = j->url;
	o.rank          = a->rank;
	o.timeout_ms    = a->rank == 0 ? j->timeout_ms : 20000;
	if (a->rank == 0) {
		o.log     = capture;
		o.log_arg = j;
	}
	if ((rv = ferry_client_open(&o, &c)) != 0 ||
	    (rv = ferry_client_declare(c, d, NT)) != 0 ||
	    (a->rank == 0 &&
	        (rv = ferry_client_init_weights(c,
	             (const float *const *) wp)) != 0) ||
	    (rv = ferry_client_pull(c, wp)) != 0) {
		goto out;
	}
	if (a->rank == 0) {
		// Rank 1 never pushes: this waits until the deadline.
		rv = ferry_client_push_pull(c, (const float *const *) gp, 1,
		    wp);
		atomic_store(&j->rank0_done, 1);
		// The server answers the timed-out push-pull once rank 1
		// leaves. Closing the socket while that reply is in flight
		// can hang nng 1.5's nng_close (nanomsg/nng#1543, #1813), so
		// let it arrive first (bounded: 5 s).
		for (int i = 0; i < 500 && !atomic_load(&j->rank1_left); i++) {
			fb_sleep_us(10000);
		}
		fb_sleep_us(200000);
	} else {
		while (!atomic_load(&j->rank0_done)) {
			fb_sleep_us(10000);
		}
		rv = ferry_client_leave(c);
		atomic_store(&j->rank1_left, 1);
	}
out:
	j->rv[a->rank] = rv;
	snprintf(j->err[a->rank], sizeof(j->err[0]), "%s",
	    c != NULL ? ferry_client_last_error(c) : "");
	ferry_client_close(c);
	return NULL;
}

// run_stalled runs the stalled job against a server with stall_warn_ms;
// *stalls and last receive what the server reported.
static void
run_stalled(struct stall_job *j, uint32_t stall_warn_ms, uint64_t *stalls,
    char *last, size_t n, char *srv_url, size_t un)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	struct stall_rank        a[2];
	pthread_t                th[2];
	char                     url[64], surl[64];
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = 1;
	so.shard_bytes = 64; // 5 shards: 0-4
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sched);
	o.stall_warn_ms = stall_warn_ms;
	PT_OK(ps_server_open(&o, &srv));
	snprintf(srv_url, un, "%s", ps_server_url(srv));
	j->url = ps_scheduler_url(sched);
	for (int r = 0; r < 2; r++) {
		a[r].job  = j;
		a[r].rank = r;
		pthread_create(&th[r], NULL, stall_trainer, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
	}
	*stalls = ps_server_stalls(srv, last, n);
	ps_server_close(srv);
	ps_scheduler_close(sched);
	ck_assert_msg(j->rv[1] == 0, "rank 1: %s: %s",
	    ferry_strerror(j->rv[1]), j->err[1]);
	// Rank 0's push-pull could not complete without rank 1.
	ck_assert_msg(j->rv[0] == FERRY_ETIMEDOUT || j->rv[0] == FERRY_EREMOTE,
	    "rank 0: %s: %s", ferry_strerror(j->rv[0]), j->err[0]);
}

// With rank 1 stopped, the server's round logs once (though the sweeper
// sees it stuck for over a second) that round 0 of all five shards waits
// for rank 1 while rank 0 pushed, since when; rank 0's libferry names the
// server and the shards it waits on, once, before its deadline.
START_TEST(test_stall_names_missing_rank)
{
	struct stall_job j;
	uint64_t         stalls;
	char             last[512], srv_url[128], want[256];
	memset(&j, 0, sizeof(j));
	j.timeout_ms = 1500;
	run_stalled(&j, 200, &stalls, last, sizeof(last), srv_url,
	    sizeof(srv_url));
	ck_assert_msg(stalls == 1, "%llu stall warnings, last '%s'",
	    (unsigned long long) stalls, last);
	ck_assert_msg(strncmp(last, "round 0 of shard(s) 0-4 waiting ", 32) ==
	        0,
	    "'%s'", last);
	ck_assert_msg(strstr(last,
	                  " s for rank(s) 1 (pushed: 0; first push "
	                  "at 20") != NULL,
	    "'%s'", last);
	ck_assert_msg(j.n_logged == 1, "rank 0 logged %d warnings",
	    j.n_logged);
	ck_assert_int_eq(j.levels, 1 << FERRY_LOG_WARN);
	snprintf(want, sizeof(want),
	    "PushPull: 80%% of the 1500 ms deadline passed, still waiting for "
	    "server %s (shard(s) 0-4)",
	    srv_url);
	ck_assert_str_eq(j.logged[0], want);
}
END_TEST

// --stall-warn-ms 0: the same stuck round logs nothing.
START_TEST(test_stall_disabled)
{
	struct stall_job j;
	uint64_t         stalls;
	char             last[512], srv_url[128];
	memset(&j, 0, sizeof(j));
	j.timeout_ms = 800;
	run_stalled(&j, 0, &stalls, last, sizeof(last), srv_url,
	    sizeof(srv_url));
	ck_assert_msg(stalls == 0, "%llu stall warnings, last '%s'",
	    (unsigned long long) stalls, last);
	ck_assert_str_eq(last, "");
}
END_TEST

Suite *
suite_stall(void)
{
	Suite *s  = suite_create("stall");
	TCase *tc = tcase_create("stall");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_stall_names_missing_rank);
	tcase_add_test(tc, test_stall_disabled);
	suite_add_tcase(s, tc);
	return s;
}
