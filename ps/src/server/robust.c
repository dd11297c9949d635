// robust.c — robust aggregation of a sync round's pushes (issue 31,
// `--aggregate`): the kernels of robust.h (coordinate-wise median and
// trimmed mean, centered clipping, outlier scores) and the server's use
// of them at a round's close (store.c calls ps__robust_round when the rule
// is not mean), with the per-rank outlier counts heartbeats report.
//
// DESIGN. A round's k pushes are read where they lie (a staging slot, or
// the bytes a parked PushPull lends, any alignment: memcpy), never copied
// whole. The coordinate-wise rules go through the shard in blocks of
// PS_AGG_BLOCK coordinates: each push's block is copied (and divided by
// its samples when they differ) into a k x PS_AGG_BLOCK scratch (a row
// per push) whose columns an odd-even transposition network sorts: k
// passes of branch-free compare-exchanges between rows, each a vector
// loop over the block (correct for any k; O(k^2) per coordinate, cheap
// for a job's handful of trainers, and no data-dependent branch). Centered
// clipping takes one pass per push for its distance to the last aggregate,
// then one pass per push for the clipped sum. With worker momentum (cclip's
// BETA > 0, Karimireddy et al. 2021) it clips the ranks' momenta instead of
// their pushes: momentum is linear in the pushes, so the server keeps each
// rank's (per shard: a row of the shard's floats per trainer, made with the
// shard) and one more vector pass per push folds the push into it; the
// average over ~1 / (1 - BETA) rounds shrinks the honest pushes' spread,
// so a small steady shift ("a little is enough") stands out of it. Scoring
// outliers is one more pass per push. All the scratch is made once, at the
// first map (the largest shard, the job's trainers) or with the shard: a
// round allocates nothing.
//
// Units. Pushes are sums over their samples. When every push of the round
// has the same n_samples n (the common case) the rules work on the sums
// and the optimizer divides by n, so identical pushes give exactly the
// mean; otherwise on the per-sample means g / n (a float division) and the
// optimizer divides by 1. Centered clipping always works on per-sample
// means, so that its radius and its last aggregate keep their meaning when
// batches change. Outlier scores compare each push to the aggregate in the
// rule's units: a common n scales every score alike, so the flags do not
// depend on it. cclip scores the pushes themselves, not the momenta: a
// flag keeps THAT push for a spot check, and a momentum carries one
// falsified push into ~1 / (1 - BETA) later rounds whose honest pushes it
// would send to the verifiers instead.
//
// Outliers count per VERSION (issue31.md): rank r is an outlier at
// version v on this server when any shard of it flagged r's push at v.
// Versions of one rank reach this server in order (a trainer pushes v + 1
// only after every shard closed v), so "a version not seen last" is a new
// one.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "robust.h"

// The kernels are built for AVX-512 and AVX2 beside the baseline, the
// best the CPU has picked once at load (GCC's target_clones: an ifunc):
// wider vectors of the same element-wise IEEE operations, so the bits do
// not depend on the CPU (-ffp-contract=off: no fused multiply-adds; the
// squared distances' lanes fix their order). Their helpers are inlined
// into each clone.
// ThreadSanitizer's runtime is not up yet when an ifunc resolver runs (the
// test binaries crash at start): no clones in a TSan build.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&        \
    !defined(__SANITIZE_THREAD__)
#define KERNEL_CLONES                                                         \
	__attribute__((target_clones("avx512f", "avx2", "default")))
#define KERNEL_INLINE inline __attribute__((always_inline))
#else
#define KERNEL_CLONES
#define KERNEL_INLINE inline
#endif
#include "server_impl.h"

// The server's robust state (s->robust): the rule, the scratch and the
// per-rank counts, all under mu.
struct ps_robust {
	struct ps_agg_rule     rule;
	const void           **v;     // [trainers] the round's pushes
	float                 *div;   // [trainers] their n_samples
	uint32_t              *rank;  // [trainers] their ranks
	float                 *tmp;   // trainers x (PS_AGG_BLOCK + 1)
	float                 *c;     // [trainers] cclip factors
	const void           **mv;    // [trainers] cclip's momentum rows
	double                *score; // 2 x trainers
	uint8_t               *fk;    // [trainers] flags by push
	uint8_t               *flag;  // [trainers] flags by rank (audit hook)
	// per rank: the version last scored + 1 (0: none), whether it was
	// flagged there, versions scored and flagged, the flagged run
	uint64_t              *last_v;
	uint8_t               *cur;
	uint64_t              *rounds, *outliers, *run;
	Pswire__RankOutliers  *hb; // [trainers] the heartbeat's copy
	Pswire__RankOutliers **hb_ptrs;
	uint64_t               n_rounds, n_outliers, n_fallback;
};

