// test_quant.c — the bucketed quantizer (q8, q4, q2) and scaled sign:
// docs/algorithms.md §2.6 items 1 and 2, the exact wire bytes, and rejection
// of corrupt scales, codes and padding.
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include <comp/comp.h>

#include "comp_impl.h"
#include "compression_tests.h"
#include "pt.h"

static const size_t   lens[]    = { 1, 7, 13, 100, 127, 511, 513, 1000, 1031,
	     4099 };
static const uint32_t buckets[] = { 1, 3, 100, 128, 512 };
static const uint32_t qids[]    = { COMP_Q8, COMP_Q4, COMP_Q2 };

static unsigned
bits_of(uint32_t id)
{
	return id == COMP_Q8 ? 8 : id == COMP_Q4 ? 4 : id == COMP_Q2 ? 2 : 1;
}

static struct comp_codec
mk(uint32_t id, uint32_t bucket)
{
	struct comp_codec c = COMP_CODEC_INIT;
	c.id                = id;
	c.bucket            = bucket;
	return c;
}

// Round trip: every element within s_j/(2L) (+ TR_QSLACK), zero buckets
// exactly zero, the largest element within one ulp, and s_j on the wire equal
// to max|x|. A failure means the quantizer rounds, clamps or scales wrongly.
START_TEST(test_quant_round_trip_bound)
{
	size_t   nmax = 4099;
	float   *x = malloc(nmax * 4), *y = malloc(nmax * 4);
	uint8_t *buf = malloc(8 * nmax + 64);
	for (size_t qi = 0; qi < 3; qi++)
		for (size_t bi = 0; bi < 5; bi++)
			for (size_t li = 0; li < 10; li++) {
				size_t            n = lens[li];
				struct comp_codec c = mk(qids[qi],
				    buckets[bi]);
				uint32_t          B = c.bucket;
				double            L =
				    (double) ((1u << (bits_of(c.id) - 1)) - 1);
				tr_fill(x, n, 1.0 + li, 1000 + li * 7 + bi);
				if (n >= 2 * B) // one all-zero bucket
					memset(x + B, 0, B * 4);
				size_t len;
				PT_OK(comp_encode(&c, x, n, NULL, buf,
				    comp_bound(&c, n), &len));
				ck_assert_uint_eq(len, comp_bound(&c, n));
				PT_OK(comp_decode(&c, buf, len, n, y));
				for (size_t j = 0; j * B < n; j++) {
					size_t i0  = j * B;
					size_t m   = n - i0 < B ? n - i0 : B;
					float  s   = fb_get_f32le(buf + 4 * j);
					float  mx  = 0;
					size_t imx = i0;
					for (size_t i = i0; i < i0 + m; i++)
						if (fabsf(x[i]) > mx) {
							mx  = fabsf(x[i]);
							imx = i;
						}
					ck_assert_float_eq(s, mx);
					double bound = s / (2 * L) *
					        (1 + 1e-6) +
					    TR_QSLACK * s;
					for (size_t i = i0; i < i0 + m; i++) {
						double err = fabs(
						    (double) x[i] -
						    (double) y[i]);
						TR_ASSERT_MSG(err <= bound,
						    "%s B=%u n=%zu i=%zu err %g > %g",
						    comp_codec_name(c.id), B,
						    n, i, err, bound);
						if (mx == 0)
							TR_ASSERT(
							    y[i] == 0.0f);
					}
					if (mx > 0) {
						float up = nextafterf(
						    fabsf(x[imx]), INFINITY);
						TR_ASSERT_MSG(
						    fabsf(y[imx] - x[imx]) <=
						        up - fabsf(x[imx]),
						    "max element off by more than 1 ulp");
					}
				}
			}
	free(x);
	free(y);
	free(buf);
}
END_TEST

