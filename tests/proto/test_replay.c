// test_replay.c — what a signature binds besides the bytes (auth.c
// DESIGN): a request signed for one receiver is refused by every other
// (another server, the scheduler), one signed in another job run is
// refused, one signed outside the freshness window either way is
// refused, a fresh receiver refuses what was signed before its start less
// the window, a floor loaded from disk refuses what it covers, and a
// scheduler's reply hands its run to the member it answers. Trailers
// forged here carry a real GMAC (libgcrypt's, under the key), so only
// the field under test is wrong.
#include <gcrypt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "ferry.pb-c.h"
#include "proto_tests.h"
#include "psw/psw.h"
#include "pt.h"

#define KEY "a key for the replay tests, 32 b"

static const struct psw_ident TRAINER0 = { PSW_ROLE_TRAINER, 0 };

static struct psw_auth *
open_as(int role, uint32_t id)
{
	char             path[64], why[256] = "";
	struct psw_auth *a = NULL;
	snprintf(path, sizeof(path), "/tmp/ferry-key-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, KEY, strlen(KEY)), (ssize_t) strlen(KEY));
	close(fd);
	int rv = psw_auth_open(path, role, id, &a, why, sizeof(why));
	unlink(path);
	ck_assert_msg(rv == FB_OK, "psw_auth_open: %s", why);
	return a;
}

// request builds an unsigned request of method with a 32-byte payload.
static nng_msg *
request(uint8_t method)
{
	Pswire__Header h = PSWIRE__HEADER__INIT;
	nng_msg       *m;
	uint8_t       *payload;
	h.request_id = 3;
	size_t hl    = pswire__header__get_packed_size(&h);
	PT_OK(psw_msg_begin(&m, hl, 32, &payload));
	memset(payload, 0x5a, 32);
	PT_OK(psw_msg_finish(m, method, 0, &h.base, hl, 32));
	return m;
}

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

// forged fields of a trailer.
struct fields {
	struct psw_ident from, to;
	uint64_t         counter, run;
};

// forge signs m as a key holder could, with any fields: GMAC-AES256 under
// SHA-256 of KEY, IV = the trailer's first 16 bytes and the counter.
static void
forge(nng_msg *m, const struct fields *fl)
{
	uint8_t       t[48] = { 0 }, key[32], iv[24], tag[16];
	size_t        n     = sizeof(tag);
	gcry_mac_hd_t h;
	uint8_t      *body = nng_msg_body(m);

	body[6] |= PSW_FLAG_SIGNED;
	t[0] = (uint8_t) fl->from.role;
	t[1] = (uint8_t) fl->to.role;
	memcpy(t + 4, &fl->from.id, 4); // little-endian hosts only
	memcpy(t + 8, "nnce", 4);
	memcpy(t + 12, &fl->to.id, 4);
	uint64_t ch = 77;
	memcpy(t + 16, &ch, 8);
	memcpy(t + 24, &fl->counter, 8);
	memcpy(t + 40, &fl->run, 8);
	ck_assert_int_eq(nng_msg_append(m, t, sizeof(t)), 0);
	memcpy(iv, t, 16);
	memcpy(iv + 16, t + 24, 8);
	gcry_md_hash_buffer(GCRY_MD_SHA256, key, KEY, strlen(KEY));
	ck_assert_int_eq(gcry_mac_open(&h, GCRY_MAC_GMAC_AES, 0, NULL), 0);
	ck_assert_int_eq(gcry_mac_setkey(h, key, sizeof(key)), 0);
	ck_assert_int_eq(gcry_mac_setiv(h, iv, sizeof(iv)), 0);
	ck_assert_int_eq(gcry_mac_write(h, nng_msg_body(m), nng_msg_len(m)),
	    0);
	ck_assert_int_eq(gcry_mac_read(h, tag, &n), 0);
	gcry_mac_close(h);
	ck_assert_int_eq(nng_msg_append(m, tag, sizeof(tag)), 0);
}

// check checks m as a request on b; returns the refusal's reason name
// ("ok" when accepted).
static const char *
check(struct psw_auth *b, nng_msg *m)
{
	struct psw_frame f;
	struct psw_ident who;
	const char      *why = NULL;
	uint64_t         ch, ctr;
	PT_OK(psw_msg_parse(m, &f, &why));
	if (psw_auth_check_request(b, &f, &who, &ch, &ctr, &why) == FB_OK) {
		return "ok";
	}
	return psw_auth_reason(why);
}

// A request signed on a context named for server 0 is taken by server 0
// only: server 1 and the scheduler refuse the same bytes. A context never
// named sends the scheduler's methods to the scheduler and no server.
START_TEST(test_replay_other_receiver)
{
	struct psw_auth *a   = open_as(PSW_ROLE_TRAINER, 0);
	struct psw_auth *s0  = open_as(PSW_ROLE_SERVER, 0);
	struct psw_auth *s1  = open_as(PSW_ROLE_SERVER, 1);
	struct psw_auth *sch = open_as(PSW_ROLE_SCHEDULER, 0);
	nng_socket       sock;
	nng_ctx          to0, unnamed;
	nng_msg         *m, *copy[2];

	ck_assert_int_eq(nng_req0_open(&sock), 0);
	ck_assert_int_eq(nng_ctx_open(&to0, sock), 0);
	ck_assert_int_eq(nng_ctx_open(&unnamed, sock), 0);
	PT_OK(psw_auth_set_peer(a, to0, PSW_ROLE_SERVER, 0));

	m = request(PSWIRE__METHOD__PROBE);
	PT_OK(psw_auth_sign(a, m, psw_auth_channel(a, to0), 0, NULL));
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(nng_msg_dup(&copy[i], m), 0);
	}
	ck_assert_str_eq(check(s1, copy[0]), "wrong_receiver");
	ck_assert_str_eq(check(sch, copy[1]), "wrong_receiver");
	ck_assert_str_eq(check(s0, m), "ok");
	ck_assert_str_eq(check(s0, m), "replay");
	for (int i = 0; i < 2; i++) {
		nng_msg_free(copy[i]);
	}
	nng_msg_free(m);

	// Unnamed: a Push goes to no server, a Heartbeat to the scheduler.
	m = request(PSWIRE__METHOD__PUSH);
	PT_OK(psw_auth_sign(a, m, psw_auth_channel(a, unnamed), 0, NULL));
	ck_assert_str_eq(check(s0, m), "wrong_receiver");
	nng_msg_free(m);
	m = request(PSWIRE__METHOD__HEARTBEAT);
	PT_OK(psw_auth_sign(a, m, psw_auth_channel(a, unnamed), 0, NULL));
	ck_assert_int_eq(nng_msg_dup(&copy[0], m), 0);
	ck_assert_str_eq(check(s0, copy[0]), "wrong_receiver");
	ck_assert_str_eq(check(sch, m), "ok");
	nng_msg_free(copy[0]);
	nng_msg_free(m);

	// A server that has no slot yet takes nothing, whatever slot the
	// request names: a refusal the sender retries (no_slot_yet, answered
	// UNAVAILABLE), since the map may name it before it read its slot.
	struct psw_auth *fresh = open_as(PSW_ROLE_SERVER, PSW_ID_UNASSIGNED);
	struct fields fl = { TRAINER0, { PSW_ROLE_SERVER, PSW_ID_UNASSIGNED },
		now_ns(), 0 };
	m                = request(PSWIRE__METHOD__PULL);
	forge(m, &fl);
	ck_assert_str_eq(check(fresh, m), "no_slot_yet");
	nng_msg_free(m);
	fl.to.id = 0;
	m        = request(PSWIRE__METHOD__PULL);
	forge(m, &fl);
	ck_assert_str_eq(check(fresh, m), "no_slot_yet");
	nng_msg_free(m);
	psw_auth_close(fresh);

	nng_close(sock);
	psw_auth_close(a);
	psw_auth_close(s0);
	psw_auth_close(s1);
	psw_auth_close(sch);
}
END_TEST

