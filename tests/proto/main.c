// Check runner for the proto module.
#include <stdlib.h>

#include "proto_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_frame());
	srunner_add_suite(sr, suite_auth());
	srunner_add_suite(sr, suite_replay());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
