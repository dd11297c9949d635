// scheduler_obs.c — what an operator sees of the scheduler: the metrics
// collector (members, the map epoch, the measured links, parked
// GetPlacements, the trainers' suspicion and quarantine), its readiness and
// /debug/state's JSON. Its requests are counted by rpc.c like every role's.
//
// DESIGN. All of it lives under s->mu and changes rarely, so nothing here
// is a hot-path counter: the collector and the state writer take mu once
// per scrape and read the fields directly.
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "scheduler_impl.h"
#include "scheduler_leases.h"
#include "scheduler_quarantine.h"

// count_set counts the non-zero bytes of flags[0..n).
static int
count_set(const uint8_t *flags, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		k += flags[i] != 0;
	}
	return k;
}

// write_links writes one family of the T x M link matrix m (lat or bw):
// the links of each trainer that reported them, once the job runs with
// probing on. mu held.
static void
write_links(struct ps_scheduler *s, struct obs_writer *w, const char *name,
    const char *help, const double *m)
{
	int  M = s->n_servers_seen;
	char lab[64];
	obs_write_family(w, name, help, OBS_GAUGE);
	if (s->placement == NULL || !ps__sched_probing(s)) {
		return;
	}
	for (int t = 0; t < s->opts.trainers; t++) {
		for (int k = 0; s->links_seen[t] && k < M; k++) {
			snprintf(lab, sizeof(lab),
			    "trainer=\"%d\",server=\"%d\"", t, k);
			obs_write_sample(w, name, lab,
			    m[(size_t) t * (size_t) M + (size_t) k]);
		}
	}
}

// write_heartbeats writes the age of each tracked member's last heartbeat
// (members that never heartbeated, left or were declared dead have no
// series). mu held.
static void
write_heartbeats(struct ps_scheduler *s, struct obs_writer *w)
{
	const char *name = "ferry_member_heartbeat_age_seconds";
	uint64_t    now  = fb_clock_ms();
	char        lab[64];
	obs_write_family(w, name,
	    "Seconds since each tracked member's last heartbeat (or other "
	    "request); past --dead-after-ms it is declared dead.",
	    OBS_GAUGE);
	for (int r = 0; r < 2; r++) {
		int             n = r ? s->n_servers_seen : s->opts.trainers;
		const uint64_t *last = r ? s->hb_server : s->hb_trainer;
		for (int i = 0; i < n; i++) {
			if (last[i] == 0) {
				continue;
			}
			snprintf(lab, sizeof(lab), "role=\"%s\",id=\"%d\"",
			    r ? "server" : "trainer", i);
			obs_write_sample(w, name, lab,
			    now > last[i] ? (double) (now - last[i]) / 1e3
			                  : 0.0);
		}
	}
}

// write_elastic writes the trainer membership bounds (--trainers
// MIN:MAX) and the membership changes since the scheduler started. mu
// held.
static void
write_elastic(struct ps_scheduler *s, struct obs_writer *w)
{
	static const struct {
		const char *name, *help;
		size_t      off;
	} counters[] = {
		{ "ferry_scheduler_joins_total",
		    "Trainers that joined the job (a first registration, or "
		    "a rank that left or died registering again).",
		    offsetof(struct ps_scheduler, n_joins) },
		{ "ferry_scheduler_leaves_total",
		    "Trainers that left the job (Leave).",
		    offsetof(struct ps_scheduler, n_leaves) },
		{ "ferry_scheduler_deaths_total",
		    "Trainers declared dead (no heartbeat, or their heartbeat "
		    "connection closed).",
		    offsetof(struct ps_scheduler, n_deaths) },
		{ "ferry_scheduler_flap_refusals_total",
		    "Trainer registrations refused because their rank slot "
		    "flaps (its members died repeatedly).",
		    offsetof(struct ps_scheduler, n_flap_refused) },
	};
	obs_write_family(w, "ferry_scheduler_members_min",
	    "Trainers the job starts with (--trainers MIN).", OBS_GAUGE);
	obs_write_sample(w, "ferry_scheduler_members_min", NULL,
	    s->opts.min_trainers);
	obs_write_family(w, "ferry_scheduler_members_max",
	    "Trainers the job takes at most (--trainers MAX: the rank "
	    "slots).",
	    OBS_GAUGE);
	obs_write_sample(w, "ferry_scheduler_members_max", NULL,
	    s->opts.trainers);
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
		const uint64_t *v = (const uint64_t *) ((const char *) s +
		    counters[i].off);
		obs_write_family(w, counters[i].name, counters[i].help,
		    OBS_COUNTER);
		obs_write_sample(w, counters[i].name, NULL, (double) *v);
	}
}

