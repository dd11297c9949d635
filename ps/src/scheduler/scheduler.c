// scheduler.c — the scheduler role: open and close, request dispatch and
// the Stats text. The scheduler owns membership, the job's tensor table,
// the placement map and the start barrier; scheduler_impl.h lists the
// files that hold each concern and the lock rule they share.
//
// DESIGN. Placement: when probing is on (probe-bytes > 0), every trainer
// first fetches the membership map (epoch 0: server URLs only), measures
// RTT and bandwidth to each server, and reports them (ReportLinks). Once
// every member and every report is in, the scheduler builds L[t][m] and
// B[t][m], places the shards (uniform round-robin, or the latency-aware
// solver of sharding/ that minimises the slowest trainer's predicted step
// time under the servers' memory capacity), logs the matrices, the
// assignment, F, LB and F/LB, and publishes epoch 1.
#include <pthread.h>
#include <stdio.h>

#include "authstate.h"
#include "scheduler_impl.h"
#include "scheduler_leases.h"
#include "scheduler_quarantine.h"

// on_stats serves Stats with the text of ps_scheduler_stats.
static void
on_stats(struct ps_scheduler *s, struct ps_call *c)
{
	char text[8192];
	ps_scheduler_stats(s, text, sizeof(text));
	ps__call_reply_stats(c, text);
}

// dispatch routes a request to its handler (an rpc callback: it must not
// block).
static void
dispatch(void *arg, struct ps_call *c)
{
	struct ps_scheduler *s = arg;
	switch (c->frame.method) {
	case PSWIRE__METHOD__REGISTER:
		ps__sched_on_register(s, c);
		break;
	case PSWIRE__METHOD__GET_PLACEMENT:
		ps__sched_on_get_placement(s, c);
		break;
	case PSWIRE__METHOD__HEARTBEAT:
		ps__sched_quar_heartbeat(s, c); // a server's outlier counts
		ps__sched_on_heartbeat(s, c);
		break;
	case PSWIRE__METHOD__LEAVE:
		ps__sched_on_leave(s, c);
		break;
	case PSWIRE__METHOD__REPORT_LINKS:
		ps__sched_on_report_links(s, c);
		break;
	case PSWIRE__METHOD__STATS:
		on_stats(s, c);
		break;
	case PSWIRE__METHOD__SNAPSHOT:
		ps__sched_on_snapshot(s, c);
		break;
	case PSWIRE__METHOD__LEASE:
		ps__sched_on_lease(s, c);
		break;
	case PSWIRE__METHOD__VERIFIED:
		ps__sched_on_verified(s, c);
		break;
	default:
		ps__call_reply_err(c, PSWIRE__STATUS__UNIMPLEMENTED,
		    "method %u (%s) is not served by the scheduler",
		    c->frame.method, psw_method_name(c->frame.method));
	}
}

// sched_max_msg is the scheduler's receive cap: its requests are
// header-only, so a frame and the largest header, or less if configured.
static size_t
sched_max_msg(const struct ps_scheduler_opts *o)
{
	size_t cap = PSW_FRAME_HDR + PSW_MAX_HEADER;
	return o->max_msg < cap ? o->max_msg : cap;
}

// sched_contexts is how many REP contexts the scheduler serves with:
// --contexts, raised to what its members can have in flight at once when
// that is more. A trainer holds at most two calls (its client's, parked
// or not, and a heartbeat), a server three (its map watch, parked; a
// heartbeat; a move's map fetch); 64 more for operators, probes and
// Stats. With fewer, 1,000 members fetching a new map at once, or
// parking a watch each, overflow the contexts: the connections from one
// host then share three quarters of them (rpc.h LIMITS), so on a shared
// host the rest are refused RESOURCE_EXHAUSTED, heartbeats included, and
// members are declared dead for the scheduler's own shortage.
static int
sched_contexts(const struct ps_scheduler_opts *o)
{
	long need = 2L * o->trainers + 3L * o->servers + 64;
	need      = need > 65536 ? 65536 : need;
	return o->contexts >= need ? o->contexts : (int) need;
}

