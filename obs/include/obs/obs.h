// obs/obs.h — observability for Ferry's processes: a metrics registry
// (counters, gauges, histograms with fixed buckets and fixed label
// values), the Prometheus text format 0.0.4 writer, a tiny JSON writer,
// the process's CPU and memory numbers, and the HTTP endpoints (/metrics,
// /healthz, /readyz, /debug/state) over nng's HTTP server.
//
// DESIGN. obs stands on fb and nng only, beside psw, comp and shard, so
// that both ps_server (scheduler and server roles) and tr (the trainer)
// link it and no arrow points back: fb <- obs <- {ps_server, tr}. libferry
// does not link it (its header stays free of our types); its numbers reach
// the trainer's registry through ferry_client_stats, copied after each
// step by the trainer. Each role object owns one registry (an in-process
// test runs several roles without their names colliding); the program
// hands that registry to obs_http_open.
//
// Two kinds of numbers:
// - Hot-path numbers (requests, bytes, latencies) are series registered
//   at start-up and updated with relaxed atomics: an update is a few
//   atomic adds, takes no lock and never allocates.
// - State numbers (shard versions, parked calls, members, links) belong to
//   structures under their owner's lock. A collector callback, run only
//   when /metrics is scraped (rarely), takes that lock and writes the
//   samples itself through struct obs_writer.
//
// Threading: register (obs_metric_add, obs_collector_add) before the
// registry is shared with other threads (no lock guards the list);
// updates from any thread; obs_registry_write from any thread (the HTTP
// handlers) concurrently with updates.
#ifndef OBS_OBS_H
#define OBS_OBS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "fb/fb.h"

enum obs_type {
	OBS_COUNTER   = 0, // monotonic; integer increments
	OBS_GAUGE     = 1, // a double that goes up and down
	OBS_HISTOGRAM = 2, // cumulative buckets, _sum and _count
};

// Flags of a series (obs_metric_add).
enum obs_flag {
	// Not written while its value (count, for a histogram) is zero: for
	// the long tail of label combinations (every method x every error
	// status) that would otherwise fill a scrape with zeros. The family's
	// HELP and TYPE lines are written either way.
	OBS_HIDE_ZERO = 1u << 0,
};

// Most buckets a histogram may have (+Inf not counted).
#define OBS_MAX_BUCKETS 24

// Bucket bounds in seconds for latencies from 50 us to 60 s.
extern const double obs_latency_buckets[];
extern const size_t obs_latency_nbuckets;

struct obs_registry;
struct obs_metric;

// A growing text buffer that the writers append to. Zero-initialise (or
// OBS_WRITER_INIT), release with obs_writer_fini. After a failed
// allocation err is FB_ENOMEM and later appends do nothing.
struct obs_writer {
	char  *buf;
	size_t len, cap;
	int    err;
};
#define OBS_WRITER_INIT                                                       \
	{                                                                     \
		NULL, 0, 0, FB_OK                                             \
	}

// A collector writes samples at scrape time (see obs_collector_add).
typedef void (*obs_collect_fn)(void *arg, struct obs_writer *w);

// ---- registry -------------------------------------------------------------

// obs_registry_alloc makes an empty registry; release it with
// obs_registry_free. Errors: FB_ENOMEM.
int obs_registry_alloc(struct obs_registry **out);

// obs_registry_free frees r and its series (handles become invalid).
// Nothing may use r any more (stop the HTTP server first). NULL is a
// no-op.
void obs_registry_free(struct obs_registry *r);

// obs_metric_add registers one series of family `name` (Prometheus name
// rules: [a-zA-Z_:][a-zA-Z0-9_:]*) with help text, type and labels, a
// preformatted label list such as `method="Push",status="OK"` (NULL or ""
// for none; values already escaped). A histogram takes its bucket upper
// bounds, ascending, at most OBS_MAX_BUCKETS (copied); the others pass
// NULL, 0. Series of one family share help and type. *out is borrowed
// from r. Start-up only: not safe against concurrent writes.
// Errors: FB_EINVAL (bad name, labels too long, type or buckets that
// disagree with the family), FB_ENOMEM.
int obs_metric_add(struct obs_registry *r, enum obs_type type,
    const char *name, const char *help, const char *labels,
    const double *bounds, size_t nbounds, unsigned flags,
    struct obs_metric **out);

// obs_collector_add adds fn(arg, w), called by every obs_registry_write
// after the registered series, to write samples that are read under a
// lock (obs_write_family, then obs_write_sample for each series). fn runs
// on the scraping thread. Start-up only. Errors: FB_ENOMEM.
int obs_collector_add(struct obs_registry *r, obs_collect_fn fn, void *arg);

// obs_counter_add adds v to counter m. Any thread; no lock, no allocation.
void obs_counter_add(struct obs_metric *m, uint64_t v);

