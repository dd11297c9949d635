// lease.c — the training loop of a run with data leases (an elastic job,
// or --leases on): each batch is the next positions of the lease the
// scheduler gave, the lease is marked before each step, a used-up lease
// is traded for the next, an idle trainer steps out of the sync rounds
// until a lease comes, and the run ends when the scheduler says every
// sample of every epoch is consumed.
//
// DESIGN
// Exactly once. A lease is positions [start, start+count) of epoch e's
// order, ferry_data_permutation(seed, e, n) (the scheduler's, the same on
// every trainer). The cursor (partition.c) cuts it into batches of at most
// --batch positions, never across two leases, so the last batch may be
// short and its push says so (n_samples). Before each step the trainer
// marks (lease id, end of the batch): the push carries the mark, and the
// servers that admit the push report it, so the scheduler knows how far a
// killed trainer's lease was consumed. The cursor advances only after
// the step was applied: a push dropped as late (FERRY_EBEHIND) or undone
// (FERRY_EROLLBACK) is redone from the same positions at the job's
// weights, and the mark goes back to the last applied end, so a release
// never claims samples that no applied update holds.
//
// Idle trainers. When no piece is free (the others hold the rest of the
// data) but the job is not done, a sync trainer leaves the job, so that
// rounds do not wait for a rank with nothing to push, waits retry_ms and
// asks again; with a lease it rejoins and pulls the job's weights (the
// join pull: the round it joins at) before its next gradient. A scheduler
// that refuses lease requests from a rank out of the job is asked after a
// rejoin (a rejoined rank holds no round until it pulls or pushes), and
// the trainer steps out again when nothing came.
//
// The end. "done" comes only when no lease is held and none is free, and
// every trainer asks for its next lease after its step's round closed, so
// by then every update is applied. In sync mode a trainer that never
// stepped out holds the final version (every round waited for it) and
// evaluates it on the test set: its summary's test_acc is the job's final
// accuracy, and the log line "job done: final test accuracy" says so. A
// trainer that was idle at the end holds an older version and does not
// evaluate; in async and SSP modes a done trainer pulls the newest weights
// first. SIGINT/SIGTERM: the current step finishes, the lease goes back
// (its applied positions consumed, the rest returned to the pool) and the
// trainer leaves: a graceful leave loses no work.
#include <ferry/ferry.h>
#include <limits.h>
#include <string.h>

#include "step.h"
#include "tr_impl.h"

#define MOD "train"

// RETRY_SLICE_MS: an idle trainer's wait is cut into slices this long so
// that a signal ends it soon.
#define RETRY_SLICE_MS 20
// SLOW_XCHG_MS: an exchange (push to next weights) this long is logged,
// the soak's measure of a hung round (bench/elastic.sh).
#define SLOW_XCHG_MS 1000
// TRANSIENT_S: how long lease requests ride out an unreachable scheduler
// (restarting on its --state-dir) before the run fails.
#define TRANSIENT_S 60

// ---- the cursor (tr.h): libferry's permutation, cut into batches
int
tr_lease_cursor_init(struct tr_lease_cursor *c, size_t n)
{
	memset(c, 0, sizeof(*c));
	c->perm_epoch = -1;
	if (n == 0 || n > UINT32_MAX) {
		return FB_EINVAL;
	}
	if ((c->perm = fb_alloc(n * sizeof(uint32_t))) == NULL) {
		return FB_ENOMEM;
	}
	c->n = n;
	return FB_OK;
}

void
tr_lease_cursor_fini(struct tr_lease_cursor *c)
{
	fb_free(c->perm);
	memset(c, 0, sizeof(*c));
	c->perm_epoch = -1;
}

int
tr_lease_cursor_set(struct tr_lease_cursor *c, const struct ferry_lease *l)
{
	if (c->perm == NULL || l->id == 0 || l->start > c->n ||
	    l->count > c->n - l->start) {
		return FB_EINVAL;
	}
	// The same order on every trainer and in the scheduler's counting:
	// libferry's, not this file's partition shuffle.
	if (c->perm_epoch != (long) l->epoch || c->perm_seed != l->seed) {
		ferry_data_permutation(l->seed, l->epoch, c->n, c->perm);
		c->perm_epoch = (long) l->epoch;
		c->perm_seed  = l->seed;
	}
	c->id    = l->id;
	c->epoch = l->epoch;
	c->pos   = l->start;
	c->end   = l->start + l->count;
	return FB_OK;
}

