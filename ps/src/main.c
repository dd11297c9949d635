// main.c — ps-server: `--role=scheduler` or `--role=server`.
//
// Configuration comes from one table (config_defs below): each entry has a
// kebab-case name, type, default, bounds and help. Flags (--name=value or
// --name value) override FERRY_NAME environment variables, which override
// defaults. --help prints the table; the start-up dump logs every value.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ps/ps.h"

enum cfg_type { CFG_INT, CFG_STR };

struct cfg_def {
	const char   *name;
	enum cfg_type type;
	const char   *def;
	int64_t       min, max;
	const char   *help;
};

static const struct cfg_def config_defs[] = {
	{ "role", CFG_STR, "server", 0, 0, "scheduler | server" },
	{ "listen", CFG_STR, "tcp://127.0.0.1:0",
	    0, 0, "URL to listen on (port 0 = any free port)" },
	{ "advertise", CFG_STR, "", 0, 0,
	    "server: URL trainers dial (default: the bound listen URL)" },
	{ "scheduler", CFG_STR, "", 0, 0, "server: the scheduler's URL" },
	{ "trainers", CFG_INT, "1", 1, 4096,
	    "scheduler: trainers expected before training starts" },
	{ "servers", CFG_INT, "1", 1, 4096,
	    "scheduler: servers expected before training starts" },
	{ "shard-bytes", CFG_INT, "1048576", 4, 1LL << 30,
	    "scheduler: max bytes per shard (multiple of 4)" },
	{ "placement", CFG_STR, "uniform", 0, 0,
	    "scheduler: uniform (round-robin) | latency (probe links, solve)" },
	{ "probe-count", CFG_INT, "7", 1, 1000,
	    "scheduler: round trips per link for the RTT median" },
	{ "probe-bytes", CFG_INT, "1048576", 0, 64LL << 20,
	    "scheduler: bulk bytes per link for bandwidth (0: no probing)" },
	{ "seed", CFG_INT, "1", 0, INT64_MAX,
	    "scheduler: placement solver seed" },
	{ "reprobe-s", CFG_INT, "0", 0, 86400,
	    "scheduler: trainers re-probe links this often; a change over "
	    "--reprobe-change-pct re-places shards (0: never)" },
	{ "reprobe-change-pct", CFG_INT, "50", 1, 10000,
	    "scheduler: link change (percent) that triggers a re-placement" },
	{ "leave-timeout-ms", CFG_INT, "0", 0, 3600000,
	    "server: on SIGTERM, leave the job and wait this long for its "
	    "shards to move to the other servers (0: exit at once)" },
	{ "capacity-mb", CFG_INT, "0", 0, 1LL << 30,
	    "server: memory for shards in MiB (0: unbounded)" },
	{ "contexts", CFG_INT, "256", 1, 65536,
	    "requests served concurrently (nng REP contexts)" },
	{ "max-msg-mb", CFG_INT, "256", 1, 4096,
	    "receive size cap per message, MiB" },
	{ "url-file", CFG_STR, "", 0, 0,
	    "write the bound listen URL to this file once listening" },
	{ "log-level", CFG_STR, "notice", 0, 0,
	    "err | warn | notice | info | debug" },
};
#define N_CFG (sizeof(config_defs) / sizeof(config_defs[0]))

static const char *cfg_val[N_CFG];

static void
usage(FILE *f)
{
	fprintf(f, "usage: ps-server --role=scheduler|server [--name=value]...\n"
	           "Each option can also be set as FERRY_<NAME> in the "
	           "environment (dashes as underscores).\n\n");
	for (size_t i = 0; i < N_CFG; i++) {
		fprintf(f, "  --%-14s %s (default: %s)\n", config_defs[i].name,
		    config_defs[i].help,
		    *config_defs[i].def ? config_defs[i].def : "none");
	}
}