int
ps_scheduler_open(const struct ps_scheduler_opts *o, struct ps_scheduler **out)
{
	struct ps_scheduler *s;
	int                  rv;

	if (o == NULL || o->url == NULL || o->trainers < 1 ||
	    o->trainers > PS_MAX_MEMBERS || o->servers < 1 ||
	    o->servers > PS_MAX_MEMBERS || o->shard_bytes < 4 ||
	    o->shard_bytes % 4 != 0 || o->contexts < 1 ||
	    (o->placement != PS_PLACEMENT_UNIFORM &&
	        o->placement != PS_PLACEMENT_LATENCY) ||
	    (o->placement == PS_PLACEMENT_LATENCY && o->probe_bytes == 0) ||
	    o->probe_count < 1 || o->probe_count > 1000 ||
	    o->replicas > PS_MAX_MEMBERS || o->min_trainers < 0 ||
	    o->min_trainers > o->trainers ||
	    (o->placement == PS_PLACEMENT_LATENCY && o->min_trainers != 0 &&
	        o->min_trainers < o->trainers)) {
		return FB_EINVAL;
	}
	if ((s = fb_zalloc(sizeof(*s))) == NULL) {
		return FB_ENOMEM;
	}
	s->opts = *o;
	if (o->replicas > (uint32_t) o->servers) {
		FB_LOG(FB_LOG_WARN, "scheduler",
		    "--replicas %u but %d servers: keeping %d copies of each "
		    "shard",
		    o->replicas, o->servers, o->servers);
	}
	s->n_backups = o->replicas <= 1           ? 0
	    : o->replicas > (uint32_t) o->servers ? (uint32_t) o->servers - 1
	                                          : o->replicas - 1;
	pthread_mutex_init(&s->mu, NULL);
	s->trainer_seen = fb_zalloc((size_t) o->trainers);
	s->server_urls  = fb_zalloc(sizeof(char *) * (size_t) o->servers);
	s->capacity     = fb_zalloc(sizeof(uint64_t) * (size_t) o->servers);
	s->lat = fb_zalloc(sizeof(double) * (size_t) o->servers * o->trainers);
	s->bw  = fb_zalloc(sizeof(double) * (size_t) o->servers * o->trainers);
	s->links_seen   = fb_zalloc((size_t) o->trainers);
	s->gone         = fb_zalloc((size_t) o->servers);
	s->trainer_gone = fb_zalloc((size_t) o->trainers);
	s->hb_trainer   = fb_zalloc(sizeof(uint64_t) * (size_t) o->trainers);
	s->hb_server    = fb_zalloc(sizeof(uint64_t) * (size_t) o->servers);
	s->server_dead  = fb_zalloc((size_t) o->servers);
	if (s->trainer_seen == NULL || s->server_urls == NULL ||
	    s->capacity == NULL || s->lat == NULL || s->bw == NULL ||
	    s->links_seen == NULL || s->gone == NULL ||
	    s->trainer_gone == NULL || s->hb_trainer == NULL ||
	    s->hb_server == NULL || s->server_dead == NULL) {
		ps_scheduler_close(s);
		return FB_ENOMEM;
	}
	if ((rv = ps__sched_elastic_open(s)) != FB_OK ||
	    (rv = ps__sched_quar_open(s)) != FB_OK ||
	    (rv = ps__open_auth(o->secret_file, PSW_ROLE_SCHEDULER, 0,
	         o->auth_window_ms, &s->auth)) != FB_OK ||
	    (rv = ps__open_tls(o->tls_cert, o->tls_key, o->tls_ca, &s->tls)) !=
	        FB_OK ||
	    (rv = ps__sched_state_open(s)) != FB_OK ||
	    (rv = ps__auth_state_open(s->auth, o->state_dir,
	         &s->auth_state)) != FB_OK ||
	    (rv = ps__sched_metrics_open(s)) != FB_OK ||
	    (rv = ps__rpc_open(s->tls, o->url, sched_contexts(o),
	         sched_max_msg(o), s->auth, dispatch, s, s->reg, &s->rpc)) !=
	        FB_OK) {
		ps_scheduler_close(s);
		return rv;
	}
	if (sched_contexts(o) > o->contexts) {
		FB_LOG(FB_LOG_NOTICE, "scheduler",
		    "serving %d contexts, not --contexts %d: %d trainers and "
		    "%d servers may have that many calls in flight",
		    sched_contexts(o), o->contexts, o->trainers, o->servers);
	}
	ps__rpc_set_limits(s->rpc, 2 * sched_max_msg(o), o->max_inflight,
	    ps__sched_pipe_gone);
	ps__sched_quar_arm(s); // ranks a state file quarantined
	if ((rv = ps__sched_live_start(s)) != FB_OK) {
		ps_scheduler_close(s);
		return rv;
	}
	ps__rpc_on_pipe_closed(s->rpc, ps__sched_live_pipe_closed, s);
	FB_LOG(FB_LOG_NOTICE, "scheduler",
	    "listening on %s; expecting %d servers, %d trainers (at most "
	    "%d); a member that heartbeats is declared dead after %u ms of "
	    "silence",
	    ps__rpc_url(s->rpc), o->servers, s->opts.min_trainers, o->trainers,
	    o->dead_after_ms);
	*out = s;
	return FB_OK;
}

const char *
ps_scheduler_url(const struct ps_scheduler *s)
{
	return ps__rpc_url(s->rpc);
}

