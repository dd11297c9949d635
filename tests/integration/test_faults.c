// test_faults.c — process deaths in a real job (ps-server and trainer
// processes on loopback, Fashion-MNIST): a trainer killed with SIGKILL in
// the middle of a sync job is declared dead by the scheduler after
// --dead-after-ms without a heartbeat, the next map drops it, and the
// other trainer finishes all its steps instead of timing out in
// push_pull. Also at a random step (FERRY_FAULT_SEED replays one): a
// server stopped for 5 s (the job waits and finishes), a trainer killed
// in an async job, and a trainer stopped past --dead-after-ms (declared
// dead on silence; continued, it fails at its deadline). With
// --replicas 2, a server SIGKILLed mid sync job changes nothing in the
// weights; a scheduler killed and restarted with its --state-dir
// carries on with the job. Without replicas, a server SIGKILLed and
// restarted from its snapshots rolls the job back to a consistent
// snapshot and the run ends with the fault-free run's weights (suite
// "rollback"). Every wait has a deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration_tests.h"
#include "pt.h"

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

// wait_for waits (up to timeout_ms) until the file at path contains
// needle, failing the test otherwise.
static void
wait_for(const char *path, const char *needle, int timeout_ms)
{
	uint64_t end = fb_clock_ms() + (uint64_t) timeout_ms;
	while (!file_has(path, needle)) {
		ck_assert_msg(fb_clock_ms() < end, "no '%s' in %s after %d ms",
		    needle, path, timeout_ms);
		fb_sleep_us(20000);
	}
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

// wait_step waits (up to timeout_ms) until trainer rank's progress lines
// reach step, failing the test otherwise.
static void
wait_step(const struct lc *c, int rank, unsigned long long step,
    int timeout_ms)
{
	char     path[300], name[64];
	uint64_t end = fb_clock_ms() + (uint64_t) timeout_ms;
	snprintf(name, sizeof(name), "trainer-%d.out", rank);
	lc_path(c, name, path, sizeof(path));
	while (last_step(path) < step) {
		ck_assert_msg(fb_clock_ms() < end,
		    "trainer %d at step %llu after %d ms, want %llu (logs: %s)",
		    rank, last_step(path), timeout_ms, step, c->dir);
		fb_sleep_us(10000);
	}
}

// random_step returns a step in [lo, hi], from $FERRY_FAULT_SEED when set
// (to replay a failure), else from the clock; the seed is printed.
static unsigned long long
random_step(unsigned long long lo, unsigned long long hi)
{
	static unsigned seed;
	if (seed == 0) {
		const char *e = getenv("FERRY_FAULT_SEED");
		seed          = e != NULL && *e
		             ? (unsigned) strtoul(e, NULL, 10)
		             : (unsigned) fb_clock_ms() ^ (unsigned) getpid();
		seed          = seed == 0 ? 1 : seed;
		fprintf(stderr, "faults: FERRY_FAULT_SEED=%u\n", seed);
		srand(seed);
	}
	return lo + (unsigned long long) rand() % (hi - lo + 1);
}

// start_pair starts a 2-trainer job on `servers` servers (extra server
// flags sflags): a small MLP, `steps` (a --max-steps flag), `mode` (a
// --mode flag), `timeout` (a --timeout-ms flag: each call's deadline), a
// progress line per step and heartbeats every 200 ms.
static void
start_pair(struct lc *c, int servers, const char **sflags, const char *mode,
    const char *steps, const char *timeout)
{
	char data[520];
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(c, 2, servers, sflags);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { steps, "--epochs=1000",
			"--log-interval=1", "--seed=1", "--layers=784,32,10",
			"--batch=32", data, mode, "--heartbeat-ms=200",
			timeout, NULL };
		lc_trainer(c, r, flags);
	}
}

