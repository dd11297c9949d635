// test_optim.c — tbl_conf_check, tbl_state_floats, tbl_row_bytes,
// tbl_row_init and the four row optimizers against hand-computed
// references (the same formulas in the same order, so the floats match
// bit for bit).
#include <math.h>
#include <string.h>

#include "tables_tests.h"

#define DIM 4
#define AD 19 // adagrad: two rounds of its 8 lanes and a tail

// powi: b^n by squaring, the order optim.c uses.
static float
powi(float b, uint32_t n)
{
	float r = 1.0f;
	for (; n != 0; n >>= 1, b *= b)
		if (n & 1)
			r *= b;
	return r;
}

// step applies one update of key with gradient g (scale, lr, version v)
// and reads its row back into w.
static void
step(struct tbl *t, uint64_t key, const float *g, float scale, float lr,
    uint64_t v, float *w)
{
	ck_assert_int_eq(tbl_apply(t, &key, 1, g, NULL, scale, lr, v), 0);
	tbl_lookup(t, &key, 1, w);
}

// Two tables with the same seed and table make the same rows bit for bit;
// another key, table or seed makes others. Failure: a restarted server or a
// backup would create different rows.
START_TEST(test_row_init_deterministic)
{
	for (int init = TBL_INIT_UNIFORM; init <= TBL_INIT_NORMAL; init++) {
		struct tbl_conf c = tt_conf(33, TBL_OPT_SGD);
		c.init            = (enum tbl_init) init;
		struct tbl *a = tt_open(&c), *b = tt_open(&c);
		float       x[33], y[33], z[33];
		uint64_t    k = 123456789;
		tbl_lookup(a, &k, 1, x);
		tbl_lookup(b, &k, 1, y);
		ck_assert(memcmp(x, y, sizeof(x)) == 0);
		tbl_row_init(&c, k, z);
		ck_assert(memcmp(x, z, sizeof(x)) == 0);
		uint64_t k2 = k + 1;
		tbl_lookup(a, &k2, 1, y);
		ck_assert(memcmp(x, y, sizeof(x)) != 0);
		c.table = 2;
		tbl_row_init(&c, k, z);
		ck_assert(memcmp(x, z, sizeof(x)) != 0);
		float lim = init == TBL_INIT_UNIFORM ? 0.1f : 1.0f;
		for (int j = 0; j < 33; j++)
			ck_assert(isfinite(x[j]) && fabsf(x[j]) <= lim);
		tbl_close(a);
		tbl_close(b);
	}
	struct tbl_conf c = tt_conf(5, TBL_OPT_SGD);
	c.init            = TBL_INIT_ZEROS;
	float z[5]        = { 1, 1, 1, 1, 1 };
	tbl_row_init(&c, 9, z);
	for (int j = 0; j < 5; j++)
		ck_assert(z[j] == 0.0f);
}
END_TEST

// Bad configurations are named. Failure: a table with a zero eps or an
// unknown optimizer would be opened and divide by zero.
START_TEST(test_conf_check_bogus)
{
	struct tbl_conf c = tt_conf(16, TBL_OPT_ADAGRAD);
	ck_assert_ptr_null(tbl_conf_check(&c));
	c.dim = 0;
	ck_assert_str_eq(tbl_conf_check(&c), "dim must be 1..4096");
	ck_assert_ptr_null(tbl_open(&c));
	c     = tt_conf(16, TBL_OPT_ADAGRAD);
	c.dim = 4097;
	ck_assert_ptr_nonnull(tbl_conf_check(&c));
	c     = tt_conf(16, TBL_OPT_ADAGRAD);
	c.eps = 0;
	ck_assert_str_eq(tbl_conf_check(&c), "eps must be > 0");
	c       = tt_conf(16, TBL_OPT_ADAM);
	c.beta1 = 1;
	ck_assert_ptr_nonnull(tbl_conf_check(&c));
	c = tt_conf(16, (enum tbl_optim) 9);
	ck_assert_str_eq(tbl_conf_check(&c), "unknown optim");
	c            = tt_conf(16, TBL_OPT_SGD);
	c.admit_prob = 1.5f;
	ck_assert_ptr_nonnull(tbl_conf_check(&c));
	c         = tt_conf(16, TBL_OPT_FTRL);
	c.ftrl_l1 = -1;
	ck_assert_ptr_nonnull(tbl_conf_check(&c));
	c            = tt_conf(16, TBL_OPT_SGD);
	c.init_scale = NAN;
	ck_assert_ptr_nonnull(tbl_conf_check(&c));
	ck_assert_ptr_nonnull(tbl_conf_check(NULL));
}
END_TEST

// The state sizes of the header. Failure: rows would overlap their state.
START_TEST(test_state_floats)
{
	ck_assert_uint_eq(tbl_state_floats(TBL_OPT_SGD, 16), 0);
	ck_assert_uint_eq(tbl_state_floats(TBL_OPT_ADAGRAD, 16), 1);
	ck_assert_uint_eq(tbl_state_floats(TBL_OPT_ADAM, 16), 33);
	ck_assert_uint_eq(tbl_state_floats(TBL_OPT_FTRL, 16), 32);
	struct tbl_conf c = tt_conf(16, TBL_OPT_ADAGRAD);
	ck_assert_uint_eq(tbl_row_bytes(&c), 68);
}
END_TEST

