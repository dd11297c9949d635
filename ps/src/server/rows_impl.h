// rows_impl.h — the server role's sparse tables: the table shard struct
// and the functions of rows.c, rows_map.c, rows_park.c, rows_repl.c and
// rows_move.c, split out of server_impl.h (which includes it; the lock
// rules there hold here too: everything below runs under s->mu unless it
// says otherwise). Only the server role's files include it.
#ifndef PS_ROWS_IMPL_H
#define PS_ROWS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "jobconf.h"
#include "rpc.h"

struct ps_server;
struct tbl;

// One rank's push to a table shard, decoded (rows.c): keys, counts and
// fp32 gradients of n rows. The buffers grow only (cap rows), so a step
// in steady state allocates nothing. In a sync job it holds the rank's
// push of the current round until the round closes.
struct srv_rstage {
	uint64_t *keys;
	uint32_t *counts;
	float    *grads; // n * dim
	size_t    n, cap;
};

// A sparse table's hash range held here (rows.c): its store, version,
// per-rank staging and clocks. A shard re-placed on a live server moves
// there whole in a Transfer (rows_move.c); s->tlocal[id] is then
// PS_SHARD_ARRIVING on the receiver until it comes.
struct srv_tshard {
	uint32_t           id;     // index in Placement.table_shards
	uint32_t           table;  // JobConfig.tables index
	uint64_t           lo, hi; // top-32-bit hash range [lo, hi)
	struct ps_table    tb;     // conf, lr, row codecs (jobconf.c)
	struct tbl        *t;
	uint64_t           version;
	int                adopt;  // re-placed empty: takes the version of
	                           // the first sync push (rows.c)
	uint8_t           *pushed; // [trainers]: in this sync round
	struct srv_rstage *stage;  // [trainers]
	uint32_t           n_pushed;
	uint64_t           samples;
	uint64_t          *clock;   // [trainers]: pushes applied (SSP)
	uint64_t           idle_at; // version of the last idle sweep
	uint64_t           seen_push, seen_pull; // listed-twice stamps
	uint64_t           retried; // stamp: this call's push block is a
	                            // resend already counted (rows.c)
	// --replicas (rows_repl.c): held as a backup (never served to
	// trainers; synced: holds its primary's state, else awaits a
	// resync), and forwards not yet acknowledged (pulls park).
	int                backup, synced;
	uint32_t           fwd_pending;
};

// ---- rows.c, rows_map.c, rows_park.c --------------------------------------

// ps__rows_install builds a store for every table shard first map pl
// places here (and, held as a backup, every one it names this server a
// backup of) (tbl conf from its TableDesc, the job's seed, the table
// index) with its staging and clocks. Errors: FB_EPROTO (a table the
// server cannot run), FB_ENOMEM. mu held, before s->pl is set.
int ps__rows_install(struct ps_server *s, const Pswire__Placement *pl);

// ps__rows_map applies later map pl (s->pl == pl; old: the map it
// replaces) to the tables: a table shard it places here that was on a live
// server (same seed_gen) is ARRIVING until its Transfer comes
// (rows_move.c), one re-placed after its server was lost gets a fresh
// store (its rows start over), held ones it re-places after this server
// was taken for lost (seed_gen raised) are dropped, held ones it moves
// stay until ps__rows_pack, backups are opened (awaiting a resync),
// promoted or dropped (rows_map.c's REPLICAS), and the sync rounds the
// trainers that left complete are closed. Wakes parked Rows calls. mu held.
void ps__rows_map(struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl);

// ps__tshard_add opens table shard id of pl here, empty (appended to
// s->tshards; s->tlocal[id] set). FB_EPROTO, FB_ENOMEM. mu held.
int ps__tshard_add(struct ps_server *s, const Pswire__Placement *pl,
    uint32_t id);

// ps__tshard_drop frees held table shard s->tshards[k] (s->tlocal of its
// id set to PS_SHARD_ABSENT; the last one takes its place). mu held.
void ps__tshard_drop(struct ps_server *s, uint32_t k);

// ps__rows_round_try closes ts's sync round when every rank still in the
// job has pushed (a Transfer may bring a complete one). mu held.
void ps__rows_round_try(struct ps_server *s, struct srv_tshard *ts);

// ---- rows_repl.c ---------------------------------------------------------

// ps__rows_apply applies n rows (keys, grads, counts) to ts at scale and
// lr as the update that makes version ts->version + 1 (forwarded first to
// its backups, rows_repl.c), advances the version and runs eviction. mu
// held.
void ps__rows_apply(struct ps_server *s, struct srv_tshard *ts,
    const uint64_t *keys, size_t n, const float *grads, const uint32_t *counts,
    float scale, float lr);

