// test_elastic.c — scheduler membership of elastic jobs (--trainers MIN:MAX,
// ranks given, MAX, flapping) (issue 27). Filled in by the work on it.
#include <check.h>

#include "ps_tests.h"

Suite *
suite_elastic(void)
{
	Suite *s = suite_create("elastic");
	return s;
}
