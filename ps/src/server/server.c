// server.c — the parameter-server role: holds the shards placement gives
// it, aggregates pushes, applies the optimizer and answers pulls.
//
// DESIGN.
// - State: one mutex (mu) guards the shard table, versions and the parked
//   list. Gradient bytes are decoded OUTSIDE the lock into a per-rank
//   staging slot that only that rank writes for that version (a push first
//   reserves its slot under the lock), so trainers decode in parallel.
// - Sync mode: when every trainer's push for version v of a shard is in,
//   the slots are summed in rank order (reproducible), divided by the total
//   samples and applied by SGD: x -= lr * sum / samples; version = v + 1.
//   Async mode: each push is applied under the lock as it arrives.
// - Pulls for a version not reached yet are parked (their nng context is
//   simply not answered) and answered when the version exists, from the
//   thread that applied the update; a sweeper thread answers parked calls
//   whose deadline passed with DEADLINE_EXCEEDED. A reply is built in its
//   request's buffer when that is large enough (a push-pull's is), so a
//   step allocates and zeroes no reply message.
// - Every length, id, version and count from the network is checked before
//   use; a bad request gets INVALID_ARGUMENT (or the precise status) and
//   changes nothing.
// - A background thread registers with the scheduler and fetches the
//   placement (until it arrives requests get UNAVAILABLE), then watches for
//   every later map epoch and moves shards (see "re-placement" below).
// - Compression (docs/algorithms.md §2.4): pushes arrive as the job's push codec
//   (or fp32 during warm-up) and are decoded into fp32. With a pull codec,
//   each shard keeps a reference `ref` that every trainer also holds; after
//   each update the server encodes d = Q(x - ref), applies ref += deq(d)
//   (comp_ref_encode) and keeps the last `log_k` encoded deltas, so a pull
//   sends the chain of deltas the trainer is missing, or the full reference
//   when it is too far behind, asks for it, or the job is in warm-up.
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "comp/comp.h"
#include "ps/ps.h"
#include "rpc.h"

// s->local[id]: the shard's index in s->shards (== id) when held here,
// else one of these.
#define PS_SHARD_ABSENT (-1)  // placed elsewhere
#define PS_SHARD_ARRIVING (-2) // placed here by a new map; state in transit
#define PS_SHARD_LEAVING (-3)  // placed elsewhere by a new map; moving out

// Pull deltas kept per shard for trainers a few versions behind: past this
// a full reference costs less than replaying (docs/algorithms.md §2.4, LOG_K).
#define PS_DELTA_LOG 4

struct srv_shard {
	uint32_t id;      // global shard id
	uint32_t tensor;
	uint64_t offset;  // elements within the tensor
	uint64_t len;     // elements
	float   *x;       // master weights
	float   *stage;   // [trainers][len] sync staging slots
	uint8_t *state;   // per rank: 0 free, 1 decoding, 2 pushed
	uint32_t n_pushed;
	uint64_t samples;
	uint64_t version;
	int      init;    // version-0 weights have arrived
	uint64_t seen;    // duplicate check stamp
	// pull reference and delta log (only with a pull codec)
	float    *ref;
	uint32_t  ref_crc;
	uint8_t  *log;      // log_k entries of log_cap bytes
	size_t    log_cap;
	uint64_t *log_base; // base version of each entry (UINT64_MAX: empty)
	uint32_t *log_crc;  // crc of ref after the entry
	size_t   *log_len;
};

struct ps_server {
	struct ps_server_opts opts;
	struct ps_rpc        *rpc;
	char                  url[256];
	pthread_mutex_t       mu;
	pthread_t             boot_thread, sweep_thread;
	atomic_int            closing;
	atomic_int            ready;
	uint32_t              index;
	Pswire__Placement    *pl;
	uint32_t              trainers;
	int                   mode;
	double                lr;
	struct srv_shard     *shards;   // mine
	uint32_t              n_shards;
	int32_t              *local;    // global id -> index in shards, or -1
	size_t                n_global;
	float                *sum;      // scratch: largest shard
	float                *scratch;  // scratch: largest shard (ref encode)
	struct comp_codec     cpush, cpull, cnone;
	int                   pull_none; // no pull codec: send x in full
	uint32_t              warmup;    // versions <= warmup are fp32
	uint32_t              log_k;
	uint64_t              stamp;
	struct ps_call       *parked;
	// stats (relaxed atomics)
	atomic_uint_fast64_t  n_push, n_pull, n_err, bytes_in, bytes_out;
	atomic_uint_fast64_t  n_applied;
	atomic_int            transfers; // shards packed, not yet delivered
	int                   late;      // joined a running job
	uint8_t              *gone;      // [trainers] ranks that left
	uint64_t              started_ms;
};

// ---- helpers ---------------------------------------------------------------

// all_finite reports whether n floats at p (any alignment: payload bytes)
// hold no NaN or Inf. Written on the bits so that it vectorises.
static int
all_finite(const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, b + 4 * i, 4);
		bad |= (u & 0x7f800000u) == 0x7f800000u;
	}
	return !bad;
}

// copy_finite copies n floats from payload bytes p to dst and reports
// whether they hold no NaN or Inf: an fp32 push staged and checked in one
// pass over the bytes instead of two.
static int
copy_finite(float *dst, const void *p, size_t n)
{
	const uint8_t *b   = p;
	uint32_t       bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, b + 4 * i, 4);
		bad |= (u & 0x7f800000u) == 0x7f800000u;
		memcpy(dst + i, &u, 4);
	}
	return !bad;
}

