// request.c — building one server's request of a round: the pull header,
// or the push body with each shard's bytes (fp32 straight from the
// caller's tensor, or codes staged once per operation with error
// feedback, or the caller's own codes), scaled first when clip_norm
// clips the step (clip_prepare, ops.c).
//
// DESIGN. fp32 gradients go straight from the caller's tensor into the
// outgoing nng message, built in the last reply from that server when it
// is large enough (psw_msg_reuse; else psw_msg_begin), so a step
// allocates and zeroes no message of its own; with a push codec the codes
// are staged once per operation (ferry__codes_stage) so that a re-sent
// request carries the same codes and the error-feedback residual moves
// once.
#include "client_impl.h"

// ferry__codes_stage encodes every shard's gradient once per operation, with
// error feedback, into c->codes: a request that must be re-sent (the
// server was not ready, or the shard moved) sends the same codes again,
// so the residual is updated exactly once.
int
ferry__codes_stage(ferry_client *c, struct xfer *x, size_t t0, size_t t1)
{
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[i];
		size_t                   out;
		int                      rv;

		if (si->tensor < t0 || si->tensor >= t1 ||
		    !ferry__frag_in(x, i)) {
			continue; // (a fragment round: the others keep their
			          // error feedback for their own rounds)
		}
		if (c->auto_push) {
			// "auto": the rung of the link to the shard's server.
			c->staged_rung[i] = c->conns[si->server].push_rung;
		}
		const struct comp_codec *codec = ferry__auto_codec(c, x, i);
		size_t                   cap   = comp_bound(codec, si->len);

		const float *g = x->g[si->tensor] + si->offset;

		if (x->clip_scale != 0 && !c->tensor_avg[si->tensor]) {
			for (size_t k = 0; k < si->len; k++) {
				c->clip[k] = g[k] * x->clip_scale;
			}
			g = c->clip;
		}
		rv = comp_ef_encode(codec, g,
		    c->resid[si->tensor] + si->offset, si->len, &c->rng,
		    c->codes + c->code_off[i], cap, &out);
		if (rv != FB_OK) {
			return ferry__fail(c, FERRY_EINVAL,
			    "gradient of "
			    "tensor %u cannot be encoded (%s): NaN or Inf?",
			    si->tensor, fb_strerror(rv));
		}
	}
	x->staged = 1;
	return FERRY_OK;
}

// pull_build finishes h as the header-only request of a pull for the
// shards in s->req. It reads only the pull part of x (the version it
// waits for, whether it is a full resync): never the push staging.
static int
pull_build(ferry_client *c, struct slot *s, const struct xfer *x,
    Pswire__Header *h, nng_msg **out)
{
	Pswire__PullRequest pl = PSWIRE__PULL_REQUEST__INIT;
	uint8_t            *payload;
	size_t              hl;
	uint64_t            have = UINT64_MAX;
	for (size_t i = 0; i < s->req_n; i++) {
		uint64_t v = c->shard_ver[s->req[i]];
		have       = v < have ? v : have;
	}
	pl.n_shards     = s->req_n;
	pl.shards       = s->req;
	pl.version      = x->pull_want;
	pl.have_version = have;
	pl.full         = x->op == OP_PULL_FULL || c->cpull.id == COMP_NONE;
	pl.join         = x->join != 0;
	pl.join_version = x->join ? x->pull_want : 0;
	pl.weights = s->pull_weights = c->auto_pull &&
	    c->conns[s->m].pull_rung == 0;
	for (size_t i = 0; i < s->req_n && !pl.full; i++) {
		// A shard never pulled has no reference to patch.
		pl.full = c->ref_at[s->req[i]] == REF_NONE;
	}
	h->body_case = PSWIRE__HEADER__BODY_PULL_REQ;
	h->pull_req  = &pl;
	hl           = pswire__header__get_packed_size(h);
	if (psw_msg_begin(out, hl, 0, &payload) != FB_OK) {
		return FB_ENOMEM;
	}
	return psw_msg_finish(*out, s->method, 0, &h->base, hl, 0);
}

