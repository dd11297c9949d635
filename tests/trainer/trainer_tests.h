// trainer_tests.h — one Check suite per source file of trainer/src.
#ifndef TRAINER_TESTS_H
#define TRAINER_TESTS_H

#include <check.h>

Suite *suite_rng(void);
Suite *suite_data(void);
Suite *suite_partition(void);
Suite *suite_model(void);
Suite *suite_backend(void);
Suite *suite_backend_cpu(void);
Suite *suite_config(void);
Suite *suite_crc(void);
Suite *suite_inner(void);
Suite *suite_attack(void);
Suite *suite_lease(void);        // with libferry (lease.c)
Suite *suite_verify(void);       // idem (verify_group.c)
Suite *suite_backend_cuda(void); // built with the CUDA backend only
Suite *suite_codec_cuda(void);   // idem
Suite *suite_devpull(void);      // idem

#endif // TRAINER_TESTS_H
