#ifndef PROTO_TESTS_H
#define PROTO_TESTS_H
#include <check.h>
Suite *suite_frame(void);
Suite *suite_auth(void);
Suite *suite_replay(void);
#endif
