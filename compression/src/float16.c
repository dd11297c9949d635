// float16.c — the element-wise float codecs: none (fp32 LE), fp16 (IEEE
// binary16) and bf16 (bfloat16), both rounded to nearest, ties to even.
//
// Conversions are done on bit patterns, so they give the same bytes on every
// machine regardless of compiler flags. Overflow in fp16 gives +-Inf (IEEE);
// NaN stays NaN (quiet). Every 2-byte pattern is a valid input, so decoding
// only checks the length.
#include <math.h>
#include <string.h>

#include "comp_impl.h"

uint16_t
comp__f32_to_f16(float f)
{
	uint32_t u    = comp__f2u(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a    = u & 0x7fffffffu;
	if (a >= 0x7f800000u) // Inf or NaN
		return (uint16_t) (sign | 0x7c00u |
		    (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
	if (a >= 0x477ff000u) // rounds to >= 65520: overflow to Inf
		return (uint16_t) (sign | 0x7c00u);
	if (a < 0x38800000u) {       // below 2^-14: subnormal half (or zero)
		if (a < 0x33000000u) // below 2^-25: rounds to zero
			return (uint16_t) sign;
		uint32_t e     = a >> 23; // 102..112
		uint32_t m     = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e; // 14..24
		uint32_t h     = m >> shift;
		uint32_t rem   = m & ((1u << shift) - 1);
		uint32_t half  = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t) (sign | h);
	}
	// normal: rebias exponent 127 -> 15 and round 13 mantissa bits away
	uint32_t h   = (a - 0x38000000u) >> 13;
	uint32_t rem = a & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; // a carry into the exponent is the right answer
	return (uint16_t) (sign | h);
}

float
comp__f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
	uint32_t e    = (h >> 10) & 0x1fu;
	uint32_t m    = h & 0x3ffu;
	if (e == 0x1f)
		return comp__u2f(sign | 0x7f800000u | (m << 13));
	if (e == 0) {
		// subnormal: m * 2^-24, exact in fp32
		float v = (float) m * 0x1p-24f;
		return sign ? -v : v;
	}
	return comp__u2f(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t
comp__f32_to_bf16(float f)
{
	uint32_t u = comp__f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t) ((u >> 16) | 0x40u); // quiet NaN
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t) (u >> 16);
}

float
comp__bf16_to_f32(uint16_t h)
{
	return comp__u2f((uint32_t) h << 16);
}

static void
f16_enc_c(const float *x, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++)
		fb_put_u16le(out + 2 * i, comp__f32_to_f16(x[i]));
}

static void
f16_dec_c(const uint8_t *in, size_t n, float *out, int mode)
{
	for (size_t i = 0; i < n; i++)
		comp__store(out, i, comp__f16_to_f32(fb_get_u16le(in + 2 * i)),
		    mode);
}

static void
bf16_enc_c(const float *x, size_t n, uint8_t *out)
{
	comp__bf16_enc_loop(x, n, out);
}

const struct comp__f16 comp__f16_portable = {
	.enc      = f16_enc_c,
	.dec      = f16_dec_c,
	.bf16_enc = bf16_enc_c,
};

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif

void
comp__flt_encode(uint32_t id, const float *x, size_t n, uint8_t *out)
{
	if (id == COMP_NONE) {
		if (HOST_LE) { // the wire is the host's layout: one copy
			memcpy(out, x, 4 * n);
			return;
		}
		for (size_t i = 0; i < n; i++)
			fb_put_f32le(out + 4 * i, x[i]);
	} else if (id == COMP_FP16) {
		comp__f16()->enc(x, n, out);
	} else {
		if (HOST_LE) {
			comp__f16()->bf16_enc(x, n, out);
			return;
		}
		for (size_t i = 0; i < n; i++)
			fb_put_u16le(out + 2 * i, comp__f32_to_bf16(x[i]));
	}
}

static inline float
get(uint32_t id, const uint8_t *in, size_t i)
{
	if (id == COMP_NONE)
		return fb_get_f32le(in + 4 * i);
	return comp__bf16_to_f32(fb_get_u16le(in + 2 * i));
}

void
comp__flt_decode(uint32_t id, const uint8_t *in, size_t n, float *out,
    int mode)
{
	if (id == COMP_FP16) {
		comp__f16()->dec(in, n, out, mode);
	} else if (mode == COMP__SET) {
		for (size_t i = 0; i < n; i++)
			out[i] = get(id, in, i);
	} else if (mode == COMP__ADD) {
		for (size_t i = 0; i < n; i++)
			out[i] = out[i] + get(id, in, i);
	} else {
		for (size_t i = 0; i < n; i++)
			out[i] = out[i] - get(id, in, i);
	}
}
