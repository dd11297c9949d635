// fb_crc32 must give zlib's CRC-32 for every length, alignment and seed:
// the server and the trainers compare these values across machines, and
// the folded (PCLMULQDQ) path only covers whole 16-byte blocks of buffers
// of 64 bytes or more, so the boundaries between the paths are tested
// exhaustively.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base_tests.h"
#include "fb/fb.h"

static unsigned char *
random_bytes(size_t n, uint32_t seed)
{
	unsigned char *b = malloc(n);
	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		b[i] = (unsigned char) (seed >> 24);
	}
	return b;
}

// A failure: fb_crc32 is not CRC-32 at all (wrong polynomial, seed or
// final xor), so every checksum on the wire disagrees with zlib's.
START_TEST(test_crc_check_value)
{
	// The CRC-32 check value of the ASCII digits (every CRC catalogue).
	ck_assert_uint_eq(fb_crc32(0, "123456789", 9), 0xCBF43926u);
	ck_assert_uint_eq(fb_crc32(0, NULL, 0), 0u);
}
END_TEST

// A failure: one path (byte loop, folded blocks, or the hand-over between
// them) is wrong for the length, offset and seed named.
START_TEST(test_crc_every_length_and_alignment)
{
	const size_t   max = 1100;
	unsigned char *b   = random_bytes(max + 16, 7);
	for (size_t off = 0; off < 16; off += 5) {
		for (size_t n = 0; n <= max; n++) {
			uint32_t want0 = (uint32_t) crc32(0, b + off,
			    (uInt) n);
			uint32_t wants = (uint32_t) crc32(0xdeadbeefu, b + off,
			    (uInt) n);
			ck_assert_msg(fb_crc32(0, b + off, n) == want0,
			    "len %zu off %zu seed 0", n, off);
			ck_assert_msg(fb_crc32(0xdeadbeefu, b + off, n) ==
			        wants,
			    "len %zu off %zu seed 0xdeadbeef", n, off);
		}
	}
	free(b);
}
END_TEST

// A failure: a checksum fed in pieces differs from the whole buffer's,
// or a flipped bit goes unnoticed, on a buffer the size of the MLP.
START_TEST(test_crc_large_and_incremental)
{
	// The MLP's reference is 940584 bytes; add an odd tail.
	const size_t   n     = 940584 + 13;
	unsigned char *b     = random_bytes(n, 99);
	uint32_t       whole = (uint32_t) crc32(0, b, (uInt) n);
	ck_assert_uint_eq(fb_crc32(0, b, n), whole);
	// Feeding the buffer in pieces continues the same CRC.
	size_t   cuts[] = { 1, 63, 64, 65, 4096, 100000, 777777 };
	uint32_t c      = 0;
	size_t   at     = 0;
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		c  = fb_crc32(c, b + at, cuts[i] - at);
		at = cuts[i];
	}
	c = fb_crc32(c, b + at, n - at);
	ck_assert_uint_eq(c, whole);
	// One flipped bit changes it.
	b[n / 2] ^= 0x10;
	ck_assert_uint_ne(fb_crc32(0, b, n), whole);
	free(b);
}
END_TEST

// A failure: fb_crc32_copy gives another CRC than zlib, or copies the
// wrong bytes or writes outside the destination.
START_TEST(test_crc_copy)
{
	const size_t   max = 700;
	unsigned char *b   = random_bytes(max + 16, 3);
	unsigned char *d   = malloc(max + 16);
	ck_assert_ptr_nonnull(d);
	for (size_t off = 0; off < 16; off += 7) {
		for (size_t n = 0; n <= max; n++) {
			memset(d, 0xA5, max + 16);
			ck_assert_msg(fb_crc32_copy(0, d + 1, b + off, n) ==
			        (uint32_t) crc32(0, b + off, (uInt) n),
			    "len %zu off %zu", n, off);
			ck_assert_msg(memcmp(d + 1, b + off, n) == 0 &&
			        d[0] == 0xA5 && d[n + 1] == 0xA5,
			    "copy of len %zu off %zu", n, off);
		}
	}
	free(d);
	free(b);
}
END_TEST

Suite *
suite_crc(void)
{
	Suite *s  = suite_create("crc");
	TCase *tc = tcase_create("crc32");
	tcase_add_test(tc, test_crc_check_value);
	tcase_add_test(tc, test_crc_every_length_and_alignment);
	tcase_add_test(tc, test_crc_large_and_incremental);
	tcase_add_test(tc, test_crc_copy);
	suite_add_tcase(s, tc);
	return s;
}
