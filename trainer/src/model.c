// model.c — MLP shape (layers spec, tensor names and lengths) and the
// parameter block: deterministic Kaiming init and the SGD update the
// server applies, so a single process can reproduce a sync run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fb/init.h"
#include "tr_impl.h"

int
tr_arch_parse(const char *spec, struct tr_arch *a, char *err, size_t errlen)
{
	struct tr_arch t  = { 0 };
	const char    *s  = spec;
	int            nw = 0;
	if (spec == NULL || a == NULL || *spec == '\0') {
		return tr__errf(FB_EINVAL, err, errlen, "--layers: empty");
	}
	for (;;) {
		char    num[32];
		size_t  len = strcspn(s, ",");
		int64_t v;
		if (len == 0 || len >= sizeof(num)) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--layers '%s': empty or overlong width", spec);
		}
		if (nw > TR_MAX_LAYERS) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--layers '%s': at most %d widths", spec,
			    TR_MAX_LAYERS + 1);
		}
		memcpy(num, s, len);
		num[len] = '\0';
		if (fb_parse_i64(num, 1, TR_MAX_WIDTH, &v) != FB_OK) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--layers '%s': width '%s' is not an integer in "
			    "1..%u",
			    spec, num, TR_MAX_WIDTH);
		}
		t.sizes[nw++] = (size_t) v;
		if (s[len] == '\0') {
			break;
		}
		s += len + 1;
	}
	if (nw < 2) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--layers '%s': need at least input and output widths",
		    spec);
	}
	if (t.sizes[nw - 1] < 2) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--layers '%s': the output layer needs >= 2 classes",
		    spec);
	}
	t.n_layers = nw - 1;
	*a         = t;
	return FB_OK;
}

size_t
tr_arch_n_tensors(const struct tr_arch *a)
{
	return 2 * (size_t) a->n_layers;
}

size_t
tr_arch_tensor_len(const struct tr_arch *a, size_t i)
{
	size_t l = i / 2;
	if (i >= tr_arch_n_tensors(a)) {
		return 0;
	}
	return (i % 2 == 0) ? a->sizes[l + 1] * a->sizes[l] : a->sizes[l + 1];
}

size_t
tr_arch_n_params(const struct tr_arch *a)
{
	size_t n = 0;
	for (size_t i = 0; i < tr_arch_n_tensors(a); i++) {
		n += tr_arch_tensor_len(a, i);
	}
	return n;
}

void
tr_arch_tensor_name(const struct tr_arch *a, size_t i, char *buf, size_t n)
{
	(void) a;
	snprintf(buf, n, "fc%zu.%s", i / 2 + 1, i % 2 ? "bias" : "weight");
}

int
tr_params_init(struct tr_params *p, const struct tr_arch *a)
{
	if (p == NULL) {
		return FB_EINVAL;
	}
	memset(p, 0, sizeof(*p));
	if (a == NULL || a->n_layers < 1 || a->n_layers > TR_MAX_LAYERS) {
		return FB_EINVAL;
	}
	p->n_tensors = tr_arch_n_tensors(a);
	for (size_t i = 0; i < p->n_tensors; i++) {
		p->len[i] = tr_arch_tensor_len(a, i);
	}
	return tr__params_alloc(p);
}

int
tr__params_shaped(struct tr_params *p, const struct tr_params *w)
{
	memset(p, 0, sizeof(*p));
	p->n_tensors = w->n_tensors;
	memcpy(p->len, w->len, sizeof(p->len));
	return tr__params_alloc(p);
}

int
tr__params_alloc(struct tr_params *p)
{
	size_t off = 0;
	p->total   = 0;
	// 64-byte aligned tensors help the BLAS kernels and memcpy.
	for (size_t i = 0; i < p->n_tensors; i++) {
		p->total += p->len[i];
		off += (p->len[i] + 15) & ~(size_t) 15;
	}
	p->data = fb_zalloc(off * sizeof(float) + 64);
	if (p->data == NULL) {
		memset(p, 0, sizeof(*p));
		return FB_ENOMEM;
	}
	float *base = (float *) (((uintptr_t) p->data + 63) & ~(uintptr_t) 63);
	off         = 0;
	for (size_t i = 0; i < p->n_tensors; i++) {
		p->t[i] = base + off;
		off += (p->len[i] + 15) & ~(size_t) 15;
	}
	return FB_OK;
}

void
tr_params_fini(struct tr_params *p)
{
	if (p == NULL) {
		return;
	}
	fb_free(p->data);
	memset(p, 0, sizeof(*p));
}

void
tr_params_init_rule(const struct tr_params *p, size_t i, uint32_t *kind,
    float *scale)
{
	if (i % 2 == 1) {
		*kind  = FB_INIT_ZEROS;
		*scale = 0;
		return;
	}
	// W is [out x in]; out = len of the following bias.
	size_t fan_in = p->len[i] / p->len[i + 1];
	*kind         = FB_INIT_UNIFORM;
	*scale        = (float) sqrt(6.0 / (double) fan_in);
}

void
tr_params_randomize(struct tr_params *p, uint64_t seed)
{
	// The rule the trainer declares (train.c), so that the servers and
	// every trainer compute these very bits without a transfer.
	for (size_t i = 0; i < p->n_tensors; i++) {
		uint32_t kind;
		float    scale;
		tr_params_init_rule(p, i, &kind, &scale);
		fb_init_fill(kind, scale, seed, (uint32_t) i, 0, p->t[i],
		    p->len[i]);
	}
}

void
tr_params_copy(struct tr_params *dst, const struct tr_params *src)
{
	for (size_t i = 0; i < src->n_tensors; i++) {
		memcpy(dst->t[i], src->t[i], src->len[i] * sizeof(float));
	}
}

void
tr_params_sgd(struct tr_params *w, const struct tr_params *g, double lr,
    size_t n_samples)
{
	// Same arithmetic as the server's apply (ps/src/server/server.c):
	// one float scale lr/n computed in double, then x -= scale * g.
	float scale = (float) (lr / (double) n_samples);
	for (size_t i = 0; i < w->n_tensors; i++) {
		float       *x = w->t[i];
		const float *d = g->t[i];
		for (size_t j = 0; j < w->len[i]; j++) {
			x[j] -= scale * d[j];
		}
	}
}
