// base.c — error strings, logging, allocation hooks, clock, parsing.
//
// The allocator keeps a small header in front of every block so that
// fb_used_memory can report live bytes without a global lock (relaxed
// atomics), and tests can inject failures with fb_alloc_fail_after.
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fb/fb.h"

// ---- errors ---------------------------------------------------------------
static const char *const err_text[FB_ERR_COUNT] = {
	[FB_OK]         = "ok",
	[FB_EINVAL]     = "invalid argument",
	[FB_ENOMEM]     = "out of memory",
	[FB_EPROTO]     = "protocol error (malformed input)",
	[FB_ERANGE]     = "value out of range",
	[FB_ENOTFOUND]  = "not found",
	[FB_ETIMEDOUT]  = "timed out",
	[FB_ECLOSED]    = "closed",
	[FB_ESTATE]     = "invalid in the current state",
	[FB_EREMOTE]    = "remote peer returned an error",
	[FB_ENOSPC]     = "buffer or capacity too small",
	[FB_ECORRUPT]   = "checksum or data corruption",
	[FB_ETRANSPORT] = "transport error",
	[FB_EUNSUPP]    = "not supported",
	[FB_ESTALE]     = "stale placement epoch",
	[FB_EBUSY]      = "resource busy",
	[FB_EAUTH]      = "authentication failed",
};

const char *
fb_strerror(int rv)
{
	if (rv & FB_ESYSERR) {
		// strerror is not thread-safe in theory; glibc's is for
		// known errno values, which are all we pass.
		return strerror(rv & ~FB_ESYSERR);
	}
	if (rv >= 0 && rv < FB_ERR_COUNT && err_text[rv] != NULL) {
		return err_text[rv];
	}
	return "unknown error";
}

// ---- logging --------------------------------------------------------------
int         fb_log_threshold = FB_LOG_NOTICE;
static char log_role[32]     = "ferry";

void
fb_log_set_level(int level)
{
	fb_log_threshold = level;
}

void
fb_log_set_role(const char *role)
{
	snprintf(log_role, sizeof(log_role), "%s", role ? role : "ferry");
}

int
fb_log_parse_level(const char *name, int *out)
{
	static const char *names[] = { "err", "warn", "notice", "info",
		"debug" };
	for (int i = 0; i < 5; i++) {
		if (name != NULL && strcmp(name, names[i]) == 0) {
			*out = i;
			return FB_OK;
		}
	}
	return FB_EINVAL;
}

void
fb__log(int level, const char *module, const char *fmt, ...)
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
fb__assert_fail(const char *expr, const char *file, int line)
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
fb_alloc_fail_after(long n)
{
	atomic_store(&fail_after, n);
}

void *
fb_alloc(size_t n)
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
fb_zalloc(size_t n)
{
	void *p = fb_alloc(n);
	if (p != NULL) {
		memset(p, 0, n);
	}
	return p;
}

void *
fb_realloc(void *ptr, size_t n)
{
	if (ptr == NULL) {
		return fb_alloc(n);
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
fb_free(void *ptr)
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
fb_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char  *d = fb_alloc(n);
	if (d != NULL) {
		memcpy(d, s, n);
	}
	return d;
}

size_t
fb_used_memory(void)
{
	return atomic_load_explicit(&used_memory, memory_order_relaxed);
}

// ---- time -----------------------------------------------------------------
uint64_t
fb_clock_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

uint64_t
fb_clock_ms(void)
{
	return fb_clock_ns() / 1000000u;
}

void
fb_sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t) (us / 1000000u),
		(long) (us % 1000000u) * 1000 };
	// Restart after a signal so that the caller sleeps the whole time.
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

// The one armed watchdog (static: its thread may outlive every caller).
static struct {
	atomic_int  armed;
	unsigned    seconds;
	int         code;
	const char *what;
} watchdog;

static void *
watchdog_main(void *arg)
{
	(void) arg;
	fb_sleep_us((uint64_t) watchdog.seconds * 1000000u);
	FB_LOG(FB_LOG_ERR, "exit",
	    "%s took over %u s (nng 1.5.2 can hang in nng_close, "
	    "nanomsg/nng#1543); exiting with status %d",
	    watchdog.what, watchdog.seconds, watchdog.code);
	fflush(NULL);
	_exit(watchdog.code);
}

void
fb_exit_watchdog(unsigned seconds, int code, const char *what)
{
	pthread_t th;
	if (atomic_exchange(&watchdog.armed, 1)) {
		return;
	}
	watchdog.seconds = seconds;
	watchdog.code    = code;
	watchdog.what    = what;
	fflush(NULL); // what was written so far is out before any _exit
	if (pthread_create(&th, NULL, watchdog_main, NULL) == 0) {
		pthread_detach(th);
	}
}

// ---- parsing --------------------------------------------------------------
int
fb_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char     *end;
	long long v;
	if (s == NULL || *s == '\0') {
		return FB_EINVAL;
	}
	errno = 0;
	v     = strtoll(s, &end, 10);
	if (*end != '\0') {
		return FB_EINVAL;
	}
	if (errno == ERANGE || v < min || v > max) {
		return FB_ERANGE;
	}
	*out = (int64_t) v;
	return FB_OK;
}

int
fb_parse_f64(const char *s, double min, double max, double *out)
{
	char  *end;
	double v;
	if (s == NULL || *s == '\0') {
		return FB_EINVAL;
	}
	errno = 0;
	v     = strtod(s, &end);
	if (*end != '\0' || isnan(v)) {
		return FB_EINVAL;
	}
	if (errno == ERANGE || v < min || v > max) {
		return FB_ERANGE;
	}
	*out = v;
	return FB_OK;
}

// ---- id lists --------------------------------------------------------------
void
fb_ranges_init(struct fb_ranges *r, char *buf, size_t len)
{
	FB_ASSERT(len >= 4);
	memset(r, 0, sizeof(*r));
	r->buf    = buf;
	r->len    = len;
	r->buf[0] = '\0';
}

// ranges_flush writes the open range, or "..." when it does not fit with
// room left for a later "...".
static void
ranges_flush(struct fb_ranges *r)
{
	char   piece[48];
	size_t n;
	if (r->full || r->n == 0) {
		return;
	}
	if (r->first == r->last) {
		n = (size_t) snprintf(piece, sizeof(piece), "%s%llu",
		    r->k ? "," : "", (unsigned long long) r->first);
	} else {
		n = (size_t) snprintf(piece, sizeof(piece), "%s%llu-%llu",
		    r->k ? "," : "", (unsigned long long) r->first,
		    (unsigned long long) r->last);
	}
	if (r->k + n + 3 < r->len) {
		memcpy(r->buf + r->k, piece, n + 1);
		r->k += n;
	} else {
		memcpy(r->buf + r->k, "...", 4);
		r->k += 3;
		r->full = 1;
	}
}

void
fb_ranges_add(struct fb_ranges *r, uint64_t id)
{
	FB_ASSERT(r->n == 0 || id > r->last);
	if (r->n > 0 && id == r->last + 1) {
		r->last = id;
	} else {
		ranges_flush(r);
		r->first = r->last = id;
	}
	r->n++;
}

const char *
fb_ranges_end(struct fb_ranges *r)
{
	ranges_flush(r);
	r->n = 0;
	return r->buf;
}
