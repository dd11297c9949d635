// test_faults.c — process deaths in a real job (ps-server and trainer
// processes on loopback, Fashion-MNIST): a trainer killed with SIGKILL in
// the middle of a sync job is declared dead by the scheduler after
// --dead-after-ms without a heartbeat, the next map drops it, and the
// other trainer finishes all its steps instead of timing out in
// push_pull; a scheduler killed and restarted with its --state-dir
// carries on with the job. Every wait has a deadline.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration_tests.h"
#include "pt.h"

// file_has says whether the file at path contains needle.
static int
file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char  line[4096];
	int   found = 0;
	while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
		found = strstr(line, needle) != NULL;
	}
	if (f != NULL) {
		fclose(f);
	}
	return found;
}

// wait_for waits (up to timeout_ms) until the file at path contains
// needle, failing the test otherwise.
static void
wait_for(const char *path, const char *needle, int timeout_ms)
{
	uint64_t end = fb_clock_ms() + (uint64_t) timeout_ms;
	while (!file_has(path, needle)) {
		ck_assert_msg(fb_clock_ms() < end, "no '%s' in %s after %d ms",
		    needle, path, timeout_ms);
		fb_sleep_us(20000);
	}
}

// A 2-trainer sync job with heartbeats every 200 ms and death declared
// after 1 s: trainer 1 is killed once both train; trainer 0 finishes its
// 20000 steps. Without liveness it would wait for rank 1's pushes until its
// 10 s deadline and fail ("push_pull: timed out").
START_TEST(test_faults_trainer_killed_sync)
{
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=1000",
		NULL };
	char        data[520], path[300], log1[300];
	struct lc   c;

	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 1, sflags);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--max-steps=20000", "--epochs=100",
			"--log-interval=0", "--seed=1", "--layers=784,32,10",
			"--batch=32", data, "--heartbeat-ms=200",
			"--timeout-ms=10000", NULL };
		lc_trainer(&c, r, flags);
	}
	lc_path(&c, "trainer-1.log", log1, sizeof(log1));
	wait_for(log1, "steps per epoch", 60000);
	fb_sleep_us(500000); // mid-run: both trainers push every step
	uint64_t t_kill = fb_clock_ms();
	ck_assert_int_eq(kill(c.trainer_pids[1], SIGKILL), 0);

	int ok = lc_wait_trainers(&c, 200);
	ck_assert_msg(ok == 1, "%d trainer(s) exited 0, want 1 (logs: %s)", ok,
	    c.dir);
	lc_path(&c, "trainer-1.out", path, sizeof(path));
	ck_assert_msg(!file_has(path, "{\"summary\""),
	    "trainer 1 finished before it was killed: the test proves "
	    "nothing (raise --max-steps)");
	lc_path(&c, "trainer-0.out", path, sizeof(path));
	ck_assert_msg(file_has(path, "{\"summary\""),
	    "trainer 0 wrote no summary (logs: %s)", c.dir);
	lc_path(&c, "scheduler.log", path, sizeof(path));
	ck_assert_msg(file_has(path, "member trainer 1 dead: no heartbeat"),
	    "the scheduler never declared trainer 1 dead (logs: %s)", c.dir);
	ck_assert_msg(!file_has(path, "member trainer 0 dead"),
	    "trainer 0 was declared dead (logs: %s)", c.dir);
	fprintf(stderr, "faults: trainer 0 finished %.1f s after the kill\n",
	    (double) (fb_clock_ms() - t_kill) / 1e3);
	lc_stop(&c);
}
END_TEST

