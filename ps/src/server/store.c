// store.c — the shard store: when a sync round is complete, the
// rank-order sum that closes it and hands it to the optimizer (optim.c),
// each rank's clock, and each shard's buffers (optimizer state included).
// The shard table itself is built from the first placement in
// mapinstall.c; the finite checks are finite.c's.
//
// DESIGN. This file, finite.c and push.c hold the server's hot loops (the
// rank-order sum here; the update is optim.c's); ps/CMakeLists.txt
// compiles them with -O3 so that GCC vectorises them (no fast-math: the
// floats stay exact and runs reproducible).
//
// JOINS (issue 27, elastic jobs). A sync round closes over the ranks this
// server expects at its version: ps__rank_waited, not gone and joined at
// or before it (join_at). Ranks in the first map are expected from
// version 0. A rank that a later map adds (gone, then not), and one the
// first map lists gone, is pending (PS_JOIN_PENDING): no round waits for
// it, so a joiner never stalls the others while it starts. It joins this
// server at version J (ps__rank_join) by a Pull with join=true,
// join_version=J (pull.c: refused while any of its listed shards is past
// J, so that every shard takes it at the same round), or by a push
// staged at a shard's current version v (push.c, rows.c: today's rejoin,
// an implicit join at v). From then on every shard of this server whose
// version is >= J waits for it; a shard already past J refuses its push
// for J with OUT_OF_RANGE as before (the client pulls and goes on).
// join_at is this server's: a shard moved in by a Transfer waits for the
// ranks this server expects, and a rank pending here joins by its push.
// A rank whose process died and whose slot a new process took between
// two maps this server installed (the map that marked it gone skipped)
// is never pending here: it is still expected (as before issue 27), and
// the new process's join pull or push is what the round waits for; a
// push the dead process had staged still counts in its round (the join
// pull for that round is refused: join at the next one). Async and SSP
// take joins at once: the added rank's clock is raised to the slowest
// other rank's (never lowered), so a rank starting at clock 0 does not
// hold SSP reads back.
//
// POOL (issue 30). A rank's staging slot holds bytes only from its push
// of a shard to the close of that shard's round, so slots are not kept
// per shard (that was trainers x weights, resident for the shard's life)
// but taken from one pool of chunks of the largest shard's size: a slot
// gets a chunk when its push is reserved (push.c; a lent push needs
// none) or given back by its parked call (ps__shard_unborrow) or by a
// Transfer, and hands it back when the round closes, on a refused push
// and when the shard leaves. The pool only grows (the first rounds, or a
// trainer running ahead) and keeps its chunks on a free list, so steady
// state allocates nothing; it holds at most the chunks of the rounds
// open at once (stats: stage_chunks).
#include <string.h>

#include "robust.h"
#include "server_impl.h"

int
ps__shard_complete(const struct ps_server *s, const struct srv_shard *sh)
{
	uint32_t pushed = 0, missing = 0;
	// Fewer pushes than the ranks every round at this version waits
	// for (and than the quorum): incomplete without looking at each
	// rank, so a round of T pushes costs O(T), not O(T^2). n_pushed
	// counts the PUSHED slots.
	uint32_t need = sh->version >= s->n_join_hi ? s->n_joined : 1;
	if (s->job.quorum > 0 && s->job.quorum < need) {
		need = s->job.quorum;
	}
	if (sh->n_pushed == 0 || sh->n_pushed < need) {
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
		missing += ps__rank_waited(s, r, sh->version) &&
		    sh->state[r] != PS_SLOT_PUSHED;
	}
	// With a quorum the round closes on its Q-th push; the ranks still
	// missing then find the version passed (OUT_OF_RANGE: re-pull).
	return missing == 0 || (s->job.quorum > 0 && pushed >= s->job.quorum);
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
ps__ranks_count(struct ps_server *s)
{
	s->n_joined  = 0;
	s->n_join_hi = 0;
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (!s->gone[r] && s->join_at[r] != PS_JOIN_PENDING) {
			s->n_joined++;
			if (s->join_at[r] > s->n_join_hi) {
				s->n_join_hi = s->join_at[r];
			}
		}
	}
}

