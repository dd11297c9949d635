// test_leases.c — data leases on the scheduler (exactly-once across deaths and
// restarts) (issue 27). Filled in by the work on it.
#include <check.h>

#include "ps_tests.h"

Suite *
suite_leases(void)
{
	Suite *s = suite_create("leases");
	return s;
}
