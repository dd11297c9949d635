// pull.c — pulls: admission of a Pull, the reply built from the pull
// reference or the weights, parking a call until the version it wants
// exists, and the deadline sweeper that answers parked calls in time.
//
// DESIGN. A call for a version not reached yet is parked: its nng context
// is simply not answered (the rpc lets a handler keep the call), and it
// goes on s->parked. Whoever advances a version (a push, an init offer, a
// map change, a Transfer) calls ps__pull_wake under mu, which answers the
// parked calls that became ready from that thread. The sweeper thread
// answers the ones whose deadline passed. A reply is built in the
// request's own buffer when that is large enough (a push-pull's is), so a
// step allocates and zeroes no reply message.
#include <string.h>

#include "server_impl.h"

// shards_ready reports whether every shard listed reached version want.
static int
shards_ready(struct ps_server *s, const uint32_t *ids, size_t n, uint64_t want)
{
	for (size_t i = 0; i < n; i++) {
		struct srv_shard *sh = &s->shards[ids[i]];
		if (!sh->init || sh->version < want) {
			return 0;
		}
	}
	return 1;
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

// answer_pull replies with what each of the call's shards needs: the full
// weights (no pull codec), the full reference, or the chain of deltas from
// the caller's version. mu held; every shard is ready.
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
	int               full;

	for (size_t i = 0; i < n; i++) {
		uint32_t          id = ps__call_shard(c, i, &have, &full);
		struct srv_shard *sh = &s->shards[id];
		size_t            k, b;
		ps__ref_plan(s, sh, have, full, &k, &b);
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
		how = ps__ref_plan(s, sh, have, full, &k, &b);
		for (size_t j = 0; j < k; j++) {
			Pswire__ShardRef *r = &refs[nrefs];
			pswire__shard_ref__init(r);
			ptrs[nrefs++] = r;
			r->shard      = sh->id;
			r->offset     = off;
			if (how == PS_PLAN_FULL) {
				r->kind  = PSWIRE__SHARD_KIND__SHARD_KIND_FULL;
				r->codec = COMP_NONE;
				r->version = sh->version;
				r->length  = sh->len * 4;
				r->crc     = s->pull_none ? 0 : sh->ref_crc;
			} else if (sh->version == have) {
				r->kind = PSWIRE__SHARD_KIND__SHARD_KIND_DELTA;
				r->codec        = s->cpull.id;
				r->bucket       = s->cpull.bucket;
				r->base_version = have;
				r->version      = have;
				r->crc          = sh->ref_crc;
			} else {
				uint64_t v    = have + j;
				uint32_t slot = (uint32_t) (v % s->log_k);
				r->kind = PSWIRE__SHARD_KIND__SHARD_KIND_DELTA;
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
			    s->pull_none ? sh->x : sh->ref, r->length);
		} else if (r->length > 0) {
			uint32_t slot = (uint32_t) (r->base_version %
			    s->log_k);
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

void
ps__pull_wake(struct ps_server *s)
{
	struct ps_call **pp = &s->parked;
	while (*pp != NULL) {
		struct ps_call *c     = *pp;
		size_t          n     = ps__call_n_shards(c);
		int             ready = 1, full;
		uint64_t        have;
		for (size_t i = 0; i < n && ready; i++) {
			uint32_t id = ps__call_shard(c, i, &have, &full);
			ready       = shards_ready(s, &id, 1, c->park_version);
		}
		if (ready) {
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
	c->park_version = want;
	c->next         = s->parked;
	s->parked       = c;
	ps__pull_wake(s);
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
	atomic_fetch_add_explicit(&s->bytes_in, nng_msg_len(c->req),
	    memory_order_relaxed);
	pthread_mutex_lock(&s->mu);
	if (p->n_shards == 0 || p->n_shards > s->n_global) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "pull lists %zu shards; the job has %zu", p->n_shards,
		    s->n_global);
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
		if (s->mode == PSWIRE__MODE__MODE_SYNC &&
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
	ps__pull_or_park(s, c,
	    s->mode == PSWIRE__MODE__MODE_SYNC ? p->version : 0);
out:
	pthread_mutex_unlock(&s->mu);
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
		if (c->frame.method == PSWIRE__METHOD__PUSH_PULL) {
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

void *
ps__sweep_main(void *arg)
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
				ps__server_reply_err(s, c,
				    PSWIRE__STATUS__DEADLINE_EXCEEDED,
				    "version %llu not reached before the "
				    "deadline",
				    (unsigned long long) c->park_version);
			} else {
				pp = &c->next;
			}
		}
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}
