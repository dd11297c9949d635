// test_cpus.c — --cpus (ps/src/common/cpus.c): the lists it takes and
// refuses, what auto means for each role, and that a thread started after
// ps__cpus_apply runs only on the CPUs it chose (what nng's threads rely
// on: they are started after main applies it).
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
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

struct seen {
	cpu_set_t cpus;
	int       policy;
};

static void *
own_cpus(void *arg)
{
	struct seen       *s = arg;
	struct sched_param p;
	if (pthread_getaffinity_np(pthread_self(), sizeof(s->cpus),
	        &s->cpus) != 0) {
		CPU_ZERO(&s->cpus);
	}
	if (pthread_getschedparam(pthread_self(), &s->policy, &p) != 0) {
		s->policy = -1;
	}
	return NULL;
}

// apply_in_child applies spec in a child process (this one keeps its CPUs
// and policy), starts a thread there and exits 0 when that thread runs on
// want_cpus CPUs (0: every allowed one) under policy want_policy.
static int
apply_in_child(const char *spec, int is_scheduler, int want_cpus,
    int want_policy)
{
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		char        err[300];
		struct seen seen;
		pthread_t   t;
		if (ps__cpus_apply(spec, is_scheduler, err, sizeof(err)) !=
		        0 ||
		    pthread_create(&t, NULL, own_cpus, &seen) != 0 ||
		    pthread_join(t, NULL) != 0) {
			_exit(2);
		}
		cpu_set_t both;
		CPU_AND(&both, &seen.cpus, &allowed);
		int n = want_cpus ? want_cpus : CPU_COUNT(&allowed);
		_exit(CPU_COUNT(&seen.cpus) == n && CPU_COUNT(&both) == n &&
		            seen.policy == want_policy
		        ? 0
		        : 1);
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) {
		return -1;
	}
	return WEXITSTATUS(st);
}

START_TEST(test_cpus_threads_inherit)
{
	cpu_set_t allowed;
	ck_assert_int_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	// A scheduler's auto: one allowed CPU, batch scheduling.
	ck_assert_int_eq(apply_in_child("auto", 1, 1, SCHED_BATCH), 0);
	// A server's auto, and all: every CPU, the default policy.
	ck_assert_int_eq(apply_in_child("auto", 0, 0, SCHED_OTHER), 0);
	ck_assert_int_eq(apply_in_child("all", 1, 0, SCHED_OTHER), 0);
	// A list: those CPUs, the default policy.
	char one[16];
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (CPU_ISSET(c, &allowed)) {
			snprintf(one, sizeof(one), "%d", c);
			break;
		}
	}
	ck_assert_int_eq(apply_in_child(one, 1, 1, SCHED_OTHER), 0);
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
