// test_split.c — shard_split, shard_link_bytes and shard_place_uniform.
#include <math.h>
#include <stdint.h>

#include <shard/shard.h>

#include "pt.h"
#include "sharding_tests.h"

// check_cover asserts that d[0..n) covers every tensor exactly, in order,
// with contiguous, disjoint, non-empty shards of at most shard_bytes bytes.
static void
check_cover(const uint64_t *lens, size_t nt, uint64_t shard_bytes,
    const struct shard_desc *d, size_t n)
{
	size_t k = 0;
	for (size_t t = 0; t < nt; t++) {
		uint64_t off = 0, minl = UINT64_MAX, maxl = 0;
		uint32_t idx = 0;
		while (k < n && d[k].tensor == t) {
			ck_assert_uint_eq(d[k].index, idx);
			ck_assert_uint_eq(d[k].offset, off);
			ck_assert_uint_gt(d[k].len, 0);
			ck_assert_uint_le(d[k].len * 4, shard_bytes);
			off += d[k].len;
			minl = d[k].len < minl ? d[k].len : minl;
			maxl = d[k].len > maxl ? d[k].len : maxl;
			idx++;
			k++;
		}
		ck_assert_uint_eq(off, lens[t]);
		ck_assert_uint_le(maxl - minl, 1); // equal-ish pieces
		// fewest pieces: one fewer would not fit
		ck_assert_uint_gt((uint64_t) idx * (shard_bytes / 4),
		    lens[t] - 1);
		if (idx > 1)
			ck_assert_uint_lt(
			    (uint64_t) (idx - 1) * (shard_bytes / 4), lens[t]);
	}
	ck_assert_uint_eq(k, n);
}

// A failure means shards overlap, leave gaps, exceed shard_bytes or are out
// of order.
START_TEST(test_split_cover)
{
	uint64_t           lens[] = { 1, 1000, 256, 257, 100352, 10, 7 };
	size_t             nt     = sizeof(lens) / sizeof(lens[0]);
	uint64_t           sbs[]  = { 4, 8, 12, 1024, 1028, 4096, 1 << 20 };
	struct shard_desc *d;
	size_t             n;
	for (size_t s = 0; s < sizeof(sbs) / sizeof(sbs[0]); s++) {
		PT_OK(shard_split(lens, nt, sbs[s], &d, &n));
		check_cover(lens, nt, sbs[s], d, n);
		fb_free(d);
	}
}
END_TEST

// A failure means a small tensor was cut, or a large one was cut unevenly.
START_TEST(test_split_shapes)
{
	uint64_t           lens[] = { 100, 1000 };
	struct shard_desc *d;
	size_t             n;
	// 1000 elements in 400-byte (100-element) shards: exactly 10 of 100.
	PT_OK(shard_split(lens, 2, 400, &d, &n));
	ck_assert_uint_eq(n, 11);
	ck_assert_uint_eq(d[0].len, 100);
	for (size_t i = 1; i < n; i++) {
		ck_assert_uint_eq(d[i].tensor, 1);
		ck_assert_uint_eq(d[i].len, 100);
	}
	fb_free(d);
	// 1000 elements in 1200-byte (300) shards: 4 pieces of 250.
	PT_OK(shard_split(lens, 2, 1200, &d, &n));
	ck_assert_uint_eq(n, 5);
	ck_assert_uint_eq(d[0].len, 100);
	for (size_t i = 1; i < n; i++)
		ck_assert_uint_eq(d[i].len, 250);
	fb_free(d);
	// Default 1 MiB shards: both tensors are single shards.
	PT_OK(shard_split(lens, 2, 1 << 20, &d, &n));
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(d[1].len, 1000);
	ck_assert_uint_eq(d[1].index, 0);
	fb_free(d);
}
END_TEST

// A failure means bad input was accepted or out-params were written on
// failure.
START_TEST(test_split_bogus)
{
	uint64_t           lens[] = { 10, 0 };
	struct shard_desc *d      = (struct shard_desc *) 0x1;
	size_t             n      = 77;
	PT_FAIL(shard_split(NULL, 1, 4, &d, &n), FB_EINVAL);
	PT_FAIL(shard_split(lens, 0, 4, &d, &n), FB_EINVAL);
	PT_FAIL(shard_split(lens, 2, 4, &d, &n), FB_EINVAL); // zero length
	PT_FAIL(shard_split(lens, 1, 0, &d, &n), FB_EINVAL);
	PT_FAIL(shard_split(lens, 1, 2, &d, &n), FB_EINVAL);
	PT_FAIL(shard_split(lens, 1, 6, &d, &n), FB_EINVAL);
	PT_FAIL(shard_split(lens, 1, 4, NULL, &n), FB_EINVAL);
	PT_FAIL(shard_split(lens, 1, 4, &d, NULL), FB_EINVAL);
	uint64_t huge[] = { UINT64_MAX };
	PT_FAIL(shard_split(huge, 1, 4, &d, &n), FB_ERANGE);
	uint64_t many[] = { UINT64_C(1) << 40 }; // 2^40 shards of 1 element
	PT_FAIL(shard_split(many, 1, 4, &d, &n), FB_ERANGE);
	ck_assert_ptr_eq(d, (struct shard_desc *) 0x1);
	ck_assert_uint_eq(n, 77);
	// Allocation failure is reported, not a crash.
	fb_alloc_fail_after(0);
	int rv = shard_split(lens, 1, 4, &d, &n);
	fb_alloc_fail_after(-1);
	PT_FAIL(rv, FB_ENOMEM);
}
END_TEST