// finished_steps returns the "steps" of trainer rank's summary, failing
// the test when it wrote none.
static unsigned long long
finished_steps(const struct lc *c, int rank)
{
	char               path[300], name[64], line[4096];
	unsigned long long n     = 0;
	int                found = 0;
	snprintf(name, sizeof(name), "trainer-%d.out", rank);
	FILE *f = fopen(lc_path(c, name, path, sizeof(path)), "r");
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		const char *p = strstr(line, "{\"summary\"");
		if (p != NULL && (p = strstr(p, "\"steps\": ")) != NULL) {
			found = sscanf(p, "\"steps\": %llu", &n) == 1;
		}
	}
	if (f != NULL) {
		fclose(f);
	}
	ck_assert_msg(found, "trainer %d wrote no summary (logs: %s)", rank,
	    c->dir);
	return n;
}

// A 2-trainer sync job with heartbeats every 200 ms and death declared
// after 1 s: trainer 1 is killed once both train; trainer 0 finishes its
// 20000 steps. Without liveness it would wait for rank 1's pushes until its
// 10 s deadline and fail ("push_pull: timed out").
START_TEST(test_faults_trainer_killed_sync)
{
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=1000",
		NULL };
	char        data[520], path[300], log1[300];
	struct lc   c;

	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 1, sflags);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--max-steps=20000", "--epochs=100",
			"--log-interval=0", "--seed=1", "--layers=784,32,10",
			"--batch=32", data, "--heartbeat-ms=200",
			"--timeout-ms=10000", NULL };
		lc_trainer(&c, r, flags);
	}
	lc_path(&c, "trainer-1.log", log1, sizeof(log1));
	wait_for(log1, "steps per epoch", 60000);
	fb_sleep_us(500000); // mid-run: both trainers push every step
	uint64_t t_kill = fb_clock_ms();
	ck_assert_int_eq(kill(c.trainer_pids[1], SIGKILL), 0);

	int ok = lc_wait_trainers(&c, 200);
	ck_assert_msg(ok == 1, "%d trainer(s) exited 0, want 1 (logs: %s)", ok,
	    c.dir);
	lc_path(&c, "trainer-1.out", path, sizeof(path));
	ck_assert_msg(!file_has(path, "{\"summary\""),
	    "trainer 1 finished before it was killed: the test proves "
	    "nothing (raise --max-steps)");
	lc_path(&c, "trainer-0.out", path, sizeof(path));
	ck_assert_msg(file_has(path, "{\"summary\""),
	    "trainer 0 wrote no summary (logs: %s)", c.dir);
	lc_path(&c, "scheduler.log", path, sizeof(path));
	// Killed, its connection closed: declared dead on that, not on
	// --dead-after-ms of silence.
	ck_assert_msg(file_has(path,
	                  "member trainer 1 dead: its heartbeat "
	                  "connection closed"),
	    "the scheduler never declared trainer 1 dead on its closed "
	    "connection (logs: %s)",
	    c.dir);
	ck_assert_msg(!file_has(path, "member trainer 0 dead"),
	    "trainer 0 was declared dead (logs: %s)", c.dir);
	fprintf(stderr, "faults: trainer 0 finished %.1f s after the kill\n",
	    (double) (fb_clock_ms() - t_kill) / 1e3);
	lc_stop(&c);
}
END_TEST

