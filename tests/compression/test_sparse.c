// test_sparse.c — the sparse composites (sparse.c): topk:R+q8/q4 and
// randk:R(+q8/q4). Sizes as FORMAT.md documents them, the kept set equal to
// plain topk's, randk's index set recomputed from the seed on the receiving
// side, exact error feedback (sent + residual == input, bit for bit),
// portable and SIMD kernels giving the same bytes, and hand-made corrupt
// payloads refused with FB_EPROTO and the output untouched.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <comp/comp.h>

#include "compression_tests.h"
#include "pt.h"

static struct comp_codec
codec(const char *spec, uint32_t bucket)
{
	struct comp_codec c;
	PT_OK(comp_codec_parse(spec, bucket, &c));
	return c;
}

// The documented sizes (FORMAT.md), computed here independently.
static size_t
doc_size(const char *base, unsigned b, size_t bucket, size_t n, size_t k)
{
	size_t vals = b == 32
	    ? 4 * k
	    : 4 * ((k + bucket - 1) / bucket) + (k * b + 7) / 8;
	if (strcmp(base, "randk") == 0)
		return 12 + vals;
	size_t ef = 0;
	if (k > 0) {
		unsigned l = 0;
		while ((k << (l + 1)) <= n)
			l++;
		ef = (k * l + k + ((n - 1) >> l) + 7) / 8;
	}
	return 4 + ef + vals;
}

// comp_bound equals the documented size for every composite, and
// topk:0.01+q8 is under a third of plain topk:0.01 on the MLP's size.
START_TEST(test_sparse_sizes)
{
	const size_t   ns[]   = { 0, 1, 2, 7, 1000, 4097, 235146 };
	const float    rs[]   = { 0.001f, 0.01f, 0.1f, 0.5f, 1.0f };
	const char    *sfx[]  = { "", "+q8", "+q4" };
	const unsigned bits[] = { 32, 8, 4 };
	for (int base = 0; base < 2; base++)
		for (size_t si = 0; si < 3; si++)
			for (size_t ri = 0; ri < 5; ri++)
				for (size_t ni = 0; ni < 7; ni++) {
					const char *bn = base ? "randk"
					                      : "topk";
					if (!base && si == 0)
						continue; // plain topk:
						          // test_topk
					char spec[64];
					snprintf(spec, sizeof spec, "%s:%g%s",
					    bn, (double) rs[ri], sfx[si]);
					struct comp_codec c = codec(spec, 64);
					size_t k = comp_topk_k(rs[ri], ns[ni]);
					ck_assert_uint_eq(
					    comp_bound(&c, ns[ni]),
					    doc_size(bn, bits[si], 64, ns[ni],
					        k));
				}
	struct comp_codec tq = codec("topk:0.01+q8", 0),
	                  tp = codec("topk:0.01", 0);
	ck_assert_uint_lt(3 * comp_bound(&tq, 235146),
	    comp_bound(&tp, 235146));
}
END_TEST

// topk:R+q8/q4 keep exactly plain topk's indices (x has no zeros) and
// decode each value within half a quantization step of x.
START_TEST(test_sparse_topk_same_set)
{
	enum { N = 5003 };
	float   *x = malloc(N * 4), *a = malloc(N * 4), *b = malloc(N * 4);
	uint8_t *buf = malloc(8 * N + 64);
	tr_fill(x, N, 1.0, 9);
	for (size_t i = 0; i < N; i++)
		if (x[i] == 0.0f)
			x[i] = 1e-3f;
	const char *sp[] = { "topk:0.01+q8", "topk:0.1+q4", "topk:1+q8" };
	for (size_t s = 0; s < 3; s++) {
		struct comp_codec c = codec(sp[s], 32), p = c;
		p.id = COMP_TOPK;
		size_t len;
		PT_OK(comp_encode(&p, x, N, NULL, buf, 8 * N + 64, &len));
		PT_OK(comp_decode(&p, buf, len, N, a));
		PT_OK(comp_encode(&c, x, N, NULL, buf, 8 * N + 64, &len));
		ck_assert_uint_eq(len, comp_bound(&c, N));
		PT_OK(comp_decode(&c, buf, len, N, b));
		double L    = c.id == COMP_TOPK_Q8 ? 127 : 7;
		size_t kept = 0;
		for (size_t i = 0; i < N; i++) {
			// (a kept value may quantize to 0, never the reverse)
			TR_ASSERT_MSG(b[i] == 0.0f || a[i] != 0.0f,
			    "%s: index %zu not kept by topk", sp[s], i);
			if (a[i] != 0.0f) {
				kept++;
				// the largest kept value bounds every scale
				TR_ASSERT(fabs((double) b[i] - a[i]) <=
				    5.0 / (2 * L) + 1e-6);
			}
		}
		ck_assert_uint_eq(kept, comp_topk_k(c.topk_ratio, N));
	}
	free(x);
	free(a);
	free(b);
	free(buf);
}
END_TEST