// A 2-trainer, 2-server sync job whose scheduler keeps its state
// (--state-dir): the scheduler is killed with SIGKILL mid-job and started
// again on the same URL and directory. It carries on from the file (the
// same job, members and map), so when trainer 1 is then killed, the new
// scheduler declares it dead and publishes the next epoch (never one it
// had handed out), and trainer 0 finishes all its steps. A scheduler
// restarted without its state knows no map: nobody would tell the
// servers that rank 1 is gone, and trainer 0 would time out.
START_TEST(test_faults_scheduler_killed_restarted_with_state)
{
	char state[64], sd[96], data[520], log1[300], path[300];
	snprintf(state, sizeof(state), "/tmp/ferry-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(state));
	snprintf(sd, sizeof(sd), "--state-dir=%s", state);
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=1500",
		sd, NULL };
	struct lc   c;

	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 2, sflags);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--max-steps=30000", "--epochs=100",
			"--log-interval=0", "--seed=1", "--layers=784,32,10",
			"--batch=32", data, "--heartbeat-ms=200",
			"--timeout-ms=20000", NULL };
		lc_trainer(&c, r, flags);
	}
	lc_path(&c, "trainer-1.log", log1, sizeof(log1));
	wait_for(log1, "steps per epoch", 60000);
	fb_sleep_us(500000);
	ck_assert_int_eq(kill(c.pids[0], SIGKILL), 0);
	ck_assert_int_eq(waitpid(c.pids[0], NULL, 0), c.pids[0]);
	c.pids[0]           = 0; // reaped
	const char *again[] = { "--trainers=2", "--servers=2", sd,
		"--dead-after-ms=1500", "--log-level=info", NULL };
	lc_scheduler_restart(&c, again, "scheduler-again.log");
	lc_path(&c, "scheduler-again.log", path, sizeof(path));
	wait_for(path, "carrying on from", 10000);
	// Every member is tracked again by the new scheduler before the kill.
	wait_for(path, "tracking trainer 1", 10000);
	wait_for(path, "tracking trainer 0", 10000);
	ck_assert_int_eq(kill(c.trainer_pids[1], SIGKILL), 0);

	int ok = lc_wait_trainers(&c, 200);
	ck_assert_msg(ok == 1, "%d trainer(s) exited 0, want 1 (logs: %s)", ok,
	    c.dir);
	lc_path(&c, "trainer-0.out", log1, sizeof(log1));
	ck_assert_msg(file_has(log1, "{\"summary\""),
	    "trainer 0 wrote no summary (logs: %s)", c.dir);
	ck_assert_msg(file_has(path, "member trainer 1 dead: no heartbeat"),
	    "the new scheduler never declared trainer 1 dead (logs: %s)",
	    c.dir);
	// The epoch carries on: the loaded one plus one, never epoch 1.
	FILE              *f = fopen(path, "r");
	char               line[1024], want[64];
	unsigned long long e = 0;
	const char        *p;
	while (f != NULL && e == 0 && fgets(line, sizeof(line), f) != NULL) {
		if ((p = strstr(line, "scheduler.state: epoch ")) != NULL) {
			e = strtoull(p + strlen("scheduler.state: epoch "),
			    NULL, 10);
		}
	}
	if (f != NULL) {
		fclose(f);
	}
	ck_assert_msg(e >= 1, "no loaded epoch in %s", path);
	snprintf(want, sizeof(want), "epoch %llu: ", e + 1);
	ck_assert_msg(file_has(path, want), "no '%s' in %s", want, path);
	ck_assert_msg(!file_has(path, "placement: epoch 1: "),
	    "the new scheduler published epoch 1 again (logs: %s)", c.dir);
	lc_stop(&c);
	snprintf(path, sizeof(path), "rm -rf '%s'", state);
	ck_assert_int_eq(system(path), 0);
}
END_TEST

Suite *
suite_faults(void)
{
	Suite *s  = suite_create("faults");
	TCase *tc = tcase_create("faults");
	// Tagged so that the plain `integration` entry leaves it to its own
	// entry (Check has no way to exclude a suite, only tags).
	tcase_set_tags(tc, "faults");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_faults_trainer_killed_sync);
	tcase_add_test(tc, test_faults_scheduler_killed_restarted_with_state);
	suite_add_tcase(s, tc);
	return s;
}
