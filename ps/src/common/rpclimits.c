// rpclimits.c — the running counts behind rpc.h's LIMITS (see
// rpclimits.h). rpc.c used to count them by scanning every context twice
// per request; with contexts that grow with the members (two per member at
// the scheduler) that scan became the largest cost of a heartbeat that is
// not nng's. Here each connection, host and member that holds a call has
// an entry in one open-addressed table (linear probing, backward-shift
// deletion), made when its first call is taken and dropped when its last
// is released, so the table holds at most three entries per context and is
// sized to four. One mutex guards it: a take or a release is a few
// instructions inside it.
//
// The peer of each connection (its host key and its certificate's member
// key: a getpeername and a TLS look-up away) is kept in a direct-mapped
// cache indexed by the pipe id. nng does not reuse pipe ids until 2^31
// connections later, so a stale slot is only ever a miss.
#include <pthread.h>
#include <string.h>

#include "fb/fb.h"
#include "rpc.h"
#include "rpclimits.h"

enum { K_NONE, K_PIPE, K_HOST, K_MEMBER };

struct ent {
	uint64_t key;
	uint32_t kind; // K_NONE: a free slot
	int      calls;
	size_t   bytes; // K_PIPE only
};

struct peer {
	uint32_t pipe; // 0: empty
	uint64_t host, member;
};

struct ps_lim {
	pthread_mutex_t mu; // guards the rest
	struct ent     *tab;
	size_t          mask; // table size - 1 (a power of two)
	struct peer    *peers;
	size_t          pmask;
	size_t          total; // bytes every call holds
};

static size_t
slot_of(uint32_t kind, uint64_t key, size_t mask)
{
	uint64_t h = (key ^ (uint64_t) kind << 59) * 0x9e3779b97f4a7c15ull;
	return (size_t) (h >> 29) & mask;
}

static struct ent *
find(const struct ps_lim *l, uint32_t kind, uint64_t key)
{
	for (size_t i = slot_of(kind, key, l->mask);; i = (i + 1) & l->mask) {
		struct ent *e = &l->tab[i];
		if (e->kind == K_NONE) {
			return NULL;
		}
		if (e->kind == kind && e->key == key) {
			return e;
		}
	}
}

// get returns the entry for (kind, key), made empty when there is none:
// the table is never more than three quarters full, so there is a slot.
static struct ent *
get(struct ps_lim *l, uint32_t kind, uint64_t key)
{
	for (size_t i = slot_of(kind, key, l->mask);; i = (i + 1) & l->mask) {
		struct ent *e = &l->tab[i];
		if (e->kind == K_NONE) {
			*e = (struct ent) { .key = key, .kind = kind };
			return e;
		}
		if (e->kind == kind && e->key == key) {
			return e;
		}
	}
}

// drop frees e's slot once it counts nothing, moving back the entries
// after it that probed past it (so that find still stops at a free slot).
static void
drop(struct ps_lim *l, struct ent *e)
{
	if (e->calls != 0 || e->bytes != 0) {
		return;
	}
	size_t i = (size_t) (e - l->tab), j = i;
	for (;;) {
		j = (j + 1) & l->mask;
		if (l->tab[j].kind == K_NONE) {
			break;
		}
		size_t k = slot_of(l->tab[j].kind, l->tab[j].key, l->mask);
		// The entry at j may move to i unless its home k lies
		// cyclically in (i, j].
		int    stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			l->tab[i] = l->tab[j];
			i         = j;
		}
	}
	l->tab[i].kind = K_NONE;
}

static size_t
pow2_at_least(size_t n)
{
	size_t p = 64;
	while (p < n) {
		p <<= 1;
	}
	return p;
}

int
ps__lim_open(int ncontexts, struct ps_lim **out)
{
	struct ps_lim *l = fb_zalloc(sizeof(*l));
	if (l == NULL) {
		return FB_ENOMEM;
	}
	pthread_mutex_init(&l->mu, NULL);
	if (ps__lim_grow(l, ncontexts) != FB_OK) {
		ps__lim_close(l);
		return FB_ENOMEM;
	}
	*out = l;
	return FB_OK;
}

