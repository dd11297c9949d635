// main.c — runs every trainer suite; exit status is the failure count.
#include <stdlib.h>

#include "trainer_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_rng());
	int      failed;
	srunner_add_suite(sr, suite_data());
	srunner_add_suite(sr, suite_partition());
	srunner_add_suite(sr, suite_model());
	srunner_add_suite(sr, suite_backend());
	srunner_add_suite(sr, suite_backend_cpu());
	srunner_add_suite(sr, suite_config());
	srunner_add_suite(sr, suite_crc());
	srunner_add_suite(sr, suite_inner());
	srunner_add_suite(sr, suite_attack());
#ifdef TR_HAVE_LEASES
	srunner_add_suite(sr, suite_lease());
	srunner_add_suite(sr, suite_verify());
#endif
#ifdef TR_HAVE_CUDA
	srunner_add_suite(sr, suite_backend_cuda());
	srunner_add_suite(sr, suite_codec_cuda());
	srunner_add_suite(sr, suite_devpull());
#endif
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