static void
reply_err(struct ps_server *s, struct ps_call *c, int status,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void
reply_err(struct ps_server *s, struct ps_call *c, int status, const char *fmt,
    ...)
{
	char    msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add_explicit(&s->n_err, 1, memory_order_relaxed);
	ps__call_reply_err(c, status, "%s", msg);
}

// shards_ready reports whether every shard listed reached version want.
static int
shards_ready(struct ps_server *s, const uint32_t *ids, size_t n,
    uint64_t want)
{
	for (size_t i = 0; i < n; i++) {
		struct srv_shard *sh = &s->shards[ids[i]];
		if (!sh->init || sh->version < want) {
			return 0;
		}
	}
	return 1;
}

// The i-th shard of a pull or push-pull call, with the version of the
// reference the caller holds and whether it asked for a full resync.
static uint32_t
call_shard(const struct ps_call *c, size_t i, uint64_t *have, int *full)
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

static size_t
call_n_shards(const struct ps_call *c)
{
	return c->hdr->body_case == PSWIRE__HEADER__BODY_PULL_REQ
	    ? c->hdr->pull_req->n_shards
	    : c->hdr->push_req->n_shards;
}

enum { PLAN_FULL, PLAN_CHAIN };

// plan decides how to bring a caller holding version `have` up to the
// shard's version: the chain of logged deltas when they are all there,
// else the full reference. *nrefs and *bytes receive its size. mu held.
static int
plan(const struct ps_server *s, const struct srv_shard *sh, uint64_t have,
    int full, size_t *nrefs, size_t *bytes)
{
	uint64_t cur = sh->version;
	if (!s->pull_none && !full && have <= cur && cur - have <= s->log_k) {
		size_t b = 0;
		int    ok = 1;
		for (uint64_t v = have; v < cur && ok; v++) {
			uint32_t slot = (uint32_t) (v % s->log_k);
			ok            = sh->log_base[slot] == v;
			b += sh->log_len[slot];
		}
		if (ok) {
			*nrefs = cur > have ? (size_t) (cur - have) : 1;
			*bytes = b;
			return PLAN_CHAIN;
		}
	}
	*nrefs = 1;
	*bytes = sh->len * 4;
	return PLAN_FULL;
}

// answer_pull replies with what each of the call's shards needs: the full
// weights (no pull codec), the full reference, or the chain of deltas from
// the caller's version. mu held; every shard is ready.
static void
answer_pull(struct ps_server *s, struct ps_call *c)
{
	size_t            n = call_n_shards(c), nrefs = 0, off = 0, hl;
	Pswire__Header    h   = PSWIRE__HEADER__INIT;
	Pswire__PullReply rep = PSWIRE__PULL_REPLY__INIT;
	Pswire__ShardRef  refs_stack[64], *refs = refs_stack;
	Pswire__ShardRef *ptr_stack[64], **ptrs = ptr_stack;
	nng_msg          *m;
	uint8_t          *payload;
	uint64_t          have;
	int               full;

	for (size_t i = 0; i < n; i++) {
		uint32_t          id = call_shard(c, i, &have, &full);
		struct srv_shard *sh = &s->shards[id];
		size_t            k, b;
		plan(s, sh, have, full, &k, &b);
		nrefs += k;
	}
	if (nrefs > 64) {
		// Rare (many shards or long chains): one allocation per reply.
		refs = fb_alloc(nrefs * sizeof(*refs));
		ptrs = fb_alloc(nrefs * sizeof(*ptrs));
		if (refs == NULL || ptrs == NULL) {
			fb_free(refs);
			fb_free(ptrs);
			reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory building a pull reply");
			return;
		}
	}
	nrefs = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t          id = call_shard(c, i, &have, &full);
		struct srv_shard *sh = &s->shards[id];
		size_t            k, b;
		int               how = plan(s, sh, have, full, &k, &b);
		for (size_t j = 0; j < k; j++) {
			Pswire__ShardRef *r = &refs[nrefs];
			pswire__shard_ref__init(r);
			ptrs[nrefs++] = r;
			r->shard      = sh->id;
			r->offset     = off;
			if (how == PLAN_FULL) {
				r->kind    = PSWIRE__SHARD_KIND__SHARD_KIND_FULL;
				r->codec   = COMP_NONE;
				r->version = sh->version;
				r->length  = sh->len * 4;
				r->crc     = s->pull_none ? 0 : sh->ref_crc;
			} else if (sh->version == have) {
				r->kind         = PSWIRE__SHARD_KIND__SHARD_KIND_DELTA;
				r->codec        = s->cpull.id;
				r->bucket       = s->cpull.bucket;
				r->base_version = have;
				r->version      = have;
				r->crc          = sh->ref_crc;
			} else {
				uint64_t v    = have + j;
				uint32_t slot = (uint32_t) (v % s->log_k);
				r->kind         = PSWIRE__SHARD_KIND__SHARD_KIND_DELTA;
				r->codec        = s->cpull.id;
				r->bucket       = s->cpull.bucket;
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
			reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
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
			memcpy(payload + r->offset, s->pull_none ? sh->x : sh->ref,
			    r->length);
		} else if (r->length > 0) {
			uint32_t slot = (uint32_t) (r->base_version % s->log_k);
			memcpy(payload + r->offset,
			    sh->log + (size_t) slot * sh->log_cap, r->length);
		}
	}
	psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h.base, hl, off);
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

// wake answers every parked call whose shards are ready. mu held.
static void
wake(struct ps_server *s)
{
	struct ps_call **pp = &s->parked;
	while (*pp != NULL) {
		struct ps_call *c = *pp;
		size_t          n = call_n_shards(c);
		int             ready = 1, full;
		uint64_t        have;
		for (size_t i = 0; i < n && ready; i++) {
			uint32_t id = call_shard(c, i, &have, &full);
			ready = shards_ready(s, &id, 1, c->park_version);
		}
		if (ready) {
			*pp = c->next;
			answer_pull(s, c);
		} else {
			pp = &c->next;
		}
	}
}

// pull_or_park answers c now if its shards reached want, else parks it.
// mu held.
static void
pull_or_park(struct ps_server *s, struct ps_call *c, uint64_t want)
{
	c->park_version = want;
	c->next         = s->parked;
	s->parked       = c;
	wake(s);
}

static void
log_reset(struct ps_server *s, struct srv_shard *sh)
{
	for (uint32_t k = 0; k < s->log_k; k++) {
		sh->log_base[k] = UINT64_MAX;
	}
}

// publish_version updates the pull reference after sh->x changed and
// sh->version advanced. mu held.
static void
publish_version(struct ps_server *s, struct srv_shard *sh)
{
	if (s->pull_none) {
		return;
	}
	if (sh->version > s->warmup) {
		uint64_t base = sh->version - 1;
		uint32_t slot = (uint32_t) (base % s->log_k);
		size_t   n;
		int      rv = comp_ref_encode(&s->cpull, sh->x, sh->ref, sh->len,
		         s->scratch, sh->log + (size_t) slot * sh->log_cap,
		         sh->log_cap, &n);
		if (rv == FB_OK) {
			sh->ref_crc        = fb_crc32(0, sh->ref, sh->len * 4);
			sh->log_base[slot] = base;
			sh->log_len[slot]  = n;
			sh->log_crc[slot]  = sh->ref_crc;
			return;
		}
		FB_LOG(FB_LOG_WARN, "store", "shard %u: pull delta encode "
		    "failed (%s); trainers resync in full", sh->id,
		    fb_strerror(rv));
	}
	// Warm-up (or encode failure): the reference is the weights.
	memcpy(sh->ref, sh->x, sh->len * 4);
	sh->ref_crc = fb_crc32(0, sh->ref, sh->len * 4);
	log_reset(s, sh);
}

// complete reports whether every trainer still in the job has pushed the
// shard's current version. mu held.
static int
complete(const struct ps_server *s, const struct srv_shard *sh)
{
	if (sh->n_pushed == 0) {
		return 0;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (!s->gone[r] && sh->state[r] != 2) {
			return 0;
		}
	}
	return 1;
}

// apply_sync sums the staged pushes in rank order and applies SGD. mu held.
static void
apply_sync(struct ps_server *s, struct srv_shard *sh)
{
	size_t       n     = sh->len;
	float        scale = (float) (s->lr / (double) sh->samples);
	const float *g[2];
	uint32_t     k = 0;
	// Rank order, over the ranks that pushed (all of them, unless a
	// trainer left the job). One or two pushers (the common case here) are
	// summed and applied in one pass; more are summed into s->sum first.
	// Either way each element is ((g0 + g1) + g2) + ..., then
	// x -= scale * sum: the same floats, so runs are reproducible.
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] != 2) {
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
	if (k == 1) {
		for (size_t i = 0; i < n; i++) {
			sh->x[i] -= scale * g[0][i];
		}
	} else if (k == 2) {
		for (size_t i = 0; i < n; i++) {
			sh->x[i] -= scale * (g[0][i] + g[1][i]);
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			sh->x[i] -= scale * s->sum[i];
		}
	}
	sh->version++;
	publish_version(s, sh);
	sh->n_pushed = 0;
	sh->samples  = 0;
	memset(sh->state, 0, s->trainers);
	atomic_fetch_add_explicit(&s->n_applied, 1, memory_order_relaxed);
}

