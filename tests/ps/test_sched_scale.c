// test_sched_scale.c — the scheduler with many members (issue 30): one
// GetPlacement parked per member, each on its own connection from one
// host, is parked, not refused, however the --contexts default compares
// with the membership, and every one is answered when the map comes.
// Before the scheduler sized its contexts to its members, 256 contexts
// left one host three quarters (192): the other members' calls, and
// their heartbeats with them, were refused RESOURCE_EXHAUSTED
// (bench/scale/sched.sh measured 1,000 members losing 9% of their
// heartbeats and some declared dead).
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <nng/nng.h>

#include "ferry.pb-c.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

// Members: more than three quarters of the default 256 contexts.
enum { MEMBERS = 300 };

// parked_now reads the scheduler's count of parked calls from its Stats.
static unsigned long
parked_now(struct ps_scheduler *s)
{
	char text[8192];
	ps_scheduler_stats(s, text, sizeof(text));
	const char *p = strstr(text, "\nparked:");
	ck_assert_ptr_nonnull(p);
	return strtoul(p + 8, NULL, 10);
}

// park sends a GetPlacement for the membership map (min_epoch 0: answered
// once every server is in) on ctx and leaves its answer pending on aio.
static void
park(nng_ctx ctx, nng_aio *aio, uint64_t rid)
{
	Pswire__Header              h = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest g = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	nng_msg                    *m;
	uint8_t                    *payload;
	g.min_epoch     = 0;
	h.request_id    = rid;
	h.deadline_ms   = 30000;
	h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req = &g;
	size_t hl       = pswire__header__get_packed_size(&h);
	PT_OK(psw_msg_begin(&m, hl, 0, &payload));
	PT_OK(psw_msg_finish(m, PSWIRE__METHOD__GET_PLACEMENT, 0, &h.base, hl,
	    0));
	nng_aio_set_msg(aio, m);
	nng_aio_set_timeout(aio, 10000);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	ck_assert_int_eq(nng_aio_result(aio), 0);
	nng_aio_set_timeout(aio, 40000);
	nng_ctx_recv(ctx, aio);
}

// answer_status waits for aio's answer and returns its status.
static int
answer_status(nng_aio *aio)
{
	nng_aio_wait(aio);
	ck_assert_int_eq(nng_aio_result(aio), 0);
	nng_msg         *m = nng_aio_get_msg(aio);
	struct psw_frame f;
	const char      *why;
	PT_OK(psw_msg_parse(m, &f, &why));
	Pswire__Header *h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	ck_assert_ptr_nonnull(h);
	int st = (int) h->status;
	if (st == 0) {
		ck_assert_int_eq(h->body_case, PSWIRE__HEADER__BODY_PLACEMENT);
		ck_assert_uint_eq(h->placement->n_servers, 1);
	}
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(m);
	return st;
}

START_TEST(test_sched_scale_parks_one_call_per_member)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	static nng_socket        sock[MEMBERS];
	static nng_ctx           ctx[MEMBERS];
	static nng_aio          *aio[MEMBERS];
	struct rlimit            rl;

	// Both ends of every connection are in this process.
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void) setrlimit(RLIMIT_NOFILE, &rl);
	}
	o.url         = "tcp://127.0.0.1:0";
	o.trainers    = MEMBERS;
	o.servers     = 1;
	o.probe_bytes = 0;
	o.contexts    = 256; // ps-server's default (--contexts)
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	for (int i = 0; i < MEMBERS; i++) {
		PT_OK(psw_req_open(NULL, url, 0, 20, 200, &sock[i], &ctx[i],
		    &aio[i]));
		park(ctx[i], aio[i], (uint64_t) i + 1);
	}
	// Every call parked (none refused): wait for the count to reach it.
	uint64_t until = fb_clock_ms() + 15000;
	while (parked_now(s) < MEMBERS && fb_clock_ms() < until) {
		fb_sleep_us(10000);
	}
	ck_assert_uint_eq(parked_now(s), MEMBERS);
	// And still served: the server's Register, then every member's map.
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	for (int i = 0; i < MEMBERS; i++) {
		ck_assert_int_eq(answer_status(aio[i]), 0);
		nng_aio_free(aio[i]);
		nng_close(sock[i]);
	}
	ck_assert_uint_eq(parked_now(s), 0);
	ps_scheduler_close(s);
}
END_TEST

Suite *
suite_sched_scale(void)
{
	Suite *s  = suite_create("sched_scale");
	TCase *tc = tcase_create("sched_scale");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_sched_scale_parks_one_call_per_member);
	suite_add_tcase(s, tc);
	return s;
}
