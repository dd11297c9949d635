// scheduler_tables.c — placing the sparse tables' hash ranges
// (Placement.table_shards): cut each table into its ranges at the first
// map, give them to servers by expected bytes, and keep them where they
// are in every later map.
//
// DESIGN. A table shard's weight is its expected bytes:
// expected_rows * (dim + tbl_state_floats) * 4 / S. The dense shards are
// placed first (the latency-aware solver's items are dense byte ranges
// with per-shard link costs the tables do not have yet); then each table
// shard goes, in order, to the usable server holding the fewest bytes so
// far, dense shards included (fewest-bytes-first, ties to the lower
// index), which spreads a table's ranges over the servers. A later map
// keeps each on its server; one whose server left (alive: it sends the
// shard whole, server/rows_move.c) moves to the usable server with the
// fewest bytes with the same seed_gen, and one whose server was declared
// dead is re-placed there with its seed_gen raised (no replicas yet: its
// rows start over; logged as an error). Every function here runs with
// s->mu held.
#include <stdio.h>
#include <string.h>

#include "jobconf.h"
#include "scheduler_impl.h"

// shard_weight is the expected bytes of one of table t's `S` ranges.
static uint64_t
shard_weight(const struct ps_table *tb, uint32_t S)
{
	uint64_t row = (uint64_t) tbl_row_bytes(&tb->conf);
	return tb->expected_rows * row / (S != 0 ? S : 1);
}

// load_dense fills load[m] with the bytes of the dense shards that
// assign (n entries) places on server m. mu held.
static void
load_dense(const struct ps_scheduler *s, const uint32_t *assign, size_t n,
    uint64_t *load, uint32_t M)
{
	memset(load, 0, M * sizeof(*load));
	for (size_t i = 0; i < n && s->shard_size != NULL; i++) {
		if (assign[i] < M) {
			load[assign[i]] += s->shard_size[i];
		}
	}
}

// fewest returns the usable server holding the fewest bytes (M when none
// is usable). mu held.
static uint32_t
fewest(const struct ps_scheduler *s, const uint64_t *load, uint32_t M)
{
	uint32_t best = M;
	for (uint32_t m = 0; m < M; m++) {
		if (ps__sched_server_usable(s, m) &&
		    (best == M || load[m] < load[best])) {
			best = m;
		}
	}
	return best;
}

// backups_fix makes out's backup lists (n_backups per shard in out->bk,
// allocated on first use) valid for the servers live now, promoting the
// first live backup of a shard whose primary is gone, and points each
// ShardInfo at its list. No-op without replicas. FB_ENOMEM. mu held.
static int
backups_fix(struct ps_scheduler *s, struct ps_sched_tables *out)
{
	uint32_t  M  = (uint32_t) s->n_servers_seen;
	uint32_t  nb = s->n_backups;
	size_t    n  = out->n, lost;
	uint8_t  *dead;
	uint32_t *as;
	int       rv;
	if (nb == 0 || n == 0) {
		return FB_OK;
	}
	dead = fb_alloc(M);
	as   = fb_alloc(n * sizeof(*as));
	if (out->bk == NULL) {
		out->bk = fb_alloc(n * nb * sizeof(*out->bk));
		if (out->bk != NULL) {
			memset(out->bk, 0xff, n * nb * sizeof(*out->bk));
			for (size_t k = 0; k < n; k++) {
				const Pswire__ShardInfo *si = &out->infos[k];
				for (size_t j = 0; j < si->n_backups && j < nb;
				     j++) {
					out->bk[k * nb + j] = si->backups[j];
				}
			}
		}
	}
	if (dead == NULL || as == NULL || out->bk == NULL) {
		fb_free(dead);
		fb_free(as);
		return FB_ENOMEM;
	}
	for (uint32_t m = 0; m < M; m++) {
		dead[m] = s->gone[m] || s->server_dead[m];
	}
	for (size_t k = 0; k < n; k++) {
		as[k] = out->infos[k].server;
	}
	rv = shard_replicas_repair(n, M, dead, nb, as, out->bk, &lost);
	for (size_t k = 0; rv == FB_OK && k < n; k++) {
		Pswire__ShardInfo *si = &out->infos[k];
		uint32_t          *b  = &out->bk[k * nb];
		if (as[k] != si->server) {
			FB_LOG(FB_LOG_NOTICE, "placement",
			    "table shard %zu (range %u): server %u is gone; "
			    "promoted to its backup on server %u",
			    k, si->index, si->server, as[k]);
			si->server = as[k];
		}
		si->n_backups = 0;
		while (si->n_backups < nb &&
		    b[si->n_backups] != SHARD_NO_SERVER) {
			si->n_backups++;
		}
		si->backups = b;
	}
	fb_free(dead);
	fb_free(as);
	return rv;
}

