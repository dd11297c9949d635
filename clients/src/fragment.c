// fragment.c — streaming local steps (issue 28, docs/libferry.md
// "Fragments"): in a job of opts.fragments = F > 1 the shards are synced
// in F fragments (global shard i is in fragment i % F), each with its own
// sync rounds: ferry_client_fragment_spans says which elements a fragment
// holds, ferry_client_fragment_start pushes one fragment's part of a
// whole-model buffer and asks for its next version without waiting,
// ferry_client_fragment_wait takes the new weights in, and
// ferry_client_fragment_pull brings one fragment back after a failed
// round.
//
// DESIGN. A fragment round is an ordinary push-pull exchange (exchange.c)
// over the fragment's shards only: the others' need stays NEED_NONE, so
// no request carries them, and the push staging skips them (request.c,
// ferry__frag_in), so each shard's error feedback and pull reference move
// only in its own fragment's rounds, exactly as a whole-model step moves
// them. The lockstep bookkeeping is per fragment: a round pushes for the
// fragment's version (the minimum over its shards, xfer.frag_ver) and
// waits for the next one, and ferry__push_need leaves out a shard already
// past the fragment's version, as it does for the whole model. Fragments
// may be one version apart, so c->version (the minimum over every shard)
// is only recorded after each round (ferry__pull_finish), never used to
// push; the whole-model step calls are refused once the first pull went
// (ops.c, check_whole). At most one fragment is in flight: its struct
// xfer is c->fx, allocated once.
#include "client_impl.h"

// frag_check accepts fragment f of a declared fragments job with nothing
// in flight (any_busy: a fragment round in flight is accepted too).
static int
frag_check(ferry_client *c, uint32_t f, int any_busy)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return ferry__fail(c, FERRY_ESTATE,
		    "declare the tensors first");
	}
	if (c->opts.fragments <= 1) {
		return ferry__fail(c, FERRY_ESTATE,
		    "the job has no fragments (opts.fragments %u): use the "
		    "whole-model calls",
		    c->opts.fragments);
	}
	if (f >= c->opts.fragments) {
		return ferry__fail(c, FERRY_EINVAL,
		    "fragment %u: the job has %u (0..%u)", f,
		    c->opts.fragments, c->opts.fragments - 1);
	}
	if (c->ax_n_started > 0) {
		return ferry__fail(c, FERRY_ESTATE,
		    "a layer-wise push-pull is in progress");
	}
	if (!any_busy && c->fx_busy) {
		return ferry__fail(c, FERRY_ESTATE,
		    "fragment %u is in flight: ferry_client_fragment_wait "
		    "first (at most one fragment is in flight)",
		    c->fx->frag_f);
	}
	return FERRY_OK;
}

// frag_version is fragment f's version: the minimum over its shards
// (c->version when it has none: more fragments than shards).
static uint64_t
frag_version(const ferry_client *c, uint32_t f)
{
	uint64_t v = UINT64_MAX;
	for (size_t i = f; i < c->pl->n_shards; i += c->opts.fragments) {
		v = c->shard_ver[i] < v ? c->shard_ver[i] : v;
	}
	return v == UINT64_MAX ? c->version : v;
}

