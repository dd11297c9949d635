// codec.c — the public entry points: codec parsing and checking, sizing, and
// the encode/decode/error-feedback/shared-reference calls that dispatch to
// the per-codec code in quant.c, float16.c and topk.c.
//
// DESIGN
// Every call validates the codec and its pointers first, then sizes (exact
// for every codec, so FB_ENOSPC is decided before any byte is written), then
// validates untrusted input completely, and only then writes floats. Error
// feedback and the shared reference are built from encode plus the internal
// decode modes (SET/ADD/SUB), so the trainer's and the server's arithmetic
// is literally the same code.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comp_impl.h"

static const char *const names[COMP_CODEC_COUNT] = {
	[COMP_NONE]     = "none",
	[COMP_FP16]     = "fp16",
	[COMP_BF16]     = "bf16",
	[COMP_Q8]       = "q8",
	[COMP_Q4]       = "q4",
	[COMP_Q2]       = "q2",
	[COMP_SIGN]     = "sign",
	[COMP_TOPK]     = "topk",
	[COMP_TOPK_Q8]  = "topk+q8",
	[COMP_TOPK_Q4]  = "topk+q4",
	[COMP_RANDK]    = "randk",
	[COMP_RANDK_Q8] = "randk+q8",
	[COMP_RANDK_Q4] = "randk+q4",
};

// ---- codec descriptions ----------------------------------------------------

const char *
comp_codec_name(uint32_t id)
{
	return id < COMP_CODEC_COUNT ? names[id] : "unknown";
}

unsigned
comp__qbits(uint32_t id)
{
	switch (id) {
	case COMP_Q8:
		return 8;
	case COMP_Q4:
		return 4;
	case COMP_Q2:
		return 2;
	case COMP_SIGN:
		return 1;
	default:
		return 0;
	}
}

static void
say(char *why, size_t why_len, const char *fmt, const char *arg)
{
	if (why != NULL && why_len > 0)
		snprintf(why, why_len, fmt, arg);
}

int
comp_codec_parse_msg(const char *spec, uint32_t bucket, struct comp_codec *out,
    char *why, size_t why_len)
{
	if (spec == NULL || out == NULL) {
		say(why, why_len, "%s", "no codec spec given");
		return FB_EINVAL;
	}
	if (bucket == 0)
		bucket = COMP_BUCKET_DEFAULT;
	if (bucket > COMP_BUCKET_MAX) {
		say(why, why_len, "%s", "bucket must be in 1..1048576");
		return FB_EINVAL;
	}
	if (strcmp(spec, COMP_AUTO_SPEC) == 0) {
		// Link-aware choice: as one codec, the shared pull
		// reference's (comp.h).
		spec = COMP_AUTO_REF;
	}
	struct comp_codec c = COMP_CODEC_INIT;
	c.bucket            = bucket;
	const char *colon   = strchr(spec, ':');
	size_t      nlen    = colon ? (size_t) (colon - spec) : strlen(spec);
	const char *arg     = colon ? colon + 1 : NULL;
	uint32_t    id      = COMP_CODEC_COUNT;
	for (uint32_t i = 0; i <= COMP_TOPK; i++) // composites: by suffix
		if (strlen(names[i]) == nlen &&
		    strncmp(spec, names[i], nlen) == 0)
			id = i;
	if (nlen == 4 && strncmp(spec, "fp32", 4) == 0)
		id = COMP_NONE;
	if (nlen == 5 && strncmp(spec, "randk", 5) == 0)
		id = COMP_RANDK;
	if (id == COMP_CODEC_COUNT) {
		say(why, why_len,
		    "unknown codec '%s' (want none, fp16, bf16, q8, q4, q2, "
		    "sign, topk:R, topk:R+q8, topk:R+q4, randk:R, "
		    "randk:R+q8, randk:R+q4 or auto)",
		    spec);
		return FB_EINVAL;
	}
	c.id = id;
	if (id == COMP_TOPK || id == COMP_RANDK) {
		const char *base = id == COMP_TOPK ? "topk" : "randk";
		char       *end  = NULL;
		double r = arg != NULL && *arg != '\0' ? strtod(arg, &end) : 0;
		if (arg == NULL || *arg == '\0' || end == NULL || end == arg) {
			say(why, why_len,
			    "%s needs a ratio, as in topk:0.01 "
			    "or randk:0.01+q8",
			    base);
			return FB_EINVAL;
		}
		if (strcmp(end, "+q8") == 0) {
			id += 1; // COMP_TOPK_Q8, COMP_RANDK_Q8
		} else if (strcmp(end, "+q4") == 0) {
			id += 2; // COMP_TOPK_Q4, COMP_RANDK_Q4
		} else if (*end != '\0') {
			say(why, why_len,
			    "bad ratio or value codec in '%s' (want R, R+q8 "
			    "or R+q4)",
			    spec);
			return FB_EINVAL;
		}
		if (!(r > 0.0 && r <= 1.0) || !((float) r > 0.0f)) {
			say(why, why_len, "ratio in '%s' must be in (0, 1]",
			    spec);
			return FB_EINVAL;
		}
		c.id         = id;
		c.topk_ratio = (float) r;
	} else if (arg != NULL) {
		if (comp__qbits(id) >= 2 && strcmp(arg, "sr") == 0) {
			c.stochastic = 1;
		} else {
			say(why, why_len,
			    "unexpected option in '%s' (only q8, q4 and q2 "
			    "take ':sr')",
			    spec);
			return FB_EINVAL;
		}
	}
	*out = c;
	return FB_OK;
}

