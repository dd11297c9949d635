#ifndef INTEGRATION_TESTS_H
#define INTEGRATION_TESTS_H
#include <check.h>
#include <stddef.h>

Suite *suite_train(void);
Suite *suite_http(void);
Suite *suite_faults(void);
Suite *suite_overlap(void);

// it_run_epoch_with trains 2 trainers x 2 servers for one sync epoch
// (seed 1) with the codecs given and one extra trainer flag (NULL: none),
// and returns rank 0's test accuracy (test_train.c). Fails the test when
// a trainer fails.
double it_run_epoch_with(const char *codec_push, const char *codec_pull,
    const char *extra);
Suite *suite_rollback(void);
Suite *suite_local_steps(void);

// it_data_dir is the Fashion-MNIST directory the tests and their trainers
// read: $FERRY_DATA_DIR when set and not empty, else FASHION_DIR.
const char *it_data_dir(void);

// it_have_data says whether it_data_dir() holds the training images
// (plain or .gz); without them main.c skips the executable with exit 77.
int it_have_data(void);

// A local cluster of real processes: a scheduler, servers and trainers.
struct lc {
	char dir[128]; // temp dir with logs and outputs
	char sched_url[256];
	int  pids[64];
	int  n_pids;
	int  trainer_pids[16];
	int  n_trainers;
	int  server_pids[16];
};

// lc_start starts a scheduler and `servers` servers (extra server flags in
// sflags, NULL-terminated, may be NULL). Fails the test on error.
void lc_start(struct lc *c, int trainers, int servers, const char **sflags);

// lc_start_http is lc_start with HTTP endpoints on every process when http
// is set: --http-listen=127.0.0.1:0, base URL in <dir>/scheduler.http and
// <dir>/server-<m>.http (server m's pid in c->server_pids[m]).
void lc_start_http(struct lc *c, int trainers, int servers,
    const char **sflags, int http);

// lc_start_elastic is lc_start_http for a job of `trainers` given as the
// scheduler's --trainers text ("1:3": an elastic job, MIN:MAX).
void lc_start_elastic(struct lc *c, const char *trainers, int servers,
    const char **sflags, int http);

// lc_start_sched starts only the scheduler of a new cluster (for
// `trainers` and `servers`, extra flags sflags); start the servers with
// lc_server.
void lc_start_sched(struct lc *c, int trainers, int servers,
    const char **sflags);

// lc_server starts server m (pid in c->server_pids[m], also after a
// restart) with the given NULL-terminated flags (the scheduler flag is
// added); stderr goes to <dir>/<log>. Returns its pid.
int lc_server(struct lc *c, int m, const char **flags, const char *log);

// lc_trainer starts trainer `rank` with the given NULL-terminated flags
// (the scheduler flag is added); stdout goes to <dir>/trainer-<rank>.out.
void lc_trainer(struct lc *c, int rank, const char **flags);

// lc_trainer_any starts a trainer without --rank (the scheduler gives
// one) with the given NULL-terminated flags; its output goes to
// <dir>/joiner-<k>.out and .log. Returns its pid (also in trainer_pids).
int lc_trainer_any(struct lc *c, int k, const char **flags);

// lc_wait_trainers waits for every trainer (up to timeout_s) and returns
// how many exited with status 0.
int lc_wait_trainers(struct lc *c, int timeout_s);

// lc_scheduler_restart starts a scheduler again on the first one's URL
// (c->sched_url; the first is c->pids[0]) with the given NULL-terminated
// flags (its counts, --state-dir, ...); stderr goes to <dir>/<log>.
// Returns its pid.
int lc_scheduler_restart(struct lc *c, const char **flags, const char *log);

// lc_stop sends SIGTERM to everything still running and waits; a process
// still there after 60 s is killed and fails the test, named. Removes
// nothing (logs stay in dir for post-mortems).
void lc_stop(struct lc *c);

// lc_path writes <dir>/<name> into buf.
char *lc_path(const struct lc *c, const char *name, char *buf, size_t n);

// lc_summary_value returns the number after "key": in the trainer's JSON
// summary line in the output file at path (a Check failure when the file
// or the key is missing).
double lc_summary_value(const char *path, const char *key);
#endif
