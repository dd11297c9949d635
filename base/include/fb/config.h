// fb/config.h — the one configuration table of Ferry's programs and the
// engine that reads it: `--name=value` / `--name value` flags, FERRY_NAME
// environment variables, `key = value` config files (--config FILE),
// defaults, bounds, --help, --print-config and the option list of
// docs/operations.md all come from the same entries.
//
// Why a second public header beside fb/fb.h: fb.h is included by every file
// of every module, while this header is included by the two programs that
// read options (and their config tests). Every new option changes the
// enum below; kept here, it rebuilds those few files instead of the tree.
// It is also a different concern: fb.h is the utility layer, this is the
// programs' vocabulary.
//
// Precedence: a flag wins over the environment, which wins over the config
// file, which wins over the default. Values are checked after all four are
// merged, so a bad environment value or file line that a flag overrides is
// never looked at (a file's unknown keys and malformed lines always fail).
#ifndef FB_CONFIG_H
#define FB_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "fb/fb.h"

#ifdef __cplusplus
extern "C" {
#endif

// Which program roles read an option. ps-server reads the scheduler and
// server options (whatever its --role: one set of flags can go to every
// ps-server), the trainer reads the trainer's.
enum fb_role {
	FB_ROLE_SCHEDULER = 1u << 0,
	FB_ROLE_SERVER    = 1u << 1,
	FB_ROLE_TRAINER   = 1u << 2,
	FB_ROLE_PS        = FB_ROLE_SCHEDULER | FB_ROLE_SERVER,
};

// The value types. INT and F64 are checked against [min, max]; ENUM
// against the '|'-separated choices (its value is the choice's index);
// STR is taken as given (empty too, unless FB_OPT_NONEMPTY).
enum fb_opt_type {
	FB_OPT_STR,
	FB_OPT_INT,
	FB_OPT_F64,
	FB_OPT_ENUM,
};

// Entry flags.
enum fb_opt_flag {
	FB_OPT_NONEMPTY = 1u << 0, // an empty value is an error
	// An INT that also takes a range `LO:HI` (both within [min, max],
	// LO <= HI): fb_config_int returns HI, fb_config_range both.
	FB_OPT_RANGE = 1u << 1,
};

// Every option, ps-server's (FB_OPT_PS_*) then the trainer's (FB_OPT_TR_*),
// in --help order. Two programs may use one name for different things
// (--seed, --scheduler): each has its own entry, told apart by roles.
enum fb_opt {
	FB_OPT_CONFIG, // both programs: the config file

	FB_OPT_PS_ROLE,
	FB_OPT_PS_LISTEN,
	FB_OPT_PS_ADVERTISE,
	FB_OPT_PS_SCHEDULER,
	FB_OPT_PS_TRAINERS,
	FB_OPT_PS_SERVERS,
	FB_OPT_PS_SHARD_BYTES,
	FB_OPT_PS_PLACEMENT,
	FB_OPT_PS_PROBE_COUNT,
	FB_OPT_PS_PROBE_BYTES,
	FB_OPT_PS_SEED,
	FB_OPT_PS_REPROBE_S,
	FB_OPT_PS_REPROBE_CHANGE_PCT,
	FB_OPT_PS_LEAVE_TIMEOUT_MS,
	FB_OPT_PS_CAPACITY_MB,
	FB_OPT_PS_CONTEXTS,
	FB_OPT_PS_MAX_MSG_MB,
	FB_OPT_PS_URL_FILE,
	FB_OPT_PS_HTTP_LISTEN,
	FB_OPT_PS_HTTP_URL_FILE,
	FB_OPT_PS_LOG_LEVEL,
	FB_OPT_PS_STALL_WARN_MS,
	FB_OPT_PS_HEARTBEAT_MS,
	FB_OPT_PS_DEAD_AFTER_MS,
	FB_OPT_PS_SNAPSHOT_DIR,
	FB_OPT_PS_SNAPSHOT_EVERY,
	FB_OPT_PS_RESTORE,
	FB_OPT_PS_SERVER_INDEX,
	FB_OPT_PS_RESEED_WAIT_MS,
	FB_OPT_PS_SECRET_FILE,
	FB_OPT_PS_AUTH_WINDOW_MS,
	FB_OPT_PS_REPLICAS,
	FB_OPT_PS_STATE_DIR,
	FB_OPT_PS_MAX_JOB_MB,
	FB_OPT_PS_MAX_INFLIGHT_MB,
	FB_OPT_PS_MAX_LR,
	FB_OPT_PS_MAX_SAMPLES_PER_PUSH,
	FB_OPT_PS_TLS_CERT,
	FB_OPT_PS_TLS_KEY,
	FB_OPT_PS_TLS_CA,
	FB_OPT_PS_SPARSE_CAPACITY_MB,
	FB_OPT_PS_SPARSE_EVICT,
	FB_OPT_PS_AGGREGATE,
	FB_OPT_PS_AUDIT_KEEP,
	FB_OPT_PS_SPOT_CHECK,
	FB_OPT_PS_ALLOW_ATTACKS,
	FB_OPT_PS_QUARANTINE_OUTLIERS,
	FB_OPT_PS_CPUS,

	FB_OPT_TR_SCHEDULER,
	FB_OPT_TR_RANK,
	FB_OPT_TR_DATA,
	FB_OPT_TR_LAYERS,
	FB_OPT_TR_BATCH,
	FB_OPT_TR_LR,
	FB_OPT_TR_EPOCHS,
	FB_OPT_TR_SEED,
	FB_OPT_TR_MODE,
	FB_OPT_TR_LOG_INTERVAL,
	FB_OPT_TR_CODEC_PUSH,
	FB_OPT_TR_CODEC_PULL,
	FB_OPT_TR_BUCKET,
	FB_OPT_TR_WARMUP_STEPS,
	FB_OPT_TR_MAX_STEPS,
	FB_OPT_TR_DEVICE,
	FB_OPT_TR_BLAS_THREADS,
	FB_OPT_TR_CURVE,
	FB_OPT_TR_STEP_TIMES,
	FB_OPT_TR_WEIGHTS_OUT,
	FB_OPT_TR_TIMEOUT_MS,
	FB_OPT_TR_HTTP_LISTEN,
	FB_OPT_TR_HTTP_URL_FILE,
	FB_OPT_TR_HEARTBEAT_MS,
	FB_OPT_TR_STALENESS,
	FB_OPT_TR_SYNC_QUORUM,
	FB_OPT_TR_SLOW_MS,
	FB_OPT_TR_SECRET_FILE,
	FB_OPT_TR_OPTIMIZER,
	FB_OPT_TR_MOMENTUM,
	FB_OPT_TR_BETA1,
	FB_OPT_TR_BETA2,
	FB_OPT_TR_EPS,
	FB_OPT_TR_WEIGHT_DECAY,
	FB_OPT_TR_LR_SCHEDULE,
	FB_OPT_TR_LR_WARMUP,
	FB_OPT_TR_LR_STEP_EVERY,
	FB_OPT_TR_LR_GAMMA,
	FB_OPT_TR_LR_MIN,
	FB_OPT_TR_LR_TOTAL_STEPS,
	FB_OPT_TR_CLIP_NORM,
	FB_OPT_TR_LINK_BUDGET,
	FB_OPT_TR_OVERLAP_LAYERS,
	FB_OPT_TR_OVERLAP,
	FB_OPT_TR_TLS_CERT,
	FB_OPT_TR_TLS_KEY,
	FB_OPT_TR_TLS_CA,
	FB_OPT_TR_MODEL,
	FB_OPT_TR_TEST_DATA,
	FB_OPT_TR_EMB_DIM,
	FB_OPT_TR_BOTTOM,
	FB_OPT_TR_TOP,
	FB_OPT_TR_INTERACTION,
	FB_OPT_TR_TABLE_OPTIMIZER,
	FB_OPT_TR_TABLE_LR,
	FB_OPT_TR_TABLE_INIT_SCALE,
	FB_OPT_TR_TABLE_CODEC_PUSH,
	FB_OPT_TR_TABLE_CODEC_PULL,
	FB_OPT_TR_ADMIT_COUNT,
	FB_OPT_TR_EVAL_ROWS,
	FB_OPT_TR_LEASES,
	FB_OPT_TR_LEASE_BATCHES,
	FB_OPT_TR_LR_SCALE_TRAINERS,
	FB_OPT_TR_LOCAL_STEPS,
	FB_OPT_TR_FRAGMENTS,
	FB_OPT_TR_FRAGMENT_DELAY,
	FB_OPT_TR_OUTER_OPTIMIZER,
	FB_OPT_TR_OUTER_LR,
	FB_OPT_TR_OUTER_MOMENTUM,
	FB_OPT_TR_ATTACK,
	FB_OPT_TR_ATTACK_RATE,
	FB_OPT_TR_VERIFY,

	FB_OPT_COUNT,
};

// One table entry. def is the default as text (NULL: unset); unset says in
// words what an unset or empty value means, for --help and the docs.
// help is one line for --help; doc, when set, replaces it in the docs.
struct fb_option {
	const char      *name;  // kebab-case, without the leading "--"
	unsigned         roles; // FB_ROLE_* bits that read it
	enum fb_opt_type type;
	unsigned         flags; // FB_OPT_NONEMPTY
	const char      *def;
	const char      *unset;
	int64_t          min, max;   // FB_OPT_INT
	double           fmin, fmax; // FB_OPT_F64
	const char      *choices;    // FB_OPT_ENUM: "a|b|c"
	const char      *help;
	const char      *doc;
};

// fb_options is the table, indexed by enum fb_opt; it lives for the
// process.
extern const struct fb_option fb_options[FB_OPT_COUNT];

// Where a value came from.
enum fb_config_source {
	FB_CFG_DEFAULT = 0,
	FB_CFG_ENV,
	FB_CFG_FLAG,
	FB_CFG_FILE, // a line of the --config file (fb_config_value.line)
};

// The largest config file fb_config_load reads.
#define FB_CONFIG_FILE_MAX (1u << 20)

// One program's parsed configuration, in caller storage. Fill it with
// fb_config_load (or fb_config_init), read it with the getters, release
// it with fb_config_fini. Text values borrow from argv, the environment,
// the table or the config file's text, which c owns.
struct fb_config {
	unsigned    roles;     // the roles given to fb_config_load
	int         help;      // --help or -h was given (nothing was checked)
	int         print;     // --print-config was given (everything was)
	const char *file;      // the config file read (borrowed), or NULL
	char       *file_text; // its text, owned: the values point into it
	struct fb_config_value {
		const char           *text; // NULL: unset
		enum fb_config_source source;
		uint32_t              line; // FB_CFG_FILE: its line (from 1)
		int64_t               i; // FB_OPT_INT value, FB_OPT_ENUM index
		int64_t lo;              // FB_OPT_RANGE: LO (i when one value)
		double  f;               // FB_OPT_F64 value
	} v[FB_OPT_COUNT];
};

// fb_config_init fills c with the table defaults of roles' options only
// (no file, no environment, no flags), parsed for the getters. c needs no
// fb_config_fini afterwards (it is harmless).
void fb_config_init(struct fb_config *c, unsigned roles);

// fb_config_load fills c for the program that reads the options of roles:
// each option's default, then the lines of the config file, then its
// FERRY_NAME environment variable, then the flags in argv[1..argc)
// ("--name=value" or "--name value"), and checks every value of those
// roles. The config file is the value of --config (a flag, else
// FERRY_CONFIG; unset or empty: none): `key = value` lines, the keys being
// option names without "--"; blank lines and lines whose first non-blank
// character is '#' are skipped; the value is the rest of the line after
// '=', blanks trimmed at both ends (it may be empty, or hold '#' and '=').
// "--help" or "-h" sets c->help and returns FB_OK at once (the rest of argv
// is not read, no file is read, nothing is checked). "--print-config"
// (no value) sets c->print; everything is read and checked as usual.
// c is overwritten: release a loaded c with fb_config_fini first. On
// failure c holds nothing to release.
// Errors, with a one-line message in err naming the option (and its bounds
// or choices), prefixed "FILE:LINE: " for a file line and "FILE: " for the
// file itself: FB_EINVAL (stray argument, unknown option, missing, empty or
// malformed value; in the file: an unknown key, another program's option,
// a key given twice, `config` itself, a line that is not `key = value`, a
// NUL byte; a file over FB_CONFIG_FILE_MAX), FB_ERANGE (a number outside its
// bounds), FB_ENOTFOUND (no such file), FB_ESYSERR | errno (the file cannot
// be read), FB_ENOMEM.
int fb_config_load(struct fb_config *c, unsigned roles, int argc, char **argv,
    char *err, size_t errlen);

// fb_config_fini frees what c owns (the config file's text); the values
// that borrowed from it go with it. Safe on zeroed memory and twice.
void fb_config_fini(struct fb_config *c);

// fb_config_source_text writes where option id's value came from into
// buf: "default", "flag", "env FERRY_NAME" or "file PATH:LINE" (the same
// words --print-config uses). Errors: FB_ENOSPC (buf too small; truncated).
int fb_config_source_text(const struct fb_config *c, enum fb_opt id, char *buf,
    size_t len);

// fb_config_print writes the effective configuration of c's roles to f
// (what --print-config shows), one line per option in table order:
//   NAME = VALUE  # SOURCE
// NAME without "--"; VALUE as given (empty when unset); SOURCE as
// fb_config_source_text. A reader splits at the first " = " and the last
// "  # ". Does not close f.
void fb_config_print(const struct fb_config *c, FILE *f);

// fb_config_env_name writes "FERRY_" + name upper-cased with '-' as '_'
// (FERRY_LEAVE_TIMEOUT_MS) into buf. Errors: FB_ENOSPC (buf too small).
int fb_config_env_name(const char *name, char *buf, size_t len);

// Typed getters of a loaded config. id must be an option of c's roles and
// of the getter's type (FB_ASSERT). fb_config_str returns the text of any
// type (NULL when unset), borrowed for as long as c's sources live;
// fb_config_enum the index of the choice.
const char *fb_config_str(const struct fb_config *c, enum fb_opt id);
int64_t     fb_config_int(const struct fb_config *c, enum fb_opt id);
// fb_config_range gives an FB_OPT_RANGE option's LO and HI (both the value
// when it is one number).
void   fb_config_range(const struct fb_config *c, enum fb_opt id, int64_t *lo,
      int64_t *hi);
double fb_config_f64(const struct fb_config *c, enum fb_opt id);
int    fb_config_enum(const struct fb_config *c, enum fb_opt id);
enum fb_config_source fb_config_source_of(const struct fb_config *c,
    enum fb_opt                                                   id);

// fb_config_usage prints the --help text of roles' options to f, after
// the usage line given (e.g. "usage: trainer --scheduler URL [flags]").
void fb_config_usage(FILE *f, unsigned roles, const char *usage);

// fb_config_write_md prints the Markdown table of roles' options (the
// option list of docs/operations.md) to f. With more than one role in
// roles, a column says which role reads each option.
void fb_config_write_md(FILE *f, unsigned roles);

// fb_config_update_doc copies the Markdown text to out with every
// generated section replaced by the table it names: the line opening a
// section starts with "<!-- fb-options:ROLE" (ROLE: ps, scheduler, server
// or trainer), the section ends at the next "<!-- /fb-options -->". Text
// that is up to date comes out unchanged. *n_sections (may be NULL) gets
// the number of sections. Errors: FB_EPROTO (an unknown ROLE or a section
// without its end), after part of the text was written.
int fb_config_update_doc(const char *text, FILE *out, int *n_sections);

#ifdef __cplusplus
}
#endif
#endif // FB_CONFIG_H
