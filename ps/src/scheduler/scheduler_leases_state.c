// scheduler_leases_state.c — the data leases on disk: the lease fields of
// SchedulerState (940..959), filled for scheduler_state.c's writes and
// checked whole before a loaded state installs them. The free pieces and
// the records are flat uint64 arrays (triples, PS_LEASE_REC_WORDS words), so
// the state needs no new message type.
#include <inttypes.h>
#include <string.h>

#include "scheduler_leases.h"

void
ps__sched_leases_save(struct ps_scheduler *s, Pswire__SchedulerState *st)
{
	struct ps_sched_leases *L = s->leases;
	if (L == NULL || L->size == 0) {
		return;
	}
	for (size_t i = 0; i < L->n_ls; i++) {
		const struct ps_lease *l = &L->ls[i];
		uint64_t              *w = &L->rec[i * PS_LEASE_REC_WORDS];
		w[0]                     = l->id;
		w[1]                     = l->rank;
		w[2]                     = l->epoch;
		w[3]                     = l->start;
		w[4]                     = l->count;
		w[5]                     = l->consumed;
		w[6]                     = l->marked;
		w[7]                     = l->state;
		w[8]                     = l->gone_epoch;
	}
	st->lease_dataset_size = L->size;
	st->lease_epochs       = L->epochs;
	st->lease_seed         = L->seed;
	st->lease_next_id      = L->next_id;
	st->lease_next_epoch   = L->next_epoch;
	st->n_lease_pieces     = L->n_pc * 3;
	st->lease_pieces       = L->pc;
	st->n_lease_records    = L->n_ls * PS_LEASE_REC_WORDS;
	st->lease_records      = L->rec;
	st->lease_consumed     = L->consumed;
	st->lease_returned     = L->returned;
	st->lease_doubled      = L->doubled;
	st->n_lease_prev       = (size_t) s->opts.trainers;
	st->lease_prev         = L->prev;
}

// load_check validates the lease fields of st against s's options.
// Returns NULL or what is wrong. Pure.
static const char *
load_check(const struct ps_scheduler *s, const Pswire__SchedulerState *st)
{
	uint64_t N = st->lease_dataset_size;
	if (N == 0) {
		return st->n_lease_pieces || st->n_lease_records ||
		        st->n_lease_prev
		    ? "lease records without a data set"
		    : NULL;
	}
	if (N > UINT32_MAX || st->lease_epochs == 0 ||
	    st->lease_next_epoch > st->lease_epochs ||
	    st->lease_next_id == 0) {
		return "a data set out of range";
	}
	if (st->n_lease_pieces % 3 != 0 ||
	    st->n_lease_pieces / 3 > PS_LEASE_PIECES_MAX ||
	    st->n_lease_records % PS_LEASE_REC_WORDS != 0 ||
	    st->n_lease_records / PS_LEASE_REC_WORDS > PS_LEASE_RECORDS_MAX ||
	    st->n_lease_prev != (size_t) s->opts.trainers) {
		return "lease tables of the wrong size";
	}
	for (size_t i = 0; i < st->n_lease_pieces; i += 3) {
		const uint64_t *p = &st->lease_pieces[i];
		if (p[0] >= st->lease_next_epoch || p[1] >= p[2] || p[2] > N ||
		    (i > 0 &&
		        (p[0] < p[-3] || (p[0] == p[-3] && p[1] <= p[-1])))) {
			return "a free piece out of range or order";
		}
	}
	for (size_t i = 0; i < st->n_lease_records; i += PS_LEASE_REC_WORDS) {
		const uint64_t *w = &st->lease_records[i];
		if (w[0] == 0 || w[0] >= st->lease_next_id ||
		    w[1] >= (uint64_t) s->opts.trainers ||
		    w[2] >= st->lease_next_epoch || w[4] == 0 || w[3] > N ||
		    w[4] > N - w[3] || w[5] < w[3] || w[5] > w[3] + w[4] ||
		    w[6] > w[3] + w[4] || w[7] < PS_LEASE_HELD ||
		    w[7] > PS_LEASE_DONE) {
			return "a lease record out of range";
		}
	}
	return NULL;
}

int
ps__sched_leases_load(struct ps_scheduler *s, const Pswire__SchedulerState *st)
{
	const char             *bad = load_check(s, st);
	struct ps_sched_leases *L;
	size_t                  np = st->n_lease_pieces / 3;
	size_t                  nr = st->n_lease_records / PS_LEASE_REC_WORDS;

	if (bad != NULL) {
		FB_LOG(FB_LOG_ERR, "state", "refused, nothing loaded: %s: %s",
		    s->state_path, bad);
		return FB_EPROTO;
	}
	if (st->lease_dataset_size == 0) {
		return FB_OK;
	}
	if ((L = ps__sched_leases_get(s)) == NULL ||
	    ps__sched_leases_reserve(L, np + 1, nr) != FB_OK) {
		return FB_ENOMEM;
	}
	L->size       = st->lease_dataset_size;
	L->epochs     = st->lease_epochs;
	L->seed       = st->lease_seed;
	L->next_id    = st->lease_next_id;
	L->next_epoch = st->lease_next_epoch;
	L->consumed   = st->lease_consumed;
	L->returned   = st->lease_returned;
	L->doubled    = st->lease_doubled;
	memcpy(L->pc, st->lease_pieces, np * 3 * sizeof(uint64_t));
	L->n_pc = np;
	memcpy(L->prev, st->lease_prev, st->n_lease_prev * sizeof(uint64_t));
	for (size_t i = 0; i < nr; i++) {
		const uint64_t *w = &st->lease_records[i * PS_LEASE_REC_WORDS];
		L->ls[i]          = (struct ps_lease) {
			         .id         = w[0],
			         .rank       = (uint32_t) w[1],
			         .epoch      = (uint32_t) w[2],
			         .start      = w[3],
			         .count      = w[4],
			         .consumed   = w[5],
			         .marked     = w[6],
			         .state      = (uint32_t) w[7],
			         .gone_epoch = w[8],
		};
	}
	L->n_ls = nr;
	FB_LOG(FB_LOG_NOTICE, "leases",
	    "carrying on: %" PRIu64 " positions x %u epochs, %" PRIu64
	    " consumed, %zu lease records, %zu free pieces",
	    L->size, L->epochs, L->consumed, L->n_ls, L->n_pc);
	return FB_OK;
}

void
ps__sched_leases_track_holders(struct ps_scheduler *s)
{
	struct ps_sched_leases *L   = s->leases;
	uint64_t                now = fb_clock_ms();
	if (L == NULL) {
		return;
	}
	// A holder that dies while the scheduler is down would never be
	// declared dead (members are tracked from their next heartbeat),
	// and its lease would stay held for ever: the job would never end.
	// Holders are lease users, which heartbeat (the trainer's default),
	// so their silence is timed from the restart.
	for (size_t i = 0; i < L->n_ls; i++) {
		uint32_t r = L->ls[i].rank;
		if (L->ls[i].state == PS_LEASE_HELD &&
		    r < (uint32_t) s->opts.trainers && !s->trainer_gone[r] &&
		    s->hb_trainer[r] == 0) {
			s->hb_trainer[r] = now;
		}
	}
}
