// push.c — pushes: the checks on a Push or PushPull, the init offer of
// version-0 weights, the async apply, and the sync path that stages a
// rank's gradient outside the lock and commits it (closing the round when
// it is the last one).
//
// DESIGN. A sync push runs in three steps. Under mu it is checked and its
// rank's slots are reserved (PS_SLOT_DECODING). Without mu, push_stage
// decodes each shard's bytes into the rank's staging slot, which only that
// rank writes for that version, so trainers decode in parallel. Under mu
// again, push_commit marks the slots PS_SLOT_PUSHED (or frees them if a
// gradient was bad), applies every round that is now complete and
// signals s->decoded for a map change waiting on the slots. An async
// push is checked and applied in one hold of mu. The staging and apply
// loops are hot: ps/CMakeLists.txt compiles this file with -O3.
//
// BORROWING (issue 30). A sync PushPull parks until the rounds of its
// shards close, holding its request: its fp32 gradients are only checked
// (finite) and lent to the rounds (sh->src[rank] points into the
// payload) instead of copied into the slots, so that a round of K
// trainers does not write K slots and read them back cold (K x bytes past
// the caches) nor keep them (K x bytes of memory). The round's sum reads
// them where they are (store.c) before the call's reply, built in the
// same buffer, overwrites them; a shard is lent only when the call waits
// for its round to close (its version + 1 <= the call's). A call
// answered any other way first (deadline, closed connection, abort)
// gives them back into the slots (ps__shard_unborrow); a Transfer reads
// them where they are. Codes and plain Pushes are copied as before, into
// a chunk of the stage pool (store.c's POOL) taken when the slot is
// reserved; a lent shard takes none.
#include <string.h>

#include "server_impl.h"

// push_codec is the codec of a push's shard ref r: fp32, the job's push
// codec, or, in a job whose codec_push is "auto" (each trainer picks one
// per link), the one r names, built in *tmp. check_refs has checked it.
static const struct comp_codec *
push_codec(const struct ps_server *s, const Pswire__ShardRef *r,
    struct comp_codec *tmp)
{
	if (r->codec == COMP_NONE) {
		return &s->cnone;
	}
	if (!s->job.push_auto) {
		return &s->job.cpush;
	}
	tmp->id         = r->codec;
	tmp->bucket     = r->bucket;
	tmp->topk_ratio = r->topk_ratio;
	tmp->stochastic = 0; // decoding does not depend on it
	return tmp;
}

// check_refs validates a push's shard references against the map and the
// payload. mu held. Returns 0 or replies an error and returns -1.
static int
check_refs(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p)
{
	uint64_t plen = c->frame.payload_len;
	if (p->n_shards == 0 || p->n_shards > s->n_global) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "push lists %zu shards; the job has %zu", p->n_shards,
		    s->n_global);
		return -1;
	}
	s->stamp++;
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r = p->shards[i];
		if (ps__server_own_shard(s, c, r->shard, c->hdr->epoch) != 0) {
			return -1;
		}
		struct srv_shard *sh = &s->shards[r->shard];
		if (sh->seen == s->stamp) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u listed twice", r->shard);
			return -1;
		}
		sh->seen = s->stamp;
		struct comp_codec tmp;
		if (r->codec != COMP_NONE && s->job.push_auto && !p->init &&
		    comp_codec_check(push_codec(s, r, &tmp)) != FB_OK) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: codec %u (%s) with bucket %u and ratio "
			    "%g is not a valid codec",
			    r->shard, r->codec, comp_codec_name(r->codec),
			    r->bucket, (double) r->topk_ratio);
			return -1;
		}
		if (r->codec != COMP_NONE &&
		    (p->init ||
		        (!s->job.push_auto && r->codec != s->job.cpush.id))) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: codec %u (%s) is not this job's push "
			    "codec %s",
			    r->shard, r->codec, comp_codec_name(r->codec),
			    comp_codec_name(s->job.cpush.id));
			return -1;
		}
		size_t want = comp_bound(push_codec(s, r, &tmp), sh->len);
		if (r->length != want) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: %llu payload bytes, expected %zu for "
			    "%s",
			    r->shard, (unsigned long long) r->length, want,
			    comp_codec_name(r->codec));
			return -1;
		}
		if (r->offset > plen || r->length > plen - r->offset) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: bytes [%llu, +%llu) outside the %llu-byte "
			    "payload",
			    r->shard, (unsigned long long) r->offset,
			    (unsigned long long) r->length,
			    (unsigned long long) plen);
			return -1;
		}
	}
	return 0;
}