// parse_cclip parses "cclip:TAU[x][:BETA]" (ps__agg_parse).
static int
parse_cclip(const char *text, struct ps_agg_rule *r, char *why, size_t n)
{
	char        tau[64];
	const char *colon = strchr(text + 6, ':');
	size_t      tl    = colon != NULL ? (size_t) (colon - text - 6)
	                                  : strlen(text + 6);
	double      v, b = PS_AGG_BETA;
	if (tl >= sizeof(tau)) {
		tl = sizeof(tau) - 1; // too long: not a number either way
	}
	memcpy(tau, text + 6, tl);
	tau[tl] = '\0';
	// "TAUx": TAU times the round's median distance (ps__agg_cclip_rel).
	r->rel = tl > 0 && tau[tl - 1] == 'x';
	if (r->rel) {
		tau[tl - 1] = '\0';
	}
	if (fb_parse_f64(tau, 0, 3.4e38, &v) != FB_OK || !isfinite(v) ||
	    v <= 0 || !isfinite((float) v) || (float) v <= 0) {
		snprintf(why, n,
		    "--aggregate '%s': cclip:TAU[x][:BETA] needs a "
		    "finite TAU > 0, not '%.*s'",
		    text, (int) tl, text + 6);
		return FB_EINVAL;
	}
	// BETA >= 1 would never forget a push; a float that rounds to 1
	// neither.
	if (colon != NULL &&
	    (fb_parse_f64(colon + 1, 0, 1, &b) != FB_OK || !(b >= 0) ||
	        !((float) b < 1))) {
		snprintf(why, n,
		    "--aggregate '%s': cclip:TAU:BETA needs a BETA in "
		    "[0, 1), not '%s'",
		    text, colon + 1);
		return FB_EINVAL;
	}
	r->kind = PS_AGG_CCLIP;
	r->tau  = (float) v;
	r->beta = (float) b;
	return FB_OK;
}

int
ps__agg_parse(const char *text, struct ps_agg_rule *r, char *why, size_t n)
{
	memset(r, 0, sizeof(*r));
	if (text == NULL || *text == '\0' || strcmp(text, "mean") == 0) {
		r->kind = PS_AGG_MEAN;
		return FB_OK;
	}
	if (strcmp(text, "median") == 0) {
		r->kind = PS_AGG_MEDIAN;
		return FB_OK;
	}
	if (strncmp(text, "trimmed:", 8) == 0) {
		int64_t b;
		if (fb_parse_i64(text + 8, 1, UINT32_MAX / 2, &b) != FB_OK) {
			snprintf(why, n,
			    "--aggregate '%s': trimmed:B needs an integer "
			    "B >= 1",
			    text);
			return FB_EINVAL;
		}
		r->kind = PS_AGG_TRIMMED;
		r->trim = (uint32_t) b;
		return FB_OK;
	}
	if (strncmp(text, "cclip:", 6) == 0) {
		return parse_cclip(text, r, why, n);
	}
	snprintf(why, n,
	    "--aggregate '%s': not mean, median, trimmed:B or "
	    "cclip:TAU[x][:BETA]",
	    text);
	return FB_EINVAL;
}

const char *
ps__agg_name(enum ps_agg_kind kind)
{
	switch (kind) {
	case PS_AGG_MEDIAN:
		return "median";
	case PS_AGG_TRIMMED:
		return "trimmed";
	case PS_AGG_CCLIP:
		return "cclip";
	default:
		return "mean";
	}
}

// val is push j's value at i as the kernels see it (ps__agg_value).
static KERNEL_INLINE float
val(const struct ps_agg_in *in, uint32_t j, size_t i)
{
	float v;
	memcpy(&v, (const uint8_t *) in->v[j] + 4 * i, 4);
	return in->div != NULL ? v / in->div[j] : v;
}

