// topk.c — top-k sparsification: keep the k values of largest magnitude.
//
// DESIGN
// Wire layout: u32 k, then k u32 indices (strictly increasing), then the k
// fp32 values, all little-endian. k travels on the wire, so a decoder never
// recomputes ceil(ratio * n) in floating point; it only checks k <= n and the
// length, and rejects indices that are out of range or not increasing, and
// non-finite values.
//
// Selection: the bit patterns of |x| order like the magnitudes for finite
// floats. A sample of 4096 values (whole cache lines at a fixed stride)
// gives a threshold that about 1.5k values reach; one vectorised pass
// collects the index and pattern of each of them into the thread's
// workspace (work.c, 2k + 64 entries); bisection with vectorised counts
// finds the exact k-th largest pattern T among them; and one branch-free
// walk keeps every pattern > T and the first (k - #greater) equal to T, so
// ties go to the lowest indices and the indices come out sorted. A guess
// that misses (fewer than k or more than 2k + 64 candidates), a small x or
// a large ratio take the exact path instead: a radix select over all of x
// (three histogram passes of 11, 11 and 9 bits) and a walk over all of x.
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
// and, in *above, how many |x| are strictly greater than T.
static uint32_t
kth_bits(const float *x, size_t n, size_t k, size_t *above)
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
			uint32_t a = comp__f2u(x[i]) & 0x7fffffffu;
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

// topk_kth returns the bit pattern T of the k-th largest |x| (1 <= k <=
// n, x finite) and in *ties how many values with |x| == T the k kept take
// (the lowest-indexed ones): every |x| > T is kept too.
static uint32_t
topk_kth(const float *x, size_t n, size_t k, size_t *ties)
{
	size_t   above;
	uint32_t t = kth_bits(x, n, k, &above);
	*ties      = k - above;
	return t;
}

// The sample: SAMPLES values at a fixed stride. A guess at rank r of the
// sample has a relative spread of about 1/sqrt(r); below MIN_RANK it is
// too loose to be worth the pass, and small inputs take the plain path.
enum { SAMPLES = 4096, MIN_RANK = 24, MIN_N = 16384 };

// kth_count returns the k-th largest of the patterns a[0..m) and, in
// *above, how many are strictly greater, by bisecting [lo, hi) with
// vectorised counts: count(>= lo) >= k > count(>= hi). About 30 counting
// passes over m values, which beats a histogram whose bins (the values
// near the top share a few) serialise their increments. With above NULL
// it stops once [lo, hi) spans 2^15 patterns (1/256 of an octave) and
// returns lo, a guess with at least k values at or above it (all that a
// threshold needs).
static uint32_t
kth_count(const uint32_t *a, size_t m, size_t k, uint32_t lo, uint32_t hi,
    size_t *above)
{
	const struct comp__kern *kn = comp__kern();
	while (hi - lo > 1 && (above != NULL || hi - lo > (1u << 15))) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (kn->count_ge(a, m, mid) >= k)
			lo = mid;
		else
			hi = mid;
	}
	if (above != NULL)
		*above = kn->count_ge(a, m, hi);
	return lo;
}

// cand_threshold guesses from a sample of x a threshold that about
// (k + cap) / 2 values reach; 0 when x is too small for a useful guess.
static uint32_t
cand_threshold(const float *x, size_t n, size_t k, size_t cap)
{
	if (n < MIN_N || cap >= n)
		return 0;
	double r = (double) (k + cap) / 2.0 * SAMPLES / (double) n;
	if (r < MIN_RANK)
		return 0;
	// whole cache lines: 256 runs of 16 values, evenly spaced
	uint32_t samp[SAMPLES], mx = 0;
	size_t   stride = n / (SAMPLES / 16);
	for (size_t j = 0; j < SAMPLES / 16; j++)
		for (size_t i = 0; i < 16; i++) {
			uint32_t a = comp__f2u(x[j * stride + i]) &
			    0x7fffffffu;
			samp[16 * j + i] = a;
			mx               = a > mx ? a : mx;
		}
	return kth_count(samp, SAMPLES, (size_t) r, 0, mx + 1, NULL);
}

