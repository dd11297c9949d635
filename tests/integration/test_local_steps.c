// test_local_steps.c — local-steps jobs (--local-steps H: DiLoCo, docs/
// algorithms.md §8) in real processes on loopback (ctest
// integration_local_steps): each trainer takes H inner steps on its own
// copy, pushes its pseudo-gradient, and the servers apply the outer
// optimizer. What it checks, always on the trainers' --weights-out files
// compared byte for byte:
//   - H = 1 with inner SGD and outer SGD at lr 1 is today's sync job;
//     H = 4 trains and equals its own rerun;
//   - a trainer SIGKILLed in the middle of an outer phase loses only its
//     local steps: the survivors end as when it left gracefully at the
//     end of the round before;
//   - a server SIGKILLed mid-job with --replicas 2 (one backup per shard)
//     changes no weight (the outer momentum is replicated server state);
//   - streaming (--fragments 2 and 4, H = 8) equals its own replay and
//     trains, and with --fragment-delay 1 still trains.
// Every wait is on an event (a progress line, a metric, an exit) with a
// deadline.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration_tests.h"
#include "pt.h"
#include "scrape.h"

// The small MLP keeps every job to seconds on a busy machine.
#define LAYERS "--layers=784,32,10"
#define MAX_FLAGS 32

// file_has says whether the file at path contains needle.
static int
file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char  line[4096];
	int   found = 0;
	while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
		found = strstr(line, needle) != NULL;
	}
	if (f != NULL) {
		fclose(f);
	}
	return found;
}

// last_step returns the step of the last progress line ("step N | ...")
// in the file at path, 0 when there is none.
static unsigned long long
last_step(const char *path)
{
	FILE              *f = fopen(path, "r");
	char               line[4096];
	unsigned long long n = 0, v;
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "step %llu |", &v) == 1) {
			n = v;
		}
	}
	if (f != NULL) {
		fclose(f);
	}
	return n;
}

// out_path writes the path of trainer rank's stdout into buf.
static char *
out_path(const struct lc *c, int rank, char *buf, size_t n)
{
	char name[32];
	snprintf(name, sizeof(name), "trainer-%d.out", rank);
	return lc_path(c, name, buf, n);
}

// wait_step waits (up to timeout_s) until trainer rank's progress lines
// reach step, failing the test otherwise.
static void
wait_step(const struct lc *c, int rank, unsigned long long step, int timeout_s)
{
	char     path[300];
	uint64_t end = fb_clock_ms() + (uint64_t) timeout_s * 1000;
	out_path(c, rank, path, sizeof(path));
	while (last_step(path) < step) {
		ck_assert_msg(fb_clock_ms() < end,
		    "trainer %d at step %llu after %d s, want %llu (logs: %s)",
		    rank, last_step(path), timeout_s, step, c->dir);
		fb_sleep_us(5000);
	}
}

// files_equal says whether the files at a and b hold the same bytes (and
// exist).
static int
files_equal(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	int   same = fa != NULL && fb != NULL;
	while (same) {
		int ca = fgetc(fa), cb = fgetc(fb);
		same = ca == cb;
		if (ca == EOF || cb == EOF) {
			break;
		}
	}
	if (fa != NULL) {
		fclose(fa);
	}
	if (fb != NULL) {
		fclose(fb);
	}
	return same;
}

// same_weights says whether rank's <dir>/w<rank>.bin of runs a and b hold
// the same bytes.
static int
same_weights(const struct lc *a, const struct lc *b, int rank)
{
	char pa[320], pb[320], name[16];
	snprintf(name, sizeof(name), "w%d.bin", rank);
	lc_path(a, name, pa, sizeof(pa));
	lc_path(b, name, pb, sizeof(pb));
	return files_equal(pa, pb);
}

// A job: `trainers` trainers on `servers` servers, the scheduler and the
// servers with sflags, every trainer with tflags and rank r also with
// rflags[r] (NULL-terminated lists, NULL for none); rank `http` - 1 (0:
// none) serves its metrics, its URL in <dir>/t<rank>.http.
struct job {
	int          trainers;
	int          servers;
	const char **sflags;
	const char **tflags;
	const char **rflags[4];
	int          http;
};

