// quant.c — the bucketed symmetric quantizer (q8, q4, q2) and the scaled
// sign (1 bit) over the kernel table in use (comp__kern, kern.c); the
// kernels themselves, portable and AVX-512, are quant_kern.c's.
//
// DESIGN
// Wire layout (FORMAT.md): all nb = ceil(n/B) fp32 scales first, then the
// n codes packed contiguously by global element index, b bits each, least
// significant bits first, the final byte zero-padded. Packing by global index
// (not per bucket) keeps the size at exactly 4*nb + ceil(n*b/8) for any B and
// lets one vector loop run across bucket boundaries; a bucket may therefore
// start in the middle of a byte, which the scalar head/tail code handles by
// writing codes strictly in index order (the first code of a byte sets the
// byte, the later ones OR into it).
//
// Codes are b-bit two's complement in [-L, L]; the pattern -2^(b-1) is never
// produced and a decoder rejects it, as it rejects non-zero padding and any
// scale that is not a finite number >= 0. Validation runs over the whole
// buffer before the first float is written, so a failed decode_add leaves
// the accumulator untouched.
//
// Rounding: q = rne(clamp(x * inv, -L, L)) with inv = L / s computed once per
// bucket in fp32. When L / s overflows (s subnormal) the bucket falls back to
// double arithmetic. Decoding is always (float) q * (s / L) with s / L
// computed once per bucket, which both the portable and the AVX-512 kernels
// do with separate multiply and add (the target has -ffp-contract=off).
#include <math.h>
#include <string.h>

#include "comp_impl.h"

// ---- generic, any-b, element-at-a-time helpers ----------------------------

// ---- sizes ----------------------------------------------------------------

size_t
comp__q_size(unsigned b, uint32_t bucket, size_t n)
{
	size_t nb = n / bucket + (n % bucket != 0);
	return 4 * nb + (n * b + 7) / 8;
}

// ---- encode ---------------------------------------------------------------

// enc_range encodes x[0..m), elements i0.. of the shard, with multiplier inv.
static void
enc_range(const struct comp__kern *k, unsigned b, const float *x, size_t i0,
    size_t m, float inv, uint8_t *codes)
{
	float L = (float) ((1u << (b - 1)) - 1);
	if (b == 8) {
		k->q8_enc(x, m, inv, codes + i0);
		return;
	}
	size_t i = 0;
	if (b == 4) {
		if ((i0 & 1) && m > 0) {
			comp__put_code(4, codes, i0,
			    (unsigned) comp__qround(x[0] * inv, L));
			i = 1;
		}
		if (i < m)
			k->q4_enc(x + i, m - i, inv, codes + (i0 + i) / 2);
		return;
	}
	// b == 2: codes one at a time up to a byte boundary, then the kernel
	for (; i < m && ((i0 + i) & 3) != 0; i++)
		comp__put_code(b, codes, i0 + i,
		    (unsigned) comp__qround(x[i] * inv, L));
	if (i < m)
		k->q2_enc(x + i, m - i, inv, codes + (i0 + i) / 4);
}

// enc_range_slow is enc_range for a subnormal scale, where L / s overflows:
// t = x * L / s in double.
static void
enc_range_slow(unsigned b, const float *x, size_t i0, size_t m, float s,
    uint8_t *codes)
{
	double L = (double) ((1u << (b - 1)) - 1);
	for (size_t i = 0; i < m; i++) {
		double t = (double) x[i] * L / (double) s;
		comp__put_code(b, codes, i0 + i,
		    (unsigned) comp__qround((float) t, (float) L));
	}
}

// enc_range_sr rounds stochastically: q = floor(t + u), u ~ U[0, 1) with
// 53 random bits, t = x * L / s in double; E[q] = t up to 2^-53.
static void
enc_range_sr(unsigned b, const float *x, size_t i0, size_t m, float s,
    uint64_t *rng, uint8_t *codes)
{
	double L = (double) ((1u << (b - 1)) - 1);
	for (size_t i = 0; i < m; i++) {
		double t = s > 0.0f ? (double) x[i] * L / (double) s : 0.0;
		double u = (double) (comp__rng_next(rng) >> 11) * 0x1p-53;
		double q = floor(t + u);
		q        = q > L ? L : q;
		q        = q < -L ? -L : q;
		comp__put_code(b, codes, i0 + i, (unsigned) (int) q);
	}
}

static int
sign_encode(uint32_t bucket, const float *x, size_t n, uint8_t *out)
{
	const struct comp__kern *k     = comp__kern();
	size_t                   nb    = n / bucket + (n % bucket != 0);
	uint8_t                 *codes = out + 4 * nb;
	for (size_t j = 0; j < nb; j++) {
		size_t i0  = j * bucket;
		size_t m   = n - i0 < bucket ? n - i0 : bucket;
		double sum = k->abs_sum(x + i0, m);
		if (!isfinite(sum))
			return FB_EINVAL;
		fb_put_f32le(out + 4 * j, (float) (sum / (double) m));
		size_t i =
		    0; // bits one at a time up to a byte, then the kernel
		for (; i < m && ((i0 + i) & 7) != 0; i++)
			comp__put_code(1, codes, i0 + i, x[i0 + i] < 0.0f);
		if (i < m)
			k->sign_enc(x + i0 + i, m - i, codes + (i0 + i) / 8);
	}
	return FB_OK;
}

