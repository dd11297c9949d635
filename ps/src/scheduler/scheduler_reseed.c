// scheduler_reseed.c — re-seeding lost shards: a server's shards whose
// only copy is gone (the server was declared dead, or it came back empty
// into its slot) and that no replica can take over are placed on a live
// server with their seed_gen raised, in a new map. That server creates
// each one empty and takes its values from the trainers' offers of their
// copies (ps/src/server/seed.c; docs/operations.md §12).
//
// DESIGN. A shard with a usable backup (--replicas) is promoted to it, as
// before; only the others are re-seeded. A dead server's shards go to the
// usable servers (not left, dead or suspect) holding the fewest bytes (ties:
// the lowest index), one shard at a time, so that several shards spread; a
// server that came back empty takes its own shards again (its slot, its URL),
// at once, without waiting for --dead-after-ms. A dead server that registered
// with a --snapshot-dir in a job without replicas is left alone: its restart
// rolls the job back to a snapshot (scheduler_snapshot.c), which keeps
// the optimizer state that a re-seed would lose. seed_gen lives in the
// map, so --state-dir saves it with the map. Every function here runs
// with s->mu held.
#include <stdio.h>
#include <string.h>

#include "scheduler_impl.h"

// usable_server says whether server m may be given a shard: it has not
// left the job, is not dead and is not suspect (ps__sched_server_usable,
// the rule every move follows).
static int
usable_server(const struct ps_scheduler *s, uint32_t m)
{
	return ps__sched_server_usable(s, m);
}

// first_backup returns shard i's first usable backup other than m, or
// SHARD_NO_SERVER when it has none (no replicas, or all of them gone).
static uint32_t
first_backup(const struct ps_scheduler *s, size_t i, uint32_t m)
{
	const uint32_t *b = s->backups != NULL ? &s->backups[i * s->n_backups]
	                                       : NULL;
	for (uint32_t k = 0; b != NULL && k < s->n_backups; k++) {
		if (b[k] != SHARD_NO_SERVER &&
		    b[k] < (uint32_t) s->n_servers_seen && b[k] != m &&
		    usable_server(s, b[k])) {
			return b[k];
		}
	}
	return SHARD_NO_SERVER;
}

// drop_backup takes server m out of every backup list (it holds none of
// them any more: it came back empty), keeping the others in order.
static void
drop_backup(struct ps_scheduler *s, uint32_t m)
{
	for (size_t i = 0; s->backups != NULL && i < s->n_assign; i++) {
		uint32_t *b    = &s->backups[i * s->n_backups];
		uint32_t  kept = 0;
		for (uint32_t k = 0; k < s->n_backups; k++) {
			if (b[k] != m && b[k] != SHARD_NO_SERVER) {
				b[kept++] = b[k];
			}
		}
		while (kept < s->n_backups) {
			b[kept++] = SHARD_NO_SERVER;
		}
	}
}

// least_held returns the usable server other than m that holds the
// fewest bytes in held[] (ties: the lowest index), or SHARD_NO_SERVER.
static uint32_t
least_held(const struct ps_scheduler *s, const uint64_t *held, uint32_t m)
{
	uint32_t best = SHARD_NO_SERVER;
	for (uint32_t k = 0; k < (uint32_t) s->n_servers_seen; k++) {
		if (k != m && usable_server(s, k) &&
		    (best == SHARD_NO_SERVER || held[k] < held[best])) {
			best = k;
		}
	}
	return best;
}