int
tr_lease_cursor_batch(const struct tr_lease_cursor *c, size_t batch,
    const uint32_t **idx, size_t *nb, uint64_t *mark)
{
	if (batch == 0) {
		return FB_EINVAL;
	}
	if (c->id == 0 || c->pos >= c->end) {
		return FB_ERANGE;
	}
	uint64_t left = c->end - c->pos;
	*nb           = left < batch ? (size_t) left : batch;
	*idx          = c->perm + c->pos;
	*mark         = c->pos + *nb;
	return FB_OK;
}

void
tr_lease_cursor_advance(struct tr_lease_cursor *c, size_t nb)
{
	uint64_t left = c->end - c->pos;
	c->pos += nb < left ? nb : left;
}

// ---- the loop

// nap sleeps ms milliseconds, or less when a signal asks to stop.
static void
nap(uint32_t ms, volatile sig_atomic_t *stop)
{
	for (uint32_t t = 0; t < ms && !*stop; t += RETRY_SLICE_MS) {
		fb_sleep_us(RETRY_SLICE_MS * 1000u);
	}
}

// step_out leaves the sync rounds while this trainer has no data.
static int
step_out(struct tr__run *r)
{
	int fe;
	if (r->left || !tr__run_lockstep(r->cfg)) {
		return FB_OK;
	}
	if ((fe = ferry_client_leave(r->fc)) != FERRY_OK) {
		return tr__run_failed(r, "leave while idle", fe);
	}
	r->left = 1;
	if (!r->stale) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d: no data free (the others hold the rest); out "
		    "of the rounds until a lease comes",
		    r->rank);
	}
	r->stale = 1; // the rounds go on without it
	return FB_OK;
}

// step_in rejoins the rounds after an idle spell and pulls the job's
// weights at the round it joins, before the next gradient.
static int
step_in(struct tr__run *r)
{
	int fe;
	if (!r->left && !r->stale) {
		return FB_OK;
	}
	if (r->left && (fe = ferry_client_rejoin(r->fc)) != FERRY_OK) {
		return tr__run_failed(r, "rejoin", fe);
	}
	r->left  = 0;
	r->stale = 0;
	if ((fe = ferry_client_pull(r->fc, r->w.t)) != FERRY_OK) {
		return tr__run_failed(r, "pull after rejoining", fe);
	}
	FB_LOG(FB_LOG_NOTICE, MOD, "rank %d: back in the rounds", r->rank);
	return tr__run_set_weights(r, &r->w);
}

// ask asks for the next lease, riding out a scheduler that is away for a
// while (a restart on its --state-dir).
static int
ask(struct tr__run *r, struct ferry_lease *l, volatile sig_atomic_t *stop)
{
	const struct tr_config *cfg = r->cfg;
	uint64_t want = (uint64_t) cfg->batch * cfg->lease_batches;
	uint64_t t0   = fb_clock_ns();
	int      fe, as_member = 0;

	for (;;) {
		fe = ferry_client_lease_next(r->fc, r->train.n,
		    (uint32_t) cfg->epochs, cfg->fo.seed, want, l);
		if (fe != FERRY_OK && fe != FERRY_ECONNECT &&
		    fe != FERRY_ETIMEDOUT && r->left && !as_member) {
			// A scheduler that takes lease requests from members
			// only: ask as one. A rejoined rank is pending (no
			// round waits for it before it pulls or pushes) and
			// steps out again when nothing comes.
			FB_LOG(FB_LOG_INFO, MOD,
			    "lease: %s; asking as a member",
			    ferry_client_last_error(r->fc));
			if ((fe = ferry_client_rejoin(r->fc)) ==
			    FERRY_EREMOTE) {
				// Refused (its rank went to a newcomer while
				// it was out, the job is full, the slot
				// flaps): the others hold the rest of the
				// data, and this trainer holds none. It stops;
				// nothing is lost.
				FB_LOG(FB_LOG_NOTICE, MOD,
				    "rank %d: cannot rejoin while idle (%s): "
				    "stopping, holding no lease",
				    r->rank, ferry_client_last_error(r->fc));
				r->shut = 1;
				*l      = (struct ferry_lease) { 0 };
				return FB_OK;
			}
			if (fe != FERRY_OK) {
				return tr__run_failed(r, "rejoin", fe);
			}
			r->left   = 0;
			as_member = 1;
			continue;
		}
		if ((fe != FERRY_ECONNECT && fe != FERRY_ETIMEDOUT) || *stop ||
		    fb_clock_ns() - t0 >
		        (uint64_t) TRANSIENT_S * 1000000000u) {
			break;
		}
		FB_LOG(FB_LOG_WARN, MOD, "lease: %s: %s; asking again",
		    ferry_strerror(fe), ferry_client_last_error(r->fc));
		nap(200, stop);
	}
	return fe == FERRY_OK ? FB_OK : tr__run_failed(r, "lease_next", fe);
}

