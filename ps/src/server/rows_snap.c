// rows_snap.c — table shards in snapshot files (format 3): a table shard's
// record (written under mu by snapshot.c into its buffer), reading one
// back, checking it against the job and putting it in place of the
// shard's store (restore and rollback, snapshot_load.c).
//
// RECORD (little-endian), among the dense records of the file:
//   64 bytes: u32 SNAP_TTAG, u32 table shard id (index in
//             Placement.table_shards), u32 table index, u32 range, u32
//             the table's shards, u32 dim, u32 optimizer (enum tbl_optim),
//             u32 clocks, u64 lo, u64 hi (the hash range), u64 version,
//             u64 image length;
//   clocks x u64: the shard's per-rank clocks (SSP);
//   the tbl_save image: every row with its key, last touch and optimizer
//   state, the admission sketch and the counters (its own CRC inside).
//
// DESIGN.
// - One image holds rows, optimizer state and admission/eviction state,
//   written by tbl_save in one hold of mu: they are from one moment, so
//   a restore never pairs weights with another moment's moments.
// - Checking before changing: each image placed here is loaded into a new
//   store (tbl_open + tbl_load, which checks it whole) while the file is
//   checked; only when every record fits do the new stores replace the
//   old ones. That costs the new stores' memory beside the old ones for
//   the length of a rollback (a restore at start has empty old ones).
#include <stdio.h>
#include <string.h>

#include "snapshot.h"
#include "test_hooks.h"

static const char *const optim_names[] = { "sgd", "adagrad", "adam", "ftrl" };

static const char *
optim_name(uint32_t o)
{
	return o < 4 ? optim_names[o] : "unknown";
}

// table_cut finds table shard id's range and its table's shard count in
// pl (a table's shards are listed together, range 0 first).
static void
table_cut(const Pswire__Placement *pl, uint32_t id, uint32_t *range,
    uint32_t *shards)
{
	const Pswire__ShardInfo *si = pl->table_shards[id];
	size_t first                = id - (si->index <= id ? si->index : id);
	size_t lo = id, hi = pl->n_table_shards;
	// The last of the table's: binary search for the first entry past
	// it.
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (pl->table_shards[mid]->tensor == si->tensor) {
			lo = mid;
		} else {
			hi = mid;
		}
	}
	*range  = si->index;
	*shards = (uint32_t) (lo + 1 - first);
}

size_t
ps__tsnap_size(const struct ps_server *s, const struct srv_tshard *ts)
{
	return SNAP_TREC + (size_t) s->trainers * 8 + tbl_save_size(ts->t);
}

void
ps__tsnap_write(const struct ps_server *s, const struct srv_tshard *ts,
    uint8_t *out)
{
	uint32_t range, shards;
	size_t   ilen = tbl_save_size(ts->t);
	table_cut(s->pl, ts->id, &range, &shards);
	fb_put_u32le(out, SNAP_TTAG);
	fb_put_u32le(out + 4, ts->id);
	fb_put_u32le(out + 8, ts->table);
	fb_put_u32le(out + 12, range);
	fb_put_u32le(out + 16, shards);
	fb_put_u32le(out + 20, ts->tb.conf.dim);
	fb_put_u32le(out + 24, (uint32_t) ts->tb.conf.optim);
	fb_put_u32le(out + 28, s->trainers);
	fb_put_u64le(out + 32, ts->lo);
	fb_put_u64le(out + 40, ts->hi);
	fb_put_u64le(out + 48, ts->version);
	fb_put_u64le(out + 56, ilen);
	out += SNAP_TREC;
	for (uint32_t r = 0; r < s->trainers; r++) {
		fb_put_u64le(out + (size_t) r * 8, ts->clock[r]);
	}
	tbl_save(ts->t, out + (size_t) s->trainers * 8);
}

int
ps__tsnap_parse(const uint8_t *p, size_t avail, struct snap_trec *r,
    size_t *used, char *why, size_t n)
{
	memset(r, 0, sizeof(*r));
	if (avail < SNAP_TREC) {
		snprintf(why, n, "cut short");
		return -1;
	}
	r->id       = fb_get_u32le(p + 4);
	r->table    = fb_get_u32le(p + 8);
	r->range    = fb_get_u32le(p + 12);
	r->shards   = fb_get_u32le(p + 16);
	r->dim      = fb_get_u32le(p + 20);
	r->optim    = fb_get_u32le(p + 24);
	r->n_clocks = fb_get_u32le(p + 28);
	r->lo       = fb_get_u64le(p + 32);
	r->hi       = fb_get_u64le(p + 40);
	r->version  = fb_get_u64le(p + 48);
	r->ilen     = fb_get_u64le(p + 56);
	avail -= SNAP_TREC;
	if ((uint64_t) r->n_clocks * 8 > avail ||
	    r->ilen > avail - (size_t) r->n_clocks * 8) {
		snprintf(why, n,
		    "table shard %u: %u clocks and a %llu-byte image pass the "
		    "end",
		    r->id, r->n_clocks, (unsigned long long) r->ilen);
		return -1;
	}
	r->clocks = p + SNAP_TREC;
	r->image  = r->clocks + (size_t) r->n_clocks * 8;
	*used     = SNAP_TREC + (size_t) r->n_clocks * 8 + (size_t) r->ilen;
	return 0;
}

