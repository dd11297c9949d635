// test_quant_avx512.c — the AVX-512 kernels (quant_avx512.c) against the
// portable ones: the same bytes and the same float bits, for every length
// and alignment, so that a server and a trainer on different CPUs stay in
// lockstep. Skips (passes with a note) on a CPU without AVX-512.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <comp/comp.h>

#include "comp_impl.h"
#include "compression_tests.h"
#include "pt.h"

// Kernel by kernel (q8, q4, q2, sign and the sign's lane-ordered sum), for
// lengths 1..200 at every start offset 0..3.
START_TEST(test_quant_avx512_kernels)
{
	const struct comp__kern *v = comp__kern_avx512();
	const struct comp__kern *p = &comp__kern_portable;
	if (v == NULL) {
		fprintf(stderr, "avx512 kernels: no AVX-512 here, skipped\n");
		return;
	}
	float    x[260], a[260], b[260];
	uint8_t  ca[260], cb[260];
	uint64_t seed = 99;
	for (size_t m = 1; m <= 200; m++)
		for (size_t off = 0; off < 4; off++) {
			tr_fill(x, 260, 3.0, seed++);
			ck_assert_uint_eq(v->absmax_bits(x + off, m),
			    p->absmax_bits(x + off, m));
			float inv = (float) (7.0 / (1.0 + tr_unif(&seed) * 9));
			memset(ca, 0xaa, sizeof ca);
			memset(cb, 0xaa, sizeof cb);
			v->q8_enc(x + off, m, inv * 18, ca + off);
			p->q8_enc(x + off, m, inv * 18, cb + off);
			ck_assert_mem_eq(ca, cb, sizeof ca);
			v->q4_enc(x + off, m, inv, ca + off);
			p->q4_enc(x + off, m, inv, cb + off);
			ck_assert_mem_eq(ca, cb, sizeof ca);
			v->q2_enc(x + off, m, inv, ca + off);
			p->q2_enc(x + off, m, inv, cb + off);
			ck_assert_mem_eq(ca, cb, sizeof ca);
			v->sign_enc(x + off, m, ca + off);
			p->sign_enc(x + off, m, cb + off);
			ck_assert_mem_eq(ca, cb, sizeof ca);
			double sv = v->abs_sum(x + off, m),
			       sp = p->abs_sum(x + off, m);
			ck_assert_mem_eq(&sv, &sp, sizeof sv); // same bits
			for (int mode = 0; mode < 3; mode++) {
				for (size_t i = 0; i < 260; i++)
					cb[i] = ca[i] = (uint8_t) tr_next(
					    &seed);
				memcpy(a, x, sizeof a);
				memcpy(b, x, sizeof b);
				v->q2_dec(ca + off, m, 0.37f, a + off, mode);
				p->q2_dec(cb + off, m, 0.37f, b + off, mode);
				ck_assert_mem_eq(a, b, sizeof a);
				v->sign_dec(ca + off, m, 0.37f, a + off, mode);
				p->sign_dec(cb + off, m, 0.37f, b + off, mode);
				ck_assert_mem_eq(a, b, sizeof a);
			}
			for (size_t i = 0; i < 260; i++) // valid codes only
				cb[i] = ca[i] = ca[i] == 0x80 ? 0 : ca[i];
			for (int mode = 0; mode < 3; mode++) {
				memcpy(a, x, sizeof a);
				memcpy(b, x, sizeof b);
				v->q8_dec(ca + off, m, 0.37f, a + off, mode);
				p->q8_dec(cb + off, m, 0.37f, b + off, mode);
				ck_assert_mem_eq(a, b, sizeof a);
				v->q4_dec(ca + off, m, 0.37f, a + off, mode);
				p->q4_dec(cb + off, m, 0.37f, b + off, mode);
				ck_assert_mem_eq(a, b, sizeof a);
			}
			for (size_t i = 0; i < 260; i++)
				ca[i] = (uint8_t) tr_next(&seed);
			ck_assert_int_eq(v->q8_bad(ca + off, m) != 0,
			    p->q8_bad(ca + off, m) != 0);
			ck_assert_int_eq(v->q4_bad(ca + off, m) != 0,
			    p->q4_bad(ca + off, m) != 0);
			ca[off + m - 1] = 0x80; // a bad last byte is seen
			TR_ASSERT(
			    v->q8_bad(ca + off, m) && p->q8_bad(ca + off, m));
			TR_ASSERT(
			    v->q4_bad(ca + off, m) && p->q4_bad(ca + off, m));
			memset(ca, 0x11, sizeof ca);
			TR_ASSERT(!v->q8_bad(ca + off, m) &&
			    !v->q4_bad(ca + off, m));
		}
}
END_TEST

