// scheduler_leases.c — data leases (issue 27): the scheduler hands out
// each epoch's sample positions (0..dataset_size-1 of the epoch's seeded
// permutation, ferry_data_permutation) to trainers in pieces, on demand,
// so that every position of every epoch is consumed exactly once whatever
// trainers join, leave or die.
//
// DESIGN. The pool is one sorted array of free pieces (epoch, a, b) over
// the opened epochs; an epoch is opened (one piece [0, N)) only when no
// piece is left, so grants go lowest epoch first, lowest start first, and
// epoch e+1 is handed out only once e has nothing free. Returned pieces
// are merged with their neighbours, so fragments stay few. A lease record
// keeps its consumed end: the highest of the servers' marks (a push with
// it was admitted) and the trainer's done_end. A trainer that goes away
// (dies, or leaves without giving its lease back) does not give its
// positions back at once: servers may still admit a push of it until they
// install the map that marks it gone, so its lease waits until every live
// server has reported (heartbeat installed_epoch) that map; then the
// positions past the highest mark go back to the pool. A mark that later
// names a returned position counts as doubled (the soak's evidence: it
// stays 0). Each rank holds at most one lease: a repeated request (a lost
// reply) is answered with the lease it holds.
//
// Everything is under s->mu, and the state is saved (scheduler_state.c)
// before any reply that changed it, so a restarted scheduler continues:
// what it handed out stays handed out.
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "scheduler_leases.h"

struct ps_sched_leases *
ps__sched_leases_get(struct ps_scheduler *s)
{
	if (s->leases == NULL) {
		struct ps_sched_leases *L = fb_zalloc(sizeof(*L));
		if (L == NULL) {
			return NULL;
		}
		L->prev = fb_zalloc(
		    (size_t) s->opts.trainers * sizeof(uint64_t));
		if (L->prev == NULL) {
			fb_free(L);
			return NULL;
		}
		L->next_id = 1;
		s->leases  = L;
	}
	return s->leases;
}

void
ps__sched_leases_free(struct ps_scheduler *s)
{
	struct ps_sched_leases *L = s->leases;
	if (L != NULL) {
		fb_free(L->pc);
		fb_free(L->ls);
		fb_free(L->rec);
		fb_free(L->prev);
		fb_free(L);
		s->leases = NULL;
	}
}

int
ps__sched_leases_reserve(struct ps_sched_leases *L, size_t n, size_t r)
{
	if (n > L->cap_pc) {
		size_t    cap = n < 16 ? 16 : n * 2;
		uint64_t *p   = fb_realloc(L->pc, cap * 3 * sizeof(uint64_t));
		if (p == NULL) {
			return FB_ENOMEM;
		}
		L->pc     = p;
		L->cap_pc = cap;
	}
	if (r > L->cap_ls) {
		size_t           cap = r < 16 ? 16 : r * 2;
		struct ps_lease *l   = fb_realloc(L->ls, cap * sizeof(*l));
		uint64_t        *w;
		if (l == NULL) {
			return FB_ENOMEM;
		}
		L->ls = l;
		w     = fb_realloc(L->rec,
		        cap * PS_LEASE_REC_WORDS * sizeof(uint64_t));
		if (w == NULL) {
			return FB_ENOMEM;
		}
		L->rec    = w;
		L->cap_ls = cap;
	}
	return FB_OK;
}

// pool_put returns [a, b) of epoch e to the pool, merged with the pieces
// it touches. The caller reserved room for one more piece. Returns how
// many positions went back.
static uint64_t
pool_put(struct ps_sched_leases *L, uint64_t e, uint64_t a, uint64_t b)
{
	size_t i = 0;
	if (a >= b) {
		return 0;
	}
	while (i < L->n_pc &&
	    (L->pc[3 * i] < e ||
	        (L->pc[3 * i] == e && L->pc[3 * i + 1] < a))) {
		i++;
	}
	int left = i > 0 && L->pc[3 * (i - 1)] == e &&
	    L->pc[3 * (i - 1) + 2] == a;
	int right = i < L->n_pc && L->pc[3 * i] == e && L->pc[3 * i + 1] == b;
	if (left && right) {
		L->pc[3 * (i - 1) + 2] = L->pc[3 * i + 2];
		memmove(&L->pc[3 * i], &L->pc[3 * (i + 1)],
		    (L->n_pc - i - 1) * 3 * sizeof(uint64_t));
		L->n_pc--;
	} else if (left) {
		L->pc[3 * (i - 1) + 2] = b;
	} else if (right) {
		L->pc[3 * i + 1] = a;
	} else {
		memmove(&L->pc[3 * (i + 1)], &L->pc[3 * i],
		    (L->n_pc - i) * 3 * sizeof(uint64_t));
		L->pc[3 * i]     = e;
		L->pc[3 * i + 1] = a;
		L->pc[3 * i + 2] = b;
		L->n_pc++;
	}
	return b - a;
}

