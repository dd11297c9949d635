// config.c — the config engine: reads one program's options from the table
// in options.c through defaults, a `key = value` config file, FERRY_NAME
// environment variables and flags, checks each merged value against its
// type and bounds, answers the typed getters and prints the effective
// configuration (--print-config). The --help text and the docs come from
// config_doc.c.
//
// DESIGN: values are merged as text first and checked only at the end, so
// precedence is decided before anything is parsed: a flag that overrides a
// malformed environment variable or file line hides it completely. The
// file is read after the flags and the environment (its path is itself an
// option, --config or FERRY_CONFIG), and its lines fill only what neither
// set; its structure (unknown keys, duplicates, lines that are not `key =
// value`) is checked whole either way, since a typo in a file is a bug
// whether or not a flag happens to hide it. The file's text stays in one
// buffer that the config owns, cut into NUL-terminated values in place.
// Every message names the option as a flag (and the variable, or the file
// and line, when the value came from one), with its bounds or choices, so a
// user can fix it without the docs.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fb/config.h"

static int errf(int rv, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
errf(int rv, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rv;
}

int
fb_config_env_name(const char *name, char *buf, size_t len)
{
	size_t k = 0;
	if (len < sizeof("FERRY_") + strlen(name)) {
		return FB_ENOSPC;
	}
	memcpy(buf, "FERRY_", 6);
	k = 6;
	for (const char *p = name; *p; p++) {
		char ch  = *p;
		buf[k++] = ch == '-'           ? '_'
		    : (ch >= 'a' && ch <= 'z') ? (char) (ch - 'a' + 'A')
		                               : ch;
	}
	buf[k] = '\0';
	return FB_OK;
}

// find returns the option of roles called name[0..len), or -1.
static int
find(unsigned roles, const char *name, size_t len)
{
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		const struct fb_option *o = &fb_options[id];
		if ((o->roles & roles) != 0 && strlen(o->name) == len &&
		    strncmp(o->name, name, len) == 0) {
			return id;
		}
	}
	return -1;
}

// choice_index returns the position of v among o's '|'-separated choices,
// or -1.
static int
choice_index(const struct fb_option *o, const char *v)
{
	const char *p    = o->choices;
	size_t      vlen = strlen(v);
	for (int i = 0;; i++) {
		size_t n = strcspn(p, "|");
		if (n == vlen && strncmp(p, v, n) == 0) {
			return i;
		}
		if (p[n] == '\0') {
			return -1;
		}
		p += n + 1;
	}
}

// choices_text writes o's choices as "a, b or c".
static void
choices_text(const struct fb_option *o, char *buf, size_t len)
{
	const char *p = o->choices;
	size_t      k = 0;
	buf[0]        = '\0';
	while (*p && k < len) {
		size_t      n   = strcspn(p, "|");
		const char *sep = p == o->choices ? ""
		    : p[n] == '\0'                ? " or "
		                                  : ", ";
		k += (size_t) snprintf(buf + k, len - k, "%s%.*s", sep,
		    (int) n, p);
		p += n + (p[n] == '|');
	}
}

// describe writes how option id's value is shown in a message: "--name" or
// "--name=value" (with value), with " (from FERRY_NAME)" for a variable,
// or "FILE:LINE: name" / "FILE:LINE: name = value" for a file line.
static void
describe(const struct fb_config *c, int id, int with_value, char *buf,
    size_t len)
{
	const struct fb_option       *o = &fb_options[id];
	const struct fb_config_value *v = &c->v[id];
	char                          env[64];
	const char                   *text = v->text ? v->text : "";
	switch (v->source) {
	case FB_CFG_FILE:
		snprintf(buf, len, "%s:%u: %s%s%s", c->file, v->line, o->name,
		    with_value ? " = " : "", with_value ? text : "");
		break;
	case FB_CFG_ENV:
		if (fb_config_env_name(o->name, env, sizeof(env)) != FB_OK) {
			env[0] = '\0';
		}
		snprintf(buf, len, "--%s%s%s (from %s)", o->name,
		    with_value ? "=" : "", with_value ? text : "", env);
		break;
	default:
		snprintf(buf, len, "--%s%s%s", o->name, with_value ? "=" : "",
		    with_value ? text : "");
		break;
	}
}

