// test_ctr_data.c — the CTR data layer (tr/ctr.h): the key and dense
// rules, one line's parser and its errors, tr_ctr_load over text, gzipped
// text and binary files of the same generated samples, refusal of bad
// files, and the exact AUC against a brute-force count.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "ctr_tests.h"
#include "fb/fb.h"
#include "tr/ctr.h"

START_TEST(test_key_rule)
{
	ck_assert_uint_eq(tr_ctr_key("", 0), TR_CTR_KEY_MISSING);
	ck_assert_uint_eq(tr_ctr_key("0", 1), 0);
	ck_assert_uint_eq(tr_ctr_key("05db9164", 8), 0x05db9164u);
	ck_assert_uint_eq(tr_ctr_key("ABCdef", 6), 0xabcdef);
	ck_assert_uint_eq(tr_ctr_key("123456789abcdef0", 16),
	    0x123456789abcdef0ULL);
	ck_assert_uint_eq(tr_ctr_key("a_", 1), 0xa);
	// FNV-1a-64 reference vector: "foobar" -> 0x85944171f73967e8 (top
	// bit already set); "g" -> the first step of the hash, top bit set.
	ck_assert_uint_eq(tr_ctr_key("foobar", 6), 0x85944171f73967e8ULL);
	ck_assert_uint_eq(tr_ctr_key("g", 1),
	    ((0xcbf29ce484222325ULL ^ 'g') * 0x100000001b3ULL) | 1ULL << 63);
	// Not hex, or 17 digits: hashed, top bit set.
	ck_assert_uint_ne(tr_ctr_key("xyz", 3) >> 63, 0);
	ck_assert_uint_ne(tr_ctr_key("123456789abcdef01", 17) >> 63, 0);
	ck_assert_uint_ne(tr_ctr_key("12 4", 4) >> 63, 0);
	ck_assert_uint_ne(tr_ctr_key("xyz", 3), tr_ctr_key("xzy", 3));
}
END_TEST

START_TEST(test_dense_rule)
{
	ck_assert(tr_ctr_dense_value(5, 0) == (float) log1p(5.0));
	ck_assert(
	    tr_ctr_dense_value(123456789, 0) == (float) log1p(123456789.0));
	ck_assert(tr_ctr_dense_value(0, 0) == 0.0f);
	ck_assert(tr_ctr_dense_value(-3, 0) == 0.0f);
	ck_assert(tr_ctr_dense_value(7, 1) == 0.0f);
}
END_TEST

// line builds a Criteo line: label, then 13 ints, then 26 cats, with col
// (0-based) replaced by repl when repl is not NULL.
static size_t
line(char *buf, size_t n, int col, const char *repl)
{
	size_t k = 0;
	int    c;
	for (c = 0; c < 40; c++) {
		char v[32];
		if (c == 0) {
			snprintf(v, sizeof v, "1");
		} else if (c <= 13) {
			snprintf(v, sizeof v, "%s", c == 2 ? "" : "-2");
			if (c == 3) {
				snprintf(v, sizeof v, "%d", 100 + c);
			}
		} else {
			snprintf(v, sizeof v, "%s",
			    c == 20 ? "" : (c == 21 ? "zz" : "68fd1e64"));
		}
		k += (size_t) snprintf(buf + k, n - k, "%s%s", c ? "\t" : "",
		    c == col && repl ? repl : v);
	}
	return k;
}

START_TEST(test_parse_good)
{
	char     buf[1024];
	float    y, x[TR_CTR_DENSE];
	uint64_t k[TR_CTR_CAT];
	char     err[256];
	size_t   n = line(buf, sizeof buf, -1, NULL);
	ck_assert_int_eq(tr_ctr_parse_line(buf, n, &y, x, k, err, sizeof err),
	    0);
	ck_assert(y == 1.0f);
	ck_assert(x[0] == 0.0f); // -2
	ck_assert(x[1] == 0.0f); // missing
	ck_assert(x[2] == (float) log1p(103.0));
	ck_assert_uint_eq(k[0], 0x68fd1e64);
	ck_assert_uint_eq(k[6], TR_CTR_KEY_MISSING);
	ck_assert_uint_eq(k[7], tr_ctr_key("zz", 2));
	// "\r\n" endings: the "\r" is not part of the last column.
	buf[n] = '\r';
	ck_assert_int_eq(
	    tr_ctr_parse_line(buf, n + 1, &y, x, k, err, sizeof err), 0);
	ck_assert_uint_eq(k[25], 0x68fd1e64);
}
END_TEST

