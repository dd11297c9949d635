// init.c — seeded initial weights (<fb/init.h>): the checks of an init
// kind and scale, and the counter-based fill both ends of the wire run.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fb/fb.h"
#include "fb/init.h"

#define GOLDEN 0x9E3779B97F4A7C15ull

// mix is splitmix64's finaliser: a bijection of 64 bits whose every output
// bit depends on every input bit.
static inline uint64_t
mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

int
fb_init_check(uint32_t kind, float scale, char *why, size_t n)
{
	if (kind >= FB_INIT_COUNT) {
		snprintf(why, n,
		    "unknown init kind %u (0: offer, 1: zeros, 2: uniform)",
		    kind);
		return FB_EINVAL;
	}
	if (!(scale >= 0 && scale < 1e30f)) {
		snprintf(why, n, "init scale %g not in [0, 1e30)",
		    (double) scale);
		return FB_EINVAL;
	}
	if (kind == FB_INIT_UNIFORM && scale == 0) {
		snprintf(why, n, "uniform init needs a scale > 0");
		return FB_EINVAL;
	}
	return FB_OK;
}

void
fb_init_fill(uint32_t kind, float scale, uint64_t seed, uint32_t tensor,
    uint64_t first, float *out, size_t n)
{
	if (kind != FB_INIT_UNIFORM) {
		memset(out, 0, n * sizeof(float));
		return;
	}
	// One key per (seed, tensor); element i hashes key + (i + 1) * GOLDEN,
	// splitmix64's counter step: element i's value needs only i.
	uint64_t key = mix(seed + GOLDEN * ((uint64_t) tensor + 1));
	for (size_t j = 0; j < n; j++) {
		uint64_t h = mix(key + GOLDEN * (first + j + 1));
		// The top 24 bits, centred: k / 2^23 in [-1, 1) is exact in
		// float, and one rounded multiply by scale stays below scale.
		int32_t  k = (int32_t) (h >> 40) - (1 << 23);
		out[j]     = ((float) k * 0x1p-23f) * scale;
	}
}
