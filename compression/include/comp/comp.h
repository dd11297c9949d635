// comp/comp.h — Ferry's gradient and weight codecs over caller buffers.
//
// A pure library: no I/O, no threads. Every function works on buffers the
// caller owns and sizes with comp_bound(), with one exception: the top-k and
// random-k codecs keep their candidate and index lists in a per-thread
// workspace (fb_alloc) that grows to the largest request the thread makes
// and is freed when the thread exits, so a thread that encodes the same
// shapes allocates on its first encode only (FB_ENOMEM if that fails). All
// functions are reentrant and may be called from any thread at the same time,
// as long as two calls do not write the same buffer (comp_simd_set is the
// exception: call it at start-up only). None of them blocks.
//
// Codecs (the exact bytes are in compression/FORMAT.md):
//   none   fp32 little-endian, 4 bytes a value
//   fp16   IEEE binary16, round to nearest even, 2 bytes a value
//   bf16   bfloat16, round to nearest even, 2 bytes a value
//   q8/q4/q2  bucketed symmetric quantizer: per bucket of `bucket` values
//          an fp32 scale s = max|x|, L = 2^(b-1)-1, q = clamp(round(x*L/s),
//          -L, L); decode x^ = (float)q * (s / L), s / L computed once per
//          bucket. Round to nearest (ties to even), or stochastic rounding
//          when `stochastic` is set.
//   sign   scaled 1-bit sign: s = mean|x| per bucket, x^ = +-s
//   topk   the ceil(ratio*n) largest |x| as (u32 index, f32 value) pairs
//   topk:R+q8, topk:R+q4  the same k values, bucketed q8/q4 (per `bucket`
//          kept values), their indices Elias-Fano coded (about
//          2 + log2(1/R) bits an index)
//   randk:R, randk:R+q8, randk:R+q4  k values at indices drawn from a
//          64-bit seed in the payload (one per stratum of n/k values), fp32
//          or q8/q4; no index travels
// Every size is exact (comp_bound) and depends only on the codec and n.
//
// Errors are the FB_E* codes of <fb/fb.h>. Out-parameters (out_len, decoded
// floats) are written only on success, with one documented exception: the
// bytes of an encode output buffer are unspecified after a failed encode.
#ifndef COMP_COMP_H
#define COMP_COMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum comp_codec_id {
	COMP_NONE = 0,
	COMP_FP16,
	COMP_BF16,
	COMP_Q8,
	COMP_Q4,
	COMP_Q2,
	COMP_SIGN,
	COMP_TOPK,
	COMP_TOPK_Q8,  // topk:R+q8
	COMP_TOPK_Q4,  // topk:R+q4
	COMP_RANDK,    // randk:R
	COMP_RANDK_Q8, // randk:R+q8
	COMP_RANDK_Q4, // randk:R+q4
	COMP_CODEC_COUNT,
};

#define COMP_BUCKET_DEFAULT 512u
#define COMP_BUCKET_MAX (1u << 20)
// COMP_MAX_N is the largest value count any codec accepts (topk indices are
// u32). Larger n gives FB_EINVAL (comp_bound gives 0).
#define COMP_MAX_N ((size_t) UINT32_MAX)

// struct comp_codec names a codec and its parameters. `bucket` matters for
// q8/q4/q2/sign and the +q8/+q4 composites, `topk_ratio` for topk and
// randk (all five sparse codecs), `stochastic` (0 or 1) for q8/q4/q2 only.
// It is plain data: copy it freely.
struct comp_codec {
	uint32_t id;         // enum comp_codec_id
	uint32_t bucket;     // values per scale, 1..COMP_BUCKET_MAX
	float    topk_ratio; // fraction kept by topk/randk, in (0, 1]
	int      stochastic; // 1: stochastic rounding (q8/q4/q2 only)
};

#define COMP_CODEC_INIT                                                       \
	{                                                                     \
		COMP_NONE, COMP_BUCKET_DEFAULT, 0.0f, 0                       \
	}

// COMP_AUTO_SPEC ("auto") is a job's link-aware codec choice
// (docs/algorithms.md §2.8): each trainer picks a codec per server link,
// names it in every ShardRef of its pushes, and pulls either the weights
// in fp32 or the chain of deltas of the shared pull reference. That
// reference is one per shard for every trainer, so it needs one codec:
// COMP_AUTO_REF, 2% of each delta's values in q8. The links that pull
// deltas are the slow ones, and there a step's pull bytes set its time:
// at 10 Mbit/s topk:0.02+q8 reached 84% test accuracy in about half the
// time of topk:0.05+q8, at the same accuracy after 3 epochs
// (docs/algorithms.md §2.8). comp_codec_parse reads "auto" as
// COMP_AUTO_REF; the caller tells the two apart by the spec string.
#define COMP_AUTO_SPEC "auto"
#define COMP_AUTO_REF "topk:0.02+q8"

// comp_codec_parse fills *out from a spec string: "none" (or "fp32"),
// "fp16", "bf16", "q8", "q4", "q2" (each q may end in ":sr" for stochastic
// rounding), "sign", "topk:R" with 0 < R <= 1, "topk:R+q8", "topk:R+q4",
// "randk:R", "randk:R+q8", "randk:R+q4", and "auto" (COMP_AUTO_REF's
// codec). bucket is the bucket size
// (0 picks COMP_BUCKET_DEFAULT); it is kept for every codec but only used by
// the bucketed ones. Returns FB_EINVAL for an unknown name, a bad ratio or a
// bucket outside 1..COMP_BUCKET_MAX (*out untouched).
int comp_codec_parse(const char *spec, uint32_t bucket,
    struct comp_codec *out);

