// save.c — a shard as bytes (tbl_save) and back (tbl_load), for snapshots
// and moves: every row with its key, last touch and optimizer state, the
// admission sketch and the counters, so a restored shard admits, evicts
// and reports exactly as the saved one would have.
//
// The image, little-endian, closed by a CRC-32 of everything before it:
//   0  magic "FTBL"        4  format (1)        8  dim
//   12 optimizer          16  record bytes     20  flags (1: sketch)
//   24 rows u64           32  sketch additions u64
//   40 admitted, rejected, evicted, lookups, hits (u64 each)
//   80 sketch width u32    84 reserved (0)
//   88 rows x record bytes (key u64, touch u32, row and state floats)
//   .. the sketch (4 x width u16), if flagged
//   .. CRC-32 u32
// tbl_load checks all of it and builds the new contents aside before
// taking them, so a bad image (or no memory) leaves the shard as it was.
#include "tbl_impl.h"

#define MAGIC 0x4c425446u // "FTBL"
#define FORMAT 1u
#define HEAD 88u

size_t
tbl_save_size(const struct tbl *t)
{
	size_t sk = t->sketch ? tbl__sketch_bytes(t->sk_width) : 0;
	return HEAD + t->rows * t->rec + sk + 4;
}

void
tbl_save(const struct tbl *t, uint8_t *out)
{
	fb_put_u32le(out, MAGIC);
	fb_put_u32le(out + 4, FORMAT);
	fb_put_u32le(out + 8, t->dim);
	fb_put_u32le(out + 12, (uint32_t) t->conf.optim);
	fb_put_u32le(out + 16, (uint32_t) t->rec);
	fb_put_u32le(out + 20, t->sketch != NULL);
	fb_put_u64le(out + 24, t->rows);
	fb_put_u64le(out + 32, t->sketch_adds);
	const uint64_t cnt[5] = { t->admitted, t->rejected, t->evicted,
		t->lookups, t->hits };
	for (int i = 0; i < 5; i++)
		fb_put_u64le(out + 40 + 8 * i, cnt[i]);
	fb_put_u32le(out + 80, t->sketch != NULL ? t->sk_width : 0);
	fb_put_u32le(out + 84, 0);
	uint8_t *p = out + HEAD;
	// Records as they are in memory: the hosts Ferry runs on are
	// little-endian, as the image is.
	for (size_t r = 0; r < t->rows; r++, p += t->rec)
		memcpy(p, tbl__rec(t, r), t->rec);
	if (t->sketch != NULL) {
		size_t n = (size_t) TBL_SK_DEPTH * t->sk_width;
		for (size_t i = 0; i < n; i++, p += 2)
			fb_put_u16le(p, t->sketch[i]);
	}
	fb_put_u32le(p, fb_crc32(0, out, (size_t) (p - out)));
}

// check_head: NULL when the image's frame fits t, else what is wrong.
static const char *
check_head(const struct tbl *t, const uint8_t *in, size_t len)
{
	if (len < HEAD + 4)
		return "table image: truncated header";
	if (fb_get_u32le(in) != MAGIC)
		return "table image: bad magic";
	if (fb_get_u32le(in + 4) != FORMAT)
		return "table image: unknown format version";
	if (fb_get_u32le(in + 8) != t->dim)
		return "table image: dim differs from the table's";
	if (fb_get_u32le(in + 12) != (uint32_t) t->conf.optim)
		return "table image: optimizer differs from the table's";
	if (fb_get_u32le(in + 16) != t->rec)
		return "table image: record size differs from the table's";
	uint32_t flags = fb_get_u32le(in + 20);
	if (flags > 1)
		return "table image: unknown flags";
	uint32_t width = fb_get_u32le(in + 80);
	if (flags ? (width < TBL_SK_MIN || width > TBL_SK_MAX ||
	                (width & (width - 1)) != 0)
	          : width != 0)
		return "table image: bad sketch width";
	if (fb_get_u32le(in + 84) != 0)
		return "table image: reserved field set";
	uint64_t rows = fb_get_u64le(in + 24);
	size_t   sk   = flags ? tbl__sketch_bytes(width) : 0;
	if (len < HEAD + 4 + sk || rows > TBL_MAX_ROWS ||
	    rows * t->rec != len - HEAD - 4 - sk)
		return "table image: length does not match its row count";
	if (fb_crc32(0, in, len - 4) != fb_get_u32le(in + len - 4))
		return "table image: checksum mismatch";
	return NULL;
}

const char *
tbl_load(struct tbl *t, const uint8_t *in, size_t len)
{
	const char *err = check_head(t, in, len);
	if (err != NULL)
		return err;
	uint64_t    rows = fb_get_u64le(in + 24);
	struct tbl *n    = tbl_open(&t->conf);
	if (n == NULL)
		return "table image: out of memory";
	int rv = tbl__load_recs(n, in + HEAD, (size_t) rows);
	err    = rv > 0 ? "table image: a key appears twice"
	                : "table image: out of memory";
	if (rv != 0)
		goto fail;
	const uint8_t *p = in + HEAD + (size_t) rows * t->rec;
	if (fb_get_u32le(in + 20) != 0) {
		uint32_t width = fb_get_u32le(in + 80);
		if (width != n->sk_width && tbl__sketch_resize(n, width) != 0)
			goto fail;
		size_t k = (size_t) TBL_SK_DEPTH * width;
		for (size_t i = 0; i < k; i++, p += 2)
			n->sketch[i] = fb_get_u16le(p);
	}
	n->sketch_adds = fb_get_u64le(in + 32);
	n->min_touch   = 0;          // unknown: the first sweep or eviction
	n->max_touch   = UINT32_MAX; // finds them
	n->admitted    = fb_get_u64le(in + 40);
	n->rejected    = fb_get_u64le(in + 48);
	n->evicted     = fb_get_u64le(in + 56);
	n->lookups     = fb_get_u64le(in + 64);
	n->hits        = fb_get_u64le(in + 72);
	struct tbl old = *t;
	*t             = *n;
	*n             = old;
	tbl_close(n);
	return NULL;
fail:
	tbl_close(n);
	return err;
}
