// server_obs.c — what an operator sees of a parameter server: its metrics
// registry (the series the hot paths update, and a collector that reads
// the shard table at scrape time), its readiness, and /debug/state's JSON.
//
// DESIGN. The hot paths update atomics only (rpc.c counts every request;
// push.c and store.c time sync rounds; moves.c and transfer.c count shard
// moves). Everything that lives under s->mu (versions, parked calls, the
// slot states, rounds completed by each rank) is read by the collector
// and the state writer with mu held, once per scrape: scrapes are rare
// and a scrape of a few thousand shards holds mu for microseconds.
#include <stdio.h>
#include <string.h>

#include "robust.h"
#include "server_impl.h"

static void collect(void *arg, struct obs_writer *w);

int
ps__server_metrics_open(struct ps_server *s)
{
	int rv;
	if ((rv = obs_registry_alloc(&s->reg)) != FB_OK) {
		return rv;
	}
	if ((rv = obs_metric_add(s->reg, OBS_HISTOGRAM,
	         "ferry_server_sync_round_wait_seconds",
	         "Time from a shard's first push of a sync round to the "
	         "last one, which completes the round.",
	         NULL, obs_latency_buckets, obs_latency_nbuckets, 0,
	         &s->round_wait)) != FB_OK ||
	    (rv = obs_metric_add(s->reg, OBS_COUNTER,
	         "ferry_server_shard_moves_total",
	         "Shards moved by a new placement map, by direction.",
	         "direction=\"out\"", NULL, 0, 0, &s->moves_out)) != FB_OK ||
	    (rv = obs_metric_add(s->reg, OBS_COUNTER,
	         "ferry_server_shard_moves_total", NULL, "direction=\"in\"",
	         NULL, 0, 0, &s->moves_in)) != FB_OK ||
	    (rv = obs_metric_add(s->reg, OBS_COUNTER,
	         "ferry_shards_reseeded_total",
	         "Lost shards re-seeded here from the trainers' copies "
	         "(their optimizer state restarted from zero).",
	         NULL, NULL, 0, 0, &s->reseeded)) != FB_OK ||
	    (rv = obs_metric_add(s->reg, OBS_COUNTER,
	         "ferry_seed_offers_ignored_total",
	         "Shards offered by trainers that were not being re-seeded "
	         "here (answered OK, ignored).",
	         NULL, NULL, 0, 0, &s->offers_ignored)) != FB_OK) {
		return rv;
	}
	// Spot checks (audit.c).
	if ((rv = obs_metric_add(s->reg, OBS_COUNTER,
	         "ferry_audits_kept_total",
	         "Sync pushes kept here for a verifier to recompute.", NULL,
	         NULL, 0, 0, &s->audits_kept)) != FB_OK ||
	    (rv = obs_metric_add(s->reg, OBS_COUNTER,
	         "ferry_audits_dropped_total",
	         "Pushes picked for a spot check but lost: the store of kept "
	         "pushes (--audit-keep) was full.",
	         NULL, NULL, 0, 0, &s->audits_dropped)) != FB_OK ||
	    (rv = obs_metric_add(s->reg, OBS_COUNTER,
	         "ferry_audits_served_total",
	         "Kept pushes handed to a verifier (Audit).", NULL, NULL, 0, 0,
	         &s->audits_served)) != FB_OK) {
		return rv;
	}
	return obs_collector_add(s->reg, collect, s);
}

struct obs_registry *
ps_server_metrics(struct ps_server *s)
{
	return s->reg;
}

// count_local counts the shard slots in state st (PS_SHARD_*), or held
// shards for st >= 0. mu held.
static uint32_t
count_local(const struct ps_server *s, int32_t st)
{
	uint32_t n = 0;
	for (size_t i = 0; i < s->n_global; i++) {
		n += st >= 0 ? s->local[i] >= 0 : s->local[i] == st;
	}
	return n;
}

// write_robust writes the robust aggregation's series (robust.c): sync
// rounds by rule, pushes flagged as outliers. mu held.
static void
write_robust(const struct ps_server *s, struct obs_writer *w)
{
	const char *rule;
	uint64_t    rounds, outliers, fallbacks;
	char        lab[32];
	ps__robust_totals(s, &rule, &rounds, &outliers, &fallbacks);
	obs_write_family(w, "ferry_aggregate_rounds_total",
	    "Sync rounds closed here, by the --aggregate rule that combined "
	    "their pushes.",
	    OBS_COUNTER);
	snprintf(lab, sizeof(lab), "rule=\"%s\"", rule);
	obs_write_sample(w, "ferry_aggregate_rounds_total", lab,
	    (double) rounds);
	obs_write_family(w, "ferry_push_outliers_total",
	    "Pushes (one shard's each) a robust aggregate marked as "
	    "outliers.",
	    OBS_COUNTER);
	obs_write_sample(w, "ferry_push_outliers_total", NULL,
	    (double) outliers);
	obs_write_family(w, "ferry_aggregate_fallbacks_total",
	    "trimmed:B rounds with at most 2B pushes, which took the "
	    "median.",
	    OBS_COUNTER);
	obs_write_sample(w, "ferry_aggregate_fallbacks_total", NULL,
	    (double) fallbacks);
	obs_write_family(w, "ferry_round_close_seconds_total",
	    "Time spent closing sync rounds: combining the pushes (--aggregate), "
	    "the update, publishing the version.",
	    OBS_COUNTER);
	obs_write_sample(w, "ferry_round_close_seconds_total", NULL,
	    (double) s->close_ns * 1e-9);
}

