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
// distinct and exactly k, derived in O(k) from the seed alone, and covers
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
// The O(n) work is the top-k selection (topk.c) or randk's seed hash (one
// vectorised read pass), and, for error feedback, feedback.c's passes. The
// k kept indices go to a list in the thread's workspace (work.c); the
// values are gathered from it and quantized by quant.c's vector kernels,
// and the Elias-Fano block is written from it 32 bits at a time. Decoders
// produce indices a chunk at a time and prefetch the next chunk's targets
// before storing this one's, so a scatter into a tensor far larger than
// the caches keeps many misses in flight.
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

// ---- index sources ---------------------------------------------------------

// load64 reads the 8 bytes of buf[0..nbytes) at byte `at` as a
// little-endian u64, the bytes past nbytes read as zero.
static inline uint64_t
load64(const uint8_t *buf, size_t nbytes, size_t at)
{
	if (at + 8 <= nbytes)
		return fb_get_u32le(buf + at) |
		    (uint64_t) fb_get_u32le(buf + at + 4) << 32;
	uint8_t b[8] = { 0 };
	if (at < nbytes)
		memcpy(b, buf + at, nbytes - at);
	return fb_get_u32le(b) | (uint64_t) fb_get_u32le(b + 4) << 32;
}

// struct src produces the k indices of a payload in increasing order, a
// chunk at a time: from the Elias-Fano block (topk) or the seeded strata
// (randk).
struct src {
	int            randk;
	size_t         n, k, j;       // j: indices produced so far
	uint64_t       rng;           // randk: generator state
	uint64_t       lo, q, r, acc; // randk: stratum start, n / k, n % k,
	                              // j * r mod k
	const uint8_t *ef;            // topk: the Elias-Fano block
	size_t         efbytes;       // its length
	unsigned       l;             // topk: low bits per index
	uint64_t       up, end;       // topk: next upper bit to scan, the
	                              // vector's end
};

static void
src_init(struct src *s, uint32_t id, const uint8_t *ef, uint64_t seed,
    size_t n, size_t k)
{
	s->randk   = is_randk(id);
	s->n       = n;
	s->k       = k;
	s->j       = 0;
	s->rng     = seed;
	s->lo      = 0;
	s->q       = k > 0 ? n / k : 0;
	s->r       = k > 0 ? n % k : 0;
	s->acc     = 0;
	s->ef      = ef;
	s->l       = ef_low(n, k);
	s->efbytes = (size_t) ((ef_bits(n, k) + 7) / 8);
	s->up      = (uint64_t) k * s->l;
	s->end     = ef_bits(n, k);
}

// src_fill writes the next m indices to idx. Returns 0, or -1 when the
// upper bit vector runs out (only on corrupt input; the indices may still
// be out of range or repeated, which the validator checks).
static int
src_fill(struct src *s, uint64_t *idx, size_t m)
{
	if (s->randk) {
		// stratum j is [lo, hi): lo = floor(j n / k) kept as
		// j q + floor(j r / k) (q, r: n / k, n % k) without a division
		for (size_t t = 0; t < m; t++) {
			uint64_t lo = s->lo, hi = lo + s->q;
			s->acc += s->r;
			if (s->acc >= s->k) {
				s->acc -= s->k;
				hi++;
			}
			uint64_t r = comp__rng_next(&s->rng) >> 32;
			idx[t]     = lo + ((r * (hi - lo)) >> 32);
			s->lo      = hi;
		}
		s->j += m;
		return 0;
	}
	uint64_t lowm = s->l == 0 ? 0 : (1ull << s->l) - 1;
	uint64_t base = (uint64_t) s->k * s->l, p = s->up;
	// w: the upper bits from p on, up to wend (57 or more a load)
	uint64_t w = load64(s->ef, s->efbytes, (size_t) (p >> 3)) >> (p & 7);
	uint64_t wend = p + 64 - (p & 7);
	for (size_t t = 0; t < m; t++) {
		while (w == 0) { // the next set bit is past this window
			p = wend;
			if (p >= s->end)
				return -1;
			w = load64(s->ef, s->efbytes, (size_t) (p >> 3)) >>
			    (p & 7);
			wend = p + 64 - (p & 7);
		}
		unsigned z = (unsigned) __builtin_ctzll(w);
		p += z;
		if (p >= s->end)
			return -1;
		uint64_t j = s->j + t, lb = j * s->l;
		uint64_t low = (load64(s->ef, s->efbytes,
		                    (size_t) (lb >> 3)) >>
		                   (lb & 7)) &
		    lowm;
		idx[t] = ((p - base - j) << s->l) | low;
		p++;
		w = (w >> z) >> 1;
	}
	s->up = p;
	s->j += m;
	return 0;
}

