// tr/tr.h — the Ferry trainer library: data, partition, model, compute
// backends and the training loop that drives libferry.
//
// The pieces are usable on their own, which is what a single-process
// reference (the integration test) needs to rebuild exactly what a group of
// trainers computes:
//
//   struct tr_dataset train, test;          // (a) load data
//   tr_data_load(dir, classes, &train, &test, err, sizeof err);
//   struct tr_partition p;                  // (b) rank r's minibatches
//   tr_partition_init(&p, train.n, r, trainers, seed);
//   tr_partition_batch(&p, epoch, k, batch, &idx);
//   struct tr_params w, g;                  // (c) same init as rank 0
//   tr_params_init(&w, &arch); tr_params_randomize(&w, seed);
//   struct tr_backend *b;                   // (d) summed gradients
//   tr_backend_alloc("cpu", &arch, &bo, &b, err, sizeof err);
//   tr_backend_set_weights(b, tr_params_cptrs(&w));
//   tr_backend_grad(b, &train, idx, n, g.t, &loss_sum);
//   tr_params_sgd(&w, &g, lr, n);           // (e) the server's update
//
// Errors: functions return 0 (FB_OK) or a positive FB_E* code from
// <fb/fb.h>. Functions that take (err, errlen) also write a one-line,
// human-readable reason there on failure (err may be NULL). The library
// never prints, except the training loop (tr_train_run), which writes its
// progress lines to the FILE it is given and errors through FB_LOG.
//
// Threading: every object here is used by one thread at a time. Distinct
// objects are independent, except that OpenBLAS's thread count is process
// wide (see tr_backend_opts.blas_threads).
//
// Memory: all heap use goes through fb_alloc/fb_free. Nothing on the
// per-step path (tr_partition_batch, tr_backend_grad, tr_params_sgd)
// allocates.
#ifndef TR_TR_H
#define TR_TR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <ferry/ferry.h>

#include "fb/config.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- PRNG -----------------------------------------------------------------
// splitmix64 (Steele, Lea, Flood 2014): a fixed, portable generator so that
// every rank and every platform computes the same shuffles and weights.
// Never rand().
struct tr_rng {
	uint64_t s;
};

// tr_rng_seed starts a stream at seed. Identical seeds give identical
// streams.
static inline void
tr_rng_seed(struct tr_rng *r, uint64_t seed)
{
	r->s = seed;
}