// bad_line checks that a line with column col set to v fails naming what.
static void
bad_line(int col, const char *v, const char *what)
{
	char     buf[1024];
	float    y, x[TR_CTR_DENSE];
	uint64_t k[TR_CTR_CAT];
	char     err[256] = "";
	size_t   n        = line(buf, sizeof buf, col, v);
	ck_assert_int_eq(tr_ctr_parse_line(buf, n, &y, x, k, err, sizeof err),
	    FB_EPROTO);
	ck_assert_msg(strstr(err, what) != NULL, "'%s' lacks '%s'", err, what);
}

START_TEST(test_parse_bad)
{
	bad_line(0, "2", "column 1 (label)");
	bad_line(0, "", "column 1 (label)");
	bad_line(0, "01", "column 1 (label)");
	bad_line(3, "x1", "column 4 (I3): not an integer");
	bad_line(3, "1.5", "column 4 (I3): not an integer");
	bad_line(3, "-", "column 4 (I3): not an integer");
	bad_line(13, "99999999999999999999", "column 14 (I13): integer out");
	bad_line(5, "9223372036854775808", "column 6 (I5): integer out");
	bad_line(39, "a\tb", "column 41: too many columns");
	// Too few columns: the first one missing is named.
	{
		char     buf[1024];
		float    y, x[TR_CTR_DENSE];
		uint64_t k[TR_CTR_CAT];
		char     err[256];
		size_t   n    = line(buf, sizeof buf, -1, NULL);
		char    *cut  = buf;
		int      tabs = 0;
		while (tabs < 38) { // keep 38 columns
			tabs += *cut++ == '\t';
		}
		n = (size_t) (cut - 1 - buf);
		ck_assert_int_eq(
		    tr_ctr_parse_line(buf, n, &y, x, k, err, sizeof err),
		    FB_EPROTO);
		ck_assert_msg(strstr(err, "column 39 (C25): missing") != NULL,
		    "%s", err);
		ck_assert_int_eq(
		    tr_ctr_parse_line("", 0, &y, x, k, err, sizeof err),
		    FB_EPROTO);
		ck_assert_msg(strstr(err, "column 2 (I1)") != NULL, "%s", err);
	}
}
END_TEST

// A small generated set in a fresh directory, shared by the load tests.
static char set_dir[64];

static void
make_set(void)
{
	struct tr_ctrgen_opts   o = { .rows = 300,
		  .test_rows                = 50,
		  .seed                     = 7,
		  .formats                  = TR_CTRGEN_TSV | TR_CTRGEN_BIN,
		  .vocab_scale              = 0.001 };
	struct tr_ctrgen_result r;
	char                    err[256];
	snprintf(set_dir, sizeof set_dir, "/tmp/test_ctr_data.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(set_dir));
	o.out = set_dir;
	ck_assert_msg(tr_ctrgen_run(&o, &r, err, sizeof err) == 0, "%s", err);
}

static void
drop_set(void)
{
	static const char *names[] = { "train.tsv", "test.tsv", "train.bin",
		"test.bin", "meta.json", "x.gz", "x.bin", "x.tsv" };
	char               p[128];
	size_t             i;
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", set_dir, names[i]);
		unlink(p);
	}
	rmdir(set_dir);
}

static char *
path_of(const char *name)
{
	static char p[128];
	snprintf(p, sizeof p, "%s/%s", set_dir, name);
	return p;
}

static uint8_t *
read_all(const char *path, size_t *len)
{
	FILE    *f = fopen(path, "rb");
	uint8_t *b;
	long     n;
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t) n + 1);
	ck_assert_uint_eq(fread(b, 1, (size_t) n, f), (size_t) n);
	fclose(f);
	*len = (size_t) n;
	return b;
}

static void
write_all(const char *path, const void *b, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(b, 1, len, f), len);
	fclose(f);
}

