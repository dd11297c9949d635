// test_dlrm_train.c — `trainer --model dlrm` end to end with real
// processes on a small data set made by the ferry-ctrgen binary: the
// data-parallel identity of the CTR loop (2 sync trainers with batch B ==
// 1 trainer with batch 2B, the partition of issue 26's contract), and a
// run that learns (AUC clearly above chance), with its summary and curve.
//
// Its own executable (test_dlrm_cluster): it needs no Fashion-MNIST, so
// it is never skipped with the suites of main.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "integration_tests.h"
#include "pt.h"

#define TEST_ROWS "2000"

// gen_data runs ferry-ctrgen into a new temp dir (binary files, a small
// vocabulary), waits for it to exit and writes the dir's path into dir.
static void
gen_data(char dir[64], const char *rows, const char *seed)
{
	char cmd[1024];
	snprintf(dir, 64, "/tmp/ferry-dlrm.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
	    "'%s' --out '%s' --rows %s --test-rows " TEST_ROWS
	    " --seed %s --format bin --vocab-scale 0.0005 >'%s.out' 2>&1",
	    CTRGEN_BIN, dir, rows, seed, dir);
	int st = system(cmd);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "ferry-ctrgen failed: see %s.out", dir);
}

// run_dlrm trains on the data gen_data made in dir with
// `trainers` sync trainers of batch `batch` and 2 servers, plus the
// NULL-terminated extra flags, waits for them and leaves the cluster's
// outputs in c: trainer-R.out, w-R.bin (--weights-out), curve.csv (rank
// 0's --curve).
static void
run_dlrm(struct lc *c, const char *dir, int trainers, int batch,
    const char **extra)
{
	char data[128], tdata[128], b[32];
	snprintf(data, sizeof(data), "--data=%s/train.bin", dir);
	snprintf(tdata, sizeof(tdata), "--test-data=%s/test.bin", dir);
	snprintf(b, sizeof(b), "--batch=%d", batch);
	lc_start(c, trainers, 2, NULL);
	for (int r = 0; r < trainers; r++) {
		char        wo[320], cv[320];
		const char *flags[32];
		int         n = 0;
		snprintf(wo, sizeof(wo), "--weights-out=%s/w-%d.bin", c->dir,
		    r);
		snprintf(cv, sizeof(cv), "--curve=%s/curve-%d.csv", c->dir, r);
		flags[n++] = "--model=dlrm";
		flags[n++] = data;
		flags[n++] = tdata;
		flags[n++] = b;
		flags[n++] = "--seed=5";
		flags[n++] = wo;
		flags[n++] = cv;
		for (int i = 0; extra != NULL && extra[i] != NULL && n < 31;
		     i++) {
			flags[n++] = extra[i];
		}
		flags[n] = NULL;
		lc_trainer(c, r, flags);
	}
	int ok = lc_wait_trainers(c, 300);
	lc_stop(c);
	ck_assert_msg(ok == trainers, "trainers failed; logs in %s", c->dir);
}

// read_floats reads the whole file at path into *out (malloc'd) and
// returns its float count.
static size_t
read_floats(const char *path, float **out)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	ck_assert(n > 0 && n % 4 == 0);
	*out = malloc((size_t) n);
	ck_assert_ptr_nonnull(*out);
	ck_assert_uint_eq(fread(*out, 1, (size_t) n, f), (size_t) n);
	fclose(f);
	return (size_t) n / 4;
}

