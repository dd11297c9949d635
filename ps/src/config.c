// config.c — ps-server's configuration: its options are the scheduler's
// and the server's entries of the one config table (base/src/options.c,
// engine in <fb/config.h>), which gives the names, defaults, bounds,
// FERRY_NAME environment variables, the --config file, --help and
// --print-config. This file binds each option to its field of struct
// ps_scheduler_opts or struct ps_server_opts (a table, as the trainer's
// trainer/src/config.c) and checks what the table cannot: the rules that
// tie options together.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "obs/obs.h"

// How a value is stored in an option struct.
enum kind {
	K_TEXT,      // const char *
	K_PATH,      // const char *, NULL when empty (unset)
	K_INT,       // int
	K_U32,       // uint32_t
	K_U64,       // uint64_t
	K_F64,       // double
	K_MB_U64,    // uint64_t bytes from MiB
	K_MB_SIZE,   // size_t bytes from MiB
	K_PLACEMENT, // int: enum ps_placement
	K_RESTORE,   // int: PS_RESTORE_*
	K_EVICT,     // int: 0 lru, 1 lfu
	K_TRAINERS,  // int trainers (MAX) and min_trainers (MIN): N or MIN:MAX
};

struct binding {
	enum fb_opt id;
	enum kind   kind;
	size_t      off;
};

#define SCHED(f) offsetof(struct ps_scheduler_opts, f)
static const struct binding sched_bindings[] = {
	{ FB_OPT_PS_LISTEN, K_TEXT, SCHED(url) },
	{ FB_OPT_PS_TRAINERS, K_TRAINERS, SCHED(trainers) },
	{ FB_OPT_PS_SERVERS, K_INT, SCHED(servers) },
	{ FB_OPT_PS_SHARD_BYTES, K_U64, SCHED(shard_bytes) },
	{ FB_OPT_PS_CONTEXTS, K_INT, SCHED(contexts) },
	{ FB_OPT_PS_MAX_MSG_MB, K_MB_SIZE, SCHED(max_msg) },
	{ FB_OPT_PS_PLACEMENT, K_PLACEMENT, SCHED(placement) },
	{ FB_OPT_PS_PROBE_COUNT, K_U32, SCHED(probe_count) },
	{ FB_OPT_PS_PROBE_BYTES, K_U64, SCHED(probe_bytes) },
	{ FB_OPT_PS_SEED, K_U64, SCHED(seed) },
	{ FB_OPT_PS_REPROBE_S, K_U32, SCHED(reprobe_s) },
	{ FB_OPT_PS_REPROBE_CHANGE_PCT, K_U32, SCHED(reprobe_change_pct) },
	{ FB_OPT_PS_DEAD_AFTER_MS, K_U32, SCHED(dead_after_ms) },
	{ FB_OPT_PS_SECRET_FILE, K_PATH, SCHED(secret_file) },
	{ FB_OPT_PS_AUTH_WINDOW_MS, K_U32, SCHED(auth_window_ms) },
	{ FB_OPT_PS_HEARTBEAT_MS, K_U32, SCHED(heartbeat_ms) },
	{ FB_OPT_PS_REPLICAS, K_U32, SCHED(replicas) },
	{ FB_OPT_PS_STATE_DIR, K_PATH, SCHED(state_dir) },
	{ FB_OPT_PS_MAX_JOB_MB, K_MB_U64, SCHED(max_job_bytes) },
	{ FB_OPT_PS_MAX_INFLIGHT_MB, K_MB_SIZE, SCHED(max_inflight) },
	{ FB_OPT_PS_MAX_LR, K_F64, SCHED(max_lr) },
	{ FB_OPT_PS_TLS_CERT, K_PATH, SCHED(tls_cert) },
	{ FB_OPT_PS_TLS_KEY, K_PATH, SCHED(tls_key) },
	{ FB_OPT_PS_TLS_CA, K_PATH, SCHED(tls_ca) },
	{ FB_OPT_PS_SPOT_CHECK, K_F64, SCHED(spot_check) },
	{ FB_OPT_PS_ALLOW_ATTACKS, K_INT, SCHED(allow_attacks) },
	{ FB_OPT_PS_QUARANTINE_OUTLIERS, K_U32, SCHED(quarantine_outliers) },
};