// job_start starts j in c: every trainer on the data set with seed 3, the
// small MLP, batch 32, heartbeats every 200 ms, a 30 s deadline per call,
// no progress lines unless its flags ask, and its final weights in
// <dir>/w<rank>.bin.
static void
job_start(struct lc *c, const struct job *j)
{
	char data[520], wo[4][340], hf[340];
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(c, j->trainers, j->servers, j->sflags);
	for (int r = 0; r < j->trainers; r++) {
		const char *f[MAX_FLAGS] = { data, "--seed=3", LAYERS,
			"--batch=32", "--epochs=100", "--log-interval=0",
			"--heartbeat-ms=200", "--timeout-ms=30000", wo[r] };
		int         n            = 9;
		snprintf(wo[r], sizeof(wo[r]), "--weights-out=%s/w%d.bin",
		    c->dir, r);
		for (int i = 0; j->tflags && j->tflags[i] && n < MAX_FLAGS - 1;
		     i++) {
			f[n++] = j->tflags[i];
		}
		for (int i = 0;
		     j->rflags[r] && j->rflags[r][i] && n < MAX_FLAGS - 1;
		     i++) {
			f[n++] = j->rflags[r][i];
		}
		if (r == j->http - 1) {
			snprintf(hf, sizeof(hf), "--http-url-file=%s/t%d.http",
			    c->dir, r);
			f[n++] = "--http-listen=127.0.0.1:0";
			f[n++] = hf;
		}
		f[n] = NULL;
		lc_trainer(c, r, f);
	}
}

// job_run runs j to its end: every trainer must exit 0. Leaves c stopped.
static void
job_run(struct lc *c, const struct job *j)
{
	job_start(c, j);
	int ok = lc_wait_trainers(c, 150);
	lc_stop(c);
	ck_assert_msg(ok == j->trainers,
	    "%d of %d trainers exited 0 (logs: %s)", ok, j->trainers, c->dir);
}

// summary returns key of trainer rank's JSON summary.
static double
summary(const struct lc *c, int rank, const char *key)
{
	char path[300];
	return lc_summary_value(out_path(c, rank, path, sizeof(path)), key);
}

// Inner SGD, outer SGD at lr 1 and H = 1: the servers apply
// (float)(0.1 / (2 x 32)) x (sum of the 2 ranks' gradients), today's sync
// step at --lr 0.1, so both ranks' weights equal the plain sync job's bit
// for bit. H = 4 (the default outer Nesterov) trains, differs from sync,
// and equals its own rerun.
START_TEST(test_local_steps_h1_equals_sync)
{
	struct lc   sync, h1, h4, again;
	const char *plain[] = { "--max-steps=40", "--lr=0.1", NULL };
	const char *one[]   = { "--max-steps=40", "--local-steps=1",
		  "--optimizer=sgd", "--outer-optimizer=sgd", "--outer-lr=1",
		  "--lr=0.1", NULL };
	const char *four[]  = { "--max-steps=120", "--local-steps=4",
		 "--lr=0.1", NULL };
	const char *r0[]    = { "--log-interval=4", NULL };
	struct job  j       = { 2, 2, NULL, plain, { NULL }, 0 };

	job_run(&sync, &j);
	j.tflags = one;
	job_run(&h1, &j);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(same_weights(&sync, &h1, r),
		    "rank %d: H = 1 differs from the sync job (%s vs %s)", r,
		    h1.dir, sync.dir);
	}
	// Not vacuous: the H = 1 job ran in local-steps mode.
	ck_assert(summary(&h1, 0, "local_steps") == 1);
	ck_assert(summary(&h1, 0, "outer_rounds") == 40);

	j.tflags    = four;
	j.rflags[0] = r0;
	job_run(&h4, &j);
	job_run(&again, &j);
	ck_assert(summary(&h4, 0, "outer_rounds") == 30);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(same_weights(&h4, &again, r),
		    "rank %d: H = 4 differs from its rerun (%s vs %s)", r,
		    h4.dir, again.dir);
		ck_assert_msg(!same_weights(&h4, &sync, r),
		    "rank %d: H = 4 equals the sync job", r);
	}
	double acc = summary(&h4, 0, "test_acc");
	ck_assert_msg(acc >= 0.6, "H = 4: test accuracy %.4f < 0.6 (logs: %s)",
	    acc, h4.dir);
}
END_TEST

