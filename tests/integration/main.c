// Check runner for the multi-process integration tests. Every suite trains
// on Fashion-MNIST, so without the data set the executable exits 77, which
// ctest (SKIP_RETURN_CODE 77) reports as skipped rather than passed.
#include <stdio.h>
#include <stdlib.h>

#include "integration_tests.h"

int
main(void)
{
	if (!it_have_data()) {
		fprintf(stderr,
		    "SKIP: Fashion-MNIST not found in %s (apt-get "
		    "install dataset-fashion-mnist, or set FERRY_DATA_DIR)\n",
		    it_data_dir());
		return 77;
	}
	SRunner *sr = srunner_create(suite_train());
	srunner_add_suite(sr, suite_http());
	srunner_add_suite(sr, suite_faults());
	srunner_add_suite(sr, suite_overlap());
	srunner_add_suite(sr, suite_rollback());
	srunner_add_suite(sr, suite_local_steps());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