#define SRV(f) offsetof(struct ps_server_opts, f)
static const struct binding srv_bindings[] = {
	{ FB_OPT_PS_LISTEN, K_TEXT, SRV(url) },
	{ FB_OPT_PS_ADVERTISE, K_PATH, SRV(advertise_url) },
	{ FB_OPT_PS_SCHEDULER, K_TEXT, SRV(scheduler_url) },
	{ FB_OPT_PS_CONTEXTS, K_INT, SRV(contexts) },
	{ FB_OPT_PS_MAX_MSG_MB, K_MB_SIZE, SRV(max_msg) },
	{ FB_OPT_PS_CAPACITY_MB, K_MB_U64, SRV(capacity) },
	{ FB_OPT_PS_STALL_WARN_MS, K_U32, SRV(stall_warn_ms) },
	{ FB_OPT_PS_HEARTBEAT_MS, K_U32, SRV(heartbeat_ms) },
	{ FB_OPT_PS_SNAPSHOT_DIR, K_PATH, SRV(snapshot_dir) },
	{ FB_OPT_PS_SNAPSHOT_EVERY, K_U64, SRV(snapshot_every) },
	{ FB_OPT_PS_RESTORE, K_RESTORE, SRV(restore) },
	{ FB_OPT_PS_SERVER_INDEX, K_INT, SRV(server_index) },
	{ FB_OPT_PS_RESEED_WAIT_MS, K_U32, SRV(reseed_wait_ms) },
	{ FB_OPT_PS_SECRET_FILE, K_PATH, SRV(secret_file) },
	{ FB_OPT_PS_AUTH_WINDOW_MS, K_U32, SRV(auth_window_ms) },
	{ FB_OPT_PS_MAX_INFLIGHT_MB, K_MB_SIZE, SRV(max_inflight) },
	{ FB_OPT_PS_MAX_SAMPLES_PER_PUSH, K_U32, SRV(max_samples) },
	{ FB_OPT_PS_SPARSE_CAPACITY_MB, K_MB_U64, SRV(sparse_capacity) },
	{ FB_OPT_PS_SPARSE_EVICT, K_EVICT, SRV(sparse_evict) },
	{ FB_OPT_PS_TLS_CERT, K_PATH, SRV(tls_cert) },
	{ FB_OPT_PS_TLS_KEY, K_PATH, SRV(tls_key) },
	{ FB_OPT_PS_TLS_CA, K_PATH, SRV(tls_ca) },
	{ FB_OPT_PS_AGGREGATE, K_TEXT, SRV(aggregate) },
	{ FB_OPT_PS_AUDIT_KEEP, K_U32, SRV(audit_keep) },
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

// store copies option b's value from cfg into the struct at base.
static void
store(void *base, const struct binding *b, const struct fb_config *cfg)
{
	void       *p = (char *) base + b->off;
	const char *v = fb_config_str(cfg, b->id);
	switch (b->kind) {
	case K_TEXT:
		*(const char **) p = v;
		break;
	case K_PATH:
		*(const char **) p = *v ? v : NULL;
		break;
	case K_INT:
		*(int *) p = (int) fb_config_int(cfg, b->id);
		break;
	case K_U32:
		*(uint32_t *) p = (uint32_t) fb_config_int(cfg, b->id);
		break;
	case K_U64:
		*(uint64_t *) p = (uint64_t) fb_config_int(cfg, b->id);
		break;
	case K_F64:
		*(double *) p = fb_config_f64(cfg, b->id);
		break;
	case K_MB_U64:
		*(uint64_t *) p = (uint64_t) fb_config_int(cfg, b->id) << 20;
		break;
	case K_MB_SIZE:
		*(size_t *) p = (size_t) fb_config_int(cfg, b->id) << 20;
		break;
	case K_PLACEMENT:
		*(int *) p = strcmp(v, "latency") == 0 ? PS_PLACEMENT_LATENCY
		                                       : PS_PLACEMENT_UNIFORM;
		break;
	case K_RESTORE:
		*(int *) p = strcmp(v, "yes") == 0 ? PS_RESTORE_YES
		    : strcmp(v, "no") == 0         ? PS_RESTORE_NO
		                                   : PS_RESTORE_AUTO;
		break;
	case K_EVICT:
		*(int *) p = strcmp(v, "lfu") == 0;
		break;
	case K_TRAINERS: {
		// The table checked both bounds and MIN <= MAX.
		int64_t lo, hi;
		fb_config_range(cfg, b->id, &lo, &hi);
		*(int *) p                                        = (int) hi;
		((struct ps_scheduler_opts *) base)->min_trainers = (int) lo;
		break;
	}
	}
}

int
ps__cfg_load(struct fb_config *cfg, int argc, char **argv)
{
	char err[512];
	int  level, rv;

	if (fb_config_load(cfg, FB_ROLE_PS, argc, argv, err, sizeof(err)) !=
	    FB_OK) {
		fprintf(stderr, "ps-server: %s\n", err);
		return 2;
	}
	if (cfg->help) {
		fb_config_usage(stdout, FB_ROLE_PS,
		    "usage: ps-server "
		    "--role=scheduler|server [--name=value]...");
		return 0;
	}
	if (cfg->print) {
		fb_config_print(cfg, stdout);
		fb_config_fini(cfg);
		return 0;
	}
	// The table checked the name against the same five levels.
	rv = fb_log_parse_level(fb_config_str(cfg, FB_OPT_PS_LOG_LEVEL),
	    &level);
	FB_ASSERT(rv == FB_OK);
	fb_log_set_level(level);
	return PS_CFG_RUN;
}

// cclip_ok checks cclip's "TAU[x][:BETA]" (aggregate_ok).
static int
cclip_ok(const char *v, char *why, size_t n)
{
	char        t[64];
	const char *colon = strchr(v, ':');
	size_t      tl    = colon != NULL ? (size_t) (colon - v) : strlen(v);
	double      tau, beta;
	snprintf(t, sizeof(t), "%.*s", (int) (tl < 63 ? tl : 63), v);
	if (tl > 0 && tl < 64 && t[tl - 1] == 'x') {
		t[tl - 1] = '\0'; // TAUx: relative to the median distance
	}
	if (fb_parse_f64(t, 0, 3.4e38, &tau) != FB_OK || !isfinite(tau) ||
	    tau <= 0 || !((float) tau > 0)) {
		snprintf(why, n,
		    "cclip:TAU[x] needs a finite TAU > 0, not '%.*s'",
		    (int) (tl < 63 ? tl : 63), v);
		return 0;
	}
	if (colon != NULL &&
	    (fb_parse_f64(colon + 1, 0, 1, &beta) != FB_OK ||
	        !((float) beta < 1))) {
		snprintf(why, n,
		    "cclip:TAU:BETA needs a BETA in [0, 1), not '%s'",
		    colon + 1);
		return 0;
	}
	return 1;
}

// aggregate_ok checks --aggregate's syntax (the server parses it again,
// robust.c's ps__agg_parse, which a library user's opts also meet): 1, or
// 0 with the reason in why (n bytes).
static int
aggregate_ok(const char *v, char *why, size_t n)
{
	int64_t b;
	if (strcmp(v, "mean") == 0 || strcmp(v, "median") == 0) {
		return 1;
	}
	if (strncmp(v, "trimmed:", 8) == 0) {
		if (fb_parse_i64(v + 8, 1, UINT32_MAX / 2, &b) == FB_OK) {
			return 1;
		}
		snprintf(why, n, "trimmed:B needs an integer B >= 1");
		return 0;
	}
	if (strncmp(v, "cclip:", 6) == 0) {
		return cclip_ok(v + 6, why, n);
	}
	snprintf(why, n,
	    "one of mean, median, trimmed:B, cclip:TAU[x][:BETA]");
	return 0;
}

int
ps__cfg_check(const struct fb_config *cfg)
{
	const char *listen = fb_config_str(cfg, FB_OPT_PS_HTTP_LISTEN);
	char        err[512], why[256];

	if (strcmp(fb_config_str(cfg, FB_OPT_PS_PLACEMENT), "latency") == 0 &&
	    fb_config_int(cfg, FB_OPT_PS_PROBE_BYTES) == 0) {
		fprintf(stderr,
		    "ps-server: --placement=latency needs "
		    "--probe-bytes > 0\n");
		return 2;
	}
	int64_t lo, hi;
	fb_config_range(cfg, FB_OPT_PS_TRAINERS, &lo, &hi);
	if (lo < hi &&
	    strcmp(fb_config_str(cfg, FB_OPT_PS_PLACEMENT), "latency") == 0) {
		// The latency policy weighs every rank's links, and the ranks
		// that have not joined have none.
		fprintf(stderr,
		    "ps-server: --placement=latency needs a fixed "
		    "--trainers (N, not %s)\n",
		    fb_config_str(cfg, FB_OPT_PS_TRAINERS));
		return 2;
	}
	if (*listen != '\0' &&
	    obs_http_url_parse(listen, err, sizeof(err), why, sizeof(why)) !=
	        FB_OK) {
		fprintf(stderr, "ps-server: --http-listen: %s\n", why);
		return 2;
	}
	if (!aggregate_ok(fb_config_str(cfg, FB_OPT_PS_AGGREGATE), why,
	        sizeof(why))) {
		fprintf(stderr, "ps-server: --aggregate=%s: %s\n",
		    fb_config_str(cfg, FB_OPT_PS_AGGREGATE), why);
		return 2;
	}
	if (fb_config_int(cfg, FB_OPT_PS_SHARD_BYTES) % 4 != 0) {
		fprintf(stderr,
		    "ps-server: --shard-bytes=%s: must be a multiple of 4\n",
		    fb_config_str(cfg, FB_OPT_PS_SHARD_BYTES));
		return 2;
	}
	fb_log_set_role(fb_config_str(cfg, FB_OPT_PS_ROLE));
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		char from[512];
		if (fb_options[id].roles & FB_ROLE_PS) {
			fb_config_source_text(cfg, id, from, sizeof(from));
			FB_LOG(FB_LOG_INFO, "config", "%s = %s (%s)",
			    fb_options[id].name,
			    cfg->v[id].text ? cfg->v[id].text : "", from);
		}
	}
	return PS_CFG_RUN;
}

const char *
ps__cfg_text(const struct fb_config *cfg, enum fb_opt id)
{
	const char *v = fb_config_str(cfg, id);
	return *v ? v : NULL;
}

void
ps__cfg_scheduler(const struct fb_config *cfg, struct ps_scheduler_opts *o)
{
	for (size_t i = 0; i < N_OF(sched_bindings); i++) {
		store(o, &sched_bindings[i], cfg);
	}
}

int
ps__cfg_server(const struct fb_config *cfg, struct ps_server_opts *o)
{
	for (size_t i = 0; i < N_OF(srv_bindings); i++) {
		store(o, &srv_bindings[i], cfg);
	}
	if (o->snapshot_every > 0 && o->snapshot_dir == NULL) {
		fprintf(stderr,
		    "ps-server: --snapshot-every needs "
		    "--snapshot-dir\n");
		return 2;
	}
	if (*o->scheduler_url == '\0') {
		fprintf(stderr,
		    "ps-server: --role=server needs "
		    "--scheduler=URL\n");
		return 2;
	}
	return PS_CFG_RUN;
}
