// local_cluster.c — start and stop real ps-server and trainer processes.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integration_tests.h"
#include "pt.h"

extern char **environ;

char *
lc_path(const struct lc *c, const char *name, char *buf, size_t n)
{
	snprintf(buf, n, "%s/%s", c->dir, name);
	return buf;
}

static int
spawn(struct lc *c, const char **argv, const char *out, const char *err)
{
	posix_spawn_file_actions_t fa;
	pid_t                      pid;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out,
	    O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_addopen(&fa, 2, err,
	    O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL,
	                     (char *const *) argv, environ),
	    0);
	posix_spawn_file_actions_destroy(&fa);
	ck_assert_int_lt(c->n_pids, 64);
	c->pids[c->n_pids++] = pid;
	return pid;
}

static void
nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

void
lc_start(struct lc *c, int trainers, int servers, const char **sflags)
{
	lc_start_http(c, trainers, servers, sflags, 0);
}

// sched_start starts the scheduler of a new cluster in c (a new temp dir)
// and reads its URL.
static void
sched_start(struct lc *c, const char *trainers, int servers,
    const char **sflags, int http)
{
	char        urlfile[300], out[300], err[300], t[32], s[32], uf[320];
	char        hf[340], hpath[300];
	const char *argv[32];
	int         n = 0;
	FILE       *f;

	memset(c, 0, sizeof(*c));
	snprintf(c->dir, sizeof(c->dir), "/tmp/ferry-it-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(c->dir));
	lc_path(c, "scheduler.url", urlfile, sizeof(urlfile));
	snprintf(t, sizeof(t), "--trainers=%s", trainers);
	snprintf(s, sizeof(s), "--servers=%d", servers);
	snprintf(uf, sizeof(uf), "--url-file=%s", urlfile);
	argv[n++] = PS_SERVER_BIN;
	argv[n++] = "--role=scheduler";
	argv[n++] = t;
	argv[n++] = s;
	argv[n++] = uf;
	if (http) {
		snprintf(hf, sizeof(hf), "--http-url-file=%s",
		    lc_path(c, "scheduler.http", hpath, sizeof(hpath)));
		argv[n++] = "--http-listen=127.0.0.1:0";
		argv[n++] = hf;
	}
	for (int i = 0; sflags && sflags[i]; i++) {
		argv[n++] = sflags[i];
	}
	argv[n] = NULL;
	spawn(c, argv, lc_path(c, "scheduler.out", out, sizeof(out)),
	    lc_path(c, "scheduler.log", err, sizeof(err)));
	for (int i = 0; i < 200; i++) {
		if ((f = fopen(urlfile, "r")) != NULL) {
			break;
		}
		nap(25);
	}
	ck_assert_msg(f != NULL, "scheduler did not start (see %s)", c->dir);
	ck_assert_ptr_nonnull(fgets(c->sched_url, sizeof(c->sched_url), f));
	fclose(f);
	c->sched_url[strcspn(c->sched_url, "\n")] = '\0';
}

void
lc_start_sched(struct lc *c, int trainers, int servers, const char **sflags)
{
	char t[16];
	snprintf(t, sizeof(t), "%d", trainers);
	sched_start(c, t, servers, sflags, 0);
}

int
lc_server(struct lc *c, int m, const char **flags, const char *log)
{
	char        sch[300], err[300];
	const char *argv[32];
	int         n = 0;

	snprintf(sch, sizeof(sch), "--scheduler=%s", c->sched_url);
	argv[n++] = PS_SERVER_BIN;
	argv[n++] = "--role=server";
	argv[n++] = sch;
	for (int i = 0; flags && flags[i] && n < 31; i++) {
		argv[n++] = flags[i];
	}
	argv[n]           = NULL;
	c->server_pids[m] = spawn(c, argv, "/dev/null",
	    lc_path(c, log, err, sizeof(err)));
	return c->server_pids[m];
}

void
lc_start_http(struct lc *c, int trainers, int servers, const char **sflags,
    int http)
{
	char t[16];
	snprintf(t, sizeof(t), "%d", trainers);
	lc_start_elastic(c, t, servers, sflags, http);
}

void
lc_start_elastic(struct lc *c, const char *trainers, int servers,
    const char **sflags, int http)
{
	char        err[300], sch[300], hf[340], hpath[300];
	const char *argv[32];
	int         n = 0;

	sched_start(c, trainers, servers, sflags, http);
	snprintf(sch, sizeof(sch), "--scheduler=%s", c->sched_url);
	for (int m = 0; m < servers; m++) {
		char name[64];
		n         = 0;
		argv[n++] = PS_SERVER_BIN;
		argv[n++] = "--role=server";
		argv[n++] = sch;
		if (http) {
			snprintf(name, sizeof(name), "server-%d.http", m);
			snprintf(hf, sizeof(hf), "--http-url-file=%s",
			    lc_path(c, name, hpath, sizeof(hpath)));
			argv[n++] = "--http-listen=127.0.0.1:0";
			argv[n++] = hf;
		}
		for (int i = 0; sflags && sflags[i]; i++) {
			argv[n++] = sflags[i];
		}
		argv[n] = NULL;
		snprintf(name, sizeof(name), "server-%d.log", m);
		c->server_pids[m] = spawn(c, argv, "/dev/null",
		    lc_path(c, name, err, sizeof(err)));
	}
}

void
lc_trainer(struct lc *c, int rank, const char **flags)
{
	char        sch[300], rk[32], out[300], err[300], name[64];
	const char *argv[48];
	int         n = 0;
	snprintf(sch, sizeof(sch), "--scheduler=%s", c->sched_url);
	snprintf(rk, sizeof(rk), "--rank=%d", rank);
	argv[n++] = TRAINER_BIN;
	argv[n++] = sch;
	argv[n++] = rk;
	for (int i = 0; flags && flags[i] && n < 46; i++) {
		argv[n++] = flags[i];
	}
	argv[n] = NULL;
	snprintf(name, sizeof(name), "trainer-%d.out", rank);
	lc_path(c, name, out, sizeof(out));
	snprintf(name, sizeof(name), "trainer-%d.log", rank);
	c->trainer_pids[c->n_trainers++] = spawn(c, argv, out,
	    lc_path(c, name, err, sizeof(err)));
}

int
lc_trainer_any(struct lc *c, int k, const char **flags)
{
	char        sch[300], out[300], err[300], name[64];
	const char *argv[48];
	int         n = 0;
	snprintf(sch, sizeof(sch), "--scheduler=%s", c->sched_url);
	argv[n++] = TRAINER_BIN;
	argv[n++] = sch;
	for (int i = 0; flags && flags[i] && n < 46; i++) {
		argv[n++] = flags[i];
	}
	argv[n] = NULL;
	snprintf(name, sizeof(name), "joiner-%d.out", k);
	lc_path(c, name, out, sizeof(out));
	snprintf(name, sizeof(name), "joiner-%d.log", k);
	ck_assert_int_lt(c->n_trainers, 16);
	c->trainer_pids[c->n_trainers++] = spawn(c, argv, out,
	    lc_path(c, name, err, sizeof(err)));
	return c->trainer_pids[c->n_trainers - 1];
}

int
lc_wait_trainers(struct lc *c, int timeout_s)
{
	int      ok = 0, left = c->n_trainers;
	uint64_t end      = fb_clock_ms() + (uint64_t) timeout_s * 1000;
	int      done[16] = { 0 };
	while (left > 0 && fb_clock_ms() < end) {
		for (int i = 0; i < c->n_trainers; i++) {
			int st;
			if (done[i] ||
			    waitpid(c->trainer_pids[i], &st, WNOHANG) <= 0) {
				continue;
			}
			done[i] = 1;
			left--;
			ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
			for (int k = 0; k < c->n_pids; k++) {
				if (c->pids[k] == c->trainer_pids[i]) {
					c->pids[k] = 0; // reaped
				}
			}
		}
		nap(20);
	}
	return ok;
}

void
lc_stop(struct lc *c)
{
	for (int i = 0; i < c->n_pids; i++) {
		if (c->pids[i] > 0) {
			kill(c->pids[i], SIGTERM);
		}
	}
	// ps-server bounds its own shutdown (leave, then at most 15 s), so
	// a process still there after 60 s is a hang: kill it and fail,
	// naming it, instead of hanging the suite until its timeout.
	pid_t stuck = 0;
	for (int i = 0; i < c->n_pids; i++) {
		if (c->pids[i] <= 0) {
			continue;
		}
		int done = 0;
		for (int t = 0; t < 3000 && !done; t++) {
			done = waitpid(c->pids[i], NULL, WNOHANG) != 0;
			if (!done) {
				nap(20);
			}
		}
		if (!done) {
			stuck = c->pids[i];
			kill(c->pids[i], SIGKILL);
			waitpid(c->pids[i], NULL, 0);
		}
	}
	ck_assert_msg(stuck == 0,
	    "process %d did not exit within 60 s of SIGTERM (logs: %s)",
	    (int) stuck, c->dir);
}

int
lc_scheduler_restart(struct lc *c, const char **flags, const char *log)
{
	char        listen[300], out[300], err[300];
	const char *argv[32];
	int         n = 0;

	snprintf(listen, sizeof(listen), "--listen=%s", c->sched_url);
	argv[n++] = PS_SERVER_BIN;
	argv[n++] = "--role=scheduler";
	argv[n++] = listen;
	for (int i = 0; flags && flags[i] && n < 31; i++) {
		argv[n++] = flags[i];
	}
	argv[n] = NULL;
	return spawn(c, argv,
	    lc_path(c, "scheduler-again.out", out, sizeof(out)),
	    lc_path(c, log, err, sizeof(err)));
}

double
lc_summary_value(const char *path, const char *key)
{
	char  line[8192], pat[64];
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	while (fgets(line, sizeof(line), f) != NULL) {
		char *s = strstr(line, "{\"summary\"");
		char *v = s ? strstr(s, pat) : NULL;
		if (v != NULL) {
			fclose(f);
			return strtod(v + strlen(pat), NULL);
		}
	}
	fclose(f);
	ck_abort_msg("no summary with %s in %s", key, path);
	return 0;
}
