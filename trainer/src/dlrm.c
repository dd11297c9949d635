// dlrm.c — the DLRM-style CTR model of tr/ctr.h on the CPU: its shape
// (--bottom, --top, --emb-dim, --interaction), its dense tensors and their
// Xavier init, and the forward and backward passes over a batch whose
// embedding rows the caller pulled from Ferry's sparse tables.
//
// DESIGN
// Activations are row-major [n x width] and W is [out x in] (PyTorch's
// nn.Linear), so every MLP layer is one sgemm, as in backend_cpu.c:
//   forward   A_l = act(A_{l-1} W_l^T + b_l)       sgemm(N, T)
//   backward  dW_l = D_l^T A_{l-1}                  sgemm(T, N)
//             db_l = column sums of D_l
//             D_{l-1} = (D_l W_l) * [A_{l-1} > 0]   sgemm(N, N)
// with D of the logit = sigmoid(z) - y (the summed loss: no 1/n).
// The dot interaction is 27 small Gram matrices (27 vectors of emb_dim
// per sample), too small for a BLAS call each; it runs per sample on a
// transposed copy zt[k][j] = z_j[k] (rows padded to ZPAD = 32 floats), so
// both directions are loops over a contiguous row of 32 independent
// accumulators that GCC vectorises at -O3 without reassociating a sum:
//   forward   T[a][.] = sum_k z_a[k] * zt[k][.]       (rows a = 1..26)
//   backward  dz_a[k] = sum_b S[a][b] z_b[k], S the symmetric matrix of
//             the pair gradients (S[a][b] = S[b][a] = dT(a, b), diag 0)
// The backward pass gathers zt again from its inputs rather than keep 27
// vectors per sample from the forward pass. Every buffer is sized in
// tr_dlrm_alloc for max_batch samples; grad and predict never allocate.
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tr/ctr.h"
#include "tr_impl.h"

#define NZ (TR_CTR_CAT + 1)         // vectors in the interaction
#define ZPAD 32                     // NZ rounded up to whole SIMD rows
#define N_PAIRS (NZ * (NZ - 1) / 2) // dot products per sample
#define MAX_EMB_DIM 1024

// The interaction loops also get an AVX2 clone (picked at load time by
// GCC's ifunc resolver) where the compiler can make one: the build targets
// baseline x86-64, whose 4-wide SSE halves their speed.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VEC_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VEC_CLONES
#define VEC_CLONES
#endif

struct tr_dlrm {
	struct tr_dlrm_arch a;
	size_t              max_batch;
	size_t              zdim;                   // bottom's last width
	float              *bot[TR_MAX_LAYERS + 1]; // [l]: n x bottom[l]
	float              *top[TR_MAX_LAYERS + 1]; // [0]: interaction
	float              *d0, *d1;                // ping-pong deltas
	float              *zt;  // one sample's z, transposed: d x ZPAD
	float              *dzt; // its gradient, same layout
	float              *s;   // ZPAD x ZPAD pair gradients (symmetric)
	float              *mem; // owns all the above
};

// ---- shape ----------------------------------------------------------------

// parse_widths reads "64,16" (each in 1..TR_MAX_WIDTH, at most max of
// them) into out, setting *n.
static int
parse_widths(const char *flag, const char *spec, size_t *out, int max, int *n,
    char *err, size_t errlen)
{
	const char *s  = spec;
	int         nw = 0;
	if (spec == NULL || *spec == '\0') {
		return tr__errf(FB_EINVAL, err, errlen, "%s: empty", flag);
	}
	for (;;) {
		char    num[32];
		size_t  len = strcspn(s, ",");
		int64_t v;
		if (len == 0 || len >= sizeof(num)) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "%s '%s': empty or overlong width", flag, spec);
		}
		if (nw >= max) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "%s '%s': too many layers (--bottom and --top "
			    "have at most %d together)",
			    flag, spec, TR_MAX_LAYERS);
		}
		memcpy(num, s, len);
		num[len] = '\0';
		if (fb_parse_i64(num, 1, TR_MAX_WIDTH, &v) != FB_OK) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "%s '%s': width '%s' is not an integer in 1..%u",
			    flag, spec, num, TR_MAX_WIDTH);
		}
		out[nw++] = (size_t) v;
		if (s[len] == '\0') {
			break;
		}
		s += len + 1;
	}
	*n = nw;
	return FB_OK;
}

