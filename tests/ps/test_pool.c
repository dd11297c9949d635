// test_pool.c — a server's memory per job (issue 30), against live
// in-process jobs: sync staging slots come from a pool of chunks that a
// round gives back when it closes (stats: stage_chunks, stage_held), so
// many rounds allocate nothing more and a lent fp32 push-pull takes none;
// and the pull codec's delta log is as deep as a byte budget allows
// (stats: delta_log), a trainer further behind getting the full
// reference, the same floats as the deltas.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"

// Pool jobs: one tensor of SHARDS shards of 16 floats (64 bytes) each.
#define SHARDS 8
#define LEN (16 * SHARDS)
#define MAX_T 8

// One sync trainer: opens, declares, offers (rank 0), pulls, then
// `steps` times pushes (push-pull, or Push then Pull when split) with
// codec `push`.
struct trainer {
	const char   *url, *push;
	int           rank, steps, split, rv;
	float         w[LEN];
	char          err[256];
	ferry_client *c;
};

static void *
trainer_main(void *arg)
{
	struct trainer          *t = arg;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d = { "a", LEN };
	float                    g[LEN];
	const float             *gp[1] = { g };
	float                   *wp[1] = { t->w };
	o.scheduler_url                = t->url;
	o.rank                         = t->rank;
	o.lr                           = 0.5;
	o.mode                         = FERRY_MODE_SYNC;
	o.timeout_ms                   = 20000;
	o.codec_push                   = t->push;
	for (int i = 0; i < LEN; i++) {
		t->w[i] = (float) i;
		g[i]    = 0.25f * (float) ((t->rank + i) % 5);
	}
	if ((t->rv = ferry_client_open(&o, &t->c)) != 0 ||
	    (t->rv = ferry_client_declare(t->c, &d, 1)) != 0 ||
	    (t->rank == 0 &&
	        (t->rv = ferry_client_init_weights(t->c,
	             (const float *const *) wp)) != 0) ||
	    (t->rv = ferry_client_pull(t->c, wp)) != 0) {
		goto out;
	}
	for (int k = 0; k < t->steps && t->rv == 0; k++) {
		if (t->split) {
			if ((t->rv = ferry_client_push(t->c, gp, 1)) == 0) {
				t->rv = ferry_client_pull(t->c, wp);
			}
		} else {
			t->rv = ferry_client_push_pull(t->c, gp, 1, wp);
		}
	}
out:
	if (t->rv != 0) {
		snprintf(t->err, sizeof(t->err), "%s",
		    t->c ? ferry_client_last_error(t->c) : "open");
	}
	return NULL;
}

// run_trainers runs n trainers of `steps` steps on job j and checks that
// every one succeeded and all hold the same weights.
static void
run_trainers(struct one_server *j, struct trainer *t, int n, int steps,
    const char *push, int split)
{
	pthread_t th[MAX_T];
	for (int r = 0; r < n; r++) {
		memset(&t[r], 0, sizeof(t[r]));
		t[r].url   = ps_scheduler_url(j->sched);
		t[r].rank  = r;
		t[r].steps = steps;
		t[r].push  = push;
		t[r].split = split;
		ck_assert_int_eq(
		    pthread_create(&th[r], NULL, trainer_main, &t[r]), 0);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
	}
	for (int r = 0; r < n; r++) {
		ck_assert_msg(t[r].rv == 0, "rank %d: %s", r, t[r].err);
		ck_assert_msg(memcmp(t[r].w, t[0].w, sizeof(t[0].w)) == 0,
		    "rank %d's weights differ from rank 0's", r);
	}
	for (int r = 0; r < n; r++) {
		ferry_client_close(t[r].c);
	}
}

// Compressed pushes (q8) and plain fp32 Pushes are staged: their chunks
// come back when each round closes, so 40 rounds of T trainers hold at
// most the T x SHARDS chunks of one round (before issue 30: T x SHARDS
// slots per shard for the shard's life; a chunk kept by a round would
// add T x SHARDS per round), and none is held once the rounds are over.
START_TEST(test_pool_chunks_come_back)
{
	enum { T = 4, STEPS = 40 };
	static const char *push[] = { "q8", "none" };
	for (int k = 0; k < 2; k++) {
		struct one_server j;
		struct trainer    t[T];
		one_server_open(&j, T, 64, 0);
		run_trainers(&j, t, T, STEPS, push[k], k == 1);
		ck_assert_uint_eq(server_stat(j.srv, "updates_applied"),
		    STEPS * SHARDS);
		unsigned long long chunks = server_stat(j.srv, "stage_chunks");
		ck_assert_msg(chunks >= 1 && chunks <= T * SHARDS,
		    "%s: %llu stage chunks for %d trainers x %d shards",
		    push[k], chunks, T, SHARDS);
		ck_assert_uint_eq(server_stat(j.srv, "stage_held"), 0);
		one_server_close(&j);
	}
}
END_TEST

// fp32 push-pulls lend their gradients to their rounds (push.c's
// BORROWING): they take no chunk at all.
START_TEST(test_pool_lent_pushes_take_no_chunk)
{
	enum { T = 3, STEPS = 10 };
	struct one_server j;
	struct trainer    t[T];
	one_server_open(&j, T, 64, 0);
	run_trainers(&j, t, T, STEPS, "none", 0);
	ck_assert_uint_eq(server_stat(j.srv, "updates_applied"),
	    STEPS * SHARDS);
	ck_assert_uint_eq(server_stat(j.srv, "stage_chunks"), 0);
	one_server_close(&j);
}
END_TEST

