// harness.c — the shared trainer thread, raw rpc, raw frame and metric
// read of the suites that drive an in-process job (harness.h).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "comp/comp.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "pt.h"
#include "scrape.h"

// push_encoded encodes each shard with error feedback here, the way a GPU
// trainer would on the device, and pushes the codes.
static int
push_encoded(ferry_client *c, const float *const *g, float *const *w,
    float resid[NT][40])
{
	const struct ferry_shard *sh;
	size_t                    n;
	uint32_t                  id, bucket;
	struct comp_codec         cc = COMP_CODEC_INIT;
	uint8_t                   buf[16][256];
	const uint8_t            *codes[16];
	int                       rv;

	if ((rv = ferry_client_shards(c, &sh, &n, &id, &bucket)) != 0) {
		return rv;
	}
	cc.id     = id;
	cc.bucket = bucket;
	ck_assert_uint_le(n, 16);
	for (size_t i = 0; i < n; i++) {
		size_t out;
		ck_assert_uint_le(sh[i].code_bytes, sizeof(buf[i]));
		PT_OK(comp_ef_encode(&cc, g[sh[i].tensor] + sh[i].offset,
		    resid[sh[i].tensor] + sh[i].offset, sh[i].len, NULL,
		    buf[i], sizeof(buf[i]), &out));
		ck_assert_uint_eq(out, sh[i].code_bytes);
		codes[i] = buf[i];
	}
	return ferry_client_push_pull_encoded(c, codes, 10, w);
}

int
pt_rank_step(struct pt_rank *a, ferry_client *c, int k, float *const *g,
    float *const *w)
{
	if (k < 0) {
		return ferry_client_pull(c, w);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			g[t][i] = grad_for(a->rank, k, t, i);
		}
	}
	if (a->nan_at > 0 && k == a->nan_at) {
		// A non-finite gradient is refused and changes nothing: the
		// same step then pushes its real gradient.
		float keep = g[0][3];
		g[0][3]    = (a->rank & 1) ? INFINITY : NAN;
		int rv = ferry_client_push_pull(c, (const float *const *) g,
		    10, w);
		a->nan_refused = rv == FERRY_EREMOTE &&
		    strstr(ferry_client_last_error(c), "NaN or Inf");
		g[0][3] = keep;
	}
	if (a->encoded && !ferry_client_in_warmup(c)) {
		return push_encoded(c, (const float *const *) g, w, a->resid);
	}
	return ferry_client_push_pull(c, (const float *const *) g, 10, w);
}

void *
pt_rank_main(void *arg)
{
	struct pt_rank          *a     = arg;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", 40, FERRY_TENSOR_WEIGHTS },
		{ "b", 7, FERRY_TENSOR_WEIGHTS },
		{ "c", 1, FERRY_TENSOR_WEIGHTS } };
	ferry_client            *c     = NULL;
	float                    g[NT][40];
	float                   *wp[NT], *gp[NT];
	char                     cert[160], key[160], ca[160];
	int                      steps = a->rejoin ? 0 : a->steps;

	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.lr            = a->lr != 0 ? a->lr : 0.5;
	o.mode          = a->mode;
	o.timeout_ms    = 20000;
	o.codec_push    = a->codec != NULL ? a->codec : a->codec_push;
	o.codec_pull    = a->codec != NULL ? a->codec : a->codec_pull;
	o.warmup_steps  = a->warmup;
	o.staleness     = a->staleness;
	o.sync_quorum   = a->quorum;
	o.link_budget   = a->link_budget;
	if (a->tls_dir != NULL) {
		snprintf(cert, sizeof(cert), "%s/trainer-%d.pem", a->tls_dir,
		    a->rank);
		snprintf(key, sizeof(key), "%s/trainer-%d.key", a->tls_dir,
		    a->rank);
		snprintf(ca, sizeof(ca), "%s/ca.pem", a->tls_dir);
		o.tls_cert = cert;
		o.tls_key  = key;
		o.tls_ca   = ca;
	}
	for (int t = 0; t < NT; t++) {
		wp[t] = a->w[t];
		gp[t] = g[t];
		for (size_t i = 0; i < lens[t]; i++) {
			a->w[t][i] = (float) i;
		}
	}
	if ((a->rv = ferry_client_open(&o, &c)) != 0 ||
	    (a->key != NULL &&
	        (a->rv = ferry_client_set_secret_file(c, a->key)) != 0) ||
	    (a->rv = ferry_client_declare(c, d, NT)) != 0 ||
	    (a->declared != NULL && (a->rv = a->declared(a, c)) != 0) ||
	    (a->rank == 0 && !a->rejoin &&
	        (a->rv = ferry_client_init_weights(c,
	             (const float *const *) wp)) != 0)) {
		goto out;
	}
	// Step -1 is the first pull.
	for (int k = -1; k < steps && a->rv == 0; k++) {
		if (k >= 0 && a->leave_at > 0 && k == a->leave_at) {
			a->rv = ferry_client_leave(c);
			goto out;
		}
		if (k >= 0 && a->before_step != NULL) {
			a->before_step(a, k);
		}
		int rv = a->step != NULL ? a->step(a, c, k, gp, wp)
		                         : pt_rank_step(a, c, k, gp, wp);
		if (rv == PT_STOP) {
			break;
		}
		a->rv = rv;
	}
	if (a->rv == 0 && a->leave_at_end) {
		a->rv = ferry_client_leave(c);
	}
