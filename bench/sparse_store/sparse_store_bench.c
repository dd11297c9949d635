// sparse_store_bench.c — sparse-store-bench: one sparse table shard (tbl)
// in this process, on one thread. It fills a table with --rows rows, then
// measures lookups/s and updates/s on random batches of distinct keys
// drawn uniformly from the filled ones, and the whole process's resident
// memory after the fill (as a server's would be) over the rows' raw bytes
// (rows and optimizer state). One JSON line on stdout:
//   {"rows":..,"dim":..,"optim":..,"raw_bytes":..,"rss_bytes":..,
//    "rss_over_raw":..,"lookups_per_s_core":..,"updates_per_s_core":..}
//
//   sparse-store-bench [--rows N] [--dim D] [--optim sgd|adagrad|adam|ftrl]
//       [--batch B] [--seconds S] [--smoke]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fb/fb.h>
#include <tbl/tbl.h>

struct opts {
	uint64_t       rows;
	uint32_t       dim;
	enum tbl_optim optim;
	const char    *optim_name;
	uint32_t       batch;
	double         seconds;
};

// key_of: the i-th filled key (a bijection of i: every key distinct).
static uint64_t
key_of(uint64_t i)
{
	return (i + 1) * 0x9e3779b97f4a7c15ULL;
}

static uint64_t
rss_bytes(void)
{
	FILE         *f    = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;
	if (f == NULL)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t) res * (uint64_t) sysconf(_SC_PAGESIZE);
}

static uint64_t rng_state = 0x853c49e6748fea9bULL;

static uint64_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

// draw fills keys[0..b) with b distinct filled keys, uniform over them:
// one from each of b equal strata of the rows, in shuffled order.
static void
draw(uint64_t *keys, uint32_t b, uint64_t rows)
{
	uint64_t per = rows / b;
	for (uint32_t i = 0; i < b; i++)
		keys[i] = key_of(i * per + rng() % per);
	for (uint32_t i = b - 1; i > 0; i--) {
		uint32_t j = (uint32_t) (rng() % (i + 1));
		uint64_t k = keys[i];
		keys[i]    = keys[j];
		keys[j]    = k;
	}
}

static int
parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts) { 10000000, 16, TBL_OPT_ADAGRAD, "adagrad", 4096,
		3 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i],
		           *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--smoke") == 0) {
			o->rows    = 100000;
			o->seconds = 0.2;
			continue;
		}
		if (v == NULL)
			return -1;
		i++;
		if (strcmp(a, "--rows") == 0)
			o->rows = strtoull(v, NULL, 10);
		else if (strcmp(a, "--dim") == 0)
			o->dim = (uint32_t) strtoul(v, NULL, 10);
		else if (strcmp(a, "--batch") == 0)
			o->batch = (uint32_t) strtoul(v, NULL, 10);
		else if (strcmp(a, "--seconds") == 0)
			o->seconds = strtod(v, NULL);
		else if (strcmp(a, "--optim") == 0) {
			static const char *names[] = { "sgd", "adagrad",
				"adam", "ftrl" };
			int                k       = 0;
			while (k < 4 && strcmp(v, names[k]) != 0)
				k++;
			if (k == 4)
				return -1;
			o->optim      = (enum tbl_optim) k;
			o->optim_name = names[k];
		} else
			return -1;
	}
	if (o->batch == 0 || o->rows < o->batch || o->seconds <= 0)
		return -1;
	return 0;
}

// rate runs batches of lookups (update 0) or updates for o->seconds and
// returns keys per second.
static double
rate(struct tbl *t, const struct opts *o, int update, uint64_t *keys,
    float *buf)
{
	uint64_t n = 0, t0 = fb_clock_ns(),
	         end = t0 + (uint64_t) (o->seconds * 1e9);
	uint64_t now = t0, version = 2;
	while (now < end) {
		for (int i = 0; i < 8; i++) {
			draw(keys, o->batch, o->rows);
			if (update)
				(void) tbl_apply(t, keys, o->batch, buf, NULL,
				    1.0f / 64, 0.01f, version++);
			else
				tbl_lookup(t, keys, o->batch, buf);
			n += o->batch;
		}
		now = fb_clock_ns();
	}
	return (double) n / ((double) (now - t0) / 1e9);
}

int
main(int argc, char **argv)
{
	struct opts o;
	if (parse(argc, argv, &o) != 0) {
		fprintf(stderr,
		    "usage: sparse-store-bench [--rows N] [--dim D] "
		    "[--optim sgd|adagrad|adam|ftrl] [--batch B] "
		    "[--seconds S] [--smoke]\n");
		return 2;
	}
	uint64_t        rss0 = rss_bytes();
	struct tbl_conf c    = { .dim = o.dim,
		   .table             = 0,
		   .seed              = 1,
		   .init              = TBL_INIT_UNIFORM,
		   .init_scale        = 0.01f,
		   .optim             = o.optim,
		   .beta1             = 0.9f,
		   .beta2             = 0.999f,
		   .eps               = 1e-8f,
		   .ftrl_beta         = 1.0f };
	struct tbl     *t    = tbl_open(&c);
	uint64_t       *keys = malloc(o.batch * sizeof(*keys));
	float          *buf  = malloc((size_t) o.batch * o.dim * sizeof(*buf));
	if (t == NULL || keys == NULL || buf == NULL) {
		fprintf(stderr, "sparse-store-bench: %s\n",
		    tbl_conf_check(&c) ? tbl_conf_check(&c) : "out of memory");
		return 1;
	}
	for (size_t i = 0; i < (size_t) o.batch * o.dim; i++)
		buf[i] = (float) ((int) (rng() % 2001) - 1000) * 1e-4f;
	for (uint64_t i = 0; i < o.rows; i += o.batch) {
		uint32_t m = o.rows - i < o.batch ? (uint32_t) (o.rows - i)
		                                  : o.batch;
		for (uint32_t j = 0; j < m; j++)
			keys[j] = key_of(i + j);
		if (tbl_apply(t, keys, m, buf, NULL, 1.0f / 64, 0.01f, 1) !=
		    0) {
			fprintf(stderr,
			    "sparse-store-bench: out of memory at "
			    "%llu rows\n",
			    (unsigned long long) tbl_rows(t));
			return 1;
		}
	}
	uint64_t rss1 = rss_bytes();
	double   raw  = (double) o.rows * (double) tbl_row_bytes(&c);
	double   lk   = rate(t, &o, 0, keys, buf);
	double   up   = rate(t, &o, 1, keys, buf);
	printf("{\"rows\":%llu,\"dim\":%u,\"optim\":\"%s\",\"raw_bytes\":%.0f,"
	       "\"rss_bytes\":%llu,\"rss_over_raw\":%.4f,"
	       "\"lookups_per_s_core\":%.0f,\"updates_per_s_core\":%.0f,"
	       "\"table_bytes\":%zu,\"rss_before_bytes\":%llu}\n",
	    (unsigned long long) o.rows, o.dim, o.optim_name, raw,
	    (unsigned long long) rss1, (double) rss1 / raw, lk, up,
	    tbl_bytes(t), (unsigned long long) rss0);
	tbl_close(t);
	free(keys);
	free(buf);
	return 0;
}
