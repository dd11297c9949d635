// test_codec_cuda.c — the device codecs against compression/'s CPU ones:
// encode, error-feedback encode and decode-add give identical bytes and
// identical float bits for none, fp16, bf16, q8, q4 and q2, odd lengths
// and buckets, special values (zeros, subnormals, huge values, a bucket
// whose scale is so small that L / s overflows); malformed deltas and
// non-finite inputs are refused with the CPU's codes and nothing written.
// The TCase skips, with a message, when no CUDA device is found.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <comp/comp.h>
#include <cuda_runtime_api.h>

#include "backend_cuda.h"
#include "codec_cuda.h"
#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

static int
gpu_or_skip(const char *test)
{
	char why[160] = "";
	if (tr__cuda_device_count(why, sizeof(why)) > 0) {
		return 1;
	}
	fprintf(stderr, "SKIP %s: no CUDA device (%s)\n", test, why);
	return 0;
}

static const uint32_t ids[]     = { COMP_NONE, COMP_FP16, COMP_BF16, COMP_Q8,
	    COMP_Q4, COMP_Q2 };
static const uint32_t buckets[] = { 512, 1, 3, 7, 64, 100, 32, 128 };
static const size_t lens[] = { 1, 2, 7, 13, 100, 515, 1029, 4099, 4096, 4100 };

#define MAXN 4100

// fill writes n test values: normals of several magnitudes, zeros,
// subnormals, one bucket-sized run of tiny values and a huge one.
static void
fill(float *x, size_t n, uint64_t seed)
{
	struct tr_rng r;
	tr_rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++) {
		float v = tr_rng_normal(&r);
		switch (i % 17) {
		case 3:
			v = 0.0f;
			break;
		case 5:
			v *= 1e-40f; // subnormal
			break;
		case 11:
			v *= 1e30f;
			break;
		default:
			break;
		}
		x[i] = v;
	}
	// a run whose absmax is ~1e-38: L / s overflows (the double path)
	for (size_t i = n / 2; i < n / 2 + 8 && i < n; i++) {
		x[i] = (i & 1 ? -1.0f : 1.0f) * 3e-39f *
		    (float) (i - n / 2 + 1);
	}
}

struct dev {
	struct fcuda__dctx ctx;
	float             *x, *e, *acc;
	uint8_t           *out;
};

static void
dev_open(struct dev *d)
{
	size_t cap = 4 * MAXN + 4 * MAXN + 64;
	memset(d, 0, sizeof(*d));
	// one float more: the tests also run on pointers one float in
	ck_assert_int_eq(cudaMalloc((void **) &d->x, MAXN * 4 + 4),
	    cudaSuccess);
	ck_assert_int_eq(cudaMalloc((void **) &d->e, MAXN * 4 + 4),
	    cudaSuccess);
	ck_assert_int_eq(cudaMalloc((void **) &d->acc, MAXN * 4 + 4),
	    cudaSuccess);
	ck_assert_int_eq(cudaMalloc((void **) &d->out, cap), cudaSuccess);
	PT_OK(fcuda__dctx_init(&d->ctx, NULL));
}

static void
dev_close(struct dev *d)
{
	cudaFree(d->x);
	cudaFree(d->e);
	cudaFree(d->acc);
	cudaFree(d->out);
	fcuda__dctx_fini(&d->ctx);
}

static void
up(void *dst, const void *src, size_t bytes)
{
	ck_assert_int_eq(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice),
	    cudaSuccess);
}

static void
down(void *dst, const void *src, size_t bytes)
{
	ck_assert_int_eq(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost),
	    cudaSuccess);
}

