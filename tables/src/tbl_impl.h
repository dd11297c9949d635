// tbl_impl.h — the shard store's private umbrella: struct tbl, the record
// layout and the functions its files share.
//
// A row's record, rec bytes, packed in chunks of chunk_rows rows (as many
// as fit one 2 MiB huge page, mapped on a 2 MiB boundary: the rows are
// read at random, and a 4 KiB page per row read is a TLB miss each):
//   [key u64][touch u32][dim floats][state floats]
// rec is a multiple of 4, so the floats stay 4-aligned; the key may be
// only 4-aligned and is read and written with memcpy. Chunks, the index
// and the sketch come straight from mmap (tbl__map): freeing them hands
// the pages back to the kernel whatever malloc's thresholds are (ps-server
// keeps freed heap blocks for its messages), so a shard evicted to a
// budget really shrinks the process.
#ifndef TBL_IMPL_H
#define TBL_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <fb/fb.h>
#include <tbl/tbl.h>

#define TBL_HDR 12u                      // key + touch
#define TBL_CHUNK_BYTES (2u << 20)       // a full chunk: one huge page
#define TBL_MIN_SLOTS 16u                // the smallest index
#define TBL_MAX_ROWS (UINT32_C(1) << 31) // row numbers + 1 fit a slot
#define TBL_PAGE 4096u
#define TBL_NONE UINT32_MAX

// The count-min sketch of every update's keys (admission, LFU): depth rows
// of sk_width u16 counters, each row indexed by 16 bits of one hash of the
// key, halved every 8 sk_width additions so that old counts fade. Its
// width follows the rows (a power of two at least as large, from
// TBL_SK_MIN to TBL_SK_MAX counters), so a small shard keeps a small one
// and few keys share a counter.
#define TBL_SK_DEPTH 4u
#define TBL_SK_MIN 1024u
#define TBL_SK_MAX 65536u

struct tbl {
	struct tbl_conf conf;
	uint32_t        dim;
	uint32_t        state;      // state floats per row
	size_t          rec;        // record bytes
	size_t          chunk_rows; // rows per full chunk
	uint64_t        div_m;      // r / chunk_rows == (r div_m) >> div_s
	uint32_t        div_s;
	uint8_t       **chunks; // n_chunks of them
	size_t          n_chunks, cap_chunks;
	size_t          chunk0_rows; // rows chunks[0] holds (grows to full)
	size_t          rows;
	uint32_t       *slots; // tag and row + 1 per slot, 0: empty
	size_t          n_slots;
	uint32_t        rb;       // the low rb bits of a slot: row + 1
	uint32_t        row_mask; // (1 << rb) - 1
	uint32_t        tag_mask; // the tag's 32 - rb bits, before the shift
	uint16_t       *sketch;   // the count-min sketch
	uint32_t        sk_width; // its counters per row
	uint64_t        sketch_adds;
	uint32_t        min_touch; // no row's touch is below it
	uint32_t        max_touch; // nor above this
	uint64_t        admitted, rejected, evicted, lookups, hits;
};

// tbl__chunk_of: r / chunk_rows without a division (r < 2^31: the
// multiply-and-shift of Granlund and Montgomery, exact in that range).
static inline size_t
tbl__chunk_of(const struct tbl *t, size_t r)
{
	return (size_t) (((uint64_t) r * t->div_m) >> t->div_s);
}

// tbl__rec: row r's record.
static inline uint8_t *
tbl__rec(const struct tbl *t, size_t r)
{
	size_t c = tbl__chunk_of(t, r);
	return t->chunks[c] + (r - c * t->chunk_rows) * t->rec;
}

static inline uint64_t
tbl__rec_key(const uint8_t *rec)
{
	uint64_t k;
	memcpy(&k, rec, sizeof(k));
	return k;
}

static inline uint32_t
tbl__rec_touch(const uint8_t *rec)
{
	uint32_t v;
	memcpy(&v, rec + 8, sizeof(v));
	return v;
}

static inline float *
tbl__rec_row(uint8_t *rec)
{
	return (float *) (void *) (rec + TBL_HDR);
}

// tbl__touch32: a version as the 32 bits a record keeps (saturating).
static inline uint32_t
tbl__touch32(uint64_t version)
{
	return version > UINT32_MAX ? UINT32_MAX : (uint32_t) version;
}

