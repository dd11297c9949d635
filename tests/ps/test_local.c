// test_local.c — the servers' side of a local-steps job (issue 28,
// docs/algorithms.md §7): every dense update's lr is the job's (outer)
// schedule times inner_lr, so a local-steps job with outer lr a and inner
// lr b gives the very bits of a plain job at lr a * b when the product is
// exact (sync rounds and async pushes); an outer Nesterov matches the
// textbook update in double; and incoherent local-steps fields are refused
// by libferry, by the scheduler from the wire (naming the field), and a
// second trainer with another local_steps is refused as a mismatch.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

#define LSTEPS 20
#define LSAMPLES 8 // per push

// One trainer thread: its options, the weights it ends with, and how it
// ended.
struct ltrainer {
	const char       *url;
	int               rank;
	struct ferry_opts o;
	float             w[NT][40];
	int               rv;
	char              err[256];
};

// lgrad is rank r's pushed sum at step k: signs and sizes vary.
static float
lgrad(int r, int k, int t, size_t i)
{
	float g = grad_for(r, k, t, i);
	return k % 3 == 0 ? -g : g;
}

static void *
ltrainer_main(void *arg)
{
	struct ltrainer         *a     = arg;
	struct ferry_opts        o     = a->o;
	struct ferry_tensor_desc d[NT] = { { "a", 40 }, { "b", 7 },
		{ "c", 1 } };
	ferry_client            *c     = NULL;
	float                    g[NT][40];
	float                   *wp[NT], *gp[NT];

	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.timeout_ms    = 20000;
	for (int t = 0; t < NT; t++) {
		wp[t] = a->w[t];
		gp[t] = g[t];
		for (size_t i = 0; i < lens[t]; i++) {
			a->w[t][i] = (float) i * 0.25f - 2.0f;
		}
	}
	if ((a->rv = ferry_client_open(&o, &c)) != 0 ||
	    (a->rv = ferry_client_declare(c, d, NT)) != 0) {
		goto out;
	}
	if (a->rank == 0 &&
	    (a->rv = ferry_client_init_weights(c,
	         (const float *const *) wp)) != 0) {
		goto out;
	}
	if ((a->rv = ferry_client_pull(c, wp)) != 0) {
		goto out;
	}
	for (int k = 0; k < LSTEPS; k++) {
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				g[t][i] = lgrad(a->rank, k, t, i);
			}
		}
		if ((a->rv = ferry_client_push_pull(c,
		         (const float *const *) gp, LSAMPLES, wp)) != 0) {
			goto out;
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

// run_job trains `trainers` ranks in options o (mode included) on a fresh
// 2-server cluster and checks they succeeded (and, in sync mode, agree
// bit for bit); a[0] holds the weights.
static void
run_job(struct ltrainer *a, int trainers, const struct ferry_opts *o)
{
	struct cluster cl;
	pthread_t      th[2];
	cluster_open(&cl, trainers, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < trainers; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url  = ps_scheduler_url(cl.sched);
		a[r].rank = r;
		a[r].o    = *o;
		pthread_create(&th[r], NULL, ltrainer_main, &a[r]);
	}
	for (int r = 0; r < trainers; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	cluster_stop(&cl);
	for (int r = 1; r < trainers; r++) {
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(a[0].w[t], a[r].w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "ranks disagree on tensor %d", t);
		}
	}
}

// same_bits wants x's and y's weights equal bit for bit.
static void
same_bits(const struct ltrainer *x, const struct ltrainer *y, const char *what)
{
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			ck_assert_msg(memcmp(&x->w[t][i], &y->w[t][i], 4) == 0,
			    "%s: tensor %d[%zu]: %.9g vs %.9g", what, t, i,
			    (double) x->w[t][i], (double) y->w[t][i]);
		}
	}
}

