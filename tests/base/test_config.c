// test_config.c — the config engine and its table (<fb/config.h>): types,
// bounds, precedence (flag > FERRY_* > default), bogus values and flags,
// --help, and docs/operations.md's generated option lists, which must
// match the table (a new option without docs fails here).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_tests.h"
#include "fb/config.h"
#include "pt.h"

#define ARGC(v) ((int) (sizeof(v) / sizeof((v)[0])))

// Variables the tests set; cleared before and after each test so that a
// test (or the shell that runs the suite) cannot leak into another.
static const char *const test_env[] = { "FERRY_TRAINERS",
	"FERRY_LEAVE_TIMEOUT_MS", "FERRY_LR", "FERRY_MODE", "FERRY_BATCH",
	"FERRY_LOG_LEVEL", "FERRY_SCHEDULER" };

static void
clear_env(void)
{
	for (size_t i = 0; i < sizeof(test_env) / sizeof(test_env[0]); i++) {
		unsetenv(test_env[i]);
	}
}

// load runs fb_config_load on a NULL-terminated flag list.
static int
load(struct fb_config *c, unsigned roles, char *err, size_t errlen, ...)
{
	char   *argv[32] = { "prog" };
	int     argc     = 1;
	va_list ap;
	va_start(ap, errlen);
	while (argc < 31 && (argv[argc] = va_arg(ap, char *)) != NULL) {
		argc++;
	}
	va_end(ap);
	return fb_config_load(c, roles, argc, argv, err, errlen);
}

// Every entry is complete, its default passes its own checks, and no
// program reads two options of one name (a gap in the table, a typo in a
// default or a clash would fail here, not in a user's shell).
START_TEST(test_config_table)
{
	static const unsigned programs[] = { FB_ROLE_PS, FB_ROLE_TRAINER };
	struct fb_config      c;
	char                  env[64];
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		const struct fb_option *o = &fb_options[id];
		ck_assert_msg(o->name != NULL && o->help != NULL, "entry %d",
		    id);
		ck_assert_msg(o->roles != 0, "--%s: no role", o->name);
		ck_assert_msg(strspn(o->name, "abcdefghijklmnopqrstuvwxyz-") ==
		        strlen(o->name),
		    "--%s: not kebab-case", o->name);
		PT_OK(fb_config_env_name(o->name, env, sizeof(env)));
		for (int j = id + 1; j < FB_OPT_COUNT; j++) {
			for (size_t p = 0; p < 2; p++) {
				ck_assert_msg(
				    strcmp(o->name, fb_options[j].name) != 0 ||
				        (o->roles & programs[p]) == 0 ||
				        (fb_options[j].roles & programs[p]) ==
				            0,
				    "--%s twice", o->name);
			}
		}
	}
	// fb_config_init asserts every default.
	fb_config_init(&c, FB_ROLE_PS | FB_ROLE_TRAINER);
}
END_TEST

// The environment name is FERRY_ plus the upper-cased name, '-' as '_'.
START_TEST(test_config_env_name)
{
	char buf[64], tiny[8];
	PT_OK(fb_config_env_name("leave-timeout-ms", buf, sizeof(buf)));
	ck_assert_str_eq(buf, "FERRY_LEAVE_TIMEOUT_MS");
	PT_OK(fb_config_env_name("lr", buf, sizeof(buf)));
	ck_assert_str_eq(buf, "FERRY_LR");
	PT_FAIL(fb_config_env_name("leave-timeout-ms", tiny, sizeof(tiny)),
	    FB_ENOSPC);
}
END_TEST

// Defaults come out typed: int, f64, enum index, text, unset text.
START_TEST(test_config_types)
{
	struct fb_config c;
	char             err[256] = "";
	clear_env();
	PT_OK(load(&c, FB_ROLE_TRAINER, err, sizeof(err), NULL));
	ck_assert_int_eq(c.help, 0);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_TR_BATCH), 64);
	ck_assert(fb_config_f64(&c, FB_OPT_TR_LR) == 0.1);
	ck_assert_int_eq(fb_config_enum(&c, FB_OPT_TR_MODE), 0);
	ck_assert_str_eq(fb_config_str(&c, FB_OPT_TR_MODE), "sync");
	ck_assert_str_eq(fb_config_str(&c, FB_OPT_TR_DEVICE), "cpu");
	ck_assert_ptr_null(fb_config_str(&c, FB_OPT_TR_SCHEDULER));
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_TR_BATCH),
	    FB_CFG_DEFAULT);

	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), "--role=scheduler",
	    "--seed", "9223372036854775807", "--log-level=debug", NULL));
	ck_assert_int_eq(fb_config_enum(&c, FB_OPT_PS_ROLE), 0);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_SEED), INT64_MAX);
	ck_assert_int_eq(fb_config_enum(&c, FB_OPT_PS_LOG_LEVEL), 4);
	ck_assert_str_eq(fb_config_str(&c, FB_OPT_PS_ADVERTISE), "");
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_PS_SEED), FB_CFG_FLAG);
}
END_TEST