// The run: another run's request is refused, run 0 reaches the scheduler
// only, and a scheduler's reply teaches the caller the run.
START_TEST(test_replay_other_run)
{
	struct psw_auth *a   = open_as(PSW_ROLE_TRAINER, 0);
	struct psw_auth *s0  = open_as(PSW_ROLE_SERVER, 0);
	struct psw_auth *sch = open_as(PSW_ROLE_SCHEDULER, 0);
	struct psw_ident to  = { PSW_ROLE_SCHEDULER, 0 };
	struct psw_ident srv = { PSW_ROLE_SERVER, 0 };
	struct psw_frame f;
	const char      *why;
	uint64_t         ctr, ch;
	nng_msg         *m;

	psw_auth_set_run(sch, 0x1111);
	psw_auth_set_run(s0, 0x1111);
	// Run 0 (nothing learned yet): a Stats to the scheduler only, not
	// a Register (a recorded first Register never joins a later job).
	m = request(PSWIRE__METHOD__REGISTER);
	PT_OK(psw_auth_sign_to(a, m, 9, to, 0, NULL));
	ck_assert_str_eq(check(sch, m), "wrong_run");
	nng_msg_free(m);
	m = request(PSWIRE__METHOD__STATS);
	PT_OK(psw_auth_sign_to(a, m, 9, to, 0, &ctr));
	ck_assert_str_eq(check(sch, m), "ok");
	nng_msg_free(m);
	m = request(PSWIRE__METHOD__STATS);
	PT_OK(psw_auth_sign_to(a, m, 9, srv, 0, NULL));
	ck_assert_str_eq(check(s0, m), "wrong_run");
	nng_msg_free(m);

	// The scheduler's reply to it carries the run: a signs with it.
	m = request(PSWIRE__METHOD__STATS);
	((uint8_t *) nng_msg_body(m))[6] |= PSW_FLAG_REPLY;
	PT_OK(psw_auth_sign(sch, m, 9, ctr, NULL));
	PT_OK(psw_msg_parse(m, &f, &why));
	ck_assert_uint_eq(psw_auth_run(a), 0);
	PT_OK(psw_auth_check_reply(a, &f, ctr, PSW_ROLE_SCHEDULER, &why));
	ck_assert_uint_eq(psw_auth_run(a), 0x1111);
	nng_msg_free(m);
	m = request(PSWIRE__METHOD__PULL);
	PT_OK(psw_auth_sign_to(a, m, 9, srv, 0, NULL));
	ck_assert_str_eq(check(s0, m), "ok");
	nng_msg_free(m);

	// A new job under the same key: another run. What the old one
	// signed (run 0x1111) is refused, at the scheduler too.
	psw_auth_set_run(sch, 0x2222);
	m = request(PSWIRE__METHOD__HEARTBEAT);
	PT_OK(psw_auth_sign_to(a, m, 9, to, 0, NULL));
	ck_assert_str_eq(check(sch, m), "wrong_run");
	nng_msg_free(m);
	(void) ch;
	psw_auth_close(a);
	psw_auth_close(s0);
	psw_auth_close(sch);
}
END_TEST

