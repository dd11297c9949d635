// test_http.c — the HTTP endpoints of a real job: a scheduler, two servers
// and two trainers, every one with --http-listen. /readyz before and after
// the job starts and during a server's leave, /healthz, /metrics in the
// Prometheus text format with every metric of docs/operations.md's table
// and counters that increase across steps, /debug/state as JSON with the
// map epoch. promtool (Debian's prometheus package) also checks the
// metrics when it is installed.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fb/fb.h"
#include "integration_tests.h"
#include "scrape.h"

#define N_PROC 5 // scheduler, server-0, server-1, trainer-0, trainer-1
static const char *const names[N_PROC] = { "scheduler", "server-0", "server-1",
	"trainer-0", "trainer-1" };

static void
nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

// read_url waits (up to 30 s) for <dir>/<name>.http and reads it.
static void
read_url(const struct lc *c, const char *name, char *url, size_t n)
{
	char  file[64], path[300];
	FILE *f = NULL;
	snprintf(file, sizeof(file), "%s.http", name);
	lc_path(c, file, path, sizeof(path));
	for (int i = 0; i < 1500 && f == NULL; i++) {
		if ((f = fopen(path, "r")) == NULL) {
			nap_ms(20);
		}
	}
	ck_assert_msg(f != NULL, "%s wrote no %s (logs in %s)", name, path,
	    c->dir);
	ck_assert_ptr_nonnull(fgets(url, (int) n, f));
	fclose(f);
	url[strcspn(url, "\n")] = '\0';
}

// get fetches url+path, asserting an answer; returns the status.
static int
get(const char *url, const char *path, char **body)
{
	int st;
	ck_assert_msg(pt_http_get(url, path, &st, body) == 0,
	    "no answer from %s%s", url, path);
	return st;
}

// scrape fetches /metrics of url and checks the text format (and runs
// promtool on it when installed). Returns the body (free it).
static char *
scrape(const struct lc *c, const char *url)
{
	char *body, why[256];
	ck_assert_int_eq(get(url, "/metrics", &body), 200);
	ck_assert_msg(pt_prom_check(body, why, sizeof(why)) > 0,
	    "%s/metrics: %s", url, why);
	if (system("command -v promtool >/dev/null 2>&1") == 0) {
		char  path[300], cmd[700];
		FILE *f = fopen(lc_path(c, "scrape.prom", path, sizeof(path)),
		    "w");
		ck_assert_ptr_nonnull(f);
		fputs(body, f);
		fclose(f);
		snprintf(cmd, sizeof(cmd), "promtool check metrics < %s >&2",
		    path);
		ck_assert_msg(system(cmd) == 0, "promtool refused %s/metrics",
		    url);
	}
	return body;
}

// value reads one sample, failing the test when it is absent.
static double
value(const char *text, const char *name, const char *labels)
{
	double v;
	ck_assert_msg(pt_prom_value(text, name, labels, &v) == 0,
	    "no sample %s{%s}", name, labels ? labels : "");
	return v;
}

// value0 reads one sample that may still be hidden (a counter nobody has
// moved yet is left out of a scrape): absent reads as 0.
static double
value0(const char *text, const char *name, const char *labels)
{
	double v;
	return pt_prom_value(text, name, labels, &v) == 0 ? v : 0;
}

// wait_ready polls url's /readyz until it answers want (up to 60 s).
static void
wait_ready(const char *url, int want)
{
	int st = 0;
	for (int i = 0; i < 600; i++) {
		char *body;
		st = get(url, "/readyz", &body);
		free(body);
		if (st == want) {
			return;
		}
		nap_ms(100);
	}
	ck_abort_msg("%s/readyz stayed %d, want %d", url, st, want);
}

// map_epoch returns the "map_epoch" of a /debug/state JSON.
static long
map_epoch(const char *json)
{
	const char *p = strstr(json, "\"map_epoch\":");
	ck_assert_msg(p != NULL, "no map_epoch in %s", json);
	return strtol(p + strlen("\"map_epoch\":"), NULL, 10);
}

// check_documented checks that every documented metric (counter, gauge,
// histogram rows of the table) is declared by the processes the table
// names; texts[i] is process names[i]'s scrape.
static void
check_documented(char *const texts[N_PROC])
{
	static char names_doc[128][96], procs[128][64];
	int         n = pt_doc_metrics(DOCS_OPERATIONS, names_doc, procs, 128);
	ck_assert_msg(n >= 30, "read %d metrics from %s's table", n,
	    DOCS_OPERATIONS);
	for (int i = 0; i < n; i++) {
		int all    = strstr(procs[i], "all") != NULL;
		int expect = 0;
		for (int p = 0; p < N_PROC; p++) {
			const char *role = p == 0 ? "scheduler"
			    : p <= 2              ? "server"
			                          : "trainer";
			if (!all && strstr(procs[i], role) == NULL) {
				continue;
			}
			expect++;
			ck_assert_msg(
			    pt_prom_has_family(texts[p], names_doc[i]),
			    "%s (documented for %s) missing from %s's "
			    "/metrics",
			    names_doc[i], procs[i], names[p]);
		}
		ck_assert_msg(expect > 0, "%s: no process named in '%s'",
		    names_doc[i], procs[i]);
	}
}