void
ps_scheduler_close(struct ps_scheduler *s)
{
	if (s == NULL) {
		return;
	}
	ps__sched_live_stop(s);     // it answers parked calls: stop it first
	ps__sched_snapshot_stop(s); // it answers a Snapshot call
	ps__rpc_close(s->rpc);      // parked calls die with their contexts
	ps__auth_state_close(s->auth, s->auth_state);
	psw_auth_close(s->auth);
	psw_tls_close(s->tls);
	if (s->job != NULL) {
		pswire__job_config__free_unpacked(s->job, NULL);
	}
	if (s->placement != NULL) {
		pswire__placement__free_unpacked(s->placement, NULL);
	}
	fb_free(s->placement_buf);
	fb_free(s->map_reply);
	for (int i = 0; s->server_urls && i < s->n_servers_seen; i++) {
		fb_free(s->server_urls[i]);
	}
	fb_free(s->server_urls);
	fb_free(s->trainer_seen);
	fb_free(s->capacity);
	fb_free(s->lat);
	fb_free(s->bw);
	fb_free(s->links_seen);
	fb_free(s->gone);
	fb_free(s->trainer_gone);
	fb_free(s->hb_trainer);
	fb_free(s->hb_server);
	fb_free(s->server_dead);
	fb_free(s->hb_conn);
	fb_free(s->backups);
	fb_free(s->assign);
	fb_free(s->move_from);
	fb_free(s->move_epoch);
	fb_free(s->shard_size);
	ps__sched_elastic_close(s);
	ps__sched_quar_close(s);
	ps__sched_leases_free(s);
	obs_registry_free(s->reg);
	pthread_mutex_destroy(&s->mu);
	fb_free(s);
}

void
ps_scheduler_stats(struct ps_scheduler *s, char *buf, size_t n)
{
	size_t   off = 0;
	uint32_t M;
#define OUT(...)                                                              \
	do {                                                                  \
		if (off < n) {                                                \
			int k_ = snprintf(buf + off, n - off, __VA_ARGS__);   \
			off += k_ > 0 ? (size_t) k_ : 0;                      \
		}                                                             \
	} while (0)
	pthread_mutex_lock(&s->mu);
	M = (uint32_t) s->n_servers_seen; // under mu: Register writes it
	OUT("# Scheduler\r\nrole:scheduler\r\nurl:%s\r\n",
	    ps__rpc_url(s->rpc));
	OUT("trainers:%d/%d\r\nservers:%d/%d\r\nlink_reports:%d\r\n",
	    s->n_trainers_seen, s->opts.trainers, s->n_servers_seen,
	    s->opts.servers, s->n_links_seen);
	OUT("epoch:%llu\r\nplacement:%s\r\nstart_error:%s\r\n",
	    (unsigned long long) s->epoch,
	    s->opts.placement == PS_PLACEMENT_LATENCY ? "latency" : "uniform",
	    s->start_error);
	size_t parked = 0;
	for (const struct ps_call *c = s->parked; c != NULL; c = c->next) {
		parked++;
	}
	OUT("parked:%zu\r\n", parked);
	OUT("state_file:%s\r\nstate_saved:%llu\r\nstate_failed:%llu\r\n",
	    s->state_path, (unsigned long long) s->state_saved,
	    (unsigned long long) s->state_failed);
	if (off < n) { // before the shards' lines, which may fill buf
		off += ps__sched_quar_stats(s, buf + off, n - off);
	}
	OUT("# Placement\r\n");
	if (s->have_report) {
		OUT("predicted_step_s:%.6f\r\nlower_bound_s:%.6f\r\n"
		    "f_over_lb:%.4f\r\n",
		    s->report.f, s->report.lb, s->report.ratio);
	}
	for (int t = 0; s->have_report && t < s->opts.trainers; t++) {
		for (uint32_t m = 0; m < M; m++) {
			OUT("link_t%d_m%u:rtt_s=%.6f,bw_Bps=%.0f\r\n", t, m,
			    s->lat[(size_t) t * M + m],
			    s->bw[(size_t) t * M + m]);
		}
	}
	for (uint32_t m = 0; m < M && s->assign != NULL; m++) {
		uint64_t load = 0;
		size_t   cnt  = 0;
		for (size_t i = 0; i < s->n_assign; i++) {
			if (s->assign[i] == m) {
				load += s->shard_size[i];
				cnt++;
			}
		}
		OUT("server_%u:shards=%zu,bytes=%llu\r\n", m, cnt,
		    (unsigned long long) load);
	}
	for (size_t i = 0; i < s->n_assign; i++) {
		OUT("shard_%zu:server=%u,bytes=%llu\r\n", i, s->assign[i],
		    (unsigned long long) s->shard_size[i]);
	}
	pthread_mutex_unlock(&s->mu);
#undef OUT
	if (n > 0) {
		buf[n - 1] = '\0';
	}
}
