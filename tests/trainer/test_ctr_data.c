// test_ctr_data.c — placeholder of issue 26: its owner fills in the suite.
#include "ctr_tests.h"

Suite *
suite_ctr_data(void)
{
	return suite_create("ctr_data");
}
