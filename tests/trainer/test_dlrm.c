// test_dlrm.c — placeholder of issue 26: its owner fills in the suite.
#include "ctr_tests.h"

Suite *
suite_dlrm(void)
{
	return suite_create("dlrm");
}
