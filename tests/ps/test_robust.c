// test_robust.c — robust aggregation (issue 31, ps-server --aggregate):
// each kernel of ps/src/server/robust.h against a plain reference on
// random pushes (exact floats; k odd and even; pushes as aligned floats
// and as unaligned payload bytes; raw sums and per-sample means), the
// outlier rule on a planted outlier, cclip's worker momentum over rounds
// (BETA 0 is the single-iteration rule bit for bit; BETA 0.9 with a rank
// absent from a round and a rank that joins late), and live in-process jobs: a
// median job over identical pushes ends with a mean job's weights bit for bit,
// and a median job with one trainer pushing huge values follows the
// honest median, not the mean, and counts that trainer's outliers.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "pt.h"
#include "robust.h"
#include "scrape.h"

#define MAX_K 19
#define N 1000 // not a multiple of PS_AGG_BLOCK

// One round of k pushes: even pushes are aligned floats (staging slots),
// odd ones unaligned bytes (borrowed payloads).
struct round {
	uint32_t    k;
	float       f[MAX_K][N];
	uint8_t     bytes[MAX_K][4 * N + 1];
	const void *v[MAX_K];
	float       div[MAX_K];
};

// rnd is a small deterministic generator (xorshift) in [-1, 1).
static float
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (float) ((double) (*s >> 11) / 9007199254740992.0 * 2 - 1);
}

static void
round_fill(struct round *r, uint32_t k, uint64_t seed)
{
	r->k = k;
	for (uint32_t j = 0; j < k; j++) {
		for (size_t i = 0; i < N; i++) {
			// Some ties: a coarse grid on a few coordinates.
			float x    = rnd(&seed) * 8;
			r->f[j][i] = i % 7 == 0 ? floorf(x) : x;
		}
		memcpy(r->bytes[j] + 1, r->f[j], 4 * N);
		r->v[j]   = j % 2 == 0 ? (const void *) r->f[j]
		                       : (const void *) (r->bytes[j] + 1);
		r->div[j] = (float) (1 + j % 3);
	}
}

static int
cmp_f(const void *a, const void *b)
{
	float x = *(const float *) a, y = *(const float *) b;
	return (x > y) - (x < y);
}

// ref_coord is the reference of ps__agg_coord: sort each coordinate's
// values (qsort), then the median (lo + (hi - lo) / 2 for even k) or the
// mean of the k - 2b middle ones, summed in ascending order.
static void
ref_coord(const struct round *r, int per_sample, int trimmed, uint32_t b,
    float *out)
{
	float col[MAX_K];
	for (size_t i = 0; i < N; i++) {
		for (uint32_t j = 0; j < r->k; j++) {
			col[j] = per_sample ? r->f[j][i] / r->div[j]
			                    : r->f[j][i];
		}
		qsort(col, r->k, sizeof(float), cmp_f);
		uint32_t k = r->k;
		if (!trimmed || k <= 2 * b) {
			out[i] = k % 2 ? col[k / 2]
			               : col[k / 2 - 1] +
			        (col[k / 2] - col[k / 2 - 1]) / 2;
			continue;
		}
		float s = 0;
		for (uint32_t j = b; j < k - b; j++) {
			s += col[j];
		}
		out[i] = s / (float) (k - 2 * b);
	}
}

// same_bits fails unless a and b hold the same floats, bit for bit.
static void
same_bits(const float *a, const float *b, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++) {
		ck_assert_msg(memcmp(&a[i], &b[i], 4) == 0,
		    "%s: [%zu] %.9g != %.9g", what, i, (double) a[i],
		    (double) b[i]);
	}
}

// lanes_sum adds the PS_AGG_LANES float partial sums of a squared
// distance in the order robust.h documents.
static double
lanes_sum(const float *acc)
{
	double sum = 0;
	for (size_t l = 0; l < PS_AGG_LANES; l++) {
		sum += (double) acc[l];
	}
	return sum;
}

