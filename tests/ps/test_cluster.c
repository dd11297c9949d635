// test_cluster.c — a scheduler and servers in this process, trainers as
// threads using libferry. One test case per theme (see suite_cluster):
// training (aggregation and the optimizer, sync and async), trainers that
// leave and rejoin, bad input (membership errors, hostile frames sent to a
// live server), codecs, latency-aware placement, and shard moves.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "comp/comp.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "ps/ps.h"
#include "harness.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

static int placement = PS_PLACEMENT_UNIFORM;

static void
cluster_start(struct cluster *cl, int trainers, int servers)
{
	cluster_open(cl, trainers, servers, placement);
}

struct trainer_arg {
	const char *url;
	int         rank;
	int         steps;
	int         mode;
	const char *codec_push, *codec_pull;
	uint32_t    warmup;
	uint64_t    bytes_pushed, bytes_pulled, map_changes;
	// Called by rank 0 before step `hook_at` (and 2*hook_at), if set.
	void (*hook)(void *arg, int step);
	void *hook_arg;
	int   hook_at;
	int   encoded;     // push codes encoded here, not by libferry
	int   leave_at;    // > 0: leave the job before this step
	int   nan_at;      // > 0: first push a NaN (or Inf) at this step
	int   nan_refused; // the server refused it with a message
	float resid[NT][40];
	float w[NT][40];
	int   rv;
	char  err[256];
};

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

// auto_budget is every trainer's opts.link_budget (codec "auto"; set by
// the test that uses it, 0 otherwise).
static double auto_budget;

static void *
trainer_main(void *arg)
{
	struct trainer_arg      *a     = arg;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", 40 }, { "b", 7 },
		{ "c", 1 } };
	ferry_client            *c     = NULL;
	float                    g[NT][40];
	float                   *wp[NT], *gp[NT];

	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.lr            = 0.5;
	o.mode          = a->mode;
	o.timeout_ms    = 20000;
	o.codec_push    = a->codec_push;
	o.codec_pull    = a->codec_pull;
	o.warmup_steps  = a->warmup;
	o.link_budget   = auto_budget;
	for (int t = 0; t < NT; t++) {
		wp[t] = a->w[t];
		gp[t] = g[t];
		for (size_t i = 0; i < lens[t]; i++) {
			a->w[t][i] = (float) i; // initial weights
		}
	}
	if ((a->rv = ferry_client_open(&o, &c)) != 0 ||
	    (a->rv = ferry_client_declare(c, d, NT)) != 0) {
		goto out;
	}
	if (a->rank == 0 &&
	    (a->rv = ferry_client_init_weights(c,
	         (const float *const *) wp))) {
		goto out;
	}
	if ((a->rv = ferry_client_pull(c, wp)) != 0) {
		goto out;
	}
	for (int k = 0; k < a->steps; k++) {
		if (a->leave_at > 0 && k == a->leave_at) {
			a->rv = ferry_client_leave(c);
			goto out;
		}
		if (a->hook != NULL && a->hook_at > 0 && k > 0 &&
		    k % a->hook_at == 0) {
			a->hook(a->hook_arg, k);
		}
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				g[t][i] = grad_for(a->rank, k, t, i);
			}
		}
		if (a->nan_at > 0 && k == a->nan_at) {
			// A non-finite gradient is refused and changes
			// nothing: the same step then pushes its real
			// gradient.
			float keep     = g[0][3];
			g[0][3]        = (a->rank & 1) ? INFINITY : NAN;
			int rv         = ferry_client_push_pull(c,
			            (const float *const *) gp, 10, wp);
			a->nan_refused = rv == FERRY_EREMOTE &&
			    strstr(ferry_client_last_error(c), "NaN or Inf");
			g[0][3] = keep;
		}
		if (a->encoded && !ferry_client_in_warmup(c)) {
			a->rv = push_encoded(c, (const float *const *) gp, wp,
			    a->resid);
		} else {
			a->rv = ferry_client_push_pull(c,
			    (const float *const *) gp, 10, wp);
		}
		if (a->rv != 0) {
			goto out;
		}
	}
out:
	if (c != NULL) {
		struct ferry_stats st;
		ferry_client_stats(c, &st);
		a->bytes_pushed = st.bytes_pushed;
		a->bytes_pulled = st.bytes_pulled;
		a->map_changes  = st.map_changes;
		snprintf(a->err, sizeof(a->err), "%s",
		    ferry_client_last_error(c));
	}
	ferry_client_close(c);
	return NULL;
}

// Sync mode: after K steps every trainer holds the same weights, equal to
// SGD on the sum of all ranks' gradients divided by the total samples.
START_TEST(test_cluster_sync_aggregation)
{
	struct cluster     cl;
	struct trainer_arg a[2];
	pthread_t          th[2];
	const int          K = 5;

	cluster_start(&cl, 2, 2);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].rank  = r;
		a[r].steps = K;
		pthread_create(&th[r], NULL, trainer_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			float x = (float) i;
			for (int k = 0; k < K; k++) {
				float sum = grad_for(0, k, t, i) +
				    grad_for(1, k, t, i);
				x -= (float) (0.5 / 20.0) * sum;
			}
			ck_assert_msg(a[0].w[t][i] == a[1].w[t][i],
			    "ranks disagree at %d/%zu", t, i);
			ck_assert_msg(fabsf(a[0].w[t][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "tensor %d[%zu] = %g, expected %g", t, i,
			    a[0].w[t][i], x);
		}
	}
	cluster_stop(&cl);
}
END_TEST