int
ps__ranks_alloc(struct ps_server *s)
{
	uint32_t n      = s->trainers;
	s->gone         = fb_zalloc(n);
	s->added        = fb_zalloc(n);
	s->join_at      = fb_zalloc(n * sizeof(*s->join_at));
	s->last_rank    = fb_zalloc(n * sizeof(*s->last_rank));
	s->marks        = fb_zalloc(n * sizeof(*s->marks));
	s->hb_marks     = fb_alloc(n * sizeof(*s->hb_marks));
	s->hb_mark_ptrs = fb_alloc(n * sizeof(*s->hb_mark_ptrs));
	if (s->gone == NULL || s->added == NULL || s->join_at == NULL ||
	    s->last_rank == NULL || s->marks == NULL || s->hb_marks == NULL ||
	    s->hb_mark_ptrs == NULL) {
		return FB_ENOMEM;
	}
	for (uint32_t r = 0; r < n; r++) {
		pswire__lease_mark__init(&s->hb_marks[r]);
		s->hb_mark_ptrs[r] = &s->hb_marks[r];
	}
	return ps__robust_open(s);
}

// raise_clocks raises the clock of each rank in s->added on the n clocks
// of one shard to the slowest of the other ranks in the job (none: kept).
// mu held.
static void
raise_clocks(const struct ps_server *s, uint64_t *clock)
{
	uint64_t lo = UINT64_MAX;
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (!s->gone[r] && !s->added[r] && clock[r] < lo) {
			lo = clock[r];
		}
	}
	for (uint32_t r = 0; lo != UINT64_MAX && r < s->trainers; r++) {
		if (s->added[r] && clock[r] < lo) {
			clock[r] = lo;
		}
	}
}

void
ps__ranks_map(struct ps_server *s, const Pswire__Placement *pl, int first)
{
	int      sync    = s->job.mode == PSWIRE__MODE__MODE_SYNC;
	uint32_t n_added = 0;
	// added: gone under the old map (every rank, for the first one).
	for (uint32_t r = 0; r < s->trainers; r++) {
		s->added[r] = first || s->gone[r];
	}
	memset(s->gone, 0, s->trainers);
	for (size_t k = 0; k < pl->n_gone_trainers; k++) {
		if (pl->gone_trainers[k] < s->trainers) {
			s->gone[pl->gone_trainers[k]] = 1;
		}
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (first) {
			// In the first map: expected from version 0; the
			// others join when a map adds them.
			s->join_at[r] = s->gone[r] && sync ? PS_JOIN_PENDING
			                                   : 0;
			s->added[r]   = 0;
			continue;
		}
		s->added[r] = s->added[r] && !s->gone[r];
		if (s->added[r]) {
			n_added++;
			s->join_at[r] = sync ? PS_JOIN_PENDING : 0;
			FB_LOG(FB_LOG_INFO, "store",
			    "trainer %u added by map epoch %llu: %s", r,
			    (unsigned long long) pl->epoch,
			    sync ? "pending until it joins a round"
			         : "joins at once");
		}
	}
	ps__ranks_count(s);
	if (sync || n_added == 0) {
		return;
	}
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0 && s->shards[i].clock != NULL) {
			raise_clocks(s, s->shards[i].clock);
		}
	}
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		if (s->tshards[k].clock != NULL) {
			raise_clocks(s, s->tshards[k].clock);
		}
	}
}

