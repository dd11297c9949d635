// store.c — the row store of one table shard: opening and closing it, the
// chunks its records live in, the open-addressing index of row numbers
// (linear probing, backward-shift deletion), inserting and removing rows,
// and what it all costs in bytes.
//
// Removing a row fills its place with the last row, so rows 0..rows-1 are
// always dense and the chunks in use are exactly ceil(rows / chunk_rows);
// the first chunk starts at a page and doubles until it is full-sized, so
// a small shard holds little. tbl_bytes is what is mapped, page-rounded.
#define _GNU_SOURCE // MAP_ANONYMOUS, MADV_HUGEPAGE
#include <sys/mman.h>

#include <stdlib.h>

#include "tbl_impl.h"

static void set_slots(struct tbl *t, uint32_t *s, size_t n);

size_t
tbl__page_up(size_t bytes)
{
	return (bytes + TBL_PAGE - 1) / TBL_PAGE * TBL_PAGE;
}

#define HUGE (2u << 20)

void *
tbl__map(size_t bytes)
{
	bytes = tbl__page_up(bytes);
	// From 2 MiB on, the mapping starts on a 2 MiB boundary (mapped
	// 2 MiB larger, the ends trimmed) so its huge pages are whole.
	size_t   extra = bytes >= HUGE ? HUGE : 0;
	uint8_t *p     = mmap(NULL, bytes + extra, PROT_READ | PROT_WRITE,
	        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (extra != 0) {
		size_t head = (HUGE - (uintptr_t) p % HUGE) % HUGE;
		if (head != 0)
			(void) munmap(p, head);
		if (extra - head != 0)
			(void) munmap(p + head + bytes, extra - head);
		p += head;
	}
#ifdef MADV_HUGEPAGE
	// The index is read at random and the chunks in long runs: large
	// pages save most of the TLB misses of a multi-GiB shard.
	if (bytes >= HUGE)
		(void) madvise(p, bytes, MADV_HUGEPAGE);
#endif
	return p;
}

void
tbl__unmap(void *p, size_t bytes)
{
	if (p != NULL)
		(void) munmap(p, tbl__page_up(bytes));
}

// cap0_for: the rows chunk 0 holds while it is the only chunk and the
// shard has `rows` rows: the smallest power of two that fits them, at
// least a page's worth, at most a full chunk.
static size_t
cap0_for(const struct tbl *t, size_t rows)
{
	size_t cap = 1;
	while (cap * 2 * t->rec <= TBL_PAGE && cap < t->chunk_rows)
		cap *= 2;
	while (cap < rows && cap < t->chunk_rows)
		cap *= 2;
	return cap < t->chunk_rows ? cap : t->chunk_rows;
}

size_t
tbl__slots_for(size_t rows, size_t n_slots)
{
	// Shrink below a quarter full, to 70% full.
	if (n_slots <= TBL_MIN_SLOTS || rows * 4 >= n_slots)
		return n_slots;
	size_t n = rows * 10 / 7 + 1;
	return n < TBL_MIN_SLOTS ? TBL_MIN_SLOTS : n;
}

static size_t
chunk_mem(const struct tbl *t, size_t rows, size_t n_chunks)
{
	if (n_chunks == 0)
		return 0;
	if (n_chunks == 1)
		return tbl__page_up(cap0_for(t, rows) * t->rec);
	return n_chunks * tbl__page_up(t->chunk_rows * t->rec);
}

size_t
tbl__bytes_at(const struct tbl *t, size_t rows)
{
	size_t n_chunks = rows == 0 ? 0 : tbl__chunk_of(t, rows - 1) + 1;
	size_t b        = sizeof(*t) + t->cap_chunks * sizeof(t->chunks[0]);
	b += chunk_mem(t, rows, n_chunks);
	b += tbl__page_up(tbl__slots_for(rows, t->n_slots) * 4);
	b += tbl__page_up(tbl__sketch_bytes(t->sk_width));
	return b;
}

size_t
tbl_bytes(const struct tbl *t)
{
	size_t b = sizeof(*t) + t->cap_chunks * sizeof(t->chunks[0]);
	if (t->n_chunks == 1)
		b += tbl__page_up(t->chunk0_rows * t->rec);
	else
		b += t->n_chunks * tbl__page_up(t->chunk_rows * t->rec);
	b += tbl__page_up(t->n_slots * 4);
	b += tbl__page_up(tbl__sketch_bytes(t->sk_width));
	return b;
}

size_t
tbl_rows(const struct tbl *t)
{
	return t->rows;
}

void
tbl_get_stats(const struct tbl *t, struct tbl_stats *st)
{
	st->rows     = t->rows;
	st->bytes    = tbl_bytes(t);
	st->admitted = t->admitted;
	st->rejected = t->rejected;
	st->evicted  = t->evicted;
	st->lookups  = t->lookups;
	st->hits     = t->hits;
}

size_t
tbl__sketch_bytes(uint32_t width)
{
	return (size_t) TBL_SK_DEPTH * width * 2;
}

int
tbl__sketch_open(struct tbl *t)
{
	return t->sketch != NULL ? 0 : tbl__sketch_resize(t, TBL_SK_MIN);
}

int
tbl__sketch_resize(struct tbl *t, uint32_t width)
{
	uint16_t *s = tbl__map(tbl__sketch_bytes(width));
	if (s == NULL)
		return -1;
	// A wider sketch starts as copies of the narrower one: counter i
	// of the new row holds what counter i mod old width held, which is
	// where the key's hash pointed before, so every estimate stays an
	// upper bound of the key's count.
	for (uint32_t d = 0; t->sketch != NULL && d < TBL_SK_DEPTH; d++)
		for (uint32_t i = 0; i < width && width > t->sk_width; i++)
			s[d * width + i] = t->sketch[d * t->sk_width +
			    (i & (t->sk_width - 1))];
	tbl__unmap(t->sketch, tbl__sketch_bytes(t->sk_width));
	t->sketch   = s;
	t->sk_width = width;
	return 0;
}

struct tbl *
tbl_open(const struct tbl_conf *conf)
{
	if (tbl_conf_check(conf) != NULL)
		return NULL;
	struct tbl *t = fb_zalloc(sizeof(*t));
	if (t == NULL)
		return NULL;
	t->conf       = *conf;
	t->min_touch  = UINT32_MAX;
	t->dim        = conf->dim;
	t->state      = (uint32_t) tbl_state_floats(conf->optim, conf->dim);
	t->rec        = TBL_HDR + 4 * ((size_t) t->dim + t->state);
	t->chunk_rows = TBL_CHUNK_BYTES / t->rec;
	// div_s = 31 + ceil(log2 chunk_rows), div_m = ceil(2^div_s /
	// chunk_rows): r div_m < 2^63 and the quotient exact for r < 2^31.
	uint32_t l = 0;
	while (((size_t) 1 << l) < t->chunk_rows)
		l++;
	t->div_s = 31 + l;
	t->div_m = ((UINT64_C(1) << t->div_s) + t->chunk_rows - 1) /
	    t->chunk_rows;
	uint32_t *slots = tbl__map(TBL_MIN_SLOTS * 4);
	if (slots == NULL)
		goto fail;
	set_slots(t, slots, TBL_MIN_SLOTS);
	if (tbl__sketch_open(t) != 0)
		goto fail;
	return t;
fail:
	tbl_close(t);
	return NULL;
}

// free_chunks unmaps chunks from..n_chunks-1.
static void
free_chunks(struct tbl *t, size_t from)
{
	for (size_t i = t->n_chunks; i-- > from;) {
		size_t rows = i == 0 ? t->chunk0_rows : t->chunk_rows;
		tbl__unmap(t->chunks[i], rows * t->rec);
		t->chunks[i] = NULL;
	}
	if (from < t->n_chunks)
		t->n_chunks = from;
	if (t->n_chunks == 0)
		t->chunk0_rows = 0;
}

void
tbl_close(struct tbl *t)
{
	if (t == NULL)
		return;
	free_chunks(t, 0);
	fb_free(t->chunks);
	tbl__unmap(t->slots, t->n_slots * 4);
	tbl__unmap(t->sketch, tbl__sketch_bytes(t->sk_width));
	fb_free(t);
}

// resize_chunk0 moves chunk 0 to a mapping of `rows` rows (its rows that
// fit are kept). -1 when memory ran out (nothing changed).
static int
resize_chunk0(struct tbl *t, size_t rows)
{
	uint8_t *p = tbl__map(rows * t->rec);
	if (p == NULL)
		return -1;
	if (t->n_chunks > 0) {
		size_t keep = t->rows < rows ? t->rows : rows;
		memcpy(p, t->chunks[0], keep * t->rec);
		tbl__unmap(t->chunks[0], t->chunk0_rows * t->rec);
	}
	t->chunks[0]   = p;
	t->chunk0_rows = rows;
	t->n_chunks    = t->n_chunks > 0 ? t->n_chunks : 1;
	return 0;
}

// room makes row number t->rows addressable. -1 when memory ran out.
static int
room(struct tbl *t)
{
	size_t r  = t->rows;
	size_t ci = tbl__chunk_of(t, r);
	if (ci >= t->cap_chunks) {
		size_t    cap = t->cap_chunks ? t->cap_chunks * 2 : 4;
		uint8_t **c   = fb_realloc(t->chunks, cap * sizeof(*c));
		if (c == NULL)
			return -1;
		t->chunks     = c;
		t->cap_chunks = cap;
	}
	if (ci == 0) {
		if (t->n_chunks > 0 && r < t->chunk0_rows)
			return 0;
		return resize_chunk0(t, cap0_for(t, r + 1));
	}
	if (ci < t->n_chunks)
		return 0;
	uint8_t *p = tbl__map(t->chunk_rows * t->rec);
	if (p == NULL)
		return -1;
	t->chunks[ci] = p;
	t->n_chunks   = ci + 1;
	return 0;
}

// set_slots installs an index of n slots (zeroed) and its bit layout.
static void
set_slots(struct tbl *t, uint32_t *s, size_t n)
{
	t->slots   = s;
	t->n_slots = n;
	t->rb      = 1;
	while (t->rb < 32 && ((size_t) 1 << t->rb) <= n)
		t->rb++;
	t->row_mask = t->rb >= 32 ? UINT32_MAX : (UINT32_C(1) << t->rb) - 1;
	t->tag_mask = t->rb >= 32 ? 0 : UINT32_MAX >> t->rb;
}

static void
slot_put(struct tbl *t, uint64_t h, uint32_t r)
{
	size_t i = tbl__home(t, h);
	while (t->slots[i] != 0)
		if (++i == t->n_slots)
			i = 0;
	t->slots[i] = tbl__tag(t, h) | (r + 1);
}

// index_all puts rows 0..rows-1 into the index (empty, large enough),
// sixteen at a time: their home slots are prefetched first, so the
// misses of a rebuild overlap. With check, a key found twice stops it
// (1); else 0.
static int
index_all(struct tbl *t, bool check)
{
	enum { G = 16 };
	uint64_t h[G];
	for (size_t b = 0; b < t->rows; b += G) {
		size_t m = t->rows - b < G ? t->rows - b : G;
		for (size_t i = 0; i < m; i++) {
			h[i] = tbl_key_hash(tbl__rec_key(tbl__rec(t, b + i)));
			tbl__prefetch(&t->slots[tbl__home(t, h[i])]);
		}
		for (size_t i = 0; i < m; i++) {
			if (check &&
			    tbl__find(t, tbl__rec_key(tbl__rec(t, b + i)),
			        h[i]) != TBL_NONE)
				return 1;
			slot_put(t, h[i], (uint32_t) (b + i));
		}
	}
	return 0;
}

int
tbl__rebuild_index(struct tbl *t, size_t n_slots)
{
	uint32_t *s = tbl__map(n_slots * 4);
	if (s == NULL)
		return -1;
	tbl__unmap(t->slots, t->n_slots * 4);
	set_slots(t, s, n_slots);
	(void) index_all(t, false);
	return 0;
}

void
tbl__reindex(struct tbl *t)
{
	if (tbl__rebuild_index(t, tbl__slots_for(t->rows, t->n_slots)) == 0)
		return;
	// No memory for a new index: the one there is holds them all.
	memset(t->slots, 0, t->n_slots * 4);
	(void) index_all(t, false);
}

// grow_index makes room in the index for one more row. -1 without memory.
static int
grow_index(struct tbl *t)
{
	if ((t->rows + 1) * 20 <= t->n_slots * 17)
		return 0;
	return tbl__rebuild_index(t, t->n_slots + t->n_slots / 4);
}

int
tbl__load_recs(struct tbl *t, const uint8_t *recs, size_t n)
{
	if (n > TBL_MAX_ROWS)
		return -1;
	for (size_t r = 0; r < n; r++, recs += t->rec) {
		if (room(t) != 0)
			return -1;
		memcpy(tbl__rec(t, t->rows), recs, t->rec);
		t->rows++;
	}
	size_t slots = n * 10 / 7 + 1; // 70% full
	if (slots < TBL_MIN_SLOTS)
		slots = TBL_MIN_SLOTS;
	uint32_t *s = tbl__map(slots * 4);
	if (s == NULL)
		return -1;
	tbl__unmap(t->slots, t->n_slots * 4);
	set_slots(t, s, slots);
	return index_all(t, true);
}

uint32_t
tbl__insert(struct tbl *t, uint64_t key, uint64_t h, uint32_t touch)
{
	if (t->rows >= TBL_MAX_ROWS)
		return TBL_NONE;
	if (grow_index(t) != 0 || room(t) != 0)
		return TBL_NONE;
	uint32_t r   = (uint32_t) t->rows;
	uint8_t *rec = tbl__rec(t, r);
	memcpy(rec, &key, 8);
	memcpy(rec + 8, &touch, 4);
	float *row = tbl__rec_row(rec);
	tbl_row_init(&t->conf, key, row);
	tbl__state_init(t, row + t->dim);
	slot_put(t, h, r);
	t->rows++;
	if (t->rows > t->sk_width && t->sk_width < TBL_SK_MAX)
		(void) tbl__sketch_resize(t, t->sk_width * 2); // else stays
	return r;
}

// slot_of: the slot holding row r (it is in the index).
static size_t
slot_of(const struct tbl *t, uint32_t r)
{
	uint64_t k = tbl__rec_key(tbl__rec(t, r));
	size_t   i = tbl__home(t, tbl_key_hash(k));
	while ((t->slots[i] & t->row_mask) != r + 1)
		if (++i == t->n_slots)
			i = 0;
	return i;
}

void
tbl__remove(struct tbl *t, uint32_t r)
{
	size_t n = t->n_slots;
	size_t i = slot_of(t, r);
	// Backward shift: pull each later entry of the probe run into the
	// hole unless its home lies cyclically in (hole, its slot].
	for (size_t j = i + 1 == n ? 0 : i + 1; t->slots[j] != 0;
	     j        = j + 1 == n ? 0 : j + 1) {
		uint32_t s  = t->slots[j];
		uint8_t *rc = tbl__rec(t, (s & t->row_mask) - 1);
		size_t   k  = tbl__home(t, tbl_key_hash(tbl__rec_key(rc)));
		bool stays  = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			t->slots[i] = s;
			i           = j;
		}
	}
	t->slots[i]   = 0;
	uint32_t last = (uint32_t) (t->rows - 1);
	if (r != last) {
		size_t sl    = slot_of(t, last);
		t->slots[sl] = (t->slots[sl] & ~t->row_mask) | (r + 1);
		memcpy(tbl__rec(t, r), tbl__rec(t, last), t->rec);
	}
	t->rows--;
}

void
tbl__shrink(struct tbl *t)
{
	size_t need = t->rows == 0 ? 0 : tbl__chunk_of(t, t->rows - 1) + 1;
	if (need < t->n_chunks)
		free_chunks(t, need == 0 ? 0 : need);
	if (t->n_chunks == 1) {
		size_t cap = cap0_for(t, t->rows);
		if (cap < t->chunk0_rows)
			(void) resize_chunk0(t, cap);
	}
	size_t n = tbl__slots_for(t->rows, t->n_slots);
	if (n != t->n_slots)
		(void) tbl__rebuild_index(t, n);
}

void
tbl_each(const struct tbl *t,
    void (*fn)(void *arg, uint64_t key, const float *row, const float *state),
    void *arg)
{
	for (size_t r = 0; r < t->rows; r++) {
		uint8_t *rec = tbl__rec(t, r);
		float   *row = tbl__rec_row(rec);
		fn(arg, tbl__rec_key(rec), row, row + t->dim);
	}
}
