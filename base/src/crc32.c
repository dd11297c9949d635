// crc32.c — fb_crc32: the standard CRC-32 (IEEE 802.3, zlib's crc32),
// fast enough for the compressed-pull path.
//
// DESIGN
// Both sides of a compressed pull checksum the whole shared reference
// after every version (docs/algorithms.md §2.4), so the CRC runs over the
// model once per step on the server and once on every trainer. zlib's
// table-driven crc32 does about 4 GB/s here, which made the check cost
// more than the q4 codec itself. On x86-64 with PCLMULQDQ we fold the
// buffer 64 bytes at a time with carry-less multiplies (Gopal et al.,
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", Intel
// 2009) and finish with a Barrett reduction; the bytes that do not fill a
// 16-byte block, short buffers and other CPUs go through zlib. The values
// are identical either way (tests/base/test_crc.c compares them).
#include <string.h>
#include <zlib.h>

#include "fb/fb.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FB_CRC_CLMUL 1

// Folding constants for the bit-reflected polynomial 0x104C11DB7: K1/K2
// fold across 512 bits (four 128-bit lanes), K3/K4 across 128 bits, K5
// from 64 to 32 bits; P' is the polynomial and MU floor(x^64 / P), both
// reflected (see the paper's appendix).
#define K1 0x154442bd4ULL
#define K2 0x1c6e41596ULL
#define K3 0x1751997d0ULL
#define K4 0x0ccaa009eULL
#define K5 0x163cd6124ULL
#define P_ 0x1db710641ULL
#define MU 0x1f7011641ULL

__attribute__((target("pclmul,sse4.1"))) static inline __m128i
fold(__m128i x, __m128i k, __m128i data)
{
	__m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
	__m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
	return _mm_xor_si128(_mm_xor_si128(lo, hi), data);
}

// crc_clmul advances the raw (not inverted) CRC register r over n bytes;
// n >= 64 and a multiple of 16. With dst, the bytes are also copied there
// (from the registers the CRC loads anyway).
__attribute__((target("pclmul,sse4.1"))) static uint32_t
crc_clmul(uint32_t r, const unsigned char *p, size_t n, unsigned char *dst)
{
	const __m128i k12    = _mm_set_epi64x((long long) K2, (long long) K1);
	const __m128i k34    = _mm_set_epi64x((long long) K4, (long long) K3);
	const __m128i k5     = _mm_set_epi64x(0, (long long) K5);
	const __m128i poly   = _mm_set_epi64x((long long) MU, (long long) P_);
	const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
	__m128i       x0, x1, x2, x3, t;

	__m128i d0, d1, d2, d3;

	x0 = _mm_loadu_si128((const __m128i *) p);
	x1 = _mm_loadu_si128((const __m128i *) (p + 16));
	x2 = _mm_loadu_si128((const __m128i *) (p + 32));
	x3 = _mm_loadu_si128((const __m128i *) (p + 48));
	if (dst != NULL) {
		_mm_storeu_si128((__m128i *) dst, x0);
		_mm_storeu_si128((__m128i *) (dst + 16), x1);
		_mm_storeu_si128((__m128i *) (dst + 32), x2);
		_mm_storeu_si128((__m128i *) (dst + 48), x3);
		dst += 64;
	}
	x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int) r));
	p += 64;
	n -= 64;
	for (; n >= 64; p += 64, n -= 64) {
		d0 = _mm_loadu_si128((const __m128i *) p);
		d1 = _mm_loadu_si128((const __m128i *) (p + 16));
		d2 = _mm_loadu_si128((const __m128i *) (p + 32));
		d3 = _mm_loadu_si128((const __m128i *) (p + 48));
		if (dst != NULL) {
			_mm_storeu_si128((__m128i *) dst, d0);
			_mm_storeu_si128((__m128i *) (dst + 16), d1);
			_mm_storeu_si128((__m128i *) (dst + 32), d2);
			_mm_storeu_si128((__m128i *) (dst + 48), d3);
			dst += 64;
		}
		x0 = fold(x0, k12, d0);
		x1 = fold(x1, k12, d1);
		x2 = fold(x2, k12, d2);
		x3 = fold(x3, k12, d3);
	}
	x0 = fold(x0, k34, x1);
	x0 = fold(x0, k34, x2);
	x0 = fold(x0, k34, x3);
	for (; n >= 16; p += 16, n -= 16) {
		d0 = _mm_loadu_si128((const __m128i *) p);
		if (dst != NULL) {
			_mm_storeu_si128((__m128i *) dst, d0);
			dst += 16;
		}
		x0 = fold(x0, k34, d0);
	}
	// 128 -> 64 bits
	t  = _mm_clmulepi64_si128(x0, k34, 0x10);
	x0 = _mm_xor_si128(_mm_srli_si128(x0, 8), t);
	// 64 -> 32 bits
	t  = _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), k5, 0x00);
	x0 = _mm_xor_si128(_mm_srli_si128(x0, 4), t);
	// Barrett reduction to the 32-bit remainder
	t  = _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), poly, 0x10);
	t  = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly, 0x00);
	x0 = _mm_xor_si128(x0, t);
	return (uint32_t) _mm_extract_epi32(x0, 1);
}

static int
have_clmul(void)
{
	static int have = -1; // benign race: every thread computes the same
	if (have < 0) {
		__builtin_cpu_init();
		have = __builtin_cpu_supports("pclmul") &&
		    __builtin_cpu_supports("sse4.1");
	}
	return have;
}
#endif

static uint32_t
crc_zlib(uint32_t crc, const unsigned char *p, size_t len)
{
	// zlib's crc32 takes uInt lengths; feed it in chunks.
	while (len > 0) {
		uInt n = len > (1u << 30) ? (1u << 30) : (uInt) len;
		crc    = (uint32_t) crc32(crc, p, n);
		p += n;
		len -= n;
	}
	return crc;
}

uint32_t
fb_crc32(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
#ifdef FB_CRC_CLMUL
	if (len >= 64 && have_clmul()) {
		size_t n = len & ~(size_t) 15;
		crc      = ~crc_clmul(~crc, p, n, NULL);
		p += n;
		len -= n;
	}
#endif
	return crc_zlib(crc, p, len);
}

uint32_t
fb_crc32_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	const unsigned char *p = src;
	unsigned char       *d = dst;
#ifdef FB_CRC_CLMUL
	if (len >= 64 && have_clmul()) {
		size_t n = len & ~(size_t) 15;
		crc      = ~crc_clmul(~crc, p, n, d);
		p += n;
		d += n;
		len -= n;
	}
#endif
	if (len > 0) {
		memcpy(d, p, len);
	}
	return crc_zlib(crc, p, len);
}
