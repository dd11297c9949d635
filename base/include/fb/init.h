// fb/init.h — seeded initial weights: the rule that gives element i of
// tensor t its version-0 value from (job seed, t, i) alone, shared by the
// servers (which fill a seeded shard when the first map creates it,
// ps/src/server/mapinstall.c) and libferry (which fills the same shard
// locally instead of pulling it, clients/src/pull.c), so that a job whose
// initial weights come from a seeded rule moves no bytes for version 0.
// Pure functions: no I/O, no allocation, thread-safe.
//
// The generator is counter-based (a splitmix64 hash of seed, tensor and
// element index, not a stream), so any cut of a tensor into shards gives
// the same bits, and the float arithmetic is one exact conversion and one
// IEEE multiply: the same bits on every machine.
#ifndef FB_INIT_H
#define FB_INIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// How a tensor's version-0 values are made. The numbers travel in the job
// config (TensorDesc.init) and libferry's ferry_tensor_spec.init: a
// number never changes meaning.
enum fb_init_kind {
	FB_INIT_OFFER = 0, // a trainer offers the values (init_weights)
	FB_INIT_ZEROS,     // every element 0
	FB_INIT_UNIFORM,   // uniform in [-scale, scale), seeded
	FB_INIT_COUNT,
};

// fb_init_check checks an init kind and scale as they come from a caller
// or the wire: a known kind, a finite scale >= 0 (ignored by OFFER and
// ZEROS), > 0 for UNIFORM. Returns FB_OK, or FB_EINVAL with the reason in
// why (n bytes).
int fb_init_check(uint32_t kind, float scale, char *why, size_t n);

// fb_init_seeded reports whether kind is filled by the rule (not offered).
static inline int
fb_init_seeded(uint32_t kind)
{
	return kind == FB_INIT_ZEROS || kind == FB_INIT_UNIFORM;
}

// fb_init_fill writes elements [first, first + n) of tensor `tensor`'s
// version-0 values under job seed `seed` into out[0..n). kind is ZEROS or
// UNIFORM and was checked (fb_init_check); any other kind writes zeros.
void fb_init_fill(uint32_t kind, float scale, uint64_t seed, uint32_t tensor,
    uint64_t first, float *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
