// apply.c — the two hot paths of a shard, tbl_lookup and tbl_apply, and
// admission with the count-min sketch, which counts every update's key
// (admitted, refused or present) so that LFU eviction has the counts too.
//
// Both walk the keys in groups of GROUP: hash the group and prefetch each
// key's home slot, then prefetch the row the home slot names, then probe
// and copy or update. A group's cache misses overlap instead of following
// one another, which is most of a large shard's cost per key. Neither
// allocates, except tbl_apply mapping a new chunk (or a larger index or
// sketch) when admitted rows need one.
#include "tbl_impl.h"

#define GROUP 16
#define SK_SALT 0x5bd1e9955bd1e995ULL

static uint64_t
sk_hash(uint64_t key)
{
	return tbl_key_hash(key ^ SK_SALT);
}

static void
sk_age(struct tbl *t)
{
	size_t n = (size_t) TBL_SK_DEPTH * t->sk_width;
	for (size_t i = 0; i < n; i++)
		t->sketch[i] >>= 1;
	t->sketch_adds = 0;
}

void
tbl__sketch_add(struct tbl *t, uint64_t key, uint32_t c)
{
	uint64_t h = sk_hash(key);
	uint32_t w = t->sk_width;
	for (uint32_t d = 0; d < TBL_SK_DEPTH; d++) {
		uint16_t *p = &t->sketch[d * w + ((h >> (16 * d)) & (w - 1))];
		uint32_t  v = (uint32_t) *p + c;
		*p          = v > UINT16_MAX ? UINT16_MAX : (uint16_t) v;
	}
	t->sketch_adds += c;
	if (t->sketch_adds >= 8 * (uint64_t) t->sk_width)
		sk_age(t);
}

uint32_t
tbl__sketch_est(const struct tbl *t, uint64_t key)
{
	uint64_t h   = sk_hash(key);
	uint32_t w   = t->sk_width;
	uint32_t est = UINT16_MAX;
	for (uint32_t d = 0; d < TBL_SK_DEPTH; d++) {
		uint16_t v = t->sketch[d * w + ((h >> (16 * d)) & (w - 1))];
		est        = v < est ? v : est;
	}
	return est;
}

// admit: whether an update of absent key (c occurrences) creates its row.
// The sketch counts it first, so the admit_count-th occurrence admits.
static bool
admit(struct tbl *t, uint64_t key, uint32_t c, uint64_t version)
{
	if (t->sketch != NULL)
		tbl__sketch_add(t, key, c);
	if (t->conf.admit_count > 1 &&
	    (t->sketch == NULL ||
	        tbl__sketch_est(t, key) < t->conf.admit_count))
		return false;
	float p = t->conf.admit_prob;
	if (p > 0 && p < 1) {
		uint64_t h = tbl_key_hash(tbl__row_seed(&t->conf, key) ^
		    tbl_key_hash(version + 0x243f6a8885a308d3ULL));
		return (float) (h >> 40) * 0x1p-24f < p;
	}
	return true;
}

// prefetch_group: the home slots of keys[0..m), then the rows they name.
static void
prefetch_group(const struct tbl *t, const uint64_t *h, size_t m,
    size_t row_bytes)
{
	for (size_t i = 0; i < m; i++)
		tbl__prefetch(&t->slots[tbl__home(t, h[i])]);
	for (size_t i = 0; i < m; i++) {
		uint32_t s = t->slots[tbl__home(t, h[i])];
		if (s != 0 && (s & ~t->row_mask) == tbl__tag(t, h[i]))
			tbl__prefetch_rec(t, (s & t->row_mask) - 1, row_bytes);
	}
}

void
tbl_lookup(struct tbl *t, const uint64_t *keys, size_t n, float *out)
{
	size_t   dim = t->dim, hits = 0;
	uint64_t h[GROUP];
	for (size_t b = 0; b < n; b += GROUP) {
		size_t m = n - b < GROUP ? n - b : GROUP;
		for (size_t i = 0; i < m; i++)
			h[i] = tbl_key_hash(keys[b + i]);
		prefetch_group(t, h, m, TBL_HDR + dim * 4);
		for (size_t i = 0; i < m; i++) {
			float   *o = out + (b + i) * dim;
			uint32_t r = tbl__find(t, keys[b + i], h[i]);
			if (r == TBL_NONE) {
				tbl_row_init(&t->conf, keys[b + i], o);
				continue;
			}
			memcpy(o, tbl__rec_row(tbl__rec(t, r)), dim * 4);
			hits++;
		}
	}
	t->lookups += n;
	t->hits += hits;
}

int
tbl_apply(struct tbl *t, const uint64_t *keys, size_t n, const float *grads,
    const uint32_t *counts, float scale, float lr, uint64_t version)
{
	int      rv    = 0;
	size_t   dim   = t->dim;
	uint32_t touch = tbl__touch32(version);
	if (n > 0 && touch < t->min_touch)
		t->min_touch = touch;
	if (n > 0 && touch > t->max_touch)
		t->max_touch = touch;
	uint64_t h[GROUP];
	for (size_t b = 0; b < n; b += GROUP) {
		size_t m = n - b < GROUP ? n - b : GROUP;
		for (size_t i = 0; i < m; i++)
			h[i] = tbl_key_hash(keys[b + i]);
		prefetch_group(t, h, m, t->rec);
		for (size_t i = 0; i < m; i++) {
			uint64_t key = keys[b + i];
			uint32_t c   = counts != NULL ? counts[b + i] : 1;
			uint32_t r   = tbl__find(t, key, h[i]);
			if (r == TBL_NONE) {
				if (!admit(t, key, c, version)) {
					t->rejected++;
					continue;
				}
				r = tbl__insert(t, key, h[i], touch);
				if (r == TBL_NONE) {
					rv = -1;
					continue;
				}
				t->admitted++;
			} else if (t->sketch != NULL) {
				tbl__sketch_add(t, key, c);
			}
			uint8_t *rec = tbl__rec(t, r);
			memcpy(rec + 8, &touch, 4);
			float *w = tbl__rec_row(rec);
			tbl__optim_row(t, w, w + dim, grads + (b + i) * dim,
			    scale, lr);
		}
	}
	return rv;
}