static void
on_init(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p)
{
	Pswire__Header h = PSWIRE__HEADER__INIT;
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard *sh = &s->shards[r->shard];
		const float      *v  = (const float *) (c->frame.payload +
                    r->offset);
		// Payload offsets need not be aligned: copy first, check
		// after. A shard already at version 0 ignores the offer and
		// still answers OK: a later offer, or one for a seeded
		// tensor's shard, filled by its rule when the map made it
		// (mapinstall.c), which an older libferry still offers.
		if (!sh->init) {
			memcpy(sh->x, v, sh->len * 4);
			if (!fb_all_finite(sh->x, sh->len)) {
				memset(sh->x, 0, sh->len * 4);
				ps__server_reply_err(s, c,
				    PSWIRE__STATUS__INVALID_ARGUMENT,
				    "shard %u: initial weights hold NaN or Inf",
				    r->shard);
				return;
			}
		}
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		struct srv_shard *sh = &s->shards[p->shards[i]->shard];
		if (!sh->init) {
			sh->init = 1;
			ps__ref_publish(s, sh);
			ps__repl_forward(s, sh, sh->x, 0, 1);
		}
	}
	ps__pull_wake(s);
	ps__call_reply(c, &h);
}

// push_retried reports whether ref r of rank's push is one this shard
// has already counted: staged for its version, or applied (the shard is
// one version past it; in a sync round every rank still in the job
// pushed). With replicas a client whose server died re-sends its push to
// the promoted backup, and a client that gave up waiting re-sends to a
// live one; and any sync client re-sends, marked `resend`, the requests
// it cancelled so as not to wait on another trainer's unsent shards
// (clients/src/exchange.c, REQUEUE_MS): the same bytes, so counting them
// once and serving the pull is exact. (Unmarked, without replicas, a push
// for a closed round is a rank behind: OUT_OF_RANGE.) mu held.
static int
push_retried(const struct ps_server *s, const struct srv_shard *sh,
    const Pswire__ShardRef *r, uint32_t rank)
{
	(void) s;
	return (r->version == sh->version &&
	           sh->state[rank] == PS_SLOT_PUSHED) ||
	    (r->version + 1 == sh->version && sh->state[rank] == PS_SLOT_FREE);
}

// push_admit checks a non-init push against the job and every shard's
// version (and, in sync mode, the rank's slot). mu held. Returns 0 or
// replies an error and returns -1.
static int
push_admit(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p,
    uint32_t rank, size_t *n_retried)
{
	*n_retried = 0;
	if (rank >= s->trainers) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "rank %u out of range: job has %u trainers", rank,
		    s->trainers);
		return -1;
	}
	if (s->gone[rank]) {
		// It left; if it is rejoining, the map saying so is on its
		// way: the client retries.
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "rank %u is not in the job (left, or rejoining)", rank);
		return -1;
	}
	uint32_t max_samples = s->opts.max_samples != 0 &&
	        s->opts.max_samples < (1u << 30)
	    ? s->opts.max_samples
	    : 1u << 30;
	if (p->n_samples == 0 || p->n_samples > max_samples) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "n_samples %u not in 1..%u (the server's "
		    "--max-samples-per-push)",
		    p->n_samples, max_samples);
		return -1;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard *sh = &s->shards[r->shard];
		if (!sh->init) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__FAILED_PRECONDITION,
			    "shard %u has no initial weights yet", r->shard);
			return -1;
		}
		if (s->job.mode == PSWIRE__MODE__MODE_SYNC &&
		    (s->replicated || p->resend) &&
		    push_retried(s, sh, r, rank)) {
			(*n_retried)++; // counted already: only the pull is
			                // left
			continue;
		}
		if (s->job.mode == PSWIRE__MODE__MODE_SYNC) {
			if (r->version != sh->version) {
				// Behind (a rank that rejoined while a round
				// finished without it): pull and recompute.
				ps__server_reply_err(s, c,
				    r->version < sh->version
				        ? PSWIRE__STATUS__OUT_OF_RANGE
				        : PSWIRE__STATUS__FAILED_PRECONDITION,
				    "shard %u: push for version %llu but the "
				    "shard is at version %llu",
				    r->shard, (unsigned long long) r->version,
				    (unsigned long long) sh->version);
				return -1;
			}
			if (sh->state[rank] != PS_SLOT_FREE) {
				ps__server_reply_err(s, c,
				    PSWIRE__STATUS__ALREADY_EXISTS,
				    "shard %u: rank %u already pushed version "
				    "%llu",
				    r->shard, rank,
				    (unsigned long long) sh->version);
				return -1;
			}
		} else if (r->version > sh->version) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__FAILED_PRECONDITION,
			    "shard %u: push for future version %llu (at %llu)",
			    r->shard, (unsigned long long) r->version,
			    (unsigned long long) sh->version);
			return -1;
		}
	}
	return 0;
}

