// tr/ctr.h — click-through-rate (CTR) workloads in the trainer library:
// Criteo-format data (read, hashed, held in memory), the synthetic data
// generator behind ferry-ctrgen, a DLRM-style model's forward and backward
// passes on the CPU, and the quality figures (exact AUC, log loss).
//
// A CTR sample is a 0/1 label, TR_CTR_DENSE integer features and
// TR_CTR_CAT categorical fields. Each categorical value becomes a uint64
// key of its field's sparse table (tr_ctr_key); each integer feature x
// becomes log(1 + max(x, 0)) (tr_ctr_dense_value), as DLRM's Criteo
// preprocessing does.
//
// Errors and memory follow tr/tr.h: 0 (FB_OK) or a positive FB_E* code,
// a one-line reason in (err, errlen); heap through fb_alloc. The per-step
// functions (tr_dlrm_grad, tr_dlrm_predict) never allocate.
#ifndef TR_CTR_H
#define TR_CTR_H

#include <stddef.h>
#include <stdint.h>

#include "tr/tr.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_CTR_DENSE 13 // integer features of a Criteo sample
#define TR_CTR_CAT 26   // categorical fields of a Criteo sample

// The key of a missing (empty) categorical value: a key of its own, so
// "missing" learns a row like any value.
#define TR_CTR_KEY_MISSING UINT64_MAX

// ---- data -----------------------------------------------------------------
// Files: the Criteo Display Advertising text format (one sample a line:
// label, 13 integer columns, 26 categorical columns, tab-separated, an
// empty column for a missing value; "\n" or "\r\n"), or the compact binary
// form of the same samples already transformed:
//
//   header, 32 bytes: "FERRYCTR" | u32 version (1) | u32 n_dense (13) |
//                     u32 n_cat (26) | u32 0 | u64 n
//   n records of 264 bytes: f32 label | f32 dense[13] (tr_ctr_dense_value)
//                     | u64 keys[26] (tr_ctr_key)
//
// all little-endian. A reader tells them apart by the magic.
#define TR_CTR_BIN_MAGIC "FERRYCTR"
#define TR_CTR_BIN_HEADER 32
#define TR_CTR_BIN_RECORD 264

// Samples in memory. dense is sample-major (dense[i*13 + j]); keys are
// FIELD-major (keys[f*n + i]), so a batch [s, s+b) of field f is the
// contiguous keys + f*n + s that a struct ferry_rows block borrows.
struct tr_ctr_data {
	size_t    n;
	float    *label; // n values, 0 or 1
	float    *dense; // n * TR_CTR_DENSE
	uint64_t *keys;  // TR_CTR_CAT * n
};

// tr_ctr_key maps a categorical column's text (len bytes, no tab or
// newline) to its key: empty -> TR_CTR_KEY_MISSING; 1 to 16 hexadecimal
// digits (either case) -> their value; anything else -> the 64-bit FNV-1a
// hash of the bytes with the top bit set (so it cannot equal a hex value
// of up to 15 digits). Python's reader applies the same rule.
uint64_t tr_ctr_key(const char *s, size_t len);

// tr_ctr_dense_value maps an integer column to the model's input:
// (float) log1p((double) max(v, 0)); a missing column is 0.
float tr_ctr_dense_value(int64_t v, int missing);

// tr_ctr_parse_line parses one text line (len bytes, without its newline)
// into a label, TR_CTR_DENSE inputs and TR_CTR_CAT keys. Errors: FB_EPROTO
// with the column named (wrong column count, label not 0/1, an integer
// column not an integer or out of int64 range).
int tr_ctr_parse_line(const char *line, size_t len, float *label,
    float dense[TR_CTR_DENSE], uint64_t keys[TR_CTR_CAT], char *err,
    size_t errlen);

