// store.c — the shard store: the shard table built from the first
// placement, each shard's buffers (optimizer state included), the finite
// checks on gradient bytes, and the rank-order sum that closes a sync
// round and hands it to the optimizer (optim.c).
//
// DESIGN. This file and push.c hold the server's hot loops (the finite
// checks and the rank-order sum; the update is optim.c's); ps/CMakeLists.txt
// compiles both with -O3 so that GCC vectorises them (no fast-math: the
// floats stay exact and runs reproducible).
#include <string.h>

#include "jobconf.h"
#include "server_impl.h"

// nonfinite reports whether fp32 bits u are a NaN or an Inf (every
// exponent bit set). Testing the bits, not isfinite(), lets loops
// vectorise.
static inline uint32_t
nonfinite(uint32_t u)
{
	return (u & 0x7f800000u) == 0x7f800000u;
}

// bits_at reads the i-th fp32 of payload bytes b (any alignment).
static inline uint32_t
bits_at(const uint8_t *b, size_t i)
{
	uint32_t u;
	memcpy(&u, b + 4 * i, 4);
	return u;
}

int
ps__all_finite(const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		bad |= nonfinite(bits_at(b, i));
	}
	return !bad;
}

// An fp32 push staged and checked in one pass over the bytes instead of
// two.
int
ps__copy_finite(float *dst, const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u = bits_at(b, i);
		bad |= nonfinite(u);
		memcpy(dst + i, &u, 4);
	}
	return !bad;
}

int
ps__update_finite(const float *x, float scale, const void *a, const void *b,
    size_t n)
{
	const uint8_t *pa = a, *pb = b;
	uint32_t       bad = 0;
	if (pb == NULL) {
		for (size_t i = 0; i < n; i++) {
			float g, v;
			memcpy(&g, pa + 4 * i, 4);
			v = x[i] - scale * g;
			uint32_t u;
			memcpy(&u, &v, 4);
			bad |= nonfinite(u);
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			float    g, h, v;
			uint32_t u;
			memcpy(&g, pa + 4 * i, 4);
			memcpy(&h, pb + 4 * i, 4);
			v = x[i] - scale * (g + h);
			memcpy(&u, &v, 4);
			bad |= nonfinite(u);
		}
	}
	return !bad;
}

int
ps__shard_complete(const struct ps_server *s, const struct srv_shard *sh)
{
	uint32_t pushed = 0, missing = 0;
	if (sh->n_pushed == 0) {
		return 0;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		// A slot mid-decode holds the round open even when its rank
		// has just gone: its decoder commits into this version (and
		// closes the round then), never into the next.
		if (sh->state[r] == PS_SLOT_DECODING) {
			return 0;
		}
		pushed += sh->state[r] == PS_SLOT_PUSHED;
		missing += !s->gone[r] && sh->state[r] != PS_SLOT_PUSHED;
	}
	// With a quorum the round closes on its Q-th push; the ranks still
	// missing then find the version passed (OUT_OF_RANGE: re-pull).
	return missing == 0 || (s->quorum > 0 && pushed >= s->quorum);
}

uint64_t
ps__shard_min_clock(const struct ps_server *s, const struct srv_shard *sh)
{
	uint64_t lo = UINT64_MAX;
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (!s->gone[r] && sh->clock[r] < lo) {
			lo = sh->clock[r];
		}
	}
	return lo;
}

