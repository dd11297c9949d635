// main.c — runs every Check suite of the shard library.
#include <stdlib.h>

#include "sharding_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_split());
	srunner_add_suite(sr, suite_cost());
	srunner_add_suite(sr, suite_solve());
	srunner_add_suite(sr, suite_brute());
	srunner_add_suite(sr, suite_format());
	srunner_add_suite(sr, suite_policy());
	srunner_add_suite(sr, suite_replicas());
	srunner_add_suite(sr, suite_rollback());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