// find returns the record of lease id, or NULL.
static struct ps_lease *
find(struct ps_sched_leases *L, uint64_t id)
{
	for (size_t i = 0; id != 0 && i < L->n_ls; i++) {
		if (L->ls[i].id == id) {
			return &L->ls[i];
		}
	}
	return NULL;
}

// held_by returns the lease rank holds, or NULL.
static struct ps_lease *
held_by(struct ps_sched_leases *L, uint32_t rank)
{
	for (size_t i = 0; i < L->n_ls; i++) {
		if (L->ls[i].state == PS_LEASE_HELD && L->ls[i].rank == rank) {
			return &L->ls[i];
		}
	}
	return NULL;
}

// finish closes lease l at its consumed end: the rest goes back to the
// pool (room for one piece reserved by the caller).
static void
finish(struct ps_sched_leases *L, struct ps_lease *l)
{
	uint64_t end = l->start + l->count;
	L->consumed += l->consumed - l->start;
	L->returned += pool_put(L, l->epoch, l->consumed, end);
	l->state = PS_LEASE_DONE;
}

// slot returns a free record slot, dropping the oldest finished record
// when the table is full; NULL when every record is live or no memory.
static struct ps_lease *
slot(struct ps_sched_leases *L)
{
	size_t old = SIZE_MAX;
	if (L->n_ls < PS_LEASE_RECORDS_MAX) {
		return ps__sched_leases_reserve(L, L->n_pc, L->n_ls + 1) ==
		        FB_OK
		    ? &L->ls[L->n_ls++]
		    : NULL;
	}
	for (size_t i = 0; i < L->n_ls; i++) {
		if (L->ls[i].state == PS_LEASE_DONE &&
		    (old == SIZE_MAX || L->ls[i].id < L->ls[old].id)) {
			old = i;
		}
	}
	return old == SIZE_MAX ? NULL : &L->ls[old];
}

// can_slot says whether slot() would find one (so that a request can be
// refused before it changes anything).
static int
can_slot(struct ps_sched_leases *L)
{
	if (L->n_ls < PS_LEASE_RECORDS_MAX) {
		return ps__sched_leases_reserve(L, L->n_pc, L->n_ls + 1) ==
		    FB_OK;
	}
	for (size_t i = 0; i < L->n_ls; i++) {
		if (L->ls[i].state == PS_LEASE_DONE) {
			return 1;
		}
	}
	return 0;
}

// grant hands rank the lowest free piece, at most want positions,
// opening the next epoch when no piece is left. NULL: nothing free (or no
// record slot: the caller checked can_slot).
static struct ps_lease *
grant(struct ps_sched_leases *L, uint32_t rank, uint64_t want)
{
	struct ps_lease *l;
	if (L->n_pc == 0) {
		if (L->next_epoch >= L->epochs) {
			return NULL;
		}
		L->pc[0] = L->next_epoch++;
		L->pc[1] = 0;
		L->pc[2] = L->size;
		L->n_pc  = 1;
	}
	if ((l = slot(L)) == NULL) {
		return NULL;
	}
	uint64_t len = L->pc[2] - L->pc[1];
	*l           = (struct ps_lease) {
		          .id       = L->next_id++,
		          .rank     = rank,
		          .epoch    = (uint32_t) L->pc[0],
		          .start    = L->pc[1],
		          .count    = want < len ? want : len,
		          .consumed = L->pc[1],
		          .marked   = L->pc[1],
		          .state    = PS_LEASE_HELD,
	};
	L->pc[1] += l->count;
	if (L->pc[1] == L->pc[2]) {
		memmove(&L->pc[0], &L->pc[3],
		    (L->n_pc - 1) * 3 * sizeof(*L->pc));
		L->n_pc--;
	}
	return l;
}

