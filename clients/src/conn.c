// conn.c — the client's connections to the servers of the map: dialing
// each server (one REQ socket, one probe context), the shards the map
// gives it, its request slots (FERRY_PIPE_SLOTS and the rows slot, each a
// REQ context and an aio whose callback moves a request from its send to
// its receive), the client's completion lock those callbacks wake, and
// closing it all.
//
// DESIGN. The slots of a connection are one allocation of fixed address
// (callbacks hold pointers to them while c->conns grows); what runs over
// them (exchange.c) only reads and flips their state under the lock. This
// file calls nothing of the exchange, so sched.c (a new map) and
// client.c (close) reach the connections without going through it.
#include "client_impl.h"

// slot_cb is every slot's aio callback (an nng thread): a send that
// worked becomes the receive of its reply; anything else ends the slot.
static void
slot_cb(void *arg)
{
	struct slot        *s = arg;
	struct ferry__pipe *p = s->pipe;
	int                 r = nng_aio_result(s->aio);
	nng_mtx_lock(p->mu);
	if (s->state == SLOT_SEND && r == 0) {
		nng_duration left = (nng_duration) (s->expire - nng_clock());
		s->state          = SLOT_RECV;
		nng_mtx_unlock(p->mu);
		nng_aio_set_timeout(s->aio, left > 0 ? left : 1);
		nng_ctx_recv(s->ctx, s->aio);
		return;
	}
	s->in_send = s->state == SLOT_SEND;
	s->res     = r;
	s->state   = SLOT_DONE;
	nng_cv_wake(p->cv);
	nng_mtx_unlock(p->mu);
}

// slots_open gives the client its completion lock (once) and connection
// cn (server m, socket open) its FERRY_SLOTS_ALL slots (the pipe's and the
// rows slot), each with its own context and aio. Errors: FERRY_ENOMEM,
// FERRY_ECONNECT.
static int
slots_open(ferry_client *c, struct conn *cn, size_t m)
{
	if (c->pipe == NULL) {
		struct ferry__pipe *p = fb_zalloc(sizeof(*p));
		if (p == NULL || nng_mtx_alloc(&p->mu) != 0) {
			fb_free(p);
			return FERRY_ENOMEM;
		}
		if (nng_cv_alloc(&p->cv, p->mu) != 0) {
			nng_mtx_free(p->mu);
			fb_free(p);
			return FERRY_ENOMEM;
		}
		c->pipe = p;
	}
	cn->slots = fb_zalloc(FERRY_SLOTS_ALL * sizeof(*cn->slots));
	if (cn->slots == NULL) {
		return FERRY_ENOMEM;
	}
	for (size_t k = 0; k < FERRY_SLOTS_ALL; k++) {
		struct slot *s = &cn->slots[k];
		s->pipe        = c->pipe;
		s->m           = m;
		if (nng_ctx_open(&s->ctx, cn->sock) != 0) {
			return FERRY_ECONNECT;
		}
		// Its requests are signed for server m alone (auth.c).
		if (psw_auth_set_peer(c->auth, s->ctx, PSW_ROLE_SERVER,
		        (uint32_t) m) != FB_OK) {
			return FERRY_ENOMEM;
		}
		if (nng_aio_alloc(&s->aio, slot_cb, s) != 0) {
			return FERRY_ENOMEM;
		}
	}
	return FERRY_OK;
}

// slots_size gives each slot of cn a request list of cn->n shards (no
// request in flight). Errors: FERRY_ENOMEM.
static int
slots_size(struct conn *cn)
{
	for (size_t k = 0; cn->slots != NULL && k < FERRY_PIPE_SLOTS; k++) {
		struct slot *s = &cn->slots[k];
		fb_free(s->req);
		s->req   = fb_alloc((cn->n ? cn->n : 1) * sizeof(uint32_t));
		s->req_n = 0;
		if (s->req == NULL) {
			return FERRY_ENOMEM;
		}
	}
	return FERRY_OK;
}

