// test_limits.c — the limits of issue 12 (docs/operations.md §13), each
// against a live in-process job: parked calls from one connection do not stop
// the others being served (and closing it frees them), an update that would
// overflow is refused and leaves the weights finite, a huge declaration
// is refused before anything is built, a server refuses a bad map from a
// fake scheduler, a Pull with a payload is refused, probe replies stay
// within a connection's budget, and lr and n_samples stay within the
// configured bounds.
#include <arpa/inet.h>
#include <float.h>
#include <math.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

// A job of one 16-float tensor (one 64-byte shard) on one server.
#define LEN 16

// One trainer of the test job, on libferry.
struct trainer {
	const char   *url;
	int           rank, mode, steps;
	float         grad;      // every element of every push
	float         grad_last; // nonzero: the last element's instead
	float         w[LEN];
	int           rv, n_refused;
	char          err[256];
	ferry_client *c;
};

// trainer_open opens, declares, offers (rank 0) and pulls the weights
// 0, 1, ..., LEN-1.
static int
trainer_open(struct trainer *t)
{
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d = { "a", LEN };
	float                   *wp[1];
	int                      rv;
	o.scheduler_url = t->url;
	o.rank          = t->rank;
	o.lr            = 0.5;
	o.mode          = t->mode;
	o.timeout_ms    = 10000;
	wp[0]           = t->w;
	for (int i = 0; i < LEN; i++) {
		t->w[i] = (float) i;
	}
	if ((rv = ferry_client_open(&o, &t->c)) != 0 ||
	    (rv = ferry_client_declare(t->c, &d, 1)) != 0 ||
	    (t->rank == 0 &&
	        (rv = ferry_client_init_weights(t->c,
	             (const float *const *) wp)) != 0) ||
	    (rv = ferry_client_pull(t->c, wp)) != 0) {
		snprintf(t->err, sizeof(t->err), "%s",
		    t->c ? ferry_client_last_error(t->c) : "open");
	}
	return rv;
}

// trainer_steps pushes t->grad (n_samples 1) t->steps times; a push the
// server refuses is counted in n_refused and the error kept.
static void *
trainer_steps(void *arg)
{
	struct trainer *t = arg;
	float           g[LEN];
	const float    *gp[1] = { g };
	float          *wp[1] = { t->w };
	for (int i = 0; i < LEN; i++) {
		g[i] = t->grad;
	}
	if (t->grad_last != 0) {
		g[LEN - 1] = t->grad_last;
	}
	for (int k = 0; k < t->steps; k++) {
		int rv = ferry_client_push_pull(t->c, gp, 1, wp);
		if (rv == FERRY_EREMOTE) {
			t->n_refused++;
			snprintf(t->err, sizeof(t->err), "%s",
			    ferry_client_last_error(t->c));
			continue;
		}
		if ((t->rv = rv) != 0) {
			snprintf(t->err, sizeof(t->err), "%s",
			    ferry_client_last_error(t->c));
			break;
		}
	}
	return NULL;
}

static void *
trainer_open_main(void *arg)
{
	struct trainer *t = arg;
	t->rv             = trainer_open(t);
	return NULL;
}

// all_finite reports whether n floats hold no NaN or Inf.
static int
all_finite(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(x[i])) {
			return 0;
		}
	}
	return 1;
}

// one_trainer_job opens a one-trainer job whose server has `contexts`
// contexts, and trainer t (rank 0, three steps of gradient 1), declared
// and pulled.
static void
one_trainer_job(struct one_server *j, struct trainer *t, int contexts)
{
	one_server_open(j, 1, 0, contexts);
	memset(t, 0, sizeof(*t));
	t->url   = ps_scheduler_url(j->sched);
	t->steps = 3;
	t->grad  = 1.0f;
	PT_OK(trainer_open(t));
}

// one_trainer_job_close checks that the server answers every call the
// closed peer connections had parked (within 2 s), then closes t and j.
static void
one_trainer_job_close(struct one_server *j, struct trainer *t)
{
	for (int i = 0; i < 200 && server_stat(j->srv, "parked") > 0; i++) {
		fb_sleep_us(10000);
	}
	ck_assert_uint_eq(server_stat(j->srv, "parked"), 0);
	ferry_client_close(t->c);
	one_server_close(j);
}