int
tr_dlrm_arch_parse(const char *bottom, const char *top, uint32_t emb_dim,
    const char *interaction, struct tr_dlrm_arch *a, char *err, size_t errlen)
{
	struct tr_dlrm_arch t = { 0 };
	int                 rv;
	if (a == NULL) {
		return tr__errf(FB_EINVAL, err, errlen, "dlrm: no arch");
	}
	if (interaction != NULL && strcmp(interaction, "dot") == 0) {
		t.interaction = TR_DLRM_DOT;
	} else if (interaction != NULL && strcmp(interaction, "cat") == 0) {
		t.interaction = TR_DLRM_CAT;
	} else {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--interaction '%s': not dot or cat",
		    interaction != NULL ? interaction : "");
	}
	if (emb_dim < 1 || emb_dim > MAX_EMB_DIM) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--emb-dim %u: not in 1..%d", emb_dim, MAX_EMB_DIM);
	}
	t.emb_dim = emb_dim;
	rv = parse_widths("--bottom", bottom, t.bottom + 1, TR_MAX_LAYERS - 1,
	    &t.n_bottom, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	rv = parse_widths("--top", top, t.top + 1, TR_MAX_LAYERS - t.n_bottom,
	    &t.n_top, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	if (t.top[t.n_top] != 1) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--top '%s': the last width must be 1 (the logit)", top);
	}
	size_t zdim = t.bottom[t.n_bottom];
	if (t.interaction == TR_DLRM_DOT && zdim != emb_dim) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--bottom '%s': the dot interaction needs its last width "
		    "(%zu) to equal --emb-dim (%u)",
		    bottom, zdim, emb_dim);
	}
	t.bottom[0] = TR_CTR_DENSE;
	t.top[0]    = t.interaction == TR_DLRM_DOT
	       ? emb_dim + N_PAIRS
	       : zdim + (size_t) TR_CTR_CAT * emb_dim;
	*a          = t;
	return FB_OK;
}

static int
arch_ok(const struct tr_dlrm_arch *a)
{
	return a != NULL && a->n_bottom >= 1 && a->n_top >= 1 &&
	    a->n_bottom + a->n_top <= TR_MAX_LAYERS && a->emb_dim >= 1 &&
	    a->top[a->n_top] == 1;
}

// layer_shape gives layer l's (0-based, bottom then top) input and output
// widths.
static void
layer_shape(const struct tr_dlrm_arch *a, size_t l, size_t *in, size_t *out)
{
	if (l < (size_t) a->n_bottom) {
		*in  = a->bottom[l];
		*out = a->bottom[l + 1];
	} else {
		l -= (size_t) a->n_bottom;
		*in  = a->top[l];
		*out = a->top[l + 1];
	}
}

size_t
tr_dlrm_n_tensors(const struct tr_dlrm_arch *a)
{
	return arch_ok(a) ? 2 * (size_t) (a->n_bottom + a->n_top) : 0;
}

size_t
tr_dlrm_tensor_len(const struct tr_dlrm_arch *a, size_t i)
{
	size_t in, out;
	if (i >= tr_dlrm_n_tensors(a)) {
		return 0;
	}
	layer_shape(a, i / 2, &in, &out);
	return i % 2 == 0 ? out * in : out;
}

void
tr_dlrm_tensor_name(const struct tr_dlrm_arch *a, size_t i, char *buf,
    size_t n)
{
	size_t l   = i / 2;
	int    bot = l < (size_t) a->n_bottom;
	snprintf(buf, n, "%s%zu.%s", bot ? "bot" : "top",
	    (bot ? l : l - (size_t) a->n_bottom) + 1,
	    i % 2 ? "bias" : "weight");
}