// ---- request handlers -----------------------------------------------------

// own checks that shard id can be served here for a request made with
// placement epoch `epoch`; otherwise replies the status that tells the
// client what to do (STALE_EPOCH: fetch the new map; UNAVAILABLE: retry;
// INVALID_ARGUMENT: a bug or a hostile peer) and returns -1. mu held.
static int
own(struct ps_server *s, struct ps_call *c, uint32_t id, uint64_t epoch)
{
	uint64_t mine = s->pl->epoch;
	if (id >= s->n_global) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u does not exist (the job has %zu)", id,
		    s->n_global);
		return -1;
	}
	if (s->local[id] >= 0) {
		return 0; // held: served whatever map the client uses
	}
	if (s->local[id] == PS_SHARD_ARRIVING || epoch > mine) {
		reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "shard %u is moving here (epoch %llu); retry", id,
		    (unsigned long long) mine);
	} else if (epoch < mine) {
		reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
		    "shard %u moved: request uses placement epoch %llu, "
		    "current is %llu", id, (unsigned long long) epoch,
		    (unsigned long long) mine);
	} else {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u is not placed on this server", id);
	}
	return -1;
}

static const struct comp_codec *
push_codec(const struct ps_server *s, const Pswire__ShardRef *r)
{
	return r->codec == COMP_NONE ? &s->cnone : &s->cpush;
}

// check_refs validates a push's shard references against the map and the
// payload. mu held. Returns 0 or replies an error and returns -1.
static int
check_refs(struct ps_server *s, struct ps_call *c, Pswire__PushRequest *p)
{
	uint64_t plen = c->frame.payload_len;
	if (p->n_shards == 0 || p->n_shards > s->n_global) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "push lists %zu shards; the job has %zu", p->n_shards,
		    s->n_global);
		return -1;
	}
	s->stamp++;
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r = p->shards[i];
		if (own(s, c, r->shard, c->hdr->epoch) != 0) {
			return -1;
		}
		struct srv_shard *sh = &s->shards[r->shard];
		if (sh->seen == s->stamp) {
			reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u listed twice", r->shard);
			return -1;
		}
		sh->seen = s->stamp;
		if (r->codec != COMP_NONE && (p->init ||
		                                 r->codec != s->cpush.id)) {
			reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: codec %u (%s) is not this job's push "
			    "codec %s", r->shard, r->codec,
			    comp_codec_name(r->codec),
			    comp_codec_name(s->cpush.id));
			return -1;
		}
		size_t want = comp_bound(push_codec(s, r), sh->len);
		if (r->length != want) {
			reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: %llu payload bytes, expected %zu for "
			    "%s", r->shard, (unsigned long long) r->length,
			    want, comp_codec_name(r->codec));
			return -1;
		}
		if (r->offset > plen || r->length > plen - r->offset) {
			reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u: bytes [%llu, +%llu) outside the %llu-byte "
			    "payload", r->shard, (unsigned long long) r->offset,
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
		// Payload offsets need not be aligned: copy first, check after.
		if (!sh->init) {
			memcpy(sh->x, v, sh->len * 4);
			if (!all_finite(sh->x, sh->len)) {
				memset(sh->x, 0, sh->len * 4);
				reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
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
			publish_version(s, sh);
		}
	}
	wake(s);
	ps__call_reply(c, &h);
}

static void
on_push(struct ps_server *s, struct ps_call *c)
{
	Pswire__PushRequest *p;
	uint32_t             rank = c->hdr->rank;
	int                  is_pp = c->frame.method == PSWIRE__METHOD__PUSH_PULL;
	uint64_t             want  = 0;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_PUSH_REQ) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "%s needs a push_req body", psw_method_name(c->frame.method));
		return;
	}
	p = c->hdr->push_req;
	atomic_fetch_add_explicit(&s->bytes_in, nng_msg_len(c->req),
	    memory_order_relaxed);
	pthread_mutex_lock(&s->mu);
	if (check_refs(s, c, p) != 0) {
		goto out;
	}
	if (p->init) {
		if (is_pp) {
			reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "an init offer must use Push, not PushPull");
			goto out;
		}
		on_init(s, c, p);
		goto out;
	}
	if (rank >= s->trainers) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "rank %u out of range: job has %u trainers", rank,
		    s->trainers);
		goto out;
	}
	if (s->gone[rank]) {
		// It left; if it is rejoining, the map saying so is on its
		// way: the client retries.
		reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "rank %u is not in the job (left, or rejoining)", rank);
		goto out;
	}
	if (p->n_samples == 0 || p->n_samples > (1u << 30)) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "n_samples %u not in 1..2^30", p->n_samples);
		goto out;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		Pswire__ShardRef *r  = p->shards[i];
		struct srv_shard *sh = &s->shards[r->shard];
		if (!sh->init) {
			reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
			    "shard %u has no initial weights yet", r->shard);
			goto out;
		}
		if (s->mode == PSWIRE__MODE__MODE_SYNC) {
			if (r->version != sh->version) {
				// Behind (a rank that rejoined while a round
				// finished without it): pull and recompute.
				reply_err(s, c, r->version < sh->version
				        ? PSWIRE__STATUS__OUT_OF_RANGE
				        : PSWIRE__STATUS__FAILED_PRECONDITION,
				    "shard %u: push for version %llu but the "
				    "shard is at version %llu", r->shard,
				    (unsigned long long) r->version,
				    (unsigned long long) sh->version);
				goto out;
			}
			if (sh->state[rank] != 0) {
				reply_err(s, c, PSWIRE__STATUS__ALREADY_EXISTS,
				    "shard %u: rank %u already pushed version "
				    "%llu", r->shard, rank,
				    (unsigned long long) sh->version);
				goto out;
			}
		} else if (r->version > sh->version) {
			reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
			    "shard %u: push for future version %llu (at %llu)",
			    r->shard, (unsigned long long) r->version,
			    (unsigned long long) sh->version);
			goto out;
		}
	}
	if (s->mode == PSWIRE__MODE__MODE_ASYNC) {
		// Validate every shard's values before changing any, then
		// apply. fp32 is applied straight from the payload (no copy);
		// codes are decoded again to apply (cheaper than a buffer per
		// shard; async pushes are applied under the lock anyway).
		for (size_t i = 0; i < p->n_shards; i++) {
			Pswire__ShardRef *r  = p->shards[i];
			struct srv_shard *sh = &s->shards[r->shard];
			const uint8_t    *b  = c->frame.payload + r->offset;
			int rv = FB_OK, ok;
			if (r->codec == COMP_NONE) {
				ok = all_finite(b, sh->len);
			} else {
				rv = comp_decode(push_codec(s, r), b, r->length,
				    sh->len, s->sum);
				ok = rv == FB_OK && all_finite(s->sum, sh->len);
			}
			if (!ok) {
				reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
				    "shard %u: gradient is %s", r->shard,
				    rv != FB_OK ? "a corrupt code"
				                : "holding NaN or Inf");
				goto out;
			}
		}
		float scale = (float) (s->lr / (double) p->n_samples);
		for (size_t i = 0; i < p->n_shards; i++) {
			Pswire__ShardRef *r  = p->shards[i];
			struct srv_shard *sh = &s->shards[r->shard];
			const uint8_t    *b  = c->frame.payload + r->offset;
			if (r->codec == COMP_NONE) {
				for (size_t j = 0; j < sh->len; j++) {
					float g;
					memcpy(&g, b + 4 * j, 4);
					sh->x[j] -= scale * g;
				}
			} else {
				comp_decode(push_codec(s, r), b, r->length,
				    sh->len, s->sum);
				for (size_t j = 0; j < sh->len; j++) {
					sh->x[j] -= scale * s->sum[j];
				}
			}
			sh->version++;
			publish_version(s, sh);
		}
		atomic_fetch_add_explicit(&s->n_push, 1, memory_order_relaxed);
		want = 0; // async push-pull returns the newest, whatever it is
		goto reply;
	}
	// Sync: reserve this rank's slots, decode outside the lock.
	for (size_t i = 0; i < p->n_shards; i++) {
		s->shards[p->shards[i]->shard].state[rank] = 1;
	}
	pthread_mutex_unlock(&s->mu);
	int bad = -1, bad_code = 0;
	for (size_t i = 0; i < p->n_shards && bad < 0; i++) {
		Pswire__ShardRef *r    = p->shards[i];
		struct srv_shard *sh   = &s->shards[r->shard];
		float            *slot = sh->stage + (size_t) rank * sh->len;
		if (r->codec == COMP_NONE) { // length checked in check_refs
			if (!copy_finite(slot, c->frame.payload + r->offset,
			        sh->len)) {
				bad = (int) i;
			}
		} else if (comp_decode(push_codec(s, r),
		               c->frame.payload + r->offset, r->length,
		               sh->len, slot) != FB_OK) {
			bad      = (int) i;
			bad_code = 1;
		} else if (!all_finite(slot, sh->len)) {
			bad = (int) i;
		}
	}
	pthread_mutex_lock(&s->mu);
	if (bad >= 0) {
		for (size_t i = 0; i < p->n_shards; i++) {
			s->shards[p->shards[i]->shard].state[rank] = 0;
		}
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u: gradient is %s", p->shards[bad]->shard,
		    bad_code ? "a corrupt code" : "holding NaN or Inf");
		goto out;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		struct srv_shard *sh = &s->shards[p->shards[i]->shard];
		sh->state[rank]      = 2;
		sh->n_pushed++;
		sh->samples += p->n_samples;
		want = sh->version + 1;
		if (complete(s, sh)) {
			apply_sync(s, sh);
		}
	}
	atomic_fetch_add_explicit(&s->n_push, 1, memory_order_relaxed);