// A failure means the baseline is not round-robin in shard order.
START_TEST(test_place_uniform)
{
	uint32_t a[10];
	PT_OK(shard_place_uniform(10, 3, a));
	for (uint32_t i = 0; i < 10; i++)
		ck_assert_uint_eq(a[i], i % 3);
	PT_OK(shard_place_uniform(10, 1, a));
	for (uint32_t i = 0; i < 10; i++)
		ck_assert_uint_eq(a[i], 0);
	PT_OK(shard_place_uniform(0, 2, NULL));
}
END_TEST

// A failure means bad input was accepted.
START_TEST(test_place_uniform_bogus)
{
	uint32_t a[4] = { 9, 9, 9, 9 };
	PT_FAIL(shard_place_uniform(4, 0, a), FB_EINVAL);
	PT_FAIL(shard_place_uniform(4, 2, NULL), FB_EINVAL);
	ck_assert_uint_eq(a[0], 9);
}
END_TEST

// A failure means a slow link no longer gets shards it moves in about
// SHARD_LINK_S (or a fast one lost the operator's --shard-bytes).
START_TEST(test_link_bytes)
{
	const uint64_t mib = 1u << 20;
	// unmeasured links and fast ones keep --shard-bytes
	ck_assert_uint_eq(shard_link_bytes(0, mib), mib);
	ck_assert_uint_eq(shard_link_bytes(-5, mib), mib);
	ck_assert_uint_eq(shard_link_bytes(NAN, mib), mib);
	ck_assert_uint_eq(shard_link_bytes(INFINITY, mib), mib);
	ck_assert_uint_eq(shard_link_bytes(2e9, mib), mib); // loopback
	ck_assert_uint_eq(shard_link_bytes(mib / SHARD_LINK_S, mib), mib);
	// 100 Mbit/s, shared by two trainers (the probe sees ~6.5 MB/s) or
	// not (12.5 MB/s): 8 and 16 KiB
	ck_assert_uint_eq(shard_link_bytes(6.5e6, mib), 8192);
	ck_assert_uint_eq(shard_link_bytes(12.5e6, mib), 16384);
	// 1 Gbit/s: 128 KiB; 10 Mbit/s: the floor
	ck_assert_uint_eq(shard_link_bytes(125e6, mib), 131072);
	ck_assert_uint_eq(shard_link_bytes(1.25e6, mib), SHARD_LINK_MIN_BYTES);
	ck_assert_uint_eq(shard_link_bytes(1.0, mib), SHARD_LINK_MIN_BYTES);
	// never above --shard-bytes, nor below it when it is under the floor
	ck_assert_uint_eq(shard_link_bytes(6.5e6, 4000), 4000);
	ck_assert_uint_eq(shard_link_bytes(5e6, 12000), 8192);
	ck_assert_uint_eq(shard_link_bytes(1.0, 64), 64);
	// monotone in the bandwidth, a power of two below the cap
	uint64_t prev = 0;
	for (double bw = 1e5; bw < 1e10; bw *= 1.3) {
		uint64_t b = shard_link_bytes(bw, mib);
		ck_assert_uint_ge(b, prev);
		ck_assert(b == mib || (b & (b - 1)) == 0);
		ck_assert(b == SHARD_LINK_MIN_BYTES ||
		    (double) b <= bw * SHARD_LINK_S);
		prev = b;
	}
}
END_TEST

Suite *
suite_split(void)
{
	Suite *s  = suite_create("split");
	TCase *tc = tcase_create("split");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_split_cover);
	tcase_add_test(tc, test_split_shapes);
	tcase_add_test(tc, test_split_bogus);
	tcase_add_test(tc, test_place_uniform);
	tcase_add_test(tc, test_place_uniform_bogus);
	tcase_add_test(tc, test_link_bytes);
	suite_add_tcase(s, tc);
	return s;
}