static int
cfg_index(const char *name, size_t len)
{
	for (size_t i = 0; i < N_CFG; i++) {
		if (strlen(config_defs[i].name) == len &&
		    strncmp(config_defs[i].name, name, len) == 0) {
			return (int) i;
		}
	}
	return -1;
}

static int
parse_config(int argc, char **argv)
{
	for (size_t i = 0; i < N_CFG; i++) {
		char env[64] = "FERRY_";
		size_t k     = 6;
		for (const char *p = config_defs[i].name; *p && k < 63; p++) {
			env[k++] = *p == '-' ? '_' : (char) (*p & ~0x20);
		}
		env[k]     = '\0';
		cfg_val[i] = getenv(env) ? getenv(env) : config_defs[i].def;
	}
	for (int a = 1; a < argc; a++) {
		const char *arg = argv[a];
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strncmp(arg, "--", 2) != 0) {
			fprintf(stderr, "ps-server: unexpected argument '%s'\n",
			    arg);
			return -1;
		}
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t      len  = eq ? (size_t) (eq - name) : strlen(name);
		int         idx  = cfg_index(name, len);
		if (idx < 0) {
			fprintf(stderr, "ps-server: unknown option '--%.*s' "
			                "(see --help)\n", (int) len, name);
			return -1;
		}
		if (eq != NULL) {
			cfg_val[idx] = eq + 1;
		} else if (a + 1 < argc) {
			cfg_val[idx] = argv[++a];
		} else {
			fprintf(stderr, "ps-server: --%s needs a value\n",
			    config_defs[idx].name);
			return -1;
		}
	}
	for (size_t i = 0; i < N_CFG; i++) {
		int64_t v;
		int     rv;
		if (config_defs[i].type != CFG_INT) {
			continue;
		}
		rv = fb_parse_i64(cfg_val[i], config_defs[i].min,
		    config_defs[i].max, &v);
		if (rv != FB_OK) {
			fprintf(stderr,
			    "ps-server: --%s=%s: %s (allowed %lld..%lld)\n",
			    config_defs[i].name, cfg_val[i],
			    rv == FB_ERANGE ? "out of range" : "not an integer",
			    (long long) config_defs[i].min,
			    (long long) config_defs[i].max);
			return -1;
		}
	}
	return 0;
}

static const char *
cfg_str(const char *name)
{
	return cfg_val[cfg_index(name, strlen(name))];
}

static int64_t
cfg_int(const char *name)
{
	int64_t v = 0;
	fb_parse_i64(cfg_str(name), INT64_MIN, INT64_MAX, &v);
	return v;
}

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void) sig;
	stop = 1;
}

static void
write_url_file(const char *url)
{
	const char *path = cfg_str("url-file");
	char        tmp[4096];
	FILE       *f;
	if (*path == '\0') {
		return;
	}
	// Write then rename, so a reader never sees a partial URL.
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((f = fopen(tmp, "w")) == NULL || fprintf(f, "%s\n", url) < 0 ||
	    fclose(f) != 0 || rename(tmp, path) != 0) {
		FB_LOG(FB_LOG_ERR, "main", "cannot write --url-file %s", path);
	}
}

