// test_rpclimits.c — the LIMITS counts (ps/src/common/rpclimits.c) against
// the scan rpc.c used to do: many calls taken, resized and released in a
// random order over a few connections, hosts and members, the table grown
// on the way; after every step each cap's verdict and count must be what
// counting the held calls one by one gives. Keys are chosen to collide in
// the table, so that the backward-shift deletion is exercised.
#include <stdlib.h>
#include <string.h>

#include "fb/fb.h"
#include "ps_tests.h"
#include "rpc.h"
#include "rpclimits.h"

enum { CALLS = 600, STEPS = 40000 };

static struct ps_call calls[CALLS];
static int            taken[CALLS], ntaken;

// scan counts what rpc.c's scan would: calls, bytes of connection pipe;
// calls of host and member; bytes of all.
static void
scan(uint32_t pipe, uint64_t host, uint64_t member, int *pc, size_t *pb,
    int *hc, int *mc, size_t *total)
{
	*pc = *hc = *mc = 0;
	*pb = *total = 0;
	for (int i = 0; i < CALLS; i++) {
		const struct ps_call *c = &calls[i];
		*total += c->held;
		if (c->pipe != 0 && c->pipe == pipe) {
			(*pc)++;
			*pb += c->held;
		}
		*hc += host != 0 && c->host == host;
		*mc += member != 0 && c->member == member;
	}
}

START_TEST(test_rpclimits_counts_match_a_scan)
{
	struct ps_lim *l;
	ck_assert_int_eq(ps__lim_open(16, &l), FB_OK);
	srand(7);
	struct ps_lim_caps caps  = { .conn_calls = 40,
		 .host_calls                     = 300,
		 .conn_bytes                     = 1u << 20,
		 .all_bytes                      = 24u << 20 };
	int                grown = 16;
	for (int step = 0; step < STEPS; step++) {
		int             i = rand() % CALLS;
		struct ps_call *c = &calls[i];
		if (grown < CALLS && step % 500 == 0) {
			grown += 64;
			ck_assert_int_eq(ps__lim_grow(l, grown), FB_OK);
		}
		if (taken[i] && rand() % 3 == 0) {
			ps__lim_resize(l, c, (size_t) (rand() % 70000));
			continue;
		}
		if (taken[i]) {
			ps__lim_release(l, c);
			taken[i] = 0;
			ntaken--;
			ck_assert_uint_eq(c->pipe, 0);
			ck_assert_uint_eq(c->held, 0);
			continue;
		}
		if (ntaken >= grown) {
			continue; // (rpc.c: a call per context at most)
		}
		// Pipe ids 1..64 stride 64 apart collide in small tables.
		uint32_t pipe   = 1 + (uint32_t) (rand() % 64) * 64;
		uint64_t host   = rand() % 4 == 0 ? 0 : 1 + rand() % 5;
		uint64_t member = rand() % 2 ? 0 : 1ull << 63 | rand() % 40;
		size_t   mine   = (size_t) (rand() % 100000);
		int      pc, hc, mc;
		size_t   pb, total;
		scan(pipe, host, member, &pc, &pb, &hc, &mc, &total);
		enum ps_lim_over want = PS_LIM_OK;
		if (pc >= caps.conn_calls) {
			want = PS_LIM_CONN_CALLS;
		} else if (member != 0 && mc >= caps.conn_calls) {
			want = PS_LIM_MEMBER_CALLS;
		} else if (member == 0 && host != 0 && hc >= caps.host_calls) {
			want = PS_LIM_HOST_CALLS;
		} else if (pb + mine > caps.conn_bytes) {
			want = PS_LIM_CONN_BYTES;
		} else if (total + mine > caps.all_bytes) {
			want = PS_LIM_TOTAL_BYTES;
		}
		struct ps_lim_seen seen;
		enum ps_lim_over   got = ps__lim_take(l, c, pipe, host, member,
		      mine, &caps, &seen);
		ck_assert_int_eq(got, want);
		ck_assert_uint_eq(seen.total, total);
		if (got == PS_LIM_OK) {
			taken[i] = 1;
			ntaken++;
			ck_assert_uint_eq(ps__lim_conn_bytes(l, pipe),
			    pb + mine);
		} else {
			ck_assert_uint_eq(seen.bytes, pb);
			ck_assert_uint_eq(ps__lim_conn_bytes(l, pipe), pb);
		}
		if (got == PS_LIM_CONN_CALLS) {
			ck_assert_int_eq(seen.calls, pc);
		} else if (got == PS_LIM_MEMBER_CALLS) {
			ck_assert_int_eq(seen.calls, mc);
		} else if (got == PS_LIM_HOST_CALLS) {
			ck_assert_int_eq(seen.calls, hc);
		}
	}
	for (int i = 0; i < CALLS; i++) {
		if (taken[i]) {
			ps__lim_release(l, &calls[i]);
		}
	}
	for (uint32_t p = 1; p <= 64 * 64; p += 64) {
		ck_assert_uint_eq(ps__lim_conn_bytes(l, p), 0);
	}
	ps__lim_close(l);
}
END_TEST

START_TEST(test_rpclimits_peer_cache)
{
	struct ps_lim *l;
	uint64_t       h, m;
	ck_assert_int_eq(ps__lim_open(4, &l), FB_OK);
	ck_assert_int_eq(ps__lim_peer(l, 5, &h, &m), 0);
	ps__lim_peer_put(l, 5, 11, 12);
	ck_assert_int_eq(ps__lim_peer(l, 5, &h, &m), 1);
	ck_assert_uint_eq(h, 11);
	ck_assert_uint_eq(m, 12);
	// Another pipe in the same slot replaces it: a miss, not its keys.
	ps__lim_peer_put(l, 5 + 64, 21, 0);
	ck_assert_int_eq(ps__lim_peer(l, 5, &h, &m), 0);
	ck_assert_int_eq(ps__lim_grow(l, 1000), FB_OK);
	ck_assert_int_eq(ps__lim_peer(l, 5 + 64, &h, &m), 1);
	ck_assert_uint_eq(h, 21);
	ps__lim_close(l);
}
END_TEST

Suite *
suite_rpclimits(void)
{
	Suite *s  = suite_create("rpclimits");
	TCase *tc = tcase_create("rpclimits");
	tcase_add_test(tc, test_rpclimits_counts_match_a_scan);
	tcase_add_test(tc, test_rpclimits_peer_cache);
	suite_add_tcase(s, tc);
	return s;
}
