#ifndef PS_TESTS_H
#define PS_TESTS_H
#include <check.h>
Suite *suite_cluster(void);
Suite *suite_stall(void);
Suite *suite_live(void);
Suite *suite_snapshot(void);
Suite *suite_limits(void);
#endif