// finite_all is 1 if every x[0..n) is finite: one pass of the kernel
// table's absmax (AVX-512 where the CPU has it, faster there than
// fb_all_finite's portable loop).
static int
finite_all(const float *x, size_t n)
{
	return n == 0 || comp__kern()->absmax_bits(x, n) < COMP__INF_BITS;
}

// keep_cand compacts the c candidates (idx[r], bits[r]), in index order,
// to the indices of the kept ones: every pattern > t and the first `ties`
// equal to t. Branch-free on the common case (a kept candidate is a coin
// flip to the branch predictor); only a pattern equal to t, rare, takes a
// branch. list may be idx itself.
static void
keep_cand(const uint32_t *idx, const uint32_t *bits, size_t c, uint32_t t,
    size_t ties, uint32_t *list)
{
	size_t j = 0;
	for (size_t r = 0; r < c; r++) {
		uint32_t a = bits[r];
		list[j]    = idx[r];
		j += a > t;
		if (a == t && ties > 0) {
			ties--;
			j++;
		}
	}
}

// keep_all is keep_cand over all of x; list has room for k + 1.
static void
keep_all(const float *x, size_t n, size_t k, uint32_t t, size_t ties,
    uint32_t *list)
{
	size_t j = 0;
	for (size_t i = 0; i < n && j < k; i++) {
		uint32_t a = comp__f2u(x[i]) & 0x7fffffffu;
		list[j]    = (uint32_t) i;
		j += a > t;
		if (a == t && ties > 0) {
			ties--;
			j++;
		}
	}
}

int
comp__topk_select(const float *x, size_t n, size_t k, uint32_t **list,
    float **spare)
{
	// The workspace: cap candidate indices, then their cap patterns
	// (which become the caller's spare floats once T is known).
	size_t    cap = n < 2 * k + 64 ? n + 1 : 2 * k + 64;
	uint32_t *idx = comp__work(8 * cap);
	if (idx == NULL)
		return FB_ENOMEM;
	uint32_t *bits = idx + cap;
	*list          = idx;
	*spare         = (float *) (void *) bits;
	// Fast path: one pass collects (index, pattern) of every |x| at or
	// above the sampled guess; T and the kept set come from those alone.
	// A missed guess, or massive ties, take the radix passes over all x.
	size_t   ties;
	uint32_t mx, t0 = cand_threshold(x, n, k, cap);
	if (t0 != 0) {
		size_t c = comp__kern()->collect_ge(x, n, t0, idx, bits, cap,
		    &mx);
		if (c <= cap && mx >= COMP__INF_BITS)
			return FB_EINVAL;
		if (c >= k && c <= cap) {
			size_t   above;
			uint32_t t = kth_count(bits, c, k, t0, mx + 1, &above);
			keep_cand(idx, bits, c, t, k - above, idx);
			return FB_OK;
		}
	}
	if (!finite_all(x, n))
		return FB_EINVAL;
	uint32_t t = topk_kth(x, n, k, &ties);
	keep_all(x, n, k, t, ties, idx);
	return FB_OK;
}

int
comp__topk_encode(size_t k, const float *x, size_t n, uint8_t *out)
{
	if (k == 0) {
		if (!finite_all(x, n))
			return FB_EINVAL;
		fb_put_u32le(out, 0);
		return FB_OK;
	}
	uint32_t *list;
	float    *spare;
	int       rv = comp__topk_select(x, n, k, &list, &spare);
	if (rv != FB_OK)
		return rv;
	uint8_t *idx = out + 4, *val = out + 4 + 4 * k;
	fb_put_u32le(out, (uint32_t) k);
	for (size_t j = 0; j < k; j++) {
		uint32_t i = list[j];
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
