// ghash.c — GHASH, GCM's universal hash, with VPCLMULQDQ on AVX-512: the
// per-byte cost of signing (auth.c computes GMAC-AES256 tags, the same
// tags libgcrypt's GMAC gives, with AES from libgcrypt and this GHASH).
//
// WHY. libgcrypt 1.10 hashes one 128-bit block per carry-less multiply
// (SSE PCLMUL, about 0.3 cycles/byte); a push-pull runs the MAC over its
// payload four times, so that was most of what signing cost. Here one
// VPCLMULQDQ multiplies four blocks, and 32 blocks are summed unreduced
// per step (each times its own power of H) with one reduction at the end,
// so the work is mostly independent multiplies.
//
// MATH. Blocks are byte-reversed (the reflected form), H is stored as
// H * x (H "times 2", reduced), so that mul(a, b), the 256-bit carry-less
// product reduced by two folds against the constant 0xc2...01, keeps the
// form: mul(X, H^i) = X * H^i. mul is GF(2)-linear, which is what lets
// the products be summed before the one reduction. This is the method of
// Gueron and Kounavis (Intel's CLMUL white paper) as Go's crypto/aes uses
// it; tests/proto/test_auth.c checks every tag against libgcrypt's GMAC.
#include "ghash.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define GH_TARGET                                                             \
	__attribute__((target(                                                \
	    "avx512f,avx512bw,avx512vl,vpclmulqdq,pclmul,ssse3,sse4.1")))

int
psw__ghash_available(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("vpclmulqdq") &&
	    __builtin_cpu_supports("pclmul");
}

// bswap reverses the 16 bytes of x (the reflected form and back).
GH_TARGET static inline __m128i
bswap(__m128i x)
{
	return _mm_shuffle_epi8(x,
	    _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
	        15));
}

// fold is one reduction round: a's low half times the polynomial's high
// word, added to a with its halves swapped.
GH_TARGET static inline __m128i
fold(__m128i a)
{
	const __m128i poly = _mm_set_epi64x((long long) 0xc200000000000000ull,
	    1);
	__m128i       t    = _mm_clmulepi64_si128(poly, a, 0x01);
	return _mm_xor_si128(_mm_shuffle_epi32(a, 78), t);
}

// reduce turns the 256-bit product hi:lo (mid already folded in) into
// the 128-bit result.
GH_TARGET static inline __m128i
reduce(__m128i lo, __m128i hi)
{
	return _mm_xor_si128(fold(fold(lo)), hi);
}

GH_TARGET static inline __m128i
mul(__m128i a, __m128i b)
{
	__m128i lo  = _mm_clmulepi64_si128(a, b, 0x00);
	__m128i hi  = _mm_clmulepi64_si128(a, b, 0x11);
	__m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01),
	    _mm_clmulepi64_si128(a, b, 0x10));
	lo          = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
	hi          = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
	return reduce(lo, hi);
}

GH_TARGET static inline __m128i
load_pow(const struct psw__ghash_key *k, int i)
{
	return _mm_loadu_si128((const __m128i *) k->pow[i]);
}

GH_TARGET void
psw__ghash_init(struct psw__ghash_key *k, const uint8_t h[16])
{
	uint64_t lo, hi, carry;
	uint8_t  r[16];
	__m128i  x = bswap(_mm_loadu_si128((const __m128i *) h));

	// H * x, reduced: shift left one bit, fold the carry back in.
	memcpy(&lo, (uint8_t *) &x, 8);
	memcpy(&hi, (uint8_t *) &x + 8, 8);
	carry = hi >> 63;
	hi    = hi << 1 | lo >> 63;
	lo <<= 1;
	if (carry) {
		lo ^= 1;
		hi ^= 0xc200000000000000ull;
	}
	memcpy(r, &lo, 8);
	memcpy(r + 8, &hi, 8);
	memcpy(k->pow[0], r, 16);
	__m128i h1 = load_pow(k, 0), p = h1;
	for (int i = 1; i < PSW_GHASH_BLOCKS; i++) {
		p = mul(p, h1);
		_mm_storeu_si128((__m128i *) k->pow[i], p);
	}
}

