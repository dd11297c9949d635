// backend_cpu.c — the OpenBLAS implementation of struct tr_backend_ops.
//
// DESIGN
// Layout: activations are row-major [rows x width]; W_l is [out x in]
// (PyTorch's layout), so with A_0 = X:
//   forward   Z_l = A_{l-1} W_l^T + b_l        sgemm(N, T)
//             A_l = relu(Z_l) (hidden), softmax(Z_L) (output)
//   backward  D_L = softmax(Z_L) - onehot(y)    (summed loss: no 1/n)
//             dW_l = D_l^T A_{l-1}              sgemm(T, N)
//             db_l = column sums of D_l
//             D_{l-1} = (D_l W_l) * [A_{l-1} > 0]   sgemm(N, N)
// Every buffer is allocated once in alloc for `cap` rows (max(max_batch,
// EVAL_CHUNK)); grad gathers the minibatch rows into act[0], evaluate
// points the first layer straight at the data set's rows (contiguous), so
// neither allocates nor copies more than the gather. Weights are borrowed
// from the caller (set_weights), which is what makes the CPU path
// zero-copy.
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "tr_impl.h"

#define EVAL_CHUNK 1024

struct cpu {
	struct tr_arch a;
	size_t         cap;       // rows every buffer holds
	size_t         max_batch; // grad's limit
	size_t         max_width; // widest layer after the input
	const float   *w[TR_MAX_LAYERS];
	const float   *b[TR_MAX_LAYERS];
	float         *act[TR_MAX_LAYERS + 1];   // act[0]: gathered input
	float         *d0, *d1;                  // ping-pong deltas
	float         *mem;                      // owns all the above
	int (*layer_done)(void *arg, int layer); // set_layer_hook (or NULL)
	void *layer_arg;
};

static int
cpu_alloc(const struct tr_arch *a, const struct tr_backend_opts *o,
    void **state, char *err, size_t errlen)
{
	struct cpu *c;
	size_t      floats = 0, off = 0;
	if (a == NULL || o == NULL || o->max_batch == 0 || a->n_layers < 1 ||
	    a->n_layers > TR_MAX_LAYERS) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "cpu backend: bad architecture or max_batch");
	}
	if ((c = fb_zalloc(sizeof(*c))) == NULL) {
		return tr__errf(FB_ENOMEM, err, errlen,
		    "cpu backend: no memory");
	}
	c->a         = *a;
	c->max_batch = o->max_batch;
	c->cap       = o->max_batch > EVAL_CHUNK ? o->max_batch : EVAL_CHUNK;
	for (int l = 1; l <= a->n_layers; l++) {
		if (a->sizes[l] > c->max_width) {
			c->max_width = a->sizes[l];
		}
	}
	for (int l = 0; l <= a->n_layers; l++) {
		floats += c->cap * ((a->sizes[l] + 15) & ~(size_t) 15);
	}
	floats += 2 * c->cap * ((c->max_width + 15) & ~(size_t) 15);
	// deltas must also hold a layer's input width (D_{l-1})
	floats += 2 * c->cap * 16;
	if ((c->mem = fb_alloc((floats + 16) * sizeof(float))) == NULL) {
		fb_free(c);
		return tr__errf(FB_ENOMEM, err, errlen,
		    "cpu backend: no memory for %zu activations", floats);
	}
	float *base = (float *) (((uintptr_t) c->mem + 63) & ~(uintptr_t) 63);
	for (int l = 0; l <= a->n_layers; l++) {
		c->act[l] = base + off;
		off += c->cap * ((a->sizes[l] + 15) & ~(size_t) 15);
	}
	c->d0 = base + off;
	off += c->cap * ((c->max_width + 15) & ~(size_t) 15) + c->cap * 16;
	c->d1 = base + off;
	if (o->blas_threads >= 1) {
		openblas_set_num_threads(o->blas_threads);
	}
	*state = c;
	return FB_OK;
}

static void
cpu_free(void *state)
{
	struct cpu *c = state;
	if (c != NULL) {
		fb_free(c->mem);
		fb_free(c);
	}
}

static int
cpu_set_weights(void *state, const float *const *w)
{
	struct cpu *c = state;
	if (w == NULL) {
		return FB_EINVAL;
	}
	for (int l = 0; l < c->a.n_layers; l++) {
		c->w[l] = w[2 * l];
		c->b[l] = w[2 * l + 1];
	}
	return FB_OK;
}

// forward computes act[1..L] for n rows of input x (row stride sizes[0]);
// act[L] holds the logits.
static void
forward(struct cpu *c, const float *x, size_t n)
{
	const struct tr_arch *a  = &c->a;
	const float          *in = x;
	for (int l = 1; l <= a->n_layers; l++) {
		size_t       ni = a->sizes[l - 1], no = a->sizes[l];
		float       *z = c->act[l];
		const float *b = c->b[l - 1];
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int) n,
		    (int) no, (int) ni, 1.0f, in, (int) ni, c->w[l - 1],
		    (int) ni, 0.0f, z, (int) no);
		if (l < a->n_layers) {
			for (size_t i = 0; i < n; i++) {
				float *row = z + i * no;
				for (size_t j = 0; j < no; j++) {
					float v = row[j] + b[j];
					row[j]  = v > 0.0f ? v : 0.0f;
				}
			}
		} else {
			for (size_t i = 0; i < n; i++) {
				float *row = z + i * no;
				for (size_t j = 0; j < no; j++) {
					row[j] += b[j];
				}
			}
		}
		in = z;
	}
}