// Scaled sign: s_j = mean|x|, every value decodes to +-s_j with the sign of
// x, and the error never exceeds ||x||^2 per bucket. A failure means the
// 1-bit codec is wrong.
START_TEST(test_quant_sign_round_trip)
{
	size_t   nmax = 4099;
	float   *x = malloc(nmax * 4), *y = malloc(nmax * 4);
	uint8_t *buf = malloc(8 * nmax);
	for (size_t bi = 0; bi < 5; bi++)
		for (size_t li = 0; li < 10; li++) {
			size_t            n = lens[li];
			struct comp_codec c = mk(COMP_SIGN, buckets[bi]);
			uint32_t          B = c.bucket;
			tr_fill(x, n, 2.0, 77 + li);
			if (n >= 2 * B)
				memset(x + B, 0, B * 4);
			size_t len;
			PT_OK(
			    comp_encode(&c, x, n, NULL, buf, 8 * nmax, &len));
			ck_assert_uint_eq(len,
			    4 * ((n + B - 1) / B) + (n + 7) / 8);
			PT_OK(comp_decode(&c, buf, len, n, y));
			for (size_t j = 0; j * B < n; j++) {
				size_t i0 = j * B, m = n - i0 < B ? n - i0 : B;
				double sum = 0, e2 = 0, x2 = 0;
				for (size_t i = i0; i < i0 + m; i++)
					sum += fabs(x[i]);
				float s = (float) (sum / m);
				ck_assert_float_eq(fb_get_f32le(buf + 4 * j),
				    s);
				for (size_t i = i0; i < i0 + m; i++) {
					ck_assert_float_eq(fabsf(y[i]), s);
					if (s > 0)
						ck_assert_int_eq(y[i] < 0,
						    x[i] < 0);
					e2 += ((double) x[i] - y[i]) *
					    ((double) x[i] - y[i]);
					x2 += (double) x[i] * x[i];
				}
				TR_ASSERT(e2 <= x2 * (1 + 1e-6) + 1e-30);
			}
		}
	free(x);
	free(y);
	free(buf);
}
END_TEST

// The exact bytes of a small q4, q2, q8 and sign encoding, written out by
// hand from FORMAT.md. A failure means the wire format changed.
START_TEST(test_quant_exact_bytes)
{
	// q4, bucket 3, n = 5: buckets {7, -3.5, 1}, {-2, 0.5}
	float   x[5] = { 7.0f, -3.5f, 1.0f, -2.0f, 0.5f };
	// s0 = 7: q = 7, round(-3.5) = -4 (ties to even), 1
	// s1 = 2: q = -7, round(1.75) = 2
	uint8_t want4[8 + 3] = { 0, 0, 0xe0, 0x40, 0, 0, 0, 0x40, 0xc7, 0x91,
		0x02 };
	uint8_t got[32];
	size_t  len;
	struct comp_codec c = mk(COMP_Q4, 3);
	PT_OK(comp_encode(&c, x, 5, NULL, got, sizeof got, &len));
	ck_assert_uint_eq(len, sizeof want4);
	ck_assert_mem_eq(got, want4, len);

	// q2, bucket 3: s0 = 7: q = 1, round(-0.5) = 0 (even), round(1/7)=0;
	// s1 = 2: q = -1 (0b11), round(0.25) = 0
	uint8_t want2[8 + 2] = { 0, 0, 0xe0, 0x40, 0, 0, 0, 0x40, 0xc1, 0x00 };
	c                    = mk(COMP_Q2, 3);
	PT_OK(comp_encode(&c, x, 5, NULL, got, sizeof got, &len));
	ck_assert_uint_eq(len, sizeof want2);
	ck_assert_mem_eq(got, want2, len);

	// q8, bucket 8: one bucket, s = 7: q = 127, -64 (-63.5 -> even),
	// round(18.142857) = 18, round(-36.28) = -36, round(9.07) = 9
	uint8_t want8[4 + 5] = { 0, 0, 0xe0, 0x40, 0x7f, 0xc0, 0x12, 0xdc,
		0x09 };
	c                    = mk(COMP_Q8, 8);
	PT_OK(comp_encode(&c, x, 5, NULL, got, sizeof got, &len));
	ck_assert_uint_eq(len, sizeof want8);
	ck_assert_mem_eq(got, want8, len);

	// sign, bucket 8: s = mean|x| = 14/5 = 2.8f, bits 0b01010 LSB first
	uint8_t wants[4 + 1];
	fb_put_f32le(wants, 2.8f);
	wants[4] = 0x0a;
	c        = mk(COMP_SIGN, 8);
	PT_OK(comp_encode(&c, x, 5, NULL, got, sizeof got, &len));
	ck_assert_uint_eq(len, sizeof wants);
	ck_assert_mem_eq(got, wants, len);
}
END_TEST

// ref_pack packs codes q[0..n) at b bits, LSB first (the test's own
// independent packer).
static void
ref_pack(unsigned b, const int *q, size_t n, uint8_t *out)
{
	memset(out, 0, (n * b + 7) / 8);
	for (size_t i = 0; i < n; i++)
		for (unsigned k = 0; k < b; k++)
			if (((unsigned) q[i] >> k) & 1)
				out[(i * b + k) / 8] |= (uint8_t) (1u
				    << ((i * b + k) % 8));
}

