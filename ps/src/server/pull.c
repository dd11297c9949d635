// pull.c — pulls: admission of a Pull, the reply built from the pull
// reference or the weights, parking a call until the version it wants
// exists, and the sweeper that answers parked calls in time and reports
// stuck sync rounds.
//
// DESIGN. A call for a version not reached yet is parked: its nng context
// is simply not answered (the rpc lets a handler keep the call), and it
// goes on s->parked. Whoever advances a version (a push, an init offer, a
// map change, a Transfer) calls ps__pull_wake under mu, which answers the
// parked calls that became ready from that thread. The sweeper thread
// answers the ones whose deadline passed. A reply is built in the
// request's own buffer when that is large enough (a push-pull's is), so a
// step allocates and zeroes no reply message.
//
// Stuck rounds: a sync push records when its round's first push came in
// (push.c, one clock read per push); the sweeper, already waking every
// 100 ms under mu, compares that with --stall-warn-ms and logs once per
// round which ranks it still waits for. Shards of one round waiting for
// the same ranks share one line, so a server holding 1000 shards logs one
// line, not 1000; the lines are formatted under mu into the stack and
// written after releasing it.
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server_impl.h"

// pull_staleness returns how many clocks the slowest rank still in the
// job is behind rank `rank` on shard sh (0 in sync mode, where every read
// is of a closed round, and for a rank out of range). mu held.
static uint64_t
pull_staleness(const struct ps_server *s, const struct srv_shard *sh,
    uint32_t rank)
{
	uint64_t lo;
	if (s->job.mode == PSWIRE__MODE__MODE_SYNC || rank >= s->trainers) {
		return 0;
	}
	lo = ps__shard_min_clock(s, sh);
	return lo < sh->clock[rank] ? sh->clock[rank] - lo : 0;
}

// shard_ready reports whether call c may read shard id: it reached
// version want, every backup holds that version (no forward pending:
// replicate.c), and in an SSP job the caller's clock is at most K ahead of
// the slowest rank's (so the data holds every push up to clock c-K-1).
static int
shard_ready(struct ps_server *s, const struct ps_call *c, uint32_t id,
    uint64_t want)
{
	struct srv_shard *sh = &s->shards[id];
	if (!sh->init || sh->version < want || sh->fwd_pending > 0) {
		return 0;
	}
	return !s->job.ssp || s->job.mode == PSWIRE__MODE__MODE_SYNC ||
	    pull_staleness(s, sh, c->hdr->rank) <= s->job.staleness;
}

uint32_t
ps__call_shard(const struct ps_call *c, size_t i, uint64_t *have, int *full)
{
	if (c->hdr->body_case == PSWIRE__HEADER__BODY_PULL_REQ) {
		*have = c->hdr->pull_req->have_version;
		*full = c->hdr->pull_req->full;
		return c->hdr->pull_req->shards[i];
	}
	*have = c->hdr->push_req->shards[i]->version;
	*full = 0;
	return c->hdr->push_req->shards[i]->shard;
}

size_t
ps__call_n_shards(const struct ps_call *c)
{
	return c->hdr->body_case == PSWIRE__HEADER__BODY_PULL_REQ
	    ? c->hdr->pull_req->n_shards
	    : c->hdr->push_req->n_shards;
}

// call_touches reports whether parked call c involves shard id.
static int
call_touches(const struct ps_call *c, uint32_t id)
{
	size_t   n = ps__call_n_shards(c);
	uint64_t have;
	int      full;
	for (size_t i = 0; i < n; i++) {
		if (ps__call_shard(c, i, &have, &full) == id) {
			return 1;
		}
	}
	return 0;
}

// call_weights reports whether call c asks for the weights themselves in
// fp32 rather than the shared reference (PullRequest.weights: a trainer of
// a codec_pull "auto" job whose link needs no pull codec).
static int
call_weights(const struct ps_call *c)
{
	return c->hdr->body_case == PSWIRE__HEADER__BODY_PULL_REQ
	    ? c->hdr->pull_req->weights
	    : c->hdr->push_req->pull_weights;
}

