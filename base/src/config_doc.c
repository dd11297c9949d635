// config_doc.c — the text the option table turns into: each program's
// --help, the Markdown option tables of docs/operations.md, and the
// rewrite of those tables in place (used by the fb-options tool, and by the
// test that fails when the committed docs differ from the table).
//
// DESIGN: the docs carry their generated tables between marker comments
// (`<!-- fb-options:ps ... -->` ... `<!-- /fb-options -->`), so prose around
// them stays hand-written while the list of options cannot go stale.
#include <string.h>

#include "fb/config.h"

#define MD_BEGIN "<!-- fb-options:"
#define MD_END "<!-- /fb-options -->"

// shown_default is what --help and the docs give as o's default.
static const char *
shown_default(const struct fb_option *o)
{
	if (o->def != NULL && *o->def != '\0') {
		return o->def;
	}
	return o->unset != NULL ? o->unset : "none";
}

void
fb_config_usage(FILE *f, unsigned roles, const char *usage)
{
	fprintf(f,
	    "%s\nEach option can also be set as FERRY_<NAME> in the "
	    "environment (upper case, dashes as underscores) or as a "
	    "`name = value` line of the --config file; a flag wins over "
	    "the environment, which wins over the file.\n\n",
	    usage);
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		const struct fb_option *o = &fb_options[id];
		if ((o->roles & roles) == 0) {
			continue;
		}
		fprintf(f, "  --%-18s %s (default: %s", o->name, o->help,
		    shown_default(o));
		if (o->type == FB_OPT_INT) {
			fprintf(f, "; %lld..%lld", (long long) o->min,
			    (long long) o->max);
		} else if (o->type == FB_OPT_F64) {
			fprintf(f, "; %g..%g", o->fmin, o->fmax);
		}
		fprintf(f, ")\n");
	}
	fprintf(f, "  --%-18s %s\n", "print-config",
	    "print every option's value and where it came from, then exit");
	fprintf(f, "  --%-18s %s\n", "help", "print this help and exit");
}

// md_text prints s with the table cell separator escaped.
static void
md_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '|') {
			fputc('\\', f);
		}
		fputc(*s, f);
	}
}

static const char *
role_words(unsigned roles)
{
	switch (roles) {
	case FB_ROLE_SCHEDULER:
		return "scheduler";
	case FB_ROLE_SERVER:
		return "server";
	case FB_ROLE_TRAINER:
		return "trainer";
	case FB_ROLE_PS:
		return "both";
	default:
		return "several";
	}
}

static void
md_allowed(FILE *f, const struct fb_option *o)
{
	const char *p = o->choices;
	switch (o->type) {
	case FB_OPT_INT:
		fprintf(f, "%lld..%lld", (long long) o->min,
		    (long long) o->max);
		break;
	case FB_OPT_F64:
		fprintf(f, "%g..%g", o->fmin, o->fmax);
		break;
	case FB_OPT_ENUM:
		while (*p) {
			size_t n = strcspn(p, "|");
			fprintf(f, "%s`%.*s`", p == o->choices ? "" : ", ",
			    (int) n, p);
			p += n + (p[n] == '|');
		}
		break;
	default:
		fprintf(f,
		    (o->flags & FB_OPT_NONEMPTY) ? "text, not empty" : "text");
		break;
	}
}

void
fb_config_write_md(FILE *f, unsigned roles)
{
	// A column for the role only where one program plays several.
	int several = (roles & (roles - 1)) != 0;
	fprintf(f,
	    several ? "| option | applies to | default | allowed | "
	              "meaning |\n|---|---|---|---|---|\n"
	            : "| option | default | allowed | meaning |\n"
	              "|---|---|---|---|\n");
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		const struct fb_option *o = &fb_options[id];
		int has_def               = o->def != NULL && *o->def != '\0';
		int code                  = has_def &&
		    (o->type == FB_OPT_STR || o->type == FB_OPT_ENUM);
		if ((o->roles & roles) == 0) {
			continue;
		}
		fprintf(f, "| `--%s` | ", o->name);
		if (several) {
			fprintf(f, "%s | ", role_words(o->roles & roles));
		}
		fprintf(f, code ? "`" : "");
		md_text(f, shown_default(o));
		fprintf(f, code ? "` | " : " | ");
		md_allowed(f, o);
		fprintf(f, " | ");
		md_text(f, o->doc != NULL ? o->doc : o->help);
		fprintf(f, " |\n");
	}
}

// md_roles maps the word after MD_BEGIN to roles, or 0.
static unsigned
md_roles(const char *w, size_t n)
{
	static const struct {
		const char *word;
		unsigned    roles;
	} words[] = { { "ps", FB_ROLE_PS }, { "scheduler", FB_ROLE_SCHEDULER },
		{ "server", FB_ROLE_SERVER }, { "trainer", FB_ROLE_TRAINER } };
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (strlen(words[i].word) == n &&
		    strncmp(words[i].word, w, n) == 0) {
			return words[i].roles;
		}
	}
	return 0;
}

int
fb_config_update_doc(const char *text, FILE *out, int *n_sections)
{
	const char *p = text, *b;
	int         n = 0;
	while ((b = strstr(p, MD_BEGIN)) != NULL) {
		const char *w     = b + strlen(MD_BEGIN);
		size_t      wn    = strcspn(w, " -\n");
		const char *eol   = strchr(b, '\n'), *e;
		unsigned    roles = md_roles(w, wn);
		if (roles == 0 || eol == NULL ||
		    (e = strstr(eol, MD_END)) == NULL) {
			return FB_EPROTO;
		}
		fwrite(p, 1, (size_t) (eol + 1 - p), out);
		fb_config_write_md(out, roles);
		p = e;
		n++;
	}
	fputs(p, out);
	if (n_sections != NULL) {
		*n_sections = n;
	}
	return FB_OK;
}