float
ps__agg_value(const struct ps_agg_in *in, uint32_t j, size_t i)
{
	return val(in, j, i);
}

// cmpex orders rows a and b of a block element-wise (a gets the smaller
// value): branch-free, so GCC vectorises it (pushes are finite: checked
// before staging).
static KERNEL_INLINE void
cmpex(float *restrict a, float *restrict b, size_t m)
{
	for (size_t i = 0; i < m; i++) {
		float x = a[i], y = b[i];
		float lo = x < y ? x : y;
		float hi = x < y ? y : x;
		a[i]     = lo;
		b[i]     = hi;
	}
}

// sort_rows sorts every column of a block (k rows of m floats, rows
// ascending) with Batcher's odd-even merge sort network for the power of
// two n2 >= k, rows k.. taken as +inf (so the comparators that reach
// them exchange nothing and are skipped): 19 compare-exchanges for k = 8
// where an odd-even transposition sort takes 28. Each compare-exchange
// is one vector loop over the block's columns.
static KERNEL_INLINE void
sort_rows(float *t, uint32_t k, size_t m)
{
	uint32_t n2 = 1;
	while (n2 < k) {
		n2 <<= 1;
	}
	for (uint32_t p = 1; p < n2; p <<= 1) {
		for (uint32_t q = p; q > 0; q >>= 1) {
			for (uint32_t j = q % p; j + q < n2; j += 2 * q) {
				for (uint32_t i = 0; i < q && i + j + q < k;
				     i++) {
					if ((i + j) / (2 * p) ==
					    (i + j + q) / (2 * p)) {
						cmpex(t +
						        (size_t) (i + j) *
						            PS_AGG_BLOCK,
						    t +
						        (size_t) (i + j + q) *
						            PS_AGG_BLOCK,
						    m);
					}
				}
			}
		}
	}
}

// block_pick writes the median (b == UINT32_MAX) or the b-trimmed mean of
// each of the m columns of block t (k rows, sorted ascending) into o.
static KERNEL_INLINE void
block_pick(const float *t, uint32_t k, uint32_t b, size_t m, float *o)
{
	if (b == UINT32_MAX && k % 2 == 1) {
		memcpy(o, t + (size_t) (k / 2) * PS_AGG_BLOCK, 4 * m);
		return;
	}
	if (b == UINT32_MAX) {
		const float *l = t + (size_t) (k / 2 - 1) * PS_AGG_BLOCK;
		const float *h = l + PS_AGG_BLOCK;
		for (size_t i = 0; i < m; i++) {
			o[i] = l[i] + (h[i] - l[i]) / 2;
		}
		return;
	}
	// Ascending order: rows b .. k - b - 1, in float, from 0.
	memset(o, 0, 4 * m);
	for (uint32_t j = b; j < k - b; j++) {
		const float *r = t + (size_t) j * PS_AGG_BLOCK;
		for (size_t i = 0; i < m; i++) {
			o[i] += r[i];
		}
	}
	float d = (float) (k - 2 * b);
	for (size_t i = 0; i < m; i++) {
		o[i] = o[i] / d;
	}
}

KERNEL_CLONES int
ps__agg_coord(const struct ps_agg_rule *r, const struct ps_agg_in *in,
    float *out, float *tmp)
{
	uint32_t k = in->k, b = UINT32_MAX; // UINT32_MAX: the median
	int      fallback = 0;
	if (r->kind == PS_AGG_TRIMMED && (uint64_t) k > 2ull * r->trim) {
		b = r->trim;
	} else if (r->kind == PS_AGG_TRIMMED) {
		fallback = 1; // too few pushes to trim: the median
	}
	for (size_t lo = 0; lo < in->n; lo += PS_AGG_BLOCK) {
		size_t m = in->n - lo < PS_AGG_BLOCK ? in->n - lo
		                                     : PS_AGG_BLOCK;
		for (uint32_t j = 0; j < k; j++) {
			float *t = tmp + (size_t) j * PS_AGG_BLOCK;
			memcpy(t, (const uint8_t *) in->v[j] + 4 * lo, 4 * m);
			if (in->div != NULL) {
				float d = in->div[j];
				for (size_t i = 0; i < m; i++) {
					t[i] = t[i] / d;
				}
			}
		}
		sort_rows(tmp, k, m);
		block_pick(tmp, k, b, m, out + lo);
	}
	return fallback;
}

