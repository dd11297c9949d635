// mapinstall.c — the first placement map: checking a map from the
// scheduler (every later map is checked the same way, moves.c) and
// setting up the job from the first one: s->job (ps__job_read: mode,
// optimizer, codecs), the shard table and the buffers of the shards placed
// here, a snapshot restore and the replicas' forwarding, before the server
// serves.
#include "fb/init.h"
#include "server_impl.h"

// The trainer ranks a map quarantines (issue 31: Placement.quarantined,
// checked here) are refused by this server's rpc from the map that lists
// them on (ps__rpc_quarantine): the first map's are marked here, a later
// map's where it is installed (moves.c's map_mark).

// placed_backup reports whether map shard si names server m as a backup.
static int
placed_backup(const Pswire__ShardInfo *si, uint32_t m)
{
	for (size_t k = 0; k < si->n_backups; k++) {
		if (si->backups[k] == m) {
			return 1;
		}
	}
	return 0;
}

int
ps__map_check(const Pswire__Placement *pl)
{
	Pswire__JobConfig *job = pl->job;
	// Bounds as the scheduler's own (--trainers and --servers at most
	// 4096 at start, joins after; 65536 tensors of 2^34 floats; 2^24
	// shards), so that every size below is computed without overflow.
	if (job == NULL || pl->trainers == 0 || pl->trainers > 65536 ||
	    pl->n_servers == 0 || pl->n_servers > 65536 || pl->n_shards == 0 ||
	    pl->n_shards > (1u << 24) || job->n_tensors == 0 ||
	    job->n_tensors > 65536 || pl->n_gone_trainers > pl->trainers) {
		return FB_EPROTO;
	}
	if (pl->n_quarantined > pl->trainers) {
		return FB_EPROTO;
	}
	for (size_t i = 0; i < pl->n_quarantined; i++) {
		if (pl->quarantined[i] >= pl->trainers) {
			return FB_EPROTO;
		}
	}
	for (size_t i = 0; i < pl->n_servers; i++) {
		if (pl->servers[i] == NULL || pl->servers[i][0] == '\0') {
			return FB_EPROTO;
		}
	}
	for (size_t t = 0; t < job->n_tensors; t++) {
		if (job->tensors[t]->len == 0 ||
		    job->tensors[t]->len > (1ull << 34)) {
			return FB_EPROTO;
		}
	}
	// Sparse tables: each range in its table, on a server (rows.c).
	if (job->n_tables > PS_MAX_TABLES || pl->n_table_shards > (1u << 24)) {
		return FB_EPROTO;
	}
	for (size_t i = 0; i < pl->n_table_shards; i++) {
		Pswire__ShardInfo *si = pl->table_shards[i];
		if (si->tensor >= job->n_tables ||
		    si->server >= pl->n_servers ||
		    si->offset + si->len > (1ull << 32)) {
			return FB_EPROTO;
		}
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		Pswire__ShardInfo *si = pl->shards[i];
		// len <= 2^34 and trainers <= 2^16: len * 4 * trainers (the
		// staging slots) stays below 2^52; offset is checked before
		// it is added, so offset + len cannot wrap.
		if (si->tensor >= job->n_tensors || si->len == 0 ||
		    si->len > (1ull << 34) ||
		    si->offset > job->tensors[si->tensor]->len ||
		    si->len > job->tensors[si->tensor]->len - si->offset ||
		    si->server >= pl->n_servers ||
		    si->n_backups > PS_MAX_BACKUPS) {
			return FB_EPROTO;
		}
		for (size_t k = 0; k < si->n_backups; k++) {
			if (si->backups[k] >= pl->n_servers ||
			    si->backups[k] == si->server) {
				return FB_EPROTO;
			}
		}
	}
	return FB_OK;
}

// seeded_v0 gives shard sh of a seeded tensor (TensorDesc.init ZEROS or
// UNIFORM) its version-0 weights by the job's rule (<fb/init.h>), as if
// they had been offered: the shard serves version 0 at once, its pull
// reference is those weights (the same bits every trainer computes for
// itself), and an init offer for it is then ignored (push.c). A primary
// and its backups from the start each compute the copy: nothing is
// forwarded. Offered tensors wait for the init offer as before.
static void
seeded_v0(struct ps_server *s, const Pswire__JobConfig *job,
    struct srv_shard *sh)
{
	const Pswire__TensorDesc *t = job->tensors[sh->tensor];
	if (!fb_init_seeded((uint32_t) t->init)) {
		return;
	}
	fb_init_fill((uint32_t) t->init, t->init_scale, job->seed, sh->tensor,
	    sh->offset, sh->x, sh->len);
	sh->crc_ok = 0;
	sh->init   = 1;
	ps__ref_publish(s, sh);
}