// refusal waits for aio's reply: 0 when none came (a parked call, timed
// out here), 1 when the server answered RESOURCE_EXHAUSTED with an error
// naming `names`; any other answer fails the test.
static int
refusal(nng_aio *aio, const char *names)
{
	nng_aio_wait(aio);
	if (nng_aio_result(aio) != 0) {
		return 0;
	}
	nng_msg         *m = nng_aio_get_msg(aio);
	struct psw_frame f;
	const char      *why;
	PT_OK(psw_msg_parse(m, &f, &why));
	Pswire__Header *h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	ck_assert_ptr_nonnull(h);
	ck_assert_int_eq(h->status, PSWIRE__STATUS__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(h->error, names) != NULL, "\"%s\" names no %s",
	    h->error, names);
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(m);
	return 1;
}

// A peer sends --contexts Pulls (deadline 0) for a version that needs the
// trainer's next push, all on one connection. Before the limits they took
// every context, so the trainer's push-pull was never read: now that
// connection parks at most a quarter of them, the rest are refused
// RESOURCE_EXHAUSTED, the trainer trains, and closing the connection
// answers what it still had parked.
START_TEST(test_limits_parked_pulls_from_one_peer)
{
	enum { CONTEXTS = 8 };
	struct one_server j;
	struct trainer    t;
	nng_socket        sock;
	nng_ctx           ctx[CONTEXTS];
	nng_aio          *aio[CONTEXTS];
	int               refused = 0;

	one_trainer_job(&j, &t, CONTEXTS);
	ck_assert_int_eq(nng_req0_open(&sock), 0);
	ck_assert_int_eq(nng_dial(sock, ps_server_url(j.srv), NULL, 0), 0);
	for (int i = 0; i < CONTEXTS; i++) {
		ck_assert_int_eq(nng_ctx_open(&ctx[i], sock), 0);
		ck_assert_int_eq(nng_aio_alloc(&aio[i], NULL, NULL), 0);
		nng_aio_set_msg(aio[i], pt_pull_msg((uint64_t) i + 1, 1, 0));
		nng_ctx_send(ctx[i], aio[i]);
		nng_aio_wait(aio[i]);
		ck_assert_int_eq(nng_aio_result(aio[i]), 0);
		nng_aio_set_timeout(aio[i], 200);
		nng_ctx_recv(ctx[i], aio[i]);
	}
	// The refusals come back at once; the parked ones time out here.
	for (int i = 0; i < CONTEXTS; i++) {
		refused += refusal(aio[i], "connection");
	}
	ck_assert_int_eq(refused, CONTEXTS - 2);
	ck_assert_uint_eq(server_stat(j.srv, "parked"), 2);
	trainer_steps(&t);
	ck_assert_msg(t.rv == 0 && t.n_refused == 0, "trainer: %s", t.err);
	// Its pushes reached version 1: the peer's parked Pulls were
	// answered then. Park two more, then close: they are answered
	// (CANCELLED) and the contexts serve again.
	for (int i = 0; i < 2; i++) {
		nng_aio_set_msg(aio[i], pt_pull_msg(100 + (uint64_t) i, 4, 0));
		nng_ctx_send(ctx[i], aio[i]);
		nng_aio_wait(aio[i]);
		ck_assert_int_eq(nng_aio_result(aio[i]), 0);
	}
	for (int i = 0; i < 50 && server_stat(j.srv, "parked") < 2; i++) {
		fb_sleep_us(10000);
	}
	ck_assert_uint_eq(server_stat(j.srv, "parked"), 2);
	for (int i = 0; i < CONTEXTS; i++) {
		nng_aio_free(aio[i]);
	}
	nng_close(sock);
	one_trainer_job_close(&j, &t);
}
END_TEST

