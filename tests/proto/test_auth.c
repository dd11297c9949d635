// test_auth.c — signed frames (auth.c): a signed request checks; one
// altered byte, another key, no signature, a replay or a reordering on a
// channel is refused; another channel keeps its own order; a reply must
// answer its request and come from the expected role; bad key files are
// refused with a reason; every tag is GMAC-AES256 exactly as libgcrypt
// computes it, at every length (the wire format does not depend on which
// GHASH a member's CPU runs).
#include <gcrypt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <nng/nng.h>

#include "ferry.pb-c.h"
#include "proto_tests.h"
#include "psw/psw.h"
#include "pt.h"

// key_file writes text into a fresh temporary file, whose path goes to
// path (size n).
static void
key_file(char *path, size_t n, const char *text)
{
	snprintf(path, n, "/tmp/ferry-key-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)),
	    (ssize_t) strlen(text));
	close(fd);
}

static struct psw_auth *
open_auth(const char *text, int role, uint32_t id)
{
	char             path[64], why[256] = "";
	struct psw_auth *a = NULL;
	key_file(path, sizeof(path), text);
	int rv = psw_auth_open(path, role, id, &a, why, sizeof(why));
	unlink(path);
	ck_assert_msg(rv == FB_OK, "psw_auth_open: %s", why);
	return a;
}

// The receivers the tests sign for.
static const struct psw_ident S0    = { PSW_ROLE_SERVER, 0 };
static const struct psw_ident SCHED = { PSW_ROLE_SCHEDULER, 0 };

// message builds a request (or reply) with a 64-byte payload of x.
static nng_msg *
message(uint16_t flags, uint8_t x)
{
	Pswire__Header h = PSWIRE__HEADER__INIT;
	nng_msg       *m;
	uint8_t       *payload;
	h.request_id = 9;
	size_t hl    = pswire__header__get_packed_size(&h);
	PT_OK(psw_msg_begin(&m, hl, 64, &payload));
	memset(payload, x, 64);
	PT_OK(psw_msg_finish(m, PSWIRE__METHOD__PUSH, flags, &h.base, hl, 64));
	return m;
}

// check parses m and checks it as a request on b; returns the result.
static int
check(struct psw_auth *b, nng_msg *m, struct psw_ident *who)
{
	struct psw_frame f;
	const char      *why = NULL;
	uint64_t         ch, ctr;
	if (psw_msg_parse(m, &f, &why) != FB_OK) {
		return FB_EPROTO;
	}
	return psw_auth_check_request(b, &f, who, &ch, &ctr, &why);
}

START_TEST(test_auth_sign_check)
{
	struct psw_auth *a = open_auth("0123456789abcdef-key\n",
	    PSW_ROLE_TRAINER, 3);
	struct psw_auth *b = open_auth("0123456789abcdef-key", PSW_ROLE_SERVER,
	    0);
	struct psw_ident who;
	nng_msg         *m     = message(0, 1);
	size_t           plain = nng_msg_len(m);

	PT_OK(psw_auth_sign_to(a, m, 5, S0, 0, NULL));
	ck_assert_uint_eq(nng_msg_len(m), plain + PSW_AUTH_TRAILER);
	PT_OK(check(b, m, &who));
	ck_assert_int_eq(who.role, PSW_ROLE_TRAINER);
	ck_assert_uint_eq(who.id, 3);
	// The same bytes again: a replay.
	PT_FAIL(check(b, m, &who), FB_EAUTH);
	nng_msg_free(m);
	ck_assert_uint_eq(psw_auth_refused(b), 1);

	// One payload byte changed after signing.
	m = message(0, 1);
	PT_OK(psw_auth_sign_to(a, m, 5, S0, 0, NULL));
	((uint8_t *) nng_msg_body(
	    m))[nng_msg_len(m) - PSW_AUTH_TRAILER - 1] ^= 1;
	PT_FAIL(check(b, m, &who), FB_EAUTH);
	nng_msg_free(m);

	// Unsigned, to a receiver that requires signatures.
	m = message(0, 1);
	PT_FAIL(check(b, m, &who), FB_EAUTH);
	nng_msg_free(m);

	// Signed with another key.
	struct psw_auth *z = open_auth("another key, 16+ bytes",
	    PSW_ROLE_TRAINER, 3);
	m                  = message(0, 1);
	PT_OK(psw_auth_sign_to(z, m, 5, S0, 0, NULL));
	PT_FAIL(check(b, m, &who), FB_EAUTH);
	nng_msg_free(m);
	psw_auth_close(z);
	psw_auth_close(a);
	psw_auth_close(b);
}
END_TEST