// answer_pull replies with what each of the call's shards needs: the full
// weights (no pull codec, or the call asks for them), the full reference,
// or the chain of deltas from the caller's version. mu held; every shard
// is ready.
static void
answer_pull(struct ps_server *s, struct ps_call *c)
{
	size_t            n = ps__call_n_shards(c), nrefs = 0, off = 0, hl;
	Pswire__Header    h   = PSWIRE__HEADER__INIT;
	Pswire__PullReply rep = PSWIRE__PULL_REPLY__INIT;
	Pswire__ShardRef  refs_stack[64], *refs = refs_stack;
	Pswire__ShardRef *ptr_stack[64], **ptrs = ptr_stack;
	nng_msg          *m;
	uint8_t          *payload;
	uint64_t          have;
	int               full, weights = call_weights(c);

	for (size_t i = 0; i < n; i++) {
		uint32_t          id = ps__call_shard(c, i, &have, &full);
		struct srv_shard *sh = &s->shards[id];
		size_t            k, b;
		ps__ref_plan(s, sh, have, full || weights, &k, &b);
		nrefs += k;
	}
	if (nrefs > 64) {
		// Rare (many shards or long chains): one allocation per reply.
		refs = fb_alloc(nrefs * sizeof(*refs));
		ptrs = fb_alloc(nrefs * sizeof(*ptrs));
		if (refs == NULL || ptrs == NULL) {
			fb_free(refs);
			fb_free(ptrs);
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory building a pull reply");
			return;
		}
	}
	nrefs = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t          id = ps__call_shard(c, i, &have, &full);
		struct srv_shard *sh = &s->shards[id];
		size_t            k, b;
		int               how;
		how = ps__ref_plan(s, sh, have, full || weights, &k, &b);
		for (size_t j = 0; j < k; j++) {
			Pswire__ShardRef *r = &refs[nrefs];
			pswire__shard_ref__init(r);
			ptrs[nrefs++] = r;
			r->shard      = sh->id;
			r->offset     = off;
			r->staleness  = pull_staleness(s, sh, c->hdr->rank);
			if (how == PS_PLAN_FULL) {
				r->kind  = PSWIRE__SHARD_KIND__SHARD_KIND_FULL;
				r->codec = COMP_NONE;
				r->version = sh->version;
				r->length  = sh->len * 4;
				r->crc     = s->job.pull_none || weights
				        ? 0
				        : sh->ref_crc;
			} else if (sh->version == have) {
				r->kind = PSWIRE__SHARD_KIND__SHARD_KIND_DELTA;
				r->codec        = s->job.cpull.id;
				r->bucket       = s->job.cpull.bucket;
				r->base_version = have;
				r->version      = have;
				r->crc          = sh->ref_crc;
			} else {
				uint64_t v    = have + j;
				uint32_t slot = (uint32_t) (v % s->log_k);
				r->kind = PSWIRE__SHARD_KIND__SHARD_KIND_DELTA;
				r->codec        = s->job.cpull.id;
				r->bucket       = s->job.cpull.bucket;
				r->base_version = v;
				r->version      = v + 1;
				r->length       = sh->log_len[slot];
				r->crc          = sh->log_crc[slot];
			}
			off += r->length;
		}
	}
	rep.n_shards = nrefs;
	rep.shards   = ptrs;
	h.request_id = c->hdr->request_id;
	h.epoch      = s->pl->epoch;
	h.body_case  = PSWIRE__HEADER__BODY_PULL_REP;
	h.pull_rep   = &rep;
	hl           = pswire__header__get_packed_size(&h);
	// A push-pull's request is about as large as its reply: answer in the
	// request's own buffer (no allocation, no zeroing). The request's
	// bytes are no longer needed: the pushes were decoded on arrival.
	m = ps__call_take_req(c);
	if (m == NULL || psw_msg_reuse(m, hl, off, &payload) != FB_OK) {
		nng_msg_free(m);
		if (psw_msg_begin(&m, hl, off, &payload) != FB_OK) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory building a pull reply");
			goto done;
		}
	}
	for (size_t i = 0; i < nrefs; i++) {
		Pswire__ShardRef *r  = &refs[i];
		struct srv_shard *sh = &s->shards[r->shard];
		// Little-endian hosts only (checked at start-up): fp32
		// payloads are the arrays' bytes.
		if (r->kind == PSWIRE__SHARD_KIND__SHARD_KIND_FULL) {
			memcpy(payload + r->offset,
			    s->job.pull_none || weights ? sh->x : sh->ref,
			    r->length);
		} else if (r->length > 0) {
			uint32_t slot = (uint32_t) (r->base_version %
			    s->log_k);
			memcpy(payload + r->offset,
			    sh->log + (size_t) slot * sh->log_cap, r->length);
		}
	}
	if (psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h.base, hl,
	        off) != FB_OK) {
		nng_msg_free(m);
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "pull reply header of %zu bytes (%zu shard refs) exceeds "
		    "the %u-byte cap",
		    hl, nrefs, PSW_MAX_HEADER);
		goto done;
	}
	atomic_fetch_add_explicit(&s->bytes_out, nng_msg_len(m),
	    memory_order_relaxed);
	atomic_fetch_add_explicit(&s->n_pull, 1, memory_order_relaxed);
	ps__call_reply_msg(c, m);
