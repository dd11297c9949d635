// clients_tests.h — one Check suite per source file of clients/src, plus
// the pull-sink suite that trains against an in-process cluster.
#ifndef CLIENTS_TESTS_H
#define CLIENTS_TESTS_H

#include <check.h>

Suite *suite_client(void);           // client.c: options, errors, accessors
Suite *suite_ops(void);              // ops.c: argument and state checks
Suite *suite_sched(void);            // sched.c: the placement map, connections
Suite *suite_request(void);          // request.c: building requests
Suite *suite_reply(void);            // reply.c: taking replies, the pull sink
Suite *suite_sink(void);             // the pull sink against a cluster
Suite *suite_codec_auto(void);       // codec_auto.c: link-aware codec choice
Suite *suite_exchange(void);         // exchange.c: request sizing per link
Suite *suite_exchange_cluster(void); // exchange.c: a big share, a small cap
Suite *suite_rows(void);             // tables.c, rows_dedup.c, rows.c: sparse
Suite *suite_rows_cluster(void);     // the sparse tables against a cluster
Suite *suite_lease(void);            // lease.c, given ranks, join pulls
Suite *suite_fragment(void);         // fragment.c against a cluster

#endif // CLIENTS_TESTS_H
