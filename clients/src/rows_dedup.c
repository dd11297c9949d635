// rows_dedup.c — one side of a rows exchange made ready for the wire: the
// caller's key blocks de-duplicated into distinct (table, key) pairs with
// their occurrence counts, each routed to its table shard and grouped by
// shard, the pushed gradients of repeated keys summed, and the pulled rows
// scattered back to every occurrence in the caller's order.
//
// DESIGN. Deterministic: distinct pairs keep the order of their first
// occurrence (blocks in order, keys in order), a shard's pairs keep that
// order (a stable counting sort by shard), and a pair's gradients are
// added in occurrence order, so two runs over the same batch send the
// same bytes. The map is open addressing with linear probing over 32-bit
// indices (the pairs themselves live in the arrays beside it), rebuilt
// empty each exchange; everything grows and never shrinks, so a steady
// state of similar batches allocates nothing. The rows of a shard sit
// together in `rows`, in its pairs' order: a pull reply's block decodes
// straight into them and a push's block encodes straight from them.
#include "client_impl.h"
#include "tbl/tbl.h"

// grow makes *p hold at least n elements of size sz (grow-only, doubling).
static int
grow(void *p, size_t *cap, size_t n, size_t sz)
{
	void **pp = p;
	size_t nc = *cap ? *cap : 64;
	void  *q;
	if (n <= *cap && *pp != NULL) {
		return FB_OK;
	}
	while (nc < n) {
		nc *= 2;
	}
	if ((q = fb_realloc(*pp, nc * sz)) == NULL) {
		return FB_ENOMEM;
	}
	*pp  = q;
	*cap = nc;
	return FB_OK;
}

// pair_hash mixes a table id into a key's hash (tbl_key_hash's low bits
// are well mixed; the top bits route, so the map uses the low ones).
static inline size_t
pair_hash(uint32_t table, uint64_t key)
{
	return (size_t) tbl_key_hash(key ^ ((uint64_t) table << 48) ^ table);
}

// pairs_room makes room for n_keys distinct pairs and a map of at least
// twice that many slots (load at most 1/2), cleared.
static int
pairs_room(struct ferry__dedup *d, size_t n_keys)
{
	size_t cap = d->cap, slots = d->mask + 1;
	if (n_keys > cap || d->key == NULL) {
		size_t c2 = cap;
		if (grow(&d->key, &c2, n_keys, sizeof(*d->key)) != FB_OK) {
			return FB_ENOMEM;
		}
		c2 = cap;
		if (grow(&d->table, &c2, n_keys, sizeof(*d->table)) != FB_OK) {
			return FB_ENOMEM;
		}
		c2 = cap;
		if (grow(&d->count, &c2, n_keys, sizeof(*d->count)) != FB_OK) {
			return FB_ENOMEM;
		}
		c2 = cap;
		if (grow(&d->shard, &c2, n_keys, sizeof(*d->shard)) != FB_OK) {
			return FB_ENOMEM;
		}
		c2 = cap;
		if (grow(&d->pos, &c2, n_keys, sizeof(*d->pos)) != FB_OK) {
			return FB_ENOMEM;
		}
		c2 = cap;
		if (grow(&d->order, &c2, n_keys, sizeof(*d->order)) != FB_OK) {
			return FB_ENOMEM;
		}
		d->cap = c2;
	}
	if (d->map == NULL || slots < 2 * n_keys) {
		size_t ns = 64;
		while (ns < 2 * n_keys) {
			ns *= 2;
		}
		fb_free(d->map);
		if ((d->map = fb_alloc(ns * sizeof(*d->map))) == NULL) {
			d->mask = 0;
			return FB_ENOMEM;
		}
		d->mask = ns - 1;
	}
	memset(d->map, 0, (d->mask + 1) * sizeof(*d->map));
	return FB_OK;
}

// pair_find returns the distinct index of (table, key), adding it (count
// 0) when new.
static uint32_t
pair_find(struct ferry__dedup *d, uint32_t table, uint64_t key)
{
	size_t h = pair_hash(table, key) & d->mask;
	for (;;) {
		uint32_t v = d->map[h];
		if (v == 0) {
			uint32_t u  = (uint32_t) d->n++;
			d->map[h]   = u + 1;
			d->key[u]   = key;
			d->table[u] = table;
			d->count[u] = 0;
			return u;
		}
		if (d->key[v - 1] == key && d->table[v - 1] == table) {
			return v - 1;
		}
		h = (h + 1) & d->mask;
	}
}

