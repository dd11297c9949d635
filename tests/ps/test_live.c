// test_live.c — the scheduler's liveness, against an in-process scheduler
// spoken to over the wire: a member that heartbeats and then stops is
// declared dead and a new map drops it; one whose connection closes (a
// killed process) is declared dead within 2 heartbeat periods, one that
// is stalled with its connection open only after dead_after; a member that
// never heartbeats is never declared dead; a dead trainer that registers again
// rejoins; and parked GetPlacements that their clients abandoned expire, so
// that they cannot hold every REP context and stop Register from being
// answered. Last, the real senders: in-process servers and a libferry client.
#include <stdio.h>
#include <string.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "obs/obs.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

// call_on sends header h (no payload) for method on the open REQ socket
// s and returns the reply header (free with pswire__header__free_unpacked),
// or NULL when none came within timeout_ms.
static Pswire__Header *
call_on(nng_socket s, uint8_t method, Pswire__Header *h, int timeout_ms)
{
	nng_msg         *m;
	uint8_t         *payload;
	struct psw_frame f;
	const char      *why;
	Pswire__Header  *rh = NULL;
	size_t           hl = pswire__header__get_packed_size(h);

	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
	PT_OK(psw_msg_begin(&m, hl, 0, &payload));
	PT_OK(psw_msg_finish(m, method, 0, &h->base, hl, 0));
	ck_assert_int_eq(nng_sendmsg(s, m, 0), 0);
	if (nng_recvmsg(s, &m, 0) == 0) {
		if (psw_msg_parse(m, &f, &why) == FB_OK) {
			rh = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
		}
		nng_msg_free(m);
	}
	return rh;
}

// dial opens a REQ socket connected to url (close with nng_close).
static nng_socket
dial(const char *url)
{
	nng_socket s;
	ck_assert_int_eq(nng_req0_open(&s), 0);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	return s;
}

// call is call_on over a fresh connection, closed before it returns.
static Pswire__Header *
call(const char *url, uint8_t method, Pswire__Header *h, int timeout_ms)
{
	nng_socket      s  = dial(url);
	Pswire__Header *rh = call_on(s, method, h, timeout_ms);
	nng_close(s);
	return rh;
}

Pswire__Header *
wire_call(const char *url, uint8_t method, Pswire__Header *h, int timeout_ms)
{
	return call(url, method, h, timeout_ms);
}

// status_of (shared through ps_tests.h) returns the status of the reply to
// (method, h), failing the test when no reply came within 3 s.
int
status_of(const char *url, uint8_t method, Pswire__Header *h)
{
	Pswire__Header *rh = call(url, method, h, 3000);
	ck_assert_msg(rh != NULL, "no reply to %s within 3 s",
	    psw_method_name(method));
	int st = rh->status;
	pswire__header__free_unpacked(rh, NULL);
	return st;
}

int
register_server(const char *url, const char *srv_url)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	rr.role                    = PSWIRE__ROLE__ROLE_SERVER;
	rr.url                     = (char *) srv_url;
	h.body_case                = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req             = &rr;
	return status_of(url, PSWIRE__METHOD__REGISTER, &h);
}

// register_trainer registers rank with a one-tensor job.
int
register_trainer(const char *url, uint32_t rank)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       j  = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td = PSWIRE__TENSOR_DESC__INIT, *tp = &td;
	td.name        = "w";
	td.len         = 16;
	j.n_tensors    = 1;
	j.tensors      = &tp;
	j.lr           = 0.1;
	j.codec_push   = "none";
	j.codec_pull   = "none";
	rr.role        = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank        = rank;
	rr.job         = &j;
	h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req = &rr;
	return status_of(url, PSWIRE__METHOD__REGISTER, &h);
}

// heartbeat_on sends (role, id)'s Heartbeat on the open socket s and
// returns the reply's status, failing the test when none came in 3 s.
static int
heartbeat_on(nng_socket s, int role, uint32_t id)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	l.role                 = role;
	l.id                   = id;
	h.body_case            = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req            = &l;
	Pswire__Header *rh = call_on(s, PSWIRE__METHOD__HEARTBEAT, &h, 3000);
	ck_assert_msg(rh != NULL, "no reply to Heartbeat within 3 s");
	int st = rh->status;
	pswire__header__free_unpacked(rh, NULL);
	return st;
}

