// main.c — ps-server: `--role=scheduler` or `--role=server`, and
// `--role=snapshot`, a one-shot client that snapshots the whole job.
//
// Its options are the scheduler's and the server's entries of the one
// config table (base/src/options.c, engine in <fb/config.h>): flags
// (--name=value or --name value) override FERRY_NAME environment
// variables, which override the --config file, which overrides defaults;
// --help prints the table; --print-config prints every value with its
// source; the start-up dump logs every value. config.c binds them to the
// roles' option structs and checks the rules that tie options together
// (a multiple of 4, latency needs probing, a server needs a scheduler),
// so this file only runs the role. With --http-listen it serves the role's
// metrics, health, readiness and state over HTTP (obs/) from start to
// exit, the leave included: /readyz says "leaving" while the shards move
// away.
#define _GNU_SOURCE // cpu_set_t (cpus.h)
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "cpus.h"
#include "fb/config.h"
#include "ps/ps.h"

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
	a.secret_file = ps__cfg_text(&cfg, FB_OPT_PS_SECRET_FILE);
	a.tls_cert    = ps__cfg_text(&cfg, FB_OPT_PS_TLS_CERT);
	a.tls_key     = ps__cfg_text(&cfg, FB_OPT_PS_TLS_KEY);
	a.tls_ca      = ps__cfg_text(&cfg, FB_OPT_PS_TLS_CA);
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

// open_role opens the scheduler or the server, as --role says, into
// *sched or *srv and writes its URL to --url-file. Returns PS_CFG_RUN, or
// the exit status: 2 for options a server refuses, 1 when the role cannot
// start (logged).
static int
open_role(const char *role, struct ps_scheduler **sched,
    struct ps_server **srv)
{
	int rv;
	if (strcmp(role, "scheduler") == 0) {
		struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
		ps__cfg_scheduler(&cfg, &o);
		if ((rv = ps_scheduler_open(&o, sched)) != FB_OK) {
			FB_LOG(FB_LOG_ERR, "main",
			    "cannot start scheduler: %s", fb_strerror(rv));
			return 1;
		}
		write_url_file(FB_OPT_PS_URL_FILE, ps_scheduler_url(*sched));
		return PS_CFG_RUN;
	}
	struct ps_server_opts o = PS_SERVER_OPTS_INIT;
	if ((rv = ps__cfg_server(&cfg, &o)) != PS_CFG_RUN) {
		return rv;
	}
	if ((rv = ps_server_open(&o, srv)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "main", "cannot start server: %s",
		    fb_strerror(rv));
		return 1;
	}
	write_url_file(FB_OPT_PS_URL_FILE, ps_server_url(*srv));
	return PS_CFG_RUN;
}

int
main(int argc, char **argv)
{
	struct ps_scheduler *sched = NULL;
	struct ps_server    *srv   = NULL;
	struct obs_http     *http  = NULL;
	const char          *role;
	int                  rv;

	if ((rv = ps__cfg_load(&cfg, argc, argv)) != PS_CFG_RUN) {
		return rv;
	}
	// Message-sized blocks stay in the heap for the next message
	// (fb_malloc_tune: a page fault per 4 KiB otherwise).
	(void) fb_malloc_tune();
	if ((rv = ps__cfg_check(&cfg)) != PS_CFG_RUN) {
		return rv;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);

	role = cfg_str(FB_OPT_PS_ROLE);
	if (strcmp(role, "snapshot") == 0) {
		return snapshot_job(cfg_str(FB_OPT_PS_SCHEDULER));
	}
	// Before nng starts its threads: they inherit this thread's CPUs.
	char why[300];
	if (ps__cpus_apply(cfg_str(FB_OPT_PS_CPUS),
	        strcmp(role, "scheduler") == 0, why, sizeof(why)) != 0) {
		fprintf(stderr, "ps-server: %s\n", why);
		return 2;
	}
	if (ps__cfg_text(&cfg, FB_OPT_PS_SECRET_FILE) == NULL &&
	    *cfg_str(FB_OPT_PS_TLS_CA) == '\0') {
		FB_LOG(FB_LOG_WARN, "main",
		    "no --secret-file and no --tls-ca: requests are not "
		    "authenticated, so anyone who can reach this %s's port "
		    "can join, push or read the model (docs/security.md)",
		    role);
	}
	if ((rv = open_role(role, &sched, &srv)) != PS_CFG_RUN) {
		return rv;
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
