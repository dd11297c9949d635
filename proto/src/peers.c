// peers.c — the receivers named per nng context (psw_auth_set_peer): a
// sender signs each request for the member it goes to (auth.c DESIGN),
// and the call sites know that member when they open a context, not when
// they sign (psw_call takes a context). Named once per context, looked up
// on every signed request: an open-addressing table under a mutex, grown
// (never shrunk) when half full; contexts are opened per connection, so
// it holds tens to thousands of entries over a job.
#include <string.h>

#include "fb/fb.h"
#include "peers.h"

struct psw__peer {
	uint32_t ctx; // 0: a free slot
	uint32_t id;
	int      role;
};

void
psw__peers_init(struct psw__peers *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
}

void
psw__peers_free(struct psw__peers *p)
{
	pthread_mutex_destroy(&p->mu);
	fb_free(p->slot);
	p->slot = NULL;
}

// find returns ctx's slot, or the free one where it would go; p->mu held
// and p->cap > 0 (a power of two).
static struct psw__peer *
find(const struct psw__peers *p, uint32_t ctx)
{
	size_t mask = p->cap - 1;
	size_t i    = (size_t) (ctx * 2654435761u) & mask;
	while (p->slot[i].ctx != 0 && p->slot[i].ctx != ctx) {
		i = (i + 1) & mask;
	}
	return &p->slot[i];
}

// grow doubles p's table (at least 64 slots); p->mu held.
static int
grow(struct psw__peers *p)
{
	struct psw__peer *old = p->slot;
	size_t            oc  = p->cap;
	size_t            cap = oc ? oc * 2 : 64;
	struct psw__peer *ns  = fb_zalloc(cap * sizeof(*ns));

	if (ns == NULL) {
		return FB_ENOMEM;
	}
	p->slot = ns;
	p->cap  = cap;
	for (size_t i = 0; i < oc; i++) {
		if (old[i].ctx != 0) {
			*find(p, old[i].ctx) = old[i];
		}
	}
	fb_free(old);
	return FB_OK;
}

int
psw__peers_set(struct psw__peers *p, uint32_t ctx, struct psw_ident to)
{
	int rv = FB_OK;

	pthread_mutex_lock(&p->mu);
	if ((p->n + 1) * 2 > p->cap) {
		rv = grow(p);
	}
	if (rv == FB_OK) {
		struct psw__peer *e = find(p, ctx);
		if (e->ctx == 0) {
			p->n++;
		}
		e->ctx  = ctx;
		e->role = to.role;
		e->id   = to.id;
	}
	pthread_mutex_unlock(&p->mu);
	return rv;
}

int
psw__peers_get(struct psw__peers *p, uint32_t ctx, struct psw_ident *to)
{
	int rv = FB_ENOTFOUND;

	pthread_mutex_lock(&p->mu);
	if (p->cap > 0 && ctx != 0) {
		struct psw__peer *e = find(p, ctx);
		if (e->ctx == ctx) {
			to->role = e->role;
			to->id   = e->id;
			rv       = FB_OK;
		}
	}
	pthread_mutex_unlock(&p->mu);
	return rv;
}