// tr_ctr_load reads a text or binary file (format by its first 8 bytes;
// text may be gzipped) into d, at most max_rows samples (0: all).
// Errors: FB_ENOTFOUND (cannot open), FB_EPROTO (a bad line: err names the
// file, the line number and the column; a binary file's bad header or
// truncated record), FB_ENOMEM, FB_EINVAL (an empty file). On success
// release d with tr_ctr_fini; on failure d is zeroed.
int tr_ctr_load(const char *path, size_t max_rows, struct tr_ctr_data *d,
    char *err, size_t errlen);

// tr_ctr_fini frees d's buffers and zeroes it. Safe on a zeroed d.
void tr_ctr_fini(struct tr_ctr_data *d);

// ---- quality --------------------------------------------------------------
// tr_auc sets *auc to the exact ROC AUC of scores against 0/1 labels: the
// probability that a random positive scores above a random negative, ties
// counting one half (the Mann-Whitney statistic over midranks). Allocates
// O(n) scratch. Errors: FB_EINVAL (n == 0, or only one class present),
// FB_ENOMEM.
int tr_auc(const float *score, const float *label, size_t n, double *auc);

// tr_logloss returns the mean binary cross-entropy of probabilities p
// (clamped to [1e-7, 1 - 1e-7]) against 0/1 labels; 0 when n == 0.
double tr_logloss(const float *p, const float *label, size_t n);

// ---- the generator (ferry-ctrgen) -------------------------------------------
// Sample i of a split is a pure function of (seed, split, i), so files are
// reproducible and tests can regenerate any sample. docs/ctr-data.md
// describes the model.

// The binary form's pieces (ctr_data.c): tr_ctr_bin_header writes the
// 32-byte header for n samples; tr_ctr_bin_record one 264-byte record of
// already transformed values; tr_ctr_bin_write a whole data set to path.
// Errors (tr_ctr_bin_write): FB_ESYSERR | errno, naming the path.
void tr_ctr_bin_header(uint8_t out[TR_CTR_BIN_HEADER], uint64_t n);
void tr_ctr_bin_record(uint8_t out[TR_CTR_BIN_RECORD], float label,
    const float dense[TR_CTR_DENSE], const uint64_t keys[TR_CTR_CAT]);
int  tr_ctr_bin_write(const char *path, const struct tr_ctr_data *d, char *err,
     size_t errlen);

#define TR_CTRGEN_TRAIN 0 // the splits: separate streams of one seed
#define TR_CTRGEN_TEST 1
#define TR_CTRGEN_K 6 // latent width of the ground-truth model

// The generator's parameters, all derived from (seed, vocab_scale) by
// tr_ctrgen_init: per field its vocabulary, Zipf exponent, missing rate
// and signal strength; per dense column its distribution and weight.
struct tr_ctrgen {
	uint64_t seed;
	uint64_t vocab[TR_CTR_CAT];
	double   zipf_a[TR_CTR_CAT]; // density of id x ~ (x+1)^-a
	double   zipf_c[TR_CTR_CAT]; // (vocab+1)^(1-a) - 1
	double   cat_missing[TR_CTR_CAT];
	double   cat_scale[TR_CTR_CAT]; // field's share of the signal
	double   head[TR_CTR_CAT];      // ids past ~head carry little signal
	double   dense_mu[TR_CTR_DENSE], dense_sigma[TR_CTR_DENSE];
	double   dense_missing[TR_CTR_DENSE], dense_w[TR_CTR_DENSE];
	double   bias0; // the logit's intercept
};

// One generated sample: raw values as written to the text file.
struct tr_ctrgen_sample {
	int      label;               // 0 or 1, drawn from prob
	double   prob;                // the ground truth's click probability
	int64_t  dense[TR_CTR_DENSE]; // integer columns
	uint32_t dense_missing;       // bit j: column I(j+1) is empty
	uint64_t id[TR_CTR_CAT];      // each field's id (0 most frequent)
	uint32_t cat[TR_CTR_CAT];     // its written value: hash of (f, id)
	uint32_t cat_missing;         // bit f: field C(f+1) is empty
};

