// scrape.c — see scrape.h: the HTTP client, the text format checker, the
// JSON checker and the doc table reader the endpoint tests share.
#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "scrape.h"

int
pt_http_get(const char *base, const char *path, int *status, char **body)
{
	struct sockaddr_in sa = { 0 };
	struct timeval     tv = { 10, 0 };
	char               host[64], req[512];
	const char        *p;
	int                port, fd;
	size_t             len = 0, cap = 65536;
	char              *buf, *hdr_end;
	ssize_t            k;

	if (sscanf(base, "http://%63[^:]:%d", host, &port) != 2) {
		return -1;
	}
	sa.sin_family = AF_INET;
	sa.sin_port   = htons((uint16_t) port);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
	    (fd = socket(AF_INET, SOCK_STREAM, 0)) < 0) {
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n",
	    path, host, port);
	if (write(fd, req, strlen(req)) != (ssize_t) strlen(req) ||
	    (buf = malloc(cap)) == NULL) {
		close(fd);
		return -1;
	}
	while ((k = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t) k;
		if (len + 1 == cap) {
			char *nb = realloc(buf, cap * 2);
			if (nb == NULL) {
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = '\0';
	if (sscanf(buf, "HTTP/1.%*d %d", status) != 1 ||
	    (hdr_end = strstr(buf, "\r\n\r\n")) == NULL) {
		free(buf);
		return -1;
	}
	p = hdr_end + 4;
	memmove(buf, p, strlen(p) + 1);
	*body = buf;
	return 0;
}

static int
name_start(int c)
{
	return isalpha(c) || c == '_' || c == ':';
}

static int
name_char(int c)
{
	return isalnum(c) || c == '_' || c == ':';
}

// read_name copies a metric or label name at *p into out (n bytes).
static int
read_name(const char **p, char *out, size_t n, int label)
{
	size_t k = 0;
	if (!name_start((unsigned char) **p) || (label && **p == ':')) {
		return -1;
	}
	while (name_char((unsigned char) **p) && !(label && **p == ':')) {
		if (k + 1 >= n) {
			return -1;
		}
		out[k++] = *(*p)++;
	}
	out[k] = '\0';
	return 0;
}

// read_value parses a sample value: a float, +Inf, -Inf or NaN.
static int
read_value(const char **p, double *v)
{
	char *end;
	if (strncmp(*p, "+Inf", 4) == 0) {
		*v = INFINITY;
		*p += 4;
		return 0;
	}
	if (strncmp(*p, "-Inf", 4) == 0) {
		*v = -INFINITY;
		*p += 4;
		return 0;
	}
	if (strncmp(*p, "NaN", 3) == 0) {
		*v = NAN;
		*p += 3;
		return 0;
	}
	*v = strtod(*p, &end);
	if (end == *p) {
		return -1;
	}
	*p = end;
	return 0;
}

struct fam {
	char   name[128];
	char   type[16];
	int    closed;
	// histogram state of the current series
	double last_bucket;
	double inf;
	int    have_inf;
};

#define MAX_FAMS 512

// base_of strips a histogram suffix when fam is a histogram family.
static struct fam *
find_fam(struct fam *fams, int nf, const char *name)
{
	for (int i = 0; i < nf; i++) {
		if (strcmp(fams[i].name, name) == 0) {
			return &fams[i];
		}
	}
	return NULL;
}

#define BAD(...)                                                              \
	do {                                                                  \
		snprintf(why, n, "line %d: ", lineno);                        \
		snprintf(why + strlen(why), n - strlen(why), __VA_ARGS__);    \
		goto bad;                                                     \
	} while (0)

int
pt_prom_check(const char *text, char *why, size_t n)
{
	struct fam *fams = calloc(MAX_FAMS, sizeof(*fams));
	struct fam *cur  = NULL;
	int         nf = 0, samples = 0, lineno = 0;
	const char *line = text;

	if (fams == NULL) {
		snprintf(why, n, "out of memory");
		return -1;
	}
	while (*line) {
		const char *eol = strchr(line, '\n'), *p = line;
		char        name[128], lname[128], sname[128];
		double      v;
		lineno++;
		if (eol == NULL) {
			BAD("the last line has no newline");
		}
		if (*p == '#') {
			char kw[8], type[16];
			if (sscanf(p, "# %7s", kw) == 1 &&
			    (strcmp(kw, "HELP") == 0 ||
			        strcmp(kw, "TYPE") == 0)) {
				p += 2 + strlen(kw);
				if (*p++ != ' ' ||
				    read_name(&p, name, sizeof(name), 0) !=
				        0) {
					BAD("bad %s name", kw);
				}
				struct fam *f = find_fam(fams, nf, name);
				if (f == NULL) {
					if (nf == MAX_FAMS) {
						BAD("too many families");
					}
					if (cur != NULL) {
						cur->closed = 1;
					}
					f = &fams[nf++];
					snprintf(f->name, sizeof(f->name),
					    "%s", name);
					cur = f;
				} else if (f != cur) {
					BAD("%s of %s after another family",
					    kw, name);
				}
				if (strcmp(kw, "TYPE") == 0) {
					if (f->type[0]) {
						BAD("second TYPE of %s", name);
					}
					if (sscanf(p, " %15s", type) != 1 ||
					    (strcmp(type, "counter") &&
					        strcmp(type, "gauge") &&
					        strcmp(type, "histogram") &&
					        strcmp(type, "summary") &&
					        strcmp(type, "untyped"))) {
						BAD("bad TYPE of %s", name);
					}
					snprintf(f->type, sizeof(f->type),
					    "%s", type);
				} else {
					// HELP text: only \\ and \n escapes.
					for (const char *q = p; q < eol; q++) {
						if (*q == '\\' &&
						    q[1] != '\\' &&
						    q[1] != 'n') {
							BAD("bad escape in "
							    "HELP of %s",
							    name);
						}
						q += *q == '\\';
					}
				}
			}
			line = eol + 1;
			continue;
		}
		if (*p == '\n') {
			line = eol + 1;
			continue;
		}
		// A sample: name{labels} value [timestamp]
		if (read_name(&p, sname, sizeof(sname), 0) != 0) {
			BAD("bad sample name");
		}
		const char *le      = NULL;
		char        lev[64] = "";
		if (*p == '{') {
			p++;
			while (*p != '}') {
				if (read_name(&p, lname, sizeof(lname), 1) !=
				        0 ||
				    *p++ != '=' || *p++ != '"') {
					BAD("bad label in %s", sname);
				}
				int    is_le = strcmp(lname, "le") == 0;
				size_t k     = 0;
				while (*p != '"') {
					if (*p == '\n' || *p == '\0') {
						BAD("unterminated label value");
					}
					if (*p == '\\') {
						if (p[1] != '\\' &&
						    p[1] != '"' &&
						    p[1] != 'n') {
							BAD("bad escape in a "
							    "label value");
						}
						p++;
					}
					if (is_le && k + 1 < sizeof(lev)) {
						lev[k++] = *p;
					}
					p++;
				}
				p++;
				if (is_le) {
					lev[k] = '\0';
					le     = lev;
				}
				if (*p == ',') {
					p++;
				} else if (*p != '}') {
					BAD("expected , or } in %s", sname);
				}
			}
			p++;
		}
		if (*p++ != ' ' || read_value(&p, &v) != 0) {
			BAD("bad value of %s", sname);
		}
		if (*p == ' ') { // optional timestamp
			p++;
			strtoll(p, (char **) &p, 10);
		}
		if (p != eol) {
			BAD("trailing bytes after %s", sname);
		}
		// Which family: the name, or a histogram's name + suffix.
		struct fam *f      = find_fam(fams, nf, sname);
		const char *suffix = "";
		if (f == NULL) {
			static const char *const sfx[] = { "_bucket", "_sum",
				"_count" };
			for (int i = 0; i < 3 && f == NULL; i++) {
				size_t sl = strlen(sname), xl = strlen(sfx[i]);
				if (sl > xl &&
				    strcmp(sname + sl - xl, sfx[i]) == 0) {
					snprintf(name, sizeof(name), "%.*s",
					    (int) (sl - xl), sname);
					f = find_fam(fams, nf, name);
					if (f != NULL &&
					    strcmp(f->type, "histogram") &&
					    strcmp(f->type, "summary")) {
						f = NULL;
					}
					suffix = sfx[i];
				}
			}
		}
		if (f == NULL || f->type[0] == '\0') {
			BAD("sample %s before its TYPE", sname);
		}
		if (f != cur) {
			BAD("sample %s apart from its family", sname);
		}
		if (strcmp(f->type, "histogram") == 0) {
			if (*suffix == '\0') {
				BAD("histogram sample %s without a suffix",
				    sname);
			}
			if (strcmp(suffix, "_bucket") == 0) {
				double      b;
				const char *q = le;
				if (le == NULL || read_value(&q, &b) != 0) {
					BAD("bucket of %s without le", sname);
				}
				if (f->have_inf) { // a new series starts
					f->have_inf    = 0;
					f->last_bucket = 0;
				}
				if (v < f->last_bucket) {
					BAD("buckets of %s not cumulative",
					    sname);
				}
				f->last_bucket = v;
				if (isinf(b)) {
					f->inf      = v;
					f->have_inf = 1;
				}
			} else if (strcmp(suffix, "_count") == 0) {
				if (!f->have_inf || v != f->inf) {
					BAD("%s differs from the +Inf bucket",
					    sname);
				}
			}
		} else if (strcmp(f->type, "counter") == 0 && v < 0) {
			BAD("counter %s is negative", sname);
		}
		samples++;
		line = eol + 1;
	}
	free(fams);
	return samples;
bad:
	free(fams);
	return -1;
}

int
pt_prom_has_family(const char *text, const char *name)
{
	char pat[160];
	snprintf(pat, sizeof(pat), "# TYPE %s ", name);
	return strstr(text, pat) != NULL;
}

int
pt_prom_value(const char *text, const char *name, const char *labels,
    double *v)
{
	size_t      nl = strlen(name);
	const char *line;
	for (line = text; line && *line;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		const char *eol = strchr(line, '\n');
		if (*line == '#' || strncmp(line, name, nl) != 0 ||
		    (line[nl] != ' ' && line[nl] != '{')) {
			continue;
		}
		if (labels != NULL && *labels != '\0') {
			const char *hit = strstr(line, labels);
			if (hit == NULL || (eol != NULL && hit > eol)) {
				continue;
			}
		}
		// The value follows the line's last space.
		const char *sp = eol != NULL ? eol : line + strlen(line);
		while (sp > line && sp[-1] != ' ') {
			sp--;
		}
		*v = strtod(sp, NULL);
		return 0;
	}
	return -1;
}

// ---- JSON ------------------------------------------------------------------

static const char *json_value(const char *p, int depth);

static const char *
ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
		p++;
	}
	return p;
}