reply:
	if (is_pp) {
		pull_or_park(s, c, want);
	} else {
		Pswire__Header h = PSWIRE__HEADER__INIT;
		ps__call_reply(c, &h);
	}
	wake(s);
out:
	pthread_mutex_unlock(&s->mu);
}

static void
on_pull(struct ps_server *s, struct ps_call *c)
{
	Pswire__PullRequest *p;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_PULL_REQ) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Pull needs a pull_req body");
		return;
	}
	p = c->hdr->pull_req;
	atomic_fetch_add_explicit(&s->bytes_in, nng_msg_len(c->req),
	    memory_order_relaxed);
	pthread_mutex_lock(&s->mu);
	if (p->n_shards == 0 || p->n_shards > s->n_global) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "pull lists %zu shards; the job has %zu", p->n_shards,
		    s->n_global);
		goto out;
	}
	s->stamp++;
	for (size_t i = 0; i < p->n_shards; i++) {
		uint32_t id = p->shards[i];
		if (own(s, c, id, c->hdr->epoch) != 0) {
			goto out;
		}
		struct srv_shard *sh = &s->shards[id];
		if (sh->seen == s->stamp) {
			reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "shard %u listed twice", id);
			goto out;
		}
		sh->seen = s->stamp;
		if (s->mode == PSWIRE__MODE__MODE_SYNC &&
		    p->version > sh->version + 1) {
			reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
			    "shard %u: pull for version %llu, which cannot exist "
			    "before version %llu is pushed", id,
			    (unsigned long long) p->version,
			    (unsigned long long) sh->version);
			goto out;
		}
	}
	pull_or_park(s, c, s->mode == PSWIRE__MODE__MODE_SYNC ? p->version : 0);
out:
	pthread_mutex_unlock(&s->mu);
}

static void
on_stats(struct ps_server *s, struct ps_call *c)
{
	char text[2048];
	ps_server_stats(s, text, sizeof(text));
	ps__call_reply_stats(c, text);
}

// Probe answers before the job starts (trainers measure links to decide
// the placement): the request payload is discarded, the reply carries
// reply_bytes of zeros (at most PS_PROBE_MAX, small enough that a flood of
// probes cannot make the server allocate much), so either direction can
// be timed.
#define PS_PROBE_MAX (16u << 20)

static void
on_probe(struct ps_server *s, struct ps_call *c)
{
	Pswire__Header h     = PSWIRE__HEADER__INIT;
	uint64_t       bytes = 0;
	nng_msg       *m;
	uint8_t       *payload;
	size_t         hl;

	if (c->hdr->body_case == PSWIRE__HEADER__BODY_PROBE_REQ) {
		bytes = c->hdr->probe_req->reply_bytes;
	}
	if (bytes > PS_PROBE_MAX) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "probe reply of %llu bytes exceeds the %u cap",
		    (unsigned long long) bytes, PS_PROBE_MAX);
		return;
	}
	h.request_id = c->hdr->request_id;
	hl           = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&m, hl, bytes, &payload) != FB_OK) {
		reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory for a probe reply");
		return;
	}
	memset(payload, 0, bytes);
	psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h.base, hl, bytes);
	ps__call_reply_msg(c, m);
}

static void on_transfer(struct ps_server *s, struct ps_call *c);

static void
dispatch(void *arg, struct ps_call *c)
{
	struct ps_server *s = arg;
	int               method = c->frame.method;

	if (method == PSWIRE__METHOD__STATS) {
		on_stats(s, c);
		return;
	}
	if (method == PSWIRE__METHOD__PROBE) {
		on_probe(s, c);
		return;
	}
	if (method != PSWIRE__METHOD__PUSH && method != PSWIRE__METHOD__PULL &&
	    method != PSWIRE__METHOD__PUSH_PULL &&
	    method != PSWIRE__METHOD__TRANSFER) {
		reply_err(s, c, PSWIRE__STATUS__UNIMPLEMENTED,
		    "method %d (%s) is not served by a parameter server",
		    method, psw_method_name(method));
		return;
	}
	// ready goes 0 -> 1 once, after pl is installed (release order).
	if (!atomic_load(&s->ready)) {
		reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "server has no placement yet (job not started)");
		return;
	}
	if (method == PSWIRE__METHOD__PULL) {
		on_pull(s, c);
	} else if (method == PSWIRE__METHOD__TRANSFER) {
		on_transfer(s, c);
	} else {
		on_push(s, c);
	}
}

// ---- start-up: register, fetch placement, build shards ---------------------

// check_map validates a placement map from the scheduler.
static int
check_map(const Pswire__Placement *pl)
{
	Pswire__JobConfig *job = pl->job;
	if (job == NULL || pl->trainers == 0 || pl->n_shards == 0 ||
	    pl->n_shards > (1u << 24)) {
		return FB_EPROTO;
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		Pswire__ShardInfo *si = pl->shards[i];
		if (si->tensor >= job->n_tensors || si->len == 0 ||
		    si->len > (1ull << 34) ||
		    si->offset + si->len > job->tensors[si->tensor]->len ||
		    si->server >= pl->n_servers) {
			return FB_EPROTO;
		}
	}
	return FB_OK;
}

