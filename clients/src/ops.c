// ops.c — the public step calls (init_weights, pull, push, push_pull,
// push_pull_encoded, and the layer-wise push_pull_start and wait): their
// argument and state checks, and what each call asks of the exchange
// (which operation, which version to wait for).
#include <math.h>

#include "client_impl.h"

// check_declared accepts a declared client with no layer-wise push-pull
// in progress (allow_ax: or with one).
static int
check_declared_ax(ferry_client *c, int allow_ax)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return ferry__fail(c, FERRY_ESTATE,
		    "declare the tensors first");
	}
	if (!allow_ax && c->ax_n_started > 0) {
		return ferry__fail(c, FERRY_ESTATE,
		    "a layer-wise push-pull is in progress: wait for every "
		    "started tensor first (ferry_client_wait)");
	}
	return FERRY_OK;
}

// check_whole accepts a whole-model step call: refused in a fragments job
// once the first pull went (each fragment then has its own rounds:
// ferry_client_fragment_start/_wait/_pull), and while a fragment round is
// in flight.
static int
check_whole(ferry_client *c)
{
	if (c->fx_busy) {
		return ferry__fail(c, FERRY_ESTATE,
		    "a fragment round is in flight: "
		    "ferry_client_fragment_wait first");
	}
	if (c->opts.fragments > 1 && c->frag_pulled) {
		return ferry__fail(c, FERRY_ESTATE,
		    "the job syncs its shards in %u fragments: after the "
		    "first pull, use ferry_client_fragment_start/_wait/_pull",
		    c->opts.fragments);
	}
	return FERRY_OK;
}

static int
check_declared(ferry_client *c)
{
	return check_declared_ax(c, 0);
}

// check_ready accepts a declared client and a non-NULL input array.
static int
check_ready(ferry_client *c, const void *bufs)
{
	int rv = check_declared(c);
	if (rv == FERRY_OK && bufs == NULL) {
		rv = ferry__fail(c, FERRY_EINVAL,
		    "tensor buffer array is NULL");
	}
	return rv;
}

static int
check_samples(ferry_client *c, uint32_t n_samples)
{
	return n_samples > 0
	    ? FERRY_OK
	    : ferry__fail(c, FERRY_EINVAL, "n_samples must be > 0");
}

