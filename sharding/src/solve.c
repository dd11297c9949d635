// solve.c — the latency-aware placement heuristic of docs/algorithms.md §3.3.
//
// DESIGN. Three stages over one working state (struct shard__ws), which is
// allocated once per solve; nothing in the loops allocates.
//  1. Greedy (LPT): shards by size, descending (stable, so equal sizes keep
//     index order); each goes to the feasible server that minimises F of
//     the partial assignment, ties to the least own time of that server,
//     then to the lowest index. With zero latency and identical links this
//     is exactly LPT, so Graham's 4/3 − 1/(3M) bound holds for it. If some
//     shard fits nowhere, first-fit-decreasing on capacity replaces it.
//  2. Local search: each pass applies the best strictly improving
//     single-shard move, then the best strictly improving swap ("strictly"
//     lexicographic on (F, Σ_t time_t), with a relative tolerance so that
//     rounding noise is never an improvement). Stops when a pass improves
//     nothing, or after max_passes.
//  3. Multi-start: stage 2 again from `starts` random feasible assignments
//     (xorshift64* seeded from opts->seed; each shard, largest first, goes
//     to a uniformly drawn server that still has room). The best result
//     wins; on ties the earlier one, so the greedy result is preferred.
// Everything is a pure function of the instance and the options.
#include <math.h>

#include "shard_impl.h"

// ---- random numbers: splitmix64 to seed, xorshift64* to draw -------------

static uint64_t
rng_seed(uint64_t seed)
{
	uint64_t z = seed + UINT64_C(0x9e3779b97f4a7c15);
	z          = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z          = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	z ^= z >> 31;
	return z != 0 ? z : UINT64_C(0x2545f4914f6cdd1d);
}

static uint64_t
rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(0x2545f4914f6cdd1d);
}

// ---- ordering -------------------------------------------------------------

// sort_by_size fills w->order with the shards by size, descending, ties in
// index order. A stable binary-insertion sort: O(S log S) comparisons and at
// most S²/2 word moves (memmove), which is quick for the few thousand shards
// of a job and needs no scratch memory.
static void
sort_by_size(struct shard__ws *w)
{
	const uint64_t *b = w->in->size;
	size_t         *o = w->order;
	for (size_t i = 0; i < w->S; i++) {
		// first position whose size is smaller than b[i]
		size_t lo = 0, hi = i;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (b[o[mid]] < b[i])
				hi = mid;
			else
				lo = mid + 1;
		}
		memmove(o + lo + 1, o + lo, (i - lo) * sizeof(*o));
		o[lo] = i;
	}
}

// ---- stage 1: greedy ------------------------------------------------------

// fits reports whether server m, after giving up sub bytes (sub ≤ its
// load), can take add more without exceeding its capacity.
static int
fits(const struct shard__ws *w, uint32_t m, uint64_t add, uint64_t sub)
{
	uint64_t l = w->load[m] - sub; // sub ≤ load[m] always
	return add <= w->cap[m] && l <= w->cap[m] - add;
}

// start_empty clears the partial-assignment state.
static void
start_empty(struct shard__ws *w)
{
	memset(w->load, 0, sizeof(uint64_t) * w->M);
	memset(w->term, 0, sizeof(double) * w->T * w->M);
	memset(w->time, 0, sizeof(double) * w->T);
	w->placed = 0;
}

// place puts shard i on server m in the partial state.
static void
place(struct shard__ws *w, size_t i, uint32_t m)
{
	uint32_t M = w->M;
	w->a[i]    = m;
	w->load[m] += w->in->size[i];
	w->placed += w->in->size[i];
	for (uint32_t t = 0; t < w->T; t++) {
		double *tm = &w->term[(size_t) t * M + m];
		if (w->in->model == SHARD_MODEL_A) {
			double c = shard__cost_a(w, t, m, i);
			*tm += c;
			w->time[t] += c;
		} else {
			*tm        = shard__term_b(w, t, m, w->load[m]);
			double v   = *tm > w->time[t] ? *tm : w->time[t];
			double n   = shard__nic_t(w, t, w->placed);
			w->time[t] = n > v ? n : v;
		}
	}
}