START_TEST(test_robust_median_trimmed_exact)
{
	static const uint32_t ks[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17,
		19 };
	static struct round   r;
	float                 got[N], want[N];
	float                 tmp[MAX_K * (PS_AGG_BLOCK + 1)];
	char                  what[64];
	for (size_t t = 0; t < sizeof(ks) / sizeof(ks[0]); t++) {
		round_fill(&r, ks[t], 0x9e3779b97f4a7c15ull + t);
		for (int ps = 0; ps < 2; ps++) {
			struct ps_agg_in   in  = { r.k, N, r.v,
                                ps ? r.div : NULL };
			struct ps_agg_rule med = { .kind = PS_AGG_MEDIAN };
			ck_assert_int_eq(ps__agg_coord(&med, &in, got, tmp),
			    0);
			ref_coord(&r, ps, 0, 0, want);
			snprintf(what, sizeof(what), "median k=%u div=%d", r.k,
			    ps);
			same_bits(got, want, N, what);
			for (uint32_t b = 1; b <= 2; b++) {
				struct ps_agg_rule tr = {
					.kind = PS_AGG_TRIMMED,
					.trim = b
				};
				int fb = ps__agg_coord(&tr, &in, got, tmp);
				ck_assert_int_eq(fb, r.k <= 2 * b);
				ref_coord(&r, ps, 1, b, want);
				snprintf(what, sizeof(what),
				    "trimmed:%u k=%u div=%d", b, r.k, ps);
				same_bits(got, want, N, what);
			}
		}
	}
}
END_TEST

START_TEST(test_robust_cclip_exact)
{
	static const uint32_t ks[] = { 3, 4, 5, 8 };
	static struct round   r;
	float                 prev[N], got[N], want[N], c[MAX_K];
	uint64_t              seed = 42;
	for (size_t i = 0; i < N; i++) {
		prev[i] = rnd(&seed);
	}
	for (size_t t = 0; t < sizeof(ks) / sizeof(ks[0]); t++) {
		round_fill(&r, ks[t], 7 + t);
		// One push at prev: distance 0, factor 1.
		memcpy(r.f[0], prev, sizeof(prev));
		r.div[0] = 1;
		for (int ps = 0; ps < 2; ps++) {
			struct ps_agg_in in  = { r.k, N, r.v,
                                ps ? r.div : NULL };
			float            tau = 20.0f;
			ps__agg_cclip(tau, &in, prev, got, c);
			// Reference: clip each push's difference to the
			// radius, average, add to prev.
			float cf[MAX_K];
			for (uint32_t j = 0; j < r.k; j++) {
				float acc[PS_AGG_LANES] = { 0 };
				for (size_t i = 0; i < N; i++) {
					float m = ps ? r.f[j][i] / r.div[j]
					             : r.f[j][i];
					float d = m - prev[i];
					acc[i % PS_AGG_LANES] += d * d;
				}
				double nn = lanes_sum(acc);
				double f  = nn > 0 ? tau / sqrt(nn) : 1;
				cf[j]     = f < 1 ? (float) f : 1.0f;
			}
			for (size_t i = 0; i < N; i++) {
				float acc = 0;
				for (uint32_t j = 0; j < r.k; j++) {
					float m = ps ? r.f[j][i] / r.div[j]
					             : r.f[j][i];
					acc += (m - prev[i]) * cf[j];
				}
				want[i] = prev[i] + acc / (float) r.k;
			}
			same_bits(got, want, N, "cclip");
			ck_assert(c[0] == 1.0f);
			ck_assert(ps || c[1] < 1.0f); // far: clipped
		}
	}
}
END_TEST

// ref_cclip is the reference of one centered-clipping iteration over the
// k rows val[j] (n floats) around prev: clip each difference to the
// radius (tau, or with rel tau x the median distance), average, add to
// prev.
static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return (x > y) - (x < y);
}

static void
ref_cclip(float tau, int rel, uint32_t k, float (*val)[N], const float *prev,
    float *out)
{
	float  cf[MAX_K];
	double dist[MAX_K], srt[MAX_K], t = tau;
	for (uint32_t j = 0; j < k; j++) {
		float acc[PS_AGG_LANES] = { 0 };
		for (size_t i = 0; i < N; i++) {
			float d = val[j][i] - prev[i];
			acc[i % PS_AGG_LANES] += d * d;
		}
		dist[j] = srt[j] = sqrt(lanes_sum(acc));
	}
	if (rel) { // TAU x the median distance
		qsort(srt, k, sizeof(double), cmp_d);
		t = tau *
		    (k % 2 ? srt[k / 2] : (srt[k / 2 - 1] + srt[k / 2]) / 2);
	}
	for (uint32_t j = 0; j < k; j++) {
		double f = dist[j] > 0 ? t / dist[j] : 1;
		cf[j]    = f < 1 ? (float) f : 1.0f;
	}
	for (size_t i = 0; i < N; i++) {
		float acc = 0;
		for (uint32_t j = 0; j < k; j++) {
			acc += (val[j][i] - prev[i]) * cf[j];
		}
		out[i] = prev[i] + acc / (float) k;
	}
}