static const char *
json_string(const char *p)
{
	if (*p++ != '"') {
		return NULL;
	}
	while (*p != '"') {
		if ((unsigned char) *p < 0x20) {
			return NULL;
		}
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++) {
					if (!isxdigit((unsigned char) p[i])) {
						return NULL;
					}
				}
				p += 4;
			} else if (!strchr("\"\\/bfnrt", *p) || *p == '\0') {
				return NULL;
			}
		}
		p++;
	}
	return p + 1;
}

static const char *
json_number(const char *p)
{
	if (*p == '-') {
		p++;
	}
	if (*p == '0') {
		p++;
	} else if (isdigit((unsigned char) *p)) {
		while (isdigit((unsigned char) *p)) {
			p++;
		}
	} else {
		return NULL;
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char) *p)) {
			return NULL;
		}
		while (isdigit((unsigned char) *p)) {
			p++;
		}
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-') {
			p++;
		}
		if (!isdigit((unsigned char) *p)) {
			return NULL;
		}
		while (isdigit((unsigned char) *p)) {
			p++;
		}
	}
	return p;
}

static const char *
json_value(const char *p, int depth)
{
	if (depth > 64) {
		return NULL;
	}
	p = ws(p);
	if (*p == '{' || *p == '[') {
		char close = *p == '{' ? '}' : ']';
		int  obj   = *p == '{';
		p          = ws(p + 1);
		if (*p == close) {
			return p + 1;
		}
		for (;;) {
			if (obj) {
				if ((p = json_string(ws(p))) == NULL) {
					return NULL;
				}
				p = ws(p);
				if (*p++ != ':') {
					return NULL;
				}
			}
			if ((p = json_value(p, depth + 1)) == NULL) {
				return NULL;
			}
			p = ws(p);
			if (*p == close) {
				return p + 1;
			}
			if (*p++ != ',') {
				return NULL;
			}
		}
	}
	if (*p == '"') {
		return json_string(p);
	}
	if (strncmp(p, "true", 4) == 0) {
		return p + 4;
	}
	if (strncmp(p, "false", 5) == 0) {
		return p + 5;
	}
	if (strncmp(p, "null", 4) == 0) {
		return p + 4;
	}
	return json_number(p);
}

