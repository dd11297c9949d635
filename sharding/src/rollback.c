// rollback.c — which snapshot version a job without replicas rolls back
// to when a server restarts from its snapshot: the newest version that
// every server holding shards has on disk (a consistent snapshot: sync
// rounds make every shard of version V the same step of the same job).
// Pure: the scheduler (scheduler_snapshot.c) gathers the servers' lists
// from their Register and heartbeats and publishes the answer.
#include <stddef.h>

#include "shard/shard.h"

// holds reports whether list l (n entries) contains v.
static int
holds(const uint64_t *l, uint32_t n, uint64_t v)
{
	for (uint32_t j = 0; j < n; j++) {
		if (l[j] == v) {
			return 1;
		}
	}
	return 0;
}

int
shard_rollback_pick(size_t n_servers, const uint8_t *use, const uint64_t *held,
    const uint32_t *n_held, uint32_t k, uint64_t *version, uint32_t *missing)
{
	size_t   first = n_servers;
	int      found = 0;
	uint64_t best  = 0;

	if (use == NULL || held == NULL || n_held == NULL || version == NULL ||
	    missing == NULL || k == 0) {
		return FB_EINVAL;
	}
	for (size_t m = 0; m < n_servers && first == n_servers; m++) {
		first = use[m] ? m : first;
	}
	if (first == n_servers) {
		return FB_EINVAL; // nobody holds shards
	}
	*missing = (uint32_t) first;
	// Every candidate is in the first server's list; keep the newest
	// that every other one holds too.
	for (uint32_t j = 0; j < n_held[first] && j < k; j++) {
		uint64_t v  = held[first * k + j];
		int      ok = 1;
		for (size_t m = 0; m < n_servers && ok; m++) {
			if (use[m] &&
			    !holds(&held[m * k], n_held[m] < k ? n_held[m] : k,
			        v)) {
				ok = 0;
				if (!found) {
					*missing = (uint32_t) m;
				}
			}
		}
		if (ok && (!found || v > best)) {
			best  = v;
			found = 1;
		}
	}
	if (!found) {
		return FB_ENOTFOUND;
	}
	*version = best;
	return FB_OK;
}
