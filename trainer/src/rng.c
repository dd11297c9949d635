// rng.c — the trainer's fixed PRNG helpers (splitmix64 lives inline in
// tr.h) and the shared error formatter.
#include <math.h>
#include <stdio.h>

#include "tr_impl.h"

int
tr__errf(int rv, char *err, size_t errlen, const char *fmt, ...)
{
	if (err != NULL && errlen > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rv;
}

uint64_t
tr_rng_below(struct tr_rng *r, uint64_t n)
{
	// Reject the low (2^64 mod n) values so every residue is equally
	// likely: the accepted range is a whole number of periods of n.
	uint64_t threshold = (0 - n) % n;
	for (;;) {
		uint64_t x = tr_rng_next(r);
		if (x >= threshold) {
			return x % n;
		}
	}
}

float
tr_rng_uniform(struct tr_rng *r)
{
	return (float) (tr_rng_next(r) >> 40) * 0x1p-24f;
}

float
tr_rng_normal(struct tr_rng *r)
{
	// Box–Muller; 1 - u keeps the log argument in (0, 1].
	double u1 = 1.0 - (double) (tr_rng_next(r) >> 11) * 0x1p-53;
	double u2 = (double) (tr_rng_next(r) >> 11) * 0x1p-53;
	return (float) (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
