// test_elastic.c — an elastic job in real processes (ctest faults_elastic,
// labels integration and faults): a scheduler with --trainers 1:3 and two
// servers; two trainers started without --rank take data leases, a third
// joins mid-run and steps, one of the first two is killed with SIGKILL,
// and the job still finishes its epochs with every position of every
// epoch consumed exactly once by the scheduler's lease counters.
//
// What it checks: the joiner's first step comes (its log line "first step
// applied"); after the kill the survivors exit 0 and one of them reports
// the job's final test accuracy; the scheduler's
// ferry_scheduler_lease_positions_consumed_total is EPOCHS x 60000 and
// ferry_scheduler_lease_doubled_total is 0 (the killed trainer's lease
// went back to the pool up to its last applied push, no further). Every
// wait is on an event (a log line, an exit) with a deadline.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integration_tests.h"
#include "pt.h"
#include "scrape.h"

#define EPOCHS 2
#define EPOCHS_S "2"
#define TRAIN_N 60000

static void
nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

// file_has says whether the file at path holds needle.
static int
file_has(const char *path, const char *needle)
{
	char  line[4096];
	int   found = 0;
	FILE *f     = fopen(path, "r");
	while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
		found = strstr(line, needle) != NULL;
	}
	if (f != NULL) {
		fclose(f);
	}
	return found;
}

// wait_line waits up to timeout_s for needle in <dir>/<name>.
static void
wait_line(const struct lc *c, const char *name, const char *needle,
    int timeout_s)
{
	char path[320];
	lc_path(c, name, path, sizeof(path));
	for (long t = 0; t < timeout_s * 1000L; t += 20) {
		if (file_has(path, needle)) {
			return;
		}
		nap_ms(20);
	}
	ck_abort_msg("no '%s' in %s within %d s", needle, path, timeout_s);
}

// sched_metric reads one of the scheduler's metrics.
static double
sched_metric(const struct lc *c, const char *name)
{
	char  path[320], url[256] = "", *body;
	int   st;
	FILE *f = fopen(lc_path(c, "scheduler.http", path, sizeof(path)), "r");
	ck_assert_msg(f != NULL, "no scheduler.http in %s", c->dir);
	ck_assert_ptr_nonnull(fgets(url, sizeof(url), f));
	fclose(f);
	url[strcspn(url, "\n")] = '\0';
	ck_assert_int_eq(pt_http_get(url, "/metrics", &st, &body), 0);
	ck_assert_int_eq(st, 200);
	double v = -1;
	ck_assert_msg(pt_prom_value(body, name, NULL, &v) == 0,
	    "no %s in the scheduler's metrics", name);
	free(body);
	return v;
}

START_TEST(test_elastic_join_kill_exactly_once)
{
	struct lc   c;
	char        data[520];
	// The killed trainer's heartbeat connection closes: it is dead 2
	// heartbeats later. --dead-after-ms only bounds silent members, and
	// a long one keeps a busy machine's servers from being declared dead.
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=10000",
		"--log-level=info", NULL };
	const char *tflags[16];
	int         n = 0;

	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	tflags[n++] = data;
	tflags[n++] = "--seed=5";
	tflags[n++] = "--epochs=" EPOCHS_S;
	tflags[n++] = "--batch=64";
	tflags[n++] = "--lr=0.1";
	tflags[n++] = "--layers=784,64,10";
	tflags[n++] = "--log-interval=0";
	tflags[n++] = "--heartbeat-ms=200";
	tflags[n++] = "--timeout-ms=60000";
	// Rounds slow enough that the joiner joins well before the end.
	tflags[n++] = "--slow-ms=10";
	tflags[n]   = NULL;

	lc_start_elastic(&c, "1:3", 2, sflags, 1);
	lc_trainer_any(&c, 0, tflags);
	int victim = lc_trainer_any(&c, 1, tflags);
	wait_line(&c, "joiner-0.log", "first step applied", 120);
	wait_line(&c, "joiner-1.log", "first step applied", 120);
	lc_trainer_any(&c, 2, tflags); // joins the running job
	wait_line(&c, "joiner-2.log", "first step applied", 120);
	ck_assert_int_eq(kill(victim, SIGKILL), 0);
	int ok = lc_wait_trainers(&c, 400);
	ck_assert_msg(ok == 2, "%d of the 2 survivors exited 0 (logs in %s)",
	    ok, c.dir);

	char p0[320], p2[320];
	lc_path(&c, "joiner-0.log", p0, sizeof(p0));
	lc_path(&c, "joiner-2.log", p2, sizeof(p2));
	ck_assert_msg(file_has(p0, "final test accuracy") ||
	        file_has(p2, "final test accuracy"),
	    "no survivor reported the final accuracy (logs in %s)", c.dir);
	double consumed = sched_metric(&c,
	    "ferry_scheduler_lease_positions_consumed_total");
	double doubled  = sched_metric(&c,
	     "ferry_scheduler_lease_doubled_total");
	ck_assert_msg(consumed == (double) EPOCHS * TRAIN_N,
	    "%.0f positions consumed, want %d (logs in %s)", consumed,
	    EPOCHS * TRAIN_N, c.dir);
	ck_assert_msg(doubled == 0, "%.0f positions doubled (logs in %s)",
	    doubled, c.dir);
	lc_stop(&c);
}
END_TEST

static Suite *
suite_elastic(void)
{
	Suite *s  = suite_create("elastic");
	TCase *tc = tcase_create("join_kill");
	tcase_set_timeout(tc, 540);
	tcase_add_test(tc, test_elastic_join_kill_exactly_once);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	if (!it_have_data()) {
		fprintf(stderr, "test_elastic: no data set in %s: skipped\n",
		    it_data_dir());
		return 77;
	}
	SRunner *sr = srunner_create(suite_elastic());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
