// text.c — the text writers: a growing buffer, the Prometheus text
// format 0.0.4 lines (HELP, TYPE, samples, with the format's escaping) and
// JSON strings. The endpoints build whole replies with them.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "obs_impl.h"

// reserve makes room for n more bytes plus a NUL; sets w->err on failure.
static int
reserve(struct obs_writer *w, size_t n)
{
	size_t cap;
	char  *b;
	if (w->err != FB_OK) {
		return -1;
	}
	if (w->len + n + 1 <= w->cap) {
		return 0;
	}
	cap = w->cap ? w->cap : 4096;
	while (cap < w->len + n + 1) {
		cap *= 2;
	}
	if ((b = fb_realloc(w->buf, cap)) == NULL) {
		w->err = FB_ENOMEM;
		return -1;
	}
	w->buf = b;
	w->cap = cap;
	return 0;
}

static void
put(struct obs_writer *w, const char *s, size_t n)
{
	if (reserve(w, n) == 0) {
		memcpy(w->buf + w->len, s, n);
		w->len += n;
		w->buf[w->len] = '\0';
	}
}

static void
puts_(struct obs_writer *w, const char *s)
{
	put(w, s, strlen(s));
}

void
obs_writer_fini(struct obs_writer *w)
{
	fb_free(w->buf);
	memset(w, 0, sizeof(*w));
}

void
obs_writer_printf(struct obs_writer *w, const char *fmt, ...)
{
	va_list ap;
	int     n;
	char    small[256];

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		return;
	}
	if ((size_t) n < sizeof(small)) {
		put(w, small, (size_t) n);
		return;
	}
	if (reserve(w, (size_t) n) != 0) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(w->buf + w->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	w->len += (size_t) n;
}

// put_escaped appends s with backslash and newline escaped, and the
// double quote too when quote is set (label values; HELP text keeps it).
static void
put_escaped(struct obs_writer *w, const char *s, int quote)
{
	for (; *s; s++) {
		if (*s == '\\') {
			puts_(w, "\\\\");
		} else if (*s == '\n') {
			puts_(w, "\\n");
		} else if (quote && *s == '"') {
			puts_(w, "\\\"");
		} else {
			put(w, s, 1);
		}
	}
}

void
obs_write_label_value(struct obs_writer *w, const char *s)
{
	put_escaped(w, s, 1);
}

void
obs_write_family(struct obs_writer *w, const char *name, const char *help,
    enum obs_type type)
{
	static const char *const types[] = { "counter", "gauge", "histogram" };
	obs_writer_printf(w, "# HELP %s ", name);
	put_escaped(w, help != NULL ? help : "", 0);
	obs_writer_printf(w, "\n# TYPE %s %s\n", name, types[type]);
}

void
obs_write_sample(struct obs_writer *w, const char *name, const char *labels,
    double v)
{
	puts_(w, name);
	if (labels != NULL && *labels != '\0') {
		obs_writer_printf(w, "{%s}", labels);
	}
	if (isnan(v)) {
		puts_(w, " NaN\n");
	} else if (isinf(v)) {
		puts_(w, v > 0 ? " +Inf\n" : " -Inf\n");
	} else {
		char num[40];
		obs__fmt_double(num, sizeof(num), v);
		obs_writer_printf(w, " %s\n", num);
	}
}

void
obs__fmt_double(char *buf, size_t n, double v)
{
	// The shortest of 15, 16 or 17 digits that reads back as v: 0.005,
	// not 0.0050000000000000001.
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, v);
		if (strtod(buf, NULL) == v) {
			return;
		}
	}
}

void
obs_write_json_string(struct obs_writer *w, const char *s)
{
	puts_(w, "\"");
	for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			obs_writer_printf(w, "\\%c", *p);
		} else if (*p < 0x20) {
			obs_writer_printf(w, "\\u%04x", *p);
		} else {
			put(w, (const char *) p, 1);
		}
	}
	puts_(w, "\"");
}
