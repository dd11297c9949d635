#ifndef PS_TESTS_H
#define PS_TESTS_H
#include <check.h>
Suite *suite_cluster(void);
Suite *suite_stall(void);
Suite *suite_live(void);
Suite *suite_snapshot(void);
Suite *suite_ssp(void);
Suite *suite_auth(void);
Suite *suite_optim(void);
Suite *suite_replicas(void);
#endif