// A peer on one host (dialing from 127.0.0.2) opens HOST_CONNS connections
// and parks the most each may (a quarter of the contexts) on every one.
// The connections of one host together park at most three quarters of
// the contexts: the last connection's Pulls are refused, naming the host,
// and the trainer (from 127.0.0.1, another host) still trains. Closing
// the peer's connections answers what they had parked.
START_TEST(test_limits_parked_pulls_from_one_host)
{
	enum { CONTEXTS = 16, PER = CONTEXTS / 4, HOST_CONNS = 4 };
	struct one_server j;
	struct trainer    t;
	nng_socket        sock[HOST_CONNS];
	nng_ctx           ctx[HOST_CONNS][PER];
	nng_aio          *aio[HOST_CONNS][PER];
	int               refused = 0;

	one_trainer_job(&j, &t, CONTEXTS);
	for (int k = 0; k < HOST_CONNS; k++) {
		nng_dialer   d;
		nng_sockaddr sa;
		memset(&sa, 0, sizeof(sa));
		sa.s_in.sa_family = NNG_AF_INET;
		sa.s_in.sa_addr   = htonl(0x7f000002u); // 127.0.0.2
		ck_assert_int_eq(nng_req0_open(&sock[k]), 0);
		ck_assert_int_eq(
		    nng_dialer_create(&d, sock[k], ps_server_url(j.srv)), 0);
		ck_assert_int_eq(nng_dialer_set_addr(d, NNG_OPT_LOCADDR, &sa),
		    0);
		ck_assert_int_eq(nng_dialer_start(d, 0), 0);
		for (int i = 0; i < PER; i++) {
			ck_assert_int_eq(nng_ctx_open(&ctx[k][i], sock[k]), 0);
			ck_assert_int_eq(nng_aio_alloc(&aio[k][i], NULL, NULL),
			    0);
			nng_aio_set_msg(aio[k][i],
			    pt_pull_msg((uint64_t) (k * PER + i) + 1, 1, 0));
			nng_ctx_send(ctx[k][i], aio[k][i]);
			nng_aio_wait(aio[k][i]);
			ck_assert_int_eq(nng_aio_result(aio[k][i]), 0);
			nng_aio_set_timeout(aio[k][i], 300);
			nng_ctx_recv(ctx[k][i], aio[k][i]);
		}
		// One connection at a time, so that the refusals fall on the
		// last one: wait until this one's calls are parked.
		for (int i = 0; i < 200 &&
		     server_stat(j.srv, "parked") <
		         (unsigned long long) ((k + 1) * PER > 3 * PER
		                 ? 3 * PER
		                 : (k + 1) * PER);
		     i++) {
			fb_sleep_us(5000);
		}
	}
	for (int k = 0; k < HOST_CONNS; k++) {
		for (int i = 0; i < PER; i++) {
			refused += refusal(aio[k][i], "host (127.0.0.2)");
		}
	}
	ck_assert_int_eq(refused, PER);
	ck_assert_uint_eq(server_stat(j.srv, "parked"), 3 * PER);
	trainer_steps(&t);
	ck_assert_msg(t.rv == 0 && t.n_refused == 0, "trainer: %s", t.err);
	for (int k = 0; k < HOST_CONNS; k++) {
		for (int i = 0; i < PER; i++) {
			nng_aio_free(aio[k][i]);
		}
		nng_close(sock[k]);
	}
	one_trainer_job_close(&j, &t);
}
END_TEST