int
ps__lim_grow(struct ps_lim *l, int ncontexts)
{
	size_t n  = ncontexts > 0 ? (size_t) ncontexts : 1;
	size_t ts = pow2_at_least(4 * n), ps = pow2_at_least(2 * n);
	if (l->tab != NULL && ts <= l->mask + 1) {
		return FB_OK; // (only this thread changes the sizes)
	}
	struct ent  *tab   = fb_zalloc(sizeof(*tab) * ts);
	struct peer *peers = fb_zalloc(sizeof(*peers) * ps);
	if (tab == NULL || peers == NULL) {
		fb_free(tab);
		fb_free(peers);
		return FB_ENOMEM;
	}
	pthread_mutex_lock(&l->mu);
	struct ent  *otab   = l->tab;
	struct peer *opeers = l->peers;
	size_t       osize  = l->tab != NULL ? l->mask + 1 : 0;
	size_t       opsize = l->peers != NULL ? l->pmask + 1 : 0;
	l->tab              = tab;
	l->mask             = ts - 1;
	l->peers            = peers;
	l->pmask            = ps - 1;
	for (size_t i = 0; i < osize; i++) {
		if (otab[i].kind != K_NONE) {
			*get(l, otab[i].kind, otab[i].key) = otab[i];
		}
	}
	for (size_t i = 0; i < opsize; i++) {
		if (opeers[i].pipe != 0) {
			peers[opeers[i].pipe & l->pmask] = opeers[i];
		}
	}
	pthread_mutex_unlock(&l->mu);
	fb_free(otab);
	fb_free(opeers);
	return FB_OK;
}

void
ps__lim_close(struct ps_lim *l)
{
	if (l == NULL) {
		return;
	}
	pthread_mutex_destroy(&l->mu);
	fb_free(l->tab);
	fb_free(l->peers);
	fb_free(l);
}

int
ps__lim_peer(struct ps_lim *l, uint32_t pipe, uint64_t *host, uint64_t *member)
{
	int hit = 0;
	pthread_mutex_lock(&l->mu);
	const struct peer *p = &l->peers[pipe & l->pmask];
	if (pipe != 0 && p->pipe == pipe) {
		*host   = p->host;
		*member = p->member;
		hit     = 1;
	}
	pthread_mutex_unlock(&l->mu);
	return hit;
}

void
ps__lim_peer_put(struct ps_lim *l, uint32_t pipe, uint64_t host,
    uint64_t member)
{
	pthread_mutex_lock(&l->mu);
	l->peers[pipe & l->pmask] = (struct peer) { pipe, host, member };
	pthread_mutex_unlock(&l->mu);
}

// calls_of returns the calls (kind, key) holds (key 0: none).
static int
calls_of(const struct ps_lim *l, uint32_t kind, uint64_t key)
{
	const struct ent *e = key != 0 ? find(l, kind, key) : NULL;
	return e != NULL ? e->calls : 0;
}

// over tells which of caps taking mine bytes for (pipe, host, member)
// would exceed, in the order rpc.c always checked them.
static enum ps_lim_over
over(const struct ps_lim *l, uint32_t pipe, uint64_t host, uint64_t member,
    size_t mine, const struct ps_lim_caps *caps, struct ps_lim_seen *seen)
{
	const struct ent *pe = pipe != 0 ? find(l, K_PIPE, pipe) : NULL;
	seen->calls          = pe != NULL ? pe->calls : 0;
	seen->bytes          = pe != NULL ? pe->bytes : 0;
	seen->total          = l->total;
	if (seen->calls >= caps->conn_calls) {
		return PS_LIM_CONN_CALLS;
	}
	if (member != 0 &&
	    (seen->calls = calls_of(l, K_MEMBER, member)) >=
	        caps->conn_calls) {
		return PS_LIM_MEMBER_CALLS;
	}
	if (member == 0 && host != 0 &&
	    (seen->calls = calls_of(l, K_HOST, host)) >= caps->host_calls) {
		return PS_LIM_HOST_CALLS;
	}
	if (seen->bytes + mine > caps->conn_bytes) {
		return PS_LIM_CONN_BYTES;
	}
	if (caps->all_bytes != 0 && seen->total + mine > caps->all_bytes) {
		return PS_LIM_TOTAL_BYTES;
	}
	return PS_LIM_OK;
}