// trainer_metric reads metric name from trainer rank's HTTP endpoint,
// whose URL it wrote to <dir>/t<rank>.http (--http-url-file); -1 while
// there is no endpoint yet.
static double
trainer_metric(const struct lc *c, int rank, const char *name)
{
	char   path[320], file[32], url[256] = "", *body;
	int    st;
	FILE  *f;
	double v = -1;
	snprintf(file, sizeof(file), "t%d.http", rank);
	if ((f = fopen(lc_path(c, file, path, sizeof(path)), "r")) == NULL) {
		return -1;
	}
	if (fgets(url, sizeof(url), f) == NULL) {
		url[0] = '\0';
	}
	fclose(f);
	url[strcspn(url, "\n")] = '\0';
	if (url[0] == '\0' || pt_http_get(url, "/metrics", &st, &body) != 0) {
		return -1;
	}
	if (st != 200 || pt_prom_value(body, name, NULL, &v) != 0) {
		v = -1;
	}
	free(body);
	return v;
}

// The trainer killed mid-phase: 3 trainers, H = 4, rank 2 slowed (400 ms
// in every inner step) and serving its metrics. It is SIGKILLed once its
// ferry_trainer_steps_total shows an inner step of outer phase
// KILL_ROUND taken (9 or 10 of 9..12): it has pulled round KILL_ROUND - 1
// and is at least one slowed step (the one before the push) away from
// pushing round KILL_ROUND, and the kill follows that read by less than a
// step. The scheduler declares it dead on its closed connection, round
// KILL_ROUND closes over the 2 survivors' pseudo-gradients, and the
// survivors end with the weights of the reference job, where rank 2
// stops at step 8 (--max-steps) and leaves.
#define H 4
#define KILL_ROUND 3
#define SLOW_MS 400
#define SLOW_FLAG "--slow-ms=400"

START_TEST(test_local_steps_trainer_killed_mid_phase)
{
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=3000",
		NULL };
	const char *tflags[] = { "--max-steps=24", "--local-steps=4",
		"--lr=0.1", NULL };
	const char *slow[]   = { SLOW_FLAG, NULL };
	const char *leave[]  = { SLOW_FLAG, "--max-steps=8", NULL };
	struct job  j        = { 3, 1, sflags, tflags, { NULL }, 0 };
	struct lc   ref, hurt;
	char        path[300];
	double      steps = -1;

	j.rflags[2] = leave;
	job_run(&ref, &j);
	ck_assert(summary(&ref, 2, "steps") == (KILL_ROUND - 1) * H);

	j.rflags[2] = slow;
	j.http      = 3;
	job_start(&hurt, &j);
	uint64_t end = fb_clock_ms() + 120000, seen = 0;
	while (steps < (KILL_ROUND - 1) * H + 1) {
		ck_assert_msg(fb_clock_ms() < end,
		    "rank 2 at %.0f inner steps after 120 s (logs: %s)", steps,
		    hurt.dir);
		fb_sleep_us(5000);
		steps = trainer_metric(&hurt, 2, "ferry_trainer_steps_total");
		seen  = fb_clock_ms();
	}
	ck_assert_int_eq(kill(hurt.trainer_pids[2], SIGKILL), 0);
	uint64_t late = fb_clock_ms() - seen;
	ck_assert_msg(steps <= KILL_ROUND * H - 2 && late < SLOW_MS,
	    "rank 2 was killed %llu ms after it showed %.0f inner steps: "
	    "too late to be sure it had not pushed round %d (a very "
	    "loaded machine? logs: %s)",
	    (unsigned long long) late, steps, KILL_ROUND, hurt.dir);
	fprintf(stderr,
	    "local_steps: rank 2 killed after %.0f inner steps, %llu ms "
	    "after the read\n",
	    steps, (unsigned long long) late);
	int ok = lc_wait_trainers(&hurt, 150);
	lc_stop(&hurt);
	ck_assert_msg(ok == 2, "%d trainer(s) exited 0, want 2 (logs: %s)", ok,
	    hurt.dir);
	ck_assert_msg(
	    file_has(lc_path(&hurt, "scheduler.log", path, sizeof(path)),
	        "member trainer 2 dead"),
	    "the scheduler never declared trainer 2 dead (logs: %s)",
	    hurt.dir);
	for (int r = 0; r < 2; r++) {
		ck_assert(summary(&hurt, r, "steps") == 24);
		ck_assert_msg(same_weights(&ref, &hurt, r),
		    "rank %d: weights after the kill in phase %d differ from "
		    "the graceful leave after round %d (%s vs %s)",
		    r, KILL_ROUND, KILL_ROUND - 1, hurt.dir, ref.dir);
	}
}
END_TEST

