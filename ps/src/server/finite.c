// finite.c — whether a sync round's update would overflow the float range
// (store.c), a weights shard's or an average one's. The checks of pushed bytes
// themselves, alone or fused with the copy into a staging slot, are
// fb_all_finite and fb_copy_finite.
//
// DESIGN. This loop runs over every weight of every round: it tests the
// bits (not isfinite()) so that GCC vectorises it, and
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

int
ps__average_finite(const void *a, const void *b, size_t n)
{
	const uint8_t *pa = a, *pb = b;
	uint32_t       bad = 0;
	if (pb == NULL) {
		return fb_all_finite(a, n);
	}
	for (size_t i = 0; i < n; i++) {
		float    g, h, v;
		uint32_t u;
		memcpy(&g, pa + 4 * i, 4);
		memcpy(&h, pb + 4 * i, 4);
		v = g + h;
		memcpy(&u, &v, 4);
		bad |= nonfinite(u);
	}
	return !bad;
}