int
member_call(const char *url, uint8_t method, int role, uint32_t id)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	l.role                 = role;
	l.id                   = id;
	h.body_case            = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req            = &l;
	return status_of(url, method, &h);
}

// heartbeat is heartbeat_on over a fresh connection.
int
heartbeat(const char *url, int role, uint32_t id)
{
	nng_socket s  = dial(url);
	int        st = heartbeat_on(s, role, id);
	nng_close(s);
	return st;
}

// map_at_least waits (up to timeout_ms, server-side) for a map of epoch
// min_epoch or later and returns it (free with
// pswire__header__free_unpacked), failing the test otherwise.
Pswire__Header *
map_at_least(const char *url, uint64_t min_epoch, uint32_t timeout_ms)
{
	Pswire__Header              h = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest g = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	g.min_epoch                   = min_epoch;
	h.deadline_ms                 = timeout_ms;
	h.body_case                   = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req               = &g;
	Pswire__Header *rh = call(url, PSWIRE__METHOD__GET_PLACEMENT, &h,
	    (int) timeout_ms + 2000);
	ck_assert_msg(rh != NULL, "no reply to GetPlacement(%llu)",
	    (unsigned long long) min_epoch);
	ck_assert_msg(rh->status == PSWIRE__STATUS__OK,
	    "GetPlacement(%llu): %s: %s", (unsigned long long) min_epoch,
	    psw_status_name(rh->status), rh->error);
	ck_assert_int_eq(rh->body_case, PSWIRE__HEADER__BODY_PLACEMENT);
	return rh;
}

// has_age says whether the scheduler's metrics have a heartbeat age for
// (role, id).
static int
has_age(struct ps_scheduler *s, const char *role, int id)
{
	struct obs_writer w = OBS_WRITER_INIT;
	char              want[128];
	PT_OK(obs_registry_write(ps_scheduler_metrics(s), &w));
	snprintf(want, sizeof(want),
	    "ferry_member_heartbeat_age_seconds{role=\"%s\",id=\"%d\"} ", role,
	    id);
	int found = strstr(w.buf, want) != NULL;
	ck_assert_ptr_nonnull(
	    strstr(w.buf, "# TYPE ferry_member_heartbeat_age_seconds gauge"));
	obs_writer_fini(&w);
	return found;
}

// has_rank says whether rank is in the map's gone_trainers.
static int
has_rank(const Pswire__Placement *p, uint32_t rank)
{
	for (size_t i = 0; i < p->n_gone_trainers; i++) {
		if (p->gone_trainers[i] == rank) {
			return 1;
		}
	}
	return 0;
}

