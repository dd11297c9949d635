// test_backend.c — device strings and backend selection.
#include <string.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

// cpu, cuda and cuda:N parse; anything else is refused.
START_TEST(test_device_parse)
{
	int c, o;
	PT_OK(tr_device_parse("cpu", &c, &o));
	ck_assert_int_eq(c, 0);
	PT_OK(tr_device_parse("cuda", &c, &o));
	ck_assert_int_eq(c, 1);
	ck_assert_int_eq(o, -1);
	PT_OK(tr_device_parse("cuda:3", &c, &o));
	ck_assert_int_eq(c, 1);
	ck_assert_int_eq(o, 3);
}
END_TEST

START_TEST(test_device_parse_bogus)
{
	static const char *bad[] = { "", "gpu", "CPU", "cuda:", "cuda:-1",
		"cuda:x", "cuda:1x", "cuda1" };
	int                c, o;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(tr_device_parse(bad[i], &c, &o) == FB_EINVAL,
		    "'%s' accepted", bad[i]);
	}
	PT_FAIL(tr_device_parse(NULL, &c, &o), FB_EINVAL);
}
END_TEST

// "cpu" opens the CPU backend; a CUDA request fails at once with a clear
// message when this build has no CUDA backend.
START_TEST(test_backend_alloc)
{
	struct tr_arch         a;
	struct tr_backend_opts o        = TR_BACKEND_OPTS_INIT;
	struct tr_backend     *b        = NULL;
	char                   err[256] = "";
	PT_OK(tr_arch_parse("4,3,2", &a, NULL, 0));
	PT_OK(tr_backend_alloc("cpu", &a, &o, &b, err, sizeof(err)));
	ck_assert_str_eq(b->ops->name, "cpu");
	// pin: nothing to gain on the CPU (FB_OK); no tensors is refused
	struct tr_params p, none;
	memset(&none, 0, sizeof(none));
	PT_OK(tr_params_init(&p, &a));
	PT_OK(tr_backend_pin(b, &p));
	PT_FAIL(tr_backend_pin(b, NULL), FB_EINVAL);
	PT_FAIL(tr_backend_pin(b, &none), FB_EINVAL);
	PT_FAIL(tr_backend_pin(NULL, &p), FB_EINVAL);
	tr_backend_free(b);
	tr_params_fini(&p);
	tr_backend_free(NULL);
	if (!tr_backend_has_cuda()) {
		b = NULL;
		PT_FAIL(
		    tr_backend_alloc("cuda:0", &a, &o, &b, err, sizeof(err)),
		    FB_EUNSUPP);
		ck_assert_ptr_nonnull(strstr(err, "CUDA"));
		ck_assert_ptr_null(b);
	}
	PT_FAIL(tr_backend_alloc("tpu", &a, &o, &b, err, sizeof(err)),
	    FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--device"));
	o.max_batch = 0;
	PT_FAIL(tr_backend_alloc("cpu", &a, &o, &b, err, sizeof(err)),
	    FB_EINVAL);
}
END_TEST

// The CPU backend offers no on-device data path: NULL tells the training
// loop to push and pull host buffers.
START_TEST(test_backend_cpu_host_path)
{
	struct tr_arch         a;
	struct tr_backend_opts o = TR_BACKEND_OPTS_INIT;
	struct tr_backend     *b = NULL;
	PT_OK(tr_arch_parse("4,3,2", &a, NULL, 0));
	PT_OK(tr_backend_alloc("cpu", &a, &o, &b, NULL, 0));
	ck_assert_ptr_null(b->ops->ondevice);
	tr_backend_free(b);
}
END_TEST

Suite *
suite_backend(void)
{
	Suite *s  = suite_create("backend");
	TCase *tc = tcase_create("select");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_device_parse);
	tcase_add_test(tc, test_device_parse_bogus);
	tcase_add_test(tc, test_backend_alloc);
	tcase_add_test(tc, test_backend_cpu_host_path);
	suite_add_tcase(s, tc);
	return s;
}