out:
	if (c != NULL) {
		ferry_client_stats(c, &a->stats);
		ferry_client_recovery(c, &a->recovery);
	}
	snprintf(a->err, sizeof(a->err), "%s",
	    c ? ferry_client_last_error(c) : "open failed");
	if (c != NULL && a->rv != 0 && a->leave_on_error) {
		(void) ferry_client_leave(c);
	}
	ferry_client_close(c);
	return NULL;
}

void
pt_ranks_run(struct pt_rank *a, int n)
{
	pthread_t th[8];

	ck_assert_int_le(n, 8);
	for (int r = 0; r < n; r++) {
		a[r].rank = r;
		ck_assert_int_eq(
		    pthread_create(&th[r], NULL, pt_rank_main, &a[r]), 0);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
	}
}

void
pt_ranks_train(struct pt_rank *a, int n)
{
	pt_ranks_run(a, n);
	for (int r = 0; r < n; r++) {
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
}

// learn_run asks the scheduler at url for the job run, as psw_call does
// (a signed Stats), so that a's requests carry it.
static void
learn_run(struct psw_auth *a, struct psw_tls *t, const char *url)
{
	Pswire__Header    h  = PSWIRE__HEADER__INIT;
	ProtobufCMessage *ph = NULL;
	const char       *why;
	nng_socket        s;
	nng_ctx           ctx;
	nng_aio          *aio;

	h.request_id = 1;
	PT_OK(psw_req_open(t, url, 0, 20, 200, &s, &ctx, &aio));
	PT_OK(psw_auth_set_peer(a, ctx, PSW_ROLE_SCHEDULER, 0));
	(void) psw_call_header(a, ctx, aio, &h.base, PSWIRE__METHOD__STATS, 1,
	    10000, &ph, &why);
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
	nng_aio_free(aio);
	nng_close(s);
}

int
pt_rpc(const struct pt_peer *as, const char *url, uint8_t method,
    Pswire__Header *h, const void *payload, size_t len, Pswire__Header **rep)
{
	static const struct pt_peer plain = { 0 };
	nng_socket                  s;
	nng_msg                    *m;
	uint8_t                    *p;
	struct psw_frame            f;
	const char                 *why;
	struct psw_auth            *a = NULL;
	struct psw_tls             *t = NULL;
	char                        cert[160], key[160], ca[160], err[300];
	int                         status = -1;
	size_t                      hl = pswire__header__get_packed_size(h);

	as = as != NULL ? as : &plain;
	if (as->key != NULL) {
		PT_OK(psw_auth_open(as->key, as->who.role, as->who.id, &a, err,
		    sizeof(err)));
	}
	if (as->tls_dir != NULL) {
		snprintf(cert, sizeof(cert), "%s/%s.pem", as->tls_dir,
		    as->cert);
		snprintf(key, sizeof(key), "%s/%s.key", as->tls_dir, as->cert);
		snprintf(ca, sizeof(ca), "%s/ca.pem", as->tls_dir);
		ck_assert_msg(
		    psw_tls_open(cert, key, ca, &t, err, sizeof(err)) == FB_OK,
		    "%s", err);
	}
	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
	PT_OK(psw_tls_dial(t, s, url));
	PT_OK(psw_msg_begin(&m, hl, len, &p));
	if (len > 0) {
		memcpy(p, payload, len);
	}
	PT_OK(psw_msg_finish(m, method, 0, &h->base, hl, len));
	psw_auth_set_run(a, as->run);
	if (a != NULL && as->run == 0 && method != PSWIRE__METHOD__STATS &&
	    (as->to.role == PSW_ROLE_SCHEDULER ||
	        (as->to.role == PSW_ROLE_NONE &&
	            method < PSWIRE__METHOD__PULL))) {
		learn_run(a, t, url);
	}
	if (as->to.role != PSW_ROLE_NONE) {
		PT_OK(psw_auth_sign_to(a, m, 1, as->to, 0, NULL));
	} else {
		PT_OK(psw_auth_sign(a, m, 1, 0, NULL));
	}
	ck_assert_int_eq(nng_sendmsg(s, m, 0), 0);
	if (nng_recvmsg(s, &m, 0) == 0) {
		// A refusal's reply may not be signed in a way the sender can
		// check: only its Header is read.
		PT_OK(psw_msg_parse(m, &f, &why));
		Pswire__Header *rh = pswire__header__unpack(NULL, f.hdr_len,
		    f.hdr);
		ck_assert_ptr_nonnull(rh);
		status = (int) rh->status;
		if (rep != NULL) {
			*rep = rh;
		} else {
			pswire__header__free_unpacked(rh, NULL);
		}
		nng_msg_free(m);
	}
	nng_close(s);
	psw_tls_close(t);
	psw_auth_close(a);
	return status;
}

Pswire__Header *
pt_call(const char *url, uint8_t method, Pswire__Header *h)
{
	Pswire__Header *rh = NULL;
	(void) pt_rpc(NULL, url, method, h, NULL, 0, &rh);
	return rh;
}

Pswire__Header *
pt_register_trainer(const char *url, uint32_t rank, size_t nt, uint64_t len)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       jc = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc     *td = calloc(nt, sizeof(*td));
	Pswire__TensorDesc    **tp = calloc(nt, sizeof(*tp));
	char(*names)[24]           = calloc(nt, sizeof(*names));
	ck_assert(td != NULL && tp != NULL && names != NULL);
	for (size_t i = 0; i < nt; i++) {
		pswire__tensor_desc__init(&td[i]);
		snprintf(names[i], sizeof(names[i]), "t%zu", i);
		td[i].name = names[i];
		td[i].len  = len;
		tp[i]      = &td[i];
	}
	jc.n_tensors       = nt;
	jc.tensors         = tp;
	jc.lr              = 0.1;
	jc.codec_push      = "none";
	jc.codec_pull      = "none";
	rr.role            = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank            = rank;
	rr.job             = &jc;
	h.body_case        = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req     = &rr;
	Pswire__Header *rh = pt_call(url, PSWIRE__METHOD__REGISTER, &h);
	free(td);
	free(tp);
	free(names);
	ck_assert_ptr_nonnull(rh);
	return rh;
}