// check_range parses an FB_OPT_RANGE value `LO:HI` into v (lo, i); head
// names the option and where its value came from, for the error.
static int
check_range(const struct fb_option *o, struct fb_config_value *v,
    const char *head, char *err, size_t errlen)
{
	char        part[2][32];
	const char *colon = strchr(v->text, ':');
	size_t      n     = (size_t) (colon - v->text);
	int64_t     x[2];
	int         rv = FB_OK;

	if (n >= sizeof(part[0]) || strlen(colon + 1) >= sizeof(part[1])) {
		rv = FB_EINVAL;
	} else {
		memcpy(part[0], v->text, n);
		part[0][n] = '\0';
		snprintf(part[1], sizeof(part[1]), "%s", colon + 1);
		for (int k = 0; k < 2 && rv == FB_OK; k++) {
			rv = fb_parse_i64(part[k], o->min, o->max, &x[k]);
		}
	}
	if (rv != FB_OK) {
		return errf(rv, err, errlen,
		    "%s: %s (allowed N or MIN:MAX, each %lld..%lld)", head,
		    rv == FB_ERANGE ? "out of range" : "not an integer range",
		    (long long) o->min, (long long) o->max);
	}
	if (x[0] > x[1]) {
		return errf(FB_ERANGE, err, errlen,
		    "%s: MIN %lld above MAX %lld (allowed N or MIN:MAX)", head,
		    (long long) x[0], (long long) x[1]);
	}
	v->lo = x[0];
	v->i  = x[1];
	return FB_OK;
}

// check parses the merged value of option id into c->v[id].
static int
check(struct fb_config *c, int id, char *err, size_t errlen)
{
	const struct fb_option *o = &fb_options[id];
	struct fb_config_value *v = &c->v[id];
	char                    what[160], head[512];
	int                     rv;
	if (v->text == NULL) {
		return FB_OK;
	}
	if ((o->flags & FB_OPT_NONEMPTY) && *v->text == '\0') {
		describe(c, id, 0, head, sizeof(head));
		return errf(FB_EINVAL, err, errlen, "%s: empty value", head);
	}
	describe(c, id, 1, head, sizeof(head));
	switch (o->type) {
	case FB_OPT_INT:
		if ((o->flags & FB_OPT_RANGE) &&
		    strchr(v->text, ':') != NULL) {
			return check_range(o, v, head, err, errlen);
		}
		rv    = fb_parse_i64(v->text, o->min, o->max, &v->i);
		v->lo = v->i;
		if (rv != FB_OK) {
			return errf(rv, err, errlen,
			    "%s: %s (allowed %lld..%lld)", head,
			    rv == FB_ERANGE ? "out of range"
			                    : "not an integer",
			    (long long) o->min, (long long) o->max);
		}
		return FB_OK;
	case FB_OPT_F64:
		rv = fb_parse_f64(v->text, o->fmin, o->fmax, &v->f);
		if (rv != FB_OK) {
			return errf(rv, err, errlen, "%s: %s (allowed %g..%g)",
			    head,
			    rv == FB_ERANGE ? "out of range" : "not a number",
			    o->fmin, o->fmax);
		}
		return FB_OK;
	case FB_OPT_ENUM:
		if ((v->i = choice_index(o, v->text)) < 0) {
			choices_text(o, what, sizeof(what));
			return errf(FB_EINVAL, err, errlen, "%s: expected %s",
			    head, what);
		}
		return FB_OK;
	default:
		return FB_OK;
	}
}