// Large k (above the 4096 candidates the composites once kept on the
// stack, and through the sampled path): topk+q8/q4 keep plain topk's set,
// with ties on the threshold, and the portable and SIMD kernels agree on
// every byte; a second encode (the workspace already grown) is the same.
START_TEST(test_sparse_topk_large_k)
{
	enum { N = 300007 };
	float   *x = malloc(N * 4), *a = malloc(N * 4), *b = malloc(N * 4);
	uint8_t *ba = malloc(8 * N + 64), *bb = malloc(8 * N + 64);
	tr_fill(x, N, 1.0, 31);
	for (size_t i = 0; i < N; i++) // a third on 16 levels: ties
		if (i % 3 == 0)
			x[i] = (float) ((int) (x[i] * 4.0f)) / 4.0f + 0.125f;
	const char *sp[] = { "topk:0.05+q8", "topk:0.02+q4", "topk:0.05" };
	for (size_t s = 0; s < 3; s++) {
		struct comp_codec c = codec(sp[s], 512), p = c;
		p.id = COMP_TOPK;
		size_t la, lb, lp;
		comp_simd_set(0);
		PT_OK(comp_encode(&c, x, N, NULL, ba, 8 * N + 64, &la));
		comp_simd_set(1);
		PT_OK(comp_encode(&c, x, N, NULL, bb, 8 * N + 64, &lb));
		ck_assert_uint_eq(la, lb);
		ck_assert_mem_eq(ba, bb, la);
		PT_OK(comp_encode(&c, x, N, NULL, bb, 8 * N + 64, &lb));
		ck_assert_mem_eq(ba, bb, la);
		PT_OK(comp_decode(&c, ba, la, N, b));
		PT_OK(comp_encode(&p, x, N, NULL, bb, 8 * N + 64, &lp));
		PT_OK(comp_decode(&p, bb, lp, N, a));
		size_t kept = 0;
		for (size_t i = 0; i < N; i++) {
			TR_ASSERT_MSG(b[i] == 0.0f || a[i] != 0.0f,
			    "%s: index %zu not kept by topk", sp[s], i);
			kept += a[i] != 0.0f;
		}
		ck_assert_uint_eq(kept, comp_topk_k(c.topk_ratio, N));
	}
	free(x);
	free(a);
	free(b);
	free(ba);
	free(bb);
}
END_TEST

static uint64_t
splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// randk: the receiver's index set (where decode writes) equals the set
// FORMAT.md derives from the payload's seed, one index per stratum; the
// trainer's rng gives a new set each step; without an rng the same x gives
// the same bytes.
START_TEST(test_sparse_randk_sets)
{
	enum { N = 10007 };
	float   *x = malloc(N * 4), *y = malloc(N * 4);
	uint8_t *buf = malloc(8 * N), *buf2 = malloc(8 * N);
	tr_fill(x, N, 1.0, 3);
	for (size_t i = 0; i < N; i++)
		x[i] = fabsf(x[i]) + 0.5f; // no zero: written == kept
	struct comp_codec c   = codec("randk:0.03", 0);
	size_t            k   = comp_topk_k(c.topk_ratio, N), len;
	uint64_t          rng = 42, seeds[3];
	for (int t = 0; t < 3; t++) {
		PT_OK(comp_encode(&c, x, N, &rng, buf, 8 * N, &len));
		ck_assert_uint_eq(fb_get_u32le(buf), k);
		uint64_t seed = fb_get_u32le(buf + 4) |
		    (uint64_t) fb_get_u32le(buf + 8) << 32;
		seeds[t] = seed;
		PT_OK(comp_decode(&c, buf, len, N, y));
		size_t j = 0;
		for (size_t i = 0; i < N; i++) {
			if (y[i] == 0.0f)
				continue;
			uint64_t lo = (uint64_t) j * N / k,
			         hi = (uint64_t) (j + 1) * N / k;
			uint64_t r  = splitmix(&seed) >> 32;
			ck_assert_uint_eq(i, lo + ((r * (hi - lo)) >> 32));
			ck_assert_float_eq(y[i], x[i]);
			j++;
		}
		ck_assert_uint_eq(j, k);
	}
	ck_assert(seeds[0] != seeds[1] && seeds[1] != seeds[2]);
	PT_OK(comp_encode(&c, x, N, NULL, buf, 8 * N, &len));
	PT_OK(comp_encode(&c, x, N, NULL, buf2, 8 * N, &len));
	ck_assert_mem_eq(buf, buf2, len);
	x[N / 2] += 1.0f; // one value changed: a new set
	PT_OK(comp_encode(&c, x, N, NULL, buf2, 8 * N, &len));
	ck_assert(memcmp(buf + 4, buf2 + 4, 8) != 0);
	free(x);
	free(y);
	free(buf);
	free(buf2);
}
END_TEST

