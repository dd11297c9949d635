// data.c — IDX loader (gzipped or plain, through zlib) and a synthetic
// data generator.
//
// IDX files are untrusted input: every count and dimension is checked
// against TR_DATA_MAX_* caps, the pixel buffer grows only as the file's
// (decompressed) bytes arrive, and every failure names the file and the
// problem.
// Pixels are streamed from the file straight into the float buffer in
// chunks, so loading never holds a second copy of the images.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "tr_impl.h"

#define IDX_MAGIC_U8_1D 0x00000801u // labels: ubyte, 1 dimension
#define IDX_MAGIC_U8_3D 0x00000803u // images: ubyte, 3 dimensions
#define CHUNK (1u << 20)
#define PIXEL_CHUNK (1u << 16)

static uint32_t
get_u32be(const uint8_t *p)
{
	return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16) |
	    ((uint32_t) p[2] << 8) | (uint32_t) p[3];
}

// read_exact reads exactly n bytes; on a short read it explains why.
static int
read_exact(gzFile f, const char *path, void *buf, size_t n, const char *what,
    char *err, size_t errlen)
{
	size_t got = 0;
	while (got < n) {
		size_t want = n - got > CHUNK ? CHUNK : n - got;
		int    r = gzread(f, (uint8_t *) buf + got, (unsigned) want);
		int    zerr = Z_OK;
		const char *zmsg;
		if (r < 0) {
			zmsg = gzerror(f, &zerr);
			return tr__errf(FB_EPROTO, err, errlen,
			    "%s: corrupt file while reading %s: %s", path,
			    what, zmsg);
		}
		if (r == 0) {
			return tr__errf(FB_EPROTO, err, errlen,
			    "%s: truncated: %s needs %zu bytes, file has %zu",
			    path, what, n, got);
		}
		got += (size_t) r;
	}
	return FB_OK;
}

// expect_eof fails if the file has bytes after the declared data.
static int
expect_eof(gzFile f, const char *path, char *err, size_t errlen)
{
	uint8_t b;
	int     r = gzread(f, &b, 1);
	if (r < 0) {
		int zerr;
		return tr__errf(FB_EPROTO, err, errlen, "%s: corrupt file: %s",
		    path, gzerror(f, &zerr));
	}
	if (r > 0) {
		return tr__errf(FB_EPROTO, err, errlen,
		    "%s: trailing bytes after the declared data", path);
	}
	return FB_OK;
}

static int
open_file(const char *path, gzFile *out, char *err, size_t errlen)
{
	struct stat st;
	gzFile      f = gzopen(path, "rb");
	if (f == NULL) {
		int e = errno;
		return tr__errf(e == ENOENT ? FB_ENOTFOUND : FB_ESYSERR | e,
		    err, errlen, "%s: cannot open: %s", path,
		    e ? strerror(e) : "out of memory");
	}
	// zlib's buffers (the size in, twice it out) sized to the file up
	// to 256 KiB: a small file (a test's, a fuzzer's) allocates little.
	unsigned buf = 1u << 18;
	if (stat(path, &st) == 0 && st.st_size < (off_t) buf) {
		buf = st.st_size < 8192 ? 8192u : (unsigned) st.st_size;
	}
	gzbuffer(f, buf);
	*out = f;
	return FB_OK;
}