// two_ranks_open opens ranks 0 and 1 of job j into t[0..2), each pushing
// grad in every element (grad_last in the last one when nonzero), each
// from its own thread as the job's start barrier needs.
static void
two_ranks_open(struct one_server *j, struct trainer t[2], float grad,
    float grad_last)
{
	pthread_t th[2];
	for (int r = 0; r < 2; r++) {
		memset(&t[r], 0, sizeof(t[r]));
		t[r].url       = ps_scheduler_url(j->sched);
		t[r].rank      = r;
		t[r].steps     = 1;
		t[r].grad      = grad;
		t[r].grad_last = grad_last;
		pthread_create(&th[r], NULL, trainer_open_main, &t[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(t[r].rv == 0, "rank %d: %s", r, t[r].err);
	}
}

// two_ranks_step runs t[0..2)'s next steps at once (sync rounds) and
// checks that neither failed locally.
static void
two_ranks_step(struct trainer t[2])
{
	pthread_t th[2];
	for (int r = 0; r < 2; r++) {
		pthread_create(&th[r], NULL, trainer_steps, &t[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(t[r].rv == 0, "rank %d: %s", r, t[r].err);
	}
}

// Two ranks push FLT_MAX everywhere: each push is finite, their sum is
// not. The round is refused whole: the weights stay finite (and as they
// were), and the job goes on. In async mode a push whose step would
// overflow is refused with a message and changes nothing.
START_TEST(test_limits_flt_max_pushes_leave_weights_finite)
{
	struct one_server j;
	struct trainer    t[2];

	one_server_open(&j, 2, 0, 64);
	two_ranks_open(&j, t, FLT_MAX, 0);
	two_ranks_step(t);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(all_finite(t[r].w, LEN), "rank %d: w[0] = %g", r,
		    t[r].w[0]);
		for (int i = 0; i < LEN; i++) {
			ck_assert_float_eq(t[r].w[i], (float) i);
		}
	}
	ck_assert_uint_eq(server_stat(j.srv, "updates_refused"), 1);
	// A normal round still applies: x -= 0.5 / 2 * (1 + 1).
	t[0].grad = t[1].grad = 1.0f;
	two_ranks_step(t);
	for (int r = 0; r < 2; r++) {
		ck_assert_float_eq(t[r].w[3], 3.0f - 0.5f);
		ferry_client_close(t[r].c);
	}
	one_server_close(&j);

	// Async, one trainer: x - 0.5 * FLT_MAX is finite, the next
	// -0.5 * FLT_MAX pushes overflow and are refused.
	one_server_open(&j, 1, 0, 64);
	memset(&t[0], 0, sizeof(t[0]));
	t[0].url   = ps_scheduler_url(j.sched);
	t[0].mode  = FERRY_MODE_ASYNC;
	t[0].steps = 4;
	t[0].grad  = -FLT_MAX;
	PT_OK(trainer_open(&t[0]));
	trainer_steps(&t[0]);
	ck_assert_msg(t[0].rv == 0, "%s", t[0].err);
	ck_assert_int_ge(t[0].n_refused, 2);
	ck_assert_msg(strstr(t[0].err, "overflow") != NULL, "%s", t[0].err);
	{
		float *wp[1] = { t[0].w };
		PT_OK(ferry_client_pull(t[0].c, wp));
	}
	ck_assert_msg(all_finite(t[0].w, LEN), "w[0] = %g", t[0].w[0]);
	ferry_client_close(t[0].c);
	one_server_close(&j);
}
END_TEST

// Two ranks push 1 everywhere but in the last element, FLT_MAX: only
// that element's sum overflows, after the server has stepped every other
// one. The round is still refused whole: every weight is as it was
// (a failure: the elements before the overflow keep their step).
START_TEST(test_limits_overflow_in_last_element_changes_nothing)
{
	struct one_server j;
	struct trainer    t[2];

	one_server_open(&j, 2, 0, 64);
	two_ranks_open(&j, t, 1.0f, FLT_MAX);
	two_ranks_step(t);
	for (int r = 0; r < 2; r++) {
		for (int i = 0; i < LEN; i++) {
			ck_assert_msg(t[r].w[i] == (float) i,
			    "rank %d: w[%d] = %g, not %d", r, i, t[r].w[i], i);
		}
	}
	ck_assert_uint_eq(server_stat(j.srv, "updates_refused"), 1);
	// The next round, finite everywhere, applies to every element.
	t[0].grad_last = t[1].grad_last = 0;
	two_ranks_step(t);
	for (int r = 0; r < 2; r++) {
		ck_assert_float_eq(t[r].w[0], 0.0f - 0.5f);
		ck_assert_float_eq(t[r].w[LEN - 1], (float) (LEN - 1) - 0.5f);
		ferry_client_close(t[r].c);
	}
	one_server_close(&j);
}
END_TEST

// A declaration of 4096 tensors of 2^34 floats (256 TiB) passed every
// check and made the scheduler build 2^28 shard descriptors when the job
// started. It is refused at Register, naming --max-job-mb, and so is one
// within the byte cap cut into too many shards; the scheduler allocates
// next to nothing doing so.
START_TEST(test_limits_huge_declaration_refused)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	Pswire__Header          *rh;
	so.url         = "tcp://127.0.0.1:0";
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &s));
	size_t used0 = fb_used_memory();
	rh = pt_register_trainer(ps_scheduler_url(s), 0, 4096, 1ull << 34);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_msg(strstr(rh->error, "--max-job-mb") != NULL, "%s",
	    rh->error);
	pswire__header__free_unpacked(rh, NULL);
	ck_assert_uint_lt(fb_used_memory(), used0 + (4u << 20));
	ps_scheduler_close(s);

	so.shard_bytes = 4; // 1 float per shard: 2^21 shards for 8 MiB
	PT_OK(ps_scheduler_open(&so, &s));
	rh = pt_register_trainer(ps_scheduler_url(s), 0, 2, 1ull << 20);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_msg(strstr(rh->error, "shards") != NULL, "%s", rh->error);
	pswire__header__free_unpacked(rh, NULL);
	ck_assert_uint_lt(fb_used_memory(), used0 + (4u << 20));
	ps_scheduler_close(s);
}
END_TEST

