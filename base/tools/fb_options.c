// fb_options.c — the `fb-options` tool: prints the option tables of the
// config table (base/src/options.c) as Markdown, or rewrites the generated
// sections of a Markdown file in place. docs/operations.md's option lists
// are made with `fb-options --update docs/operations.md` (the build target
// `options-doc` runs it); a unit test fails when they are out of date.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fb/config.h"

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: fb-options [ps|trainer]  print an option table\n"
	    "       fb-options --update FILE  regenerate FILE's "
	    "<!-- fb-options:... --> sections\n");
}

// slurp reads the whole of path into a NUL-terminated fb_alloc buffer
// (release with fb_free), or returns NULL.
static char *
slurp(const char *path)
{
	FILE  *f   = fopen(path, "rb");
	char  *buf = NULL, *grown;
	size_t len = 0, cap = 0, n;
	if (f == NULL) {
		return NULL;
	}
	do {
		if (len + 4096 + 1 > cap) {
			cap   = (cap + 4096) * 2;
			grown = fb_realloc(buf, cap);
			if (grown == NULL) {
				fb_free(buf);
				fclose(f);
				return NULL;
			}
			buf = grown;
		}
		n = fread(buf + len, 1, 4096, f);
		len += n;
	} while (n > 0);
	fclose(f);
	buf[len] = '\0';
	return buf;
}

static int
update(const char *path)
{
	char  *old = slurp(path), *new = NULL;
	size_t len = 0;
	int    n = 0, rv = 1;
	FILE  *f;
	if (old == NULL) {
		fprintf(stderr, "fb-options: cannot read %s\n", path);
		return 1;
	}
	// open_memstream allocates with malloc: released with free below.
	if ((f = open_memstream(&new, &len)) == NULL) {
		goto fail;
	}
	if (fb_config_update_doc(old, f, &n) != FB_OK || n == 0) {
		fclose(f);
		fprintf(stderr,
		    "fb-options: %s: no well-formed "
		    "<!-- fb-options:... --> section\n",
		    path);
		goto fail;
	}
	fclose(f);
	if (strcmp(old, new) != 0) {
		if ((f = fopen(path, "wb")) == NULL ||
		    fwrite(new, 1, len, f) != len || fclose(f) != 0) {
			fprintf(stderr, "fb-options: cannot write %s\n", path);
			goto fail;
		}
		printf("fb-options: updated %d section(s) of %s\n", n, path);
	}
	rv = 0;
fail:
	free(new);
	fb_free(old);
	return rv;
}

int
main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--update") == 0) {
		return update(argv[2]);
	}
	if (argc == 2 && strcmp(argv[1], "ps") == 0) {
		fb_config_write_md(stdout, FB_ROLE_PS);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "trainer") == 0) {
		fb_config_write_md(stdout, FB_ROLE_TRAINER);
		return 0;
	}
	usage(argc == 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr);
	return argc == 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