int
tr_dlrm_params_init(struct tr_params *p, const struct tr_dlrm_arch *a)
{
	if (p == NULL) {
		return FB_EINVAL;
	}
	memset(p, 0, sizeof(*p));
	if (!arch_ok(a)) {
		return FB_EINVAL;
	}
	p->n_tensors = tr_dlrm_n_tensors(a);
	for (size_t i = 0; i < p->n_tensors; i++) {
		p->len[i] = tr_dlrm_tensor_len(a, i);
	}
	return tr__params_alloc(p); // laid out as tr_params_init's
}

void
tr_dlrm_params_randomize(struct tr_params *p, const struct tr_dlrm_arch *a,
    uint64_t seed)
{
	struct tr_rng r;
	tr_rng_seed(&r, seed);
	for (size_t i = 0; i < p->n_tensors; i++) {
		size_t in, out;
		if (i % 2 == 1) {
			memset(p->t[i], 0, p->len[i] * sizeof(float));
			continue;
		}
		layer_shape(a, i / 2, &in, &out);
		float bound = (float) sqrt(6.0 / (double) (in + out));
		for (size_t j = 0; j < p->len[i]; j++) {
			p->t[i][j] = (2.0f * tr_rng_uniform(&r) - 1.0f) *
			    bound;
		}
	}
}

// ---- workspace ------------------------------------------------------------

static size_t
pad16(size_t n)
{
	return (n + 15) & ~(size_t) 15;
}

int
tr_dlrm_alloc(const struct tr_dlrm_arch *a, size_t max_batch, int blas_threads,
    struct tr_dlrm **out, char *err, size_t errlen)
{
	struct tr_dlrm *m;
	size_t          floats = 0, widest = 0, off = 0, cap = max_batch;
	if (out == NULL || !arch_ok(a) || max_batch == 0) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "dlrm: bad architecture or max_batch 0");
	}
	if ((m = fb_zalloc(sizeof(*m))) == NULL) {
		return tr__errf(FB_ENOMEM, err, errlen, "dlrm: no memory");
	}
	m->a         = *a;
	m->max_batch = max_batch;
	m->zdim      = a->bottom[a->n_bottom];
	for (int l = 1; l <= a->n_bottom; l++) {
		floats += cap * pad16(a->bottom[l]);
		widest = a->bottom[l] > widest ? a->bottom[l] : widest;
	}
	for (int l = 0; l <= a->n_top; l++) {
		floats += cap * pad16(a->top[l]);
		widest = a->top[l] > widest ? a->top[l] : widest;
	}
	floats += 2 * cap * pad16(widest) + 2 * a->emb_dim * ZPAD +
	    ZPAD * ZPAD;
	if ((m->mem = fb_zalloc((floats + 16) * sizeof(float))) == NULL) {
		fb_free(m);
		return tr__errf(FB_ENOMEM, err, errlen,
		    "dlrm: no memory for %zu activations", floats);
	}
	float *base = (float *) (((uintptr_t) m->mem + 63) & ~(uintptr_t) 63);
	for (int l = 1; l <= a->n_bottom; l++) {
		m->bot[l] = base + off;
		off += cap * pad16(a->bottom[l]);
	}
	for (int l = 0; l <= a->n_top; l++) {
		m->top[l] = base + off;
		off += cap * pad16(a->top[l]);
	}
	m->d0 = base + off;
	off += cap * pad16(widest);
	m->d1 = base + off;
	off += cap * pad16(widest);
	m->zt = base + off;
	off += a->emb_dim * ZPAD;
	m->dzt = base + off;
	off += a->emb_dim * ZPAD;
	m->s = base + off; // stays zero on the diagonal and in the padding
	if (blas_threads >= 1) {
		openblas_set_num_threads(blas_threads);
	}
	*out = m;
	return FB_OK;
}

void
tr_dlrm_free(struct tr_dlrm *m)
{
	if (m != NULL) {
		fb_free(m->mem);
		fb_free(m);
	}
}

// ---- forward --------------------------------------------------------------