// The ranks that push in each of 3 rounds (of 5 trainers): rank 2 sits
// out round 2 (its momentum stays), rank 4 first pushes in round 2 (its
// momentum starts at its push).
#define CC_T 5
static const uint32_t cc_ranks[3][CC_T] = { { 0, 1, 2, 3 }, { 0, 1, 3, 4 },
	{ 0, 1, 2, 3, 4 } };
static const uint32_t cc_k[3]           = { 4, 4, 5 };

// cc_push fills push j of round t from rank r (rank-dependent samples).
static void
cc_push(struct round *r, uint32_t j, uint32_t rank, uint32_t t)
{
	uint64_t seed = 1000 * (t + 1) + rank;
	for (size_t i = 0; i < N; i++) {
		r->f[j][i] = rnd(&seed) * 4 + (float) rank * 0.25f;
	}
	memcpy(r->bytes[j] + 1, r->f[j], 4 * N);
	r->v[j]   = j % 2 == 0 ? (const void *) r->f[j]
	                       : (const void *) (r->bytes[j] + 1);
	r->div[j] = (float) (1 + (rank + t) % 3);
}

START_TEST(test_robust_cclip_beta0)
{
	static struct round r;
	static float        val[MAX_K][N];
	float               prev[N] = { 0 }, rprev[N] = { 0 }, got[N], want[N];
	float               c[MAX_K];
	double              nn[2 * MAX_K];
	const void         *mv[MAX_K];
	struct ps_agg_cc    cc = { 3.0f, 0.0f, 0, prev, NULL, 0, NULL };
	for (uint32_t t = 0; t < 3; t++) {
		for (uint32_t j = 0; j < cc_k[t]; j++) {
			cc_push(&r, j, cc_ranks[t][j], t);
			for (size_t i = 0; i < N; i++) {
				val[j][i] = r.f[j][i] / r.div[j];
			}
		}
		struct ps_agg_in in = { cc_k[t], N, r.v, r.div };
		ps__agg_cclip_round(&cc, &in, cc_ranks[t], got, c, mv, nn);
		ref_cclip(cc.tau, 0, cc_k[t], val, rprev, want);
		same_bits(got, want, N, "cclip beta 0");
		same_bits(prev, want, N, "cclip beta 0 prev");
		memcpy(rprev, want, sizeof(want));
	}
}
END_TEST