static int
load_images(struct tr_dataset *ds, const char *path, uint32_t *n_out,
    char *err, size_t errlen)
{
	gzFile   f = NULL;
	uint8_t  hdr[16];
	uint8_t *chunk = NULL;
	int      rv;
	if ((rv = open_file(path, &f, err, errlen)) != FB_OK) {
		return rv;
	}
	if ((rv = read_exact(f, path, hdr, 16, "the image header", err,
	         errlen)) != FB_OK) {
		goto fail;
	}
	uint32_t magic = get_u32be(hdr);
	uint32_t n = get_u32be(hdr + 4), rows = get_u32be(hdr + 8),
	         cols = get_u32be(hdr + 12);
	if (magic != IDX_MAGIC_U8_3D) {
		rv = tr__errf(FB_EPROTO, err, errlen,
		    "%s: bad magic 0x%08x (want 0x%08x: ubyte images, 3 "
		    "dimensions)",
		    path, magic, IDX_MAGIC_U8_3D);
		goto fail;
	}
	if (n == 0 || n > TR_DATA_MAX_SAMPLES || rows == 0 || cols == 0 ||
	    (uint64_t) rows * cols > TR_DATA_MAX_DIM) {
		rv = tr__errf(FB_EPROTO, err, errlen,
		    "%s: bad dimensions %u x %u x %u (samples 1..%u, "
		    "rows*cols 1..%u)",
		    path, n, rows, cols, TR_DATA_MAX_SAMPLES, TR_DATA_MAX_DIM);
		goto fail;
	}
	size_t dim   = (size_t) rows * cols;
	size_t total = (size_t) n * dim;
	// The header is not trusted for the allocation: the buffer grows
	// (doubling, up to total) only as pixels are actually read, so a
	// header declaring 2^31 pixels in a small (or gzip-bomb) file costs
	// what the file really holds, not what it claims.
	// Reads go through a PIXEL_CHUNK buffer: a lying header costs
	// 64 KiB, not a megabyte, before the file runs out.
	size_t cap = total < PIXEL_CHUNK ? total : PIXEL_CHUNK;
	ds->x      = fb_alloc(cap * sizeof(float));
	chunk      = fb_alloc(cap);
	if (ds->x == NULL || chunk == NULL) {
		rv = tr__errf(FB_ENOMEM, err, errlen,
		    "%s: out of memory for %zu pixels", path, cap);
		goto fail;
	}
	for (size_t done = 0; done < total;) {
		size_t want = total - done > PIXEL_CHUNK ? PIXEL_CHUNK
		                                         : total - done;
		if ((rv = read_exact(f, path, chunk, want, "the pixel data",
		         err, errlen)) != FB_OK) {
			goto fail;
		}
		if (done + want > cap) {
			size_t ncap = cap * 2 < total ? cap * 2 : total;
			float *nx   = fb_realloc(ds->x, ncap * sizeof(float));
			if (nx == NULL) {
				rv = tr__errf(FB_ENOMEM, err, errlen,
				    "%s: out of memory for %zu pixels", path,
				    ncap);
				goto fail;
			}
			ds->x = nx;
			cap   = ncap;
		}
		float *dst = ds->x + done;
		for (size_t i = 0; i < want; i++) {
			dst[i] = (float) chunk[i] * (1.0f / 255.0f);
		}
		done += want;
	}
	if ((rv = expect_eof(f, path, err, errlen)) != FB_OK) {
		goto fail;
	}
	fb_free(chunk);
	gzclose(f);
	ds->dim = dim;
	*n_out  = n;
	return FB_OK;
fail:
	fb_free(chunk);
	fb_free(ds->x);
	ds->x = NULL;
	gzclose(f);
	return rv;
}

static int
load_labels(struct tr_dataset *ds, const char *path, uint32_t n_images,
    int classes, char *err, size_t errlen)
{
	gzFile   f = NULL;
	uint8_t  hdr[8];
	uint8_t *raw = NULL;
	int      rv;
	if ((rv = open_file(path, &f, err, errlen)) != FB_OK) {
		return rv;
	}
	if ((rv = read_exact(f, path, hdr, 8, "the label header", err,
	         errlen)) != FB_OK) {
		goto fail;
	}
	uint32_t magic = get_u32be(hdr), n = get_u32be(hdr + 4);
	if (magic != IDX_MAGIC_U8_1D) {
		rv = tr__errf(FB_EPROTO, err, errlen,
		    "%s: bad magic 0x%08x (want 0x%08x: ubyte labels, 1 "
		    "dimension)",
		    path, magic, IDX_MAGIC_U8_1D);
		goto fail;
	}
	if (n != n_images) {
		rv = tr__errf(FB_EPROTO, err, errlen,
		    "%s: %u labels but the image file has %u images", path, n,
		    n_images);
		goto fail;
	}
	// n matches the images already read, so it is backed by real data.
	raw   = fb_alloc(n);
	ds->y = fb_alloc((size_t) n * sizeof(int32_t));
	if (raw == NULL || ds->y == NULL) {
		rv = tr__errf(FB_ENOMEM, err, errlen,
		    "%s: out of memory for %u labels", path, n);
		goto fail;
	}
	if ((rv = read_exact(f, path, raw, n, "the labels", err, errlen)) !=
	        FB_OK ||
	    (rv = expect_eof(f, path, err, errlen)) != FB_OK) {
		goto fail;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (raw[i] >= classes) {
			rv = tr__errf(FB_EPROTO, err, errlen,
			    "%s: label %u of sample %u is out of range (the "
			    "model has %d classes)",
			    path, raw[i], i, classes);
			goto fail;
		}
		ds->y[i] = raw[i];
	}
	fb_free(raw);
	gzclose(f);
	return FB_OK;
fail:
	fb_free(raw);
	fb_free(ds->y);
	ds->y = NULL;
	gzclose(f);
	return rv;
}

