// topk.c — top-k sparsification: keep the k values of largest magnitude.
//
// DESIGN
// Wire layout: u32 k, then k u32 indices (strictly increasing), then the k
// fp32 values, all little-endian. k travels on the wire, so a decoder never
// recomputes ceil(ratio * n) in floating point; it only checks k <= n and the
// length, and rejects indices that are out of range or not increasing, and
// non-finite values.
//
// Selection needs no allocation: a radix select over the bit patterns of
// |x| (which order like the magnitudes for finite floats) finds the k-th
// largest magnitude T in three histogram passes of 11, 11 and 9 bits (a
// 2048-counter histogram on the stack). One last pass in index order keeps
// every |x| > T and the first (k - #greater) values equal to T, so ties go to
// the lowest indices and the indices come out sorted.
#include <math.h>

#include "comp_impl.h"

size_t
comp_topk_k(float ratio, size_t n)
{
	if (n == 0 || !(ratio > 0.0f))
		return 0;
	double k = ceil((double) ratio * (double) n);
	if (k < 1.0)
		return 1;
	if (k >= (double) n)
		return n;
	return (size_t) k;
}

// kth_bits returns the bit pattern T of the k-th largest |x| (1 <= k <= n)
// and, in *above, how many |x| are strictly greater than T. With cand, the
// n patterns are read from cand instead (x unused).
static uint32_t
kth_bits(const float *x, const uint8_t *cand, size_t n, size_t k,
    size_t *above)
{
	static const unsigned shift[3] = { 20, 9, 0 };
	static const unsigned width[3] = { 11, 11, 9 };
	uint32_t              prefix = 0, pmask = 0; // bits fixed so far
	size_t   greater = 0; // values known to be above the prefix
	uint32_t hist[2048];
	for (int pass = 0; pass < 3; pass++) {
		unsigned nbin = 1u << width[pass];
		memset(hist, 0, nbin * sizeof hist[0]);
		for (size_t i = 0; i < n; i++) {
			uint32_t a = cand ? comp__cand_get(cand, i)
			                  : comp__f2u(x[i]) & 0x7fffffffu;
			if ((a & pmask) == prefix)
				hist[(a >> shift[pass]) & (nbin - 1)]++;
		}
		// walk bins from the top until k - greater values are covered
		size_t   need = k - greater;
		unsigned bin  = nbin;
		while (bin-- > 0) {
			if (hist[bin] >= need)
				break;
			need -= hist[bin];
			greater += hist[bin];
		}
		prefix |= (uint32_t) bin << shift[pass];
		pmask |= (uint32_t) (nbin - 1) << shift[pass];
	}
	*above = greater;
	return prefix;
}

uint32_t
comp__topk_kth(const float *x, size_t n, size_t k, size_t *ties)
{
	size_t   above;
	uint32_t t = kth_bits(x, NULL, n, k, &above);
	*ties      = k - above;
	return t;
}

uint32_t
comp__topk_kth_cand(const uint8_t *cand, size_t c, size_t k, size_t *ties)
{
	size_t   above;
	uint32_t t = kth_bits(NULL, cand, c, k, &above);
	*ties      = k - above;
	return t;
}

// The sample: SAMPLES values at a fixed stride. A guess at rank r of the
// sample has a relative spread of about 1/sqrt(r); below MIN_RANK it is
// too loose to be worth the pass, and small inputs take the plain path.
enum { SAMPLES = 4096, MIN_RANK = 24, MIN_N = 16384 };

size_t
comp__topk_cand(const float *x, size_t n, size_t k, uint8_t *cand, size_t cap,
    uint32_t *maxbits)
{
	if (n < MIN_N || cap <= k || cap >= n)
		return 0;
	double r = (double) (k + cap) / 2.0 * SAMPLES / (double) n;
	if (r < MIN_RANK)
		return 0;
	// whole cache lines: 256 runs of 16 values, evenly spaced
	float  samp[SAMPLES];
	size_t stride = n / (SAMPLES / 16), above;
	for (size_t j = 0; j < SAMPLES / 16; j++)
		memcpy(samp + 16 * j, x + j * stride, 16 * sizeof *x);
	uint32_t t = kth_bits(samp, NULL, SAMPLES, (size_t) r, &above);
	size_t   c = comp__kern()->collect_ge(x, n, t, cand, cap, maxbits);
	return c >= k && c <= cap ? c : 0;
}

int
comp__finite_all(const float *x, size_t n)
{
	return n == 0 || comp__kern()->absmax_bits(x, n) < COMP__INF_BITS;
}

