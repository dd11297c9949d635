// base.c — error strings, logging, allocation hooks, clock, parsing.
//
// The allocator keeps a small header in front of every block so that
// ps_used_memory can report live bytes without a global lock (relaxed
// atomics), and tests can inject failures with ps_alloc_fail_after.
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ps/base.h"

// ---- errors ---------------------------------------------------------------
static const char *const err_text[PS_ERR_COUNT] = {
	[PS_OK]         = "ok",
	[PS_EINVAL]     = "invalid argument",
	[PS_ENOMEM]     = "out of memory",
	[PS_EPROTO]     = "protocol error (malformed input)",
	[PS_ERANGE]     = "value out of range",
	[PS_ENOTFOUND]  = "not found",
	[PS_ETIMEDOUT]  = "timed out",
	[PS_ECLOSED]    = "closed",
	[PS_ESTATE]     = "invalid in the current state",
	[PS_EREMOTE]    = "remote peer returned an error",
	[PS_ENOSPC]     = "buffer or capacity too small",
	[PS_ECORRUPT]   = "checksum or data corruption",
	[PS_ETRANSPORT] = "transport error",
	[PS_EUNSUPP]    = "not supported",
	[PS_ESTALE]     = "stale placement epoch",
	[PS_EBUSY]      = "resource busy",
};

const char *
ps_strerror(int rv)
{
	if (rv & PS_ESYSERR) {
		// strerror is not thread-safe in theory; glibc's is for
		// known errno values, which are all we pass.
		return strerror(rv & ~PS_ESYSERR);
	}
	if (rv >= 0 && rv < PS_ERR_COUNT && err_text[rv] != NULL) {
		return err_text[rv];
	}
	return "unknown error";
}

// ---- logging --------------------------------------------------------------
int         ps_log_threshold = PS_LOG_NOTICE;
static char log_role[32]     = "ferry";

void
ps_log_set_level(int level)
{
	ps_log_threshold = level;
}

void
ps_log_set_role(const char *role)
{
	snprintf(log_role, sizeof(log_role), "%s", role ? role : "ferry");
}

int
ps_log_parse_level(const char *name, int *out)
{
	static const char *names[] = { "err", "warn", "notice", "info",
		"debug" };
	for (int i = 0; i < 5; i++) {
		if (name != NULL && strcmp(name, names[i]) == 0) {
			*out = i;
			return PS_OK;
		}
	}
	return PS_EINVAL;
}

void
ps__log(int level, const char *module, const char *fmt, ...)
{
	static const char lv[] = "EWNID";
	char              line[1024];
	struct timespec   ts;
	struct tm         tm;
	int               n;
	va_list           ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
	    "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c %s %s: ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
	    lv[level < 0 ? 0 : (level > 4 ? 4 : level)], log_role, module);
	if (n < 0 || (size_t) n >= sizeof(line)) {
		n = 0;
	}
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t) n - 1, fmt, ap);
	va_end(ap);
	// One fputs per line so concurrent threads do not interleave.
	size_t len = strlen(line);
	line[len]  = '\n';
	fwrite(line, 1, len + 1, stderr);
}

void
ps__assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "assertion failed: %s (%s:%d)\n", expr, file, line);
	abort();
}

// ---- memory ---------------------------------------------------------------
// 16-byte header keeps user pointers aligned as malloc's are.
#define HDR 16
static atomic_size_t used_memory;
static atomic_long   fail_after = -1;

static int
should_fail(void)
{
	long n = atomic_load_explicit(&fail_after, memory_order_relaxed);
	if (n < 0) {
		return 0;
	}
	if (n == 0) {
		return 1;
	}
	atomic_fetch_sub_explicit(&fail_after, 1, memory_order_relaxed);
	return 0;
}

void
ps_alloc_fail_after(long n)
{
	atomic_store(&fail_after, n);
}

void *
ps_alloc(size_t n)
{
	if (should_fail() || n > SIZE_MAX - HDR) {
		return NULL;
	}
	unsigned char *p = malloc(n + HDR);
	if (p == NULL) {
		return NULL;
	}
	memcpy(p, &n, sizeof(n));
	atomic_fetch_add_explicit(&used_memory, n, memory_order_relaxed);
	return p + HDR;
}

void *
ps_zalloc(size_t n)
{
	void *p = ps_alloc(n);
	if (p != NULL) {
		memset(p, 0, n);
	}
	return p;
}

void *
ps_realloc(void *ptr, size_t n)
{
	if (ptr == NULL) {
		return ps_alloc(n);
	}
	if (should_fail() || n > SIZE_MAX - HDR) {
		return NULL;
	}
	unsigned char *base = (unsigned char *) ptr - HDR;
	size_t         old;
	memcpy(&old, base, sizeof(old));
	unsigned char *p = realloc(base, n + HDR);
	if (p == NULL) {
		return NULL;
	}
	memcpy(p, &n, sizeof(n));
	atomic_fetch_sub_explicit(&used_memory, old, memory_order_relaxed);
	atomic_fetch_add_explicit(&used_memory, n, memory_order_relaxed);
	return p + HDR;
}

void
ps_free(void *ptr)
{
	if (ptr == NULL) {
		return;
	}
	unsigned char *base = (unsigned char *) ptr - HDR;
	size_t         n;
	memcpy(&n, base, sizeof(n));
	atomic_fetch_sub_explicit(&used_memory, n, memory_order_relaxed);
	free(base);
}

char *
ps_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char  *d = ps_alloc(n);
	if (d != NULL) {
		memcpy(d, s, n);
	}
	return d;
}

size_t
ps_used_memory(void)
{
	return atomic_load_explicit(&used_memory, memory_order_relaxed);
}

// ---- time -----------------------------------------------------------------
uint64_t
ps_clock_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

uint64_t
ps_clock_ms(void)
{
	return ps_clock_ns() / 1000000u;
}

// ---- parsing --------------------------------------------------------------
int
ps_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char     *end;
	long long v;
	if (s == NULL || *s == '\0') {
		return PS_EINVAL;
	}
	errno = 0;
	v     = strtoll(s, &end, 10);
	if (*end != '\0') {
		return PS_EINVAL;
	}
	if (errno == ERANGE || v < min || v > max) {
		return PS_ERANGE;
	}
	*out = (int64_t) v;
	return PS_OK;
}

int
ps_parse_f64(const char *s, double min, double max, double *out)
{
	char  *end;
	double v;
	if (s == NULL || *s == '\0') {
		return PS_EINVAL;
	}
	errno = 0;
	v     = strtod(s, &end);
	if (*end != '\0' || isnan(v)) {
		return PS_EINVAL;
	}
	if (errno == ERANGE || v < min || v > max) {
		return PS_ERANGE;
	}
	*out = v;
	return PS_OK;
}
