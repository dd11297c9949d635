// test_spotcheck.c — spot checks end to end (issue 31): a signed sync job
// of 3 trainers on 2 servers keeps half the pushes for verification
// (--spot-check 0.5); rank 2 adds Gaussian noise to a fifth of its pushes
// (--attack noise, allowed by --allow-attacks 1) and a verifier (trainer
// --verify 1, signed as the operator) recomputes every kept push. The
// attacker's first falsified kept push is a mismatch, and the scheduler
// quarantines it; every verdict on the honest ranks is a match, they are
// never quarantined and they finish the job, and the verifier stops by
// itself once every rank is gone. Every wait has a deadline.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

START_TEST(test_spotcheck_catches_attacker)
{
	struct lc c;
	char      key[64] = "/tmp/ferry-key-XXXXXX", sf[96], data[300];
	char      slog[300], vlog[300], vout[300], out[300];
	int       fd = mkstemp(key);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "spot check test key 0123456789", 30), 30);
	close(fd);
	snprintf(sf, sizeof(sf), "--secret-file=%s", key);
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	const char *sflags[] = { sf, "--heartbeat-ms=200", "--spot-check=0.5",
		"--allow-attacks=1", NULL };
	lc_start(&c, 3, 2, sflags);
	// The verifier first: it waits for the job's map.
	const char *vflags[] = { "--verify=1", data, "--seed=1", "--batch=32",
		sf, NULL };
	lc_trainer_any(&c, 0, vflags);
	for (int r = 0; r < 3; r++) {
		const char *flags[] = { data, "--seed=1", "--batch=32",
			"--max-steps=120", "--log-interval=0", sf, NULL, NULL,
			NULL };
		if (r == 2) {
			flags[6] = "--attack=noise:0.1";
			flags[7] = "--attack-rate=0.2";
		}
		lc_trainer(&c, r, flags);
	}
	lc_path(&c, "scheduler.log", slog, sizeof(slog));
	wait_for(slog, "trainer rank 2 quarantined", 240000);
	// Every process ends by itself: the honest ranks at their last
	// step, the attacker refused, the verifier once every rank is gone.
	int ok = lc_wait_trainers(&c, 300);
	lc_path(&c, "joiner-0.log", vlog, sizeof(vlog));
	lc_path(&c, "joiner-0.out", vout, sizeof(vout));
	ck_assert_msg(lc_summary_value(vout, "mismatches") >= 1,
	    "the verifier saw no mismatch (%s)", c.dir);
	ck_assert_msg(lc_summary_value(vout, "verified") >
	        lc_summary_value(vout, "mismatches"),
	    "the verifier verified no honest push (%s)", c.dir);
	ck_assert_msg(file_has(vlog, "rank 2's push at version "),
	    "no mismatch of rank 2 logged in %s", vlog);
	for (int r = 0; r < 2; r++) {
		char who[64];
		snprintf(who, sizeof(who), "trainer rank %d quarantined", r);
		ck_assert_msg(!file_has(slog, who), "%s (%s)", who, slog);
		snprintf(who, sizeof(who), "rank %d's push at version ", r);
		ck_assert_msg(!file_has(vlog, who), "%s mismatch (%s)", who,
		    vlog);
		snprintf(who, sizeof(who), "trainer-%d.out", r);
		lc_path(&c, who, out, sizeof(out));
		ck_assert_msg(lc_summary_value(out, "steps") == 120,
		    "rank %d did not finish the job (%s)", r, c.dir);
	}
	ck_assert_msg(ok == 3,
	    "%d of 4 processes exited 0; the attacker "
	    "alone should fail (%s)",
	    ok, c.dir);
	lc_stop(&c);
	unlink(key);
}
END_TEST

static Suite *
suite_spotcheck(void)
{
	Suite *s  = suite_create("spotcheck");
	TCase *tc = tcase_create("job");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_spotcheck_catches_attacker);
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
	SRunner *sr = srunner_create(suite_spotcheck());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
