// test_join.c — a rank joining sync rounds at a round boundary (join_version),
// SSP clocks on join (issue 27). Filled in by the work on it.
#include <check.h>

#include "ps_tests.h"

Suite *
suite_join(void)
{
	Suite *s = suite_create("join");
	return s;
}
