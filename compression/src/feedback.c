// feedback.c — error feedback on the push side and the shared reference on
// the pull side (docs/algorithms.md §2.4).
//
// Push (EF): p = g + e; c = Q(p); e = p - deq(c). e holds p while encoding,
// then the SUB decode mode turns it into the residual, so no scratch is
// needed; a pre-pass refuses a non-finite p so that e is never left half
// updated. The bucketed quantizers take a fused two-pass route in quant.c
// (comp__q_ef_encode, comp__q_ref_encode) with the same bits.
// Pull (EF21-P): d = Q(x - ref); ref += deq(d), where the update is
// comp_decode_add itself: the trainer applying the same bytes with the same
// call gets the same bits.
#include <float.h>
#include <math.h>

#include "comp_impl.h"

int
comp_ef_encode(const struct comp_codec *c, const float *g, float *e, size_t n,
    uint64_t *rng, uint8_t *out, size_t cap, size_t *out_len)
{
	size_t need;
	int rv = comp__check_enc_args(c, g, n, rng, out, cap, out_len, &need);
	if (rv != FB_OK)
		return rv;
	if (n > 0 && e == NULL)
		return FB_EINVAL;
	if (comp__q_fusable(comp__qbits(c->id), c->bucket)) {
		rv = comp__q_ef_encode(comp__qbits(c->id), c->bucket,
		    c->stochastic, rng, g, e, n, out);
		if (rv == FB_OK)
			*out_len = need;
		return rv;
	}
	// Refuse a non-finite p before touching e, so e stays valid state.
	uint32_t mx = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t a = comp__f2u(g[i] + e[i]) & 0x7fffffffu;
		mx         = a > mx ? a : mx;
	}
	if (mx >= COMP__INF_BITS)
		return FB_EINVAL;
	for (size_t i = 0; i < n; i++)
		e[i] = g[i] + e[i]; // e now holds p
	rv = comp__encode(c, e, n, rng, out, need, out_len);
	FB_ASSERT(rv == FB_OK); // p is finite and out is big enough
	comp__decode(c, out, n, e, COMP__SUB); // e = p - deq(c)
	return FB_OK;
}

// ref_delta_max is the largest magnitude codec id carries finitely.
static float
ref_delta_max(uint32_t id)
{
	switch (id) {
	case COMP_FP16:
		return 65504.0f;
	case COMP_BF16:
		return comp__u2f(0x7f7f0000u); // bf16's largest finite
	default:
		return FLT_MAX;
	}
}

int
comp_ref_encode(const struct comp_codec *c, const float *x, float *ref,
    size_t n, float *scratch, uint8_t *out, size_t cap, size_t *out_len)
{
	size_t need;
	int rv = comp__check_enc_args(c, x, n, NULL, out, cap, out_len, &need);
	if (rv != FB_OK)
		return rv;
	if (c->stochastic || (n > 0 && (ref == NULL || scratch == NULL)))
		return FB_EINVAL;
	if (comp__q_fusable(comp__qbits(c->id), c->bucket)) {
		rv = comp__q_ref_encode(comp__qbits(c->id), c->bucket, x, ref,
		    n, out);
		if (rv == FB_OK)
			*out_len = need;
		return rv;
	}
	// d is clamped to the codec's largest finite value: an fp16 delta
	// over 65504 (or a difference over FLT_MAX) would otherwise encode
	// as Inf and poison the reference on both sides for good. Clamped,
	// the reference moves as far as the codec can carry and the rest
	// goes out in the next delta; both sides add the same finite bits.
	// Near FLT_MAX, bf16's rounding (up to 2^-8 of d) could carry ref
	// past x and overflow: there d is shortened by 2^-7 first.
	float max = ref_delta_max(c->id);
	for (size_t i = 0; i < n; i++) {
		float d = x[i] - ref[i];
		d       = d > max ? max : d < -max ? -max : d;
		if (c->id == COMP_BF16 && fabsf(x[i]) >= 0x1p127f) {
			d *= 1.0f - 0x1p-7f;
		}
		scratch[i] = d;
	}
	rv = comp__encode(c, scratch, n, NULL, out, need, out_len);
	if (rv != FB_OK)
		return rv;
	// The very call the trainer makes on its copy: same bits by design.
	return comp_decode_add(c, out, need, n, ref);
}