// Error feedback is exact: after p = g + e, deq(sent)[i] + e'[i] == p[i]
// bit for bit at every index, sent or not, over many steps.
START_TEST(test_sparse_ef_exact)
{
	enum { N = 3001 };
	const char *sp[] = { "topk:0.01+q8", "topk:0.05+q4", "randk:0.02",
		"randk:0.05+q8", "randk:0.1+q4", "topk:0.02" };
	float      *g = malloc(N * 4), *e = malloc(N * 4), *p = malloc(N * 4);
	float      *d   = malloc(N * 4);
	uint8_t    *buf = malloc(8 * N);
	for (size_t s = 0; s < 6; s++) {
		struct comp_codec c   = codec(sp[s], 16);
		uint64_t          rng = 1;
		memset(e, 0, N * 4);
		for (int t = 0; t < 50; t++) {
			tr_fill(g, N, 1.0 + t % 3, 100 + t);
			for (size_t i = 0; i < N; i++)
				p[i] = g[i] + e[i];
			size_t len;
			PT_OK(comp_ef_encode(&c, g, e, N, &rng, buf, 8 * N,
			    &len));
			PT_OK(comp_decode(&c, buf, len, N, d));
			for (size_t i = 0; i < N; i++)
				TR_ASSERT_MSG(d[i] + e[i] == p[i],
				    "%s step %d index %zu: %g + %g != %g",
				    sp[s], t, i, (double) d[i], (double) e[i],
				    (double) p[i]);
		}
	}
	free(g);
	free(e);
	free(p);
	free(d);
	free(buf);
}
END_TEST

// The portable and the SIMD kernels produce the same bytes for every
// composite (and the same decoded floats).
START_TEST(test_sparse_simd_same)
{
	enum { N = 4099 };
	const char *sp[] = { "topk:0.01+q8", "topk:0.3+q4", "randk:0.1+q8",
		"randk:0.1+q4" };
	float      *x = malloc(N * 4), *a = malloc(N * 4), *b = malloc(N * 4);
	uint8_t    *ba = malloc(8 * N), *bb = malloc(8 * N);
	tr_fill(x, N, 2.0, 77);
	for (size_t s = 0; s < 4; s++) {
		struct comp_codec c = codec(sp[s], 100);
		size_t            la, lb;
		comp_simd_set(0);
		PT_OK(comp_encode(&c, x, N, NULL, ba, 8 * N, &la));
		PT_OK(comp_decode(&c, ba, la, N, a));
		comp_simd_set(1);
		PT_OK(comp_encode(&c, x, N, NULL, bb, 8 * N, &lb));
		PT_OK(comp_decode(&c, bb, lb, N, b));
		ck_assert_uint_eq(la, lb);
		ck_assert_mem_eq(ba, bb, la);
		ck_assert_mem_eq(a, b, N * 4);
	}
	free(x);
	free(a);
	free(b);
	free(ba);
	free(bb);
}
END_TEST

static void
expect_eproto(const struct comp_codec *c, const uint8_t *in, size_t len,
    size_t n, const char *what)
{
	float out[64], keep[64];
	for (size_t i = 0; i < 64; i++)
		out[i] = keep[i] = (float) i;
	TR_ASSERT_MSG(comp_decode(c, in, len, n, out) == FB_EPROTO,
	    "%s accepted", what);
	TR_ASSERT_MSG(comp_decode_add(c, in, len, n, out) == FB_EPROTO,
	    "%s accepted by decode_add", what);
	ck_assert_mem_eq(out, keep, sizeof out);
}