// The bounds themselves pass; one past either fails with a message that
// names the option and both bounds.
START_TEST(test_config_bounds)
{
	static const struct {
		unsigned    roles;
		const char *flag, *want;
		int         rv;
	} cases[] = {
		{ FB_ROLE_PS, "--trainers=1", NULL, FB_OK },
		{ FB_ROLE_PS, "--trainers=4096", NULL, FB_OK },
		{ FB_ROLE_PS, "--trainers=0",
		    "--trainers=0: out of range (allowed 1..4096)",
		    FB_ERANGE },
		{ FB_ROLE_PS, "--trainers=4097",
		    "--trainers=4097: out of range (allowed 1..4096)",
		    FB_ERANGE },
		{ FB_ROLE_PS, "--seed=9223372036854775808",
		    "(allowed 0..9223372036854775807)", FB_ERANGE },
		{ FB_ROLE_TRAINER, "--lr=1e6", NULL, FB_OK },
		{ FB_ROLE_TRAINER, "--lr=1e-12", NULL, FB_OK },
		{ FB_ROLE_TRAINER, "--lr=0",
		    "--lr=0: out of range (allowed 1e-12..1e+06)", FB_ERANGE },
		{ FB_ROLE_TRAINER, "--lr=2e6", "--lr=2e6: out of range",
		    FB_ERANGE },
		{ FB_ROLE_TRAINER, "--rank=65535", NULL, FB_OK },
		{ FB_ROLE_TRAINER, "--rank=-1",
		    "--rank=-1: out of range (allowed 0..65535)", FB_ERANGE },
	};
	clear_env();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fb_config c;
		char             err[256] = "";
		int rv = load(&c, cases[i].roles, err, sizeof(err),
		    cases[i].flag, NULL);
		ck_assert_msg(rv == cases[i].rv, "%s: %s", cases[i].flag,
		    fb_strerror(rv));
		ck_assert_msg(cases[i].want == NULL ||
		        strstr(err, cases[i].want) != NULL,
		    "%s: '%s' lacks '%s'", cases[i].flag, err, cases[i].want);
	}
}
END_TEST

// A flag wins over FERRY_NAME, which wins over the default; a bad
// variable that a flag overrides is never looked at, one that is used
// fails with the variable named.
START_TEST(test_config_precedence)
{
	struct fb_config c;
	char             err[256] = "";
	clear_env();
	setenv("FERRY_TRAINERS", "3", 1);
	setenv("FERRY_LEAVE_TIMEOUT_MS", "2500", 1);
	setenv("FERRY_MODE", "async", 1);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), NULL));
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_TRAINERS), 3);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_PS_TRAINERS),
	    FB_CFG_ENV);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_LEAVE_TIMEOUT_MS), 2500);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), "--trainers", "5", NULL));
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_TRAINERS), 5);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_PS_TRAINERS),
	    FB_CFG_FLAG);
	// The trainer reads its own options from the same environment.
	PT_OK(load(&c, FB_ROLE_TRAINER, err, sizeof(err), NULL));
	ck_assert_int_eq(fb_config_enum(&c, FB_OPT_TR_MODE), 1);

	setenv("FERRY_TRAINERS", "many", 1);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), "--trainers=2", NULL));
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_TRAINERS), 2);
	PT_FAIL(load(&c, FB_ROLE_PS, err, sizeof(err), NULL), FB_EINVAL);
	ck_assert_msg(strstr(err,
	                  "--trainers=many (from FERRY_TRAINERS): "
	                  "not an integer (allowed 1..4096)") != NULL,
	    "%s", err);
	clear_env();
}
END_TEST

