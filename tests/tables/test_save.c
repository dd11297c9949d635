// test_save.c — save.c (tests follow with the implementation).
#include "tables_tests.h"

START_TEST(test_save_placeholder)
{
	struct tbl_conf c = tt_conf(4, TBL_OPT_SGD);
	tbl_close(tt_open(&c));
}
END_TEST

Suite *
suite_save(void)
{
	Suite *s  = suite_create("save");
	TCase *tc = tcase_create("save");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_save_placeholder);
	suite_add_tcase(s, tc);
	return s;
}