// blocks hashes the n whole blocks at p into acc, 32 at a time with the
// wide multiplies, the rest one by one.
GH_TARGET static __m128i
blocks(const struct psw__ghash_key *k, __m128i acc, const uint8_t *p, size_t n)
{
	const __m512i rev = _mm512_broadcast_i32x4(_mm_set_epi8(0, 1, 2, 3, 4,
	    5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
	enum { V = PSW_GHASH_BLOCKS / 4 };
	__m512i hp[V];

	if (n >= PSW_GHASH_BLOCKS) {
		// hp[v] lane j multiplies block 4v + j of a step: H^(32-4v-j).
		for (int v = 0; v < V; v++) {
			int top = PSW_GHASH_BLOCKS - 4 * v; // H^top for lane 0
			__m512i z = _mm512_castsi128_si512(
			    load_pow(k, top - 1));
			z     = _mm512_inserti32x4(z, load_pow(k, top - 2), 1);
			z     = _mm512_inserti32x4(z, load_pow(k, top - 3), 2);
			hp[v] = _mm512_inserti32x4(z, load_pow(k, top - 4), 3);
		}
	}
	while (n >= PSW_GHASH_BLOCKS) {
		__m512i lo = _mm512_setzero_si512(), hi = lo, mid = lo;
		for (int v = 0; v < V; v++) {
			__m512i x = _mm512_shuffle_epi8(
			    _mm512_loadu_si512((const void *) (p + 64 * v)),
			    rev);
			if (v == 0) {
				x = _mm512_xor_si512(x,
				    _mm512_inserti32x4(_mm512_setzero_si512(),
				        acc, 0));
			}
			lo  = _mm512_xor_si512(lo,
			     _mm512_clmulepi64_epi128(x, hp[v], 0x00));
			hi  = _mm512_xor_si512(hi,
			     _mm512_clmulepi64_epi128(x, hp[v], 0x11));
			mid = _mm512_ternarylogic_epi64(mid,
			    _mm512_clmulepi64_epi128(x, hp[v], 0x01),
			    _mm512_clmulepi64_epi128(x, hp[v], 0x10), 0x96);
		}
		lo        = _mm512_xor_si512(lo, _mm512_bslli_epi128(mid, 8));
		hi        = _mm512_xor_si512(hi, _mm512_bsrli_epi128(mid, 8));
		__m128i l = _mm_xor_si128(
		    _mm_xor_si128(_mm512_extracti32x4_epi32(lo, 0),
		        _mm512_extracti32x4_epi32(lo, 1)),
		    _mm_xor_si128(_mm512_extracti32x4_epi32(lo, 2),
		        _mm512_extracti32x4_epi32(lo, 3)));
		__m128i h = _mm_xor_si128(
		    _mm_xor_si128(_mm512_extracti32x4_epi32(hi, 0),
		        _mm512_extracti32x4_epi32(hi, 1)),
		    _mm_xor_si128(_mm512_extracti32x4_epi32(hi, 2),
		        _mm512_extracti32x4_epi32(hi, 3)));
		acc = reduce(l, h);
		p += 16 * PSW_GHASH_BLOCKS;
		n -= PSW_GHASH_BLOCKS;
	}
	__m128i h1 = load_pow(k, 0);
	for (; n > 0; n--, p += 16) {
		acc = mul(_mm_xor_si128(acc,
		              bswap(_mm_loadu_si128((const __m128i *) p))),
		    h1);
	}
	return acc;
}

// hash hashes len bytes (the last block zero-padded), then the length
// block lens (reflected form), and writes the result in byte order.
GH_TARGET static void
hash(const struct psw__ghash_key *k, const uint8_t *p, size_t len,
    __m128i lens, uint8_t out[16])
{
	__m128i acc = blocks(k, _mm_setzero_si128(), p, len / 16);
	if (len % 16 != 0) {
		uint8_t last[16] = { 0 };
		memcpy(last, p + len - len % 16, len % 16);
		acc = blocks(k, acc, last, 1);
	}
	acc = mul(_mm_xor_si128(acc, lens), load_pow(k, 0));
	_mm_storeu_si128((__m128i *) out, bswap(acc));
}

GH_TARGET void
psw__ghash_j0(const struct psw__ghash_key *k, const uint8_t *iv, size_t iv_len,
    uint8_t j0[16])
{
	// The last block is 0^64 || [bits of IV]_64.
	hash(k, iv, iv_len, _mm_set_epi64x(0, (long long) (iv_len * 8)), j0);
}

GH_TARGET void
psw__ghash_aad(const struct psw__ghash_key *k, const uint8_t *a, size_t len,
    uint8_t s[16])
{
	// The last block is [bits of A]_64 || [bits of C = 0]_64.
	hash(k, a, len, _mm_set_epi64x((long long) (len * 8), 0), s);
}

#else // not x86-64: libgcrypt's GMAC does it all.

int
psw__ghash_available(void)
{
	return 0;
}

void
psw__ghash_init(struct psw__ghash_key *k, const uint8_t h[16])
{
	(void) k;
	(void) h;
}

void
psw__ghash_j0(const struct psw__ghash_key *k, const uint8_t *iv, size_t iv_len,
    uint8_t j0[16])
{
	(void) k;
	(void) iv;
	(void) iv_len;
	memset(j0, 0, 16);
}

void
psw__ghash_aad(const struct psw__ghash_key *k, const uint8_t *a, size_t len,
    uint8_t s[16])
{
	(void) k;
	(void) a;
	(void) len;
	memset(s, 0, 16);
}
#endif