// Unpack then pack reproduces random valid wire bytes exactly, for every
// bucket/length, including buckets that start mid-byte. A failure means
// the packing order of the library and FORMAT.md disagree.
START_TEST(test_quant_pack_unpack_exact)
{
	uint64_t seed = 42;
	size_t   nmax = 1031;
	int     *q    = malloc(nmax * sizeof *q);
	float   *y    = malloc(nmax * 4);
	uint8_t *wire = malloc(8 * nmax), *again = malloc(8 * nmax);
	for (size_t qi = 0; qi < 3; qi++)
		for (size_t bi = 0; bi < 5; bi++)
			for (size_t li = 0; li < 9; li++) {
				struct comp_codec c = mk(qids[qi],
				    buckets[bi]);
				size_t            n = lens[li], B = c.bucket;
				unsigned          b  = bits_of(c.id);
				int               L  = (1 << (b - 1)) - 1;
				size_t            nb = (n + B - 1) / B;
				for (size_t j = 0; j < nb; j++)
					fb_put_f32le(wire + 4 * j,
					    (float) (0.5 +
					        4 * tr_unif(&seed)));
				for (size_t i = 0; i < n; i++)
					q[i] = (int) (tr_next(&seed) %
					           (unsigned) (2 * L + 1)) -
					    L;
				ref_pack(b, q, n, wire + 4 * nb);
				size_t len = 4 * nb + (n * b + 7) / 8;
				ck_assert_uint_eq(len, comp_bound(&c, n));
				PT_OK(comp_decode(&c, wire, len, n, y));
				for (size_t i = 0; i < n; i++) {
					float s = fb_get_f32le(
					    wire + 4 * (i / B));
					float step = s / (float) L;
					TR_ASSERT(y[i] == (float) q[i] * step);
					q[i] = (int) lrintf(y[i] / step);
				}
				memcpy(again, wire, 4 * nb);
				ref_pack(b, q, n, again + 4 * nb);
				ck_assert_mem_eq(again, wire, len);
			}
	free(q);
	free(y);
	free(wire);
	free(again);
}
END_TEST

// Stochastic rounding is unbiased (|mean - x| <= 5 sd/sqrt(N) for every
// coordinate) and never off by more than one step; deterministic rounding
// fails the same check (the test can fail). A failure means SR is biased.
START_TEST(test_quant_stochastic_unbiased)
{
	enum { N = 4000, D = 4096 };
	float   *x = malloc(D * 4), *y = malloc(D * 4);
	double  *sum = calloc(D, sizeof *sum);
	uint8_t *buf = malloc(4 * D);
	tr_fill(x, D, 1.0, 9);
	struct comp_codec c = mk(COMP_Q4, 512);
	c.stochastic        = 1;
	uint64_t rng        = 12345;
	size_t   len;
	for (int t = 0; t < N; t++) {
		PT_OK(comp_encode(&c, x, D, &rng, buf, 4 * D, &len));
		PT_OK(comp_decode(&c, buf, len, D, y));
		for (size_t i = 0; i < D; i++) {
			float step = fb_get_f32le(buf + 4 * (i / 512)) / 7.0f;
			TR_ASSERT(
			    fabs((double) y[i] - x[i]) <= step * 1.000001);
			sum[i] += y[i];
		}
	}
	double zmax = 0;
	for (size_t i = 0; i < D; i++) {
		double step = fb_get_f32le(buf + 4 * (i / 512)) / 7.0;
		double z    = fabs(sum[i] / N - x[i]) / (step / 2 / sqrt(N));
		zmax        = z > zmax ? z : zmax;
	}
	TR_ASSERT_MSG(zmax <= 5.0, "max z-score %g > 5", zmax);

	// Negative control: deterministic rounding is biased per coordinate.
	c.stochastic = 0;
	PT_OK(comp_encode(&c, x, D, NULL, buf, 4 * D, &len));
	PT_OK(comp_decode(&c, buf, len, D, y));
	size_t biased = 0;
	for (size_t i = 0; i < D; i++) {
		double step = fb_get_f32le(buf + 4 * (i / 512)) / 7.0;
		if (fabs((double) y[i] - x[i]) > 5 * step / 2 / sqrt(N))
			biased++;
	}
	ck_assert_uint_gt(biased, D / 2);
	free(x);
	free(y);
	free(sum);
	free(buf);
}
END_TEST

