// test_ctrgen.c — the synthetic CTR generator behind ferry-ctrgen: same
// seed, same bytes; another seed or split, other samples; vocabularies and
// their Zipf skew; the AUC ceiling written to meta.json equals the true
// probabilities' AUC recomputed here, lies in the intended band and beats
// a trivial model.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctr_tests.h"
#include "fb/fb.h"
#include "tr/ctr.h"

#define SCALE 0.001 // vocabularies of 2 to 10^4 ids: CI-sized

static void
gen_dir(char *dir, size_t n, uint64_t seed, uint64_t rows, uint64_t test,
    struct tr_ctrgen_result *r)
{
	struct tr_ctrgen_opts o = { .rows = rows,
		.test_rows                = test,
		.seed                     = seed,
		.formats                  = TR_CTRGEN_TSV | TR_CTRGEN_BIN,
		.vocab_scale              = SCALE };
	char                  err[256];
	snprintf(dir, n, "/tmp/test_ctrgen.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	o.out = dir;
	ck_assert_msg(tr_ctrgen_run(&o, r, err, sizeof err) == 0, "%s", err);
}

static void
drop_dir(const char *dir)
{
	static const char *names[] = { "train.tsv", "test.tsv", "train.bin",
		"test.bin", "meta.json" };
	char               p[128];
	size_t             i;
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

static char *
slurp(const char *dir, const char *name, size_t *len)
{
	char  p[128];
	FILE *f;
	char *b;
	long  n;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	f = fopen(p, "rb");
	ck_assert_msg(f != NULL, "%s", p);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t) n + 1);
	ck_assert_uint_eq(fread(b, 1, (size_t) n, f), (size_t) n);
	b[n] = '\0';
	fclose(f);
	*len = (size_t) n;
	return b;
}

START_TEST(test_deterministic)
{
	static const char *files[] = { "train.tsv", "test.tsv", "train.bin",
		"test.bin", "meta.json" };
	char               a[64], b[64], c[64];
	struct tr_ctrgen_result ra, rb, rc;
	size_t                  i;
	gen_dir(a, sizeof a, 5, 400, 100, &ra);
	gen_dir(b, sizeof b, 5, 400, 100, &rb);
	gen_dir(c, sizeof c, 6, 400, 100, &rc);
	for (i = 0; i < sizeof files / sizeof files[0]; i++) {
		size_t la, lb, lc;
		char  *xa = slurp(a, files[i], &la);
		char  *xb = slurp(b, files[i], &lb);
		char  *xc = slurp(c, files[i], &lc);
		ck_assert_uint_eq(la, lb);
		ck_assert_msg(memcmp(xa, xb, la) == 0, "%s differs", files[i]);
		ck_assert_msg(la != lc || memcmp(xa, xc, la) != 0,
		    "%s: seeds 5 and 6 wrote the same bytes", files[i]);
		free(xa);
		free(xb);
		free(xc);
	}
	ck_assert(ra.auc_ceiling == rb.auc_ceiling);
	drop_dir(a);
	drop_dir(b);
	drop_dir(c);
}
END_TEST

// same_sample compares two samples' written values.
static int
same_sample(const struct tr_ctrgen_sample *x, const struct tr_ctrgen_sample *y)
{
	char   lx[TR_CTRGEN_LINE_MAX], ly[TR_CTRGEN_LINE_MAX];
	size_t nx = tr_ctrgen_format(x, lx);
	size_t ny = tr_ctrgen_format(y, ly);
	return nx == ny && memcmp(lx, ly, nx) == 0;
}