// linear computes out = act(in W^T + b) for n rows; relu chooses act.
static void
linear(const float *in, size_t n, size_t ni, size_t no, const float *w,
    const float *b, float *out, int relu)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int) n, (int) no,
	    (int) ni, 1.0f, in, (int) ni, w, (int) ni, 0.0f, out, (int) no);
	for (size_t i = 0; i < n; i++) {
		float *row = out + i * no;
		if (relu) {
			for (size_t j = 0; j < no; j++) {
				float v = row[j] + b[j];
				row[j]  = v > 0.0f ? v : 0.0f;
			}
		} else {
			for (size_t j = 0; j < no; j++) {
				row[j] += b[j];
			}
		}
	}
}

// gather_zt fills m->zt with sample i's 27 vectors: z_0 (its bottom
// output row z0) and the fields' embedding rows.
static void
gather_zt(struct tr_dlrm *m, const float *z0, const float *emb, size_t n,
    size_t i)
{
	size_t d  = m->a.emb_dim;
	float *zt = m->zt;
	for (size_t k = 0; k < d; k++) {
		zt[k * ZPAD] = z0[k];
	}
	for (size_t f = 0; f < TR_CTR_CAT; f++) {
		const float *e = emb + (f * n + i) * d;
		for (size_t k = 0; k < d; k++) {
			zt[k * ZPAD + f + 1] = e[k];
		}
	}
}

// gram_rows writes rows a0 <= a < a1 of the lower triangle <z_a, z_b>
// (b < a) of zt's vectors into r, two rows at a time so each load of zt
// feeds two products. w, a multiple of 8 >= a1 - 1, is a constant once
// inlined, so the accumulators stay in registers.
static inline __attribute__((always_inline)) float *
gram_rows(const float *restrict zt, size_t d, size_t a0, size_t a1, size_t w,
    float *restrict r)
{
	for (size_t a = a0; a < a1; a += 2) {
		float acc0[ZPAD], acc1[ZPAD];
		int   two = a + 1 < a1;
		for (size_t j = 0; j < w; j++) {
			acc0[j] = 0.0f;
			acc1[j] = 0.0f;
		}
		for (size_t k = 0; k < d; k++) {
			const float *row = zt + k * ZPAD;
			float        s0 = row[a], s1 = two ? row[a + 1] : 0.0f;
			for (size_t j = 0; j < w; j++) {
				acc0[j] += s0 * row[j];
				acc1[j] += s1 * row[j];
			}
		}
		memcpy(r, acc0, a * sizeof(float));
		r += a;
		if (two) {
			memcpy(r, acc1, (a + 1) * sizeof(float));
			r += a + 1;
		}
	}
	return r;
}

// gram writes the lower triangle <z_a, z_b> (a = 1..26, b < a, a outer)
// of zt's vectors into r.
VEC_CLONES static void
gram(const float *restrict zt, size_t d, float *restrict r)
{
	r = gram_rows(zt, d, 1, 9, 8, r);
	r = gram_rows(zt, d, 9, 17, 16, r);
	r = gram_rows(zt, d, 17, 25, 24, r);
	gram_rows(zt, d, 25, NZ, 32, r);
}

// interact builds the top MLP's input rows (m->top[0]) from the bottom
// output and the embedding rows.
static void
interact(struct tr_dlrm *m, const float *emb, size_t n)
{
	const struct tr_dlrm_arch *a = &m->a;
	size_t                     d = a->emb_dim, zd = m->zdim;
	size_t                     wi = a->top[0];
	const float               *z0 = m->bot[a->n_bottom];
	for (size_t i = 0; i < n; i++) {
		float *r = m->top[0] + i * wi;
		memcpy(r, z0 + i * zd, zd * sizeof(float));
		if (a->interaction == TR_DLRM_DOT) {
			gather_zt(m, z0 + i * zd, emb, n, i);
			gram(m->zt, d, r + zd);
			continue;
		}
		for (size_t f = 0; f < TR_CTR_CAT; f++) {
			memcpy(r + zd + f * d, emb + (f * n + i) * d,
			    d * sizeof(float));
		}
	}
}

