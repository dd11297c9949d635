// rows_map.c — the table shards a server holds as maps come and go:
// opening them from the first map (ps__rows_install), applying a later
// map (kept, arriving by a move, re-placed empty after their server was
// lost, dropped after this server was taken for lost), and freeing them.
//
// DESIGN. A table shard is held (s->tlocal[id] >= 0: its index in
// s->tshards), ARRIVING (moved here live: its Transfer is on its way,
// rows_move.c; requests get UNAVAILABLE) or ABSENT. A later map that
// re-places a held shard with the same seed_gen leaves it held until
// ps__map_apply packs it (rows_move.c), so the requests it applies
// meanwhile travel with it; one re-placed with seed_gen raised was taken
// for lost and is dropped. A shard re-placed here after its server was
// lost starts empty and adopts the version of the first sync push it gets
// (rows.c).
//
// REPLICAS. A table shard's backups (ShardInfo.backups) are held here as
// well (ts->backup: never served, updated by its primary, rows_repl.c):
// from the first map empty and in step (every copy starts empty at
// version 0), from a later one empty and awaiting its primary's resync.
// A map that makes a backup the primary promotes it (its rows, state and
// version stay); one that no longer names it drops it. A primary held
// here that a map promotes a backup of in its place (this server left)
// is dropped, not moved: its parked calls get STALE_EPOCH and the
// trainers push the open round again to the new primary. Everything here
// runs under mu.
#include <string.h>

#include "server_impl.h"

// tshard_open sets up held table shard ts for map entry si (id).
// Errors: FB_EPROTO (the table cannot be run), FB_ENOMEM. mu held.
static int
tshard_open(struct ps_server *s, const Pswire__Placement *pl, uint32_t id,
    struct srv_tshard *ts)
{
	const Pswire__ShardInfo *si = pl->table_shards[id];
	char                     why[256];
	memset(ts, 0, sizeof(*ts));
	ts->id    = id;
	ts->table = si->tensor;
	ts->lo    = si->offset;
	ts->hi    = si->offset + si->len;
	if (ps__table_read(pl->job, si->tensor, &ts->tb, why, sizeof(why)) !=
	    FB_OK) {
		FB_LOG(FB_LOG_ERR, "tables", "%s", why);
		return FB_EPROTO;
	}
	ts->t      = tbl_open(&ts->tb.conf);
	ts->pushed = fb_zalloc(s->trainers);
	ts->stage  = fb_zalloc(s->trainers * sizeof(*ts->stage));
	ts->clock  = fb_zalloc(s->trainers * sizeof(*ts->clock));
	if (ts->t == NULL || ts->pushed == NULL || ts->stage == NULL ||
	    ts->clock == NULL) {
		return FB_ENOMEM;
	}
	return FB_OK;
}

// tshard_close frees ts's store and buffers.
static void
tshard_close(struct ps_server *s, struct srv_tshard *ts)
{
	for (uint32_t r = 0; ts->stage != NULL && r < s->trainers; r++) {
		fb_free(ts->stage[r].keys);
		fb_free(ts->stage[r].counts);
		fb_free(ts->stage[r].grads);
	}
	tbl_close(ts->t);
	fb_free(ts->pushed);
	fb_free(ts->stage);
	fb_free(ts->clock);
	memset(ts, 0, sizeof(*ts));
}

int
ps__tshard_backups(const struct ps_server *s, uint32_t id,
    const uint32_t **list)
{
	const Pswire__ShardInfo *si;
	if (s->pl == NULL || id >= s->pl->n_table_shards) {
		*list = NULL;
		return 0;
	}
	si    = s->pl->table_shards[id];
	*list = si->backups;
	return (int) (si->n_backups > PS_MAX_BACKUPS ? PS_MAX_BACKUPS
	                                             : si->n_backups);
}

int
ps__tshard_add(struct ps_server *s, const Pswire__Placement *pl, uint32_t id)
{
	struct srv_tshard *a;
	int                rv;
	a = fb_realloc(s->tshards, (s->n_tshards + 1) * sizeof(*a));
	if (a == NULL) {
		return FB_ENOMEM;
	}
	s->tshards = a;
	if ((rv = tshard_open(s, pl, id, &a[s->n_tshards])) != FB_OK) {
		tshard_close(s, &a[s->n_tshards]);
		return rv;
	}
	s->tlocal[id] = (int32_t) s->n_tshards++;
	return FB_OK;
}