// A server SIGKILLed mid-job with replicas: 2 servers, --replicas 2
// (each shard has a primary and a backup on the other server), 2
// trainers, H = 4. Server 1 is killed once rank 1 reports step 60 (outer
// round 15 of 50); the scheduler promotes the backups on server 0, the
// trainers re-route and re-send their pseudo-gradients, and both end
// with the weights of the same job without the kill, bit for bit: every
// round a trainer has pulled was applied on both copies, the outer
// Nesterov velocity included, and a re-sent push counts once.
START_TEST(test_local_steps_server_killed_replicas)
{
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=2000",
		"--replicas=2", NULL };
	const char *tflags[] = { "--max-steps=200", "--local-steps=4",
		"--lr=0.1", NULL };
	const char *r1[]     = { "--slow-ms=20", "--log-interval=4", NULL };
	struct job  j        = { 2, 2, sflags, tflags, { NULL, r1 }, 0 };
	struct lc   clean, hurt;
	char        path[300];

	job_run(&clean, &j);
	job_start(&hurt, &j);
	wait_step(&hurt, 1, 60, 120);
	ck_assert_int_eq(kill(hurt.server_pids[1], SIGKILL), 0);
	ck_assert_msg(
	    !file_has(out_path(&hurt, 0, path, sizeof(path)), "{\"summary\""),
	    "the job ended before the kill: the test proves nothing");
	int ok = lc_wait_trainers(&hurt, 150);
	lc_stop(&hurt);
	ck_assert_msg(ok == 2, "%d trainer(s) exited 0, want 2 (logs: %s)", ok,
	    hurt.dir);
	lc_path(&hurt, "scheduler.log", path, sizeof(path));
	ck_assert_msg(file_has(path, "promoted to a backup"),
	    "no promotion map (logs: %s)", hurt.dir);
	for (int r = 0; r < 2; r++) {
		ck_assert(summary(&hurt, r, "steps") == 200);
		ck_assert_msg(same_weights(&clean, &hurt, r),
		    "rank %d: weights after the server's death differ from "
		    "the fault-free run (%s vs %s)",
		    r, hurt.dir, clean.dir);
	}
}
END_TEST

// first_acc returns the test accuracy of trainer rank's first progress
// line ("step N | ... | test_acc A | ..."), failing the test without one.
static double
first_acc(const struct lc *c, int rank)
{
	char        path[300], line[4096];
	double      acc = -1;
	const char *p;
	FILE       *f = fopen(out_path(c, rank, path, sizeof(path)), "r");
	while (f != NULL && acc < 0 && fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "step ", 5) == 0 &&
		    (p = strstr(line, "test_acc ")) != NULL) {
			acc = strtod(p + strlen("test_acc "), NULL);
		}
	}
	if (f != NULL) {
		fclose(f);
	}
	ck_assert_msg(acc >= 0, "no progress line with test_acc in %s", path);
	return acc;
}

#define STREAM_STEPS "--max-steps=160"

// Fragment f holds the shards i with i % F == f, so a replay trains the
// same only on the same cut: the scheduler cuts the model by its links'
// measured speed unless probing is off (--probe-bytes 0), which leaves
// --shard-bytes (here 4 fc1.weight rows: about 12 shards, 2 to 6 per
// fragment).
static const char *stream_sflags[] = { "--probe-bytes=0",
	"--shard-bytes=12544", NULL };