// The index. A key's home slot is the low 32 bits of its hash scaled to
// n_slots (any size, so it can grow by a quarter at a time and stay
// between 68% and 85% full); probing is linear, wrapping at n_slots. A
// slot keeps a row number + 1 in its low rb bits (rows < n_slots) and, in
// the bits above, a tag: bits 32.. of the hash (the top bits route keys
// to shards and are nearly constant within one; the low bits of the top
// half are not). A probe reads a row only when the tags agree.

// tbl__home: key's home slot (h = tbl_key_hash(key)).
static inline size_t
tbl__home(const struct tbl *t, uint64_t h)
{
	return (size_t) (((h & UINT32_MAX) * (uint64_t) t->n_slots) >> 32);
}

// tbl__tag: the tag bits of h, in place above the row bits.
static inline uint32_t
tbl__tag(const struct tbl *t, uint64_t h)
{
	return t->rb >= 32 ? 0 : ((uint32_t) (h >> 32) & t->tag_mask) << t->rb;
}

// tbl__find: key's row, or TBL_NONE. h is tbl_key_hash(key).
static inline uint32_t
tbl__find(const struct tbl *t, uint64_t key, uint64_t h)
{
	uint32_t tag = tbl__tag(t, h);
	for (size_t i = tbl__home(t, h);;) {
		uint32_t s = t->slots[i];
		if (s == 0)
			return TBL_NONE;
		if ((s & ~t->row_mask) == tag) {
			uint32_t r = (s & t->row_mask) - 1;
			if (tbl__rec_key(tbl__rec(t, r)) == key)
				return r;
		}
		if (++i == t->n_slots)
			i = 0;
	}
}

// tbl__prefetch: a hint to load p's cache line. GCC 12's tree DCE drops
// __builtin_prefetch in tbl_lookup's and tbl_apply's loops (no prefetch
// reached the object code), so on x86-64 it is the instruction itself.
static inline void
tbl__prefetch(const void *p)
{
#if defined(__x86_64__) && defined(__GNUC__)
	__asm__ volatile("prefetcht0 %0" : : "m"(*(const char *) p));
#else
	__builtin_prefetch(p);
#endif
}

// tbl__prefetch_rec: the first lines of row r's record (`bytes` of it).
static inline void
tbl__prefetch_rec(const struct tbl *t, uint32_t r, size_t bytes)
{
	const uint8_t *p = tbl__rec(t, r);
	if (bytes > 512)
		bytes = 512;
	for (size_t o = 0; o < bytes; o += 64)
		tbl__prefetch(p + o);
	tbl__prefetch(p + bytes - 1);
}

// store.c
void    *tbl__map(size_t bytes);
void     tbl__unmap(void *p, size_t bytes);
size_t   tbl__page_up(size_t bytes);
uint32_t tbl__insert(struct tbl *t, uint64_t key, uint64_t h, uint32_t touch);
void     tbl__remove(struct tbl *t, uint32_t r);
int      tbl__rebuild_index(struct tbl *t, size_t n_slots);
void     tbl__reindex(struct tbl *t);
// tbl__load_recs appends n records (an empty shard) and indexes them:
// 0, -1 without memory, 1 when a key appears twice.
int      tbl__load_recs(struct tbl *t, const uint8_t *recs, size_t n);
void     tbl__shrink(struct tbl *t);
size_t   tbl__bytes_at(const struct tbl *t, size_t rows);
size_t   tbl__slots_for(size_t rows, size_t n_slots);
int      tbl__sketch_open(struct tbl *t);
int      tbl__sketch_resize(struct tbl *t, uint32_t width);
size_t   tbl__sketch_bytes(uint32_t width);

// optim.c
void tbl__state_init(const struct tbl *t, float *state);
void tbl__optim_row(const struct tbl *t, float *w, float *s, const float *g,
    float scale, float lr);
uint64_t tbl__row_seed(const struct tbl_conf *conf, uint64_t key);

// apply.c
void     tbl__sketch_add(struct tbl *t, uint64_t key, uint32_t c);
uint32_t tbl__sketch_est(const struct tbl *t, uint64_t key);

#endif // TBL_IMPL_H