// clip_sum writes prev + (sum_j (value_j - prev) * c[j]) / k into out
// (ps__agg_cclip's second pass: float, in push order).
static KERNEL_INLINE void
clip_sum(const struct ps_agg_in *in, const float *prev, float *out,
    const float *c)
{
	size_t n = in->n;
	memset(out, 0, n * sizeof(float));
	for (uint32_t j = 0; j < in->k; j++) {
		float cj = c[j];
		for (size_t i = 0; i < n; i++) {
			out[i] += (val(in, j, i) - prev[i]) * cj;
		}
	}
	float k = (float) in->k;
	for (size_t i = 0; i < n; i++) {
		out[i] = prev[i] + out[i] / k;
	}
}

// dist2 returns ||value_j - ref||^2 summed in PS_AGG_LANES float lanes
// (element i in lane i mod PS_AGG_LANES), the lanes then added in
// double in lane order (robust.h): independent chains a whole vector
// wide, where one sequential double sum waited on every add's latency.
// Its relative error (~1e-4 over a million elements) is far below what
// the clip factors and the outlier rule (9x the median) can tell.
static KERNEL_INLINE double
dist2(const struct ps_agg_in *in, uint32_t j, const float *ref)
{
	float          acc[PS_AGG_LANES] = { 0 };
	const uint8_t *p                 = in->v[j];
	size_t         n = in->n, i = 0;
	if (in->div == NULL) {
		for (; i + PS_AGG_LANES <= n; i += PS_AGG_LANES) {
			for (size_t l = 0; l < PS_AGG_LANES; l++) {
				float v;
				memcpy(&v, p + 4 * (i + l), 4);
				float d = v - ref[i + l];
				acc[l] += d * d;
			}
		}
	} else {
		float dv = in->div[j];
		for (; i + PS_AGG_LANES <= n; i += PS_AGG_LANES) {
			for (size_t l = 0; l < PS_AGG_LANES; l++) {
				float v;
				memcpy(&v, p + 4 * (i + l), 4);
				float d = v / dv - ref[i + l];
				acc[l] += d * d;
			}
		}
	}
	for (size_t l = 0; i < n; i++, l++) {
		float d = val(in, j, i) - ref[i];
		acc[l] += d * d;
	}
	double sum = 0;
	for (size_t l = 0; l < PS_AGG_LANES; l++) {
		sum += (double) acc[l];
	}
	return sum;
}

KERNEL_CLONES void
ps__agg_cclip(float tau, const struct ps_agg_in *in, const float *prev,
    float *out, float *c)
{
	for (uint32_t j = 0; j < in->k; j++) {
		double nn = dist2(in, j, prev);
		double f  = nn > 0 ? (double) tau / sqrt(nn) : 1.0;
		c[j]      = f < 1.0 ? (float) f : 1.0f;
	}
	clip_sum(in, prev, out, c);
}

KERNEL_CLONES void
ps__agg_cclip_rel(float tau, const struct ps_agg_in *in, const float *prev,
    float *out, float *c, double *nn)
{
	uint32_t k   = in->k;
	double  *srt = nn + k;
	for (uint32_t j = 0; j < k; j++) {
		nn[j] = srt[j] = sqrt(dist2(in, j, prev));
	}
	for (uint32_t i = 1; i < k; i++) { // insertion sort: k is small
		double   x = srt[i];
		uint32_t j = i;
		for (; j > 0 && srt[j - 1] > x; j--) {
			srt[j] = srt[j - 1];
		}
		srt[j] = x;
	}
	double med = k % 2 == 1 ? srt[k / 2]
	                        : (srt[k / 2 - 1] + srt[k / 2]) / 2;
	double t   = (double) tau * med;
	for (uint32_t j = 0; j < k; j++) {
		double f = nn[j] > 0 ? t / nn[j] : 1.0;
		c[j]     = f < 1.0 ? (float) f : 1.0f;
	}
	clip_sum(in, prev, out, c);
}

size_t
ps__agg_cc_ld(size_t n)
{
	return (n + 15) & ~(size_t) 15;
}

