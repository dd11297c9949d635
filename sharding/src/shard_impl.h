// shard_impl.h — internal umbrella header of the shard library: the working
// state shared by the cost model (cost.c), the heuristic solver (solve.c),
// the brute-force solver (brute.c) and the formatter (format.c).
#ifndef SHARD_IMPL_H
#define SHARD_IMPL_H

#include <shard/shard.h>

// shard__ws is the working state of one evaluation or solve. All arrays are
// carved out of one fb_alloc block by shard__ws_init, so a solve allocates
// exactly once.
struct shard__ws {
	const struct shard_inst *in;
	size_t                   S;
	uint32_t                 M, T;
	uint64_t                 total;  // Σ b_i
	uint64_t                 placed; // Σ of loads of placed shards
	uint64_t                *cap;    // [M] effective, UINT64_MAX unbounded
	uint64_t                *load;   // [M]
	double                  *term;   // [T·M] per-(t,m) time (see cost.c)
	double                  *time;   // [T] time_t
	double                  *top_v;  // [3T] model B: 3 largest terms of t
	uint32_t                *top_i;  // [3T] and their servers
	uint32_t                *a;      // [S] current assignment
	uint32_t                *best;   // [S] best assignment so far
	size_t                  *order;  // [S] shards by size, descending
	double                   f, sum; // objective of a (after rebuild)
	uint32_t                 tcrit;  // a trainer whose time is f
	void                    *block;
};

// shard__inst_check validates inst; on success writes Σ b_i to *total.
int shard__inst_check(const struct shard_inst *in, uint64_t *total);

// shard__ws_init validates inst and allocates the arrays (release with
// shard__ws_fini, which is safe on a zeroed ws).
int  shard__ws_init(struct shard__ws *w, const struct shard_inst *in);
void shard__ws_fini(struct shard__ws *w);

// shard__ws_rebuild recomputes load, term, time, top-3, f and sum from w->a
// (all shards placed).
void shard__ws_rebuild(struct shard__ws *w);

// shard__term_b is server m's model-B term for trainer t at the given load
// (0 when load is 0).
double shard__term_b(const struct shard__ws *w, uint32_t t, uint32_t m,
    uint64_t load);

// shard__nic_t is trainer t's NIC term for a total placed load (model B).
double shard__nic_t(const struct shard__ws *w, uint32_t t, uint64_t placed);

// shard__cost_a is shard i's model-A cost on server m for trainer t.
static inline double
shard__cost_a(const struct shard__ws *w, uint32_t t, uint32_t m, size_t i)
{
	size_t tm = (size_t) t * w->M + m;
	return w->in->lat[tm] +
	    w->in->rho * (double) w->in->size[i] / w->in->bw[tm];
}

// SHARD_REL_TOL is the relative tolerance of shard__less.
#define SHARD_REL_TOL 1e-9

// shard__less orders (f1, s1) before (f2, s2) lexicographically, with a
// relative tolerance so that rounding noise never counts as improvement.
int shard__less(double f1, double s1, double f2, double s2);

// shard__ratio is F/LB with the conventions of struct shard_report.
double shard__ratio(double f, double lb);

// shard__lb computes the lower bound of an already-validated instance.
double shard__lb(const struct shard_inst *in, uint64_t total);

#endif // SHARD_IMPL_H