// load_defaults gives every option of roles its table default, unchecked.
static void
load_defaults(struct fb_config *c, unsigned roles)
{
	memset(c, 0, sizeof(*c));
	c->roles = roles;
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		if (fb_options[id].roles & roles) {
			c->v[id].text   = fb_options[id].def;
			c->v[id].source = FB_CFG_DEFAULT;
		}
	}
}

void
fb_config_init(struct fb_config *c, unsigned roles)
{
	load_defaults(c, roles);
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		// The table's defaults are ours: a bad one is a bug.
		FB_ASSERT((fb_options[id].roles & roles) == 0 ||
		    check(c, id, NULL, 0) == FB_OK);
	}
}

static void
load_env(struct fb_config *c)
{
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		char        env[64];
		const char *s;
		const char *name = fb_options[id].name;
		if ((fb_options[id].roles & c->roles) == 0 ||
		    fb_config_env_name(name, env, sizeof(env)) != FB_OK ||
		    (s = getenv(env)) == NULL) {
			continue;
		}
		c->v[id].text   = s;
		c->v[id].source = FB_CFG_ENV;
	}
}

static int
load_flags(struct fb_config *c, int argc, char **argv, char *err,
    size_t errlen)
{
	for (int a = 1; a < argc; a++) {
		const char *arg = argv[a], *name, *eq;
		size_t      len;
		int         id;
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			c->help = 1;
			return FB_OK;
		}
		if (strcmp(arg, "--print-config") == 0) {
			c->print = 1;
			continue;
		}
		if (strncmp(arg, "--", 2) != 0) {
			return errf(FB_EINVAL, err, errlen,
			    "unexpected argument '%s' (flags start with --)",
			    arg);
		}
		name = arg + 2;
		eq   = strchr(name, '=');
		len  = eq ? (size_t) (eq - name) : strlen(name);
		if ((id = find(c->roles, name, len)) < 0) {
			return errf(FB_EINVAL, err, errlen,
			    "unknown option '--%.*s' (see --help)", (int) len,
			    name);
		}
		if (eq != NULL) {
			c->v[id].text = eq + 1;
		} else if (a + 1 < argc) {
			c->v[id].text = argv[++a];
		} else {
			return errf(FB_EINVAL, err, errlen,
			    "--%s: missing value", fb_options[id].name);
		}
		c->v[id].source = FB_CFG_FLAG;
	}
	return FB_OK;
}