void
ps__robust_stats(const struct ps_server *s, char *buf, size_t n)
{
	const char *rule;
	uint64_t    rounds, outliers, fallbacks;
	ps__robust_totals(s, &rule, &rounds, &outliers, &fallbacks);
	snprintf(buf, n,
	    "# Aggregate\r\naggregate:%s\r\naggregate_rounds:%llu\r\n"
	    "push_outliers:%llu\r\naggregate_fallbacks:%llu\r\n"
	    "round_close_s:%.6f\r\n",
	    rule, (unsigned long long) rounds, (unsigned long long) outliers,
	    (unsigned long long) fallbacks, (double) s->close_ns * 1e-9);
}

// collect writes the numbers kept under mu (see DESIGN).
static void
collect(void *arg, struct obs_writer *w)
{
	struct ps_server *s = arg;
	char              lab[64];
	uint32_t          parked_pull = 0, parked_pp = 0;

	pthread_mutex_lock(&s->mu);
	for (struct ps_call *c = s->parked; c != NULL; c = c->next) {
		if (c->frame.method == PSWIRE__METHOD__PULL) {
			parked_pull++;
		} else {
			parked_pp++;
		}
	}
	obs_write_family(w, "ferry_server_parked_calls",
	    "Calls parked until the version they want exists, by method.",
	    OBS_GAUGE);
	obs_write_sample(w, "ferry_server_parked_calls", "method=\"Pull\"",
	    parked_pull);
	obs_write_sample(w, "ferry_server_parked_calls", "method=\"PushPull\"",
	    parked_pp);
	uint32_t parked_rows = 0;
	for (struct ps_call *c = s->rows_parked; c != NULL; c = c->next) {
		parked_rows++;
	}
	obs_write_sample(w, "ferry_server_parked_calls", "method=\"Rows\"",
	    parked_rows);
	obs_write_family(w, "ferry_server_map_epoch",
	    "Placement map epoch this server works with (0: none yet).",
	    OBS_GAUGE);
	obs_write_sample(w, "ferry_server_map_epoch", NULL,
	    s->pl != NULL ? (double) s->pl->epoch : 0);
	obs_write_family(w, "ferry_server_shards",
	    "Shards of the job on this server, by state.", OBS_GAUGE);
	obs_write_sample(w, "ferry_server_shards", "state=\"held\"",
	    count_local(s, 0));
	obs_write_sample(w, "ferry_server_shards", "state=\"arriving\"",
	    count_local(s, PS_SHARD_ARRIVING));
	obs_write_family(w, "ferry_server_shard_version",
	    "Version of each shard held here.", OBS_GAUGE);
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0) {
			snprintf(lab, sizeof(lab), "shard=\"%zu\"", i);
			obs_write_sample(w, "ferry_server_shard_version", lab,
			    (double) s->shards[i].version);
		}
	}
	obs_write_family(w, "ferry_server_sync_rounds_last_rank_total",
	    "Sync rounds completed by this rank's push: the rank the round "
	    "waited for last.",
	    OBS_COUNTER);
	for (uint32_t r = 0; s->last_rank != NULL && r < s->trainers; r++) {
		snprintf(lab, sizeof(lab), "rank=\"%u\"", r);
		obs_write_sample(w, "ferry_server_sync_rounds_last_rank_total",
		    lab, (double) s->last_rank[r]);
	}
	ps__rows_metrics(s, w); // ferry_table_* (rows_park.c)
	write_robust(s, w);
	pthread_mutex_unlock(&s->mu);
	obs_write_family(w, "ferry_server_updates_applied_total",
	    "Shard updates applied (sync rounds completed, async pushes).",
	    OBS_COUNTER);
	obs_write_sample(w, "ferry_server_updates_applied_total", NULL,
	    (double) atomic_load_explicit(&s->n_applied,
	        memory_order_relaxed));
	obs_write_family(w, "ferry_server_transfers_in_flight",
	    "Shards packed for another server and not yet delivered.",
	    OBS_GAUGE);
	obs_write_sample(w, "ferry_server_transfers_in_flight", NULL,
	    atomic_load(&s->transfers));
}