// all_done says whether every position of every epoch is consumed: no
// piece free, no epoch left to open, no lease held or being reclaimed.
static int
all_done(const struct ps_sched_leases *L)
{
	if (L->size == 0 || L->n_pc != 0 || L->next_epoch < L->epochs) {
		return 0;
	}
	for (size_t i = 0; i < L->n_ls; i++) {
		if (L->ls[i].state != PS_LEASE_DONE) {
			return 0;
		}
	}
	return 1;
}

// reclaim gives back the leases of trainers gone whose map every live
// server has installed, from their highest mark. Returns how many. mu
// held.
static int
reclaim(struct ps_scheduler *s)
{
	struct ps_sched_leases *L   = s->leases;
	uint64_t                low = UINT64_MAX;
	int                     n   = 0;
	for (int m = 0; m < s->n_servers_seen && m < PS_MAX_MEMBERS; m++) {
		if (!s->gone[m] && !s->server_dead[m] &&
		    L->installed[m] < low) {
			low = L->installed[m];
		}
	}
	for (size_t i = 0; i < L->n_ls; i++) {
		struct ps_lease *l = &L->ls[i];
		if (l->state != PS_LEASE_RECLAIM || l->gone_epoch > low) {
			continue;
		}
		if (L->n_pc + 1 > PS_LEASE_PIECES_MAX ||
		    ps__sched_leases_reserve(L, L->n_pc + 1, L->n_ls) !=
		        FB_OK) {
			FB_LOG(FB_LOG_WARN, "leases",
			    "lease %" PRIu64 " of trainer %u: no room in the "
			    "pool to reclaim it yet",
			    l->id, l->rank);
			continue;
		}
		finish(L, l);
		FB_LOG(FB_LOG_NOTICE, "leases",
		    "lease %" PRIu64 " of trainer %u reclaimed: [%" PRIu64
		    ", %" PRIu64 ") back to the pool",
		    l->id, l->rank, l->consumed, l->start + l->count);
		n++;
	}
	return n;
}

void
ps__sched_leases_gone(struct ps_scheduler *s, uint32_t rank)
{
	struct ps_sched_leases *L = s->leases;
	struct ps_lease        *l;
	if (L == NULL || (l = held_by(L, rank)) == NULL) {
		return;
	}
	l->state      = PS_LEASE_RECLAIM;
	l->gone_epoch = s->placement != NULL ? s->epoch : 0;
	if (rank < (uint32_t) s->opts.trainers) {
		L->prev[rank] = l->id;
	}
	FB_LOG(FB_LOG_NOTICE, "leases",
	    "trainer %u went away holding lease %" PRIu64
	    " (epoch %u [%" PRIu64 ", %" PRIu64
	    ")): reclaimed once every server installed map %" PRIu64,
	    rank, l->id, l->epoch, l->start, l->start + l->count,
	    l->gone_epoch);
	reclaim(s);
	ps__sched_state_save(s);
}

// take_mark applies one mark (rank, id, end) from a server. Returns 1
// when it counted as doubled (the state should be saved).
static int
take_mark(struct ps_sched_leases *L, const Pswire__LeaseMark *k)
{
	struct ps_lease *l = find(L, k->lease_id);
	if (k->lease_id == 0 || (l == NULL && k->lease_id < L->next_id)) {
		return 0; // none, or a lease too old to be kept
	}
	if (l == NULL || l->rank != k->rank || k->end > l->start + l->count ||
	    k->end < l->start) {
		uint64_t n = ++L->bad_marks;
		if ((n & (n - 1)) == 0) { // 1, 2, 4...: not every heartbeat
			FB_LOG(FB_LOG_WARN, "leases",
			    "ignoring a mark (rank %u, lease %" PRIu64
			    ", end %" PRIu64 ") that fits no lease (%" PRIu64
			    " so far)",
			    k->rank, k->lease_id, k->end, L->bad_marks);
		}
		return 0;
	}
	if (l->state != PS_LEASE_DONE) {
		l->consumed = k->end > l->consumed ? k->end : l->consumed;
		l->marked   = k->end > l->marked ? k->end : l->marked;
		return 0;
	}
	uint64_t from = l->consumed > l->marked ? l->consumed : l->marked;
	if (k->end <= from) {
		l->marked = k->end > l->marked ? k->end : l->marked;
		return 0;
	}
	L->doubled += k->end - from;
	l->marked = k->end;
	FB_LOG(FB_LOG_ERR, "leases",
	    "lease %" PRIu64
	    " of trainer %u: a server admitted positions [%" PRIu64
	    ", %" PRIu64 ") after they went back to the pool (doubled)",
	    l->id, l->rank, from, k->end);
	return 1;
}

