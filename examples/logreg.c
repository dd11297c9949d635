// logreg.c: logistic regression on two classes of Fashion-MNIST (sneaker
// against ankle boot), trained as one rank of a synchronous Ferry job,
// using only <ferry/ferry.h>. It owns a small IDX reader (plain or
// gzipped files, every header field checked), the model (784 weights and a
// bias, two tensors), its gradient and the loop; it prints the mean
// training loss of each epoch and, at the end, the test loss and accuracy.
//
// usage: logreg SCHEDULER_URL RANK [DATA_DIR]   one rank of a live job
//        logreg --local TRAINERS [DATA_DIR]     the same job in one process
//
// Rank r of T takes the training examples i with i % T == r, in file order,
// and each step pushes the gradient SUMMED over its next BATCH of them; in
// a sync job without codecs the servers apply w -= lr * (sum over ranks) /
// (T * BATCH), which is plain SGD on the union of the T minibatches.
// --local computes exactly that in one process, so its numbers are what a
// T-rank job must print (up to float rounding): tests/install checks it.
#include <ferry/ferry.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum {
	PIXELS = 28 * 28, // features per example
	BATCH  = 32,      // examples per rank and step
	EPOCHS = 2,
	CLASS0 = 7, // sneaker: label 0
	CLASS1 = 9, // ankle boot: label 1
};
#define LR 0.5
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

// The examples of the two classes: n rows of PIXELS features in [0, 1].
struct set {
	float *x;
	float *y; // 0 or 1
	size_t n;
};

// Reads a big-endian 32-bit field of an IDX header.
static int
read_u32(gzFile f, uint32_t *v)
{
	unsigned char b[4];
	if (gzread(f, b, 4) != 4)
		return -1;
	*v = (uint32_t) b[0] << 24 | (uint32_t) b[1] << 16 |
	    (uint32_t) b[2] << 8 | b[3];
	return 0;
}

// Opens DIR/NAME (or NAME.gz) and checks its IDX magic (type ubyte, dims
// dimensions); the sizes of the dimensions go to size[].
static gzFile
idx_open(const char *dir, const char *name, uint32_t dims, uint32_t *size)
{
	char     path[4096];
	uint32_t magic;
	gzFile   f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((f = gzopen(path, "rb")) == NULL) {
		snprintf(path, sizeof(path), "%s/%s.gz", dir, name);
		f = gzopen(path, "rb");
	}
	if (f == NULL) {
		fprintf(stderr, "logreg: cannot open %s/%s[.gz]\n", dir, name);
		return NULL;
	}
	if (read_u32(f, &magic) != 0 || magic != (0x0800u | dims)) {
		fprintf(stderr, "logreg: %s: not an IDX file of %u-d bytes\n",
		    path, dims);
		gzclose(f);
		return NULL;
	}
	for (uint32_t d = 0; d < dims; d++) {
		if (read_u32(f, &size[d]) != 0 || size[d] == 0 ||
		    size[d] > 10000000) {
			fprintf(stderr, "logreg: %s: bad dimension %u\n", path,
			    d);
			gzclose(f);
			return NULL;
		}
	}
	return f;
}