int
ps__tsnap_fit(const struct ps_server *s, const Pswire__Placement *pl,
    struct snap_trec *r, char *why, size_t n)
{
	const Pswire__JobConfig *job = pl->job;
	struct ps_table          tb;
	const char              *name, *bad;
	char                     e[256];
	uint32_t                 range = 0, shards = 0;

	if (r->table >= job->n_tables) {
		snprintf(why, n,
		    "table shard %u is of table %u; the job has %zu", r->id,
		    r->table, job->n_tables);
		return -1;
	}
	name = job->tables[r->table]->name;
	if (ps__table_read(job, r->table, &tb, e, sizeof(e)) != FB_OK) {
		snprintf(why, n, "table '%s': %s", name, e);
		return -1;
	}
	if (r->dim != tb.conf.dim || r->optim != (uint32_t) tb.conf.optim) {
		snprintf(why, n,
		    "table '%s' is dim %u with %s in the snapshot but dim %u "
		    "with %s in the job: another job's snapshot?",
		    name, r->dim, optim_name(r->optim), tb.conf.dim,
		    optim_name((uint32_t) tb.conf.optim));
		return -1;
	}
	if (r->id < pl->n_table_shards) {
		table_cut(pl, r->id, &range, &shards);
	}
	if (r->id >= pl->n_table_shards ||
	    pl->table_shards[r->id]->tensor != r->table || range != r->range ||
	    shards != r->shards || pl->table_shards[r->id]->offset != r->lo ||
	    pl->table_shards[r->id]->offset + pl->table_shards[r->id]->len !=
	        r->hi) {
		snprintf(why, n,
		    "table '%s' range %u of %u (table shard %u) in the "
		    "snapshot is not the job's (the job cuts it into %u): "
		    "another job's snapshot?",
		    name, r->range, r->shards, r->id, shards);
		return -1;
	}
	if (s->tlocal == NULL || s->tlocal[r->id] < 0) {
		return 0;
	}
	const struct srv_tshard *ts = &s->tshards[s->tlocal[r->id]];
	if ((r->staged = tbl_open(&ts->tb.conf)) == NULL) {
		snprintf(why, n, "table '%s' range %u: out of memory", name,
		    r->range);
		return -1;
	}
	if ((bad = tbl_load(r->staged, r->image, r->ilen)) != NULL) {
		tbl_close(r->staged);
		r->staged = NULL;
		snprintf(why, n, "table '%s' range %u: bad rows image: %s",
		    name, r->range, bad);
		return -1;
	}
	return 1;
}

void
ps__tsnap_install(struct ps_server *s, struct snap_trec *r)
{
	struct srv_tshard *ts = &s->tshards[s->tlocal[r->id]];
	tbl_close(ts->t);
	ts->t       = r->staged;
	r->staged   = NULL;
	ts->version = r->version;
	ts->idle_at = r->version;
	ts->adopt   = 0;
	// The round in progress belongs to versions the restore undoes.
	memset(ts->pushed, 0, s->trainers);
	ts->n_pushed = 0;
	ts->samples  = 0;
	for (uint32_t k = 0; k < s->trainers; k++) {
		ts->stage[k].n = 0;
		// Clocks of another trainer count start over.
		ts->clock[k] = r->n_clocks == s->trainers
		    ? fb_get_u64le(r->clocks + (size_t) k * 8)
		    : 0;
	}
}

uint64_t
ps_server_test_table_each(struct ps_server *s, uint32_t id,
    void (*fn)(void *arg, uint64_t key, const float *row, const float *state),
    void *arg, struct tbl_conf *conf)
{
	uint64_t v = UINT64_MAX;
	pthread_mutex_lock(&s->mu);
	if (id < s->n_tglobal && s->tlocal[id] >= 0) {
		const struct srv_tshard *ts = &s->tshards[s->tlocal[id]];
		if (fn != NULL) {
			tbl_each(ts->t, fn, arg);
		}
		if (conf != NULL) {
			*conf = ts->tb.conf;
		}
		v = ts->version;
	}
	pthread_mutex_unlock(&s->mu);
	return v;
}