// For every codec, bucket and odd length: device bytes == comp_encode
// bytes; ef_encode bytes and residuals == comp_ef_encode's, bit for bit;
// decode_add == comp_decode_add, bit for bit.
START_TEST(test_dcodec_matches_cpu)
{
	static float   x[MAXN], e[MAXN], ec[MAXN], eg[MAXN], acc[MAXN];
	static float   accc[MAXN], accg[MAXN];
	static uint8_t bc[8 * MAXN + 64], bg[8 * MAXN + 64];
	struct dev     d;
	if (!gpu_or_skip("test_dcodec_matches_cpu")) {
		return;
	}
	dev_open(&d);
	for (size_t ci = 0; ci < sizeof(ids) / sizeof(ids[0]); ci++) {
		for (size_t bi = 0; bi < sizeof(buckets) / sizeof(buckets[0]);
		     bi++) {
			struct comp_codec cc    = COMP_CODEC_INIT;
			cc.id                   = ids[ci];
			cc.bucket               = buckets[bi];
			struct fcuda__dcodec dc = { ids[ci], buckets[bi] };
			if (ids[ci] <= COMP_BF16 && bi > 0) {
				continue; // the bucket does not matter there
			}
			for (size_t li = 0;
			     li < sizeof(lens) / sizeof(lens[0]); li++) {
				size_t n = lens[li], len = 0;
				// odd lengths run on pointers one float in:
				// the kernels' unaligned paths
				size_t off = li % 2;
				float *dx = d.x + off, *de = d.e + off;
				float *dacc = d.acc + off;
				size_t need = comp_bound(&cc, n);
				char   what[64];
				snprintf(what, sizeof(what),
				    "%s bucket %u n %zu off %zu",
				    comp_codec_name(cc.id), cc.bucket, n, off);
				ck_assert_uint_eq(fcuda__dcodec_bound(&dc, n),
				    need);
				fill(x, n, 1000 * ci + 10 * bi + li);
				// the formats that refuse nothing see a NaN
				// too
				if (ids[ci] <= COMP_BF16 && n > 4) {
					x[4] = NAN;
				}
				// plain encode
				PT_OK(comp_encode(&cc, x, n, NULL, bc,
				    sizeof(bc), &len));
				up(dx, x, n * 4);
				PT_OK(fcuda__dcodec_encode(&d.ctx, &dc, dx, n,
				    d.out));
				PT_OK(fcuda__dctx_check(&d.ctx));
				down(bg, d.out, need);
				ck_assert_msg(memcmp(bc, bg, need) == 0,
				    "encode differs: %s", what);
				if (ids[ci] <= COMP_BF16 && n > 4) {
					x[4] = 1.5f;
				}
				// decode-add onto a random accumulator
				fill(acc, n, 77 + li);
				for (size_t i = 0; i < n; i++) {
					acc[i] = fmaxf(fminf(acc[i], 1e20f),
					    -1e20f);
				}
				if (ids[ci] <= COMP_BF16) {
					PT_OK(comp_encode(&cc, x, n, NULL, bc,
					    sizeof(bc), &len));
				}
				memcpy(accc, acc, n * 4);
				PT_OK(comp_decode_add(&cc, bc, need, n, accc));
				up(dacc, acc, n * 4);
				up(d.out, bc, need);
				PT_OK(fcuda__dcodec_decode_add(&d.ctx, &dc,
				    d.out, need, n, dacc));
				PT_OK(fcuda__dctx_check(&d.ctx));
				down(accg, dacc, n * 4);
				ck_assert_msg(memcmp(accc, accg, n * 4) == 0,
				    "decode_add differs: %s", what);
				// error feedback from a non-zero residual
				fill(e, n, 555 + li);
				for (size_t i = 0; i < n; i++) {
					e[i] = fmaxf(fminf(e[i], 1e20f),
					           -1e20f) *
					    0.01f;
					x[i] = fmaxf(fminf(x[i], 1e30f),
					    -1e30f);
				}
				memcpy(ec, e, n * 4);
				PT_OK(comp_ef_encode(&cc, x, ec, n, NULL, bc,
				    sizeof(bc), &len));
				up(dx, x, n * 4);
				up(de, e, n * 4);
				PT_OK(fcuda__dcodec_ef_encode(&d.ctx, &dc, dx,
				    de, n, d.out));
				PT_OK(fcuda__dctx_check(&d.ctx));
				down(bg, d.out, need);
				down(eg, de, n * 4);
				ck_assert_msg(memcmp(bc, bg, need) == 0,
				    "ef_encode bytes differ: %s", what);
				ck_assert_msg(memcmp(ec, eg, n * 4) == 0,
				    "ef residual differs: %s", what);
			}
		}
	}
	dev_close(&d);
}
END_TEST