// Values are encoded in groups of whole buckets, up to GROUP values: first
// every scale of the group (so the divisions L / s do not stall the vector
// loop), then the codes, while the group is still in L1. The values are
// a's own (FORM_A) or formed from two arrays into an L1 buffer first,
// a + c (FORM_ADD, error feedback) or a - c (FORM_SUB, the pull delta):
// see "fused error feedback" below.
enum { GROUP = 4096, GMAX = 64 };
enum { FORM_A, FORM_ADD, FORM_SUB };

static int
q_encode_groups(unsigned b, uint32_t bucket, int stochastic, uint64_t *rng,
    const float *a, const float *c, int form, size_t n, uint8_t *out)
{
	const struct comp__kern *k     = comp__kern();
	size_t                   nb    = n / bucket + (n % bucket != 0);
	uint8_t                 *codes = out + 4 * nb;
	float                    L     = (float) ((1u << (b - 1)) - 1);
	size_t                   per   = bucket >= GROUP ? 1 : GROUP / bucket;
	per                            = per > GMAX ? GMAX : per;
	float              inv[GMAX], sv[GMAX];
	_Alignas(64) float buf[GROUP]; // formed values (bucket <= GROUP)
	for (size_t j0 = 0; j0 < nb; j0 += per) {
		size_t       j1 = j0 + per < nb ? j0 + per : nb;
		size_t       g0 = j0 * bucket;
		const float *x  = a + g0; // x[0] is value g0
		if (form != FORM_A) {
			size_t m = (j1 * bucket < n ? j1 * bucket : n) - g0;
			if (form == FORM_ADD) {
				for (size_t i = 0; i < m; i++)
					buf[i] = a[g0 + i] + c[g0 + i];
			} else {
				for (size_t i = 0; i < m; i++)
					buf[i] = a[g0 + i] - c[g0 + i];
			}
			x = buf;
		}
		// jf: the first bucket the generic passes below encode.
		size_t jf      = j0;
		size_t (*fused)(const float *, size_t, uint8_t *,
		    uint8_t *) = b == 4 ? k->q4_enc_b128
		    : b == 2            ? k->q2_enc_b128
		                        : NULL;
		if (bucket == 128 && !stochastic && fused != NULL) {
			size_t full = (j1 * bucket <= n ? j1 : j1 - 1) - j0;
			jf += fused(x, full, out + 4 * j0, codes + g0 * b / 8);
		}
		for (size_t j = jf; j < j1; j++) {
			size_t   i0   = j * bucket;
			size_t   m    = n - i0 < bucket ? n - i0 : bucket;
			uint32_t bits = k->absmax_bits(x + (i0 - g0), m);
			if (bits >= COMP__INF_BITS)
				return FB_EINVAL;
			sv[j - j0] = comp__u2f(bits);
			fb_put_f32le(out + 4 * j, sv[j - j0]);
		}
		// the divisions in a loop of their own, which vectorises
		for (size_t t = jf - j0; t < j1 - j0; t++)
			inv[t] = sv[t] > 0.0f ? L / sv[t] : 0.0f;
		for (size_t j = jf; j < j1; j++) {
			size_t       i0 = j * bucket;
			size_t       m  = n - i0 < bucket ? n - i0 : bucket;
			float        s  = fb_get_f32le(out + 4 * j);
			const float *xj = x + (i0 - g0);
			if (stochastic)
				enc_range_sr(b, xj, i0, m, s, rng, codes);
			else if (isinf(inv[j - j0]))
				enc_range_slow(b, xj, i0, m, s, codes);
			else
				enc_range(k, b, xj, i0, m, inv[j - j0], codes);
		}
	}
	return FB_OK;
}

int
comp__q_encode(unsigned b, uint32_t bucket, int stochastic, uint64_t *rng,
    const float *x, size_t n, uint8_t *out)
{
	if (b == 1)
		return sign_encode(bucket, x, n, out);
	return q_encode_groups(b, bucket, stochastic, rng, x, NULL, FORM_A, n,
	    out);
}

// ---- validate and decode --------------------------------------------------

int
comp__q_validate(unsigned b, uint32_t bucket, const uint8_t *in, size_t n)
{
	size_t nb = n / bucket + (n % bucket != 0);
	for (size_t j = 0; j < nb; j++) {
		float s = fb_get_f32le(in + 4 * j);
		if (!(s >= 0.0f) || isinf(s))
			return FB_EPROTO;
	}
	const uint8_t *codes  = in + 4 * nb;
	size_t         nbytes = (n * b + 7) / 8;
	unsigned       tail   = (unsigned) ((n * b) & 7);
	if (tail != 0 && (codes[nbytes - 1] >> tail) != 0)
		return FB_EPROTO; // padding bits must be zero
	const struct comp__kern *k   = comp__kern();
	int                      bad = 0;
	if (b == 8) {
		bad = k->q8_bad(codes, nbytes);
	} else if (b == 4) {
		bad = k->q4_bad(codes, nbytes);
	} else if (b == 2) {
		unsigned acc = 0;
		for (size_t i = 0; i < nbytes; i++) {
			unsigned c = codes[i];
			acc |= c & 0xaau & ~(c << 1); // field 0b10 = -2
		}
		bad = acc != 0;
	}
	return bad ? FB_EPROTO : FB_OK;
}

