// test_ssp.c — stale-synchronous parallel and sync quorums on an
// in-process cluster, trainers as threads using libferry: SSP with K = 0
// is sync bit for bit; SSP never serves a read staler than K (a property
// checked against the weights themselves, under random delays); a quorum
// round is exact SGD over the pushes it kept, and the late ones are
// refused and counted.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "cluster.h"
#include "fb/fb.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps_tests.h"
#include "pt.h"

// Steps of the longest run here.
#define MAX_STEPS 64

struct ssp_arg {
	const char           *url;
	int                   rank;
	int                   steps;
	int                   mode;
	uint32_t              staleness, quorum;
	const char           *codec_push, *codec_pull;
	// one_hot: rank r's gradient is 1 at element r of tensor 0 and 0
	// elsewhere, with lr 1 and one sample, so w[0][r] = -pushes of rank
	// r applied: a pull shows exactly which pushes it holds.
	int                   one_hot;
	unsigned              seed;     // random delays (0: none)
	unsigned              rng;      // rand_r's state, from seed
	int                   delay_us; // the longest delay before a push
	int                   leave;    // leave the job after the last step
	uint64_t              stop_at;  // > 0: stop once holding this version
	// Before its first push, wait until this rank has ended a step: with
	// a quorum of the others, the round it pushes into is closed then.
	const struct ssp_arg *after;
	// Before its first push, wait until this rank holds its first pull:
	// the round that rank pushes into is then the first one, whatever
	// the machine's load.
	const struct ssp_arg *pulled_first;
	atomic_int            steps_done; // push-pulls ended (kept or not)
	atomic_int            pulled;     // the first pull ended
	// Results.
	float                 w[NT][40];
	uint64_t              worst; // most clocks behind seen in the weights
	uint64_t              reported_max; // stats.staleness_max
	uint64_t bound_broken;        // reads that missed a push they needed
	uint64_t version;             // held at the end
	uint64_t pushed_v[MAX_STEPS]; // sync: version of each push
	int      kept[MAX_STEPS];     // ... and whether it was kept
	int      n_push, dropped;
	int      rv;
	char     err[256];
};

// one_hot_check compares the weights w0 (tensor 0) a trainer at clock c
// just pulled with what SSP promises: its own c pushes, and at least c - K
// of every other rank's (every push up to clock c-K-1).
static void
one_hot_check(struct ssp_arg *a, const float *w0, int trainers, uint64_t c)
{
	for (int r = 0; r < trainers; r++) {
		// w[0][r] starts at r (initial weights w[t][i] = i) and loses
		// 1 per applied push of rank r: exact in float.
		uint64_t applied = (uint64_t) ((float) r - w0[r]);
		if (r == a->rank && applied != c) {
			a->bound_broken++;
		}
		if (applied + a->staleness < c) {
			a->bound_broken++;
		}
		if (c > applied && c - applied > a->worst) {
			a->worst = c - applied;
		}
	}
}

// ssp_step is an ssp_arg's step (harness.h): the gradient of the version
// held (or one-hot), after a random delay; a push the quorum refused is
// counted and followed by a pull.
static int
ssp_step(struct pt_rank *base, ferry_client *c, int k, float *const *g,
    float *const *w)
{
	struct ssp_arg    *a = base->ctx;
	struct ferry_stats st;
	int                rv;

	if (k < 0) {
		rv = ferry_client_pull(c, w);
		atomic_store(&a->pulled, 1);
		return rv;
	}
	ferry_client_stats(c, &st);
	if (a->stop_at > 0 && st.version >= a->stop_at) {
		return PT_STOP;
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			g[t][i] = a->one_hot
			    ? (t == 0 && i == (size_t) a->rank)
			    : grad_for(a->rank, (int) st.version, t, i);
		}
	}
	if (a->delay_us > 0) {
		fb_sleep_us(rand_r(&a->rng) % (unsigned) a->delay_us);
	}
	while (a->pulled_first != NULL && a->n_push == 0 &&
	    atomic_load(&a->pulled_first->pulled) == 0) {
		fb_sleep_us(1000); // an event, whatever the machine's speed
	}
	while (a->after != NULL && a->n_push == 0 &&
	    atomic_load(&a->after->steps_done) == 0) {
		fb_sleep_us(1000); // an event, whatever the machine's speed
	}
	a->pushed_v[a->n_push] = st.version;
	rv = ferry_client_push_pull(c, (const float *const *) g,
	    a->one_hot ? 1 : 10, w);
	atomic_fetch_add(&a->steps_done, 1);
	if (rv == FERRY_EBEHIND) {
		// The quorum closed the round first: re-pull.
		a->dropped++;
		a->kept[a->n_push++] = 0;
		return ferry_client_pull(c, w);
	}
	if (rv != 0) {
		return rv;
	}
	a->kept[a->n_push++] = 1;
	if (a->one_hot) {
		one_hot_check(a, w[0], ferry_client_trainers(c),
		    (uint64_t) k + 1);
	}
	return 0;
}