// A fake scheduler: a REP socket that registers the server as index 0 and
// answers its GetPlacement with `bad`, a map whose shard runs past its
// tensor by wrapping offset + len.
struct fake_sched {
	nng_socket sock;
	char       url[64];
	atomic_int maps_sent;
};

static void *
fake_sched_main(void *arg)
{
	struct fake_sched *f = arg;
	nng_msg           *m;
	while (nng_recvmsg(f->sock, &m, 0) == 0) {
		struct psw_frame      fr;
		const char           *why;
		Pswire__Header        h   = PSWIRE__HEADER__INIT;
		Pswire__RegisterReply rr  = PSWIRE__REGISTER_REPLY__INIT;
		Pswire__Placement     pl  = PSWIRE__PLACEMENT__INIT;
		Pswire__JobConfig     jc  = PSWIRE__JOB_CONFIG__INIT;
		Pswire__TensorDesc    td  = PSWIRE__TENSOR_DESC__INIT;
		Pswire__TensorDesc   *tp  = &td;
		Pswire__ShardInfo     si  = PSWIRE__SHARD_INFO__INIT;
		Pswire__ShardInfo    *sp  = &si;
		char                 *srv = f->url;
		uint8_t              *payload;
		nng_msg              *rep;
		if (psw_msg_parse(m, &fr, &why) != FB_OK) {
			nng_msg_free(m);
			continue;
		}
		Pswire__Header *q = pswire__header__unpack(NULL, fr.hdr_len,
		    fr.hdr);
		h.request_id      = q ? q->request_id : 0;
		if (fr.method == PSWIRE__METHOD__REGISTER) {
			h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REP;
			h.register_rep = &rr;
		} else if (fr.method == PSWIRE__METHOD__GET_PLACEMENT &&
		    f->maps_sent == 0) {
			td.name       = "a";
			td.len        = 64;
			jc.n_tensors  = 1;
			jc.tensors    = &tp;
			jc.lr         = 0.1;
			jc.codec_push = "none";
			jc.codec_pull = "none";
			si.offset     = UINT64_MAX - 7; // + len wraps to 8
			si.len        = 16;
			pl.epoch      = 1;
			pl.trainers   = 1;
			pl.n_servers  = 1;
			pl.servers    = &srv;
			pl.n_shards   = 1;
			pl.shards     = &sp;
			pl.job        = &jc;
			h.body_case   = PSWIRE__HEADER__BODY_PLACEMENT;
			h.placement   = &pl;
			f->maps_sent++;
		} else {
			h.status = PSWIRE__STATUS__DEADLINE_EXCEEDED;
			fb_sleep_us(100000);
		}
		if (q != NULL) {
			pswire__header__free_unpacked(q, NULL);
		}
		nng_msg_free(m);
		size_t hl = pswire__header__get_packed_size(&h);
		PT_OK(psw_msg_begin(&rep, hl, 0, &payload));
		PT_OK(psw_msg_finish(rep, fr.method, PSW_FLAG_REPLY, &h.base,
		    hl, 0));
		if (nng_sendmsg(f->sock, rep, 0) != 0) {
			nng_msg_free(rep);
		}
	}
	return NULL;
}

