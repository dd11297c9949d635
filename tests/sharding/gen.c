// gen.c — seeded instance generators shared by the sharding suites.
#include <math.h>
#include <string.h>

#include "gen.h"

uint64_t
gen_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(0x2545f4914f6cdd1d);
}

static double
unif(uint64_t *s)
{
	return (double) (gen_rand(s) >> 11) / 9007199254740992.0;
}

void
gen_reset(struct gen_inst *g)
{
	g->in.size = g->size;
	g->in.cap  = g->cap;
	g->in.lat  = g->lat;
	g->in.bw   = g->bw;
}

void
gen_random(struct gen_inst *g, uint64_t *rng, size_t S, uint32_t M, uint32_t T,
    int model, double cap_frac)
{
	struct shard_inst init = SHARD_INST_INIT;
	memset(g, 0, sizeof(*g));
	g->in            = init;
	g->in.n_shards   = S;
	g->in.n_servers  = M;
	g->in.n_trainers = T;
	g->in.model      = model;
	g->in.rho        = gen_rand(rng) % 2 ? 2.0 : 0.5;
	g->in.k          = 1 + (uint32_t) (gen_rand(rng) % 2);
	uint64_t sum     = 0;
	for (size_t i = 0; i < S; i++) {
		g->size[i] = 1024 + gen_rand(rng) % 1000000;
		sum += g->size[i];
	}
	for (size_t j = 0; j < (size_t) T * M; j++) {
		g->lat[j] = 0.001 + 0.099 * unif(rng);
		g->bw[j]  = pow(10.0, 6.0 + 3.0 * unif(rng));
	}
	for (uint32_t m = 0; m < M; m++)
		g->cap[m] = (uint64_t) (cap_frac * (double) sum);
	gen_reset(g);
}
