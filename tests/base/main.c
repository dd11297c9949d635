// Check runner for fb (errors, clock, crc, parsing helpers, id ranges,
// the exit watchdog, the allocator's settings).
#include <stdlib.h>

#include "base_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_crc());
	srunner_add_suite(sr, suite_config());
	srunner_add_suite(sr, suite_ranges());
	srunner_add_suite(sr, suite_optim());
	srunner_add_suite(sr, suite_exit());
	srunner_add_suite(sr, suite_bytes());
	srunner_add_suite(sr, suite_init());
	srunner_add_suite(sr, suite_malloc());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
