// evalplace — score a logged placement with Ferry's own cost model.
//
// Reads from stdin (whitespace-separated):
//   T M rho k shard_bytes n_tensors
//   tensor lengths (float32 elements) x n_tensors
//   L[t][m] in ms, T*M values (row-major, as the scheduler logs them)
//   B[t][m] in MB/s, T*M values
//   n_assign, then n_assign server indices (the logged "assign:" line)
// Cuts the tensors with shard_split, then prints one JSON object (times in
// ms): F of the given assignment (shard_cost), LB (shard_lower_bound), the
// solver's F (shard_solve, default opts, seed 1 as the scheduler), and the
// exact optimum by exhaustive enumeration of all M^S assignments through
// shard_cost (shard_solve_brute refuses S > 12; the default job has S = 19).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <shard/shard.h>

static double
rd(void)
{
	double v;
	if (scanf("%lf", &v) != 1) {
		fprintf(stderr, "evalplace: bad input\n");
		exit(2);
	}
	return v;
}

int
main(void)
{
	uint32_t  T = (uint32_t) rd(), M = (uint32_t) rd();
	double    rho  = rd();
	uint32_t  k    = (uint32_t) rd();
	uint64_t  sb   = (uint64_t) rd();
	size_t    nt   = (size_t) rd();
	uint64_t *lens = calloc(nt, sizeof *lens);
	for (size_t i = 0; i < nt; i++)
		lens[i] = (uint64_t) rd();
	double *lat = calloc((size_t) T * M, sizeof *lat);
	double *bw  = calloc((size_t) T * M, sizeof *bw);
	for (size_t i = 0; i < (size_t) T * M; i++)
		lat[i] = rd() / 1e3;
	for (size_t i = 0; i < (size_t) T * M; i++)
		bw[i] = rd() * 1e6;
	size_t    na    = (size_t) rd();
	uint32_t *given = calloc(na ? na : 1, sizeof *given);
	for (size_t i = 0; i < na; i++)
		given[i] = (uint32_t) rd();

	struct shard_desc *sd = NULL;
	size_t             S  = 0;
	if (shard_split(lens, nt, sb, &sd, &S) != 0) {
		fprintf(stderr, "evalplace: shard_split failed\n");
		return 2;
	}
	if (na != S) {
		fprintf(stderr, "evalplace: %zu assignments for %zu shards\n",
		    na, S);
		return 2;
	}
	uint64_t *size = calloc(S, sizeof *size);
	for (size_t i = 0; i < S; i++)
		size[i] = 4 * sd[i].len;

	struct shard_inst in = SHARD_INST_INIT;
	in.n_shards          = S;
	in.n_servers         = M;
	in.n_trainers        = T;
	in.size              = size;
	in.lat               = lat;
	in.bw                = bw;
	in.rho               = rho;
	in.k                 = k;

	double f_given = 0, lb = 0;
	if (shard_cost(&in, given, &f_given, NULL, NULL) != 0 ||
	    shard_lower_bound(&in, &lb) != 0) {
		fprintf(stderr, "evalplace: shard_cost/lower_bound failed\n");
		return 2;
	}
	struct shard_solve_opts o = SHARD_SOLVE_OPTS_INIT;
	o.seed                    = 1;
	uint32_t           *sol   = calloc(S, sizeof *sol);
	struct shard_report rep;
	if (shard_solve(&in, &o, sol, NULL, &rep) != 0) {
		fprintf(stderr, "evalplace: shard_solve failed\n");
		return 2;
	}

	// Exhaustive optimum: odometer over M^S.
	double total = pow((double) M, (double) S), opt = INFINITY;
	if (total <= 4e6) {
		uint32_t *a = calloc(S, sizeof *a);
		for (;;) {
			double f;
			if (shard_cost(&in, a, &f, NULL, NULL) == 0 && f < opt)
				opt = f;
			size_t i = 0;
			while (i < S && ++a[i] == M)
				a[i++] = 0;
			if (i == S)
				break;
		}
		free(a);
	}
	printf("{\"shards\": %zu, \"f_assign_ms\": %.4f, \"lb_ms\": %.4f, "
	       "\"solver_f_ms\": %.4f, \"opt_ms\": %.4f, "
	       "\"solver_over_opt\": %.4f}\n",
	    S, f_given * 1e3, lb * 1e3, rep.f * 1e3,
	    isfinite(opt) ? opt * 1e3 : -1.0,
	    isfinite(opt) && opt > 0 ? rep.f / opt : -1.0);
	fb_free(sd);
	return 0;
}
