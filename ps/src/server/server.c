// server.c — the parameter-server role's front: ps_server_open and
// ps_server_close (threads, condition variables, the rpc), the dispatch
// of requests to their handlers (Audit's: audit.c), the Probe and Stats
// replies. The helpers the handlers share live in files of their own
// (errors.c, owner.c), so that no handler calls back into this file. The
// DESIGN of the role and the map of its files are in server_impl.h.
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "robust.h"
#include "server_impl.h"
#include "test_hooks.h"

static void
on_stats(struct ps_server *s, struct ps_call *c)
{
	char text[8192];
	ps_server_stats(s, text, sizeof(text));
	ps__call_reply_stats(c, text);
}

// Probe answers before the job starts (trainers measure links to decide
// the placement): the request payload is discarded, the reply carries
// reply_bytes of zeros (at most PS_PROBE_MAX, small enough that a flood of
// probes cannot make the server allocate much), so either direction can
// be timed.
#define PS_PROBE_MAX (16u << 20)

static void
on_probe(struct ps_server *s, struct ps_call *c)
{
	Pswire__Header h     = PSWIRE__HEADER__INIT;
	uint64_t       bytes = 0;
	nng_msg       *m;
	uint8_t       *payload;
	size_t         hl;

	if (c->hdr->body_case == PSWIRE__HEADER__BODY_PROBE_REQ) {
		bytes = c->hdr->probe_req->reply_bytes;
	}
	if (bytes > PS_PROBE_MAX) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "probe reply of %llu bytes exceeds the %u cap",
		    (unsigned long long) bytes, PS_PROBE_MAX);
		return;
	}
	// Each peer's budget: its connection's calls in progress (probe
	// replies it has not read yet, above all) and this reply together
	// stay within PS_PROBE_MAX, so a peer that asks and never reads
	// holds one probe's worth of memory, not one per context.
	size_t held = ps__rpc_pipe_held(c);
	if (held + bytes > PS_PROBE_MAX) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "probe reply of %llu bytes: this connection already holds "
		    "%zu bytes in calls in progress (probe budget %u)",
		    (unsigned long long) bytes, held, PS_PROBE_MAX);
		return;
	}
	h.request_id = c->hdr->request_id;
	hl           = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&m, hl, bytes, &payload) != FB_OK) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory for a probe reply");
		return;
	}
	memset(payload, 0, bytes);
	if (psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h.base, hl,
	        bytes) != FB_OK) {
		nng_msg_free(m);
		ps__server_reply_err(s, c, PSWIRE__STATUS__INTERNAL,
		    "probe reply of %llu bytes could not be framed",
		    (unsigned long long) bytes);
		return;
	}
	ps__call_reply_msg(c, m);
}

static void
dispatch(void *arg, struct ps_call *c)
{
	struct ps_server *s      = arg;
	int               method = c->frame.method;

	if (method == PSWIRE__METHOD__STATS) {
		on_stats(s, c);
		return;
	}
	if (method == PSWIRE__METHOD__PROBE) {
		on_probe(s, c);
		return;
	}
	if (method == PSWIRE__METHOD__SNAPSHOT) {
		ps__on_snapshot(s, c);
		return;
	}
	if (method != PSWIRE__METHOD__PUSH && method != PSWIRE__METHOD__PULL &&
	    method != PSWIRE__METHOD__PUSH_PULL &&
	    method != PSWIRE__METHOD__TRANSFER &&
	    method != PSWIRE__METHOD__REPLICATE &&
	    method != PSWIRE__METHOD__ROWS &&
	    method != PSWIRE__METHOD__AUDIT) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNIMPLEMENTED,
		    "method %d (%s) is not served by a parameter server",
		    method, psw_method_name(method));
		return;
	}
	// ready goes 0 -> 1 once, after pl is installed (release order).
	if (!atomic_load(&s->ready)) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "server has no placement yet (job not started)");
		return;
	}
	if (method == PSWIRE__METHOD__PULL) {
		ps__on_pull(s, c);
	} else if (method == PSWIRE__METHOD__ROWS) {
		ps__on_rows(s, c);
	} else if (method == PSWIRE__METHOD__TRANSFER) {
		ps__on_transfer(s, c);
	} else if (method == PSWIRE__METHOD__REPLICATE) {
		ps__on_replicate(s, c);
	} else if (method == PSWIRE__METHOD__AUDIT) {
		ps__on_audit(s, c);
	} else {
		ps__on_push(s, c);
	}
}

