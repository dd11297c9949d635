// test_cascade.c — losing one server never takes a healthy one with it
// (issue 24, "no cascade"): a server whose heartbeat connection closed is
// suspect at once and no shard moves to or from it until it heartbeats
// again; a server's heartbeats go on while its Transfers hang on a peer
// that never answers; a Transfer to a peer that is gone fails fast and
// follows the scheduler's later map; and a server killed while shards move
// to it has those moves re-planned back to their sender, which is never
// declared dead.
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>

#include "fb/fb.h"
#include "ferry.pb-c.h"
#include "obs/obs.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

// The job register_trainer declares: 16 floats, cut into 4 shards.
#define NSHARDS 4

// sched_open starts a scheduler for one trainer and `servers` servers,
// 16-byte shards, uniform placement.
static struct ps_scheduler *
sched_open(int servers, uint32_t dead_after_ms, uint32_t heartbeat_ms)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	o.url           = "tcp://127.0.0.1:0";
	o.trainers      = 1;
	o.servers       = servers;
	o.shard_bytes   = 16;
	o.probe_bytes   = 0;
	o.placement     = PS_PLACEMENT_UNIFORM;
	o.dead_after_ms = dead_after_ms;
	o.heartbeat_ms  = heartbeat_ms;
	PT_OK(ps_scheduler_open(&o, &s));
	return s;
}

// beat_on sends server id's Heartbeat, carrying sent epoch `sent`, on the
// open socket s; returns the reply's status.
static int
beat_on(nng_socket s, uint32_t id, uint64_t sent)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	nng_msg             *m;
	uint8_t             *payload;
	struct psw_frame     f;
	const char          *why;
	int                  st = -1;
	l.role                  = PSWIRE__ROLE__ROLE_SERVER;
	l.id                    = id;
	h.epoch                 = sent;
	h.body_case             = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req             = &l;
	size_t hl               = pswire__header__get_packed_size(&h);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 3000);
	PT_OK(psw_msg_begin(&m, hl, 0, &payload));
	PT_OK(psw_msg_finish(m, PSWIRE__METHOD__HEARTBEAT, 0, &h.base, hl, 0));
	ck_assert_int_eq(nng_sendmsg(s, m, 0), 0);
	if (nng_recvmsg(s, &m, 0) == 0) {
		if (psw_msg_parse(m, &f, &why) == FB_OK) {
			Pswire__Header *rh = pswire__header__unpack(NULL,
			    f.hdr_len, f.hdr);
			st = rh != NULL ? (int) rh->status : -1;
			pswire__header__free_unpacked(rh, NULL);
		}
		nng_msg_free(m);
	}
	ck_assert_msg(st == 0, "heartbeat of server %u: status %d", id, st);
	return st;
}

// dial_sched opens a REQ socket to url.
static nng_socket
dial_sched(const char *url)
{
	nng_socket s;
	ck_assert_int_eq(nng_req0_open(&s), 0);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	return s;
}

// map_try returns the map of epoch >= min_epoch if the scheduler has one
// within wait_ms, else NULL.
static Pswire__Header *
map_try(const char *url, uint64_t min_epoch, uint32_t wait_ms)
{
	Pswire__Header              h = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest g = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	g.min_epoch                   = min_epoch;
	h.deadline_ms                 = wait_ms;
	h.body_case                   = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req               = &g;
	Pswire__Header *rh = wire_call(url, PSWIRE__METHOD__GET_PLACEMENT, &h,
	    (int) wait_ms + 2000);
	if (rh != NULL && rh->status != PSWIRE__STATUS__OK) {
		pswire__header__free_unpacked(rh, NULL);
		rh = NULL;
	}
	return rh;
}

// server_of returns the server of shard i in reply rh's map.
static uint32_t
server_of(const Pswire__Header *rh, size_t i)
{
	ck_assert_int_eq(rh->placement->n_shards, NSHARDS);
	return rh->placement->shards[i]->server;
}

