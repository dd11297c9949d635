// test_fragment.c — local-steps jobs (issue 28) against an in-process
// cluster: two trainers syncing F = 2 fragments in alternating fragment
// rounds (ferry_client_fragment_start/_wait, no codec and q8 with error
// feedback) end with weights bit-identical to a reference computed here,
// and the fragments' spans cover every element once; one trainer pushing
// pseudo-gradients under q4 and topk:0.05+q8 over outer rounds, with
// extra pulls in between, ends bit-identical to a reference that runs the
// compression library's own error-feedback encode and decode and the
// servers' SGD (the error feedback is exact across outer rounds); and the
// fragment calls' bad input gets clear errors.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "clients_tests.h"
#include "cluster.h"
#include "comp/comp.h"
#include "ferry/ferry.h"
#include "ps/ps.h"
#include "pt.h"

#define FROUNDS 7
#define FSAMPLES 6 // per push

// One trainer thread: the job's options, how it pushes, and what it ends
// with (its weights, the job's shards, fragment 0's and 1's spans).
struct ftr {
	const char        *url;
	int                rank;
	struct ferry_opts  o;
	int                extra_pulls; // a pull after every other round
	float              w[NT][40];
	struct ferry_shard shards[16];
	size_t             n_shards;
	uint32_t           bucket;
	struct ferry_span  spans[2][16];
	size_t             n_spans[2];
	int                rv;
	char               err[256];
};

// The fragment each round syncs (F = 2): not only alternating, so that a
// fragment runs two versions ahead of the other and back.
static const uint32_t fseq[FROUNDS] = { 0, 0, 1, 1, 1, 0, 1 };

// fgrad is rank r's pushed sum in round k: sizes vary by round so that
// the codecs leave residuals that matter.
static float
fgrad(int r, int k, int t, size_t i)
{
	float g = grad_for(r, k, t, i) * (k % 2 == 0 ? 1.0f : 0.37f);
	return (i + (size_t) k) % 3 == 0 ? -g : g;
}

// ftr_round runs round k: one fragment round (fseq[k]) in a fragments job,
// else a whole-model push-pull.
static int
ftr_round(ferry_client *c, struct ftr *a, int k, float *const *wp,
    const float *const *gp)
{
	uint32_t f = a->o.fragments;
	int      rv;
	if (f <= 1) {
		return ferry_client_push_pull(c, gp, FSAMPLES, wp);
	}
	if ((rv = ferry_client_fragment_start(c, fseq[k] % f, gp, FSAMPLES,
	         wp)) != FERRY_OK) {
		return rv;
	}
	return ferry_client_fragment_wait(c);
}

static void *
ftr_main(void *arg)
{
	struct ftr               *a     = arg;
	struct ferry_opts         o     = a->o;
	struct ferry_tensor_desc  d[NT] = { { "a", 40 }, { "b", 7 },
		 { "c", 1 } };
	ferry_client             *c     = NULL;
	const struct ferry_shard *sh;
	uint32_t                  codec;
	float                     g[NT][40];
	float                    *wp[NT], *gp[NT];

	o.scheduler_url = a->url;
	o.rank          = a->rank;
	o.timeout_ms    = 20000;
	for (int t = 0; t < NT; t++) {
		wp[t] = a->w[t];
		gp[t] = g[t];
		for (size_t i = 0; i < lens[t]; i++) {
			a->w[t][i] = (float) i * 0.25f - 2.0f;
		}
	}
	if ((a->rv = ferry_client_open(&o, &c)) != 0 ||
	    (a->rv = ferry_client_declare(c, d, NT)) != 0 ||
	    (a->rv = ferry_client_shards(c, &sh, &a->n_shards, &codec,
	         &a->bucket)) != 0) {
		goto out;
	}
	memcpy(a->shards, sh, a->n_shards * sizeof(*sh));
	for (uint32_t f = 0; o.fragments > 1 && f < 2; f++) {
		if ((a->rv = ferry_client_fragment_spans(c, f, a->spans[f], 16,
		         &a->n_spans[f])) != 0) {
			goto out;
		}
	}
	if ((a->rank == 0 &&
	        (a->rv = ferry_client_init_weights(c,
	             (const float *const *) wp)) != 0) ||
	    (a->rv = ferry_client_pull(c, wp)) != 0) {
		goto out;
	}
	for (int k = 0; k < FROUNDS; k++) {
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				g[t][i] = fgrad(a->rank, k, t, i);
			}
		}
		if ((a->rv = ftr_round(c, a, k, wp,
		         (const float *const *) gp)) != 0) {
			goto out;
		}
		if (a->extra_pulls && k % 2 == 0) {
			a->rv = o.fragments > 1 ? ferry_client_fragment_pull(c,
			                              (uint32_t) k % 2, wp)
			                        : ferry_client_pull(c, wp);
			if (a->rv != 0) {
				goto out;
			}
		}
	}