// push_async validates every shard's values before changing any, then
// applies each through the job's optimizer (ps__optim_apply), so an async
// job gets the optimizer per push (an average shard: the push's mean). fp32
// under plain SGD is applied straight from the payload (no copy); codes are
// decoded again to apply (cheaper than a buffer per shard; async pushes are
// applied under the lock anyway). mu held. Returns 0 or replies an error and
// returns -1.
static int
push_async(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p)
{
	// The overflow check's step: plain SGD's at the base lr (no
	// schedule raises it), a bound for the other optimizers.
	float bound = (float) (s->job.lr * s->job.lr_mul /
	    (double) p->n_samples);
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard *sh = &s->shards[r->shard];
		const uint8_t    *b  = c->frame.payload + r->offset;
		const void       *g  = b;
		struct comp_codec tmp;
		int               rv = FB_OK, ok;
		if (r->codec == COMP_NONE) {
			ok = fb_all_finite(b, sh->len);
		} else {
			rv = comp_decode(push_codec(s, r, &tmp), b, r->length,
			    sh->len, s->sum);
			ok = rv == FB_OK && fb_all_finite(s->sum, sh->len);
			g  = s->sum;
		}
		if (!ok) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: gradient is %s", r->shard,
			    rv != FB_OK ? "a corrupt code"
			                : "holding NaN or Inf");
			return -1;
		}
		// Finite values can still overflow the weights: refused
		// before any shard changes. An average shard's mean of finite
		// values cannot.
		if (!sh->average &&
		    !ps__update_finite(sh->x, bound, g, NULL, sh->len)) {
			atomic_fetch_add_explicit(&s->n_overflow, 1,
			    memory_order_relaxed);
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: the update would overflow the weights "
			    "to Inf or NaN",
			    r->shard);
			return -1;
		}
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard *sh = &s->shards[r->shard];
		const uint8_t    *b  = c->frame.payload + r->offset;
		struct comp_codec tmp;
		if (r->codec != COMP_NONE) {
			comp_decode(push_codec(s, r, &tmp), b, r->length,
			    sh->len, s->sum);
			ps__optim_apply(s, sh, s->sum, NULL, p->n_samples);
		} else if (!sh->average && s->job.optim.kind == FB_OPTIM_SGD &&
		    s->job.optim.weight_decay == 0) {
			// Plain SGD reads fp32 straight from the payload
			// (no copy); the float math is ps__optim_apply's.
			float scale = (float) (ps__optim_lr(s, sh->version) /
			    (double) p->n_samples);
			for (size_t j = 0; j < sh->len; j++) {
				float g;
				memcpy(&g, b + 4 * j, 4);
				sh->x[j] -= scale * g;
			}
		} else {
			// The payload need not be aligned for floats.
			memcpy(s->sum, b, sh->len * 4);
			ps__optim_apply(s, sh, s->sum, NULL, p->n_samples);
		}
		sh->version++;
		sh->clock[c->hdr->rank]++; // rank checked in push_admit
		ps__ref_publish(s, sh);
	}
	atomic_fetch_add_explicit(&s->n_push, 1, memory_order_relaxed);
	return 0;
}

// push_lends reports whether shard ref r of push-pull c is lent to its
// round rather than copied (BORROWING): fp32, and the call waits for
// version want, past the round's (r->version + 1 <= want).
static int
push_lends(const struct ps_call *c, const Pswire__ShardRef *r, uint64_t want)
{
	return c->frame.method == PSWIRE__METHOD__PUSH_PULL &&
	    r->codec == COMP_NONE && r->version < want;
}

// push_want returns the version a sync push-pull of p waits for: one past
// its last counted shard's (as push_commit sets it).
static uint64_t
push_want(const Pswire__PushRequest *p, const uint8_t *skip)
{
	for (size_t i = p->n_shards; i-- > 0;) {
		if (skip == NULL || !skip[i]) {
			return p->shards[i]->version + 1;
		}
	}
	return 0;
}