// Streaming, blocking: H = 8 in F = 2 and F = 4 fragments with
// --fragment-delay 0 (each fragment synced once per 8 inner steps,
// staggered by 8 / F). Each job equals its own replay bit for bit, and
// its test accuracy at the end is above 0.6 and above its first progress
// line's (after the first 8 inner steps).
START_TEST(test_local_steps_fragments_replay)
{
	static const char *fr[] = { "--fragments=2", "--fragments=4" };
	const char        *r0[] = { "--log-interval=8", NULL };
	for (int k = 0; k < 2; k++) {
		const char *tflags[] = { STREAM_STEPS, "--local-steps=8",
			"--lr=0.1", fr[k], "--fragment-delay=0", NULL };
		struct job  j = { 2, 2, stream_sflags, tflags, { r0 }, 0 };
		struct lc   a, b;
		job_run(&a, &j);
		job_run(&b, &j);
		ck_assert(summary(&a, 0, "fragments") == (k == 0 ? 2 : 4));
		for (int r = 0; r < 2; r++) {
			ck_assert_msg(same_weights(&a, &b, r),
			    "%s: rank %d's weights differ from the replay's "
			    "(%s vs %s)",
			    fr[k], r, a.dir, b.dir);
		}
		double acc = summary(&a, 0, "test_acc"),
		       at0 = first_acc(&a, 0);
		ck_assert_msg(acc >= 0.6 && acc > at0 + 0.02,
		    "%s: test accuracy %.4f at the end, %.4f at the first "
		    "line (logs: %s)",
		    fr[k], acc, at0, a.dir);
	}
}
END_TEST

// Streaming with the exchange overlapped (--fragment-delay 1: each
// fragment's exchange runs while the next inner step computes) trains:
// its test accuracy after 160 inner steps is within 0.1 of the plain sync
// job's after the same steps. The delay does change the run: its weights
// differ from the same job's with --fragment-delay 0.
START_TEST(test_local_steps_fragments_delayed)
{
	const char *plain[]    = { STREAM_STEPS, "--lr=0.1", NULL };
	const char *delayed[]  = { STREAM_STEPS, "--local-steps=8", "--lr=0.1",
		 "--fragments=4", "--fragment-delay=1", NULL };
	const char *blocking[] = { STREAM_STEPS, "--local-steps=8", "--lr=0.1",
		"--fragments=4", "--fragment-delay=0", NULL };
	struct job  j          = { 2, 2, stream_sflags, plain, { NULL }, 0 };
	struct lc   p, d, b;
	job_run(&p, &j);
	j.tflags = delayed;
	job_run(&d, &j);
	j.tflags = blocking;
	job_run(&b, &j);
	double want = summary(&p, 0, "test_acc");
	double acc  = summary(&d, 0, "test_acc");
	fprintf(stderr,
	    "local_steps: test accuracy after 160 steps: sync %.4f, F = 4 "
	    "D = 1 %.4f, F = 4 D = 0 %.4f\n",
	    want, acc, summary(&b, 0, "test_acc"));
	ck_assert_msg(acc >= want - 0.1,
	    "--fragment-delay 1: test accuracy %.4f, the sync job's %.4f "
	    "(logs: %s, %s)",
	    acc, want, d.dir, p.dir);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(!same_weights(&d, &b, r),
		    "rank %d: --fragment-delay 1 and 0 end with the same "
		    "weights (%s)",
		    r, d.dir);
	}
}
END_TEST

Suite *
suite_local_steps(void)
{
	Suite *s  = suite_create("local_steps");
	TCase *tc = tcase_create("local_steps");
	// Its own ctest entry (integration_local_steps): the plain
	// integration entry excludes the tag.
	tcase_set_tags(tc, "local_steps");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_local_steps_h1_equals_sync);
	tcase_add_test(tc, test_local_steps_trainer_killed_mid_phase);
	tcase_add_test(tc, test_local_steps_server_killed_replicas);
	suite_add_tcase(s, tc);
	// Streaming (--fragments): `CK_RUN_CASE=fragments` runs it alone.
	TCase *tf = tcase_create("fragments");
	tcase_set_tags(tf, "local_steps");
	tcase_set_timeout(tf, 300);
	tcase_add_test(tf, test_local_steps_fragments_replay);
	tcase_add_test(tf, test_local_steps_fragments_delayed);
	suite_add_tcase(s, tf);
	return s;
}