// greedy runs stage 1 into w->a. Returns 0 if some shard fit nowhere.
static int
greedy(struct shard__ws *w)
{
	uint32_t M = w->M, T = w->T;
	int      model_a = w->in->model == SHARD_MODEL_A;
	start_empty(w);
	for (size_t k = 0; k < w->S; k++) {
		size_t   i  = w->order[k];
		uint64_t b  = w->in->size[i];
		uint32_t bm = UINT32_MAX;
		double   bf = 0, bo = 0;
		for (uint32_t m = 0; m < M; m++) {
			if (!fits(w, m, b, 0))
				continue;
			uint64_t nl = w->load[m] + b;
			double   f = 0, own = 0;
			for (uint32_t t = 0; t < T; t++) {
				double v, o;
				if (model_a) {
					double c = shard__cost_a(w, t, m, i);
					o = w->term[(size_t) t * M + m] + c;
					v = w->time[t] + c;
				} else {
					o = shard__term_b(w, t, m, nl);
					v = o > w->time[t] ? o : w->time[t];
					double n = shard__nic_t(w, t,
					    w->placed + b);
					v        = n > v ? n : v;
				}
				f   = v > f ? v : f;
				own = o > own ? o : own;
			}
			// (F, own time, index): strict less keeps the lower
			// index on ties
			if (bm == UINT32_MAX || shard__less(f, own, bf, bo)) {
				bm = m;
				bf = f;
				bo = own;
			}
		}
		if (bm == UINT32_MAX)
			return 0;
		place(w, i, bm);
	}
	return 1;
}

// ffd is the capacity fallback: first-fit-decreasing into w->a.
static int
ffd(struct shard__ws *w)
{
	memset(w->load, 0, sizeof(uint64_t) * w->M);
	for (size_t k = 0; k < w->S; k++) {
		size_t   i = w->order[k];
		uint64_t b = w->in->size[i];
		uint32_t m = 0;
		while (m < w->M && !fits(w, m, b, 0))
			m++;
		if (m == w->M)
			return 0;
		w->a[i] = m;
		w->load[m] += b;
	}
	return 1;
}

// random_start draws a random feasible assignment into w->a.
static int
random_start(struct shard__ws *w, uint64_t *rng)
{
	memset(w->load, 0, sizeof(uint64_t) * w->M);
	for (size_t k = 0; k < w->S; k++) {
		size_t   i = w->order[k];
		uint64_t b = w->in->size[i];
		uint32_t n = 0;
		for (uint32_t m = 0; m < w->M; m++)
			n += fits(w, m, b, 0);
		if (n == 0)
			return 0;
		uint32_t r = (uint32_t) (rng_next(rng) % n), m = 0;
		for (;; m++) {
			if (fits(w, m, b, 0)) {
				if (r == 0)
					break;
				r--;
			}
		}
		w->a[i] = m;
		w->load[m] += b;
	}
	return 1;
}

// ---- stage 2: local search ------------------------------------------------

// excl_max is the largest model-B term of trainer t over servers other
// than p and q (0 if there is none).
static double
excl_max(const struct shard__ws *w, uint32_t t, uint32_t p, uint32_t q)
{
	const double   *tv = w->top_v + 3 * (size_t) t;
	const uint32_t *ti = w->top_i + 3 * (size_t) t;
	for (int r = 0; r < 3; r++)
		if (ti[r] != p && ti[r] != q)
			return ti[r] == UINT32_MAX ? 0 : tv[r];
	return 0;
}

// The evaluators below return 0 as soon as some trainer's time exceeds
// limit (the candidate then cannot beat the best one seen), otherwise 1
// with F and Σ_t time_t. They start with the trainer that sets the current
// F, which rejects most hopeless candidates after one step.