out:
	if (c != NULL) {
		snprintf(a->err, sizeof(a->err), "%s",
		    ferry_client_last_error(c));
	}
	ferry_client_close(c);
	return NULL;
}

// run_job trains `trainers` ranks of a sync local-steps job with options
// o on a fresh 2-server cluster; each must succeed.
static void
run_job(struct ftr *a, int trainers, const struct ferry_opts *o, int extra)
{
	struct cluster cl;
	pthread_t      th[2];
	cluster_open(&cl, trainers, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < trainers; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		a[r].url         = ps_scheduler_url(cl.sched);
		a[r].rank        = r;
		a[r].o           = *o;
		a[r].extra_pulls = extra;
		pthread_create(&th[r], NULL, ftr_main, &a[r]);
	}
	for (int r = 0; r < trainers; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	cluster_stop(&cl);
}

// reference replays the job on the host: each round, every shard of the
// round's fragment (every shard without fragments) takes each rank's push
// as the servers see it (the fp32 sum, or comp_ef_encode with that rank's
// residual, then comp_decode), sums the ranks in rank order and applies
// SGD as the servers do, x -= (float)(lr / samples) * sum, in float.
static void
reference(const struct ftr *a, int trainers, const char *spec, float x[NT][40])
{
	static float      e[2][NT][40];
	struct comp_codec cc;
	uint32_t          nf = a->o.fragments > 1 ? a->o.fragments : 1;
	double            lr = a->o.lr * a->o.inner_lr;
	float scale = (float) (lr * (1.0 / (double) (FSAMPLES * trainers)));
	ck_assert_int_eq(comp_codec_parse(spec, a->bucket, &cc), FB_OK);
	memset(e, 0, sizeof(e));
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			x[t][i] = (float) i * 0.25f - 2.0f;
		}
	}
	for (int k = 0; k < FROUNDS; k++) {
		for (size_t s = fseq[k] % nf; s < a->n_shards; s += nf) {
			const struct ferry_shard *sh = &a->shards[s];
			float                     d[2][40], g[40];
			uint8_t                   code[512];
			size_t                    len;
			uint64_t                  rng = 1;
			for (int r = 0; r < trainers; r++) {
				for (size_t i = 0; i < sh->len; i++) {
					g[i] = fgrad(r, k, (int) sh->tensor,
					    sh->offset + i);
				}
				if (cc.id == COMP_NONE) {
					memcpy(d[r], g, sh->len * 4);
					continue;
				}
				PT_OK(comp_ef_encode(&cc, g,
				    e[r][sh->tensor] + sh->offset, sh->len,
				    &rng, code, sizeof(code), &len));
				PT_OK(comp_decode(&cc, code, len, sh->len,
				    d[r]));
			}
			for (size_t i = 0; i < sh->len; i++) {
				float  sum = trainers == 2 ? d[0][i] + d[1][i]
				                           : d[0][i];
				float *xi  = &x[sh->tensor][sh->offset + i];
				*xi        = *xi - scale * sum;
			}
		}
	}
}

