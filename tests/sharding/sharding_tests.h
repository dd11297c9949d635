// sharding_tests.h — one Check suite per source file of sharding/src.
#ifndef SHARDING_TESTS_H
#define SHARDING_TESTS_H

#include <check.h>

Suite *suite_split(void);    // split.c
Suite *suite_cost(void);     // cost.c
Suite *suite_solve(void);    // solve.c
Suite *suite_brute(void);    // brute.c
Suite *suite_format(void);   // format.c
Suite *suite_policy(void);   // policy.c
Suite *suite_replicas(void); // replicas.c
Suite *suite_rollback(void); // rollback.c

#endif // SHARDING_TESTS_H
