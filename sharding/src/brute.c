// brute.c — exact placement by enumeration, the reference that tests and
// the benchmark hold the heuristic to. Exponential: refused beyond
// S = 12 shards or M^S = 2,000,000 assignments.
#include <math.h>

#include "shard_impl.h"

#define BRUTE_MAX_S 12
#define BRUTE_MAX_ASSIGN 2000000u

int
shard_solve_brute(const struct shard_inst *inst, uint32_t *assign,
    double *trainer_time, struct shard_report *rep)
{
	struct shard__ws w;
	int              rv;
	if (assign == NULL)
		return FB_EINVAL;
	if ((rv = shard__ws_init(&w, inst)) != FB_OK)
		return rv;
	uint64_t count = 1;
	for (size_t i = 0; i < w.S && count <= BRUTE_MAX_ASSIGN; i++)
		count *= w.M;
	if (w.S > BRUTE_MAX_S || count > BRUTE_MAX_ASSIGN) {
		rv = FB_ERANGE;
		goto done;
	}

	// Odometer over w.a (shard 0 turns fastest); loads are checked from
	// scratch, which costs O(S) next to the O(T·M) evaluation anyway.
	memset(w.a, 0, sizeof(uint32_t) * w.S);
	double bf = INFINITY, bs = INFINITY;
	int    have = 0;
	for (;;) {
		int ok = 1;
		memset(w.load, 0, sizeof(uint64_t) * w.M);
		for (size_t i = 0; i < w.S && ok; i++) {
			uint32_t m = w.a[i];
			w.load[m] += inst->size[i];
			ok = w.load[m] <= w.cap[m];
		}
		if (ok) {
			shard__ws_rebuild(&w);
			// exact comparison: this is the reference optimum
			if (!have || w.f < bf || (w.f == bf && w.sum < bs)) {
				memcpy(w.best, w.a, sizeof(uint32_t) * w.S);
				bf   = w.f;
				bs   = w.sum;
				have = 1;
			}
		}
		size_t i = 0;
		while (i < w.S && ++w.a[i] == w.M)
			w.a[i++] = 0;
		if (i == w.S)
			break;
	}
	if (!have) {
		rv = FB_ENOSPC;
		goto done;
	}
	memcpy(w.a, w.best, sizeof(uint32_t) * w.S);
	shard__ws_rebuild(&w);
	memcpy(assign, w.a, sizeof(uint32_t) * w.S);
	if (trainer_time != NULL)
		memcpy(trainer_time, w.time, sizeof(double) * w.T);
	if (rep != NULL) {
		memset(rep, 0, sizeof(*rep));
		rep->f        = w.f;
		rep->f_sum    = w.sum;
		rep->greedy_f = w.f;
		rep->lb       = shard__lb(inst, w.total);
		rep->ratio    = shard__ratio(w.f, rep->lb);
	}
	rv = FB_OK;
done:
	shard__ws_fini(&w);
	return rv;
}
