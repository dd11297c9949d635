// sparse.c — the sparse composite codecs: topk:R+q8 and topk:R+q4 (the
// top-k values quantized, their indices Elias-Fano coded) and random-k:
// randk:R (fp32 values), randk:R+q8 and randk:R+q4, whose index set is drawn
// from a 64-bit seed in the payload, so that no index travels.
//
// DESIGN
// Sizes stay exact (comp_bound), because the server and the trainers check
// every shard's length against it and size the pull delta log by it. That
// rules out varint gaps, whose size depends on the data; Elias-Fano gives a
// gap code whose size depends only on (n, k): each index i is split into
// l = floor(log2(n / k)) low bits, stored as they are, and a high part
// i >> l, stored as the unary-coded gap from the previous high part (one
// bit per index plus one per step of the high part). That is at most
// 2 + log2(n / k) bits an index, about 9 bits at 1% against 32 for topk's
// u32 indices, and the same as byte varints without their data dependence.
//
// Random-k draws one index per stratum: stratum j is [j*n/k, (j+1)*n/k),
// and splitmix64 from the seed picks a position in it. The set is sorted,
// distinct and exactly k, derived in O(k) with no allocation, and covers
// the tensor evenly. The seed comes from the caller's rng when it passes
// one (the trainer's push), else from a hash of the values themselves (the
// server's pull delta, which has no rng), so each step picks a new set.
// Carrying the seed (8 bytes) rather than deriving it on both sides from
// the version and shard keeps decoding a pure function of the bytes: a
// re-sent request, a moved shard or a delta replayed from the log decodes
// the same without either side knowing which round produced it.
//
// Values are a q8/q4 payload (FORMAT.md) of the k kept values in index
// order, computed with the quantizer's own rounding (comp__qround), or fp32.
// Everything here is scalar over the k kept values; the O(n) work is the
// top-k selection (topk.c) and, for error feedback, feedback.c's passes.
#include <math.h>

#include "comp_impl.h"

int
comp__sparse_is(uint32_t id)
{
	return id >= COMP_TOPK_Q8 && id <= COMP_RANDK_Q4;
}

unsigned
comp__sparse_bits(uint32_t id)
{
	if (id == COMP_TOPK_Q8 || id == COMP_RANDK_Q8)
		return 8;
	if (id == COMP_TOPK_Q4 || id == COMP_RANDK_Q4)
		return 4;
	return 32;
}

static int
is_randk(uint32_t id)
{
	return id == COMP_RANDK || id == COMP_RANDK_Q8 || id == COMP_RANDK_Q4;
}

static void
put_u64(uint8_t *p, uint64_t v)
{
	fb_put_u32le(p, (uint32_t) v);
	fb_put_u32le(p + 4, (uint32_t) (v >> 32));
}

static uint64_t
get_u64(const uint8_t *p)
{
	return fb_get_u32le(p) | (uint64_t) fb_get_u32le(p + 4) << 32;
}

// ---- sizes -----------------------------------------------------------------

// ef_low is l: the largest l with k * 2^l <= n (0 when k == 0).
static unsigned
ef_low(size_t n, size_t k)
{
	unsigned l = 0;
	if (k == 0)
		return 0;
	while (l < 32 && ((uint64_t) k << (l + 1)) <= (uint64_t) n)
		l++;
	return l;
}

// ef_bits: k low parts of l bits, then the upper bit vector of
// k + ((n - 1) >> l) bits (the last high part plus one bit per index).
static uint64_t
ef_bits(size_t n, size_t k)
{
	if (k == 0)
		return 0;
	unsigned l = ef_low(n, k);
	return (uint64_t) k * l + k + ((n - 1) >> l);
}

static size_t
head_size(uint32_t id)
{
	return is_randk(id) ? 12 : 4; // u32 k (+ u64 seed)
}

static size_t
vals_size(const struct comp_codec *c, size_t k)
{
	unsigned b = comp__sparse_bits(c->id);
	return b == 32 ? 4 * k : comp__q_size(b, c->bucket, k);
}

