// Check runner for obs/: one suite per source file under test.
#include <stdlib.h>

#include "obs_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_registry());
	srunner_add_suite(sr, suite_http());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