// Malformed values fail naming the option: not a number, an unknown
// choice (the choices listed), an empty value where one is required.
START_TEST(test_config_bogus)
{
	static const struct {
		unsigned    roles;
		const char *flag, *want;
	} cases[] = {
		{ FB_ROLE_PS, "--trainers=x", "--trainers=x: not an integer" },
		{ FB_ROLE_PS, "--trainers=", "--trainers=: not an integer" },
		{ FB_ROLE_PS, "--trainers=3x",
		    "--trainers=3x: not an integer" },
		{ FB_ROLE_PS, "--role=x",
		    "--role=x: expected scheduler or server" },
		{ FB_ROLE_PS, "--log-level=loud",
		    "expected err, warn, notice, info or debug" },
		{ FB_ROLE_TRAINER, "--lr=abc", "--lr=abc: not a number" },
		{ FB_ROLE_TRAINER, "--lr=nan", "--lr=nan: not a number" },
		{ FB_ROLE_TRAINER, "--mode=ssp",
		    "--mode=ssp: expected sync or async" },
		{ FB_ROLE_TRAINER,
		    "--scheduler=", "--scheduler: empty value" },
	};
	clear_env();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fb_config c;
		char             err[256] = "";
		ck_assert_msg(load(&c, cases[i].roles, err, sizeof(err),
		                  cases[i].flag, NULL) != FB_OK,
		    "%s accepted", cases[i].flag);
		ck_assert_msg(strstr(err, cases[i].want) != NULL,
		    "%s: '%s' lacks '%s'", cases[i].flag, err, cases[i].want);
	}
	// ps-server takes an empty string option (an unset --advertise).
	struct fb_config c;
	PT_OK(load(&c, FB_ROLE_PS, NULL, 0, "--advertise=", NULL));
}
END_TEST

// Unknown options (another program's included), stray arguments and a
// missing value are refused, named, before any value is checked.
START_TEST(test_config_unknown)
{
	struct fb_config c;
	char             err[256] = "";
	clear_env();
	PT_FAIL(load(&c, FB_ROLE_PS, err, sizeof(err), "--nope=1", NULL),
	    FB_EINVAL);
	ck_assert_str_eq(err, "unknown option '--nope' (see --help)");
	PT_FAIL(load(&c, FB_ROLE_PS, err, sizeof(err), "--batch=1", NULL),
	    FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'--batch'"));
	PT_FAIL(
	    load(&c, FB_ROLE_TRAINER, err, sizeof(err), "--listen=x", NULL),
	    FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'--listen'"));
	PT_FAIL(load(&c, FB_ROLE_TRAINER, err, sizeof(err), "stray", NULL),
	    FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unexpected argument 'stray'"));
	PT_FAIL(load(&c, FB_ROLE_TRAINER, err, sizeof(err), "--batch", NULL),
	    FB_EINVAL);
	ck_assert_str_eq(err, "--batch: missing value");
	// A variable of an unknown name is no option: ignored.
	setenv("FERRY_BATCH", "0", 1);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), NULL));
	clear_env();
}
END_TEST

// --help (or -h) stops at once, even before a bad flag; the help text
// lists a program's options with defaults and bounds, not the other's.
START_TEST(test_config_help)
{
	struct fb_config c;
	char            *text = NULL;
	size_t           len  = 0;
	FILE            *f;
	clear_env();
	PT_OK(load(&c, FB_ROLE_TRAINER, NULL, 0, "--batch=0", "-h", NULL));
	ck_assert_int_eq(c.help, 1);
	PT_OK(load(&c, FB_ROLE_TRAINER, NULL, 0, "--help", "--bogus", NULL));
	ck_assert_int_eq(c.help, 1);
	f = open_memstream(&text, &len);
	fb_config_usage(f, FB_ROLE_PS, "usage: ps-server");
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "usage: ps-server\n"));
	ck_assert_ptr_nonnull(strstr(text, "FERRY_<NAME>"));
	ck_assert_ptr_nonnull(strstr(text, "\n  --leave-timeout-ms "));
	ck_assert_ptr_nonnull(strstr(text, "(default: 256; 1..65536)"));
	ck_assert_ptr_nonnull(strstr(text, "\n  --help "));
	ck_assert_ptr_null(strstr(text, "--blas-threads"));
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		char flag[64];
		int  read_by_ps = 0;
		// ps-server lists a name if any of its entries has it (the
		// trainer's --seed shares ps-server's name).
		for (int j = 0; j < FB_OPT_COUNT; j++) {
			read_by_ps |= strcmp(fb_options[j].name,
			                  fb_options[id].name) == 0 &&
			    (fb_options[j].roles & FB_ROLE_PS) != 0;
		}
		snprintf(flag, sizeof(flag), "\n  --%s ", fb_options[id].name);
		ck_assert_msg((strstr(text, flag) != NULL) == read_by_ps, "%s",
		    flag);
	}
	free(text);
}
END_TEST