int
comp_codec_parse(const char *spec, uint32_t bucket, struct comp_codec *out)
{
	return comp_codec_parse_msg(spec, bucket, out, NULL, 0);
}

int
comp_codec_check(const struct comp_codec *c)
{
	if (c == NULL || c->id >= COMP_CODEC_COUNT)
		return FB_EINVAL;
	int bucketed = comp__qbits(c->id) != 0 ||
	    (comp__sparse_is(c->id) && comp__sparse_bits(c->id) < 32);
	if (bucketed && (c->bucket < 1 || c->bucket > COMP_BUCKET_MAX))
		return FB_EINVAL;
	if ((c->id == COMP_TOPK || comp__sparse_is(c->id)) &&
	    !(c->topk_ratio > 0.0f && c->topk_ratio <= 1.0f))
		return FB_EINVAL; // also rejects NaN
	if (c->stochastic != 0 &&
	    (c->stochastic != 1 || comp__qbits(c->id) < 2))
		return FB_EINVAL;
	return FB_OK;
}

int
comp_codec_format(const struct comp_codec *c, char *buf, size_t len)
{
	if (comp_codec_check(c) != FB_OK || buf == NULL)
		return FB_EINVAL;
	int w;
	if (c->id == COMP_TOPK || comp__sparse_is(c->id)) {
		// "topk:R", "topk:R+q8", "randk:R+q4"...: base, ratio, suffix
		const char *plus = strchr(names[c->id], '+');
		const char *base = c->id < COMP_RANDK ? "topk" : "randk";
		w                = snprintf(buf, len, "%s:%.9g%s", base,
		                   (double) c->topk_ratio, plus ? plus : "");
	} else {
		w = snprintf(buf, len, "%s%s", names[c->id],
		    c->stochastic ? ":sr" : "");
	}
	if (w < 0 || (size_t) w >= len)
		return FB_ENOSPC;
	return FB_OK;
}

// ---- sizes -----------------------------------------------------------------

static size_t
size_of(const struct comp_codec *c, size_t n)
{
	switch (c->id) {
	case COMP_NONE:
		return 4 * n;
	case COMP_FP16:
	case COMP_BF16:
		return 2 * n;
	case COMP_TOPK:
		return 4 + 8 * comp_topk_k(c->topk_ratio, n);
	case COMP_TOPK_Q8:
	case COMP_TOPK_Q4:
	case COMP_RANDK:
	case COMP_RANDK_Q8:
	case COMP_RANDK_Q4:
		return comp__sparse_size(c, n);
	default:
		return comp__q_size(comp__qbits(c->id), c->bucket, n);
	}
}

size_t
comp_bound(const struct comp_codec *c, size_t n)
{
	if (comp_codec_check(c) != FB_OK || n > COMP_MAX_N)
		return 0;
	return size_of(c, n);
}