// forward runs the whole model on n samples; the logits end in
// m->top[n_top] (n x 1).
static void
forward(struct tr_dlrm *m, const float *const *w, const float *dense,
    const float *emb, size_t n)
{
	const struct tr_dlrm_arch *a  = &m->a;
	const float               *in = dense;
	size_t                     t  = 0;
	for (int l = 1; l <= a->n_bottom; l++, t += 2) {
		linear(in, n, a->bottom[l - 1], a->bottom[l], w[t], w[t + 1],
		    m->bot[l], 1);
		in = m->bot[l];
	}
	interact(m, emb, n);
	for (int l = 1; l <= a->n_top; l++, t += 2) {
		linear(m->top[l - 1], n, a->top[l - 1], a->top[l], w[t],
		    w[t + 1], m->top[l], l < a->n_top);
	}
}

// ---- backward -------------------------------------------------------------

// back_layer writes a layer's weight and bias gradients from its output
// delta dz (n x no) and input in (n x ni); when dprev is non-NULL also the
// input delta dz W, masked by [in > 0] when mask is set (a ReLU output).
static void
back_layer(const float *dz, const float *in, size_t n, size_t ni, size_t no,
    const float *w, float *gw, float *gb, float *dprev, int mask)
{
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int) no,
	    (int) ni, (int) n, 1.0f, dz, (int) no, in, (int) ni, 0.0f, gw,
	    (int) ni);
	memcpy(gb, dz, no * sizeof(float));
	for (size_t i = 1; i < n; i++) {
		const float *row = dz + i * no;
		for (size_t j = 0; j < no; j++) {
			gb[j] += row[j];
		}
	}
	if (dprev == NULL) {
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int) n,
	    (int) ni, (int) no, 1.0f, dz, (int) no, w, (int) ni, 0.0f, dprev,
	    (int) ni);
	if (mask) {
		for (size_t i = 0; i < n * ni; i++) {
			dprev[i] = in[i] > 0.0f ? dprev[i] : 0.0f;
		}
	}
}

// gram_back sets dzt[k][a] = sum_b S[a][b] z_b[k] from s and zt, two
// rows k at a time so each load of S feeds two products.
VEC_CLONES static void
gram_back(const float *restrict zt, const float *restrict s, size_t d,
    float *restrict dzt)
{
	for (size_t k = 0; k < d; k += 2) {
		const float *r0 = zt + k * ZPAD;
		const float *r1 = k + 1 < d ? r0 + ZPAD : r0; // odd d: again
		float        acc0[ZPAD], acc1[ZPAD];
		for (size_t j = 0; j < ZPAD; j++) {
			acc0[j] = 0.0f;
			acc1[j] = 0.0f;
		}
		for (size_t b = 0; b < NZ; b++) {
			float        v0 = r0[b], v1 = r1[b];
			const float *sb = s +
			    b * ZPAD; // S symmetric: column b
			for (size_t j = 0; j < ZPAD; j++) {
				acc0[j] += v0 * sb[j];
				acc1[j] += v1 * sb[j];
			}
		}
		memcpy(dzt + k * ZPAD, acc0, sizeof(acc0));
		if (k + 1 < d) {
			memcpy(dzt + (k + 1) * ZPAD, acc1, sizeof(acc1));
		}
	}
}

