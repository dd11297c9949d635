// test_config.c — the config engine and its table (<fb/config.h>): types,
// bounds, precedence (flag > FERRY_* > config file > default), bogus
// values, flags and file lines, --help, --print-config, and
// docs/operations.md's generated option lists, which must match the table
// (a new option without docs fails here).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base_tests.h"
#include "fb/config.h"
#include "pt.h"

#define ARGC(v) ((int) (sizeof(v) / sizeof((v)[0])))

// Variables the tests set; cleared before and after each test so that a
// test (or the shell that runs the suite) cannot leak into another.
static const char *const test_env[] = { "FERRY_TRAINERS",
	"FERRY_LEAVE_TIMEOUT_MS", "FERRY_LR", "FERRY_MODE", "FERRY_BATCH",
	"FERRY_LOG_LEVEL", "FERRY_SCHEDULER", "FERRY_CONFIG", "FERRY_EPOCHS",
	"FERRY_SERVERS", "FERRY_STALL_WARN_MS" };

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

// write_conf writes text (len bytes; -1: strlen) to a new temporary file
// whose path goes to path (size n).
static void
write_conf(char *path, size_t n, const char *text, long len)
{
	FILE *f;
	int   fd;
	snprintf(path, n, "/tmp/ferry-conf-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "wb");
	ck_assert_ptr_nonnull(f);
	size_t want = len < 0 ? strlen(text) : (size_t) len;
	ck_assert_uint_eq(fwrite(text, 1, want, f), want);
	ck_assert_int_eq(fclose(f), 0);
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
		// Digits are allowed after the first letter (--beta1).
		ck_assert_msg(
		    strspn(o->name, "abcdefghijklmnopqrstuvwxyz0123456789-") ==
		            strlen(o->name) &&
		        o->name[0] >= 'a' && o->name[0] <= 'z',
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
		{ FB_ROLE_PS, "--trainers=1:4096", NULL, FB_OK },
		{ FB_ROLE_PS, "--trainers=0:2",
		    "--trainers=0:2: out of range (allowed N or MIN:MAX, each "
		    "1..4096)",
		    FB_ERANGE },
		{ FB_ROLE_PS, "--trainers=3:2",
		    "--trainers=3:2: MIN 3 above MAX 2", FB_ERANGE },
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
		// --rank is text ("any" or a number): the trainer's config.c
		// checks it (tests/trainer/test_config.c).
		{ FB_ROLE_TRAINER, "--rank=any", NULL, FB_OK },
		{ FB_ROLE_TRAINER, "--rank=", "--rank", FB_EINVAL },
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
	int64_t lo, hi;
	fb_config_range(&c, FB_OPT_PS_TRAINERS, &lo, &hi);
	ck_assert(lo == 5 && hi == 5);
	PT_OK(
	    load(&c, FB_ROLE_PS, err, sizeof(err), "--trainers", "2:6", NULL));
	fb_config_range(&c, FB_OPT_PS_TRAINERS, &lo, &hi);
	ck_assert(lo == 2 && hi == 6);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_TRAINERS), 6);
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
		{ FB_ROLE_PS,
		    "--trainers=2:", "--trainers=2:: not an integer range" },
		{ FB_ROLE_PS, "--trainers=1:2:3",
		    "--trainers=1:2:3: not an integer range" },
		{ FB_ROLE_PS, "--role=x",
		    "--role=x: expected scheduler, server or snapshot" },
		{ FB_ROLE_PS, "--log-level=loud",
		    "expected err, warn, notice, info or debug" },
		{ FB_ROLE_TRAINER, "--lr=abc", "--lr=abc: not a number" },
		{ FB_ROLE_TRAINER, "--lr=nan", "--lr=nan: not a number" },
		{ FB_ROLE_TRAINER, "--mode=bsp",
		    "--mode=bsp: expected sync, async or ssp" },
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

// All four sources in one load: a flag beats FERRY_*, which beats the
// file, which beats the default; each value says where it came from (the
// file's with its line), and the text from the file outlives the load.
START_TEST(test_config_file_precedence)
{
	struct fb_config c;
	char             path[64], flag[96], err[256] = "", src[128];
	clear_env();
	write_conf(path, sizeof(path),
	    "# a job's defaults\n"
	    "\n"
	    "trainers = 4\n"
	    "  servers=3  \r\n"
	    "\tleave-timeout-ms =  2000\n"
	    "    # indented comment\n"
	    "url-file = /tmp/a b#c=d\n"
	    "log-level = info",
	    -1);
	setenv("FERRY_SERVERS", "5", 1);
	setenv("FERRY_LEAVE_TIMEOUT_MS", "3000", 1);
	snprintf(flag, sizeof(flag), "--config=%s", path);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), flag,
	    "--leave-timeout-ms", "4000", NULL));
	// file only; default; file beaten by env; by env and flag
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_TRAINERS), 4);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_PS_TRAINERS),
	    FB_CFG_FILE);
	ck_assert_uint_eq(c.v[FB_OPT_PS_TRAINERS].line, 3);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_CONTEXTS), 256);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_PS_CONTEXTS),
	    FB_CFG_DEFAULT);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_SERVERS), 5);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_PS_SERVERS),
	    FB_CFG_ENV);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_LEAVE_TIMEOUT_MS), 4000);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_PS_LEAVE_TIMEOUT_MS),
	    FB_CFG_FLAG);
	// The value is the rest of the line, blanks trimmed: '#' and '='
	// inside it are kept; the last line needs no newline.
	ck_assert_str_eq(fb_config_str(&c, FB_OPT_PS_URL_FILE),
	    "/tmp/a b#c=d");
	ck_assert_int_eq(fb_config_enum(&c, FB_OPT_PS_LOG_LEVEL), 3);
	ck_assert_uint_eq(c.v[FB_OPT_PS_LOG_LEVEL].line, 8);
	ck_assert_str_eq(fb_config_str(&c, FB_OPT_CONFIG), path);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_CONFIG), FB_CFG_FLAG);
	PT_OK(fb_config_source_text(&c, FB_OPT_PS_TRAINERS, src, sizeof(src)));
	snprintf(flag, sizeof(flag), "file %s:3", path);
	ck_assert_str_eq(src, flag);
	PT_OK(fb_config_source_text(&c, FB_OPT_PS_SERVERS, src, sizeof(src)));
	ck_assert_str_eq(src, "env FERRY_SERVERS");
	PT_OK(fb_config_source_text(&c, FB_OPT_PS_LEAVE_TIMEOUT_MS, src,
	    sizeof(src)));
	ck_assert_str_eq(src, "flag");
	PT_OK(fb_config_source_text(&c, FB_OPT_PS_SEED, src, sizeof(src)));
	ck_assert_str_eq(src, "default");
	PT_FAIL(fb_config_source_text(&c, FB_OPT_PS_TRAINERS, src, 8),
	    FB_ENOSPC);
	fb_config_fini(&c);
	fb_config_fini(&c); // twice is harmless

	// FERRY_CONFIG names the file too; --config wins over it, and an
	// empty --config turns the file off.
	setenv("FERRY_CONFIG", path, 1);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), NULL));
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_TRAINERS), 4);
	ck_assert_int_eq(fb_config_source_of(&c, FB_OPT_CONFIG), FB_CFG_ENV);
	fb_config_fini(&c);
	PT_FAIL(load(&c, FB_ROLE_PS, err, sizeof(err),
	            "--config=/nonexistent/ferry.conf", NULL),
	    FB_ENOTFOUND);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), "--config=", NULL));
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_PS_TRAINERS), 1);
	ck_assert_ptr_null(c.file);
	fb_config_fini(&c);
	unlink(path);
	clear_env();
}
END_TEST

