// test_model.c — layer specs, tensor table, init and the SGD update.
#include <math.h>
#include <string.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

// "784,256,128,10" gives 3 layers, 6 tensors named fc1.weight..fc3.bias
// with PyTorch's [out x in] weight sizes.
START_TEST(test_arch_parse)
{
	struct tr_arch a;
	char           name[32];
	PT_OK(tr_arch_parse("784,256,128,10", &a, NULL, 0));
	ck_assert_int_eq(a.n_layers, 3);
	ck_assert_uint_eq(tr_arch_n_tensors(&a), 6);
	ck_assert_uint_eq(tr_arch_tensor_len(&a, 0), 256 * 784);
	ck_assert_uint_eq(tr_arch_tensor_len(&a, 1), 256);
	ck_assert_uint_eq(tr_arch_tensor_len(&a, 4), 10 * 128);
	ck_assert_uint_eq(tr_arch_tensor_len(&a, 5), 10);
	ck_assert_uint_eq(tr_arch_tensor_len(&a, 6), 0);
	ck_assert_uint_eq(tr_arch_n_params(&a),
	    784 * 256 + 256 + 256 * 128 + 128 + 1280 + 10);
	tr_arch_tensor_name(&a, 0, name, sizeof(name));
	ck_assert_str_eq(name, "fc1.weight");
	tr_arch_tensor_name(&a, 5, name, sizeof(name));
	ck_assert_str_eq(name, "fc3.bias");
	PT_OK(tr_arch_parse("4,2", &a, NULL, 0));
	ck_assert_int_eq(a.n_layers, 1);
}
END_TEST

// Malformed specs are refused with a message naming --layers.
START_TEST(test_arch_parse_bogus)
{
	static const char *bad[] = {
		"",
		"784",
		"784,",
		",10",
		"784,,10",
		"784,x,10",
		"784,0,10",
		"784,-5,10",
		"784,256,1",
		"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18",
		"784,99999999,10",
	};
	struct tr_arch a;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[256] = "";
		ck_assert_msg(tr_arch_parse(bad[i], &a, err, sizeof(err)) ==
		        FB_EINVAL,
		    "'%s' accepted", bad[i]);
		ck_assert_ptr_nonnull(strstr(err, "--layers"));
	}
	PT_FAIL(tr_arch_parse(NULL, &a, NULL, 0), FB_EINVAL);
}
END_TEST

// Parameters are aligned, zeroed, and the same seed gives the same
// Kaiming-uniform weights within bounds and zero biases.
START_TEST(test_params_init_randomize)
{
	struct tr_arch   a;
	struct tr_params p, q;
	PT_OK(tr_arch_parse("30,20,5", &a, NULL, 0));
	PT_OK(tr_params_init(&p, &a));
	PT_OK(tr_params_init(&q, &a));
	ck_assert_uint_eq(p.n_tensors, 4);
	ck_assert_uint_eq(p.total, 30 * 20 + 20 + 20 * 5 + 5);
	for (size_t i = 0; i < p.n_tensors; i++) {
		ck_assert_uint_eq((uintptr_t) p.t[i] % 64, 0);
		for (size_t j = 0; j < p.len[i]; j++) {
			ck_assert(p.t[i][j] == 0.0f);
		}
	}
	tr_params_randomize(&p, 11);
	tr_params_randomize(&q, 11);
	for (size_t i = 0; i < p.n_tensors; i++) {
		ck_assert_mem_eq(p.t[i], q.t[i], p.len[i] * sizeof(float));
	}
	float  b1 = sqrtf(6.0f / 30.0f), b2 = sqrtf(6.0f / 20.0f);
	double m2 = 0;
	for (size_t j = 0; j < p.len[0]; j++) {
		ck_assert(fabsf(p.t[0][j]) <= b1);
		m2 += (double) p.t[0][j] * p.t[0][j];
	}
	// variance of U(-b, b) is b^2/3 = 2/fan_in
	ck_assert(fabs(m2 / (double) p.len[0] - 2.0 / 30.0) < 0.02);
	for (size_t j = 0; j < p.len[2]; j++) {
		ck_assert(fabsf(p.t[2][j]) <= b2);
	}
	for (size_t j = 0; j < p.len[1]; j++) {
		ck_assert(p.t[1][j] == 0.0f);
	}
	tr_params_randomize(&q, 12);
	ck_assert(memcmp(p.t[0], q.t[0], p.len[0] * sizeof(float)) != 0);
	tr_params_copy(&q, &p);
	ck_assert_mem_eq(p.t[0], q.t[0], p.len[0] * sizeof(float));
	tr_params_fini(&p);
	tr_params_fini(&q);
	tr_params_fini(&q);
}
END_TEST

// SGD applies w -= lr * g / n to every element of every tensor.
START_TEST(test_params_sgd)
{
	struct tr_arch   a;
	struct tr_params w, g;
	PT_OK(tr_arch_parse("3,2", &a, NULL, 0));
	PT_OK(tr_params_init(&w, &a));
	PT_OK(tr_params_init(&g, &a));
	for (size_t i = 0; i < w.n_tensors; i++) {
		for (size_t j = 0; j < w.len[i]; j++) {
			w.t[i][j] = 1.0f + (float) j;
			g.t[i][j] = 4.0f * (float) (j + 1);
		}
	}
	tr_params_sgd(&w, &g, 0.5, 4);
	for (size_t i = 0; i < w.n_tensors; i++) {
		for (size_t j = 0; j < w.len[i]; j++) {
			ck_assert_float_eq_tol(w.t[i][j],
			    1.0f + (float) j - 0.5f * (float) (j + 1), 1e-6);
		}
	}
	tr_params_fini(&w);
	tr_params_fini(&g);
}
END_TEST

// Bogus shapes are refused.
START_TEST(test_params_init_bogus)
{
	struct tr_arch   a = { 0 };
	struct tr_params p;
	PT_FAIL(tr_params_init(&p, &a), FB_EINVAL);
	PT_FAIL(tr_params_init(&p, NULL), FB_EINVAL);
	PT_FAIL(tr_params_init(NULL, &a), FB_EINVAL);
	tr_params_fini(&p);
}
END_TEST

Suite *
suite_model(void)
{
	Suite *s  = suite_create("model");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_arch_parse);
	tcase_add_test(tc, test_arch_parse_bogus);
	tcase_add_test(tc, test_params_init_randomize);
	tcase_add_test(tc, test_params_sgd);
	tcase_add_test(tc, test_params_init_bogus);
	suite_add_tcase(s, tc);
	return s;
}
