// ctr_data.c — Criteo-format CTR data: the key and dense rules, one text
// line's parser, the loader (text, gzipped text, binary) and the binary
// writer.
//
// Files are untrusted input: every column is checked, every failure names
// the file, the line (or record) and the column, and nothing asserts on a
// byte. Loading is one pass with no per-line allocation: the file is read
// through zlib (which passes plain files through) into a 4 MiB buffer,
// lines are cut with memchr and parsed by hand, and the sample arrays
// grow by doubling. The keys are field-major (tr/ctr.h), so each growth
// re-lays the 26 field blocks inside the one reallocated array instead of
// holding a second copy.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "tr/ctr.h"
#include "tr_impl.h"

#define COLUMNS (1 + TR_CTR_DENSE + TR_CTR_CAT)
#define READ_BUF (4u << 20) // also the longest line accepted
#define FIRST_CAP 4096      // samples before the first growth

uint64_t
tr_ctr_key(const char *s, size_t len)
{
	uint64_t v = 0;
	size_t   i;
	if (len == 0) {
		return TR_CTR_KEY_MISSING;
	}
	if (len <= 16) {
		for (i = 0; i < len; i++) {
			unsigned c = (unsigned char) s[i];
			unsigned d;
			if (c - '0' < 10) {
				d = c - '0';
			} else if ((c | 0x20) - 'a' < 6) {
				d = (c | 0x20) - 'a' + 10;
			} else {
				break;
			}
			v = v << 4 | d;
		}
		if (i == len) {
			return v;
		}
	}
	// FNV-1a, 64 bits (offset basis and prime of the reference).
	v = 0xcbf29ce484222325ULL;
	for (i = 0; i < len; i++) {
		v ^= (unsigned char) s[i];
		v *= 0x100000001b3ULL;
	}
	return v | 1ULL << 63;
}

float
tr_ctr_dense_value(int64_t v, int missing)
{
	if (missing || v <= 0) {
		return 0.0f;
	}
	return (float) log1p((double) v);
}

// column_name writes a column's Criteo name: label, I1..I13, C1..C26.
static const char *
column_name(int col, char *buf, size_t n)
{
	if (col == 0) {
		return "label";
	}
	if (col <= TR_CTR_DENSE) {
		snprintf(buf, n, "I%d", col);
	} else {
		snprintf(buf, n, "C%d", col - TR_CTR_DENSE);
	}
	return buf;
}

// col_err formats "column N (NAME): why" (columns counted from 1).
static int
col_err(char *err, size_t errlen, int col, const char *why)
{
	char name[8];
	return tr__errf(FB_EPROTO, err, errlen, "column %d (%s): %s", col + 1,
	    column_name(col, name, sizeof name), why);
}

// parse_int reads an optionally signed decimal integer that fills the
// whole span [s, s+len) into *v. Returns 0, or -1 with *why set.
static int
parse_int(const char *s, size_t len, int64_t *v, const char **why)
{
	uint64_t mag = 0;
	uint64_t lim = (uint64_t) INT64_MAX;
	size_t   i   = 0;
	int      neg = 0;
	if (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-';
		lim += (uint64_t) neg;
		i = 1;
	}
	if (i == len) {
		*why = "not an integer";
		return -1;
	}
	for (; i < len; i++) {
		unsigned d = (unsigned char) s[i] - '0';
		if (d > 9) {
			*why = "not an integer";
			return -1;
		}
		if (mag > (lim - d) / 10) {
			*why = "integer out of int64 range";
			return -1;
		}
		mag = mag * 10 + d;
	}
	*v = neg ? (int64_t) (0 - mag) : (int64_t) mag;
	return 0;
}