// Hand-made corrupt payloads: each is refused with FB_EPROTO, out
// untouched. n = 64, k = 4 (l = 4: low nibbles, then 4 + 3 upper bits).
START_TEST(test_sparse_bogus)
{
	struct comp_codec c = codec("topk:0.0625+q8", 4);
	float             x[64];
	uint8_t           ok[64], b[64];
	size_t            len;
	for (size_t i = 0; i < 64; i++)
		x[i] = (float) (i % 5) * 0.01f;
	x[3]  = 5;
	x[20] = -4;
	x[41] = 3;
	x[63] = 2; // kept: 3, 20, 41, 63
	PT_OK(comp_encode(&c, x, 64, NULL, ok, sizeof ok, &len));
	// 4 (k) + 3 (EF: 16 low bits, 7 upper bits) + 4 (scale) + 4 codes
	ck_assert_uint_eq(len, 15);
	ck_assert_uint_eq(ok[4], 0x43); // low nibbles of 3 and 20
	ck_assert_uint_eq(ok[5], 0xf9); // of 41 and 63
	// upper: high parts 0, 1, 2, 3 -> bits 0, 2, 4, 6
	ck_assert_uint_eq(ok[6], 0x55);
	float y[64];
	PT_OK(comp_decode(&c, ok, len, 64, y));
	ck_assert_float_eq(y[3], 127.0f * (5.0f / 127.0f));
	ck_assert_float_eq(y[20], -102.0f * (5.0f / 127.0f));
	ck_assert_float_eq(y[63], 51.0f * (5.0f / 127.0f));
	ck_assert_float_eq(y[0], 0.0f);

	memcpy(b, ok, len);
	b[6] = 0x57; // an extra upper one: more than k indices
	expect_eproto(&c, b, len, 64, "extra upper bit");
	b[6] = 0x15; // a missing upper one: fewer than k
	expect_eproto(&c, b, len, 64, "missing upper bit");
	memcpy(b, ok, len);
	b[4] = 0x33; // indices 3, 3: not strictly increasing
	b[6] = 0x53;
	expect_eproto(&c, b, len, 64, "repeated index");
	memcpy(b, ok, len);
	b[6] = 0x95; // the 4th upper one at bit 7: past the 7-bit block
	expect_eproto(&c, b, len, 64, "padding bit");
	memcpy(b, ok, len);
	fb_put_u32le(b, 65); // k > n
	expect_eproto(&c, b, len, 64, "k > n");
	fb_put_u32le(b, 3); // k that does not match the length
	expect_eproto(&c, b, len, 64, "k against length");
	memcpy(b, ok, len);
	b[11] = 0x80; // the forbidden q8 code
	expect_eproto(&c, b, len, 64, "code 0x80");
	memcpy(b, ok, len);
	fb_put_f32le(b + 7, -1.0f); // a negative scale
	expect_eproto(&c, b, len, 64, "negative scale");
	expect_eproto(&c, ok, len - 1, 64, "short payload");
	expect_eproto(&c, ok, 3, 64, "no count");
	// randk: a non-finite fp32 value, a short payload
	struct comp_codec r = codec("randk:0.0625", 0);
	PT_OK(comp_encode(&r, x, 64, NULL, b, sizeof b, &len));
	ck_assert_uint_eq(len, 12 + 16);
	fb_put_f32le(b + 12 + 8, NAN);
	expect_eproto(&r, b, len, 64, "NaN value");
	expect_eproto(&r, b, 11, 64, "no seed");
	// encode: a non-finite value is refused
	x[5] = INFINITY;
	PT_FAIL(comp_encode(&c, x, 64, NULL, b, sizeof b, &len), FB_EINVAL);
	// parse: bad composites
	struct comp_codec keep = c;
	const char *bad[] = { "topk:0.1+q2", "topk:0.1+", "topk:+q8", "randk",
		"randk:", "randk:0", "randk:2+q8", "topk:0.1q8",
		"randk:0.1+q8:sr", "topk+q8", "randk+q4" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		TR_ASSERT_MSG(comp_codec_parse(bad[i], 0, &c) == FB_EINVAL,
		    "'%s' parsed", bad[i]);
	ck_assert_mem_eq(&c, &keep, sizeof c);
}
END_TEST

// Formats read back: comp_codec_format then comp_codec_parse.
START_TEST(test_sparse_format)
{
	const char *sp[] = { "topk:0.5+q8", "topk:0.25+q4", "randk:0.5",
		"randk:0.125+q8", "randk:1+q4" };
	for (size_t s = 0; s < 5; s++) {
		struct comp_codec c = codec(sp[s], 0), d;
		char              buf[64];
		PT_OK(comp_codec_format(&c, buf, sizeof buf));
		ck_assert_str_eq(buf, sp[s]);
		PT_OK(comp_codec_parse(buf, 0, &d));
		ck_assert_mem_eq(&c, &d, sizeof c);
	}
	ck_assert_str_eq(comp_codec_name(COMP_TOPK_Q8), "topk+q8");
	ck_assert_str_eq(comp_codec_name(COMP_RANDK_Q4), "randk+q4");
}
END_TEST

Suite *
suite_sparse(void)
{
	Suite *s  = suite_create("sparse");
	TCase *tc = tcase_create("sparse");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_sparse_sizes);
	tcase_add_test(tc, test_sparse_topk_same_set);
	tcase_add_test(tc, test_sparse_topk_large_k);
	tcase_add_test(tc, test_sparse_randk_sets);
	tcase_add_test(tc, test_sparse_ef_exact);
	tcase_add_test(tc, test_sparse_simd_same);
	tcase_add_test(tc, test_sparse_bogus);
	tcase_add_test(tc, test_sparse_format);
	suite_add_tcase(s, tc);
	return s;
}