void
ps__shard_apply_sum(struct ps_server *s, struct srv_shard *sh)
{
	size_t       n     = sh->len;
	float        scale = (float) (s->lr / (double) sh->samples);
	const float *g[2]  = { NULL, NULL };
	uint32_t     k     = 0;
	// Rank order, over the ranks that pushed (all of them, unless a
	// trainer left the job). One or two pushers (the common case here) go
	// to the optimizer as they are (it adds two in its own pass); more
	// are summed into s->sum first. Either way each element is
	// ((g0 + g1) + g2) + ...: the same floats, so runs are reproducible.
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] != PS_SLOT_PUSHED) {
			continue;
		}
		const float *slot = sh->stage + (size_t) r * n;
		if (k < 2) {
			g[k] = slot;
		} else {
			if (k == 2) {
				for (size_t i = 0; i < n; i++) {
					s->sum[i] = g[0][i] + g[1][i];
				}
			}
			for (size_t i = 0; i < n; i++) {
				s->sum[i] += slot[i];
			}
		}
		k++;
	}
	if (k == 0) {
		// A round closed by departures alone (not reached today:
		// ps__shard_complete needs a push): no update, the version
		// still advances. Backups are not told; none would be.
		sh->version++;
		ps__ref_publish(s, sh);
		return;
	}
	// An update that would overflow (finite pushes whose sum, or whose
	// step, leaves the float range) is refused whole: the weights stay
	// as they were and the version still advances, so that no trainer
	// waits for a round that cannot close. The step checked is plain
	// SGD's at the base lr (no schedule raises it): exact for sgd, a
	// bound on the gradient for the other optimizers.
	if (!ps__update_finite(sh->x, scale, k > 2 ? s->sum : g[0],
	        k == 2 ? g[1] : NULL, n)) {
		atomic_fetch_add_explicit(&s->n_overflow, 1,
		    memory_order_relaxed);
		FB_LOG(FB_LOG_ERR, "store",
		    "shard %u round %llu: the update would overflow to Inf or "
		    "NaN; refused (weights unchanged)",
		    sh->id, (unsigned long long) sh->version);
		sh->version++;
		ps__ref_publish(s, sh);
		return;
	}
	const uint32_t *backups;
	if (ps__shard_backups(s, sh->id, &backups) > 0) {
		// Replicas: the backups get the aggregate as one array and
		// apply it; g0 + g1 here are the same floats.
		ps__repl_apply(s, sh, k > 2 ? s->sum : g[0],
		    k == 2 ? g[1] : NULL, sh->samples);
		return;
	}
	if (k > 2) {
		ps__optim_apply(s, sh, s->sum, NULL, sh->samples);
	} else {
		ps__optim_apply(s, sh, g[0], k == 2 ? g[1] : NULL,
		    sh->samples);
	}
	sh->version++;
	ps__ref_publish(s, sh);
}

void
ps__shard_apply_sync(struct ps_server *s, struct srv_shard *sh)
{
	ps__shard_apply_sum(s, sh);
	if (sh->round_t0 != 0) {
		obs_histogram_observe(s->round_wait,
		    (double) (fb_clock_ns() - sh->round_t0) * 1e-9);
		sh->round_t0 = 0;
	}
	sh->n_pushed = 0;
	sh->samples  = 0;
	memset(sh->state, PS_SLOT_FREE, s->trainers);
	atomic_fetch_add_explicit(&s->n_applied, 1, memory_order_relaxed);
	if (s->snap != NULL) {
		ps__snap_on_version(s, sh);
	}
}

void
ps__shard_apply_agg(struct ps_server *s, struct srv_shard *sh, const float *g0,
    const float *g1, uint64_t samples)
{
	sh->crc = ps__optim_apply_crc(s, sh, g0, g1, samples);
	sh->version++;
	sh->crc_at = sh->version;
	sh->crc_ok = 1;
	ps__ref_publish(s, sh);
}

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

int
ps__shard_alloc(struct ps_server *s, struct srv_shard *sh)
{
	sh->x     = fb_zalloc(sh->len * sizeof(float));
	sh->stage = fb_alloc(sh->len * sizeof(float) * s->trainers);
	sh->state = fb_zalloc(s->trainers);
	sh->clock = fb_zalloc(s->trainers * sizeof(*sh->clock));
	if (sh->x == NULL || sh->stage == NULL || sh->state == NULL ||
	    sh->clock == NULL) {
		return FB_ENOMEM;
	}
	// The optimizer's state starts at zero (no velocity, no moments)
	// and lives as long as the shard's weights.
	if (s->optim_bufs > 0 &&
	    (sh->opt = fb_zalloc(sh->len * sizeof(float) * s->optim_bufs)) ==
	        NULL) {
		return FB_ENOMEM;
	}
	if (!s->pull_none) {
		sh->log_cap  = comp_bound(&s->cpull, sh->len);
		sh->ref      = fb_zalloc(sh->len * sizeof(float));
		sh->log      = fb_alloc(sh->log_cap * s->log_k + 1);
		sh->log_base = fb_alloc(s->log_k * sizeof(uint64_t));
		sh->log_crc  = fb_zalloc(s->log_k * sizeof(uint32_t));
		sh->log_len  = fb_zalloc(s->log_k * sizeof(size_t));
		if (sh->ref == NULL || sh->log == NULL ||
		    sh->log_base == NULL || sh->log_crc == NULL ||
		    sh->log_len == NULL) {
			return FB_ENOMEM;
		}
		ps__ref_log_reset(s, sh);
	}
	return FB_OK;
}

