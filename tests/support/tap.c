// tap.c — the recording proxy of tap.h. Each of WORKERS threads owns a
// context on the listening REP socket and one on the REQ socket to the
// target, and forwards one request at a time: calls a receiver parks (a
// sync round's pushes, a watch for the next map) hold their worker only,
// so up to WORKERS calls may be in flight at once.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <nng/nng.h>

#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "ferry.pb-c.h"
#include "psw/psw.h"
#include "pt.h"
#include "tap.h"

#define WORKERS 32
#define KEEP 16384

struct worker {
	struct pt_tap *t;
	nng_ctx        in, out;
	nng_aio       *aio;
	pthread_t      thread;
};

struct pt_tap {
	nng_socket      rep, req;
	char            url[64];
	struct worker   w[WORKERS];
	pthread_mutex_t mu; // guards rec, n
	nng_msg        *rec[KEEP];
	size_t          n;
};

// step runs one aio operation to its end; returns nng's result.
static int
step(nng_aio *aio)
{
	nng_aio_wait(aio);
	return nng_aio_result(aio);
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	nng_msg       *m, *copy;
	int            rv;

	for (;;) {
		nng_ctx_recv(w->in, w->aio);
		if ((rv = step(w->aio)) != 0) {
			if (rv == NNG_ECLOSED) {
				return NULL;
			}
			continue;
		}
		m = nng_aio_get_msg(w->aio);
		if (nng_msg_dup(&copy, m) == 0) {
			pthread_mutex_lock(&w->t->mu);
			if (w->t->n < KEEP) {
				w->t->rec[w->t->n++] = copy;
				copy                 = NULL;
			}
			pthread_mutex_unlock(&w->t->mu);
			if (copy != NULL) {
				nng_msg_free(copy);
			}
		}
		nng_aio_set_msg(w->aio, m);
		nng_ctx_send(w->out, w->aio);
		if (step(w->aio) != 0) {
			nng_msg_free(m);
			continue;
		}
		nng_ctx_recv(w->out, w->aio);
		if (step(w->aio) != 0) {
			continue;
		}
		nng_ctx_send(w->in, w->aio); // the answer, as it came
		if (step(w->aio) != 0) {
			nng_msg_free(nng_aio_get_msg(w->aio));
		}
	}
}

struct pt_tap *
pt_tap_open(const char *target)
{
	struct pt_tap *t = calloc(1, sizeof(*t));

	ck_assert_ptr_nonnull(t);
	pthread_mutex_init(&t->mu, NULL);
	pt_addr(t->url, sizeof(t->url), "tcp");
	ck_assert_int_eq(nng_rep0_open(&t->rep), 0);
	ck_assert_int_eq(nng_req0_open(&t->req), 0);
	nng_socket_set_size(t->rep, NNG_OPT_RECVMAXSZ, 1u << 30);
	nng_socket_set_size(t->req, NNG_OPT_RECVMAXSZ, 1u << 30);
	nng_socket_set_ms(t->req, NNG_OPT_REQ_RESENDTIME,
	    NNG_DURATION_INFINITE);
	nng_socket_set_ms(t->req, NNG_OPT_RECONNMINT, 20);
	nng_socket_set_ms(t->req, NNG_OPT_RECONNMAXT, 200);
	ck_assert_int_eq(nng_listen(t->rep, t->url, NULL, 0), 0);
	ck_assert_int_eq(nng_dial(t->req, target, NULL, NNG_FLAG_NONBLOCK), 0);
	for (int i = 0; i < WORKERS; i++) {
		struct worker *w = &t->w[i];
		w->t             = t;
		ck_assert_int_eq(nng_ctx_open(&w->in, t->rep), 0);
		ck_assert_int_eq(nng_ctx_open(&w->out, t->req), 0);
		ck_assert_int_eq(nng_aio_alloc(&w->aio, NULL, NULL), 0);
		ck_assert_int_eq(
		    pthread_create(&w->thread, NULL, worker_main, w), 0);
	}
	return t;
}

const char *
pt_tap_url(const struct pt_tap *t)
{
	return t->url;
}

// method_of reads the method byte of a recorded frame.
static uint8_t
method_of(nng_msg *m)
{
	return nng_msg_len(m) >= PSW_FRAME_HDR
	    ? ((const uint8_t *) nng_msg_body(m))[5]
	    : 0;
}

size_t
pt_tap_count(struct pt_tap *t, uint8_t method)
{
	size_t k = 0;
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->n; i++) {
		k += method == 0 || method_of(t->rec[i]) == method;
	}
	pthread_mutex_unlock(&t->mu);
	return k;
}

nng_msg *
pt_tap_get(struct pt_tap *t, uint8_t method, size_t nth)
{
	nng_msg *copy = NULL;
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->n; i++) {
		if (method != 0 && method_of(t->rec[i]) != method) {
			continue;
		}
		if (nth-- == 0) {
			ck_assert_int_eq(nng_msg_dup(&copy, t->rec[i]), 0);
			break;
		}
	}
	pthread_mutex_unlock(&t->mu);
	return copy;
}

void
pt_tap_close(struct pt_tap *t)
{
	if (t == NULL) {
		return;
	}
	nng_close(t->rep);
	nng_close(t->req);
	for (int i = 0; i < WORKERS; i++) {
		pthread_join(t->w[i].thread, NULL);
		nng_aio_free(t->w[i].aio);
	}
	for (size_t i = 0; i < t->n; i++) {
		nng_msg_free(t->rec[i]);
	}
	pthread_mutex_destroy(&t->mu);
	free(t);
}

int
pt_replay(const char *url, const nng_msg *m)
{
	nng_socket       s;
	nng_msg         *copy, *rep;
	struct psw_frame f;
	const char      *why;
	int              status = -1;

	ck_assert_int_eq(nng_msg_dup(&copy, m), 0);
	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 1u << 30);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	ck_assert_int_eq(nng_sendmsg(s, copy, 0), 0);
	if (nng_recvmsg(s, &rep, 0) == 0) {
		PT_OK(psw_msg_parse(rep, &f, &why));
		Pswire__Header *rh = pswire__header__unpack(NULL, f.hdr_len,
		    f.hdr);
		ck_assert_ptr_nonnull(rh);
		status = (int) rh->status;
		pswire__header__free_unpacked(rh, NULL);
		nng_msg_free(rep);
	}
	nng_close(s);
	return status;
}