// A local-steps job's update runs at the outer lr times inner_lr: outer
// SGD 1.0 x inner 0.1 and outer 0.5 x inner 0.25 (exact products) give the
// bits of plain jobs at lr 0.1 and 0.125, in sync rounds of two trainers
// and in async pushes of one (push.c's fp32 path).
START_TEST(test_local_lr_outer_times_inner)
{
	static const double outer[] = { 1.0, 0.5 }, inner[] = { 0.1, 0.25 };
	static const int    mode[] = { FERRY_MODE_SYNC, FERRY_MODE_ASYNC };
	struct ltrainer     plain[2], local[2];
	for (int m = 0; m < 2; m++) {
		int n = mode[m] == FERRY_MODE_SYNC ? 2 : 1;
		for (int k = 0; k < 2; k++) {
			struct ferry_opts o = FERRY_OPTS_INIT;
			o.mode              = mode[m];
			o.lr                = outer[k] * inner[k];
			run_job(plain, n, &o);
			o.lr          = outer[k];
			o.local_steps = 4;
			o.inner_lr    = inner[k];
			run_job(local, n, &o);
			same_bits(&plain[0], &local[0],
			    mode[m] == FERRY_MODE_SYNC ? "sync" : "async");
		}
	}
}
END_TEST

// An outer Nesterov (mu 0.9, lr 0.7) over inner lr 0.05 is the textbook
// update at lr 0.7 * 0.05 on the averaged pseudo-gradients, in double,
// within 1e-6 relative.
START_TEST(test_local_outer_nesterov_reference)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	struct ltrainer   a[2];
	double            err2 = 0, ref2 = 0, lr = 0.7 * 0.05, mu = 0.9;
	o.optimizer   = "nesterov";
	o.momentum    = mu;
	o.lr          = 0.7;
	o.local_steps = 8;
	o.inner_lr    = 0.05;
	run_job(a, 2, &o);
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			double x = (float) i * 0.25f - 2.0f, v = 0;
			for (int k = 0; k < LSTEPS; k++) {
				double g = ((double) lgrad(0, k, t, i) +
				               lgrad(1, k, t, i)) /
				    (2.0 * LSAMPLES);
				v = mu * v + g;
				x -= lr * (g + mu * v);
			}
			err2 += (a[0].w[t][i] - x) * (a[0].w[t][i] - x);
			ref2 += x * x;
		}
	}
	ck_assert_msg(sqrt(err2) <= 1e-6 * sqrt(ref2), "relative error %.3g",
	    sqrt(err2 / ref2));
}
END_TEST

// Incoherent local-steps options are refused by ferry_opts_check with a
// reason naming the field.
START_TEST(test_local_opts_bogus)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	char              why[256];
	static const struct {
		uint32_t    h;
		double      inner;
		uint32_t    f;
		int         mode;
		const char *says;
	} bad[] = {
		{ 4, 0.0, 0, FERRY_MODE_SYNC, "inner_lr" },
		{ 0, 0.1, 0, FERRY_MODE_SYNC, "local_steps" },
		{ 4, 1e7, 0, FERRY_MODE_SYNC, "inner_lr" },
		{ 0, 0.0, 2, FERRY_MODE_SYNC, "local_steps" },
		{ 4, 0.1, 2, FERRY_MODE_ASYNC, "SYNC" },
		{ 4, 0.1, 2, FERRY_MODE_SSP, "SYNC" },
		{ 4, 0.1, 3, FERRY_MODE_SYNC, "divide" },
		{ 8192, 0.1, 8192, FERRY_MODE_SYNC, "over" },
	};
	o.scheduler_url = "tcp://127.0.0.1:1";
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		o.local_steps = bad[k].h;
		o.inner_lr    = bad[k].inner;
		o.fragments   = bad[k].f;
		o.mode        = bad[k].mode;
		ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)),
		    FERRY_EINVAL);
		ck_assert_msg(strstr(why, bad[k].says) != NULL, "case %zu: %s",
		    k, why);
	}
	o.local_steps = 8;
	o.inner_lr    = 0.1;
	o.fragments   = 4;
	o.mode        = FERRY_MODE_SYNC;
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_OK);
	o.fragments = 1;
	o.mode      = FERRY_MODE_SSP;
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_OK);
}
END_TEST