void
ps__shard_release(struct srv_shard *sh)
{
	fb_free(sh->x);
	fb_free(sh->opt);
	fb_free(sh->stage);
	fb_free(sh->state);
	fb_free(sh->clock);
	fb_free(sh->ref);
	fb_free(sh->log);
	fb_free(sh->log_base);
	fb_free(sh->log_crc);
	fb_free(sh->log_len);
	struct srv_shard keep = {
		.id     = sh->id,
		.tensor = sh->tensor,
		.offset = sh->offset,
		.len    = sh->len,
	};
	*sh = keep;
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
	// SSP with K = 0 is BSP: it runs the sync rounds (bit for bit).
	s->ssp       = job->mode == PSWIRE__MODE__MODE_SSP;
	s->staleness = job->staleness;
	s->quorum    = job->sync_quorum;
	s->mode      = job->mode == PSWIRE__MODE__MODE_SSP
	         ? (job->staleness == 0 ? PSWIRE__MODE__MODE_SYNC
	                                : PSWIRE__MODE__MODE_ASYNC)
	         : job->mode;
	s->lr        = job->lr;
	s->warmup    = job->warmup_steps;
	s->log_k     = PS_DELTA_LOG;
	if (ps__job_optim(job, &s->optim, &s->lr_sched, why, sizeof(why)) !=
	    FB_OK) {
		FB_LOG(FB_LOG_ERR, "store", "the job's optimizer: %s", why);
		return FB_EPROTO;
	}
	s->optim_bufs = fb_optim_state_bufs(s->optim.kind);
	// The scheduler validated the codecs; a server still refuses a map
	// it cannot serve rather than trusting it.
	if (comp_codec_parse(job->codec_push, job->bucket, &s->cpush) !=
	        FB_OK ||
	    comp_codec_parse(job->codec_pull, job->bucket, &s->cpull) !=
	        FB_OK ||
	    comp_codec_parse("none", 0, &s->cnone) != FB_OK) {
		return FB_EPROTO;
	}
	s->pull_none = s->cpull.id == COMP_NONE;
	s->push_auto = strcmp(job->codec_push, COMP_AUTO_SPEC) == 0;
	s->n_global  = pl->n_shards;
	s->local     = fb_alloc(pl->n_shards * sizeof(*s->local));
	s->shards    = fb_zalloc(pl->n_shards * sizeof(*s->shards));
	s->sum       = fb_alloc(maxlen * sizeof(float));
	s->scratch   = fb_alloc(maxlen * sizeof(float));
	s->gone      = fb_zalloc(pl->trainers);
	s->last_rank = fb_zalloc(pl->trainers * sizeof(*s->last_rank));
	s->owners = fb_alloc(pl->n_shards * PS_OWNERS_SEEN * sizeof(uint32_t));
	if (s->local == NULL || s->shards == NULL || s->sum == NULL ||
	    s->scratch == NULL || s->gone == NULL || s->last_rank == NULL ||
	    s->owners == NULL) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < pl->n_shards * PS_OWNERS_SEEN; i++) {
		s->owners[i] = i % PS_OWNERS_SEEN == 0
		    ? pl->shards[i / PS_OWNERS_SEEN]->server
		    : PSW_ID_UNASSIGNED;
	}
	for (size_t k = 0; k < pl->n_gone_trainers; k++) {
		if (pl->gone_trainers[k] < pl->trainers) {
			s->gone[pl->gone_trainers[k]] = 1;
		}
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		Pswire__ShardInfo *si = pl->shards[i];
		struct srv_shard  *sh = &s->shards[i];
		sh->id                = (uint32_t) i;
		sh->tensor            = si->tensor;
		sh->offset            = si->offset;
		sh->len               = si->len;
		s->local[i]           = PS_SHARD_ABSENT;
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
			continue;
		}
		if (si->server != s->index) {
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
	}
	// A snapshot is loaded (or refused whole) before the map is kept.
	// A first map that orders a rollback (this server restarted from its
	// snapshot) names the version every server returns to.
	s->rollback_gen   = pl->rollback_gen;
	s->rollback_epoch = pl->rollback_gen != 0 ? pl->epoch : 0;
	if ((rv = ps__snap_restore(s,
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
	    s->ssp        ? "ssp"
	        : s->mode ? "async"
	                  : "sync",
	    s->staleness, s->quorum, s->lr, fb_optim_name(s->optim.kind),
	    fb_lr_name(s->lr_sched.kind));
	return FB_OK;
}