// comp_codec_parse_msg is comp_codec_parse that also writes, on failure, a
// one-line reason such as "topk ratio must be in (0, 1]" into why (size
// why_len, always NUL-terminated when why_len > 0; why may be NULL).
int comp_codec_parse_msg(const char *spec, uint32_t bucket,
    struct comp_codec *out, char *why, size_t why_len);

// comp_codec_name returns the static name of a codec id ("q4", "topk",
// "topk+q8", "randk"...),
// or "unknown". Never NULL.
const char *comp_codec_name(uint32_t id);

// comp_codec_format writes the spec string of c ("q4", "q8:sr",
// "topk:0.01") into buf (size len, NUL-terminated) so that comp_codec_parse
// reads it back. Returns FB_EINVAL if c is invalid, FB_ENOSPC if it does not
// fit.
int comp_codec_format(const struct comp_codec *c, char *buf, size_t len);

// comp_codec_check validates a codec received from the network or a config:
// a known id; for q8/q4/q2/sign and the +q8/+q4 composites a bucket in
// 1..COMP_BUCKET_MAX; for topk and randk (all variants) a finite ratio in
// (0, 1]; stochastic 0, or 1 with q8/q4/q2. Returns FB_OK or
// FB_EINVAL. Every other function below runs this check first.
int comp_codec_check(const struct comp_codec *c);

// comp_bound returns the number of bytes comp_encode writes for n values.
// It is exact for every codec (topk always keeps the same k for a given n).
// Returns 0 for an invalid codec or n > COMP_MAX_N (an empty input also
// encodes to 0 bytes, except the sparse codecs, which write a 4-byte count
// (randk: 12 bytes, count and seed)).
size_t comp_bound(const struct comp_codec *c, size_t n);

// comp_topk_k returns how many values topk:ratio (and randk:ratio) keeps
// out of n:
// min(n, max(1, ceil(ratio * n))), 0 for n == 0.
size_t comp_topk_k(float ratio, size_t n);

// comp_encode encodes x[0..n) into out (capacity cap) and sets *out_len.
// rng is the state of the stochastic-rounding generator (advanced in place);
// it may be NULL unless c->stochastic. randk draws its seed from rng when
// rng is not NULL, else from a hash of x (so the same x gives the same
// bytes). Errors: FB_EINVAL (invalid codec, NULL pointer, n > COMP_MAX_N, a
// non-finite value for q8/q4/q2/sign/topk (any of x) or randk (a kept
// one), stochastic without rng), FB_ENOSPC (cap < comp_bound(c, n)).
int comp_encode(const struct comp_codec *c, const float *x, size_t n,
    uint64_t *rng, uint8_t *out, size_t cap, size_t *out_len);

// comp_decode decodes in[0..len) into out[0..n) (out = deq). The bytes are
// untrusted: a length that does not match n, a non-finite or negative scale,
// a forbidden code, non-zero padding bits, a topk index out of range or not
// strictly increasing (or an Elias-Fano block that does not hold exactly k
// such indices), or a non-finite sparse value give FB_EPROTO, and out is
// then untouched. Never reads or writes outside in[0..len) and out[0..n).
// FB_EINVAL for an invalid codec or NULL pointers.
int comp_decode(const struct comp_codec *c, const uint8_t *in, size_t len,
    size_t n, float *out);

// comp_decode_add does acc[i] += deq[i] for i in [0, n): the server's
// aggregation hot path. For q8/q4/q2 each value is added as
// acc[i] = acc[i] + (float)q[i] * (s_j / L), bit-exact on every machine
// (comp_ref_encode relies on it). Validates the whole input before touching
// acc, so on any error acc is unchanged. Errors as comp_decode.
int comp_decode_add(const struct comp_codec *c, const uint8_t *in, size_t len,
    size_t n, float *acc);

// comp_ef_encode is the push side with error feedback: p = g + e,
// encode p into out, e = p - deq(out). e (n floats, caller-owned, start at
// zero) is updated in place, only on success. Errors as comp_encode; a
// non-finite g + e gives FB_EINVAL for every codec.
int comp_ef_encode(const struct comp_codec *c, const float *g, float *e,
    size_t n, uint64_t *rng, uint8_t *out, size_t cap, size_t *out_len);

// comp_ref_encode is the pull side with a shared reference (EF21-P):
// d = Q(x - ref) into out, then ref += deq(d) through comp_decode_add, so a
// peer that applies comp_decode_add(out) to its own copy of ref gets the same
// bits. scratch is n floats of caller scratch. ref is updated only on
// success. Errors as comp_encode; stochastic codecs give FB_EINVAL (the pull
// side rounds deterministically).
int comp_ref_encode(const struct comp_codec *c, const float *x, float *ref,
    size_t n, float *scratch, uint8_t *out, size_t cap, size_t *out_len);

// comp_simd_set chooses the kernels: 0 forces the portable C path, 1 uses
// AVX-512 when the CPU has it (the default). Both paths produce the same
// bytes and the same floats. Not thread-safe: call at start-up or in tests.
void comp_simd_set(int enable);

// comp_simd_name returns "avx512" or "portable": the kernels in use.
const char *comp_simd_name(void);

#ifdef __cplusplus
}
#endif
#endif // COMP_COMP_H