// push_stage decodes each shard's gradient into rank's reserved staging
// slot and checks it is finite, or only checks it when it is lent
// (push_lends). Runs WITHOUT mu: the slots are PS_SLOT_DECODING, so only
// this call writes them. Returns the index of the first bad shard
// (*bad_code: a corrupt code rather than NaN/Inf), or -1 when all are
// good.
static int
push_stage(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p,
    uint32_t rank, const uint8_t *skip, int *bad_code)
{
	uint64_t want = push_want(p, skip);
	int      bad  = -1;
	*bad_code     = 0;
	for (size_t i = 0; i < p->n_shards && bad < 0; i++) {
		if (skip != NULL && skip[i]) {
			continue;
		}
		Pswire__ShardRef *r    = p->shards[i];
		struct srv_shard *sh   = &s->shards[r->shard];
		float            *slot = sh->slot[rank]; // NULL if lent
		struct comp_codec tmp;
		if (push_lends(c, r, want)) {
			if (!fb_all_finite(c->frame.payload + r->offset,
			        sh->len)) {
				bad = (int) i;
			}
		} else if (r->codec == COMP_NONE) { // length: check_refs
			if (!fb_copy_finite(slot, c->frame.payload + r->offset,
			        sh->len)) {
				bad = (int) i;
			}
		} else if (comp_decode(push_codec(s, r, &tmp),
		               c->frame.payload + r->offset, r->length,
		               sh->len, slot) != FB_OK) {
			bad       = (int) i;
			*bad_code = 1;
		} else if (!fb_all_finite(slot, sh->len)) {
			bad = (int) i;
		}
	}
	return bad;
}

// push_reserve reserves rank's slots of p's shards (not in skip) for
// push_stage: PS_SLOT_DECODING, each with a stage chunk unless its shard
// is lent (push_lends). mu held. Returns 0, or -1 with RESOURCE_EXHAUSTED
// replied and nothing reserved.
static int
push_reserve(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p,
    uint32_t rank, const uint8_t *skip)
{
	uint64_t want = push_want(p, skip);
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard *sh = &s->shards[r->shard];
		if ((skip != NULL && skip[i]) || push_lends(c, r, want) ||
		    ps__stage_take(s, sh, rank) != NULL) {
			continue;
		}
		for (size_t j = 0; j < i; j++) { // slots still FREE
			if (skip == NULL || !skip[j]) {
				ps__stage_put(s,
				    &s->shards[p->shards[j]->shard], rank);
			}
		}
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory staging a push of shard %u", r->shard);
		return -1;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		if (skip == NULL || !skip[i]) {
			s->shards[p->shards[i]->shard].state[rank] =
			    PS_SLOT_DECODING;
		}
	}
	return 0;
}

// push_commit ends a staged push: it frees rank's slots and replies the
// error when shard `bad` (>= 0) was bad; else it marks them pushed and
// applies every round that is now complete. *want receives the version a
// push-pull waits for, *closed how many rounds it closed. Signals
// s->decoded either way. mu held. Returns 0 or -1 (error replied).
static int
push_commit(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p,
    uint32_t rank, const uint8_t *skip, int bad, int bad_code, uint64_t *want,
    size_t *closed)
{
	*closed = 0;
	pthread_cond_broadcast(&s->decoded);
	if (bad >= 0) {
		for (size_t i = 0; i < p->n_shards; i++) {
			if (skip != NULL && skip[i]) {
				continue;
			}
			struct srv_shard *sh = &s->shards[p->shards[i]->shard];
			sh->state[rank]      = PS_SLOT_FREE;
			ps__stage_put(s, sh, rank);
			// A rank that left meanwhile held the round open.
			if (ps__shard_complete(s, sh)) {
				ps__shard_apply_sync(s, sh);
				(*closed)++;
			}
		}
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u: gradient is %s", p->shards[bad]->shard,
		    bad_code ? "a corrupt code" : "holding NaN or Inf");
		return -1;
	}
	uint64_t now = fb_clock_ns(); // a round's start: sweeper, metrics
	uint64_t lend_want = push_want(p, skip);
	for (size_t i = 0; i < p->n_shards; i++) {
		if (skip != NULL && skip[i]) {
			continue;
		}
		Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard *sh = &s->shards[r->shard];
		sh->state[rank]      = PS_SLOT_PUSHED;
		sh->src[rank]        = push_lends(c, r, lend_want)
		           ? c->frame.payload + r->offset
		           : NULL;
		// A pending rank's push joins it at this round (store.c's
		// JOINS); a joined rank's changes nothing.
		ps__rank_join(s, rank, sh->version);
		if (sh->n_pushed++ == 0) {
			sh->round_t0 = now; // the round's wait starts
		}
		sh->samples += p->n_samples;
		sh->n_samp[rank] = p->n_samples;
		sh->claim[rank]  = p->data_step;
		*want            = sh->version + 1;
		if (ps__shard_complete(s, sh)) {
			ps__shard_apply_sync(s, sh);
			s->last_rank[rank]++; // the round waited for this rank
			(*closed)++;
		}
	}
	atomic_fetch_add_explicit(&s->n_push, 1, memory_order_relaxed);
	return 0;
}