static size_t
size_for_k(const struct comp_codec *c, size_t n, size_t k)
{
	size_t ef = is_randk(c->id) ? 0 : (size_t) ((ef_bits(n, k) + 7) / 8);
	return head_size(c->id) + ef + vals_size(c, k);
}

size_t
comp__sparse_size(const struct comp_codec *c, size_t n)
{
	return size_for_k(c, n, comp_topk_k(c->topk_ratio, n));
}

// ---- bit fields and the index iterator -------------------------------------

// put_bits ORs the w low bits of v (w <= 32) at bit offset off, LSB first;
// the area starts zeroed.
static void
put_bits(uint8_t *buf, uint64_t off, uint32_t v, unsigned w)
{
	while (w > 0) {
		unsigned o    = (unsigned) (off & 7);
		unsigned take = 8 - o < w ? 8 - o : w;
		buf[off >> 3] |= (uint8_t) ((v & ((1u << take) - 1)) << o);
		v = take < 32 ? v >> take : 0;
		off += take;
		w -= take;
	}
}

static uint32_t
get_bits(const uint8_t *buf, uint64_t off, unsigned w)
{
	uint32_t v   = 0;
	unsigned got = 0;
	while (got < w) {
		unsigned o    = (unsigned) (off & 7);
		unsigned take = 8 - o < w - got ? 8 - o : w - got;
		v |= (uint32_t) ((buf[off >> 3] >> o) & ((1u << take) - 1))
		    << got;
		got += take;
		off += take;
	}
	return v;
}

// struct iter walks the k indices of a payload in increasing order: from
// the Elias-Fano block (topk) or the seeded strata (randk).
struct iter {
	int            randk;
	size_t         n, k, j; // j: indices produced so far
	uint64_t       rng;     // randk: generator state
	const uint8_t *ef;      // topk: the Elias-Fano block
	unsigned       l;       // topk: low bits per index
	uint64_t       up, end; // topk: next upper bit to scan, block end
	uint64_t       lo, q, r, acc; // randk: stratum start, n / k, n % k,
	                              // j * r mod k
};

static void
iter_init(struct iter *it, uint32_t id, const uint8_t *ef, uint64_t seed,
    size_t n, size_t k)
{
	it->randk = is_randk(id);
	it->n     = n;
	it->k     = k;
	it->j     = 0;
	it->rng   = seed;
	it->ef    = ef;
	it->l     = ef_low(n, k);
	it->up    = (uint64_t) k * it->l;
	it->end   = ef_bits(n, k);
	it->lo    = 0;
	it->q     = k > 0 ? n / k : 0;
	it->r     = k > 0 ? n % k : 0;
	it->acc   = 0;
}

// iter_next sets *idx to the next index. Returns 0, or -1 when the upper
// bit vector runs out (only on corrupt input; the indices may still be out
// of range or repeated, which the validator checks).
static int
iter_next(struct iter *it, size_t *idx)
{
	if (it->randk) {
		// stratum j is [lo, hi): lo = floor(j n / k) kept as
		// j q + floor(j r / k) (q, r: n / k, n % k) without a division
		uint64_t lo = it->lo, hi = lo + it->q;
		it->acc += it->r;
		if (it->acc >= it->k) {
			it->acc -= it->k;
			hi++;
		}
		uint64_t r = comp__rng_next(&it->rng) >> 32;
		*idx       = (size_t) (lo + ((r * (hi - lo)) >> 32));
		it->lo     = hi;
		it->j++;
		return 0;
	}
	uint64_t p = it->up;
	for (;;) {
		if (p >= it->end)
			return -1;
		unsigned o    = (unsigned) (p & 7);
		unsigned bits = (unsigned) it->ef[p >> 3] >> o;
		if (bits != 0) {
			p += (unsigned) __builtin_ctz(bits);
			break;
		}
		p += 8 - o;
	}
	if (p >= it->end)
		return -1;
	uint64_t lowoff = (uint64_t) it->k * it->l;
	uint64_t high   = p - lowoff - it->j;
	uint32_t low    = get_bits(it->ef, (uint64_t) it->j * it->l, it->l);
	*idx            = (size_t) ((high << it->l) | low);
	it->up          = p + 1;
	it->j++;
	return 0;
}