enum ps_lim_over
ps__lim_take(struct ps_lim *l, struct ps_call *c, uint32_t pipe, uint64_t host,
    uint64_t member, size_t mine, const struct ps_lim_caps *caps,
    struct ps_lim_seen *seen)
{
	pthread_mutex_lock(&l->mu);
	enum ps_lim_over o = over(l, pipe, host, member, mine, caps, seen);
	if (o == PS_LIM_OK) {
		if (pipe != 0) {
			struct ent *e = get(l, K_PIPE, pipe);
			e->calls++;
			e->bytes += mine;
		}
		if (host != 0) {
			get(l, K_HOST, host)->calls++;
		}
		if (member != 0) {
			get(l, K_MEMBER, member)->calls++;
		}
		l->total += mine;
		atomic_store_explicit(&c->held, mine, memory_order_relaxed);
		atomic_store_explicit(&c->pipe, pipe, memory_order_relaxed);
		atomic_store_explicit(&c->host, host, memory_order_relaxed);
		atomic_store_explicit(&c->member, member,
		    memory_order_relaxed);
	}
	pthread_mutex_unlock(&l->mu);
	return o;
}

void
ps__lim_resize(struct ps_lim *l, struct ps_call *c, size_t held)
{
	pthread_mutex_lock(&l->mu);
	size_t   old  = atomic_load_explicit(&c->held, memory_order_relaxed);
	uint32_t pipe = atomic_load_explicit(&c->pipe, memory_order_relaxed);
	l->total      = l->total - old + held;
	if (pipe != 0) {
		struct ent *e = find(l, K_PIPE, pipe);
		e->bytes      = e->bytes - old + held;
	}
	atomic_store_explicit(&c->held, held, memory_order_relaxed);
	pthread_mutex_unlock(&l->mu);
}

// unhold takes one call of (kind, key) off its entry.
static void
unhold(struct ps_lim *l, uint32_t kind, uint64_t key)
{
	struct ent *e = key != 0 ? find(l, kind, key) : NULL;
	if (e != NULL) {
		e->calls--;
		drop(l, e);
	}
}

void
ps__lim_release(struct ps_lim *l, struct ps_call *c)
{
	pthread_mutex_lock(&l->mu);
	size_t   held = atomic_load_explicit(&c->held, memory_order_relaxed);
	uint32_t pipe = atomic_load_explicit(&c->pipe, memory_order_relaxed);
	l->total -= held;
	if (pipe != 0) {
		struct ent *e = find(l, K_PIPE, pipe);
		e->bytes -= held;
		e->calls--;
		drop(l, e);
	}
	unhold(l, K_HOST,
	    atomic_load_explicit(&c->host, memory_order_relaxed));
	unhold(l, K_MEMBER,
	    atomic_load_explicit(&c->member, memory_order_relaxed));
	atomic_store_explicit(&c->pipe, 0, memory_order_relaxed);
	atomic_store_explicit(&c->held, 0, memory_order_relaxed);
	atomic_store_explicit(&c->host, 0, memory_order_relaxed);
	atomic_store_explicit(&c->member, 0, memory_order_relaxed);
	pthread_mutex_unlock(&l->mu);
}

size_t
ps__lim_conn_bytes(struct ps_lim *l, uint32_t pipe)
{
	pthread_mutex_lock(&l->mu);
	const struct ent *e = pipe != 0 ? find(l, K_PIPE, pipe) : NULL;
	size_t            b = e != NULL ? e->bytes : 0;
	pthread_mutex_unlock(&l->mu);
	return b;
}