// A subnormal scale (L / s overflows in fp32) still quantizes within the
// bound. A failure means tiny gradients turn into NaN or garbage.
START_TEST(test_quant_subnormal_scale)
{
	float   x[5] = { 1e-39f, -5e-40f, 2e-40f, 0.0f, -1e-39f };
	float   y[5];
	uint8_t buf[64];
	size_t  len;
	for (size_t qi = 0; qi < 3; qi++) {
		struct comp_codec c = mk(qids[qi], 512);
		double L = (double) ((1u << (bits_of(c.id) - 1)) - 1);
		PT_OK(comp_encode(&c, x, 5, NULL, buf, sizeof buf, &len));
		PT_OK(comp_decode(&c, buf, len, 5, y));
		for (int i = 0; i < 5; i++)
			TR_ASSERT(fabs((double) y[i] - x[i]) <=
			    1e-39 / (2 * L) + 1e-45);
	}
}
END_TEST

// Corrupt input: NaN/Inf/negative scales, the forbidden code -2^(b-1),
// non-zero padding bits, wrong lengths. All give FB_EPROTO and leave the
// output untouched. A failure means a bad push could poison the model.
START_TEST(test_quant_decode_corrupt)
{
	size_t  n = 13;
	float   x[13], acc[13], keep[13];
	uint8_t buf[128];
	size_t  len;
	tr_fill(x, n, 1.0, 5);
	for (size_t qi = 0; qi < 4; qi++) {
		uint32_t          id = qi < 3 ? qids[qi] : COMP_SIGN;
		struct comp_codec c  = mk(id, 5);
		unsigned          b  = bits_of(id);
		PT_OK(comp_encode(&c, x, n, NULL, buf, sizeof buf, &len));
		for (size_t i = 0; i < n; i++)
			acc[i] = keep[i] = (float) i;
		const float bad[] = { NAN, INFINITY, -INFINITY, -1.0f };
		for (int k = 0; k < 4; k++) {
			uint8_t cp[128];
			memcpy(cp, buf, len);
			fb_put_f32le(cp + 4, bad[k]); // second scale
			PT_FAIL(comp_decode_add(&c, cp, len, n, acc),
			    FB_EPROTO);
			ck_assert_mem_eq(acc, keep, sizeof acc);
		}
		// padding bits: n*b = 13*b bits, last byte partly unused
		if ((n * b) % 8) {
			uint8_t cp[128];
			memcpy(cp, buf, len);
			cp[len - 1] |= 0x80;
			PT_FAIL(comp_decode_add(&c, cp, len, n, acc),
			    FB_EPROTO);
			PT_FAIL(comp_decode(&c, cp, len, n, acc), FB_EPROTO);
			ck_assert_mem_eq(acc, keep, sizeof acc);
		}
		if (b >= 2) { // forbidden code at element 6 (byte 12 + 6b/8)
			uint8_t cp[128];
			memcpy(cp, buf, len);
			size_t   bit = 6 * b, at = 12 + bit / 8;
			unsigned mask = ((1u << b) - 1) << (bit % 8);
			cp[at]        = (uint8_t) ((cp[at] & ~mask) |
                            ((1u << (b - 1)) << (bit % 8)));
			PT_FAIL(comp_decode_add(&c, cp, len, n, acc),
			    FB_EPROTO);
			ck_assert_mem_eq(acc, keep, sizeof acc);
		}
		for (size_t l = 0; l < len + 2; l++)
			if (l != len)
				PT_FAIL(comp_decode_add(&c, buf, l, n, acc),
				    FB_EPROTO);
		ck_assert_mem_eq(acc, keep, sizeof acc);
		float big[64];
		PT_FAIL(comp_decode(&c, buf, len, n + 5, big), FB_EPROTO);
		PT_OK(comp_decode_add(&c, buf, len, n, acc)); // control
	}
}
END_TEST

Suite *
suite_quant(void)
{
	Suite *s  = suite_create("quant");
	TCase *tc = tcase_create("quant");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_quant_round_trip_bound);
	tcase_add_test(tc, test_quant_sign_round_trip);
	tcase_add_test(tc, test_quant_exact_bytes);
	tcase_add_test(tc, test_quant_pack_unpack_exact);
	tcase_add_test(tc, test_quant_stochastic_unbiased);
	tcase_add_test(tc, test_quant_subnormal_scale);
	tcase_add_test(tc, test_quant_decode_corrupt);
	suite_add_tcase(s, tc);
	return s;
}
