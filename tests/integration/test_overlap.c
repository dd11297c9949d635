// test_overlap.c — `--overlap 1` (one-step delayed weights) end to end with
// real processes: step t+1's gradient is computed on version t's weights,
// which is a different algorithm from --overlap 0, and it still trains.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "integration_tests.h"

#define OV_MAX_FLOATS (1u << 20)

// run_weights1 runs one trainer on one server with flags (NULL-terminated,
// --data and --weights-out added) and reads its final weights into w (at
// most OV_MAX_FLOATS); returns how many floats it read.
static size_t
run_weights1(const char **flags, float *w)
{
	struct lc   c;
	char        wo[320], data[520], path[300];
	const char *all[16];
	size_t      n = 0;

	lc_start(&c, 1, 1, NULL);
	snprintf(wo, sizeof(wo), "--weights-out=%s/w.bin", c.dir);
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	all[n++] = wo;
	all[n++] = data;
	all[n++] = "--seed=7";
	all[n++] = "--log-interval=0";
	for (size_t i = 0; flags[i] != NULL && n < 15; i++) {
		all[n++] = flags[i];
	}
	all[n] = NULL;
	lc_trainer(&c, 0, all);
	int ok = lc_wait_trainers(&c, 120);
	lc_stop(&c);
	ck_assert_msg(ok == 1, "trainer failed; logs in %s", c.dir);
	FILE *f = fopen(lc_path(&c, "w.bin", path, sizeof(path)), "rb");
	ck_assert_msg(f != NULL, "no %s", path);
	size_t got = fread(w, sizeof(float), OV_MAX_FLOATS, f);
	fclose(f);
	ck_assert_msg(got > 0, "empty %s", path);
	return got;
}

// l2_diff returns the L2 norm of a - b over n floats.
static double
l2_diff(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double) a[i] - (double) b[i];
		s += d * d;
	}
	return sqrt(s);
}

// Two delayed SGD steps of batch B at rate lr apply, to w0, the gradients
// of minibatches 0 and 1 both taken at w0 (step 1's at version 0): the
// same as one step of batch 2B (minibatches 0 and 1 together, the same
// shuffle) at rate 2 lr, up to float rounding. Two undelayed steps take
// minibatch 1's gradient at w1 instead, and land measurably elsewhere.
START_TEST(test_overlap_gradient_on_previous_version)
{
	const char *delayed[] = { "--overlap=1", "--max-steps=2", "--batch=32",
		"--lr=0.1", NULL };
	const char *one_big[] = { "--overlap=0", "--max-steps=1", "--batch=64",
		"--lr=0.2", NULL };
	const char *plain[]   = { "--overlap=0", "--max-steps=2", "--batch=32",
		  "--lr=0.1", NULL };
	float      *a         = malloc(OV_MAX_FLOATS * sizeof(float));
	float      *b         = malloc(OV_MAX_FLOATS * sizeof(float));
	float      *p         = malloc(OV_MAX_FLOATS * sizeof(float));
	ck_assert(a != NULL && b != NULL && p != NULL);

	size_t na = run_weights1(delayed, a);
	size_t nb = run_weights1(one_big, b);
	size_t np = run_weights1(plain, p);
	ck_assert_msg(na == nb && na == np, "weights of %zu, %zu, %zu floats",
	    na, nb, np);
	double d_big   = l2_diff(a, b, na);
	double d_plain = l2_diff(a, p, na);
	ck_assert_msg(d_plain > 0, "--overlap 1 equals --overlap 0 exactly");
	ck_assert_msg(d_big * 100 <= d_plain,
	    "delayed vs one 2B step: |dw| %.3g; delayed vs undelayed: "
	    "%.3g (step 1's gradient was not taken at version 0)",
	    d_big, d_plain);
	free(a);
	free(b);
	free(p);
}
END_TEST

// One step (an odd count: the newest weights end in the spare buffer) has
// nothing to delay: --overlap 1 takes the same gradient at version 0 and
// writes the same weights, bit for bit, as --overlap 0.
START_TEST(test_overlap_one_step_same_weights)
{
	const char *ov[]    = { "--overlap=1", "--max-steps=1", NULL };
	const char *plain[] = { "--overlap=0", "--max-steps=1", NULL };
	float      *a       = malloc(OV_MAX_FLOATS * sizeof(float));
	float      *p       = malloc(OV_MAX_FLOATS * sizeof(float));
	ck_assert(a != NULL && p != NULL);

	size_t na = run_weights1(ov, a);
	size_t np = run_weights1(plain, p);
	ck_assert_uint_eq(na, np);
	for (size_t i = 0; i < na; i++) {
		ck_assert_msg(a[i] == p[i], "float %zu: %.9g vs %.9g", i,
		    (double) a[i], (double) p[i]);
	}
	free(a);
	free(p);
}
END_TEST

// A 2-trainer sync job with --overlap 1 finishes one epoch at >= 78%,
// uncompressed and with q4 pushes / q8 reference-delta pulls (whose error
// feedback and reference live in libferry, unchanged by the overlap).
// One delayed epoch lands near 80% and moves by a point with the initial
// draw (the seeded rule's gave 79.0%): the bound says it trains, not
// which draw.
START_TEST(test_overlap_two_trainers_one_epoch)
{
	double fp32 = it_run_epoch_with("none", "none", "--overlap=1");
	ck_assert_msg(fp32 >= 0.78, "--overlap 1 accuracy %.4f < 0.78", fp32);
	double q = it_run_epoch_with("q4", "q8", "--overlap=1");
	ck_assert_msg(q >= 0.78, "--overlap 1 q4/q8 accuracy %.4f < 0.78", q);
}
END_TEST

Suite *
suite_overlap(void)
{
	Suite *s  = suite_create("overlap");
	TCase *tc = tcase_create("overlap");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_overlap_gradient_on_previous_version);
	tcase_add_test(tc, test_overlap_one_step_same_weights);
	tcase_add_test(tc, test_overlap_two_trainers_one_epoch);
	suite_add_tcase(s, tc);
	return s;
}