int
tr_dataset_load_idx(struct tr_dataset *ds, const char *images_path,
    const char *labels_path, int classes, char *err, size_t errlen)
{
	struct tr_dataset d = { 0 };
	uint32_t          n = 0;
	int               rv;
	if (ds == NULL || images_path == NULL || labels_path == NULL ||
	    classes < 2 || classes > 256) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "load_idx: bad arguments (classes must be 2..256)");
	}
	memset(ds, 0, sizeof(*ds));
	if ((rv = load_images(&d, images_path, &n, err, errlen)) != FB_OK) {
		return rv;
	}
	if ((rv = load_labels(&d, labels_path, n, classes, err, errlen)) !=
	    FB_OK) {
		tr_dataset_fini(&d);
		return rv;
	}
	d.n       = n;
	d.classes = classes;
	*ds       = d;
	return FB_OK;
}

// find_file writes dir/name.gz into buf if it exists, else dir/name.
static void
find_file(char *buf, size_t n, const char *dir, const char *name)
{
	struct stat st;
	snprintf(buf, n, "%s/%s.gz", dir, name);
	if (stat(buf, &st) == 0) {
		return;
	}
	snprintf(buf, n, "%s/%s", dir, name);
}

int
tr_data_load(const char *dir, int classes, struct tr_dataset *train,
    struct tr_dataset *test, char *err, size_t errlen)
{
	char img[4096], lbl[4096];
	int  rv;
	if (dir == NULL || train == NULL || test == NULL) {
		return tr__errf(FB_EINVAL, err, errlen, "data: bad arguments");
	}
	find_file(img, sizeof(img), dir, "train-images-idx3-ubyte");
	find_file(lbl, sizeof(lbl), dir, "train-labels-idx1-ubyte");
	if ((rv = tr_dataset_load_idx(train, img, lbl, classes, err,
	         errlen)) != FB_OK) {
		return rv;
	}
	find_file(img, sizeof(img), dir, "t10k-images-idx3-ubyte");
	find_file(lbl, sizeof(lbl), dir, "t10k-labels-idx1-ubyte");
	if ((rv = tr_dataset_load_idx(test, img, lbl, classes, err, errlen)) !=
	    FB_OK) {
		tr_dataset_fini(train);
		return rv;
	}
	if (test->dim != train->dim) {
		rv = tr__errf(FB_EPROTO, err, errlen,
		    "%s: test images have %zu pixels, training images %zu",
		    img, test->dim, train->dim);
		tr_dataset_fini(train);
		tr_dataset_fini(test);
		return rv;
	}
	return FB_OK;
}

int
tr_dataset_synthetic(struct tr_dataset *ds, size_t n, size_t dim, int classes,
    uint64_t seed)
{
	struct tr_rng r;
	float        *centers;
	if (ds == NULL || n == 0 || dim == 0 || classes < 2 ||
	    n > TR_DATA_MAX_SAMPLES || dim > TR_DATA_MAX_DIM) {
		return FB_EINVAL;
	}
	memset(ds, 0, sizeof(*ds));
	centers = fb_alloc((size_t) classes * dim * sizeof(float));
	ds->x   = fb_alloc(n * dim * sizeof(float));
	ds->y   = fb_alloc(n * sizeof(int32_t));
	if (centers == NULL || ds->x == NULL || ds->y == NULL) {
		fb_free(centers);
		tr_dataset_fini(ds);
		return FB_ENOMEM;
	}
	tr_rng_seed(&r, seed);
	for (size_t i = 0; i < (size_t) classes * dim; i++) {
		centers[i] = tr_rng_uniform(&r);
	}
	for (size_t i = 0; i < n; i++) {
		int c    = (int) tr_rng_below(&r, (uint64_t) classes);
		ds->y[i] = c;
		for (size_t j = 0; j < dim; j++) {
			ds->x[i * dim + j] = centers[(size_t) c * dim + j] +
			    0.25f * tr_rng_normal(&r);
		}
	}
	fb_free(centers);
	ds->n       = n;
	ds->dim     = dim;
	ds->classes = classes;
	return FB_OK;
}

void
tr_dataset_fini(struct tr_dataset *ds)
{
	if (ds == NULL) {
		return;
	}
	fb_free(ds->x);
	fb_free(ds->y);
	memset(ds, 0, sizeof(*ds));
}
