// The byte helpers of <fb/fb.h> every module shares: the little-endian
// u64 put/get (snapshot headers, signed counters) and the all-finite
// checks (every push a server stages, every pull a trainer takes).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base_tests.h"
#include "fb/fb.h"

// A failure: a u64 is written or read in host order or with its halves
// swapped, so files and trailers written on one machine misread on another.
START_TEST(test_bytes_u64le_round_trip)
{
	uint8_t        b[9] = { 0 };
	const uint64_t v    = 0x0102030405060708ull;
	fb_put_u64le(b + 1, v); // unaligned on purpose
	ck_assert_uint_eq(b[1], 0x08);
	ck_assert_uint_eq(b[8], 0x01);
	ck_assert_uint_eq(b[0], 0);
	ck_assert(fb_get_u64le(b + 1) == v);
	fb_put_u64le(b, UINT64_MAX);
	ck_assert(fb_get_u64le(b) == UINT64_MAX);
}
END_TEST

// A failure: a NaN or an Inf somewhere in a buffer (first, middle, last
// element, a length that is no multiple of a vector) goes unseen and
// poisons every later step, or a finite buffer (FLT_MAX, denormals, -0)
// is refused.
START_TEST(test_bytes_finite_checks)
{
	enum { N = 1027 };
	static float x[N], y[N];
	for (size_t i = 0; i < N; i++) {
		x[i] = (float) i * (i % 2 ? -1.5f : 2.0f);
	}
	x[3] = 3.4028235e38f; // FLT_MAX
	x[5] = 1e-45f;        // a denormal
	x[7] = -0.0f;
	ck_assert(fb_all_finite(x, N));
	memset(y, 0, sizeof(y));
	ck_assert(fb_copy_finite(y, x, N));
	ck_assert(memcmp(x, y, sizeof(x)) == 0);
	const size_t at[]  = { 0, 512, N - 1 };
	const float  bad[] = { NAN, INFINITY, -INFINITY };
	for (size_t a = 0; a < 3; a++) {
		for (size_t k = 0; k < 3; k++) {
			float keep = x[at[a]];
			x[at[a]]   = bad[k];
			ck_assert(!fb_all_finite(x, N));
			// Unaligned bytes (a payload), and the copy still
			// made.
			uint8_t raw[4 * N + 1];
			memcpy(raw + 1, x, sizeof(x));
			ck_assert(!fb_all_finite(raw + 1, N));
			ck_assert(!fb_copy_finite(y, raw + 1, N));
			ck_assert(memcmp(x, y, sizeof(x)) == 0);
			x[at[a]] = keep;
		}
	}
	ck_assert(fb_all_finite(x, 0));
	ck_assert(fb_copy_finite(y, x, 0));
}
END_TEST

Suite *
suite_bytes(void)
{
	Suite *s  = suite_create("bytes");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_bytes_u64le_round_trip);
	tcase_add_test(tc, test_bytes_finite_checks);
	suite_add_tcase(s, tc);
	return s;
}
