// test_devpull.c — pulled deltas decoded on the GPU (devpull.h) against
// the host path: the device chunked CRC-32 equals fb_crc32 for odd
// lengths; a reference kept on the device and fed a full then delta chains
// through the sink callbacks ends bit-identical to the host reference
// (comp_ref_encode / comp_decode_add), for fp16, bf16, q8, q4, q2; a wrong
// CRC answers FERRY_ECORRUPT, a wrong length or corrupt codes
// FERRY_EPROTO with the reference untouched. The TCase skips, with a
// message, when no CUDA device is found.
#include <stdio.h>
#include <string.h>

#include <comp/comp.h>
#include <cuda_runtime_api.h>

#include "backend_cuda.h"
#include "devpull.h"
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

// Two tensors, three shards: tensor 0 (5003 floats) cut at 3001, tensor 1
// (1029 floats) whole.
#define T0 5003
#define T1 1029
#define NSH 3
static const struct ferry_shard shards[NSH] = { { 0, 0, 3001, 0 },
	{ 0, 3001, T0 - 3001, 0 }, { 1, 0, T1, 0 } };
static const size_t             tbase[2]    = { 0, T0 };

static void
fill(float *x, size_t n, uint64_t seed, float scale)
{
	struct tr_rng r;
	tr_rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++) {
		x[i] = scale * tr_rng_normal(&r);
	}
}

// The device CRC of n floats equals fb_crc32 for odd n, n around the
// 4 KiB chunk, and a single float.
START_TEST(test_devpull_crc_matches_host)
{
	static float           x[T0 + T1];
	static const size_t    ns[] = { 1, 3, 1023, 1024, 1025, 2049, 3001 };
	struct fcuda__devpull *d    = NULL;
	float                 *d_w;
	char                   err[256] = "";
	if (!gpu_or_skip("test_devpull_crc_matches_host")) {
		return;
	}
	fill(x, T0 + T1, 1, 1.0f);
	ck_assert_int_eq(cudaMalloc((void **) &d_w, sizeof(x)), cudaSuccess);
	ck_assert_int_eq(cudaMemcpy(d_w, x, sizeof(x), cudaMemcpyHostToDevice),
	    cudaSuccess);
	ck_assert_msg(fcuda__devpull_open(d_w, NULL, shards, NSH, COMP_Q8, 512,
	                  tbase, &d, err, sizeof(err)) == FB_OK,
	    "%s", err);
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		uint32_t got = 0;
		PT_OK(fcuda__devpull_crc(d, d_w + 7, ns[k], &got));
		ck_assert_msg(got == fb_crc32(0, x + 7, ns[k] * 4),
		    "n %zu: device %08x host %08x", ns[k], got,
		    fb_crc32(0, x + 7, ns[k] * 4));
	}
	uint32_t c;
	PT_FAIL(fcuda__devpull_crc(d, d_w, 3002, &c), FB_EINVAL); // > a shard
	fcuda__devpull_close(d);
	cudaFree(d_w);
}
END_TEST

static struct ferry_pull_piece
piece(uint32_t s, uint32_t codec, uint32_t bucket, const void *data,
    size_t bytes, uint64_t base)
{
	struct ferry_pull_piece p = { s, shards[s].tensor, shards[s].offset,
		shards[s].len, codec, bucket, base, base + 1,
		(const uint8_t *) data, bytes };
	return p;
}

