// test_hooks.h — the server's entry points for tests only: ways to put a
// running server in a state a test cannot reach through the wire (a push
// held mid-decode, a backup that diverged). They are not part of
// <ps/ps.h>: a program has no use for them, and tests add ps/src/server
// to their include path for this header alone.
#ifndef PS_TEST_HOOKS_H
#define PS_TEST_HOOKS_H

#include <stdint.h>

struct ps_server;

// ps_server_test_stage_hook installs fn, which every sync push calls with
// its rank after reserving its staging slots and before decoding into them
// (outside the lock); NULL removes it. For tests that need a push to be
// mid-decode while something else happens. Call before the job trains.
void ps_server_test_stage_hook(struct ps_server *s,
    void (*fn)(void *arg, uint32_t rank), void *arg);

// ps_server_test_corrupt_backups flips one bit of the weights of every
// backup shard held here, as an apply that diverged from its primary's
// would, and returns how many it changed. For tests of the resync: the
// next update's CRC check finds it and the primary sends its whole state.
int ps_server_test_corrupt_backups(struct ps_server *s);

// ps_server_test_table_each calls fn(arg, key, row, state) for every row
// of table shard id held here (fn NULL: none), under the server's lock,
// copies the shard's store conf into *conf (NULL: not) and returns the
// shard's version, or UINT64_MAX when it is not held here. For tests that
// compare a restored table with a reference (rows_snap.c).
struct tbl_conf;
uint64_t ps_server_test_table_each(struct ps_server *s, uint32_t id,
    void (*fn)(void *arg, uint64_t key, const float *row, const float *state),
    void *arg, struct tbl_conf *conf);

// ps_server_test_table_backups_behind makes every table shard backup
// held here miss its last update, as one that lost a forward would: its
// rows are dropped and its version steps back by one. Returns how many it
// changed. For tests of the resync: the next forward finds it behind and
// the primary sends the whole shard (rows_repl.c).
int ps_server_test_table_backups_behind(struct ps_server *s);

// ps_server_test_audit turns spot checks on (rate > 0) or off with the
// draw's rate and key, as the scheduler's RegisterReply would (which it
// then overrides): before the first map, or later, when the store of kept
// pushes is made again (emptied). For tests without a scheduler that
// sets them (audit.c).
void ps_server_test_audit(struct ps_server *s, double rate, uint64_t key);

// ps_server_test_audit_draw is the spot checks' keyed draw for (rank,
// version) under key: a number in [0, 1), the push kept when below the
// rate (audit.c's ps__audit_draw).
double ps_server_test_audit_draw(uint64_t key, uint32_t rank,
    uint64_t version);

#endif // PS_TEST_HOOKS_H