int
ps_server_ready(struct ps_server *s, char *why, size_t n)
{
	uint32_t arriving;
	if (atomic_load(&s->leaving)) {
		snprintf(why, n, "leaving the job");
		return 0;
	}
	if (!atomic_load(&s->ready)) {
		snprintf(why, n, "no placement yet (the job has not started)");
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	arriving = count_local(s, PS_SHARD_ARRIVING);
	pthread_mutex_unlock(&s->mu);
	if (arriving > 0) {
		snprintf(why, n, "%u shard(s) still arriving", arriving);
		return 0;
	}
	return 1;
}

// write_ranks writes the JSON array of the ranks whose slot of sh is
// (want_pushed ? pushed : not pushed, among the ranks its round waits
// for). mu held.
static void
write_ranks(const struct ps_server *s, const struct srv_shard *sh,
    int want_pushed, struct obs_writer *w)
{
	const char *sep = "";
	obs_writer_printf(w, "[");
	for (uint32_t r = 0; r < s->trainers; r++) {
		int pushed = sh->state[r] == PS_SLOT_PUSHED;
		if (!s->gone[r] &&
		    (pushed || ps__rank_waited(s, r, sh->version)) &&
		    pushed == want_pushed) {
			obs_writer_printf(w, "%s%u", sep, r);
			sep = ",";
		}
	}
	obs_writer_printf(w, "]");
}

// write_parked writes one parked call: its method, rank, the version it
// waits for and, in sync mode, the ranks whose pushes that version still
// needs (on its first shard that lacks it). mu held.
static void
write_parked(const struct ps_server *s, const struct ps_call *c, uint64_t now,
    struct obs_writer *w)
{
	size_t   n = ps__call_n_shards(c);
	uint64_t have;
	int      full;
	obs_writer_printf(w,
	    "{\"method\":\"%s\",\"rank\":%u,\"want_version\":%llu,"
	    "\"shards\":%zu,\"deadline_in_ms\":%lld,\"waits_for_ranks\":",
	    psw_method_name(c->frame.method), c->hdr->rank,
	    (unsigned long long) c->park_version, n,
	    c->deadline ? (long long) c->deadline - (long long) now : -1LL);
	for (size_t i = 0; i < n; i++) {
		uint32_t id = ps__call_shard(c, i, &have, &full);
		const struct srv_shard *sh = &s->shards[id];
		if (s->local[id] >= 0 && sh->version < c->park_version &&
		    s->job.mode == PSWIRE__MODE__MODE_SYNC) {
			write_ranks(s, sh, 0, w);
			obs_writer_printf(w, ",\"waits_on_shard\":%u}", id);
			return;
		}
	}
	obs_writer_printf(w, "[]}");
}

void
ps_server_state_json(struct ps_server *s, struct obs_writer *w)
{
	uint64_t    now = fb_clock_ms();
	const char *sep = "";

	pthread_mutex_lock(&s->mu);
	obs_writer_printf(w,
	    "{\"role\":\"server\",\"index\":%u,\"url\":", s->index);
	obs_write_json_string(w, s->url);
	obs_writer_printf(w,
	    ",\"ready\":%s,\"leaving\":%s,\"map_epoch\":%llu,"
	    "\"uptime_ms\":%llu",
	    atomic_load(&s->ready) ? "true" : "false",
	    atomic_load(&s->leaving) ? "true" : "false",
	    s->pl != NULL ? (unsigned long long) s->pl->epoch : 0ULL,
	    (unsigned long long) (now - s->started_ms));
	if (s->pl == NULL) {
		pthread_mutex_unlock(&s->mu);
		obs_writer_printf(w, ",\"job\":null}");
		return;
	}
	obs_writer_printf(w,
	    ",\"job\":{\"mode\":\"%s\",\"trainers\":%u,\"shards\":%zu,"
	    "\"gone_ranks\":[",
	    s->job.ssp                                    ? "ssp"
	        : s->job.mode == PSWIRE__MODE__MODE_ASYNC ? "async"
	                                                  : "sync",
	    s->trainers, s->n_global);
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (s->gone[r]) {
			obs_writer_printf(w, "%s%u", sep, r);
			sep = ",";
		}
	}
	obs_writer_printf(w, "]},\"shards\":[");
	sep = "";
	for (size_t i = 0; i < s->n_global; i++) {
		const struct srv_shard *sh = &s->shards[i];
		const char             *st = s->local[i] >= 0      ? "held"
		                : s->local[i] == PS_SHARD_ARRIVING ? "arriving"
		                : s->local[i] == PS_SHARD_LEAVING  ? "leaving"
		                                                   : NULL;
		if (st == NULL) {
			continue;
		}
		obs_writer_printf(w, "%s{\"id\":%zu,\"state\":\"%s\"", sep, i,
		    st);
		sep = ",";
		if (s->local[i] >= 0) {
			obs_writer_printf(w, ",\"version\":%llu",
			    (unsigned long long) sh->version);
		}
		if (s->local[i] >= 0 &&
		    s->job.mode == PSWIRE__MODE__MODE_SYNC) {
			obs_writer_printf(w, ",\"pushed\":");
			write_ranks(s, sh, 1, w);
			obs_writer_printf(w, ",\"waiting_for\":");
			write_ranks(s, sh, 0, w);
		}
		obs_writer_printf(w, "}");
	}
	obs_writer_printf(w, "],\"parked\":[");
	sep = "";
	for (struct ps_call *c = s->parked; c != NULL; c = c->next) {
		obs_writer_printf(w, "%s", sep);
		write_parked(s, c, now, w);
		sep = ",";
	}
	obs_writer_printf(w, "]}");
	pthread_mutex_unlock(&s->mu);
}