// push_build finishes h as the push (or push-pull) request for the
// shards in s->req, with one ShardRef and the bytes per shard.
static int
push_build(ferry_client *c, struct slot *s, struct xfer *x, Pswire__Header *h,
    nng_msg **out)
{
	Pswire__PushRequest pr = PSWIRE__PUSH_REQUEST__INIT;
	Pswire__ShardRef    refs_stack[64], *refs = refs_stack;
	Pswire__ShardRef   *ptr_stack[64], **ptrs = ptr_stack;
	uint8_t            *payload;
	size_t              hl, plen = 0;
	int                 rv = FB_OK;

	if (s->req_n > 64) {
		refs = fb_alloc(s->req_n * sizeof(*refs));
		ptrs = fb_alloc(s->req_n * sizeof(*ptrs));
		if (refs == NULL || ptrs == NULL) {
			rv = FB_ENOMEM;
			goto done;
		}
	}
	for (size_t i = 0; i < s->req_n; i++) {
		const Pswire__ShardInfo *si    = c->pl->shards[s->req[i]];
		const struct comp_codec *codec = ferry__auto_codec(c, x,
		    s->req[i]);
		pswire__shard_ref__init(&refs[i]);
		refs[i].shard = s->req[i];
		// Sync: every shard of a step is pushed for the one version
		// the client holds (the minimum over its shards), so a shard
		// already past it answers OUT_OF_RANGE (FERRY_EBEHIND: pull
		// and recompute) instead of taking a gradient computed on
		// older weights as its next round's (a trainer that rejoined
		// while a push of its dead process had reached only some
		// servers). Async: each shard's own version.
		// A fragment round: the fragment's version (fragment.c).
		refs[i].version = !c->lockstep ? c->shard_ver[s->req[i]]
		    : x->frag_n > 1            ? x->frag_ver
		                               : c->version;
		refs[i].codec   = codec->id;
		refs[i].bucket  = codec->bucket;
		// "auto": the server decodes the codec each ref names.
		refs[i].topk_ratio = c->auto_push ? codec->topk_ratio : 0;
		refs[i].offset     = plen;
		refs[i].length     = comp_bound(codec, si->len);
		plen += refs[i].length;
		ptrs[i] = &refs[i];
	}
	pr.n_shards  = s->req_n;
	pr.shards    = ptrs;
	pr.n_samples = x->n_samples;
	pr.init      = x->op == OP_INIT;
	pr.resend    = x->requeued != 0;
	// The lease mark (ferry_client_lease_mark) rides on every push of
	// a step, so each server that admits one can report it; an init
	// offer carries no samples.
	if (x->op != OP_INIT) {
		pr.lease_id  = c->mark_id;
		pr.lease_end = c->mark_end;
		pr.data_step = c->data_step;
	}
	pr.pull_weights = s->pull_weights = s->method ==
	        PSWIRE__METHOD__PUSH_PULL &&
	    c->auto_pull && c->conns[s->m].pull_rung == 0;
	c->conns[s->m].link_push_bytes += plen;
	h->body_case = PSWIRE__HEADER__BODY_PUSH_REQ;
	h->push_req  = &pr;
	hl           = pswire__header__get_packed_size(h);
	// A push body is about as large as the last reply from this server
	// (same shards): build it there, with no allocation and no zeroing.
	if (s->spare != NULL &&
	    psw_msg_reuse(s->spare, hl, plen, &payload) == FB_OK) {
		*out     = s->spare;
		s->spare = NULL;
	} else if ((rv = psw_msg_begin(out, hl, plen, &payload)) != FB_OK) {
		goto done;
	}
	for (size_t i = 0; i < s->req_n; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[s->req[i]];
		// fp32 goes straight from the caller's tensor; codes from the
		// staging area (see ferry__codes_stage).
		const void              *src;
		if (x->codes != NULL) {
			src = x->codes[s->req[i]];
		} else if (x->staged) {
			src = c->codes + c->code_off[s->req[i]];
		} else if (x->clip_scale != 0 && !c->tensor_avg[si->tensor]) {
			// Clipped fp32: scaled in the copy into the message.
			const float *g = x->g[si->tensor] + si->offset;
			uint8_t     *d = payload + refs[i].offset;
			for (size_t k = 0; k < si->len; k++) {
				float v = g[k] * x->clip_scale;
				memcpy(d + 4 * k, &v, 4);
			}
			continue;
		} else {
			src = x->g[si->tensor] + si->offset;
		}
		memcpy(payload + refs[i].offset, src, refs[i].length);
	}
	rv = psw_msg_finish(*out, s->method, 0, &h->base, hl, plen);
	if (rv != FB_OK) {
		nng_msg_free(*out);
	}
done:
	if (refs != refs_stack) {
		fb_free(refs);
		fb_free(ptrs);
	}
	return rv;
}

// ferry__request_build creates the message for the shards in s->req
// (method s->method): the header every request carries, then a pull's or a
// push's body.
int
ferry__request_build(ferry_client *c, struct slot *s, struct xfer *x,
    nng_msg **out)
{
	Pswire__Header h = PSWIRE__HEADER__INIT;

	h.request_id = s->rid = c->next_rid++;
	h.deadline_ms         = ferry__timeout(c);
	h.epoch               = c->pl->epoch;
	h.rank                = (uint32_t) c->opts.rank;
	if (s->method == PSWIRE__METHOD__PULL) {
		return pull_build(c, s, x, &h, out);
	}
	return push_build(c, s, x, &h, out);
}