// momentum_take folds push j (from rank r) into r's momentum row m (the
// formula of ps__agg_cclip_round). The update is a plain vector loop: the
// push's bytes are read with memcpy (any alignment), the row is aligned.
static KERNEL_INLINE void
momentum_take(const struct ps_agg_cc *cc, const struct ps_agg_in *in,
    uint32_t j, uint32_t r, float *restrict m)
{
	const uint8_t *p = in->v[j];
	size_t         n = in->n;
	if (!cc->init[r]) {
		// First push: the momentum starts at it, not shrunk by beta.
		for (size_t i = 0; i < n; i++) {
			m[i] = val(in, j, i);
		}
		cc->init[r] = 1;
		return;
	}
	double d = in->div != NULL ? (double) in->div[j] : 1.0;
	float  b = cc->beta;
	float  w = (float) ((1.0 - (double) b) / d);
	for (size_t i = 0; i < n; i++) {
		float g;
		memcpy(&g, p + 4 * i, 4);
		m[i] = b * m[i] + w * g;
	}
}

KERNEL_CLONES void
ps__agg_cclip_round(const struct ps_agg_cc *cc, const struct ps_agg_in *in,
    const uint32_t *rank, float *out, float *c, const void **mv, double *nn)
{
	struct ps_agg_in        mi = { in->k, in->n, mv, NULL };
	const struct ps_agg_in *x  = in;
	if (cc->beta != 0 && cc->m != NULL) {
		for (uint32_t j = 0; j < in->k; j++) {
			float *m = cc->m + (size_t) rank[j] * cc->ld;
			momentum_take(cc, in, j, rank[j], m);
			mv[j] = m;
		}
		x = &mi; // the momenta are per-sample already: no division
	}
	if (cc->rel) {
		ps__agg_cclip_rel(cc->tau, x, cc->prev, out, c, nn);
	} else {
		ps__agg_cclip(cc->tau, x, cc->prev, out, c);
	}
	// The next round clips around this one (applied or refused).
	memcpy(cc->prev, out, in->n * sizeof(float));
}

KERNEL_CLONES uint32_t
ps__agg_outliers(const struct ps_agg_in *in, const float *a, double *score,
    uint8_t *flag)
{
	uint32_t k = in->k, flagged = 0;
	double  *srt = score + k;
	memset(flag, 0, k);
	if (k < 3) {
		return 0;
	}
	for (uint32_t j = 0; j < k; j++) {
		score[j] = srt[j] = dist2(in, j, a);
	}
	for (uint32_t i = 1; i < k; i++) {
		double   x = srt[i];
		uint32_t j = i;
		for (; j > 0 && srt[j - 1] > x; j--) {
			srt[j] = srt[j - 1];
		}
		srt[j] = x;
	}
	double med = k % 2 == 1 ? srt[k / 2]
	                        : (srt[k / 2 - 1] + srt[k / 2]) / 2;
	for (uint32_t j = 0; j < k; j++) {
		flag[j] = score[j] > 9 * med && score[j] > 0;
		flagged += flag[j];
	}
	return flagged;
}

// ---- the server's side -------------------------------------------------------