// next_lease trades the used-up lease for the next one; *done is set when
// every epoch is consumed. With no lease free it steps out of the rounds
// and asks again every retry_ms; a signal ends the wait (no lease held).
static int
next_lease(struct tr__run *r, volatile sig_atomic_t *stop, int *done)
{
	struct ferry_lease l;
	int                rv;

	*done    = 0;
	r->lc.id = 0;
	for (;;) {
		if ((rv = ask(r, &l, stop)) != FB_OK || r->shut) {
			return rv;
		}
		if (l.id != 0) {
			break;
		}
		if (l.done) {
			*done = 1;
			return FB_OK;
		}
		if (*stop || (rv = step_out(r)) != FB_OK) {
			return rv;
		}
		nap(l.retry_ms > 0 ? l.retry_ms : 200, stop);
		if (*stop) {
			return FB_OK;
		}
	}
	if ((rv = tr_lease_cursor_set(&r->lc, &l)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "lease %llu: epoch %u [%llu, +%llu) is not in a data set "
		    "of %zu samples",
		    (unsigned long long) l.id, l.epoch,
		    (unsigned long long) l.start, (unsigned long long) l.count,
		    r->train.n);
		return rv;
	}
	FB_LOG(FB_LOG_INFO, MOD,
	    "lease %llu: epoch %u, positions [%llu, %llu)",
	    (unsigned long long) l.id, l.epoch, (unsigned long long) l.start,
	    (unsigned long long) (l.start + l.count));
	return step_in(r);
}

// undo takes a step whose samples are in no applied update: a dropped
// push (late for its round) pulls the job's weights; the mark goes back
// to the last applied position, and the cursor stays, so the same
// positions are redone.
static int
undo(struct tr__run *r)
{
	int fe;
	ferry_client_lease_mark(r->fc, r->lc.id, r->lc.pos);
	r->rep.dropped++;
	FB_LOG(FB_LOG_NOTICE, MOD, "behind the job: %s; pulling, redoing",
	    ferry_client_last_error(r->fc));
	if ((fe = ferry_client_pull(r->fc, r->w.t)) != FERRY_OK) {
		return tr__run_failed(r, "pull", fe);
	}
	return tr__run_set_weights(r, &r->w);
}

// stepped logs what the soak measures: the first applied step of the
// process (from its start and from its registration), and exchanges that
// waited long.
static void
stepped(struct tr__run *r, uint64_t xchg_ns)
{
	uint64_t now = fb_clock_ns();
	if (r->rep.steps_run == 1) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d: first step applied at version %llu: %.1f ms "
		    "after start, %.1f ms after registering",
		    r->rank, (unsigned long long) r->rep.step,
		    (double) (now - r->t_start_ns) * 1e-6,
		    (double) (now - r->t_declare_ns) * 1e-6);
	}
	if (xchg_ns >= (uint64_t) SLOW_XCHG_MS * 1000000u) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d: slow exchange: %.1f ms at version %llu", r->rank,
		    (double) xchg_ns * 1e-6, (unsigned long long) r->rep.step);
	}
}