// SGD: w -= lr (g scale). Failure: the update rule changed.
START_TEST(test_sgd_reference)
{
	struct tbl_conf c = tt_conf(DIM, TBL_OPT_SGD);
	struct tbl     *t = tt_open(&c);
	uint64_t        k = 42;
	float           ref[DIM], w[DIM], g[DIM];
	tbl_row_init(&c, k, ref);
	for (int s = 0; s < 3; s++) {
		tt_grads(g, DIM, (uint32_t) s);
		for (int j = 0; j < DIM; j++)
			ref[j] -= 0.5f * (g[j] * 0.25f);
		step(t, k, g, 0.25f, 0.5f, (uint64_t) s + 1, w);
		ck_assert(memcmp(w, ref, sizeof(w)) == 0);
	}
	tbl_close(t);
}
END_TEST

// Row-wise Adagrad: a += mean(g^2); w -= lr g / (sqrt(a) + eps).
// Failure: the accumulator or the step differs from the rule.
START_TEST(test_adagrad_reference)
{
	struct tbl_conf c   = tt_conf(AD, TBL_OPT_ADAGRAD);
	c.adagrad_init      = 0.1f;
	struct tbl *t       = tt_open(&c);
	uint64_t    keys[2] = { 5, 1u << 20 };
	for (int kk = 0; kk < 2; kk++) {
		float ref[AD], w[AD], g[AD], a = 0.1f;
		tbl_row_init(&c, keys[kk], ref);
		for (int s = 0; s < 3; s++) {
			tt_grads(g, AD, (uint32_t) (s + 10 * kk));
			// The squares in lanes j % 8, summed pairwise.
			float l[8] = { 0 };
			for (int j = 0; j < AD; j++) {
				float gj = g[j] * 0.5f;
				l[j & 7] += gj * gj;
			}
			float sum = ((l[0] + l[1]) + (l[2] + l[3])) +
			    ((l[4] + l[5]) + (l[6] + l[7]));
			a       = a + sum / (float) AD;
			float q = 0.01f / (sqrtf(a) + 1e-8f);
			for (int j = 0; j < AD; j++)
				ref[j] -= q * (g[j] * 0.5f);
			step(t, keys[kk], g, 0.5f, 0.01f, 1, w);
			ck_assert(memcmp(w, ref, sizeof(w)) == 0);
		}
	}
	tbl_close(t);
}
END_TEST

// Lazy Adam with the row's own step count in its bias correction: a row
// first updated late starts its correction at step 1. Failure: the step
// count is shared or missing.
START_TEST(test_adam_reference)
{
	struct tbl_conf c       = tt_conf(DIM, TBL_OPT_ADAM);
	struct tbl     *t       = tt_open(&c);
	uint64_t        keys[2] = { 77, 78 };
	for (int kk = 0; kk < 2; kk++) {
		float ref[DIM], w[DIM], g[DIM], m[DIM] = { 0 }, v[DIM] = { 0 };
		tbl_row_init(&c, keys[kk], ref);
		for (int s = 0; s < 3 + kk; s++) {
			tt_grads(g, DIM, (uint32_t) (s + 7 * kk));
			float n  = (float) (s + 1);
			float c1 = 1.0f - powi(0.9f, (uint32_t) n);
			float c2 = 1.0f - powi(0.999f, (uint32_t) n);
			for (int j = 0; j < DIM; j++) {
				float gj = g[j] * 1.0f;
				m[j]     = 0.9f * m[j] + (1.0f - 0.9f) * gj;
				v[j]     = 0.999f * v[j] +
				    (1.0f - 0.999f) * (gj * gj);
				ref[j] -= 0.001f * (m[j] / c1) /
				    (sqrtf(v[j] / c2) + 1e-8f);
			}
			step(t, keys[kk], g, 1.0f, 0.001f, 5, w);
			ck_assert(memcmp(w, ref, sizeof(w)) == 0);
		}
	}
	tbl_close(t);
}
END_TEST

// FTRL-Proximal per coordinate (z, n), l1 zeroing small weights.
// Failure: the closed form for w differs from McMahan et al.
START_TEST(test_ftrl_reference)
{
	struct tbl_conf c = tt_conf(DIM, TBL_OPT_FTRL);
	c.ftrl_l1         = 0.05f;
	c.ftrl_l2         = 0.5f;
	struct tbl *t     = tt_open(&c);
	uint64_t    k     = 999;
	float       ref[DIM], w[DIM], g[DIM], z[DIM] = { 0 }, n[DIM] = { 0 };
	float       alpha = 0.1f;
	tbl_row_init(&c, k, ref);
	for (int s = 0; s < 4; s++) {
		tt_grads(g, DIM, (uint32_t) (s + 3));
		for (int j = 0; j < DIM; j++) {
			float gj    = g[j] * 0.5f;
			float nn    = n[j] + gj * gj;
			float sigma = (sqrtf(nn) - sqrtf(n[j])) / alpha;
			z[j]        = z[j] + (gj - sigma * ref[j]);
			n[j]        = nn;
			if (fabsf(z[j]) <= 0.05f) {
				ref[j] = 0.0f;
			} else {
				ref[j] = -(z[j] - copysignf(0.05f, z[j])) /
				    ((1.0f + sqrtf(nn)) / alpha + 0.5f);
			}
		}
		step(t, k, g, 0.5f, alpha, 1, w);
		ck_assert(memcmp(w, ref, sizeof(w)) == 0);
	}
	tbl_close(t);
}
END_TEST

Suite *
suite_optim(void)
{
	Suite *s  = suite_create("optim");
	TCase *tc = tcase_create("optim");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_row_init_deterministic);
	tcase_add_test(tc, test_conf_check_bogus);
	tcase_add_test(tc, test_state_floats);
	tcase_add_test(tc, test_sgd_reference);
	tcase_add_test(tc, test_adagrad_reference);
	tcase_add_test(tc, test_adam_reference);
	tcase_add_test(tc, test_ftrl_reference);
	suite_add_tcase(s, tc);
	return s;
}