// ssp_main trains one ssp_arg on the shared trainer thread (harness.h).
static void *
ssp_main(void *arg)
{
	struct ssp_arg *a = arg;
	struct pt_rank  r = {
		 .url          = a->url,
		 .rank         = a->rank,
		 .steps        = a->steps,
		 .mode         = a->mode,
		 .lr           = a->one_hot ? 1.0 : 0.5,
		 .codec_push   = a->codec_push,
		 .codec_pull   = a->codec_pull,
		 .staleness    = a->staleness,
		 .quorum       = a->quorum,
		 .leave_at_end = a->leave,
		 .step         = ssp_step,
		 .ctx          = a,
	};
	a->rng = a->seed;
	pt_rank_main(&r);
	atomic_store(&a->pulled, 1); // never leave a waiting rank hanging
	memcpy(a->w, r.w, sizeof(a->w));
	a->reported_max = r.stats.staleness_max;
	a->version      = r.stats.version;
	a->rv           = r.rv;
	snprintf(a->err, sizeof(a->err), "%s", r.err);
	return NULL;
}

// run_job trains n trainers (at most 4) described by a[] on a fresh
// cluster of `servers` servers and checks that each succeeded.
static void
run_job(struct ssp_arg *a, int n, int servers)
{
	struct cluster cl;
	pthread_t      th[4];
	cluster_open(&cl, n, servers, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < n; r++) {
		a[r].url  = ps_scheduler_url(cl.sched);
		a[r].rank = r;
		pthread_create(&th[r], NULL, ssp_main, &a[r]);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	cluster_stop(&cl);
}

// SSP with staleness 0 is sync, bit for bit: the same weights on every
// rank after the same steps, in fp32 and with codecs.
START_TEST(test_ssp_k0_equals_sync)
{
	static const char *codecs[][2] = { { "none", "none" },
		{ "q4", "q8" } };
	for (size_t c = 0; c < 2; c++) {
		struct ssp_arg s[2], p[2];
		memset(s, 0, sizeof(s));
		memset(p, 0, sizeof(p));
		for (int r = 0; r < 2; r++) {
			s[r].steps      = 12;
			s[r].mode       = FERRY_MODE_SYNC;
			s[r].codec_push = codecs[c][0];
			s[r].codec_pull = codecs[c][1];
			p[r]            = s[r];
			p[r].mode       = FERRY_MODE_SSP;
			p[r].staleness  = 0;
			p[r].seed       = 7u + (unsigned) r;
			p[r].delay_us   = r == 1 ? 3000 : 0;
		}
		run_job(s, 2, 2);
		run_job(p, 2, 2);
		for (int r = 0; r < 2; r++) {
			ck_assert_uint_eq(p[r].version, 12);
			ck_assert_uint_eq(p[r].reported_max, 0);
			for (int t = 0; t < NT; t++) {
				ck_assert_msg(memcmp(s[r].w[t], p[r].w[t],
				                  lens[t] * sizeof(float)) ==
				        0,
				    "%s/%s: rank %d tensor %d differs from sync",
				    codecs[c][0], codecs[c][1], r, t);
			}
		}
	}
}
END_TEST

// Property: under random delays (three trainers, one slower on average),
// no SSP read misses a push it needs (the pulled weights hold every push
// up to clock c-K-1 of every rank, and all of the reader's own), for K =
// 1, 2 and 4 and several seeds; reads do run ahead (the bound is used,
// so this is not sync), and the staleness libferry reports stays <= K.
START_TEST(test_ssp_never_staler_than_k)
{
	static const uint32_t ks[] = { 1, 2, 4 };
	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		for (unsigned seed = 1; seed <= 2; seed++) {
			struct ssp_arg a[3];
			uint64_t       worst = 0;
			memset(a, 0, sizeof(a));
			for (int r = 0; r < 3; r++) {
				a[r].steps     = 24;
				a[r].mode      = FERRY_MODE_SSP;
				a[r].staleness = ks[i];
				a[r].one_hot   = 1;
				a[r].seed      = seed * 31u + (unsigned) r;
				a[r].delay_us  = r == 2 ? 6000 : 2000;
				// Nobody's rounds wait for a trainer that is
				// done.
				a[r].leave = 1;
			}
			run_job(a, 3, 2);
			for (int r = 0; r < 3; r++) {
				ck_assert_msg(a[r].bound_broken == 0,
				    "K=%u seed %u rank %d: %llu reads missed a "
				    "push they needed",
				    ks[i], seed, r,
				    (unsigned long long) a[r].bound_broken);
				ck_assert_uint_le(a[r].worst, ks[i]);
				ck_assert_uint_le(a[r].reported_max, ks[i]);
				worst = a[r].worst > worst ? a[r].worst
				                           : worst;
			}
			ck_assert_msg(worst >= 1,
			    "K=%u: no read ran ahead of the slowest trainer",
			    ks[i]);
		}
	}
}
END_TEST