// group sorts the distinct pairs by table shard (stable) and places each
// shard's rows together in `rows`.
static int
group(struct ferry__dedup *d, const struct ferry__table *tabs, size_t n_shards)
{
	size_t cap = d->sh_cap, floats = 0, at = 0;
	if (n_shards > cap || d->sh_first == NULL) {
		size_t c2 = cap;
		if (grow(&d->sh_first, &c2, n_shards, sizeof(size_t)) !=
		    FB_OK) {
			return FB_ENOMEM;
		}
		c2 = cap;
		if (grow(&d->sh_n, &c2, n_shards, sizeof(size_t)) != FB_OK) {
			return FB_ENOMEM;
		}
		c2 = cap;
		if (grow(&d->sh_rows, &c2, n_shards, sizeof(size_t)) !=
		    FB_OK) {
			return FB_ENOMEM;
		}
		d->sh_cap = c2;
	}
	memset(d->sh_n, 0, n_shards * sizeof(size_t));
	for (size_t u = 0; u < d->n; u++) {
		d->sh_n[d->shard[u]]++;
	}
	for (size_t i = 0; i < n_shards; i++) {
		d->sh_first[i] = at;
		at += d->sh_n[i];
		d->sh_n[i] = 0; // counted again while placing
	}
	for (size_t u = 0; u < d->n; u++) {
		uint32_t i                              = d->shard[u];
		d->order[d->sh_first[i] + d->sh_n[i]++] = (uint32_t) u;
	}
	for (size_t i = 0; i < n_shards; i++) {
		d->sh_rows[i] = floats;
		for (size_t k = 0; k < d->sh_n[i]; k++) {
			uint32_t u = d->order[d->sh_first[i] + k];
			d->pos[u]  = floats;
			floats += tabs[d->table[u]].dim;
		}
	}
	if (grow(&d->rows, &d->cap_floats, floats ? floats : 1,
	        sizeof(float)) != FB_OK) {
		return FB_ENOMEM;
	}
	d->floats = floats;
	return FB_OK;
}

int
ferry__dedup_build(struct ferry__dedup *d, const struct ferry__table *tabs,
    size_t n_shards, const struct ferry_rows *b, size_t nb)
{
	size_t n_keys = 0, o = 0;
	for (size_t j = 0; j < nb; j++) {
		n_keys += b[j].n;
	}
	if (n_keys > UINT32_MAX - 1) {
		return FB_EINVAL;
	}
	d->n = d->n_occ = 0;
	if (pairs_room(d, n_keys) != FB_OK ||
	    grow(&d->occ, &d->cap_occ, n_keys ? n_keys : 1, sizeof(*d->occ)) !=
	        FB_OK) {
		return FB_ENOMEM;
	}
	for (size_t j = 0; j < nb; j++) {
		const struct ferry__table *t = &tabs[b[j].table];
		for (size_t i = 0; i < b[j].n; i++) {
			uint32_t u = pair_find(d, b[j].table, b[j].keys[i]);
			if (d->count[u]++ == 0) {
				d->shard[u] = t->first +
				    tbl_key_shard(b[j].keys[i], t->shards);
			}
			d->occ[o++] = u;
		}
	}
	d->n_occ = o;
	return group(d, tabs, n_shards);
}

void
ferry__dedup_sum(struct ferry__dedup *d, const struct ferry__table *tabs,
    const struct ferry_rows *b, size_t nb)
{
	size_t o = 0;
	memset(d->rows, 0, d->floats * sizeof(float));
	for (size_t j = 0; j < nb; j++) {
		uint32_t dim = tabs[b[j].table].dim;
		for (size_t i = 0; i < b[j].n; i++) {
			float       *r = d->rows + d->pos[d->occ[o++]];
			const float *g = b[j].grads + i * dim;
			for (uint32_t k = 0; k < dim; k++) {
				r[k] += g[k];
			}
		}
	}
}

void
ferry__dedup_scatter(const struct ferry__dedup *d,
    const struct ferry__table *tabs, struct ferry_rows *b, size_t nb)
{
	size_t o = 0;
	for (size_t j = 0; j < nb; j++) {
		uint32_t dim = tabs[b[j].table].dim;
		for (size_t i = 0; i < b[j].n; i++) {
			memcpy(b[j].rows + i * dim,
			    d->rows + d->pos[d->occ[o++]],
			    dim * sizeof(float));
		}
	}
}

void
ferry__dedup_free(struct ferry__dedup *d)
{
	fb_free(d->map);
	fb_free(d->key);
	fb_free(d->table);
	fb_free(d->count);
	fb_free(d->shard);
	fb_free(d->pos);
	fb_free(d->occ);
	fb_free(d->order);
	fb_free(d->sh_first);
	fb_free(d->sh_n);
	fb_free(d->sh_rows);
	fb_free(d->rows);
	memset(d, 0, sizeof(*d));
}