// Two sync trainers with batch 64 end where one trainer with batch 128
// does (same samples a step, same order): dense weights within 1e-4
// relative L2 error (the sums run in another order), final AUC within
// 1e-3. Plain SGD on both sides: an adaptive optimizer's first steps
// would amplify the sums' rounding.
START_TEST(test_dlrm_sync_equals_single_process)
{
	struct lc   one, c2;
	char        dir[64], p1[320], p2[320];
	float      *w1, *w2, *w0 = NULL;
	const char *flags[] = { "--optimizer=sgd", "--lr=0.5",
		"--table-optimizer=sgd", "--table-lr=20", "--log-interval=0",
		"--max-steps=40", NULL };

	gen_data(dir, "6000", "11");
	run_dlrm(&c2, dir, 2, 64, flags);
	run_dlrm(&one, dir, 1, 128, flags);

	lc_path(&one, "w-0.bin", p1, sizeof(p1));
	size_t n = read_floats(p1, &w1);
	for (int r = 0; r < 2; r++) {
		snprintf(p2, sizeof(p2), "%s/w-%d.bin", c2.dir, r);
		ck_assert_uint_eq(read_floats(p2, &w2), n);
		double num = 0, den = 0;
		for (size_t i = 0; i < n; i++) {
			double d = (double) w1[i] - w2[i];
			num += d * d;
			den += (double) w1[i] * w1[i];
		}
		ck_assert_msg(sqrt(num / den) <= 1e-4,
		    "rank %d: relative error %.3g > 1e-4 (logs in %s, %s)", r,
		    sqrt(num / den), c2.dir, one.dir);
		if (r == 0) {
			w0 = w2;
		} else {
			// Both ranks hold the same version.
			ck_assert_mem_eq(w0, w2, n * sizeof(float));
			free(w2);
		}
	}
	free(w0);
	free(w1);
	lc_path(&one, "trainer-0.out", p1, sizeof(p1));
	lc_path(&c2, "trainer-0.out", p2, sizeof(p2));
	double a1 = lc_summary_value(p1, "auc"),
	       a2 = lc_summary_value(p2, "auc");
	ck_assert_msg(fabs(a1 - a2) <= 1e-3, "auc %.6f vs %.6f", a1, a2);
	// Job samples: 40 steps of 128, counted alike by both.
	ck_assert_double_eq(lc_summary_value(p1, "samples"), 40 * 128);
	ck_assert_double_eq(lc_summary_value(p2, "samples"), 40 * 128);
	ck_assert_double_eq(lc_summary_value(p2, "steps"), 40);
}
END_TEST

// A two-trainer run with the defaults a CTR job uses (row-wise Adagrad
// tables, Adagrad dense) learns: the final AUC is clearly above chance.
// Rank 0's curve has a row per progress line with an AUC, the summary
// names the model and its log loss.
START_TEST(test_dlrm_learns)
{
	struct lc   c;
	char        dir[64], path[320], line[256];
	const char *flags[] = { "--optimizer=adagrad", "--lr=0.02",
		"--table-lr=0.05", "--log-interval=25", "--eval-rows=500",
		"--epochs=2", "--max-steps=75", NULL };
	int         rows    = 0;

	gen_data(dir, "12000", "12");
	run_dlrm(&c, dir, 2, 100, flags);
	lc_path(&c, "trainer-0.out", path, sizeof(path));
	double auc = lc_summary_value(path, "auc");
	double ll  = lc_summary_value(path, "logloss");
	ck_assert_msg(auc > 0.6, "auc %.4f: not learning (logs in %s)", auc,
	    c.dir);
	ck_assert_msg(ll > 0 && ll < 0.69, "logloss %.4f", ll);
	// 75 steps (60 an epoch: floor(12000 / 200)), 200 samples each.
	ck_assert_double_eq(lc_summary_value(path, "steps"), 75);
	ck_assert_double_eq(lc_summary_value(path, "samples"), 75 * 200);
	ck_assert(lc_summary_value(path, "samples_per_s") > 0);

	lc_path(&c, "curve-0.csv", path, sizeof(path));
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "no %s", path);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	ck_assert_str_eq(line, "step,wall_s,samples,auc,logloss\n");
	unsigned long step, samples, last = 0;
	double        wall, a, l;
	while (fscanf(f, "%lu,%lf,%lu,%lf,%lf", &step, &wall, &samples, &a,
	           &l) == 5) {
		ck_assert_uint_gt(step, last);
		ck_assert_uint_eq(samples, step * 200);
		ck_assert(wall > 0 && a > 0 && a < 1 && l > 0);
		last = step;
		rows++;
	}
	fclose(f);
	// Every 25 steps, at 60 (epoch 0's end) and at the end (a second
	// epoch over so few samples would only overfit): 25, 50, 60, 75.
	ck_assert_int_eq(rows, 4);
	ck_assert_uint_eq(last, 75);
}
END_TEST

static Suite *
suite_dlrm(void)
{
	Suite *s  = suite_create("dlrm");
	TCase *tc = tcase_create("cluster");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_dlrm_sync_equals_single_process);
	tcase_add_test(tc, test_dlrm_learns);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(suite_dlrm());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