int
main(int argc, char **argv)
{
	const char *role;
	int         level, rv;

	if (parse_config(argc, argv) != 0) {
		return 2;
	}
	if (fb_log_parse_level(cfg_str("log-level"), &level) != FB_OK) {
		fprintf(stderr, "ps-server: --log-level=%s: expected err, warn, "
		                "notice, info or debug\n", cfg_str("log-level"));
		return 2;
	}
	fb_log_set_level(level);
	role = cfg_str("role");
	if (strcmp(role, "scheduler") != 0 && strcmp(role, "server") != 0) {
		fprintf(stderr, "ps-server: --role=%s: expected scheduler or "
		                "server\n", role);
		return 2;
	}
	if (strcmp(cfg_str("placement"), "uniform") != 0 &&
	    strcmp(cfg_str("placement"), "latency") != 0) {
		fprintf(stderr, "ps-server: --placement=%s: expected uniform or "
		                "latency\n", cfg_str("placement"));
		return 2;
	}
	if (strcmp(cfg_str("placement"), "latency") == 0 &&
	    cfg_int("probe-bytes") == 0) {
		fprintf(stderr, "ps-server: --placement=latency needs "
		                "--probe-bytes > 0\n");
		return 2;
	}
	if (cfg_int("shard-bytes") % 4 != 0) {
		fprintf(stderr, "ps-server: --shard-bytes=%s: must be a "
		                "multiple of 4\n", cfg_str("shard-bytes"));
		return 2;
	}
	fb_log_set_role(role);
	for (size_t i = 0; i < N_CFG; i++) {
		FB_LOG(FB_LOG_INFO, "config", "%s = %s", config_defs[i].name,
		    cfg_val[i]);
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);

	struct ps_scheduler *sched = NULL;
	struct ps_server    *srv   = NULL;
	if (strcmp(role, "scheduler") == 0) {
		struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
		o.url         = cfg_str("listen");
		o.trainers    = (int) cfg_int("trainers");
		o.servers     = (int) cfg_int("servers");
		o.shard_bytes = (uint64_t) cfg_int("shard-bytes");
		o.contexts    = (int) cfg_int("contexts");
		o.max_msg     = (size_t) cfg_int("max-msg-mb") << 20;
		o.placement   = strcmp(cfg_str("placement"), "latency") == 0
		      ? PS_PLACEMENT_LATENCY
		      : PS_PLACEMENT_UNIFORM;
		o.probe_count = (uint32_t) cfg_int("probe-count");
		o.probe_bytes = (uint64_t) cfg_int("probe-bytes");
		o.seed        = (uint64_t) cfg_int("seed");
		o.reprobe_s   = (uint32_t) cfg_int("reprobe-s");
		o.reprobe_change_pct = (uint32_t) cfg_int("reprobe-change-pct");
		if ((rv = ps_scheduler_open(&o, &sched)) != FB_OK) {
			FB_LOG(FB_LOG_ERR, "main", "cannot start scheduler: %s",
			    fb_strerror(rv));
			return 1;
		}
		write_url_file(ps_scheduler_url(sched));
	} else {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		o.url           = cfg_str("listen");
		o.advertise_url = *cfg_str("advertise") ? cfg_str("advertise")
		                                        : NULL;
		o.scheduler_url = cfg_str("scheduler");
		o.contexts      = (int) cfg_int("contexts");
		o.max_msg       = (size_t) cfg_int("max-msg-mb") << 20;
		o.capacity      = (uint64_t) cfg_int("capacity-mb") << 20;
		if (*o.scheduler_url == '\0') {
			fprintf(stderr, "ps-server: --role=server needs "
			                "--scheduler=URL\n");
			return 2;
		}
		if ((rv = ps_server_open(&o, &srv)) != FB_OK) {
			FB_LOG(FB_LOG_ERR, "main", "cannot start server: %s",
			    fb_strerror(rv));
			return 1;
		}
		write_url_file(ps_server_url(srv));
	}
	while (!stop) {
		fb_sleep_us(100000);
	}
	FB_LOG(FB_LOG_NOTICE, "main", "shutting down");
	// A server leaves gracefully: its shards move to the others first.
	// (A second signal while waiting does not interrupt the wait; the
	// timeout bounds it.)
	if (srv != NULL && cfg_int("leave-timeout-ms") > 0) {
		int lrv = ps_server_leave(srv,
		    (uint32_t) cfg_int("leave-timeout-ms"));
		if (lrv != FB_OK && lrv != FB_ESTATE) {
			FB_LOG(FB_LOG_WARN, "main", "leave: %s", fb_strerror(lrv));
		}
	}
	ps_scheduler_close(sched);
	ps_server_close(srv);
	return 0;
}
