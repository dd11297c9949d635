// test_data.c — the IDX loader on small generated files, plain and
// gzipped, and on every kind of corrupt file; plus the synthetic set.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

static char dir[64];

static void
setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/tr_test_XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void
teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void
put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t) (v >> 24);
	p[1] = (uint8_t) (v >> 16);
	p[2] = (uint8_t) (v >> 8);
	p[3] = (uint8_t) v;
}

// write_file writes n bytes to dir/name, gzipped when gz.
static void
write_file(const char *name, const uint8_t *b, size_t n, int gz)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (gz) {
		gzFile f = gzopen(path, "wb");
		ck_assert_ptr_nonnull(f);
		if (n > 0) {
			ck_assert_int_eq(gzwrite(f, b, (unsigned) n), (int) n);
		}
		ck_assert_int_eq(gzclose(f), Z_OK);
	} else {
		FILE *f = fopen(path, "wb");
		ck_assert_ptr_nonnull(f);
		ck_assert_uint_eq(fwrite(b, 1, n, f), n);
		fclose(f);
	}
}

// make_images builds an IDX3 file of n images rows x cols whose pixel i
// is (i * 7) & 255; returns its size.
static size_t
make_images(uint8_t *buf, uint32_t magic, uint32_t n, uint32_t rows,
    uint32_t cols)
{
	put_be32(buf, magic);
	put_be32(buf + 4, n);
	put_be32(buf + 8, rows);
	put_be32(buf + 12, cols);
	for (size_t i = 0; i < (size_t) n * rows * cols; i++) {
		buf[16 + i] = (uint8_t) (i * 7);
	}
	return 16 + (size_t) n * rows * cols;
}

static size_t
make_labels(uint8_t *buf, uint32_t magic, uint32_t n, int classes)
{
	put_be32(buf, magic);
	put_be32(buf + 4, n);
	for (uint32_t i = 0; i < n; i++) {
		buf[8 + i] = (uint8_t) (i % (uint32_t) classes);
	}
	return 8 + n;
}

// write_set writes <prefix>-images / -labels (gzipped when gz).
static void
write_set(const char *img, const char *lbl, uint32_t n, uint32_t rows,
    uint32_t cols, int gz)
{
	uint8_t buf[4096];
	write_file(img, buf, make_images(buf, 0x803, n, rows, cols), gz);
	write_file(lbl, buf, make_labels(buf, 0x801, n, 10), gz);
}

static int
load(const char *img, const char *lbl, struct tr_dataset *ds, char *err,
    size_t errlen)
{
	char pi[256], pl[256];
	snprintf(pi, sizeof(pi), "%s/%s", dir, img);
	snprintf(pl, sizeof(pl), "%s/%s", dir, lbl);
	return tr_dataset_load_idx(ds, pi, pl, 10, err, errlen);
}

static void
check_values(const struct tr_dataset *ds, uint32_t n, size_t dim)
{
	ck_assert_uint_eq(ds->n, n);
	ck_assert_uint_eq(ds->dim, dim);
	ck_assert_int_eq(ds->classes, 10);
	for (size_t i = 0; i < n * dim; i++) {
		ck_assert_float_eq_tol(ds->x[i],
		    (float) ((i * 7) & 255) / 255.0f, 1e-7);
	}
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_int_eq(ds->y[i], (int) (i % 10));
	}
}

// A plain IDX pair loads with the right shape, scaled pixels and labels.
START_TEST(test_idx_load_plain)
{
	struct tr_dataset ds;
	char              err[256];
	write_set("img", "lbl", 13, 3, 5, 0);
	PT_OK(load("img", "lbl", &ds, err, sizeof(err)));
	check_values(&ds, 13, 15);
	tr_dataset_fini(&ds);
	tr_dataset_fini(&ds); // safe twice
}
END_TEST

// The same pair gzipped loads identically.
START_TEST(test_idx_load_gzip)
{
	struct tr_dataset ds;
	char              err[256];
	write_set("img.gz", "lbl.gz", 13, 3, 5, 1);
	PT_OK(load("img.gz", "lbl.gz", &ds, err, sizeof(err)));
	check_values(&ds, 13, 15);
	tr_dataset_fini(&ds);
}
END_TEST

// tr_data_load finds "<name>.gz" or "<name>" in a directory, and the
// input width comes from the files.
START_TEST(test_data_load_dir)
{
	struct tr_dataset tr, te;
	char              err[256];
	write_set("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
	    20, 2, 3, 1);
	write_set("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 7, 3, 2,
	    0);
	PT_OK(tr_data_load(dir, 10, &tr, &te, err, sizeof(err)));
	ck_assert_uint_eq(tr.n, 20);
	ck_assert_uint_eq(te.n, 7);
	ck_assert_uint_eq(tr.dim, 6);
	ck_assert_uint_eq(te.dim, 6);
	tr_dataset_fini(&tr);
	tr_dataset_fini(&te);
}
END_TEST