// A full, then chains of 1, 2 and 3 deltas per shard (6 versions) leave
// the device reference equal, bit for bit, to the host's; every check
// passes; then the bad cases.
START_TEST(test_devpull_chain_matches_host)
{
	static const uint32_t ids[] = { COMP_FP16, COMP_BF16, COMP_Q8, COMP_Q4,
		COMP_Q2 };
	static const uint32_t bks[] = { 512, 512, 512, 100, 7 };
	static float    x[T0 + T1], ref[T0 + T1], got[T0 + T1], scratch[T0];
	static uint8_t  codes[6][NSH][4 * T0 + 64];
	static size_t   clen[6][NSH];
	static uint32_t crcs[6][NSH];
	if (!gpu_or_skip("test_devpull_chain_matches_host")) {
		return;
	}
	for (size_t ci = 0; ci < sizeof(ids) / sizeof(ids[0]); ci++) {
		struct comp_codec      cc = COMP_CODEC_INIT;
		struct fcuda__devpull *d  = NULL;
		struct ferry_pull_sink sk;
		float                 *d_w;
		char                   err[256] = "";
		float                 *gw[2]    = { got, got + T0 };
		cc.id                           = ids[ci];
		cc.bucket                       = bks[ci];
		fill(x, T0 + T1, 10 + ci, 1.0f);
		memcpy(ref, x, sizeof(x));
		ck_assert_int_eq(cudaMalloc((void **) &d_w, sizeof(x)),
		    cudaSuccess);
		ck_assert_int_eq(cudaMemset(d_w, 0, sizeof(x)), cudaSuccess);
		ck_assert_msg(fcuda__devpull_open(d_w, NULL, shards, NSH,
		                  cc.id, cc.bucket, tbase, &d, err,
		                  sizeof(err)) == FB_OK,
		    "%s", err);
		fcuda__devpull_sink(d, &sk);
		// version 0 in full
		for (uint32_t s = 0; s < NSH; s++) {
			struct ferry_pull_piece p = piece(s, 0, 0,
			    x + tbase[shards[s].tensor] + shards[s].offset,
			    shards[s].len * 4, 0);
			p.version                 = 0;
			ck_assert_int_eq(sk.full(sk.arg, &p), FERRY_OK);
		}
		// The server side: six versions of drifting weights.
		for (int v = 0; v < 6; v++) {
			static float step[T0 + T1];
			fill(step, T0 + T1, 100 + (uint64_t) v, 0.01f);
			for (size_t i = 0; i < T0 + T1; i++) {
				x[i] += step[i];
			}
			for (uint32_t s = 0; s < NSH; s++) {
				size_t o = tbase[shards[s].tensor] +
				    shards[s].offset;
				PT_OK(comp_ref_encode(&cc, x + o, ref + o,
				    shards[s].len, scratch, codes[v][s],
				    sizeof(codes[v][s]), &clen[v][s]));
				crcs[v][s] = fb_crc32(0, ref + o,
				    shards[s].len * 4);
			}
		}
		// Chains: versions 0->1, 1->3, 3->6.
		static const int from[] = { 0, 1, 3 }, to[] = { 1, 3, 6 };
		for (int c = 0; c < 3; c++) {
			for (uint32_t s = 0; s < NSH; s++) {
				for (int v = from[c]; v < to[c]; v++) {
					struct ferry_pull_piece p = piece(s,
					    cc.id, cc.bucket, codes[v][s],
					    clen[v][s], (uint64_t) v);
					ck_assert_int_eq(sk.delta(sk.arg, &p),
					    FERRY_OK);
				}
				ck_assert_msg(
				    sk.check(sk.arg, s, (uint64_t) to[c],
				        crcs[to[c] - 1][s]) == FERRY_OK,
				    "%s shard %u chain %d: %s",
				    comp_codec_name(cc.id), s, c,
				    fcuda__devpull_error(d));
			}
		}
		PT_OK(fcuda__devpull_fetch(d, gw));
		ck_assert_msg(memcmp(got, ref, sizeof(ref)) == 0,
		    "%s: device reference differs from the host's",
		    comp_codec_name(cc.id));

		// A wrong CRC is a mismatch.
		ck_assert_int_eq(sk.check(sk.arg, 0, 6, crcs[5][0] ^ 1),
		    FERRY_ECORRUPT);
		// A delta of the wrong length or codec is refused, unapplied.
		struct ferry_pull_piece p = piece(2, cc.id, cc.bucket,
		    codes[0][2], clen[0][2] - 1, 6);
		ck_assert_int_eq(sk.delta(sk.arg, &p), FERRY_EPROTO);
		p = piece(2, cc.id + 1, cc.bucket, codes[0][2], clen[0][2], 6);
		ck_assert_int_eq(sk.delta(sk.arg, &p), FERRY_EPROTO);
		p = piece(2, cc.id, cc.bucket, codes[0][2], clen[0][2], 6);
		p.shard = NSH; // not a shard of the layout
		ck_assert_int_eq(sk.delta(sk.arg, &p), FERRY_ESINK);
		if (cc.id >= COMP_Q8) {
			// A NaN scale: the device refuses the codes and leaves
			// the reference as it was (its CRC still matches).
			static uint8_t bad[4 * T1 + 64];
			const float    nan = __builtin_nanf("");
			memcpy(bad, codes[0][2], clen[0][2]);
			memcpy(bad, &nan, 4);
			p = piece(2, cc.id, cc.bucket, bad, clen[0][2], 6);
			ck_assert_int_eq(sk.delta(sk.arg, &p), FERRY_OK);
			ck_assert_int_eq(sk.check(sk.arg, 2, 7, crcs[5][2]),
			    FERRY_EPROTO);
			ck_assert_int_eq(sk.check(sk.arg, 2, 6, crcs[5][2]),
			    FERRY_OK);
		}
		fcuda__devpull_close(d);
		cudaFree(d_w);
	}
}
END_TEST

Suite *
suite_devpull(void)
{
	Suite *s  = suite_create("devpull");
	TCase *tc = tcase_create("gpu_devpull");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_devpull_crc_matches_host);
	tcase_add_test(tc, test_devpull_chain_matches_host);
	suite_add_tcase(s, tc);
	return s;
}
