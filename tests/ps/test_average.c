// test_average.c — tensors of kind FERRY_TENSOR_AVERAGE (module buffers
// such as BatchNorm's running statistics): two trainers with different
// n_samples push value * n_samples for an averaged tensor in a sync job
// under Adam with clipping, and every trainer pulls exactly the
// samples-weighted mean each round while the job's other tensors follow
// the textbook Adam update (with and without --replicas); an async push
// sets the values to its own mean; a trainer declaring another kind is
// refused (FERRY_EMISMATCH), and an unknown kind is refused by libferry
// and, from the network, by the scheduler.
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

#define STEPS 12
#define AVG 1 // the averaged tensor's id in the table

// The table: "bn" is averaged, "a" and "c" are trained.
static const size_t alen[NT] = { 40, 40, 1 };

static void
table(struct ferry_tensor_spec d[NT])
{
	static const char *const names[NT] = { "a", "bn", "c" };
	for (int t = 0; t < NT; t++) {
		d[t]      = (struct ferry_tensor_spec) { 0 };
		d[t].name = names[t];
		d[t].len  = alen[t];
		d[t].kind = t == AVG ? FERRY_TENSOR_AVERAGE
		                     : FERRY_TENSOR_WEIGHTS;
	}
}

// samples_of is rank r's n_samples: the ranks differ, so that the mean is
// weighted.
static uint32_t
samples_of(int r)
{
	return r == 0 ? 3 : 5;
}

// stat_of is rank r's own value of element i of the averaged tensor at
// step k (multiples of 1/2: every sum and mean below is exact).
static float
stat_of(int r, int k, size_t i)
{
	return (float) (r * 10 + k) + (float) i * 0.5f - (float) (k % 3);
}

// expect_mean is what every trainer must pull for element i after the
// sync round of step k: the servers' float sum of both pushes over the
// round's samples.
static float
expect_mean(int k, size_t i)
{
	float sum = stat_of(0, k, i) * (float) samples_of(0) +
	    stat_of(1, k, i) * (float) samples_of(1);
	return (float) ((double) sum / (samples_of(0) + samples_of(1)));
}

// One trainer thread's set-up and results.
struct atrainer {
	const char       *url;
	int               rank, mode, steps;
	struct ferry_opts o;
	float             w[NT][40];
	float             sent[STEPS][2][40]; // the trained tensors' pushes
	int               rv;
	char              err[256];
};

// clip_twin scales the trained tensors' gradients g over n samples as
// libferry's clip_norm does (the averaged tensor not counted), into sent.
static void
clip_twin(double clip, float g[NT][40], uint32_t n)
{
	double ss = 0;
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; t != AVG && i < alen[t]; i++) {
			ss += (double) g[t][i] * g[t][i];
		}
	}
	double norm = sqrt(ss) / n;
	if (!(norm > clip)) {
		return;
	}
	float f = (float) (clip / norm);
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; t != AVG && i < alen[t]; i++) {
			g[t][i] *= f;
		}
	}
}

static void *
atrainer_main(void *arg)
{
	struct atrainer         *a = arg;
	struct ferry_opts        o = a->o;
	struct ferry_tensor_spec d[NT];
	ferry_client            *c = NULL;
	float                    g[NT][40];
	float                   *wp[NT], *gp[NT];
	uint32_t                 n = samples_of(a->rank);

	table(d);
	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.mode          = a->mode;
	o.timeout_ms    = 20000;
	for (int t = 0; t < NT; t++) {
		wp[t] = a->w[t];
		gp[t] = g[t];
		for (size_t i = 0; i < alen[t]; i++) {
			a->w[t][i] = (float) i * 0.25f - 2.0f;
		}
	}
	if ((a->rv = ferry_client_open(&o, &c)) != 0 ||
	    (a->rv = ferry_client_declare_specs(c, d, NT)) != 0 ||
	    (a->rank == 0 &&
	        (a->rv = ferry_client_init_weights(c,
	             (const float *const *) wp)) != 0) ||
	    (a->rv = ferry_client_pull(c, wp)) != 0) {
		goto out;
	}
	for (int k = 0; k < a->steps; k++) {
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < alen[t]; i++) {
				// grad_for's values, large enough that
				// clip_norm clips the trained tensors.
				g[t][i] = t == AVG
				    ? stat_of(a->rank, k, i) * (float) n
				    : grad_for(a->rank, k, t, i) * 4.0f;
			}
		}
		if (a->o.clip_norm > 0) {
			clip_twin(a->o.clip_norm, g, n);
		}
		memcpy(a->sent[k][0], g[0], sizeof(g[0]));
		a->sent[k][1][0] = g[2][0];
		if ((a->rv = ferry_client_push_pull(c,
		         (const float *const *) gp, n, wp)) != 0) {
			goto out;
		}
		for (size_t i = 0; i < alen[AVG]; i++) {
			float want = a->mode == FERRY_MODE_SYNC
			    ? expect_mean(k, i)
			    : stat_of(a->rank, k, i);
			if (memcmp(&a->w[AVG][i], &want, 4) != 0) {
				snprintf(a->err, sizeof(a->err),
				    "step %d: bn[%zu] is %.9g, the mean is "
				    "%.9g",
				    k, i, (double) a->w[AVG][i],
				    (double) want);
				a->rv = -1;
				goto out;
			}
		}
	}