// frag_xfer readies c->fx for a round of fragment f (allocated on first
// use): op, the fragment and its version. Errors: FERRY_ENOMEM.
static int
frag_xfer(ferry_client *c, uint32_t f, enum op op, struct xfer **out)
{
	if (c->fx == NULL && (c->fx = fb_zalloc(sizeof(*c->fx))) == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	memset(c->fx, 0, sizeof(*c->fx));
	c->fx->op       = op;
	c->fx->frag_n   = c->opts.fragments;
	c->fx->frag_f   = f;
	c->fx->frag_ver = frag_version(c, f);
	*out            = c->fx;
	return FERRY_OK;
}

FERRY_API int
ferry_client_fragment_spans(ferry_client *c, uint32_t f,
    struct ferry_span *spans, size_t cap, size_t *n)
{
	size_t k = 0;
	int    rv;
	if ((rv = frag_check(c, f, 1)) != FERRY_OK) {
		return rv;
	}
	if (n == NULL || (spans == NULL && cap > 0)) {
		return ferry__fail(c, FERRY_EINVAL, "%s is NULL",
		    n == NULL ? "n" : "spans");
	}
	for (size_t i = f; i < c->pl->n_shards; i += c->opts.fragments) {
		const struct ferry_shard *s = &c->layout[i];
		// Runs that touch merge into one span (none do with F > 1
		// and the scheduler's cut, but the contract is runs).
		if (k > 0 && k <= cap && spans[k - 1].tensor == s->tensor &&
		    spans[k - 1].offset + spans[k - 1].len == s->offset) {
			spans[k - 1].len += s->len;
			continue;
		}
		if (k < cap) {
			spans[k].tensor = s->tensor;
			spans[k].offset = s->offset;
			spans[k].len    = s->len;
		}
		k++;
	}
	*n = k;
	if (k > cap) {
		return ferry__fail(c, FERRY_EINVAL,
		    "fragment %u has %zu spans; room for %zu", f, k, cap);
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_fragment_start(ferry_client *c, uint32_t f, const float *const *g,
    uint32_t n_samples, float *const *w)
{
	struct xfer *x;
	int          rv;
	if ((rv = frag_check(c, f, 0)) != FERRY_OK) {
		return rv;
	}
	if (g == NULL || (w == NULL && !c->has_sink) || n_samples == 0) {
		return ferry__fail(c, FERRY_EINVAL, "%s",
		    g == NULL       ? "tensor buffer array is NULL"
		        : w == NULL ? "weight buffer array is NULL (and no "
		                      "pull sink is set)"
		                    : "n_samples must be > 0");
	}
	if (c->opts.clip_norm > 0) {
		return ferry__fail(c, FERRY_ESTATE,
		    "a fragment round cannot clip: clip_norm is a norm over "
		    "every tensor");
	}
	if ((rv = ferry__links_reprobe(c)) != FERRY_OK ||
	    (rv = frag_xfer(c, f, OP_PUSH_PULL, &x)) != FERRY_OK) {
		return rv;
	}
	ferry__auto_step(c);
	x->g         = g;
	x->w         = w;
	x->n_samples = n_samples;
	x->pull_want = x->frag_ver + 1; // sync only (ps__job_local)
	x->codec = x->frag_ver < c->opts.warmup_steps ? &c->cnone : &c->cpush;
	ferry__xfer_begin(c, x);
	ferry__seed_forget_aliases(c, g);
	for (size_t i = f; i < c->pl->n_shards; i += c->opts.fragments) {
		c->need[i] = ferry__push_need(c, x, i);
	}
	if (x->codec->id != COMP_NONE &&
	    (rv = ferry__codes_stage(c, x, 0, c->n_tensors)) != FERRY_OK) {
		return rv; // nothing sent yet
	}
	c->fx_busy = 1;
	if ((rv = ferry__xfer_pump(c, x)) != FERRY_OK) {
		ferry__xfer_abort(c);
		c->fx_busy = 0;
		return rv;
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_fragment_wait(ferry_client *c)
{
	int rv;
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->fx_busy) {
		return ferry__fail(c, FERRY_ESTATE,
		    "no fragment round in flight (ferry_client_fragment_start "
		    "first)");
	}
	// Whatever happens, the round is over: an error abandons it (the
	// exchange cancelled what was in flight) and the caller pulls the
	// fragment again.
	c->fx_busy = 0;
	if ((rv = ferry__xfer_until(c, c->fx, 0, 0)) != FERRY_OK) {
		return rv;
	}
	c->join_pending = 0; // a push went in: this rank is in the rounds
	if ((rv = ferry__pull_finish(c, c->fx)) != FERRY_OK) {
		return rv;
	}
	ferry__auto_step_end(c);
	return FERRY_OK;
}

FERRY_API int
ferry_client_fragment_pull(ferry_client *c, uint32_t f, float *const *w)
{
	struct xfer *x;
	int          rv;
	if ((rv = frag_check(c, f, 0)) != FERRY_OK) {
		return rv;
	}
	if (w == NULL && !c->has_sink) {
		return ferry__fail(c, FERRY_EINVAL,
		    "weight buffer array is NULL (and no pull sink is set)");
	}
	if ((rv = frag_xfer(c, f, OP_PULL, &x)) != FERRY_OK) {
		return rv;
	}
	// Its newest version: the servers answer at once with what they
	// hold at or past the fragment's.
	x->w         = w;
	x->pull_want = x->frag_ver;
	ferry__xfer_begin(c, x);
	for (size_t i = f; i < c->pl->n_shards; i += c->opts.fragments) {
		c->need[i] = NEED_MAIN;
	}
	if ((rv = ferry__xfer_until(c, x, 0, 0)) != FERRY_OK ||
	    (rv = ferry__pull_finish(c, x)) != FERRY_OK) {
		return rv;
	}
	c->frag_pulled = 1;
	return FERRY_OK;
}