// check_pull_bufs accepts w unless it is NULL and no pull sink is set.
static int
check_pull_bufs(ferry_client *c, float *const *w)
{
	if (w == NULL && !c->has_sink) {
		return ferry__fail(c, FERRY_EINVAL,
		    "weight buffer array is NULL (and no pull sink is set)");
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_init_weights(ferry_client *c, const float *const *w)
{
	struct xfer x = { .op = OP_INIT, .g = w };
	int         rv;
	if ((rv = check_ready(c, w)) != FERRY_OK) {
		return rv;
	}
	return ferry__op_run(c, &x);
}

FERRY_API int
ferry_client_pull(ferry_client *c, float *const *w)
{
	// A pull's own path (pull.c): no push codec, no staging.
	struct xfer x = { .op = OP_PULL, .w = w };
	int         rv;
	if ((rv = check_declared(c)) != FERRY_OK ||
	    (rv = check_whole(c)) != FERRY_OK ||
	    (rv = check_pull_bufs(c, w)) != FERRY_OK) {
		return rv;
	}
	x.pull_want = c->want;
	ferry__pull_seed(c);
	if ((rv = ferry__pull_run(c, &x)) != FERRY_OK ||
	    (rv = ferry__pull_finish(c, &x)) != FERRY_OK ||
	    (rv = ferry__pull_join(c, w)) != FERRY_OK) {
		return rv;
	}
	c->frag_pulled = 1;
	// "auto" times a step from the end of the exchange before it: a
	// trainer's first step follows a pull, so it gets a budget too.
	ferry__auto_step_end(c);
	return FERRY_OK;
}

// clip_prepare sets x->clip_scale for a push of the caller's fp32
// gradients x->g over x->n_samples samples: with opts.clip_norm > 0 and a
// per-sample global L2 norm above it, clip_norm / norm; else 0 (no
// scaling). One read of the gradient; no allocation.
static void
clip_prepare(ferry_client *c, struct xfer *x)
{
	double ss     = 0, norm;
	x->clip_scale = 0;
	if (!(c->opts.clip_norm > 0) || x->g == NULL) {
		return;
	}
	// The global norm over every tensor (this trainer holds them all),
	// in double so that a large model's sum of squares loses nothing.
	// Averaged tensors are values, not gradients: neither counted nor
	// scaled (request.c).
	for (size_t t = 0; t < c->n_tensors; t++) {
		const float *g = x->g[t];
		if (c->tensor_avg[t]) {
			continue;
		}
		for (uint64_t i = 0; i < c->tensor_len[t]; i++) {
			ss += (double) g[i] * g[i];
		}
	}
	norm = sqrt(ss) / (double) x->n_samples;
	if (norm > c->opts.clip_norm) {
		x->clip_scale = (float) (c->opts.clip_norm / norm);
	}
}

FERRY_API int
ferry_client_push(ferry_client *c, const float *const *g, uint32_t n_samples)
{
	struct xfer x = { .op = OP_PUSH, .g = g, .n_samples = n_samples };
	int         rv;
	if ((rv = check_ready(c, g)) != FERRY_OK ||
	    (rv = check_whole(c)) != FERRY_OK ||
	    (rv = check_samples(c, n_samples)) != FERRY_OK) {
		return rv;
	}
	clip_prepare(c, &x);
	if ((rv = ferry__op_run(c, &x)) != FERRY_OK) {
		return rv;
	}
	c->join_pending = 0; // a push went in: this rank is in the rounds
	if (c->lockstep) {
		c->want = c->version + 1;
	}
	return FERRY_OK;
}

// push_pull_run is both push-pull calls once x is filled in (in: the
// caller's gradients or codes). Both share one argument check, in one
// order: the input array, the weight buffers unless a pull sink takes the
// pulls, n_samples. Encoded pushes also need a push codec and the end of
// the warm-up. Then: re-probe when due, push for the held version, wait
// for the next one.
static int
push_pull_run(ferry_client *c, struct xfer *x, const void *in)
{
	int rv;
	if ((rv = check_ready(c, in)) != FERRY_OK ||
	    (rv = check_whole(c)) != FERRY_OK ||
	    (rv = check_pull_bufs(c, x->w)) != FERRY_OK ||
	    (rv = check_samples(c, x->n_samples)) != FERRY_OK) {
		return rv;
	}
	if (x->codes != NULL &&
	    (c->cpush.id == COMP_NONE || c->auto_push ||
	        ferry_client_in_warmup(c))) {
		return ferry__fail(c, FERRY_ESTATE,
		    "encoded pushes need a push codec (not \"auto\") and the "
		    "end of warm-up");
	}
	if ((rv = ferry__links_reprobe(c)) != FERRY_OK) {
		return rv;
	}
	ferry__auto_step(c);
	clip_prepare(c, x);
	x->pull_want = c->lockstep ? c->version + 1 : 0;
	if ((rv = ferry__op_run(c, x)) != FERRY_OK) {
		return rv;
	}
	c->join_pending = 0; // a push went in: this rank is in the rounds
	if ((rv = ferry__pull_finish(c, x)) != FERRY_OK) {
		return rv;
	}
	ferry__auto_step_end(c);
	return FERRY_OK;
}

FERRY_API int
ferry_client_push_pull(ferry_client *c, const float *const *g,
    uint32_t n_samples, float *const *w)
{
	struct xfer x = {
		.op        = OP_PUSH_PULL,
		.g         = g,
		.w         = w,
		.n_samples = n_samples,
	};
	return push_pull_run(c, &x, g);
}

FERRY_API int
ferry_client_push_pull_encoded(ferry_client *c, const uint8_t *const *codes,
    uint32_t n_samples, float *const *w)
{
	struct xfer x = {
		.op        = OP_PUSH_PULL,
		.codes     = codes,
		.w         = w,
		.n_samples = n_samples,
	};
	return push_pull_run(c, &x, codes);
}

// ax_fail abandons the layer-wise push-pull in progress after an error:
// nothing stays in flight, and the next step starts afresh.
static int
ax_fail(ferry_client *c, int rv)
{
	ferry__xfer_abort(c);
	c->ax_n_started = 0;
	return rv;
}

// check_range accepts tensors [first, first + count) of the declared ones.
static int
check_range(ferry_client *c, size_t first, size_t count)
{
	if (count == 0 || first >= c->n_tensors ||
	    count > c->n_tensors - first) {
		return ferry__fail(c, FERRY_EINVAL,
		    "tensors [%zu, +%zu) are not within the %zu declared",
		    first, count, c->n_tensors);
	}
	return FERRY_OK;
}

// ax_begin starts a layer-wise step: re-probe when due, the push codec
// (none in warm-up), the version to wait for, the exchange's clock.
static int
ax_begin(ferry_client *c, const float *const *g, uint32_t n_samples,
    float *const *w)
{
	int rv;
	if (c->ax == NULL) {
		c->ax         = fb_zalloc(sizeof(*c->ax));
		c->ax_started = fb_zalloc(c->n_tensors);
		if (c->ax == NULL || c->ax_started == NULL) {
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
	}
	if ((rv = ferry__links_reprobe(c)) != FERRY_OK) {
		return rv;
	}
	struct xfer *x = c->ax;
	memset(x, 0, sizeof(*x));
	x->op        = OP_PUSH_PULL;
	x->g         = g;
	x->w         = w;
	x->n_samples = n_samples;
	x->pull_want = c->lockstep ? c->version + 1 : 0;
	x->codec = c->version < c->opts.warmup_steps ? &c->cnone : &c->cpush;
	memset(c->ax_started, 0, c->n_tensors);
	c->ax_n_waited = 0;
	ferry__xfer_begin(c, x);
	ferry__seed_forget_aliases(c, g);
	return FERRY_OK;
}

FERRY_API int
ferry_client_push_pull_start(ferry_client *c, const float *const *g,
    uint32_t n_samples, float *const *w, size_t first, size_t count)
{
	struct xfer *x;
	int          rv;
	if ((rv = check_declared_ax(c, 1)) != FERRY_OK ||
	    (rv = check_whole(c)) != FERRY_OK) {
		return rv;
	}
	if (g == NULL) {
		return ferry__fail(c, FERRY_EINVAL,
		    "tensor buffer array is NULL");
	}
	if ((rv = check_pull_bufs(c, w)) != FERRY_OK ||
	    (rv = check_samples(c, n_samples)) != FERRY_OK ||
	    (rv = check_range(c, first, count)) != FERRY_OK) {
		return rv;
	}
	if (c->opts.clip_norm > 0) {
		return ferry__fail(c, FERRY_ESTATE,
		    "a layer-wise push-pull cannot clip: clip_norm needs every "
		    "gradient before the first push");
	}
	if (c->ax_n_started == 0) {
		if ((rv = ax_begin(c, g, n_samples, w)) != FERRY_OK) {
			return rv;
		}
	} else if (c->ax->g != g || c->ax->w != w ||
	    c->ax->n_samples != n_samples) {
		return ferry__fail(c, FERRY_EINVAL,
		    "the layer-wise push-pulls of one step must pass the same "
		    "g, w and n_samples");
	}
	x = c->ax;
	for (size_t t = first; t < first + count; t++) {
		if (c->ax_started[t]) {
			return ferry__fail(c, FERRY_EINVAL,
			    "tensor %zu was already started in this step", t);
		}
	}
	memset(c->ax_started + first, 1, count);
	c->ax_n_started += count;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		uint32_t t = c->pl->shards[i]->tensor;
		if (t >= first && t < first + count) {
			c->need[i] = ferry__push_need(c, x, i);
		}
	}
	if (x->codec->id != COMP_NONE &&
	    (rv = ferry__codes_stage(c, x, first, first + count)) !=
	        FERRY_OK) {
		return ax_fail(c, rv);
	}
	if ((rv = ferry__xfer_pump(c, x)) != FERRY_OK) {
		return ax_fail(c, rv);
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_wait(ferry_client *c, size_t first, size_t count)
{
	struct xfer *x;
	int          rv, resync = 0;
	if ((rv = check_declared_ax(c, 1)) != FERRY_OK ||
	    (rv = check_range(c, first, count)) != FERRY_OK) {
		return rv;
	}
	if (c->ax_n_started == 0) {
		return ferry__fail(c, FERRY_ESTATE,
		    "no layer-wise push-pull in progress");
	}
	for (size_t t = first; t < first + count; t++) {
		if (!c->ax_started[t]) {
			return ferry__fail(c, FERRY_ESTATE,
			    "tensor %zu was not started in this step", t);
		}
	}
	x = c->ax;
	if ((rv = ferry__xfer_until(c, x, first, first + count)) != FERRY_OK) {
		return ax_fail(c, rv);
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		uint32_t t = c->pl->shards[i]->tensor;
		resync |= t >= first && t < first + count && c->need_full[i];
	}
	if (resync) {
		// Rare: let everything started end, then pull in full what
		// drifted.
		if ((rv = ferry__xfer_until(c, x, 0, 0)) != FERRY_OK ||
		    (rv = ferry__pull_resync(c, x)) != FERRY_OK) {
			return ax_fail(c, rv);
		}
	}
	for (size_t t = first; t < first + count; t++) {
		c->ax_n_waited += c->ax_started[t] == 1;
		c->ax_started[t] = 2; // waited for
	}
	if (c->ax_n_waited == c->n_tensors) {
		// The step's end: anything left in flight (none: every shard
		// is done) or a newer map seen, then the version held.
		if ((rv = ferry__xfer_until(c, x, 0, 0)) != FERRY_OK) {
			return ax_fail(c, rv);
		}
		c->ax_n_started = 0;
		return ferry__pull_finish(c, x);
	}
	return FERRY_OK;
}