out:
	if (c != NULL && a->rv > 0) {
		snprintf(a->err, sizeof(a->err), "%s",
		    ferry_client_last_error(c));
	}
	ferry_client_close(c);
	return NULL;
}

// adam_ref replays Adam (PyTorch's form, in double) on element x0 of a
// trained tensor with the rounds' gradients: the two ranks' (clipped)
// pushes summed in float over the round's samples.
static double
adam_ref(const struct ferry_opts *o, const struct atrainer a[2], int slot,
    size_t i, double x0)
{
	double x = x0, m = 0, v = 0;
	for (int k = 0; k < STEPS; k++) {
		float  sum = a[0].sent[k][slot][i] + a[1].sent[k][slot][i];
		double g   = (double) sum / (samples_of(0) + samples_of(1));
		m          = o->beta1 * m + (1 - o->beta1) * g;
		v          = o->beta2 * v + (1 - o->beta2) * g * g;
		double c1  = 1 - pow(o->beta1, k + 1);
		double c2  = sqrt(1 - pow(o->beta2, k + 1));
		x -= (o->lr / c1) * m / (sqrt(v) / c2 + o->eps);
	}
	return x;
}

// run_sync trains both ranks in a sync job under Adam with clip_norm on 2
// servers (with `replicas` copies of each shard) and checks each rank
// pulled the exact mean of "bn" every round (in the threads) and the
// trained tensors against adam_ref.
static void
run_sync(uint32_t replicas)
{
	struct cluster    cl;
	struct atrainer   a[2];
	pthread_t         th[2];
	struct ferry_opts o = FERRY_OPTS_INIT;
	o.optimizer         = "adam";
	o.lr                = 0.05;
	o.clip_norm         = 1.0;
	cluster_open_replicas(&cl, 2, 2, PS_PLACEMENT_UNIFORM, replicas, 0);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].rank  = r;
		a[r].mode  = FERRY_MODE_SYNC;
		a[r].steps = STEPS;
		a[r].o     = o;
		pthread_create(&th[r], NULL, atrainer_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d (replicas %u): %s: %s", r,
		    replicas,
		    a[r].rv > 0 ? ferry_strerror(a[r].rv) : "wrong mean",
		    a[r].err);
	}
	cluster_stop(&cl);
	for (int t = 0; t < NT; t += 2) {
		for (size_t i = 0; i < alen[t]; i++) {
			double x0  = (double) i * 0.25 - 2.0;
			double ref = adam_ref(&o, a, t == 0 ? 0 : 1, i, x0);
			double got = a[0].w[t][i];
			ck_assert_msg(fabs(got - ref) <=
			        1e-5 * fabs(ref) + 1e-6,
			    "tensor %d[%zu]: %.9g, Adam gives %.9g", t, i, got,
			    ref);
			ck_assert(
			    memcmp(&a[0].w[t][i], &a[1].w[t][i], 4) == 0);
		}
	}
}

// Sync: each round sets "bn" to the samples-weighted mean of both ranks'
// values, while "a" and "c" get Adam (clipped) at the job's lr.
START_TEST(test_average_sync_mean)
{
	run_sync(1);
}
END_TEST

// The same through replicated shards (the backups' apply).
START_TEST(test_average_sync_replicas)
{
	run_sync(2);
}
END_TEST