START_TEST(test_pure_function)
{
	struct tr_ctrgen        g;
	struct tr_ctrgen_sample s1, s2;
	char                    err[256];
	uint64_t                i;
	int                     same_split = 0, same_seed = 0;
	ck_assert_int_eq(tr_ctrgen_init(&g, 3, SCALE, err, sizeof err), 0);
	// Sample i alone, in any order, is the same sample.
	tr_ctrgen_sample(&g, TR_CTRGEN_TRAIN, 12345, &s1);
	for (i = 0; i < 50; i++) {
		tr_ctrgen_sample(&g, TR_CTRGEN_TRAIN, i, &s2);
	}
	tr_ctrgen_sample(&g, TR_CTRGEN_TRAIN, 12345, &s2);
	ck_assert(same_sample(&s1, &s2));
	ck_assert(s1.prob == s2.prob);
	// The test split is another stream; another seed other samples.
	for (i = 0; i < 100; i++) {
		struct tr_ctrgen h;
		tr_ctrgen_sample(&g, TR_CTRGEN_TRAIN, i, &s1);
		tr_ctrgen_sample(&g, TR_CTRGEN_TEST, i, &s2);
		same_split += same_sample(&s1, &s2);
		ck_assert_int_eq(tr_ctrgen_init(&h, 4, SCALE, err, sizeof err),
		    0);
		tr_ctrgen_sample(&h, TR_CTRGEN_TRAIN, i, &s2);
		same_seed += same_sample(&s1, &s2);
	}
	ck_assert_int_eq(same_split, 0);
	ck_assert_int_eq(same_seed, 0);
}
END_TEST

START_TEST(test_vocab)
{
	struct tr_ctrgen g;
	char             err[256];
	uint64_t         total = 0, lo = UINT64_MAX, hi = 0;
	int              f;
	ck_assert_int_eq(tr_ctrgen_init(&g, 1, 1.0, err, sizeof err), 0);
	for (f = 0; f < TR_CTR_CAT; f++) {
		total += g.vocab[f];
		lo = g.vocab[f] < lo ? g.vocab[f] : lo;
		hi = g.vocab[f] > hi ? g.vocab[f] : hi;
	}
	ck_assert_uint_ge(total, 30000000);
	ck_assert_uint_eq(lo, 10);
	ck_assert_uint_eq(hi, 10000000);
	ck_assert_int_eq(tr_ctrgen_init(&g, 1, 1e-9, err, sizeof err), 0);
	for (f = 0; f < TR_CTR_CAT; f++) {
		ck_assert_uint_eq(g.vocab[f], 2);
	}
	ck_assert_int_eq(tr_ctrgen_init(&g, 1, 0.0, err, sizeof err),
	    FB_EINVAL);
	ck_assert_int_eq(tr_ctrgen_init(&g, 1, 1e3, err, sizeof err),
	    FB_EINVAL);
}
END_TEST

START_TEST(test_zipf_and_missing)
{
	// Field C3 (10^7 ids at scale 1): ids stay in range, id 0 is the
	// most frequent, a power law puts most draws in a small head.
	enum { N = 20000 };
	struct tr_ctrgen        g;
	struct tr_ctrgen_sample s;
	char                    err[256];
	uint64_t                i, zero = 0, head = 0, miss = 0, dmiss = 0;
	uint64_t                seven = 0;
	ck_assert_int_eq(tr_ctrgen_init(&g, 1, 1.0, err, sizeof err), 0);
	for (i = 0; i < N; i++) {
		tr_ctrgen_sample(&g, TR_CTRGEN_TRAIN, i, &s);
		ck_assert_uint_lt(s.id[2], g.vocab[2]);
		ck_assert_uint_lt(s.id[8], g.vocab[8]);
		zero += s.id[2] == 0;
		seven += s.id[2] == 7;
		head += s.id[2] < 1000;
		miss += s.cat_missing >> 22 & 1;
		dmiss += s.dense_missing >> 11 & 1;
	}
	ck_assert_uint_gt(zero, seven * 3);
	ck_assert_uint_gt(head, N / 4);
	ck_assert_uint_lt(head, N - N / 10); // and a long tail
	// C23 is missing at 0.76, I12 at 0.77.
	ck_assert(fabs((double) miss / N - 0.76) < 0.02);
	ck_assert(fabs((double) dmiss / N - 0.77) < 0.02);
}
END_TEST

