// tbl.h — one shard of a sparse embedding table (a hash range of its keys)
// held in memory: the row store, the rows' initializer, the row
// optimizers, admission and eviction. Pure code, no I/O and no locks: the
// server owns one `struct tbl` per table shard it holds and calls it under
// its own mutex, so an eviction never races an update of the same row.
// libferry uses only the key routing (tbl_key_hash, tbl_key_shard), so a
// key goes to the same shard on every client and server.
//
// DESIGN (docs/algorithms.md §7, "Sparse tables").
// - Rows live contiguously in chunks (key, last-touched version, the
//   row's dim floats, then its optimizer state), never one allocation
//   per row; an open-addressing index of 32-bit row numbers finds them.
//   A removed row's place is filled by the last row, so the rows stay
//   dense and memory stays close to the rows' own bytes.
// - A row is created on its first admitted update with values derived only
//   from (seed, table, key) (tbl_row_init): any server, backup or
//   restarted server makes the same row bit for bit. A lookup of an absent
//   key returns that initial row and creates nothing.
// - Admission: every update's key is counted in a count-min sketch (for
//   LFU eviction too); with admit_count > 1 a key's row is created only
//   once it has been seen admit_count times; with admit_prob in (0, 1) an
//   update of an absent key creates the row with that probability (a hash of
//   seed, table, key and version, so every replica decides the same). A
//   refused update is dropped and counted (rejected).
// - Eviction: rows not touched for evict_after versions (tbl_evict_idle),
//   and, to hold the shard under a byte budget, the least recently
//   (TBL_EVICT_LRU) or least frequently (TBL_EVICT_LFU: the sketch's
//   estimate) touched rows first (tbl_evict_to); for a budget over many
//   shards (a server's), a histogram of every shard's rows by value
//   (tbl_evict_hist), one threshold picked over their sum, and the rows
//   below it removed in each shard (tbl_evict_below): the least valuable
//   rows of all the shards go, whatever the shard.
#ifndef TBL_TBL_H
#define TBL_TBL_H

#include <stddef.h>
#include <stdint.h>

// A row's initial values.
enum tbl_init {
	TBL_INIT_ZEROS   = 0,
	TBL_INIT_UNIFORM = 1, // uniform in [-init_scale, init_scale)
	TBL_INIT_NORMAL  = 2, // normal, mean 0, stddev init_scale (the sum
	                      // of 12 uniforms: tails cut at 6 stddev)
};

// The row optimizers (docs/algorithms.md §7.2). Each row's state sits
// beside it: tbl_state_floats.
enum tbl_optim {
	TBL_OPT_SGD     = 0, // w -= lr g
	TBL_OPT_ADAGRAD = 1, // one accumulator per row: a += mean(g^2);
	                     // w -= lr g / (sqrt(a) + eps)
	TBL_OPT_ADAM = 2,    // lazy: only rows in the update; per-row step
	                     // count for the bias correction
	TBL_OPT_FTRL = 3,    // FTRL-Proximal (McMahan et al. 2013), per
	                     // coordinate z and n; lr is alpha
};

enum tbl_evict {
	TBL_EVICT_LRU = 0,
	TBL_EVICT_LFU = 1,
};

struct tbl_conf {
	uint32_t       dim;   // floats per row, 1..4096
	uint32_t       table; // the table's index in the job (row init)
	uint64_t       seed;  // the job's seed (row init, admission)
	enum tbl_init  init;
	float          init_scale;
	enum tbl_optim optim;
	float    beta1, beta2, eps; // adam (0.9, 0.999, 1e-8); adagrad eps
	float    adagrad_init;      // adagrad's first accumulator (0)
	float    ftrl_beta, ftrl_l1, ftrl_l2; // ftrl (1, 0, 0)
	uint32_t admit_count;                 // 0 or 1: every update admits
	float    admit_prob;                  // 0: off (every update admits)
	uint64_t evict_after;                 // versions untouched (0: never)
};

// What a shard has done, for metrics (counts since tbl_open or the
// snapshot tbl_load read).
struct tbl_stats {
	uint64_t rows;     // rows held
	uint64_t bytes;    // memory held: rows, index, sketch
	uint64_t admitted; // rows created
	uint64_t rejected; // updates of absent keys dropped by admission
	uint64_t evicted;  // rows removed
	uint64_t lookups;  // keys looked up
	uint64_t hits;     // of which present
};

struct tbl;

// tbl_key_hash is the one hash of a key (a 64-bit finalizer): its top 32
// bits route the key to a shard (tbl_key_shard), its low bits place it in
// a shard's index.
static inline uint64_t
tbl_key_hash(uint64_t key)
{
	key ^= key >> 30;
	key *= 0xbf58476d1ce4e5b9ULL;
	key ^= key >> 27;
	key *= 0x94d049bb133111ebULL;
	key ^= key >> 31;
	return key;
}

// tbl_key_shard: which of a table's `shards` hash ranges holds key.
// Range i is [tbl_range_start(i, shards), tbl_range_start(i + 1, shards))
// of the 2^32 top-hash values.
static inline uint32_t
tbl_key_shard(uint64_t key, uint32_t shards)
{
	uint64_t top = tbl_key_hash(key) >> 32;
	return (uint32_t) ((top * shards) >> 32);
}