// A bad value in the file that the environment or a flag overrides is
// never looked at (as for a bad variable under a flag); --help reads no
// file at all.
START_TEST(test_config_file_overridden)
{
	struct fb_config c;
	char             path[64], flag[96], err[256] = "";
	clear_env();
	write_conf(path, sizeof(path), "batch = lots\nepochs = 0\n", -1);
	snprintf(flag, sizeof(flag), "--config=%s", path);
	setenv("FERRY_EPOCHS", "2", 1);
	PT_OK(load(&c, FB_ROLE_TRAINER, err, sizeof(err), flag, "--batch=8",
	    NULL));
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_TR_BATCH), 8);
	ck_assert_int_eq(fb_config_int(&c, FB_OPT_TR_EPOCHS), 2);
	fb_config_fini(&c);
	PT_OK(load(&c, FB_ROLE_TRAINER, err, sizeof(err),
	    "--config=/nonexistent/ferry.conf", "--help", NULL));
	ck_assert_int_eq(c.help, 1);
	ck_assert_ptr_null(c.file_text);
	unlink(path);
	clear_env();
}
END_TEST

// Every kind of bad file fails, naming the file and (for a line) the
// line: unknown keys, another program's option, duplicates, lines that
// are not `key = value`, keys written as flags, `config` itself, NUL
// bytes, and values that fail their option's checks.
START_TEST(test_config_file_bogus)
{
	static const struct {
		unsigned    roles;
		const char *text;
		int         rv;
		const char *want; // after "PATH:"
	} cases[] = {
		{ FB_ROLE_PS, "trainers = 2\nnope = 1\n", FB_EINVAL,
		    "2: unknown option 'nope' (see --help)" },
		{ FB_ROLE_PS, "batch = 64\n", FB_EINVAL,
		    "1: 'batch' is an option of the trainer, not of this "
		    "program" },
		{ FB_ROLE_TRAINER, "# x\nlisten = tcp://a:1\n", FB_EINVAL,
		    "2: 'listen' is an option of ps-server, not of this "
		    "program" },
		{ FB_ROLE_PS, "trainers = 2\n\nservers = 1\ntrainers = 3\n",
		    FB_EINVAL, "4: 'trainers' set twice (first at line 1)" },
		{ FB_ROLE_PS, "trainers 2\n", FB_EINVAL,
		    "1: expected 'key = value' or a # comment, got "
		    "'trainers 2'" },
		{ FB_ROLE_PS, "\n = 2\n", FB_EINVAL,
		    "2: expected 'key = value': no key before '='" },
		{ FB_ROLE_PS, "--trainers = 2\n", FB_EINVAL,
		    "1: write the key without '--': 'trainers'" },
		{ FB_ROLE_TRAINER, "config = other.conf\n", FB_EINVAL,
		    "1: 'config' cannot be set in a config file" },
		{ FB_ROLE_PS, "# ok\n\ntrainers = 0\n", FB_ERANGE,
		    "3: trainers = 0: out of range (allowed 1..4096)" },
		{ FB_ROLE_PS, "seed = x\n", FB_EINVAL,
		    "1: seed = x: not an integer" },
		{ FB_ROLE_PS, "role = boss\n", FB_EINVAL,
		    "1: role = boss: expected scheduler, server or snapshot" },
		{ FB_ROLE_TRAINER, "lr = fast\n", FB_EINVAL,
		    "1: lr = fast: not a number" },
		{ FB_ROLE_TRAINER, "\n\nscheduler =\n", FB_EINVAL,
		    "3: scheduler: empty value" },
		{ FB_ROLE_PS, "trainers = 2\nser\0vers = 1\n", FB_EINVAL,
		    "2: NUL byte" },
	};
	clear_env();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fb_config c;
		char             path[64], flag[96], want[320], err[512] = "";
		// The NUL case needs its length: 13 + 3 + 1 + 9 bytes.
		long             len = strstr(cases[i].want, "NUL") ? 26 : -1;
		write_conf(path, sizeof(path), cases[i].text, len);
		snprintf(flag, sizeof(flag), "--config=%s", path);
		snprintf(want, sizeof(want), "%s:%s", path, cases[i].want);
		int rv = load(&c, cases[i].roles, err, sizeof(err), flag,
		    NULL);
		unlink(path);
		ck_assert_msg(rv == cases[i].rv, "case %zu: %s (%s)", i,
		    fb_strerror(rv), err);
		ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
		    "case %zu: '%s', wanted '%s...'", i, err, want);
		ck_assert_ptr_null(c.file_text); // freed on failure
	}
}
END_TEST