// ---- encode ----------------------------------------------------------------

// seed_of picks a randk seed: from rng when given, else a hash of every
// value of x (the pull delta: any change gives a new set, so no coordinate
// is starved by a set that repeats). The hash is two wrap-around sums (the
// second of each value xor its index): one vectorised read pass, no write.
static uint64_t
seed_of(const float *x, size_t n, uint64_t *rng)
{
	if (rng != NULL)
		return comp__rng_next(rng);
	uint32_t s1, s2;
	comp__kern()->seed_sums(x, n, &s1, &s2);
	uint64_t h = s1 ^ (uint64_t) n << 32;
	(void) comp__rng_next(&h);
	h ^= s2;
	return comp__rng_next(&h);
}

// ef_write writes the Elias-Fano block of the k increasing indices in
// list: k low parts of l bits, packed 32 bits at a time, then one upper bit
// per index.
static void
ef_write(const uint32_t *list, size_t n, size_t k, uint8_t *ef)
{
	unsigned l      = ef_low(n, k);
	size_t   nbytes = (size_t) ((ef_bits(n, k) + 7) / 8), at = 0;
	memset(ef, 0, nbytes);
	uint64_t lowm = l == 0 ? 0 : (1ull << l) - 1, acc = 0;
	unsigned have = 0; // bits in acc
	for (size_t j = 0; j < k && l > 0; j++) {
		acc |= (list[j] & lowm) << have;
		have += l;
		if (have >= 32) {
			fb_put_u32le(ef + at, (uint32_t) acc);
			at += 4;
			acc >>= 32;
			have -= 32;
		}
	}
	for (; have > 0; have = have > 8 ? have - 8 : 0, acc >>= 8)
		ef[at++] = (uint8_t) acc; // the low area's last bytes
	uint64_t base = (uint64_t) k * l;
	for (size_t j = 0; j < k; j++) {
		uint64_t p = base + (list[j] >> l) + j;
		ef[p >> 3] |= (uint8_t) (1u << (p & 7));
	}
}

// encode_vals writes the k values x[list[j]] as fp32 or as the q8/q4
// payload (FORMAT.md) of the k values gathered into vals (room for k).
// FB_EINVAL if a kept value is not finite.
static int
encode_vals(const struct comp_codec *c, const float *x, const uint32_t *list,
    size_t k, float *vals, uint8_t *out)
{
	unsigned b = comp__sparse_bits(c->id);
	if (b == 32) {
		uint32_t bad = 0;
		for (size_t j = 0; j < k; j++) {
			uint32_t u = comp__f2u(x[list[j]]);
			bad |= (u & 0x7fffffffu) >= COMP__INF_BITS;
			fb_put_u32le(out + 4 * j, u);
		}
		return bad ? FB_EINVAL : FB_OK;
	}
	for (size_t j = 0; j < k; j++)
		vals[j] = x[list[j]];
	return comp__q_encode(b, c->bucket, 0, NULL, vals, k, out);
}

// randk_list writes the k indices drawn from seed to list.
static void
randk_list(uint32_t id, uint64_t seed, size_t n, size_t k, uint32_t *list)
{
	enum { CH = 256 };
	uint64_t   idx[CH];
	struct src s;
	src_init(&s, id, NULL, seed, n, k);
	for (size_t j0 = 0; j0 < k; j0 += CH) {
		size_t m = k - j0 < CH ? k - j0 : CH;
		(void) src_fill(&s, idx, m);
		for (size_t t = 0; t < m; t++)
			list[j0 + t] = (uint32_t) idx[t];
	}
}

