// finite.c — the all-finite checks of fp32 buffers (<fb/fb.h>): whether
// n values hold a NaN or an Inf, alone or fused with a copy.
//
// DESIGN. These loops see every byte a server stages and a trainer pulls.
// They test the exponent bits, not isfinite(), and base/CMakeLists.txt
// builds this file with -O3 so that GCC vectorises them (no fast-math: no
// float is computed here). Out of line on purpose: an inline copy took the
// flags of its caller, and at -O2 stayed scalar.
#include <string.h>

#include "fb/fb.h"

// nonfinite reports whether fp32 bits u are a NaN or an Inf (every
// exponent bit set).
static inline uint32_t
nonfinite(uint32_t u)
{
	return (u & 0x7f800000u) == 0x7f800000u;
}

int
fb_all_finite(const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, b + 4 * i, 4);
		bad |= nonfinite(u);
	}
	return !bad;
}

int
fb_copy_finite(float *dst, const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, b + 4 * i, 4);
		bad |= nonfinite(u);
		memcpy(dst + i, &u, 4);
	}
	return !bad;
}