// A server stopped (SIGSTOP) for 5 s at a random step of a sync job, then
// continued: the trainers wait (their 30 s deadline is longer) and both
// finish every step. The server (declared dead or not: 5 s is the
// default --dead-after-ms) heartbeats again and is simply back; no shard
// moved, so nothing is lost.
START_TEST(test_faults_server_stopped_sync)
{
	const char *sflags[] = { "--heartbeat-ms=200", NULL };
	struct lc   c;
	start_pair(&c, 2, sflags, "--mode=sync", "--max-steps=1500",
	    "--timeout-ms=30000");
	unsigned long long at = random_step(20, 300);
	wait_step(&c, 0, at, 60000);
	ck_assert_int_eq(kill(c.server_pids[1], SIGSTOP), 0);
	fprintf(stderr, "faults: server 1 stopped after step %llu\n", at);
	fb_sleep_us(5000000);
	char path[300];
	lc_path(&c, "trainer-0.out", path, sizeof(path));
	ck_assert_msg(!file_has(path, "{\"summary\""),
	    "trainer 0 finished while server 1 was stopped (logs: %s)", c.dir);
	ck_assert_int_eq(kill(c.server_pids[1], SIGCONT), 0);
	int ok = lc_wait_trainers(&c, 120);
	ck_assert_msg(ok == 2, "%d trainer(s) exited 0, want 2 (logs: %s)", ok,
	    c.dir);
	ck_assert_uint_eq(finished_steps(&c, 0), 1500);
	ck_assert_uint_eq(finished_steps(&c, 1), 1500);
	lc_stop(&c);
}
END_TEST

// A trainer SIGKILLed at a random step of an async job (default
// --dead-after-ms): the scheduler declares it dead on its closed
// connection, and the other trainer, which never waits for it in async
// mode, finishes all its steps.
START_TEST(test_faults_trainer_killed_async)
{
	const char *sflags[] = { "--heartbeat-ms=200", NULL };
	struct lc   c;
	char        path[300];
	start_pair(&c, 2, sflags, "--mode=async", "--max-steps=2000",
	    "--timeout-ms=10000");
	unsigned long long at = random_step(20, 300);
	wait_step(&c, 1, at, 60000);
	ck_assert_int_eq(kill(c.trainer_pids[1], SIGKILL), 0);
	fprintf(stderr, "faults: async trainer 1 killed after step %llu\n",
	    at);
	lc_path(&c, "scheduler.log", path, sizeof(path));
	wait_for(path,
	    "member trainer 1 dead: its heartbeat connection closed", 10000);
	int ok = lc_wait_trainers(&c, 120);
	ck_assert_msg(ok == 1, "%d trainer(s) exited 0, want 1 (logs: %s)", ok,
	    c.dir);
	ck_assert_uint_eq(finished_steps(&c, 0), 2000);
	ck_assert_msg(!file_has(path, "member trainer 0 dead"),
	    "trainer 0 was declared dead (logs: %s)", c.dir);
	lc_stop(&c);
}
END_TEST

// A trainer stopped (SIGSTOP) at a random step of a sync job for longer
// than --dead-after-ms: its connections stay open, so it is declared dead
// on silence ("no heartbeat"), not on a closed connection, and the other
// trainer carries on without it and finishes every step. Continued, the
// stopped trainer is out of the job: its heartbeats are refused, the
// rounds no longer count its pushes, and its next push-pull fails at its
// deadline ("push_pull: timed out"), so it exits non-zero without
// touching the job; restarted under its rank it would rejoin at the job's
// version (faults_resume). It never hangs.
START_TEST(test_faults_trainer_stopped_sync)
{
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=1000",
		NULL };
	struct lc   c;
	char        path[300], p0[300], p1[300];
	start_pair(&c, 2, sflags, "--mode=sync", "--max-steps=1500",
	    "--timeout-ms=8000");
	unsigned long long at = random_step(20, 300);
	wait_step(&c, 1, at, 60000);
	ck_assert_int_eq(kill(c.trainer_pids[1], SIGSTOP), 0);
	fprintf(stderr, "faults: trainer 1 stopped after step %llu\n", at);
	lc_path(&c, "scheduler.log", path, sizeof(path));
	wait_for(path, "member trainer 1 dead: no heartbeat", 10000);
	ck_assert_msg(!file_has(path, "member trainer 1 dead: its heartbeat"),
	    "a stopped trainer's connection closed (logs: %s)", c.dir);
	lc_path(&c, "trainer-0.out", p0, sizeof(p0));
	wait_step(&c, 0, last_step(p0) + 50, 20000); // goes on alone
	ck_assert_int_eq(kill(c.trainer_pids[1], SIGCONT), 0);
	int ok = lc_wait_trainers(&c, 120);
	ck_assert_msg(ok == 1, "%d trainer(s) exited 0, want 1 (logs: %s)", ok,
	    c.dir);
	ck_assert_uint_eq(finished_steps(&c, 0), 1500);
	lc_path(&c, "trainer-1.out", p1, sizeof(p1));
	ck_assert_msg(!file_has(p1, "{\"summary\""),
	    "the stopped trainer finished as if it were in the job (logs: %s)",
	    c.dir);
	lc_path(&c, "trainer-1.log", p1, sizeof(p1));
	ck_assert_msg(file_has(p1, "push_pull: timed out"),
	    "the continued trainer did not fail at its deadline (logs: %s)",
	    c.dir);
	lc_stop(&c);
}
END_TEST

