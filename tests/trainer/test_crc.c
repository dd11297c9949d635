// test_crc.c — the chunked CRC-32 of crc.h on the host: per-chunk CRCs
// with the slice-by-4 word loop (the code the device kernel runs), folded
// with crc32_combine, equal zlib's crc32 (= fb_crc32) of the whole buffer
// for lengths around the chunk size and odd float counts.
#include <string.h>
#include <zlib.h>

#include "crc.h"
#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

#define MAXF (3 * FCUDA_CRC_CHUNK / 4 + 7)

// chunked computes the CRC of n floats the way devpull does.
static uint32_t
chunked(const uint32_t *t, const float *x, size_t n)
{
	static uint32_t cc[8];
	size_t          bytes = n * 4;
	const uint32_t *w     = (const uint32_t *) (const void *) x;
	for (size_t o = 0, i = 0; o < bytes; o += FCUDA_CRC_CHUNK, i++) {
		size_t len = bytes - o < FCUDA_CRC_CHUNK ? bytes - o
		                                         : FCUDA_CRC_CHUNK;
		cc[i]      = fcuda__crc_words(t, w + o / 4, len / 4);
	}
	return fcuda__crc32_fold(cc, bytes);
}

// The table is zlib's (first entries known), and chunked CRCs equal
// crc32 for 0, 1, odd counts and counts around each chunk boundary.
START_TEST(test_crc_chunked_equals_zlib)
{
	static uint32_t     t[1024];
	static float        x[MAXF];
	static const size_t ns[] = { 1, 2, 3, 7, 1023, 1024, 1025, 2047, 2048,
		2049, 3079, MAXF };
	struct tr_rng       r;
	fcuda__crc_tables(t);
	ck_assert_uint_eq(t[1], 0x77073096u);
	ck_assert_uint_eq(t[255], 0x2d02ef8du);
	tr_rng_seed(&r, 7);
	for (size_t i = 0; i < MAXF; i++) {
		x[i] = tr_rng_normal(&r);
	}
	ck_assert_uint_eq(fcuda__crc32_fold(NULL, 0), 0);
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		uint32_t want = (uint32_t) crc32(0, (const Bytef *) x,
		    (uInt) (ns[k] * 4));
		ck_assert_msg(chunked(t, x, ns[k]) == want,
		    "n %zu: %08x != %08x", ns[k], chunked(t, x, ns[k]), want);
		ck_assert_uint_eq(want, fb_crc32(0, x, ns[k] * 4));
	}
	// A flipped bit anywhere changes the folded value.
	uint32_t before = chunked(t, x, MAXF);
	x[MAXF - 1]     = -x[MAXF - 1];
	ck_assert_uint_ne(chunked(t, x, MAXF), before);
}
END_TEST

Suite *
suite_crc(void)
{
	Suite *s  = suite_create("crc");
	TCase *tc = tcase_create("crc");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_crc_chunked_equals_zlib);
	suite_add_tcase(s, tc);
	return s;
}