// Async: each push alone sets the values to its own mean (one rank, under
// momentum, whose velocity would carry an earlier step's values over).
START_TEST(test_average_async_each_push)
{
	struct cluster  cl;
	struct atrainer a;
	memset(&a, 0, sizeof(a));
	a.o           = (struct ferry_opts) FERRY_OPTS_INIT;
	a.o.optimizer = "momentum";
	cluster_open(&cl, 1, 2, PS_PLACEMENT_UNIFORM);
	a.url   = ps_scheduler_url(cl.sched);
	a.mode  = FERRY_MODE_ASYNC;
	a.steps = 6;
	atrainer_main(&a);
	cluster_stop(&cl);
	ck_assert_msg(a.rv == 0, "%s: %s",
	    a.rv > 0 ? ferry_strerror(a.rv) : "wrong mean", a.err);
}
END_TEST

// The kind is part of the job's table: a second trainer declaring "bn"
// as weights is refused like one with another length. It declares with
// the 0.1 call, ferry_client_declare, whose tensors are all weights.
START_TEST(test_average_kind_mismatch)
{
	struct cluster           cl;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_spec d[NT];
	struct ferry_tensor_desc w[NT];
	ferry_client            *c0, *c1;
	int                      rv;

	table(d);
	for (int t = 0; t < NT; t++) {
		w[t].name = d[t].name;
		w[t].len  = d[t].len;
	}
	cluster_open(&cl, 2, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.timeout_ms    = 300; // c0's declare waits for members: times out
	ck_assert_int_eq(ferry_client_open(&o, &c0), FERRY_OK);
	rv = ferry_client_declare_specs(c0, d, NT);
	ck_assert_msg(rv == FERRY_ETIMEDOUT || rv == FERRY_EREMOTE,
	    "declare: %s: %s", ferry_strerror(rv),
	    ferry_client_last_error(c0));
	o.rank = 1;
	ck_assert_int_eq(ferry_client_open(&o, &c1), FERRY_OK);
	ck_assert_int_eq(ferry_client_declare(c1, w, NT), FERRY_EMISMATCH);
	ck_assert_msg(strstr(ferry_client_last_error(c1), "tensors[1].kind"),
	    "%s", ferry_client_last_error(c1));
	ferry_client_close(c0);
	ferry_client_close(c1);
	cluster_stop(&cl);
}
END_TEST

// An unknown kind: libferry refuses it before any call, naming the
// tensor; a raw Register carrying one gets INVALID_ARGUMENT naming it.
START_TEST(test_average_bad_kind)
{
	struct cluster           cl;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_spec d[NT];
	ferry_client            *c;

	table(d);
	d[2].kind = 7;
	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_declare_specs(c, d, NT), FERRY_EINVAL);
	ck_assert_msg(strstr(ferry_client_last_error(c), "'c'") &&
	        strstr(ferry_client_last_error(c), "kind 7"),
	    "%s", ferry_client_last_error(c));
	ferry_client_close(c);

	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       jc = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td[2], *tp[2];
	for (int i = 0; i < 2; i++) {
		pswire__tensor_desc__init(&td[i]);
		td[i].name = i == 0 ? "w" : "running_var";
		td[i].len  = 8;
		tp[i]      = &td[i];
	}
	td[1].kind         = (Pswire__TensorKind) 7;
	jc.n_tensors       = 2;
	jc.tensors         = tp;
	jc.lr              = 0.1;
	jc.codec_push      = "none";
	jc.codec_pull      = "none";
	rr.role            = PSWIRE__ROLE__ROLE_TRAINER;
	rr.job             = &jc;
	h.body_case        = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req     = &rr;
	Pswire__Header *rh = pt_call(ps_scheduler_url(cl.sched),
	    PSWIRE__METHOD__REGISTER, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_msg(rh->status == PSWIRE__STATUS__INVALID_ARGUMENT &&
	        strstr(rh->error, "'running_var'") &&
	        strstr(rh->error, "kind 7"),
	    "%s: %s", psw_status_name(rh->status), rh->error);
	pswire__header__free_unpacked(rh, NULL);
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_average(void)
{
	Suite *s  = suite_create("average");
	TCase *tc = tcase_create("average");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_average_sync_mean);
	tcase_add_test(tc, test_average_sync_replicas);
	tcase_add_test(tc, test_average_async_each_push);
	tcase_add_test(tc, test_average_kind_mismatch);
	tcase_add_test(tc, test_average_bad_kind);
	suite_add_tcase(s, tc);
	return s;
}
