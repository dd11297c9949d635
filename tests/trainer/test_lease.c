// test_lease.c — the lease cursor (lease.c): a lease's positions of
// libferry's epoch permutation cut into batches in order, never across two
// leases (the last one short), with the mark of each batch its end, and a
// batch redone until the cursor advances.
#include <stdlib.h>
#include <string.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

// lease makes a lease of count positions from start of epoch e.
static struct ferry_lease
lease(uint64_t id, uint32_t e, uint64_t start, uint64_t count)
{
	struct ferry_lease l = { 0 };
	l.id                 = id;
	l.epoch              = e;
	l.start              = start;
	l.count              = count;
	l.seed               = 7;
	return l;
}

// Batches walk the lease in order: 16, 16, 13 for 45 positions, each the
// permutation's own entries, each mark the batch's end; then none.
START_TEST(test_lease_batches_in_order)
{
	enum { N = 100 };
	struct tr_lease_cursor c;
	struct ferry_lease     l = lease(3, 1, 10, 45);
	uint32_t               want[N];
	const uint32_t        *idx;
	size_t                 nb, sizes[3] = { 16, 16, 13 };
	uint64_t               mark, pos    = 10;

	ferry_data_permutation(7, 1, N, want);
	PT_OK(tr_lease_cursor_init(&c, N));
	PT_OK(tr_lease_cursor_set(&c, &l));
	for (int b = 0; b < 3; b++) {
		PT_OK(tr_lease_cursor_batch(&c, 16, &idx, &nb, &mark));
		ck_assert_uint_eq(nb, sizes[b]);
		ck_assert_uint_eq(mark, pos + nb);
		ck_assert_mem_eq(idx, want + pos, nb * sizeof(uint32_t));
		tr_lease_cursor_advance(&c, nb);
		pos += nb;
	}
	ck_assert_uint_eq(pos, 55);
	ck_assert_int_eq(tr_lease_cursor_batch(&c, 16, &idx, &nb, &mark),
	    FB_ERANGE);
	tr_lease_cursor_fini(&c);
}
END_TEST

// A batch is not consumed until the cursor advances (a dropped push
// redoes the same positions), and a new lease starts at its own start,
// never finishing the old one's batch: batches never span two leases.
START_TEST(test_lease_redo_and_no_span)
{
	enum { N = 64 };
	struct tr_lease_cursor c;
	struct ferry_lease     a = lease(1, 0, 0, 10), b = lease(2, 0, 40, 24);
	const uint32_t        *i1, *i2;
	size_t                 n1, n2;
	uint64_t               m1, m2;

	PT_OK(tr_lease_cursor_init(&c, N));
	PT_OK(tr_lease_cursor_set(&c, &a));
	PT_OK(tr_lease_cursor_batch(&c, 8, &i1, &n1, &m1));
	PT_OK(tr_lease_cursor_batch(&c, 8, &i2, &n2, &m2));
	ck_assert_ptr_eq(i1, i2);
	ck_assert_uint_eq(m1, m2);
	tr_lease_cursor_advance(&c, n1);
	PT_OK(tr_lease_cursor_batch(&c, 8, &i1, &n1, &m1));
	ck_assert_uint_eq(n1, 2); // the lease's short last batch
	ck_assert_uint_eq(m1, 10);
	PT_OK(tr_lease_cursor_set(&c, &b)); // the next lease
	PT_OK(tr_lease_cursor_batch(&c, 8, &i1, &n1, &m1));
	ck_assert_uint_eq(n1, 8);
	ck_assert_uint_eq(m1, 48);
	ck_assert_uint_eq(c.id, 2);
	tr_lease_cursor_fini(&c);
}
END_TEST

// Leases that tile an epoch, walked in batches, visit every sample once,
// whatever the lease and batch sizes; a new epoch is a new order.
START_TEST(test_lease_epoch_exactly_once)
{
	enum { N = 1000 };
	struct tr_lease_cursor c;
	uint8_t                seen[N];
	uint32_t               e0[N];
	const uint32_t        *idx;
	size_t                 nb;
	uint64_t               mark, id = 1;

	PT_OK(tr_lease_cursor_init(&c, N));
	for (uint32_t e = 0; e < 2; e++) {
		memset(seen, 0, sizeof(seen));
		for (uint64_t s = 0; s < N; id++) {
			uint64_t           cnt = 1 + (id * 37) % 90;
			struct ferry_lease l   = lease(id, e, s,
                            cnt < N - s ? cnt : N - s);
			PT_OK(tr_lease_cursor_set(&c, &l));
			while (tr_lease_cursor_batch(&c, 32, &idx, &nb,
			           &mark) == FB_OK) {
				for (size_t k = 0; k < nb; k++) {
					ck_assert_uint_lt(idx[k], N);
					seen[idx[k]]++;
				}
				tr_lease_cursor_advance(&c, nb);
			}
			s += l.count;
		}
		for (size_t k = 0; k < N; k++) {
			ck_assert_uint_eq(seen[k], 1);
		}
		if (e == 0) {
			memcpy(e0, c.perm, sizeof(e0));
		} else {
			ck_assert(memcmp(e0, c.perm, sizeof(e0)) != 0);
		}
	}
	tr_lease_cursor_fini(&c);
}
END_TEST

// Bad leases and sizes are refused.
START_TEST(test_lease_bogus)
{
	struct tr_lease_cursor c;
	struct ferry_lease     none = lease(0, 0, 0, 1);
	struct ferry_lease     past = lease(1, 0, 90, 11);
	const uint32_t        *idx;
	size_t                 nb;
	uint64_t               mark;

	ck_assert_int_eq(tr_lease_cursor_init(&c, 0), FB_EINVAL);
	tr_lease_cursor_fini(&c);
	PT_OK(tr_lease_cursor_init(&c, 100));
	ck_assert_int_eq(tr_lease_cursor_batch(&c, 8, &idx, &nb, &mark),
	    FB_ERANGE); // no lease yet
	ck_assert_int_eq(tr_lease_cursor_set(&c, &none), FB_EINVAL);
	ck_assert_int_eq(tr_lease_cursor_set(&c, &past), FB_EINVAL);
	past.count = 10;
	PT_OK(tr_lease_cursor_set(&c, &past));
	ck_assert_int_eq(tr_lease_cursor_batch(&c, 0, &idx, &nb, &mark),
	    FB_EINVAL);
	tr_lease_cursor_fini(&c);
}
END_TEST

Suite *
suite_lease(void)
{
	Suite *s  = suite_create("lease");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_lease_batches_in_order);
	tcase_add_test(tc, test_lease_redo_and_no_span);
	tcase_add_test(tc, test_lease_epoch_exactly_once);
	tcase_add_test(tc, test_lease_bogus);
	suite_add_tcase(s, tc);
	return s;
}
