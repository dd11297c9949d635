// split.c — cutting tensors into shards (and their size for a slow link),
// and the uniform baseline placement.
//
// A shard is a contiguous slice of one float32 tensor of at most shard_bytes
// bytes (docs/design.md §2). A large tensor is cut into the fewest pieces that
// fit, of nearly equal length, so that the unit of placement is as uniform
// as possible: LPT-style placement does best with pieces of similar size.
#include "shard_impl.h"

// Lengths above this many elements could overflow 4·len in uint64_t.
#define SHARD_MAX_ELEMS (UINT64_C(1) << 61)

// pieces returns the number of shards a tensor of len elements needs when a
// shard holds at most per elements (per > 0).
static uint64_t
pieces(uint64_t len, uint64_t per)
{
	return len / per + (len % per != 0);
}

int
shard_count(const uint64_t *tensor_lens, size_t n_tensors,
    uint64_t shard_bytes, uint64_t *n_out)
{
	if (tensor_lens == NULL || n_out == NULL || n_tensors == 0 ||
	    (uint64_t) n_tensors > UINT32_MAX || shard_bytes < 4 ||
	    shard_bytes % 4 != 0)
		return FB_EINVAL;

	uint64_t per   = shard_bytes / 4;
	uint64_t total = 0;
	for (size_t t = 0; t < n_tensors; t++) {
		if (tensor_lens[t] == 0)
			return FB_EINVAL;
		if (tensor_lens[t] > SHARD_MAX_ELEMS)
			return FB_ERANGE;
		uint64_t p = pieces(tensor_lens[t], per);
		if (p > UINT32_MAX)
			return FB_ERANGE;
		total += p; // ≤ 2^32 · 2^32: cannot overflow
	}
	*n_out = total;
	return FB_OK;
}

int
shard_split(const uint64_t *tensor_lens, size_t n_tensors,
    uint64_t shard_bytes, struct shard_desc **out, size_t *n_out)
{
	uint64_t per = shard_bytes / 4, total;
	int      rv;
	if (out == NULL || n_out == NULL)
		return FB_EINVAL;
	if ((rv = shard_count(tensor_lens, n_tensors, shard_bytes, &total)) !=
	    FB_OK)
		return rv;
	if (total > SIZE_MAX / sizeof(struct shard_desc))
		return FB_ENOMEM;

	struct shard_desc *d = fb_alloc((size_t) total * sizeof(*d));
	if (d == NULL)
		return FB_ENOMEM;

	size_t k = 0;
	for (size_t t = 0; t < n_tensors; t++) {
		uint64_t len  = tensor_lens[t];
		uint64_t p    = pieces(len, per);
		uint64_t base = len / p, extra = len % p, off = 0;
		for (uint64_t j = 0; j < p; j++) {
			uint64_t l  = base + (j < extra);
			d[k].tensor = (uint32_t) t;
			d[k].index  = (uint32_t) j;
			d[k].offset = off;
			d[k].len    = l;
			off += l;
			k++;
		}
	}
	*out   = d;
	*n_out = (size_t) total;
	return FB_OK;
}

uint64_t
shard_link_bytes(double bw_bps, uint64_t max_bytes)
{
	// !(x > 0) also catches NaN; x == x + 1 catches +Inf.
	if (!(bw_bps > 0) || bw_bps == bw_bps + 1.0 ||
	    bw_bps * SHARD_LINK_S >= (double) max_bytes ||
	    max_bytes <= SHARD_LINK_MIN_BYTES) {
		return max_bytes;
	}
	uint64_t b = SHARD_LINK_MIN_BYTES;
	while ((double) (b * 2) <= bw_bps * SHARD_LINK_S) {
		b *= 2; // below max_bytes: bw * SHARD_LINK_S < max_bytes
	}
	return b;
}

int
shard_place_uniform(size_t n_shards, uint32_t n_servers, uint32_t *assign)
{
	if (n_servers == 0 || (assign == NULL && n_shards > 0))
		return FB_EINVAL;
	for (size_t i = 0; i < n_shards; i++)
		assign[i] = (uint32_t) (i % n_servers);
	return FB_OK;
}