// files_equal says whether the files at a and b hold the same bytes.
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

// same_weights fails the test unless every rank's <dir>/w<rank>.bin of
// run hurt (a fault, `what`) equals the fault-free run's byte for byte.
static void
same_weights(const struct lc *clean, const struct lc *hurt, const char *what)
{
	char a[320], b[320], name[16];
	for (int r = 0; r < 2; r++) {
		snprintf(name, sizeof(name), "w%d.bin", r);
		lc_path(clean, name, a, sizeof(a));
		lc_path(hurt, name, b, sizeof(b));
		ck_assert_msg(files_equal(a, b),
		    "rank %d: weights after %s differ from the fault-free run "
		    "(%s vs %s)",
		    r, what, a, b);
	}
}

// replicated_job runs a 2-trainer sync job on 3 servers with --replicas
// 2 (every member heartbeats every 200 ms, death after 1 s: a trainer on
// the 1 s default would be declared dead whenever one heartbeat came a
// little late), each rank writing its
// weights to <dir>/w<rank>.bin; kill_server >= 0 SIGKILLs that server
// once both trainers train. Returns with the trainers done and c running.
static void
replicated_job(struct lc *c, int kill_server)
{
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=1000",
		"--replicas=2", NULL };
	char        data[520], log1[300];
	char        wo[2][340];
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(c, 2, 3, sflags);
	for (int r = 0; r < 2; r++) {
		snprintf(wo[r], sizeof(wo[r]), "--weights-out=%s/w%d.bin",
		    c->dir, r);
		const char *flags[] = { "--max-steps=3000", "--epochs=100",
			"--log-interval=0", "--seed=1", "--layers=784,32,10",
			"--batch=32", data, "--timeout-ms=20000", wo[r],
			"--heartbeat-ms=200", NULL };
		lc_trainer(c, r, flags);
	}
	if (kill_server >= 0) {
		lc_path(c, "trainer-1.log", log1, sizeof(log1));
		wait_for(log1, "steps per epoch", 60000);
		fb_sleep_us(300000); // mid-run
		ck_assert_int_eq(kill(c->server_pids[kill_server], SIGKILL),
		    0);
	}
	int ok = lc_wait_trainers(c, 200);
	ck_assert_msg(ok == 2, "%d trainer(s) exited 0, want 2 (logs: %s)", ok,
	    c->dir);
}

// Sync mode with --replicas 2: a server SIGKILLed mid-job is declared
// dead, the scheduler promotes its shards' backups, the trainers
// re-route, and both end with weights bit-identical to a run without the
// fault (and to each other).
START_TEST(test_faults_server_killed_replicas_sync)
{
	struct lc clean, hurt;
	char      p[320];
	replicated_job(&clean, -1);
	replicated_job(&hurt, 1);
	same_weights(&clean, &hurt, "the server death");
	lc_path(&hurt, "scheduler.log", p, sizeof(p));
	ck_assert_msg(file_has(p, "promoted to a backup"),
	    "no promotion map (logs: %s)", hurt.dir);
	ck_assert_msg(file_has(p, "member server"),
	    "no server was declared dead (logs: %s)", hurt.dir);
	lc_stop(&clean);
	lc_stop(&hurt);
}
END_TEST