// Trainer 1 heartbeats, then stops: after dead_after_ms (not before) the
// scheduler publishes a map that lists it as gone. Trainer 0 and the
// server never heartbeat and are never declared dead. Trainer 1's next
// heartbeat is refused; registering again brings it back.
START_TEST(test_live_dead_trainer_leaves_the_map)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	char                     text[8192];
	o.url           = "tcp://127.0.0.1:0";
	o.trainers      = 2;
	o.servers       = 1;
	o.probe_bytes   = 0;
	o.dead_after_ms = 400;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);

	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	ck_assert_int_eq(register_trainer(url, 1), 0);
	Pswire__Header *m1 = map_at_least(url, 1, 3000);
	ck_assert_uint_eq(m1->placement->epoch, 1);
	ck_assert_uint_eq(m1->placement->n_gone_trainers, 0);
	pswire__header__free_unpacked(m1, NULL);

	// Alive while it heartbeats, well past dead_after.
	uint64_t t0 = fb_clock_ms(), last = 0;
	while (fb_clock_ms() - t0 < 1000) {
		// Stamped before sending: the scheduler received it later, so
		// the silence it measures is at most now - last.
		last = fb_clock_ms();
		ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 1),
		    PSWIRE__STATUS__OK);
		nng_msleep(100);
	}
	ps_scheduler_stats(s, text, sizeof(text));
	ck_assert_msg(strstr(text, "epoch:1\r\n") != NULL, "%s", text);
	ck_assert(has_age(s, "trainer", 1));
	ck_assert(!has_age(s, "trainer", 0));

	// Silent: the next map drops it, not before dead_after.
	Pswire__Header *m2 = map_at_least(url, 2, 5000);
	uint64_t        dt = fb_clock_ms() - last;
	ck_assert_msg(dt >= 400 && dt < 3000, "declared dead after %llu ms",
	    (unsigned long long) dt);
	ck_assert_uint_eq(m2->placement->epoch, 2);
	ck_assert(has_rank(m2->placement, 1));
	ck_assert(!has_rank(m2->placement, 0));
	pswire__header__free_unpacked(m2, NULL);
	ck_assert(!has_age(s, "trainer", 1));

	// Members that never heartbeat are not tracked.
	nng_msleep(1000);
	ps_scheduler_stats(s, text, sizeof(text));
	ck_assert_msg(strstr(text, "epoch:2\r\n") != NULL, "%s", text);

	// A dead trainer is told so, and comes back by registering.
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 1),
	    PSWIRE__STATUS__FAILED_PRECONDITION);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 7),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(register_trainer(url, 1), 0);
	Pswire__Header *m3 = map_at_least(url, 3, 3000);
	ck_assert(!has_rank(m3->placement, 1));
	pswire__header__free_unpacked(m3, NULL);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 1),
	    PSWIRE__STATUS__OK);
	ps_scheduler_close(s);
}
END_TEST

// A server that heartbeats and stops is declared dead; holding no shard
// (the job's one shard is on server 0), it changes nothing in the map, so
// no new map is published; when it heartbeats again it is back.
// (test_reseed.c: a dead server's shards are re-seeded in a new map.)
START_TEST(test_live_dead_server_keeps_the_map)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	char                     text[8192];
	o.url           = "tcp://127.0.0.1:0";
	o.trainers      = 1;
	o.servers       = 2;
	o.probe_bytes   = 0;
	o.dead_after_ms = 300;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:2"), 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	pswire__header__free_unpacked(map_at_least(url, 1, 3000), NULL);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 1), 0);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 5),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert(has_age(s, "server", 1));
	ck_assert(!has_age(s, "server", 0));
	nng_msleep(1200);
	ck_assert(!has_age(s, "server", 1)); // dead: no longer tracked
	ps_scheduler_stats(s, text, sizeof(text));
	ck_assert_msg(strstr(text, "epoch:1\r\n") != NULL, "%s", text);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 1), 0);
	ps_scheduler_close(s);
}
END_TEST

// open_two_trainers opens a scheduler with one server and two trainers,
// dead_after_ms and heartbeat_ms as given, and waits for the first map.
static struct ps_scheduler *
open_two_trainers(uint32_t dead_after_ms, uint32_t heartbeat_ms)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	o.url           = "tcp://127.0.0.1:0";
	o.trainers      = 2;
	o.servers       = 1;
	o.probe_bytes   = 0;
	o.dead_after_ms = dead_after_ms;
	o.heartbeat_ms  = heartbeat_ms;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	ck_assert_int_eq(register_trainer(url, 1), 0);
	pswire__header__free_unpacked(map_at_least(url, 1, 3000), NULL);
	return s;
}

