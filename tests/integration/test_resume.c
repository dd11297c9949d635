// test_resume.c — a trainer killed with SIGKILL and restarted under its
// rank resumes at the job's version, in real processes (ctest
// faults_resume, labels integration and faults; its own executable so the
// fault suite can be run alone: ctest -L faults).
//
// What it checks: a 2-trainer, 2-server sync job of STEPS steps; trainer 1
// is killed after a random step past 20 and started again with the same
// flags. Both trainers exit 0; the restarted one's summary says it resumed
// at the version it found (no earlier than the step it was killed after)
// and ran only the steps left; both end at job step and version STEPS
// with the same weights. The trainers do not heartbeat, so without
// liveness tracking nobody notices the death: the survivor waits in its
// push-pull for the round the dead rank never pushed to, and the restarted
// trainer pulls that round's version and pushes for it, which completes it.
// Its gradient is then the one the dead process would have pushed (same
// weights, same minibatch), so the weights equal a fault-free run bit for bit
// — unless the kill split a push across shards (the restarted trainer then
// pushes that round only to the shards still waiting for it and logs that
// the others "had already closed this round") or a round finished without
// rank 1 (it resumed past the step after the last one it finished): in
// those cases the test says so and checks the rest. Every wait has a deadline.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integration_tests.h"
#include "pt.h"

#define STEPS 150
#define STEPS_S "150"

// overlap_flag, when set, is added to every trainer's flags: the same
// test for --overlap 1, whose loop resumes the same way.
static const char *overlap_flag;

// flags_for fills the flags every trainer of both runs gets; out gets the
// --weights-out and --step-times paths of rank (buffers of 320 bytes).
static void
flags_for(const struct lc *c, int rank, const char *tag, char wo[320],
    char stf[320], char data[520], const char *flags[16])
{
	int n = 0;
	snprintf(wo, 320, "--weights-out=%s/w%s%d.bin", c->dir, tag, rank);
	snprintf(stf, 320, "--step-times=%s/st%s%d.csv", c->dir, tag, rank);
	snprintf(data, 520, "--data=%s", it_data_dir());
	flags[n++] = "--seed=11";
	flags[n++] = "--max-steps=" STEPS_S;
	flags[n++] = "--batch=64";
	flags[n++] = "--lr=0.1";
	// No heartbeats: the scheduler then never declares rank 1 dead, so
	// the survivor waits in its push-pull for the restarted trainer (an
	// event) instead of going on alone once the killed one's connection
	// closed, which on a busy machine let it finish the whole job before
	// the restart registered. The deadline only bounds a hung run.
	flags[n++] = "--heartbeat-ms=0";
	flags[n++] = "--timeout-ms=120000";
	// A flushed progress line per step: the test watches rank 1's.
	flags[n++] = rank == 1 ? "--log-interval=1" : "--log-interval=0";
	flags[n++] = wo;
	flags[n++] = stf;
	flags[n++] = data;
	if (overlap_flag != NULL) {
		flags[n++] = overlap_flag;
	}
	flags[n] = NULL;
}

// read_file returns the contents of path (NUL-terminated; free it), or
// NULL; *len gets the byte count.
static char *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long  n;
	if (f == NULL) {
		return NULL;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t) n + 1);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(fread(b, 1, (size_t) n, f), (size_t) n);
	b[n] = '\0';
	fclose(f);
	*len = (size_t) n;
	return b;
}

// progress_lines counts the "step N | ..." lines in path.
static int
progress_lines(const char *path)
{
	size_t len;
	char  *b = read_file(path, &len);
	int    n = 0;
	if (b == NULL) {
		return 0;
	}
	for (char *p = b; (p = strstr(p, "step ")) != NULL; p++) {
		n += p == b || p[-1] == '\n';
	}
	free(b);
	return n;
}

// summary_u64 returns the number after "key": in the JSON summary line of
// text (the last line starting with {"summary"); fails the test without.
static unsigned long long
summary_u64(const char *text, const char *key)
{
	char        pat[64];
	const char *s = strstr(text, "{\"summary\"");
	ck_assert_msg(s != NULL, "no summary line");
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	const char *v = strstr(s, pat);
	ck_assert_msg(v != NULL, "summary has no %s: %s", key, s);
	return strtoull(v + strlen(pat), NULL, 10);
}

// same_bytes says whether files a and b are both readable and equal.
static int
same_bytes(const char *a, const char *b)
{
	size_t la, lb;
	char  *x = read_file(a, &la), *y = read_file(b, &lb);
	int    eq;
	ck_assert_msg(x != NULL && y != NULL, "cannot read %s or %s", a, b);
	eq = la == lb && la > 0 && memcmp(x, y, la) == 0;
	free(x);
	free(y);
	return eq;
}