int
ps__robust_open(struct ps_server *s)
{
	struct ps_robust  *rb;
	struct ps_agg_rule rule;
	char               why[160];
	uint32_t           t = s->trainers;

	if (ps__agg_parse(s->opts.aggregate, &rule, why, sizeof(why)) !=
	    FB_OK) {
		FB_LOG(FB_LOG_ERR, "store", "%s", why);
		return FB_EINVAL;
	}
	if (rule.kind != PS_AGG_MEAN &&
	    s->job.mode != PSWIRE__MODE__MODE_SYNC) {
		// Async and SSP (K > 0) pushes apply one by one: there is no
		// round to aggregate. Training with the mean instead would
		// hide the misconfiguration, so the server does not serve.
		FB_LOG(FB_LOG_ERR, "store",
		    "--aggregate %s needs a sync job (or SSP with staleness "
		    "0); this job is %s: not serving it",
		    s->opts.aggregate, s->job.ssp ? "ssp" : "async");
		return FB_EINVAL;
	}
	if ((s->robust = rb = fb_zalloc(sizeof(*rb))) == NULL) {
		return FB_ENOMEM;
	}
	rb->rule = rule;
	if (rule.kind == PS_AGG_MEAN) {
		return FB_OK; // counts rounds only
	}
	rb->v        = fb_zalloc(t * sizeof(*rb->v));
	rb->div      = fb_zalloc(t * sizeof(*rb->div));
	rb->rank     = fb_zalloc(t * sizeof(*rb->rank));
	rb->tmp      = fb_zalloc(t * (PS_AGG_BLOCK + 1) * sizeof(float));
	rb->c        = fb_zalloc(t * sizeof(*rb->c));
	rb->mv       = fb_zalloc(t * sizeof(*rb->mv));
	rb->score    = fb_zalloc(2 * t * sizeof(*rb->score));
	rb->fk       = fb_zalloc(t);
	rb->flag     = fb_zalloc(t);
	rb->last_v   = fb_zalloc(t * sizeof(*rb->last_v));
	rb->cur      = fb_zalloc(t);
	rb->rounds   = fb_zalloc(t * sizeof(*rb->rounds));
	rb->outliers = fb_zalloc(t * sizeof(*rb->outliers));
	rb->run      = fb_zalloc(t * sizeof(*rb->run));
	rb->hb       = fb_zalloc(t * sizeof(*rb->hb));
	rb->hb_ptrs  = fb_zalloc(t * sizeof(*rb->hb_ptrs));
	if (rb->v == NULL || rb->div == NULL || rb->rank == NULL ||
	    rb->tmp == NULL || rb->c == NULL || rb->mv == NULL ||
	    rb->score == NULL || rb->fk == NULL || rb->flag == NULL ||
	    rb->last_v == NULL || rb->cur == NULL || rb->rounds == NULL ||
	    rb->outliers == NULL || rb->run == NULL || rb->hb == NULL ||
	    rb->hb_ptrs == NULL) {
		return FB_ENOMEM;
	}
	for (uint32_t r = 0; r < t; r++) {
		pswire__rank_outliers__init(&rb->hb[r]);
	}
	FB_LOG(FB_LOG_NOTICE, "store", "sync rounds aggregate by %s",
	    s->opts.aggregate);
	return FB_OK;
}

void
ps__robust_free(struct ps_server *s)
{
	struct ps_robust *rb = s->robust;
	if (rb == NULL) {
		return;
	}
	fb_free(rb->v);
	fb_free(rb->div);
	fb_free(rb->rank);
	fb_free(rb->tmp);
	fb_free(rb->c);
	fb_free(rb->mv);
	fb_free(rb->score);
	fb_free(rb->fk);
	fb_free(rb->flag);
	fb_free(rb->last_v);
	fb_free(rb->cur);
	fb_free(rb->rounds);
	fb_free(rb->outliers);
	fb_free(rb->run);
	fb_free(rb->hb);
	fb_free(rb->hb_ptrs);
	fb_free(rb);
	s->robust = NULL;
}

int
ps__robust_shard_alloc(struct ps_server *s, struct srv_shard *sh)
{
	if (s->robust == NULL || s->robust->rule.kind != PS_AGG_CCLIP ||
	    sh->prev != NULL) {
		return FB_OK;
	}
	if ((sh->prev = fb_zalloc(sh->len * sizeof(float))) == NULL) {
		return FB_ENOMEM;
	}
	if (s->robust->rule.beta == 0) {
		return FB_OK;
	}
	// trainers x len floats: the memory the option's doc states.
	size_t rows = (size_t) s->trainers * ps__agg_cc_ld(sh->len);
	sh->mom     = fb_zalloc(rows * sizeof(float) + s->trainers);
	return sh->mom != NULL ? FB_OK : FB_ENOMEM;
}

// count records whether rank r's push at version v was flagged (the
// file's DESIGN: per version, any shard). mu held.
static void
count(struct ps_robust *rb, uint32_t r, uint64_t v, int flagged)
{
	if (rb->last_v[r] != v + 1) {
		if (!rb->cur[r]) {
			rb->run[r] = 0; // the last version it had was clean
		}
		rb->last_v[r] = v + 1;
		rb->cur[r]    = 0;
		rb->rounds[r]++;
	}
	if (flagged && !rb->cur[r]) {
		rb->cur[r] = 1;
		rb->outliers[r]++;
		rb->run[r]++;
	}
}

