// ctrgen_main.c — ferry-ctrgen: writes a synthetic Criteo-format CTR data
// set (train and test splits, text and/or binary, meta.json) from a seed
// and prints its ceiling (tr_ctrgen_run does the work; this file parses
// the flags and prints the summary line scripts read).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fb/fb.h"
#include "tr/ctr.h"

static const char usage[] =
    "usage: ferry-ctrgen --out DIR --rows N [--test-rows M] [--seed S]\n"
    "                    [--format tsv|bin|both] [--vocab-scale F]\n"
    "Writes DIR/train.tsv, DIR/test.tsv (Criteo text), DIR/train.bin,\n"
    "DIR/test.bin (binary, see tr/ctr.h) as --format says (both), and\n"
    "DIR/meta.json. --test-rows defaults to max(N/10, 1000), --seed to 1,\n"
    "--vocab-scale to 1.0 (26 vocabularies of 10 to 10^7 ids, 33.6M in\n"
    "all; smaller scales shrink each one, at least 2). Labels come from a\n"
    "hidden ground-truth model; its AUC on the test split is printed as\n"
    "auc_ceiling. See docs/ctr-data.md.\n";

static int
bad(const char *flag, const char *v, const char *why)
{
	fprintf(stderr, "ferry-ctrgen: %s '%s': %s\n%s", flag, v, why, usage);
	return 2;
}

int
main(int argc, char **argv)
{
	struct tr_ctrgen_opts   o = { .seed = 1,
		  .formats                  = 3,
		  .vocab_scale              = 1 };
	struct tr_ctrgen_result r;
	char                    err[512];
	int64_t                 v;
	int                     have_test = 0;
	int                     i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val;
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage, stdout);
			return 0;
		}
		if (i + 1 >= argc) {
			return bad(a, "", "unknown flag or missing value");
		}
		val = argv[++i];
		if (strcmp(a, "--out") == 0) {
			o.out = val;
		} else if (strcmp(a, "--rows") == 0 ||
		    strcmp(a, "--test-rows") == 0 ||
		    strcmp(a, "--seed") == 0) {
			int64_t lo = strcmp(a, "--seed") == 0 ? 0 : 1;
			if (fb_parse_i64(val, lo, INT64_MAX, &v) != 0) {
				return bad(a, val,
				    lo ? "expected an integer >= 1"
				       : "expected an integer "
				         ">= 0");
			}
			if (a[2] == 'r') {
				o.rows = (uint64_t) v;
			} else if (a[2] == 't') {
				o.test_rows = (uint64_t) v;
				have_test   = 1;
			} else {
				o.seed = (uint64_t) v;
			}
		} else if (strcmp(a, "--format") == 0) {
			if (strcmp(val, "tsv") == 0) {
				o.formats = TR_CTRGEN_TSV;
			} else if (strcmp(val, "bin") == 0) {
				o.formats = TR_CTRGEN_BIN;
			} else if (strcmp(val, "both") == 0) {
				o.formats = TR_CTRGEN_TSV | TR_CTRGEN_BIN;
			} else {
				return bad(a, val,
				    "expected tsv, bin or both");
			}
		} else if (strcmp(a, "--vocab-scale") == 0) {
			if (fb_parse_f64(val, 1e-9, 400.0, &o.vocab_scale) !=
			    0) {
				return bad(a, val,
				    "expected a number in (0, 400]");
			}
		} else {
			return bad(a, val, "unknown flag");
		}
	}
	if (o.out == NULL || o.rows == 0) {
		fprintf(stderr,
		    "ferry-ctrgen: --out and --rows are required\n%s", usage);
		return 2;
	}
	if (!have_test) {
		o.test_rows = o.rows / 10 > 1000 ? o.rows / 10 : 1000;
	}
	if (tr_ctrgen_run(&o, &r, err, sizeof err) != 0) {
		fprintf(stderr, "ferry-ctrgen: %s\n", err);
		return 1;
	}
	printf("ctrgen: rows=%llu test_rows=%llu auc_ceiling=%.4f "
	       "logloss_ceiling=%.4f positive_rate=%.4f out=%s\n",
	    (unsigned long long) o.rows, (unsigned long long) o.test_rows,
	    r.auc_ceiling, r.logloss_ceiling, r.positive_rate, o.out);
	return 0;
}
