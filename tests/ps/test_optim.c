// test_optim.c — the server-side optimizers against references computed
// here: two trainers (threads over libferry) train a sync job on a
// scheduler and two servers in this process; the test replays the same
// averaged gradients through the textbook update in double precision and
// wants the weights within 1e-6 relative after 50 steps. Also: the lr
// schedule as the servers apply it, async pushes, gradient clipping,
// optimizer state surviving shard moves bit for bit, and mismatched or
// bogus optimizer options refused.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "fb/optim.h"
#include "ferry/ferry.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

#define STEPS 50
#define SAMPLES 10 // per push

// One trainer thread's set-up and results.
struct otrainer {
	const char       *url;
	int               rank, steps, mode;
	struct ferry_opts o; // optimizer fields set by the test
	// Called by rank 0 before steps hook_at, 2 hook_at, ... (if set).
	void (*hook)(void *arg, int step);
	void  *hook_arg;
	int    hook_at;
	float  w[NT][40];
	double lr_end; // ferry_client_lr at the end
	// > 0: scale each gradient here as clip_norm would (the test's
	// twin of libferry's clipping), with o.clip_norm left 0.
	double manual_clip;
	int    rv;
	char   err[256];
};

// ograd is rank r's gradient sum at step k: grad_for, scaled so that
// some steps are large (clipping) and signs vary (Adam's moments).
static float
ograd(int r, int k, int t, size_t i)
{
	float g = grad_for(r, k, t, i);
	return (k % 3 == 0 ? -g : g) * (k % 7 == 0 ? 8.0f : 1.0f);
}

static void *
otrainer_main(void *arg)
{
	struct otrainer         *a     = arg;
	struct ferry_opts        o     = a->o;
	struct ferry_tensor_desc d[NT] = { { "a", 40, FERRY_TENSOR_WEIGHTS },
		{ "b", 7, FERRY_TENSOR_WEIGHTS },
		{ "c", 1, FERRY_TENSOR_WEIGHTS } };
	ferry_client            *c     = NULL;
	float                    g[NT][40];
	float                   *wp[NT], *gp[NT];

	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.mode          = a->mode;
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
	for (int k = 0; k < a->steps; k++) {
		if (a->hook != NULL && k > 0 && k % a->hook_at == 0) {
			a->hook(a->hook_arg, k);
		}
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				g[t][i] = ograd(a->rank, k, t, i);
			}
		}
		if (a->manual_clip > 0) {
			double ss = 0;
			for (int t = 0; t < NT; t++) {
				for (size_t i = 0; i < lens[t]; i++) {
					ss += (double) g[t][i] * g[t][i];
				}
			}
			double norm = sqrt(ss) / SAMPLES;
			float  f    = (float) (a->manual_clip / norm);
			for (int t = 0; norm > a->manual_clip && t < NT; t++) {
				for (size_t i = 0; i < lens[t]; i++) {
					g[t][i] *= f;
				}
			}
		}
		if ((a->rv = ferry_client_push_pull(c,
		         (const float *const *) gp, SAMPLES, wp)) != 0) {
			goto out;
		}
	}
	a->lr_end = ferry_client_lr(c);
out:
	if (c != NULL) {
		snprintf(a->err, sizeof(a->err), "%s",
		    ferry_client_last_error(c));
	}
	ferry_client_close(c);
	return NULL;
}

// The manual_clip every run_two trainer gets (0: none).
static double two_manual_clip;

// run_two trains ranks 0 and 1 (sync) for `steps` steps with options o on
// a fresh 2-server cluster and checks both succeeded and agree bit for bit.
static void
run_two(struct otrainer a[2], const struct ferry_opts *o, int steps,
    void (*hook)(void *, int), int hook_at)
{
	struct cluster cl;
	pthread_t      th[2];
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url         = ps_scheduler_url(cl.sched);
		a[r].rank        = r;
		a[r].steps       = steps;
		a[r].mode        = FERRY_MODE_SYNC;
		a[r].o           = *o;
		a[r].manual_clip = two_manual_clip;
		if (r == 0 && hook != NULL) {
			a[r].hook     = hook;
			a[r].hook_arg = &cl;
			a[r].hook_at  = hook_at;
		}
		pthread_create(&th[r], NULL, otrainer_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d (%s): %s: %s", r,
		    o->optimizer, ferry_strerror(a[r].rv), a[r].err);
	}
	cluster_stop(&cl);
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(
		    memcmp(a[0].w[t], a[1].w[t], lens[t] * sizeof(float)) == 0,
		    "ranks disagree on tensor %d", t);
	}
}

// The reference: the textbook rules (PyTorch's forms) in double, on the
// averaged gradient of both ranks, one element at a time.
struct ref {
	double x, m, v;
};