// Loads the examples of CLASS0 and CLASS1 from the IDX pair PREFIX-images-
// idx3-ubyte / PREFIX-labels-idx1-ubyte. Returns 0, or -1 after a message.
static int
set_load(struct set *s, const char *dir, const char *prefix)
{
	char           name[256];
	uint32_t       isz[3], lsz[1];
	unsigned char *px = NULL, *lab = NULL;
	gzFile         fi = NULL, fl = NULL;
	int            rv = -1;

	memset(s, 0, sizeof(*s));
	snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
	if ((fi = idx_open(dir, name, 3, isz)) == NULL)
		goto out;
	snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
	if ((fl = idx_open(dir, name, 1, lsz)) == NULL)
		goto out;
	if ((uint64_t) isz[1] * isz[2] != PIXELS || lsz[0] != isz[0]) {
		fprintf(stderr, "logreg: %s: %u images of %ux%u, %u labels\n",
		    prefix, isz[0], isz[1], isz[2], lsz[0]);
		goto out;
	}
	px   = malloc((size_t) isz[0] * PIXELS);
	lab  = malloc(lsz[0]);
	s->x = malloc((size_t) isz[0] * PIXELS * sizeof(float));
	s->y = malloc((size_t) isz[0] * sizeof(float));
	if (!px || !lab || !s->x || !s->y) {
		fprintf(stderr, "logreg: out of memory\n");
		goto out;
	}
	if (gzread(fi, px, isz[0] * PIXELS) != (int) (isz[0] * PIXELS) ||
	    gzread(fl, lab, lsz[0]) != (int) lsz[0]) {
		fprintf(stderr, "logreg: %s: file shorter than its header\n",
		    prefix);
		goto out;
	}
	for (uint32_t i = 0; i < isz[0]; i++) {
		if (lab[i] != CLASS0 && lab[i] != CLASS1)
			continue;
		for (int j = 0; j < PIXELS; j++)
			s->x[s->n * PIXELS + j] = px[(size_t) i * PIXELS + j] /
			    255.0f;
		s->y[s->n++] = lab[i] == CLASS1;
	}
	rv = 0;
out:
	if (fi)
		gzclose(fi);
	if (fl)
		gzclose(fl);
	free(px);
	free(lab);
	if (rv != 0) {
		free(s->x);
		free(s->y);
	}
	return rv;
}

// The model's probability that example x is CLASS1.
static float
predict(const float *w, float b, const float *x)
{
	float z = b;
	for (int j = 0; j < PIXELS; j++)
		z += w[j] * x[j];
	return 1.0f / (1.0f + expf(-z));
}

// Cross-entropy of one example, clamped away from log(0).
static double
xent(float p, float y)
{
	const double eps = 1e-7;
	return -(y * log(p + eps) + (1 - y) * log(1 - p + eps));
}

// Adds to (gw, gb) the gradient of the loss SUMMED over the examples
// idx[0..n) of s, and returns their summed loss.
static double
grad_add(const struct set *s, const size_t *idx, size_t n, const float *w,
    float b, float *gw, float *gb)
{
	double loss = 0;
	for (size_t k = 0; k < n; k++) {
		const float *x = s->x + idx[k] * PIXELS;
		float        p = predict(w, b, x), d = p - s->y[idx[k]];
		for (int j = 0; j < PIXELS; j++)
			gw[j] += d * x[j];
		*gb += d;
		loss += xent(p, s->y[idx[k]]);
	}
	return loss;
}

// The indices of rank r's (of t) minibatch at step: its examples
// i % t == r, taken BATCH at a time in file order.
static void
batch_of(size_t r, size_t t, size_t step, size_t *idx)
{
	for (size_t k = 0; k < BATCH; k++)
		idx[k] = (step * BATCH + k) * t + r;
}

static void
evaluate(const char *who, const struct set *test, const float *w, float b)
{
	double loss  = 0;
	size_t right = 0;
	for (size_t i = 0; i < test->n; i++) {
		float p = predict(w, b, test->x + i * PIXELS);
		loss += xent(p, test->y[i]);
		right += (p >= 0.5f) == (test->y[i] == 1);
	}
	printf("%s: test_loss %.6f test_acc %.4f\n", who, loss / test->n,
	    (double) right / test->n);
}

// One process computing what a t-rank sync job computes.
static int
train_local(size_t t, const struct set *train, const struct set *test)
{
	static float w[PIXELS], gw[PIXELS];
	float        b = 0, gb;
	size_t       idx[BATCH], steps = train->n / t / BATCH;

	for (int e = 0; e < EPOCHS; e++) {
		double loss = 0;
		for (size_t s = 0; s < steps; s++) {
			memset(gw, 0, sizeof(gw));
			gb = 0;
			for (size_t r = 0; r < t; r++) {
				batch_of(r, t, s, idx);
				loss += grad_add(train, idx, BATCH, w, b, gw,
				    &gb);
			}
			for (int j = 0; j < PIXELS; j++)
				w[j] -= (float) (LR * gw[j] / (t * BATCH));
			b -= (float) (LR * gb / (t * BATCH));
		}
		printf("local: epoch %d train_loss %.6f\n", e + 1,
		    loss / (steps * t * BATCH));
	}
	evaluate("local", test, w, b);
	return 0;
}

