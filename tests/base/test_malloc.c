// test_malloc.c — fb_malloc_tune: with it, a thread that keeps
// allocating, writing and freeing a round's worth of 1 MiB message blocks
// reuses the same pages (no page faults after the first round); without
// it, glibc gives the blocks back and faults them in again every round
// (shown in the message, not asserted: that is glibc's behaviour, not
// ours). Each case runs in a child process, whose allocator settings die
// with it. Fails if the tuned rounds fault 64 pages or more.
#define _GNU_SOURCE // RUSAGE_THREAD
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base_tests.h"
#include "pt.h"

#define BLOCK ((1u << 20) + 256u) // a 1 MiB request and its header
#define BLOCKS 4                  // in flight at once (4 trainers)
#define ROUNDS 50

// rounds runs ROUNDS rounds of BLOCKS blocks on its own thread (a thread
// arena, as nng's receive threads use) and returns the minor page faults
// of all but the first round (which may fault the arena in).
static void *
rounds(void *arg)
{
	long         *faults = arg;
	struct rusage a, b;
	void         *p[BLOCKS];
	for (int r = 0; r < ROUNDS; r++) {
		if (r == 1) {
			getrusage(RUSAGE_THREAD, &a);
		}
		for (int i = 0; i < BLOCKS; i++) {
			p[i] = malloc(BLOCK);
			if (p[i] == NULL) {
				*faults = -1;
				return NULL;
			}
			memset(p[i], r + i, BLOCK);
		}
		for (int i = 0; i < BLOCKS; i++) {
			free(p[i]);
		}
	}
	getrusage(RUSAGE_THREAD, &b);
	*faults = b.ru_minflt - a.ru_minflt;
	return NULL;
}

// child_faults forks a child that tunes (or not) and runs rounds; the
// child exits with 0-250: faults / 64 capped (255: no thread, 254: tune
// asked for but not applied). Returns the exit status.
static int
child_faults(int tune)
{
	int   st  = 0;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		pthread_t t;
		long      faults = 0;
		if (tune && fb_malloc_tune() != 1) {
			_exit(254);
		}
		if (pthread_create(&t, NULL, rounds, &faults) != 0) {
			_exit(255);
		}
		pthread_join(t, NULL);
		_exit(faults < 0            ? 255
		        : faults / 64 > 250 ? 250
		                            : faults / 64);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

START_TEST(test_malloc_tune_reuses_blocks)
{
	int tuned = child_faults(1);
	if (tuned == 254) {
		// Not glibc, a sanitizer's allocator, or GLIBC_TUNABLES set:
		// nothing to check here.
		return;
	}
	int plain = child_faults(0);
	ck_assert_int_ne(tuned, 255);
	// ROUNDS - 1 rounds of BLOCKS x 257 pages: 12,593 faults or more
	// untuned, when glibc returns every round's blocks; under 64 tuned.
	ck_assert_msg(tuned == 0,
	    "tuned: about %d x 64 page faults in %d rounds (untuned: %d x 64)",
	    tuned, ROUNDS - 1, plain);
}
END_TEST

Suite *
suite_malloc(void)
{
	Suite *s  = suite_create("malloc");
	TCase *tc = tcase_create("tune");
	tcase_add_test(tc, test_malloc_tune_reuses_blocks);
	suite_add_tcase(s, tc);
	return s;
}
