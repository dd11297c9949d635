// ctr_tests.h — the Check suites of the CTR workload (tr/ctr.h): data and
// quality figures, the generator, the DLRM model.
#ifndef CTR_TESTS_H
#define CTR_TESTS_H

#include <check.h>

Suite *suite_ctr_data(void); // test_ctr_data.c: parsing, loading, AUC
Suite *suite_ctrgen(void);   // test_ctrgen.c: the generator
Suite *suite_dlrm(void);     // test_dlrm.c: the model's gradients

#endif // CTR_TESTS_H
