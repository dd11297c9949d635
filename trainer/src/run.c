// run.c — what both training loops (train.c's MLP loop, dlrm_train.c's
// CTR loop) do alike around their steps: opening the libferry client with
// the trainer's log hook and the job's key, stopping between steps on a
// signal, and ending a run (the exit watchdog, leaving the job).
#include <ferry/ferry.h>
#include <signal.h>

#include "step.h"
#include "tr_impl.h"

#define MOD "train"

// ferry_log prints what libferry reports through ferry_opts.log (it
// never prints itself), e.g. a call near its deadline naming the server
// and shards it waits for, as the trainer's own log lines (module
// "ferry").
static void
ferry_log(void *arg, int level, const char *msg)
{
	(void) arg;
	switch (level) {
	case FERRY_LOG_ERR:
		FB_LOG(FB_LOG_ERR, "ferry", "%s", msg);
		break;
	case FERRY_LOG_WARN:
		FB_LOG(FB_LOG_WARN, "ferry", "%s", msg);
		break;
	case FERRY_LOG_NOTICE:
		FB_LOG(FB_LOG_NOTICE, "ferry", "%s", msg);
		break;
	default:
		FB_LOG(FB_LOG_INFO, "ferry", "%s", msg);
		break;
	}
}

int
tr__run_open_client(struct tr__run *r)
{
	const struct tr_config *cfg = r->cfg;
	struct ferry_opts       fo  = cfg->fo;
	int                     fe;

	// The job's and the client's options were bound straight into
	// cfg->fo (config.c); the log hook is this file's.
	fo.log = ferry_log;
	if (ferry_opts_check(&fo, r->err, sizeof(r->err)) != FERRY_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "bad options: %s", r->err);
		return FB_EINVAL;
	}
	if ((fe = ferry_client_open(&fo, &r->fc)) != FERRY_OK) {
		return tr__run_failed(r, "open", fe);
	}
	if (cfg->secret_file != NULL && *cfg->secret_file != '\0' &&
	    (fe = ferry_client_set_secret_file(r->fc, cfg->secret_file)) !=
	        FERRY_OK) {
		return tr__run_failed(r, "--secret-file", fe);
	}
	return FB_OK;
}

void
tr__run_given_rank(struct tr__run *r)
{
	if (r->cfg->fo.rank != FERRY_RANK_ANY) {
		r->rank = r->cfg->fo.rank;
	} else {
		r->rank = ferry_client_rank(r->fc);
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "given rank %d of up to %d (%.1f ms after start)", r->rank,
		    ferry_client_trainers(r->fc),
		    (double) (fb_clock_ns() - r->t_start_ns) * 1e-6);
		r->met.rank = r->rank; // /readyz: before the phase is running
	}
	r->rep.rank = r->rank;
	r->leased   = r->cfg->leases == TR_LEASES_ON ||
	    (r->cfg->leases == TR_LEASES_AUTO && ferry_client_elastic(r->fc));
	if (r->leased && r->cfg->local_steps > 0) {
		// config.c refuses --leases on beside --local-steps: auto.
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "an elastic job, but --local-steps runs on rank "
		    "partitions: no data leases");
		r->leased = 0;
	}
}

int
tr__run_leased(const struct tr__run *r)
{
	return r->leased;
}

// A signal stops the loop between steps; the trainer then leaves the job
// so that the other trainers' sync rounds do not wait for it. The handler
// is in place from start-up (main.c's tr_train_run), so a trainer stopped
// while it joins still leaves once the join returns, instead of dying
// unannounced (the scheduler tracks a member only once it heartbeats); a
// second signal is not waited on: it ends the process at once.
static volatile sig_atomic_t stop_requested;

static void
on_stop_signal(int sig)
{
	if (stop_requested) {
		signal(sig, SIG_DFL); // async-signal-safe, as is raise
		raise(sig);
		return;
	}
	stop_requested = 1;
}

volatile sig_atomic_t *
tr__run_catch_signals(void)
{
	stop_requested = 0;
	signal(SIGINT, on_stop_signal);
	signal(SIGTERM, on_stop_signal);
	return &stop_requested;
}

// leave_job leaves the job (done or stopped by a signal: either way the
// other ranks must not wait for this one). A failed leave is logged: the
// scheduler also notices a silent trainer by its heartbeats.
static void
leave_job(const struct tr__run *r)
{
	int fe;
	if (r->left) {
		return; // an idle trainer with leases left already
	}
	if (stop_requested) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "stopped by a signal; leaving the job");
	} else {
		FB_LOG(FB_LOG_INFO, MOD,
		    "done at job step %llu; leaving the job",
		    (unsigned long long) r->rep.step);
	}
	if ((fe = ferry_client_leave(r->fc)) != FERRY_OK) {
		FB_LOG(FB_LOG_WARN, MOD, "leave: %s: %s", ferry_strerror(fe),
		    ferry_client_last_error(r->fc));
	}
}

// EXIT_GRACE_S: how long leaving the job and tearing down may take once
// the run has ended (its outputs are written by then; fb_exit_watchdog
// says why a teardown needs a guard).
#define EXIT_GRACE_S 20

void
tr__run_end(struct tr__run *r, int rv, int trained)
{
	// Exit status as main.c maps it: 0 done, 1 failed.
	fb_exit_watchdog(EXIT_GRACE_S, rv == FB_OK ? 0 : 1,
	    "exit: leaving and closing the connections");
	if (trained) {
		leave_job(r);
	}
}
