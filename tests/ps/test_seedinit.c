// test_seedinit.c — seeded initial weights (TensorDesc.init): the servers
// fill a seeded tensor's version 0 themselves and libferry fills its own
// copy, so no trainer offers it (ferry_client_init_weights sends nothing
// when every tensor is seeded) and the first pull moves only empty deltas
// (reply headers), while the weights equal fb_init_fill's bit for bit,
// over 1 and 2 servers; without a pull codec the full pull of version 0
// shows the servers' bits themselves; an offered tensor beside seeded ones
// still travels; and bad init kinds or scales are refused by libferry and,
// from the network, by the scheduler, naming the tensor.
#include <string.h>

#include "cluster.h"
#include "fb/init.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

#define SEED 0x5eed
#define SCALE 0.5f
#define SMAX 4000

// The tensors' lengths: large enough (19,200 fp32 bytes) that a pull of
// reply headers alone, however many shards a probed cut makes, stays far
// below the model's bytes.
static const size_t slens[NT] = { SMAX, 700, 100 };

// table: tensor 0 uniform, 1 zeros, 2 offered (offer != 0) or uniform.
static void
table(struct ferry_tensor_spec d[NT], int offer)
{
	static const char *const names[NT] = { "w", "b", "o" };
	for (int t = 0; t < NT; t++) {
		d[t]      = (struct ferry_tensor_spec) { 0 };
		d[t].name = names[t];
		d[t].len  = slens[t];
		d[t].init = t == 1 ? FERRY_INIT_ZEROS : FERRY_INIT_UNIFORM;
		d[t].init_scale = t == 1 ? 0 : SCALE;
	}
	if (offer) {
		d[2].init       = FERRY_INIT_OFFER;
		d[2].init_scale = 0;
	}
}

// run_job declares the table on a fresh cluster of `servers` servers with
// pull codec `pull`, has the one rank offer (init_weights, 3.0 for the
// offered tensor) and pull version 0, and checks the weights against
// fb_init_fill bit for bit. Returns the first pull's bytes and, in
// *init_requests, the requests init_weights sent.
static uint64_t
run_job(int servers, const char *pull, int offer, uint64_t *init_requests)
{
	struct cluster           cl;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_spec d[NT];
	struct ferry_stats       st0, st1, st2;
	ferry_client            *c;
	static float             w[NT][SMAX], want[SMAX];
	float                   *wp[NT];

	table(d, offer);
	cluster_open(&cl, 1, servers, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.codec_pull    = pull;
	o.seed          = SEED;
	o.timeout_ms    = 20000;
	for (int t = 0; t < NT; t++) {
		wp[t] = w[t];
		for (size_t i = 0; i < slens[t]; i++) {
			w[t][i] = 3.0f; // what is offered (the offered tensor)
		}
	}
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_declare_specs(c, d, NT), FERRY_OK);
	ferry_client_stats(c, &st0);
	ck_assert_int_eq(
	    ferry_client_init_weights(c, (const float *const *) wp), FERRY_OK);
	ferry_client_stats(c, &st1);
	*init_requests = st1.requests - st0.requests;
	for (int t = 0; t < NT; t++) {
		memset(w[t], 0xff, sizeof(w[t])); // NaNs: a pull must fill it
	}
	ck_assert_msg(ferry_client_pull(c, wp) == FERRY_OK, "pull: %s",
	    ferry_client_last_error(c));
	ferry_client_stats(c, &st2);
	ck_assert_uint_eq(st2.version, 0);
	for (int t = 0; t < NT; t++) {
		if (offer && t == 2) {
			for (size_t i = 0; i < slens[t]; i++) {
				ck_assert(w[t][i] == 3.0f);
			}
			continue;
		}
		fb_init_fill(d[t].init, d[t].init_scale, SEED, (uint32_t) t, 0,
		    want, slens[t]);
		ck_assert_msg(memcmp(w[t], want, slens[t] * 4) == 0,
		    "tensor %d differs from the rule (%d servers, pull %s)", t,
		    servers, pull);
	}
	ferry_client_close(c);
	cluster_stop(&cl);
	return st2.bytes_pulled - st1.bytes_pulled;
}