// leased_step runs one step on the next batch of the held lease.
static int
leased_step(struct tr__run *r)
{
	const struct tr_config *cfg = r->cfg;
	const uint32_t         *idx;
	size_t                  nb;
	uint64_t                mark, ts = fb_clock_ns(), tx;
	double                  loss;
	int                     rv, fe;

	if ((rv = tr_lease_cursor_batch(&r->lc, cfg->batch, &idx, &nb,
	         &mark)) != FB_OK) {
		return rv;
	}
	ferry_client_lease_mark(r->fc, r->lc.id, mark);
	if (r->dev_push != NULL && !ferry_client_in_warmup(r->fc)) {
		const uint8_t *const *codes;
		if ((rv = r->dev->push_grad(r->dev_push, &r->train, idx, nb,
		         &codes, &loss)) != FB_OK) {
			return rv;
		}
		tx = fb_clock_ns();
		fe = ferry_client_push_pull_encoded(r->fc, codes,
		    (uint32_t) nb, r->w.t);
	} else {
		if ((rv = tr_backend_grad(r->be, &r->train, idx, nb, r->g.t,
		         &loss)) != FB_OK) {
			return rv;
		}
		if (cfg->slow_ms > 0) {
			fb_sleep_us((uint64_t) cfg->slow_ms * 1000u);
		}
		tr__scale_for_members(r, &r->g);
		tx = fb_clock_ns();
		fe = ferry_client_push_pull(r->fc, tr_params_cptrs(&r->g),
		    (uint32_t) nb, r->w.t);
	}
	uint64_t xchg = fb_clock_ns() - tx;
	if (fe == FERRY_EBEHIND) {
		return undo(r);
	}
	const struct tr__step_times t = { .since_ns = ts,
		.start_ns                           = ts,
		.xchg_ns                            = tx,
		.end_ns                             = 0 };
	r->step_n                     = nb;
	// No epoch end of job steps here (LONG_MAX): leases cut the epochs.
	if ((rv = tr__step_end(r, fe, &r->w, LONG_MAX, loss, &t)) != FB_OK) {
		return rv;
	}
	if (fe == FERRY_EROLLBACK) {
		// The update is undone: redo the same positions.
		ferry_client_lease_mark(r->fc, r->lc.id, r->lc.pos);
		return FB_OK;
	}
	tr_lease_cursor_advance(&r->lc, nb);
	stepped(r, xchg);
	return FB_OK;
}

// final_eval evaluates the job's final weights when this trainer holds
// them (DESIGN, "The end").
static int
final_eval(struct tr__run *r)
{
	struct ferry_stats st;
	double             loss, acc;
	int                rv, fe;

	if (tr__run_lockstep(r->cfg) && r->stale) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "job done; rank %d was idle in its last rounds: no final "
		    "evaluation here",
		    r->rank);
		return FB_OK;
	}
	if (!tr__run_lockstep(r->cfg)) {
		if ((fe = ferry_client_pull(r->fc, r->w.t)) != FERRY_OK) {
			return tr__run_failed(r, "pull the final weights", fe);
		}
		if ((rv = tr__run_set_weights(r, &r->w)) != FB_OK) {
			return rv;
		}
	}
	uint64_t t = fb_clock_ns();
	if ((rv = tr_backend_evaluate(r->be, &r->test, &loss, &acc)) !=
	    FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "evaluate: %s", fb_strerror(rv));
		return rv;
	}
	tr__report_test(&r->rep, loss, acc, fb_clock_ns() - t);
	ferry_client_stats(r->fc, &st);
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "job done: final test accuracy %.4f (loss %.4f) at version %llu",
	    acc, loss, (unsigned long long) st.version);
	return FB_OK;
}

int
tr__train_leased(struct tr__run *r, volatile sig_atomic_t *stop)
{
	const struct tr_config *cfg  = r->cfg;
	int                     done = 0, rv = FB_OK, fe;

	while (!*stop && !done && !r->shut) {
		if (cfg->max_steps != 0 &&
		    r->rep.steps_run >= cfg->max_steps) {
			break; // --max-steps: this trainer's own steps
		}
		if (r->lc.id == 0 || r->lc.pos >= r->lc.end) {
			rv = next_lease(r, stop, &done);
		} else {
			rv = leased_step(r);
		}
		if (rv != FB_OK) {
			return rv;
		}
	}
	if (done) {
		FB_LOG(FB_LOG_NOTICE, MOD,
		    "rank %d: every sample of %d epoch(s) consumed", r->rank,
		    cfg->epochs);
		if ((rv = final_eval(r)) != FB_OK) {
			return rv;
		}
	}
	// The applied positions of a held lease are consumed, the rest go
	// back to the pool (none held: nothing sent).
	if ((fe = ferry_client_lease_release(r->fc)) != FERRY_OK) {
		return tr__run_failed(r, "lease_release", fe);
	}
	r->lc.id = 0;
	return FB_OK;
}