int
comp__sparse_encode(const struct comp_codec *c, const float *x, size_t n,
    uint64_t *rng, uint8_t *out)
{
	size_t k = comp_topk_k(c->topk_ratio, n);
	fb_put_u32le(out, (uint32_t) k);
	if (k == 0) { // n == 0
		if (is_randk(c->id))
			fb_put_u64le(out + 4, seed_of(x, n, rng));
		return FB_OK;
	}
	uint32_t *list;
	float    *vals;
	if (is_randk(c->id)) {
		uint64_t seed = seed_of(x, n, rng);
		fb_put_u64le(out + 4, seed);
		if ((list = comp__work(8 * k)) == NULL)
			return FB_ENOMEM;
		vals = (float *) (void *) (list + k);
		randk_list(c->id, seed, n, k, list);
		return encode_vals(c, x, list, k, vals, out + 12);
	}
	int rv = comp__topk_select(x, n, k, &list, &vals);
	if (rv != FB_OK)
		return rv;
	ef_write(list, n, k, out + 4);
	return encode_vals(c, x, list, k, vals,
	    out + 4 + (ef_bits(n, k) + 7) / 8);
}

// ---- validate and decode ---------------------------------------------------

// CHUNK: indices a decoder produces at a time (on the stack).
enum { CHUNK = 64 };

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
		struct src s;
		uint64_t   idx[CHUNK], prev = 0;
		src_init(&s, c->id, in + 4, 0, n, k);
		for (size_t j0 = 0; j0 < k; j0 += CHUNK) {
			size_t m = k - j0 < CHUNK ? k - j0 : CHUNK;
			if (src_fill(&s, idx, m) != 0)
				return FB_EPROTO;
			uint64_t bad = 0;
			for (size_t t = 0; t < m; t++) {
				bad |= (idx[t] >= n) |
				    (j0 + t > 0 && idx[t] <= prev);
				prev = idx[t];
			}
			if (bad)
				return FB_EPROTO;
		}
		// no set bit after the k-th: not in the block, not in padding
		uint64_t total = (uint64_t) s.efbytes * 8;
		for (uint64_t p = s.up; p < total; p++)
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

// value_of is the decoded value j: fp32, or code j of a q8/q4 payload
// times step (the bucket's s / L, computed by the caller once a bucket).
static float
value_of(unsigned b, const uint8_t *vals, const uint8_t *codes, size_t j,
    float step)
{
	if (b == 32)
		return fb_get_f32le(vals + 4 * j);
	return (float) comp__sext(comp__get_code(b, codes, j), b) * step;
}

void
comp__sparse_decode(const struct comp_codec *c, const uint8_t *in, size_t n,
    float *out, int mode)
{
	size_t         k      = fb_get_u32le(in);
	size_t         len    = size_for_k(c, n, k);
	const uint8_t *vals   = in + len - vals_size(c, k);
	unsigned       b      = comp__sparse_bits(c->id);
	size_t         bucket = c->bucket,
	       nb             = b == 32 ? 0 : (k + bucket - 1) / bucket;
	const uint8_t *codes  = vals + 4 * nb;
	float          L      = (float) ((1u << (b < 32 ? b - 1 : 1)) - 1);
	float          step   = 0.0f;
	struct src     s;
	src_init(&s, c->id, in + 4, is_randk(c->id) ? fb_get_u64le(in + 4) : 0,
	    n, k);
	if (mode == COMP__SET)
		memset(out, 0, n * sizeof *out);
	// Two chunks in flight: the next chunk's indices are produced and
	// their cache lines prefetched before this chunk's values are
	// stored, so the scatter does not wait on one miss at a time.
	uint64_t idx[2][CHUNK];
	size_t   m = k < CHUNK ? k : CHUNK;
	(void) src_fill(&s, idx[0], m);
	for (size_t j0 = 0, cur = 0; j0 < k; j0 += CHUNK, cur ^= 1) {
		size_t j1 = j0 + CHUNK, mn = 0;
		if (j1 < k) {
			mn = k - j1 < CHUNK ? k - j1 : CHUNK;
			(void) src_fill(&s, idx[cur ^ 1], mn);
			for (size_t t = 0; t < mn; t++)
				__builtin_prefetch(out + idx[cur ^ 1][t], 1);
		}
		m = k - j0 < CHUNK ? k - j0 : CHUNK;
		for (size_t t = 0; t < m; t++) {
			size_t j = j0 + t;
			if (b != 32 && j % bucket == 0) // s / L once a bucket
				step = fb_get_f32le(vals + 4 * (j / bucket)) /
				    L;
			comp__store(out, (size_t) idx[cur][t],
			    value_of(b, vals, codes, j, step), mode);
		}
	}
}