// slots_close stops and frees cn's slots (after its socket is closed).
static void
slots_close(struct conn *cn)
{
	for (size_t k = 0; cn->slots != NULL && k < FERRY_SLOTS_ALL; k++) {
		struct slot *s = &cn->slots[k];
		if (s->aio != NULL) {
			nng_aio_stop(s->aio); // waits for its callback
			if (s->state == SLOT_DONE && s->in_send &&
			    nng_aio_get_msg(s->aio) != NULL) {
				nng_msg_free(nng_aio_get_msg(s->aio));
			}
			nng_aio_free(s->aio);
		}
		if (s->spare != NULL) {
			nng_msg_free(s->spare);
		}
		fb_free(s->req);
	}
	fb_free(cn->slots);
	cn->slots = NULL;
}

// pipe_close frees the client's completion lock, after every slot.
static void
pipe_close(ferry_client *c)
{
	if (c->pipe != NULL) {
		nng_cv_free(c->pipe->cv);
		nng_mtx_free(c->pipe->mu);
		fb_free(c->pipe);
		c->pipe = NULL;
	}
}

// ferry__conns_open dials every server of map p that is not dialed yet (a
// later map may list more servers: one joined the job).
int
ferry__conns_open(ferry_client *c, const Pswire__Placement *p)
{
	size_t had = c->n_conns;
	int    rv;
	if (p->n_servers < had) {
		return ferry__fail(c, FERRY_EPROTO,
		    "map lists %zu servers, fewer than the %zu known",
		    p->n_servers, had);
	}
	if (p->n_servers > had) {
		struct conn *cs = fb_realloc(c->conns,
		    p->n_servers * sizeof(*c->conns));
		if (cs == NULL) {
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
		memset(cs + had, 0, (p->n_servers - had) * sizeof(*cs));
		c->conns   = cs;
		c->n_conns = p->n_servers;
	}
	for (size_t m = had; m < c->n_conns; m++) {
		struct conn *cn = &c->conns[m];
		if (psw_req_open(c->tls, p->servers[m], 1u << 30, 20, 500,
		        &cn->sock, &cn->ctx, &cn->aio) != FB_OK) {
			c->n_conns = m; // close only what was opened
			return ferry__fail(c, FERRY_ECONNECT,
			    "cannot dial server %s", p->servers[m]);
		}
		if (psw_auth_set_peer(c->auth, cn->ctx, PSW_ROLE_SERVER,
		        (uint32_t) m) != FB_OK) {
			c->n_conns = m + 1;
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
		if ((rv = slots_open(c, cn, m)) != FERRY_OK) {
			c->n_conns = m + 1; // ferry_client_close frees it
			return ferry__fail(c, rv,
			    "cannot open the request contexts of server %s",
			    p->servers[m]);
		}
	}
	return FERRY_OK;
}

// ferry__conns_assign lists, per server, the shards the current map gives it.
int
ferry__conns_assign(ferry_client *c)
{
	for (size_t m = 0; m < c->n_conns; m++) {
		fb_free(c->conns[m].shards);
		c->conns[m].shards = NULL;
		c->conns[m].n      = 0;
		c->conns[m].bytes  = 0;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->conns[c->pl->shards[i]->server].n++;
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		struct conn *cn = &c->conns[m];
		cn->shards = fb_alloc((cn->n ? cn->n : 1) * sizeof(uint32_t));
		if (cn->shards == NULL || slots_size(cn) != FERRY_OK) {
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
		cn->n = 0;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		struct conn *cn     = &c->conns[c->pl->shards[i]->server];
		cn->shards[cn->n++] = (uint32_t) i;
		cn->bytes += c->pl->shards[i]->len * 4;
		c->replicated |= c->pl->shards[i]->n_backups > 0;
	}
	return FERRY_OK;
}

void
ferry__conns_close(ferry_client *c)
{
	for (size_t i = 0; i < c->n_conns; i++) {
		// The slots first: nng_aio_stop waits for a slot callback
		// still inside nng_ctx_recv (a request aborted just before:
		// its reply's callback may have run already), which must not
		// overlap nng_close. nng 1.5.2 frees a context's protocol
		// state after waking the closer: closing first panicked
		// ("pthread_mutex_lock: Invalid argument") under load.
		slots_close(&c->conns[i]);
		nng_close(c->conns[i].sock);
		nng_aio_free(c->conns[i].aio);
		fb_free(c->conns[i].shards);
	}
	fb_free(c->conns);
	c->conns   = NULL;
	c->n_conns = 0;
	pipe_close(c); // after every slot's callback
}