// A JobConfig from the wire (a trainer without libferry) with incoherent
// local-steps fields is refused by the scheduler with INVALID_ARGUMENT
// naming the field.
START_TEST(test_local_wire_bogus)
{
	struct cluster cl;
	static const struct {
		uint32_t    h;
		double      inner;
		uint32_t    f;
		int         mode;
		const char *says;
	} bad[] = {
		{ 4, 0.1, 2, PSWIRE__MODE__MODE_ASYNC,
		    "fragments 2 needs sync" },
		{ 4, 0.1, 2, PSWIRE__MODE__MODE_SSP,
		    "fragments 2 needs sync" },
		{ 4, 0.0, 0, PSWIRE__MODE__MODE_SYNC, "inner_lr" },
		{ 0, 0.5, 0, PSWIRE__MODE__MODE_SYNC, "inner_lr 0.5 needs" },
		{ 0, 0.0, 4, PSWIRE__MODE__MODE_SYNC,
		    "fragments 4 needs local" },
		{ 6, 0.1, 4, PSWIRE__MODE__MODE_SYNC, "divide local_steps 6" },
	};
	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		Pswire__Header          h  = PSWIRE__HEADER__INIT;
		Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
		Pswire__JobConfig       jc = PSWIRE__JOB_CONFIG__INIT;
		Pswire__TensorDesc      td, *tp = &td;
		pswire__tensor_desc__init(&td);
		td.name        = "w";
		td.len         = 8;
		jc.n_tensors   = 1;
		jc.tensors     = &tp;
		jc.lr          = 0.1;
		jc.codec_push  = "none";
		jc.codec_pull  = "none";
		jc.mode        = (Pswire__Mode) bad[k].mode;
		jc.staleness   = bad[k].mode == PSWIRE__MODE__MODE_SSP ? 2 : 0;
		jc.local_steps = bad[k].h;
		jc.inner_lr    = bad[k].inner;
		jc.fragments   = bad[k].f;
		rr.role        = PSWIRE__ROLE__ROLE_TRAINER;
		rr.job         = &jc;
		h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
		h.register_req = &rr;
		Pswire__Header *rh = pt_call(ps_scheduler_url(cl.sched),
		    PSWIRE__METHOD__REGISTER, &h);
		ck_assert_ptr_nonnull(rh);
		ck_assert_msg(rh->status == PSWIRE__STATUS__INVALID_ARGUMENT &&
		        strstr(rh->error, bad[k].says) != NULL,
		    "case %zu: %s: %s", k, psw_status_name(rh->status),
		    rh->error);
		pswire__header__free_unpacked(rh, NULL);
	}
	cluster_stop(&cl);
}
END_TEST

// A second trainer declaring another local_steps is refused (the job's is
// the first trainer's), naming the field.
START_TEST(test_local_declare_mismatch_bogus)
{
	struct cluster           cl;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", 40 }, { "b", 7 },
		{ "c", 1 } };
	ferry_client            *c0, *c1;
	int                      rv;

	cluster_open(&cl, 2, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.timeout_ms    = 300; // c0's declare waits for members: times out
	o.local_steps   = 8;
	o.inner_lr      = 0.1;
	PT_OK(ferry_client_open(&o, &c0) == FERRY_OK ? FB_OK : FB_EINVAL);
	rv = ferry_client_declare(c0, d, NT);
	ck_assert_msg(rv == FERRY_ETIMEDOUT || rv == FERRY_EREMOTE,
	    "declare: %s: %s", ferry_strerror(rv),
	    ferry_client_last_error(c0));
	o.rank        = 1;
	o.local_steps = 16;
	PT_OK(ferry_client_open(&o, &c1) == FERRY_OK ? FB_OK : FB_EINVAL);
	ck_assert_int_eq(ferry_client_declare(c1, d, NT), FERRY_EMISMATCH);
	ck_assert_msg(strstr(ferry_client_last_error(c1), "local_steps"), "%s",
	    ferry_client_last_error(c1));
	ferry_client_close(c0);
	ferry_client_close(c1);
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_local(void)
{
	Suite *s  = suite_create("local");
	TCase *tc = tcase_create("lr");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_local_lr_outer_times_inner);
	tcase_add_test(tc, test_local_outer_nesterov_reference);
	suite_add_tcase(s, tc);
	tc = tcase_create("bogus");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_local_opts_bogus);
	tcase_add_test(tc, test_local_wire_bogus);
	tcase_add_test(tc, test_local_declare_mismatch_bogus);
	suite_add_tcase(s, tc);
	return s;
}