// named_backup reports whether map entry si names server m a backup.
static int
named_backup(const Pswire__ShardInfo *si, uint32_t m)
{
	for (size_t k = 0; k < si->n_backups; k++) {
		if (si->backups[k] == m) {
			return 1;
		}
	}
	return 0;
}

int
ps__rows_install(struct ps_server *s, const Pswire__Placement *pl)
{
	uint32_t n_here = 0;
	int      rv;
	if (pl->n_table_shards == 0) {
		return FB_OK;
	}
	s->n_tglobal = pl->n_table_shards;
	s->tlocal    = fb_alloc(pl->n_table_shards * sizeof(*s->tlocal));
	s->tfrom     = fb_alloc(pl->n_table_shards * sizeof(*s->tfrom));
	if (s->tlocal == NULL || s->tfrom == NULL) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < pl->n_table_shards; i++) {
		s->tlocal[i] = -1;
		s->tfrom[i]  = PSW_ID_UNASSIGNED;
	}
	for (size_t i = 0; i < pl->n_table_shards; i++) {
		if (pl->table_shards[i]->server != s->index) {
			continue;
		}
		if ((rv = ps__tshard_add(s, pl, (uint32_t) i)) != FB_OK) {
			return rv;
		}
		// A first map of a running job (a server that joined late
		// or restarted into its slot): the shard's rows, if any,
		// were lost, and its round goes on at the trainers' version.
		s->tshards[s->tlocal[i]].adopt = pl->epoch > 1 || s->late ||
		    pl->table_shards[i]->seed_gen > 0;
		n_here++;
	}
	for (size_t i = 0; i < pl->n_table_shards; i++) {
		if (named_backup(pl->table_shards[i], s->index) &&
		    ps__tshard_add(s, pl, (uint32_t) i) == FB_OK) {
			struct srv_tshard *ts = &s->tshards[s->tlocal[i]];
			ts->backup            = 1;
			ts->synced            = pl->epoch == 1 && !s->late;
		}
	}
	FB_LOG(FB_LOG_NOTICE, "tables",
	    "holding %u of %zu table shard(s) of %zu table(s)", n_here,
	    pl->n_table_shards, pl->job->n_tables);
	return FB_OK;
}

void
ps__tshard_drop(struct ps_server *s, uint32_t k)
{
	struct srv_tshard *ts = &s->tshards[k];
	s->tlocal[ts->id]     = PS_SHARD_ABSENT;
	tshard_close(s, ts);
	if (k + 1 < s->n_tshards) {
		*ts               = s->tshards[s->n_tshards - 1];
		s->tlocal[ts->id] = (int32_t) k;
	}
	s->n_tshards--;
}

// moves_here: pl moves table shard id here from a live server of old
// (same seed_gen: its Transfer comes). mu held.
static int
moves_here(const struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl, size_t id)
{
	const Pswire__ShardInfo *so = old->table_shards[id];
	const Pswire__ShardInfo *si = pl->table_shards[id];
	return si->server == s->index && so->server != s->index &&
	    so->seed_gen == si->seed_gen;
}

// map_arrive gives table shard i, which map pl places here and is not
// held, its state: ARRIVING when it moves here live, else a fresh store
// (its server was lost: its rows start over). mu held.
static void
map_arrive(struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl, size_t i)
{
	if (moves_here(s, old, pl, i)) {
		s->tlocal[i] = PS_SHARD_ARRIVING;
		s->tfrom[i]  = old->table_shards[i]->server; // its sender
		return;
	}
	if (ps__tshard_add(s, pl, (uint32_t) i) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "tables",
		    "out of memory opening table shard %zu", i);
		return;
	}
	s->tshards[s->tlocal[i]].adopt = 1;
	FB_LOG(FB_LOG_ERR, "tables",
	    "table shard %zu (table '%s' range %u) placed here by epoch %llu "
	    "after its server was lost: its rows start over",
	    i, pl->job->tables[pl->table_shards[i]->tensor]->name,
	    pl->table_shards[i]->index, (unsigned long long) pl->epoch);
}

