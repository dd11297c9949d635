// ctr_main.c — runs the CTR suites (ctr_tests.h); exit status is the
// failure count.
#include <stdlib.h>

#include "ctr_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_ctr_data());
	int      failed;
	srunner_add_suite(sr, suite_ctrgen());
	srunner_add_suite(sr, suite_dlrm());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