// reap waits up to timeout_s for trainer pid (started last, so the
// cluster's lc_wait_trainers is not used) and returns its exit status, or
// -1 when it did not exit in time.
static int
reap(struct lc *c, pid_t pid, int timeout_s)
{
	int st;
	for (uint64_t end = fb_clock_ms() + (uint64_t) timeout_s * 1000;
	     fb_clock_ms() < end; fb_sleep_us(20000)) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			for (int k = 0; k < c->n_pids; k++) {
				if (c->pids[k] == pid) {
					c->pids[k] = 0;
				}
			}
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
		}
	}
	return -1;
}

// fault_free runs the job without a fault and leaves rank 0's final
// weights in ref (a path).
static void
fault_free(char ref[320])
{
	struct lc c;
	lc_start(&c, 2, 2, NULL);
	for (int r = 0; r < 2; r++) {
		char        wo[320], stf[320], data[520];
		const char *flags[16];
		flags_for(&c, r, "ref", wo, stf, data, flags);
		lc_trainer(&c, r, flags);
	}
	int ok = lc_wait_trainers(&c, 180);
	lc_stop(&c);
	ck_assert_msg(ok == 2, "fault-free run failed; logs in %s", c.dir);
	snprintf(ref, 320, "%s/wref0.bin", c.dir);
}

