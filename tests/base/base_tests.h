#ifndef BASE_TESTS_H
#define BASE_TESTS_H
#include <check.h>
Suite *suite_crc(void);
Suite *suite_config(void);
Suite *suite_ranges(void);
Suite *suite_optim(void);
Suite *suite_exit(void);
Suite *suite_bytes(void);
Suite *suite_init(void);
Suite *suite_malloc(void);
#endif
