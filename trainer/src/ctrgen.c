// ctrgen.c — the synthetic CTR data set behind ferry-ctrgen: Criteo-shaped
// samples whose labels come from a hidden ground-truth model, so that the
// quality a model reaches can be set against a known ceiling.
//
// Everything is a pure function of the seed: sample i of a split is drawn
// from a stream seeded with hash(seed, split, i), and each (field, id)'s
// bias and latent vector from a stream seeded with hash(seed, field, id),
// so 10^7-id vocabularies cost no memory and any sample can be regenerated
// alone (tests do). docs/ctr-data.md describes the model and its tuning.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tr/ctr.h"
#include "tr_impl.h"

// Vocabularies at --vocab-scale 1: Criteo Kaggle's cardinalities, with the
// smallest raised to 10 and the largest cut to 10^7 (33.6M ids in all).
static const uint64_t base_vocab[TR_CTR_CAT] = { 1460, 583, 10000000, 2202608,
	305, 24, 12517, 633, 10, 93145, 5683, 8351593, 3194, 27, 14992,
	5461306, 10, 5652, 2173, 12, 7046547, 18, 15, 286181, 105, 142572 };

// Missing rates, Criteo-like: most fields always present, a few often
// empty; dense columns are empty more often.
static const double cat_missing[TR_CTR_CAT] = { 0, 0, 0.03, 0.03, 0, 0.1, 0, 0,
	0, 0, 0, 0.03, 0, 0, 0, 0.03, 0, 0, 0.44, 0.44, 0.03, 0, 0.76, 0.03,
	0.04, 0.04 };
static const double dense_missing[TR_CTR_DENSE] = { 0.45, 0, 0.21, 0.22, 0.03,
	0.22, 0.04, 0, 0.04, 0.45, 0.04, 0.77, 0.22 };

// The ground truth's scales, tuned so that the test split's ceiling AUC is
// about 0.80 at every vocab-scale and the positive rate about 0.25.
#define AMP_DECAY 0.35 // amplitude of id x: (1 + x/head)^-AMP_DECAY
#define HEAD_IDS 30.0  // the head size of a large field
#define BIAS_SD 0.35   // per-key bias scale
#define LATENT_SD 0.25 // per-key latent scale (per component)
#define DENSE_SD 0.5   // dense part's scale
#define BIAS0 -1.55    // the logit's intercept

static uint64_t
mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t
hash2(uint64_t a, uint64_t b)
{
	return mix64(a ^ mix64(b + 0x9e3779b97f4a7c15ULL));
}

// fmix32 (MurmurHash3's finaliser) is a bijection of uint32.
static uint32_t
fmix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	return h ^ (h >> 16);
}

// cat_value is the written value of field f's id: a bijection of the id
// (< 2^32), so no two ids of a field share a key.
static uint32_t
cat_value(int f, uint64_t id)
{
	uint32_t salt = fmix32(0x5bd1e995u * (uint32_t) (f + 1));
	return fmix32((uint32_t) id * 0x9e3779b1u + salt);
}

// unit draws a uniform double in [0, 1) (53 bits).
static double
unit(struct tr_rng *r)
{
	return (double) (tr_rng_next(r) >> 11) * 0x1p-53;
}

// sym draws a uniform in [-sqrt(3), sqrt(3)): mean 0, variance 1.
static double
sym(struct tr_rng *r)
{
	return (2.0 * unit(r) - 1.0) * 1.7320508075688772;
}

