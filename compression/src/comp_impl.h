// comp_impl.h — internal umbrella of the comp library: the per-codec entry
// points that codec.c dispatches to, and the kernel tables (quant_kern.c,
// float16_kern.c, picked in kern.c) that let the codecs run on portable C,
// AVX-512 or F16C.
#ifndef COMP_IMPL_H
#define COMP_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <comp/comp.h>
#include <fb/fb.h>

// How a decoder stores a dequantized value v into out[i].
enum comp__mode {
	COMP__SET = 0, // out[i] = v
	COMP__ADD,     // out[i] = out[i] + v
	COMP__SUB,     // out[i] = out[i] - v   (error feedback: e = p - deq)
};

// Bit pattern of +Inf: a |x| bit pattern at or above it is Inf or NaN.
#define COMP__INF_BITS 0x7f800000u

// The kernels behind q8 and q4. All of them are pure functions of their
// arguments; both implementations produce identical bytes and floats.
//   absmax_bits: max over x[0..m) of the bits of |x| (m >= 1). For finite
//     floats this orders like the value; >= COMP__INF_BITS means Inf/NaN.
//   q8_enc: codes[i] = (int8) clamp(rne(x[i] * inv), -127, 127).
//   q4_enc: the same with L = 7, two codes a byte, low nibble first; x[0]
//     goes to the low nibble of codes[0]; when m is odd the last byte's high
//     nibble is 0.
//   q*_dec: v = (float) q[i] * step, stored per mode.
//   q8_bad / q4_bad: non-zero if codes[0..nbytes) hold the forbidden code
//     -2^(b-1) (0x80 for q8, nibble 0x8 for q4).
struct comp__kern {
	const char *name;
	uint32_t (*absmax_bits)(const float *x, size_t m);
	void (*q8_enc)(const float *x, size_t m, float inv, uint8_t *codes);
	void (*q4_enc)(const float *x, size_t m, float inv, uint8_t *codes);
	void (*q8_dec)(const uint8_t *codes, size_t m, float step, float *out,
	    int mode);
	void (*q4_dec)(const uint8_t *codes, size_t m, float step, float *out,
	    int mode);
	int (*q8_bad)(const uint8_t *codes, size_t nbytes);
	int (*q4_bad)(const uint8_t *codes, size_t nbytes);
	// q2_enc / q2_dec: as q4 with L = 1, four codes a byte, x[0] in bits
	// 0-1 of codes[0]; the unused high bits of a last partial byte are 0.
	void (*q2_enc)(const float *x, size_t m, float inv, uint8_t *codes);
	void (*q2_dec)(const uint8_t *codes, size_t m, float step, float *out,
	    int mode);
	// sign_enc: bit i (LSB first from codes[0]) = x[i] < 0, a last partial
	// byte's high bits 0. sign_dec: v = bit ? -s : s, stored per mode.
	void (*sign_enc)(const float *x, size_t m, uint8_t *codes);
	void (*sign_dec)(const uint8_t *codes, size_t m, float s, float *out,
	    int mode);
	// abs_sum: sum of |x[i]| in double over 8 lanes, lane r taking the i
	// with i % 8 == r in order, then lanes 0..7 added in order (FORMAT.md,
	// sign), so a vector unit computes the very same double.
	double (*abs_sum)(const float *x, size_t m);
	// collect_ge writes, in order, the index i (idx) and the |x| bit
	// pattern (bits) of every x[0..n) whose pattern is >= t, at most cap
	// of them, and the largest pattern of all x in *maxbits. Returns how
	// many it wrote, or cap + 1 as soon as there are more than cap (then
	// *maxbits is unset). n < 2^32.
	size_t (*collect_ge)(const float *x, size_t n, uint32_t t,
	    uint32_t *idx, uint32_t *bits, size_t cap, uint32_t *maxbits);
	// count_ge: how many of a[0..m) are >= t (all < 2^31, t <= 2^31).
	size_t (*count_ge)(const uint32_t *a, size_t m, uint32_t t);
	// seed_sums: *s1 = the sum of the bit patterns of x[0..n) and *s2 the
	// sum of (pattern xor (uint32) i), both mod 2^32 (randk's seed hash;
	// wrap-around sums do not depend on the order of the additions).
	void (
	    *seed_sums)(const float *x, size_t n, uint32_t *s1, uint32_t *s2);
	// q4_enc_b128 (NULL where absent): nbk whole buckets of 128 values,
	// each in one pass: scale s = the float of absmax_bits, stored as
	// little-endian f32 at scales[4j], and the 64 q4_enc bytes with
	// inv = s > 0 ? 7 / s : 0 at codes[64j]. It stops before the first
	// bucket whose scale is Inf/NaN or whose 7 / s overflows (the
	// caller's error and slow paths) and returns how many it encoded.
	// At bucket 128 the two passes and their calls per bucket cost as
	// much as the work (bench/codec: q4@128 encode 0.58 -> 0.67x memcpy).
	size_t (*q4_enc_b128)(const float *x, size_t nbk, uint8_t *scales,
	    uint8_t *codes);
	// q2_enc_b128: the same for q2 (L = 1, q2_enc's 32 bytes a bucket at
	// codes[32j]).
	size_t (*q2_enc_b128)(const float *x, size_t nbk, uint8_t *scales,
	    uint8_t *codes);
};