// The file itself: missing (FB_ENOTFOUND), unreadable (a directory:
// FB_ESYSERR), too large; each message names it.
START_TEST(test_config_file_unreadable)
{
	struct fb_config c;
	char             path[64], flag[96], err[512] = "";
	char            *big;
	clear_env();
	PT_FAIL(load(&c, FB_ROLE_PS, err, sizeof(err),
	            "--config=/nonexistent/ferry.conf", NULL),
	    FB_ENOTFOUND);
	ck_assert_str_eq(err,
	    "/nonexistent/ferry.conf: cannot open the config file: No such "
	    "file or directory");
	ck_assert_int_eq(
	    load(&c, FB_ROLE_PS, err, sizeof(err), "--config=/tmp", NULL) &
	        FB_ESYSERR,
	    FB_ESYSERR);
	ck_assert_msg(
	    strncmp(err, "/tmp: cannot read the config file: ", 35) == 0, "%s",
	    err);
	big = malloc(FB_CONFIG_FILE_MAX + 1);
	ck_assert_ptr_nonnull(big);
	memset(big, '#', FB_CONFIG_FILE_MAX + 1);
	write_conf(path, sizeof(path), big, FB_CONFIG_FILE_MAX + 1);
	free(big);
	snprintf(flag, sizeof(flag), "--config=%s", path);
	PT_FAIL(load(&c, FB_ROLE_PS, err, sizeof(err), flag, NULL), FB_EINVAL);
	unlink(path);
	ck_assert_msg(strstr(err, ": config file larger than 1048576 bytes") !=
	        NULL,
	    "%s", err);
}
END_TEST