void
ps__sched_leases_marks(struct ps_scheduler *s, uint32_t m,
    const Pswire__LeaveRequest *l)
{
	struct ps_sched_leases *L     = s->leases;
	int                     dirty = 0;
	if (L == NULL || m >= PS_MAX_MEMBERS) {
		return; // no lease was ever granted
	}
	L->installed[m] = l->installed_epoch;
	for (size_t i = 0; i < l->n_lease_marks && i < PS_MAX_MEMBERS; i++) {
		dirty |= take_mark(L, l->lease_marks[i]);
	}
	if (reclaim(s) > 0 || dirty) {
		ps__sched_state_save(s);
	}
}

// check_params checks the data set a request names: sane, and the job's
// once the first caller fixed it. A release need not name it. Returns 0
// or a refusal.
static int
check_params(const struct ps_sched_leases *L, const Pswire__LeaseRequest *r,
    struct ps_sched_refusal *no)
{
	if (r->release && r->dataset_size == 0 && r->epochs == 0) {
		return 0;
	}
	if (!r->release && r->want == 0) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "want 0: ask for at least one position");
	}
	if (r->dataset_size == 0 || r->dataset_size > UINT32_MAX) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "dataset_size %" PRIu64 ": need 1 to %" PRIu32
		    " (positions are uint32)",
		    r->dataset_size, UINT32_MAX);
	}
	if (r->epochs == 0) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "epochs 0: need at least 1");
	}
	if (L->size == 0) {
		return 0; // this caller fixes them
	}
	if (r->dataset_size != L->size) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "dataset_size %" PRIu64 ", but the job's is %" PRIu64,
		    r->dataset_size, L->size);
	}
	if (r->epochs != L->epochs) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "epochs %u, but the job's is %u", r->epochs, L->epochs);
	}
	if (r->seed != L->seed) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "seed %" PRIu64 ", but the job's is %" PRIu64, r->seed,
		    L->seed);
	}
	return 0;
}

// check_done resolves a request's done_id for rank: *out is the lease to
// finish, or NULL (none named, or the one it gave back or lost last: a
// repeated request). Returns 0 or a refusal.
static int
check_done(struct ps_sched_leases *L, uint32_t rank,
    const Pswire__LeaseRequest *r, struct ps_lease **out,
    struct ps_sched_refusal *no)
{
	struct ps_lease *l = find(L, r->done_id);
	*out               = NULL;
	if (r->done_id == 0) {
		return 0;
	}
	if (l == NULL || l->state != PS_LEASE_HELD || l->rank != rank) {
		if (r->done_id == L->prev[rank]) {
			return 0;
		}
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "done_id %" PRIu64 " is not a lease trainer %u holds",
		    r->done_id, rank);
	}
	// done_end 0: nothing consumed (the trainer never marked it).
	if (r->done_end != 0 &&
	    (r->done_end < l->start || r->done_end > l->start + l->count)) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "done_end %" PRIu64 " is outside lease %" PRIu64
		    " [%" PRIu64 ", %" PRIu64 ")",
		    r->done_end, l->id, l->start, l->start + l->count);
	}
	*out = l;
	return 0;
}

// held_positions sums the positions leased to live trainers.
static uint64_t
held_positions(const struct ps_sched_leases *L)
{
	uint64_t n = 0;
	for (size_t i = 0; i < L->n_ls; i++) {
		n += L->ls[i].state == PS_LEASE_HELD ? L->ls[i].count : 0;
	}
	return n;
}

// lease_apply checks request r of rank and applies it: *out is the lease
// to answer (NULL: none), *changed says whether the state changed.
// Returns 0 or a refusal (nothing changed). mu held.
static int
lease_apply(struct ps_scheduler *s, const Pswire__LeaseRequest *r,
    struct ps_lease **out, int *changed, struct ps_sched_refusal *no)
{
	struct ps_sched_leases *L = ps__sched_leases_get(s);
	struct ps_lease        *done;
	uint32_t                rank = r->rank;