// same_as wants a's weights equal to x bit for bit.
static void
same_as(const struct ftr *a, float x[NT][40], const char *what)
{
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			ck_assert_msg(memcmp(&a->w[t][i], &x[t][i], 4) == 0,
			    "%s: rank %d tensor %d[%zu]: %.9g, reference %.9g",
			    what, a->rank, t, i, (double) a->w[t][i],
			    (double) x[t][i]);
		}
	}
}

// Two trainers syncing two fragments in fragment rounds (fseq) end
// with the reference's weights bit for bit, without a codec and with q8
// (error feedback per shard, moving only in its fragment's rounds); the
// fragments' spans are the shards i % 2 == f and cover every element
// once.
START_TEST(test_fragment_rounds_reference)
{
	static const char *codecs[] = { "none", "q8" };
	struct ftr         a[2];
	float              x[NT][40];
	for (size_t k = 0; k < 2; k++) {
		struct ferry_opts o = FERRY_OPTS_INIT;
		o.lr                = 1.0;
		o.local_steps       = 4;
		o.inner_lr          = 0.1;
		o.fragments         = 2;
		o.codec_push        = codecs[k];
		run_job(a, 2, &o, k == 1);
		reference(&a[0], 2, codecs[k], x);
		same_as(&a[0], x, codecs[k]);
		same_as(&a[1], x, codecs[k]);
	}
	// Coverage: every element in exactly one span of one fragment.
	int seen[NT][40];
	memset(seen, 0, sizeof(seen));
	ck_assert_uint_eq(a[0].n_spans[0] + a[0].n_spans[1], a[0].n_shards);
	for (int f = 0; f < 2; f++) {
		for (size_t s = 0; s < a[0].n_spans[f]; s++) {
			const struct ferry_span *sp = &a[0].spans[f][s];
			ck_assert_uint_lt(sp->tensor, NT);
			ck_assert_uint_le(sp->offset + sp->len,
			    lens[sp->tensor]);
			for (uint64_t i = 0; i < sp->len; i++) {
				seen[sp->tensor][sp->offset + i]++;
			}
		}
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			ck_assert_msg(seen[t][i] == 1, "tensor %d[%zu]: %d", t,
			    i, seen[t][i]);
		}
	}
}
END_TEST

// The error feedback is exact across outer rounds: one trainer pushing
// pseudo-gradients under q4 and topk:0.05+q8, with pulls between the
// rounds, ends with the weights of the compression library's own
// encode + error feedback + decode and SGD, bit for bit.
START_TEST(test_fragment_ef_exact_outer_rounds)
{
	static const char *codecs[] = { "q4", "topk:0.05+q8" };
	struct ftr         a[1];
	float              x[NT][40];
	for (size_t k = 0; k < 2; k++) {
		struct ferry_opts o = FERRY_OPTS_INIT;
		o.lr                = 0.5;
		o.local_steps       = 8;
		o.inner_lr          = 0.25;
		o.codec_push        = codecs[k];
		run_job(a, 1, &o, 1);
		reference(&a[0], 1, codecs[k], x);
		same_as(&a[0], x, codecs[k]);
	}
}
END_TEST