// ---- encode / decode -------------------------------------------------------

// comp__check_enc_args checks the arguments common to every encoder and
// sets *need to the exact output size.

// comp__encode is comp_encode after the argument checks.
int
comp__encode(const struct comp_codec *c, const float *x, size_t n,
    uint64_t *rng, uint8_t *out, size_t need, size_t *out_len)
{
	int rv;
	if (c->id == COMP_NONE || c->id == COMP_FP16 || c->id == COMP_BF16) {
		comp__flt_encode(c->id, x, n, out);
		rv = FB_OK;
	} else if (c->id == COMP_TOPK) {
		rv = comp__topk_encode(comp_topk_k(c->topk_ratio, n), x, n,
		    out);
	} else if (comp__sparse_is(c->id)) {
		rv = comp__sparse_encode(c, x, n, rng, out);
	} else {
		rv = comp__q_encode(comp__qbits(c->id), c->bucket,
		    c->stochastic, rng, x, n, out);
	}
	if (rv == FB_OK)
		*out_len = need;
	return rv;
}

int
comp__check_enc_args(const struct comp_codec *c, const void *x, size_t n,
    const uint64_t *rng, const uint8_t *out, size_t cap, const size_t *out_len,
    size_t *need)
{
	if (comp_codec_check(c) != FB_OK || n > COMP_MAX_N ||
	    out_len == NULL || (n > 0 && x == NULL) ||
	    (c->stochastic && rng == NULL))
		return FB_EINVAL;
	*need = size_of(c, n);
	if (cap < *need)
		return FB_ENOSPC;
	if (*need > 0 && out == NULL)
		return FB_EINVAL;
	return FB_OK;
}

int
comp_encode(const struct comp_codec *c, const float *x, size_t n,
    uint64_t *rng, uint8_t *out, size_t cap, size_t *out_len)
{
	size_t need;
	int rv = comp__check_enc_args(c, x, n, rng, out, cap, out_len, &need);
	if (rv != FB_OK)
		return rv;
	return comp__encode(c, x, n, rng, out, need, out_len);
}

// validate checks untrusted input for codec c and n values.
static int
validate(const struct comp_codec *c, const uint8_t *in, size_t len, size_t n)
{
	if (c->id == COMP_TOPK)
		return comp__topk_validate(in, len, n);
	if (comp__sparse_is(c->id))
		return comp__sparse_validate(c, in, len, n);
	if (len != size_of(c, n))
		return FB_EPROTO;
	if (comp__qbits(c->id) == 0 || n == 0)
		return FB_OK; // every fp32/fp16/bf16 pattern is a value
	return comp__q_validate(comp__qbits(c->id), c->bucket, in, n);
}

// comp__decode writes the already validated input per mode.
void
comp__decode(const struct comp_codec *c, const uint8_t *in, size_t n,
    float *out, int mode)
{
	if (c->id == COMP_NONE || c->id == COMP_FP16 || c->id == COMP_BF16)
		comp__flt_decode(c->id, in, n, out, mode);
	else if (c->id == COMP_TOPK)
		comp__topk_decode(in, n, out, mode);
	else if (comp__sparse_is(c->id))
		comp__sparse_decode(c, in, n, out, mode);
	else
		comp__q_decode(comp__qbits(c->id), c->bucket, in, n, out,
		    mode);
}

static int
decode_checked(const struct comp_codec *c, const uint8_t *in, size_t len,
    size_t n, float *out, int mode)
{
	if (comp_codec_check(c) != FB_OK || n > COMP_MAX_N ||
	    (len > 0 && in == NULL) || (n > 0 && out == NULL))
		return FB_EINVAL;
	int rv = validate(c, in, len, n);
	if (rv != FB_OK)
		return rv;
	comp__decode(c, in, n, out, mode);
	return FB_OK;
}

int
comp_decode(const struct comp_codec *c, const uint8_t *in, size_t len,
    size_t n, float *out)
{
	return decode_checked(c, in, len, n, out, COMP__SET);
}

int
comp_decode_add(const struct comp_codec *c, const uint8_t *in, size_t len,
    size_t n, float *acc)
{
	return decode_checked(c, in, len, n, acc, COMP__ADD);
}
