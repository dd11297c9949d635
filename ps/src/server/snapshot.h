// snapshot.h — what snapshot.c (taking and writing snapshots) and
// snapshot_load.c (checking and restoring them) share: the file format's
// constants and the server's snapshot state. Only those two include it;
// the format is described in snapshot.c.
#ifndef PS_SNAPSHOT_H
#define PS_SNAPSHOT_H

#include "server_impl.h"

#define SNAP_MAGIC "FERRYSNP"
// Format 2 adds the optimizer state after each record's weights; format 1
// files (no state) still load into a job whose optimizer keeps none.
#define SNAP_FORMAT 2u
#define SNAP_FORMAT_V1 1u
#define SNAP_HDR 32
#define SNAP_REC 32
#define SNAP_TRAILER 4
#define SNAP_FLAG_REF 1u
// Snapshot files kept per server: the newest (server-<i>.snap) and the one
// before it (server-<i>.prev.snap), so that a rollback finds a version
// every server holds even when one server's newest write was cut short or
// skipped (rollback: snapshot_load.c).
#define SNAP_KEEP 2
#define SNAP_NONE UINT64_MAX

// The packed TransferRequest of a record is at most this long (6 scalars,
// the optimizer's name and PS_DELTA_LOG entries of three varints).
#define SNAP_HMAX (96 + PS_DELTA_LOG * 32)

enum snap_state {
	SNAP_IDLE,      // nothing in the buffer
	SNAP_CAPTURING, // shards are copied in as they reach p->version
	SNAP_FULL,      // every shard is in: the writer's turn
	SNAP_WRITING,   // the writer owns the buffer
};

struct ps_snap {
	char            path[512], tmp[520], prev[520];
	const char     *dir;
	uint64_t        every;
	pthread_t       thread;
	pthread_cond_t  wake; // on s->mu: the buffer is FULL, or quit
	pthread_cond_t  done; // on s->mu: a write finished (CLOCK_MONOTONIC)
	int             quit;
	int             state;     // enum snap_state
	int             requested; // the capture was asked for (not periodic)
	uint64_t        version;   // version being captured (0: "now")
	uint64_t        low;       // lowest version captured
	uint32_t        n_rec;
	uint8_t        *buf;
	size_t          cap, len;
	uint64_t        seq, done_seq; // captures begun, writes finished
	int             done_rv;
	uint64_t        done_version;
	struct ps_call *call; // a Snapshot rpc waiting for this capture
	uint64_t        skip_logged;
	// stats (under mu)
	uint64_t        n_written, n_failed, n_skipped;
	uint64_t        last_bytes, last_write_ns, last_version;
	uint64_t        restore_bytes, restore_ns, restore_version;
	uint32_t        restore_shards;
	// The versions of the files on disk (path, prev; SNAP_NONE: none),
	// known once the server has its index (ps__snap_scan).
	uint64_t        held[SNAP_KEEP];
	uint64_t        n_rollbacks;
};

#endif // PS_SNAPSHOT_H