// Two requests on one channel must arrive in their signing order; on two
// channels, in any order.
START_TEST(test_auth_order_per_channel)
{
	struct psw_auth *a = open_auth("0123456789abcdef-key",
	    PSW_ROLE_TRAINER, 0);
	struct psw_auth *b = open_auth("0123456789abcdef-key",
	    PSW_ROLE_SCHEDULER, 0);
	struct psw_ident who;
	nng_msg         *m1 = message(0, 1), *m2 = message(0, 2);
	nng_msg         *m3 = message(0, 3), *m4 = message(0, 4);

	PT_OK(psw_auth_sign_to(a, m1, 7, SCHED, 0, NULL));
	PT_OK(psw_auth_sign_to(a, m2, 7, SCHED, 0, NULL));
	PT_OK(psw_auth_sign_to(a, m3, 8, SCHED, 0, NULL));
	PT_OK(psw_auth_sign_to(a, m4, 8, SCHED, 0, NULL));
	PT_OK(check(b, m2, &who));
	PT_FAIL(check(b, m1, &who), FB_EAUTH); // reordered on channel 7
	PT_OK(check(b, m4, &who));             // channel 8: its own order
	PT_FAIL(check(b, m3, &who), FB_EAUTH);
	nng_msg_free(m1);
	nng_msg_free(m2);
	nng_msg_free(m3);
	nng_msg_free(m4);
	psw_auth_close(a);
	psw_auth_close(b);
}
END_TEST

// Evicting old channels of a sender (a member that opened many sockets)
// must not let any of their requests be replayed.
START_TEST(test_auth_evicted_channel_replay)
{
	struct psw_auth *a = open_auth("0123456789abcdef-key",
	    PSW_ROLE_TRAINER, 0);
	struct psw_auth *b = open_auth("0123456789abcdef-key",
	    PSW_ROLE_SCHEDULER, 0);
	struct psw_ident who;
	nng_msg         *old = message(0, 1);
	PT_OK(psw_auth_sign_to(a, old, 1, SCHED, 0, NULL));
	nng_msg *keep;
	ck_assert_int_eq(nng_msg_dup(&keep, old), 0);
	PT_OK(check(b, old, &who));
	for (uint64_t ch = 2; ch < 100; ch++) {
		nng_msg *m = message(0, 1);
		PT_OK(psw_auth_sign_to(a, m, ch, SCHED, 0, NULL));
		PT_OK(check(b, m, &who));
		nng_msg_free(m);
	}
	PT_FAIL(check(b, keep, &who), FB_EAUTH);
	nng_msg_free(keep);
	nng_msg_free(old);
	psw_auth_close(a);
	psw_auth_close(b);
}
END_TEST

// A reply must answer the request signed with reply_to and come from the
// role the caller expects.
START_TEST(test_auth_reply_binding)
{
	struct psw_auth *srv = open_auth("0123456789abcdef-key",
	    PSW_ROLE_SERVER, 1);
	struct psw_auth *cli = open_auth("0123456789abcdef-key",
	    PSW_ROLE_TRAINER, 0);
	struct psw_frame f;
	const char      *why = NULL;
	nng_msg         *m   = message(PSW_FLAG_REPLY, 5);

	PT_OK(psw_auth_sign(srv, m, 4, 1234, NULL));
	PT_OK(psw_msg_parse(m, &f, &why));
	PT_OK(psw_auth_check_reply(cli, &f, 1234, PSW_ROLE_SERVER, &why));
	PT_FAIL(psw_auth_check_reply(cli, &f, 1235, PSW_ROLE_SERVER, &why),
	    FB_EAUTH);
	PT_FAIL(psw_auth_check_reply(cli, &f, 1234, PSW_ROLE_SCHEDULER, &why),
	    FB_EAUTH);
	// With authentication off everything passes and nothing is signed.
	PT_OK(psw_auth_check_reply(NULL, &f, 1, PSW_ROLE_SCHEDULER, &why));
	nng_msg_free(m);
	m        = message(0, 1);
	size_t n = nng_msg_len(m);
	PT_OK(psw_auth_sign(NULL, m, 1, 0, NULL));
	ck_assert_uint_eq(nng_msg_len(m), n);
	nng_msg_free(m);
	psw_auth_close(srv);
	psw_auth_close(cli);
}
END_TEST