static double
normal(struct tr_rng *r)
{
	double u = 1.0 - unit(r); // (0, 1]
	double v = unit(r);
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

// frac_f spreads a field's parameters over [0, 1) (golden-ratio steps).
static double
frac_f(int f, double off)
{
	double x = (f + 1) * 0.6180339887498949 + off;
	return x - floor(x);
}

int
tr_ctrgen_init(struct tr_ctrgen *g, uint64_t seed, double vocab_scale,
    char *err, size_t errlen)
{
	struct tr_rng r;
	int           f;
	int           j;
	memset(g, 0, sizeof *g);
	if (!(vocab_scale > 0.0) || vocab_scale > 400.0) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--vocab-scale %g: must be in (0, 400]", vocab_scale);
	}
	g->seed  = seed;
	g->bias0 = BIAS0;
	for (f = 0; f < TR_CTR_CAT; f++) {
		double v = floor((double) base_vocab[f] * vocab_scale + 0.5);
		double a = 1.05 + 0.25 * frac_f(f, 0.0);
		g->vocab[f]  = v < 2.0 ? 2 : (uint64_t) v;
		g->zipf_a[f] = a;
		g->zipf_c[f] = pow((double) g->vocab[f] + 1.0, 1.0 - a) - 1.0;
		g->cat_missing[f] = cat_missing[f];
		g->cat_scale[f]   = 0.4 + 0.6 * frac_f(f, 0.3);
		// The head shrinks with small vocabularies, so a scaled-down
		// set keeps a learnable head and a noisy tail.
		g->head[f] = fmin(HEAD_IDS, 0.2 * (double) g->vocab[f] + 1.0);
	}
	// The dense columns' log-normal counts and weights: from the seed.
	tr_rng_seed(&r, hash2(seed, 0xd0d0));
	for (j = 0; j < TR_CTR_DENSE; j++) {
		g->dense_mu[j]      = 0.5 + 3.5 * unit(&r);
		g->dense_sigma[j]   = 0.6 + 1.2 * unit(&r);
		g->dense_missing[j] = dense_missing[j];
		g->dense_w[j]       = DENSE_SD * sym(&r) / sqrt(TR_CTR_DENSE);
	}
	return FB_OK;
}

// key_params derives (field, id)'s bias and latent vector.
static double
key_params(const struct tr_ctrgen *g, int f, uint64_t id,
    double v[TR_CTRGEN_K])
{
	struct tr_rng r;
	double        amp = g->cat_scale[f] *
	    pow(1.0 + (double) id / g->head[f], -AMP_DECAY);
	double b;
	int    k;
	tr_rng_seed(&r, hash2(hash2(g->seed ^ 0x6b6579ULL, (uint64_t) f), id));
	b = amp * BIAS_SD * sym(&r);
	for (k = 0; k < TR_CTRGEN_K; k++) {
		v[k] = amp * LATENT_SD * sym(&r);
	}
	return b;
}

void
tr_ctrgen_sample(const struct tr_ctrgen *g, int split, uint64_t i,
    struct tr_ctrgen_sample *s)
{
	struct tr_rng r;
	double        sum[TR_CTRGEN_K] = { 0 };
	double        sq = 0.0, z = g->bias0;
	int           f, j, k;
	tr_rng_seed(&r, hash2(hash2(g->seed, 0x5a17 + (uint64_t) split), i));
	s->dense_missing = 0;
	for (j = 0; j < TR_CTR_DENSE; j++) {
		double miss = unit(&r);
		double x    = g->dense_mu[j] + g->dense_sigma[j] * normal(&r);
		double c    = floor(expm1(x > 0.0 ? x : 0.0));
		s->dense[j] = (int64_t) c;
		if (j == 1 && miss > 0.95) { // I2 holds a few negatives
			s->dense[j] = -1 - (int64_t) (20.0 * (miss - 0.95));
		}
		if (miss < g->dense_missing[j]) {
			s->dense_missing |= 1u << j;
			continue;
		}
		// The model's own input transform, standardised.
		z += g->dense_w[j] *
		    ((double) tr_ctr_dense_value(s->dense[j], 0) -
		        g->dense_mu[j]) /
		    g->dense_sigma[j];
	}
	s->cat_missing = 0;
	for (f = 0; f < TR_CTR_CAT; f++) {
		double   miss = unit(&r);
		double   u    = unit(&r);
		double   v[TR_CTRGEN_K];
		double   x  = pow(1.0 + u * g->zipf_c[f],
		       1.0 / (1.0 - g->zipf_a[f]));
		uint64_t id = (uint64_t) x - 1;
		if (!(x >= 1.0) || id >= g->vocab[f]) {
			id = x >= 1.0 ? g->vocab[f] - 1 : 0;
		}
		s->id[f]  = id;
		s->cat[f] = cat_value(f, id);
		if (miss < g->cat_missing[f]) {
			s->cat_missing |= 1u << f;
			continue;
		}
		z += key_params(g, f, id, v);
		for (k = 0; k < TR_CTRGEN_K; k++) {
			sum[k] += v[k];
			sq += v[k] * v[k];
		}
	}
	// FM's pairwise term: sum over f < g of <v_f, v_g>.
	for (k = 0; k < TR_CTRGEN_K; k++) {
		z += 0.5 * sum[k] * sum[k];
	}
	z -= 0.5 * sq;
	s->prob  = 1.0 / (1.0 + exp(-z));
	s->label = unit(&r) < s->prob;
}

