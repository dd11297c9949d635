// shard/shard.h — Ferry's placement library: cutting tensors into shards and
// assigning shards to servers.
//
// Pure code: no I/O, no threads, no global state. Every function is
// reentrant and may be called from any thread; calls that share no output
// memory may run concurrently. Nothing here blocks.
//
// Conventions (see STYLE.md): functions return 0 (PS_OK) or a positive PS_E*
// code from <ps/base.h>; out-params are written only on success; heap memory
// comes from ps_alloc and each allocating call names its release call.
#ifndef SHARD_SHARD_H
#define SHARD_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include <ps/base.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- shards ---------------------------------------------------------------

// shard_desc describes one shard: a contiguous slice of one float32 tensor.
// The shard key is (tensor, index). offset and len count float32 elements
// within the tensor (multiply by 4 for bytes).
struct shard_desc {
	uint32_t tensor; // tensor id = position in the tensor table
	uint32_t index;  // slice index within the tensor, 0-based
	uint64_t offset; // first element of the slice
	uint64_t len;    // number of elements, always > 0
};

// shard_split cuts n_tensors tensors, whose lengths in float32 elements are
// tensor_lens[0..n_tensors-1], into shards of at most shard_bytes bytes.
//
// Output order: tensors in table order; the shards of one tensor are
// contiguous, in index order, and together cover the tensor exactly without
// overlap. A tensor of at most shard_bytes bytes is one shard. A larger one
// is cut into p = ceil(4·len / shard_bytes) pieces of equal length where
// possible (the first len mod p pieces are one element longer), so every
// piece is at most shard_bytes bytes.
//
// On success *out points to an array of *n_out descriptors allocated with
// ps_alloc; the caller owns it and releases it with ps_free.
//
// Errors: PS_EINVAL if tensor_lens, out or n_out is NULL, n_tensors is 0 or
// above UINT32_MAX, any length is 0, or shard_bytes is not a multiple of 4
// or is below 4. PS_ERANGE if a length exceeds 2^61 elements or a tensor
// needs more than UINT32_MAX shards. PS_ENOMEM if allocation fails.
int shard_split(const uint64_t *tensor_lens, size_t n_tensors,
    uint64_t shard_bytes, struct shard_desc **out, size_t *n_out);

// ---- uniform placement (baseline) ----------------------------------------

// shard_place_uniform is the hash baseline (--placement=uniform): it writes
// assign[i] = i mod n_servers for i in [0, n_shards), i.e. round-robin in
// shard order. The caller owns assign (n_shards entries).
//
// Errors: PS_EINVAL if n_servers is 0, or assign is NULL while n_shards > 0.
// n_shards == 0 succeeds and writes nothing.
int shard_place_uniform(size_t n_shards, uint32_t n_servers,
    uint32_t *assign);

#ifdef __cplusplus
}
#endif
#endif // SHARD_SHARD_H