// The tag of a signed message of each length (empty payload to 1 MiB +
// 37, across ghash.c's 512-byte steps and partial blocks) is GMAC-AES256
// under SHA-256 of the key file with IV = the trailer's role, id, nonce
// and counter, computed here by libgcrypt's own GMAC.
START_TEST(test_auth_tag_is_gmac)
{
	static const size_t lens[] = { 0, 1, 15, 16, 17, 100, 431, 432, 433,
		511, 512, 513, 1000, 4096, 65536 + 5, (1u << 20) + 37 };
	const char         *text   = "a key for the tag test, 32 bytes";
	struct psw_auth    *a      = open_auth(text, PSW_ROLE_TRAINER, 3);
	uint8_t             key[32];
	gcry_mac_hd_t       h;

	gcry_md_hash_buffer(GCRY_MD_SHA256, key, text, strlen(text));
	ck_assert_int_eq(gcry_mac_open(&h, GCRY_MAC_GMAC_AES, 0, NULL), 0);
	ck_assert_int_eq(gcry_mac_setkey(h, key, sizeof(key)), 0);
	for (size_t i = 0; i < sizeof(lens) / sizeof(*lens); i++) {
		Pswire__Header h0 = PSWIRE__HEADER__INIT;
		nng_msg       *m;
		uint8_t       *payload, iv[24], want[16];
		size_t hl = pswire__header__get_packed_size(&h0), n = 16;
		PT_OK(psw_msg_begin(&m, hl, lens[i], &payload));
		for (size_t k = 0; k < lens[i]; k++) {
			payload[k] = (uint8_t) (k * 131 + i);
		}
		PT_OK(psw_msg_finish(m, PSWIRE__METHOD__PUSH, 0, &h0.base, hl,
		    lens[i]));
		PT_OK(psw_auth_sign(a, m, 5 + i, 0, NULL));
		const uint8_t *b   = nng_msg_body(m);
		size_t         len = nng_msg_len(m);
		const uint8_t *t   = b + len - PSW_AUTH_TRAILER;
		memcpy(iv, t, 16);          // role, to_role, id, nonce, to_id
		memcpy(iv + 16, t + 24, 8); // counter
		gcry_mac_reset(h);
		ck_assert_int_eq(gcry_mac_setiv(h, iv, sizeof(iv)), 0);
		ck_assert_int_eq(gcry_mac_write(h, b, len - 16), 0);
		ck_assert_int_eq(gcry_mac_read(h, want, &n), 0);
		ck_assert_msg(memcmp(want, b + len - 16, 16) == 0,
		    "payload of %zu bytes: tag differs from libgcrypt's GMAC",
		    lens[i]);
		nng_msg_free(m);
	}
	gcry_mac_close(h);
	psw_auth_close(a);
}
END_TEST

START_TEST(test_auth_bad_key_file)
{
	char             path[64], why[256] = "";
	struct psw_auth *a = NULL;
	key_file(path, sizeof(path), "short\n");
	PT_FAIL(psw_auth_open(path, PSW_ROLE_TRAINER, 0, &a, why, sizeof(why)),
	    FB_EINVAL);
	ck_assert_msg(strstr(why, "16 to 4096 bytes") != NULL, "why: %s", why);
	unlink(path);
	PT_FAIL(psw_auth_open("/nonexistent/key", PSW_ROLE_TRAINER, 0, &a, why,
	            sizeof(why)),
	    FB_EINVAL);
	ck_assert_msg(strstr(why, "/nonexistent/key") != NULL, "why: %s", why);
	ck_assert_ptr_null(a);
}
END_TEST

Suite *
suite_auth(void)
{
	Suite *s  = suite_create("auth");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_auth_sign_check);
	tcase_add_test(tc, test_auth_order_per_channel);
	tcase_add_test(tc, test_auth_evicted_channel_replay);
	tcase_add_test(tc, test_auth_reply_binding);
	tcase_add_test(tc, test_auth_bad_key_file);
	tcase_add_test(tc, test_auth_tag_is_gmac);
	suite_add_tcase(s, tc);
	return s;
}
