// test_partition.c — seeded partitions: disjoint, covering, identical on
// every rank, deterministic per epoch, and rebuildable by a reference.
#include <stdlib.h>
#include <string.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

// The ranks' partitions are disjoint and cover 0..n-1, with sizes that
// differ by at most one, for several (n, T).
START_TEST(test_partition_disjoint_covering)
{
	static const size_t ns[] = { 1, 7, 1000, 1001, 60000 };
	static const int    ts[] = { 1, 2, 3, 7 };
	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
		for (size_t b = 0; b < sizeof(ts) / sizeof(ts[0]); b++) {
			size_t n = ns[a];
			int    T = ts[b];
			if ((size_t) T > n) {
				continue;
			}
			uint8_t *seen  = calloc(n, 1);
			size_t   total = 0, lo = n, hi = 0;
			for (int r = 0; r < T; r++) {
				struct tr_partition p;
				PT_OK(tr_partition_init(&p, n, r, T, 42));
				ck_assert_uint_eq(p.count,
				    tr_partition_size(n, r, T));
				lo = p.count < lo ? p.count : lo;
				hi = p.count > hi ? p.count : hi;
				for (size_t i = 0; i < p.count; i++) {
					ck_assert_uint_lt(p.base[i], n);
					ck_assert_msg(!seen[p.base[i]],
					    "index %u in two partitions",
					    p.base[i]);
					seen[p.base[i]] = 1;
				}
				total += p.count;
				tr_partition_fini(&p);
			}
			ck_assert_uint_eq(total, n);
			ck_assert_uint_le(hi - lo, 1);
			ck_assert_uint_eq(lo, n / (size_t) T);
			free(seen);
		}
	}
}
END_TEST

// Every rank derives its slice from the same global permutation: rank r's
// partition equals the slice of the one-rank permutation, and recomputing
// gives the same result (what two processes would compute).
START_TEST(test_partition_same_on_every_rank)
{
	struct tr_partition all, p, q;
	size_t              n = 1003;
	PT_OK(tr_partition_init(&all, n, 0, 1, 7));
	int is_identity = 1;
	for (size_t i = 0; i < n; i++) {
		is_identity &= all.base[i] == i;
	}
	ck_assert_msg(!is_identity, "the permutation is not shuffled");
	for (int r = 0; r < 4; r++) {
		PT_OK(tr_partition_init(&p, n, r, 4, 7));
		PT_OK(tr_partition_init(&q, n, r, 4, 7));
		ck_assert_uint_eq(p.begin, n * (size_t) r / 4);
		ck_assert_mem_eq(p.base, all.base + p.begin,
		    p.count * sizeof(uint32_t));
		ck_assert_mem_eq(p.base, q.base, p.count * sizeof(uint32_t));
		tr_partition_fini(&p);
		tr_partition_fini(&q);
	}
	// another seed gives another permutation
	PT_OK(tr_partition_init(&p, n, 0, 1, 8));
	ck_assert(memcmp(p.base, all.base, n * sizeof(uint32_t)) != 0);
	tr_partition_fini(&p);
	tr_partition_fini(&all);
}
END_TEST

// Minibatches depend only on (seed, rank, epoch, k): visiting epochs in
// any order gives the same indices; epochs differ; each epoch's order is
// a permutation of the partition.
START_TEST(test_partition_epoch_deterministic)
{
	struct tr_partition p, q;
	const uint32_t     *a, *b;
	size_t              n = 500, B = 10, steps;
	PT_OK(tr_partition_init(&p, n, 1, 2, 5));
	PT_OK(tr_partition_init(&q, n, 1, 2, 5));
	steps = tr_partition_steps(n, 2, B);
	ck_assert_uint_eq(steps, 25);
	uint32_t e2[250];
	for (size_t k = 0; k < steps; k++) {
		PT_OK(tr_partition_batch(&p, 2, k, B, &a));
		memcpy(e2 + k * B, a, B * sizeof(uint32_t));
	}
	PT_OK(tr_partition_batch(&p, 0, 0, B, &a)); // another epoch in between
	for (size_t k = steps; k-- > 0;) {
		PT_OK(tr_partition_batch(&q, 2, k, B, &b));
		ck_assert_mem_eq(b, e2 + k * B, B * sizeof(uint32_t));
	}
	PT_OK(tr_partition_batch(&p, 2, 3, B, &a));
	ck_assert_mem_eq(a, e2 + 3 * B, B * sizeof(uint32_t));
	// epoch 3 is another order of the same samples
	uint8_t seen[500] = { 0 };
	int     same      = 1;
	for (size_t k = 0; k < steps; k++) {
		PT_OK(tr_partition_batch(&q, 3, k, B, &b));
		same &= memcmp(b, e2 + k * B, B * sizeof(uint32_t)) == 0;
		for (size_t i = 0; i < B; i++) {
			ck_assert(!seen[b[i]]);
			seen[b[i]] = 1;
		}
	}
	ck_assert(!same);
	for (size_t i = 0; i < q.count; i++) {
		ck_assert(seen[q.base[i]]);
	}
	tr_partition_fini(&p);
	tr_partition_fini(&q);
}
END_TEST