// The portable table and its AVX-512 twin (quant_kern.c).
extern const struct comp__kern comp__kern_portable;
// comp__kern_avx512 returns the AVX-512 table, or NULL when the CPU (or the
// compiler) lacks AVX-512F/BW/VL.
const struct comp__kern       *comp__kern_avx512(void);
// comp__kern returns the table in use (kern.c; see comp_simd_set).
const struct comp__kern       *comp__kern(void);

// Bucketed quantizer (quant.c). b is 8, 4 or 2; 1 means the scaled sign.
// comp__qbits: bits per value of a bucketed quantizer (q8 8, q4 4, q2 2,
// sign 1), 0 for the other codecs.
unsigned comp__qbits(uint32_t id);
size_t   comp__q_size(unsigned b, uint32_t bucket, size_t n);
int comp__q_encode(unsigned b, uint32_t bucket, int stochastic, uint64_t *rng,
    const float *x, size_t n, uint8_t *out);
// comp__q_validate checks an input of exactly comp__q_size bytes.
int comp__q_validate(unsigned b, uint32_t bucket, const uint8_t *in, size_t n);
// Fused error feedback / reference encoding for the bucketed quantizers
// (quant.c): the same bytes and floats as the unfused sequences in
// feedback.c, in two passes over memory. Only where comp__q_fusable.
int comp__q_fusable(unsigned b, uint32_t bucket);
int comp__q_ef_encode(unsigned b, uint32_t bucket, int stochastic,
    uint64_t *rng, const float *g, float *e, size_t n, uint8_t *out);
int comp__q_ref_encode(unsigned b, uint32_t bucket, const float *x, float *ref,
    size_t n, uint8_t *out);
void comp__q_decode(unsigned b, uint32_t bucket, const uint8_t *in, size_t n,
    float *out, int mode);

// fp16 kernels: portable and F16C (both float16_kern.c), the same
// bytes and floats. enc writes n halves little-endian; dec stores per mode.
// bf16_enc is the bf16 encoder (built for AVX2 in the fast table).
struct comp__f16 {
	void (*enc)(const float *x, size_t n, uint8_t *out);
	void (*dec)(const uint8_t *in, size_t n, float *out, int mode);
	void (*bf16_enc)(const float *x, size_t n, uint8_t *out);
};

// comp__bf16_enc_loop is the one bf16 encoder loop, branch-free so that it
// vectorises; each table instantiates it for its target. NaN keeps its top
// bits and gets the quiet bit, as comp__f32_to_bf16 does. Little-endian
// hosts only (float16.c has the byte-wise loop for the others).
static inline void
comp__bf16_enc_loop(const float *x, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, x + i, 4);
		uint32_t r   = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
		uint32_t q   = (u >> 16) | 0x40u;
		uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
		uint16_t h   = (uint16_t) (nan ? q : r);
		memcpy(out + 2 * i, &h, 2);
	}
}
extern const struct comp__f16 comp__f16_portable;
// comp__f16_f16c returns the F16C kernels, or NULL when the CPU (or the
// compiler) lacks F16C and AVX2.
const struct comp__f16       *comp__f16_f16c(void);
// comp__f16 returns the kernels in use (kern.c; see comp_simd_set).
const struct comp__f16       *comp__f16(void);

// fp16 <-> fp32 on bit patterns (float16_kern.c); bf16 and the
// element-wise codecs (float16.c).
uint16_t comp__f32_to_f16(float f);
float    comp__f16_to_f32(uint16_t h);
uint16_t comp__f32_to_bf16(float f);
float    comp__bf16_to_f32(uint16_t h);
void     comp__flt_encode(uint32_t id, const float *x, size_t n, uint8_t *out);
void     comp__flt_decode(uint32_t id, const uint8_t *in, size_t n, float *out,
        int mode);

