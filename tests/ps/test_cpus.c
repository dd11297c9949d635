// test_cpus.c — --cpus (ps/src/common/cpus.c): the lists it takes and
// refuses, what auto means for each role, and that a thread started after
// ps__cpus_apply runs only on the CPUs it chose (what nng's threads rely
// on: they are started after main applies it).
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpus.h"
#include "ps_tests.h"

// set_of fills *s with CPUs lo..hi.
static cpu_set_t
set_of(int lo, int hi)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	for (int c = lo; c <= hi; c++) {
		CPU_SET(c, &s);
	}
	return s;
}

START_TEST(test_cpus_parse)
{
	cpu_set_t allowed = set_of(0, 7), out;
	char      err[300], buf[64];

	// all, and auto for a server: every allowed CPU.
	ck_assert_int_eq(
	    ps__cpus_parse("all", 1, &allowed, 3, &out, err, sizeof(err)), 0);
	ck_assert(CPU_EQUAL(&out, &allowed));
	ck_assert_int_eq(
	    ps__cpus_parse("auto", 0, &allowed, 3, &out, err, sizeof(err)), 0);
	ck_assert(CPU_EQUAL(&out, &allowed));
	// auto for a scheduler: the CPU it runs on, or the first allowed.
	ck_assert_int_eq(
	    ps__cpus_parse("auto", 1, &allowed, 3, &out, err, sizeof(err)), 0);
	ck_assert_int_eq(CPU_COUNT(&out), 1);
	ck_assert(CPU_ISSET(3, &out));
	cpu_set_t high = set_of(4, 5);
	ck_assert_int_eq(
	    ps__cpus_parse("auto", 1, &high, 1, &out, err, sizeof(err)), 0);
	ck_assert_str_eq(ps__cpus_format(&out, buf, sizeof(buf)), "4");
	// A list, ranges and single CPUs, in any order.
	ck_assert_int_eq(
	    ps__cpus_parse("6,0-2,4", 1, &allowed, 3, &out, err, sizeof(err)),
	    0);
	ck_assert_str_eq(ps__cpus_format(&out, buf, sizeof(buf)), "0-2,4,6");
	// Refused, each with a message naming what was wrong.
	const char *bad[] = { "", "x", "1-", "-1", "3-1", "1,,2", "1 ,2",
		"0-99999", "2,", "auto,1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_msg(ps__cpus_parse(bad[i], 1, &allowed, 3, &out, err,
		                  sizeof(err)) == -1,
		    "--cpus=%s was taken", bad[i]);
		ck_assert_msg(strstr(err, "is not a CPU number or range") !=
		        NULL,
		    "--cpus=%s: %s", bad[i], err);
	}
	ck_assert_int_eq(
	    ps__cpus_parse("2,9", 1, &allowed, 3, &out, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err,
	                  "CPU 9 is not one this process may run on "
	                  "(allowed: 0-7)") != NULL,
	    "%s", err);
}
END_TEST

static void *
own_cpus(void *arg)
{
	cpu_set_t *s = arg;
	if (pthread_getaffinity_np(pthread_self(), sizeof(*s), s) != 0) {
		CPU_ZERO(s);
	}
	return NULL;
}

START_TEST(test_cpus_threads_inherit)
{
	cpu_set_t allowed;
	ck_assert_int_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	if (CPU_COUNT(&allowed) < 2) {
		return; // one CPU: auto and all are the same
	}
	// In a child, so that this process keeps its CPUs.
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char      err[300];
		cpu_set_t seen;
		pthread_t t;
		if (ps__cpus_apply("auto", 1, err, sizeof(err)) != 0 ||
		    pthread_create(&t, NULL, own_cpus, &seen) != 0 ||
		    pthread_join(t, NULL) != 0) {
			_exit(2);
		}
		// One CPU, and one the process was allowed.
		cpu_set_t both;
		CPU_AND(&both, &seen, &allowed);
		_exit(CPU_COUNT(&seen) == 1 && CPU_COUNT(&both) == 1 ? 0 : 1);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

Suite *
suite_cpus(void)
{
	Suite *s  = suite_create("cpus");
	TCase *tc = tcase_create("cpus");
	tcase_add_test(tc, test_cpus_parse);
	tcase_add_test(tc, test_cpus_threads_inherit);
	suite_add_tcase(s, tc);
	return s;
}