// A 2-trainer, 2-server sync job whose scheduler keeps its state
// (--state-dir): the scheduler is killed with SIGKILL mid-job and started
// again on the same URL and directory. It carries on from the file (the
// same job, members and map), so when trainer 1 is then killed, the new
// scheduler declares it dead and publishes the next epoch (never one it
// had handed out), and trainer 0 finishes all its steps. A scheduler
// restarted without its state knows no map: nobody would tell the
// servers that rank 1 is gone, and trainer 0 would time out.
START_TEST(test_faults_scheduler_killed_restarted_with_state)
{
	char state[64], sd[96], data[520], log1[300], path[300];
	snprintf(state, sizeof(state), "/tmp/ferry-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(state));
	snprintf(sd, sizeof(sd), "--state-dir=%s", state);
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=1500",
		sd, NULL };
	struct lc   c;

	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 2, sflags);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--max-steps=30000", "--epochs=100",
			"--log-interval=0", "--seed=1", "--layers=784,32,10",
			"--batch=32", data, "--heartbeat-ms=200",
			"--timeout-ms=20000", NULL };
		lc_trainer(&c, r, flags);
	}
	lc_path(&c, "trainer-1.log", log1, sizeof(log1));
	wait_for(log1, "steps per epoch", 60000);
	fb_sleep_us(500000);
	ck_assert_int_eq(kill(c.pids[0], SIGKILL), 0);
	ck_assert_int_eq(waitpid(c.pids[0], NULL, 0), c.pids[0]);
	c.pids[0]           = 0; // reaped
	const char *again[] = { "--trainers=2", "--servers=2", sd,
		"--dead-after-ms=1500", "--log-level=info", NULL };
	lc_scheduler_restart(&c, again, "scheduler-again.log");
	lc_path(&c, "scheduler-again.log", path, sizeof(path));
	wait_for(path, "carrying on from", 10000);
	// Every member is tracked again by the new scheduler before the kill.
	wait_for(path, "tracking trainer 1", 10000);
	wait_for(path, "tracking trainer 0", 10000);
	ck_assert_int_eq(kill(c.trainer_pids[1], SIGKILL), 0);

	int ok = lc_wait_trainers(&c, 200);
	ck_assert_msg(ok == 1, "%d trainer(s) exited 0, want 1 (logs: %s)", ok,
	    c.dir);
	lc_path(&c, "trainer-0.out", log1, sizeof(log1));
	ck_assert_msg(file_has(log1, "{\"summary\""),
	    "trainer 0 wrote no summary (logs: %s)", c.dir);
	// On silence or on its closed connection, whichever came first.
	ck_assert_msg(file_has(path, "member trainer 1 dead: "),
	    "the new scheduler never declared trainer 1 dead (logs: %s)",
	    c.dir);
	// The epoch carries on: the loaded one plus one, never epoch 1.
	FILE              *f = fopen(path, "r");
	char               line[1024], want[64];
	unsigned long long e = 0;
	const char        *p;
	while (f != NULL && e == 0 && fgets(line, sizeof(line), f) != NULL) {
		if ((p = strstr(line, "scheduler.state: epoch ")) != NULL) {
			e = strtoull(p + strlen("scheduler.state: epoch "),
			    NULL, 10);
		}
	}
	if (f != NULL) {
		fclose(f);
	}
	ck_assert_msg(e >= 1, "no loaded epoch in %s", path);
	snprintf(want, sizeof(want), "epoch %llu: ", e + 1);
	ck_assert_msg(file_has(path, want), "no '%s' in %s", want, path);
	ck_assert_msg(!file_has(path, "placement: epoch 1: "),
	    "the new scheduler published epoch 1 again (logs: %s)", c.dir);
	lc_stop(&c);
	snprintf(path, sizeof(path), "rm -rf '%s'", state);
	ck_assert_int_eq(system(path), 0);
}
END_TEST

