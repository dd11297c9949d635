// cost.c — the cost models of docs/algorithms.md §3.3, instance validation,
// the lower bound, and the working state shared by the solvers.
//
// DESIGN. Every solver evaluates candidates incrementally, so the state
// keeps, besides the loads, one term per (trainer, server):
//  * model B: term[t][m] = k·L[t][m] + ρ·load_m/B[t][m] (0 if load_m = 0),
//    maxed with the server-NIC term; time_t = max(max_m term, NIC_t term);
//    the three largest terms of each trainer let a move or swap, which
//    changes two servers, be evaluated in O(T) instead of O(T·M);
//  * model A: term[t][m] = Σ_{i→m} (L[t][m] + ρ·b_i/B[t][m]);
//    time_t = Σ_m term[t][m].
// After a move is applied the state is rebuilt from scratch, so rounding
// errors never accumulate across moves.
#include <math.h>

#include "shard_impl.h"

int
shard__inst_check(const struct shard_inst *in, uint64_t *total)
{
	if (in == NULL || in->n_shards == 0 || in->n_servers == 0 ||
	    in->n_trainers == 0 || in->size == NULL || in->lat == NULL ||
	    in->bw == NULL)
		return FB_EINVAL;
	if (in->model != SHARD_MODEL_A && in->model != SHARD_MODEL_B)
		return FB_EINVAL;
	if (!(in->rho > 0) || !isfinite(in->rho) ||
	    (in->model == SHARD_MODEL_B && in->k == 0))
		return FB_EINVAL;
	size_t M = in->n_servers, T = in->n_trainers;
	if (T > SIZE_MAX / 8 / M || in->n_shards > SIZE_MAX / 64)
		return FB_ERANGE;
	uint64_t sum = 0;
	for (size_t i = 0; i < in->n_shards; i++) {
		if (in->size[i] == 0)
			return FB_EINVAL;
		if (sum + in->size[i] < sum)
			return FB_ERANGE;
		sum += in->size[i];
	}
	for (size_t j = 0; j < T * M; j++) {
		double l = in->lat[j], b = in->bw[j];
		if (!(l >= 0) || !isfinite(l) || !(b > 0))
			return FB_EINVAL;
	}
	// NIC entries: NaN is rejected; ≤ 0 means unknown.
	if (in->nic_trainer != NULL)
		for (size_t t = 0; t < T; t++)
			if (isnan(in->nic_trainer[t]))
				return FB_EINVAL;
	if (in->nic_server != NULL)
		for (size_t m = 0; m < M; m++)
			if (isnan(in->nic_server[m]))
				return FB_EINVAL;
	*total = sum;
	return FB_OK;
}

int
shard__ws_init(struct shard__ws *w, const struct shard_inst *in)
{
	uint64_t total;
	int      rv;
	memset(w, 0, sizeof(*w));
	if ((rv = shard__inst_check(in, &total)) != FB_OK)
		return rv;
	size_t S = in->n_shards, M = in->n_servers, T = in->n_trainers;
	// Doubles and 64-bit words first, then the 32-bit arrays: every
	// sub-array stays naturally aligned.
	size_t n = sizeof(uint64_t) * 2 * M +
	    sizeof(double) * (T * M + 4 * T) + sizeof(size_t) * S +
	    sizeof(uint32_t) * (3 * T + 2 * S);
	char *p = fb_alloc(n);
	if (p == NULL)
		return FB_ENOMEM;
	w->block = p;
	w->in    = in;
	w->S     = S;
	w->M     = (uint32_t) M;
	w->T     = (uint32_t) T;
	w->total = total;
	w->cap   = (uint64_t *) p;
	w->load  = w->cap + M;
	w->term  = (double *) (w->load + M);
	w->time  = w->term + T * M;
	w->top_v = w->time + T;
	w->order = (size_t *) (w->top_v + 3 * T);
	w->top_i = (uint32_t *) (w->order + S);
	w->a     = w->top_i + 3 * T;
	w->best  = w->a + S;
	for (size_t m = 0; m < M; m++) {
		uint64_t c = in->cap != NULL ? in->cap[m] : 0;
		w->cap[m]  = c == 0 ? UINT64_MAX : c;
	}
	return FB_OK;
}

void
shard__ws_fini(struct shard__ws *w)
{
	fb_free(w->block);
	memset(w, 0, sizeof(*w));
}

double
shard__term_b(const struct shard__ws *w, uint32_t t, uint32_t m, uint64_t load)
{
	if (load == 0)
		return 0;
	const struct shard_inst *in = w->in;
	size_t                   tm = (size_t) t * w->M + m;
	double                   v  = (double) in->k * in->lat[tm] +
	    in->rho * (double) load / in->bw[tm];
	if (in->nic_server != NULL && in->nic_server[m] > 0) {
		double e = in->rho * (double) w->T * (double) load /
		    in->nic_server[m];
		v = e > v ? e : v;
	}
	return v;
}

