// policy.c — the scheduler's placement policy as pure decisions: server
// capacities from memory and the copies each shard byte costs, round-robin
// over the servers still in the job, latency-aware placement kept only on a
// clear gain over round-robin, and the 10% rule for replacing a map in
// force.
//
// DESIGN. The scheduler (ps/src/server/scheduler_place.c) owns the state,
// the locks and the logging; these functions own the decisions, so that
// every threshold and tie is tested here without a cluster. Link probes are
// noisy and a new map costs shard moves, so the policy prefers what is in
// place (round-robin on the first map, the map in force later) unless the
// model predicts a clear gain.
#include <math.h>

#include "shard_impl.h"

int
shard_policy_caps(uint32_t n_servers, const uint64_t *memory,
    const uint8_t *gone, double copies, uint64_t *cap, int *bounded)
{
	int any = 0;
	if (memory == NULL || gone == NULL || cap == NULL || bounded == NULL ||
	    n_servers == 0 || !isfinite(copies) || !(copies >= 1))
		return FB_EINVAL;
	for (uint32_t m = 0; m < n_servers; m++) {
		cap[m] = memory[m] ? (uint64_t) ((double) memory[m] / copies)
		                   : UINT64_MAX;
		if (gone[m])
			cap[m] = 1;
		any |= memory[m] != 0 || gone[m];
	}
	*bounded = any;
	return FB_OK;
}

int
shard_place_live(size_t n_shards, uint32_t n_servers, const uint8_t *gone,
    uint32_t *assign)
{
	uint32_t m = 0;
	if (gone == NULL || (assign == NULL && n_shards > 0))
		return FB_EINVAL;
	while (m < n_servers && gone[m])
		m++;
	if (m == n_servers)
		return FB_EINVAL;
	// Shard i goes to live server number i mod L: walk the live servers
	// cyclically, one step per shard.
	for (size_t i = 0; i < n_shards; i++) {
		assign[i] = m;
		do
			m = (m + 1) % n_servers;
		while (gone[m]);
	}
	return FB_OK;
}

// rr_ratio is F/LB as the scheduler reports it: 0 when LB is 0.
static double
rr_ratio(double f, double lb)
{
	return lb > 0 ? f / lb : 0;
}

// place_rr is the round-robin policy (see shard_policy_place).
static int
place_rr(const struct shard_inst *in, const uint8_t *gone, int measured,
    uint32_t *assign, struct shard_report *rep)
{
	double f, fsum, lb;
	int    rv;
	if ((rv = shard_place_live(in->n_shards, in->n_servers, gone,
	         assign)) != FB_OK)
		return rv;
	if (in->cap != NULL && shard_assign_check(in, assign) != FB_OK)
		return FB_ENOSPC;
	if (measured && shard_cost(in, assign, &f, &fsum, NULL) == FB_OK &&
	    shard_lower_bound(in, &lb) == FB_OK) {
		memset(rep, 0, sizeof(*rep));
		rep->f     = f;
		rep->f_sum = fsum;
		rep->lb    = lb;
		rep->ratio = rr_ratio(f, lb);
	}
	return FB_OK;
}

// place_solve is the latency-aware policy (see shard_policy_place).
static int
place_solve(const struct shard_inst *in, const uint8_t *gone, uint64_t seed,
    uint32_t *assign, struct shard_report *rep, struct shard_policy_note *note)
{
	struct shard_solve_opts so = SHARD_SOLVE_OPTS_INIT;
	double                  f_rr, fsum_rr;
	uint32_t               *rr;
	int                     rv;

	so.seed = seed;
	if ((rv = shard_solve(in, &so, assign, NULL, rep)) != FB_OK)
		return rv;
	// Round-robin spreads the load evenly over links that measure about
	// the same; the solver must beat it clearly to be worth its moves.
	if ((rr = fb_alloc(in->n_shards * sizeof(uint32_t))) == NULL)
		return FB_OK; // no comparison: the solver's answer stands
	if (shard_place_live(in->n_shards, in->n_servers, gone, rr) == FB_OK &&
	    shard_cost(in, rr, &f_rr, &fsum_rr, NULL) == FB_OK &&
	    (in->cap == NULL || shard_assign_check(in, rr) == FB_OK) &&
	    rep->f > SHARD_POLICY_GAIN * f_rr) {
		note->kept_rr  = 1;
		note->f_solver = rep->f;
		note->f_rr     = f_rr;
		memcpy(assign, rr, in->n_shards * sizeof(uint32_t));
		rep->f     = f_rr;
		rep->f_sum = fsum_rr;
		rep->ratio = rr_ratio(f_rr, rep->lb);
	}
	fb_free(rr);
	return FB_OK;
}

int
shard_policy_place(const struct shard_inst *inst, const uint8_t *gone,
    const struct shard_policy *p, uint32_t *assign, struct shard_report *rep,
    struct shard_policy_note *note)
{
	struct shard_policy_note n = { 0, 0, 0 };
	int                      rv;
	if (inst == NULL || gone == NULL || p == NULL || assign == NULL ||
	    rep == NULL)
		return FB_EINVAL;
	rv = p->solve ? place_solve(inst, gone, p->seed, assign, rep, &n)
	              : place_rr(inst, gone, p->measured, assign, rep);
	if (rv == FB_OK && note != NULL)
		*note = n;
	return rv;
}

int
shard_policy_gains(double f_new, double f_now)
{
	return f_new < SHARD_POLICY_GAIN * f_now;
}
