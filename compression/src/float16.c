// float16.c — the element-wise float codecs: none (fp32 LE), fp16 (IEEE
// binary16) and bf16 (bfloat16), both rounded to nearest, ties to even. The
// fp16 conversions and kernels (portable and F16C) are float16_kern.c's.
//
// Conversions are done on bit patterns, so they give the same bytes on every
// machine regardless of compiler flags. Overflow in fp16 gives +-Inf (IEEE);
// NaN stays NaN (quiet). Every 2-byte pattern is a valid input, so decoding
// only checks the length.
#include <math.h>
#include <string.h>

#include "comp_impl.h"

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