int
ps__map_install(struct ps_server *s, Pswire__Placement *pl)
{
	Pswire__JobConfig *job    = pl->job;
	size_t             maxlen = 1;
	char               why[128];
	int                rv;

	if (ps__map_check(pl) != FB_OK) {
		return FB_EPROTO;
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		if (pl->shards[i]->len > maxlen) {
			maxlen = pl->shards[i]->len;
		}
	}
	s->trainers = pl->trainers;
	ps__rpc_quarantine(s->rpc, pl->quarantined, pl->n_quarantined);
	if (ps__job_read(job, &s->job, why, sizeof(why)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "store", "%s", why);
		return FB_EPROTO;
	}
	s->log_k = ps__delta_log_depth(&s->job.cpull, maxlen);
	if (comp_codec_parse("none", 0, &s->cnone) != FB_OK) {
		return FB_EPROTO;
	}
	s->n_global  = pl->n_shards;
	s->local     = fb_alloc(pl->n_shards * sizeof(*s->local));
	s->shards    = fb_zalloc(pl->n_shards * sizeof(*s->shards));
	s->sum       = fb_alloc(maxlen * sizeof(float));
	s->stage_len = maxlen; // a stage chunk holds any shard (store.c)
	s->scratch   = fb_alloc(maxlen * sizeof(float));
	s->owners = fb_alloc(pl->n_shards * PS_OWNERS_SEEN * sizeof(uint32_t));
	if (s->local == NULL || s->shards == NULL || s->sum == NULL ||
	    s->scratch == NULL || s->owners == NULL) {
		return FB_ENOMEM;
	}
	// FB_EINVAL: a robust --aggregate in a job that has no rounds
	// (logged by robust.c)
	rv = ps__ranks_alloc(s);
	if (rv != FB_OK) {
		return rv;
	}
	for (size_t i = 0; i < pl->n_shards * PS_OWNERS_SEEN; i++) {
		s->owners[i] = i % PS_OWNERS_SEEN == 0
		    ? pl->shards[i / PS_OWNERS_SEEN]->server
		    : PSW_ID_UNASSIGNED;
	}
	ps__ranks_map(s, pl, 1);
	for (size_t i = 0; i < pl->n_shards; i++) {
		Pswire__ShardInfo *si = pl->shards[i];
		struct srv_shard  *sh = &s->shards[i];
		sh->id                = (uint32_t) i;
		sh->tensor            = si->tensor;
		sh->offset            = si->offset;
		sh->len               = si->len;
		sh->average           = job->tensors[si->tensor]->kind ==
		    PSWIRE__TENSOR_KIND__TENSOR_AVERAGE;
		s->local[i] = PS_SHARD_ABSENT;
		s->replicated |= si->n_backups > 0;
		if (si->server != s->index && !s->late &&
		    placed_backup(si, s->index)) {
			// A backup from the start: the init offer and every
			// update reach it by Replicate.
			if ((rv = ps__shard_alloc(s, sh)) != FB_OK) {
				return rv;
			}
			sh->backup  = 1;
			s->local[i] = (int32_t) i;
			s->n_backup_shards++;
			if (si->seed_gen == 0) {
				seeded_v0(s, job, sh);
			}
			continue;
		}
		if (si->server != s->index) {
			if (s->late && placed_backup(si, s->index)) {
				// A backup of a running job (a server
				// restarted empty into its slot is named again
				// at once): its primary's resync brings the
				// copy.
				s->local[i] = PS_SHARD_ARRIVING;
			}
			continue;
		}
		if (s->late) {
			// A server joining a running job receives its shards
			// from their old servers (Transfer).
			s->local[i] = PS_SHARD_ARRIVING;
			continue;
		}
		if ((rv = ps__shard_alloc(s, sh)) != FB_OK) {
			return rv;
		}
		s->local[i] = (int32_t) i;
		s->n_shards++;
		if (si->seed_gen > 0 && s->snap == NULL) {
			// Restarted empty into its slot (not late): the
			// shard's only copy was here, so the trainers re-seed
			// it. With snapshots the job rolls back instead.
			ps__seed_begin(s, sh, si->seed_gen, pl->epoch);
		} else {
			seeded_v0(s, job, sh);
		}
	}
	// The table shards' stores exist before a snapshot fills them.
	if ((rv = ps__rows_install(s, pl)) != FB_OK) {
		return rv;
	}
	// A snapshot is loaded (or refused whole) before the map is kept.
	// A first map that orders a rollback (this server restarted from its
	// snapshot) names the version every server returns to.
	s->rollback_gen   = pl->rollback_gen;
	s->rollback_epoch = pl->rollback_gen != 0 ? pl->epoch : 0;
	if ((rv = ps__snap_restore(s, pl,
	         pl->rollback_gen != 0 && !s->late ? pl->rollback_version
	                                           : UINT64_MAX)) != FB_OK) {
		return rv;
	}
	if ((rv = ps__repl_open(s)) != FB_OK) {
		return rv;
	}
	s->pl = pl;
	FB_LOG(FB_LOG_NOTICE, "store",
	    "placement epoch %llu: holding %u of %zu shards (and %u "
	    "backups), %u trainers, mode %s (staleness %u, quorum %u), lr %g, "
	    "optimizer %s, lr schedule %s",
	    (unsigned long long) pl->epoch, s->n_shards, pl->n_shards,
	    s->n_backup_shards, s->trainers,
	    s->job.ssp        ? "ssp"
	        : s->job.mode ? "async"
	                      : "sync",
	    s->job.staleness, s->job.quorum, s->job.lr,
	    fb_optim_name(s->job.optim.kind),
	    fb_lr_name(s->job.lr_sched.kind));
	return FB_OK;
}