// map_replica applies map pl to held table shard ts as a replica: 1 kept
// (a backup still named, or promoted), -1 to drop (a backup no longer
// named, or a primary here whose backup pl promotes: this server left),
// 0 not a replica matter. mu held.
static int
map_replica(struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl, struct srv_tshard *ts)
{
	const Pswire__ShardInfo *si   = pl->table_shards[ts->id];
	const Pswire__ShardInfo *so   = old->table_shards[ts->id];
	int                      same = si->seed_gen == so->seed_gen;
	if (!ts->backup) {
		return si->server != s->index && named_backup(so, si->server)
		    ? -1
		    : 0;
	}
	if (same && named_backup(si, s->index)) {
		return 1;
	}
	if (!same || si->server != s->index) {
		return -1;
	}
	ts->backup = 0;
	ts->adopt  = !ts->synced; // never resynced: its rows start over
	FB_LOG(ts->synced ? FB_LOG_NOTICE : FB_LOG_ERR, "replica",
	    "table shard %u (table '%s' range %u): promoted to primary by "
	    "epoch %llu, %zu rows at version %llu%s",
	    ts->id, pl->job->tables[si->tensor]->name, si->index,
	    (unsigned long long) pl->epoch, tbl_rows(ts->t),
	    (unsigned long long) ts->version,
	    ts->synced ? "" : " (never synced: its rows start over)");
	return 1;
}

void
ps__rows_map(struct ps_server *s, const Pswire__Placement *old,
    const Pswire__Placement *pl)
{
	if (pl->n_table_shards != s->n_tglobal) {
		return; // checked by map_same_cut
	}
	for (uint32_t k = 0; k < s->n_tshards;) {
		struct srv_tshard       *ts = &s->tshards[k];
		const Pswire__ShardInfo *si = pl->table_shards[ts->id];
		int                      r  = map_replica(s, old, pl, ts);
		if (r > 0) {
			k++;
			continue;
		}
		if (r < 0) {
			ps__rows_drop_parked(s, ts->id, pl->epoch, 0);
			ps__tshard_drop(s, k);
			// A leaving server waits for it to hold nothing.
			pthread_cond_broadcast(&s->delivered);
			continue;
		}
		if (si->server == s->index ||
		    si->seed_gen == old->table_shards[ts->id]->seed_gen) {
			k++; // kept, or moved live by ps__rows_pack
			continue;
		}
		// Re-placed with seed_gen raised: this server was taken for
		// lost.
		FB_LOG(FB_LOG_ERR, "tables",
		    "table shard %u was re-placed on server %u: dropping it "
		    "here (%zu rows)",
		    ts->id, si->server, tbl_rows(ts->t));
		ps__rows_drop_parked(s, ts->id, pl->epoch, 0);
		ps__tshard_drop(s, k);
	}
	for (size_t i = 0; i < pl->n_table_shards; i++) {
		int here = pl->table_shards[i]->server == s->index;
		if (here && s->tlocal[i] == PS_SHARD_ABSENT) {
			map_arrive(s, old, pl, i);
		} else if (s->tlocal[i] == PS_SHARD_ABSENT &&
		    named_backup(pl->table_shards[i], s->index) &&
		    ps__tshard_add(s, pl, (uint32_t) i) == FB_OK) {
			// A new backup: its primary resyncs it (rows_repl.c).
			s->tshards[s->tlocal[i]].backup = 1;
		} else if (!here && s->tlocal[i] == PS_SHARD_ARRIVING) {
			// Moved on while in flight: its Transfer is refused
			// STALE_EPOCH and its sender follows it.
			s->tlocal[i] = PS_SHARD_ABSENT;
		}
	}
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		ps__rows_round_try(s, &s->tshards[k]);
	}
	ps__rows_wake(s);
}

void
ps__rows_release(struct ps_server *s)
{
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		tshard_close(s, &s->tshards[k]);
	}
	fb_free(s->tshards);
	fb_free(s->tlocal);
	fb_free(s->tfrom);
	fb_free(s->mkeys);
	fb_free(s->mslot);
	fb_free(s->macc);
	fb_free(s->mcnt);
	fb_free(s->rscratch);
	fb_free(s->kscratch);
	fb_free(s->trepl);
	fb_free(s->evict_hist);
}
