// ps/base.h — the ground floor every Ferry module stands on: error codes,
// logging, allocation hooks, clocks, CRC32 and little-endian helpers.
//
// Nothing here touches the network. All functions are thread-safe unless a
// comment says otherwise.
#ifndef PS_BASE_H
#define PS_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- errors ---------------------------------------------------------------
// One enum for the whole code base. 0 is success; everything else is a
// positive code. OS errors are wrapped as PS_ESYSERR | errno.
enum ps_err {
	PS_OK = 0,
	PS_EINVAL,     // an argument, flag or config value is invalid
	PS_ENOMEM,     // allocation failed
	PS_EPROTO,     // malformed bytes from the network or a file
	PS_ERANGE,     // a value is outside its allowed range
	PS_ENOTFOUND,  // no such tensor, shard, member or file
	PS_ETIMEDOUT,  // a deadline expired
	PS_ECLOSED,    // the object or connection is closed
	PS_ESTATE,     // the call is not valid in the current state
	PS_EREMOTE,    // the peer answered with an error status
	PS_ENOSPC,     // an output buffer (or capacity) is too small
	PS_ECORRUPT,   // a checksum or invariant on stored data failed
	PS_ETRANSPORT, // the transport (nng) failed
	PS_EUNSUPP,    // not supported in this build or configuration
	PS_ESTALE,     // a placement map epoch is out of date
	PS_EBUSY,      // the resource is in use; try again
	PS_ERR_COUNT,
	PS_ESYSERR = 0x10000000,
};

// ps_strerror returns a static, human-readable description of rv. It never
// returns NULL; unknown codes get a generic text.
const char *ps_strerror(int rv);

// ---- logging --------------------------------------------------------------
enum ps_log_level {
	PS_LOG_ERR = 0,
	PS_LOG_WARN,
	PS_LOG_NOTICE,
	PS_LOG_INFO,
	PS_LOG_DEBUG,
};

// ps_log_level is the current threshold; messages above it are dropped
// before formatting. Set it with ps_log_set_level.
extern int ps_log_threshold;

// ps_log_set_level sets the threshold. ps_log_set_role sets the "<role>-<id>"
// tag printed on each line (copied; at most 31 bytes are kept). Call these at
// start-up, before other threads log.
void ps_log_set_level(int level);
void ps_log_set_role(const char *role);

// ps_log_parse_level maps "err|warn|notice|info|debug" to a level. Returns
// PS_EINVAL for anything else (out is then left untouched).
int ps_log_parse_level(const char *name, int *out);

// ps__log writes one line to stderr:
//   <UTC ISO time> <L> <role> <module>: <message>
// Use the PS_LOG macro, which checks the level first.
void ps__log(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define PS_LOG(level, module, ...)                                       \
	do {                                                             \
		if ((level) <= ps_log_threshold)                         \
			ps__log((level), (module), __VA_ARGS__);          \
	} while (0)

// PS_ASSERT is for programmer errors only, never for untrusted bytes.
#define PS_ASSERT(x)                                                      \
	do {                                                              \
		if (!(x))                                                 \
			ps__assert_fail(#x, __FILE__, __LINE__);          \
	} while (0)
void ps__assert_fail(const char *expr, const char *file, int line)
    __attribute__((noreturn));

// ---- memory ---------------------------------------------------------------
// All heap use goes through these. ps_alloc/ps_zalloc return NULL on failure
// (never abort). ps_free(NULL) is a no-op. ps_used_memory reports the bytes
// currently allocated through the hooks.
void  *ps_alloc(size_t n);
void  *ps_zalloc(size_t n);
void  *ps_realloc(void *p, size_t n);
void   ps_free(void *p);
char  *ps_strdup(const char *s);
size_t ps_used_memory(void);

// ps_alloc_fail_after makes the n-th following allocation (and every one
// after it) fail; n < 0 turns failure injection off. For tests only.
void ps_alloc_fail_after(long n);

// ---- time -----------------------------------------------------------------
// Monotonic clock in nanoseconds and milliseconds.
uint64_t ps_clock_ns(void);
uint64_t ps_clock_ms(void);

// ---- checksums and byte order ---------------------------------------------
// ps_crc32 is the standard CRC-32 (IEEE, zlib's polynomial), seeded with crc
// (0 for a fresh sum).
uint32_t ps_crc32(uint32_t crc, const void *buf, size_t len);

// ps_crc32_copy is ps_crc32 over src that also copies the len bytes to dst
// (which must not overlap src) in the same pass.
uint32_t ps_crc32_copy(uint32_t crc, void *dst, const void *src, size_t len);

static inline void
ps_put_u32le(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
	p[2] = (uint8_t) (v >> 16);
	p[3] = (uint8_t) (v >> 24);
}

static inline uint32_t
ps_get_u32le(const uint8_t *p)
{
	return (uint32_t) p[0] | ((uint32_t) p[1] << 8) |
	    ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

static inline void
ps_put_u16le(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
}

static inline uint16_t
ps_get_u16le(const uint8_t *p)
{
	return (uint16_t) (p[0] | (p[1] << 8));
}

// float <-> little-endian bytes, bit-exact (no platform struct layout).
static inline void
ps_put_f32le(uint8_t *p, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	ps_put_u32le(p, u);
}

static inline float
ps_get_f32le(const uint8_t *p)
{
	uint32_t u = ps_get_u32le(p);
	float    f;
	memcpy(&f, &u, 4);
	return f;
}

// ---- small parsing helpers -------------------------------------------------
// ps_parse_i64 / ps_parse_f64 parse the whole string (no trailing junk) and
// check [min, max]. Return PS_EINVAL (not a number) or PS_ERANGE.
int ps_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int ps_parse_f64(const char *s, double min, double max, double *out);

#ifdef __cplusplus
}
#endif
#endif // PS_BASE_H
