// scheduler_elastic.c — elastic membership (--trainers MIN:MAX): the live
// members, the lowest free rank an any_rank Register gets, and flapping,
// which slows down the registrations of a rank slot whose members keep
// dying.
//
// DESIGN. MAX is the rank slots (opts.trainers: every per-rank table is
// that long) and MIN (opts.min_trainers) the members the job starts with.
// A live member is a rank registered and not gone; when the job starts,
// the ranks nobody registered are marked gone, so the first map lists
// them in gone_trainers and a later Register of one is a join.
//
// FLAPPING is counted per rank slot: when the members of a slot were
// declared dead (heartbeat silence or a closed connection; a graceful
// Leave does not count) flap_deaths times within flap_window_ms, the
// slot's next registration is refused with UNAVAILABLE until flap_base_ms
// after the last death, the delay doubling with each further death, up to
// flap_max_ms. An any_rank Register that lands on a flapping slot (the
// lowest free one) is refused too rather than moved to another slot: a
// crash-looping joiner gets the slot it just died in, and would otherwise
// dodge the delay by taking a new rank each time; other joiners wait for
// that slot at most flap_max_ms. Counting per host instead would refuse
// every trainer of a host (all of a local job) for one flapping process.
// Rounds never wait for a refused joiner: it is no member until it
// registers. The slots are remembered in a table of PS_FLAP_HOSTS entries
// (the one whose last death is the oldest is forgotten first).
#include <stdio.h>
#include <string.h>

#include "scheduler_impl.h"
#include "scheduler_quarantine.h"

int
ps__sched_elastic_open(struct ps_scheduler *s)
{
	struct ps_scheduler_opts *o = &s->opts;
	if (o->min_trainers == 0) {
		o->min_trainers = o->trainers;
	}
	if (o->min_trainers < 1 || o->min_trainers > o->trainers) {
		return FB_EINVAL;
	}
	o->flap_deaths    = o->flap_deaths ? o->flap_deaths : 3;
	o->flap_deaths    = o->flap_deaths > PS_FLAP_DEATHS ? PS_FLAP_DEATHS
	                                                    : o->flap_deaths;
	o->flap_window_ms = o->flap_window_ms ? o->flap_window_ms : 60000;
	o->flap_base_ms   = o->flap_base_ms ? o->flap_base_ms : 1000;
	o->flap_max_ms    = o->flap_max_ms ? o->flap_max_ms : 10000;
	s->trainer_host   = fb_zalloc(sizeof(uint64_t) * (size_t) o->trainers);
	s->join_rid       = fb_zalloc(sizeof(uint64_t) * (size_t) o->trainers);
	s->flap = fb_zalloc(sizeof(struct ps_sched_flap) * PS_FLAP_HOSTS);
	if (s->trainer_host == NULL || s->join_rid == NULL ||
	    s->flap == NULL) {
		return FB_ENOMEM;
	}
	return FB_OK;
}

void
ps__sched_elastic_close(struct ps_scheduler *s)
{
	fb_free(s->trainer_host);
	fb_free(s->join_rid);
	fb_free(s->flap);
}

int
ps__sched_live_trainers(const struct ps_scheduler *s)
{
	int n = 0;
	for (uint32_t r = 0; r < (uint32_t) s->opts.trainers; r++) {
		n += ps__sched_is_live(s, r);
	}
	return n;
}

int
ps__sched_free_rank(const struct ps_scheduler *s)
{
	for (uint32_t r = 0; r < (uint32_t) s->opts.trainers; r++) {
		if (!ps__sched_is_live(s, r) && !ps__sched_quarantined(s, r)) {
			return (int) r;
		}
	}
	return -1;
}

// flap_key names what deaths are counted under: the rank slot (never 0,
// which marks a free table entry).
static uint64_t
flap_key(uint32_t r)
{
	return (uint64_t) r + 1;
}

// last_death is the time of f's newest death (0: none).
static uint64_t
last_death(const struct ps_sched_flap *f)
{
	return f->n == 0 ? 0 : f->died[(f->n - 1) % PS_FLAP_DEATHS];
}

// flap_find returns key's slot, or NULL; with make, a new slot for key:
// a free one, else the one whose newest death is the oldest. mu held.
static struct ps_sched_flap *
flap_find(struct ps_scheduler *s, uint64_t key, int make)
{
	struct ps_sched_flap *pick = NULL;
	for (size_t i = 0; i < PS_FLAP_HOSTS; i++) {
		if (s->flap[i].key == key) {
			return &s->flap[i];
		}
	}
	if (!make) {
		return NULL;
	}
	for (size_t i = 0; i < PS_FLAP_HOSTS; i++) {
		struct ps_sched_flap *f = &s->flap[i];
		if (pick == NULL || f->key == 0 ||
		    (pick->key != 0 && last_death(f) < last_death(pick))) {
			pick = f;
		}
		if (f->key == 0) {
			break;
		}
	}
	memset(pick, 0, sizeof(*pick));
	pick->key = key;
	return pick;
}

uint64_t
ps__sched_flap_wait(struct ps_scheduler *s, uint32_t r, uint64_t now)
{
	const struct ps_scheduler_opts *o      = &s->opts;
	struct ps_sched_flap           *f      = flap_find(s, flap_key(r), 0);
	uint32_t                        recent = 0;
	if (f == NULL || f->n == 0) {
		return 0;
	}
	uint32_t kept = f->n < PS_FLAP_DEATHS ? f->n : PS_FLAP_DEATHS;
	for (uint32_t i = 0; i < kept; i++) {
		uint64_t t = f->died[i];
		recent += t > now || now - t <= o->flap_window_ms;
	}
	if (recent < o->flap_deaths) {
		return 0;
	}
	// The flap_deaths-th death waits the base; each further one doubles
	// it, up to the cap.
	uint32_t more  = recent - o->flap_deaths;
	uint64_t delay = (uint64_t) o->flap_base_ms << (more > 20 ? 20 : more);
	delay          = delay > o->flap_max_ms ? o->flap_max_ms : delay;
	uint64_t until = last_death(f) + delay;
	return until > now ? until - now : 0;
}

void
ps__sched_trainer_dead(struct ps_scheduler *s, uint32_t r)
{
	struct ps_sched_flap *f        = flap_find(s, flap_key(r), 1);
	f->died[f->n % PS_FLAP_DEATHS] = fb_clock_ms();
	f->n++;
	s->n_deaths++;
	FB_LOG(FB_LOG_NOTICE, "members", "trainer %u dead (members %d)", r,
	    ps__sched_live_trainers(s));
}