int
pt_json_check(const char *text, char *why, size_t n)
{
	const char *end = json_value(text, 0);
	if (end == NULL || *ws(end) != '\0') {
		snprintf(why, n, "not valid JSON (%s)",
		    end == NULL ? "bad value" : "trailing bytes");
		return -1;
	}
	return 0;
}

int
pt_doc_metrics(const char *path, char names[][96], char procs[][64], int max)
{
	FILE *f = fopen(path, "r");
	char  line[1024];
	int   k = 0;
	if (f == NULL) {
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL && k < max) {
		char name[96], type[32], labels[256], proc[64];
		// | `name` | type | labels | process | meaning |
		if (sscanf(line, "| `%95[^`]` | %31[^|]| %255[^|]| %63[^|]|",
		        name, type, labels, proc) != 4 &&
		    sscanf(line, "| `%95[^`]` | %31[^|]| | %63[^|]|", name,
		        type, proc) != 3) {
			continue;
		}
		if (strncmp(name, "ferry_", 6) != 0 ||
		    (strncmp(type, "counter", 7) &&
		        strncmp(type, "gauge", 5) &&
		        strncmp(type, "histogram", 9))) {
			continue;
		}
		snprintf(names[k], 96, "%s", name);
		snprintf(procs[k], 64, "%s", proc);
		k++;
	}
	fclose(f);
	return k;
}