// gather lists sh's pushes (the ranks in PS_SLOT_PUSHED, in rank order)
// into rb and their samples (0, unknown: the round's samples / k), and
// returns k; *same: they all have the same samples, *n0 those. mu held.
static uint32_t
gather(const struct ps_server *s, const struct srv_shard *sh,
    struct ps_robust *rb, int *same, uint64_t *n0)
{
	uint32_t k = 0;
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] == PS_SLOT_PUSHED) {
			rb->v[k]      = sh->src[r] != NULL
			         ? (const void *) sh->src[r]
			         : (const void *) sh->slot[r];
			rb->rank[k++] = r;
		}
	}
	uint64_t unknown = k > 0 ? sh->samples / k : 1;
	*same            = 1;
	for (uint32_t j = 0; j < k; j++) {
		uint64_t ns = sh->n_samp[rb->rank[j]];
		ns          = ns > 0 ? ns : unknown > 0 ? unknown : 1;
		rb->div[j]  = (float) ns;
		*same &= j == 0 || ns == *n0;
		*n0 = ns;
	}
	return k;
}

uint64_t
ps__robust_round(struct ps_server *s, struct srv_shard *sh)
{
	struct ps_robust *rb = s->robust;
	int               same;
	uint64_t          n0    = 1;
	uint32_t          k     = gather(s, sh, rb, &same, &n0);
	int               cclip = rb->rule.kind == PS_AGG_CCLIP;
	struct ps_agg_in  in    = { k, sh->len, rb->v,
                same && !cclip ? NULL : rb->div };

	if (cclip) {
		size_t           ld = ps__agg_cc_ld(sh->len);
		struct ps_agg_cc cc = { rb->rule.tau, rb->rule.beta,
			rb->rule.rel, sh->prev, sh->mom, ld,
			sh->mom != NULL
			    ? (uint8_t *) (sh->mom + (size_t) s->trainers * ld)
			    : NULL };
		ps__agg_cclip_round(&cc, &in, rb->rank, s->sum, rb->c, rb->mv,
		    rb->score);
	} else {
		rb->n_fallback += (uint64_t) ps__agg_coord(&rb->rule, &in,
		    s->sum, rb->tmp);
	}
	rb->n_rounds++;
	const uint8_t *flags = NULL;
	if (k >= 3) {
		rb->n_outliers += ps__agg_outliers(&in, s->sum, rb->score,
		    rb->fk);
		memset(rb->flag, 0, s->trainers);
		for (uint32_t j = 0; j < k; j++) {
			rb->flag[rb->rank[j]] = rb->fk[j];
			count(rb, rb->rank[j], sh->version, rb->fk[j]);
		}
		flags = rb->flag;
	}
	ps__audit_round(s, sh, flags);
	return in.div == NULL ? n0 : 1;
}

int
ps__robust_active(const struct ps_server *s)
{
	return s->robust != NULL && s->robust->rule.kind != PS_AGG_MEAN;
}

void
ps__robust_mean_round(struct ps_server *s)
{
	if (s->robust != NULL) {
		s->robust->n_rounds++;
	}
}

size_t
ps__robust_outliers(struct ps_server *s, Pswire__RankOutliers ***out)
{
	struct ps_robust *rb = s->robust;
	size_t            n  = 0;
	*out                 = NULL;
	if (rb == NULL || rb->rounds == NULL) {
		return 0;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (rb->rounds[r] == 0) {
			continue;
		}
		Pswire__RankOutliers *o = &rb->hb[n];
		rb->hb_ptrs[n++]        = o;
		o->rank                 = r;
		o->rounds               = rb->rounds[r];
		o->outliers             = rb->outliers[r];
		o->streak               = rb->cur[r] ? rb->run[r] : 0;
	}
	*out = n > 0 ? rb->hb_ptrs : NULL;
	return n;
}

void
ps__robust_totals(const struct ps_server *s, const char **rule,
    uint64_t *rounds, uint64_t *outliers, uint64_t *fallbacks)
{
	const struct ps_robust *rb = s->robust;
	*rule      = ps__agg_name(rb != NULL ? rb->rule.kind : PS_AGG_MEAN);
	*rounds    = rb != NULL ? rb->n_rounds : 0;
	*outliers  = rb != NULL ? rb->n_outliers : 0;
	*fallbacks = rb != NULL ? rb->n_fallback : 0;
}
