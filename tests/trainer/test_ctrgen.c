// test_ctrgen.c — placeholder of issue 26: its owner fills in the suite.
#include "ctr_tests.h"

Suite *
suite_ctrgen(void)
{
	return suite_create("ctrgen");
}