// free_port returns a loopback TCP port nobody listens on right now.
static int
free_port(void)
{
	struct sockaddr_in a   = { .sin_family = AF_INET };
	socklen_t          len = sizeof(a);
	int                fd  = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_addr.s_addr      = htonl(INADDR_LOOPBACK);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *) &a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

// snap_job runs a 2-trainer sync job on 2 servers without replicas, each
// server with its own fixed URL and a snapshot every 20 versions in
// <dir>/snaps; each rank writes its weights to <dir>/w<rank>.bin. With
// kill_at > 0, server 1 is SIGKILLed once trainer 0 reports that step and
// restarted at once with the same URL and snapshot directory. Returns
// with the trainers done and c running.
// snap_extra, when set, is added to every trainer's flags of snap_job.
static const char *snap_extra;

static void
snap_job(struct lc *c, unsigned long long kill_at)
{
	const char *sflags[] = { "--heartbeat-ms=200", "--dead-after-ms=1000",
		NULL };
	char        data[520], snaps[200], sd[220], listen[2][64], wo[2][340];
	lc_start_sched(c, 2, 2, sflags);
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_path(c, "snaps", snaps, sizeof(snaps));
	ck_assert_int_eq(mkdir(snaps, 0755), 0);
	snprintf(sd, sizeof(sd), "--snapshot-dir=%s", snaps);
	for (int m = 0; m < 2; m++) {
		char log[32];
		snprintf(listen[m], sizeof(listen[m]),
		    "--listen=tcp://127.0.0.1:%d", free_port());
		snprintf(log, sizeof(log), "server-%d.log", m);
		const char *f[] = { listen[m], sd, "--snapshot-every=20",
			"--heartbeat-ms=200", "--log-level=info", NULL };
		lc_server(c, m, f, log);
	}
	for (int r = 0; r < 2; r++) {
		snprintf(wo[r], sizeof(wo[r]), "--weights-out=%s/w%d.bin",
		    c->dir, r);
		const char *flags[] = { "--max-steps=400", "--epochs=100",
			"--log-interval=10", "--seed=1", "--layers=784,32,10",
			"--batch=32", data, "--heartbeat-ms=200",
			"--timeout-ms=30000", wo[r], snap_extra, NULL };
		lc_trainer(c, r, flags);
	}
	if (kill_at > 0) {
		// Both servers have a snapshot on disk (a kill during the
		// first write would leave nothing to roll back to).
		char f0[240], f1[240];
		snprintf(f0, sizeof(f0), "%s/server-0.snap", snaps);
		snprintf(f1, sizeof(f1), "%s/server-1.snap", snaps);
		uint64_t end = fb_clock_ms() + 120000;
		while (access(f0, F_OK) != 0 || access(f1, F_OK) != 0) {
			ck_assert_msg(fb_clock_ms() < end,
			    "no snapshots after 120 s (logs: %s)", c->dir);
			fb_sleep_us(10000);
		}
		wait_step(c, 0, kill_at, 120000);
		ck_assert_int_eq(kill(c->server_pids[1], SIGKILL), 0);
		ck_assert_int_eq(waitpid(c->server_pids[1], NULL, 0),
		    c->server_pids[1]);
		for (int i = 0; i < c->n_pids; i++) {
			c->pids[i] = c->pids[i] == c->server_pids[1]
			    ? 0 // reaped
			    : c->pids[i];
		}
		const char *f[] = { listen[1], sd, "--snapshot-every=20",
			"--heartbeat-ms=200", "--log-level=info", NULL };
		lc_server(c, 1, f, "server-1-again.log");
	}
	int ok = lc_wait_trainers(c, 200);
	ck_assert_msg(ok == 2, "%d trainer(s) exited 0, want 2 (logs: %s)", ok,
	    c->dir);
}