// ps__rows_forward sends the update ps__rows_apply is about to apply to
// ts (n rows; scale, lr) to each backup the map names, raising
// ts->fwd_pending until each answers. No blocking. mu held.
void ps__rows_forward(struct ps_server *s, struct srv_tshard *ts,
    const uint64_t *keys, size_t n, const float *grads, const uint32_t *counts,
    float scale, float lr);

// ps__rows_on_replicate serves a table shard's Replicate (q->table) on a
// backup: checks it is the next version and sound, acknowledges, applies
// it as the primary did. mu held; replies.
void ps__rows_on_replicate(struct ps_server *s, struct ps_call *c,
    const Pswire__ReplicateRequest *q);

// ps__tshard_backups (rows_map.c) returns how many backups the map in
// force names for table shard id and the list in *list (borrowed from
// s->pl). mu held.
int ps__tshard_backups(const struct ps_server *s, uint32_t id,
    const uint32_t **list);

// ps__repl_tsend (replicate.c) hands table shard ts's Replicate m (id
// rid) to its k-th backup `to`: 0 sent (fwd_pending raised); 1 the last
// one still flies (marked stale: a resync follows), -1 failed (m freed).
// mu held.
int ps__repl_tsend(struct ps_server *s, struct srv_tshard *ts, int k,
    uint32_t to, nng_msg *m, uint64_t rid);

// ---- rows_move.c ---------------------------------------------------------

// ps__rows_encode packs table shard ts whole (its tbl_save image,
// version, clocks, staged pushes) into a Transfer in *out; with backup,
// a copy that rebuilds a backup. FB_ENOMEM. mu held.
int ps__rows_encode(struct ps_server *s, const struct srv_tshard *ts,
    int backup, nng_msg **out);

// ps__rows_pack packs every held table shard that map s->pl moves away
// live (its rows, optimizer state, version, clocks and staged sync
// pushes) into out[] from n_out on (its new server in dest[], its id |
// PS_TABLE_ID in ids[]), answers the Rows calls parked on it ABORTED
// (their pushes were applied: pull again from the new server), frees it,
// and returns the new count. A shard that cannot be packed stays here,
// logged. mu held.
size_t ps__rows_pack(struct ps_server *s, const Pswire__Placement *old,
    nng_msg **out, uint32_t *dest, uint32_t *ids, size_t n_out, size_t cap);

// ps__rows_on_transfer installs the table shard Transfer t carries
// (t->table), after checking all of it; replies. mu held.
void ps__rows_on_transfer(struct ps_server *s, struct ps_call *c,
    const Pswire__TransferRequest *t);

// ps__rows_release frees every table shard and the tables' scratch. At
// close, no lock.
void ps__rows_release(struct ps_server *s);

// ps__on_rows serves a Rows call: checks every block, then stages (sync)
// or applies (async, SSP) the pushes, then answers or parks the pulls.
// Called on an nng callback thread; takes mu.
void ps__on_rows(struct ps_server *s, struct ps_call *c);

// ps__rows_ready reports whether every pull block of Rows call c can be
// answered now (versions reached; SSP: clocks). mu held.
int ps__rows_ready(struct ps_server *s, struct ps_call *c);

// ps__rows_answer replies to Rows call c with the rows of its pull
// blocks (ready). mu held.
void ps__rows_answer(struct ps_server *s, struct ps_call *c);

// ps__rows_park parks c until ps__rows_ready (expiry as pulls: its
// deadline or park_max_ms), or answers it at once. mu held.
void ps__rows_park(struct ps_server *s, struct ps_call *c);

// ps__rows_wake answers every parked Rows call that became ready. mu
// held.
void ps__rows_wake(struct ps_server *s);

// ps__rows_drop_parked answers every parked Rows call with a pull of
// table shard id, which leaves this server under map epoch `epoch`:
// STALE_EPOCH (fetch the map, send again), or with moved_applied, the
// shard moving on live with the calls' pushes in it, ABORTED (the pushes
// were applied: pull again from the new server). mu held.
void ps__rows_drop_parked(struct ps_server *s, uint32_t id, uint64_t epoch,
    int moved_applied);

// ps__rows_sweep answers DEADLINE_EXCEEDED to parked Rows calls whose
// deadline (fb_clock_ms) passed. mu held (the sweeper).
void ps__rows_sweep(struct ps_server *s, uint64_t now);

// ps__rows_stats writes the "# Tables" stats section into buf (n
// bytes). mu held.
void ps__rows_stats(struct ps_server *s, char *buf, size_t n);

// ps__rows_metrics writes the per-table series (ferry_table_*). mu held.
struct obs_writer;
void ps__rows_metrics(struct ps_server *s, struct obs_writer *w);

#endif