// tr_ctrgen_init derives g from seed and vocab_scale (> 0; 1.0: the full
// vocabularies, 10 to 10^7, 33.6M in all; each vocabulary is scaled and
// at least 2). Errors: FB_EINVAL (vocab_scale not positive or too big).
int tr_ctrgen_init(struct tr_ctrgen *g, uint64_t seed, double vocab_scale,
    char *err, size_t errlen);

// tr_ctrgen_sample generates sample i of split (TR_CTRGEN_TRAIN or
// TR_CTRGEN_TEST) into s. No allocation, no state: thread safe.
void tr_ctrgen_sample(const struct tr_ctrgen *g, int split, uint64_t i,
    struct tr_ctrgen_sample *s);

// tr_ctrgen_format writes s as one Criteo text line ending in "\n" into
// buf (TR_CTRGEN_LINE_MAX bytes suffice) and returns its length.
#define TR_CTRGEN_LINE_MAX 512
size_t tr_ctrgen_format(const struct tr_ctrgen_sample *s, char *buf);

// tr_ctrgen_record gives s as the model sees it (what tr_ctr_load makes
// of the line tr_ctrgen_format writes): label, transformed dense values,
// keys.
void tr_ctrgen_record(const struct tr_ctrgen_sample *s, float *label,
    float dense[TR_CTR_DENSE], uint64_t keys[TR_CTR_CAT]);

// What ferry-ctrgen writes (tr_ctrgen_run): DIR/{train,test}.tsv and/or
// .bin as formats says, and DIR/meta.json.
#define TR_CTRGEN_TSV 1
#define TR_CTRGEN_BIN 2
struct tr_ctrgen_opts {
	const char *out; // the directory (created if missing)
	uint64_t    rows;
	uint64_t    test_rows;
	uint64_t    seed;
	int         formats; // TR_CTRGEN_TSV | TR_CTRGEN_BIN
	double      vocab_scale;
};

// The run's figures: the ground truth's own AUC and log loss on the test
// split (the ceiling a model can reach), the train split's positive rate.
struct tr_ctrgen_result {
	double   auc_ceiling;
	double   logloss_ceiling;
	double   positive_rate;
	uint64_t total_vocab;
};

// tr_ctrgen_run generates both splits, streaming (it holds only the test
// split's probabilities and labels, 8 bytes a row, for the ceiling).
// Errors: FB_EINVAL (bad options), FB_ESYSERR | errno (a file cannot be
// written, named), FB_ENOMEM.
int tr_ctrgen_run(const struct tr_ctrgen_opts *o, struct tr_ctrgen_result *r,
    char *err, size_t errlen);

// ---- DLRM-style model -----------------------------------------------------
// bottom MLP: TR_CTR_DENSE inputs -> bottom widths, ReLU after EVERY layer;
// interaction over the 27 vectors z_0 = bottom output, z_1..z_26 = the
// fields' embeddings (dim emb_dim):
//   TR_DLRM_DOT: [z_0, <z_i, z_j> for i = 1..26, j = 0..i-1] (i outer,
//                j inner: DLRM's lower-triangle order), width
//                emb_dim + 27*26/2; needs bottom's last width == emb_dim;
//   TR_DLRM_CAT: [z_0, z_1, ..., z_26], width last_bottom + 26*emb_dim;
// top MLP: interaction width -> top widths, ReLU after every layer but
// the last, whose width is 1 (the logit); loss: binary cross-entropy with
// logits, log(1 + exp(z)) - y z, computed stably.
//
// Dense tensors (PyTorch nn.Linear layout, W row-major [out x in]), in
// this order: bot1.weight, bot1.bias, ..., botB.bias, top1.weight,
// top1.bias, ..., topT.bias. Tables: one per field, "emb0".."emb25", rows
// of emb_dim floats.
enum tr_dlrm_interaction { TR_DLRM_DOT = 0, TR_DLRM_CAT = 1 };