// tr_rng_next returns the next 64 random bits.
static inline uint64_t
tr_rng_next(struct tr_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z          = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

// tr_rng_below returns a uniform integer in [0, n) without modulo bias
// (rejection sampling). n must be > 0.
uint64_t tr_rng_below(struct tr_rng *r, uint64_t n);

// tr_rng_uniform returns a uniform float in [0, 1) (24 random bits).
float tr_rng_uniform(struct tr_rng *r);

// tr_rng_normal returns a standard normal sample (Box–Muller).
float tr_rng_normal(struct tr_rng *r);

// ---- data -----------------------------------------------------------------
// A labelled data set held in memory: n rows of dim floats (row-major) and
// n labels in [0, classes).
struct tr_dataset {
	size_t   n;       // number of samples
	size_t   dim;     // input width (rows*cols for IDX images)
	int      classes; // labels are < classes
	float   *x;       // n*dim floats, pixels scaled to [0, 1]
	int32_t *y;       // n labels
};

// Caps on what a file may declare (untrusted input): at most
// TR_DATA_MAX_SAMPLES samples and TR_DATA_MAX_DIM pixels per sample.
#define TR_DATA_MAX_SAMPLES (1u << 26)
#define TR_DATA_MAX_DIM (1u << 20)

// tr_dataset_load_idx reads an IDX image file (magic 0x00000803, ubyte,
// n x rows x cols) and an IDX label file (magic 0x00000801, n) into ds.
// Each path is opened as given through zlib, so gzipped and plain files
// both work. classes is the number of classes the model predicts; every
// label must be below it.
// Errors: FB_ENOTFOUND (cannot open), FB_EPROTO (bad magic, bad or
// inconsistent dimensions, truncated or trailing bytes, corrupt gzip,
// label >= classes, image and label counts differ), FB_ENOMEM, FB_EINVAL.
// err names the file and what is wrong. On success ds owns its buffers:
// release them with tr_dataset_fini. On failure ds is left zeroed.
int tr_dataset_load_idx(struct tr_dataset *ds, const char *images_path,
    const char *labels_path, int classes, char *err, size_t errlen);

// tr_data_load loads Fashion-MNIST-style data from directory dir:
// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
// and t10k-labels-idx1-ubyte, each as "<name>.gz" or, if that does not
// exist, "<name>". The test set must have the training set's input width.
// Errors as tr_dataset_load_idx. On success release both with
// tr_dataset_fini; on failure neither needs it.
int tr_data_load(const char *dir, int classes, struct tr_dataset *train,
    struct tr_dataset *test, char *err, size_t errlen);

// tr_dataset_synthetic fills ds with n samples of dim features in
// `classes` Gaussian clusters (deterministic from seed); a learnable toy
// set for tests and benchmarks. Release with tr_dataset_fini.
// Errors: FB_EINVAL (zero sizes), FB_ENOMEM.
int tr_dataset_synthetic(struct tr_dataset *ds, size_t n, size_t dim,
    int classes, uint64_t seed);

// tr_dataset_fini frees ds's buffers and zeroes it. Safe on a zeroed ds.
void tr_dataset_fini(struct tr_dataset *ds);

// ---- partition ------------------------------------------------------------
// All ranks shuffle 0..n-1 with the same seed (Fisher–Yates over
// tr_rng_seed(seed)); rank r of T takes the contiguous slice
// [r*n/T, (r+1)*n/T) of that permutation, so partitions are disjoint,
// cover the set and differ in size by at most one. Before each epoch e the
// slice is reshuffled (from its original order, so the result depends only
// on seed and e) with a stream seeded by seed + e + 1 mixed with a constant
// (so epoch 0's order is not a second copy of the global shuffle). The k-th
// minibatch of an epoch is order[k*batch .. (k+1)*batch).
struct tr_partition {
	size_t    n_total;  // size of the whole set
	int       rank;     // this partition's rank
	int       trainers; // number of ranks
	uint64_t  seed;
	size_t    begin; // slice start in the global permutation
	size_t    count; // partition size
	uint32_t *base;  // count indices: the slice, in permutation order
	uint32_t *order; // count indices: the current epoch's order
	long      epoch; // epoch `order` holds (-1: none yet)
};

// tr_partition_init builds rank's partition of n samples among trainers.
// Errors: FB_EINVAL (n == 0, n > UINT32_MAX, trainers < 1, rank out of
// range), FB_ENOMEM. Release with tr_partition_fini (safe on zeroed p).
int tr_partition_init(struct tr_partition *p, size_t n, int rank, int trainers,
    uint64_t seed);
void tr_partition_fini(struct tr_partition *p);

// tr_partition_size returns the size of rank's partition of n samples.
size_t tr_partition_size(size_t n, int rank, int trainers);

// tr_partition_steps returns the number of minibatches every trainer runs
// per epoch: floor(smallest partition / batch) = floor(floor(n/T)/batch).
// Sync mode needs every trainer to run the same number of steps.
size_t tr_partition_steps(size_t n, int trainers, size_t batch);

// tr_partition_batch points *idx at the k-th minibatch (batch indices into
// the data set) of the given epoch, reshuffling first if p holds another
// epoch. *idx is borrowed: valid until the next call with another epoch or
// tr_partition_fini. Does not allocate.
// Errors: FB_EINVAL (batch == 0, epoch < 0), FB_ERANGE ((k+1)*batch >
// count).
int tr_partition_batch(struct tr_partition *p, long epoch, size_t k,
    size_t batch, const uint32_t **idx);

// ---- data leases (elastic jobs) -----------------------------------------
// With leases the scheduler hands out pieces [start, start+count) of epoch
// e's sample order, ferry_data_permutation(seed, e, n), whatever the rank
// count. A cursor walks the lease it holds in order, one batch at a time;
// a batch never spans two leases, so the last one of a lease may be short.
// The batch's indices are the permutation's own entries (no copy), and
// its end is the lease position that ferry_client_lease_mark reports.
struct tr_lease_cursor {
	size_t    n;          // data set size
	uint32_t *perm;       // n entries: perm_epoch's order under perm_seed
	long      perm_epoch; // -1: none computed yet
	uint64_t  perm_seed;
	uint64_t  id; // the lease held (0: none)
	uint32_t  epoch;
	uint64_t  pos, end; // next position, and the lease's end
};

// tr_lease_cursor_init prepares c for a data set of n samples.
// Errors: FB_EINVAL (n == 0 or > UINT32_MAX), FB_ENOMEM. Release with
// tr_lease_cursor_fini (safe on a zeroed c).
int  tr_lease_cursor_init(struct tr_lease_cursor *c, size_t n);
void tr_lease_cursor_fini(struct tr_lease_cursor *c);

// tr_lease_cursor_set makes l the lease c walks, from its start; the
// epoch's order is computed when it is not the one c holds (allocation
// free). Errors: FB_EINVAL (l->id == 0, or positions past n).
int tr_lease_cursor_set(struct tr_lease_cursor *c,
    const struct ferry_lease                   *l);

// tr_lease_cursor_batch points *idx at the next batch of at most `batch`
// positions of the held lease, sets *nb to its size and *mark to its end
// (the position after its last sample). It does not advance:
// tr_lease_cursor_advance does, once the step was applied, so a step
// whose push was dropped redoes the same samples.
// Errors: FB_EINVAL (batch 0), FB_ERANGE (no lease, or it is used up).
int tr_lease_cursor_batch(const struct tr_lease_cursor *c, size_t batch,
    const uint32_t **idx, size_t *nb, uint64_t *mark);

// tr_lease_cursor_advance moves past nb positions (up to the lease's end).
void tr_lease_cursor_advance(struct tr_lease_cursor *c, size_t nb);

// ---- the job's position in the data -----------------------------------
// Job step s (s steps done by every rank; in sync mode the weights'
// version is s) is minibatch k = s mod steps_per_epoch of epoch
// e = s / steps_per_epoch. Since an epoch's order depends only on the seed
// and e (above), a trainer that (re)joins at version s carries on with the
// very minibatch it would have used had it never stopped.
struct tr_position {
	long   epoch; // epoch e, from 0
	size_t k;     // minibatch k of epoch e
};

// tr_job_steps returns how many steps the job runs: epochs *
// steps_per_epoch, capped at max_steps when that is not 0 (--max-steps and
// --epochs count job steps, not the steps one process ran). 0 when
// steps_per_epoch is 0 or epochs < 1.
uint64_t tr_job_steps(size_t steps_per_epoch, long epochs, uint64_t max_steps);

// tr_job_position sets *pos to job step `step`'s epoch and minibatch.
// Errors: FB_EINVAL (steps_per_epoch == 0, pos NULL), FB_ERANGE (step >=
// total: the job has no such step; *pos untouched).
int tr_job_position(uint64_t step, size_t steps_per_epoch, uint64_t total,
    struct tr_position *pos);

// ---- model ----------------------------------------------------------------
// An MLP: sizes[0] inputs, sizes[1..n_layers-1] hidden ReLU units,
// sizes[n_layers] classes with softmax cross-entropy.
//
// Parameters are 2*n_layers tensors in this order: W1, b1, W2, b2, ...,
// named "fc1.weight", "fc1.bias", "fc2.weight", ... W_l is row-major
// [out x in] (sizes[l] rows of sizes[l-1]), the PyTorch nn.Linear layout,
// so y = x W_l^T + b_l.
#define TR_MAX_LAYERS 16
#define TR_MAX_TENSORS (2 * TR_MAX_LAYERS)
#define TR_MAX_WIDTH (1u << 20)

struct tr_arch {
	int    n_layers;                 // weight layers (>= 1)
	size_t sizes[TR_MAX_LAYERS + 1]; // n_layers + 1 widths
};

// tr_arch_parse parses "784,256,128,10" (at least two widths, each in
// [1, TR_MAX_WIDTH], at most TR_MAX_LAYERS+1 of them; the last, the number
// of classes, at least 2). Errors: FB_EINVAL with the reason in err.
int tr_arch_parse(const char *spec, struct tr_arch *a, char *err,
    size_t errlen);

// tr_arch_n_tensors returns 2*n_layers; tr_arch_tensor_len the number of
// floats of tensor i; tr_arch_n_params the total.
size_t tr_arch_n_tensors(const struct tr_arch *a);
size_t tr_arch_tensor_len(const struct tr_arch *a, size_t i);
size_t tr_arch_n_params(const struct tr_arch *a);

// tr_arch_tensor_name writes tensor i's name ("fc<l>.weight" or
// "fc<l>.bias", l from 1) into buf (n bytes; 32 is always enough).
void tr_arch_tensor_name(const struct tr_arch *a, size_t i, char *buf,
    size_t n);

// A set of parameter (or gradient) tensors in one contiguous block:
// t[i] points at tensor i inside data; len[i] its floats.
struct tr_params {
	size_t n_tensors;
	size_t total; // floats in data
	float *data;
	float *t[TR_MAX_TENSORS];
	size_t len[TR_MAX_TENSORS];
};

// tr_params_init allocates zeroed tensors shaped for a. Errors: FB_EINVAL,
// FB_ENOMEM. Release with tr_params_fini (safe on zeroed p).
int  tr_params_init(struct tr_params *p, const struct tr_arch *a);
void tr_params_fini(struct tr_params *p);

// tr_params_cptrs returns p->t as the `const float *const *` that
// libferry and tr_backend_set_weights take.
static inline const float *const *
tr_params_cptrs(const struct tr_params *p)
{
	return (const float *const *) p->t;
}

// tr_params_init_rule gives tensor i's seeded init rule (<fb/init.h>
// kinds, as libferry's enum ferry_tensor_init): weights Kaiming-uniform,
// U(-sqrt(6/fan_in), +sqrt(6/fan_in)) (kind UNIFORM, scale the bound),
// biases ZEROS.
void tr_params_init_rule(const struct tr_params *p, size_t i, uint32_t *kind,
    float *scale);

// tr_params_randomize sets every tensor to its tr_params_init_rule values
// under seed (fb_init_fill: the bits the servers and libferry compute for
// a job declared with these rules and ferry_opts.seed = seed).
// Deterministic.
void tr_params_randomize(struct tr_params *p, uint64_t seed);

// tr_params_copy copies src's values into dst (same shapes).
void tr_params_copy(struct tr_params *dst, const struct tr_params *src);

// tr_params_sgd applies the server's plain SGD update for a summed
// gradient g over n_samples samples, with the server's arithmetic:
// scale = (float) (lr / n_samples) (in double), then w -= scale * g in
// float, element by element. n_samples must be > 0.
void tr_params_sgd(struct tr_params *w, const struct tr_params *g, double lr,
    size_t n_samples);

// ---- compute backends -----------------------------------------------------
// A backend runs the model's forward and backward passes. The training loop
// holds the weights and gradients in host memory (that is what libferry
// moves); a backend may keep its own copies where it computes (a GPU).
//
// Contract for an implementation (see backend_cpu.c; backend_cuda.cu
// follows the same rules):
// - alloc sizes every buffer for batches of up to opts->max_batch rows
//   (and its evaluation chunk); grad and evaluate never allocate.
// - set_weights: w[i] holds tr_arch_tensor_len(i) host floats. The backend
//   either copies them (GPU: to the device) or keeps borrowing the pointers
//   (CPU: zero copy) until the next set_weights or free; the caller calls
//   set_weights again after changing the weights, and keeps the buffers
//   alive and unchanged while grad/evaluate run.
// - grad: forward + backward on rows idx[0..n) of ds (n <= max_batch).
//   Writes the gradient SUMMED over the n samples (not the mean) into the
//   host buffers g[i] and the summed cross-entropy into *loss_sum. A GPU
//   backend may cache ds on the device, keyed by the pointer and assuming
//   ds does not change while the backend is alive.
// - evaluate: mean cross-entropy and accuracy over all of ds.
// - Errors: FB_EINVAL (n == 0 or > max_batch), FB_ERANGE (an index or
//   label out of range), backend-specific codes (FB_EUNSUPP: no device),
//   with a message in err where the op takes one.
// - ondevice (optional, NULL = the host path): a backend that can encode
//   gradients and decode pulled weights where it computes (the CUDA one)
//   points it at a table of on-device ops; the training loop uses them
//   when the table is there and accepts the job's codecs. The table is
//   defined in trainer/src/ondevice.h, beside libferry's types it speaks.
// - Extending: new ops go at the end of the struct and may be NULL
//   (= unsupported), so existing backends keep compiling.
// - A backend's state is used by one thread at a time.
struct tr_backend_opts {
	int    device;       // GPU ordinal; -1: rank mod device count
	int    rank;         // trainer rank (for device = -1)
	int    blas_threads; // OpenBLAS threads (CPU backend), >= 1
	size_t max_batch;    // largest n passed to grad (>= 1)
};
#define TR_BACKEND_OPTS_INIT                                                  \
	{                                                                     \
		-1, 0, 1, 64                                                  \
	}

struct tr__ondevice_ops; // trainer/src/ondevice.h

struct tr_backend_ops {
	const char *name; // "cpu", "cuda"
	int (*alloc)(const struct tr_arch *a,
	    const struct tr_backend_opts *opts, void **state, char *err,
	    size_t errlen);
	void (*free)(void *state);
	int (*set_weights)(void *state, const float *const *w);
	int (*grad)(void *state, const struct tr_dataset *ds,
	    const uint32_t *idx, size_t n, float *const *g, double *loss_sum);
	int (*evaluate)(void *state, const struct tr_dataset *ds,
	    double *loss_mean, double *accuracy);
	const struct tr__ondevice_ops *ondevice; // NULL: host path only
	// set_layer_hook (NULL: not offered) makes grad call done(arg, l)
	// as soon as layer l's gradient (tensors 2l and 2l+1 of g) is
	// written, the last layer first, while it computes the layers
	// before; a non-FB_OK return ends grad with that error. done NULL:
	// no hook. The weights are read, not changed, after each call.
	int (*set_layer_hook)(void *state, int (*done)(void *arg, int layer),
	    void                   *arg);
	// pin (NULL: nothing to gain) is told that host memory [base, base +
	// bytes) will hold weights or gradients passed to set_weights and
	// grad for the backend's life; the CUDA backend page-locks it so
	// those copies go straight between it and the device instead of
	// through a staging buffer. FB_EUNSUPP when it cannot (the copies
	// then stage as before); undone by free.
	int (*pin)(void *state, void *base, size_t bytes);
};

struct tr_backend {
	const struct tr_backend_ops *ops;
	void                        *state;
	struct tr_arch               arch;
};

// tr_device_parse parses "cpu", "cuda" or "cuda:N" into *is_cuda and
// *ordinal (-1 for plain "cuda"). Errors: FB_EINVAL.
int tr_device_parse(const char *device, int *is_cuda, int *ordinal);

// tr_backend_alloc creates the backend for device ("cpu", "cuda",
// "cuda:N"); opts->device is overridden by the device string. A CUDA
// request fails here, at start, with FB_EUNSUPP when this build has no
// CUDA backend or the machine has no usable GPU (err says which).
// Release with tr_backend_free (NULL is a no-op).
int  tr_backend_alloc(const char *device, const struct tr_arch *a,
     const struct tr_backend_opts *opts, struct tr_backend **out, char *err,
     size_t errlen);
void tr_backend_free(struct tr_backend *b);

// tr_backend_has_cuda says whether this build includes the CUDA backend.
int tr_backend_has_cuda(void);

static inline int
tr_backend_set_weights(struct tr_backend *b, const float *const *w)
{
	return b->ops->set_weights(b->state, w);
}

static inline int
tr_backend_grad(struct tr_backend *b, const struct tr_dataset *ds,
    const uint32_t *idx, size_t n, float *const *g, double *loss_sum)
{
	return b->ops->grad(b->state, ds, idx, n, g, loss_sum);
}

// tr_backend_set_layer_hook sets (done NULL: clears) the backend's
// per-layer gradient hook (tr_backend_ops.set_layer_hook). Errors:
// FB_EUNSUPP when the backend offers none.
static inline int
tr_backend_set_layer_hook(struct tr_backend *b,
    int (*done)(void *arg, int layer), void *arg)
{
	return b->ops->set_layer_hook != NULL
	    ? b->ops->set_layer_hook(b->state, done, arg)
	    : FB_EUNSUPP;
}

// tr_backend_pin offers p's tensors to the backend's pin op (tr_backend_ops
// .pin) for the backend's life: p must outlive it. FB_OK when pinned or
// when the backend has nothing to gain; FB_EUNSUPP (harmless: copies stage
// as before) when the memory could not be pinned.
int tr_backend_pin(struct tr_backend *b, const struct tr_params *p);

static inline int
tr_backend_evaluate(struct tr_backend *b, const struct tr_dataset *ds,
    double *loss_mean, double *accuracy)
{
	return b->ops->evaluate(b->state, ds, loss_mean, accuracy);
}

// ---- configuration --------------------------------------------------------
// --mode's values are libferry's (the table's ENUM("sync|async|ssp") is in
// enum ferry_mode's order): the option binds straight into fo.mode.
enum tr_mode {
	TR_MODE_SYNC  = FERRY_MODE_SYNC,
	TR_MODE_ASYNC = FERRY_MODE_ASYNC,
	TR_MODE_SSP   = FERRY_MODE_SSP
};

// --model: the MLP on IDX images, or the DLRM-style CTR model (tr/ctr.h,
// trained by dlrm_train.c).
enum tr_model { TR_MODEL_MLP = 0, TR_MODEL_DLRM = 1 };

// --leases: batches from the scheduler's data leases (lease.c) or from a
// rank partition; auto takes leases when the job is elastic.
enum tr_leases { TR_LEASES_AUTO = 0, TR_LEASES_ON = 1, TR_LEASES_OFF = 2 };

struct tr_config {
	// The job's and the client's settings, bound from the table as
	// libferry takes them (ferry_client_open): --scheduler
	// (fo.scheduler_url, required to train), --rank, --lr, --mode,
	// --seed, --codec-push/--codec-pull, --bucket, --warmup-steps,
	// --timeout-ms, --heartbeat-ms, --staleness, --sync-quorum, the
	// optimizer and lr schedule flags, --clip-norm, --link-budget and
	// --tls-*. Strings borrow like the others below; log is train.c's.
	struct ferry_opts fo;
	const char       *data_dir;       // --data (dlrm: the training file)
	struct tr_arch    arch;           // --layers
	size_t            batch;          // --batch (per trainer)
	int               epochs;         // --epochs
	int               log_interval;   // --log-interval (0: epoch ends)
	uint64_t          max_steps;      // --max-steps (0: unlimited)
	const char       *device;         // --device cpu|cuda|cuda:N
	int               blas_threads;   // --blas-threads
	const char       *curve;          // --curve FILE (NULL: none)
	const char       *step_times;     // --step-times FILE (NULL: none)
	const char       *weights_out;    // --weights-out FILE (NULL: none)
	const char       *http_listen;    // --http-listen host:port ("": off)
	const char       *http_url_file;  // --http-url-file FILE ("": none)
	uint32_t          slow_ms;        // --slow-ms (0: no artificial delay)
	const char       *secret_file;    // --secret-file FILE ("": off)
	uint32_t          overlap_layers; // --overlap-layers (1: layer-wise)
	int               overlap;        // --overlap (1: one-step delayed)
	int               help;           // --help was given
	int               print_config;   // --print-config was given
	// --model dlrm (tr/ctr.h): the model, its tables and evaluation.
	// tr_config_parse checks the widths with tr_dlrm_arch_parse.
	int               model;            // --model (enum tr_model)
	const char       *test_data;        // --test-data ("": none)
	uint32_t          emb_dim;          // --emb-dim
	const char       *bottom;           // --bottom widths
	const char       *top;              // --top widths
	const char       *interaction;      // --interaction dot|cat
	const char       *table_optimizer;  // --table-optimizer
	double            table_lr;         // --table-lr (0: the job's)
	double            table_init_scale; // --table-init-scale
	const char       *table_codec_push; // --table-codec-push
	const char       *table_codec_pull; // --table-codec-pull
	uint32_t          admit_count;      // --admit-count
	uint64_t          eval_rows;        // --eval-rows (0: all)
	int               leases;           // --leases (enum tr_leases)
	uint32_t          lease_batches;    // --lease-batches (want = batch x)
	uint32_t          lr_scale_trainers; // --lr-scale-trainers N (0: off)
	// Local steps (--local-steps H > 0, docs/algorithms.md §8): then
	// tr_config_parse moves the optimizer and schedule flags as given
	// (--optimizer, --lr, --momentum, ...) into `inner`, the trainer's
	// own optimizer, and fills fo with the job's: --outer-optimizer at
	// --outer-lr (constant), fo.inner_lr = --lr, fo.local_steps = H,
	// fo.fragments = F. Only inner's optimizer and schedule fields are
	// meaningful.
	uint32_t          local_steps;     // --local-steps H (0: off)
	uint32_t          fragments;       // --fragments F (1: whole model)
	uint32_t          fragment_delay;  // --fragment-delay D (0: blocking)
	const char       *outer_optimizer; // --outer-optimizer
	double            outer_lr;        // --outer-lr
	double            outer_momentum;  // --outer-momentum
	struct ferry_opts inner;           // the inner optimizer (H > 0)
	// Untrusted trainers (issue 31): --attack (benchmarks and tests: the
	// wrong gradients this trainer pushes; "none": honest, also sent in
	// fo.attack), --attack-rate (the share of pushes falsified) and
	// --verify (run as a verifier instead of training).
	const char       *attack;
	double            attack_rate;
	int               verify;
	// Where each value came from (for --print-config), and the text of
	// the --config file that string fields may borrow: released by
	// tr_config_fini.
	struct fb_config  src;
};

// The options are the trainer's entries of the config table in base/
// (<fb/config.h>): names, defaults, bounds and help live there.

// tr_config_defaults fills c with the table's defaults (no environment).
void tr_config_defaults(struct tr_config *c);

// tr_config_parse reads the --config file (or FERRY_CONFIG's), the
// FERRY_<NAME> environment variables (e.g. FERRY_BATCH) and argv[1..argc)
// ("--flag value" or "--flag=value"), a flag winning over its variable,
// which wins over the file, over the values already in c: options set by
// none of them keep c's values. String fields borrow from argv, the
// environment or the file's text (kept in c->src until tr_config_fini).
// Errors: FB_EINVAL (unknown flag or key, missing or bad value; err names
// the flag, or the file and line), FB_ERANGE (value outside its bounds),
// FB_ENOTFOUND or FB_ESYSERR | errno (the file cannot be read). "--help"
// sets c->help and returns FB_OK without checking anything;
// "--print-config" sets c->print_config (see tr_config_print).
int tr_config_parse(struct tr_config *c, int argc, char **argv, char *err,
    size_t errlen);

// tr_config_print writes the effective configuration parsed into c, one
// `name = value  # source` line per option (fb_config_print), to f.
void tr_config_print(const struct tr_config *c, FILE *f);

// tr_config_fini releases what tr_config_parse kept (the config file's
// text: string fields that borrowed from it go with it). Safe after
// tr_config_defaults alone, and twice.
void tr_config_fini(struct tr_config *c);

// tr_config_usage prints the flags, their defaults and meaning to f.
void tr_config_usage(FILE *f);

// ---- training loop --------------------------------------------------------
// tr_train_run trains with cfg: loads the data, creates the backend (a CUDA
// request without a GPU fails here, before any network traffic), opens a
// libferry client on cfg->scheduler, declares fc*.weight/fc*.bias, rank 0
// offers the initial weights, everybody pulls version 0, then each step
// computes the summed gradient of the next local minibatch and
// push-pulls it. Progress lines and the final JSON summary go to out;
// errors are logged with FB_LOG. Blocks until training ends.
// Returns FB_OK, the failing local step's FB_E* code, or FB_EREMOTE for
// any failed libferry call (whose FERRY_E* name and message are logged:
// libferry's codes are not translated into FB_E* ones).
int tr_train_run(const struct tr_config *cfg, FILE *out);

#ifdef __cplusplus
}
#endif
#endif // TR_TR_H