// The top-k and randk kernels (collect_ge, count_ge, seed_sums): the same
// results for lengths 0..300 (tails not a multiple of 16 or 64, inputs
// shorter than a vector) at every start offset 0..3, with ties (values on a
// few levels, the threshold on one of them), Inf and NaN (max and sums over
// raw bits), and a cap just below, at and above the count.
START_TEST(test_quant_avx512_select_kernels)
{
	const struct comp__kern *v = comp__kern_avx512();
	const struct comp__kern *p = &comp__kern_portable;
	if (v == NULL) {
		fprintf(stderr, "avx512 kernels: no AVX-512 here, skipped\n");
		return;
	}
	enum { M = 304 };
	float    x[M];
	uint32_t ia[M], ib[M], ba[M], bb[M];
	uint64_t seed = 123;
	for (size_t m = 0; m <= 300; m++)
		for (size_t off = 0; off < 4; off++) {
			int kind = (int) ((m + off) % 3);
			tr_fill(x, M, 2.0, seed++);
			if (kind == 1) // ties: five levels
				for (size_t i = 0; i < M; i++)
					x[i] = (float) ((int) (tr_next(&seed) %
					                    5) -
					    2);
			if (kind == 2 && m > 0) { // Inf and NaN
				x[off + tr_next(&seed) % m] = INFINITY;
				x[off + tr_next(&seed) % m] = -NAN;
			}
			uint32_t ts[3] = { 0, comp__f2u(1.0f),
				comp__f2u(1.5f) };
			for (int ti = 0; ti < 3; ti++) {
				uint32_t ma = 1, mb = 2;
				size_t   ca = v->collect_ge(x + off, m, ts[ti],
				      ia, ba, M, &ma);
				size_t   cb = p->collect_ge(x + off, m, ts[ti],
				      ib, bb, M, &mb);
				ck_assert_uint_eq(ca, cb);
				ck_assert_uint_eq(ma, mb);
				ck_assert_mem_eq(ia, ib, 4 * ca);
				ck_assert_mem_eq(ba, bb, 4 * ca);
				for (size_t j = 0; j < ca; j++)
					TR_ASSERT(ib[j] < m &&
					    (comp__f2u(x[off + ib[j]]) &
					        0x7fffffffu) == bb[j] &&
					    bb[j] >= ts[ti]);
				if (ca > 0) { // one short: both overflow
					ck_assert_uint_eq(
					    v->collect_ge(x + off, m, ts[ti],
					        ia, ba, ca - 1, &ma),
					    ca);
					ck_assert_uint_eq(
					    p->collect_ge(x + off, m, ts[ti],
					        ib, bb, ca - 1, &mb),
					    ca);
				}
				// count_ge over the patterns, at and around
				// each level (unsigned, as the patterns are)
				for (uint32_t d = 0; d < 3; d++) {
					uint32_t t = ts[ti] + d - 1;
					ck_assert_uint_eq(
					    v->count_ge(bb, cb, t),
					    p->count_ge(bb, cb, t));
				}
				ck_assert_uint_eq(
				    v->count_ge(bb, cb, 0x80000000u), 0);
			}
			uint32_t a1, a2, b1, b2;
			v->seed_sums(x + off, m, &a1, &a2);
			p->seed_sums(x + off, m, &b1, &b2);
			ck_assert_uint_eq(a1, b1);
			ck_assert_uint_eq(a2, b2);
		}
}
END_TEST