// The endpoints through a job's life: see the file comment.
START_TEST(test_http_job_endpoints)
{
	const char *sflags[] = { "--leave-timeout-ms=5000", NULL };
	char        url[N_PROC][128], data[520], hl[320], hpath[300];
	char       *m1[N_PROC], *m2[N_PROC], *body;
	struct lc   c;

	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start_http(&c, 2, 2, sflags, 1);
	for (int p = 0; p < 3; p++) {
		read_url(&c, names[p], url[p], sizeof(url[p]));
		ck_assert_int_eq(get(url[p], "/healthz", &body), 200);
		free(body);
		// No trainer yet: the job has not started.
		ck_assert_int_eq(get(url[p], "/readyz", &body), 503);
		ck_assert_ptr_nonnull(strstr(body, "not ready: "));
		free(body);
	}
	// Trainer 0 alone cannot start the job either.
	for (int r = 0; r < 2; r++) {
		char file[32];
		snprintf(file, sizeof(file), "trainer-%d.http", r);
		snprintf(hl, sizeof(hl), "--http-url-file=%s",
		    lc_path(&c, file, hpath, sizeof(hpath)));
		const char *flags[] = { "--epochs=50", "--log-interval=0",
			"--seed=1", data, "--http-listen=127.0.0.1:0", hl,
			NULL };
		lc_trainer(&c, r, flags);
		read_url(&c, names[3 + r], url[3 + r], sizeof(url[3 + r]));
		if (r == 0) {
			ck_assert_int_eq(get(url[3], "/readyz", &body), 503);
			ck_assert_ptr_nonnull(strstr(body, "joining"));
			free(body);
			ck_assert_int_eq(get(url[0], "/readyz", &body), 503);
			free(body);
		}
	}
	for (int p = 0; p < N_PROC; p++) {
		wait_ready(url[p], 200);
	}
	for (int p = 0; p < N_PROC; p++) {
		m1[p] = scrape(&c, url[p]);
	}
	nap_ms(1500);
	for (int p = 0; p < N_PROC; p++) {
		m2[p] = scrape(&c, url[p]);
	}
	check_documented(m2);
	// Counters move with the steps, on both sides.
	for (int p = 3; p < N_PROC; p++) {
		ck_assert(value(m2[p], "ferry_trainer_steps_total", NULL) >
		    value(m1[p], "ferry_trainer_steps_total", NULL));
		ck_assert(
		    value(m2[p], "ferry_trainer_sent_bytes_total", NULL) >
		    value(m1[p], "ferry_trainer_sent_bytes_total", NULL));
		ck_assert(value(m2[p],
		              "ferry_trainer_push_pull_duration_seconds_count",
		              NULL) >
		    value(m1[p],
		        "ferry_trainer_push_pull_duration_seconds_count",
		        NULL));
	}
	for (int p = 1; p <= 2; p++) {
		const char *pp = "method=\"PushPull\"";
		// A server can be ready before its first sync round has
		// closed, so the first scrape may not show these yet.
		ck_assert(value(m2[p], "ferry_rpc_requests_total", pp) >
		    value0(m1[p], "ferry_rpc_requests_total", pp));
		ck_assert(
		    value(m2[p], "ferry_server_updates_applied_total", NULL) >
		    value0(m1[p], "ferry_server_updates_applied_total", NULL));
		ck_assert(
		    value(m2[p], "ferry_rpc_received_bytes_total", NULL) >
		    value(m1[p], "ferry_rpc_received_bytes_total", NULL));
		ck_assert(value(m2[p], "ferry_server_map_epoch", NULL) >= 1);
	}
	ck_assert(value(m2[0], "ferry_scheduler_job_running", NULL) == 1);
	ck_assert(value(m2[0], "ferry_scheduler_members",
	              "role=\"trainer\",state=\"live\"") == 2);
	// /debug/state: JSON with the map epoch (scheduler and servers).
	for (int p = 0; p < N_PROC; p++) {
		char why[128];
		ck_assert_int_eq(get(url[p], "/debug/state", &body), 200);
		ck_assert_msg(pt_json_check(body, why, sizeof(why)) == 0,
		    "%s/debug/state: %s: %s", url[p], why, body);
		if (p < 3) {
			ck_assert_int_ge(map_epoch(body), 1);
		}
		free(body);
		free(m1[p]);
		free(m2[p]);
	}
	// Stop the trainers (a signal: they leave the job), then make a
	// server leave while its peer is stopped, so that its shards cannot
	// arrive yet: it must answer "not ready: leaving" meanwhile.
	for (int r = 0; r < 2; r++) {
		kill(c.trainer_pids[r], SIGTERM);
	}
	ck_assert_int_eq(lc_wait_trainers(&c, 60), 2);
	kill(c.server_pids[1], SIGSTOP);
	kill(c.server_pids[0], SIGTERM);
	int seen = 0;
	for (int i = 0; i < 100 && !seen; i++) {
		int st = get(url[1], "/readyz", &body);
		seen   = st == 503 && strstr(body, "leaving") != NULL;
		free(body);
		nap_ms(20);
	}
	kill(c.server_pids[1], SIGCONT);
	ck_assert_msg(seen, "server-0 never said 'leaving' (logs in %s)",
	    c.dir);
	lc_stop(&c);
}
END_TEST

Suite *
suite_http(void)
{
	Suite *s  = suite_create("http");
	TCase *tc = tcase_create("http");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_http_job_endpoints);
	suite_add_tcase(s, tc);
	return s;
}