int
tr_ctr_parse_line(const char *line, size_t len, float *label,
    float dense[TR_CTR_DENSE], uint64_t keys[TR_CTR_CAT], char *err,
    size_t errlen)
{
	const char *p   = line;
	const char *end = line + len;
	int         col;
	if (len > 0 && end[-1] == '\r') {
		end--;
	}
	for (col = 0; col < COLUMNS; col++) {
		const char *tab = memchr(p, '\t', (size_t) (end - p));
		const char *ce  = tab != NULL ? tab : end;
		size_t      n   = (size_t) (ce - p);
		const char *why = NULL;
		int64_t     v   = 0;
		if (tab == NULL && col < COLUMNS - 1) {
			char msg[64];
			snprintf(msg, sizeof msg,
			    "missing: the line has %d columns, not %d",
			    col + 1, COLUMNS);
			return col_err(err, errlen, col + 1, msg);
		}
		if (tab != NULL && col == COLUMNS - 1) {
			return tr__errf(FB_EPROTO, err, errlen,
			    "column %d: too many columns (a Criteo line has "
			    "%d)",
			    COLUMNS + 1, COLUMNS);
		}
		if (col == 0) {
			if (n != 1 || (p[0] != '0' && p[0] != '1')) {
				return col_err(err, errlen, 0, "not 0 or 1");
			}
			*label = (float) (p[0] - '0');
		} else if (col <= TR_CTR_DENSE) {
			if (n > 0 && parse_int(p, n, &v, &why) != 0) {
				return col_err(err, errlen, col, why);
			}
			dense[col - 1] = tr_ctr_dense_value(v, n == 0);
		} else {
			keys[col - 1 - TR_CTR_DENSE] = tr_ctr_key(p, n);
		}
		p = ce + 1;
	}
	return FB_OK;
}

void
tr_ctr_fini(struct tr_ctr_data *d)
{
	if (d == NULL) {
		return;
	}
	fb_free(d->label);
	fb_free(d->dense);
	fb_free(d->keys);
	memset(d, 0, sizeof *d);
}

// grow makes room for cap samples (cap >= d->n): the three arrays are
// reallocated and the field blocks of keys moved from stride old_cap to
// stride cap (back to front when growing, front to back when shrinking,
// so no block overwrites one not yet moved).
static int
grow(struct tr_ctr_data *d, size_t old_cap, size_t cap)
{
	float    *l;
	float    *x;
	uint64_t *k;
	int       f;
	if (cap < old_cap) {
		for (f = 1; f < TR_CTR_CAT; f++) {
			memmove(d->keys + (size_t) f * cap,
			    d->keys + (size_t) f * old_cap,
			    d->n * sizeof *d->keys);
		}
	}
	l = fb_realloc(d->label, cap * sizeof *l);
	if (l == NULL) {
		return FB_ENOMEM;
	}
	d->label = l;
	x        = fb_realloc(d->dense, cap * TR_CTR_DENSE * sizeof *x);
	if (x == NULL) {
		return FB_ENOMEM;
	}
	d->dense = x;
	k        = fb_realloc(d->keys, cap * TR_CTR_CAT * sizeof *k);
	if (k == NULL) {
		return FB_ENOMEM;
	}
	d->keys = k;
	if (cap > old_cap) {
		for (f = TR_CTR_CAT - 1; f >= 1; f--) {
			memmove(d->keys + (size_t) f * cap,
			    d->keys + (size_t) f * old_cap,
			    d->n * sizeof *d->keys);
		}
	}
	return FB_OK;
}

// loader is one load's state: the file, its sample arrays and capacity.
struct loader {
	const char         *path;
	gzFile              f;
	struct tr_ctr_data *d;
	size_t              cap;
	size_t              max_rows;
	char               *buf; // READ_BUF bytes
};

// room makes sure sample d->n can be stored.
static int
room(struct loader *ld, char *err, size_t errlen)
{
	size_t want;
	if (ld->d->n < ld->cap) {
		return FB_OK;
	}
	want = ld->cap == 0 ? FIRST_CAP : ld->cap * 2;
	if (ld->max_rows != 0 && want > ld->max_rows) {
		want = ld->max_rows;
	}
	if (grow(ld->d, ld->cap, want) != FB_OK) {
		return tr__errf(FB_ENOMEM, err, errlen,
		    "%s: out of memory for %zu samples", ld->path, want);
	}
	ld->cap = want;
	return FB_OK;
}

// zread reads up to n bytes; *got 0 at the end of the file.
static int
zread(struct loader *ld, char *dst, size_t n, size_t *got, char *err,
    size_t errlen)
{
	int r = gzread(ld->f, dst, (unsigned) n);
	if (r < 0) {
		int zerr;
		return tr__errf(FB_EPROTO, err, errlen, "%s: corrupt file: %s",
		    ld->path, gzerror(ld->f, &zerr));
	}
	*got = (size_t) r;
	return FB_OK;
}