// sum_borrowed sums the pushes of sh's round in rank order into s->sum
// when one of them is borrowed (sh->src: payload bytes of any alignment,
// read with memcpy, which the compiler turns into unaligned loads):
// s->sum = ((g0 + g1) + g2) + ..., the floats the slots' sum gives.
// Returns the number of pushes summed. mu held.
static uint32_t
sum_borrowed(struct ps_server *s, struct srv_shard *sh)
{
	size_t   n = sh->len;
	uint32_t k = 0;
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] != PS_SLOT_PUSHED) {
			continue;
		}
		const uint8_t *b    = sh->src[r];
		const float   *slot = sh->slot[r];
		float         *sum  = s->sum;
		if (b == NULL && k == 0) {
			memcpy(sum, slot, n * 4);
		} else if (b == NULL) {
			for (size_t i = 0; i < n; i++) {
				sum[i] += slot[i];
			}
		} else if (k == 0) {
			memcpy(sum, b, n * 4);
		} else {
			for (size_t i = 0; i < n; i++) {
				float v;
				memcpy(&v, b + 4 * i, 4);
				sum[i] += v;
			}
		}
		k++;
	}
	return k;
}

// borrows reports whether a push of sh's round is borrowed (sh->src).
// mu held.
static int
borrows(const struct ps_server *s, const struct srv_shard *sh)
{
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] == PS_SLOT_PUSHED && sh->src[r] != NULL) {
			return 1;
		}
	}
	return 0;
}