START_TEST(test_robust_cclip_momentum)
{
	static struct round r;
	static float        mom[CC_T][1008], rmom[CC_T][N], val[MAX_K][N];
	float               prev[N], rprev[N], got[N], want[N];
	float               c[MAX_K];
	double              nn[2 * MAX_K];
	const void         *mv[MAX_K];
	uint8_t             init[CC_T], rinit[CC_T];
	const float         beta = 0.9f;
	ck_assert_uint_eq(ps__agg_cc_ld(N), 1008);
	for (int rel = 0; rel < 2; rel++) { // radius 3, then 1 x the median
		struct ps_agg_cc cc = { rel ? 1.0f : 3.0f, beta, rel, prev,
			&mom[0][0], 1008, init };
		memset(prev, 0, sizeof(prev));
		memset(rprev, 0, sizeof(rprev));
		memset(init, 0, sizeof(init));
		memset(rinit, 0, sizeof(rinit));
		for (uint32_t t = 0; t < 3; t++) {
			for (uint32_t j = 0; j < cc_k[t]; j++) {
				uint32_t rk = cc_ranks[t][j];
				cc_push(&r, j, rk, t);
				// Reference: the rank's momentum, as
				// documented.
				float w = (float) ((1.0 - (double) beta) /
				    r.div[j]);
				for (size_t i = 0; i < N; i++) {
					rmom[rk][i] = rinit[rk]
					    ? beta * rmom[rk][i] +
					        w * r.f[j][i]
					    : r.f[j][i] / r.div[j];
				}
				rinit[rk] = 1;
				memcpy(val[j], rmom[rk], sizeof(rmom[rk]));
			}
			struct ps_agg_in in = { cc_k[t], N, r.v, r.div };
			ps__agg_cclip_round(&cc, &in, cc_ranks[t], got, c, mv,
			    nn);
			ref_cclip(cc.tau, rel, cc_k[t], val, rprev, want);
			same_bits(got, want, N, "cclip momentum");
			same_bits(prev, want, N, "cclip momentum prev");
			memcpy(rprev, want, sizeof(want));
			for (uint32_t rk = 0; rk < CC_T; rk++) {
				ck_assert_int_eq(init[rk], rinit[rk]);
				if (rinit[rk]) {
					same_bits(mom[rk], rmom[rk], N,
					    "momentum");
				}
			}
			// Clipped: radius 3 is well below the pushes'
			// spread; at 1 x the median, the pushes above it.
			int below = 0, above = 0;
			for (uint32_t j = 0; j < cc_k[t]; j++) {
				below += c[j] == 1.0f;
				above += c[j] < 1.0f;
			}
			ck_assert(above > 0 && (rel ? below > 0 : 1));
		}
		// The momenta are not the pushes.
		ck_assert(r.f[0][0] / r.div[0] != mom[0][0]);
	}
}
END_TEST

START_TEST(test_robust_outlier_planted)
{
	static struct round r;
	float               agg[N], tmp[MAX_K * (PS_AGG_BLOCK + 1)];
	double              score[2 * MAX_K];
	uint8_t             flag[MAX_K];
	struct ps_agg_rule  med = { .kind = PS_AGG_MEDIAN };
	for (uint32_t k = 3; k <= MAX_K; k++) {
		round_fill(&r, k, 1000 + k);
		struct ps_agg_in in = { k, N, r.v, NULL };
		// Honest pushes only: nobody is 3x the median distance off.
		ps__agg_coord(&med, &in, agg, tmp);
		ck_assert_uint_eq(ps__agg_outliers(&in, agg, score, flag), 0);
		// One push scaled by 100 (unaligned when k - 1 is odd).
		uint32_t bad = k - 1;
		for (size_t i = 0; i < N; i++) {
			r.f[bad][i] *= 100;
		}
		memcpy(r.bytes[bad] + 1, r.f[bad], 4 * N);
		ps__agg_coord(&med, &in, agg, tmp);
		ck_assert_uint_eq(ps__agg_outliers(&in, agg, score, flag), 1);
		for (uint32_t j = 0; j < k; j++) {
			ck_assert_int_eq(flag[j], j == bad);
		}
	}
	// Two pushes: never scored.
	round_fill(&r, 2, 5);
	r.k                  = 2;
	struct ps_agg_in in2 = { 2, N, r.v, NULL };
	ck_assert_uint_eq(ps__agg_outliers(&in2, r.f[0], score, flag), 0);
}
END_TEST