// Every tensor seeded, a pull codec: no offer is sent and the first pull
// carries headers only (the full pull less at least 3/4 of the model's bytes),
// the weights the rule's, over 1 and 2 servers; without a pull codec the
// servers' own copy comes in full and is the rule's too.
START_TEST(test_seedinit_no_bytes)
{
	uint64_t reqs, seeded, full;
	size_t   model = (slens[0] + slens[1] + slens[2]) * 4;
	for (int servers = 1; servers <= 2; servers++) {
		full = run_job(servers, "none", 0, &reqs);
		ck_assert_uint_eq(reqs, 0);
		ck_assert_uint_ge(full, model);
		seeded = run_job(servers, "q8", 0, &reqs);
		ck_assert_uint_eq(reqs, 0);
		// Only reply headers, never a value: against the full pull
		// (about the same headers, plus the model's bytes) at least
		// 3/4 of the model is missing, while q8 codes of every value
		// would bring back a quarter of it on top of the headers.
		// (The test cluster cuts small shards: headers are not
		// negligible, and a delta's are a few bytes larger.)
		ck_assert_msg(seeded + model * 3 / 4 <= full,
		    "%d servers: first pull %llu bytes, the full pull %llu, "
		    "model %zu",
		    servers, (unsigned long long) seeded,
		    (unsigned long long) full, model);
	}
}
END_TEST

// An offered tensor beside seeded ones: its offer still travels and
// becomes version 0 (a request is sent), the seeded ones come from the
// rule.
START_TEST(test_seedinit_mixed)
{
	uint64_t reqs;
	run_job(2, "q8", 1, &reqs);
	ck_assert_uint_gt(reqs, 0);
	run_job(1, "none", 1, &reqs);
	ck_assert_uint_gt(reqs, 0);
}
END_TEST

// register_bad sends a raw Register whose tensor "emb" has init kind
// `kind` and scale `scale`; returns the reply (free it).
static Pswire__Header *
register_bad(const char *url, int kind, float scale)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       jc = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td[2], *tp[2];
	for (int i = 0; i < 2; i++) {
		pswire__tensor_desc__init(&td[i]);
		td[i].name = i == 0 ? "w" : "emb";
		td[i].len  = 8;
		tp[i]      = &td[i];
	}
	td[1].init       = (Pswire__TensorInit) kind;
	td[1].init_scale = scale;
	jc.n_tensors     = 2;
	jc.tensors       = tp;
	jc.lr            = 0.1;
	jc.codec_push    = "none";
	jc.codec_pull    = "none";
	rr.role          = PSWIRE__ROLE__ROLE_TRAINER;
	rr.job           = &jc;
	h.body_case      = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req   = &rr;
	return pt_call(url, PSWIRE__METHOD__REGISTER, &h);
}

// Bad init rules: libferry refuses them before any call; from the wire,
// the scheduler answers INVALID_ARGUMENT naming the tensor.
START_TEST(test_seedinit_bad)
{
	struct cluster           cl;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_spec d[NT];
	ferry_client            *c;
	static const struct {
		int         kind;
		float       scale;
		const char *says;
	} bad[] = {
		{ 99, 0, "kind 99" },
		{ FB_INIT_UNIFORM, -1, "scale" },
		{ FB_INIT_UNIFORM, 0, "scale > 0" },
	};

	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		table(d, 0);
		d[2].init       = (uint32_t) bad[k].kind;
		d[2].init_scale = bad[k].scale;
		ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
		ck_assert_int_eq(ferry_client_declare_specs(c, d, NT),
		    FERRY_EINVAL);
		ck_assert_msg(strstr(ferry_client_last_error(c), "'o'") &&
		        strstr(ferry_client_last_error(c), bad[k].says),
		    "%s", ferry_client_last_error(c));
		ferry_client_close(c);

		Pswire__Header *rh = register_bad(ps_scheduler_url(cl.sched),
		    bad[k].kind, bad[k].scale);
		ck_assert_ptr_nonnull(rh);
		ck_assert_msg(rh->status == PSWIRE__STATUS__INVALID_ARGUMENT &&
		        strstr(rh->error, "'emb'") &&
		        strstr(rh->error, bad[k].says),
		    "%s: %s", psw_status_name(rh->status), rh->error);
		pswire__header__free_unpacked(rh, NULL);
	}
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_seedinit(void)
{
	Suite *s  = suite_create("seedinit");
	TCase *tc = tcase_create("seedinit");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_seedinit_no_bytes);
	tcase_add_test(tc, test_seedinit_mixed);
	tcase_add_test(tc, test_seedinit_bad);
	suite_add_tcase(s, tc);
	return s;
}