double
shard__nic_t(const struct shard__ws *w, uint32_t t, uint64_t placed)
{
	const struct shard_inst *in = w->in;
	if (in->nic_trainer == NULL || !(in->nic_trainer[t] > 0))
		return 0;
	return in->rho * (double) placed / in->nic_trainer[t];
}

void
shard__ws_rebuild(struct shard__ws *w)
{
	uint32_t M = w->M, T = w->T;
	memset(w->load, 0, sizeof(uint64_t) * M);
	for (size_t i = 0; i < w->S; i++)
		w->load[w->a[i]] += w->in->size[i];
	w->placed = w->total;
	w->f = w->sum = 0;
	if (w->in->model == SHARD_MODEL_A) {
		memset(w->term, 0, sizeof(double) * T * M);
		for (size_t i = 0; i < w->S; i++)
			for (uint32_t t = 0; t < T; t++)
				w->term[(size_t) t * M + w->a[i]] +=
				    shard__cost_a(w, t, w->a[i], i);
		for (uint32_t t = 0; t < T; t++) {
			double s = 0;
			for (uint32_t m = 0; m < M; m++)
				s += w->term[(size_t) t * M + m];
			w->time[t] = s;
		}
	} else {
		for (uint32_t t = 0; t < T; t++) {
			double   *tv = w->top_v + 3 * (size_t) t;
			uint32_t *ti = w->top_i + 3 * (size_t) t;
			for (int r = 0; r < 3; r++) {
				tv[r] = 0;
				ti[r] = UINT32_MAX;
			}
			double mx = shard__nic_t(w, t, w->placed);
			for (uint32_t m = 0; m < M; m++) {
				double v = shard__term_b(w, t, m, w->load[m]);
				w->term[(size_t) t * M + m] = v;
				mx                          = v > mx ? v : mx;
				// insert into the top 3 (strictly larger moves
				// up, so ties keep the lower server first)
				int r = 3;
				while (r > 0 &&
				    (ti[r - 1] == UINT32_MAX || v > tv[r - 1]))
					r--;
				if (r < 3) {
					for (int q = 2; q > r; q--) {
						tv[q] = tv[q - 1];
						ti[q] = ti[q - 1];
					}
					tv[r] = v;
					ti[r] = m;
				}
			}
			w->time[t] = mx;
		}
	}
	w->tcrit = 0;
	for (uint32_t t = 0; t < T; t++) {
		if (w->time[t] > w->f) {
			w->f     = w->time[t];
			w->tcrit = t;
		}
		w->sum += w->time[t];
	}
}

int
shard__less(double f1, double s1, double f2, double s2)
{
	double tf = SHARD_REL_TOL * fabs(f2);
	if (f1 < f2 - tf)
		return 1;
	if (f1 > f2 + tf)
		return 0;
	return s1 < s2 - SHARD_REL_TOL * fabs(s2);
}

double
shard__ratio(double f, double lb)
{
	if (lb > 0)
		return f / lb;
	return f == 0 ? 1.0 : INFINITY;
}

// fill_cap is the most bytes the servers can hold in total if every
// trainer must finish within F (model B, capacities ignored): server m
// takes load_m > 0 only if k·L[t][m] + ρ·load_m/B[t][m] ≤ F for every t
// (and its NIC term fits), so load_m ≤ min_t (F − k·L[t][m])·B[t][m]/ρ.
static double
fill_cap(const struct shard__ws *w, double F)
{
	const struct shard_inst *in  = w->in;
	double                   sum = 0;
	for (uint32_t m = 0; m < w->M; m++) {
		double c = INFINITY;
		for (uint32_t t = 0; t < w->T && c > 0; t++) {
			size_t tm = (size_t) t * w->M + m;
			double r  = F - (double) in->k * in->lat[tm];
			double x  = r > 0 ? r * in->bw[tm] / in->rho : 0;
			c         = x < c ? x : c;
		}
		if (c > 0 && in->nic_server != NULL && in->nic_server[m] > 0) {
			double x = F * in->nic_server[m] / (in->rho * w->T);
			c        = x < c ? x : c;
		}
		sum += c;
	}
	return sum;
}