// A gradient holding NaN or Inf is refused, with a message naming it, in
// sync and async mode; the round it was pushed to still completes with
// the trainers' real gradients, so the weights come out exact.
START_TEST(test_cluster_nonfinite_push_refused)
{
	for (int mode = 0; mode < 2; mode++) {
		struct cluster     cl;
		struct trainer_arg a[2];
		pthread_t          th[2];
		const int          K = 4, T = mode == 0 ? 2 : 1;
		cluster_start(&cl, T, 1);
		for (int r = 0; r < T; r++) {
			memset(&a[r], 0, sizeof(a[r]));
			a[r].url    = ps_scheduler_url(cl.sched);
			a[r].rank   = r;
			a[r].steps  = K;
			a[r].mode   = mode == 0 ? FERRY_MODE_SYNC
			                        : FERRY_MODE_ASYNC;
			a[r].nan_at = 2;
			pthread_create(&th[r], NULL, trainer_main, &a[r]);
		}
		for (int r = 0; r < T; r++) {
			pthread_join(th[r], NULL);
			ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
			    ferry_strerror(a[r].rv), a[r].err);
			ck_assert_msg(a[r].nan_refused,
			    "rank %d: non-finite push not refused (%s)", r,
			    a[r].err);
		}
		for (size_t i = 0; i < lens[0]; i++) {
			float x = (float) i;
			for (int k = 0; k < K; k++) {
				float sum = grad_for(0, k, 0, i);
				if (T == 2) {
					sum += grad_for(1, k, 0, i);
				}
				x -= (float) (0.5 / (10.0 * T)) * sum;
			}
			ck_assert_msg(fabsf(a[0].w[0][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "mode %d: a[%zu] = %g, expected %g", mode, i,
			    a[0].w[0][i], x);
		}
		cluster_stop(&cl);
	}
}
END_TEST

// A trainer that leaves stops the sync rounds from waiting for it: the
// other trainer goes on alone, and the weights are SGD on both ranks'
// gradients before the leave and on rank 0's alone after it.
START_TEST(test_cluster_trainer_leave)
{
	struct cluster     cl;
	struct trainer_arg a[2];
	pthread_t          th[2];
	const int          K = 8, L = 3;

	cluster_start(&cl, 2, 2);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url      = ps_scheduler_url(cl.sched);
		a[r].rank     = r;
		a[r].steps    = K;
		a[r].leave_at = r == 1 ? L : 0;
		pthread_create(&th[r], NULL, trainer_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			float x = (float) i;
			for (int k = 0; k < K; k++) {
				if (k < L) {
					x -= (float) (0.5 / 20.0) *
					    (grad_for(0, k, t, i) +
					        grad_for(1, k, t, i));
				} else {
					x -= (float) (0.5 / 10.0) *
					    grad_for(0, k, t, i);
				}
			}
			ck_assert_msg(fabsf(a[0].w[t][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "tensor %d[%zu] = %g, expected %g", t, i,
			    a[0].w[t][i], x);
		}
	}
	cluster_stop(&cl);
}
END_TEST

struct rejoin_arg {
	const char *url;
	int         rank, before, after, leave_at_end;
	uint64_t    version;
	int         rv;
	char        err[256];
};

// rejoin_main trains `before` steps, leaves, opens a new client for the
// same rank, and trains `after` more (pulling when told it is behind);
// with leave_at_end it leaves after its last step.
static void *
rejoin_main(void *arg)
{
	struct rejoin_arg       *a     = arg;
	struct ferry_tensor_desc d[NT] = { { "a", 40 }, { "b", 7 },
		{ "c", 1 } };
	float                    w[NT][40], g[NT][40];
	float                   *wp[NT], *gp[NT];
	ferry_client            *c = NULL;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	o.scheduler_url            = a->url;
	o.rank                     = a->rank;
	o.lr                       = 0.5;
	o.timeout_ms               = 20000;
	for (int t = 0; t < NT; t++) {
		wp[t] = w[t];
		gp[t] = g[t];
		for (size_t i = 0; i < lens[t]; i++) {
			w[t][i] = (float) i;
			g[t][i] = grad_for(a->rank, 0, t, i);
		}
	}
	for (int round = 0; round < 2; round++) {
		int steps = round == 0 ? a->before : a->after;
		if ((a->rv = ferry_client_open(&o, &c)) != 0 ||
		    (a->rv = ferry_client_declare(c, d, NT)) != 0) {
			goto out;
		}
		if (round == 0 && a->rank == 0 &&
		    (a->rv = ferry_client_init_weights(c,
		         (const float *const *) wp)) != 0) {
			goto out;
		}
		if ((a->rv = ferry_client_pull(c, wp)) != 0) {
			goto out;
		}
		for (int k = 0; k < steps; k++) {
			a->rv = ferry_client_push_pull(c,
			    (const float *const *) gp, 10, wp);
			if (a->rv == FERRY_EBEHIND) {
				a->rv = ferry_client_pull(c, wp);
			}
			if (a->rv != 0) {
				goto out;
			}
		}
		if ((round == 0 && a->after > 0) || a->leave_at_end) {
			if ((a->rv = ferry_client_leave(c)) != 0) {
				goto out;
			}
		}
		struct ferry_stats st;
		ferry_client_stats(c, &st);
		a->version = st.version;
		if (a->after == 0) {
			break;
		}
		if (round == 0) {
			ferry_client_close(c);
			c = NULL;
		}
	}
out:
	if (c != NULL) {
		snprintf(a->err, sizeof(a->err), "%s",
		    ferry_client_last_error(c));
	}
	ferry_client_close(c);
	return NULL;
}

// A trainer that left can come back under the same rank: rounds wait for
// it again; pushing for a round that finished without it says "behind",
// and a pull brings it up to date. Nobody hangs.
START_TEST(test_cluster_trainer_rejoin)
{
	struct cluster    cl;
	struct rejoin_arg a[2];
	pthread_t         th[2];
	cluster_start(&cl, 2, 2);
	memset(a, 0, sizeof(a));
	a[0] = (struct rejoin_arg) {
		.rank         = 0,
		.before       = 12,
		.after        = 0,
		.leave_at_end = 1,
	};
	a[1] = (struct rejoin_arg) {
		.rank         = 1,
		.before       = 3,
		.after        = 4,
		.leave_at_end = 1,
	};
	for (int r = 0; r < 2; r++) {
		a[r].url = ps_scheduler_url(cl.sched);
		pthread_create(&th[r], NULL, rejoin_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	ck_assert_uint_ge(a[0].version, 12);
	ck_assert_uint_ge(a[1].version, 7);
	cluster_stop(&cl);
}
END_TEST

// Async mode with one trainer: each push is applied at once.
START_TEST(test_cluster_async_single)
{
	struct cluster     cl;
	struct trainer_arg a;
	pthread_t          th;

	cluster_start(&cl, 1, 2);
	memset(&a, 0, sizeof(a));
	a.url   = ps_scheduler_url(cl.sched);
	a.steps = 3;
	a.mode  = FERRY_MODE_ASYNC;
	pthread_create(&th, NULL, trainer_main, &a);
	pthread_join(th, NULL);
	ck_assert_msg(a.rv == 0, "%s: %s", ferry_strerror(a.rv), a.err);
	for (size_t i = 0; i < lens[0]; i++) {
		float x = (float) i;
		for (int k = 0; k < 3; k++) {
			x -= (float) (0.5 / 10.0) * grad_for(0, k, 0, i);
		}
		ck_assert(fabsf(a.w[0][i] - x) <= 1e-5f * (1 + fabsf(x)));
	}
	cluster_stop(&cl);
}
END_TEST

// A trainer whose table differs from the job's gets FERRY_EMISMATCH, and
// a rank out of range is refused with a message.
START_TEST(test_cluster_declare_mismatch_bogus)
{
	struct cluster           cl;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d1[1] = { { "w", 10 } };
	struct ferry_tensor_desc d2[1] = { { "w", 11 } };
	ferry_client            *c0, *c1, *c2;

	cluster_start(&cl, 2, 1);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.timeout_ms    = 300; // declare of c0 waits for members: times out
	PT_OK(ferry_client_open(&o, &c0));
	// Either the client's own timer fires or the scheduler's sweeper
	// answers the parked call DEADLINE_EXCEEDED first (FERRY_EREMOTE).
	int rv = ferry_client_declare(c0, d1, 1);
	ck_assert_msg(rv == FERRY_ETIMEDOUT || rv == FERRY_EREMOTE,
	    "declare of c0: %d (%s)", rv, ferry_client_last_error(c0));
	// The refusals below come back at once: a long timeout keeps a
	// loaded machine from turning them into timeouts.
	o.rank       = 1;
	o.timeout_ms = 20000;
	PT_OK(ferry_client_open(&o, &c1));
	ck_assert_int_eq(ferry_client_declare(c1, d2, 1), FERRY_EMISMATCH);
	ck_assert_ptr_nonnull(strstr(ferry_client_last_error(c1), "len")
	        ? ferry_client_last_error(c1)
	        : strstr(ferry_client_last_error(c1), "floats"));
	o.rank = 7;
	PT_OK(ferry_client_open(&o, &c2));
	ck_assert_int_eq(ferry_client_declare(c2, d1, 1), FERRY_EREMOTE);
	ck_assert_ptr_nonnull(strstr(ferry_client_last_error(c2), "rank 7"));
	ck_assert_int_eq(ferry_client_push(c2, NULL, 1), FERRY_ESTATE);
	ferry_client_close(c0);
	ferry_client_close(c1);
	ferry_client_close(c2);
	ck_assert_int_eq(ferry_client_open(NULL, &c0), FERRY_EINVAL);
	o.scheduler_url = NULL;
	ck_assert_int_eq(ferry_client_open(&o, &c0), FERRY_EINVAL);
	cluster_stop(&cl);
}
END_TEST

// send_raw sends bytes to url and returns the reply's status (or -1 when
// no parseable reply came back).
static int
send_raw(const char *url, const void *buf, size_t len, char *err, size_t n)
{
	nng_socket s;
	nng_msg   *m;
	int        status = -1;

	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 5000);
	// No automatic re-send: a dropped oversize request must not loop.
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	ck_assert_int_eq(nng_msg_alloc(&m, len), 0);
	if (len > 0) {
		memcpy(nng_msg_body(m), buf, len);
	}
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

// Garbage, truncated, wrong-version and lying frames get error replies
// with a reason, and the server still trains correctly afterwards.
START_TEST(test_cluster_hostile_frames_bogus)
{
	struct cluster cl;
	char           err[512];
	uint8_t        buf[64];
	const char    *url;

	cluster_start(&cl, 1, 1);
	url = ps_server_url(cl.srv[0]);
	memset(buf, 0xab, sizeof(buf));
	ck_assert_int_eq(send_raw(url, buf, sizeof(buf), err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_ptr_nonnull(strstr(err, "magic"));
	ck_assert_int_eq(send_raw(url, buf, 3, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	psw_frame_put(buf, PSWIRE__METHOD__PUSH, 0, 4, 0);
	buf[4] = 99; // protocol version
	ck_assert_int_eq(send_raw(url, buf, 20, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_ptr_nonnull(strstr(err, "version"));
	psw_frame_put(buf, PSWIRE__METHOD__PUSH, 0, 40, 0); // header > frame
	ck_assert_int_eq(send_raw(url, buf, 20, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	psw_frame_put(buf, PSWIRE__METHOD__PUSH, 0, 8, 0); // junk protobuf
	memset(buf + 16, 0xff, 8);
	ck_assert_int_eq(send_raw(url, buf, 24, err, sizeof(err)),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	psw_frame_put(buf, 99, 0, 0, 0); // unknown method
	ck_assert_int_eq(send_raw(url, buf, 16, err, sizeof(err)),
	    PSWIRE__STATUS__UNIMPLEMENTED);
	// Oversize: above the server's receive cap, nng drops the message
	// and the connection; the server must survive it.
	{
		size_t   big = 2u << 20;
		uint8_t *p   = malloc(big);
		ck_assert_ptr_nonnull(p);
		memset(p, 0, big);
		psw_frame_put(p, PSWIRE__METHOD__PUSH, 0, 0,
		    (uint32_t) (big - 16));
		ck_assert_int_eq(send_raw(url, p, big, err, sizeof(err)), -1);
		free(p);
	}
	// Still trains: one trainer, 2 steps, exact result.
	struct trainer_arg a;
	pthread_t          th;
	memset(&a, 0, sizeof(a));
	a.url   = ps_scheduler_url(cl.sched);
	a.steps = 2;
	pthread_create(&th, NULL, trainer_main, &a);
	pthread_join(th, NULL);
	ck_assert_msg(a.rv == 0, "%s: %s", ferry_strerror(a.rv), a.err);
	float x = 5.0f;
	for (int k = 0; k < 2; k++) {
		x -= (float) (0.5 / 10.0) * grad_for(0, k, 0, 5);
	}
	ck_assert(fabsf(a.w[0][5] - x) <= 1e-5f * (1 + fabsf(x)));
	// Requests for shards, versions and ranks that do not exist.
	{
		Pswire__Header      h      = PSWIRE__HEADER__INIT;
		Pswire__PullRequest pr     = PSWIRE__PULL_REQUEST__INIT;
		uint32_t            ids[2] = { 999, 0 };
		uint8_t             out[256];
		h.epoch     = 1;
		h.body_case = PSWIRE__HEADER__BODY_PULL_REQ;
		h.pull_req  = &pr;
		pr.n_shards = 1;
		pr.shards   = ids;
		size_t hl   = pswire__header__pack(&h, out + 16);
		psw_frame_put(out, PSWIRE__METHOD__PULL, 0, (uint32_t) hl, 0);
		ck_assert_int_eq(send_raw(url, out, 16 + hl, err, sizeof(err)),
		    PSWIRE__STATUS__INVALID_ARGUMENT);
		ck_assert_ptr_nonnull(strstr(err, "shard 999"));
		ids[0]     = 0;
		pr.version = 1000; // far future in sync mode
		hl         = pswire__header__pack(&h, out + 16);
		psw_frame_put(out, PSWIRE__METHOD__PULL, 0, (uint32_t) hl, 0);
		ck_assert_int_eq(send_raw(url, out, 16 + hl, err, sizeof(err)),
		    PSWIRE__STATUS__FAILED_PRECONDITION);
	}
	cluster_stop(&cl);
}
END_TEST

// servers_caught_up waits (5 s at most) until every server of cl has
// applied the scheduler's current map, so that a trainer's next request
// meets it: on a loaded machine the few steps left could otherwise end
// before any server has heard of the move, and nobody re-fetches.
static void
servers_caught_up(struct cluster *cl)
{
	char text[2048];
	ps_scheduler_stats(cl->sched, text, sizeof(text));
	unsigned long long want = pt_stat(text, "epoch:");
	for (int i = 0; i < 500; i++) {
		int behind = 0;
		for (int m = 0; m < cl->n_srv; m++) {
			ps_server_stats(cl->srv[m], text, sizeof(text));
			behind |= pt_stat(text, "map_epoch:") < want;
		}
		if (!behind) {
			return;
		}
		nng_msleep(10);
	}
	ck_abort_msg("servers did not apply map epoch %llu in 5 s", want);
}

// move_all is a trainer hook: it re-places every shard on the other
// server, in the middle of training, and waits until the servers have
// the new map.
static void
move_all(void *arg, int step)
{
	struct cluster *cl = arg;
	uint32_t        assign[5];
	for (uint32_t i = 0; i < 5; i++) {
		assign[i] = (i + (uint32_t) (step / 3)) % 2;
	}
	PT_OK(ps_scheduler_replace(cl->sched, assign, 5));
	servers_caught_up(cl);
}

// A run of two trainer threads on a cluster already started.
struct pair_opts {
	int         steps;
	const char *push, *pull;
	uint32_t    warmup;
	int         encoded;               // rank 0 and 1 encode pushes
	void (*hook)(void *arg, int step); // rank 0's hook, if any
	void *hook_arg;
	int   hook_at;
};

// train_pair trains ranks 0 and 1 on cl with o and checks they succeeded.
static void
train_pair(struct cluster *cl, struct trainer_arg a[2],
    const struct pair_opts *o)
{
	pthread_t th[2];
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		if (r == 0) {
			a[r].hook     = o->hook;
			a[r].hook_arg = o->hook_arg;
			a[r].hook_at  = o->hook_at;
		}
		a[r].url        = ps_scheduler_url(cl->sched);
		a[r].rank       = r;
		a[r].steps      = o->steps;
		a[r].codec_push = o->push;
		a[r].codec_pull = o->pull;
		a[r].warmup     = o->warmup;
		a[r].encoded    = o->encoded;
		pthread_create(&th[r], NULL, trainer_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d (%s/%s): %s: %s", r,
		    o->push, o->pull, ferry_strerror(a[r].rv), a[r].err);
	}
}

// run_pair_hook trains 2 trainers x 2 servers for K steps with the
// codecs; with move_at > 0 rank 0 moves every shard every move_at steps.
static void
run_pair_hook(struct trainer_arg a[2], int K, const char *push,
    const char *pull, uint32_t warmup, int move_at)
{
	struct cluster   cl;
	struct pair_opts o = { K, push, pull, warmup, 0, NULL, NULL, 0 };
	cluster_start(&cl, 2, 2);
	if (move_at > 0) {
		o.hook     = move_all;
		o.hook_arg = &cl;
		o.hook_at  = move_at;
	}
	train_pair(&cl, a, &o);
	cluster_stop(&cl);
}

static void
run_pair(struct trainer_arg a[2], int K, const char *push, const char *pull,
    uint32_t warmup)
{
	run_pair_hook(a, K, push, pull, warmup, 0);
}

// same_weights checks that two runs ended with bit-identical weights.
static void
same_weights(struct trainer_arg x[2], struct trainer_arg y[2])
{
	for (int r = 0; r < 2; r++) {
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(x[r].w[t], y[r].w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "rank %d tensor %d differs", r, t);
		}
	}
}

struct leave_ctx {
	struct cluster *cl;
	int             rv;
};

// leave_one is a trainer hook: server 1 leaves the job mid-training.
static void
leave_one(void *arg, int step)
{
	struct leave_ctx *lc = arg;
	(void) step;
	lc->rv = ps_server_leave(lc->cl->srv[1], 20000);
}

// A server that leaves mid-training hands its shards to the others first:
// the weights are bit-identical to a run where nobody left, the leaver
// holds nothing, and the last server may not leave.
START_TEST(test_cluster_server_leave_without_loss)
{
	struct trainer_arg still[2], left[2];
	struct cluster     cl;
	struct leave_ctx   lc = { &cl, -1 };
	char               text[2048];

	struct pair_opts o = { 10, "q8", "q8", 0, 0, leave_one, &lc, 4 };
	run_pair(still, 10, "q8", "q8", 0);
	cluster_start(&cl, 2, 3);
	train_pair(&cl, left, &o);
	ck_assert_msg(lc.rv == FB_OK, "leave: %s", fb_strerror(lc.rv));
	ps_server_stats(cl.srv[1], text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "shards:0\r\n"));
	same_weights(still, left);
	// Servers 0 and 2 remain; after 0 leaves too, 2 is the last.
	ck_assert_int_eq(ps_server_leave(cl.srv[0], 20000), FB_OK);
	ck_assert_int_eq(ps_server_leave(cl.srv[2], 2000), FB_EREMOTE);
	cluster_stop(&cl);
}
END_TEST

// join_one is a trainer hook: a third server joins the running job.
static void
join_one(void *arg, int step)
{
	struct cluster       *cl = arg;
	struct ps_server_opts o  = PS_SERVER_OPTS_INIT;
	char                  url[64];
	(void) step;
	if (cl->n_srv >= 3) {
		return; // join once
	}
	o.url           = pt_addr(url, sizeof(url), "tcp");
	o.scheduler_url = ps_scheduler_url(cl->sched);
	o.max_msg       = 1u << 20;
	PT_OK(ps_server_open(&o, &cl->srv[cl->n_srv]));
	cl->n_srv++;
}

// A server that joins mid-training receives shards from the others (the
// uniform map is dealt again over three servers): the weights are
// bit-identical to a run where nobody joined, and the newcomer holds
// some of the shards.
START_TEST(test_cluster_server_join_without_loss)
{
	struct trainer_arg still[2], joined[2];
	struct cluster     cl;
	char               text[2048];

	struct pair_opts o = { 10, "q8", "q8", 0, 0, join_one, &cl, 4 };
	run_pair(still, 10, "q8", "q8", 0);
	cluster_start(&cl, 2, 2);
	train_pair(&cl, joined, &o);
	same_weights(still, joined);
	ck_assert_int_eq(cl.n_srv, 3);
	// The move runs beside training: on a loaded machine the 10 steps
	// can end before the Transfers land, so wait for them (10 s at most).
	for (int i = 0; i < 200; i++) {
		ps_server_stats(cl.srv[2], text, sizeof(text));
		if (strstr(text, "shards:0\r\n") == NULL) {
			break;
		}
		nng_msleep(50);
	}
	ck_assert_msg(strstr(text, "shards:0\r\n") == NULL,
	    "the new server holds nothing: %s", text);
	cluster_stop(&cl);
}
END_TEST

// Re-placement without loss: moving every shard to the other server
// (three times, mid-training, while the other trainer is pushing) gives
// bit-identical weights to a run without moves: no update is lost or
// applied twice. Checked in fp32 and with q4 pushes + q8 pulls (the
// reference, delta log and staged pushes travel with the shard).
START_TEST(test_cluster_move_without_loss)
{
	static const char *codecs[][2] = { { "none", "none" },
		{ "q4", "q8" } };
	for (size_t k = 0; k < 2; k++) {
		struct trainer_arg still[2], moved[2];
		run_pair(still, 12, codecs[k][0], codecs[k][1], 0);
		run_pair_hook(moved, 12, codecs[k][0], codecs[k][1], 0, 3);
		ck_assert_uint_ge(moved[0].map_changes + moved[1].map_changes,
		    2);
		same_weights(still, moved);
	}
}
END_TEST

// move_twice is a trainer hook: two maps published back to back, the
// second moving every shard on again while the first's Transfers are in
// flight (a shard ARRIVING at its first new server must go on to its
// second, and a server that skips the first map must not drop it).
static void
move_twice(void *arg, int step)
{
	struct cluster *cl = arg;
	uint32_t        assign[5];
	for (uint32_t k = 1; k <= 2; k++) {
		for (uint32_t i = 0; i < 5; i++) {
			assign[i] = (i + (uint32_t) step / 2 + k) % 3;
		}
		PT_OK(ps_scheduler_replace(cl->sched, assign, 5));
	}
	servers_caught_up(cl);
}

// Back-to-back moves over three servers (two maps at once, every other
// step) lose nothing: the weights are bit-identical to a run without
// moves.
START_TEST(test_cluster_back_to_back_moves_without_loss)
{
	struct trainer_arg still[2], moved[2];
	struct cluster     cl;
	struct pair_opts   o = { 12, "q4", "q8", 0, 0, move_twice, &cl, 2 };

	run_pair(still, 12, "q4", "q8", 0);
	cluster_start(&cl, 2, 3);
	train_pair(&cl, moved, &o);
	ck_assert_uint_ge(moved[0].map_changes + moved[1].map_changes, 2);
	same_weights(still, moved);
	cluster_stop(&cl);
}
END_TEST

// ferry__requeue_ms (clients/src/exchange.c): how long a re-fetch or
// back-off waits for the requests in flight before re-sending them.
extern unsigned ferry__requeue_ms;

// With every such wait cancelling and re-sending its requests at once
// (marked resend), the back-to-back moves still lose nothing: each server
// counts a re-sent push once, also after its round closed, and the weights
// are bit-identical to a run without moves.
START_TEST(test_cluster_moves_with_resends)
{
	struct trainer_arg still[2], moved[2];
	struct cluster     cl;
	struct pair_opts   o = { 12, "q4", "q8", 0, 0, move_twice, &cl, 2 };

	run_pair(still, 12, "q4", "q8", 0);
	ferry__requeue_ms = 0;
	cluster_start(&cl, 2, 3);
	train_pair(&cl, moved, &o);
	ferry__requeue_ms = 250;
	ck_assert_uint_ge(moved[0].map_changes + moved[1].map_changes, 2);
	same_weights(still, moved);
	cluster_stop(&cl);
}
END_TEST

struct leave_arg {
	struct ps_server *srv;
	int               rv;
};

static void *
leave_main(void *arg)
{
	struct leave_arg *l = arg;
	l->rv               = ps_server_leave(l->srv, 20000);
	return NULL;
}

// leave_two is a trainer hook: servers 1 and 2 leave at once (as a
// StatefulSet's parallel pod policy does), so the second map can move on
// shards the first one is still moving.
static void
leave_two(void *arg, int step)
{
	struct leave_ctx *lc = arg;
	struct leave_arg  l[2];
	pthread_t         th[2];
	if (step != 4) {
		return;
	}
	for (int i = 0; i < 2; i++) {
		l[i].srv = lc->cl->srv[1 + i];
		pthread_create(&th[i], NULL, leave_main, &l[i]);
	}
	lc->rv = FB_OK;
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		if (l[i].rv != FB_OK) {
			lc->rv = l[i].rv;
		}
	}
}

// Two of four servers leaving at once lose nothing: the weights are
// bit-identical to a run where nobody left, and the leavers hold nothing.
START_TEST(test_cluster_two_servers_leave_at_once)
{
	struct trainer_arg still[2], left[2];
	struct cluster     cl;
	struct leave_ctx   lc = { &cl, -1 };
	char               text[2048];

	struct pair_opts o = { 10, "q4", "q8", 0, 0, leave_two, &lc, 4 };
	run_pair(still, 10, "q4", "q8", 0);
	cluster_start(&cl, 2, 4);
	train_pair(&cl, left, &o);
	ck_assert_msg(lc.rv == FB_OK, "leave: %s", fb_strerror(lc.rv));
	for (int i = 1; i <= 2; i++) {
		ps_server_stats(cl.srv[i], text, sizeof(text));
		ck_assert_ptr_nonnull(strstr(text, "shards:0\r\n"));
	}
	same_weights(still, left);
	cluster_stop(&cl);
}
END_TEST

// With q4 pushes and q8 reference-delta pulls, both trainers end with
// bit-identical weights (the pull reference is in lockstep through the
// wire), close to the fp32 run, and the wire carries fewer bytes.
START_TEST(test_cluster_codecs_lockstep)
{
	struct trainer_arg ref[2], q[2];
	const int          K = 12;
	run_pair(ref, K, "none", "none", 0);
	run_pair(q, K, "q4", "q8", 2);
	double err = 0, norm = 0;
	for (int t = 0; t < NT; t++) {
		ck_assert_int_eq(
		    memcmp(q[0].w[t], q[1].w[t], lens[t] * sizeof(float)), 0);
		for (size_t i = 0; i < lens[t]; i++) {
			double d = q[0].w[t][i] - ref[0].w[t][i];
			err += d * d;
			norm += (double) ref[0].w[t][i] * ref[0].w[t][i];
		}
	}
	ck_assert_msg(sqrt(err / norm) < 0.02, "q4/q8 drifted %.3g from fp32",
	    sqrt(err / norm));
	ck_assert_uint_lt(q[0].bytes_pushed, ref[0].bytes_pushed);
	ck_assert_uint_lt(q[0].bytes_pulled, ref[0].bytes_pulled);
}
END_TEST

// Gradients encoded by the caller (as a GPU trainer does on the device)
// and pushed with ferry_client_push_pull_encoded give bit-identical
// weights to libferry encoding them itself.
START_TEST(test_cluster_encoded_push)
{
	struct trainer_arg lib[2], own[2];
	struct cluster     cl;
	struct pair_opts   o = { 8, "q4", "q8", 2, 1, NULL, NULL, 0 };
	run_pair(lib, 8, "q4", "q8", 2);
	cluster_start(&cl, 2, 2);
	train_pair(&cl, own, &o);
	same_weights(lib, own);
	cluster_stop(&cl);
}
END_TEST

// Codec "auto": with a budget every link fits (the steps here compute
// for microseconds, 1e6 times that is seconds) every link keeps fp32
// pushes and pulls of the weights, bit-identical to none/none; with one
// nothing fits, every link moves, after the first step, to the top-1%
// pushes (each ShardRef naming its codec) and the shared reference's
// deltas (a full resync from the weights), so both ranks hold the same
// reference, near fp32, for fewer bytes.
START_TEST(test_cluster_codec_auto)
{
	struct trainer_arg ref[2], fast[2], slow[2];
	const int          K = 10;
	run_pair(ref, K, "none", "none", 0);
	auto_budget = 1e6;
	run_pair(fast, K, "auto", "auto", 0);
	same_weights(ref, fast);
	auto_budget = 0.001;
	run_pair(slow, K, "auto", "auto", 0);
	auto_budget = 0;
	double err = 0, norm = 0;
	for (int t = 0; t < NT; t++) {
		ck_assert_int_eq(memcmp(slow[0].w[t], slow[1].w[t],
		                     lens[t] * sizeof(float)),
		    0);
		for (size_t i = 0; i < lens[t]; i++) {
			double d = slow[0].w[t][i] - ref[0].w[t][i];
			err += d * d;
			norm += (double) ref[0].w[t][i] * ref[0].w[t][i];
		}
	}
	ck_assert_msg(sqrt(err / norm) < 0.05, "auto drifted %.3g from fp32",
	    sqrt(err / norm));
	ck_assert_uint_lt(slow[0].bytes_pushed, ref[0].bytes_pushed);
}
END_TEST

// Every codec trains without error in both directions.
START_TEST(test_cluster_codecs_all)
{
	static const char *push[] = { "fp16", "bf16", "q8", "q2", "sign",
		"topk:0.25", "q4:sr" };
	static const char *pull[] = { "bf16", "fp16", "q2", "q4", "q8", "fp16",
		"q8" };
	for (size_t i = 0; i < sizeof(push) / sizeof(push[0]); i++) {
		struct trainer_arg a[2];
		run_pair(a, 4, push[i], pull[i], 1);
		for (int t = 0; t < NT; t++) {
			ck_assert_int_eq(memcmp(a[0].w[t], a[1].w[t],
			                     lens[t] * sizeof(float)),
			    0);
		}
	}
}
END_TEST

// A job with an unknown codec is refused at declaration, with the reason.
START_TEST(test_cluster_codec_bogus)
{
	struct cluster    cl;
	struct ferry_opts o = FERRY_OPTS_INIT;
	ferry_client     *c;
	cluster_start(&cl, 1, 1);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.codec_push    = "q3";
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_EINVAL);
	o.codec_push = "none";
	o.codec_pull = "q8:sr"; // pull side must round deterministically
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_EINVAL);
	cluster_stop(&cl);
}
END_TEST

// raw_call sends header h (no payload) for method to url and returns the
// reply header (free with pswire__header__free_unpacked), or NULL.
static Pswire__Header *
raw_call(const char *url, uint8_t method, Pswire__Header *h)
{
	Pswire__Header *rh = NULL;
	(void) pt_rpc(NULL, url, method, h, NULL, 0, &rh);
	return rh;
}

// raw_register_trainer registers trainer `rank` of a job of nt one-shard
// tensors straight over the wire, so that the test, not a probe by
// libferry, supplies the link figures.
static void raw_register_job(const char *url, uint32_t rank, size_t nt,
    uint64_t len);

static void
raw_register_trainer(const char *url, uint32_t rank, size_t nt)
{
	raw_register_job(url, rank, nt, 16); // one 64-byte shard each
}

// raw_register_job is raw_register_trainer with tensors of len floats.
static void
raw_register_job(const char *url, uint32_t rank, size_t nt, uint64_t len)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       j  = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td[16], *tp[16];
	char                    names[16][24];
	for (size_t i = 0; i < nt; i++) {
		pswire__tensor_desc__init(&td[i]);
		snprintf(names[i], sizeof(names[i]), "t%zu", i);
		td[i].name = names[i];
		td[i].len  = len;
		tp[i]      = &td[i];
	}
	j.n_tensors        = nt;
	j.tensors          = tp;
	j.lr               = 0.1;
	j.codec_push       = "none";
	j.codec_pull       = "none";
	rr.role            = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank            = rank;
	rr.job             = &j;
	h.body_case        = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req     = &rr;
	Pswire__Header *rh = raw_call(url, PSWIRE__METHOD__REGISTER, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	ck_assert(rh->register_rep->probe);
	pswire__header__free_unpacked(rh, NULL);
}

// raw_report sends rank's link measurements for n servers and returns the
// reply's status.
static int
raw_report(const char *url, uint32_t rank, size_t n, double *rtt, double *bw)
{
	Pswire__Header             h = PSWIRE__HEADER__INIT;
	Pswire__ReportLinksRequest r = PSWIRE__REPORT_LINKS_REQUEST__INIT;
	r.rank                       = rank;
	r.n_rtt_s                    = n;
	r.rtt_s                      = rtt;
	r.n_bw_bps                   = n;
	r.bw_bps                     = bw;
	h.body_case                  = PSWIRE__HEADER__BODY_LINKS_REQ;
	h.links_req                  = &r;
	Pswire__Header *rh = raw_call(url, PSWIRE__METHOD__REPORT_LINKS, &h);
	ck_assert_ptr_nonnull(rh);
	int st = rh->status;
	pswire__header__free_unpacked(rh, NULL);
	return st;
}

// wait_servers waits (10 s at most) until the scheduler has seen every
// server of cl: servers register from their own thread after
// ps_server_open returns, and the scheduler refuses a link report for
// more servers than it knows, so the raw trainers below wait first.
static void
wait_servers(struct cluster *cl)
{
	char text[8192], want[32];
	snprintf(want, sizeof(want), "servers:%d/%d\r\n", cl->n_srv,
	    cl->n_srv);
	for (int i = 0; i < 200; i++) {
		ps_scheduler_stats(cl->sched, text, sizeof(text));
		if (strstr(text, want) != NULL) {
			return;
		}
		nng_msleep(50);
	}
}

// Latency placement: with server 1 behind links 10x slower than server
// 0's, the solver gives server 1 less data; the scheduler's Stats report
// F, LB and F/LB. Bad link reports are refused with a reason.
START_TEST(test_cluster_latency_placement_slow_server)
{
	struct cluster cl;
	// Tiny RTTs so that bandwidth decides (shards are 64 bytes here).
	double         rtt[2] = { 1e-6, 1e-6 }, bw[2] = { 100e6, 10e6 };
	double         nan_bw[2] = { 100e6, NAN };

	placement = PS_PLACEMENT_LATENCY;
	cluster_start(&cl, 2, 2);
	placement = PS_PLACEMENT_UNIFORM;
	wait_servers(&cl);
	const char *url = ps_scheduler_url(cl.sched);
	for (uint32_t r = 0; r < 2; r++) {
		raw_register_trainer(url, r, 8);
	}
	ck_assert_int_eq(raw_report(url, 0, 1, rtt, bw),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(raw_report(url, 0, 2, rtt, nan_bw),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(raw_report(url, 5, 2, rtt, bw),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, bw),
		    PSWIRE__STATUS__OK);
	}
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = 1;
	h.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req                = &gp;
	Pswire__Header *rh = raw_call(url, PSWIRE__METHOD__GET_PLACEMENT, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	uint64_t load[2] = { 0, 0 };
	ck_assert_uint_eq(rh->placement->n_shards, 8);
	for (size_t i = 0; i < rh->placement->n_shards; i++) {
		load[rh->placement->shards[i]->server] +=
		    rh->placement->shards[i]->len * 4;
	}
	pswire__header__free_unpacked(rh, NULL);
	ck_assert_msg(load[1] < load[0],
	    "slow server got %llu bytes, fast %llu",
	    (unsigned long long) load[1], (unsigned long long) load[0]);
	char text[8192];
	ps_scheduler_stats(cl.sched, text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "f_over_lb:"));
	ck_assert_ptr_nonnull(strstr(text, "placement:latency"));
	ck_assert_ptr_nonnull(strstr(text, "link_t1_m1:rtt_s=0.000001"));
	cluster_stop(&cl);
}
END_TEST

// fetch_epoch asks the scheduler for the map of at least min_epoch and
// returns each server's bytes in load[0..1], its shard count in *n_shards
// (when not NULL) and the map's epoch.
static uint64_t
fetch_epoch(const char *url, uint64_t min_epoch, uint64_t load[2],
    size_t *n_shards)
{
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = min_epoch;
	h.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req                = &gp;
	Pswire__Header *rh = raw_call(url, PSWIRE__METHOD__GET_PLACEMENT, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	load[0] = load[1] = 0;
	for (size_t i = 0; i < rh->placement->n_shards; i++) {
		load[rh->placement->shards[i]->server] +=
		    rh->placement->shards[i]->len * 4;
	}
	uint64_t e = rh->placement->epoch;
	if (n_shards != NULL) {
		*n_shards = rh->placement->n_shards;
	}
	pswire__header__free_unpacked(rh, NULL);
	return e;
}

// A re-probe that finds the links changed (server 0 became the slow one)
// makes the latency scheduler publish a new map that shifts data to
// server 1; a re-probe with unchanged links does not.
START_TEST(test_cluster_reprobe_replaces)
{
	struct cluster cl;
	// Tiny RTTs so that bandwidth decides (shards are 64 bytes here).
	double         rtt[2] = { 1e-6, 1e-6 }, bw[2] = { 100e6, 10e6 };
	double         flip[2] = { 10e6, 100e6 };
	uint64_t       load[2];

	placement = PS_PLACEMENT_LATENCY;
	cluster_start(&cl, 2, 2);
	placement = PS_PLACEMENT_UNIFORM;
	wait_servers(&cl);
	const char *url = ps_scheduler_url(cl.sched);
	for (uint32_t r = 0; r < 2; r++) {
		raw_register_trainer(url, r, 8);
	}
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, bw),
		    PSWIRE__STATUS__OK);
	}
	ck_assert_uint_eq(fetch_epoch(url, 1, load, NULL), 1);
	ck_assert_uint_lt(load[1], load[0]);
	ck_assert_int_eq(raw_report(url, 0, 2, rtt, bw), PSWIRE__STATUS__OK);
	ck_assert_uint_eq(fetch_epoch(url, 1, load, NULL), 1); // unchanged
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, flip),
		    PSWIRE__STATUS__OK);
	}
	ck_assert_uint_ge(fetch_epoch(url, 2, load, NULL), 2);
	ck_assert_msg(load[0] < load[1], "after the flip: %llu vs %llu",
	    (unsigned long long) load[0], (unsigned long long) load[1]);
	cluster_stop(&cl);
}
END_TEST

// link_cut_job starts a latency scheduler with 1 MiB --shard-bytes and two
// servers, registers two raw trainers of one 256 KiB tensor, has both
// report links at bw bytes/s to both servers and returns the first map's
// shard count (the cluster stays up in *cl).
static size_t
link_cut_job(struct cluster *cl, double bw)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64];
	double                   rtt[2] = { 1e-4, 1e-4 }, b[2] = { bw, bw };
	so.placement   = PS_PLACEMENT_LATENCY;
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = 2;
	so.shard_bytes = 1u << 20;
	so.probe_bytes = 64 << 10;
	PT_OK(ps_scheduler_open(&so, &cl->sched));
	cl->n_srv = 2;
	for (int i = 0; i < 2; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url           = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url = ps_scheduler_url(cl->sched);
		PT_OK(ps_server_open(&o, &cl->srv[i]));
	}
	wait_servers(cl);
	const char *su = ps_scheduler_url(cl->sched);
	for (uint32_t r = 0; r < 2; r++) {
		raw_register_job(su, r, 1, 65536);
	}
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(su, r, 2, rtt, b),
		    PSWIRE__STATUS__OK);
	}
	uint64_t load[2];
	size_t   n;
	ck_assert_uint_eq(fetch_epoch(su, 1, load, &n), 1);
	return n;
}