// tbl_range_start: the first top-hash value of range i of `shards`
// (ceil(i * 2^32 / shards); i == shards gives 2^32).
static inline uint64_t
tbl_range_start(uint32_t i, uint32_t shards)
{
	return (((uint64_t) i << 32) + shards - 1) / shards;
}

// tbl_conf_check: NULL when conf is usable, else what is wrong with it
// (a static string naming the field).
const char *tbl_conf_check(const struct tbl_conf *conf);

// tbl_state_floats: optimizer floats stored per row: sgd 0, adagrad 1,
// adam 2 * dim + 1, ftrl 2 * dim.
size_t tbl_state_floats(enum tbl_optim optim, uint32_t dim);

// tbl_row_bytes: the raw bytes of one row and its optimizer state
// ((dim + tbl_state_floats) * 4): the unit of the memory target.
size_t tbl_row_bytes(const struct tbl_conf *conf);

// tbl_row_init writes key's initial row (dim floats) into out: a function
// of (conf->seed, conf->table, key, init, init_scale) only.
void tbl_row_init(const struct tbl_conf *conf, uint64_t key, float *out);

// tbl_open: an empty shard (conf is copied). NULL if conf is bad
// (tbl_conf_check) or memory runs out.
struct tbl *tbl_open(const struct tbl_conf *conf);

// tbl_close frees everything. NULL is a no-op.
void tbl_close(struct tbl *t);

// tbl_lookup copies the rows of n keys into out (n * dim floats, in key
// order); an absent key gets its initial row and creates nothing. Keys
// may repeat. Batched: the index slots of a group of keys are prefetched
// before they are read.
void tbl_lookup(struct tbl *t, const uint64_t *keys, size_t n, float *out);

// tbl_apply applies one update: n distinct keys, their gradients (n * dim
// floats, each the sum over the update's occurrences), counts[i] (the
// occurrences, for admission and LFU; NULL: 1 each), scaled by `scale`
// (1 / samples) and stepped at learning rate lr. Absent keys go through
// admission first (created at their initial row, or dropped and counted).
// `version` is the version the update makes: admitted and updated rows
// are stamped with it (eviction), and it seeds probabilistic admission.
// Keys must be distinct (the caller merges duplicates). Returns 0, or
// -1 when memory for new rows ran out (the rows that fit were applied).
int tbl_apply(struct tbl *t, const uint64_t *keys, size_t n,
    const float *grads, const uint32_t *counts, float scale, float lr,
    uint64_t version);

// tbl_evict_idle removes the rows last touched before version - evict_after
// (conf.evict_after 0: none). Returns the rows removed.
size_t tbl_evict_idle(struct tbl *t, uint64_t version);

// tbl_evict_to removes rows, the least recently (LRU) or least frequently
// (LFU) touched first, until tbl_bytes(t) <= budget or no row is left.
// Returns the rows removed.
size_t tbl_evict_to(struct tbl *t, size_t budget, enum tbl_evict policy);

// The buckets of a row's eviction value, the least valuable first:
// TBL_EVICT_LRU: TBL_EVICT_BUCKETS - 1 - the row's age (the versions
// between its last touch and `newest`; a touch after it is age 0), bucket
// 0 for the older rows; TBL_EVICT_LFU: the sketch's estimate of the
// key's updates (the counters are u16). Both compare across shards: a
// job's shards move their versions together, and estimates are counts.
#define TBL_EVICT_BUCKETS 65536u

// tbl_evict_hist adds, for each row, its share of the memory of the
// shard's chunks (the page and chunk rounding included, at least the
// row's record: what removing rows frees on average; not the index, which
// shrinks only below a quarter full) to hist[the row's bucket] (hist:
// TBL_EVICT_BUCKETS counters the caller zeroed; many shards may add into
// one). Returns the rows counted.
size_t tbl_evict_hist(struct tbl *t, enum tbl_evict policy, uint64_t newest,
    uint64_t *hist);

// tbl_evict_below removes the rows whose bucket (as tbl_evict_hist's,
// with the same policy and newest) is below `bucket`, and the share frac
// (0..1, rounded up to a row) of those in it (bucket TBL_EVICT_BUCKETS:
// every row). Returns the rows removed.
size_t tbl_evict_below(struct tbl *t, enum tbl_evict policy, uint64_t newest,
    uint32_t bucket, double frac);

// tbl_bytes: the memory the shard holds now (what tbl_stats.bytes says).
size_t tbl_bytes(const struct tbl *t);

// tbl_rows: rows held.
size_t tbl_rows(const struct tbl *t);

// tbl_get_stats fills *st.
void tbl_get_stats(const struct tbl *t, struct tbl_stats *st);

// tbl_save_size and tbl_save: the whole shard as bytes (every row with its
// key, last touch and optimizer state, the admission sketch, the
// counters), for snapshots and moves. tbl_save writes exactly
// tbl_save_size bytes.
size_t tbl_save_size(const struct tbl *t);
void   tbl_save(const struct tbl *t, uint8_t *out);

// tbl_load replaces t's contents with a tbl_save image. The image is
// checked whole first (sizes, dim and optimizer against t's conf): on a
// bad image t is unchanged and the return is a static string saying what
// was wrong; NULL on success.
const char *tbl_load(struct tbl *t, const uint8_t *in, size_t len);

// tbl_each calls fn(arg, key, row, state) for every row (in storage
// order); for tests and moves. fn must not change t.
void tbl_each(const struct tbl *t,
    void (*fn)(void *arg, uint64_t key, const float *row, const float *state),
    void *arg);

#endif