// resume_after_sigkill is the test, with or without overlap_flag.
static void
resume_after_sigkill(void)
{
	struct lc   c;
	char        ref[320], path[320], out1[320], killed[320];
	char        wo[320], stf[320], data[520];
	const char *flags[16];
	int         kill_after, seen = 0, st;
	size_t      len;

	if (overlap_flag == NULL) {
		fault_free(ref);
	}
	srand((unsigned) time(NULL) ^ (unsigned) getpid());
	kill_after = 21 + rand() % 40; // a step past 20, well before the end
	lc_start(&c, 2, 2, (const char *[]) { "--log-level=info", NULL });
	for (int r = 0; r < 2; r++) {
		flags_for(&c, r, "", wo, stf, data, flags);
		lc_trainer(&c, r, flags);
	}
	// Wait (up to 120 s) until trainer 1 finished kill_after steps.
	lc_path(&c, "trainer-1.out", out1, sizeof(out1));
	for (uint64_t end = fb_clock_ms() + 120000;
	     seen < kill_after && fb_clock_ms() < end;) {
		seen = progress_lines(out1);
		if (seen < kill_after) {
			fb_sleep_us(2000);
		}
	}
	ck_assert_msg(seen >= kill_after,
	    "trainer 1 did not reach step %d (logs in %s)", kill_after, c.dir);
	pid_t pid = c.trainer_pids[1];
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	// Forget it (lc_wait_trainers must not wait for a reaped pid) and
	// keep its output for the post-mortem.
	for (int k = 0; k < c.n_pids; k++) {
		if (c.pids[k] == pid) {
			c.pids[k] = 0;
		}
	}
	c.trainer_pids[1] = c.trainer_pids[--c.n_trainers];
	int finished      = progress_lines(out1); // steps it had done
	lc_path(&c, "trainer-1.killed.out", killed, sizeof(killed));
	ck_assert_int_eq(rename(out1, killed), 0);
	fprintf(stderr,
	    "resume: killed trainer 1 after step %d (watching for %d); "
	    "logs in %s\n",
	    finished, kill_after, c.dir);

	flags_for(&c, 1, "", wo, stf, data, flags);
	lc_trainer(&c, 1, flags); // the same rank, the same flags
	int ok = lc_wait_trainers(&c, 180);
	ck_assert_msg(ok == 2,
	    "a trainer failed after the restart; logs in %s", c.dir);

	// Rank 1 once more, after the job's last step: it finds nothing left
	// to do, says so and exits 0 at once, holding the final weights.
	char late[320], wlate[320], log1p[320];
	lc_path(&c, "trainer-1.resumed.out", late, sizeof(late));
	ck_assert_int_eq(rename(out1, late), 0);
	lc_path(&c, "trainer-1.resumed.log", log1p, sizeof(log1p));
	ck_assert_int_eq(
	    rename(lc_path(&c, "trainer-1.log", path, sizeof(path)), log1p),
	    0);
	flags_for(&c, 1, "late", wo, stf, data, flags);
	lc_trainer(&c, 1, flags);
	ck_assert_int_eq(reap(&c, c.trainer_pids[c.n_trainers - 1], 60), 0);
	lc_stop(&c);
	char *sl = read_file(out1, &len);
	ck_assert_ptr_nonnull(sl);
	ck_assert_uint_eq(summary_u64(sl, "resumed_at"), STEPS);
	ck_assert_uint_eq(summary_u64(sl, "steps"), STEPS);
	ck_assert_uint_eq(summary_u64(sl, "steps_run"), 0);
	ck_assert_msg(strstr(sl, "step ") != sl, "a progress line: %s", sl);
	free(sl);
	lc_path(&c, "trainer-1.log", path, sizeof(path));
	sl = read_file(path, &len);
	ck_assert_ptr_nonnull(sl);
	ck_assert_msg(strstr(sl,
	                  "the job is at version " STEPS_S
	                  ", its last step is " STEPS_S
	                  ": nothing left to train") != NULL,
	    "no nothing-left line in %s", path);
	free(sl);
	snprintf(wlate, sizeof(wlate), "%s/wlate1.bin", c.dir);
	snprintf(path, sizeof(path), "%s/w0.bin", c.dir);
	ck_assert_msg(same_bytes(path, wlate),
	    "a late rejoin does not hold the job's final weights");
	snprintf(out1, sizeof(out1), "%s", late); // the restarted one's

	// Both summaries: the job's steps and version; who resumed where.
	lc_path(&c, "trainer-0.out", path, sizeof(path));
	char *s0 = read_file(path, &len);
	char *s1 = read_file(out1, &len);
	ck_assert_ptr_nonnull(s0);
	ck_assert_ptr_nonnull(s1);
	unsigned long long at = summary_u64(s1, "resumed_at");
	ck_assert_uint_eq(summary_u64(s0, "steps"), STEPS);
	ck_assert_uint_eq(summary_u64(s0, "version"), STEPS);
	ck_assert_uint_eq(summary_u64(s0, "resumed_at"), 0);
	ck_assert_uint_eq(summary_u64(s0, "steps_run"), STEPS);
	ck_assert_uint_eq(summary_u64(s1, "steps"), STEPS);
	ck_assert_uint_eq(summary_u64(s1, "version"), STEPS);
	ck_assert_msg(at >= (unsigned long long) finished && at < STEPS,
	    "resumed at %llu, killed after step %d", at, finished);
	unsigned long long run = summary_u64(s1, "steps_run");
	free(s0);
	free(s1);

	// Its log says where it resumed; "behind the job" or "had already
	// closed this round" means the kill split a push (some shards had
	// it): that round's weights differ.
	char *log1 = read_file(log1p, &len);
	ck_assert_ptr_nonnull(log1);
	char want[96];
	snprintf(want, sizeof(want), "rank 1 resumes at version %llu: epoch 0",
	    at);
	ck_assert_msg(strstr(log1, want) != NULL, "no \"%s\" in %s", want,
	    log1p);
	int behind = strstr(log1, "behind the job") != NULL ||
	    strstr(log1, "had already closed this round") != NULL;
	free(log1);
	if (!behind) {
		ck_assert_uint_eq(run, STEPS - at);
	}

	// Its --step-times rows start at the step it resumed at.
	snprintf(path, sizeof(path), "%s/st1.csv", c.dir);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	char     line[128];
	unsigned first;
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	ck_assert_int_eq(fscanf(f, "%u,", &first), 1);
	ck_assert_uint_eq(first, at);
	fclose(f);

	// Both ranks hold the job's final weights.
	char w0[320], w1[320];
	snprintf(w0, sizeof(w0), "%s/w0.bin", c.dir);
	snprintf(w1, sizeof(w1), "%s/w1.bin", c.dir);
	ck_assert_msg(same_bytes(w0, w1),
	    "ranks 0 and 1 end with different "
	    "weights");
	if (overlap_flag != NULL) {
		// The restarted rank's first gradient is taken at the version
		// it pulled, not one behind as the dead one's would have been.
		return;
	}
	if (behind || at > (unsigned long long) finished + 1) {
		fprintf(stderr,
		    "resume: %s: weights not compared with the fault-free "
		    "run\n",
		    behind ? "the kill split a push"
		           : "a round finished without rank 1");
		return;
	}
	ck_assert_msg(same_bytes(w0, ref),
	    "the weights differ from the fault-free run (%s vs %s)", w0, ref);
}

START_TEST(test_resume_after_sigkill)
{
	overlap_flag = NULL;
	resume_after_sigkill();
}
END_TEST

// With --overlap 1 (one-step delayed weights) a restarted trainer resumes
// at the job's version too, runs only the steps left and ends with the
// job's weights.
START_TEST(test_resume_after_sigkill_overlap)
{
	overlap_flag = "--overlap=1";
	resume_after_sigkill();
}
END_TEST

static Suite *
suite_resume(void)
{
	Suite *s  = suite_create("resume");
	TCase *tc = tcase_create("sigkill");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_resume_after_sigkill);
	tcase_add_test(tc, test_resume_after_sigkill_overlap);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	if (!it_have_data()) {
		fprintf(stderr, "SKIP: Fashion-MNIST not found in %s\n",
		    it_data_dir());
		return 77;
	}
	SRunner *sr = srunner_create(suite_resume());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