static void
dec_range(const struct comp__kern *k, unsigned b, const uint8_t *codes,
    size_t i0, size_t m, float step, float *out, int mode)
{
	if (b == 8) {
		k->q8_dec(codes + i0, m, step, out, mode);
		return;
	}
	size_t i = 0;
	if (b == 4) {
		if ((i0 & 1) && m > 0) {
			comp__store(out, 0,
			    (float) comp__sext(comp__get_code(4, codes, i0),
			        4) *
			        step,
			    mode);
			i = 1;
		}
		if (i < m)
			k->q4_dec(codes + (i0 + i) / 2, m - i, step, out + i,
			    mode);
		return;
	}
	for (; i < m && ((i0 + i) & 3) != 0; i++) // b == 2
		comp__store(out, i,
		    (float) comp__sext(comp__get_code(b, codes, i0 + i), b) *
		        step,
		    mode);
	if (i < m)
		k->q2_dec(codes + (i0 + i) / 4, m - i, step, out + i, mode);
}

void
comp__q_decode(unsigned b, uint32_t bucket, const uint8_t *in, size_t n,
    float *out, int mode)
{
	const struct comp__kern *k     = comp__kern();
	size_t                   nb    = n / bucket + (n % bucket != 0);
	const uint8_t           *codes = in + 4 * nb;
	float                    L     = (float) ((1u << (b - 1)) - 1);
	for (size_t j = 0; j < nb; j++) {
		size_t i0 = j * bucket;
		size_t m  = n - i0 < bucket ? n - i0 : bucket;
		float  s  = fb_get_f32le(in + 4 * j);
		if (b == 1) {
			size_t i = 0; // bits one at a time up to a byte
			for (; i < m && ((i0 + i) & 7) != 0; i++)
				comp__store(out + i0, i,
				    comp__get_code(1, codes, i0 + i) ? -s : s,
				    mode);
			if (i < m)
				k->sign_dec(codes + (i0 + i) / 8, m - i, s,
				    out + i0 + i, mode);
			continue;
		}
		float step = s / L;
		dec_range(k, b, codes, i0, m, step, out + i0, mode);
	}
}

// ---- fused error feedback and reference encoding ---------------------------
// comp_ef_encode and comp_ref_encode quantise a value formed from two
// arrays (p = g + e; d = x - ref) and then update one of them in place
// (e = p - deq; ref = ref + deq). Done as separate calls that is about five
// passes over memory; here it is two. Phase 1 is q_encode_groups forming
// the values group by group in its L1 buffer, touching neither e nor ref,
// so a non-finite value fails with both as they were. Phase 2 updates them
// with dec_range, the very code comp_decode_add runs, so the bits equal the
// unfused sequence's (tests/compression/test_feedback.c compares them) and
// the trainer applying the same delta gets the server's reference exactly.
int
comp__q_fusable(unsigned b, uint32_t bucket)
{
	return b >= 2 && b <= 8 && bucket >= 1 && bucket <= GROUP;
}

// fused_update applies the codes in out to x: ef: x = (g + x) - deq;
// else x = x + deq.
static void
fused_update(unsigned b, uint32_t bucket, const uint8_t *out, size_t n,
    const float *g, float *x, int ef)
{
	const struct comp__kern *k     = comp__kern();
	size_t                   nb    = n / bucket + (n % bucket != 0);
	const uint8_t           *codes = out + 4 * nb;
	float                    L     = (float) ((1u << (b - 1)) - 1);
	for (size_t j = 0; j < nb; j++) {
		size_t i0 = j * bucket;
		size_t m  = n - i0 < bucket ? n - i0 : bucket;
		if (ef) {
			for (size_t i = 0; i < m; i++)
				x[i0 + i] = g[i0 + i] + x[i0 + i];
		}
		dec_range(k, b, codes, i0, m, fb_get_f32le(out + 4 * j) / L,
		    x + i0, ef ? COMP__SUB : COMP__ADD);
	}
}

int
comp__q_ef_encode(unsigned b, uint32_t bucket, int stochastic, uint64_t *rng,
    const float *g, float *e, size_t n, uint8_t *out)
{
	int rv = q_encode_groups(b, bucket, stochastic, rng, g, e, FORM_ADD, n,
	    out);
	if (rv == FB_OK)
		fused_update(b, bucket, out, n, g, e, 1);
	return rv;
}

int
comp__q_ref_encode(unsigned b, uint32_t bucket, const float *x, float *ref,
    size_t n, uint8_t *out)
{
	int rv = q_encode_groups(b, bucket, 0, NULL, x, ref, FORM_SUB, n, out);
	if (rv == FB_OK)
		fused_update(b, bucket, out, n, NULL, ref, 0);
	return rv;
}