// The fragment calls' bad input: in a job without fragments (ESTATE),
// f >= F, NULL outputs, a second start, a wait with none in flight, a
// whole-model step after the first pull, too small a span array.
START_TEST(test_fragment_bad_input)
{
	struct cluster           cl;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[NT] = { { "a", 40 }, { "b", 7 },
		{ "c", 1 } };
	ferry_client            *c;
	float                    w[NT][40], g[NT][40];
	float                   *wp[NT] = { w[0], w[1], w[2] };
	const float             *gp[NT] = { g[0], g[1], g[2] };
	struct ferry_span        sp[4];
	size_t                   n;

	memset(g, 0, sizeof(g));
	memset(w, 0, sizeof(w));
	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.timeout_ms    = 5000;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_fragment_spans(c, 0, sp, 4, &n),
	    FERRY_ESTATE); // not declared
	ck_assert_int_eq(ferry_client_declare(c, d, NT), FERRY_OK);
	ck_assert_int_eq(ferry_client_fragment_spans(c, 0, sp, 4, &n),
	    FERRY_ESTATE);
	ck_assert_msg(strstr(ferry_client_last_error(c), "no fragments"), "%s",
	    ferry_client_last_error(c));
	ck_assert_int_eq(ferry_client_fragment_start(c, 0, gp, 1, wp),
	    FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_fragment_pull(c, 0, wp), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_fragment_wait(c), FERRY_ESTATE);
	ferry_client_close(c);
	cluster_stop(&cl);

	cluster_open(&cl, 1, 1, PS_PLACEMENT_UNIFORM);
	o.scheduler_url = ps_scheduler_url(cl.sched);
	o.local_steps   = 4;
	o.inner_lr      = 0.1;
	o.fragments     = 2;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_declare(c, d, NT), FERRY_OK);
	ck_assert_int_eq(ferry_client_fragment_spans(c, 2, sp, 4, &n),
	    FERRY_EINVAL);
	ck_assert_msg(strstr(ferry_client_last_error(c), "fragment 2"), "%s",
	    ferry_client_last_error(c));
	ck_assert_int_eq(ferry_client_fragment_spans(c, 0, sp, 4, NULL),
	    FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_fragment_spans(c, 0, sp, 1, &n),
	    FERRY_EINVAL); // 3 spans, room for 1
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(ferry_client_fragment_spans(c, 1, sp, 4, &n),
	    FERRY_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(ferry_client_fragment_start(c, 2, gp, 1, wp),
	    FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_fragment_start(c, 0, NULL, 1, wp),
	    FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_fragment_start(c, 0, gp, 0, wp),
	    FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_fragment_wait(c), FERRY_ESTATE);
	ck_assert_msg(strstr(ferry_client_last_error(c), "no fragment round"),
	    "%s", ferry_client_last_error(c));
	// The first pull brings every shard at version 0.
	ck_assert_int_eq(
	    ferry_client_init_weights(c, (const float *const *) wp), FERRY_OK);
	ck_assert_int_eq(ferry_client_pull(c, wp), FERRY_OK);
	ck_assert_int_eq(ferry_client_push_pull(c, gp, 1, wp), FERRY_ESTATE);
	ck_assert_msg(strstr(ferry_client_last_error(c), "fragment"), "%s",
	    ferry_client_last_error(c));
	ck_assert_int_eq(ferry_client_pull(c, wp), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_push(c, gp, 1), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_push_pull_start(c, gp, 1, wp, 0, 1),
	    FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_fragment_start(c, 1, gp, 1, wp),
	    FERRY_OK);
	ck_assert_int_eq(ferry_client_fragment_start(c, 0, gp, 1, wp),
	    FERRY_ESTATE);
	ck_assert_msg(strstr(ferry_client_last_error(c), "in flight"), "%s",
	    ferry_client_last_error(c));
	ck_assert_int_eq(ferry_client_fragment_pull(c, 0, wp), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_fragment_wait(c), FERRY_OK);
	ck_assert_int_eq(ferry_client_fragment_wait(c), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_fragment_pull(c, 0, wp), FERRY_OK);
	ferry_client_close(c);
	cluster_stop(&cl);
}
END_TEST

Suite *
suite_fragment(void)
{
	Suite *s  = suite_create("fragment");
	TCase *tc = tcase_create("fragment");
	tcase_set_timeout(tc, 120);
	tcase_set_tags(tc, "cluster");
	tcase_add_test(tc, test_fragment_rounds_reference);
	tcase_add_test(tc, test_fragment_ef_exact_outer_rounds);
	tcase_add_test(tc, test_fragment_bad_input);
	suite_add_tcase(s, tc);
	return s;
}
