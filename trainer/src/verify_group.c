// verify_group.c — the spot-check verifier's bookkeeping (issue 31): the
// audit records of each kept push gathered until every shard of the model
// is in, the batch a push's claimed data step names, and the bit-for-bit
// comparison that is a verdict's evidence. No network: verify.c's loop
// feeds it, and the unit tests check it against the trainer's own steps.
//
// DESIGN. Every server keeps the same pushes (the keyed draw of rank and
// version is the same on each), so a push kept at random arrives as one
// record per shard, from every server, in any order: a group per (rank,
// version) collects them into whole-model buffers. A push kept only as an
// outlier (reason 2) may be kept by some servers only; its group never
// completes and is dropped after a wait (tr__vgroups_expire), its records
// counted skipped. The groups are made once: a steady state allocates
// nothing.
#include <math.h>
#include <string.h>

#include "tr_impl.h"
#include "verify.h"

int
tr__vgroups_init(struct tr__vgroups *gs, const struct tr_arch *a,
    const struct ferry_shard *shards, size_t n_shards, size_t cap)
{
	int rv;
	if (gs == NULL || a == NULL || shards == NULL || n_shards == 0 ||
	    cap == 0) {
		return FB_EINVAL;
	}
	memset(gs, 0, sizeof(*gs));
	gs->shards   = shards;
	gs->n_shards = n_shards;
	if ((gs->g = fb_zalloc(cap * sizeof(*gs->g))) == NULL) {
		return FB_ENOMEM;
	}
	gs->cap = cap;
	for (size_t i = 0; i < cap; i++) {
		struct tr__vgroup *g = &gs->g[i];
		g->have              = fb_zalloc(n_shards);
		g->server            = fb_zalloc(n_shards * sizeof(uint32_t));
		g->claim             = fb_zalloc(n_shards * sizeof(uint64_t));
		if (g->have == NULL || g->server == NULL || g->claim == NULL) {
			tr__vgroups_fini(gs);
			return FB_ENOMEM;
		}
		if ((rv = tr_params_init(&g->w, a)) != FB_OK ||
		    (rv = tr_params_init(&g->p, a)) != FB_OK) {
			tr__vgroups_fini(gs);
			return rv;
		}
	}
	return FB_OK;
}

void
tr__vgroups_fini(struct tr__vgroups *gs)
{
	if (gs == NULL || gs->g == NULL) {
		return;
	}
	for (size_t i = 0; i < gs->cap; i++) {
		fb_free(gs->g[i].have);
		fb_free(gs->g[i].server);
		fb_free(gs->g[i].claim);
		tr_params_fini(&gs->g[i].w);
		tr_params_fini(&gs->g[i].p);
	}
	fb_free(gs->g);
	memset(gs, 0, sizeof(*gs));
}

void
tr__vgroups_release(struct tr__vgroups *gs, struct tr__vgroup *g)
{
	(void) gs;
	g->used = 0;
}

// drop releases g unverified, counting its shards skipped.
static void
drop(struct tr__vgroups *gs, struct tr__vgroup *g)
{
	gs->skipped += g->got;
	g->used = 0;
}

// group_for returns (rank, version)'s group, starting one when there is
// none (in a free slot, else in the one that waited longest).
static struct tr__vgroup *
group_for(struct tr__vgroups *gs, const struct ferry_audit_record *r)
{
	struct tr__vgroup *slot = NULL, *oldest = NULL;
	for (size_t i = 0; i < gs->cap; i++) {
		struct tr__vgroup *g = &gs->g[i];
		if (!g->used) {
			slot = slot != NULL ? slot : g;
		} else if (g->rank == r->rank && g->version == r->version) {
			return g;
		} else if (oldest == NULL || g->last_ms < oldest->last_ms) {
			oldest = g;
		}
	}
	if (slot == NULL) {
		drop(gs, oldest);
		slot = oldest;
	}
	slot->used      = 1;
	slot->rank      = r->rank;
	slot->version   = r->version;
	slot->data_step = r->data_step;
	slot->n_samples = r->n_samples;
	slot->got       = 0;
	memset(slot->have, 0, gs->n_shards);
	return slot;
}

struct tr__vgroup *
tr__vgroups_add(struct tr__vgroups *gs, const struct ferry_audit_record *r,
    uint64_t now_ms)
{
	const struct ferry_shard *s;
	if (r->shard >= gs->n_shards ||
	    r->len != (s = &gs->shards[r->shard])->len) {
		gs->skipped++; // libferry checks this against the map
		return NULL;
	}
	struct tr__vgroup *g = group_for(gs, r);
	g->last_ms           = now_ms;
	if (g->have[r->shard]) {
		gs->skipped++;
		return NULL;
	}
	size_t b = (size_t) r->len * sizeof(float);
	memcpy(g->w.t[s->tensor] + s->offset, r->weights, b);
	memcpy(g->p.t[s->tensor] + s->offset, r->push, b);
	g->have[r->shard]   = 1;
	g->server[r->shard] = r->server;
	g->claim[r->shard]  = r->data_step;
	g->got++;
	return g->got == gs->n_shards ? g : NULL;
}

size_t
tr__vgroups_expire(struct tr__vgroups *gs, uint64_t now_ms, uint64_t wait_ms)
{
	size_t n = 0;
	for (size_t i = 0; i < gs->cap; i++) {
		struct tr__vgroup *g = &gs->g[i];
		if (g->used &&
		    (wait_ms == 0 || g->last_ms + wait_ms <= now_ms)) {
			drop(gs, g);
			n++;
		}
	}
	return n;
}

// The furthest epoch a claim may name: no run has more epochs (the
// partition's epoch is a long, and a shuffle per epoch is cheap).
#define MAX_EPOCH ((uint64_t) 1 << 30)

int
tr__verify_batch(struct tr_partition *p, uint64_t step, size_t steps_per_epoch,
    size_t batch, const uint32_t **idx)
{
	if (steps_per_epoch == 0) {
		return FB_EINVAL;
	}
	uint64_t e = step / steps_per_epoch;
	if (e >= MAX_EPOCH) {
		return FB_ERANGE;
	}
	return tr_partition_batch(p, (long) e,
	    (size_t) (step % steps_per_epoch), batch, idx);
}

void
tr__verify_compare(const float *pushed, const float *recomputed, size_t len,
    struct ferry_verdict *vd)
{
	uint64_t differing = 0;
	float    max       = 0.0f;
	for (size_t i = 0; i < len; i++) {
		uint32_t a, b;
		memcpy(&a, &pushed[i], 4);
		memcpy(&b, &recomputed[i], 4);
		if (a == b) {
			continue;
		}
		differing++;
		float d = fabsf(pushed[i] - recomputed[i]);
		max     = isnan(d) ? INFINITY : d > max ? d : max;
	}
	vd->pushed_crc     = fb_crc32(0, pushed, len * sizeof(float));
	vd->recomputed_crc = fb_crc32(0, recomputed, len * sizeof(float));
	vd->differing      = differing;
	vd->max_abs_diff   = max;
	vd->mismatch       = differing > 0;
}