// The delta log's depth is the most entries whose codes fit in a quarter
// of the shard's fp32 bytes, at least one, at most 4: q8 and fp16 keep one,
// q2 three, sign four.
// With one, a trainer one version behind gets the delta, and one five
// versions behind the full reference: both end with the weights of the
// trainer that pushed, bit for bit. Before issue 30 every job kept 4.
#define DLEN 4096

struct async_trainer {
	ferry_client *c;
	const char   *url, *pull;
	int           rank, rv;
	char          err[256];
	float         w[DLEN];
};

// async_open opens rank a->rank's client (rank 0 offers a->w) and pulls
// into a->w; a->rv: 0 or the error (a->err). Every rank of the job must
// open at once (the map waits for all of them).
static void *
async_open(void *arg)
{
	struct async_trainer    *a     = arg;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d     = { "d", DLEN };
	float                   *wp[1] = { a->w };
	o.scheduler_url                = a->url;
	o.rank                         = a->rank;
	o.lr                           = 0.5;
	o.mode                         = FERRY_MODE_ASYNC;
	o.timeout_ms                   = 20000;
	o.codec_pull                   = a->pull;
	for (int i = 0; i < DLEN; i++) {
		a->w[i] = (float) (i % 97) * 0.125f;
	}
	if ((a->rv = ferry_client_open(&o, &a->c)) != 0 ||
	    (a->rv = ferry_client_declare(a->c, &d, 1)) != 0 ||
	    (a->rank == 0 &&
	        (a->rv = ferry_client_init_weights(a->c,
	             (const float *const *) wp)) != 0) ||
	    (a->rv = ferry_client_pull(a->c, wp)) != 0) {
		snprintf(a->err, sizeof(a->err), "%s",
		    a->c ? ferry_client_last_error(a->c) : "open");
	}
	return NULL;
}

// pull_bytes pulls a's weights and returns the bytes the server sent.
static unsigned long long
pull_bytes(struct one_server *j, struct async_trainer *a)
{
	float             *wp[1] = { a->w };
	unsigned long long b0    = server_stat(j->srv, "bytes_out");
	PT_OK(ferry_client_pull(a->c, wp));
	return server_stat(j->srv, "bytes_out") - b0;
}

START_TEST(test_pool_delta_log_depth_from_budget)
{
	static const struct {
		const char *pull;
		unsigned    depth;
	} cases[] = { { "q8", 1 }, { "fp16", 1 }, { "q2", 3 }, { "sign", 4 } };
	float        g[DLEN];
	const float *gp[1] = { g };
	for (int i = 0; i < DLEN; i++) {
		g[i] = (float) ((i % 7) - 3);
	}
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct one_server     j;
		struct async_trainer *a = calloc(2, sizeof(*a));
		ck_assert_ptr_nonnull(a);
		one_server_open(&j, 2, DLEN * 4, 0);
		pthread_t th;
		for (int r = 0; r < 2; r++) {
			a[r].url  = ps_scheduler_url(j.sched);
			a[r].pull = cases[k].pull;
			a[r].rank = r;
		}
		ck_assert_int_eq(pthread_create(&th, NULL, async_open, &a[1]),
		    0);
		async_open(&a[0]);
		pthread_join(th, NULL);
		for (int r = 0; r < 2; r++) {
			ck_assert_msg(a[r].rv == 0, "rank %d: %s", r,
			    a[r].err);
		}
		ck_assert_uint_eq(server_stat(j.srv, "delta_log"),
		    cases[k].depth);
		// Rank 1 behind by `behind` versions, past the log and in it.
		for (int behind = 5; behind >= 1; behind -= 4) {
			float *wp[1] = { a[0].w };
			for (int s = 0; s < behind; s++) {
				PT_OK(
				    ferry_client_push_pull(a[0].c, gp, 1, wp));
			}
			unsigned long long b = pull_bytes(&j, &a[1]);
			if (behind > (int) cases[k].depth) {
				ck_assert_msg(b >= DLEN * 4,
				    "%s: %d behind: %llu bytes, not the full "
				    "reference",
				    cases[k].pull, behind, b);
			} else {
				ck_assert_msg(b < DLEN * 4,
				    "%s: %d behind: %llu bytes, not a delta",
				    cases[k].pull, behind, b);
			}
			ck_assert_msg(memcmp(a[0].w, a[1].w, sizeof(a[0].w)) ==
			        0,
			    "%s: %d behind: weights differ", cases[k].pull,
			    behind);
		}
		ferry_client_close(a[0].c);
		ferry_client_close(a[1].c);
		free(a);
		one_server_close(&j);
	}
}
END_TEST

Suite *
suite_pool(void)
{
	Suite *s  = suite_create("pool");
	TCase *tc = tcase_create("pool");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_pool_chunks_come_back);
	tcase_add_test(tc, test_pool_lent_pushes_take_no_chunk);
	tcase_add_test(tc, test_pool_delta_log_depth_from_budget);
	suite_add_tcase(s, tc);
	return s;
}