int
pt_send_msg(const char *url, nng_msg *m, char *err, size_t n)
{
	nng_socket s;
	int        status = -1;

	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 5000);
	// No automatic re-send: a dropped oversize request must not loop.
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	ck_assert_int_eq(nng_sendmsg(s, m, 0), 0);
	if (nng_recvmsg(s, &m, 0) == 0) {
		struct psw_frame f;
		const char      *why;
		if (psw_msg_parse(m, &f, &why) == FB_OK) {
			Pswire__Header *h = pswire__header__unpack(NULL,
			    f.hdr_len, f.hdr);
			if (h != NULL) {
				status = h->status;
				snprintf(err, n, "%s", h->error);
				pswire__header__free_unpacked(h, NULL);
			}
		}
		nng_msg_free(m);
	}
	nng_close(s);
	return status;
}

int
pt_send_raw(const char *url, const void *buf, size_t len, char *err, size_t n)
{
	nng_msg *m;
	ck_assert_int_eq(nng_msg_alloc(&m, len), 0);
	if (len > 0) {
		memcpy(nng_msg_body(m), buf, len);
	}
	return pt_send_msg(url, m, err, n);
}

double
pt_metric(struct obs_registry *r, const char *name)
{
	struct obs_writer w = OBS_WRITER_INIT;
	double            v = -1;
	PT_OK(obs_registry_write(r, &w));
	ck_assert_int_eq(pt_prom_value(w.buf, name, NULL, &v), 0);
	obs_writer_fini(&w);
	return v;
}

