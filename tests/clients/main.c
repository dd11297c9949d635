// main.c — runs every Check suite of libferry. The ctest entry `clients`
// runs the unit suites (CK_EXCLUDE_TAGS=cluster); `clients_sink` runs the
// sink suite alone (CK_RUN_SUITE=sink), since it starts servers.
#include <stdlib.h>

#include <nng/nng.h>

#include "clients_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_client());
	srunner_add_suite(sr, suite_ops());
	srunner_add_suite(sr, suite_sched());
	srunner_add_suite(sr, suite_request());
	srunner_add_suite(sr, suite_reply());
	srunner_add_suite(sr, suite_sink());
	srunner_add_suite(sr, suite_codec_auto());
	srunner_add_suite(sr, suite_exchange());
	srunner_add_suite(sr, suite_exchange_cluster());
	srunner_add_suite(sr, suite_rows());
	srunner_add_suite(sr, suite_rows_cluster());
	srunner_add_suite(sr, suite_lease());
	srunner_add_suite(sr, suite_fragment());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	// nng closes sockets asynchronously: wait for that teardown, so that
	// LeakSanitizer (CK_FORK=no in CI) does not see a socket a server
	// closed just before exit as a leak.
	nng_fini();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