// same_data asserts that a and b hold the same samples.
static void
same_data(const struct tr_ctr_data *a, const struct tr_ctr_data *b)
{
	ck_assert_uint_eq(a->n, b->n);
	ck_assert(memcmp(a->label, b->label, a->n * sizeof(float)) == 0);
	ck_assert(memcmp(a->dense, b->dense,
	              a->n * TR_CTR_DENSE * sizeof(float)) == 0);
	ck_assert(memcmp(a->keys, b->keys,
	              a->n * TR_CTR_CAT * sizeof(uint64_t)) == 0);
}

START_TEST(test_load_text_bin_same)
{
	struct tr_ctr_data t, b, g;
	struct tr_ctrgen   gen;
	char               err[256];
	size_t             i, len;
	uint8_t           *raw;
	gzFile             z;
	ck_assert_msg(
	    tr_ctr_load(path_of("train.tsv"), 0, &t, err, sizeof err) == 0,
	    "%s", err);
	ck_assert_msg(
	    tr_ctr_load(path_of("train.bin"), 0, &b, err, sizeof err) == 0,
	    "%s", err);
	ck_assert_uint_eq(t.n, 300);
	same_data(&t, &b);
	// Each sample is what the generator makes of (seed, split, i).
	ck_assert_int_eq(tr_ctrgen_init(&gen, 7, 0.001, err, sizeof err), 0);
	for (i = 0; i < t.n; i++) {
		struct tr_ctrgen_sample s;
		float                   y, x[TR_CTR_DENSE];
		uint64_t                k[TR_CTR_CAT];
		int                     f;
		tr_ctrgen_sample(&gen, TR_CTRGEN_TRAIN, i, &s);
		tr_ctrgen_record(&s, &y, x, k);
		ck_assert(y == t.label[i]);
		ck_assert(
		    memcmp(x, t.dense + i * TR_CTR_DENSE, sizeof x) == 0);
		for (f = 0; f < TR_CTR_CAT; f++) {
			ck_assert_uint_eq(k[f], t.keys[(size_t) f * t.n + i]);
		}
	}
	// The same text gzipped.
	raw = read_all(path_of("train.tsv"), &len);
	z   = gzopen(path_of("x.gz"), "wb");
	ck_assert_ptr_nonnull(z);
	ck_assert_int_eq(gzwrite(z, raw, (unsigned) len), (int) len);
	gzclose(z);
	free(raw);
	ck_assert_int_eq(tr_ctr_load(path_of("x.gz"), 0, &g, err, sizeof err),
	    0);
	same_data(&t, &g);
	tr_ctr_fini(&g);
	// tr_ctr_bin_write of the loaded text gives the generator's file.
	ck_assert_int_eq(
	    tr_ctr_bin_write(path_of("x.bin"), &t, err, sizeof err), 0);
	{
		size_t   l1, l2;
		uint8_t *a1 = read_all(path_of("x.bin"), &l1);
		uint8_t *a2 = read_all(path_of("train.bin"), &l2);
		ck_assert_uint_eq(l1, l2);
		ck_assert(memcmp(a1, a2, l1) == 0);
		free(a1);
		free(a2);
	}
	// max_rows: the first rows, keys laid out for n = 7.
	ck_assert_int_eq(
	    tr_ctr_load(path_of("train.bin"), 7, &g, err, sizeof err), 0);
	ck_assert_uint_eq(g.n, 7);
	ck_assert_uint_eq(g.keys[25 * 7 + 6], t.keys[25 * t.n + 6]);
	tr_ctr_fini(&g);
	ck_assert_int_eq(
	    tr_ctr_load(path_of("train.tsv"), 7, &g, err, sizeof err), 0);
	ck_assert_uint_eq(g.n, 7);
	ck_assert_uint_eq(g.keys[25 * 7 + 6], t.keys[25 * t.n + 6]);
	tr_ctr_fini(&g);
	tr_ctr_fini(&t);
	tr_ctr_fini(&b);
	tr_ctr_fini(&b); // safe on a zeroed d
}
END_TEST

// refused writes len bytes of b as x.bin and expects FB_EPROTO naming why.
static void
refused(const uint8_t *b, size_t len, const char *why)
{
	struct tr_ctr_data d;
	char               err[512] = "";
	write_all(path_of("x.bin"), b, len);
	ck_assert_int_eq(tr_ctr_load(path_of("x.bin"), 0, &d, err, sizeof err),
	    FB_EPROTO);
	ck_assert_msg(strstr(err, why) != NULL, "'%s' lacks '%s'", err, why);
	ck_assert_msg(strstr(err, "x.bin") != NULL, "%s", err);
	ck_assert_ptr_null(d.keys);
	ck_assert_uint_eq(d.n, 0);
}