// A suspect server (its heartbeat connection closed) keeps its shards
// and gets no new one when a server joins; once it heartbeats again it
// is placed on like the others. Without suspects, the join's round-robin
// moves shards off the closed server and onto it.
START_TEST(test_cascade_suspect_server_no_moves)
{
	struct ps_scheduler *s   = sched_open(2, 60000, 1000);
	const char          *url = ps_scheduler_url(s);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:2"), 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	Pswire__Header *m1 = map_at_least(url, 1, 3000);
	nng_socket      a  = dial_sched(url);
	nng_socket      b  = dial_sched(url);
	beat_on(a, 0, 0);
	beat_on(b, 1, 0);
	nng_close(b); // server 1 killed: suspect at once
	// Server 0 stays well: it heartbeats on while server 2 joins.
	beat_on(a, 0, 0);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:3"), 0);
	Pswire__Header *m2 = map_at_least(url, 2, 3000);
	for (size_t i = 0; i < NSHARDS; i++) {
		ck_assert_msg((server_of(m1, i) == 1) ==
		        (server_of(m2, i) == 1),
		    "shard %zu moved between suspect server 1 and server %u",
		    i,
		    server_of(m1, i) == 1 ? server_of(m2, i)
		                          : server_of(m1, i));
	}
	// Server 1 heartbeats again: usable. The next join places on it.
	b = dial_sched(url);
	beat_on(b, 1, 2);
	beat_on(a, 0, 2);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:4"), 0);
	Pswire__Header *m3  = map_at_least(url, 3, 3000);
	int             on1 = 0;
	for (size_t i = 0; i < NSHARDS; i++) {
		on1 += server_of(m3, i) == 1 && server_of(m2, i) != 1;
		on1 += server_of(m3, i) != 1 && server_of(m2, i) == 1;
	}
	ck_assert_msg(on1 > 0,
	    "server 1 is still left out after it "
	    "heartbeated again");
	pswire__header__free_unpacked(m1, NULL);
	pswire__header__free_unpacked(m2, NULL);
	pswire__header__free_unpacked(m3, NULL);
	nng_close(a);
	nng_close(b);
	ps_scheduler_close(s);
}
END_TEST

// Server 2 dies while shards move to it: those whose sender (server 0)
// has not reported them delivered go back to it in a new map; the others
// stay. Without the unwind, no new map comes at all.
START_TEST(test_cascade_dead_server_moves_unwound)
{
	struct ps_scheduler *s   = sched_open(2, 60000, 300);
	const char          *url = ps_scheduler_url(s);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:2"), 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	Pswire__Header *m1 = map_at_least(url, 1, 3000);
	nng_socket      a = dial_sched(url), b = dial_sched(url);
	beat_on(a, 0, 1);
	beat_on(b, 1, 1);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:3"), 0);
	Pswire__Header *m2 = map_at_least(url, 2, 3000);
	nng_socket      c  = dial_sched(url);
	beat_on(c, 2, 2);
	nng_close(c); // server 2 killed
	// Server 1 delivered epoch 2's moves, server 0 did not; both keep
	// heartbeating until server 2 is declared dead (grace 0.6 s).
	Pswire__Header *m3 = NULL;
	for (int k = 0; k < 40 && m3 == NULL; k++) {
		beat_on(a, 0, 1);
		beat_on(b, 1, 2);
		m3 = map_try(url, 3, 100);
	}
	ck_assert_msg(m3 != NULL, "no map re-planned the moves to server 2");
	int back = 0;
	for (size_t i = 0; i < NSHARDS; i++) {
		uint32_t was = server_of(m1, i), to = server_of(m2, i);
		uint32_t now = server_of(m3, i);
		if (to == 2 && was == 0) {
			ck_assert_int_eq(now, 0); // never left server 0
			back++;
		} else {
			ck_assert_int_eq(now, to);
		}
	}
	ck_assert_int_gt(back, 0);
	pswire__header__free_unpacked(m1, NULL);
	pswire__header__free_unpacked(m2, NULL);
	pswire__header__free_unpacked(m3, NULL);
	nng_close(a);
	nng_close(b);
	ps_scheduler_close(s);
}
END_TEST

// has_server_age says whether the scheduler tracks server id (it has a
// heartbeat age: it was not declared dead).
static int
has_server_age(struct ps_scheduler *s, int id)
{
	struct obs_writer w = OBS_WRITER_INIT;
	char              want[128];
	PT_OK(obs_registry_write(ps_scheduler_metrics(s), &w));
	snprintf(want, sizeof(want),
	    "ferry_member_heartbeat_age_seconds{role=\"server\",id=\"%d\"} ",
	    id);
	int found = strstr(w.buf, want) != NULL;
	obs_writer_fini(&w);
	return found;
}

// shards_held returns the shards:N of server s's stats.
static long
shards_held(struct ps_server *s)
{
	char text[4096];
	ps_server_stats(s, text, sizeof(text));
	const char *p = strstr(text, "\r\nshards:");
	ck_assert_ptr_nonnull(p);
	return strtol(p + 9, NULL, 10);
}

// srv_open starts a real server with heartbeats for scheduler url.
static struct ps_server *
srv_open(const char *url, uint32_t heartbeat_ms)
{
	struct ps_server_opts o = PS_SERVER_OPTS_INIT;
	struct ps_server     *srv;
	o.url           = "tcp://127.0.0.1:0";
	o.scheduler_url = url;
	o.heartbeat_ms  = heartbeat_ms;
	PT_OK(ps_server_open(&o, &srv));
	return srv;
}

// wait_held waits up to ms for srv to hold n shards; returns whether it
// did.
static int
wait_held(struct ps_server *srv, long n, int ms)
{
	for (int t = 0; t < ms; t += 20) {
		if (shards_held(srv) == n) {
			return 1;
		}
		nng_msleep(20);
	}
	return shards_held(srv) == n;
}