// trim returns s without leading blanks and cuts trailing ones off in
// place (s is NUL-terminated).
static char *
trim(char *s)
{
	size_t n;
	s += strspn(s, " \t");
	n = strlen(s);
	while (n > 0 &&
	    (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) {
		s[--n] = '\0';
	}
	return s;
}

// other_program names who reads an option called key[0..len) when c's
// program does not, or returns NULL when nobody does.
static const char *
other_program(const struct fb_config *c, const char *key, size_t len)
{
	int id = find(~c->roles, key, len);
	if (id < 0) {
		return NULL;
	}
	return (fb_options[id].roles & FB_ROLE_TRAINER) ? "the trainer"
	                                                : "ps-server";
}

// file_line applies one line (NUL-terminated, in the file's buffer) of
// the config file: a blank or comment line is skipped, a `key = value`
// line fills its option unless the environment or a flag set it.
// first[id] is the line that set id before (0: none).
static int
file_line(struct fb_config *c, char *line, uint32_t ln, uint32_t *first,
    char *err, size_t errlen)
{
	char       *eq, *key, *val;
	const char *who;
	int         id;
	line = trim(line);
	if (*line == '\0' || *line == '#') {
		return FB_OK;
	}
	if ((eq = strchr(line, '=')) == NULL) {
		return errf(FB_EINVAL, err, errlen,
		    "%s:%u: expected 'key = value' or a # comment, got '%.60s'",
		    c->file, ln, line);
	}
	*eq = '\0';
	key = trim(line);
	val = trim(eq + 1);
	if (*key == '\0') {
		return errf(FB_EINVAL, err, errlen,
		    "%s:%u: expected 'key = value': no key before '='",
		    c->file, ln);
	}
	if (strncmp(key, "--", 2) == 0) {
		return errf(FB_EINVAL, err, errlen,
		    "%s:%u: write the key without '--': '%.60s'", c->file, ln,
		    key + 2);
	}
	if ((id = find(c->roles, key, strlen(key))) < 0) {
		who = other_program(c, key, strlen(key));
		if (who != NULL) {
			return errf(FB_EINVAL, err, errlen,
			    "%s:%u: '%.60s' is an option of %s, not of this "
			    "program",
			    c->file, ln, key, who);
		}
		return errf(FB_EINVAL, err, errlen,
		    "%s:%u: unknown option '%.60s' (see --help)", c->file, ln,
		    key);
	}
	if (id == FB_OPT_CONFIG) {
		return errf(FB_EINVAL, err, errlen,
		    "%s:%u: 'config' cannot be set in a config file", c->file,
		    ln);
	}
	if (first[id] != 0) {
		return errf(FB_EINVAL, err, errlen,
		    "%s:%u: '%s' set twice (first at line %u)", c->file, ln,
		    key, first[id]);
	}
	first[id] = ln;
	if (c->v[id].source == FB_CFG_DEFAULT) {
		c->v[id].text   = val;
		c->v[id].source = FB_CFG_FILE;
		c->v[id].line   = ln;
	}
	return FB_OK;
}

// read_file reads path whole into a NUL-terminated buffer in *out (free
// with fb_free), refusing a file over FB_CONFIG_FILE_MAX.
static int
read_file(const char *path, char **out, size_t *n, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	int   e;
	if (f == NULL) {
		e = errno;
		return errf(e == ENOENT ? FB_ENOTFOUND : FB_ESYSERR | e, err,
		    errlen, "%s: cannot open the config file: %s", path,
		    strerror(e));
	}
	if ((buf = fb_alloc(FB_CONFIG_FILE_MAX + 2)) == NULL) {
		fclose(f);
		return errf(FB_ENOMEM, err, errlen, "%s: out of memory", path);
	}
	*n = fread(buf, 1, FB_CONFIG_FILE_MAX + 1, f);
	e  = ferror(f) ? (errno != 0 ? errno : EIO) : 0;
	fclose(f);
	if (e != 0 || *n > FB_CONFIG_FILE_MAX) {
		fb_free(buf);
		if (e != 0) {
			return errf(FB_ESYSERR | e, err, errlen,
			    "%s: cannot read the config file: %s", path,
			    strerror(e));
		}
		return errf(FB_EINVAL, err, errlen,
		    "%s: config file larger than %u bytes", path,
		    FB_CONFIG_FILE_MAX);
	}
	buf[*n] = '\0';
	*out    = buf;
	return FB_OK;
}

// load_file reads the config file named by --config / FERRY_CONFIG (if
// any) into c->file_text and applies its lines.
static int
load_file(struct fb_config *c, char *err, size_t errlen)
{
	const char *path                = c->v[FB_OPT_CONFIG].text;
	uint32_t    first[FB_OPT_COUNT] = { 0 };
	size_t      n                   = 0;
	char       *p, *nul;
	uint32_t    ln;
	int         rv;
	if (path == NULL || *path == '\0') {
		return FB_OK;
	}
	c->file = path;
	if ((rv = read_file(path, &c->file_text, &n, err, errlen)) != FB_OK) {
		return rv;
	}
	if ((nul = memchr(c->file_text, '\0', n)) != NULL) {
		ln = 1;
		for (p = c->file_text; p < nul; p++) {
			ln += *p == '\n';
		}
		return errf(FB_EINVAL, err, errlen,
		    "%s:%u: NUL byte (not a text file?)", path, ln);
	}
	p = c->file_text;
	for (ln = 1; *p != '\0'; ln++) {
		char *eol = strchr(p, '\n');
		if (eol != NULL) {
			*eol = '\0';
		}
		if ((rv = file_line(c, p, ln, first, err, errlen)) != FB_OK) {
			return rv;
		}
		if (eol == NULL) {
			break;
		}
		p = eol + 1;
	}
	return FB_OK;
}

int
fb_config_load(struct fb_config *c, unsigned roles, int argc, char **argv,
    char *err, size_t errlen)
{
	int rv;
	load_defaults(c, roles);
	load_env(c);
	if ((rv = load_flags(c, argc, argv, err, errlen)) != FB_OK ||
	    c->help) {
		return rv;
	}
	if ((rv = load_file(c, err, errlen)) != FB_OK) {
		goto fail;
	}
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		if ((fb_options[id].roles & roles) != 0 &&
		    (rv = check(c, id, err, errlen)) != FB_OK) {
			goto fail;
		}
	}
	return FB_OK;
fail:
	fb_config_fini(c);
	return rv;
}