START_TEST(test_load_bad_binary)
{
	size_t   len;
	uint8_t *b = read_all(path_of("train.bin"), &len);
	uint8_t *c = malloc(len + 1);
	refused(b, len - 10, "header says 300 samples");
	refused(b, 20, "truncated header");
	memcpy(c, b, len);
	c[len] = 0;
	refused(c, len + 1, "header says 300 samples");
	c[24]++; // n = 301
	refused(c, len, "header says 301 samples");
	c[24]--;
	c[8] = 2; // version
	refused(c, len, "version 2");
	c[8]  = 1;
	c[12] = 14; // n_dense
	refused(c, len, "14 dense");
	c[12]                                            = 13;
	c[TR_CTR_BIN_HEADER + 5 * TR_CTR_BIN_RECORD + 3] = 0x40; // label 2.0
	refused(c, len, "record 6: label");
	free(c);
	free(b);
}
END_TEST

START_TEST(test_load_bad_binary_gz)
{
	// Gzipped, the size check cannot use the file's size: the stream
	// itself must end early or late.
	size_t             len;
	uint8_t           *b = read_all(path_of("train.bin"), &len);
	struct tr_ctr_data d;
	char               err[512] = "";
	gzFile             z        = gzopen(path_of("x.gz"), "wb");
	ck_assert_int_eq(gzwrite(z, b, (unsigned) (len - TR_CTR_BIN_RECORD)),
	    (int) (len - TR_CTR_BIN_RECORD));
	gzclose(z);
	ck_assert_int_eq(tr_ctr_load(path_of("x.gz"), 0, &d, err, sizeof err),
	    FB_EPROTO);
	ck_assert_msg(strstr(err, "truncated: record 300 of the 300") != NULL,
	    "%s", err);
	b[24] = 2; // n = 2 of 300 records present
	b[25] = 0;
	z     = gzopen(path_of("x.gz"), "wb");
	gzwrite(z, b, (unsigned) len);
	gzclose(z);
	ck_assert_int_eq(tr_ctr_load(path_of("x.gz"), 0, &d, err, sizeof err),
	    FB_EPROTO);
	ck_assert_msg(strstr(err, "bytes after the 2 samples") != NULL, "%s",
	    err);
	free(b);
}
END_TEST

START_TEST(test_load_bad_text)
{
	struct tr_ctr_data d;
	char               err[512] = "";
	char               buf[4096];
	size_t             n = line(buf, sizeof buf, -1, NULL);
	buf[n++]             = '\n';
	n += line(buf + n, sizeof buf - n, -1, NULL);
	buf[n++]   = '\n';
	size_t two = n;
	n += line(buf + n, sizeof buf - n, 3, "1e5");
	buf[n++] = '\n';
	write_all(path_of("x.tsv"), buf, n);
	ck_assert_int_eq(tr_ctr_load(path_of("x.tsv"), 0, &d, err, sizeof err),
	    FB_EPROTO);
	ck_assert_msg(strstr(err,
	                  "x.tsv: line 3: column 4 (I3): not an "
	                  "integer") != NULL,
	    "%s", err);
	ck_assert_ptr_null(d.label);
	// Two good lines, the last without "\n", load.
	write_all(path_of("x.tsv"), buf, two - 1);
	ck_assert_int_eq(tr_ctr_load(path_of("x.tsv"), 0, &d, err, sizeof err),
	    0);
	ck_assert_uint_eq(d.n, 2);
	ck_assert_uint_eq(d.keys[2 * 25 + 1], 0x68fd1e64);
	tr_ctr_fini(&d);
	write_all(path_of("x.tsv"), "", 0);
	ck_assert_int_eq(tr_ctr_load(path_of("x.tsv"), 0, &d, err, sizeof err),
	    FB_EINVAL);
	ck_assert_int_eq(tr_ctr_load(path_of("nope"), 0, &d, err, sizeof err),
	    FB_ENOTFOUND);
}
END_TEST

