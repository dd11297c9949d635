// cluster.h — the in-process job the ps and clients suites train against:
// a scheduler and servers on loopback, the 3-tensor table, and each rank's
// gradient (library pt_cluster).
#ifndef PT_CLUSTER_H
#define PT_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "ps/ps.h"

// A job of 3 tensors; shard_bytes 64 cuts tensor 0 (40 floats) in 3 and
// spreads the shards over the servers.
#define NT 3
static const size_t lens[NT] = { 40, 7, 1 };

struct cluster {
	struct ps_scheduler *sched;
	struct ps_server    *srv[4];
	int                  n_srv;
};

// cluster_open starts a scheduler (with the given PS_PLACEMENT_*) for
// `trainers` trainers and `servers` servers (at most 4), and the servers.
void cluster_open(struct cluster *cl, int trainers, int servers,
    int placement);

// cluster_open_replicas is cluster_open with --replicas and, when
// dead_after_ms > 0, faster liveness: the servers heartbeat every
// dead_after_ms/5 and the scheduler declares one dead after dead_after_ms
// of silence (0: the defaults).
void cluster_open_replicas(struct cluster *cl, int trainers, int servers,
    int placement, uint32_t replicas, uint32_t dead_after_ms);

// cluster_stop closes every server cl holds, then the scheduler.
void cluster_stop(struct cluster *cl);

// A job of one server and no probing, for the tests that read that
// server's Stats (limits, scale, the stage pool).
struct one_server {
	struct ps_scheduler *sched;
	struct ps_server    *srv;
};

// one_server_open starts a scheduler for `trainers` trainers and its one
// server: shard_bytes cuts the tensors (0: 64 bytes), contexts > 0 is the
// server's --contexts (0: the default).
void one_server_open(struct one_server *j, int trainers, uint32_t shard_bytes,
    int contexts);

// one_server_close closes the server, then the scheduler.
void one_server_close(struct one_server *j);

// server_stat reads one "key:value" line of s's Stats text; the test
// fails when s has no such key.
unsigned long long server_stat(struct ps_server *s, const char *key);

// grad_for gives rank r's gradient sum at step k: deterministic values.
static inline float
grad_for(int rank, int step, int t, size_t i)
{
	return (float) (rank + 1) * 0.25f + (float) step * 0.125f + (float) t -
	    (float) i * 0.0625f;
}

#endif // PT_CLUSTER_H