// Through the public API with odd buckets: encode bytes and decode_add
// floats are identical with the kernels switched on and off.
START_TEST(test_quant_avx512_public)
{
	size_t   n = 2049;
	float   *x = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
	uint8_t *ea = malloc(8 * n), *eb = malloc(8 * n);
	tr_fill(x, n, 1.0, 4);
	const char    *sp[] = { "q8", "q4", "q2", "sign" };
	const uint32_t bk[] = { 1, 5, 33, 128, 512, 1000 };
	for (int s = 0; s < 4; s++)
		for (int k = 0; k < 6; k++) {
			struct comp_codec c;
			size_t            la, lb;
			PT_OK(comp_codec_parse(sp[s], bk[k], &c));
			comp_simd_set(1);
			PT_OK(comp_encode(&c, x, n, NULL, ea, 8 * n, &la));
			memcpy(a, x, n * 4);
			PT_OK(comp_decode_add(&c, ea, la, n, a));
			comp_simd_set(0);
			PT_OK(comp_encode(&c, x, n, NULL, eb, 8 * n, &lb));
			memcpy(b, x, n * 4);
			PT_OK(comp_decode_add(&c, ea, la, n, b));
			comp_simd_set(1);
			ck_assert_uint_eq(la, lb);
			ck_assert_mem_eq(ea, eb, la);
			ck_assert_mem_eq(a, b, n * 4);
		}
	free(x);
	free(a);
	free(b);
	free(ea);
	free(eb);
}
END_TEST

// q4 and q2 at bucket 128 run the fused one-pass kernels (q4_enc_b128,
// q2_enc_b128): a bucket
// of subnormals (7 / s overflows: the slow path) and an all-zero bucket in
// the middle of a group encode as the portable code does, and an Inf in a
// later bucket is refused the same way, whichever bucket of the group it
// is in.
START_TEST(test_quant_avx512_q4_b128_edges)
{
	enum { N = 128 * 70 + 5 };
	static float      x[N];
	static uint8_t    ea[N], eb[N];
	struct comp_codec c;
	size_t            la, lb;
	if (comp__kern_avx512() == NULL) {
		fprintf(stderr, "avx512 kernels: no AVX-512 here, skipped\n");
		return;
	}
	for (int b = 0; b < 2; b++) {
		PT_OK(comp_codec_parse(b ? "q2" : "q4", 128, &c));
		tr_fill(x, N, 1.0, 17);
		for (size_t i = 0; i < 128; i++) {
			x[128 * 3 + i] = (i % 3 ? 1 : -1) * 1e-41f * (float) i;
			x[128 * 5 + i] = 0.0f;
		}
		comp_simd_set(1);
		PT_OK(comp_encode(&c, x, N, NULL, ea, sizeof ea, &la));
		comp_simd_set(0);
		PT_OK(comp_encode(&c, x, N, NULL, eb, sizeof eb, &lb));
		comp_simd_set(1);
		ck_assert_uint_eq(la, lb);
		ck_assert_mem_eq(ea, eb, la);
		for (size_t at = 1; at < N; at += 128 * 9 + 7) {
			float keep = x[at];
			x[at]      = INFINITY;
			ck_assert_int_eq(
			    comp_encode(&c, x, N, NULL, ea, sizeof ea, &la),
			    FB_EINVAL);
			comp_simd_set(0);
			ck_assert_int_eq(
			    comp_encode(&c, x, N, NULL, eb, sizeof eb, &lb),
			    FB_EINVAL);
			comp_simd_set(1);
			x[at] = keep;
		}
	}
}
END_TEST

Suite *
suite_quant_avx512(void)
{
	Suite *s  = suite_create("quant_avx512");
	TCase *tc = tcase_create("quant_avx512");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_quant_avx512_kernels);
	tcase_add_test(tc, test_quant_avx512_public);
	tcase_add_test(tc, test_quant_avx512_q4_b128_edges);
	tcase_add_test(tc, test_quant_avx512_select_kernels);
	suite_add_tcase(s, tc);
	return s;
}