START_TEST(test_auc_small)
{
	const float s[4] = { 0.1f, 0.4f, 0.35f, 0.8f };
	const float y[4] = { 0, 0, 1, 1 };
	const float t[4] = { -0.0f, 0.5f, 0.0f, 2.0f }; // -0 ties +0
	double      auc  = 0;
	ck_assert_int_eq(tr_auc(s, y, 4, &auc), 0);
	ck_assert(fabs(auc - 0.75) < 1e-12);
	ck_assert_int_eq(tr_auc(t, y, 4, &auc), 0);
	// positive +0: a tie with -0 (one half), below 0.5; positive 2:
	// above both. (0.5 + 0 + 1 + 1) / 4.
	ck_assert(fabs(auc - 0.625) < 1e-12);
	ck_assert_int_eq(tr_auc(s, y, 0, &auc), FB_EINVAL);
	ck_assert_int_eq(tr_auc(s, y, 2, &auc), FB_EINVAL); // one class
}
END_TEST

START_TEST(test_auc_brute_force)
{
	enum { N = 600 };
	static float  s[N], y[N];
	struct tr_rng r;
	double        auc, num = 0, pos = 0, neg = 0;
	int           i, j;
	tr_rng_seed(&r, 42);
	for (i = 0; i < N; i++) {
		// Few distinct scores (many ties), some negative.
		s[i] = (float) ((int) tr_rng_below(&r, 40) - 10) / 8.0f;
		y[i] = (float) (tr_rng_uniform(&r) < 0.3f + 0.01f * s[i]);
	}
	for (i = 0; i < N; i++) {
		pos += y[i];
		for (j = 0; j < N; j++) {
			if (y[i] == 1.0f && y[j] == 0.0f) {
				num += s[i] > s[j] ? 1.0
				    : s[i] == s[j] ? 0.5
				                   : 0;
			}
		}
	}
	neg = N - pos;
	ck_assert_int_eq(tr_auc(s, y, N, &auc), 0);
	ck_assert_msg(fabs(auc - num / (pos * neg)) < 1e-12, "%.15f vs %.15f",
	    auc, num / (pos * neg));
	// All scores distinct, large values: the same count.
	for (i = 0; i < N; i++) {
		s[i] = (float) i * 1e6f * (i % 2 ? 1.0f : -1.0f);
	}
	num = 0;
	for (i = 0; i < N; i++) {
		for (j = 0; j < N; j++) {
			if (y[i] == 1.0f && y[j] == 0.0f) {
				num += s[i] > s[j] ? 1.0
				    : s[i] == s[j] ? 0.5
				                   : 0;
			}
		}
	}
	ck_assert_int_eq(tr_auc(s, y, N, &auc), 0);
	ck_assert(fabs(auc - num / (pos * neg)) < 1e-12);
}
END_TEST

START_TEST(test_logloss)
{
	const float p[3] = { 0.5f, 0.0f, 1.0f };
	const float y[3] = { 1, 1, 1 };
	ck_assert(fabs(tr_logloss(p, y, 1) - log(2.0)) < 1e-9);
	// p = 0 for a positive is clamped to 1e-7.
	ck_assert(fabs(tr_logloss(p + 1, y, 1) + log(1e-7)) < 1e-6);
	ck_assert(tr_logloss(p + 2, y, 1) < 1e-6);
	ck_assert(tr_logloss(p, y, 0) == 0.0);
}
END_TEST

Suite *
suite_ctr_data(void)
{
	Suite *s  = suite_create("ctr_data");
	TCase *tc = tcase_create("rules");
	tcase_add_test(tc, test_key_rule);
	tcase_add_test(tc, test_dense_rule);
	tcase_add_test(tc, test_parse_good);
	tcase_add_test(tc, test_parse_bad);
	suite_add_tcase(s, tc);
	tc = tcase_create("load");
	tcase_add_unchecked_fixture(tc, make_set, drop_set);
	tcase_add_test(tc, test_load_text_bin_same);
	tcase_add_test(tc, test_load_bad_binary);
	tcase_add_test(tc, test_load_bad_binary_gz);
	tcase_add_test(tc, test_load_bad_text);
	suite_add_tcase(s, tc);
	tc = tcase_create("quality");
	tcase_add_test(tc, test_auc_small);
	tcase_add_test(tc, test_auc_brute_force);
	tcase_add_test(tc, test_logloss);
	suite_add_tcase(s, tc);
	return s;
}