// ref_lr is the schedule written out independently of fb_lr_at: linear
// warm-up, then constant / step / cosine.
static double
ref_lr(const struct ferry_opts *o, int t)
{
	double   base = o->lr;
	uint64_t w    = o->lr_warmup;
	if ((uint64_t) t < w) {
		return base * (t + 1) / (double) w;
	}
	double u = (double) ((uint64_t) t - w);
	if (o->lr_schedule != NULL && strcmp(o->lr_schedule, "step") == 0) {
		return base * pow(o->lr_gamma, floor(u / o->lr_step_every));
	}
	if (o->lr_schedule != NULL && strcmp(o->lr_schedule, "cosine") == 0) {
		double span = (double) (o->lr_total_steps - w);
		double f    = u >= span ? 1.0 : u / span;
		return o->lr_min +
		    (base - o->lr_min) * 0.5 * (1 + cos(3.14159265358979 * f));
	}
	return base;
}

// ref_step applies one update with averaged gradient g at step t
// (t = 0 for the first update).
static void
ref_step(const struct ferry_opts *o, struct ref *e, double g, int t)
{
	const char *name = o->optimizer ? o->optimizer : "sgd";
	double      lr = ref_lr(o, t), wd = o->weight_decay;
	if (strcmp(name, "adamw") == 0) {
		e->x -= lr * wd * e->x;
	} else {
		g += wd * e->x;
	}
	if (strcmp(name, "sgd") == 0) {
		e->x -= lr * g;
	} else if (strcmp(name, "momentum") == 0) {
		e->m = o->momentum * e->m + g;
		e->x -= lr * e->m;
	} else if (strcmp(name, "nesterov") == 0) {
		e->m = o->momentum * e->m + g;
		e->x -= lr * (g + o->momentum * e->m);
	} else if (strcmp(name, "adagrad") == 0) {
		e->v += g * g;
		e->x -= lr * g / (sqrt(e->v) + o->eps);
	} else { // adam, adamw
		e->m      = o->beta1 * e->m + (1 - o->beta1) * g;
		e->v      = o->beta2 * e->v + (1 - o->beta2) * g * g;
		double mh = e->m / (1 - pow(o->beta1, t + 1));
		double vh = e->v / (1 - pow(o->beta2, t + 1));
		e->x -= lr * mh / (sqrt(vh) + o->eps);
	}
}

// check_reference replays `steps` averaged gradients through ref_step and
// wants ||w - ref|| <= 1e-6 ||ref|| over every weight.
static void
check_reference(const struct otrainer *a, const struct ferry_opts *o,
    int steps)
{
	double err2 = 0, ref2 = 0, worst = 0;
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			struct ref e = { (float) i * 0.25f - 2.0f, 0, 0 };
			for (int k = 0; k < steps; k++) {
				double g = ((double) ograd(0, k, t, i) +
				               ograd(1, k, t, i)) /
				    (2.0 * SAMPLES);
				ref_step(o, &e, g, k);
			}
			double d = a->w[t][i] - e.x;
			err2 += d * d;
			ref2 += e.x * e.x;
			worst = fmax(worst, fabs(d));
		}
	}
	ck_assert_msg(sqrt(err2) <= 1e-6 * sqrt(ref2),
	    "%s: relative error %.3g (worst element off by %.3g)",
	    o->optimizer, sqrt(err2 / ref2), worst);
}

// Each optimizer in a sync job with two trainers equals the textbook
// update in double on the same averaged gradients after 50 steps
// (within 1e-6 relative): Adam's bias correction, AdamW's decoupled
// decay and L2 decay on the others included.
START_TEST(test_optim_sync_reference)
{
	static const char *names[] = { "sgd", "momentum", "nesterov", "adam",
		"adamw", "adagrad" };
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		struct ferry_opts o = FERRY_OPTS_INIT;
		struct otrainer   a[2];
		o.optimizer = names[k];
		o.lr        = strncmp(names[k], "ada", 3) == 0 ? 0.01 : 0.02;
		o.weight_decay = k % 2 == 0 ? 0.01 : 0.05; // adamw: 0.05
		if (strcmp(names[k], "nesterov") == 0) {
			o.momentum = 0.8;
		}
		run_two(a, &o, STEPS, NULL, 0);
		check_reference(&a[0], &o, STEPS);
	}
}
END_TEST

