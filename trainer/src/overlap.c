// overlap.c — the communication thread of --overlap 1: it owns the libferry
// client while a push-pull runs and gives it back when the push-pull is
// done (overlap.h says who may call the client when). One thread for the
// whole run, created at start, so no step creates a thread or allocates;
// a step costs two mutex hand-offs.
#include "overlap.h"

#include <string.h>

#include "tr_impl.h"

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
