// evict.c — removing rows: rows idle for evict_after versions
// (tbl_evict_idle), to hold one shard under a byte budget the least
// recently or least frequently touched rows (tbl_evict_to), and, for a
// budget over many shards (a server's --sparse-capacity-mb), a histogram
// of the rows' value (tbl_evict_hist) and the removal of the rows below a
// threshold the caller picked over all of them (tbl_evict_below).
//
// No sort: the rows to remove are those whose value (last touch, or the
// sketch's estimate of the key's updates) is below a threshold, plus the
// first `quota` rows at it, and the threshold comes from histograms of
// the values (65536 buckets; a second pass inside the bucket that holds
// it when the values span more). Then one removal pass: few rows go one
// at a time (backward shift in the index, the last row into the hole);
// many go by compacting the rows in order and rebuilding the index.
//
// Across shards the values must compare: the sketch's estimates do (u16
// counts of the updates), touches do as ages behind the newest version
// the caller names (the shards of a job move their versions together),
// so the many-shard functions bucket a touch by its age (NB - 1 - age;
// NB - 1 versions old or more: bucket 0).
#include "tbl_impl.h"

#define NB TBL_EVICT_BUCKETS

struct sel {
	bool     freq;   // the value is the sketch's estimate, else the touch
	bool     age;    // touches as buckets by their age behind newest
	uint32_t newest; // (age)
	uint32_t thr;    // rows below it go
	size_t   quota;  // and this many at it
};

static uint32_t
value(const struct tbl *t, const uint8_t *rec, const struct sel *s)
{
	if (s->freq)
		return tbl__sketch_est(t, tbl__rec_key(rec)); // < NB
	uint32_t v = tbl__rec_touch(rec);
	if (!s->age)
		return v;
	uint32_t age = v >= s->newest ? 0 : s->newest - v;
	return age >= NB - 1 ? 0 : NB - 1 - age;
}

static bool
selected(const struct tbl *t, const uint8_t *rec, struct sel *s)
{
	uint32_t v = value(t, rec, s);
	if (v < s->thr)
		return true;
	if (v == s->thr && s->quota > 0) {
		s->quota--;
		return true;
	}
	return false;
}

// remove_selected removes the `count` rows s selects (each row is judged
// once) and returns count.
static size_t
remove_selected(struct tbl *t, struct sel *s, size_t count)
{
	if (count == 0)
		return 0;
	if (count * 32 > t->rows) { // (measured: compaction wins from ~2%)
		size_t w = 0;
		for (size_t r = 0; r < t->rows; r++) {
			uint8_t *rec = tbl__rec(t, r);
			if (selected(t, rec, s))
				continue;
			if (w != r)
				memcpy(tbl__rec(t, w), rec, t->rec);
			w++;
		}
		t->rows = w;
		tbl__reindex(t);
	} else {
		// The last row fills a removed row's place and is judged
		// there: every row is still judged exactly once.
		for (size_t r = 0; r < t->rows;) {
			if (selected(t, tbl__rec(t, r), s))
				tbl__remove(t, (uint32_t) r);
			else
				r++;
		}
	}
	t->evicted += count;
	tbl__shrink(t);
	return count;
}

size_t
tbl_evict_idle(struct tbl *t, uint64_t version)
{
	uint64_t after = t->conf.evict_after;
	if (after == 0 || version <= after || t->rows == 0)
		return 0;
	struct sel s = { .freq = false, .thr = tbl__touch32(version - after) };
	if (s.thr <= t->min_touch)
		return 0; // the common case: nothing old enough, no pass
	size_t   n   = 0;
	uint32_t min = UINT32_MAX; // of the rows that stay
	for (size_t r = 0; r < t->rows; r++) {
		uint32_t v = tbl__rec_touch(tbl__rec(t, r));
		n += v < s.thr;
		if (v >= s.thr && v < min)
			min = v;
	}
	t->min_touch = min;
	return remove_selected(t, &s, n);
}