	*out = NULL;
	if (L == NULL) {
		return ps__sched_refuse(no, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory for the lease table");
	}
	if (rank >= (uint32_t) s->opts.trainers || !s->trainer_seen[rank] ||
	    s->trainer_gone[rank]) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "trainer %u is not in the job: register first", rank);
	}
	if (check_params(L, r, no) != 0 ||
	    check_done(L, rank, r, &done, no) != 0) {
		return no->status;
	}
	if (!r->release && done == NULL && (*out = held_by(L, rank)) != NULL) {
		return 0; // a repeat (its reply was lost): the lease it holds
	}
	// The room is made before anything changes; it may move the table.
	size_t di = done != NULL ? (size_t) (done - L->ls) : 0;
	if (L->n_pc + 1 > PS_LEASE_PIECES_MAX ||
	    ps__sched_leases_reserve(L, L->n_pc + 1, L->n_ls) != FB_OK ||
	    (!r->release && !can_slot(L))) {
		return ps__sched_refuse(no, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "lease pool full: %zu free pieces (at most %u), %zu "
		    "lease records (at most %u)",
		    L->n_pc, PS_LEASE_PIECES_MAX, L->n_ls,
		    PS_LEASE_RECORDS_MAX);
	}
	if (L->size == 0 && r->dataset_size != 0) {
		L->size   = r->dataset_size;
		L->epochs = r->epochs;
		L->seed   = r->seed;
		*changed  = 1;
		FB_LOG(FB_LOG_NOTICE, "leases",
		    "data set fixed by trainer %u: %" PRIu64
		    " positions, %u epochs, seed %" PRIu64,
		    rank, L->size, L->epochs, L->seed);
	}
	if (done != NULL) {
		done = &L->ls[di];
		if (r->done_end > done->consumed) {
			done->consumed = r->done_end;
		}
		L->prev[rank] = done->id;
		finish(L, done); // done may be reused by the grant below
		*changed = 1;
	}
	*changed |= reclaim(s) > 0;
	if (!r->release && L->size != 0 &&
	    (*out = grant(L, rank, r->want)) != NULL) {
		*changed = 1;
	}
	return 0;
}