// put_line parses one text line into sample d->n.
static int
put_line(struct loader *ld, const char *line, size_t len, size_t lineno,
    char *err, size_t errlen)
{
	struct tr_ctr_data *d = ld->d;
	uint64_t            keys[TR_CTR_CAT];
	char                why[160];
	int                 rv = room(ld, err, errlen);
	int                 f;
	if (rv != FB_OK) {
		return rv;
	}
	rv = tr_ctr_parse_line(line, len, &d->label[d->n],
	    &d->dense[d->n * TR_CTR_DENSE], keys, why, sizeof why);
	if (rv != FB_OK) {
		return tr__errf(rv, err, errlen, "%s: line %zu: %s", ld->path,
		    lineno, why);
	}
	for (f = 0; f < TR_CTR_CAT; f++) {
		d->keys[(size_t) f * ld->cap + d->n] = keys[f];
	}
	d->n++;
	return FB_OK;
}

// load_text reads lines; the first prefix bytes are already in ld->buf.
static int
load_text(struct loader *ld, size_t have, char *err, size_t errlen)
{
	size_t lineno = 0;
	int    eof    = 0;
	int    rv;
	while (!eof || have > 0) {
		size_t got   = 0;
		size_t start = 0;
		char  *nl;
		if (!eof && have < READ_BUF) {
			rv = zread(ld, ld->buf + have, READ_BUF - have, &got,
			    err, errlen);
			if (rv != FB_OK) {
				return rv;
			}
			eof = got == 0;
			have += got;
		}
		while ((nl = memchr(ld->buf + start, '\n', have - start))) {
			size_t len = (size_t) (nl - (ld->buf + start));
			if (ld->max_rows != 0 && ld->d->n == ld->max_rows) {
				return FB_OK;
			}
			rv = put_line(ld, ld->buf + start, len, ++lineno, err,
			    errlen);
			if (rv != FB_OK) {
				return rv;
			}
			start += len + 1;
		}
		if (eof && start < have) { // a last line without "\n"
			if (ld->max_rows != 0 && ld->d->n == ld->max_rows) {
				return FB_OK;
			}
			rv = put_line(ld, ld->buf + start, have - start,
			    ++lineno, err, errlen);
			if (rv != FB_OK) {
				return rv;
			}
			start = have;
		}
		if (start == 0 && have == READ_BUF) {
			return tr__errf(FB_EPROTO, err, errlen,
			    "%s: line %zu: longer than %u bytes", ld->path,
			    lineno + 1, READ_BUF);
		}
		memmove(ld->buf, ld->buf + start, have - start);
		have -= start;
	}
	return FB_OK;
}

static uint32_t
get_u32le(const uint8_t *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
	    (uint32_t) p[3] << 24;
}

static uint64_t
get_u64le(const uint8_t *p)
{
	return (uint64_t) get_u32le(p) | (uint64_t) get_u32le(p + 4) << 32;
}

static float
get_f32le(const uint8_t *p)
{
	uint32_t u = get_u32le(p);
	float    v;
	memcpy(&v, &u, sizeof v);
	return v;
}

