// sharding_tests.h — one Check suite per source file of sharding/src.
#ifndef SHARDING_TESTS_H
#define SHARDING_TESTS_H

#include <check.h>

Suite *suite_split(void);

#endif // SHARDING_TESTS_H
