// config.c — the config engine: reads one program's options from the table
// in options.c through defaults, FERRY_NAME environment variables and
// flags, checks each merged value against its type and bounds, and answers
// the typed getters. The --help text and the docs come from config_doc.c.
//
// DESIGN: values are merged as text first and checked only at the end, so
// precedence is decided before anything is parsed: a flag that overrides a
// malformed environment variable hides it completely. Every message names
// the option as a flag (and the variable, when the value came from one),
// with its bounds or choices, so a user can fix it without the docs.
#include <stdarg.h>
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

// check parses the merged value of option id into c->v[id].
static int
check(struct fb_config *c, int id, char *err, size_t errlen)
{
	const struct fb_option *o        = &fb_options[id];
	struct fb_config_value *v        = &c->v[id];
	char                    from[80] = "", env[64], what[160];
	int                     rv;
	if (v->text == NULL) {
		return FB_OK;
	}
	if (v->source == FB_CFG_ENV &&
	    fb_config_env_name(o->name, env, sizeof(env)) == FB_OK) {
		snprintf(from, sizeof(from), " (from %s)", env);
	}
	if ((o->flags & FB_OPT_NONEMPTY) && *v->text == '\0') {
		return errf(FB_EINVAL, err, errlen, "--%s: empty value%s",
		    o->name, from);
	}
	switch (o->type) {
	case FB_OPT_INT:
		rv = fb_parse_i64(v->text, o->min, o->max, &v->i);
		if (rv != FB_OK) {
			return errf(rv, err, errlen,
			    "--%s=%s%s: %s (allowed %lld..%lld)", o->name,
			    v->text, from,
			    rv == FB_ERANGE ? "out of range"
			                    : "not an integer",
			    (long long) o->min, (long long) o->max);
		}
		return FB_OK;
	case FB_OPT_F64:
		rv = fb_parse_f64(v->text, o->fmin, o->fmax, &v->f);
		if (rv != FB_OK) {
			return errf(rv, err, errlen,
			    "--%s=%s%s: %s (allowed %g..%g)", o->name, v->text,
			    from,
			    rv == FB_ERANGE ? "out of range" : "not a number",
			    o->fmin, o->fmax);
		}
		return FB_OK;
	case FB_OPT_ENUM:
		if ((v->i = choice_index(o, v->text)) < 0) {
			choices_text(o, what, sizeof(what));
			return errf(FB_EINVAL, err, errlen,
			    "--%s=%s%s: expected %s", o->name, v->text, from,
			    what);
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
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		if ((fb_options[id].roles & roles) != 0 &&
		    (rv = check(c, id, err, errlen)) != FB_OK) {
			return rv;
		}
	}
	return FB_OK;
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