static void
collect(void *arg, struct obs_writer *w)
{
	struct ps_scheduler *s = arg;
	int                  M, parked = 0;
	char                 lab[96];

	pthread_mutex_lock(&s->mu);
	M = s->n_servers_seen;
	for (struct ps_call *c = s->parked; c != NULL; c = c->next) {
		parked++;
	}
	obs_write_family(w, "ferry_scheduler_job_running",
	    "1 once the first placement map is published, else 0.", OBS_GAUGE);
	obs_write_sample(w, "ferry_scheduler_job_running", NULL,
	    s->placement != NULL);
	obs_write_family(w, "ferry_scheduler_map_epoch",
	    "Epoch of the placement map in force (0: none yet).", OBS_GAUGE);
	obs_write_sample(w, "ferry_scheduler_map_epoch", NULL,
	    (double) s->epoch);
	obs_write_family(w, "ferry_scheduler_members",
	    "Members of the job by role and state (live: registered and "
	    "not left).",
	    OBS_GAUGE);
	snprintf(lab, sizeof(lab), "role=\"server\",state=\"live\"");
	obs_write_sample(w, "ferry_scheduler_members", lab,
	    M - count_set(s->gone, M));
	obs_write_sample(w, "ferry_scheduler_members",
	    "role=\"server\",state=\"gone\"", count_set(s->gone, M));
	int live = ps__sched_live_trainers(s);
	obs_write_sample(w, "ferry_scheduler_members",
	    "role=\"trainer\",state=\"live\"", live);
	obs_write_sample(w, "ferry_scheduler_members",
	    "role=\"trainer\",state=\"gone\"", s->n_trainers_seen - live);
	write_elastic(s, w);
	obs_write_family(w, "ferry_scheduler_members_expected",
	    "Members the job waits for before it starts, by role.", OBS_GAUGE);
	obs_write_sample(w, "ferry_scheduler_members_expected",
	    "role=\"server\"", s->opts.servers);
	obs_write_sample(w, "ferry_scheduler_members_expected",
	    "role=\"trainer\"", s->opts.min_trainers);
	obs_write_family(w, "ferry_scheduler_parked_calls",
	    "GetPlacement calls parked until their map exists.", OBS_GAUGE);
	obs_write_sample(w, "ferry_scheduler_parked_calls", NULL, parked);
	write_heartbeats(s, w);
	write_links(s, w, "ferry_scheduler_link_rtt_seconds",
	    "Round-trip time of each trainer-server link as the trainer "
	    "measured it (a server that joined later: the median of the "
	    "trainer's links until re-probed).",
	    s->lat);
	write_links(s, w, "ferry_scheduler_link_bandwidth_bytes_per_second",
	    "Bandwidth of each trainer-server link as measured, bytes per "
	    "second.",
	    s->bw);
	ps__sched_leases_metrics(s, w);
	ps__sched_quar_metrics(s, w);
	pthread_mutex_unlock(&s->mu);
}

int
ps__sched_metrics_open(struct ps_scheduler *s)
{
	int rv;
	if ((rv = obs_registry_alloc(&s->reg)) != FB_OK) {
		return rv;
	}
	return obs_collector_add(s->reg, collect, s);
}

struct obs_registry *
ps_scheduler_metrics(struct ps_scheduler *s)
{
	return s->reg;
}

