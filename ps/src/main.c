// main.c — ps-server: `--role=scheduler` or `--role=server`, and
// `--role=snapshot`, a one-shot client that snapshots the whole job.
//
// Its options are the scheduler's and the server's entries of the one
// config table (base/src/options.c, engine in <fb/config.h>): flags
// (--name=value or --name value) override FERRY_NAME environment
// variables, which override the --config file, which overrides defaults;
// --help prints the table; --print-config prints every value with its
// source; the start-up dump logs every value. Rules that tie options
// together (a multiple of 4, latency needs probing, a server needs a
// scheduler) are checked here. With --http-listen it serves the role's
// metrics, health, readiness and state over HTTP (obs/) from start to
// exit, the leave included: /readyz says "leaving" while the shards move
// away.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fb/config.h"
#include "ps/ps.h"
#ifdef __GLIBC__
#include <malloc.h>
#endif

static struct fb_config cfg;

static const char *
cfg_str(enum fb_opt id)
{
	return fb_config_str(&cfg, id);
}

static int64_t
cfg_int(enum fb_opt id)
{
	return fb_config_int(&cfg, id);
}

static volatile sig_atomic_t stop;

// keep_buffers makes freed message buffers stay in the heap for the next
// message. Every push, pull reply and replica forward is an nng message
// of a shard's size (about 1 MiB for a 256k-float layer), allocated and
// freed each step; by default glibc serves blocks of that size with mmap
// and unmaps them on free (or trims the heap they came from), so each one
// costs a page fault per 4 KiB and the kernel's zero-fill: about 100
// faults per step per server in a 2-server job with replicas. Blocks up to
// 32 MiB (glibc's ceiling for this threshold) now come from the heap, and
// up to 128 MiB of free heap top is kept, not returned.
static void
keep_buffers(void)
{
#ifdef __GLIBC__
	(void) mallopt(M_MMAP_THRESHOLD, 32 << 20);
	(void) mallopt(M_TRIM_THRESHOLD, 128 << 20);
#endif
}

// SHUTDOWN_GRACE_S: how long the shutdown may take after the leave
// (fb_exit_watchdog says why it needs a guard).
#define SHUTDOWN_GRACE_S 15

static void
on_signal(int sig)
{
	(void) sig;
	stop = 1;
}

// write_url_file writes url to the file named by option id, if set.
static void
write_url_file(enum fb_opt id, const char *url)
{
	const char *path = cfg_str(id);
	int         rv;
	if (*path != '\0' && (rv = obs_url_file_write(path, url)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "main", "cannot write --%s %s: %s",
		    fb_options[id].name, path, fb_strerror(rv));
	}
}

// tls_opts reads --tls-cert, --tls-key and --tls-ca (NULL where unset;
// psw_tls_open refuses one or two of the three).
static void
tls_opts(const char **cert, const char **key, const char **ca)
{
	*cert = *cfg_str(FB_OPT_PS_TLS_CERT) ? cfg_str(FB_OPT_PS_TLS_CERT)
	                                     : NULL;
	*key = *cfg_str(FB_OPT_PS_TLS_KEY) ? cfg_str(FB_OPT_PS_TLS_KEY) : NULL;
	*ca  = *cfg_str(FB_OPT_PS_TLS_CA) ? cfg_str(FB_OPT_PS_TLS_CA) : NULL;
}

// snapshot_job is --role=snapshot: one snapshot of the whole job through
// the scheduler at url, printed on stdout. Returns the exit status.
static int
snapshot_job(const char *url)
{
	struct ps_job_snapshot r;
	char                   err[512];
	int                    rv;
	if (*url == '\0') {
		fprintf(stderr,
		    "ps-server: --role=snapshot needs "
		    "--scheduler=URL\n");
		return 2;
	}
	// Waiting for the next version takes one training step; 10 minutes
	// covers a stalled job's slowest step.
	struct ps_job_snapshot_auth a = { 0 };
	a.secret_file                 = *cfg_str(FB_OPT_PS_SECRET_FILE)
	                    ? cfg_str(FB_OPT_PS_SECRET_FILE)
	                    : NULL;
	tls_opts(&a.tls_cert, &a.tls_key, &a.tls_ca);
	if ((rv = ps_job_snapshot(url, &a, 0, 600000, &r, err, sizeof(err))) !=
	    FB_OK) {
		fprintf(stderr, "ps-server: snapshot: %s\n",
		    *err ? err : fb_strerror(rv));
		return 1;
	}
	printf("snapshot version %llu: %u shards, %llu bytes\n",
	    (unsigned long long) r.version, r.shards,
	    (unsigned long long) r.bytes);
	return 0;
}