void
ps__on_push(struct ps_server *s, struct ps_call *c)
{
	Pswire__PushRequest *p;
	uint32_t             rank = c->hdr->rank;
	int      is_pp = c->frame.method == PSWIRE__METHOD__PUSH_PULL;
	uint64_t want  = 0;
	uint8_t *skip  = NULL; // shards this push already counted (retried)
	size_t   n_retried, closed = 0;
	int      changed = 0; // a version moved: parked calls may be ready
	int      bad, bad_code;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_PUSH_REQ) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "%s needs a push_req body",
		    psw_method_name(c->frame.method));
		return;
	}
	// Only trainer r pushes (and offers weights) for rank r.
	if (!ps__call_acts_as(c, PSW_ROLE_TRAINER, rank, 0)) {
		return;
	}
	p = c->hdr->push_req;
	atomic_fetch_add_explicit(&s->bytes_in, nng_msg_len(c->req),
	    memory_order_relaxed);
	pthread_mutex_lock(&s->mu);
	if (p->seed) {
		// A trainer's copy of shards being re-seeded (seed.c).
		ps__seed_on_offer(s, c, p);
		ps__pull_wake(s); // a shard it completed may have opened
		goto out;
	}
	if (check_refs(s, c, p) != 0) {
		goto out;
	}
	if (p->init) {
		if (is_pp) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "an init offer must use Push, not PushPull");
			goto out;
		}
		on_init(s, c, p);
		goto out;
	}
	if (push_admit(s, c, p, rank, &n_retried) != 0) {
		goto out;
	}
	if (n_retried > 0) {
		// Only after a fault (replicas): which shards to skip.
		want = p->shards[0]->version + 1;
		if (n_retried == p->n_shards) {
			goto reply;
		}
		if ((skip = fb_alloc(p->n_shards)) == NULL) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory");
			goto out;
		}
		for (size_t i = 0; i < p->n_shards; i++) {
			Pswire__ShardRef *r = p->shards[i];
			skip[i]             = (uint8_t) push_retried(s,
			                &s->shards[r->shard], r, rank);
		}
	}
	if (s->job.mode == PSWIRE__MODE__MODE_ASYNC) {
		if (push_async(s, c, p) != 0) {
			goto out;
		}
		changed = 1; // versions, and SSP's clocks
		// Async push-pull returns the newest, whatever it is; an SSP
		// one waits for the slowest rank's clock (pull.c).
		want = 0;
		goto reply;
	}
	// Sync: reserve this rank's slots, decode outside the lock.
	if (push_reserve(s, c, p, rank, skip) != 0) {
		goto out;
	}
	void (*hook)(void *, uint32_t) = s->stage_hook;
	void *hook_arg                 = s->stage_hook_arg;
	pthread_mutex_unlock(&s->mu);
	if (hook != NULL) {
		hook(hook_arg, rank);
	}
	bad = push_stage(s, c, p, rank, skip, &bad_code);
	pthread_mutex_lock(&s->mu);
	if (push_commit(s, c, p, rank, skip, bad, bad_code, &want, &closed) !=
	    0) {
		if (closed > 0) {
			ps__pull_wake(s);
		}
		goto out;
	}
	changed = closed > 0;
reply:
	// Admitted (staged, applied, or counted before): the samples up to
	// lease_end of lease_id are consumed (heartbeat.c).
	ps__lease_mark(s, rank, p->lease_id, p->lease_end);
	if (is_pp) {
		ps__pull_or_park(s, c, want);
	} else {
		Pswire__Header h = PSWIRE__HEADER__INIT;
		ps__call_reply(c, &h);
	}
	// Only a push that moved a version can have readied a parked call:
	// a sync push that closes no round leaves them be, so that a round
	// of T pushes scans the parked calls once, not T times (O(T), not
	// O(T^2): issue 30).
	if (changed) {
		ps__pull_wake(s);
	}
out:
	pthread_mutex_unlock(&s->mu);
	fb_free(skip);
}