// --print-config lists every option of the program once, in table order,
// as `name = value  # source`, with all four sources, and nothing of the
// other program; it loads and checks everything as usual.
START_TEST(test_config_print)
{
	struct fb_config c;
	char             path[64], flag[96], err[256] = "", want[160];
	char            *text = NULL, *line, *save = NULL;
	size_t           len   = 0;
	int              lines = 0, id = 0;
	FILE            *f;
	clear_env();
	write_conf(path, sizeof(path), "\ntrainers = 4\nservers = 2\n", -1);
	snprintf(flag, sizeof(flag), "--config=%s", path);
	setenv("FERRY_SERVERS", "3", 1);
	PT_OK(load(&c, FB_ROLE_PS, err, sizeof(err), "--print-config", flag,
	    "--seed=7", NULL));
	ck_assert_int_eq(c.print, 1);
	f = open_memstream(&text, &len);
	fb_config_print(&c, f);
	fclose(f);
	fb_config_fini(&c);
	snprintf(want, sizeof(want), "\ntrainers = 4  # file %s:2\n", path);
	ck_assert_msg(strstr(text, want) != NULL, "%s", text);
	ck_assert_ptr_nonnull(
	    strstr(text, "\nservers = 3  # env FERRY_SERVERS\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nseed = 7  # flag\n"));
	ck_assert_ptr_nonnull(strstr(text, "\ncontexts = 256  # default\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nadvertise =   # default\n"));
	ck_assert_ptr_null(strstr(text, "batch"));
	// One parseable line per ps-server option, in table order.
	for (line = strtok_r(text, "\n", &save); line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		const char *eq = strstr(line, " = ");
		const char *hash;
		ck_assert_msg(eq != NULL, "'%s'", line);
		for (hash = eq; strstr(hash + 1, "  # ") != NULL;) {
			hash = strstr(hash + 1, "  # ");
		}
		ck_assert_msg(hash != eq, "'%s' has no source", line);
		while (id < FB_OPT_COUNT &&
		    (fb_options[id].roles & FB_ROLE_PS) == 0) {
			id++;
		}
		ck_assert_int_lt(id, FB_OPT_COUNT);
		ck_assert_msg(strlen(fb_options[id].name) ==
		            (size_t) (eq - line) &&
		        strncmp(line, fb_options[id].name,
		            (size_t) (eq - line)) == 0,
		    "line '%s', wanted option %s", line, fb_options[id].name);
		id++;
		lines++;
	}
	while (id < FB_OPT_COUNT && (fb_options[id].roles & FB_ROLE_PS) == 0) {
		id++;
	}
	ck_assert_int_eq(id, FB_OPT_COUNT);
	ck_assert_int_gt(lines, 15);
	free(text);
	// A bad value still fails with --print-config.
	PT_FAIL(load(&c, FB_ROLE_PS, err, sizeof(err), "--print-config",
	            "--trainers=0", NULL),
	    FB_ERANGE);
	unlink(path);
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
	    strstr(text, "| `--mode` | `sync` | `sync`, `async`, `ssp` | "));
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
	tc = tcase_create("file");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_config_file_precedence);
	tcase_add_test(tc, test_config_file_overridden);
	tcase_add_test(tc, test_config_file_bogus);
	tcase_add_test(tc, test_config_file_unreadable);
	tcase_add_test(tc, test_config_print);
	suite_add_tcase(s, tc);
	tc = tcase_create("docs");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_config_docs_match);
	tcase_add_test(tc, test_config_docs_bogus);
	suite_add_tcase(s, tc);
	return s;
}
