// partition.c — seeded, rank-consistent data partitioning.
//
// Every rank runs the same Fisher–Yates shuffle of 0..n-1 with the job's
// seed, so they agree on the permutation without talking; rank r keeps the
// contiguous slice [r*n/T, (r+1)*n/T). Per-epoch order is a second shuffle
// of that slice that restarts from the slice each epoch, so epoch e's
// minibatches depend only on (seed, n, r, T, e): a single-process
// reference can rebuild any trainer's step k without replaying history,
// and a trainer that rejoins the job at job step s finds its place with
// tr_job_position alone.
#include <string.h>

#include "tr_impl.h"

// Salt that separates the per-epoch streams from the global one.
#define EPOCH_SALT 0x5851f42d4c957f2dULL

static void
shuffle(uint32_t *a, size_t n, uint64_t seed)
{
	struct tr_rng r;
	tr_rng_seed(&r, seed);
	for (size_t i = n; i > 1; i--) {
		size_t   j = (size_t) tr_rng_below(&r, (uint64_t) i);
		uint32_t t = a[i - 1];
		a[i - 1]   = a[j];
		a[j]       = t;
	}
}

size_t
tr_partition_size(size_t n, int rank, int trainers)
{
	if (trainers < 1 || rank < 0 || rank >= trainers) {
		return 0;
	}
	return (n * (size_t) (rank + 1)) / (size_t) trainers -
	    (n * (size_t) rank) / (size_t) trainers;
}

size_t
tr_partition_steps(size_t n, int trainers, size_t batch)
{
	if (trainers < 1 || batch == 0) {
		return 0;
	}
	return (n / (size_t) trainers) / batch;
}

int
tr_partition_init(struct tr_partition *p, size_t n, int rank, int trainers,
    uint64_t seed)
{
	uint32_t *perm;
	if (p == NULL) {
		return FB_EINVAL;
	}
	memset(p, 0, sizeof(*p));
	if (n == 0 || n > UINT32_MAX || trainers < 1 || rank < 0 ||
	    rank >= trainers || (size_t) trainers > n) {
		return FB_EINVAL;
	}
	p->n_total  = n;
	p->rank     = rank;
	p->trainers = trainers;
	p->seed     = seed;
	p->begin    = (n * (size_t) rank) / (size_t) trainers;
	p->count    = tr_partition_size(n, rank, trainers);
	p->epoch    = -1;
	perm        = fb_alloc(n * sizeof(uint32_t));
	p->base     = fb_alloc(p->count * sizeof(uint32_t));
	p->order    = fb_alloc(p->count * sizeof(uint32_t));
	if (perm == NULL || p->base == NULL || p->order == NULL) {
		fb_free(perm);
		tr_partition_fini(p);
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		perm[i] = (uint32_t) i;
	}
	shuffle(perm, n, seed);
	memcpy(p->base, perm + p->begin, p->count * sizeof(uint32_t));
	fb_free(perm);
	return FB_OK;
}

void
tr_partition_fini(struct tr_partition *p)
{
	if (p == NULL) {
		return;
	}
	fb_free(p->base);
	fb_free(p->order);
	memset(p, 0, sizeof(*p));
}

int
tr_partition_batch(struct tr_partition *p, long epoch, size_t k, size_t batch,
    const uint32_t **idx)
{
	if (p == NULL || p->order == NULL || idx == NULL || batch == 0 ||
	    epoch < 0) {
		return FB_EINVAL;
	}
	if (k >= p->count / batch) {
		return FB_ERANGE;
	}
	if (p->epoch != epoch) {
		memcpy(p->order, p->base, p->count * sizeof(uint32_t));
		shuffle(p->order, p->count,
		    (p->seed + (uint64_t) epoch + 1) ^ EPOCH_SALT);
		p->epoch = epoch;
	}
	*idx = p->order + k * batch;
	return FB_OK;
}

uint64_t
tr_job_steps(size_t steps_per_epoch, long epochs, uint64_t max_steps)
{
	uint64_t total;
	if (steps_per_epoch == 0 || epochs < 1) {
		return 0;
	}
	if ((uint64_t) epochs > UINT64_MAX / steps_per_epoch) {
		total = UINT64_MAX;
	} else {
		total = (uint64_t) epochs * steps_per_epoch;
	}
	return max_steps != 0 && max_steps < total ? max_steps : total;
}

int
tr_job_position(uint64_t step, size_t steps_per_epoch, uint64_t total,
    struct tr_position *pos)
{
	if (steps_per_epoch == 0 || pos == NULL) {
		return FB_EINVAL;
	}
	if (step >= total) {
		return FB_ERANGE;
	}
	pos->epoch = (long) (step / steps_per_epoch);
	pos->k     = (size_t) (step % steps_per_epoch);
	return FB_OK;
}
