// codec_bench.c — one-core throughput of every comp codec (encode, and
// decode-and-accumulate, in GB/s of fp32 input) beside memcpy of the same
// buffer in the same run, and the wire bytes per step of the default MLP
// 784-256-128-10 per codec.
//
// usage: codec_bench [--n N] [--reps R] [--bucket B] [--portable]
//                    [--json FILE]
// --n adds a size to the two defaults (the MLP, 235,146 floats, which fits
// in L2, and 16 Mi floats = 64 MiB, which does not); --bucket overrides the
// bucket of every bucketed codec; --portable disables the AVX-512 kernels.
// Each figure is the median of R timed repeats, each repeat long enough
// (>= 2 ms) to time reliably.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <comp/comp.h>

static const char *const specs[] = { "none", "fp16", "bf16", "q8", "q4",
	"q4@128", "q2", "q2@128", "sign", "topk:0.01", "topk:0.01+q8",
	"topk:0.01+q4", "randk:0.01", "randk:0.01+q8" };
#define NSPECS (sizeof specs / sizeof specs[0])

static const size_t mlp[6] = { 784 * 256, 256, 256 * 128, 128, 128 * 10, 10 };
#define MLP_N 235146u

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
cmpd(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return x < y ? -1 : x > y;
}

// Parse "q4@128" as q4 with bucket 128 (the bench's own notation).
static int
spec_codec(const char *spec, uint32_t bucket, struct comp_codec *c)
{
	char        name[32];
	const char *at = strchr(spec, '@');
	snprintf(name, sizeof name, "%.*s", at ? (int) (at - spec) : 31, spec);
	uint32_t b = at ? (uint32_t) atoi(at + 1) : 0;
	if (bucket != 0)
		b = bucket;
	return comp_codec_parse(name, b, c);
}

enum { OP_MEMCPY, OP_ENC, OP_DEC_ADD };

struct job {
	int                      op;
	const struct comp_codec *c;
	const float             *x;
	float                   *acc;
	uint8_t                 *buf;
	size_t                   n, cap, len;
};

static void
job_run(struct job *j)
{
	size_t len = 0;
	switch (j->op) {
	case OP_MEMCPY:
		memcpy(j->acc, j->x, j->n * 4);
		break;
	case OP_ENC:
		if (comp_encode(j->c, j->x, j->n, NULL, j->buf, j->cap,
		        &len) != 0)
			abort();
		j->len = len;
		break;
	default:
		if (comp_decode_add(j->c, j->buf, j->len, j->n, j->acc) != 0)
			abort();
		break;
	}
}

// median_gbs times job j: R repeats of `iters` calls each.
static double
median_gbs(struct job *j, int reps)
{
	int    iters = 1;
	double t0    = now();
	job_run(j);
	double one = now() - t0;
	if (one < 2e-3)
		iters = (int) (2e-3 / (one > 1e-7 ? one : 1e-7)) + 1;
	double *gbs = malloc(sizeof(double) * (size_t) reps);
	for (int r = 0; r < reps; r++) {
		t0 = now();
		for (int i = 0; i < iters; i++)
			job_run(j);
		double dt = (now() - t0) / iters;
		gbs[r]    = (double) j->n * 4 / dt / 1e9;
	}
	qsort(gbs, (size_t) reps, sizeof *gbs, cmpd);
	double med = gbs[reps / 2];
	free(gbs);
	return med;
}