// A test set with another input width is refused, naming the file.
START_TEST(test_data_load_dim_mismatch)
{
	struct tr_dataset tr, te;
	char              err[256] = "";
	write_set("train-images-idx3-ubyte", "train-labels-idx1-ubyte", 20, 2,
	    3, 0);
	write_set("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 7, 2, 4,
	    0);
	PT_FAIL(tr_data_load(dir, 10, &tr, &te, err, sizeof(err)), FB_EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "t10k-images-idx3-ubyte"));
}
END_TEST

// expect_fail loads img/lbl and checks the code and that the message
// names the file and contains `what`.
static void
expect_fail(const char *img, const char *lbl, int code, const char *file,
    const char *what)
{
	struct tr_dataset ds;
	char              err[512] = "";
	PT_FAIL(load(img, lbl, &ds, err, sizeof(err)), code);
	ck_assert_msg(strstr(err, file) != NULL, "'%s' lacks '%s'", err, file);
	ck_assert_msg(strstr(err, what) != NULL, "'%s' lacks '%s'", err, what);
	ck_assert_ptr_null(ds.x);
	ck_assert_ptr_null(ds.y);
}

// A small gzipped file whose header claims the most samples and pixels
// allowed (2^26 x 2^20 pixels: 256 TiB of floats) is refused as truncated
// after reading what it holds: the buffer grows with the data read, not
// with the header's claim (it used to be allocated from the header).
START_TEST(test_idx_header_claims_more_than_file)
{
	uint8_t buf[4096];
	size_t  n = make_images(buf, 0x803, 4, 16, 16);
	put_be32(buf + 4, 1u << 26); // samples
	put_be32(buf + 8, 1024);     // rows
	put_be32(buf + 12, 1024);    // cols: 2^46 pixels claimed
	write_file("bomb.gz", buf, n, 1);
	size_t used0 = fb_used_memory();
	expect_fail("bomb.gz", "lbl", FB_EPROTO, "bomb.gz", "truncated");
	ck_assert_uint_le(fb_used_memory(), used0);
}
END_TEST

// Wrong magic numbers in either file are named as such.
START_TEST(test_idx_bad_magic)
{
	uint8_t buf[4096];
	write_set("img", "lbl", 4, 2, 2, 0);
	write_file("img2", buf, make_images(buf, 0x801, 4, 2, 2), 0);
	expect_fail("img2", "lbl", FB_EPROTO, "img2", "bad magic");
	write_file("lbl2", buf, make_labels(buf, 0x803, 4, 10), 1);
	expect_fail("img", "lbl2", FB_EPROTO, "lbl2", "bad magic");
}
END_TEST

// Truncated headers, pixel data, labels and gzip streams are refused.
START_TEST(test_idx_truncated)
{
	uint8_t buf[4096];
	size_t  n;
	write_set("img", "lbl", 4, 2, 2, 0);
	n = make_images(buf, 0x803, 4, 2, 2);
	write_file("short", buf, n - 1, 0);
	expect_fail("short", "lbl", FB_EPROTO, "short", "truncated");
	write_file("hdr", buf, 10, 0);
	expect_fail("hdr", "lbl", FB_EPROTO, "hdr", "truncated");
	write_file("empty", buf, 0, 0);
	expect_fail("empty", "lbl", FB_EPROTO, "empty", "truncated");
	n = make_labels(buf, 0x801, 4, 10);
	write_file("lshort.gz", buf, n - 2, 1);
	expect_fail("img", "lshort.gz", FB_EPROTO, "lshort.gz", "truncated");

	// A gzip stream cut in the middle.
	char  path[256];
	FILE *f;
	write_set("big.gz", "biglbl", 50, 8, 8, 1);
	snprintf(path, sizeof(path), "%s/big.gz", dir);
	f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	ck_assert_uint_gt(n, 40);
	write_file("cut.gz", buf, n / 2, 0);
	expect_fail("cut.gz", "biglbl", FB_EPROTO, "cut.gz", "");
}
END_TEST