// A real server sends every shard to a peer that takes the Transfer and
// never answers (a stopped process): its heartbeats go on, so the
// scheduler (dead after 1 s) never declares it dead, over 3 x that.
// Before heartbeats had their own thread they waited behind the 5 s
// Transfer and the healthy server was declared dead.
START_TEST(test_cascade_heartbeats_beside_a_hung_transfer)
{
	struct ps_scheduler *s   = sched_open(2, 1000, 100);
	const char          *url = ps_scheduler_url(s);
	nng_socket           hole;
	nng_msg             *m;
	char                 hole_url[64];
	ck_assert_int_eq(nng_rep0_open(&hole), 0);
	// Listen on a free port: bind :0, then read the port back.
	nng_listener l;
	ck_assert_int_eq(nng_listen(hole, "tcp://127.0.0.1:0", &l, 0), 0);
	nng_sockaddr sa;
	ck_assert_int_eq(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
	snprintf(hole_url, sizeof(hole_url), "tcp://127.0.0.1:%u",
	    (unsigned) ntohs(sa.s_in.sa_port));
	struct ps_server *srv = srv_open(url, 100);
	while (!has_server_age(s, 0)) { // server 0 registered first
		nng_msleep(10);
	}
	ck_assert_int_eq(register_server(url, hole_url), 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	pswire__header__free_unpacked(map_at_least(url, 1, 3000), NULL);
	ck_assert(wait_held(srv, 2, 5000));
	uint32_t all1[NSHARDS] = { 1, 1, 1, 1 };
	PT_OK(ps_scheduler_replace(s, all1, NSHARDS));
	// The Transfer arrives at the hole, which never answers.
	nng_socket_set_ms(hole, NNG_OPT_RECVTIMEO, 5000);
	ck_assert_int_eq(nng_recvmsg(hole, &m, 0), 0);
	nng_msg_free(m);
	uint64_t t0 = fb_clock_ms();
	while (fb_clock_ms() - t0 < 3000) {
		ck_assert_msg(has_server_age(s, 0),
		    "server 0 declared dead %llu ms into a hung transfer",
		    (unsigned long long) (fb_clock_ms() - t0));
		nng_msleep(50);
	}
	nng_close(hole); // its connection closes: the transfer ends
	ps_server_close(srv);
	ps_scheduler_close(s);
}
END_TEST

// Server 1 is killed while server 0's shards move to it (its address now
// refuses, its heartbeat connection closed): it is declared dead, the
// moves go back to server 0 in a new map, and server 0 (never declared
// dead) holds its shards again within seconds, and server 1's own two,
// re-seeded there from the trainers (scheduler_reseed.c). Before, its
// Transfer waited on the dead peer call after call and never followed the
// map.
START_TEST(test_cascade_kill_during_move)
{
	struct ps_scheduler *s   = sched_open(2, 60000, 200);
	const char          *url = ps_scheduler_url(s);
	char                 gone_url[64];
	nng_socket           tmp;
	nng_listener         l;
	nng_sockaddr         sa;
	// A port that refuses: bound, read back, closed.
	ck_assert_int_eq(nng_rep0_open(&tmp), 0);
	ck_assert_int_eq(nng_listen(tmp, "tcp://127.0.0.1:0", &l, 0), 0);
	ck_assert_int_eq(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
	snprintf(gone_url, sizeof(gone_url), "tcp://127.0.0.1:%u",
	    (unsigned) ntohs(sa.s_in.sa_port));
	nng_close(tmp);
	struct ps_server *srv = srv_open(url, 100);
	while (!has_server_age(s, 0)) {
		nng_msleep(10);
	}
	ck_assert_int_eq(register_server(url, gone_url), 0);
	nng_socket b = dial_sched(url);
	beat_on(b, 1, 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	pswire__header__free_unpacked(map_at_least(url, 1, 3000), NULL);
	ck_assert(wait_held(srv, 2, 5000));
	uint32_t all1[NSHARDS] = { 1, 1, 1, 1 };
	beat_on(b, 1, 1);
	PT_OK(ps_scheduler_replace(s, all1, NSHARDS));
	ck_assert(wait_held(srv, 0, 5000)); // packed, on their way
	uint64_t t0 = fb_clock_ms();
	nng_close(b); // server 1 killed
	Pswire__Header *m3 = map_at_least(url, 3, 5000);
	pswire__header__free_unpacked(m3, NULL);
	ck_assert_msg(wait_held(srv, 4, 6000),
	    "server 0 holds %ld shards %llu ms after server 1 died",
	    shards_held(srv), (unsigned long long) (fb_clock_ms() - t0));
	ck_assert(has_server_age(s, 0));
	ps_server_close(srv);
	ps_scheduler_close(s);
}
END_TEST

Suite *
suite_cascade(void)
{
	Suite *s  = suite_create("cascade");
	TCase *tc = tcase_create("cascade");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cascade_suspect_server_no_moves);
	tcase_add_test(tc, test_cascade_dead_server_moves_unwound);
	tcase_add_test(tc, test_cascade_heartbeats_beside_a_hung_transfer);
	tcase_add_test(tc, test_cascade_kill_during_move);
	suite_add_tcase(s, tc);
	return s;
}
