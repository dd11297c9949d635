// finite.c — the finite checks on gradient bytes: whether a payload holds
// a NaN or an Inf, the same check fused with the copy into a staging
// slot, and whether an update would overflow the float range. Pushes
// (push.c), replicas (replicate.c) and the sync round (store.c) use them.
//
// DESIGN. These loops run over every byte a trainer pushes: they test the
// bits (not isfinite()) so that GCC vectorises them, and
// ps/CMakeLists.txt compiles this file with -O3 (no fast-math: the floats
// stay exact).
#include <string.h>

#include "server_impl.h"

// nonfinite reports whether fp32 bits u are a NaN or an Inf (every
// exponent bit set). Testing the bits, not isfinite(), lets loops
// vectorise.
static inline uint32_t
nonfinite(uint32_t u)
{
	return (u & 0x7f800000u) == 0x7f800000u;
}

// bits_at reads the i-th fp32 of payload bytes b (any alignment).
static inline uint32_t
bits_at(const uint8_t *b, size_t i)
{
	uint32_t u;
	memcpy(&u, b + 4 * i, 4);
	return u;
}

int
ps__all_finite(const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		bad |= nonfinite(bits_at(b, i));
	}
	return !bad;
}

// An fp32 push staged and checked in one pass over the bytes instead of
// two.
int
ps__copy_finite(float *dst, const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u = bits_at(b, i);
		bad |= nonfinite(u);
		memcpy(dst + i, &u, 4);
	}
	return !bad;
}

int
ps__update_finite(const float *x, float scale, const void *a, const void *b,
    size_t n)
{
	const uint8_t *pa = a, *pb = b;
	uint32_t       bad = 0;
	if (pb == NULL) {
		for (size_t i = 0; i < n; i++) {
			float g, v;
			memcpy(&g, pa + 4 * i, 4);
			v = x[i] - scale * g;
			uint32_t u;
			memcpy(&u, &v, 4);
			bad |= nonfinite(u);
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			float    g, h, v;
			uint32_t u;
			memcpy(&g, pa + 4 * i, 4);
			memcpy(&h, pb + 4 * i, 4);
			v = x[i] - scale * (g + h);
			memcpy(&u, &v, 4);
			bad |= nonfinite(u);
		}
	}
	return !bad;
}