int
main(int argc, char **argv)
{
	size_t      sizes[3] = { MLP_N, (size_t) 16 << 20, 0 };
	int         nsizes = 2, reps = 21;
	uint32_t    bucket = 0;
	const char *json   = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
			sizes[nsizes++] = (size_t) strtoull(argv[++i], NULL,
			    10);
		else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--bucket") == 0 && i + 1 < argc)
			bucket = (uint32_t) atoi(argv[++i]);
		else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json = argv[++i];
		else if (strcmp(argv[i], "--portable") == 0)
			comp_simd_set(0);
		else {
			fprintf(stderr,
			    "usage: %s [--n N] [--reps R] [--bucket B] "
			    "[--portable] [--json FILE]\n",
			    argv[0]);
			return 2;
		}
	}
	if (reps < 1)
		reps = 1;
	FILE *jf = NULL;
	if (json != NULL && (jf = fopen(json, "w")) == NULL) {
		perror(json);
		return 1;
	}
	if (jf)
		fprintf(jf,
		    "{\n  \"kernels\": \"%s\",\n  \"reps\": %d,\n"
		    "  \"throughput\": [",
		    comp_simd_name(), reps);
	printf("kernels: %s, median of %d repeats, one core\n\n",
	    comp_simd_name(), reps);
	int first = 1;
	for (int s = 0; s < nsizes; s++) {
		size_t   n = sizes[s];
		float   *x = malloc(n * 4), *acc = malloc(n * 4);
		uint8_t *buf  = malloc(8 * n + 64);
		uint64_t seed = 1;
		for (size_t i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ull +
			    1442695040888963407ull;
			x[i] = (float) ((int64_t) (seed >> 11) - (1ll << 52)) *
			    0x1p-52f;
			acc[i] = 0.0f;
		}
		struct job m  = { OP_MEMCPY, NULL, x, acc, buf, n, 8 * n + 64,
			 0 };
		double     mc = median_gbs(&m, reps);
		printf("n = %zu floats (%.1f MiB): memcpy %.2f GB/s\n\n", n,
		    n * 4 / 1048576.0, mc);
		printf("| codec | bucket | encode GB/s | x memcpy | "
		       "decode_add GB/s | x memcpy |\n"
		       "|---|---|---|---|---|---|\n");
		for (size_t k = 0; k < NSPECS; k++) {
			struct comp_codec c;
			if (spec_codec(specs[k], bucket, &c) != 0)
				abort();
			struct job e    = { OP_ENC, &c, x, acc, buf, n,
				   8 * n + 64, 0 };
			double     ge   = median_gbs(&e, reps);
			struct job d    = e;
			d.op            = OP_DEC_ADD;
			double gd       = median_gbs(&d, reps);
			int    bucketed = c.id >= COMP_Q8 && c.id <= COMP_SIGN;
			char   bk[16];
			snprintf(bk, sizeof bk, "%u", c.bucket);
			printf("| %s | %s | %.2f | %.2f | %.2f | %.2f |\n",
			    specs[k], bucketed ? bk : "-", ge, ge / mc, gd,
			    gd / mc);
			if (jf)
				fprintf(jf,
				    "%s\n    {\"n\": %zu, \"codec\": \"%s\", "
				    "\"bucket\": %u, \"memcpy_gbs\": %.3f, "
				    "\"encode_gbs\": %.3f, \"decode_add_gbs\": "
				    "%.3f}",
				    first ? "" : ",", n, specs[k],
				    bucketed ? c.bucket : 0, mc, ge, gd);
			first = 0;
		}
		printf("\n");
		free(x);
		free(acc);
		free(buf);
	}
	if (jf)
		fprintf(jf, "\n  ],\n  \"mlp_wire\": [");
	printf("Wire bytes per step, MLP 784-256-128-10 (%u params, 6 "
	       "tensors, each encoded on its own):\n\n"
	       "| codec | bucket | bytes | x fewer than fp32 |\n"
	       "|---|---|---|---|\n",
	    MLP_N);
	for (size_t k = 0; k < NSPECS; k++) {
		struct comp_codec c;
		if (spec_codec(specs[k], bucket, &c) != 0)
			abort();
		size_t bytes = 0;
		for (int t = 0; t < 6; t++)
			bytes += comp_bound(&c, mlp[t]);
		double ratio    = (double) MLP_N * 4 / (double) bytes;
		int    bucketed = c.id >= COMP_Q8 && c.id <= COMP_SIGN;
		char   bk[16];
		snprintf(bk, sizeof bk, "%u", c.bucket);
		printf("| %s | %s | %zu | %.2f |\n", specs[k],
		    bucketed ? bk : "-", bytes, ratio);
		if (jf)
			fprintf(jf,
			    "%s\n    {\"codec\": \"%s\", \"bucket\": "
			    "%u, \"bytes\": %zu, \"ratio_vs_fp32\": %.4f}",
			    k ? "," : "", specs[k], bucketed ? c.bucket : 0,
			    bytes, ratio);
	}
	if (jf) {
		fprintf(jf, "\n  ]\n}\n");
		fclose(jf);
	}
	return 0;
}