// shard_alloc gives shard sh (len elements) its buffers. mu held.
static int
shard_alloc(struct ps_server *s, struct srv_shard *sh)
{
	sh->x     = fb_zalloc(sh->len * sizeof(float));
	sh->stage = fb_alloc(sh->len * sizeof(float) * s->trainers);
	sh->state = fb_zalloc(s->trainers);
	if (sh->x == NULL || sh->stage == NULL || sh->state == NULL) {
		return FB_ENOMEM;
	}
	if (!s->pull_none) {
		sh->log_cap  = comp_bound(&s->cpull, sh->len);
		sh->ref      = fb_zalloc(sh->len * sizeof(float));
		sh->log      = fb_alloc(sh->log_cap * s->log_k + 1);
		sh->log_base = fb_alloc(s->log_k * sizeof(uint64_t));
		sh->log_crc  = fb_zalloc(s->log_k * sizeof(uint32_t));
		sh->log_len  = fb_zalloc(s->log_k * sizeof(size_t));
		if (sh->ref == NULL || sh->log == NULL || sh->log_base == NULL ||
		    sh->log_crc == NULL || sh->log_len == NULL) {
			return FB_ENOMEM;
		}
		log_reset(s, sh);
	}
	return FB_OK;
}

// shard_release frees sh's buffers and zeroes its state (keeping its
// identity: id, tensor, offset, len). mu held.
static void
shard_release(struct srv_shard *sh)
{
	fb_free(sh->x);
	fb_free(sh->stage);
	fb_free(sh->state);
	fb_free(sh->ref);
	fb_free(sh->log);
	fb_free(sh->log_base);
	fb_free(sh->log_crc);
	fb_free(sh->log_len);
	struct srv_shard keep = { .id = sh->id, .tensor = sh->tensor,
		.offset = sh->offset, .len = sh->len };
	*sh = keep;
}

// install_placement sets up the job from the first map: every shard has a
// slot (indexed by global id); the ones placed here get buffers.
static int
install_placement(struct ps_server *s, Pswire__Placement *pl)
{
	Pswire__JobConfig *job    = pl->job;
	size_t             maxlen = 1;
	int                rv;

	if (check_map(pl) != FB_OK) {
		return FB_EPROTO;
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		if (pl->shards[i]->len > maxlen) {
			maxlen = pl->shards[i]->len;
		}
	}
	s->trainers = pl->trainers;
	s->mode     = job->mode;
	s->lr       = job->lr;
	s->warmup   = job->warmup_steps;
	s->log_k    = PS_DELTA_LOG;
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
	s->n_global  = pl->n_shards;
	s->local     = fb_alloc(pl->n_shards * sizeof(*s->local));
	s->shards    = fb_zalloc(pl->n_shards * sizeof(*s->shards));
	s->sum       = fb_alloc(maxlen * sizeof(float));
	s->scratch   = fb_alloc(maxlen * sizeof(float));
	s->gone      = fb_zalloc(pl->trainers);
	if (s->local == NULL || s->shards == NULL || s->sum == NULL ||
	    s->scratch == NULL || s->gone == NULL) {
		return FB_ENOMEM;
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
		if (si->server != s->index) {
			continue;
		}
		if (s->late) {
			// A server joining a running job receives its shards
			// from their old servers (Transfer).
			s->local[i] = PS_SHARD_ARRIVING;
			continue;
		}
		if ((rv = shard_alloc(s, sh)) != FB_OK) {
			return rv;
		}
		s->local[i] = (int32_t) i;
		s->n_shards++;
	}
	s->pl = pl;
	FB_LOG(FB_LOG_NOTICE, "store",
	    "placement epoch %llu: holding %u of %zu shards, %u trainers, "
	    "mode %s, lr %g", (unsigned long long) pl->epoch, s->n_shards,
	    pl->n_shards, s->trainers, s->mode ? "async" : "sync", s->lr);
	return FB_OK;
}

// ---- re-placement: moving shards between servers -------------------------
//
// DESIGN. When the scheduler publishes a new map, the boot thread (which
// watches for maps) calls apply_map. Under the lock it marks the shards
// that leave LEAVING (new requests for them are refused with STALE_EPOCH or
// UNAVAILABLE, so clients re-fetch the map or retry), waits for pushes
// that are decoding into those shards outside the lock, then serialises
// each leaving shard with its full state (weights, pull reference, delta
// log, version and the pushes staged for the current version) and frees
// it. Parked pulls on a leaving shard are answered ABORTED ("your push was
// applied; pull again from the new server") or STALE_EPOCH. Shards that
// arrive are marked ARRIVING until their Transfer comes (requests get
// UNAVAILABLE meanwhile). Outside the lock it sends the Transfers to the
// new servers, retrying while a receiver has not seen the new map yet.
// Every push is thus applied exactly once: a refused request changed
// nothing, and the staged pushes travel with the shard.

struct peers {
	size_t      n;
	nng_socket *sock;
	nng_ctx    *ctx;
	nng_aio   **aio;
	uint8_t    *open;
	uint64_t    rid;
};

static void
peers_close(struct peers *p)
{
	for (size_t i = 0; i < p->n; i++) {
		if (p->open[i]) {
			nng_aio_free(p->aio[i]);
			nng_close(p->sock[i]);
		}
	}
	fb_free(p->sock);
	fb_free(p->ctx);
	fb_free(p->aio);
	fb_free(p->open);
	memset(p, 0, sizeof(*p));
}

// peer_get returns the index of an open REQ context to server m.
static int
peer_get(struct ps_server *s, struct peers *p, const Pswire__Placement *pl,
    size_t m)
{
	if (m >= p->n) {
		size_t n = pl->n_servers;
		nng_socket *so = fb_realloc(p->sock, n * sizeof(*so));
		if (so != NULL) {
			p->sock = so;
		}
		nng_ctx *cx = fb_realloc(p->ctx, n * sizeof(*cx));
		if (cx != NULL) {
			p->ctx = cx;
		}
		nng_aio **ai = fb_realloc(p->aio, n * sizeof(*ai));
		if (ai != NULL) {
			p->aio = ai;
		}
		uint8_t *op = fb_realloc(p->open, n);
		if (op != NULL) {
			p->open = op;
		}
		if (so == NULL || cx == NULL || ai == NULL || op == NULL) {
			return FB_ENOMEM;
		}
		memset(p->open + p->n, 0, n - p->n);
		p->n = n;
	}
	if (!p->open[m]) {
		if (psw_req_open(pl->servers[m], s->opts.max_msg, 20, 500,
		        &p->sock[m], &p->ctx[m], &p->aio[m]) != FB_OK) {
			return FB_ETRANSPORT;
		}
		p->open[m] = 1;
	}
	return FB_OK;
}

