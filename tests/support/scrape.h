// scrape.h — test helpers for the HTTP endpoints (obs/): a minimal HTTP
// GET over a raw socket, a checker of the Prometheus text format 0.0.4,
// sample look-up, a JSON syntax checker, and the metric table of
// docs/operations.md. Test code only: errors are returned, not asserted,
// so a test can say what was wrong.
#ifndef PT_SCRAPE_H
#define PT_SCRAPE_H

#include <stddef.h>

// pt_http_get fetches base_url + path ("http://127.0.0.1:PORT" + "/metrics")
// with HTTP/1.1 and Connection: close. On success returns 0 with the
// status in *status and the body in *body (malloc'd, NUL-terminated; free
// it). Returns -1 when no answer could be read.
int pt_http_get(const char *base_url, const char *path, int *status,
    char **body);

// pt_prom_check checks text against the Prometheus text format 0.0.4:
// HELP/TYPE lines, names, label syntax and escapes, values, TYPE before
// and at most once per family, a family's samples together, histograms
// with cumulative `le` buckets ending in +Inf equal to _count. Returns the
// number of samples, or -1 with the first problem (and its line) in why.
int pt_prom_check(const char *text, char *why, size_t n);

// pt_prom_has_family says whether text declares family name (# TYPE).
int pt_prom_has_family(const char *text, const char *name);

// pt_prom_value finds the sample `name` whose label list contains
// `labels` (e.g. `method="PushPull"`; NULL or "": the first sample of
// name) and stores its value in *v. Returns 0, or -1 when absent.
int pt_prom_value(const char *text, const char *name, const char *labels,
    double *v);

// pt_json_check says whether text is one valid JSON value (RFC 8259),
// surrounding whitespace allowed: 0, or -1 with the offset in why.
int pt_json_check(const char *text, char *why, size_t n);

// pt_doc_metrics reads the metric table of docs/operations.md at path:
// the names (up to max, each < 96 bytes) of rows whose type is counter,
// gauge or histogram, and their process column (who exports them).
// Returns how many, or -1 when the file cannot be read.
int pt_doc_metrics(const char *path, char names[][96], char procs[][64],
    int max);

#endif // PT_SCRAPE_H