// Step counts come from the smallest partition, so all ranks agree.
START_TEST(test_partition_steps)
{
	ck_assert_uint_eq(tr_partition_steps(60000, 2, 64), 468);
	ck_assert_uint_eq(tr_partition_steps(60000, 7, 64), 133);
	ck_assert_uint_eq(tr_partition_steps(1001, 3, 111), 3);
	ck_assert_uint_eq(tr_partition_steps(10, 3, 4), 0);
	ck_assert_uint_eq(tr_partition_steps(10, 0, 4), 0);
	ck_assert_uint_eq(tr_partition_size(10, 0, 3), 3);
	ck_assert_uint_eq(tr_partition_size(10, 2, 3), 4);
	ck_assert_uint_eq(tr_partition_size(10, 3, 3), 0);
	for (int r = 0; r < 7; r++) {
		ck_assert_uint_ge(tr_partition_size(60000, r, 7) / 64, 133);
	}
}
END_TEST

// Bad arguments are refused; a batch past the partition is FB_ERANGE.
START_TEST(test_partition_bogus)
{
	struct tr_partition p;
	const uint32_t     *a;
	PT_FAIL(tr_partition_init(&p, 0, 0, 1, 1), FB_EINVAL);
	PT_FAIL(tr_partition_init(&p, 10, 2, 2, 1), FB_EINVAL);
	PT_FAIL(tr_partition_init(&p, 10, -1, 2, 1), FB_EINVAL);
	PT_FAIL(tr_partition_init(&p, 10, 0, 0, 1), FB_EINVAL);
	PT_FAIL(tr_partition_init(&p, 3, 0, 4, 1), FB_EINVAL);
	PT_FAIL(tr_partition_init(NULL, 10, 0, 1, 1), FB_EINVAL);
	PT_OK(tr_partition_init(&p, 10, 0, 2, 1));
	PT_OK(tr_partition_batch(&p, 0, 1, 2, &a));
	PT_FAIL(tr_partition_batch(&p, 0, 2, 2, &a), FB_ERANGE);
	PT_FAIL(tr_partition_batch(&p, 0, 0, 6, &a), FB_ERANGE);
	PT_FAIL(tr_partition_batch(&p, 0, 0, 0, &a), FB_EINVAL);
	PT_FAIL(tr_partition_batch(&p, -1, 0, 1, &a), FB_EINVAL);
	tr_partition_fini(&p);
	tr_partition_fini(&p);
	PT_FAIL(tr_partition_batch(&p, 0, 0, 1, &a), FB_EINVAL);
}
END_TEST

// --epochs and --max-steps count job steps: the job runs epochs *
// steps_per_epoch steps, capped by a non-zero --max-steps.
START_TEST(test_job_steps)
{
	ck_assert_uint_eq(tr_job_steps(468, 3, 0), 1404);
	ck_assert_uint_eq(tr_job_steps(468, 3, 100), 100);
	ck_assert_uint_eq(tr_job_steps(468, 3, 1404), 1404);
	ck_assert_uint_eq(tr_job_steps(468, 3, 5000), 1404);
	ck_assert_uint_eq(tr_job_steps(468, 1, 1), 1);
	ck_assert_uint_eq(tr_job_steps(0, 3, 0), 0);
	ck_assert_uint_eq(tr_job_steps(468, 0, 10), 0);
	ck_assert_uint_eq(tr_job_steps(468, -1, 0), 0);
	ck_assert_uint_eq(tr_job_steps(SIZE_MAX, 3, 0), UINT64_MAX);
	ck_assert_uint_eq(tr_job_steps(SIZE_MAX, 3, 7), 7);
}
END_TEST