// transfer_build serialises shard sh into a Transfer message. mu held.
static int
transfer_build(struct ps_server *s, struct srv_shard *sh, nng_msg **out)
{
	Pswire__Header          h = PSWIRE__HEADER__INIT;
	Pswire__TransferRequest t = PSWIRE__TRANSFER_REQUEST__INIT;
	uint64_t                lb[PS_DELTA_LOG], ll[PS_DELTA_LOG];
	uint32_t                lc[PS_DELTA_LOG];
	size_t                  plen = sh->len * 4, hl, off = 0;
	uint8_t                *payload;

	t.shard      = sh->id;
	t.version    = sh->version;
	t.init       = sh->init != 0;
	t.samples    = sh->samples;
	t.state.len  = s->trainers;
	t.state.data = sh->state;
	if (!s->pull_none) {
		plen += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			lb[k] = sh->log_base[k];
			lc[k] = sh->log_crc[k];
			ll[k] = sh->log_base[k] == UINT64_MAX ? 0 : sh->log_len[k];
			plen += ll[k];
		}
		t.ref_crc    = sh->ref_crc;
		t.n_log_base = t.n_log_crc = t.n_log_len = s->log_k;
		t.log_base   = lb;
		t.log_crc    = lc;
		t.log_len    = ll;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		plen += sh->state[r] == 2 ? sh->len * 4 : 0;
	}
	h.epoch        = s->pl->epoch;
	h.body_case    = PSWIRE__HEADER__BODY_TRANSFER_REQ;
	h.transfer_req = &t;
	h.request_id   = 1; // the sender sets the real id
	hl = pswire__header__get_packed_size(&h) + 10;
	if (psw_msg_begin(out, hl, plen, &payload) != FB_OK) {
		return FB_ENOMEM;
	}
	memcpy(payload, sh->x, sh->len * 4);
	off = sh->len * 4;
	if (!s->pull_none) {
		memcpy(payload + off, sh->ref, sh->len * 4);
		off += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			memcpy(payload + off, sh->log + (size_t) k * sh->log_cap,
			    ll[k]);
			off += ll[k];
		}
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] == 2) {
			memcpy(payload + off, sh->stage + (size_t) r * sh->len,
			    sh->len * 4);
			off += sh->len * 4;
		}
	}
	return psw_msg_finish(*out, PSWIRE__METHOD__TRANSFER, 0, &h.base, hl,
	    plen);
}

// call_touches reports whether parked call c involves shard id.
static int
call_touches(const struct ps_call *c, uint32_t id)
{
	size_t   n = call_n_shards(c);
	uint64_t have;
	int      full;
	for (size_t i = 0; i < n; i++) {
		if (call_shard(c, i, &have, &full) == id) {
			return 1;
		}
	}
	return 0;
}

// apply_map switches to map pl (taking ownership of it on FB_OK) and
// moves shards as described above. Called from the boot thread.
static int
apply_map(struct ps_server *s, Pswire__Placement *pl, struct peers *peers)
{
	Pswire__Placement *old = s->pl;
	nng_msg          **out;
	uint32_t          *dest;
	size_t             n_out = 0;
	int                busy;

	if (check_map(pl) != FB_OK || pl->n_shards != s->n_global ||
	    pl->epoch <= old->epoch) {
		return FB_EPROTO;
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		if (pl->shards[i]->len != s->shards[i].len ||
		    pl->shards[i]->offset != s->shards[i].offset ||
		    pl->shards[i]->tensor != s->shards[i].tensor) {
			return FB_EPROTO; // shards are never re-cut
		}
	}
	out  = fb_zalloc(s->n_global * sizeof(*out));
	dest = fb_zalloc(s->n_global * sizeof(*dest));
	if (out == NULL || dest == NULL) {
		fb_free(out);
		fb_free(dest);
		return FB_ENOMEM;
	}
	pthread_mutex_lock(&s->mu);
	s->pl = pl;
	// Trainers that left (or came back): an absence may complete a round.
	memset(s->gone, 0, s->trainers);
	for (size_t k = 0; k < pl->n_gone_trainers; k++) {
		if (pl->gone_trainers[k] < s->trainers) {
			s->gone[pl->gone_trainers[k]] = 1;
		}
	}
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0 && complete(s, &s->shards[i])) {
			apply_sync(s, &s->shards[i]);
		}
	}
	wake(s);
	for (size_t i = 0; i < s->n_global; i++) {
		uint32_t to = pl->shards[i]->server;
		if (s->local[i] >= 0 && to != s->index) {
			s->local[i] = PS_SHARD_LEAVING;
		} else if (s->local[i] == PS_SHARD_ABSENT && to == s->index) {
			s->local[i] = PS_SHARD_ARRIVING;
		}
	}
	// Pushes still decoding into a leaving shard finish first.
	do {
		busy = 0;
		for (size_t i = 0; i < s->n_global && !busy; i++) {
			for (uint32_t r = 0; s->local[i] == PS_SHARD_LEAVING &&
			     r < s->trainers; r++) {
				busy |= s->shards[i].state[r] == 1;
			}
		}
		if (busy) {
			pthread_mutex_unlock(&s->mu);
			fb_sleep_us(200);
			pthread_mutex_lock(&s->mu);
		}
	} while (busy);
	// Parked calls on leaving shards cannot be answered here any more.
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
		if (c->frame.method == PSWIRE__METHOD__PUSH_PULL) {
			reply_err(s, c, PSWIRE__STATUS__ABORTED,
			    "push applied; its shards moved (epoch %llu): "
			    "pull from the new server",
			    (unsigned long long) pl->epoch);
		} else {
			reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
			    "shards moved (epoch %llu): pull from the new "
			    "server", (unsigned long long) pl->epoch);
		}
	}
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] != PS_SHARD_LEAVING) {
			continue;
		}
		struct srv_shard *sh = &s->shards[i];
		if (transfer_build(s, sh, &out[n_out]) != FB_OK) {
			// Keep the shard rather than lose it; it stays
			// served here under its old ownership.
			FB_LOG(FB_LOG_ERR, "move", "shard %zu: out of memory "
			    "serialising it; it stays here", i);
			s->local[i] = (int32_t) i;
			continue;
		}
		dest[n_out++] = pl->shards[i]->server;
		atomic_fetch_add(&s->transfers, 1);
		shard_release(sh);
		s->local[i] = PS_SHARD_ABSENT;
		s->n_shards--;
	}
	FB_LOG(FB_LOG_NOTICE, "move", "placement epoch %llu: %zu shard(s) "
	    "leave, holding %u", (unsigned long long) pl->epoch, n_out,
	    s->n_shards);
	pthread_mutex_unlock(&s->mu);
	// The old map may still be referenced by nothing now: requests read
	// s->pl under the lock only.
	pswire__placement__free_unpacked(old, NULL);

	for (size_t k = 0; k < n_out; k++) {
		uint64_t give_up = fb_clock_ms() + 60000;
		int      rv      = FB_ETRANSPORT;
		while (!atomic_load(&s->closing) && fb_clock_ms() < give_up) {
			struct psw_frame  f;
			ProtobufCMessage *ph  = NULL;
			const char       *why = "";
			nng_msg          *rep = NULL, *m;
			if ((rv = peer_get(s, peers, pl, dest[k])) != FB_OK ||
			    nng_msg_dup(&m, out[k]) != 0) {
				fb_sleep_us(100000);
				continue;
			}
			// The request id sits in the packed header; the
			// receiver echoes it, so keep the one packed (1).
			rv = psw_call(peers->ctx[dest[k]], peers->aio[dest[k]],
			    m, PSWIRE__METHOD__TRANSFER, 1, 5000, &rep, &f,
			    &ph, &why);
			Pswire__Header *rh = (Pswire__Header *) ph;
			int unavailable = rv == FB_EREMOTE &&
			    rh->status == PSWIRE__STATUS__UNAVAILABLE;
			if (rv == FB_EREMOTE && !unavailable) {
				FB_LOG(FB_LOG_ERR, "move", "transfer to server "
				    "%u refused: %s", dest[k], rh->error);
			}
			if (rh != NULL) {
				pswire__header__free_unpacked(rh, NULL);
			}
			if (rep != NULL) {
				nng_msg_free(rep);
			}
			if (rv == FB_OK || (rv == FB_EREMOTE && !unavailable)) {
				break;
			}
			fb_sleep_us(20000);
		}
		if (rv != FB_OK) {
			FB_LOG(FB_LOG_ERR, "move", "shard transfer to server %u "
			    "failed: %s", dest[k], fb_strerror(rv));
		}
		atomic_fetch_sub(&s->transfers, 1);
		nng_msg_free(out[k]);
	}
	fb_free(out);
	fb_free(dest);
	return FB_OK;
}