static char *
put_int(char *p, int64_t v)
{
	char     tmp[24];
	int      n = 0;
	uint64_t m = v < 0 ? 0 - (uint64_t) v : (uint64_t) v;
	if (v < 0) {
		*p++ = '-';
	}
	do {
		tmp[n++] = (char) ('0' + m % 10);
		m /= 10;
	} while (m != 0);
	while (n > 0) {
		*p++ = tmp[--n];
	}
	return p;
}

size_t
tr_ctrgen_format(const struct tr_ctrgen_sample *s, char *buf)
{
	static const char hex[] = "0123456789abcdef";
	char             *p     = buf;
	int               j;
	*p++ = (char) ('0' + s->label);
	for (j = 0; j < TR_CTR_DENSE; j++) {
		*p++ = '\t';
		if (!(s->dense_missing >> j & 1)) {
			p = put_int(p, s->dense[j]);
		}
	}
	for (j = 0; j < TR_CTR_CAT; j++) {
		*p++ = '\t';
		if (!(s->cat_missing >> j & 1)) {
			int b;
			for (b = 28; b >= 0; b -= 4) {
				*p++ = hex[(s->cat[j] >> b) & 0xf];
			}
		}
	}
	*p++ = '\n';
	return (size_t) (p - buf);
}

void
tr_ctrgen_record(const struct tr_ctrgen_sample *s, float *label,
    float dense[TR_CTR_DENSE], uint64_t keys[TR_CTR_CAT])
{
	int j;
	*label = (float) s->label;
	for (j = 0; j < TR_CTR_DENSE; j++) {
		dense[j] = tr_ctr_dense_value(s->dense[j],
		    (int) (s->dense_missing >> j & 1));
	}
	for (j = 0; j < TR_CTR_CAT; j++) {
		keys[j] = (s->cat_missing >> j & 1) ? TR_CTR_KEY_MISSING
		                                    : (uint64_t) s->cat[j];
	}
}

// split_out is one split's open files (NULL where the format is off).
struct split_out {
	FILE *tsv, *bin;
	char  tsv_path[4096], bin_path[4096];
};

static int
open_out(const char *path, FILE **f, char *err, size_t errlen)
{
	*f = fopen(path, "wb");
	if (*f == NULL) {
		int e = errno;
		return tr__errf(FB_ESYSERR | e, err, errlen,
		    "%s: cannot create: %s", path, strerror(e));
	}
	setvbuf(*f, NULL, _IOFBF, 1u << 20);
	return FB_OK;
}

// close_out closes f (if open) and reports a write error on path.
static int
close_out(FILE **f, const char *path, int rv, char *err, size_t errlen)
{
	int bad;
	if (*f == NULL) {
		return rv;
	}
	errno = 0;
	bad   = ferror(*f);
	bad |= fclose(*f) != 0;
	*f = NULL;
	if (bad && rv == FB_OK) {
		int e = errno ? errno : EIO;
		return tr__errf(FB_ESYSERR | e, err, errlen,
		    "%s: write failed: %s", path, strerror(e));
	}
	return rv;
}

// write_split streams samples [0, n) of split to its files; for the test
// split it keeps each sample's probability and label (prob, label).
static int
write_split(const struct tr_ctrgen *g, const struct tr_ctrgen_opts *o,
    int split, uint64_t n, float *prob, float *label, uint64_t *positives,
    char *err, size_t errlen)
{
	const char      *name = split == TR_CTRGEN_TEST ? "test" : "train";
	struct split_out so   = { 0 };
	uint8_t          rec[TR_CTR_BIN_RECORD];
	char             line[TR_CTRGEN_LINE_MAX];
	uint64_t         i;
	int              rv = FB_OK;
	snprintf(so.tsv_path, sizeof so.tsv_path, "%s/%s.tsv", o->out, name);
	snprintf(so.bin_path, sizeof so.bin_path, "%s/%s.bin", o->out, name);
	if (o->formats & TR_CTRGEN_TSV) {
		rv = open_out(so.tsv_path, &so.tsv, err, errlen);
	}
	if (rv == FB_OK && (o->formats & TR_CTRGEN_BIN)) {
		rv = open_out(so.bin_path, &so.bin, err, errlen);
		if (rv == FB_OK) {
			tr_ctr_bin_header(rec, n);
			fwrite(rec, 1, TR_CTR_BIN_HEADER, so.bin);
		}
	}
	for (i = 0; rv == FB_OK && i < n; i++) {
		struct tr_ctrgen_sample s;
		tr_ctrgen_sample(g, split, i, &s);
		*positives += (uint64_t) s.label;
		if (prob != NULL) {
			prob[i]  = (float) s.prob;
			label[i] = (float) s.label;
		}
		if (so.tsv != NULL) {
			fwrite(line, 1, tr_ctrgen_format(&s, line), so.tsv);
		}
		if (so.bin != NULL) {
			float    l, d[TR_CTR_DENSE];
			uint64_t k[TR_CTR_CAT];
			tr_ctrgen_record(&s, &l, d, k);
			tr_ctr_bin_record(rec, l, d, k);
			fwrite(rec, 1, TR_CTR_BIN_RECORD, so.bin);
		}
	}
	rv = close_out(&so.tsv, so.tsv_path, rv, err, errlen);
	return close_out(&so.bin, so.bin_path, rv, err, errlen);
}