done:
	if (refs != refs_stack) {
		fb_free(refs);
		fb_free(ptrs);
	}
}

// call_ready reports whether every shard of call c reached the version it
// waits for (c->park_version; shard_ready). mu held.
static int
call_ready(struct ps_server *s, const struct ps_call *c)
{
	size_t   n     = ps__call_n_shards(c);
	int      ready = 1, full;
	uint64_t have;
	for (size_t i = 0; i < n && ready; i++) {
		uint32_t id = ps__call_shard(c, i, &have, &full);
		ready       = shard_ready(s, c, id, c->park_version);
	}
	return ready;
}

void
ps__pull_wake(struct ps_server *s)
{
	struct ps_call **pp = &s->parked;
	while (*pp != NULL) {
		struct ps_call *c = *pp;
		s->park_checks++;
		if (call_ready(s, c)) {
			*pp = c->next;
			answer_pull(s, c);
		} else {
			pp = &c->next;
		}
	}
}

void
ps__pull_or_park(struct ps_server *s, struct ps_call *c, uint64_t want)
{
	// Every parked call expires, at its deadline or park_max_ms from
	// now, whichever comes first: a call without a deadline must not
	// hold its context (and its request's memory) for ever.
	uint64_t cap = fb_clock_ms() + s->opts.park_max_ms;
	if (c->deadline == 0 || c->deadline > cap) {
		c->deadline = cap;
	}
	c->park_version = want;
	// Only c is new here: the other parked calls wait for a version to
	// move (the caller wakes them when one did), so c alone is checked.
	s->park_checks++;
	if (call_ready(s, c)) {
		answer_pull(s, c);
		return;
	}
	c->next   = s->parked;
	s->parked = c;
}

// pull_join joins the caller's rank to this server's sync rounds at
// p->join_version J (store.c's JOINS) once every shard the pull lists
// can take it there: none is past J (OUT_OF_RANGE: that round closed
// without it; pull the versions again and join at the newest), none has
// the rank's push for J in already (a previous process of the rank
// pushed it: OUT_OF_RANGE, join at the next round) and J is at most the
// next version (FAILED_PRECONDITION, as a pull's version). A refused join
// changes nothing. mu held, the shards checked. Returns 0 or replies and
// returns -1.
static int
pull_join(struct ps_server *s, struct ps_call *c, const Pswire__PullRequest *p)
{
	uint32_t rank = c->hdr->rank;
	uint64_t J    = p->join_version;
	if (rank >= s->trainers) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "join: rank %u out of range: job has %u trainers", rank,
		    s->trainers);
		return -1;
	}
	if (s->gone[rank]) {
		// The map that adds it is not applied here yet.
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "join: rank %u is not in the job under map epoch %llu "
		    "here; retry",
		    rank, (unsigned long long) s->pl->epoch);
		return -1;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		const struct srv_shard *sh = &s->shards[p->shards[i]];
		if (J > sh->version + 1) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__FAILED_PRECONDITION,
			    "join: shard %u is at version %llu; version %llu "
			    "cannot exist before %llu is pushed",
			    sh->id, (unsigned long long) sh->version,
			    (unsigned long long) J,
			    (unsigned long long) sh->version);
			return -1;
		}
		if (J < sh->version ||
		    (J == sh->version && sh->state[rank] != PS_SLOT_FREE)) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__OUT_OF_RANGE,
			    "join: shard %u is at version %llu%s, past join "
			    "version %llu: pull the versions and join at the "
			    "newest",
			    sh->id, (unsigned long long) sh->version,
			    J < sh->version ? "" : " with this rank's push in",
			    (unsigned long long) J);
			return -1;
		}
	}
	ps__rank_join(s, rank, J);
	return 0;
}