// Malformed deltas (forbidden code, bad scale, padding bits) give
// FB_EPROTO and leave acc untouched; a non-finite input gives FB_EINVAL
// and leaves e untouched; bad arguments and sign/topk are refused at once.
START_TEST(test_dcodec_bogus)
{
	static float   x[64], acc[64], got[64], e[64];
	static uint8_t b[512];
	struct dev     d;
	size_t         len;
	if (!gpu_or_skip("test_dcodec_bogus")) {
		return;
	}
	dev_open(&d);
	fill(x, 13, 3);
	fill(acc, 13, 4);
	for (uint32_t id = COMP_Q8; id <= COMP_Q2; id++) {
		struct comp_codec    cc = COMP_CODEC_INIT;
		struct fcuda__dcodec dc = { id, 5 };
		cc.id                   = id;
		cc.bucket               = 5;
		size_t need             = comp_bound(&cc, 13);
		// q8's 13 codes fill whole bytes: no padding to corrupt
		for (int kind = 0; kind < (id == COMP_Q8 ? 2 : 3); kind++) {
			PT_OK(
			    comp_encode(&cc, x, 13, NULL, b, sizeof(b), &len));
			if (kind == 0) {
				b[4 * 3] = id == COMP_Q8 ? 0x80
				    : id == COMP_Q4      ? 0x08
				                    : 0x02; // forbidden code
			} else if (kind == 1) {
				float nan = NAN;
				memcpy(b + 4, &nan, 4); // bad scale
			} else {
				b[need - 1] |= 0x80; // padding (13*b % 8 != 0)
			}
			PT_FAIL(comp_decode_add(&cc, b, need, 13, acc),
			    FB_EPROTO);
			up(d.acc, acc, 13 * 4);
			up(d.out, b, need);
			PT_OK(fcuda__dcodec_decode_add(&d.ctx, &dc, d.out,
			    need, 13, d.acc));
			PT_FAIL(fcuda__dctx_check(&d.ctx), FB_EPROTO);
			down(got, d.acc, 13 * 4);
			ck_assert_int_eq(memcmp(got, acc, 13 * 4), 0);
		}
		PT_FAIL(fcuda__dcodec_decode_add(&d.ctx, &dc, d.out, need - 1,
		            13, d.acc),
		    FB_EPROTO);
		// non-finite: encode refuses, ef_encode leaves e alone
		x[7] = INFINITY;
		up(d.x, x, 13 * 4);
		PT_OK(fcuda__dcodec_encode(&d.ctx, &dc, d.x, 13, d.out));
		PT_FAIL(fcuda__dctx_check(&d.ctx), FB_EINVAL);
		x[7] = 1.0f;
		PT_OK(fcuda__dctx_check(&d.ctx)); // the flag was cleared
	}
	for (uint32_t id = COMP_NONE; id <= COMP_Q2; id++) {
		struct fcuda__dcodec dc = { id, 4 };
		fill(e, 13, 9);
		x[2] = NAN;
		up(d.x, x, 13 * 4);
		up(d.e, e, 13 * 4);
		PT_OK(
		    fcuda__dcodec_ef_encode(&d.ctx, &dc, d.x, d.e, 13, d.out));
		PT_FAIL(fcuda__dctx_check(&d.ctx), FB_EINVAL);
		down(got, d.e, 13 * 4);
		ck_assert_int_eq(memcmp(got, e, 13 * 4), 0);
		x[2] = 0.5f;
	}
	struct fcuda__dcodec sign = { COMP_SIGN, 4 }, bad = { 99, 4 },
	                     q0 = { COMP_Q8, 0 };
	PT_FAIL(fcuda__dcodec_encode(&d.ctx, &sign, d.x, 13, d.out),
	    FB_EUNSUPP);
	PT_FAIL(fcuda__dcodec_encode(&d.ctx, &bad, d.x, 13, d.out), FB_EINVAL);
	PT_FAIL(fcuda__dcodec_encode(&d.ctx, &q0, d.x, 13, d.out), FB_EINVAL);
	PT_FAIL(fcuda__dcodec_encode(&d.ctx, &sign, NULL, 13, d.out),
	    FB_EUNSUPP);
	struct fcuda__dcodec q8 = { COMP_Q8, 4 };
	PT_FAIL(fcuda__dcodec_encode(&d.ctx, &q8, d.x, 13, d.out + 1),
	    FB_EINVAL);
	PT_FAIL(fcuda__dcodec_encode(&d.ctx, &q8, NULL, 13, d.out), FB_EINVAL);
	PT_FAIL(fcuda__dcodec_ef_encode(&d.ctx, &q8, d.x, NULL, 13, d.out),
	    FB_EINVAL);
	ck_assert_uint_eq(fcuda__dcodec_bound(&bad, 13), 0);
	PT_OK(fcuda__dctx_check(&d.ctx));
	dev_close(&d);
}
END_TEST