// ---- encode ----------------------------------------------------------------

// seed_of picks a randk seed: from rng when given, else a hash of every
// value of x (the pull delta: any change gives a new set, so no coordinate
// is starved by a set that repeats). The hash is two sums (the second of
// each value xor its index) that vectorise: one read pass, no write.
static uint64_t
seed_of(const float *x, size_t n, uint64_t *rng)
{
	if (rng != NULL)
		return comp__rng_next(rng);
	uint32_t s1 = 0, s2 = 0; // 32-bit lanes: wrap-around sums vectorise
	for (size_t i = 0; i < n; i++) {
		uint32_t u = comp__f2u(x[i]);
		s1 += u;
		s2 += u ^ (uint32_t) i; // position-dependent, no multiply
	}
	uint64_t h = s1 ^ (uint64_t) n << 32;
	(void) comp__rng_next(&h);
	h ^= s2;
	return comp__rng_next(&h);
}

// struct ef_out is where topk_indices' keep callback writes.
struct ef_out {
	uint8_t *ef;
	size_t   k;
	unsigned l;
};

// keep_ef records kept index i as the j-th of k: l low bits, one upper bit.
static void
keep_ef(void *ctx, size_t j, uint32_t i)
{
	struct ef_out *o    = ctx;
	uint32_t       lowm = o->l == 32 ? 0xffffffffu : (1u << o->l) - 1;
	put_bits(o->ef, (uint64_t) j * o->l, i & lowm, o->l);
	put_bits(o->ef, (uint64_t) o->k * o->l + (i >> o->l) + j, 1, 1);
}

// CAND: candidates topk_indices keeps on the stack (16 KiB); a larger k
// takes the radix passes over all of x (topk.c).
enum { CAND = 4096 };

// topk_indices writes the Elias-Fano block of the k largest |x| (ties to
// the lowest indices, as topk does). FB_EINVAL if an x is not finite.
static int
topk_indices(const float *x, size_t n, size_t k, uint8_t *ef)
{
	memset(ef, 0, (size_t) ((ef_bits(n, k) + 7) / 8));
	if (k == 0)
		return comp__finite_all(x, n) ? FB_OK : FB_EINVAL;
	struct ef_out o = { ef, k, ef_low(n, k) };
	uint8_t       cand[4 * CAND];
	return comp__topk_select(x, n, k, cand, CAND, keep_ef, &o);
}

// encode_vals writes the k values at the iterator's indices as fp32 or as a
// q8/q4 payload. FB_EINVAL if a kept value is not finite.
static int
encode_vals(const struct comp_codec *c, const float *x, struct iter *it,
    uint8_t *out)
{
	unsigned b = comp__sparse_bits(c->id);
	size_t   k = it->k, idx;
	if (b == 32) {
		for (size_t j = 0; j < k; j++) {
			(void) iter_next(it, &idx);
			if ((comp__f2u(x[idx]) & 0x7fffffffu) >=
			    COMP__INF_BITS)
				return FB_EINVAL;
			fb_put_f32le(out + 4 * j, x[idx]);
		}
		return FB_OK;
	}
	size_t   bucket = c->bucket, nb = k / bucket + (k % bucket != 0);
	uint8_t *codes = out + 4 * nb;
	float    L     = (float) ((1u << (b - 1)) - 1);
	for (size_t jb = 0; jb < nb; jb++) {
		size_t m = k - jb * bucket < bucket ? k - jb * bucket : bucket;
		struct iter save = *it;
		uint32_t    mx   = 0;
		for (size_t i = 0; i < m; i++) {
			(void) iter_next(it, &idx);
			uint32_t a = comp__f2u(x[idx]) & 0x7fffffffu;
			mx         = a > mx ? a : mx;
		}
		if (mx >= COMP__INF_BITS)
			return FB_EINVAL;
		float s = comp__u2f(mx), inv = s > 0.0f ? L / s : 0.0f;
		fb_put_f32le(out + 4 * jb, s);
		*it = save;
		for (size_t i = 0; i < m; i++) {
			(void) iter_next(it, &idx);
			int q;
			if (isinf(
			        inv)) // subnormal scale: as quant.c, in double
				q = comp__qround((float) ((double) x[idx] *
				                     (double) L / (double) s),
				    L);
			else
				q = comp__qround(x[idx] * inv, L);
			comp__put_code(b, codes, jb * bucket + i,
			    (unsigned) q);
		}
	}
	return FB_OK;
}