// The Markdown table has a row per option, the role column only for a
// program with several roles, and escapes '|'.
START_TEST(test_config_markdown)
{
	char  *text = NULL;
	size_t len  = 0;
	FILE  *f    = open_memstream(&text, &len);
	fb_config_write_md(f, FB_ROLE_TRAINER);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "| option | default | allowed |"));
	ck_assert_ptr_nonnull(strstr(text, "| `--batch` | 64 | 1..65536 | "));
	ck_assert_ptr_nonnull(
	    strstr(text, "| `--mode` | `sync` | `sync`, `async` | "));
	ck_assert_ptr_null(strstr(text, "--listen"));
	free(text);
	f = open_memstream(&text, &len);
	fb_config_write_md(f, FB_ROLE_PS);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "| applies to |"));
	ck_assert_ptr_nonnull(strstr(text, "| `--capacity-mb` | server | "));
	free(text);
}
END_TEST

// docs/operations.md's option lists are what the table generates: after
// adding or changing an option, run `cmake --build build --target
// options-doc` and commit the doc.
START_TEST(test_config_docs_match)
{
	const char *path = FERRY_SOURCE_DIR "/docs/operations.md";
	FILE       *f    = fopen(path, "rb");
	char       *doc, *gen = NULL;
	size_t      len      = 0, n;
	int         sections = 0;
	ck_assert_msg(f != NULL, "cannot open %s", path);
	doc = calloc(1, 1 << 20);
	ck_assert_ptr_nonnull(doc);
	n = fread(doc, 1, (1 << 20) - 1, f);
	fclose(f);
	ck_assert_uint_lt(n, (1 << 20) - 1);
	f = open_memstream(&gen, &len);
	PT_OK(fb_config_update_doc(doc, f, &sections));
	fclose(f);
	ck_assert_int_eq(sections, 2);
	ck_assert_ptr_nonnull(strstr(doc, "<!-- fb-options:ps"));
	ck_assert_ptr_nonnull(strstr(doc, "<!-- fb-options:trainer"));
	ck_assert_msg(strcmp(doc, gen) == 0,
	    "%s: the option lists differ from base/src/options.c; run "
	    "`cmake --build build --target options-doc`",
	    path);
	free(gen);
	free(doc);
}
END_TEST

// A section with an unknown role or without its end is refused.
START_TEST(test_config_docs_bogus)
{
	char  *gen = NULL;
	size_t len = 0;
	FILE  *f   = open_memstream(&gen, &len);
	PT_FAIL(fb_config_update_doc("a\n<!-- fb-options:nobody -->\n"
	                             "<!-- /fb-options -->\n",
	            f, NULL),
	    FB_EPROTO);
	PT_FAIL(
	    fb_config_update_doc("a\n<!-- fb-options:ps -->\nb\n", f, NULL),
	    FB_EPROTO);
	fclose(f);
	free(gen);
}
END_TEST

Suite *
suite_config(void)
{
	Suite *s  = suite_create("config");
	TCase *tc = tcase_create("engine");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_config_table);
	tcase_add_test(tc, test_config_env_name);
	tcase_add_test(tc, test_config_types);
	tcase_add_test(tc, test_config_bounds);
	tcase_add_test(tc, test_config_precedence);
	tcase_add_test(tc, test_config_bogus);
	tcase_add_test(tc, test_config_unknown);
	tcase_add_test(tc, test_config_help);
	tcase_add_test(tc, test_config_markdown);
	suite_add_tcase(s, tc);
	tc = tcase_create("docs");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_config_docs_match);
	tcase_add_test(tc, test_config_docs_bogus);
	suite_add_tcase(s, tc);
	return s;
}