// A forbidden code (-2^(b-1)) is found wherever it sits: in any code of a
// whole 32-bit word (the validator reads words) and in the last bytes.
START_TEST(test_dcodec_forbidden_anywhere)
{
	static float   x[64], acc[64], got[64];
	static uint8_t b[512];
	struct dev     d;
	size_t         len, n = 23;
	if (!gpu_or_skip("test_dcodec_forbidden_anywhere")) {
		return;
	}
	dev_open(&d);
	fill(x, n, 5);
	fill(acc, n, 6);
	for (uint32_t id = COMP_Q8; id <= COMP_Q2; id++) {
		struct comp_codec    cc = COMP_CODEC_INIT;
		struct fcuda__dcodec dc = { id, 8 };
		unsigned bits = id == COMP_Q8 ? 8 : id == COMP_Q4 ? 4 : 2;
		cc.id         = id;
		cc.bucket     = 8;
		size_t need   = comp_bound(&cc, n);
		size_t nb     = (n + 7) / 8;
		for (size_t i = 0; i < n; i++) {
			PT_OK(
			    comp_encode(&cc, x, n, NULL, b, sizeof(b), &len));
			size_t   bit  = i * bits;
			uint8_t *y    = b + 4 * nb + bit / 8;
			unsigned mask = ((1u << bits) - 1) << (bit % 8);
			*y            = (uint8_t) ((*y & ~mask) |
                            ((1u << (bits - 1)) << (bit % 8)));
			PT_FAIL(comp_decode_add(&cc, b, need, n, acc),
			    FB_EPROTO);
			up(d.acc, acc, n * 4);
			up(d.out, b, need);
			PT_OK(fcuda__dcodec_decode_add(&d.ctx, &dc, d.out,
			    need, n, d.acc));
			ck_assert_msg(fcuda__dctx_check(&d.ctx) == FB_EPROTO,
			    "q%u: forbidden code %zu not refused", bits, i);
			down(got, d.acc, n * 4);
			ck_assert_int_eq(memcmp(got, acc, n * 4), 0);
		}
	}
	dev_close(&d);
}
END_TEST

// The host-side sizing equals comp_bound for odd lengths and buckets and
// bad codecs are refused (no device needed: runs on every machine).
START_TEST(test_dcodec_bound)
{
	struct fcuda__dcodec q4 = { COMP_Q4, 3 }, f16 = { COMP_FP16, 0 };
	struct comp_codec    cc = COMP_CODEC_INIT;
	cc.id                   = COMP_Q4;
	cc.bucket               = 3;
	for (size_t n = 0; n < 40; n++) {
		ck_assert_uint_eq(fcuda__dcodec_bound(&q4, n),
		    comp_bound(&cc, n));
	}
	ck_assert_uint_eq(fcuda__dcodec_bound(&f16, 7), 14);
	PT_FAIL(fcuda__dcodec_valid(NULL), FB_EINVAL);
	PT_OK(fcuda__dcodec_valid(&f16));
	fcuda__dctx_fini(NULL);
}
END_TEST

Suite *
suite_codec_cuda(void)
{
	Suite *s  = suite_create("codec_cuda");
	TCase *tc = tcase_create("host");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_dcodec_bound);
	suite_add_tcase(s, tc);
	tc = tcase_create("gpu_codec");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_dcodec_matches_cpu);
	tcase_add_test(tc, test_dcodec_bogus);
	tcase_add_test(tc, test_dcodec_forbidden_anywhere);
	suite_add_tcase(s, tc);
	return s;
}