// eval_b evaluates model B after servers p and q take loads lp and lq.
static int
eval_b(const struct shard__ws *w, uint32_t p, uint64_t lp, uint32_t q,
    uint64_t lq, double limit, double *f, double *s)
{
	double fm = 0, sm = 0;
	for (uint32_t k = 0; k < w->T; k++) {
		uint32_t t  = k == 0 ? w->tcrit : (k == w->tcrit ? 0 : k);
		double   v  = excl_max(w, t, p, q);
		double   vp = shard__term_b(w, t, p, lp);
		double   vq = shard__term_b(w, t, q, lq);
		double   n  = shard__nic_t(w, t, w->placed);
		v           = vp > v ? vp : v;
		v           = vq > v ? vq : v;
		v           = n > v ? n : v;
		if (v > limit)
			return 0;
		fm = v > fm ? v : fm;
		sm += v;
	}
	*f = fm;
	*s = sm;
	return 1;
}

// eval_a evaluates model A after shard i moves p→q and, if j < S, shard j
// moves q→p.
static int
eval_a(const struct shard__ws *w, size_t i, size_t j, uint32_t p, uint32_t q,
    double limit, double *f, double *s)
{
	double fm = 0, sm = 0;
	for (uint32_t k = 0; k < w->T; k++) {
		uint32_t t = k == 0 ? w->tcrit : (k == w->tcrit ? 0 : k);
		double   v = w->time[t] - shard__cost_a(w, t, p, i) +
		    shard__cost_a(w, t, q, i);
		if (j < w->S)
			v += shard__cost_a(w, t, p, j) -
			    shard__cost_a(w, t, q, j);
		if (v > limit)
			return 0;
		fm = v > fm ? v : fm;
		sm += v;
	}
	*f = fm;
	*s = sm;
	return 1;
}

// limit_of is the largest F that can still beat (f, ·) under shard__less.
static double
limit_of(double f)
{
	return f + SHARD_REL_TOL * fabs(f);
}

// best_move applies the best strictly improving move. Returns 1 if it did.
static int
best_move(struct shard__ws *w)
{
	int      model_a = w->in->model == SHARD_MODEL_A;
	double   bf = w->f, bs = w->sum;
	size_t   bi = SIZE_MAX;
	uint32_t bq = 0;
	for (size_t i = 0; i < w->S; i++) {
		uint32_t p = w->a[i];
		uint64_t b = w->in->size[i];
		for (uint32_t q = 0; q < w->M; q++) {
			if (q == p || !fits(w, q, b, 0))
				continue;
			double f, s;
			int    ok;
			if (model_a) {
				ok = eval_a(w, i, SIZE_MAX, p, q, limit_of(bf),
				    &f, &s);
			} else {
				ok = eval_b(w, p, w->load[p] - b, q,
				    w->load[q] + b, limit_of(bf), &f, &s);
			}
			if (ok && shard__less(f, s, bf, bs)) {
				bf = f;
				bs = s;
				bi = i;
				bq = q;
			}
		}
	}
	if (bi == SIZE_MAX)
		return 0;
	w->a[bi] = bq;
	shard__ws_rebuild(w);
	return 1;
}

// best_swap applies the best strictly improving swap. Returns 1 if it did.
static int
best_swap(struct shard__ws *w)
{
	int    model_a = w->in->model == SHARD_MODEL_A;
	double bf = w->f, bs = w->sum;
	size_t bi = SIZE_MAX, bj = 0;
	for (size_t i = 0; i < w->S; i++) {
		uint32_t p   = w->a[i];
		uint64_t bi_ = w->in->size[i];
		for (size_t j = i + 1; j < w->S; j++) {
			uint32_t q   = w->a[j];
			uint64_t bj_ = w->in->size[j];
			// equal sizes: the swap changes nothing in either
			// model
			if (q == p || bi_ == bj_)
				continue;
			if (!fits(w, p, bj_, bi_) || !fits(w, q, bi_, bj_))
				continue;
			double f, s;
			int    ok = model_a
			       ? eval_a(w, i, j, p, q, limit_of(bf), &f, &s)
			       : eval_b(w, p, w->load[p] - bi_ + bj_, q,
			             w->load[q] - bj_ + bi_, limit_of(bf), &f,
			             &s);
			if (ok && shard__less(f, s, bf, bs)) {
				bf = f;
				bs = s;
				bi = i;
				bj = j;
			}
		}
	}
	if (bi == SIZE_MAX)
		return 0;
	uint32_t p = w->a[bi];
	w->a[bi]   = w->a[bj];
	w->a[bj]   = p;
	shard__ws_rebuild(w);
	return 1;
}