// One rank of a live job.
static int
train_rank(const char *url, int rank, const struct set *train,
    const struct set *test)
{
	static float             w[PIXELS], gw[PIXELS];
	float                    b       = 0, gb;
	float *const             wts[2]  = { w, &b };
	const float *const       grad[2] = { gw, &gb };
	struct ferry_tensor_desc t[2]    = { { "w", PIXELS,
		                                 FERRY_TENSOR_WEIGHTS },
		   { "b", 1, FERRY_TENSOR_WEIGHTS } };
	struct ferry_opts        o       = FERRY_OPTS_INIT;
	ferry_client            *c       = NULL;
	size_t                   idx[BATCH], trainers, steps;
	char                     who[32], why[128];

	o.scheduler_url = url;
	o.rank          = rank;
	o.lr            = LR;
	if (ferry_opts_check(&o, why, sizeof(why)) != FERRY_OK) {
		fprintf(stderr, "logreg: %s\n", why);
		return 2;
	}
	if (ferry_client_open(&o, &c) != FERRY_OK ||
	    ferry_client_declare(c, t, 2) != FERRY_OK ||
	    (rank == 0 &&
	        ferry_client_init_weights(c, (const float *const *) wts) !=
	            FERRY_OK) ||
	    ferry_client_pull(c, wts) != FERRY_OK)
		goto fail;
	trainers = (size_t) ferry_client_trainers(c);
	steps    = train->n / trainers / BATCH;
	snprintf(who, sizeof(who), "rank %d", rank);
	for (int e = 0; e < EPOCHS; e++) {
		double loss = 0;
		for (size_t s = 0; s < steps; s++) {
			memset(gw, 0, sizeof(gw));
			gb = 0;
			batch_of((size_t) rank, trainers, s, idx);
			loss += grad_add(train, idx, BATCH, w, b, gw, &gb);
			if (ferry_client_push_pull(c, grad, BATCH, wts) !=
			    FERRY_OK)
				goto fail;
		}
		printf("%s: epoch %d train_loss %.6f\n", who, e + 1,
		    loss / (steps * BATCH));
	}
	evaluate(who, test, w, b);
	ferry_client_close(c);
	return 0;
fail:
	fprintf(stderr, "logreg: rank %d: %s\n", rank,
	    c ? ferry_client_last_error(c) : "cannot open the client");
	ferry_client_close(c);
	return 1;
}

int
main(int argc, char **argv)
{
	struct set  train, test;
	int         local = argc > 1 && strcmp(argv[1], "--local") == 0;
	const char *dir;
	long        n;
	char       *end;
	int         rv;

	if (argc < 3 || argc > 4) {
		fprintf(stderr,
		    "usage: logreg SCHEDULER_URL RANK [DATA_DIR]\n"
		    "       logreg --local TRAINERS [DATA_DIR]\n");
		return 2;
	}
	n = strtol(argv[2], &end, 10);
	if (*end != '\0' || n < (local ? 1 : 0) || n > 1024) {
		fprintf(stderr, "logreg: bad %s '%s'\n",
		    local ? "TRAINERS" : "RANK", argv[2]);
		return 2;
	}
	dir = argc > 3 ? argv[3] : DEFAULT_DATA;
	if (set_load(&train, dir, "train") != 0)
		return 2;
	if (set_load(&test, dir, "t10k") != 0) {
		free(train.x);
		free(train.y);
		return 2;
	}
	rv = local ? train_local((size_t) n, &train, &test)
	           : train_rank(argv[1], (int) n, &train, &test);
	free(train.x);
	free(train.y);
	free(test.x);
	free(test.y);
	return rv;
}