// on_transfer installs a shard moved here by a new map.
static void
on_transfer(struct ps_server *s, struct ps_call *c)
{
	Pswire__TransferRequest *t;
	Pswire__Header           h = PSWIRE__HEADER__INIT;
	const uint8_t           *p = c->frame.payload;
	uint64_t                 need;
	uint32_t                 pushed = 0;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_TRANSFER_REQ) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Transfer needs a transfer_req body");
		return;
	}
	t = c->hdr->transfer_req;
	pthread_mutex_lock(&s->mu);
	if (t->shard >= s->n_global) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: the job has %zu", t->shard,
		    s->n_global);
		goto out;
	}
	if (s->local[t->shard] != PS_SHARD_ARRIVING) {
		if (s->local[t->shard] == PS_SHARD_ABSENT &&
		    c->hdr->epoch > s->pl->epoch) {
			reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
			    "map epoch %llu not seen yet; retry",
			    (unsigned long long) c->hdr->epoch);
		} else {
			reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
			    "shard %u is not expected here", t->shard);
		}
		goto out;
	}
	struct srv_shard *sh = &s->shards[t->shard];
	need = sh->len * 4;
	if (t->state.len != s->trainers ||
	    (!s->pull_none && (t->n_log_base != s->log_k ||
	                          t->n_log_crc != s->log_k ||
	                          t->n_log_len != s->log_k)) ||
	    (s->pull_none && t->n_log_len != 0)) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: state for %zu ranks, log of %zu",
		    t->shard, t->state.len, t->n_log_len);
		goto out;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (t->state.data[r] != 0 && t->state.data[r] != 2) {
			reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "transfer of shard %u: bad rank state", t->shard);
			goto out;
		}
		pushed += t->state.data[r] == 2;
		need += t->state.data[r] == 2 ? sh->len * 4 : 0;
	}
	if (!s->pull_none) {
		need += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			if (t->log_len[k] > comp_bound(&s->cpull, sh->len)) {
				reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
				    "transfer of shard %u: log entry too long",
				    t->shard);
				goto out;
			}
			need += t->log_len[k];
		}
	}
	if (need != c->frame.payload_len || pushed >= s->trainers) {
		reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "transfer of shard %u: %u payload bytes, expected %llu",
		    t->shard, c->frame.payload_len, (unsigned long long) need);
		goto out;
	}
	if (shard_alloc(s, sh) != FB_OK) {
		shard_release(sh);
		reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory for shard %u", t->shard);
		goto out;
	}
	memcpy(sh->x, p, sh->len * 4);
	p += sh->len * 4;
	if (!s->pull_none) {
		memcpy(sh->ref, p, sh->len * 4);
		p += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			sh->log_base[k] = t->log_base[k];
			sh->log_crc[k]  = t->log_crc[k];
			sh->log_len[k]  = t->log_len[k];
			memcpy(sh->log + (size_t) k * sh->log_cap, p,
			    t->log_len[k]);
			p += t->log_len[k];
		}
		sh->ref_crc = t->ref_crc;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		sh->state[r] = t->state.data[r];
		if (sh->state[r] == 2) {
			memcpy(sh->stage + (size_t) r * sh->len, p, sh->len * 4);
			p += sh->len * 4;
		}
	}
	sh->version       = t->version;
	sh->init          = t->init;
	sh->samples       = t->samples;
	sh->n_pushed      = pushed;
	s->local[t->shard] = (int32_t) t->shard;
	s->n_shards++;
	FB_LOG(FB_LOG_INFO, "move", "shard %u arrived at version %llu",
	    t->shard, (unsigned long long) t->version);
	h.request_id = c->hdr->request_id;
	ps__call_reply(c, &h);
	wake(s);
out:
	pthread_mutex_unlock(&s->mu);
}

static void *
boot_main(void *arg)
{
	struct ps_server *s = arg;
	nng_socket        sock;
	nng_ctx           ctx;
	nng_aio          *aio = NULL;
	uint64_t          rid = 1;
	int               rv;
	struct peers      peers = { 0 };

	if (psw_req_open(s->opts.scheduler_url, s->opts.max_msg, 50, 1000,
	        &sock, &ctx, &aio) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "boot", "cannot dial scheduler %s",
		    s->opts.scheduler_url);
		return NULL;
	}
	// Register, then wait for the placement; retry while not closing.
	int registered = 0;
	while (!atomic_load(&s->closing)) {
		Pswire__Header          h  = PSWIRE__HEADER__INIT;
		Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
		Pswire__GetPlacementRequest gp =
		    PSWIRE__GET_PLACEMENT_REQUEST__INIT;
		ProtobufCMessage *ph  = NULL;
		const char       *why = "";
		uint8_t           method;

		h.request_id  = rid++;
		h.deadline_ms = s->opts.timeout_ms;
		if (!registered) {
			rr.role           = PSWIRE__ROLE__ROLE_SERVER;
			rr.url            = s->url;
			rr.capacity_bytes = s->opts.capacity;
			h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
			h.register_req = &rr;
			method         = PSWIRE__METHOD__REGISTER;
		} else {
			// Watch for the next map: the first (epoch 1),
			// then every re-placement.
			gp.min_epoch    = s->pl ? s->pl->epoch + 1 : 1;
			h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
			h.placement_req = &gp;
			method          = PSWIRE__METHOD__GET_PLACEMENT;
		}
		// Short timeouts so that close is noticed quickly; the
		// parked GetPlacement is simply re-sent.
		rv = psw_call_header(ctx, aio, &h.base, method, h.request_id,
		    1000, &ph, &why);
		if (rv == FB_ENOMEM) {
			break;
		}
		if (rv == FB_OK && !registered) {
			Pswire__Header *rh = (Pswire__Header *) ph;
			if (rh->body_case == PSWIRE__HEADER__BODY_REGISTER_REP) {
				s->index   = rh->register_rep->id;
				s->late    = rh->register_rep->late;
				registered = 1;
				FB_LOG(FB_LOG_NOTICE, "boot",
				    "registered as server %u", s->index);
			}
		} else if (rv == FB_OK) {
			Pswire__Header *rh = (Pswire__Header *) ph;
			if (rh->body_case == PSWIRE__HEADER__BODY_PLACEMENT) {
				Pswire__Placement *pl = rh->placement;
				rh->placement  = NULL; // keep it
				rh->body_case  = PSWIRE__HEADER__BODY__NOT_SET;
				if (s->pl == NULL) {
					pthread_mutex_lock(&s->mu);
					rv = install_placement(s, pl);
					if (rv == FB_OK) {
						atomic_store(&s->ready, 1);
					}
					pthread_mutex_unlock(&s->mu);
				} else {
					rv = apply_map(s, pl, &peers);
				}
				if (rv != FB_OK) {
					FB_LOG(FB_LOG_ERR, "boot",
					    "cannot install placement: %s",
					    fb_strerror(rv));
					pswire__placement__free_unpacked(pl,
					    NULL);
					if (s->pl == NULL) {
						break;
					}
				}
			}
		} else if (rv == FB_EREMOTE) {
			FB_LOG(FB_LOG_ERR, "boot", "scheduler refused: %s", why);
			fb_sleep_us(1000000);
		} else if (rv != FB_ETIMEDOUT) {
			fb_sleep_us(100000);
		}
		if (ph != NULL) {
			pswire__header__free_unpacked((Pswire__Header *) ph,
			    NULL);
		}
	}
	peers_close(&peers);
	nng_aio_free(aio);
	nng_close(sock);
	return NULL;
}