// local_search improves w->a in place; returns the passes run.
static uint32_t
local_search(struct shard__ws *w, uint32_t max_passes)
{
	uint32_t passes = 0;
	shard__ws_rebuild(w);
	while (passes < max_passes) {
		passes++;
		int moved   = best_move(w);
		int swapped = best_swap(w);
		if (!moved && !swapped)
			break;
	}
	return passes;
}

// ---- stage 3 and the public entry point ----------------------------------

// feasible_at_all rejects instances no assignment can satisfy.
static int
feasible_at_all(const struct shard__ws *w)
{
	uint64_t cap_sum = 0, cap_max = 0, bmax = 0;
	for (uint32_t m = 0; m < w->M; m++) {
		uint64_t c = w->cap[m];
		if (c == UINT64_MAX)
			return 1;
		cap_max = c > cap_max ? c : cap_max;
		cap_sum = cap_sum + c < cap_sum ? UINT64_MAX : cap_sum + c;
	}
	for (size_t i = 0; i < w->S; i++)
		bmax = w->in->size[i] > bmax ? w->in->size[i] : bmax;
	return w->total <= cap_sum && bmax <= cap_max;
}

int
shard_solve(const struct shard_inst *inst, const struct shard_solve_opts *opts,
    uint32_t *assign, double *trainer_time, struct shard_report *rep)
{
	static const struct shard_solve_opts defaults = SHARD_SOLVE_OPTS_INIT;
	struct shard__ws                     w;
	struct shard_report                  r;
	int                                  rv;
	if (assign == NULL)
		return FB_EINVAL;
	if (opts == NULL)
		opts = &defaults;
	if ((rv = shard__ws_init(&w, inst)) != FB_OK)
		return rv;
	if (!feasible_at_all(&w)) {
		rv = FB_ENOSPC;
		goto done;
	}
	sort_by_size(&w);
	memset(&r, 0, sizeof(r));
	r.greedy_f = INFINITY;

	double bf = INFINITY, bs = INFINITY;
	int    have = 0;
	if (greedy(&w) || ffd(&w)) {
		shard__ws_rebuild(&w);
		r.greedy_f = w.f;
		if (opts->max_passes > 0)
			r.passes += local_search(&w, opts->max_passes);
		memcpy(w.best, w.a, sizeof(uint32_t) * w.S);
		bf   = w.f;
		bs   = w.sum;
		have = 1;
	}
	uint64_t rng = rng_seed(opts->seed);
	for (uint32_t k = 0; k < opts->starts; k++) {
		if (!random_start(&w, &rng))
			continue;
		r.starts++;
		if (opts->max_passes > 0)
			r.passes += local_search(&w, opts->max_passes);
		else
			shard__ws_rebuild(&w);
		if (!have || shard__less(w.f, w.sum, bf, bs)) {
			memcpy(w.best, w.a, sizeof(uint32_t) * w.S);
			bf   = w.f;
			bs   = w.sum;
			have = 1;
		}
	}
	if (!have) {
		rv = FB_ENOSPC;
		goto done;
	}
	// Report from a fresh rebuild of the winner, so the numbers are
	// exactly what shard_cost says about it.
	memcpy(w.a, w.best, sizeof(uint32_t) * w.S);
	shard__ws_rebuild(&w);
	r.f     = w.f;
	r.f_sum = w.sum;
	r.lb    = shard__lb(inst, w.total);
	r.ratio = shard__ratio(r.f, r.lb);
	memcpy(assign, w.a, sizeof(uint32_t) * w.S);
	if (trainer_time != NULL)
		memcpy(trainer_time, w.time, sizeof(double) * w.T);
	if (rep != NULL)
		*rep = r;
	rv = FB_OK;
done:
	shard__ws_fini(&w);
	return rv;
}
