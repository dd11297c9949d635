#ifndef OBS_TESTS_H
#define OBS_TESTS_H
#include <check.h>
Suite *suite_registry(void);
Suite *suite_http(void);
#endif