// fill_bound sharpens lb with the multi-trainer water-filling bound: the
// least F whose fill_cap reaches Σ b_i, found by bisection. It returns the
// bisection's low end, at which the shards provably do not fit, so the
// result stays a valid lower bound despite rounding.
static double
fill_bound(const struct shard__ws *w, uint64_t total, double lb)
{
	double need = (double) total;
	if (fill_cap(w, lb) >= need)
		return lb;
	double lo = lb, hi = lb > 0 ? 2 * lb : 1e-9;
	for (int i = 0; i < 2100 && fill_cap(w, hi) < need; i++) {
		lo = hi;
		hi *= 2;
	}
	if (fill_cap(w, hi) < need) // only on absurd inputs; keep lb valid
		return lo;
	for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; i++) {
		double mid = lo + (hi - lo) / 2;
		if (fill_cap(w, mid) < need)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

double
shard__lb(const struct shard_inst *in, uint64_t total)
{
	// A throwaway ws view: term_b and cost_a only read in, M and T.
	struct shard__ws w;
	memset(&w, 0, sizeof(w));
	w.in       = in;
	w.M        = in->n_servers;
	w.T        = in->n_trainers;
	w.S        = in->n_shards;
	uint32_t M = w.M, T = w.T;
	double   lb = 0;
	if (in->model == SHARD_MODEL_A) {
		for (uint32_t t = 0; t < T; t++) {
			double s = 0;
			for (size_t i = 0; i < in->n_shards; i++) {
				double mn = INFINITY;
				for (uint32_t m = 0; m < M; m++) {
					double c = shard__cost_a(&w, t, m, i);
					mn       = c < mn ? c : mn;
				}
				s += mn;
			}
			lb = s > lb ? s : lb;
		}
		return lb;
	}
	uint64_t bmax = 0;
	for (size_t i = 0; i < in->n_shards; i++)
		bmax = in->size[i] > bmax ? in->size[i] : bmax;
	int    all_nic = in->nic_server != NULL;
	double nic_sum = 0;
	for (uint32_t m = 0; all_nic && m < M; m++) {
		all_nic = in->nic_server[m] > 0;
		nic_sum += in->nic_server[m];
	}
	for (uint32_t t = 0; t < T; t++) {
		// §3.3 water-filling: max_m ρ·load_m/B_m ≥ ρ·Σ load / Σ_m B_m
		double bs = 0;
		for (uint32_t m = 0; m < M; m++)
			bs += in->bw[(size_t) t * M + m];
		double v = in->rho * (double) total / bs;
		lb       = v > lb ? v : lb;
		v        = shard__nic_t(&w, t, total);
		lb       = v > lb ? v : lb;
	}
	// The largest shard sits on one server, the same for every trainer:
	// min_m max_t term(bmax), which is ≥ §3.3's max_t min_m term(bmax).
	double mn = INFINITY;
	for (uint32_t m = 0; m < M; m++) {
		double mx = 0;
		for (uint32_t t = 0; t < T; t++) {
			double c = shard__term_b(&w, t, m, bmax);
			mx       = c > mx ? c : mx;
		}
		mn = mx < mn ? mx : mn;
	}
	lb = mn > lb ? mn : lb;
	if (all_nic) {
		double v = in->rho * (double) T * (double) total / nic_sum;
		lb       = v > lb ? v : lb;
	}
	return fill_bound(&w, total, lb);
}

// check_assign validates assign against inst (already checked).
static int
check_assign(const struct shard_inst *in, const uint32_t *assign)
{
	if (assign == NULL)
		return FB_EINVAL;
	for (size_t i = 0; i < in->n_shards; i++)
		if (assign[i] >= in->n_servers)
			return FB_EINVAL;
	return FB_OK;
}

int
shard_cost(const struct shard_inst *inst, const uint32_t *assign, double *f,
    double *f_sum, double *trainer_time)
{
	struct shard__ws w;
	uint64_t         total;
	int              rv;
	if ((rv = shard__inst_check(inst, &total)) != FB_OK ||
	    (rv = check_assign(inst, assign)) != FB_OK)
		return rv;
	if ((rv = shard__ws_init(&w, inst)) != FB_OK)
		return rv;
	memcpy(w.a, assign, sizeof(uint32_t) * w.S);
	shard__ws_rebuild(&w);
	if (f != NULL)
		*f = w.f;
	if (f_sum != NULL)
		*f_sum = w.sum;
	if (trainer_time != NULL)
		memcpy(trainer_time, w.time, sizeof(double) * w.T);
	shard__ws_fini(&w);
	return FB_OK;
}

int
shard_assign_check(const struct shard_inst *inst, const uint32_t *assign)
{
	int rv;
	// Sizes and the assignment only: capacities need no link data, and
	// unmeasured links (zero bandwidth) made every bounded uniform job
	// fail to start as if over capacity.
	if (inst == NULL || inst->n_shards == 0 || inst->n_servers == 0 ||
	    inst->size == NULL)
		return FB_EINVAL;
	for (size_t i = 0; i < inst->n_shards; i++)
		if (inst->size[i] == 0)
			return FB_EINVAL;
	if ((rv = check_assign(inst, assign)) != FB_OK)
		return rv;
	if (inst->cap == NULL)
		return FB_OK;
	// One server at a time keeps this allocation-free: O(S·M), fine for a
	// check that runs once per placement.
	for (uint32_t m = 0; m < inst->n_servers; m++) {
		uint64_t c = inst->cap[m], load = 0;
		if (c == 0 || c == UINT64_MAX)
			continue;
		for (size_t i = 0; i < inst->n_shards; i++) {
			if (assign[i] != m)
				continue;
			if (inst->size[i] > c - load) // load <= c: no wrap
				return FB_ENOSPC;
			load += inst->size[i];
		}
	}
	return FB_OK;
}

int
shard_lower_bound(const struct shard_inst *inst, double *lb)
{
	uint64_t total;
	int      rv;
	if (lb == NULL)
		return FB_EINVAL;
	if ((rv = shard__inst_check(inst, &total)) != FB_OK)
		return rv;
	*lb = shard__lb(inst, total);
	return FB_OK;
}
