// sparse_loop.c — sparse-loop: one trainer that drives a Ferry job's sparse
// table as fast as the servers take it, through libferry's public API only
// (bench/sparse.sh runs it against a loopback job and reads the servers'
// memory). Modes:
//   load    push gradients for keys 0..keys-1 once, in batches: the table
//           then holds `keys` rows (the memory measurement's fill)
//   rate    for `seconds`, push a batch's row gradients and pull the next
//           batch's rows in one call; keys drawn from 0..keys-1, distinct
//           within a batch: rows pulled and pushed per second
//   stream  as rate, but every batch's keys are new (a counter cycling
//           over 0..keys-1): what a capped server evicts under
// --mode takes a comma-separated list run in order in one job (load,rate:
// the rate over a full table). Prints one JSON line per mode. usage:
//   sparse-loop --scheduler URL [--mode load,rate,stream] [--keys N]
//       [--dim D] [--optim NAME] [--batch B] [--seconds S] [--shards S]
#include <ferry/ferry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct args {
	const char *url, *mode, *optim;
	uint64_t    keys;
	uint32_t    dim, batch, shards;
	double      seconds;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

// A 64-bit mix: batch starts spread over the key space.
static uint64_t
mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static int
parse(int argc, char **argv, struct args *a)
{
	*a = (struct args) { NULL, "rate", "adagrad", 1000000, 16, 65536, 0,
		10 };
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];

		if (!strcmp(k, "--scheduler"))
			a->url = v;
		else if (!strcmp(k, "--mode"))
			a->mode = v;
		else if (!strcmp(k, "--optim"))
			a->optim = v;
		else if (!strcmp(k, "--keys"))
			a->keys = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--dim"))
			a->dim = (uint32_t) strtoul(v, NULL, 10);
		else if (!strcmp(k, "--batch"))
			a->batch = (uint32_t) strtoul(v, NULL, 10);
		else if (!strcmp(k, "--shards"))
			a->shards = (uint32_t) strtoul(v, NULL, 10);
		else if (!strcmp(k, "--seconds"))
			a->seconds = strtod(v, NULL);
		else {
			fprintf(stderr, "sparse-loop: unknown flag %s\n", k);
			return -1;
		}
	}
	if (!a->url || !a->keys || !a->dim || !a->batch ||
	    a->batch > a->keys ||
	    strspn(a->mode, "loadratestrm,") != strlen(a->mode)) {
		fprintf(stderr,
		    "sparse-loop: need --scheduler, modes among "
		    "load,rate,stream, and 0 < --batch <= --keys\n");
		return -1;
	}
	return 0;
}

// fill: the keys of batch b of a mode (distinct within the batch).
static void
fill(const struct args *a, uint64_t b, uint64_t *keys)
{
	uint64_t start;

	if (!strcmp(a->mode, "rate"))
		start = mix(b) % a->keys;
	else
		start = (b * a->batch) % a->keys;
	for (uint32_t i = 0; i < a->batch; i++)
		keys[i] = (start + i) % a->keys;
}

// run: one mode (a->mode is a single name here).
static int
run(ferry_client *c, const struct args *a)
{
	uint64_t *keys[2];
	float    *rows, *grads;
	uint64_t  b = 0, calls = 0, pushed = 0, pulled = 0;
	uint64_t  nb = (a->keys + a->batch - 1) / a->batch;
	double    t0, t;
	int       rc = FERRY_OK, load = !strcmp(a->mode, "load");

	keys[0] = malloc(sizeof(uint64_t) * a->batch);
	keys[1] = malloc(sizeof(uint64_t) * a->batch);
	rows    = malloc(sizeof(float) * a->batch * a->dim);
	grads   = malloc(sizeof(float) * a->batch * a->dim);
	if (!keys[0] || !keys[1] || !rows || !grads) {
		fprintf(stderr, "sparse-loop: out of memory\n");
		return FERRY_ENOMEM;
	}
	for (size_t i = 0; i < (size_t) a->batch * a->dim; i++)
		grads[i] = 0.001f * (float) (int) (i % 7 - 3);
	fill(a, 0, keys[0]);
	t0 = now_s();
	for (;; b++) {
		struct ferry_rows push = { 0, keys[b & 1], a->batch, NULL,
			grads };
		struct ferry_rows pull = { 0, keys[(b + 1) & 1], a->batch,
			rows, NULL };

		t = now_s() - t0;
		if (load ? b >= nb : t >= a->seconds)
			break;
		if (load && (b + 1) * a->batch > a->keys)
			push.n = a->keys - b * a->batch;
		fill(a, b + 1, keys[(b + 1) & 1]);
		rc = ferry_client_rows_push_pull(c, &push, 1, push.n,
		    load ? NULL : &pull, load ? 0 : 1);
		if (rc != FERRY_OK)
			break;
		calls++;
		pushed += push.n;
		pulled += load ? 0 : pull.n;
	}
	t = now_s() - t0;
	if (rc == FERRY_OK)
		printf(
		    "{\"mode\": \"%s\", \"calls\": %llu, \"seconds\": %.3f, "
		    "\"rows_pushed\": %llu, \"rows_pulled\": %llu, "
		    "\"pushed_per_s\": %.0f, \"pulled_per_s\": %.0f}\n",
		    a->mode, (unsigned long long) calls, t,
		    (unsigned long long) pushed, (unsigned long long) pulled,
		    (double) pushed / t, (double) pulled / t);
	free(keys[0]);
	free(keys[1]);
	free(rows);
	free(grads);
	return rc;
}

int
main(int argc, char **argv)
{
	struct args              a;
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_spec t = { .name = "bias", .len = 1 };
	struct ferry_table_spec  tb;
	ferry_client            *c  = NULL;
	float                    w  = 0;
	const float             *w0 = &w;
	int                      rc;
	char                     modes[64];

	if (parse(argc, argv, &a) != 0)
		return 2;
	snprintf(modes, sizeof(modes), "%s", a.mode);
	memset(&tb, 0, sizeof(tb));
	tb.name          = "emb";
	tb.dim           = a.dim;
	tb.optimizer     = a.optim;
	tb.shards        = a.shards;
	tb.expected_rows = a.keys;
	o.scheduler_url  = a.url;
	o.timeout_ms     = 120000;
	o.lr             = 0.01;
	if ((rc = ferry_client_open(&o, &c)) != FERRY_OK ||
	    (rc = ferry_client_declare_tables(c, &t, 1, &tb, 1)) != FERRY_OK ||
	    (rc = ferry_client_init_weights(c, &w0)) != FERRY_OK)
		goto fail;
	for (char *m = strtok(modes, ","); m; m = strtok(NULL, ",")) {
		if (strcmp(m, "load") && strcmp(m, "rate") &&
		    strcmp(m, "stream")) {
			fprintf(stderr, "sparse-loop: unknown mode %s\n", m);
			ferry_client_close(c);
			return 2;
		}
		a.mode = m;
		if ((rc = run(c, &a)) != FERRY_OK)
			goto fail;
		fflush(stdout);
	}
	ferry_client_leave(c);
	ferry_client_close(c);
	return 0;
fail:
	fprintf(stderr, "sparse-loop: %s\n",
	    c ? ferry_client_last_error(c) : ferry_strerror(rc));
	ferry_client_close(c);
	return 1;
}