// join_want is the version a join pull at J waits for: J, unless a listed
// shard's open round already waits for the rank (it was expected there,
// not pending: a process restarted under a rank that was never marked
// gone, whose old process pushed some shards of a round and not others).
// Waiting for J there would wait for the rank's own push: answer at the
// shards' versions instead, and its next push joins them as before. mu
// held.
static uint64_t
join_want(const struct ps_server *s, const Pswire__PullRequest *p,
    uint32_t rank)
{
	uint64_t want = p->join_version;
	for (size_t i = 0; i < p->n_shards; i++) {
		const struct srv_shard *sh = &s->shards[p->shards[i]];
		if (sh->version < want &&
		    ps__rank_waited(s, rank, sh->version) &&
		    sh->state[rank] == PS_SLOT_FREE) {
			want = sh->version;
		}
	}
	return want;
}

void
ps__on_pull(struct ps_server *s, struct ps_call *c)
{
	Pswire__PullRequest *p;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_PULL_REQ) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Pull needs a pull_req body");
		return;
	}
	p = c->hdr->pull_req;
	// Only trainer r joins rank r to the rounds.
	if (p->join &&
	    !ps__call_acts_as(c, PSW_ROLE_TRAINER, c->hdr->rank, 0)) {
		return;
	}
	atomic_fetch_add_explicit(&s->bytes_in, nng_msg_len(c->req),
	    memory_order_relaxed);
	if (c->frame.payload_len != 0) {
		// A parked Pull would hold its message: nothing to carry.
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Pull carries no payload; this one has %u bytes",
		    c->frame.payload_len);
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (p->n_shards == 0 || p->n_shards > s->n_global) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "pull lists %zu shards; the job has %zu", p->n_shards,
		    s->n_global);
		goto out;
	}
	if (s->job.ssp && c->hdr->rank >= s->trainers) {
		// An SSP read is gated on the caller's own clock.
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "rank %u out of range: job has %u trainers", c->hdr->rank,
		    s->trainers);
		goto out;
	}
	s->stamp++;
	for (size_t i = 0; i < p->n_shards; i++) {
		uint32_t id = p->shards[i];
		if (ps__server_own_shard(s, c, id, c->hdr->epoch) != 0) {
			goto out;
		}
		struct srv_shard *sh = &s->shards[id];
		if (sh->seen == s->stamp) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u listed twice", id);
			goto out;
		}
		sh->seen = s->stamp;
		if (s->job.mode == PSWIRE__MODE__MODE_SYNC &&
		    p->version > sh->version + 1) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__FAILED_PRECONDITION,
			    "shard %u: pull for version %llu, which cannot exist "
			    "before version %llu is pushed",
			    id, (unsigned long long) p->version,
			    (unsigned long long) sh->version);
			goto out;
		}
	}
	uint64_t want = s->job.mode == PSWIRE__MODE__MODE_SYNC ? p->version
	                                                       : 0;
	if (p->join && s->job.mode == PSWIRE__MODE__MODE_SYNC) {
		if (pull_join(s, c, p) != 0) {
			goto out;
		}
		// The join's version replaces the pull's (libferry sends J as
		// both).
		want = join_want(s, p, c->hdr->rank);
	}
	ps__pull_or_park(s, c, want);
out:
	pthread_mutex_unlock(&s->mu);
}