struct tr_dlrm_arch {
	uint32_t emb_dim;                   // 1..1024
	int      interaction;               // enum tr_dlrm_interaction
	int      n_bottom;                  // bottom layers (>= 1)
	size_t   bottom[TR_MAX_LAYERS + 1]; // [0] = TR_CTR_DENSE, then widths
	int      n_top;                     // top layers (>= 1)
	size_t   top[TR_MAX_LAYERS + 1];    // [0] = interaction width, ..., 1
};

// tr_dlrm_arch_parse builds an arch from --bottom ("64,16": widths after
// the 13 inputs), --top ("64,1": widths after the interaction, the last
// 1), --emb-dim and --interaction ("dot" or "cat"). n_bottom + n_top <=
// TR_MAX_LAYERS. Errors: FB_EINVAL naming the flag and what is wrong.
int tr_dlrm_arch_parse(const char *bottom, const char *top, uint32_t emb_dim,
    const char *interaction, struct tr_dlrm_arch *a, char *err, size_t errlen);

// The dense tensors: count, floats of tensor i, name of tensor i (as
// above; 32 bytes always enough).
size_t tr_dlrm_n_tensors(const struct tr_dlrm_arch *a);
size_t tr_dlrm_tensor_len(const struct tr_dlrm_arch *a, size_t i);
void   tr_dlrm_tensor_name(const struct tr_dlrm_arch *a, size_t i, char *buf,
      size_t n);

// tr_dlrm_params_init allocates zeroed dense tensors shaped for a (release
// with tr_params_fini); tr_dlrm_params_randomize sets every weight to
// Xavier-uniform U(-sqrt(6/(fan_in+fan_out)), +...) from one stream seeded
// with seed, tensor by tensor in order, and every bias to 0.
int  tr_dlrm_params_init(struct tr_params *p, const struct tr_dlrm_arch *a);
void tr_dlrm_params_randomize(struct tr_params *p,
    const struct tr_dlrm_arch *a, uint64_t seed);

// The model's workspace for batches of up to max_batch samples (and its
// BLAS thread count, process wide, as the CPU backend's).
struct tr_dlrm;
int  tr_dlrm_alloc(const struct tr_dlrm_arch *a, size_t max_batch,
     int blas_threads, struct tr_dlrm **out, char *err, size_t errlen);
void tr_dlrm_free(struct tr_dlrm *m);

// tr_dlrm_grad runs forward and backward over n samples (n <= max_batch)
// at dense weights w (tr_dlrm_n_tensors pointers):
//   dense: n * TR_CTR_DENSE inputs, sample-major;
//   emb:   the samples' embedding rows, FIELD-major: row of field f for
//          sample i at emb + (f*n + i) * emb_dim (the layout of
//          TR_CTR_CAT ferry_rows pull blocks of n keys each);
//   label: n values 0/1.
// Writes the gradients SUMMED over the n samples (not the mean): g[t] for
// each dense tensor, and emb_grad (same layout as emb: one gradient per
// occurrence, which libferry sums per key), and the summed loss into
// *loss_sum. Errors: FB_EINVAL (n == 0 or > max_batch).
int tr_dlrm_grad(struct tr_dlrm *m, const float *const *w, const float *dense,
    const float *emb, const float *label, size_t n, float *const *g,
    float *emb_grad, double *loss_sum);

// tr_dlrm_predict writes each sample's click probability (the sigmoid of
// its logit) into prob; inputs as tr_dlrm_grad. Errors: FB_EINVAL.
int tr_dlrm_predict(struct tr_dlrm *m, const float *const *w,
    const float *dense, const float *emb, size_t n, float *prob);

#ifdef __cplusplus
}
#endif
#endif // TR_CTR_H
