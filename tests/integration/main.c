// Check runner for the multi-process integration tests.
#include <stdlib.h>

#include "integration_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_train());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