void
fb_config_fini(struct fb_config *c)
{
	fb_free(c->file_text);
	c->file_text = NULL;
}

int
fb_config_source_text(const struct fb_config *c, enum fb_opt id, char *buf,
    size_t len)
{
	const struct fb_config_value *v = &c->v[id];
	char                          env[64];
	int                           n;
	FB_ASSERT((unsigned) id < FB_OPT_COUNT);
	switch (v->source) {
	case FB_CFG_FILE:
		n = snprintf(buf, len, "file %s:%u", c->file, v->line);
		break;
	case FB_CFG_ENV:
		if (fb_config_env_name(fb_options[id].name, env,
		        sizeof(env)) != FB_OK) {
			env[0] = '\0';
		}
		n = snprintf(buf, len, "env %s", env);
		break;
	case FB_CFG_FLAG:
		n = snprintf(buf, len, "flag");
		break;
	default:
		n = snprintf(buf, len, "default");
		break;
	}
	return n >= 0 && (size_t) n < len ? FB_OK : FB_ENOSPC;
}

void
fb_config_print(const struct fb_config *c, FILE *f)
{
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		char from[4200];
		if ((fb_options[id].roles & c->roles) == 0) {
			continue;
		}
		fb_config_source_text(c, (enum fb_opt) id, from, sizeof(from));
		fprintf(f, "%s = %s  # %s\n", fb_options[id].name,
		    c->v[id].text ? c->v[id].text : "", from);
	}
}

// value returns c's entry for id after checking that the caller asked for
// an option of c's roles with the getter of its type.
static const struct fb_config_value *
value(const struct fb_config *c, enum fb_opt id, int type)
{
	FB_ASSERT((unsigned) id < FB_OPT_COUNT);
	FB_ASSERT((fb_options[id].roles & c->roles) != 0);
	FB_ASSERT(type < 0 || (int) fb_options[id].type == type);
	return &c->v[id];
}

const char *
fb_config_str(const struct fb_config *c, enum fb_opt id)
{
	return value(c, id, -1)->text;
}

int64_t
fb_config_int(const struct fb_config *c, enum fb_opt id)
{
	return value(c, id, FB_OPT_INT)->i;
}

void
fb_config_range(const struct fb_config *c, enum fb_opt id, int64_t *lo,
    int64_t *hi)
{
	const struct fb_config_value *v = value(c, id, FB_OPT_INT);
	FB_ASSERT(fb_options[id].flags & FB_OPT_RANGE);
	*lo = v->lo;
	*hi = v->i;
}

double
fb_config_f64(const struct fb_config *c, enum fb_opt id)
{
	return value(c, id, FB_OPT_F64)->f;
}

int
fb_config_enum(const struct fb_config *c, enum fb_opt id)
{
	return (int) value(c, id, FB_OPT_ENUM)->i;
}

enum fb_config_source
fb_config_source_of(const struct fb_config *c, enum fb_opt id)
{
	return value(c, id, -1)->source;
}