// Version v -> epoch v / spe, minibatch v mod spe; the epoch boundary
// starts the next epoch at minibatch 0; versions at or past the job's end
// have no position (the trainer has nothing left to do).
START_TEST(test_job_position)
{
	static const struct {
		uint64_t step, total;
		long     epoch;
		size_t   k;
	} cases[] = {
		{ 0, 30, 0, 0 }, { 9, 30, 0, 9 },
		{ 10, 30, 1, 0 },                   // an epoch boundary
		{ 27, 30, 2, 7 }, { 29, 30, 2, 9 }, // the last step
		{ 24, 25, 2, 4 }, // --max-steps ends the job inside an epoch
	};
	struct tr_position pos;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		PT_OK(
		    tr_job_position(cases[i].step, 10, cases[i].total, &pos));
		ck_assert_int_eq(pos.epoch, cases[i].epoch);
		ck_assert_uint_eq(pos.k, cases[i].k);
	}
	pos.epoch = 42;
	pos.k     = 43;
	PT_FAIL(tr_job_position(30, 10, 30, &pos), FB_ERANGE);
	PT_FAIL(tr_job_position(25, 10, 25, &pos), FB_ERANGE);
	PT_FAIL(tr_job_position(UINT64_MAX, 10, 30, &pos), FB_ERANGE);
	ck_assert_int_eq(pos.epoch, 42); // untouched
	ck_assert_uint_eq(pos.k, 43);
	PT_FAIL(tr_job_position(0, 10, 0, &pos), FB_ERANGE);
	PT_FAIL(tr_job_position(0, 0, 30, &pos), FB_EINVAL);
	PT_FAIL(tr_job_position(0, 10, 30, NULL), FB_EINVAL);
}
END_TEST

// A trainer that starts at job step s (a fresh partition, as after a
// restart) runs exactly the minibatches that one which never stopped runs
// from step s on: mid-epoch, at an epoch boundary and across one.
START_TEST(test_job_resume_same_batches)
{
	enum { N = 1000, T = 3, B = 16, EPOCHS = 3 };
	size_t    spe      = tr_partition_steps(N, T, B); // 20
	uint64_t  total    = tr_job_steps(spe, EPOCHS, 0);
	uint64_t  starts[] = { 1, 7, spe - 1, spe, spe + 1, 2 * spe,
		 total - 1 };
	uint32_t *seq      = malloc(total * B * sizeof(uint32_t));
	ck_assert_ptr_nonnull(seq);
	ck_assert_uint_eq(spe, 20);
	for (int rank = 0; rank < T; rank++) {
		struct tr_partition ref;
		const uint32_t     *a;
		uint64_t            n = 0;
		// The trainer that never stopped: epoch after epoch.
		PT_OK(tr_partition_init(&ref, N, rank, T, 99));
		for (long e = 0; e < EPOCHS; e++) {
			for (size_t k = 0; k < spe; k++, n++) {
				PT_OK(tr_partition_batch(&ref, e, k, B, &a));
				memcpy(seq + n * B, a, B * sizeof(uint32_t));
			}
		}
		tr_partition_fini(&ref);
		for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]);
		     i++) {
			struct tr_partition p;
			struct tr_position  pos;
			PT_OK(tr_partition_init(&p, N, rank, T, 99));
			for (uint64_t st = starts[i]; st < total; st++) {
				PT_OK(tr_job_position(st, spe, total, &pos));
				PT_OK(tr_partition_batch(&p, pos.epoch, pos.k,
				    B, &a));
				ck_assert_mem_eq(a, seq + st * B,
				    B * sizeof(uint32_t));
			}
			tr_partition_fini(&p);
		}
	}
	free(seq);
}
END_TEST

Suite *
suite_partition(void)
{
	Suite *s  = suite_create("partition");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_partition_disjoint_covering);
	tcase_add_test(tc, test_partition_same_on_every_rank);
	tcase_add_test(tc, test_partition_epoch_deterministic);
	tcase_add_test(tc, test_partition_steps);
	tcase_add_test(tc, test_partition_bogus);
	tcase_add_test(tc, test_job_steps);
	tcase_add_test(tc, test_job_position);
	tcase_add_test(tc, test_job_resume_same_batches);
	suite_add_tcase(s, tc);
	return s;
}
