// test_optim.c — the optimizer names, their checks and the learning-rate
// schedules (<fb/optim.h>): lr at chosen versions against values worked
// out by hand, for each schedule with and without warm-up.
#include <math.h>

#include "base_tests.h"
#include "fb/fb.h"
#include "fb/optim.h"

// close_to compares lr values to 1e-12 relative (they are computed in
// double from the same formula; only the rounding may differ).
static void
close_to(double got, double want, uint64_t t)
{
	ck_assert_msg(fabs(got - want) <= 1e-12 * fabs(want) + 1e-15,
	    "t=%llu: lr %.17g, expected %.17g", (unsigned long long) t, got,
	    want);
}

// Every name parses to its kind and back; "" and NULL are the defaults.
START_TEST(test_optim_names)
{
	static const char *names[] = { "sgd", "momentum", "nesterov", "adam",
		"adamw", "adagrad" };
	int                kind    = -1;
	for (int i = 0; i < FB_OPTIM_COUNT; i++) {
		ck_assert_int_eq(fb_optim_parse(names[i], &kind), FB_OK);
		ck_assert_int_eq(kind, i);
		ck_assert_str_eq(fb_optim_name(i), names[i]);
	}
	ck_assert_int_eq(fb_optim_parse(NULL, &kind), FB_OK);
	ck_assert_int_eq(kind, FB_OPTIM_SGD);
	ck_assert_int_eq(fb_lr_parse("cosine", &kind), FB_OK);
	ck_assert_int_eq(kind, FB_LR_COSINE);
	ck_assert_int_eq(fb_lr_parse("", &kind), FB_OK);
	ck_assert_int_eq(kind, FB_LR_CONSTANT);
	ck_assert_uint_eq(fb_optim_state_bufs(FB_OPTIM_SGD), 0);
	ck_assert_uint_eq(fb_optim_state_bufs(FB_OPTIM_NESTEROV), 1);
	ck_assert_uint_eq(fb_optim_state_bufs(FB_OPTIM_ADAMW), 2);
	ck_assert_uint_eq(fb_optim_state_bufs(FB_OPTIM_ADAGRAD), 1);
}
END_TEST

// Unknown names and out-of-range parameters are refused with a reason.
START_TEST(test_optim_names_bogus)
{
	struct fb_optim    o  = FB_OPTIM_INIT;
	struct fb_lr_sched sc = FB_LR_SCHED_INIT;
	char               why[128];
	int                kind = 7;
	ck_assert_int_eq(fb_optim_parse("adamax", &kind), FB_EINVAL);
	ck_assert_int_eq(kind, 7);
	ck_assert_int_eq(fb_lr_parse("linear", &kind), FB_EINVAL);
	ck_assert_str_eq(fb_optim_name(99), "?");
	ck_assert_int_eq(fb_optim_check(&o, &sc, why, sizeof(why)), FB_OK);
	o.beta2 = 1.0;
	ck_assert_int_eq(fb_optim_check(&o, &sc, why, sizeof(why)), FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "beta2"));
	o     = (struct fb_optim) FB_OPTIM_INIT;
	o.eps = NAN;
	ck_assert_int_eq(fb_optim_check(&o, &sc, NULL, 0), FB_EINVAL);
	o        = (struct fb_optim) FB_OPTIM_INIT;
	sc.kind  = FB_LR_COSINE;
	sc.total = 0;
	ck_assert_int_eq(fb_optim_check(&o, &sc, why, sizeof(why)), FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "lr-total-steps"));
	sc            = (struct fb_lr_sched) FB_LR_SCHED_INIT;
	sc.kind       = FB_LR_STEP;
	sc.step_every = 0;
	ck_assert_int_eq(fb_optim_check(&o, &sc, why, sizeof(why)), FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "lr-step-every"));
}
END_TEST

// constant: the same lr at every version; warm-up ramps (t+1)/W first.
START_TEST(test_optim_lr_constant_warmup)
{
	struct fb_lr_sched sc = FB_LR_SCHED_INIT;
	sc.lr                 = 0.4;
	close_to(fb_lr_at(&sc, 0), 0.4, 0);
	close_to(fb_lr_at(&sc, 123456), 0.4, 123456);
	sc.warmup = 4;
	close_to(fb_lr_at(&sc, 0), 0.1, 0);
	close_to(fb_lr_at(&sc, 1), 0.2, 1);
	close_to(fb_lr_at(&sc, 3), 0.4, 3);
	close_to(fb_lr_at(&sc, 4), 0.4, 4);
	close_to(fb_lr_at(&sc, 1000), 0.4, 1000);
}
END_TEST

// step: lr * gamma^floor((t - warmup) / every).
START_TEST(test_optim_lr_step)
{
	struct fb_lr_sched sc = FB_LR_SCHED_INIT;
	sc.lr                 = 1.0;
	sc.kind               = FB_LR_STEP;
	sc.step_every         = 10;
	sc.gamma              = 0.5;
	close_to(fb_lr_at(&sc, 0), 1.0, 0);
	close_to(fb_lr_at(&sc, 9), 1.0, 9);
	close_to(fb_lr_at(&sc, 10), 0.5, 10);
	close_to(fb_lr_at(&sc, 25), 0.25, 25);
	close_to(fb_lr_at(&sc, 30), 0.125, 30);
	sc.warmup = 5; // the decay counts from the end of warm-up
	close_to(fb_lr_at(&sc, 2), 0.6, 2);
	close_to(fb_lr_at(&sc, 14), 1.0, 14);
	close_to(fb_lr_at(&sc, 15), 0.5, 15);
}
END_TEST

// cosine: lr_min + (lr - lr_min)(1 + cos(pi u / (total - warmup))) / 2,
// then lr_min from total on.
START_TEST(test_optim_lr_cosine)
{
	struct fb_lr_sched sc = FB_LR_SCHED_INIT;
	sc.lr                 = 1.0;
	sc.kind               = FB_LR_COSINE;
	sc.lr_min             = 0.1;
	sc.total              = 100;
	close_to(fb_lr_at(&sc, 0), 1.0, 0);
	close_to(fb_lr_at(&sc, 50), 0.55, 50); // halfway: the midpoint
	close_to(fb_lr_at(&sc, 25), 0.1 + 0.9 * 0.5 * (1 + sqrt(0.5)),
	    25); // cos(pi/4)
	close_to(fb_lr_at(&sc, 100), 0.1, 100);
	close_to(fb_lr_at(&sc, 5000), 0.1, 5000);
	sc.warmup = 20; // 20 ramp steps, then 80 of cosine
	close_to(fb_lr_at(&sc, 9), 0.5, 9);
	close_to(fb_lr_at(&sc, 20), 1.0, 20);
	close_to(fb_lr_at(&sc, 60), 0.55, 60);
	close_to(fb_lr_at(&sc, 100), 0.1, 100);
}
END_TEST

Suite *
suite_optim(void)
{
	Suite *s  = suite_create("optim");
	TCase *tc = tcase_create("names");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_optim_names);
	tcase_add_test(tc, test_optim_names_bogus);
	suite_add_tcase(s, tc);
	tc = tcase_create("lr");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_optim_lr_constant_warmup);
	tcase_add_test(tc, test_optim_lr_step);
	tcase_add_test(tc, test_optim_lr_cosine);
	suite_add_tcase(s, tc);
	return s;
}
