// lease.c — elastic jobs' client calls: the rank the scheduler gave and
// whether the job is elastic, the data leases (ferry_client_lease_next,
// _mark, _release: the Lease rpc), and each epoch's sample order
// (ferry_data_permutation), which every trainer and the Python binding
// compute the same way.
//
// DESIGN. A lease is the positions [start, start+count) of one epoch's
// permutation. The client holds at most one; the mark (how far the
// pushes got) rides on every PushRequest (request.c), so the servers
// that admit a push report it and a dead trainer's lease returns exactly
// the positions no admitted push held. Giving a lease back says how far
// the last mark got: the rest returns to the pool.
#include "client_impl.h"

FERRY_API int
ferry_client_rank(const ferry_client *c)
{
	return c != NULL ? c->opts.rank : -1;
}

FERRY_API int
ferry_client_elastic(const ferry_client *c)
{
	return c != NULL && c->declared && c->elastic;
}

// lease_call sends one LeaseRequest q (rank and the held lease's end
// filled in here) and, on FERRY_OK, returns the reply's lease in *out
// (may be NULL) and holds it.
static int
lease_call(ferry_client *c, Pswire__LeaseRequest *q, struct ferry_lease *out)
{
	Pswire__Header  h  = PSWIRE__HEADER__INIT;
	Pswire__Header *rh = NULL;
	int             rv;

	q->rank    = (uint32_t) c->opts.rank;
	q->done_id = c->lease_held;
	// The positions before the last mark of the held lease went into
	// pushes; none were if it was never marked.
	q->done_end = c->lease_held != 0 && c->mark_id == c->lease_held
	    ? c->mark_end
	    : 0;
	h.body_case = PSWIRE__HEADER__BODY_LEASE_REQ;
	h.lease_req = q;
	if ((rv = ferry__sched_call(c, &h, PSWIRE__METHOD__LEASE,
	         ferry__timeout(c), &rh)) != FERRY_OK) {
		return rv;
	}
	if (rh->body_case != PSWIRE__HEADER__BODY_LEASE_REP) {
		pswire__header__free_unpacked(rh, NULL);
		return ferry__fail(c, FERRY_EPROTO,
		    "scheduler %s: Lease reply has no lease", c->url);
	}
	const Pswire__LeaseReply *r = rh->lease_rep;
	if (r->id != 0 &&
	    (r->count == 0 || r->start > UINT32_MAX ||
	        r->count > (uint64_t) UINT32_MAX + 1 - r->start)) {
		pswire__header__free_unpacked(rh, NULL);
		return ferry__fail(c, FERRY_EPROTO,
		    "scheduler %s: Lease reply's positions are out of range",
		    c->url);
	}
	// The lease given back is the scheduler's now.
	c->lease_held = r->id;
	if (out != NULL) {
		out->id       = r->id;
		out->epoch    = r->epoch;
		out->start    = r->start;
		out->count    = r->count;
		out->seed     = r->seed;
		out->done     = r->id == 0 && r->done;
		out->retry_ms = r->id == 0 && !r->done ? r->retry_ms : 0;
	}
	pswire__header__free_unpacked(rh, NULL);
	return FERRY_OK;
}

FERRY_API int
ferry_client_lease_next(ferry_client *c, uint64_t dataset_size,
    uint32_t epochs, uint64_t seed, uint64_t want, struct ferry_lease *out)
{
	Pswire__LeaseRequest q = PSWIRE__LEASE_REQUEST__INIT;
	if (c == NULL || out == NULL) {
		return FERRY_EINVAL;
	}
	memset(out, 0, sizeof(*out));
	if (!c->declared) {
		return ferry__fail(c, FERRY_ESTATE,
		    "declare the tensors first");
	}
	// Positions are uint32 (ferry_data_permutation's out).
	if (dataset_size == 0 || dataset_size > (uint64_t) UINT32_MAX + 1 ||
	    epochs == 0 || want == 0) {
		return ferry__fail(c, FERRY_EINVAL,
		    "lease: dataset_size must be in 1..2^32, epochs and want "
		    "> 0");
	}
	q.dataset_size = dataset_size;
	q.epochs       = epochs;
	q.seed         = seed;
	q.want         = want;
	return lease_call(c, &q, out);
}

FERRY_API void
ferry_client_lease_mark(ferry_client *c, uint64_t id, uint64_t end)
{
	if (c != NULL) {
		c->mark_id  = id;
		c->mark_end = id != 0 ? end : 0;
	}
}

FERRY_API int
ferry_client_lease_release(ferry_client *c)
{
	Pswire__LeaseRequest q = PSWIRE__LEASE_REQUEST__INIT;
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (c->lease_held == 0) {
		return FERRY_OK;
	}
	q.release = 1;
	return lease_call(c, &q, NULL);
}

// splitmix64 steps the stream at *s (Steele, Lea and Flood's
// SplittableRandom finaliser): the contract's generator, fixed so that C
// and Python agree bit for bit.
static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

FERRY_API void
ferry_data_permutation(uint64_t seed, uint32_t epoch, uint64_t n,
    uint32_t *out)
{
	uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * ((uint64_t) epoch + 1));
	if (out == NULL || n == 0) {
		return;
	}
	for (uint64_t i = 0; i < n; i++) {
		out[i] = (uint32_t) i;
	}
	// Fisher-Yates, from the top.
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = splitmix64(&s) % (i + 1);
		uint32_t t = out[i];
		out[i]     = out[j];
		out[j]     = t;
	}
}