void
ps__pull_pipe_gone(void *arg, uint32_t pipe)
{
	struct ps_server *s = arg;
	pthread_mutex_lock(&s->mu);
	for (struct ps_call *c = s->parked; c != NULL; c = c->next) {
		if (atomic_load_explicit(&c->pipe, memory_order_relaxed) ==
		    pipe) {
			ps__shard_unborrow(s, c); // its request goes
		}
	}
	int n = ps__call_list_drop_pipe(&s->parked, pipe) +
	    ps__call_list_drop_pipe(&s->rows_parked, pipe);
	atomic_fetch_add_explicit(&s->n_err, (uint64_t) n,
	    memory_order_relaxed);
	pthread_mutex_unlock(&s->mu);
}

void
ps__pull_abort_all(struct ps_server *s, uint64_t epoch)
{
	while (s->parked != NULL || s->rows_parked != NULL) {
		struct ps_call **pp = s->parked != NULL ? &s->parked
		                                        : &s->rows_parked;
		struct ps_call  *c  = *pp;
		*pp                 = c->next;
		ps__shard_unborrow(s, c);
		ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
		    "the job rolled back to a snapshot (epoch %llu): fetch "
		    "the new map",
		    (unsigned long long) epoch);
	}
}

void
ps__pull_abort_leaving(struct ps_server *s, uint64_t epoch)
{
	struct ps_call **pp = &s->parked;
	while (*pp != NULL) {
		struct ps_call *c     = *pp;
		int             moved = 0;
		for (size_t i = 0; i < s->n_global && !moved; i++) {
			moved = s->local[i] == PS_SHARD_LEAVING &&
			    call_touches(c, (uint32_t) i);
		}
		if (!moved) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		// Its push still counts (Transfer), unless withdrawn.
		if (ps__shard_unborrow(s, c) > 0) {
			ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
			    "out of memory: push withdrawn; send it again");
		} else if (c->frame.method == PSWIRE__METHOD__PUSH_PULL) {
			ps__server_reply_err(s, c, PSWIRE__STATUS__ABORTED,
			    "push applied; its shards moved (epoch %llu): "
			    "pull from the new server",
			    (unsigned long long) epoch);
		} else {
			ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
			    "shards moved (epoch %llu): pull from the new "
			    "server",
			    (unsigned long long) epoch);
		}
	}
}

// At most this many stuck-round lines per sweep (the rest wait for the
// next one, 100 ms later).
#define STALL_LINES 4

// stall_due reports whether held shard sh's round has waited longer than
// lim ms and was not reported yet (now: fb_clock_ns). mu held.
static int
stall_due(struct srv_shard *sh, uint64_t now, uint64_t lim)
{
	if (!sh->init || sh->n_pushed == 0 ||
	    sh->stall_warned == sh->version + 1) {
		return 0;
	}
	if (sh->round_t0 == 0) {
		sh->round_t0 = now; // arrived with pushes staged: start here
		return 0;
	}
	return now - sh->round_t0 >= lim * 1000000u;
}

// same_round reports whether shards a and b are at one version and have
// the same ranks pushed. mu held.
static int
same_round(const struct ps_server *s, const struct srv_shard *a,
    const struct srv_shard *b)
{
	if (a->version != b->version) {
		return 0;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if ((a->state[r] == PS_SLOT_PUSHED) !=
		    (b->state[r] == PS_SLOT_PUSHED)) {
			return 0;
		}
	}
	return 1;
}

