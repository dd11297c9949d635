// test_exit.c — fb_exit_watchdog: a process whose teardown hangs past the
// grace ends with the status it was armed with (the first arming wins),
// and one that exits in time keeps its own status.
#include <sys/wait.h>
#include <unistd.h>

#include "base_tests.h"
#include "pt.h"

// child_status forks a child that arms the watchdog (1 s, code 7; then 1
// s, code 9, which must be ignored) and, with hang, sleeps 30 s (a hung
// teardown), else exits 0 at once. Returns its wait status; *took_ms is
// how long it lived.
static int
child_status(int hang, uint64_t *took_ms)
{
	uint64_t t0  = fb_clock_ms();
	pid_t    pid = fork();
	int      st  = 0;
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		fb_exit_watchdog(1, 7, "test teardown");
		fb_exit_watchdog(1, 9, "a second arming");
		if (hang) {
			fb_sleep_us(30u * 1000000u);
		}
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	*took_ms = fb_clock_ms() - t0;
	return st;
}

START_TEST(test_exit_watchdog_ends_a_hung_teardown)
{
	uint64_t ms;
	int      st = child_status(1, &ms);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 7);
	ck_assert_msg(ms >= 900 && ms < 10000, "lived %llu ms",
	    (unsigned long long) ms);
	st = child_status(0, &ms);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

Suite *
suite_exit(void)
{
	Suite *s  = suite_create("exit");
	TCase *tc = tcase_create("exit");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_exit_watchdog_ends_a_hung_teardown);
	suite_add_tcase(s, tc);
	return s;
}