// threshold finds s->thr and s->quota such that exactly `need` rows
// (need < rows) are selected, the lowest values first. -1 without memory
// for the histogram.
static int
threshold(const struct tbl *t, size_t need, struct sel *s)
{
	// The values' known bounds: estimates are u16; touches lie between
	// the shard's bounds (usually a range one pass resolves exactly).
	uint32_t lo = s->freq ? 0 : t->min_touch;
	uint32_t hi = s->freq ? UINT16_MAX : t->max_touch;
	if (lo > hi) {
		lo = 0;
		hi = UINT32_MAX;
	}
	size_t *hist = fb_alloc(NB * sizeof(*hist));
	if (hist == NULL)
		return -1;
	size_t below = 0; // rows whose value is under lo
	for (bool pass1 = true;; pass1 = false) {
		uint64_t width = (uint64_t) hi - lo + 1;
		uint64_t nb    = width < NB ? width : NB;
		size_t   out   = 0;
		memset(hist, 0, nb * sizeof(*hist));
		for (size_t r = 0; r < t->rows; r++) {
			uint32_t v = value(t, tbl__rec(t, r), s);
			if (v >= lo && v <= hi)
				hist[((uint64_t) (v - lo) * nb) / width]++;
			else
				out++;
		}
		if (pass1 && out > 0 && (lo > 0 || hi < UINT32_MAX)) {
			lo = 0; // the bounds were wrong: every value
			hi = UINT32_MAX;
			continue;
		}
		uint64_t b = 0;
		while (below + hist[b] <= need)
			below += hist[b++];
		if (width <= NB) {
			s->thr   = lo + (uint32_t) b;
			s->quota = need - below;
			break;
		}
		// Bucket b holds the values v with floor((v-lo) nb / width)
		// == b: from ceil(b width / nb) on.
		uint64_t first = (b * width + nb - 1) / nb;
		uint64_t end   = ((b + 1) * width + nb - 1) / nb;
		hi             = lo + (uint32_t) (end - 1);
		lo             = lo + (uint32_t) first;
	}
	fb_free(hist);
	return 0;
}

size_t
tbl_evict_to(struct tbl *t, size_t budget, enum tbl_evict policy)
{
	if (tbl_bytes(t) <= budget || t->rows == 0)
		return 0;
	struct sel s = { .freq = policy == TBL_EVICT_LFU };
	if (s.freq && tbl__sketch_open(t) != 0)
		s.freq = false; // no memory for the sketch: least recent
	// The most rows that fit (bytes_at grows with the rows).
	size_t lo = 0, hi = t->rows;
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;
		if (tbl__bytes_at(t, mid) <= budget)
			lo = mid;
		else
			hi = mid - 1;
	}
	size_t need = t->rows - lo;
	if (need == t->rows) {
		s.thr   = UINT32_MAX;
		s.quota = SIZE_MAX; // every row
		return remove_selected(t, &s, need);
	}
	if (threshold(t, need, &s) != 0)
		return 0;
	return remove_selected(t, &s, need);
}

// bucket_sel: the selection of buckets for policy, touches aged behind
// newest.
static struct sel
bucket_sel(struct tbl *t, enum tbl_evict policy, uint64_t newest)
{
	struct sel s = { .freq = policy == TBL_EVICT_LFU,
		.age           = true,
		.newest        = tbl__touch32(newest) };
	if (s.freq && tbl__sketch_open(t) != 0)
		s.freq = false; // no memory for the sketch: least recent
	return s;
}

size_t
tbl_evict_hist(struct tbl *t, enum tbl_evict policy, uint64_t newest,
    uint64_t *hist)
{
	if (t->rows == 0)
		return 0;
	// Each row's share of its chunks' memory (page and chunk rounding
	// included; not the index, which shrinks only below a quarter
	// full): at least its record.
	struct sel s = bucket_sel(t, policy, newest);
	uint64_t   w = (tbl__bytes_at(t, t->rows) - tbl__bytes_at(t, 0) -
                         tbl__page_up(
	                       tbl__slots_for(t->rows, t->n_slots) * 4) +
                         tbl__page_up(tbl__slots_for(0, t->n_slots) * 4)) /
	    t->rows;
	w = w > t->rec ? w : t->rec;
	for (size_t r = 0; r < t->rows; r++)
		hist[value(t, tbl__rec(t, r), &s)] += w;
	return t->rows;
}

size_t
tbl_evict_below(struct tbl *t, enum tbl_evict policy, uint64_t newest,
    uint32_t bucket, double frac)
{
	struct sel s     = bucket_sel(t, policy, newest);
	size_t     below = 0, at = 0;
	for (size_t r = 0; r < t->rows; r++) {
		uint32_t v = value(t, tbl__rec(t, r), &s);
		below += v < bucket;
		at += v == bucket;
	}
	double q = frac <= 0 ? 0
	    : frac >= 1      ? (double) at
	                     : frac * (double) at;
	s.thr    = bucket;
	s.quota  = (size_t) q;
	s.quota += (double) s.quota < q; // rounded up
	return remove_selected(t, &s, below + s.quota);
}