static int
sched_ready(void *arg, char *why, size_t n)
{
	return ps_scheduler_ready(arg, why, n);
}

static void
sched_state(void *arg, struct obs_writer *w)
{
	ps_scheduler_state_json(arg, w);
}

static int
server_ready(void *arg, char *why, size_t n)
{
	return ps_server_ready(arg, why, n);
}

static void
server_state(void *arg, struct obs_writer *w)
{
	ps_server_state_json(arg, w);
}

// http_open serves the role's endpoints on --http-listen (when set) into
// *out. Returns 0, or 1 when they cannot be served (logged).
static int
http_open(struct ps_scheduler *sched, struct ps_server *srv,
    struct obs_http **out)
{
	struct obs_http_opts o = { 0 };
	int                  rv;

	o.listen = cfg_str(FB_OPT_PS_HTTP_LISTEN);
	if (*o.listen == '\0') {
		return 0;
	}
	o.reg   = sched ? ps_scheduler_metrics(sched) : ps_server_metrics(srv);
	o.ready = sched ? sched_ready : server_ready;
	o.state = sched ? sched_state : server_state;
	o.arg   = sched ? (void *) sched : (void *) srv;
	if ((rv = obs_process_register(o.reg)) != FB_OK ||
	    (rv = obs_http_open(&o, out)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "main", "--http-listen=%s: %s", o.listen,
		    fb_strerror(rv));
		return 1;
	}
	FB_LOG(FB_LOG_NOTICE, "main", "http endpoints on %s",
	    obs_http_url(*out));
	write_url_file(FB_OPT_PS_HTTP_URL_FILE, obs_http_url(*out));
	return 0;
}