// A killed member's connection closes at once: the scheduler declares it
// dead 2 x heartbeat_ms after that (here 0.4 s), far sooner than
// dead_after_ms (20 s). Fails if only silence is watched.
START_TEST(test_live_closed_connection_is_dead_soon)
{
	struct ps_scheduler *s   = open_two_trainers(20000, 200);
	const char          *url = ps_scheduler_url(s);
	nng_socket           hb  = dial(url);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(
		    heartbeat_on(hb, PSWIRE__ROLE__ROLE_TRAINER, 1),
		    PSWIRE__STATUS__OK);
		nng_msleep(100);
	}
	uint64_t t0 = fb_clock_ms();
	nng_close(hb); // what a SIGKILL does to the trainer's socket
	Pswire__Header *m2 = map_at_least(url, 2, 10000);
	uint64_t        dt = fb_clock_ms() - t0;
	ck_assert_msg(dt >= 400 && dt < 3000,
	    "declared dead %llu ms after "
	    "its connection closed",
	    (unsigned long long) dt);
	ck_assert(has_rank(m2->placement, 1));
	ck_assert(!has_rank(m2->placement, 0));
	pswire__header__free_unpacked(m2, NULL);
	ck_assert(!has_age(s, "trainer", 1));
	ps_scheduler_close(s);
}
END_TEST

// A member whose connection closes but which heartbeats again on a new
// one within the grace (a redial after a network blip) stays in the job;
// one that is stopped (SIGSTOP: connection open, silent) is still judged
// by dead_after_ms alone, not by the shorter grace.
START_TEST(test_live_redial_and_stall_judged_apart)
{
	struct ps_scheduler *s   = open_two_trainers(1500, 100);
	const char          *url = ps_scheduler_url(s);
	char                 text[8192];
	nng_socket           a = dial(url);
	nng_socket           b = dial(url);
	ck_assert_int_eq(heartbeat_on(a, PSWIRE__ROLE__ROLE_TRAINER, 1), 0);
	// Trainer 0's silence starts when the scheduler stamps this
	// heartbeat: after it was sent, before its reply came back.
	uint64_t last0 = fb_clock_ms();
	ck_assert_int_eq(heartbeat_on(b, PSWIRE__ROLE__ROLE_TRAINER, 0), 0);
	nng_close(a);
	a           = dial(url); // trainer 1 redials at once
	uint64_t t0 = fb_clock_ms();
	while (fb_clock_ms() - t0 < 1000) { // 5x the grace
		ck_assert_int_eq(
		    heartbeat_on(a, PSWIRE__ROLE__ROLE_TRAINER, 1),
		    PSWIRE__STATUS__OK);
		nng_msleep(50);
	}
	// Trainer 0 has been silent on an open connection for 1 s: alive.
	ck_assert(has_age(s, "trainer", 0));
	ck_assert(has_age(s, "trainer", 1));
	ps_scheduler_stats(s, text, sizeof(text));
	ck_assert_msg(strstr(text, "epoch:1\r\n") != NULL, "%s", text);
	// ... until dead_after_ms of silence.
	Pswire__Header *m2 = map_at_least(url, 2, 5000);
	uint64_t        dt = fb_clock_ms() - last0;
	ck_assert_msg(dt >= 1500 && dt < 4000,
	    "stalled trainer declared dead after %llu ms",
	    (unsigned long long) dt);
	ck_assert(has_rank(m2->placement, 0));
	ck_assert(!has_rank(m2->placement, 1));
	pswire__header__free_unpacked(m2, NULL);
	nng_close(a);
	nng_close(b);
	ps_scheduler_close(s);
}
END_TEST