// A server refuses a map whose shard's offset + len wraps (it would have
// installed it, then read and written past the shard's tensor): it never
// becomes ready, and still answers.
START_TEST(test_limits_fake_scheduler_bad_map_refused)
{
	struct fake_sched     f;
	struct ps_server_opts o = PS_SERVER_OPTS_INIT;
	struct ps_server     *srv;
	pthread_t             th;
	char                  url[64], why[256];
	memset(&f, 0, sizeof(f));
	ck_assert_int_eq(nng_rep0_open(&f.sock), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", pt_free_port());
	ck_assert_int_eq(nng_listen(f.sock, url, NULL, 0), 0);
	snprintf(f.url, sizeof(f.url), "tcp://127.0.0.1:%d", pt_free_port());
	pthread_create(&th, NULL, fake_sched_main, &f);
	o.url           = f.url;
	o.scheduler_url = url;
	PT_OK(ps_server_open(&o, &srv));
	for (int i = 0; i < 300 && f.maps_sent == 0; i++) {
		fb_sleep_us(10000);
	}
	ck_assert_int_eq(f.maps_sent, 1);
	fb_sleep_us(300000); // time to install it, were it accepted
	ck_assert_int_eq(ps_server_ready(srv, why, sizeof(why)), 0);
	ck_assert_uint_eq(server_stat(srv, "shards"), 0);
	ps_server_close(srv);
	nng_close(f.sock);
	pthread_join(th, NULL);
}
END_TEST

// A Pull carrying a payload (which a parked Pull would hold, up to the
// receive cap, for nothing) is refused, naming it; without one the same
// Pull is answered.
START_TEST(test_limits_pull_with_payload_refused)
{
	struct one_server j;
	struct trainer    t;
	char              err[512];
	one_server_open(&j, 1, 0, 64);
	memset(&t, 0, sizeof(t));
	t.url = ps_scheduler_url(j.sched);
	PT_OK(trainer_open(&t));
	ck_assert_int_eq(pt_send_msg(ps_server_url(j.srv),
	                     pt_pull_msg(1, 0, 4096), err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_msg(strstr(err, "no payload") != NULL, "%s", err);
	ck_assert_int_eq(pt_send_msg(ps_server_url(j.srv),
	                     pt_pull_msg(2, 0, 0), err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	ferry_client_close(t.c);
	one_server_close(&j);
}
END_TEST

// sp_connect opens a raw TCP connection to nng tcp url and does the SP
// handshake as a REQ peer, with a small receive buffer: a peer that sends
// requests and never reads.
static int
sp_connect(const char *url)
{
	struct sockaddr_in a;
	int                fd    = socket(AF_INET, SOCK_STREAM, 0);
	int                buf   = 4096;
	const char        *colon = strrchr(url, ':');
	uint8_t hs[8] = { 0, 'S', 'P', 0, 0, 0x30, 0, 0 }; // REQ = 48
	ck_assert_int_ge(fd, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	memset(&a, 0, sizeof(a));
	a.sin_family      = AF_INET;
	a.sin_port        = htons((uint16_t) atoi(colon + 1));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
	ck_assert_int_eq(write(fd, hs, 8), 8);
	ck_assert_int_eq(read(fd, hs, 8), 8);
	return fd;
}

// sp_send_probe sends a Probe asking for `bytes` of reply on fd.
static void
sp_send_probe(int fd, uint32_t rid, uint64_t bytes)
{
	Pswire__Header       h  = PSWIRE__HEADER__INIT;
	Pswire__ProbeRequest pr = PSWIRE__PROBE_REQUEST__INIT;
	uint8_t              out[256];
	pr.reply_bytes = bytes;
	h.request_id   = rid;
	h.body_case    = PSWIRE__HEADER__BODY_PROBE_REQ;
	h.probe_req    = &pr;
	size_t   hl    = pswire__header__pack(&h, out + 16 + 12);
	uint64_t len   = 4 + 16 + hl;
	uint32_t id    = htonl(0x80000000u | rid);
	psw_frame_put(out + 12, PSWIRE__METHOD__PROBE, 0, (uint32_t) hl, 0);
	for (int i = 0; i < 8; i++) {
		out[i] = (uint8_t) (len >> (56 - 8 * i));
	}
	memcpy(out + 8, &id, 4);
	ck_assert_int_eq(write(fd, out, 12 + 16 + hl),
	    (ssize_t) (12 + 16 + hl));
}

// A probe over the cap is refused; a peer that asks for 8 full-size
// probe replies on one connection and never reads them gets one (its
// budget), the others refused RESOURCE_EXHAUSTED before their reply is
// built: the server holds about one reply's memory, not eight (before the
// budget: 8 x 16 MiB, none refused).
START_TEST(test_limits_probe_bounded)
{
	struct one_server j;
	one_server_open(&j, 1, 0, 64);
	{
		Pswire__Header       h  = PSWIRE__HEADER__INIT;
		Pswire__ProbeRequest pr = PSWIRE__PROBE_REQUEST__INIT;
		pr.reply_bytes          = 64u << 20;
		h.body_case             = PSWIRE__HEADER__BODY_PROBE_REQ;
		h.probe_req             = &pr;
		Pswire__Header *rh      = pt_call(ps_server_url(j.srv),
		         PSWIRE__METHOD__PROBE, &h);
		ck_assert_ptr_nonnull(rh);
		ck_assert_int_eq(rh->status, PSWIRE__STATUS__INVALID_ARGUMENT);
		pswire__header__free_unpacked(rh, NULL);
	}
	unsigned long long e0 = server_stat(j.srv, "errors");
	int                fd = sp_connect(ps_server_url(j.srv));
	for (uint32_t i = 1; i <= 8; i++) {
		sp_send_probe(fd, i, 16u << 20);
	}
	for (int i = 0; i < 300 && server_stat(j.srv, "errors") < e0 + 5;
	     i++) {
		fb_sleep_us(10000);
	}
	fb_sleep_us(200000);
	unsigned long long refused = server_stat(j.srv, "errors") - e0;
	// One reply in the connection, at most a second waiting for it
	// (and a third that raced them in): the rest refused.
	ck_assert_msg(refused >= 5, "%llu of 8 probes refused", refused);
	close(fd);
	one_server_close(&j);
}
END_TEST

// The learning rate and a push's sample count were whatever a member
// declared (up to 1e6 and 2^30): a job above the scheduler's --max-lr is
// refused at declaration naming the flag, and a push declaring more
// samples than the server's --max-samples-per-push is refused naming its
// flag and changes nothing; one at the bound is applied.
START_TEST(test_limits_lr_and_samples_bounded)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sch;
	struct ps_server        *srv;
	struct ferry_opts        fo = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d  = { "a", LEN };
	ferry_client            *c;
	char                     url[64], surl[64];
	float                    w[LEN], g[LEN], before[LEN];
	float                   *wp[1] = { w };
	const float             *gp[1] = { g };

	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	so.max_lr      = 1.0;
	PT_OK(ps_scheduler_open(&so, &sch));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sch);
	o.max_samples   = 100;
	PT_OK(ps_server_open(&o, &srv));

	fo.scheduler_url = ps_scheduler_url(sch);
	fo.timeout_ms    = 10000;
	fo.lr            = 5.0; // above --max-lr 1
	PT_OK(ferry_client_open(&fo, &c));
	ck_assert_int_ne(ferry_client_declare(c, &d, 1), FERRY_OK);
	ck_assert_msg(strstr(ferry_client_last_error(c), "--max-lr") != NULL,
	    "%s", ferry_client_last_error(c));
	ferry_client_close(c);

	fo.lr = 0.5;
	PT_OK(ferry_client_open(&fo, &c));
	PT_OK(ferry_client_declare(c, &d, 1));
	for (int i = 0; i < LEN; i++) {
		w[i] = (float) i;
		g[i] = 100.0f;
	}
	PT_OK(ferry_client_init_weights(c, (const float *const *) wp));
	PT_OK(ferry_client_pull(c, wp));
	memcpy(before, w, sizeof(w));
	ck_assert_int_eq(ferry_client_push_pull(c, gp, 101, wp),
	    FERRY_EREMOTE);
	ck_assert_msg(strstr(ferry_client_last_error(c),
	                  "--max-samples-per-push") != NULL,
	    "%s", ferry_client_last_error(c));
	PT_OK(ferry_client_pull(c, wp));
	ck_assert_mem_eq(w, before, sizeof(w));
	// At the bound: applied (w -= 0.5 * 100 / 100).
	PT_OK(ferry_client_push_pull(c, gp, 100, wp));
	for (int i = 0; i < LEN; i++) {
		ck_assert_float_eq_tol(w[i], before[i] - 0.5f, 1e-6f);
	}
	ferry_client_close(c);
	ps_server_close(srv);
	ps_scheduler_close(sch);
}
END_TEST

// --capacity-mb 0 means "unbounded" (the default), not "no memory": in
// a job whose other server has a bounded capacity, the capacity-0 server
// is given shards like any other, and the weights it holds are the ones
// offered and updated (not zeroed).
START_TEST(test_limits_capacity_zero_is_unbounded)
{
	enum { N = 64 }; // 4 shards of 16 floats
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *sch;
	struct ps_server        *srv[2];
	struct ferry_opts        fo = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d  = { "a", N };
	ferry_client            *c;
	char                     url[64], surl[2][64];
	float                    w[N], g[N];
	float                   *wp[1] = { w };
	const float             *gp[1] = { g };

	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.servers     = 2;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &sch));
	for (int i = 0; i < 2; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		o.url           = pt_addr(surl[i], sizeof(surl[i]), "tcp");
		o.scheduler_url = ps_scheduler_url(sch);
		o.capacity      = i == 0 ? 1u << 20 : 0;
		PT_OK(ps_server_open(&o, &srv[i]));
	}
	fo.scheduler_url = ps_scheduler_url(sch);
	fo.timeout_ms    = 10000;
	fo.lr            = 0.5;
	PT_OK(ferry_client_open(&fo, &c));
	int rv = ferry_client_declare(c, &d, 1);
	ck_assert_msg(rv == FERRY_OK, "declare: %s",
	    ferry_client_last_error(c));
	for (int i = 0; i < N; i++) {
		w[i] = (float) i + 1.0f;
		g[i] = 2.0f;
	}
	PT_OK(ferry_client_init_weights(c, (const float *const *) wp));
	memset(w, 0, sizeof(w));
	PT_OK(ferry_client_pull(c, wp));
	for (int i = 0; i < N; i++) {
		ck_assert_float_eq(w[i], (float) i + 1.0f);
	}
	PT_OK(ferry_client_push_pull(c, gp, 1, wp));
	for (int i = 0; i < N; i++) {
		ck_assert_float_eq(w[i], (float) i + 1.0f - 1.0f);
	}
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_ge(server_stat(srv[i], "shards"), 1);
	}
	ferry_client_close(c);
	ps_server_close(srv[0]);
	ps_server_close(srv[1]);
	ps_scheduler_close(sch);
}
END_TEST

Suite *
suite_limits(void)
{
	Suite *s  = suite_create("limits");
	TCase *tc = tcase_create("limits");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_limits_parked_pulls_from_one_peer);
	tcase_add_test(tc, test_limits_parked_pulls_from_one_host);
	tcase_add_test(tc, test_limits_flt_max_pushes_leave_weights_finite);
	tcase_add_test(tc,
	    test_limits_overflow_in_last_element_changes_nothing);
	tcase_add_test(tc, test_limits_huge_declaration_refused);
	tcase_add_test(tc, test_limits_fake_scheduler_bad_map_refused);
	tcase_add_test(tc, test_limits_pull_with_payload_refused);
	tcase_add_test(tc, test_limits_probe_bounded);
	tcase_add_test(tc, test_limits_lr_and_samples_bounded);
	tcase_add_test(tc, test_limits_capacity_zero_is_unbounded);
	suite_add_tcase(s, tc);
	return s;
}
