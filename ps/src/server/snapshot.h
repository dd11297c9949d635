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
// Format 3 adds table shard records (rows_snap.c); format 1 and 2 files
// (none) still load.
#define SNAP_FORMAT 3u
#define SNAP_FORMAT_V2 2u
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
// A table shard record (format 3) opens with this word where a dense
// record has its tensor index (never this large), then its fixed part.
#define SNAP_TTAG 0xffffffffu
#define SNAP_TREC 64

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
	uint64_t        low;       // lowest dense version captured
	uint64_t        tlow;      // lowest table shard version captured
	uint32_t        n_rec;     // records in the buffer (dense + table)
	uint32_t        n_trec;    // of which table shard records
	size_t          dense_cap; // the buffer's size for dense shards only
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
	uint32_t        restore_shards, restore_tshards;
	// The versions of the files on disk (path, prev; SNAP_NONE: none),
	// known once the server has its index (ps__snap_scan).
	uint64_t        held[SNAP_KEEP];
	uint64_t        n_rollbacks;
};

// A table shard record of a file (format 3), checked against the file's
// bounds by ps__tsnap_parse: the fixed part's fields, the clocks and the
// tbl_save image; staged: the image loaded into a new store (restore).
struct snap_trec {
	uint32_t       id, table, range, shards, dim, optim, n_clocks;
	uint64_t       lo, hi, version, ilen;
	const uint8_t *clocks, *image;
	struct tbl    *staged;
};

// ---- rows_snap.c: table shard records --------------------------------------

// ps__tsnap_size: the bytes of table shard ts's record now. mu held.
size_t ps__tsnap_size(const struct ps_server *s, const struct srv_tshard *ts);

// ps__tsnap_write writes ts's record (ps__tsnap_size bytes) at out: its
// id, table, range, version, clocks and tbl_save image. mu held.
void ps__tsnap_write(const struct ps_server *s, const struct srv_tshard *ts,
    uint8_t *out);

// ps__tsnap_parse reads the table record at p (avail bytes to the
// file's trailer) into *r and its length into *used. 0, or -1 with why
// filled (it passes the end).
int ps__tsnap_parse(const uint8_t *p, size_t avail, struct snap_trec *r,
    size_t *used, char *why, size_t n);

// ps__tsnap_fit checks r against the job of map pl (the table exists,
// same range, cut, dim and optimizer) and, when it is placed here, loads
// its image into a new store (r->staged) so that a bad image is found
// before anything changes. 1 placed here (staged), 0 elsewhere, -1 (why
// filled, naming the table) when it does not fit. mu held.
int ps__tsnap_fit(const struct ps_server *s, const Pswire__Placement *pl,
    struct snap_trec *r, char *why, size_t n);

// ps__tsnap_install puts staged record r in place of its table shard's
// store (the old one is freed) with its version and clocks, and forgets
// the shard's round in progress (adopt cleared). mu held.
void ps__tsnap_install(struct ps_server *s, struct snap_trec *r);

#endif // PS_SNAPSHOT_H