// Counts and dimensions that do not add up are refused: too many images
// declared (no huge allocation), zero sizes, trailing bytes, label counts
// that differ from the image count.
START_TEST(test_idx_bad_dims)
{
	uint8_t buf[4096];
	size_t  n;
	write_set("img", "lbl", 4, 2, 2, 0);
	make_images(buf, 0x803, 4, 2, 2);
	put_be32(buf + 4, 0x7fffffff);
	write_file("huge", buf, 32, 0);
	expect_fail("huge", "lbl", FB_EPROTO, "huge", "dimensions");
	put_be32(buf + 4, 4);
	put_be32(buf + 8, 0);
	write_file("zero", buf, 32, 0);
	expect_fail("zero", "lbl", FB_EPROTO, "zero", "dimensions");
	n = make_images(buf, 0x803, 4, 2, 2);
	write_file("trail", buf, n + 3, 0);
	expect_fail("trail", "lbl", FB_EPROTO, "trail", "trailing");
	write_file("lbl5", buf, make_labels(buf, 0x801, 5, 10), 0);
	expect_fail("img", "lbl5", FB_EPROTO, "lbl5", "5 labels");
}
END_TEST

// A label >= the number of classes is refused with its position.
START_TEST(test_idx_label_out_of_range)
{
	uint8_t buf[4096];
	size_t  n;
	write_set("img", "lbl", 4, 2, 2, 0);
	n          = make_labels(buf, 0x801, 4, 10);
	buf[8 + 2] = 10;
	write_file("badlbl.gz", buf, n, 1);
	expect_fail("img", "badlbl.gz", FB_EPROTO, "badlbl.gz",
	    "out of range");
}
END_TEST

// Missing files and bogus arguments fail cleanly.
START_TEST(test_idx_load_bogus)
{
	struct tr_dataset ds, te;
	char              err[512] = "";
	write_set("img", "lbl", 4, 2, 2, 0);
	expect_fail("nope", "lbl", FB_ENOTFOUND, "nope", "cannot open");
	PT_FAIL(tr_dataset_load_idx(&ds, "a", "b", 1, err, sizeof(err)),
	    FB_EINVAL);
	PT_FAIL(tr_dataset_load_idx(NULL, "a", "b", 10, NULL, 0), FB_EINVAL);
	PT_FAIL(tr_data_load(dir, 10, &ds, &te, err, sizeof(err)),
	    FB_ENOTFOUND);
	ck_assert_ptr_nonnull(strstr(err, "train-images-idx3-ubyte"));
}
END_TEST

// The real Fashion-MNIST (when installed) has the expected shape.
START_TEST(test_data_load_fashion)
{
	const char       *d = getenv("TR_TEST_FASHION_DIR");
	struct tr_dataset tr, te;
	char              err[512] = "";
	if (d == NULL || access(d, R_OK) != 0) {
		return; // not installed here: nothing to check
	}
	PT_OK(tr_data_load(d, 10, &tr, &te, err, sizeof(err)));
	ck_assert_uint_eq(tr.n, 60000);
	ck_assert_uint_eq(te.n, 10000);
	ck_assert_uint_eq(tr.dim, 784);
	for (size_t i = 0; i < 784 * 100; i++) {
		ck_assert(tr.x[i] >= 0.0f && tr.x[i] <= 1.0f);
	}
	tr_dataset_fini(&tr);
	tr_dataset_fini(&te);
}
END_TEST

// The synthetic generator is deterministic and labels are in range.
START_TEST(test_data_synthetic)
{
	struct tr_dataset a, b;
	PT_OK(tr_dataset_synthetic(&a, 100, 5, 3, 9));
	PT_OK(tr_dataset_synthetic(&b, 100, 5, 3, 9));
	ck_assert_mem_eq(a.x, b.x, 500 * sizeof(float));
	ck_assert_mem_eq(a.y, b.y, 100 * sizeof(int32_t));
	for (int i = 0; i < 100; i++) {
		ck_assert(a.y[i] >= 0 && a.y[i] < 3);
	}
	tr_dataset_fini(&a);
	tr_dataset_fini(&b);
	PT_FAIL(tr_dataset_synthetic(&a, 0, 5, 3, 9), FB_EINVAL);
}
END_TEST

Suite *
suite_data(void)
{
	Suite *s  = suite_create("data");
	TCase *tc = tcase_create("idx");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_idx_load_plain);
	tcase_add_test(tc, test_idx_load_gzip);
	tcase_add_test(tc, test_data_load_dir);
	tcase_add_test(tc, test_data_load_dim_mismatch);
	tcase_add_test(tc, test_idx_bad_magic);
	tcase_add_test(tc, test_idx_truncated);
	tcase_add_test(tc, test_idx_header_claims_more_than_file);
	tcase_add_test(tc, test_idx_bad_dims);
	tcase_add_test(tc, test_idx_label_out_of_range);
	tcase_add_test(tc, test_idx_load_bogus);
	suite_add_tcase(s, tc);
	tc = tcase_create("sets");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_data_load_fashion);
	tcase_add_test(tc, test_data_synthetic);
	suite_add_tcase(s, tc);
	return s;
}
