// overlap.c — `--overlap 1`: the training loop with one-step delayed
// weights, and its communication thread, which owns the libferry client
// while a push-pull runs and gives it back when the push-pull is done
// (overlap.h says who may call the client when). One thread for the
// whole run, created at start, and two weight and gradient buffers, so no
// step creates a thread or allocates; a step costs two mutex hand-offs.
#include "overlap.h"

#include <string.h>

#include "tr_impl.h"

#define MOD "train"

enum { COMM_IDLE, COMM_QUEUED, COMM_DONE, COMM_QUIT };

// comm_main runs queued push-pulls until tr__comm_close asks it to quit.
static void *
comm_main(void *arg)
{
	struct tr__comm *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (c->state != COMM_QUEUED && c->state != COMM_QUIT) {
			pthread_cond_wait(&c->cv, &c->mu);
		}
		if (c->state == COMM_QUIT) {
			break;
		}
		pthread_mutex_unlock(&c->mu);
		int      fe  = ferry_client_push_pull(c->fc, c->g, c->n, c->w);
		uint64_t end = fb_clock_ns();
		pthread_mutex_lock(&c->mu);
		c->fe     = fe;
		c->end_ns = end;
		c->state  = COMM_DONE;
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int
tr__comm_open(struct tr__comm *c, ferry_client *fc)
{
	memset(c, 0, sizeof(*c));
	c->fc    = fc;
	c->state = COMM_IDLE;
	if (pthread_mutex_init(&c->mu, NULL) != 0) {
		return FB_ENOMEM;
	}
	if (pthread_cond_init(&c->cv, NULL) != 0) {
		pthread_mutex_destroy(&c->mu);
		return FB_ENOMEM;
	}
	if (pthread_create(&c->th, NULL, comm_main, c) != 0) {
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
		return FB_ENOMEM;
	}
	c->running = 1;
	return FB_OK;
}

void
tr__comm_push_pull(struct tr__comm *c, const float *const *g, uint32_t n,
    float *const *w)
{
	pthread_mutex_lock(&c->mu);
	FB_ASSERT(c->state == COMM_IDLE);
	c->g     = g;
	c->n     = n;
	c->w     = w;
	c->state = COMM_QUEUED;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

int
tr__comm_wait(struct tr__comm *c, uint64_t *end_ns)
{
	int fe;
	pthread_mutex_lock(&c->mu);
	FB_ASSERT(c->state == COMM_QUEUED || c->state == COMM_DONE);
	while (c->state != COMM_DONE) {
		pthread_cond_wait(&c->cv, &c->mu);
	}
	fe       = c->fe;
	c->state = COMM_IDLE;
	if (end_ns != NULL) {
		*end_ns = c->end_ns;
	}
	pthread_mutex_unlock(&c->mu);
	return fe;
}

void
tr__comm_close(struct tr__comm *c)
{
	if (!c->running) {
		return;
	}
	pthread_mutex_lock(&c->mu);
	while (c->state == COMM_QUEUED) {
		pthread_cond_wait(&c->cv, &c->mu);
	}
	c->state = COMM_QUIT;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->th, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	c->running = 0;
}

// The loop (docs/algorithms.md §6.3): while step s's push-pull runs on the
// communication thread into the spare weight buffer, this thread computes step
// s+1's gradient, into the spare gradient buffer, on the weights the backend
// holds: version s. The client is touched here only between two push-pulls.
// Positions come from the version held, as in step.c's tr__step(): when a
// push-pull lands anywhere but s+1 (a rejoin, a dropped push), the gradient
// computed meanwhile was for the wrong minibatch and is dropped, and the
// pipeline restarts from the job's step. Ends, done or signalled, with nothing
// in flight.
int
tr__train_overlapped(struct tr__run *r, const volatile sig_atomic_t *stop)
{
	const struct tr_config *cfg     = r->cfg;
	struct tr_params        spare_w = { 0 }, spare_g = { 0 };
	struct tr_params       *cur = &r->w, *nxt = &spare_w, *sw;
	struct tr_params       *gb[2] = { &r->g, &spare_g };
	struct tr__comm         comm;
	struct tr_position      pos, fl = { 0 }; // fl: the step in flight
	struct tr__step_times   tm;
	double                  loss = 0, fl_loss = 0;
	uint64_t                ts, t_grad = 0, last = fb_clock_ns(), s = 0;
	const uint32_t         *idx;
	int                     busy = 0, gi = 0, rv, fe;

	memset(&comm, 0, sizeof(comm));
	if ((rv = tr_params_init(&spare_w, &cfg->arch)) != FB_OK ||
	    (rv = tr_params_init(&spare_g, &cfg->arch)) != FB_OK ||
	    (rv = tr__comm_open(&comm, r->fc)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "--overlap: %s", fb_strerror(rv));
		goto out;
	}
	for (;;) {
		uint64_t want = busy ? s + 1 : r->rep.step;
		int      have = !*stop &&
		    tr_job_position(want, r->steps_per_epoch, r->total,
		        &pos) == FB_OK;
		t_grad = 0;
		if (have) {
			ts = fb_clock_ns();
			if ((rv = tr_partition_batch(&r->part, pos.epoch,
			         pos.k, cfg->batch, &idx)) != FB_OK ||
			    (rv = tr_backend_grad(r->be, &r->train, idx,
			         cfg->batch, gb[gi]->t, &loss)) != FB_OK) {
				FB_LOG(FB_LOG_ERR, MOD, "step %llu: %s",
				    (unsigned long long) want,
				    fb_strerror(rv));
				break;
			}
			if (cfg->slow_ms > 0) { // --slow-ms: a straggler
				fb_sleep_us((uint64_t) cfg->slow_ms * 1000u);
			}
			t_grad = fb_clock_ns() - ts;
		}
		if (busy) {
			// --step-times and the metrics get the gradient
			// computed meanwhile and the wait it did not hide,
			// which add up to the step's period.
			uint64_t tw = fb_clock_ns();
			busy        = 0;
			fe          = tr__comm_wait(&comm, NULL);
			tm.since_ns = last;
			tm.start_ns = tw - t_grad;
			tm.xchg_ns  = tw;
			tm.end_ns   = fb_clock_ns();
			last        = tm.end_ns;
			// The backend reads the new version from here on.
			sw  = cur;
			cur = nxt;
			nxt = sw;
			if ((rv = tr__step_end(r, fe, cur, fl.epoch, fl_loss,
			         &tm)) != FB_OK) {
				break;
			}
			if (r->rep.step != s + 1) {
				continue; // the job moved: recompute there
			}
		}
		if (!have) {
			rv = FB_OK;
			break;
		}
		s       = want;
		fl      = pos;
		fl_loss = loss;
		tr__comm_push_pull(&comm, tr_params_cptrs(gb[gi]),
		    (uint32_t) cfg->batch, nxt->t);
		busy = 1;
		gi ^= 1;
	}
	if (busy) {
		(void) tr__comm_wait(&comm, NULL); // after a failed gradient
	}
out:
	tr__comm_close(&comm);
	if (cur != &r->w) {
		// The caller reads r->w (--weights-out): the newest version.
		// Tensor by tensor: each starts 64-byte aligned (padding).
		for (size_t i = 0; i < r->w.n_tensors; i++) {
			memcpy(r->w.t[i], cur->t[i],
			    r->w.len[i] * sizeof(float));
		}
		(void) tr_backend_set_weights(r->be, tr_params_cptrs(&r->w));
	}
	tr_params_fini(&spare_w);
	tr_params_fini(&spare_g);
	return rv;
}