int
comp__sparse_encode(const struct comp_codec *c, const float *x, size_t n,
    uint64_t *rng, uint8_t *out)
{
	size_t      k = comp_topk_k(c->topk_ratio, n);
	struct iter it;
	fb_put_u32le(out, (uint32_t) k);
	if (is_randk(c->id)) {
		uint64_t seed = seed_of(x, n, rng);
		put_u64(out + 4, seed);
		iter_init(&it, c->id, NULL, seed, n, k);
		return encode_vals(c, x, &it, out + 12);
	}
	int rv = topk_indices(x, n, k, out + 4);
	if (rv != FB_OK)
		return rv;
	iter_init(&it, c->id, out + 4, 0, n, k);
	return encode_vals(c, x, &it, out + 4 + (ef_bits(n, k) + 7) / 8);
}

// ---- validate and decode ---------------------------------------------------

int
comp__sparse_validate(const struct comp_codec *c, const uint8_t *in,
    size_t len, size_t n)
{
	size_t head = head_size(c->id);
	if (len < head)
		return FB_EPROTO;
	size_t k = fb_get_u32le(in);
	if (k > n || len != size_for_k(c, n, k))
		return FB_EPROTO;
	const uint8_t *vals = in + len - vals_size(c, k);
	if (!is_randk(c->id) && k > 0) {
		struct iter it;
		size_t      idx, prev = 0;
		iter_init(&it, c->id, in + 4, 0, n, k);
		for (size_t j = 0; j < k; j++) {
			if (iter_next(&it, &idx) != 0 || idx >= n ||
			    (j > 0 && idx <= prev))
				return FB_EPROTO;
			prev = idx;
		}
		// no set bit after the k-th: not in the block, not in padding
		uint64_t total = (ef_bits(n, k) + 7) / 8 * 8;
		for (uint64_t p = it.up; p < total; p++)
			if ((in[4 + (p >> 3)] >> (p & 7)) & 1)
				return FB_EPROTO;
	}
	unsigned b = comp__sparse_bits(c->id);
	if (b == 32) {
		for (size_t j = 0; j < k; j++)
			if ((fb_get_u32le(vals + 4 * j) & 0x7fffffffu) >=
			    COMP__INF_BITS)
				return FB_EPROTO;
		return FB_OK;
	}
	return comp__q_validate(b, c->bucket, vals, k);
}

void
comp__sparse_decode(const struct comp_codec *c, const uint8_t *in, size_t n,
    float *out, int mode)
{
	size_t         k    = fb_get_u32le(in);
	size_t         len  = size_for_k(c, n, k);
	const uint8_t *vals = in + len - vals_size(c, k);
	unsigned       b    = comp__sparse_bits(c->id);
	struct iter    it;
	size_t         idx;
	iter_init(&it, c->id, in + 4, is_randk(c->id) ? get_u64(in + 4) : 0, n,
	    k);
	if (mode == COMP__SET)
		memset(out, 0, n * sizeof *out);
	if (b == 32) {
		for (size_t j = 0; j < k; j++) {
			(void) iter_next(&it, &idx);
			comp__store(out, idx, fb_get_f32le(vals + 4 * j),
			    mode);
		}
		return;
	}
	size_t         bucket = c->bucket, nb = k / bucket + (k % bucket != 0);
	const uint8_t *codes = vals + 4 * nb;
	float          L     = (float) ((1u << (b - 1)) - 1);
	float          step  = 0.0f;
	for (size_t j = 0; j < k; j++) {
		if (j % bucket == 0) // s / L once per bucket, as quant.c
			step = fb_get_f32le(vals + 4 * (j / bucket)) / L;
		(void) iter_next(&it, &idx);
		comp__store(out, idx,
		    (float) comp__sext(comp__get_code(b, codes, j), b) * step,
		    mode);
	}
}