// topk (topk.c). The size is 4 + 8 * comp_topk_k(ratio, n).
// comp__topk_select finds the k largest |x| (1 <= k <= n; ties to the
// lowest indices) and sets *list to their k indices, increasing, in the
// thread's workspace (comp__work), and *spare to room there for k more
// floats; both stay valid until the thread's next comp call. FB_EINVAL if
// an x is not finite, FB_ENOMEM if the workspace cannot grow.
int  comp__topk_select(const float *x, size_t n, size_t k, uint32_t **list,
     float **spare);
int  comp__topk_encode(size_t k, const float *x, size_t n, uint8_t *out);
int  comp__topk_validate(const uint8_t *in, size_t len, size_t n);
void comp__topk_decode(const uint8_t *in, size_t n, float *out, int mode);

// Sparse composites and random-k (sparse.c): topk+q8/q4 (Elias-Fano
// indices, quantized values), randk and randk+q8/q4 (seeded index set).
// comp__sparse_is: 1 for the ids sparse.c owns. comp__sparse_bits: bits of
// the value quantizer (8, 4), 32 for fp32 values.
int      comp__sparse_is(uint32_t id);
unsigned comp__sparse_bits(uint32_t id);
size_t   comp__sparse_size(const struct comp_codec *c, size_t n);
int  comp__sparse_encode(const struct comp_codec *c, const float *x, size_t n,
     uint64_t *rng, uint8_t *out);
int  comp__sparse_validate(const struct comp_codec *c, const uint8_t *in,
     size_t len, size_t n);
void comp__sparse_decode(const struct comp_codec *c, const uint8_t *in,
    size_t n, float *out, int mode);

// comp__work returns the calling thread's workspace, grown to at least
// `bytes` (work.c), or NULL if it cannot grow. Its contents are the
// caller's until the thread's next comp__work call.
void *comp__work(size_t bytes);

// codec.c internals shared with feedback.c.
int comp__check_enc_args(const struct comp_codec *c, const void *x, size_t n,
    const uint64_t *rng, const uint8_t *out, size_t cap, const size_t *out_len,
    size_t *need);

int comp__encode(const struct comp_codec *c, const float *x, size_t n,
    uint64_t *rng, uint8_t *out, size_t need, size_t *out_len);

void comp__decode(const struct comp_codec *c, const uint8_t *in, size_t n,
    float *out, int mode);

// comp__rng_next is splitmix64: advances *s and returns 64 random bits.
static inline uint64_t
comp__rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint32_t
comp__f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float
comp__u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// comp__store stores a decoded value v into out[i] per mode (SET/ADD/SUB).
static inline void
comp__store(float *out, size_t i, float v, int mode)
{
	if (mode == COMP__SET)
		out[i] = v;
	else if (mode == COMP__ADD)
		out[i] = out[i] + v;
	else
		out[i] = out[i] - v;
}

// comp__rne rounds t (|t| < 2^22) to the nearest integer, ties to even,
// under the default rounding mode, as the vector cvtps2dq does.
static inline float
comp__rne(float t)
{
	const float magic = 12582912.0f; // 1.5 * 2^23
	return (t + magic) - magic;
}

// comp__qround is the quantizer's code of t = x * L / s: clamp to [-L, L],
// then round to nearest even.
static inline int
comp__qround(float t, float L)
{
	t = t > L ? L : t;
	t = t < -L ? -L : t;
	return (int) comp__rne(t);
}

// comp__put_code stores code (b bits) of element i in a packed code area;
// elements arrive in index order (the first code of a byte sets it).
static inline void
comp__put_code(unsigned b, uint8_t *codes, size_t i, unsigned code)
{
	size_t   bit = i * b;
	unsigned off = (unsigned) (bit & 7);
	code &= (1u << b) - 1;
	if (off == 0)
		codes[bit >> 3] = (uint8_t) code;
	else
		codes[bit >> 3] |= (uint8_t) (code << off);
}

// comp__get_code reads the b-bit code of element i.
static inline unsigned
comp__get_code(unsigned b, const uint8_t *codes, size_t i)
{
	size_t bit = i * b;
	return ((unsigned) codes[bit >> 3] >> (bit & 7)) & ((1u << b) - 1);
}

// comp__sext sign-extends a b-bit two's complement code.
static inline int
comp__sext(unsigned code, unsigned b)
{
	unsigned sign = 1u << (b - 1);
	return (int) (code ^ sign) - (int) sign;
}

#endif // COMP_IMPL_H
