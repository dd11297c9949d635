#ifndef PS_TESTS_H
#define PS_TESTS_H
#include <check.h>
// The cluster suites: test cases tagged "cluster" (ctest's ps entry).
Suite *suite_training(void);
Suite *suite_rejoin(void);
Suite *suite_elastic(void);
Suite *suite_leases(void);
Suite *suite_join(void);
Suite *suite_lose(void);
Suite *suite_bad_input(void);
Suite *suite_codecs(void);
Suite *suite_placement(void);
Suite *suite_moves(void);
Suite *suite_stall(void);
Suite *suite_live(void);
Suite *suite_snapshot(void);
Suite *suite_ssp(void);
Suite *suite_auth(void);
Suite *suite_replay(void);
Suite *suite_member_cap(void);
Suite *suite_optim(void);
Suite *suite_local(void);
Suite *suite_replicas(void);
Suite *suite_scheduler_state(void);
Suite *suite_sched_scale(void);
Suite *suite_rpclimits(void);
Suite *suite_cpus(void);

// Wire helpers for tests that speak to an in-process scheduler, defined in
// test_live.c. Each fails the test when no reply comes within its time.
#include <stdint.h>
#include "ferry.pb-c.h"
// wire_call sends header h (no payload) for method over a fresh connection
// and returns the reply header (free with pswire__header__free_unpacked),
// or NULL when none came within timeout_ms.
Pswire__Header *wire_call(const char *url, uint8_t method, Pswire__Header *h,
    int timeout_ms);
// status_of returns the status of the reply to (method, h).
int             status_of(const char *url, uint8_t method, Pswire__Header *h);
// register_server registers a server at srv_url; returns the status.
int             register_server(const char *url, const char *srv_url);
// register_trainer registers rank with a one-tensor job (16 floats).
int             register_trainer(const char *url, uint32_t rank);
// member_call sends method (Heartbeat, Leave) with a leave_req body
// naming (role, id); returns the status.
int member_call(const char *url, uint8_t method, int role, uint32_t id);
// heartbeat sends a Heartbeat naming (role, id); returns the status.
int heartbeat(const char *url, int role, uint32_t id);
// map_at_least returns the map of epoch >= min_epoch (free with
// pswire__header__free_unpacked).
Pswire__Header *map_at_least(const char *url, uint64_t min_epoch,
    uint32_t timeout_ms);
Suite          *suite_limits(void);
Suite          *suite_tls(void);
Suite          *suite_cascade(void);
Suite          *suite_reseed(void);
Suite          *suite_average(void);
Suite          *suite_rows(void);
Suite          *suite_rows_move(void);
Suite          *suite_rows_snapshot(void);
Suite          *suite_rows_repl(void);
Suite          *suite_seedinit(void);
Suite          *suite_scale(void);
Suite          *suite_pool(void);
Suite          *suite_audit(void);
Suite          *suite_robust(void);
Suite          *suite_quarantine(void);
#endif