// Freshness: a counter beyond the window either way is refused; inside
// it, taken. A receiver opened after a request was signed, with a window
// that has passed since, refuses it (a restart with no state).
START_TEST(test_replay_window)
{
	struct psw_auth *sch = open_as(PSW_ROLE_SCHEDULER, 0);
	struct psw_ident to  = { PSW_ROLE_SCHEDULER, 0 };
	const uint64_t   min = 60ull * 1000000000u;
	uint64_t         now = now_ns();
	struct {
		uint64_t    counter;
		const char *want;
	} cases[] = {
		{ now - 3 * min, "stale" }, { now + 3 * min, "future" },
		{ now + 1 * min, "ok" },
		{ now - 1 * min, "replay" }, // in the window, below the last
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fields fl = { TRAINER0, to, cases[i].counter, 0 };
		nng_msg      *m  = request(PSWIRE__METHOD__STATS);
		forge(m, &fl);
		ck_assert_msg(strcmp(check(sch, m), cases[i].want) == 0,
		    "case %zu: want %s", i, cases[i].want);
		nng_msg_free(m);
	}
	psw_auth_close(sch);

	// Signed, then a receiver starts with a 1 ms window; once 2 ms
	// passed on the clock, the request is older than start - window.
	struct psw_auth *a = open_as(PSW_ROLE_TRAINER, 0);
	nng_msg         *m = request(PSWIRE__METHOD__STATS);
	PT_OK(psw_auth_sign_to(a, m, 9, to, 0, NULL));
	uint64_t signed_at = now_ns();
	sch                = open_as(PSW_ROLE_SCHEDULER, 0);
	psw_auth_set_window(sch, 1);
	while (now_ns() < signed_at + 2000000u) {
		// wait on the clock itself
	}
	ck_assert_str_eq(check(sch, m), "stale");
	nng_msg_free(m);
	psw_auth_close(a);
	psw_auth_close(sch);
}
END_TEST