// Many GetPlacements from one client, each abandoned after 100 ms and
// re-sent (as a server's watch thread does), on a scheduler asked for 8
// contexts (it serves 72: what 1 trainer and 2 servers may have in
// flight, plus 64): they expire at their deadline (and one connection may
// hold only a quarter, 18, at once), so Register and Heartbeat are still
// answered. Before parked calls had an expiry, every context was parked
// for ever after 8 of them and Register got no reply.
START_TEST(test_live_parked_calls_expire)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	nng_socket               sock;
	nng_ctx                  ctx;
	nng_aio                 *aio;
	o.url         = "tcp://127.0.0.1:0";
	o.trainers    = 1;
	o.servers     = 2; // never all there: the map never comes
	o.contexts    = 8;
	o.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	PT_OK(psw_req_open(NULL, url, 0, 20, 200, &sock, &ctx, &aio));
	int n_parked = 0, n_refused = 0;
	for (uint64_t rid = 1; rid <= 30; rid++) {
		Pswire__Header              h = PSWIRE__HEADER__INIT;
		Pswire__GetPlacementRequest g =
		    PSWIRE__GET_PLACEMENT_REQUEST__INIT;
		ProtobufCMessage *ph  = NULL;
		const char       *why = "";
		g.min_epoch           = 1;
		h.request_id          = rid;
		// Parked longer than 18 calls take to send: the
		// connection's cap is reached before the first expires.
		h.deadline_ms   = 3000;
		h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
		h.placement_req = &g;
		int rv          = psw_call_header(NULL, ctx, aio, &h.base,
		             PSWIRE__METHOD__GET_PLACEMENT, rid, 100, &ph, &why);
		// Abandoned calls stay parked until they expire; past a
		// quarter of the contexts (18 here) one connection's further
		// calls are refused at once (rpc.h LIMITS).
		if (rv == FB_EREMOTE) {
			ck_assert_int_eq(((Pswire__Header *) ph)->status,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED);
			pswire__header__free_unpacked((Pswire__Header *) ph,
			    NULL);
			n_refused++;
			fb_sleep_us(100000); // as long as a timed-out call
			continue;
		}
		ck_assert_msg(rv == FB_ETIMEDOUT, "GetPlacement %llu: %s",
		    (unsigned long long) rid, fb_strerror(rv));
		ck_assert_ptr_null(ph);
		n_parked++;
	}
	ck_assert_int_gt(n_parked, 2);
	ck_assert_int_gt(n_refused, 0);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 0), 0);
	// And the expired ones were answered DEADLINE_EXCEEDED.
	Pswire__Header              h = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest g = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	g.min_epoch                   = 1;
	h.deadline_ms                 = 200;
	h.body_case                   = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req               = &g;
	ck_assert_int_eq(status_of(url, PSWIRE__METHOD__GET_PLACEMENT, &h),
	    PSWIRE__STATUS__DEADLINE_EXCEEDED);
	nng_aio_free(aio);
	nng_close(sock);
	ps_scheduler_close(s);
}
END_TEST

// wait_age waits (up to 3 s) until (role, id) has a heartbeat age.
static void
wait_age(struct ps_scheduler *s, const char *role, int id)
{
	for (int i = 0; i < 150 && !has_age(s, role, id); i++) {
		nng_msleep(20);
	}
	ck_assert_msg(has_age(s, role, id), "%s %d never heartbeated", role,
	    id);
}

// The real senders: an in-process server heartbeats from its watch
// thread, and libferry (opts.heartbeat_ms) from declare until leave; a
// trainer that left is no longer tracked.
START_TEST(test_live_members_heartbeat)
{
	struct cluster           cl;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	ferry_client            *c;
	struct ferry_tensor_desc d[NT];
	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	for (int t = 0; t < NT; t++) {
		d[t].name = t == 0 ? "a" : t == 1 ? "b" : "c";
		d[t].len  = lens[t];
	}
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.timeout_ms    = 10000;
	o.heartbeat_ms  = 50;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert(!has_age(cl.sched, "trainer", 0)); // not before declare
	ck_assert_int_eq(ferry_client_declare(c, d, NT), FERRY_OK);
	wait_age(cl.sched, "trainer", 0);
	wait_age(cl.sched, "server", 0);
	ck_assert_int_eq(ferry_client_leave(c), FERRY_OK);
	ck_assert(!has_age(cl.sched, "trainer", 0));
	nng_msleep(200); // no heartbeat after the leave re-tracks it
	ck_assert(!has_age(cl.sched, "trainer", 0));
	ferry_client_close(c);
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_live(void)
{
	Suite *s  = suite_create("live");
	TCase *tc = tcase_create("live");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_live_dead_trainer_leaves_the_map);
	tcase_add_test(tc, test_live_dead_server_keeps_the_map);
	tcase_add_test(tc, test_live_closed_connection_is_dead_soon);
	tcase_add_test(tc, test_live_redial_and_stall_judged_apart);
	tcase_add_test(tc, test_live_parked_calls_expire);
	tcase_add_test(tc, test_live_members_heartbeat);
	suite_add_tcase(s, tc);
	return s;
}