static int
write_meta(const struct tr_ctrgen *g, const struct tr_ctrgen_opts *o,
    const struct tr_ctrgen_result *r, char *err, size_t errlen)
{
	char  path[4096];
	FILE *f;
	int   rv, j;
	snprintf(path, sizeof path, "%s/meta.json", o->out);
	rv = open_out(path, &f, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	fprintf(f,
	    "{\"seed\":%llu,\"rows\":%llu,\"test_rows\":%llu,"
	    "\"auc_ceiling\":%.6f,\"logloss_ceiling\":%.6f,"
	    "\"positive_rate\":%.6f,\"vocab\":[",
	    (unsigned long long) o->seed, (unsigned long long) o->rows,
	    (unsigned long long) o->test_rows, r->auc_ceiling,
	    r->logloss_ceiling, r->positive_rate);
	for (j = 0; j < TR_CTR_CAT; j++) {
		fprintf(f, "%s%llu", j ? "," : "",
		    (unsigned long long) g->vocab[j]);
	}
	fprintf(f, "],\"total_vocab\":%llu}\n",
	    (unsigned long long) r->total_vocab);
	return close_out(&f, path, FB_OK, err, errlen);
}

int
tr_ctrgen_run(const struct tr_ctrgen_opts *o, struct tr_ctrgen_result *r,
    char *err, size_t errlen)
{
	struct tr_ctrgen g;
	float           *prob  = NULL;
	float           *label = NULL;
	uint64_t         pos = 0, tpos = 0;
	int              rv, f;
	memset(r, 0, sizeof *r);
	if (o->out == NULL || o->out[0] == '\0' || o->rows == 0 ||
	    o->test_rows == 0 || (o->formats & ~3) != 0 || o->formats == 0) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "ctrgen: need --out, --rows > 0, --test-rows > 0 and a "
		    "format");
	}
	if (o->test_rows > SIZE_MAX / (2 * sizeof(float))) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--test-rows %llu: too many",
		    (unsigned long long) o->test_rows);
	}
	rv = tr_ctrgen_init(&g, o->seed, o->vocab_scale, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	if (mkdir(o->out, 0777) != 0 && errno != EEXIST) {
		int e = errno;
		return tr__errf(FB_ESYSERR | e, err, errlen,
		    "%s: cannot create the directory: %s", o->out,
		    strerror(e));
	}
	prob  = fb_alloc((size_t) o->test_rows * sizeof *prob);
	label = fb_alloc((size_t) o->test_rows * sizeof *label);
	if (prob == NULL || label == NULL) {
		rv = tr__errf(FB_ENOMEM, err, errlen,
		    "ctrgen: out of memory for %llu test rows",
		    (unsigned long long) o->test_rows);
		goto out;
	}
	rv = write_split(&g, o, TR_CTRGEN_TRAIN, o->rows, NULL, NULL, &pos,
	    err, errlen);
	if (rv == FB_OK) {
		rv = write_split(&g, o, TR_CTRGEN_TEST, o->test_rows, prob,
		    label, &tpos, err, errlen);
	}
	if (rv != FB_OK) {
		goto out;
	}
	r->positive_rate = (double) pos / (double) o->rows;
	for (f = 0; f < TR_CTR_CAT; f++) {
		r->total_vocab += g.vocab[f];
	}
	r->logloss_ceiling = tr_logloss(prob, label, (size_t) o->test_rows);
	if (tr_auc(prob, label, (size_t) o->test_rows, &r->auc_ceiling) !=
	    FB_OK) {
		r->auc_ceiling = 0.5; // one class only: nothing to rank
	}
	rv = write_meta(&g, o, r, err, errlen);
out:
	fb_free(prob);
	fb_free(label);
	return rv;
}