int
ps_server_open(const struct ps_server_opts *o, struct ps_server **out)
{
	struct ps_server  *s;
	pthread_condattr_t ca;
	int                rv;
	const uint16_t     one = 1;

	if (*(const uint8_t *) &one != 1) {
		FB_LOG(FB_LOG_ERR, "server",
		    "big-endian hosts are unsupported");
		return FB_EUNSUPP;
	}
	if (o == NULL || o->url == NULL || o->scheduler_url == NULL ||
	    o->contexts < 1) {
		return FB_EINVAL;
	}
	if ((s = fb_zalloc(sizeof(*s))) == NULL) {
		return FB_ENOMEM;
	}
	s->opts       = *o;
	s->started_ms = fb_clock_ms();
	if (s->opts.park_max_ms == 0) {
		s->opts.park_max_ms = 300000; // PS_SERVER_OPTS_INIT's
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->boot_mu, NULL);
	pthread_cond_init(&s->decoded, NULL);
	// ps_server_leave waits on delivered with a deadline from
	// fb_clock_ms(), which is CLOCK_MONOTONIC.
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->delivered, &ca);
	pthread_condattr_destroy(&ca);
	if ((rv = ps__open_auth(o->secret_file, PSW_ROLE_SERVER,
	         PSW_ID_UNASSIGNED, o->auth_window_ms, &s->auth)) != FB_OK ||
	    (rv = ps__open_tls(o->tls_cert, o->tls_key, o->tls_ca, &s->tls)) !=
	        FB_OK ||
	    (rv = ps__server_metrics_open(s)) != FB_OK ||
	    (rv = ps__snap_open(s)) != FB_OK ||
	    (rv = ps__rpc_open(s->tls, o->url, o->contexts, o->max_msg,
	         s->auth, dispatch, s, s->reg, &s->rpc)) != FB_OK) {
		ps__snap_close(s);
		psw_auth_close(s->auth);
		psw_tls_close(s->tls);
		obs_registry_free(s->reg);
		pthread_cond_destroy(&s->delivered);
		pthread_cond_destroy(&s->decoded);
		pthread_mutex_destroy(&s->mu);
		fb_free(s);
		return rv;
	}
	ps__rpc_set_limits(s->rpc, 2 * o->max_msg + (1u << 20),
	    o->max_inflight, ps__pull_pipe_gone);
	snprintf(s->url, sizeof(s->url), "%s",
	    o->advertise_url ? o->advertise_url : ps__rpc_url(s->rpc));
	FB_LOG(FB_LOG_NOTICE, "server", "listening on %s (advertised %s)",
	    ps__rpc_url(s->rpc), s->url);
	atomic_store(&s->hb_index, -1);
	pthread_create(&s->boot_thread, NULL, ps__boot_main, s);
	pthread_create(&s->hb_thread, NULL, ps__heartbeat_main, s);
	pthread_create(&s->sweep_thread, NULL, ps__sweep_main, s);
	*out = s;
	return FB_OK;
}

const char *
ps_server_url(const struct ps_server *s)
{
	return ps__rpc_url(s->rpc);
}