void
ps__sched_on_lease(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__LeaseRequest   *r       = c->hdr->lease_req;
	Pswire__LeaseReply      rep     = PSWIRE__LEASE_REPLY__INIT;
	Pswire__Header          h       = PSWIRE__HEADER__INIT;
	struct ps_lease        *l       = NULL;
	struct ps_sched_refusal no      = { 0 };
	int                     changed = 0;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_LEASE_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Lease needs a lease_req body");
		return;
	}
	if (!ps__call_acts_as(c, PSW_ROLE_TRAINER, r->rank, 0)) {
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (lease_apply(s, r, &l, &changed, &no) == 0) {
		struct ps_sched_leases *L = s->leases;
		if (l != NULL) {
			rep.id    = l->id;
			rep.epoch = l->epoch;
			rep.start = l->start;
			rep.count = l->count;
		}
		rep.seed         = L->seed;
		rep.dataset_size = L->size;
		rep.epochs       = L->epochs;
		rep.done         = l == NULL && all_done(L);
		rep.retry_ms     = l == NULL && !rep.done && !r->release
		        ? PS_LEASE_RETRY_MS
		        : 0;
		rep.held         = held_positions(L);
		if (changed) {
			ps__sched_state_save(s); // before anyone sees it
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (no.status != 0) {
		ps__call_reply_err(c, no.status, "%s", no.msg);
		return;
	}
	h.body_case = PSWIRE__HEADER__BODY_LEASE_REP;
	h.lease_rep = &rep;
	ps__call_reply(c, &h);
}

// data_epoch finds the lowest epoch with free or held positions, the
// positions of it not consumed (*left) and those free in the pool
// (*avail); *done when there is none.
static uint32_t
data_epoch(const struct ps_sched_leases *L, uint64_t *left, uint64_t *avail,
    int *done)
{
	uint64_t e = L->next_epoch < L->epochs ? L->next_epoch : UINT64_MAX;
	*left      = 0;
	*avail     = 0;
	*done      = 0;
	if (L->n_pc > 0 && L->pc[0] < e) {
		e = L->pc[0];
	}
	for (size_t i = 0; i < L->n_ls; i++) {
		if (L->ls[i].state != PS_LEASE_DONE && L->ls[i].epoch < e) {
			e = L->ls[i].epoch;
		}
	}
	if (e == UINT64_MAX || L->size == 0) {
		*done = L->size != 0;
		return L->epochs > 0 ? L->epochs - 1 : 0;
	}
	if (e >= L->next_epoch) {
		*left = *avail = L->size; // not opened yet
		return (uint32_t) e;
	}
	for (size_t i = 0; i < L->n_pc && L->pc[3 * i] == e; i++) {
		*avail += L->pc[3 * i + 2] - L->pc[3 * i + 1];
	}
	*left = *avail;
	for (size_t i = 0; i < L->n_ls; i++) {
		const struct ps_lease *l = &L->ls[i];
		if (l->state != PS_LEASE_DONE && l->epoch == e) {
			*left += l->start + l->count - l->consumed;
		}
	}
	return (uint32_t) e;
}

void
ps__sched_leases_metrics(struct ps_scheduler *s, struct obs_writer *w)
{
	static const struct ps_sched_leases none = { 0 };
	const struct ps_sched_leases       *L = s->leases ? s->leases : &none;
	uint64_t                            left, avail, held = 0;
	int                                 done;
	uint32_t e = data_epoch(L, &left, &avail, &done);
	for (size_t i = 0; i < L->n_ls; i++) {
		held += L->ls[i].state != PS_LEASE_DONE;
	}
// Full names, so that a search of the sources (deploy/k8s/validate)
// finds every family.
#define FAMILY(name, type, help, v)                                           \
	do {                                                                  \
		obs_write_family(w, name, help, type);                        \
		obs_write_sample(w, name, NULL, (double) (v));                \
	} while (0)
	FAMILY("ferry_scheduler_leases_outstanding", OBS_GAUGE,
	    "Data leases held by trainers or being reclaimed from ones that "
	    "went away.",
	    held);
	FAMILY("ferry_scheduler_lease_positions_consumed_total", OBS_COUNTER,
	    "Sample positions consumed through finished leases, all epochs.",
	    L->consumed);
	FAMILY("ferry_scheduler_lease_positions_returned_total", OBS_COUNTER,
	    "Sample positions given back to the pool (unfinished leases).",
	    L->returned);
	FAMILY("ferry_scheduler_lease_doubled_total", OBS_COUNTER,
	    "Positions a server admitted after they went back to the pool "
	    "(must stay 0).",
	    L->doubled);
	FAMILY("ferry_scheduler_data_epoch", OBS_GAUGE,
	    "The lowest data epoch with free or held positions.", e);
	FAMILY("ferry_scheduler_data_epoch_progress", OBS_GAUGE,
	    "Fraction of the data epoch's positions consumed.",
	    done          ? 1.0
	        : L->size ? (double) (L->size - left) / (double) L->size
	                  : 0.0);
#undef FAMILY
}

void
ps__sched_leases_json(struct ps_scheduler *s, struct obs_writer *w)
{
	static const struct ps_sched_leases none = { 0 };
	const struct ps_sched_leases       *L = s->leases ? s->leases : &none;
	const char                         *sep = "";
	uint64_t                            left, avail;
	int                                 done;
	uint32_t e = data_epoch(L, &left, &avail, &done);
	obs_writer_printf(w, ",\"leases\":[");
	for (size_t i = 0; i < L->n_ls; i++) {
		const struct ps_lease *l = &L->ls[i];
		if (l->state == PS_LEASE_DONE) {
			continue;
		}
		obs_writer_printf(w,
		    "%s{\"id\":%" PRIu64 ",\"rank\":%u,\"epoch\":%u,"
		    "\"start\":%" PRIu64 ",\"count\":%" PRIu64
		    ",\"consumed\":%" PRIu64 ",\"reclaiming\":%s}",
		    sep, l->id, l->rank, l->epoch, l->start, l->count,
		    l->consumed - l->start,
		    l->state == PS_LEASE_RECLAIM ? "true" : "false");
		sep = ",";
	}
	obs_writer_printf(w,
	    "],\"lease_pool\":{\"dataset_size\":%" PRIu64 ",\"epochs\":%u,"
	    "\"epoch\":%u,\"free\":%" PRIu64 ",\"consumed\":%" PRIu64
	    ",\"returned\":%" PRIu64 ",\"doubled\":%" PRIu64
	    ",\"left\":%" PRIu64 ",\"done\":%s}",
	    L->size, L->epochs, e, avail, L->consumed, L->returned, L->doubled,
	    left, done ? "true" : "false");
}
