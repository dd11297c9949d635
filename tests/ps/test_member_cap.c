// test_member_cap.c — with TLS alone, what one member may park is capped
// per member (the certificate's), not only per host: trainer-1's
// certificate over four connections from 127.0.0.1 parks a quarter of the
// server's contexts, the rest of its calls are refused naming the member,
// and trainer-0, on the same host, is still served. (Held to the host's
// three quarters alone, trainer-1 took them and trainer-0 was refused.)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ps/ps.h"
#include "harness.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

enum { CONTEXTS = 16, PER = CONTEXTS / 4, CONNS = 4 };

// pull sends a Pull of shard 0 at version (epoch 1) on ctx with aio.
static void
pull(nng_ctx ctx, nng_aio *aio, uint64_t rid, uint64_t version)
{
	nng_aio_set_msg(aio, pt_pull_msg(rid, version, 0));
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	ck_assert_int_eq(nng_aio_result(aio), 0);
	nng_aio_set_timeout(aio, 300);
	nng_ctx_recv(ctx, aio);
}

// answer waits for aio's reply: -1 when none came (a parked call, timed
// out here), else its status; a RESOURCE_EXHAUSTED must name `names`.
static int
answer(nng_aio *aio, const char *names)
{
	nng_aio_wait(aio);
	if (nng_aio_result(aio) != 0) {
		return -1;
	}
	nng_msg         *m = nng_aio_get_msg(aio);
	struct psw_frame f;
	const char      *why;
	PT_OK(psw_msg_parse(m, &f, &why));
	Pswire__Header *h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	ck_assert_ptr_nonnull(h);
	int st = (int) h->status;
	if (st == PSWIRE__STATUS__RESOURCE_EXHAUSTED) {
		ck_assert_msg(strstr(h->error, names) != NULL,
		    "\"%s\" names no %s", h->error, names);
	}
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(m);
	return st;
}

static unsigned long long
parked(struct ps_server *s)
{
	char text[4096];
	ps_server_stats(s, text, sizeof(text));
	const char *p = strstr(text, "\nparked:");
	ck_assert_ptr_nonnull(p);
	return strtoull(p + 8, NULL, 10);
}

static const char *
in(char *buf, size_t n, const char *dir, const char *name)
{
	snprintf(buf, n, "%s/%s", dir, name);
	return buf;
}

START_TEST(test_member_cap_parked_pulls)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	struct psw_tls          *t1, *t0;
	char dir[64] = "/tmp/ferry-cap-XXXXXX", cmd[512], url[64], surl[64];
	char c[4][160], k[4][160], ca[160], err[512];
	nng_socket sock[CONNS + 1];
	nng_ctx    ctx[CONNS][PER], ctx0;
	nng_aio   *aio[CONNS][PER], *aio0;
	int        refused = 0;

	if (system("command -v openssl >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test_member_cap: no openssl, not run\n");
		return;
	}
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
	    "bash %s %s scheduler server-0 trainer-0 "
	    "trainer-1",
	    TLS_CERTS_SH, dir);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	in(ca, sizeof(ca), dir, "ca.pem");
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 1;
	so.servers     = 1;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	so.tls_cert    = in(c[0], sizeof(c[0]), dir, "scheduler.pem");
	so.tls_key     = in(k[0], sizeof(k[0]), dir, "scheduler.key");
	so.tls_ca      = ca;
	PT_OK(ps_scheduler_open(&so, &sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sched);
	o.contexts      = CONTEXTS;
	o.tls_cert      = in(c[1], sizeof(c[1]), dir, "server-0.pem");
	o.tls_key       = in(k[1], sizeof(k[1]), dir, "server-0.key");
	o.tls_ca        = ca;
	PT_OK(ps_server_open(&o, &srv));
	// Trainer 0 trains a few steps: shard 0 is then at version 3.
	struct pt_rank a = { .url = ps_scheduler_url(sched),
		.tls_dir          = dir,
		.steps            = 3 };
	pt_ranks_train(&a, 1);
	ck_assert_msg(
	    psw_tls_open(in(c[2], sizeof(c[2]), dir, "trainer-1.pem"),
	        in(k[2], sizeof(k[2]), dir, "trainer-1.key"), ca, &t1, err,
	        sizeof(err)) == FB_OK,
	    "%s", err);
	ck_assert_msg(
	    psw_tls_open(in(c[3], sizeof(c[3]), dir, "trainer-0.pem"),
	        in(k[3], sizeof(k[3]), dir, "trainer-0.key"), ca, &t0, err,
	        sizeof(err)) == FB_OK,
	    "%s", err);

	// trainer-1's certificate, CONNS connections, PER Pulls of the next
	// version, which nobody will push (they park), on each, one
	// connection after another.
	for (int n = 0; n < CONNS; n++) {
		ck_assert_int_eq(nng_req0_open(&sock[n]), 0);
		PT_OK(psw_tls_dial(t1, sock[n], ps_server_url(srv)));
		for (int i = 0; i < PER; i++) {
			ck_assert_int_eq(nng_ctx_open(&ctx[n][i], sock[n]), 0);
			ck_assert_int_eq(nng_aio_alloc(&aio[n][i], NULL, NULL),
			    0);
			pull(ctx[n][i], aio[n][i],
			    (uint64_t) (n * PER + i) + 1, 4);
		}
		for (int i = 0; i < 200 && parked(srv) < PER; i++) {
			fb_sleep_us(5000);
		}
	}
	for (int n = 0; n < CONNS; n++) {
		for (int i = 0; i < PER; i++) {
			int st = answer(aio[n][i], "member trainer-1");
			ck_assert_msg(st == -1 ||
			        st == PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "status %d", st);
			refused += st == PSWIRE__STATUS__RESOURCE_EXHAUSTED;
		}
	}
	ck_assert_int_eq(refused, (CONNS - 1) * PER);
	ck_assert_uint_eq(parked(srv), PER);

	// trainer-0, same host: its Pull of the version there is served.
	ck_assert_int_eq(nng_req0_open(&sock[CONNS]), 0);
	PT_OK(psw_tls_dial(t0, sock[CONNS], ps_server_url(srv)));
	ck_assert_int_eq(nng_ctx_open(&ctx0, sock[CONNS]), 0);
	ck_assert_int_eq(nng_aio_alloc(&aio0, NULL, NULL), 0);
	pull(ctx0, aio0, 1000, 3);
	nng_aio_set_timeout(aio0, 5000);
	ck_assert_int_eq(answer(aio0, "-"), PSWIRE__STATUS__OK);
	nng_aio_free(aio0);

	for (int n = 0; n <= CONNS; n++) {
		for (int i = 0; n < CONNS && i < PER; i++) {
			nng_aio_free(aio[n][i]);
		}
		nng_close(sock[n]);
	}
	for (int i = 0; i < 200 && parked(srv) > 0; i++) {
		fb_sleep_us(10000);
	}
	ck_assert_uint_eq(parked(srv), 0);
	psw_tls_close(t0);
	psw_tls_close(t1);
	ps_server_close(srv);
	ps_scheduler_close(sched);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *
suite_member_cap(void)
{
	Suite *s  = suite_create("member_cap");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_member_cap_parked_pulls);
	suite_add_tcase(s, tc);
	return s;
}
