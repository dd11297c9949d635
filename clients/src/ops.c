// ops.c — the public step calls (init_weights, pull, push, push_pull and
// push_pull_encoded): their argument and state checks, and what each call
// asks of the exchange (which operation, which version to wait for).
#include <math.h>

#include "client_impl.h"

static int
check_declared(ferry_client *c)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return ferry__fail(c, FERRY_ESTATE,
		    "declare the tensors first");
	}
	return FERRY_OK;
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
	struct xfer x = { .op = OP_PULL, .w = w };
	int         rv;
	if ((rv = check_declared(c)) != FERRY_OK ||
	    (rv = check_pull_bufs(c, w)) != FERRY_OK) {
		return rv;
	}
	x.pull_want = c->want;
	if ((rv = ferry__op_run(c, &x)) != FERRY_OK) {
		return rv;
	}
	return ferry__pull_finish(c, &x);
}

void
ferry__clip_prepare(ferry_client *c, struct xfer *x)
{
	double ss     = 0, norm;
	x->clip_scale = 0;
	if (!(c->opts.clip_norm > 0) || x->g == NULL) {
		return;
	}
	// The global norm over every tensor (this trainer holds them all),
	// in double so that a large model's sum of squares loses nothing.
	for (size_t t = 0; t < c->n_tensors; t++) {
		const float *g = x->g[t];
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
	    (rv = check_samples(c, n_samples)) != FERRY_OK) {
		return rv;
	}
	ferry__clip_prepare(c, &x);
	if ((rv = ferry__op_run(c, &x)) != FERRY_OK) {
		return rv;
	}
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
	ferry__clip_prepare(c, x);
	x->pull_want = c->lockstep ? c->version + 1 : 0;
	if ((rv = ferry__op_run(c, x)) != FERRY_OK ||
	    (rv = ferry__pull_finish(c, x)) != FERRY_OK) {
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