START_TEST(test_robust_parse)
{
	struct ps_agg_rule r;
	char               why[160];
	ck_assert_int_eq(ps__agg_parse(NULL, &r, why, sizeof(why)), FB_OK);
	ck_assert_int_eq(r.kind, PS_AGG_MEAN);
	ck_assert_int_eq(ps__agg_parse("trimmed:2", &r, why, sizeof(why)),
	    FB_OK);
	ck_assert(r.kind == PS_AGG_TRIMMED && r.trim == 2);
	ck_assert_int_eq(ps__agg_parse("cclip:0.5", &r, why, sizeof(why)),
	    FB_OK);
	ck_assert(r.kind == PS_AGG_CCLIP && r.tau == 0.5f);
	ck_assert(r.beta == 0.95f); // the default momentum
	ck_assert_int_eq(ps__agg_parse("cclip:2:0", &r, why, sizeof(why)),
	    FB_OK);
	ck_assert(r.kind == PS_AGG_CCLIP && r.tau == 2 && r.beta == 0);
	ck_assert_int_eq(ps__agg_parse("cclip:2:0.99", &r, why, sizeof(why)),
	    FB_OK);
	ck_assert(r.beta == 0.99f && !r.rel);
	ck_assert_int_eq(
	    ps__agg_parse("cclip:1.5x:0.95", &r, why, sizeof(why)), FB_OK);
	ck_assert(r.tau == 1.5f && r.beta == 0.95f && r.rel);
	static const char *bad[] = { "trimmed:0", "trimmed:x", "cclip:0",
		"cclip:-1", "cclip:inf", "cclip:nan", "krum", "median:1",
		"cclip:1:1", "cclip:1:-0.1", "cclip:1:x",
		"cclip:1:", "cclip:x:0.5", "cclip:1:0.99999999", "cclip:0x",
		"cclip:x" };
	// The value each names (BETA, or TAU when that is the bad one).
	static const char *value[] = { "", "", "'0'", "'-1'", "'inf'", "'nan'",
		"", "", "'1'", "'-0.1'", "'x'", "''", "'x'", "'0.99999999'",
		"'0x'", "'x'" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(ps__agg_parse(bad[i], &r, why, sizeof(why)),
		    FB_EINVAL);
		ck_assert_msg(strstr(why, bad[i]) != NULL, "%s", why);
		ck_assert_msg(strstr(why, value[i]) != NULL, "%s: %s", why,
		    value[i]);
	}
}
END_TEST

// ---- live jobs ---------------------------------------------------------------

#define JLEN 96 // one tensor, 16-float shards: 6 shards

struct job {
	struct ps_scheduler *sched;
	struct ps_server    *srv;
};

static void
job_open(struct job *j, int trainers, const char *aggregate)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	char                     url[64], surl[64];
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = trainers;
	so.servers     = 1;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &j->sched));
	o.url           = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url = ps_scheduler_url(j->sched);
	o.aggregate     = aggregate;
	PT_OK(ps_server_open(&o, &j->srv));
}

static void
job_close(struct job *j)
{
	ps_server_close(j->srv);
	ps_scheduler_close(j->sched);
}

struct trainer {
	const char   *url;
	int           rank, steps, split, rv;
	float         g[JLEN], w[JLEN];
	char          err[256];
	ferry_client *c;
};