int
ps_scheduler_ready(struct ps_scheduler *s, char *why, size_t n)
{
	int ready;
	pthread_mutex_lock(&s->mu);
	ready = s->placement != NULL;
	if (s->start_error[0] != '\0') {
		snprintf(why, n, "the job cannot start: %s", s->start_error);
		ready = 0;
	} else if (!ready) {
		snprintf(why, n,
		    "waiting for members: %d/%d servers, %d/%d trainers",
		    s->n_servers_seen, s->opts.servers, s->n_trainers_seen,
		    s->opts.min_trainers);
	}
	pthread_mutex_unlock(&s->mu);
	return ready;
}

void
ps_scheduler_state_json(struct ps_scheduler *s, struct obs_writer *w)
{
	const char *sep = "";
	pthread_mutex_lock(&s->mu);
	obs_writer_printf(w, "{\"role\":\"scheduler\",\"url\":");
	obs_write_json_string(w, ps__rpc_url(s->rpc));
	obs_writer_printf(w,
	    ",\"running\":%s,\"map_epoch\":%llu,\"start_error\":",
	    s->placement != NULL ? "true" : "false",
	    (unsigned long long) s->epoch);
	obs_write_json_string(w, s->start_error);
	obs_writer_printf(w, ",\"job\":");
	if (s->job != NULL) {
		obs_writer_printf(w,
		    "{\"mode\":\"%s\",\"lr\":%.17g,\"tensors\":%zu,"
		    "\"shards\":%zu,\"codec_push\":",
		    s->job->mode == PSWIRE__MODE__MODE_SSP         ? "ssp"
		        : s->job->mode == PSWIRE__MODE__MODE_ASYNC ? "async"
		                                                   : "sync",
		    s->job->lr, s->job->n_tensors, s->n_assign);
		obs_write_json_string(w, s->job->codec_push);
		obs_writer_printf(w, ",\"codec_pull\":");
		obs_write_json_string(w, s->job->codec_pull);
		obs_writer_printf(w, "}");
	} else {
		obs_writer_printf(w, "null");
	}
	obs_writer_printf(w, ",\"servers\":[");
	for (int m = 0; m < s->n_servers_seen; m++) {
		size_t held = 0;
		for (size_t i = 0; i < s->n_assign; i++) {
			held += s->assign[i] == (uint32_t) m;
		}
		obs_writer_printf(w, "%s{\"id\":%d,\"url\":", sep, m);
		obs_write_json_string(w,
		    s->server_urls[m] ? s->server_urls[m] : "");
		obs_writer_printf(w, ",\"gone\":%s,\"shards\":%zu}",
		    s->gone[m] ? "true" : "false", held);
		sep = ",";
	}
	obs_writer_printf(w,
	    "],\"members\":{\"min\":%d,\"max\":%d,\"live\":%d},"
	    "\"trainers\":[",
	    s->opts.min_trainers, s->opts.trainers,
	    ps__sched_live_trainers(s));
	sep = "";
	for (int t = 0; t < s->opts.trainers; t++) {
		obs_writer_printf(w,
		    "%s{\"rank\":%d,\"registered\":%s,\"gone\":%s,"
		    "\"live\":%s}",
		    sep, t, s->trainer_seen[t] ? "true" : "false",
		    s->trainer_gone[t] ? "true" : "false",
		    ps__sched_is_live(s, (uint32_t) t) ? "true" : "false");
		sep = ",";
	}
	obs_writer_printf(w, "]");
	ps__sched_quar_json(s, w);
	obs_writer_printf(w, ",\"parked_get_placement\":[");
	sep = "";
	for (struct ps_call *c = s->parked; c != NULL; c = c->next) {
		obs_writer_printf(w, "%s{\"min_epoch\":%llu}", sep,
		    (unsigned long long) c->park_version);
		sep = ",";
	}
	obs_writer_printf(w, "]");
	ps__sched_leases_json(s, w);
	obs_writer_printf(w, "}");
	pthread_mutex_unlock(&s->mu);
}