// put_record decodes one binary record into sample d->n.
static int
put_record(struct loader *ld, const uint8_t *r, char *err, size_t errlen)
{
	struct tr_ctr_data *d = ld->d;
	float               label;
	int                 j;
	int                 rv = room(ld, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	label = get_f32le(r);
	if (label != 0.0f && label != 1.0f) {
		return tr__errf(FB_EPROTO, err, errlen,
		    "%s: record %zu: label is not 0 or 1", ld->path, d->n + 1);
	}
	d->label[d->n] = label;
	for (j = 0; j < TR_CTR_DENSE; j++) {
		float v = get_f32le(r + 4 + 4 * j);
		if (!isfinite(v)) {
			return tr__errf(FB_EPROTO, err, errlen,
			    "%s: record %zu: dense I%d is not finite",
			    ld->path, d->n + 1, j + 1);
		}
		d->dense[d->n * TR_CTR_DENSE + (size_t) j] = v;
	}
	for (j = 0; j < TR_CTR_CAT; j++) {
		d->keys[(size_t) j * ld->cap + d->n] = get_u64le(
		    r + 4 + 4 * TR_CTR_DENSE + 8 * j);
	}
	d->n++;
	return FB_OK;
}

// check_header validates a binary header (in ld->buf) and returns its n.
static int
check_header(struct loader *ld, uint64_t *n, char *err, size_t errlen)
{
	const uint8_t *h = (const uint8_t *) ld->buf;
	struct stat    st;
	if (get_u32le(h + 8) != 1) {
		return tr__errf(FB_EPROTO, err, errlen,
		    "%s: bad header: version %u, not 1", ld->path,
		    get_u32le(h + 8));
	}
	if (get_u32le(h + 12) != TR_CTR_DENSE ||
	    get_u32le(h + 16) != TR_CTR_CAT || get_u32le(h + 20) != 0) {
		return tr__errf(FB_EPROTO, err, errlen,
		    "%s: bad header: %u dense and %u categorical columns, "
		    "not %d and %d",
		    ld->path, get_u32le(h + 12), get_u32le(h + 16),
		    TR_CTR_DENSE, TR_CTR_CAT);
	}
	*n = get_u64le(h + 24);
	// A plain file's size must match n exactly (a gzipped one is
	// checked as it is read: a short or long stream fails below).
	if (gzdirect(ld->f) && stat(ld->path, &st) == 0 &&
	    (*n > ((uint64_t) st.st_size - TR_CTR_BIN_HEADER) /
	                TR_CTR_BIN_RECORD ||
	        (uint64_t) st.st_size !=
	            TR_CTR_BIN_HEADER + *n * TR_CTR_BIN_RECORD)) {
		return tr__errf(FB_EPROTO, err, errlen,
		    "%s: header says %llu samples (%llu bytes), the file has "
		    "%lld bytes",
		    ld->path, (unsigned long long) *n,
		    (unsigned long long) (TR_CTR_BIN_HEADER +
		        *n * TR_CTR_BIN_RECORD),
		    (long long) st.st_size);
	}
	return FB_OK;
}

// load_bin reads the records after the header (ld->buf holds have bytes
// of the file, the header first).
static int
load_bin(struct loader *ld, size_t have, char *err, size_t errlen)
{
	const size_t recs = READ_BUF / TR_CTR_BIN_RECORD;
	uint64_t     n    = 0;
	uint64_t     i    = 0;
	size_t       start;
	int          rv;
	if (have < TR_CTR_BIN_HEADER) {
		return tr__errf(FB_EPROTO, err, errlen,
		    "%s: truncated header (%zu of %d bytes)", ld->path, have,
		    TR_CTR_BIN_HEADER);
	}
	rv = check_header(ld, &n, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	start = TR_CTR_BIN_HEADER;
	for (;;) {
		size_t got = 0;
		while (have - start >= TR_CTR_BIN_RECORD && i < n) {
			if (ld->max_rows != 0 && ld->d->n == ld->max_rows) {
				return FB_OK;
			}
			rv = put_record(ld, (const uint8_t *) ld->buf + start,
			    err, errlen);
			if (rv != FB_OK) {
				return rv;
			}
			start += TR_CTR_BIN_RECORD;
			i++;
		}
		memmove(ld->buf, ld->buf + start, have - start);
		have -= start;
		start = 0;
		rv = zread(ld, ld->buf + have, recs * TR_CTR_BIN_RECORD - have,
		    &got, err, errlen);
		if (rv != FB_OK) {
			return rv;
		}
		if (i == n && have + got > 0) {
			return tr__errf(FB_EPROTO, err, errlen,
			    "%s: bytes after the %llu samples the header "
			    "declares",
			    ld->path, (unsigned long long) n);
		}
		if (got == 0) {
			break;
		}
		have += got;
	}
	if (i < n) {
		return tr__errf(FB_EPROTO, err, errlen,
		    "%s: truncated: record %llu of the %llu the header "
		    "declares is %s",
		    ld->path, (unsigned long long) i + 1,
		    (unsigned long long) n, have ? "cut short" : "missing");
	}
	return FB_OK;
}

int
tr_ctr_load(const char *path, size_t max_rows, struct tr_ctr_data *d,
    char *err, size_t errlen)
{
	struct loader ld   = { .path = path, .d = d, .max_rows = max_rows };
	size_t        have = 0;
	int           rv;
	memset(d, 0, sizeof *d);
	ld.f = gzopen(path, "rb");
	if (ld.f == NULL) {
		int e = errno;
		return tr__errf(e == ENOENT ? FB_ENOTFOUND : FB_ESYSERR | e,
		    err, errlen, "%s: cannot open: %s", path,
		    e ? strerror(e) : "out of memory");
	}
	gzbuffer(ld.f, 1u << 18);
	ld.buf = fb_alloc(READ_BUF);
	if (ld.buf == NULL) {
		rv = tr__errf(FB_ENOMEM, err, errlen, "%s: out of memory",
		    path);
		goto fail;
	}
	rv = zread(&ld, ld.buf, TR_CTR_BIN_HEADER, &have, err, errlen);
	if (rv == FB_OK && have < TR_CTR_BIN_HEADER && have > 0) {
		size_t more = 0; // gzread may stop short at a member end
		rv = zread(&ld, ld.buf + have, TR_CTR_BIN_HEADER - have, &more,
		    err, errlen);
		have += more;
	}
	if (rv != FB_OK) {
		goto fail;
	}
	if (have >= 8 && memcmp(ld.buf, TR_CTR_BIN_MAGIC, 8) == 0) {
		rv = load_bin(&ld, have, err, errlen);
	} else {
		rv = load_text(&ld, have, err, errlen);
	}
	if (rv != FB_OK) {
		goto fail;
	}
	if (d->n == 0) {
		rv = tr__errf(FB_EINVAL, err, errlen, "%s: no samples", path);
		goto fail;
	}
	if (d->n < ld.cap && grow(d, ld.cap, d->n) != FB_OK) {
		rv = tr__errf(FB_ENOMEM, err, errlen, "%s: out of memory",
		    path);
		goto fail;
	}
	fb_free(ld.buf);
	gzclose(ld.f);
	return FB_OK;
fail:
	fb_free(ld.buf);
	gzclose(ld.f);
	tr_ctr_fini(d);
	return rv;
}

static void
put_u32le(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
	p[2] = (uint8_t) (v >> 16);
	p[3] = (uint8_t) (v >> 24);
}

static void
put_u64le(uint8_t *p, uint64_t v)
{
	put_u32le(p, (uint32_t) v);
	put_u32le(p + 4, (uint32_t) (v >> 32));
}

static void
put_f32le(uint8_t *p, float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	put_u32le(p, u);
}

void
tr_ctr_bin_header(uint8_t out[TR_CTR_BIN_HEADER], uint64_t n)
{
	static const uint32_t w[4] = { 1, TR_CTR_DENSE, TR_CTR_CAT, 0 };
	int                   i;
	memcpy(out, TR_CTR_BIN_MAGIC, 8);
	for (i = 0; i < 4; i++) {
		put_u32le(out + 8 + 4 * i, w[i]);
	}
	put_u64le(out + 24, n);
}

void
tr_ctr_bin_record(uint8_t out[TR_CTR_BIN_RECORD], float label,
    const float dense[TR_CTR_DENSE], const uint64_t keys[TR_CTR_CAT])
{
	int j;
	put_f32le(out, label);
	for (j = 0; j < TR_CTR_DENSE; j++) {
		put_f32le(out + 4 + 4 * j, dense[j]);
	}
	for (j = 0; j < TR_CTR_CAT; j++) {
		put_u64le(out + 4 + 4 * TR_CTR_DENSE + 8 * j, keys[j]);
	}
}

int
tr_ctr_bin_write(const char *path, const struct tr_ctr_data *d, char *err,
    size_t errlen)
{
	uint8_t  rec[TR_CTR_BIN_RECORD];
	uint64_t keys[TR_CTR_CAT];
	FILE    *f = fopen(path, "wb");
	size_t   i;
	int      j;
	if (f == NULL) {
		int e = errno;
		return tr__errf(FB_ESYSERR | e, err, errlen,
		    "%s: cannot create: %s", path, strerror(e));
	}
	setvbuf(f, NULL, _IOFBF, 1u << 20);
	tr_ctr_bin_header(rec, d->n);
	fwrite(rec, 1, TR_CTR_BIN_HEADER, f);
	for (i = 0; i < d->n; i++) {
		for (j = 0; j < TR_CTR_CAT; j++) {
			keys[j] = d->keys[(size_t) j * d->n + i];
		}
		tr_ctr_bin_record(rec, d->label[i],
		    d->dense + i * TR_CTR_DENSE, keys);
		fwrite(rec, 1, TR_CTR_BIN_RECORD, f);
	}
	int bad = ferror(f);
	bad |= fclose(f) != 0;
	if (bad) {
		int e = errno ? errno : EIO;
		return tr__errf(FB_ESYSERR | e, err, errlen,
		    "%s: write failed: %s", path, strerror(e));
	}
	return FB_OK;
}