// Link-sized shards: a job whose trainers probed ~100 Mbit/s links (6.5
// MB/s each, two sharing the server) gets 8 KiB shards instead of one 1
// MiB shard per tensor, so a sync exchange can overlap its directions;
// one on loopback-fast links keeps --shard-bytes. A later map (the links
// changed: re-placement) keeps the first map's cut.
START_TEST(test_cluster_link_sized_shards)
{
	struct cluster cl;
	double         rtt[2] = { 1e-4, 1e-4 }, slower[2] = { 6.5e6, 0.5e6 };

	ck_assert_uint_eq(link_cut_job(&cl, 2e9), 1);
	cluster_stop(&cl);

	ck_assert_uint_eq(link_cut_job(&cl, 6.5e6), 262144 / 8192);
	const char *url = ps_scheduler_url(cl.sched);
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(raw_report(url, r, 2, rtt, slower),
		    PSWIRE__STATUS__OK);
	}
	uint64_t load[2];
	size_t   n = 0;
	ck_assert_uint_ge(fetch_epoch(url, 2, load, &n), 2);
	ck_assert_uint_eq(n, 262144 / 8192);
	cluster_stop(&cl);
}
END_TEST

// A reply whose header exceeds PSW_MAX_HEADER (a Placement of 100k
// one-float shards, about 1.8 MB packed) cannot be framed: the scheduler
// answers RESOURCE_EXHAUSTED naming the cap instead of sending bytes
// without a frame header (which the caller could not parse, or would
// drop as oversized and then time out).
START_TEST(test_cluster_oversized_reply_refused_bogus)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	char                     url[64], surl[64];

	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.shard_bytes = 4; // one float per shard
	PT_OK(ps_scheduler_open(&so, &sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(sched);
	PT_OK(ps_server_open(&o, &srv));

	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       j  = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td = PSWIRE__TENSOR_DESC__INIT;
	Pswire__TensorDesc     *tp = &td;
	td.name                    = "big";
	td.len                     = 100000;
	j.n_tensors                = 1;
	j.tensors                  = &tp;
	j.lr                       = 0.1;
	j.codec_push               = "none";
	j.codec_pull               = "none";
	rr.role                    = PSWIRE__ROLE__ROLE_TRAINER;
	rr.job                     = &j;
	h.body_case                = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req             = &rr;
	Pswire__Header *rh         = raw_call(ps_scheduler_url(sched),
	            PSWIRE__METHOD__REGISTER, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	pswire__header__free_unpacked(rh, NULL);
	// The server registers from its own thread after ps_server_open
	// returns, and a link report naming more servers than the scheduler
	// knows is refused: wait for it (10 s at most).
	char text[8192];
	for (int i = 0; i < 200; i++) {
		ps_scheduler_stats(sched, text, sizeof(text));
		if (strstr(text, "servers:1/1\r\n") != NULL) {
			break;
		}
		nng_msleep(50);
	}
	double rtt = 1e-4, bw = 1e9; // the map waits for the link report
	ck_assert_int_eq(raw_report(ps_scheduler_url(sched), 0, 1, &rtt, &bw),
	    PSWIRE__STATUS__OK);

	Pswire__Header              g  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = 1;
	g.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	g.placement_req                = &gp;
	rh = raw_call(ps_scheduler_url(sched), PSWIRE__METHOD__GET_PLACEMENT,
	    &g);
	ck_assert_msg(rh != NULL, "no parseable reply to an oversized map");
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(rh->error, "exceeds the 1048576-byte cap"),
	    "error: %s", rh->error);
	pswire__header__free_unpacked(rh, NULL);
	ps_server_close(srv);
	ps_scheduler_close(sched);
}
END_TEST

struct gone_mid_decode {
	struct cluster *cl;
	int             fired;
};

// stat_at returns the value of INFO field `key` ("pushes:") of server i.
static unsigned long long
stat_at(struct cluster *cl, int i, const char *key)
{
	char        text[2048];
	const char *p;
	ps_server_stats(cl->srv[i], text, sizeof(text));
	p = strstr(text, key);
	ck_assert_ptr_nonnull(p);
	return strtoull(p + strlen(key), NULL, 10);
}

// leave_while_decoding is server 0's stage hook: rank 1's first push,
// with its slots reserved but not yet decoded, waits for rank 0's push to
// be in, then rank 1 leaves the job and the hook returns only once the
// server holds the map that marks it gone.
static void
leave_while_decoding(void *arg, uint32_t rank)
{
	struct gone_mid_decode *g = arg;
	if (rank != 1 || g->fired++) {
		return;
	}
	for (int i = 0; i < 500 && stat_at(g->cl, 0, "pushes:") < 1; i++) {
		nng_msleep(10);
	}
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	l.role                 = PSWIRE__ROLE__ROLE_TRAINER;
	l.id                   = 1;
	h.body_case            = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req            = &l;
	Pswire__Header *rh     = raw_call(ps_scheduler_url(g->cl->sched),
	        PSWIRE__METHOD__LEAVE, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	pswire__header__free_unpacked(rh, NULL);
	for (int i = 0; i < 500 && stat_at(g->cl, 0, "map_epoch:") < 2; i++) {
		nng_msleep(10);
	}
}

// A rank that leaves while its sync push is decoding (outside the lock)
// keeps that push in the round it was admitted for: the round waits for
// the decode instead of closing without it (which used to stage the
// version-0 gradient into round 1 and free buffers under the decoder on a
// later move). Rank 0 then goes on alone.
START_TEST(test_cluster_leave_while_decoding)
{
	struct cluster         cl;
	struct trainer_arg     a[2];
	pthread_t              th[2];
	struct gone_mid_decode g = { &cl, 0 };

	cluster_start(&cl, 2, 1);
	ps_server_test_stage_hook(cl.srv[0], leave_while_decoding, &g);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].rank  = r;
		a[r].steps = r == 0 ? 2 : 1;
		pthread_create(&th[r], NULL, trainer_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	ck_assert_int_eq(g.fired, 1);
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			float x = (float) i;
			x -= (float) (0.5 / 20.0) *
			    (grad_for(0, 0, t, i) + grad_for(1, 0, t, i));
			x -= (float) (0.5 / 10.0) * grad_for(0, 1, t, i);
			ck_assert_msg(fabsf(a[0].w[t][i] - x) <=
			        1e-5f * (1 + fabsf(x)),
			    "tensor %d[%zu] = %g, expected %g", t, i,
			    a[0].w[t][i], x);
		}
	}
	ps_server_test_stage_hook(cl.srv[0], NULL, NULL);
	cluster_stop(&cl);
}
END_TEST

