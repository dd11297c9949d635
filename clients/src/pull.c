// pull.c — a pull's own path through the exchange: marking the shards it
// asks for (every one, or those a pull flagged for a full resync),
// running it, resyncing what drifted, and recording the version held.
//
// DESIGN. A pull's struct xfer carries only its pull part (the caller's
// weight buffers and the version it waits for): no push codec is chosen,
// nothing is staged, no gradient is clipped, so the push-side error
// feedback (request.c) never sees a pull. The replies land through
// reply.c into x->w or the pull sink. A push-pull shares the resync and
// the version bookkeeping here once its exchange has run (exchange.c,
// ops.c). A client joining a running sync job (declare, rejoin) ends
// its first pull with the join pull (ferry__pull_join). Before the first
// pull, the seeded tensors' shards are filled locally (ferry__pull_seed).
#include "client_impl.h"

void
ferry__pull_seed(ferry_client *c)
{
	if (!c->any_seeded || c->seeded_filled) {
		return;
	}
	c->seeded_filled = 1; // the first pull only: later ones hold data
	if (c->has_sink || c->auto_pull || c->cpull.id == COMP_NONE ||
	    c->pl->job == NULL) {
		return;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[i];
		uint32_t                 t  = si->tensor;
		if (!fb_init_seeded(c->tensor_init[t]) || c->ref[t] == NULL ||
		    c->shard_ver[i] != 0 || c->ref_at[i] != REF_NONE) {
			continue;
		}
		// The server's version-0 reference of a seeded shard is its
		// weights (pull_ref.c), these very bits: held at version 0,
		// the pull asks for the deltas since, none while the job is
		// still there (a joiner later gets the chain from 0, or the
		// weights in full), and the reference CRC of the reply checks
		// this copy before the caller's buffer gets it (reply.c).
		fb_init_fill(c->tensor_init[t], c->tensor_scale[t],
		    c->pl->job->seed, t, si->offset, c->ref[t] + si->offset,
		    si->len);
		c->ref_at[i] = REF_HOST;
	}
}

int
ferry__pull_run(ferry_client *c, struct xfer *x)
{
	ferry__xfer_begin(c, x);
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->need[i] = x->op != OP_PULL_FULL || c->need_full[i]
		    ? NEED_MAIN
		    : NEED_NONE;
		if (x->op == OP_PULL_FULL) {
			c->need_full[i] = 0;
		}
	}
	return ferry__xfer_until(c, x, 0, 0);
}

// ferry__pull_resync pulls in full the shards whose reference drifted (CRC
// mismatch or a gap).
int
ferry__pull_resync(ferry_client *c, struct xfer *x)
{
	int need = 0, rv;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		need |= c->need_full[i];
	}
	if (!need) {
		return FERRY_OK;
	}
	struct xfer full = {
		.op        = OP_PULL_FULL,
		.w         = x->w,
		.pull_want = 0,
	};
	c->stats.resyncs++;
	if ((rv = ferry__pull_run(c, &full)) != FERRY_OK) {
		return rv;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		if (c->need_full[i]) {
			return ferry__fail(c, FERRY_ECORRUPT,
			    "shard %zu: reference CRC mismatch after a full "
			    "resync",
			    i);
		}
	}
	return FERRY_OK;
}

// ferry__pull_finish resyncs shards whose reference drifted, then records
// the version now held.
int
ferry__pull_finish(ferry_client *c, struct xfer *x)
{
	int rv;
	if ((rv = ferry__pull_resync(c, x)) != FERRY_OK) {
		return rv;
	}
	uint64_t v = UINT64_MAX;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		v = c->shard_ver[i] < v ? c->shard_ver[i] : v;
	}
	c->version = v;
	c->stats.pulls++;
	c->stats.staleness_last = c->pull_stale;
	c->stats.staleness_sum += c->pull_stale;
	if (c->pull_stale > c->stats.staleness_max) {
		c->stats.staleness_max = c->pull_stale;
	}
	c->pull_stale    = 0;
	c->want          = c->lockstep ? c->version : 0;
	c->stats.version = c->version;
	return FERRY_OK;
}

// ferry__join_due: join at J, the newest version pulled, when the
// versions are one round apart at most (a round closing while they were
// pulled): shards behind J take the rank from J on and the pull waits
// for them there, so that its first gradient is computed on one version.
// A server whose open round already waits for this rank (a process
// restarted under a rank never marked gone) answers at once instead
// (ps/src/server/pull.c, join_want). Versions further apart: no join
// pull, the push joins implicitly; so does every rank at version 0 (the
// job's first members are expected from 0 and need no join).
int
ferry__join_due(const ferry_client *c, uint64_t *j)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	if (!c->join_pending || !c->lockstep || c->pl->n_shards == 0) {
		return 0;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		uint64_t v = c->shard_ver[i];
		lo         = v < lo ? v : lo;
		hi         = v > hi ? v : hi;
	}
	if (hi == 0 || hi > lo + 1) {
		return 0;
	}
	*j = hi;
	return 1;
}

// ferry__pull_join: the pull before it learned the versions; this one
// tells every server that the rank joins at J. Its shards are at J
// already, so with a pull codec it moves empty deltas, and the servers
// answer at once. A round that closed in between (the others go on
// while this rank is pending) makes a server refuse J as past
// (FERRY_EBEHIND): pull the versions again and join at the newer one,
// a few times; a server that took the older J waits for this rank's
// push there, so the versions then differ and the push joins
// (ferry__join_due).
int
ferry__pull_join(ferry_client *c, float *const *w)
{
	uint64_t j;
	int      rv = FERRY_OK;
	for (int tries = 0; tries < 8 && ferry__join_due(c, &j); tries++) {
		struct xfer x = {
			.op        = OP_PULL,
			.w         = w,
			.pull_want = j,
			.join      = 1,
		};
		rv = ferry__pull_run(c, &x);
		if (rv == FERRY_OK) {
			c->join_pending = 0;
			return ferry__pull_finish(c, &x);
		}
		if (rv != FERRY_EBEHIND) {
			return rv;
		}
		struct xfer again = { .op = OP_PULL, .w = w, .pull_want = 0 };
		if ((rv = ferry__pull_run(c, &again)) != FERRY_OK ||
		    (rv = ferry__pull_finish(c, &again)) != FERRY_OK) {
			return rv;
		}
	}
	return rv;
}