// softmax_xent turns logits row into probabilities in place and returns
// -log p[y] (computed from the log-sum-exp, so it stays finite).
static double
softmax_xent(float *row, size_t k, int y)
{
	float  m = row[0];
	double s = 0.0;
	for (size_t j = 1; j < k; j++) {
		m = row[j] > m ? row[j] : m;
	}
	float zy = row[y] - m;
	for (size_t j = 0; j < k; j++) {
		float e = expf(row[j] - m);
		row[j]  = e;
		s += e;
	}
	float inv = (float) (1.0 / s);
	for (size_t j = 0; j < k; j++) {
		row[j] *= inv;
	}
	return log(s) - (double) zy;
}

static int
cpu_grad(void *state, const struct tr_dataset *ds, const uint32_t *idx,
    size_t n, float *const *g, double *loss_sum)
{
	struct cpu           *c = state;
	const struct tr_arch *a = &c->a;
	size_t                d = a->sizes[0], k = a->sizes[a->n_layers];
	int                   L    = a->n_layers;
	double                loss = 0.0;
	if (n == 0 || n > c->max_batch || ds == NULL || idx == NULL ||
	    g == NULL || c->w[0] == NULL) {
		return FB_EINVAL;
	}
	if (ds->dim != d) {
		return FB_EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		if (idx[i] >= ds->n || ds->y[idx[i]] < 0 ||
		    (size_t) ds->y[idx[i]] >= k) {
			return FB_ERANGE;
		}
		memcpy(c->act[0] + i * d, ds->x + (size_t) idx[i] * d,
		    d * sizeof(float));
	}
	forward(c, c->act[0], n);

	// D_L = softmax - onehot, written over the probabilities.
	float *dz = c->act[L];
	for (size_t i = 0; i < n; i++) {
		int y = ds->y[idx[i]];
		loss += softmax_xent(dz + i * k, k, y);
		dz[i * k + (size_t) y] -= 1.0f;
	}

	float *dnext = c->d0;
	for (int l = L; l >= 1; l--) {
		size_t       ni = a->sizes[l - 1], no = a->sizes[l];
		const float *in = c->act[l - 1];
		float       *gw = g[2 * (l - 1)], *gb = g[2 * (l - 1) + 1];
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int) no,
		    (int) ni, (int) n, 1.0f, dz, (int) no, in, (int) ni, 0.0f,
		    gw, (int) ni);
		memcpy(gb, dz, no * sizeof(float));
		for (size_t i = 1; i < n; i++) {
			const float *row = dz + i * no;
			for (size_t j = 0; j < no; j++) {
				gb[j] += row[j];
			}
		}
		int rv;
		if (c->layer_done != NULL &&
		    (rv = c->layer_done(c->layer_arg, l - 1)) != FB_OK) {
			return rv;
		}
		if (l == 1) {
			break;
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int) n,
		    (int) ni, (int) no, 1.0f, dz, (int) no, c->w[l - 1],
		    (int) ni, 0.0f, dnext, (int) ni);
		for (size_t i = 0; i < n * ni; i++) {
			dnext[i] = in[i] > 0.0f ? dnext[i] : 0.0f;
		}
		dz    = dnext;
		dnext = (dnext == c->d0) ? c->d1 : c->d0;
	}
	if (loss_sum != NULL) {
		*loss_sum = loss;
	}
	return FB_OK;
}

static int
cpu_evaluate(void *state, const struct tr_dataset *ds, double *loss_mean,
    double *accuracy)
{
	struct cpu           *c = state;
	const struct tr_arch *a = &c->a;
	size_t d = a->sizes[0], k = a->sizes[a->n_layers], correct = 0;
	double loss = 0.0;
	if (ds == NULL || ds->n == 0 || ds->dim != d || c->w[0] == NULL) {
		return FB_EINVAL;
	}
	for (size_t s = 0; s < ds->n; s += c->cap) {
		size_t n = ds->n - s < c->cap ? ds->n - s : c->cap;
		forward(c, ds->x + s * d, n);
		float *z = c->act[a->n_layers];
		for (size_t i = 0; i < n; i++) {
			int    y    = ds->y[s + i];
			float *row  = z + i * k;
			size_t best = 0;
			if (y < 0 || (size_t) y >= k) {
				return FB_ERANGE;
			}
			for (size_t j = 1; j < k; j++) {
				best = row[j] > row[best] ? j : best;
			}
			correct += best == (size_t) y;
			loss += softmax_xent(row, k, y);
		}
	}
	if (loss_mean != NULL) {
		*loss_mean = loss / (double) ds->n;
	}
	if (accuracy != NULL) {
		*accuracy = (double) correct / (double) ds->n;
	}
	return FB_OK;
}

static int
cpu_set_layer_hook(void *state, int (*done)(void *arg, int layer), void *arg)
{
	struct cpu *c = state;
	c->layer_done = done;
	c->layer_arg  = arg;
	return FB_OK;
}

const struct tr_backend_ops tr__backend_cpu_ops = {
	.name           = "cpu",
	.alloc          = cpu_alloc,
	.free           = cpu_free,
	.set_weights    = cpu_set_weights,
	.grad           = cpu_grad,
	.evaluate       = cpu_evaluate,
	.set_layer_hook = cpu_set_layer_hook,
};