// The suite's test cases, one per theme, so that a failure names the area
// at once and CK_RUN_CASE=<name> runs one theme. Each test starts its own
// scheduler and servers; 60 s is ample for the slowest (two runs each).
Suite *
suite_cluster(void)
{
	Suite *s = suite_create("cluster");
	TCase *tc;

	// Aggregation and the optimizer in sync and async mode.
	tc = tcase_create("training");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_sync_aggregation);
	tcase_add_test(tc, test_cluster_nonfinite_push_refused);
	tcase_add_test(tc, test_cluster_async_single);
	suite_add_tcase(s, tc);

	// Trainers that leave the job and come back under the same rank.
	tc = tcase_create("trainer_leave_rejoin");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_trainer_leave);
	tcase_add_test(tc, test_cluster_trainer_rejoin);
	tcase_add_test(tc, test_cluster_leave_while_decoding);
	suite_add_tcase(s, tc);

	// Bad declarations and hostile frames, answered with a reason.
	tc = tcase_create("bad_input");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_declare_mismatch_bogus);
	tcase_add_test(tc, test_cluster_hostile_frames_bogus);
	tcase_add_test(tc, test_cluster_oversized_reply_refused_bogus);
	suite_add_tcase(s, tc);

	// Push and pull codecs: reference-delta lockstep, encoded pushes.
	tc = tcase_create("codecs");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_codecs_lockstep);
	tcase_add_test(tc, test_cluster_codecs_all);
	tcase_add_test(tc, test_cluster_codec_auto);
	tcase_add_test(tc, test_cluster_encoded_push);
	tcase_add_test(tc, test_cluster_codec_bogus);
	suite_add_tcase(s, tc);

	// Latency-aware placement from link reports, and re-probes.
	tc = tcase_create("placement");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_latency_placement_slow_server);
	tcase_add_test(tc, test_cluster_reprobe_replaces);
	tcase_add_test(tc, test_cluster_link_sized_shards);
	suite_add_tcase(s, tc);

	// Shards moving between servers: re-placement, leaves and joins.
	tc = tcase_create("moves");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cluster_move_without_loss);
	tcase_add_test(tc, test_cluster_server_leave_without_loss);
	tcase_add_test(tc, test_cluster_server_join_without_loss);
	tcase_add_test(tc, test_cluster_back_to_back_moves_without_loss);
	tcase_add_test(tc, test_cluster_moves_with_resends);
	tcase_add_test(tc, test_cluster_two_servers_leave_at_once);
	suite_add_tcase(s, tc);
	return s;
}
