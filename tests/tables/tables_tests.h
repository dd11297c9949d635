// tables_tests.h — one Check suite per source file of tables/src, and the
// helpers they share.
#ifndef TABLES_TESTS_H
#define TABLES_TESTS_H

#include <check.h>

#include <tbl/tbl.h>

Suite *suite_store(void); // store.c
Suite *suite_optim(void); // optim.c
Suite *suite_apply(void); // apply.c
Suite *suite_evict(void); // evict.c
Suite *suite_save(void);  // save.c

// tt_conf: a usable configuration (dim, optim; uniform init 0.1, seed 7,
// table 1, the optimizers' usual constants, no admission, no eviction).
struct tbl_conf tt_conf(uint32_t dim, enum tbl_optim optim);

// tt_open: tbl_open(conf) asserted to succeed.
struct tbl *tt_open(const struct tbl_conf *conf);

// tt_grads fills g[0..n) with small deterministic values from seed.
void tt_grads(float *g, size_t n, uint32_t seed);

#endif // TABLES_TESTS_H