int
ps__sched_tables_place(struct ps_scheduler *s, const uint32_t *assign,
    size_t ns, struct ps_sched_tables *out)
{
	const Pswire__JobConfig *j = s->job;
	uint32_t                 M = (uint32_t) s->n_servers_seen;
	size_t                   n = 0, k = 0;
	uint64_t                *load;
	struct ps_table          tb;
	char                     why[256];

	memset(out, 0, sizeof(*out));
	if (j->n_tables == 0) {
		return FB_OK;
	}
	for (size_t t = 0; t < j->n_tables; t++) {
		uint32_t S = j->tables[t]->shards;
		n += S != 0 ? S : M;
	}
	load       = fb_alloc(M * sizeof(*load));
	out->infos = fb_alloc(n * sizeof(*out->infos));
	out->ptrs  = fb_alloc(n * sizeof(*out->ptrs));
	if (load == NULL || out->infos == NULL || out->ptrs == NULL) {
		fb_free(load);
		ps__sched_tables_free(out);
		return FB_ENOMEM;
	}
	load_dense(s, assign, ns, load, M);
	for (size_t t = 0; t < j->n_tables; t++) {
		uint32_t S = j->tables[t]->shards != 0 ? j->tables[t]->shards
		                                       : M;
		// Checked at declaration (ps__sched_job_check).
		if (ps__table_read(j, t, &tb, why, sizeof(why)) != FB_OK) {
			FB_LOG(FB_LOG_ERR, "placement", "%s", why);
		}
		uint64_t w = shard_weight(&tb, S);
		for (uint32_t i = 0; i < S; i++, k++) {
			Pswire__ShardInfo *si = &out->infos[k];
			uint32_t           m  = fewest(s, load, M);
			pswire__shard_info__init(si);
			si->tensor   = (uint32_t) t;
			si->index    = i;
			si->offset   = tbl_range_start(i, S);
			si->len      = tbl_range_start(i + 1, S) - si->offset;
			si->server   = m < M ? m : 0;
			out->ptrs[k] = si;
			load[si->server] += w;
			FB_LOG(FB_LOG_INFO, "placement",
			    "table shard %zu = table %zu '%s' range %u/%u "
			    "(~%llu bytes) -> server %u",
			    k, t, j->tables[t]->name, i, S,
			    (unsigned long long) w, si->server);
		}
	}
	out->n = n;
	fb_free(load);
	return backups_fix(s, out);
}

int
ps__sched_tables_keep(struct ps_scheduler *s, const uint32_t *assign,
    struct ps_sched_tables *out)
{
	const Pswire__Placement *p = s->placement;
	uint32_t                 M = (uint32_t) s->n_servers_seen;
	size_t                   n = p->n_table_shards;
	uint64_t                *load;
	struct ps_table          tb;
	char                     why[256];

	memset(out, 0, sizeof(*out));
	if (n == 0) {
		return FB_OK;
	}
	load       = fb_alloc(M * sizeof(*load));
	out->infos = fb_alloc(n * sizeof(*out->infos));
	out->ptrs  = fb_alloc(n * sizeof(*out->ptrs));
	if (load == NULL || out->infos == NULL || out->ptrs == NULL) {
		fb_free(load);
		ps__sched_tables_free(out);
		return FB_ENOMEM;
	}
	load_dense(s, assign, p->n_shards, load, M);
	uint32_t S = 0;
	for (size_t k = 0; k < n; k++) {
		const Pswire__ShardInfo *si = p->table_shards[k];
		out->infos[k]               = *si;
		out->ptrs[k]                = &out->infos[k];
		// A table's ranges are listed together: S is their count.
		if (k == 0 || si->tensor != p->table_shards[k - 1]->tensor) {
			for (S = 0; k + S < n &&
			     p->table_shards[k + S]->tensor == si->tensor;
			     S++) {
			}
		}
		if (si->server < M && si->tensor < p->job->n_tables &&
		    ps__table_read(p->job, si->tensor, &tb, why,
		        sizeof(why)) == FB_OK) {
			load[si->server] += shard_weight(&tb, S);
		}
	}
	out->n = n;
	// With replicas: promotions first (the infos still borrow the map
	// in force's backup lists; backups_fix copies them).
	if (backups_fix(s, out) != FB_OK) {
		fb_free(load);
		ps__sched_tables_free(out);
		return FB_ENOMEM;
	}
	for (size_t k = 0; k < n; k++) {
		Pswire__ShardInfo *si = &out->infos[k];
		uint32_t           m;
		int lost = si->server >= M || s->server_dead[si->server];
		if (!lost && !s->gone[si->server]) {
			continue; // kept where it is
		}
		if ((m = fewest(s, load, M)) == M) {
			continue; // nowhere to go: stays, as dense ones do
		}
		if (lost) {
			FB_LOG(FB_LOG_ERR, "placement",
			    "table '%s' range %u [%llu, +%llu): server %u is "
			    "lost; re-placed on server %u, its rows are lost "
			    "(no live copy)",
			    p->job->tables[si->tensor]->name, si->index,
			    (unsigned long long) si->offset,
			    (unsigned long long) si->len, si->server, m);
			si->seed_gen++;
		} else {
			// Its server left and is alive: it sends the shard
			// whole to m (the same seed_gen says so).
			FB_LOG(FB_LOG_NOTICE, "placement",
			    "table '%s' range %u: server %u left; moving it "
			    "to server %u",
			    p->job->tables[si->tensor]->name, si->index,
			    si->server, m);
		}
		si->server = m;
		load[m] += 1; // ties: the next range goes elsewhere
	}
	fb_free(load);
	// The re-placed ones' backups, and the lists filled up.
	if (backups_fix(s, out) != FB_OK) {
		ps__sched_tables_free(out);
		return FB_ENOMEM;
	}
	return FB_OK;
}

void
ps__sched_tables_free(struct ps_sched_tables *t)
{
	fb_free(t->infos);
	fb_free(t->ptrs);
	fb_free(t->bk);
	memset(t, 0, sizeof(*t));
}