// The servers take the lr from the schedule by version: a step schedule
// with warm-up under momentum, and a cosine one under adam, match the
// reference, and libferry reports the lr of the next update.
START_TEST(test_optim_schedules_applied)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	struct otrainer   a[2];
	o.optimizer     = "momentum";
	o.lr            = 0.05;
	o.lr_schedule   = "step";
	o.lr_warmup     = 5;
	o.lr_step_every = 10;
	o.lr_gamma      = 0.5;
	run_two(a, &o, 30, NULL, 0);
	check_reference(&a[0], &o, 30);
	// Version 30: (30 - 5) / 10 = 2 decays.
	ck_assert_msg(fabs(a[0].lr_end - 0.0125) < 1e-15, "lr %.17g",
	    a[0].lr_end);

	o                = (struct ferry_opts) FERRY_OPTS_INIT;
	o.optimizer      = "adam";
	o.lr             = 0.01;
	o.lr_schedule    = "cosine";
	o.lr_warmup      = 4;
	o.lr_min         = 0.001;
	o.lr_total_steps = 24;
	run_two(a, &o, 30, NULL, 0);
	check_reference(&a[0], &o, 30);
	ck_assert_msg(fabs(a[0].lr_end - 0.001) < 1e-15, "lr %.17g",
	    a[0].lr_end);
}
END_TEST

// Async mode applies the optimizer to each push: one trainer with adam
// equals the reference on its own gradients.
START_TEST(test_optim_async_each_push)
{
	struct cluster    cl;
	struct otrainer   a;
	struct ferry_opts o = FERRY_OPTS_INIT;
	pthread_t         th;
	o.optimizer = "adam";
	o.lr        = 0.01;
	cluster_open(&cl, 1, 2, PS_PLACEMENT_UNIFORM);
	memset(&a, 0, sizeof(a));
	a.url   = ps_scheduler_url(cl.sched);
	a.steps = 20;
	a.mode  = FERRY_MODE_ASYNC;
	a.o     = o;
	pthread_create(&th, NULL, otrainer_main, &a);
	pthread_join(th, NULL);
	ck_assert_msg(a.rv == 0, "%s: %s", ferry_strerror(a.rv), a.err);
	cluster_stop(&cl);
	double err2 = 0, ref2 = 0;
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			struct ref e = { (float) i * 0.25f - 2.0f, 0, 0 };
			for (int k = 0; k < 20; k++) {
				ref_step(&o, &e,
				    (double) ograd(0, k, t, i) / SAMPLES, k);
			}
			err2 += (a.w[t][i] - e.x) * (a.w[t][i] - e.x);
			ref2 += e.x * e.x;
		}
	}
	ck_assert_msg(sqrt(err2) <= 1e-6 * sqrt(ref2), "relative error %.3g",
	    sqrt(err2 / ref2));
}
END_TEST

// Clipping by global norm: each trainer scales its gradient so that its
// norm over all tensors, per sample, is at most clip_norm; the servers
// average the clipped gradients (SGD here, so the reference is exact).
START_TEST(test_optim_clip_norm)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	struct otrainer   a[2];
	const double      C       = 1.5;
	int               clipped = 0;
	o.lr                      = 0.1;
	o.clip_norm               = C;
	run_two(a, &o, 20, NULL, 0);
	double err2 = 0, ref2 = 0;
	double x[NT][40];
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			x[t][i] = (float) i * 0.25f - 2.0f;
		}
	}
	for (int k = 0; k < 20; k++) {
		double scale[2];
		for (int r = 0; r < 2; r++) {
			double ss = 0;
			for (int t = 0; t < NT; t++) {
				for (size_t i = 0; i < lens[t]; i++) {
					double g = ograd(r, k, t, i);
					ss += g * g;
				}
			}
			double norm = sqrt(ss) / SAMPLES;
			scale[r]    = norm > C ? C / norm : 1.0;
			clipped += norm > C;
		}
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				double g = ograd(0, k, t, i) * scale[0] +
				    ograd(1, k, t, i) * scale[1];
				x[t][i] -= o.lr * g / (2.0 * SAMPLES);
			}
		}
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			err2 += (a[0].w[t][i] - x[t][i]) *
			    (a[0].w[t][i] - x[t][i]);
			ref2 += x[t][i] * x[t][i];
		}
	}
	// Both paths run: some pushes clip (the large steps), some do not.
	ck_assert_int_gt(clipped, 4);
	ck_assert_int_lt(clipped, 40);
	ck_assert_msg(sqrt(err2) <= 1e-6 * sqrt(ref2), "relative error %.3g",
	    sqrt(err2 / ref2));
}
END_TEST