START_TEST(test_ceiling)
{
	// The ceiling is tr_auc of the true probabilities on the test split,
	// recomputed here from the samples alone, and written to meta.json.
	enum { TEST = 20000 };
	static float            p[TEST], y[TEST], dense[TEST];
	struct tr_ctrgen        g;
	struct tr_ctrgen_sample s;
	struct tr_ctrgen_result r;
	char                    dir[64], err[256], want[64];
	double                  auc, trivial, pos = 0;
	size_t                  i, len;
	char                   *meta;
	gen_dir(dir, sizeof dir, 11, 1000, TEST, &r);
	ck_assert_int_eq(tr_ctrgen_init(&g, 11, SCALE, err, sizeof err), 0);
	for (i = 0; i < TEST; i++) {
		int j;
		tr_ctrgen_sample(&g, TR_CTRGEN_TEST, i, &s);
		p[i]     = (float) s.prob;
		y[i]     = (float) s.label;
		dense[i] = 0;
		for (j = 0; j < TR_CTR_DENSE; j++) { // a trivial model
			dense[i] += tr_ctr_dense_value(s.dense[j],
			    (int) (s.dense_missing >> j & 1));
		}
		pos += s.label;
	}
	ck_assert_int_eq(tr_auc(p, y, TEST, &auc), 0);
	printf("ctrgen: auc_ceiling=%.4f logloss_ceiling=%.4f "
	       "positive_rate=%.4f (test %.4f)\n",
	    r.auc_ceiling, r.logloss_ceiling, r.positive_rate, pos / TEST);
	ck_assert(auc == r.auc_ceiling);
	ck_assert_msg(r.auc_ceiling > 0.75 && r.auc_ceiling < 0.85, "%f",
	    r.auc_ceiling);
	ck_assert(fabs(r.logloss_ceiling - tr_logloss(p, y, TEST)) < 1e-12);
	ck_assert(r.positive_rate > 0.15 && r.positive_rate < 0.35);
	ck_assert_int_eq(tr_auc(dense, y, TEST, &trivial), 0);
	ck_assert_msg(r.auc_ceiling > fmax(trivial, 1 - trivial) + 0.05,
	    "ceiling %f, trivial %f", r.auc_ceiling, trivial);
	meta = slurp(dir, "meta.json", &len);
	snprintf(want, sizeof want, "\"auc_ceiling\":%.6f,", r.auc_ceiling);
	ck_assert_msg(strstr(meta, want) != NULL, "%s", meta);
	ck_assert_msg(strstr(meta,
	                  "{\"seed\":11,\"rows\":1000,"
	                  "\"test_rows\":20000,") == meta,
	    "%s", meta);
	ck_assert(strstr(meta, "\"total_vocab\":") != NULL);
	free(meta);
	drop_dir(dir);
}
END_TEST

START_TEST(test_run_errors)
{
	struct tr_ctrgen_opts   o = { .out = "/nonexistent/dir/x",
		  .rows                    = 10,
		  .test_rows               = 10,
		  .formats                 = TR_CTRGEN_TSV,
		  .vocab_scale             = 1 };
	struct tr_ctrgen_result r;
	char                    err[256] = "";
	ck_assert_int_ne(tr_ctrgen_run(&o, &r, err, sizeof err), 0);
	ck_assert_msg(strstr(err, "/nonexistent/dir/x") != NULL, "%s", err);
	o.rows = 0;
	ck_assert_int_eq(tr_ctrgen_run(&o, &r, err, sizeof err), FB_EINVAL);
}
END_TEST

Suite *
suite_ctrgen(void)
{
	Suite *s  = suite_create("ctrgen");
	TCase *tc = tcase_create("generator");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_pure_function);
	tcase_add_test(tc, test_vocab);
	tcase_add_test(tc, test_zipf_and_missing);
	tcase_add_test(tc, test_ceiling);
	tcase_add_test(tc, test_run_errors);
	suite_add_tcase(s, tc);
	return s;
}