// replay_sync computes, in float as the server does, the weights after
// versions 0..v-1 of a sync job whose round u kept the pushes of the ranks
// with kept[u][r] (rank order, x -= (lr / samples) * sum).
static void
replay_sync(float x[NT][40], uint64_t v, int kept[][4], int n, int quorum)
{
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			x[t][i] = (float) i;
		}
	}
	for (uint64_t u = 0; u < v; u++) {
		int k = 0;
		for (int r = 0; r < n; r++) {
			k += kept[u][r];
		}
		ck_assert_msg(k >= quorum, "round %llu kept %d pushes",
		    (unsigned long long) u, k);
		float scale = (float) (0.5 / (double) (10 * k));
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				float sum = 0;
				int   j   = 0;
				for (int r = 0; r < n; r++) {
					if (!kept[u][r]) {
						continue;
					}
					float gr = grad_for(r, (int) u, t, i);
					sum      = j++ == 0 ? gr : sum + gr;
				}
				x[t][i] -= scale * sum;
			}
		}
	}
}

// --sync-quorum 2 of 3, one trainer slow: rounds close on their second
// push, the slow trainer's late pushes are refused (FERRY_EBEHIND, counted
// as dropped) and it re-pulls; every trainer's weights are exactly SGD
// over the pushes the rounds kept (bit for bit against a replay), and
// every round kept at least the quorum while all three were in the job.
START_TEST(test_ssp_quorum_exact_over_kept)
{
	struct ssp_arg a[3];
	int            kept[MAX_STEPS][4];
	int            dropped = 0;
	const uint64_t V       = 20;
	memset(a, 0, sizeof(a));
	memset(kept, 0, sizeof(kept));
	for (int r = 0; r < 3; r++) {
		a[r].steps    = MAX_STEPS;
		a[r].mode     = FERRY_MODE_SYNC;
		a[r].quorum   = 2;
		a[r].stop_at  = V;
		a[r].leave    = 1;
		a[r].seed     = 11u + (unsigned) r;
		a[r].delay_us = r == 2 ? 8000 : 0;
	}
	// The slow rank misses round 0 for certain: it holds version 0 before
	// the others push (else, on a loaded machine, they could end the job
	// before it pulls) and pushes once rank 0's round closed; it misses
	// later ones as its delays fall.
	a[0].pulled_first = &a[2];
	a[1].pulled_first = &a[2];
	a[2].after        = &a[0];
	// One server: a push is kept or refused whole.
	run_job(a, 3, 1);
	for (int r = 0; r < 3; r++) {
		ck_assert_uint_eq(a[r].version, V);
		dropped += a[r].dropped;
		for (int k = 0; k < a[r].n_push; k++) {
			if (a[r].kept[k]) {
				ck_assert_uint_lt(a[r].pushed_v[k], V);
				ck_assert_int_eq(kept[a[r].pushed_v[k]][r], 0);
				kept[a[r].pushed_v[k]][r] = 1;
			}
		}
	}
	ck_assert_msg(a[2].dropped >= 1,
	    "the slow trainer never missed a round (%d pushes)", a[2].n_push);
	// A refused push found its round closed by a quorum of others.
	for (int r = 0; r < 3; r++) {
		for (int k = 0; k < a[r].n_push; k++) {
			uint64_t v = a[r].pushed_v[k];
			if (!a[r].kept[k]) {
				dropped--;
				ck_assert_int_eq(kept[v][r], 0);
				ck_assert_int_ge(
				    kept[v][0] + kept[v][1] + kept[v][2], 2);
			}
		}
	}
	ck_assert_int_eq(dropped, 0);
	for (int r = 0; r < 3; r++) {
		float x[NT][40];
		replay_sync(x, a[r].version, kept, 3, 2);
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(x[t], a[r].w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "rank %d tensor %d is not SGD over the kept pushes",
			    r, t);
		}
	}
}
END_TEST

Suite *
suite_ssp(void)
{
	Suite *s  = suite_create("ssp");
	TCase *tc = tcase_create("ssp");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_ssp_k0_equals_sync);
	tcase_add_test(tc, test_ssp_never_staler_than_k);
	tcase_add_test(tc, test_ssp_quorum_exact_over_kept);
	suite_add_tcase(s, tc);
	return s;
}