// apply_agg closes sh's round with aggregate g0 (+ g1 element-wise when
// g1 is not NULL: a two-push round) over `samples` samples: the overflow
// check and the optimizer's apply (ps__optim_apply; a shard with backups
// forwards the aggregate to them and applies it through ps__repl_apply),
// then the version and the pull reference. g0 is writable (consumed by
// the fused SGD pass). mu held.
static void
apply_agg(struct ps_server *s, struct srv_shard *sh, float *g0,
    const float *g1, uint64_t samples)
{
	size_t n     = sh->len;
	float  scale = (float) (s->job.lr * s->job.lr_mul / (double) samples);
	// An update that would overflow (finite pushes whose sum, or whose
	// step, leaves the float range) is refused whole: the weights stay
	// as they were and the version still advances, so that no trainer
	// waits for a round that cannot close. The step checked is plain
	// SGD's at the base lr (no schedule raises it): exact for sgd, a
	// bound on the gradient for the other optimizers. For plain SGD
	// without replicas the check and the apply are one pass; the round's
	// staged pushes are consumed by it (the slots are free once the round
	// closes).
	const uint32_t *backups;
	int             nb = ps__shard_backups(s, sh->id, &backups);
	// ok: 1 applied (the fused pass), 2 checked and still to apply, 0
	// refused.
	int             ok = nb > 0
	                ? -1
	                : ps__optim_apply_checked(s, sh, scale, g0, g1, samples);
	if (ok < 0 && sh->average) {
		// The mean of finite values overflows only where their sum
		// does.
		ok = ps__average_finite(g0, g1, n) ? 2 : 0;
	} else if (ok < 0) {
		ok = ps__update_finite(sh->x, scale, g0, g1, n) ? 2 : 0;
	}
	if (ok == 0) {
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
	if (nb > 0) {
		// Replicas: the backups get the aggregate as one array and
		// apply it; g0 + g1 here are the same floats.
		ps__repl_apply(s, sh, g0, g1, samples);
		return;
	}
	if (ok == 2) {
		ps__optim_apply(s, sh, g0, g1, samples);
	}
	sh->version++;
	ps__ref_publish(s, sh);
}

// apply_sum closes sh's round (the ranks in PS_SLOT_PUSHED): by the job's
// robust rule (robust.c: its aggregate in s->sum, over the samples it
// says) when --aggregate is not mean, else by the rank-order sum over
// sh->samples; then apply_agg. mu held.
static void
apply_sum(struct ps_server *s, struct srv_shard *sh)
{
	size_t       n    = sh->len;
	const float *g[2] = { NULL, NULL };
	uint32_t     k    = 0;
	if (sh->n_pushed > 0 && ps__robust_active(s)) {
		uint64_t samples = ps__robust_round(s, sh);
		apply_agg(s, sh, s->sum, NULL, samples);
		return;
	}
	// The spot checks see the round before its update (audit.c).
	ps__audit_round(s, sh, NULL);
	ps__robust_mean_round(s);
	// Rank order, over the ranks that pushed (all of them, unless a
	// trainer left the job). One or two pushers (the common case here) go
	// to the optimizer as they are (it adds two in its own pass); more,
	// or any borrowed, are summed into s->sum first. Either way each
	// element is ((g0 + g1) + g2) + ...: the same floats, so runs are
	// reproducible.
	int borrowed = borrows(s, sh);
	if (borrowed) {
		k = sum_borrowed(s, sh) > 0 ? 3 : 0; // g0: s->sum, as for 3+
	}
	for (uint32_t r = 0; !borrowed && r < s->trainers; r++) {
		if (sh->state[r] != PS_SLOT_PUSHED) {
			continue;
		}
		const float *slot = sh->slot[r];
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
	apply_agg(s, sh, (float *) (k > 2 ? s->sum : g[0]),
	    k == 2 ? g[1] : NULL, sh->samples);
}

void
ps__shard_apply_sync(struct ps_server *s, struct srv_shard *sh)
{
	uint64_t t0 = fb_clock_ns();
	apply_sum(s, sh);
	s->close_ns += fb_clock_ns() - t0;
	if (sh->round_t0 != 0) {
		obs_histogram_observe(s->round_wait,
		    (double) (fb_clock_ns() - sh->round_t0) * 1e-9);
		sh->round_t0 = 0;
	}
	sh->n_pushed = 0;
	sh->samples  = 0;
	memset(sh->state, PS_SLOT_FREE, s->trainers);
	memset(sh->src, 0, s->trainers * sizeof(*sh->src));
	ps__stage_drop(s, sh); // the round consumed its slots
	atomic_fetch_add_explicit(&s->n_applied, 1, memory_order_relaxed);
	if (s->snap != NULL) {
		ps__snap_on_version(s, sh);
	}
}

// withdraw takes rank's push (of call p) out of sh's round: it keeps no
// copy of a lent gradient it cannot stage (ps__shard_unborrow). mu held.
static void
withdraw(struct ps_server *s, struct srv_shard *sh, uint32_t rank,
    const Pswire__PushRequest *p)
{
	sh->state[rank] = PS_SLOT_FREE;
	sh->src[rank]   = NULL;
	sh->n_pushed--;
	sh->samples -= p->n_samples <= sh->samples ? p->n_samples
	                                           : sh->samples;
	if (sh->n_pushed == 0) {
		sh->round_t0 = 0;
	}
	FB_LOG(FB_LOG_ERR, "store",
	    "shard %u round %llu: out of memory staging rank %u's push; "
	    "withdrawn (the trainer sends it again)",
	    sh->id, (unsigned long long) sh->version, rank);
	// A rank gone meanwhile no longer holds the round open: it closes
	// without it (its parked pulls are answered at the next wake).
	if (ps__shard_complete(s, sh)) {
		ps__shard_apply_sync(s, sh);
	}
}

size_t
ps__shard_unborrow(struct ps_server *s, struct ps_call *c)
{
	size_t n_out = 0;
	if (c->frame.method != PSWIRE__METHOD__PUSH_PULL || c->req == NULL ||
	    c->hdr == NULL ||
	    c->hdr->body_case != PSWIRE__HEADER__BODY_PUSH_REQ ||
	    c->hdr->rank >= s->trainers) {
		return 0;
	}
	const Pswire__PushRequest *p    = c->hdr->push_req;
	uint32_t                   rank = c->hdr->rank;
	for (size_t i = 0; i < p->n_shards; i++) {
		const Pswire__ShardRef *r = p->shards[i];
		if (r->shard >= s->n_global) {
			continue;
		}
		struct srv_shard *sh = &s->shards[r->shard];
		const uint8_t    *b  = c->frame.payload + r->offset;
		if (sh->src == NULL || sh->state[rank] != PS_SLOT_PUSHED ||
		    sh->src[rank] != b) {
			continue;
		}
		float *d = ps__stage_take(s, sh, rank);
		if (d == NULL) {
			// Never a round summed without it nor with stale
			// bytes: out of its round, to be sent again.
			withdraw(s, sh, rank, p);
			n_out++;
			continue;
		}
		memcpy(d, b, sh->len * 4);
		sh->src[rank] = NULL;
	}
	return n_out;
}

float *
ps__stage_take(struct ps_server *s, struct srv_shard *sh, uint32_t r)
{
	if (sh->slot[r] != NULL) {
		return sh->slot[r];
	}
	void *c = s->stage_free;
	if (c != NULL) {
		memcpy(&s->stage_free, c, sizeof(void *));
		s->stage_n_free--;
	} else if ((c = fb_alloc(s->stage_len * sizeof(float))) != NULL) {
		s->stage_chunks++;
	}
	sh->slot[r] = c;
	return c;
}

void
ps__stage_put(struct ps_server *s, struct srv_shard *sh, uint32_t r)
{
	if (sh->slot != NULL && sh->slot[r] != NULL) {
		memcpy(sh->slot[r], &s->stage_free, sizeof(void *));
		s->stage_free = sh->slot[r];
		sh->slot[r]   = NULL;
		s->stage_n_free++;
	}
}

void
ps__stage_drop(struct ps_server *s, struct srv_shard *sh)
{
	for (uint32_t r = 0; sh->slot != NULL && r < s->trainers; r++) {
		if (sh->state[r] == PS_SLOT_FREE) {
			ps__stage_put(s, sh, r);
		}
	}
}

void
ps__stage_pool_free(struct ps_server *s)
{
	while (s->stage_free != NULL) {
		void *c = s->stage_free;
		memcpy(&s->stage_free, c, sizeof(void *));
		fb_free(c);
		s->stage_chunks--;
		s->stage_n_free--;
	}
}

int
ps__shard_alloc(struct ps_server *s, struct srv_shard *sh)
{
	sh->x      = fb_zalloc(sh->len * sizeof(float));
	sh->slot   = fb_zalloc(s->trainers * sizeof(*sh->slot));
	sh->src    = fb_zalloc(s->trainers * sizeof(*sh->src));
	sh->state  = fb_zalloc(s->trainers);
	sh->clock  = fb_zalloc(s->trainers * sizeof(*sh->clock));
	sh->n_samp = fb_zalloc(s->trainers * sizeof(*sh->n_samp));
	sh->claim  = fb_zalloc(s->trainers * sizeof(*sh->claim));
	if (sh->x == NULL || sh->slot == NULL || sh->src == NULL ||
	    sh->state == NULL || sh->clock == NULL || sh->n_samp == NULL ||
	    sh->claim == NULL || ps__robust_shard_alloc(s, sh) != FB_OK) {
		return FB_ENOMEM;
	}
	// The optimizer's state starts at zero (no velocity, no moments)
	// and lives as long as the shard's weights; an average shard has
	// none.
	if (ps__shard_opt_bufs(s, sh) > 0 &&
	    (sh->opt = fb_zalloc(sh->len * sizeof(float) *
	         ps__shard_opt_bufs(s, sh))) == NULL) {
		return FB_ENOMEM;
	}
	if (!s->job.pull_none) {
		sh->log_cap  = comp_bound(&s->job.cpull, sh->len);
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
ps__shard_release(struct ps_server *s, struct srv_shard *sh)
{
	fb_free(sh->x);
	fb_free(sh->opt);
	for (uint32_t r = 0; sh->slot != NULL && r < s->trainers; r++) {
		ps__stage_put(s, sh, r);
	}
	fb_free(sh->slot);
	fb_free(sh->src);
	fb_free(sh->state);
	fb_free(sh->clock);
	fb_free(sh->n_samp);
	fb_free(sh->claim);
	fb_free(sh->prev);
	fb_free(sh->mom);
	fb_free(sh->ref);
	fb_free(sh->log);
	fb_free(sh->log_base);
	fb_free(sh->log_crc);
	fb_free(sh->log_len);
	struct srv_shard keep = {
		.id      = sh->id,
		.tensor  = sh->tensor,
		.offset  = sh->offset,
		.len     = sh->len,
		.average = sh->average,
	};
	*sh = keep;
}