uint64_t
pt_stat(const char *text, const char *key)
{
	size_t k = strlen(key);
	for (const char *p = text; p != NULL && *p != '\0';) {
		if (strncmp(p, key, k) == 0) {
			return strtoull(p + k, NULL, 10);
		}
		p = strchr(p, '\n');
		p = p != NULL ? p + 1 : NULL;
	}
	ck_abort_msg("no stats line %s", key);
	return 0;
}

Pswire__Placement *
pt_signed_map(const char *url, const char *key, uint64_t *run)
{
	Pswire__Header              h = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest g = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	struct psw_auth            *a;
	nng_socket                  sock;
	nng_ctx                     ctx;
	nng_aio                    *aio;
	ProtobufCMessage           *ph  = NULL;
	const char                 *why = "";
	char                        err[256];

	PT_OK(psw_auth_open(key, PSW_ROLE_TRAINER, 0, &a, err, sizeof(err)));
	PT_OK(psw_req_open(NULL, url, 0, 20, 200, &sock, &ctx, &aio));
	g.min_epoch     = 1;
	h.request_id    = 7;
	h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req = &g;
	int rv          = psw_call_header(a, ctx, aio, &h.base,
	             PSWIRE__METHOD__GET_PLACEMENT, 7, 5000, &ph, &why);
	ck_assert_msg(rv == FB_OK, "GetPlacement: %s", why);
	Pswire__Header    *rh = (Pswire__Header *) ph;
	Pswire__Placement *pl = rh->placement;
	rh->placement         = NULL;
	rh->body_case         = PSWIRE__HEADER__BODY__NOT_SET;
	pswire__header__free_unpacked(rh, NULL);
	nng_aio_free(aio);
	nng_close(sock);
	*run = psw_auth_run(a);
	psw_auth_close(a);
	return pl;
}

nng_msg *
pt_pull_msg(uint64_t rid, uint64_t version, size_t payload)
{
	Pswire__Header      h  = PSWIRE__HEADER__INIT;
	Pswire__PullRequest pr = PSWIRE__PULL_REQUEST__INIT;
	uint32_t            id = 0;
	nng_msg            *m;
	uint8_t            *p;
	h.request_id = rid;
	h.epoch      = 1;
	h.body_case  = PSWIRE__HEADER__BODY_PULL_REQ;
	h.pull_req   = &pr;
	pr.n_shards  = 1;
	pr.shards    = &id;
	pr.version   = version;
	size_t hl    = pswire__header__get_packed_size(&h);
	PT_OK(psw_msg_begin(&m, hl, payload, &p));
	memset(p, 0x5a, payload);
	PT_OK(
	    psw_msg_finish(m, PSWIRE__METHOD__PULL, 0, &h.base, hl, payload));
	return m;
}
