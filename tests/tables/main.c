// main.c — runs every Check suite of the tbl library.
#include <stdlib.h>

#include "tables_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_store());
	srunner_add_suite(sr, suite_optim());
	srunner_add_suite(sr, suite_apply());
	srunner_add_suite(sr, suite_evict());
	srunner_add_suite(sr, suite_save());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