// trainer_main: open, declare, offer (rank 0: w as set), pull, then
// `steps` sync steps pushing t->g (push-pull: lent to the round; split:
// Push then Pull, staged in slots).
static void *
trainer_main(void *arg)
{
	struct trainer          *t     = arg;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d     = { "a", JLEN };
	const float             *gp[1] = { t->g };
	float                   *wp[1] = { t->w };
	o.scheduler_url                = t->url;
	o.rank                         = t->rank;
	o.lr                           = 0.5;
	o.mode                         = FERRY_MODE_SYNC;
	o.timeout_ms                   = 20000;
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

// run runs t[0..n) (g set, w the initial weights) to the end on job j;
// every trainer must succeed. The clients stay open (closed by the
// caller: run_close).
static void
run(struct job *j, struct trainer *t, int n, int steps)
{
	pthread_t th[MAX_K];
	for (int r = 0; r < n; r++) {
		t[r].url   = ps_scheduler_url(j->sched);
		t[r].rank  = r;
		t[r].steps = steps;
		t[r].split = r % 2; // both a lent push and a staged one
		ck_assert_int_eq(
		    pthread_create(&th[r], NULL, trainer_main, &t[r]), 0);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
	}
	for (int r = 0; r < n; r++) {
		ck_assert_msg(t[r].rv == 0, "rank %d: %s", r, t[r].err);
	}
}

static void
run_close(struct trainer *t, int n)
{
	for (int r = 0; r < n; r++) {
		ferry_client_close(t[r].c);
	}
}

// rule_rounds reads ferry_aggregate_rounds_total{rule="<rule>"} of srv.
static double
rule_rounds(struct ps_server *srv, const char *rule)
{
	struct obs_writer w = OBS_WRITER_INIT;
	char              lab[48];
	double            v = -1;
	snprintf(lab, sizeof(lab), "rule=\"%s\"", rule);
	PT_OK(obs_registry_write(ps_server_metrics(srv), &w));
	ck_assert_msg(
	    pt_prom_value(w.buf, "ferry_aggregate_rounds_total", lab, &v) == 0,
	    "no ferry_aggregate_rounds_total{%s}", lab);
	obs_writer_fini(&w);
	return v;
}

static void
init_w(float *w)
{
	for (int i = 0; i < JLEN; i++) {
		w[i] = (float) i * 0.5f;
	}
}

// An honest job with median over identical pushes of exactly
// representable values (2 trainers: the sum 2g is exact) ends with the
// weights of the same job with mean, bit for bit.
START_TEST(test_robust_median_equals_mean)
{
	enum { T = 2, STEPS = 12 };
	static struct trainer t[2][T];
	static const char    *agg[2] = { "mean", "median" };
	for (int a = 0; a < 2; a++) {
		struct job j;
		job_open(&j, T, agg[a]);
		for (int r = 0; r < T; r++) {
			memset(&t[a][r], 0, sizeof(t[a][r]));
			init_w(t[a][r].w);
			for (int i = 0; i < JLEN; i++) {
				t[a][r].g[i] = 0.125f * (float) (i % 9 - 4);
			}
		}
		run(&j, t[a], T, STEPS);
		// Every round of the 6 shards went through the rule.
		ck_assert_double_eq(rule_rounds(j.srv, agg[a]),
		    (JLEN / 16) * STEPS);
		if (a == 1) {
			ck_assert_double_eq(pt_metric(ps_server_metrics(j.srv),
			                        "ferry_push_outliers_total"),
			    0);
		}
		run_close(t[a], T);
		job_close(&j);
	}
	same_bits(t[1][0].w, t[0][0].w, JLEN, "median vs mean");
	same_bits(t[1][1].w, t[0][0].w, JLEN, "median rank 1 vs mean");
	// And the weights did move.
	ck_assert(t[0][0].w[0] != 0.0f);
}
END_TEST

// One of three trainers pushes huge values: the median job's weights
// follow the honest median (x -= lr * median / 1 per step), not the
// mean, and the server flags that trainer's push in every shard's
// rounds.
START_TEST(test_robust_median_resists_outlier)
{
	enum { T = 3, STEPS = 10 };
	static struct trainer t[T];
	float                 want[JLEN];
	struct job            j;
	job_open(&j, T, "median");
	for (int r = 0; r < T; r++) {
		memset(&t[r], 0, sizeof(t[r]));
		init_w(t[r].w);
		for (int i = 0; i < JLEN; i++) {
			t[r].g[i] = r == 2 ? 1e6f
			                   : 0.25f * (float) ((i + 2 * r) % 5);
		}
	}
	init_w(want);
	run(&j, t, T, STEPS);
	for (int k = 0; k < STEPS; k++) {
		for (int i = 0; i < JLEN; i++) {
			float med = t[0].g[i] > t[1].g[i] ? t[0].g[i]
			                                  : t[1].g[i];
			want[i]   = want[i] - 0.5f * med;
		}
	}
	for (int r = 0; r < T; r++) {
		same_bits(t[r].w, want, JLEN, "median job");
	}
	// 6 shards x STEPS rounds, rank 2 flagged in each.
	ck_assert_double_eq(
	    pt_metric(ps_server_metrics(j.srv), "ferry_push_outliers_total"),
	    (JLEN / 16) * STEPS);
	run_close(t, T);
	job_close(&j);
}
END_TEST

Suite *
suite_robust(void)
{
	Suite *s  = suite_create("robust");
	TCase *tc = tcase_create("kernels");
	tcase_add_test(tc, test_robust_median_trimmed_exact);
	tcase_add_test(tc, test_robust_cclip_exact);
	tcase_add_test(tc, test_robust_cclip_beta0);
	tcase_add_test(tc, test_robust_cclip_momentum);
	tcase_add_test(tc, test_robust_outlier_planted);
	tcase_add_test(tc, test_robust_parse);
	suite_add_tcase(s, tc);
	TCase *job = tcase_create("job");
	tcase_set_timeout(job, 60);
	tcase_add_test(job, test_robust_median_equals_mean);
	tcase_add_test(job, test_robust_median_resists_outlier);
	suite_add_tcase(s, job);
	return s;
}