static uint64_t hook_last;
static int      hook_fail;

static int
hook(void *arg, struct psw_ident who, uint64_t counter)
{
	(void) arg;
	ck_assert_int_eq(who.role, PSW_ROLE_TRAINER);
	hook_last = counter;
	return hook_fail;
}

// Floors loaded at start refuse what they cover; the accept hook hears
// each counter before it is taken and can refuse it.
START_TEST(test_replay_floor_and_hook)
{
	struct psw_auth *sch = open_as(PSW_ROLE_SCHEDULER, 0);
	struct psw_auth *a   = open_as(PSW_ROLE_TRAINER, 0);
	struct psw_ident to  = { PSW_ROLE_SCHEDULER, 0 };
	nng_msg         *m1  = request(PSWIRE__METHOD__STATS), *m2;
	uint64_t         c1, c2;

	PT_OK(psw_auth_sign_to(a, m1, 9, to, 0, &c1));
	m2 = request(PSWIRE__METHOD__STATS);
	PT_OK(psw_auth_sign_to(a, m2, 10, to, 0, &c2));
	PT_OK(psw_auth_set_floor(sch, TRAINER0, c1));
	ck_assert_str_eq(check(sch, m1), "replay");
	psw_auth_on_accept(sch, hook, NULL);
	hook_fail = 1;
	ck_assert_str_eq(check(sch, m2), "internal");
	hook_fail = 0;
	ck_assert_str_eq(check(sch, m2), "ok");
	ck_assert_uint_eq(hook_last, c2);
	ck_assert_uint_eq(psw_auth_refused(sch), 2);
	ck_assert_str_eq(psw_auth_reason("anything else"), "identity");
	nng_msg_free(m1);
	nng_msg_free(m2);
	psw_auth_close(a);
	psw_auth_close(sch);
}
END_TEST

// Counters are the wall clock: unique, and within the window of a
// receiver's clock however many a process signs.
START_TEST(test_replay_counter_is_clock)
{
	struct psw_auth *a    = open_as(PSW_ROLE_TRAINER, 0);
	struct psw_ident to   = { PSW_ROLE_SCHEDULER, 0 };
	uint64_t         last = 0, c;
	for (int i = 0; i < 1000; i++) {
		nng_msg *m = request(PSWIRE__METHOD__STATS);
		PT_OK(psw_auth_sign_to(a, m, 9, to, 0, &c));
		ck_assert_uint_gt(c, last);
		last = c;
		nng_msg_free(m);
	}
	uint64_t now = now_ns();
	ck_assert_uint_le(last, now + 1000000u);
	ck_assert_uint_ge(last + 1000000000u, now);
	psw_auth_close(a);
}
END_TEST

Suite *
suite_replay(void)
{
	Suite *s  = suite_create("replay");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_replay_other_receiver);
	tcase_add_test(tc, test_replay_other_run);
	tcase_add_test(tc, test_replay_window);
	tcase_add_test(tc, test_replay_floor_and_hook);
	tcase_add_test(tc, test_replay_counter_is_clock);
	suite_add_tcase(s, tc);
	return s;
}