void
ps_server_stats(struct ps_server *s, char *buf, size_t n)
{
	uint64_t version = 0;
	int      parked  = 0;
	pthread_mutex_lock(&s->mu);
	for (struct ps_call *c = s->parked; c != NULL; c = c->next) {
		parked++;
	}
	for (struct ps_call *c = s->rows_parked; c != NULL; c = c->next) {
		parked++;
	}
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0) {
			version = s->shards[i].version;
			break;
		}
	}
	snprintf(buf, n,
	    "# Server\r\nrole:server\r\nindex:%u\r\nurl:%s\r\nuptime_ms:%llu\r\n"
	    "ready:%d\r\n# Store\r\nshards:%u\r\nbackups:%u\r\n"
	    "shards_seeding:%u\r\nversion:%llu\r\nmode:%s\r\n"
	    "used_memory:%zu\r\n# Net\r\npushes:%llu\r\npulls:%llu\r\n"
	    "errors:%llu\r\nbytes_in:%llu\r\nbytes_out:%llu\r\n"
	    "updates_applied:%llu\r\nupdates_refused:%llu\r\nparked:%d\r\n"
	    "park_checks:%llu\r\ncontexts:%d\r\nmap_epoch:%llu\r\n"
	    "stage_chunks:%llu\r\nstage_held:%llu\r\ndelta_log:%u\r\n",
	    s->index, s->url,
	    (unsigned long long) (fb_clock_ms() - s->started_ms),
	    atomic_load(&s->ready), s->n_shards, s->n_backup_shards,
	    ps__seed_count(s), (unsigned long long) version,
	    s->job.mode ? "async" : "sync", fb_used_memory(),
	    (unsigned long long) atomic_load(&s->n_push),
	    (unsigned long long) atomic_load(&s->n_pull),
	    (unsigned long long) atomic_load(&s->n_err),
	    (unsigned long long) atomic_load(&s->bytes_in),
	    (unsigned long long) atomic_load(&s->bytes_out),
	    (unsigned long long) atomic_load(&s->n_applied),
	    (unsigned long long) atomic_load(&s->n_overflow), parked,
	    (unsigned long long) s->park_checks, ps__rpc_contexts(s->rpc),
	    (unsigned long long) (s->pl != NULL ? s->pl->epoch : 0),
	    (unsigned long long) s->stage_chunks,
	    (unsigned long long) (s->stage_chunks - s->stage_n_free),
	    s->log_k);
	size_t used = n > 0 ? strlen(buf) : 0;
	if (used + 1 < n) {
		ps__snap_stats(s, buf + used, n - used);
	}
	used = n > 0 ? strlen(buf) : 0;
	if (used + 1 < n && s->n_tglobal > 0) {
		ps__rows_stats(s, buf + used, n - used);
	}
	used = n > 0 ? strlen(buf) : 0;
	if (used + 1 < n) {
		ps__audit_stats(s, buf + used, n - used);
	}
	used = n > 0 ? strlen(buf) : 0;
	if (used + 1 < n) {
		ps__robust_stats(s, buf + used, n - used);
	}
	pthread_mutex_unlock(&s->mu);
}

void
ps_server_test_stage_hook(struct ps_server *s,
    void (*fn)(void *arg, uint32_t rank), void *arg)
{
	pthread_mutex_lock(&s->mu);
	s->stage_hook     = fn;
	s->stage_hook_arg = arg;
	pthread_mutex_unlock(&s->mu);
}

void
ps_server_close(struct ps_server *s)
{
	if (s == NULL) {
		return;
	}
	atomic_store(&s->closing, 1);
	// Let the boot thread's call end: the scheduler answers it within
	// PS_BOOT_PARK_MS (boot.c's DESIGN). Stopped only when it has not.
	for (int t = 0; t < PS_BOOT_PARK_MS + PSW_ANSWER_MARGIN_MS &&
	     !atomic_load(&s->boot_done);
	     t += 5) {
		fb_sleep_us(5000);
	}
	pthread_mutex_lock(&s->boot_mu);
	if (s->boot_aio != NULL) {
		nng_aio_stop(s->boot_aio); // its call ends ECANCELED
	}
	pthread_mutex_unlock(&s->boot_mu);
	pthread_join(s->boot_thread, NULL);
	pthread_join(s->hb_thread, NULL); // its call ends on its own
	pthread_join(s->sweep_thread, NULL);
	ps__repl_close(s);
	ps__snap_close(s); // answers a Snapshot call still waiting
	ps__rpc_close(s->rpc);
	psw_auth_close(s->auth);
	psw_tls_close(s->tls);
	for (size_t i = 0; s->shards != NULL && i < s->n_global; i++) {
		ps__shard_release(s, &s->shards[i]);
	}
	ps__stage_pool_free(s);
	ps__robust_free(s);
	ps__rows_release(s);
	ps__audit_close(s);
	fb_free(s->scratch);
	fb_free(s->gone);
	fb_free(s->added);
	fb_free(s->join_at);
	fb_free(s->marks);
	fb_free(s->hb_marks);
	fb_free(s->hb_mark_ptrs);
	fb_free(s->last_rank);
	obs_registry_free(s->reg);
	fb_free(s->shards);
	fb_free(s->local);
	fb_free(s->owners);
	fb_free(s->sum);
	if (s->pl != NULL) {
		pswire__placement__free_unpacked(s->pl, NULL);
	}
	pthread_cond_destroy(&s->delivered);
	pthread_cond_destroy(&s->decoded);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->boot_mu);
	fb_free(s);
}