// reseed_plan fills na (a copy of s->assign) for server m's shards:
// promoted to a usable backup, or re-seeded onto `onto` (m itself, or
// SHARD_NO_SERVER: the usable server holding the fewest bytes) with their
// seed_gen raised in the map in force, each marked in raised[]. Counts
// them in *n_promoted and *n_seeded, and the servers they go to in to[].
// Returns the shards that found no server.
static size_t
reseed_plan(struct ps_scheduler *s, uint32_t m, uint32_t onto, uint32_t *na,
    uint64_t *held, uint8_t *raised, uint8_t *to, size_t *n_promoted,
    size_t *n_seeded)
{
	size_t nowhere = 0;
	for (size_t i = 0; i < s->n_assign; i++) {
		held[na[i]] += s->shard_size[i];
	}
	for (size_t i = 0; i < s->n_assign; i++) {
		if (na[i] != m) {
			continue;
		}
		uint32_t b = first_backup(s, i, m);
		if (b != SHARD_NO_SERVER) {
			na[i] = b;
			(*n_promoted)++;
			continue;
		}
		uint32_t t = onto != SHARD_NO_SERVER ? onto
		                                     : least_held(s, held, m);
		if (t == SHARD_NO_SERVER) {
			nowhere++;
			continue;
		}
		held[m] -= s->shard_size[i];
		held[t] += s->shard_size[i];
		na[i]     = t;
		raised[i] = 1;
		to[t]     = 1;
		s->placement->shards[i]->seed_gen++;
		(*n_seeded)++;
	}
	return nowhere;
}

size_t
ps__sched_reseed(struct ps_scheduler *s, uint32_t m, int self)
{
	size_t    M = (size_t) s->n_servers_seen, n = s->n_assign;
	size_t    n_promoted = 0, n_seeded = 0, nowhere;
	uint32_t *na     = fb_alloc(n * sizeof(*na));
	uint64_t *held   = fb_zalloc(M * sizeof(*held));
	uint8_t  *raised = fb_zalloc(n);
	uint8_t  *to     = fb_zalloc(M);
	char      where[160];
	int       rv = FB_ENOMEM;

	if (na == NULL || held == NULL || raised == NULL || to == NULL) {
		goto done;
	}
	memcpy(na, s->assign, n * sizeof(*na));
	if (self) {
		drop_backup(s, m);
	}
	nowhere = reseed_plan(s, m, self ? m : SHARD_NO_SERVER, na, held,
	    raised, to, &n_promoted, &n_seeded);
	if (nowhere > 0) {
		FB_LOG(FB_LOG_ERR, "members",
		    "server %u: %zu shard(s) are lost and no live server can "
		    "take them; trainers fail on them until a server joins",
		    m, nowhere);
	}
	rv = FB_OK;
	if (n_promoted + n_seeded == 0) {
		goto done;
	}
	struct fb_ranges r;
	fb_ranges_init(&r, where, sizeof(where));
	for (size_t k = 0; k < M; k++) {
		if (to[k]) {
			fb_ranges_add(&r, k);
		}
	}
	if (n_seeded > 0) {
		FB_LOG(FB_LOG_NOTICE, "members",
		    "re-seeding %zu shard(s) of server %u from the trainers "
		    "onto server(s) %s: no replica or snapshot holds them; "
		    "their optimizer state restarts from zero",
		    n_seeded, m, fb_ranges_end(&r));
	}
	s->n_promoted += (uint64_t) n_promoted;
	if ((rv = ps__sched_republish(s, na)) != FB_OK) {
		// The map in force stays: so do its generations.
		for (size_t i = 0; i < n; i++) {
			s->placement->shards[i]->seed_gen -= raised[i];
		}
		s->n_promoted -= (uint64_t) n_promoted;
		n_seeded = 0;
	}
done:
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, "members",
		    "server %u: cannot re-place its lost shards: %s", m,
		    fb_strerror(rv));
	}
	fb_free(na);
	fb_free(held);
	fb_free(raised);
	fb_free(to);
	return n_seeded;
}

void
ps__sched_reseed_dead(struct ps_scheduler *s, uint32_t m)
{
	if (s->placement == NULL) {
		return;
	}
	if (s->n_backups == 0 && m < PS_MAX_MEMBERS && s->snap_dir[m]) {
		FB_LOG(FB_LOG_ERR, "members",
		    "server %u is dead; its shards wait for its restart from "
		    "its snapshot (--snapshot-dir), which rolls the job back",
		    m);
		return;
	}
	ps__sched_reseed(s, m, 0);
}