// wall_time writes the UTC time `ago_ms` before now as ISO 8601 with ms.
static void
wall_time(uint64_t ago_ms, char *buf, size_t len)
{
	struct timespec ts;
	struct tm       tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t ms = (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000 -
	    (int64_t) ago_ms;
	time_t sec = (time_t) (ms / 1000);
	size_t n;
	gmtime_r(&sec, &tm);
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03dZ", (int) (ms % 1000));
}

// stall_scan formats a line into lines[] for each group of held shards
// whose sync round waits past --stall-warn-ms and was not reported yet,
// marks them reported, and returns the number of lines. mu held.
static int
stall_scan(struct ps_server *s, uint64_t now, // fb_clock_ns
    char lines[STALL_LINES][PS_STALL_LINE])
{
	uint64_t lim = s->opts.stall_warn_ms;
	int      k   = 0;
	if (lim == 0 || s->job.mode != PSWIRE__MODE__MODE_SYNC) {
		return 0;
	}
	for (size_t i = 0; i < s->n_global && k < STALL_LINES; i++) {
		struct srv_shard *sh = &s->shards[i];
		struct fb_ranges  ids, waiting, pushed;
		char              b_ids[160], b_wait[80], b_push[80], t0[32];
		if (s->local[i] < 0 || !stall_due(sh, now, lim)) {
			continue;
		}
		fb_ranges_init(&ids, b_ids, sizeof(b_ids));
		for (size_t j = i; j < s->n_global; j++) {
			struct srv_shard *o = &s->shards[j];
			if (s->local[j] >= 0 && stall_due(o, now, lim) &&
			    same_round(s, sh, o)) {
				fb_ranges_add(&ids, o->id);
				o->stall_warned = o->version + 1;
			}
		}
		fb_ranges_init(&waiting, b_wait, sizeof(b_wait));
		fb_ranges_init(&pushed, b_push, sizeof(b_push));
		for (uint32_t r = 0; r < s->trainers; r++) {
			if (s->gone[r]) {
				continue;
			}
			if (sh->state[r] == PS_SLOT_PUSHED) {
				fb_ranges_add(&pushed, r);
			} else if (ps__rank_waited(s, r, sh->version)) {
				fb_ranges_add(&waiting, r);
			}
		}
		wall_time((now - sh->round_t0) / 1000000u, t0, sizeof(t0));
		snprintf(lines[k++], PS_STALL_LINE,
		    "round %llu of shard(s) %s waiting %.1f s for rank(s) %s "
		    "(pushed: %s; first push at %s)",
		    (unsigned long long) sh->version, fb_ranges_end(&ids),
		    (double) (now - sh->round_t0) * 1e-9,
		    fb_ranges_end(&waiting), fb_ranges_end(&pushed), t0);
	}
	if (k > 0) {
		snprintf(s->stall_last, sizeof(s->stall_last), "%s",
		    lines[k - 1]);
		atomic_fetch_add_explicit(&s->n_stalls, (uint64_t) k,
		    memory_order_relaxed);
	}
	return k;
}

uint64_t
ps_server_stalls(struct ps_server *s, char *buf, size_t n)
{
	pthread_mutex_lock(&s->mu);
	if (n > 0) {
		snprintf(buf, n, "%s", s->stall_last);
	}
	pthread_mutex_unlock(&s->mu);
	return atomic_load_explicit(&s->n_stalls, memory_order_relaxed);
}

void *
ps__sweep_main(void *arg)
{
	struct ps_server *s = arg;
	char              lines[STALL_LINES][PS_STALL_LINE];
	while (!atomic_load(&s->closing)) {
		fb_sleep_us(100000);
		uint64_t now = fb_clock_ms();
		pthread_mutex_lock(&s->mu);
		struct ps_call **pp = &s->parked;
		while (*pp != NULL) {
			struct ps_call *c = *pp;
			if (c->deadline != 0 && c->deadline <= now) {
				*pp = c->next;
				if (ps__shard_unborrow(s, c) > 0) {
					ps__server_reply_err(s, c,
					    PSWIRE__STATUS__UNAVAILABLE,
					    "out of memory: push withdrawn; "
					    "send it again");
					continue;
				}
				ps__server_reply_err(s, c,
				    PSWIRE__STATUS__DEADLINE_EXCEEDED,
				    "version %llu not reached before the "
				    "deadline",
				    (unsigned long long) c->park_version);
			} else {
				pp = &c->next;
			}
		}
		ps__rows_sweep(s, now); // parked Rows calls (rows_park.c)
		if (ps__seed_sweep(s, now) > 0) {
			ps__pull_wake(s); // re-seeded shards opened
		}
		int n = stall_scan(s, fb_clock_ns(), lines);
		pthread_mutex_unlock(&s->mu);
		for (int i = 0; i < n; i++) {
			FB_LOG(FB_LOG_WARN, "stall", "%s", lines[i]);
		}
	}
	return NULL;
}