// With a push codec, clipping happens before the codes are encoded with
// error feedback: clip_norm under q8 pushes gives bit-identical weights
// to trainers that scale their gradients themselves and push them
// unclipped through the same codec.
START_TEST(test_optim_clip_norm_codec)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	struct otrainer   lib[2], own[2];
	o.lr         = 0.1;
	o.optimizer  = "momentum";
	o.codec_push = "q8";
	o.clip_norm  = 1.5;
	run_two(lib, &o, 20, NULL, 0);
	o.clip_norm     = 0;
	two_manual_clip = 1.5;
	run_two(own, &o, 20, NULL, 0);
	two_manual_clip = 0;
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(memcmp(lib[0].w[t], own[0].w[t],
		                  lens[t] * sizeof(float)) == 0,
		    "tensor %d: libferry's clipping differs", t);
	}
}
END_TEST

// move_every is rank 0's hook: every shard goes to the other server.
static void
move_every(void *arg, int step)
{
	struct cluster *cl = arg;
	uint32_t        assign[5];
	for (uint32_t i = 0; i < 5; i++) {
		assign[i] = (i + (uint32_t) (step / 3)) % 2;
	}
	PT_OK(ps_scheduler_replace(cl->sched, assign, 5));
}

// Optimizer state travels with its shard: Adam (two buffers) and
// momentum (one) give bit-identical weights whether or not every shard
// moves to the other server every 3 steps (lost or zeroed moments would
// change the updates after each move).
START_TEST(test_optim_state_moves_bit_for_bit)
{
	static const char *names[] = { "adam", "momentum" };
	for (size_t k = 0; k < 2; k++) {
		struct ferry_opts o = FERRY_OPTS_INIT;
		struct otrainer   still[2], moved[2];
		o.optimizer = names[k];
		o.lr        = 0.01;
		run_two(still, &o, 15, NULL, 0);
		run_two(moved, &o, 15, move_every, 3);
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(still[0].w[t], moved[0].w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "%s: tensor %d differs after moves", names[k], t);
		}
	}
}
END_TEST

// Bad optimizer options are refused before connecting, with a reason.
START_TEST(test_optim_opts_bogus)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	char              why[256];
	o.scheduler_url = "tcp://127.0.0.1:1";
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_OK);
	o.optimizer = "lamb";
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "lamb"));
	o.optimizer = "adam";
	o.beta1     = 1.5;
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "beta1"));
	o.beta1       = 0.9;
	o.lr_schedule = "cosine"; // without lr_total_steps
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "lr-total-steps"));
	o.lr_schedule = NULL;
	o.clip_norm   = -1;
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "clip_norm"));
}
END_TEST

// A second trainer declaring another optimizer is refused (the job's is
// the first trainer's).
START_TEST(test_optim_declare_mismatch_bogus)
{
	struct cluster           cl;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", 40, FERRY_TENSOR_WEIGHTS },
		{ "b", 7, FERRY_TENSOR_WEIGHTS },
		{ "c", 1, FERRY_TENSOR_WEIGHTS } };
	ferry_client            *c0, *c1;
	int                      rv;

	cluster_open(&cl, 2, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.timeout_ms    = 300; // c0's declare waits for members: times out
	o.optimizer     = "adam";
	PT_OK(ferry_client_open(&o, &c0) == FERRY_OK ? FB_OK : FB_EINVAL);
	// It registers the job, then waits for rank 1 until its deadline
	// (ETIMEDOUT, or the scheduler's DEADLINE_EXCEEDED when its sweeper
	// answers first: EREMOTE).
	rv = ferry_client_declare(c0, d, NT);
	ck_assert_msg(rv == FERRY_ETIMEDOUT || rv == FERRY_EREMOTE,
	    "declare: %s: %s", ferry_strerror(rv),
	    ferry_client_last_error(c0));
	o.rank      = 1;
	o.optimizer = "momentum";
	PT_OK(ferry_client_open(&o, &c1) == FERRY_OK ? FB_OK : FB_EINVAL);
	ck_assert_int_eq(ferry_client_declare(c1, d, NT), FERRY_EMISMATCH);
	ck_assert_msg(strstr(ferry_client_last_error(c1), "optimizer adam"),
	    "%s", ferry_client_last_error(c1));
	ferry_client_close(c0);
	ferry_client_close(c1);
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_optim(void)
{
	Suite *s  = suite_create("optim");
	TCase *tc = tcase_create("reference");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_optim_sync_reference);
	tcase_add_test(tc, test_optim_schedules_applied);
	tcase_add_test(tc, test_optim_async_each_push);
	tcase_add_test(tc, test_optim_clip_norm);
	tcase_add_test(tc, test_optim_clip_norm_codec);
	suite_add_tcase(s, tc);
	tc = tcase_create("moves");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_optim_state_moves_bit_for_bit);
	suite_add_tcase(s, tc);
	tc = tcase_create("bogus");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_optim_opts_bogus);
	tcase_add_test(tc, test_optim_declare_mismatch_bogus);
	suite_add_tcase(s, tc);
	return s;
}
