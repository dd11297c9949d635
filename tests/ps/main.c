// Check runner for the ps module (scheduler + servers in-process).
#include <stdlib.h>

#include <nng/nng.h>

#include "ps_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_training());
	srunner_add_suite(sr, suite_rejoin());
	srunner_add_suite(sr, suite_lose());
	srunner_add_suite(sr, suite_bad_input());
	srunner_add_suite(sr, suite_codecs());
	srunner_add_suite(sr, suite_placement());
	srunner_add_suite(sr, suite_moves());
	srunner_add_suite(sr, suite_stall());
	srunner_add_suite(sr, suite_live());
	srunner_add_suite(sr, suite_snapshot());
	srunner_add_suite(sr, suite_ssp());
	srunner_add_suite(sr, suite_auth());
	srunner_add_suite(sr, suite_replay());
	srunner_add_suite(sr, suite_member_cap());
	srunner_add_suite(sr, suite_optim());
	srunner_add_suite(sr, suite_replicas());
	srunner_add_suite(sr, suite_scheduler_state());
	srunner_add_suite(sr, suite_limits());
	srunner_add_suite(sr, suite_tls());
	srunner_add_suite(sr, suite_cascade());
	srunner_add_suite(sr, suite_reseed());
	srunner_add_suite(sr, suite_average());
	srunner_add_suite(sr, suite_rows());
	srunner_add_suite(sr, suite_rows_move());
	srunner_add_suite(sr, suite_rows_snapshot());
	srunner_add_suite(sr, suite_rows_repl());
	srunner_add_suite(sr, suite_elastic());
	srunner_add_suite(sr, suite_leases());
	srunner_add_suite(sr, suite_join());
	srunner_add_suite(sr, suite_local());
	srunner_add_suite(sr, suite_seedinit());
	srunner_add_suite(sr, suite_sched_scale());
	srunner_add_suite(sr, suite_scale());
	srunner_add_suite(sr, suite_pool());
	srunner_add_suite(sr, suite_audit());
	srunner_add_suite(sr, suite_rpclimits());
	srunner_add_suite(sr, suite_cpus());
	srunner_add_suite(sr, suite_robust());
	srunner_add_suite(sr, suite_quarantine());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	// nng closes sockets asynchronously: wait for that teardown, so that
	// LeakSanitizer (CK_FORK=no in CI) does not see a socket a server
	// closed just before exit as a leak.
	nng_fini();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
