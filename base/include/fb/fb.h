// fb/fb.h — the ground floor every Ferry module stands on: error codes,
// logging, allocation hooks, clocks, CRC32, little-endian helpers and the
// all-finite check of fp32 buffers.
//
// Nothing here touches the network. All functions are thread-safe unless a
// comment says otherwise.
#ifndef FB_FB_H
#define FB_FB_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- errors ---------------------------------------------------------------
// One enum for the whole code base. 0 is success; everything else is a
// positive code. OS errors are wrapped as FB_ESYSERR | errno.
enum fb_err {
	FB_OK = 0,
	FB_EINVAL,     // an argument, flag or config value is invalid
	FB_ENOMEM,     // allocation failed
	FB_EPROTO,     // malformed bytes from the network or a file
	FB_ERANGE,     // a value is outside its allowed range
	FB_ENOTFOUND,  // no such tensor, shard, member or file
	FB_ETIMEDOUT,  // a deadline expired
	FB_ECLOSED,    // the object or connection is closed
	FB_ESTATE,     // the call is not valid in the current state
	FB_EREMOTE,    // the peer answered with an error status
	FB_ENOSPC,     // an output buffer (or capacity) is too small
	FB_ECORRUPT,   // a checksum or invariant on stored data failed
	FB_ETRANSPORT, // the transport (nng) failed
	FB_EUNSUPP,    // not supported in this build or configuration
	FB_ESTALE,     // a placement map epoch is out of date
	FB_EBUSY,      // the resource is in use; try again
	FB_EAUTH,      // a message's signature or sender identity failed
	FB_ERR_COUNT,
	FB_ESYSERR = 0x10000000,
};

// fb_strerror returns a static, human-readable description of rv. It never
// returns NULL; unknown codes get a generic text.
const char *fb_strerror(int rv);

// ---- logging --------------------------------------------------------------
enum fb_log_level {
	FB_LOG_ERR = 0,
	FB_LOG_WARN,
	FB_LOG_NOTICE,
	FB_LOG_INFO,
	FB_LOG_DEBUG,
};

// fb_log_level is the current threshold; messages above it are dropped
// before formatting. Set it with fb_log_set_level.
extern int fb_log_threshold;

// fb_log_set_level sets the threshold. fb_log_set_role sets the "<role>-<id>"
// tag printed on each line (copied; at most 31 bytes are kept). Call these at
// start-up, before other threads log.
void fb_log_set_level(int level);
void fb_log_set_role(const char *role);

// fb_log_parse_level maps "err|warn|notice|info|debug" to a level. Returns
// FB_EINVAL for anything else (out is then left untouched).
int fb_log_parse_level(const char *name, int *out);

