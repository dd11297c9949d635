// compression_tests.h — one Check suite per source file of compression/src,
// plus small deterministic data helpers shared by the suites.
#ifndef COMPRESSION_TESTS_H
#define COMPRESSION_TESTS_H

#include <check.h>
#include <math.h>
#include <stdint.h>

Suite *suite_codec(void);
Suite *suite_quant(void);
Suite *suite_quant_avx512(void);
Suite *suite_float16(void);
Suite *suite_topk(void);
Suite *suite_feedback(void);
Suite *suite_sparse(void);

// TR_ASSERT / TR_ASSERT_MSG are ck_assert / ck_assert_msg that only call
// into Check when the condition fails: Check records every passing
// assertion (a pipe write each), which dominates loops over millions of
// elements. The condition must be free of side effects.
#define TR_ASSERT(c)                                                          \
	do {                                                                  \
		if (!(c))                                                     \
			ck_assert(c);                                         \
	} while (0)
#define TR_ASSERT_MSG(c, ...)                                                 \
	do {                                                                  \
		if (!(c))                                                     \
			ck_assert_msg(c, __VA_ARGS__);                        \
	} while (0)

// TR_QSLACK is the fp32 rounding allowance of the quantizer, relative to the
// bucket scale s: x * (L/s) and (float) q * (s/L) each round once, so an
// element may sit up to about 2^-23 s beyond s/(2L). docs/algorithms.md §2.6
// states the bound as s/(2L)(1+1e-6), which exact arithmetic meets but the
// specified fp32 decode formula alone can exceed by ~L * 2^-24 * s/L.
#define TR_QSLACK 0x1p-22

// tr_next: splitmix64 for test data (independent of the library's rng).
static inline uint64_t
tr_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// tr_unif: uniform in [0, 1).
static inline double
tr_unif(uint64_t *s)
{
	return (double) (tr_next(s) >> 11) * 0x1p-53;
}

// tr_gauss: standard normal (Box-Muller).
static inline double
tr_gauss(uint64_t *s)
{
	double u = tr_unif(s), v = tr_unif(s);
	return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

// tr_fill fills x[0..n) with N(0, scale^2) values.
static inline void
tr_fill(float *x, size_t n, double scale, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float) (scale * tr_gauss(&seed));
}

#endif // COMPRESSION_TESTS_H