// keep_pass walks the kept indices of one pass (candidates or all of x):
// every |x| > t, and the first `ties` equal to t. at(j) is the index of
// entry j (cand: the u32 there, else j itself).
static void
keep_pass(const float *x, const uint8_t *cand, size_t m, size_t k, uint32_t t,
    size_t ties, void (*keep)(void *, size_t, uint32_t), void *ctx)
{
	size_t j = 0;
	for (size_t r = 0; r < m && j < k; r++) {
		uint32_t i = cand ? comp__cand_get(cand, r) : (uint32_t) r;
		uint32_t a = comp__f2u(x[i]) & 0x7fffffffu;
		if (a > t || (a == t && ties > 0)) {
			if (a == t)
				ties--;
			keep(ctx, j++, i);
		}
	}
}

int
comp__topk_select(const float *x, size_t n, size_t k, uint8_t *scratch,
    size_t cap, void (*keep)(void *ctx, size_t j, uint32_t i), void *ctx)
{
	// Fast path: the candidates' patterns give T; a second pass collects
	// the indices of |x| >= T into scratch, and keep_pass walks them.
	// A missed guess, or massive ties, take the radix passes over all x.
	size_t   ties;
	uint32_t mx;
	size_t   c = comp__topk_cand(x, n, k, scratch, cap, &mx);
	if (c > 0 && mx >= COMP__INF_BITS)
		return FB_EINVAL;
	if (c == 0 && !comp__finite_all(x, n))
		return FB_EINVAL;
	if (c > 0) {
		uint32_t t  = comp__topk_kth_cand(scratch, c, k, &ties);
		size_t   c2 = comp__kern()->select_ge(x, n, t, scratch, cap);
		if (c2 <= cap) {
			keep_pass(x, scratch, c2, k, t, ties, keep, ctx);
			return FB_OK;
		}
	}
	uint32_t t = comp__topk_kth(x, n, k, &ties);
	keep_pass(x, NULL, n, k, t, ties, keep, ctx);
	return FB_OK;
}

// keep_u32 stores kept index i as native u32 slot j of the index area (it
// is rewritten little-endian once all are known).
static void
keep_u32(void *ctx, size_t j, uint32_t i)
{
	memcpy((uint8_t *) ctx + 4 * j, &i, 4);
}

int
comp__topk_encode(size_t k, const float *x, size_t n, uint8_t *out)
{
	if (k == 0) {
		if (!comp__finite_all(x, n))
			return FB_EINVAL;
		fb_put_u32le(out, 0);
		return FB_OK;
	}
	// The index and value areas (2k u32) hold the candidates meanwhile.
	uint8_t *idx = out + 4, *val = out + 4 + 4 * k;
	int      rv = comp__topk_select(x, n, k, idx, 2 * k, keep_u32, idx);
	if (rv != FB_OK)
		return rv;
	fb_put_u32le(out, (uint32_t) k);
	for (size_t j = 0; j < k; j++) {
		uint32_t i = comp__cand_get(idx, j);
		fb_put_u32le(idx + 4 * j, i);
		fb_put_f32le(val + 4 * j, x[i]);
	}
	return FB_OK;
}

int
comp__topk_validate(const uint8_t *in, size_t len, size_t n)
{
	if (len < 4)
		return FB_EPROTO;
	uint32_t k = fb_get_u32le(in);
	if (k > n || len != 4 + 8 * (size_t) k)
		return FB_EPROTO;
	const uint8_t *idx = in + 4, *val = in + 4 + 4 * (size_t) k;
	for (size_t j = 0; j < k; j++) {
		uint32_t i = fb_get_u32le(idx + 4 * j);
		if (i >= n || (j > 0 && i <= fb_get_u32le(idx + 4 * (j - 1))))
			return FB_EPROTO;
		if ((fb_get_u32le(val + 4 * j) & 0x7fffffffu) >=
		    COMP__INF_BITS)
			return FB_EPROTO;
	}
	return FB_OK;
}

void
comp__topk_decode(const uint8_t *in, size_t n, float *out, int mode)
{
	size_t         k   = fb_get_u32le(in);
	const uint8_t *idx = in + 4, *val = in + 4 + 4 * k;
	if (mode == COMP__SET)
		memset(out, 0, n * sizeof *out);
	for (size_t j = 0; j < k; j++) {
		comp__store(out, fb_get_u32le(idx + 4 * j),
		    fb_get_f32le(val + 4 * j), mode);
	}
}
