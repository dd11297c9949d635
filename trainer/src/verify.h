// verify.h — the spot-check verifier's pieces (private to tr): the
// pending groups of kept pushes (verify_group.c), the batch a claim names
// and the comparison of pushed and recomputed values, and the loop
// (verify.c) that trainer --verify 1 runs.
#ifndef TR_VERIFY_H
#define TR_VERIFY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry/ferry.h"
#include "tr/tr.h"

// One push of one rank at one version, assembled from its shards' audit
// records (every server keeps the same pushes, so the whole model comes
// in, shard by shard, from every server).
struct tr__vgroup {
	int              used;
	uint32_t         rank;
	uint64_t         version;
	uint64_t         data_step; // the first record's (1 + the claim)
	uint32_t         n_samples; // the first record's
	uint64_t         last_ms;   // when its last record came
	size_t           got;       // shards in
	uint8_t         *have;      // per global shard: its record came
	uint32_t        *server;    // per global shard: who kept it
	uint64_t        *claim;     // per global shard: its record's data_step
	struct tr_params w, p;      // the weights at version, the push
};

// The pending groups: at most cap at once (each holds two copies of the
// model), shards as the map cuts them.
struct tr__vgroups {
	struct tr__vgroup        *g;
	size_t                    cap;
	const struct ferry_shard *shards;
	size_t                    n_shards;
	uint64_t                  skipped; // shard records dropped unverified
};

// tr__vgroups_init makes room for cap groups of the model a cut into the
// map's n_shards shards (borrowed: they must outlive gs). Errors:
// FB_EINVAL, FB_ENOMEM. Release with tr__vgroups_fini (safe on zeroed).
int  tr__vgroups_init(struct tr__vgroups *gs, const struct tr_arch *a,
     const struct ferry_shard *shards, size_t n_shards, size_t cap);
void tr__vgroups_fini(struct tr__vgroups *gs);

// tr__vgroups_add files record r (its shard checked against the map by
// libferry) into the group of (r->rank, r->version), taking a free group
// or, with none free, the one waiting longest (its shards are counted
// skipped). Returns the group once its last shard came (the caller
// verifies it, then tr__vgroups_release), else NULL. A shard that came
// twice counts as skipped.
struct tr__vgroup *tr__vgroups_add(struct tr__vgroups *gs,
    const struct ferry_audit_record *r, uint64_t now_ms);

// tr__vgroups_release frees group g for another push.
void tr__vgroups_release(struct tr__vgroups *gs, struct tr__vgroup *g);

// tr__vgroups_expire drops the groups whose last record came wait_ms or
// longer before now_ms (all of them with wait_ms 0): a push only some
// servers kept (an outlier's) never completes. Their shards count as
// skipped; returns how many groups went.
size_t tr__vgroups_expire(struct tr__vgroups *gs, uint64_t now_ms,
    uint64_t wait_ms);

// tr__verify_batch finds the batch rank's trainer took at data step
// `step` (the claim less one): minibatch step % steps_per_epoch of epoch
// step / steps_per_epoch of partition p (rank's), as train.c's plain loop
// does. Errors: FB_ERANGE (an epoch beyond any run), those of
// tr_partition_batch.
int tr__verify_batch(struct tr_partition *p, uint64_t step,
    size_t steps_per_epoch, size_t batch, const uint32_t **idx);

// tr__verify_compare compares len pushed floats with the recomputed ones
// bit for bit and fills vd's evidence: mismatch, both CRC-32s, the
// elements whose bits differ and the largest |difference| (infinity when
// one is not a number).
void tr__verify_compare(const float *pushed, const float *recomputed,
    size_t len, struct ferry_verdict *vd);

// tr__verify_run is trainer --verify 1 (verify.c): it verifies kept
// pushes until the job ends or a signal, and prints a JSON summary line
// to out. Returns FB_OK, or the FB_E* code of what failed (logged).
int tr__verify_run(const struct tr_config *cfg, FILE *out);

#endif // TR_VERIFY_H