// obs_counter_set sets counter m to v: for a counter that mirrors a
// monotonic count kept elsewhere (libferry's ferry_stats). Any thread.
void obs_counter_set(struct obs_metric *m, uint64_t v);

// obs_gauge_set sets gauge m to v. Any thread; no lock, no allocation.
void obs_gauge_set(struct obs_metric *m, double v);

// obs_gauge_add adds v (may be negative) to gauge m. Any thread.
void obs_gauge_add(struct obs_metric *m, double v);

// obs_histogram_observe counts v into histogram m (its bucket, the sum
// and the count). Any thread; no lock, no allocation.
void obs_histogram_observe(struct obs_metric *m, double v);

// obs_metric_value reads a counter's or gauge's value, or a histogram's
// count (for tests and for derived numbers). Any thread.
double obs_metric_value(const struct obs_metric *m);

// obs_registry_write appends the Prometheus text format 0.0.4 of every
// family of r, then what its collectors write, to w. Any thread.
// Errors: FB_ENOMEM (w->err).
int obs_registry_write(struct obs_registry *r, struct obs_writer *w);

// ---- text writers ---------------------------------------------------------

// obs_writer_fini frees w's buffer and zeroes it. Safe on a zeroed writer.
void obs_writer_fini(struct obs_writer *w);

// obs_writer_printf appends printf-style text to w.
void obs_writer_printf(struct obs_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// obs_write_family appends the `# HELP` and `# TYPE` lines of a family
// (help escaped as the format asks).
void obs_write_family(struct obs_writer *w, const char *name, const char *help,
    enum obs_type type);

// obs_write_sample appends `name{labels} value` (labels NULL or "": no
// braces). Values print exactly (%.17g; +Inf, -Inf, NaN by name).
void obs_write_sample(struct obs_writer *w, const char *name,
    const char *labels, double v);

// obs_write_label_value appends s escaped as a label value (backslash,
// double quote and newline), without the quotes.
void obs_write_label_value(struct obs_writer *w, const char *s);

// obs_write_json_string appends s as a JSON string, quotes included.
void obs_write_json_string(struct obs_writer *w, const char *s);

// ---- the process ----------------------------------------------------------

// obs_process_register adds the process's own numbers to r, read from
// /proc/self at scrape time: ferry_process_cpu_seconds_total,
// ferry_process_resident_memory_bytes, ferry_process_start_time_seconds.
// Errors: FB_ENOMEM.
int obs_process_register(struct obs_registry *r);

// ---- the HTTP endpoints ---------------------------------------------------

struct obs_http;

// What the endpoints serve. ready and state may be NULL (then /readyz is
// always ready and /debug/state is `{}`); both run on nng's HTTP threads
// and may take their owner's locks.
struct obs_http_opts {
	const char          *listen; // "host:port" or "http://host:port"
	struct obs_registry *reg;    // /metrics (required)
	// ready returns 1 when the process is ready to take its share of the
	// job, else 0 with the reason in why (n bytes).
	int (*ready)(void *arg, char *why, size_t n);
	// state writes one JSON object describing the process.
	void (*state)(void *arg, struct obs_writer *w);
	void *arg;
};

// obs_http_url_parse turns a --http-listen value ("host:port", ":port" or
// "http://host:port") into the URL nng listens on. Errors: FB_EINVAL (not
// one of those spellings, or a port out of 0..65535), with the reason in
// why (n bytes).
int obs_http_url_parse(const char *listen, char *url, size_t n, char *why,
    size_t whyn);

// obs_http_open starts serving on opts->listen: GET /metrics (text format
// 0.0.4), /healthz (200 "ok" while the process serves), /readyz (200
// "ready", or 503 with the reason), /debug/state (JSON). Port 0 takes any
// free port (obs_http_url says which). Release with obs_http_close.
// Errors: FB_EINVAL (bad listen value), FB_ETRANSPORT (cannot listen),
// FB_ENOMEM.
int obs_http_open(const struct obs_http_opts *opts, struct obs_http **out);

// obs_http_url returns the base URL it serves, with the bound port, e.g.
// "http://127.0.0.1:41234". Borrowed; valid until close.
const char *obs_http_url(const struct obs_http *h);

// obs_url_file_write writes url and a newline to path through a temp file
// of an unpredictable name (path.XXXXXX, created exclusively) and a
// rename, so that a launcher polling for the file never reads half
// a URL (--url-file, --http-url-file). Errors: FB_ESYSERR | errno.
int obs_url_file_write(const char *path, const char *url);

// obs_http_close stops serving (handlers in flight finish first) and
// frees. NULL is a no-op.
void obs_http_close(struct obs_http *h);

#endif // OBS_OBS_H