int
main(int argc, char **argv)
{
	const char *role;
	char        err[512], why[256];
	int         level, rv;

	if (fb_config_load(&cfg, FB_ROLE_PS, argc, argv, err, sizeof(err)) !=
	    FB_OK) {
		fprintf(stderr, "ps-server: %s\n", err);
		return 2;
	}
	if (cfg.help) {
		fb_config_usage(stdout, FB_ROLE_PS,
		    "usage: ps-server "
		    "--role=scheduler|server [--name=value]...");
		return 0;
	}
	if (cfg.print) {
		fb_config_print(&cfg, stdout);
		fb_config_fini(&cfg);
		return 0;
	}
	// The table checked the name against the same five levels.
	rv = fb_log_parse_level(cfg_str(FB_OPT_PS_LOG_LEVEL), &level);
	FB_ASSERT(rv == FB_OK);
	fb_log_set_level(level);
	keep_buffers();
	role = cfg_str(FB_OPT_PS_ROLE);
	if (strcmp(cfg_str(FB_OPT_PS_PLACEMENT), "latency") == 0 &&
	    cfg_int(FB_OPT_PS_PROBE_BYTES) == 0) {
		fprintf(stderr,
		    "ps-server: --placement=latency needs "
		    "--probe-bytes > 0\n");
		return 2;
	}
	if (*cfg_str(FB_OPT_PS_HTTP_LISTEN) != '\0' &&
	    obs_http_url_parse(cfg_str(FB_OPT_PS_HTTP_LISTEN), err,
	        sizeof(err), why, sizeof(why)) != FB_OK) {
		fprintf(stderr, "ps-server: --http-listen: %s\n", why);
		return 2;
	}
	if (cfg_int(FB_OPT_PS_SHARD_BYTES) % 4 != 0) {
		fprintf(stderr,
		    "ps-server: --shard-bytes=%s: must be a multiple of 4\n",
		    cfg_str(FB_OPT_PS_SHARD_BYTES));
		return 2;
	}
	fb_log_set_role(role);
	for (int id = 0; id < FB_OPT_COUNT; id++) {
		char from[512];
		if (fb_options[id].roles & FB_ROLE_PS) {
			fb_config_source_text(&cfg, id, from, sizeof(from));
			FB_LOG(FB_LOG_INFO, "config", "%s = %s (%s)",
			    fb_options[id].name,
			    cfg.v[id].text ? cfg.v[id].text : "", from);
		}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);

	if (strcmp(role, "snapshot") == 0) {
		return snapshot_job(cfg_str(FB_OPT_PS_SCHEDULER));
	}
	struct ps_scheduler *sched       = NULL;
	struct ps_server    *srv         = NULL;
	struct obs_http     *http        = NULL;
	const char          *secret_file = *cfg_str(FB_OPT_PS_SECRET_FILE)
	             ? cfg_str(FB_OPT_PS_SECRET_FILE)
	             : NULL;
	if (secret_file == NULL && *cfg_str(FB_OPT_PS_TLS_CA) == '\0') {
		FB_LOG(FB_LOG_WARN, "main",
		    "no --secret-file and no --tls-ca: requests are not "
		    "authenticated, so anyone who can reach this %s's port "
		    "can join, push or read the model (docs/security.md)",
		    role);
	}
	if (strcmp(role, "scheduler") == 0) {
		struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
		o.url                      = cfg_str(FB_OPT_PS_LISTEN);
		o.trainers                 = (int) cfg_int(FB_OPT_PS_TRAINERS);
		o.servers                  = (int) cfg_int(FB_OPT_PS_SERVERS);
		o.shard_bytes = (uint64_t) cfg_int(FB_OPT_PS_SHARD_BYTES);
		o.contexts    = (int) cfg_int(FB_OPT_PS_CONTEXTS);
		o.max_msg     = (size_t) cfg_int(FB_OPT_PS_MAX_MSG_MB) << 20;
		o.placement   = strcmp(cfg_str(FB_OPT_PS_PLACEMENT),
		                    "latency") == 0
		      ? PS_PLACEMENT_LATENCY
		      : PS_PLACEMENT_UNIFORM;
		o.probe_count = (uint32_t) cfg_int(FB_OPT_PS_PROBE_COUNT);
		o.probe_bytes = (uint64_t) cfg_int(FB_OPT_PS_PROBE_BYTES);
		o.seed        = (uint64_t) cfg_int(FB_OPT_PS_SEED);
		o.reprobe_s   = (uint32_t) cfg_int(FB_OPT_PS_REPROBE_S);
		o.reprobe_change_pct = (uint32_t) cfg_int(
		    FB_OPT_PS_REPROBE_CHANGE_PCT);
		o.dead_after_ms = (uint32_t) cfg_int(FB_OPT_PS_DEAD_AFTER_MS);
		o.secret_file   = secret_file;
		o.heartbeat_ms  = (uint32_t) cfg_int(FB_OPT_PS_HEARTBEAT_MS);
		o.replicas      = (uint32_t) cfg_int(FB_OPT_PS_REPLICAS);
		o.state_dir     = *cfg_str(FB_OPT_PS_STATE_DIR)
		        ? cfg_str(FB_OPT_PS_STATE_DIR)
		        : NULL;
		o.max_job_bytes = (uint64_t) cfg_int(FB_OPT_PS_MAX_JOB_MB)
		    << 20;
		o.max_inflight = (size_t) cfg_int(FB_OPT_PS_MAX_INFLIGHT_MB)
		    << 20;
		o.max_lr = fb_config_f64(&cfg, FB_OPT_PS_MAX_LR);
		tls_opts(&o.tls_cert, &o.tls_key, &o.tls_ca);
		if ((rv = ps_scheduler_open(&o, &sched)) != FB_OK) {
			FB_LOG(FB_LOG_ERR, "main",
			    "cannot start scheduler: %s", fb_strerror(rv));
			return 1;
		}
		write_url_file(FB_OPT_PS_URL_FILE, ps_scheduler_url(sched));
	} else {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		o.url                   = cfg_str(FB_OPT_PS_LISTEN);
		o.advertise_url         = *cfg_str(FB_OPT_PS_ADVERTISE)
		            ? cfg_str(FB_OPT_PS_ADVERTISE)
		            : NULL;
		o.scheduler_url         = cfg_str(FB_OPT_PS_SCHEDULER);
		o.contexts              = (int) cfg_int(FB_OPT_PS_CONTEXTS);
		o.max_msg  = (size_t) cfg_int(FB_OPT_PS_MAX_MSG_MB) << 20;
		o.capacity = (uint64_t) cfg_int(FB_OPT_PS_CAPACITY_MB) << 20;
		o.stall_warn_ms  = (uint32_t) cfg_int(FB_OPT_PS_STALL_WARN_MS);
		o.heartbeat_ms   = (uint32_t) cfg_int(FB_OPT_PS_HEARTBEAT_MS);
		o.snapshot_dir   = *cfg_str(FB_OPT_PS_SNAPSHOT_DIR)
		      ? cfg_str(FB_OPT_PS_SNAPSHOT_DIR)
		      : NULL;
		o.snapshot_every = (uint64_t) cfg_int(
		    FB_OPT_PS_SNAPSHOT_EVERY);
		o.restore      = strcmp(cfg_str(FB_OPT_PS_RESTORE), "yes") == 0
		         ? PS_RESTORE_YES
		         : strcmp(cfg_str(FB_OPT_PS_RESTORE), "no") == 0
		         ? PS_RESTORE_NO
		         : PS_RESTORE_AUTO;
		o.secret_file  = secret_file;
		o.max_inflight = (size_t) cfg_int(FB_OPT_PS_MAX_INFLIGHT_MB)
		    << 20;
		o.max_samples = (uint32_t) cfg_int(
		    FB_OPT_PS_MAX_SAMPLES_PER_PUSH);
		tls_opts(&o.tls_cert, &o.tls_key, &o.tls_ca);
		if (o.snapshot_every > 0 && o.snapshot_dir == NULL) {
			fprintf(stderr,
			    "ps-server: --snapshot-every needs "
			    "--snapshot-dir\n");
			return 2;
		}
		if (*o.scheduler_url == '\0') {
			fprintf(stderr,
			    "ps-server: --role=server needs "
			    "--scheduler=URL\n");
			return 2;
		}
		if ((rv = ps_server_open(&o, &srv)) != FB_OK) {
			FB_LOG(FB_LOG_ERR, "main", "cannot start server: %s",
			    fb_strerror(rv));
			return 1;
		}
		write_url_file(FB_OPT_PS_URL_FILE, ps_server_url(srv));
	}
	if (http_open(sched, srv, &http) != 0) {
		ps_scheduler_close(sched);
		ps_server_close(srv);
		return 1;
	}
	while (!stop) {
		fb_sleep_us(100000);
	}
	FB_LOG(FB_LOG_NOTICE, "main", "shutting down");
	// A server leaves gracefully: its shards move to the others first.
	// (A second signal while waiting does not interrupt the wait; the
	// timeout bounds it.)
	if (srv != NULL && cfg_int(FB_OPT_PS_LEAVE_TIMEOUT_MS) > 0) {
		int lrv = ps_server_leave(srv,
		    (uint32_t) cfg_int(FB_OPT_PS_LEAVE_TIMEOUT_MS));
		if (lrv != FB_OK && lrv != FB_ESTATE) {
			FB_LOG(FB_LOG_WARN, "main", "leave: %s",
			    fb_strerror(lrv));
		}
	}
	fb_exit_watchdog(SHUTDOWN_GRACE_S, 1, "shutdown after the leave");
	obs_http_close(http); // its handlers read the role: close it first
	ps_scheduler_close(sched);
	ps_server_close(srv);
	fb_config_fini(&cfg);
	return 0;
}