static void *
sweep_main(void *arg)
{
	struct ps_server *s = arg;
	while (!atomic_load(&s->closing)) {
		fb_sleep_us(100000);
		uint64_t now = fb_clock_ms();
		pthread_mutex_lock(&s->mu);
		struct ps_call **pp = &s->parked;
		while (*pp != NULL) {
			struct ps_call *c = *pp;
			if (c->deadline != 0 && c->deadline <= now) {
				*pp = c->next;
				reply_err(s, c, PSWIRE__STATUS__DEADLINE_EXCEEDED,
				    "version %llu not reached before the "
				    "deadline", (unsigned long long) c->park_version);
			} else {
				pp = &c->next;
			}
		}
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

int
ps_server_open(const struct ps_server_opts *o, struct ps_server **out)
{
	struct ps_server *s;
	int               rv;
	const uint16_t    one = 1;

	if (*(const uint8_t *) &one != 1) {
		FB_LOG(FB_LOG_ERR, "server", "big-endian hosts are unsupported");
		return FB_EUNSUPP;
	}
	if (o == NULL || o->url == NULL || o->scheduler_url == NULL ||
	    o->contexts < 1) {
		return FB_EINVAL;
	}
	if ((s = fb_zalloc(sizeof(*s))) == NULL) {
		return FB_ENOMEM;
	}
	s->opts       = *o;
	s->started_ms = fb_clock_ms();
	pthread_mutex_init(&s->mu, NULL);
	if ((rv = ps__rpc_open(o->url, o->contexts, o->max_msg, dispatch, s,
	         &s->rpc)) != FB_OK) {
		pthread_mutex_destroy(&s->mu);
		fb_free(s);
		return rv;
	}
	snprintf(s->url, sizeof(s->url), "%s",
	    o->advertise_url ? o->advertise_url : ps__rpc_url(s->rpc));
	FB_LOG(FB_LOG_NOTICE, "server", "listening on %s (advertised %s)",
	    ps__rpc_url(s->rpc), s->url);
	pthread_create(&s->boot_thread, NULL, boot_main, s);
	pthread_create(&s->sweep_thread, NULL, sweep_main, s);
	*out = s;
	return FB_OK;
}

int
ps_server_leave(struct ps_server *s, uint32_t timeout_ms)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	nng_socket           sock;
	nng_ctx              ctx;
	nng_aio             *aio = NULL;
	ProtobufCMessage    *ph  = NULL;
	const char          *why = "";
	uint64_t             end = fb_clock_ms() + timeout_ms;
	int                  rv;

	if (!atomic_load(&s->ready)) {
		return FB_ESTATE;
	}
	if (psw_req_open(s->opts.scheduler_url, 0, 0, 0, &sock, &ctx, &aio) !=
	    FB_OK) {
		return FB_ETRANSPORT;
	}
	l.role        = PSWIRE__ROLE__ROLE_SERVER;
	l.id          = s->index;
	h.request_id  = 1;
	h.deadline_ms = timeout_ms;
	h.body_case   = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req   = &l;
	// A scheduler that is gone should not hold the shutdown for long.
	rv = psw_call_header(ctx, aio, &h.base, PSWIRE__METHOD__LEAVE, 1,
	    (int) (timeout_ms < 3000 ? timeout_ms : 3000), &ph, &why);
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, "leave", "scheduler: %s", why ? why : "");
		goto done;
	}
	FB_LOG(FB_LOG_NOTICE, "leave", "leaving: moving my shards away");
	for (;;) {
		pthread_mutex_lock(&s->mu);
		// Done when nothing is held and every packed shard has been
		// delivered (closing earlier would cut the transfers short).
		uint32_t left = s->n_shards + (uint32_t) atomic_load(&s->transfers);
		pthread_mutex_unlock(&s->mu);
		if (left == 0) {
			rv = FB_OK;
			break;
		}
		if (fb_clock_ms() >= end) {
			FB_LOG(FB_LOG_ERR, "leave", "%u shard(s) still here after "
			    "%u ms", left, timeout_ms);
			rv = FB_ETIMEDOUT;
			break;
		}
		fb_sleep_us(10000);
	}
done:
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
	nng_aio_free(aio);
	nng_close(sock);
	return rv;
}

const char *
ps_server_url(const struct ps_server *s)
{
	return ps__rpc_url(s->rpc);
}

void
ps_server_stats(struct ps_server *s, char *buf, size_t n)
{
	uint64_t version = 0;
	int      parked  = 0;
	pthread_mutex_lock(&s->mu);
	for (struct ps_call *c = s->parked; c != NULL; c = c->next) {
		parked++;
	}
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0) {
			version = s->shards[i].version;
			break;
		}
	}
	snprintf(buf, n,
	    "# Server\r\nrole:server\r\nindex:%u\r\nurl:%s\r\nuptime_ms:%llu\r\n"
	    "ready:%d\r\n# Store\r\nshards:%u\r\nversion:%llu\r\nmode:%s\r\n"
	    "used_memory:%zu\r\n# Net\r\npushes:%llu\r\npulls:%llu\r\n"
	    "errors:%llu\r\nbytes_in:%llu\r\nbytes_out:%llu\r\n"
	    "updates_applied:%llu\r\nparked:%d\r\n",
	    s->index, s->url,
	    (unsigned long long) (fb_clock_ms() - s->started_ms),
	    atomic_load(&s->ready),
	    s->n_shards, (unsigned long long) version,
	    s->mode ? "async" : "sync", fb_used_memory(),
	    (unsigned long long) atomic_load(&s->n_push),
	    (unsigned long long) atomic_load(&s->n_pull),
	    (unsigned long long) atomic_load(&s->n_err),
	    (unsigned long long) atomic_load(&s->bytes_in),
	    (unsigned long long) atomic_load(&s->bytes_out),
	    (unsigned long long) atomic_load(&s->n_applied),
	    parked);
	pthread_mutex_unlock(&s->mu);
}

void
ps_server_close(struct ps_server *s)
{
	if (s == NULL) {
		return;
	}
	atomic_store(&s->closing, 1);
	pthread_join(s->boot_thread, NULL);
	pthread_join(s->sweep_thread, NULL);
	ps__rpc_close(s->rpc);
	for (size_t i = 0; s->shards != NULL && i < s->n_global; i++) {
		shard_release(&s->shards[i]);
	}
	fb_free(s->scratch);
	fb_free(s->gone);
	fb_free(s->shards);
	fb_free(s->local);
	fb_free(s->sum);
	if (s->pl != NULL) {
		pswire__placement__free_unpacked(s->pl, NULL);
	}
	pthread_mutex_destroy(&s->mu);
	fb_free(s);
}
