// main.c — runs every Check suite of the comp library.
#include <stdlib.h>

#include "compression_tests.h"

int
main(void)
{
	SRunner *sr = srunner_create(suite_codec());
	srunner_add_suite(sr, suite_quant());
	srunner_add_suite(sr, suite_quant_avx512());
	srunner_add_suite(sr, suite_float16());
	srunner_add_suite(sr, suite_topk());
	srunner_add_suite(sr, suite_feedback());
	srunner_add_suite(sr, suite_sparse());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