// interact_back turns the top MLP's input delta dr (n x top[0]) into the
// embedding gradients and the bottom output's delta dz0 (n x zdim, masked
// by the bottom's last ReLU).
static void
interact_back(struct tr_dlrm *m, const float *dr, const float *emb, size_t n,
    float *emb_grad, float *dz0)
{
	const struct tr_dlrm_arch *a = &m->a;
	size_t                     d = a->emb_dim, zd = m->zdim;
	size_t                     wi = a->top[0];
	const float               *z0 = m->bot[a->n_bottom];
	for (size_t i = 0; i < n; i++) {
		const float *r  = dr + i * wi;
		float       *g0 = dz0 + i * zd;
		memcpy(g0, r, zd * sizeof(float));
		if (a->interaction == TR_DLRM_CAT) {
			for (size_t f = 0; f < TR_CTR_CAT; f++) {
				memcpy(emb_grad + (f * n + i) * d,
				    r + zd + f * d, d * sizeof(float));
			}
		} else {
			const float *dt = r + zd;
			for (size_t p = 1; p < NZ; p++) {
				for (size_t q = 0; q < p; q++, dt++) {
					m->s[p * ZPAD + q] = *dt;
					m->s[q * ZPAD + p] = *dt;
				}
			}
			gather_zt(m, z0 + i * zd, emb, n, i);
			gram_back(m->zt, m->s, d, m->dzt);
			for (size_t k = 0; k < d; k++) {
				g0[k] += m->dzt[k * ZPAD];
			}
			for (size_t f = 0; f < TR_CTR_CAT; f++) {
				float *eg = emb_grad + (f * n + i) * d;
				for (size_t k = 0; k < d; k++) {
					eg[k] = m->dzt[k * ZPAD + f + 1];
				}
			}
		}
		const float *zr = z0 + i * zd;
		for (size_t k = 0; k < zd; k++) {
			g0[k] = zr[k] > 0.0f ? g0[k] : 0.0f;
		}
	}
}

// bce returns log(1 + exp(z)) - y z without overflow.
static double
bce(float z, float y)
{
	double zd = z;
	return (zd > 0.0 ? zd : 0.0) - zd * (double) y + log1p(exp(-fabs(zd)));
}

static float
sigmoid(float z)
{
	if (z >= 0.0f) {
		return 1.0f / (1.0f + expf(-z));
	}
	float e = expf(z);
	return e / (1.0f + e);
}

int
tr_dlrm_grad(struct tr_dlrm *m, const float *const *w, const float *dense,
    const float *emb, const float *label, size_t n, float *const *g,
    float *emb_grad, double *loss_sum)
{
	if (m == NULL || w == NULL || dense == NULL || emb == NULL ||
	    label == NULL || g == NULL || emb_grad == NULL || n == 0 ||
	    n > m->max_batch) {
		return FB_EINVAL;
	}
	const struct tr_dlrm_arch *a    = &m->a;
	double                     loss = 0.0;
	forward(m, w, dense, emb, n);
	const float *z  = m->top[a->n_top];
	float       *dz = m->d0, *dn = m->d1;
	for (size_t i = 0; i < n; i++) {
		loss += bce(z[i], label[i]);
		dz[i] = sigmoid(z[i]) - label[i];
	}
	// Top MLP, last layer first; its first layer's input delta is the
	// interaction's (no ReLU there).
	size_t t = 2 * (size_t) (a->n_bottom + a->n_top);
	for (int l = a->n_top; l >= 1; l--) {
		t -= 2;
		back_layer(dz, m->top[l - 1], n, a->top[l - 1], a->top[l],
		    w[t], g[t], g[t + 1], dn, l > 1);
		float *x = dz;
		dz       = dn;
		dn       = x;
	}
	interact_back(m, dz, emb, n, emb_grad, dn);
	float *x = dz;
	dz       = dn;
	dn       = x;
	for (int l = a->n_bottom; l >= 1; l--) {
		t -= 2;
		const float *in = l > 1 ? m->bot[l - 1] : dense;
		back_layer(dz, in, n, a->bottom[l - 1], a->bottom[l], w[t],
		    g[t], g[t + 1], l > 1 ? dn : NULL, 1);
		x  = dz;
		dz = dn;
		dn = x;
	}
	if (loss_sum != NULL) {
		*loss_sum = loss;
	}
	return FB_OK;
}

int
tr_dlrm_predict(struct tr_dlrm *m, const float *const *w, const float *dense,
    const float *emb, size_t n, float *prob)
{
	if (m == NULL || w == NULL || dense == NULL || emb == NULL ||
	    prob == NULL || n == 0 || n > m->max_batch) {
		return FB_EINVAL;
	}
	forward(m, w, dense, emb, n);
	const float *z = m->top[m->a.n_top];
	for (size_t i = 0; i < n; i++) {
		prob[i] = sigmoid(z[i]);
	}
	return FB_OK;
}
