// test_evict.c — evict.c (tests follow with the implementation).
#include "tables_tests.h"

START_TEST(test_evict_placeholder)
{
	struct tbl_conf c = tt_conf(4, TBL_OPT_SGD);
	tbl_close(tt_open(&c));
}
END_TEST

Suite *
suite_evict(void)
{
	Suite *s  = suite_create("evict");
	TCase *tc = tcase_create("evict");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_evict_placeholder);
	suite_add_tcase(s, tc);
	return s;
}