// Sync mode without replicas: server 1 is SIGKILLed at a random step
// past the first snapshot and restarted with the same URL and
// --snapshot-dir. The scheduler rolls the job back to the newest
// snapshot version both servers hold, server 0 restores its shards from
// it, the trainers re-pull that version and redo its minibatches, so
// both finish all their steps with weights bit-identical to a run
// without the fault. Fails without the rollback: server 0 keeps its newer
// versions, the trainers' pushes for the restored version are refused,
// or the weights differ.
START_TEST(test_rollback_server_killed_restarted_sync)
{
	struct lc          clean, hurt;
	char               p[320];
	unsigned long long at = random_step(3, 30) * 10;
	snap_job(&clean, 0);
	snap_job(&hurt, at);
	same_weights(&clean, &hurt, "the rollback");
	ck_assert_uint_eq(finished_steps(&hurt, 0), 400);
	ck_assert_uint_eq(finished_steps(&hurt, 1), 400);
	lc_path(&hurt, "scheduler.log", p, sizeof(p));
	ck_assert_msg(file_has(p, "rolling back job to version "),
	    "the scheduler did not roll back (logs: %s)", hurt.dir);
	lc_path(&hurt, "server-0.log", p, sizeof(p));
	ck_assert_msg(file_has(p, "rolled back to version "),
	    "server 0 did not roll back (logs: %s)", hurt.dir);
	lc_path(&hurt, "trainer-0.log", p, sizeof(p));
	ck_assert_msg(file_has(p, "rolled back to version"),
	    "trainer 0 was not told of the rollback (logs: %s)", hurt.dir);
	lc_stop(&clean);
	lc_stop(&hurt);
}
END_TEST

// The same fault with --overlap 1 (one-step delayed weights): the
// overlapped loop takes the rollback too (pulls the version, recomputes
// from its step) and both ranks finish all their steps. Not bit-identical
// to a fault-free run: after the rollback the pipeline restarts, so the
// first redone gradient is taken on the rolled-back version itself rather
// than one step late.
START_TEST(test_rollback_overlap_finishes)
{
	struct lc          hurt;
	char               p[320];
	unsigned long long at = random_step(3, 30) * 10;
	snap_extra            = "--overlap=1";
	snap_job(&hurt, at);
	snap_extra = NULL;
	ck_assert_uint_eq(finished_steps(&hurt, 0), 400);
	ck_assert_uint_eq(finished_steps(&hurt, 1), 400);
	lc_path(&hurt, "trainer-0.log", p, sizeof(p));
	ck_assert_msg(file_has(p, "rolled back to version"),
	    "trainer 0 was not told of the rollback (logs: %s)", hurt.dir);
	lc_stop(&hurt);
}
END_TEST

Suite *
suite_rollback(void)
{
	Suite *s  = suite_create("rollback");
	TCase *tc = tcase_create("rollback");
	tcase_set_tags(tc, "faults");
	tcase_set_timeout(tc, 280);
	tcase_add_test(tc, test_rollback_server_killed_restarted_sync);
	tcase_add_test(tc, test_rollback_overlap_finishes);
	suite_add_tcase(s, tc);
	return s;
}

Suite *
suite_faults(void)
{
	Suite *s  = suite_create("faults");
	TCase *tc = tcase_create("faults");
	// Tagged so that the plain `integration` entry leaves it to its own
	// entry (Check has no way to exclude a suite, only tags).
	tcase_set_tags(tc, "faults");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_faults_trainer_killed_sync);
	tcase_add_test(tc, test_faults_server_stopped_sync);
	tcase_add_test(tc, test_faults_trainer_killed_async);
	tcase_add_test(tc, test_faults_trainer_stopped_sync);
	tcase_add_test(tc, test_faults_server_killed_replicas_sync);
	tcase_add_test(tc, test_faults_scheduler_killed_restarted_with_state);
	suite_add_tcase(s, tc);
	return s;
}
