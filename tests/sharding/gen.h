// gen.h — seeded instance generators shared by the sharding suites.
#ifndef SHARDING_GEN_H
#define SHARDING_GEN_H

#include <stdint.h>

#include <shard/shard.h>

#define GEN_MAX_S 64
#define GEN_MAX_M 8
#define GEN_MAX_TM 64

// gen_inst owns the arrays its shard_inst points at.
struct gen_inst {
	struct shard_inst in;
	uint64_t          size[GEN_MAX_S];
	uint64_t          cap[GEN_MAX_M];
	double            lat[GEN_MAX_TM];
	double            bw[GEN_MAX_TM];
};

// gen_rand returns the next number of a xorshift64* stream.
uint64_t gen_rand(uint64_t *s);

// gen_random fills g with a random instance of S shards (1 KiB to 1 MB),
// M servers, T trainers, latencies of 1–100 ms and bandwidths of
// 1 MB/s–1 GB/s (log-uniform), ρ ∈ {0.5, 2}, k ∈ {1, 2}, and every
// capacity cap_frac·Σb (0 = unbounded).
void gen_random(struct gen_inst *g, uint64_t *rng, size_t S, uint32_t M,
    uint32_t T, int model, double cap_frac);

// gen_reset points g->in at g's own arrays (after copying a gen_inst).
void gen_reset(struct gen_inst *g);

#endif // SHARDING_GEN_H