// fb__log writes one line to stderr:
//   <UTC ISO time> <L> <role> <module>: <message>
// Use the FB_LOG macro, which checks the level first.
void fb__log(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define FB_LOG(level, module, ...)                                            \
	do {                                                                  \
		if ((level) <= fb_log_threshold)                              \
			fb__log((level), (module), __VA_ARGS__);              \
	} while (0)

// FB_ASSERT is for programmer errors only, never for untrusted bytes.
#define FB_ASSERT(x)                                                          \
	do {                                                                  \
		if (!(x))                                                     \
			fb__assert_fail(#x, __FILE__, __LINE__);              \
	} while (0)
void fb__assert_fail(const char *expr, const char *file, int line)
    __attribute__((noreturn));

// ---- memory ---------------------------------------------------------------
// All heap use goes through these. fb_alloc/fb_zalloc return NULL on failure
// (never abort). fb_free(NULL) is a no-op. fb_used_memory reports the bytes
// currently allocated through the hooks.
void  *fb_alloc(size_t n);
void  *fb_zalloc(size_t n);
void  *fb_realloc(void *p, size_t n);
void   fb_free(void *p);
char  *fb_strdup(const char *s);
size_t fb_used_memory(void);

// fb_alloc_fail_after makes the n-th following allocation (and every one
// after it) fail; n < 0 turns failure injection off. For tests only.
void fb_alloc_fail_after(long n);

// fb_malloc_tune sets the C library's allocator so that the large blocks
// of messages received and freed at every round (about 1 MiB each) are
// reused in place rather than mapped, faulted in and handed back to the
// kernel each time (malloc_tune.c's DESIGN: 3x the client's CPU per
// push-pull with 4 sync trainers). Best called first thing in main, before
// other threads allocate: glibc counts mallopt as not thread-safe (its
// settings are plain words a concurrent malloc may read as old or new,
// which only delays their effect); libferry calls it at the first
// ferry_client_open. Returns 1 when the settings were applied, 0
// when nothing was changed: not glibc, a sanitizer's allocator, or malloc
// settings already chosen in GLIBC_TUNABLES.
int fb_malloc_tune(void);

// ---- time -----------------------------------------------------------------
// Monotonic clock in nanoseconds and milliseconds.
uint64_t fb_clock_ns(void);
uint64_t fb_clock_ms(void);

// fb_sleep_us sleeps the calling thread for us microseconds (resumed after
// a signal, so the whole time passes).
void fb_sleep_us(uint64_t us);

// fb_exit_watchdog guards a process's teardown: a detached thread that,
// unless the process has exited by then, logs "<what> took over <seconds>
// s ..." after `seconds` and ends the process with _exit(code). nng 1.5.2
// can hang for good in nng_close (nanomsg/nng#1543); a program whose work
// is done and saved arms this before closing, so that an orchestrator
// waiting for its exit does not wait for ever. One per process (a second
// call is ignored); best effort (without a thread, nothing is armed).
void fb_exit_watchdog(unsigned seconds, int code, const char *what);

// ---- checksums and byte order ---------------------------------------------
// fb_crc32 is the standard CRC-32 (IEEE, zlib's polynomial), seeded with crc
// (0 for a fresh sum).
uint32_t fb_crc32(uint32_t crc, const void *buf, size_t len);

// fb_crc32_copy is fb_crc32 over src that also copies the len bytes to dst
// (which must not overlap src) in the same pass.
uint32_t fb_crc32_copy(uint32_t crc, void *dst, const void *src, size_t len);

static inline void
fb_put_u32le(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
	p[2] = (uint8_t) (v >> 16);
	p[3] = (uint8_t) (v >> 24);
}

static inline uint32_t
fb_get_u32le(const uint8_t *p)
{
	return (uint32_t) p[0] | ((uint32_t) p[1] << 8) |
	    ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

static inline void
fb_put_u16le(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
}

static inline uint16_t
fb_get_u16le(const uint8_t *p)
{
	return (uint16_t) (p[0] | (p[1] << 8));
}

static inline void
fb_put_u64le(uint8_t *p, uint64_t v)
{
	fb_put_u32le(p, (uint32_t) v);
	fb_put_u32le(p + 4, (uint32_t) (v >> 32));
}

static inline uint64_t
fb_get_u64le(const uint8_t *p)
{
	return (uint64_t) fb_get_u32le(p) |
	    ((uint64_t) fb_get_u32le(p + 4) << 32);
}

// float <-> little-endian bytes, bit-exact (no platform struct layout).
static inline void
fb_put_f32le(uint8_t *p, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	fb_put_u32le(p, u);
}

static inline float
fb_get_f32le(const uint8_t *p)
{
	uint32_t u = fb_get_u32le(p);
	float    f;
	memcpy(&f, &u, 4);
	return f;
}

// fb_all_finite reports whether the n fp32 values at p (any alignment: a
// float array or payload bytes) hold no NaN and no Inf. fb_copy_finite
// copies them to dst in the same pass and reports the same. They run over
// every byte a server receives and a trainer pulls: they test the exponent
// bits rather than calling isfinite(), and base/src/finite.c is built with
// -O3, so the loops vectorise whatever the caller's flags (at -O2, GCC
// left the inline loop scalar: a fifth of a pull's time in the trainer).
int fb_all_finite(const void *p, size_t n);
int fb_copy_finite(float *dst, const void *p, size_t n);

// ---- small parsing helpers -------------------------------------------------
// fb_parse_i64 / fb_parse_f64 parse the whole string (no trailing junk) and
// check [min, max]. Return FB_EINVAL (not a number) or FB_ERANGE.
int fb_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int fb_parse_f64(const char *s, double min, double max, double *out);

// ---- id lists in messages -------------------------------------------------
// struct fb_ranges writes ascending ids as compact ranges, "0-7,9,12-13",
// into a caller buffer, for log lines that name many shards or ranks
// without allocating. Init it, add ids in ascending order, then read the
// text with fb_ranges_end. What does not fit ends in "..." (never a cut
// number). Caller storage; no fini.
struct fb_ranges {
	char    *buf;
	size_t   len, k;      // buffer size, bytes written
	uint64_t first, last; // the open range (when n > 0)
	size_t   n;           // ids added
	int      full;        // out of room: "..." written
};

// fb_ranges_init starts an empty list in buf (len >= 4 bytes).
void fb_ranges_init(struct fb_ranges *r, char *buf, size_t len);

// fb_ranges_add appends id, which must be larger than the last one added
// (FB_ASSERT).
void fb_ranges_add(struct fb_ranges *r, uint64_t id);

// fb_ranges_end closes the open range and returns the text (r's buffer;
// "" for no ids). Call it once, after the last fb_ranges_add.
const char *fb_ranges_end(struct fb_ranges *r);

#ifdef __cplusplus
}
#endif
#endif // FB_FB_H
