// scheduler_members.c — who is in the job: Register (servers by URL,
// trainers by rank with the job's tensor table), Leave, ReportLinks, and
// the start barrier that publishes the first map once everyone is in.
// A server that registers again into its slot while the job runs (its URL,
// or --server-index) is a restarted process: without snapshots what it
// held is re-placed at once (slot_back); with them the job rolls back.
//
// DESIGN. A handler decides under s->mu and replies with an error only
// after releasing it: a refusal is recorded (struct ps_sched_refusal) and sent
// on the single exit path. A server that registers after the job started joins
// it (the link matrices grow, and a new map gives it shards); one that leaves
// gets no shard in the next map. A trainer that leaves stops the sync rounds
// from waiting for it; one that comes back is waited for again from the next
// map on. The job starts when every expected server and trainer has registered
// and, when probing is on, every trainer has reported its links.
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler_impl.h"
#include "scheduler_quarantine.h"

int
ps__sched_refuse(struct ps_sched_refusal *no, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(no->msg, sizeof(no->msg), fmt, ap);
	va_end(ap);
	no->status = status;
	return status;
}

// links_in says whether every registered trainer has reported its links
// (always when not probing). mu held.
static int
links_in(const struct ps_scheduler *s)
{
	for (int t = 0; ps__sched_probing(s) && t < s->opts.trainers; t++) {
		if (s->trainer_seen[t] && !s->links_seen[t]) {
			return 0;
		}
	}
	return 1;
}

// maybe_start publishes the first map once every member (and every link
// report, when probing) is in, records why it cannot when it fails, and
// answers the parked calls that can be. mu held.
static void
maybe_start(struct ps_scheduler *s)
{
	int rv;
	if (s->placement == NULL && s->start_error[0] == '\0' &&
	    s->job != NULL && s->n_trainers_seen >= s->opts.min_trainers &&
	    s->n_servers_seen == s->opts.servers && links_in(s)) {
		// An elastic job starts with the ranks registered so far: the
		// others are not members (the first map lists them gone) and
		// join later.
		for (int t = 0; t < s->opts.trainers; t++) {
			s->trainer_gone[t] |= !s->trainer_seen[t];
		}
		if ((rv = ps__sched_publish(s)) != FB_OK) {
			if (s->start_error[0] == '\0') {
				snprintf(s->start_error,
				    sizeof(s->start_error),
				    "cannot place shards: %s",
				    fb_strerror(rv));
			}
			FB_LOG(FB_LOG_ERR, "placement", "%s", s->start_error);
		}
	}
	// The members, and the first map, are on disk before anyone sees it.
	ps__sched_state_save(s);
	ps__sched_answer_parked(s);
}

static int
cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return x < y ? -1 : x > y;
}

// grow_servers makes room for one more server in the member arrays (the
// link matrices are T x M, row-major, so they are re-laid out). Until the
// trainers re-probe, the newcomer's links are estimated as the median of
// each trainer's links. mu held.
static int
grow_servers(struct ps_scheduler *s)
{
	size_t M = (size_t) s->n_servers_seen, T = (size_t) s->opts.trainers;
	char **urls = fb_realloc(s->server_urls, (M + 1) * sizeof(char *));
	if (urls == NULL) {
		return FB_ENOMEM;
	}
	s->server_urls = urls;
	urls[M]        = NULL;
	uint64_t *cap  = fb_realloc(s->capacity, (M + 1) * sizeof(uint64_t));
	uint8_t  *gone = fb_realloc(s->gone, M + 1);
	uint64_t *hb   = fb_realloc(s->hb_server, (M + 1) * sizeof(uint64_t));
	uint8_t  *dead = fb_realloc(s->server_dead, M + 1);
	double   *lat  = fb_alloc(T * (M + 1) * sizeof(double));
	double   *bw   = fb_alloc(T * (M + 1) * sizeof(double));
	double   *tmp  = fb_alloc((M ? M : 1) * sizeof(double));
	if (cap != NULL) {
		s->capacity = cap;
	}
	if (gone != NULL) {
		s->gone = gone;
	}
	if (hb != NULL) {
		s->hb_server = hb;
	}
	if (dead != NULL) {
		s->server_dead = dead;
	}
	if (cap == NULL || gone == NULL || hb == NULL || dead == NULL ||
	    lat == NULL || bw == NULL || tmp == NULL) {
		fb_free(lat);
		fb_free(bw);
		fb_free(tmp);
		return FB_ENOMEM;
	}
	cap[M]  = 0;
	gone[M] = 0;
	hb[M]   = 0;
	dead[M] = 0;
	for (size_t t = 0; t < T; t++) {
		for (size_t m = 0; m < M; m++) {
			lat[t * (M + 1) + m] = s->lat[t * M + m];
			bw[t * (M + 1) + m]  = s->bw[t * M + m];
		}
		for (int k = 0; k < 2; k++) {
			const double *src = k ? s->bw : s->lat;
			for (size_t m = 0; m < M; m++) {
				tmp[m] = src[t * M + m];
			}
			qsort(tmp, M, sizeof(double), cmp_dbl);
			(k ? bw : lat)[t * (M + 1) + M] = M ? tmp[M / 2] : 1.0;
		}
	}
	fb_free(s->lat);
	fb_free(s->bw);
	fb_free(tmp);
	s->lat = lat;
	s->bw  = bw;
	return FB_OK;
}

// holds_shards says whether the map in force places a shard on server m.
// mu held.
static int
holds_shards(const struct ps_scheduler *s, uint32_t m)
{
	for (size_t i = 0; i < s->n_assign; i++) {
		if (s->assign[i] == m) {
			return 1;
		}
	}
	return 0;
}

// replaced says whether a Register into slot m comes from a new process:
// the slot's server was declared dead, or it heartbeats (is tracked). A
// running server registers once (a server with snapshots twice, and that
// path is the rollback's), so a Register into a tracked slot is a restart
// (slot_back stops tracking the slot, so that the same Register re-sent
// after a lost answer is not one more). A server not tracked (it never
// heartbeated, or the scheduler restarted since) is taken to be the same
// process asking again: its shards are not touched. mu held.
static int
replaced(const struct ps_scheduler *s, uint32_t m)
{
	return s->server_dead[m] || s->hb_server[m] != 0;
}

// slot_for finds the slot the server at r->url registers into: the one
// its URL holds, else the one r->slot asks for (--server-index), which it
// may take over under its new URL only once that slot's server is dead;
// -1 for a new slot. Returns 0 with *idx, or a refusal. mu held.
static int
slot_for(struct ps_scheduler *s, const Pswire__RegisterRequest *r, int *idx,
    struct ps_sched_refusal *no)
{
	int want = r->slot > 0 ? (int) (r->slot - 1) : -1;
	*idx     = -1;
	for (int i = 0; i < s->n_servers_seen; i++) {
		if (strcmp(s->server_urls[i], r->url) == 0) {
			*idx = i; // re-registration: same slot
		}
	}
	if (want < 0 || want == *idx ||
	    (*idx < 0 && want == s->n_servers_seen)) {
		return 0; // any slot, its own, or the next new one
	}
	if (*idx >= 0) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "server %s holds slot %d, not %d (--server-index)", r->url,
		    *idx, want);
	}
	if (want > s->n_servers_seen) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "no server slot %d: %d server(s) registered so far "
		    "(--server-index)",
		    want, s->n_servers_seen);
	}
	if (!s->server_dead[want]) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "server slot %d is held by the live server at %s: "
		    "--server-index takes it over only once that server is "
		    "declared dead",
		    want, s->server_urls[want]);
	}
	char *url = fb_strdup(r->url);
	if (url == NULL) {
		return ps__sched_refuse(no, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory");
	}
	FB_LOG(FB_LOG_NOTICE, "members",
	    "server slot %d: %s takes over from %s (--server-index)", want,
	    r->url, s->server_urls[want]);
	fb_free(s->server_urls[want]);
	s->server_urls[want] = url;
	*idx                 = want;
	return 0;
}

// slot_back takes back slot m for a new server process that registers
// into it while the job runs, without snapshots (replaced): its old
// process is gone, so whatever the slot held is lost now, with no
// --dead-after-ms wait. Its shards are promoted to their backups or
// re-seeded onto it (it then starts them empty: not late); a slot that
// holds nothing any more (declared dead before, its shards re-placed)
// joins again as a new server would. mu held; the job has started.
static void
slot_back(struct ps_scheduler *s, uint32_t m, Pswire__RegisterReply *rep)
{
	int was_dead      = s->server_dead[m];
	s->server_dead[m] = 0;
	ps__sched_live_untrack(s, PSWIRE__ROLE__ROLE_SERVER, m);
	if (holds_shards(s, m)) {
		FB_LOG(FB_LOG_NOTICE, "members",
		    "server %u registers again at %s: its old process is gone "
		    "and with it the shards it held",
		    m, s->server_urls[m]);
		rep->late = ps__sched_reseed(s, m, 1) == 0;
	} else if (was_dead && !s->gone[m]) {
		FB_LOG(FB_LOG_NOTICE, "members",
		    "server %u is back at %s after it was declared dead", m,
		    s->server_urls[m]);
		ps__sched_replan(s, "a server is back",
		    s->opts.placement == PS_PLACEMENT_UNIFORM);
	}
}

// register_server gives the server at r->url its slot: the same one on a
// re-registration (or the one --server-index names), a new one otherwise
// (joining a running job re-places the shards). A sender signed as server
// k (claimed, else PSW_ID_UNASSIGNED) may only take slot k. Fills rep's id
// and late flag; returns 0 or a refusal. mu held.
static int
register_server(struct ps_scheduler *s, const Pswire__RegisterRequest *r,
    uint32_t claimed, Pswire__RegisterReply *rep, struct ps_sched_refusal *no)
{
	int idx = -1;
	if (strlen(r->url) == 0 || strlen(r->url) > 255) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "server registration needs a url of 1..255 bytes");
	}
	if (claimed != PSW_ID_UNASSIGNED && r->slot > 0 &&
	    claimed != r->slot - 1) {
		return ps__sched_refuse(no, PSWIRE__STATUS__PERMISSION_DENIED,
		    "server-%u may not register %s into slot %u", claimed,
		    r->url, r->slot - 1);
	}
	if (slot_for(s, r, &idx, no) != 0) {
		return no->status;
	}
	if (claimed != PSW_ID_UNASSIGNED &&
	    claimed != (uint32_t) (idx >= 0 ? idx : s->n_servers_seen)) {
		return ps__sched_refuse(no, PSWIRE__STATUS__PERMISSION_DENIED,
		    "server-%u may not register %s (slot %d)", claimed, r->url,
		    idx >= 0 ? idx : s->n_servers_seen);
	}
	if (idx >= 0 || s->n_servers_seen < PS_MAX_MEMBERS) {
		s->snap_dir[idx >= 0 ? idx : s->n_servers_seen] =
		    r->has_snapshots;
	}
	if (idx >= 0) {
		rep->late = s->placement != NULL;
		rep->id   = (uint32_t) idx;
		ps__sched_touch(s, PSWIRE__ROLE__ROLE_SERVER, (uint32_t) idx);
		if (s->placement != NULL && !r->has_snapshots &&
		    replaced(s, (uint32_t) idx)) {
			slot_back(s, (uint32_t) idx, rep);
		} else if (s->placement != NULL && s->n_backups == 0 &&
		    r->restarted && holds_shards(s, (uint32_t) idx)) {
			// Restarted from its snapshots: the job rolls back
			// and it restores its own shards (not late).
			ps__sched_rollback_begin(s, (uint32_t) idx,
			    r->snapshot_versions, r->n_snapshot_versions, rep);
		}
		return 0;
	}
	if (s->n_servers_seen >= s->opts.servers && s->placement == NULL) {
		return ps__sched_refuse(no, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "job expects %d servers; all registered", s->opts.servers);
	}
	if (s->n_servers_seen >= s->opts.servers && grow_servers(s) != FB_OK) {
		return ps__sched_refuse(no, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "cannot add a server: out of memory");
	}
	idx = s->n_servers_seen;
	if ((s->server_urls[idx] = fb_strdup(r->url)) == NULL) {
		return ps__sched_refuse(no, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory");
	}
	s->capacity[idx] = r->capacity_bytes;
	s->n_servers_seen++;
	FB_LOG(FB_LOG_NOTICE, "members", "server %d registered at %s (%d/%d)",
	    idx, r->url, s->n_servers_seen, s->opts.servers);
	if (s->placement != NULL) {
		// Joining a running job: it gets shards by a new map and
		// receives them by Transfer.
		rep->late = 1;
		ps__sched_replan(s, "a server joined",
		    s->opts.placement == PS_PLACEMENT_UNIFORM);
	}
	rep->id = (uint32_t) idx;
	return 0;
}

// The rank a trainer's Register asks for, and who sends it.
struct join {
	uint32_t rank;    // out: the rank it gets
	uint32_t bound;   // any_rank: the rank its identity names, else
	                  // PSW_ID_UNASSIGNED
	uint64_t host;    // ps__host_key of the sender (0: unknown)
	uint64_t rid;     // its request id
	int      resent;  // out: the same any_rank Register again
	int      already; // out: the rank is a live member's
};

// pick_rank decides the rank of a trainer's Register: r->rank, or with
// any_rank the rank its identity names, else the one a re-sent Register
// got, else the lowest free one. Refuses a rank out of range, a full job,
// a rank a live member holds (explicit ranks of a fixed job excepted: a
// re-registration, as before elastic jobs) and a flapping slot. mu held.
static int
pick_rank(struct ps_scheduler *s, const Pswire__RegisterRequest *r,
    struct join *j, struct ps_sched_refusal *no)
{
	int      max   = s->opts.trainers;
	int      fixed = s->opts.min_trainers == max && !r->any_rank;
	uint64_t wait;

	j->rank = r->any_rank ? j->bound : r->rank;
	for (int t = 0; r->any_rank && j->rank == PSW_ID_UNASSIGNED &&
	     j->rid != 0 && t < max;
	     t++) {
		if (ps__sched_is_live(s, (uint32_t) t) &&
		    s->join_rid[t] == j->rid &&
		    s->trainer_host[t] == j->host) {
			j->rank   = (uint32_t) t; // its answer was lost
			j->resent = 1;
		}
	}
	if (j->rank == PSW_ID_UNASSIGNED) {
		int f = ps__sched_free_rank(s);
		if (f < 0) {
			return ps__sched_refuse(no,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "job full: %d trainers", max);
		}
		j->rank = (uint32_t) f;
	}
	if (j->rank >= (uint32_t) max) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "rank %u out of range: job has %d trainers (MAX %d)",
		    j->rank, max, max);
	}
	if (ps__sched_quarantined(s, j->rank)) {
		// The rpc refuses its identity before this; a join whose
		// certificate names it, or a claim, ends here.
		return ps__sched_refuse(no, PSWIRE__STATUS__PERMISSION_DENIED,
		    "trainer rank %u is quarantined (docs/security.md)",
		    j->rank);
	}
	j->already = ps__sched_is_live(s, j->rank);
	if (j->already && !fixed && !j->resent) {
		if (ps__sched_live_trainers(s) >= max) {
			return ps__sched_refuse(no,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "job full: %d trainers", max);
		}
		return ps__sched_refuse(no, PSWIRE__STATUS__ALREADY_EXISTS,
		    "rank %u is held by a live trainer", j->rank);
	}
	if (!j->already &&
	    (wait = ps__sched_flap_wait(s, j->rank, fb_clock_ms())) > 0) {
		s->n_flap_refused++;
		return ps__sched_refuse(no, PSWIRE__STATUS__UNAVAILABLE,
		    "rank %u flapping (its members died %u times within %u "
		    "ms): retry in %llu ms",
		    j->rank, s->opts.flap_deaths, s->opts.flap_window_ms,
		    (unsigned long long) wait);
	}
	return 0;
}

// register_trainer admits the trainer of j (pick_rank) with its job
// declaration, which must be valid and, after the first (which becomes
// the job's), match the job. A rank that is not a member (it left, was
// declared dead, or never registered before the job started) joins.
// Fills rep's id; returns 0 or a refusal. mu held.
static int
register_trainer(struct ps_scheduler *s, const Pswire__RegisterRequest *r,
    struct join *j, Pswire__RegisterReply *rep, struct ps_sched_refusal *no)
{
	char why[512];
	if (pick_rank(s, r, j, no) != 0 ||
	    ps__sched_quar_attack(s, j->rank, r, no) != 0) {
		return no->status;
	}
	if (r->job == NULL) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "trainer registration needs the tensor table");
	}
	if (ps__sched_job_check(r->job, &s->opts, why, sizeof(why)) != FB_OK) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "bad job declaration: %s", why);
	}
	if (s->job != NULL &&
	    ps__sched_job_diff(s->job, r->job, why, sizeof(why))) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "declaration does not match the job: %s", why);
	}
	if (s->job == NULL) {
		if ((s->job = ps__sched_job_copy(r->job)) == NULL) {
			return ps__sched_refuse(no,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory");
		}
		if (s->job->shard_bytes == 0) {
			s->job->shard_bytes = s->opts.shard_bytes;
		}
		FB_LOG(FB_LOG_NOTICE, "members",
		    "job declared by rank %u: %zu tensors, mode %s, lr %g, "
		    "optimizer %s, local steps %u (inner lr %g), fragments "
		    "%u",
		    j->rank, s->job->n_tensors,
		    s->job->mode ? "async" : "sync", s->job->lr,
		    s->job->optim != NULL && *s->job->optim->name != '\0'
		        ? s->job->optim->name
		        : "sgd",
		    s->job->local_steps, s->job->inner_lr,
		    s->job->fragments > 1 ? s->job->fragments : 1);
	}
	uint32_t rank = j->rank;
	if (!j->already) {
		s->trainer_host[rank] = j->host;
		s->join_rid[rank]     = r->any_rank ? j->rid : 0;
	}
	if (s->trainer_gone[rank]) {
		// A rank that is not a member joins: rounds wait for it from
		// the next map on.
		s->trainer_gone[rank] = 0;
		FB_LOG(FB_LOG_NOTICE, "members", "trainer %u %s", rank,
		    s->trainer_seen[rank] ? "rejoins"
		                          : "joins the running job");
		if (s->placement != NULL) {
			ps__sched_republish(s, s->assign);
		}
	}
	if (!s->trainer_seen[rank]) {
		s->trainer_seen[rank] = 1;
		s->n_trainers_seen++;
		FB_LOG(FB_LOG_NOTICE, "members",
		    "trainer %u registered (%d/%d)", rank, s->n_trainers_seen,
		    s->opts.min_trainers);
	}
	if (!j->already) {
		s->n_joins++;
		FB_LOG(FB_LOG_NOTICE, "members",
		    "trainer %u joined (members %d)", rank,
		    ps__sched_live_trainers(s));
	}
	ps__sched_touch(s, PSWIRE__ROLE__ROLE_TRAINER, rank);
	rep->id = rank;
	return 0;
}

void
ps__sched_on_register(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__RegisterRequest *r   = c->hdr->register_req;
	Pswire__Header           h   = PSWIRE__HEADER__INIT;
	Pswire__RegisterReply    rep = PSWIRE__REGISTER_REPLY__INIT;
	struct ps_sched_refusal  no;
	int                      status;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_REGISTER_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Register needs a register_req body");
		return;
	}
	// Who may register what (docs/security.md): a trainer only its own
	// rank; a server only as a server, and only its own slot once it has
	// one.
	struct join j = { .bound = PSW_ID_UNASSIGNED,
		.host            = c->host_key,
		.rid             = c->hdr->request_id };
	if (r->role == PSWIRE__ROLE__ROLE_TRAINER &&
	    (r->any_rank
	            ? !ps__call_may_join(c, &j.bound)
	            : !ps__call_acts_as(c, PSW_ROLE_TRAINER, r->rank, 0))) {
		return;
	}
	uint32_t claimed = c->peer.role == PSW_ROLE_SERVER ? c->peer.id
	                                                   : PSW_ID_UNASSIGNED;
	if (r->role == PSWIRE__ROLE__ROLE_SERVER && ps__rpc_auth_on(c->rpc) &&
	    !ps__call_acts_as(c, PSW_ROLE_SERVER, claimed, 0)) {
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (r->role == PSWIRE__ROLE__ROLE_SERVER) {
		status = register_server(s, r, claimed, &rep, &no);
	} else if (r->role == PSWIRE__ROLE__ROLE_TRAINER) {
		status = register_trainer(s, r, &j, &rep, &no);
	} else {
		status = ps__sched_refuse(&no,
		    PSWIRE__STATUS__INVALID_ARGUMENT, "unknown role %d",
		    r->role);
	}
	if (status == 0) {
		// The welcome goes out before mu is released, as it always
		// has; only refusals wait for the unlock.
		rep.trainers     = (uint32_t) s->opts.trainers;
		rep.min_trainers = (uint32_t) s->opts.min_trainers;
		rep.elastic      = s->opts.min_trainers < s->opts.trainers;
		rep.servers      = (uint32_t) s->n_servers_seen;
		rep.probe        = ps__sched_probing(s) &&
		    r->role == PSWIRE__ROLE__ROLE_TRAINER;
		rep.probe_count = s->opts.probe_count;
		rep.probe_bytes = s->opts.probe_bytes;
		rep.reprobe_s   = s->opts.reprobe_s;
		if (r->role == PSWIRE__ROLE__ROLE_SERVER) {
			ps__sched_quar_server_reply(s, &rep); // spot checks
		}
		h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REP;
		h.register_rep = &rep;
		maybe_start(s);
		ps__call_reply(c, &h);
	}
	pthread_mutex_unlock(&s->mu);
	if (status != 0) {
		ps__call_reply_err(c, status, "%s", no.msg);
	}
}

// leave_trainer takes trainer id out of the sync rounds: a new map lists
// it as gone and servers complete pending rounds without it. Returns 0 or
// a refusal. mu held.
static int
leave_trainer(struct ps_scheduler *s, uint32_t id, struct ps_sched_refusal *no)
{
	if (id >= (uint32_t) s->opts.trainers) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "no trainer %u", id);
	}
	int was = ps__sched_is_live(s, id);
	ps__sched_drop_trainer(s, id);
	if (was) {
		s->n_leaves++;
		FB_LOG(FB_LOG_NOTICE, "members",
		    "trainer %u left (members %d)", id,
		    ps__sched_live_trainers(s));
	}
	return 0;
}

// leave_server gives server id no shard in the next map (the servers then
// move its shards away); the last live server may not leave. Returns 0 or
// a refusal. mu held.
static int
leave_server(struct ps_scheduler *s, uint32_t id, struct ps_sched_refusal *no)
{
	int alive = 0;
	for (int m = 0; m < s->n_servers_seen; m++) {
		alive += !s->gone[m];
	}
	if (id >= (uint32_t) s->n_servers_seen) {
		return ps__sched_refuse(no, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "no server %u", id);
	}
	if (!s->gone[id] && alive <= 1) {
		return ps__sched_refuse(no,
		    PSWIRE__STATUS__FAILED_PRECONDITION,
		    "server %u is the last one: its shards have nowhere to go",
		    id);
	}
	ps__sched_live_untrack(s, PSWIRE__ROLE__ROLE_SERVER, id);
	if (!s->gone[id]) {
		s->gone[id] = 1;
		FB_LOG(FB_LOG_NOTICE, "members", "server %u leaves", id);
		if (s->placement != NULL) {
			ps__sched_replan(s, "a server left", 1);
		}
	}
	return 0;
}

void
ps__sched_on_leave(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__LeaveRequest   *l = c->hdr->leave_req;
	struct ps_sched_refusal no;
	int                     status;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_LEAVE_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Leave needs a leave_req body");
		return;
	}
	// A member leaves itself; an operator may take any member out.
	if (!ps__call_acts_as(c, ps__role_of(l->role), l->id, 1)) {
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (l->role == PSWIRE__ROLE__ROLE_TRAINER) {
		status = leave_trainer(s, l->id, &no);
	} else if (l->role == PSWIRE__ROLE__ROLE_SERVER) {
		status = leave_server(s, l->id, &no);
	} else {
		status = ps__sched_refuse(&no,
		    PSWIRE__STATUS__INVALID_ARGUMENT, "unknown role %d",
		    l->role);
	}
	if (status == 0 && s->placement == NULL) {
		ps__sched_state_save(s); // a running job saved with its map
	}
	pthread_mutex_unlock(&s->mu);
	if (status != 0) {
		ps__call_reply_err(c, status, "%s", no.msg);
	} else {
		ps__sched_reply_leave(s, c);
	}
}

void
ps__sched_on_report_links(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__ReportLinksRequest *r = c->hdr->links_req;
	size_t                      M = (size_t) s->n_servers_seen;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_LINKS_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "ReportLinks needs a links_req body");
		return;
	}
	if (!ps__call_acts_as(c, PSW_ROLE_TRAINER, r->rank, 0)) {
		return;
	}
	// A trainer that has not fetched a map with a newly joined server yet
	// reports fewer servers: the first n are updated.
	if (r->rank >= (uint32_t) s->opts.trainers || r->n_rtt_s == 0 ||
	    r->n_rtt_s > M || r->n_bw_bps != r->n_rtt_s ||
	    (s->placement == NULL && r->n_rtt_s != M)) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "link report from rank %u: need %zu RTTs and bandwidths "
		    "for %d trainers, got %zu and %zu",
		    r->rank, M, s->opts.trainers, r->n_rtt_s, r->n_bw_bps);
		return;
	}
	M = r->n_rtt_s;
	for (size_t m = 0; m < M; m++) {
		if (!isfinite(r->rtt_s[m]) || r->rtt_s[m] < 0 ||
		    r->rtt_s[m] > 3600 || !isfinite(r->bw_bps[m]) ||
		    r->bw_bps[m] <= 0) {
			ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "link report from rank %u: server %zu has rtt %g s, "
			    "bandwidth %g B/s",
			    r->rank, m, r->rtt_s[m], r->bw_bps[m]);
			return;
		}
	}
	pthread_mutex_lock(&s->mu);
	// A re-probe (the job has started) that finds a link changed by more
	// than the threshold triggers a re-placement.
	int    changed = 0;
	double th      = s->opts.reprobe_change_pct / 100.0;
	size_t stride  = (size_t) s->n_servers_seen;
	for (size_t m = 0; s->placement != NULL && m < M; m++) {
		double l0 = s->lat[r->rank * stride + m];
		double b0 = s->bw[r->rank * stride + m];
		changed |= fabs(r->rtt_s[m] - l0) > th * fmax(l0, 1e-4) ||
		    fabs(r->bw_bps[m] - b0) > th * b0;
	}
	for (size_t m = 0; m < M; m++) {
		s->lat[r->rank * stride + m] = r->rtt_s[m];
		s->bw[r->rank * stride + m]  = r->bw_bps[m];
		FB_LOG(FB_LOG_INFO, "links",
		    "trainer %u -> server %zu: rtt %.3f ms, %.1f MB/s",
		    r->rank, m, r->rtt_s[m] * 1e3, r->bw_bps[m] / 1e6);
	}
	ps__sched_touch(s, PSWIRE__ROLE__ROLE_TRAINER, r->rank);
	if (!s->links_seen[r->rank]) {
		s->links_seen[r->rank] = 1;
		s->n_links_seen++;
	}
	if (changed && s->opts.placement == PS_PLACEMENT_LATENCY) {
		ps__sched_replan(s, "links changed", 0);
	}
	maybe_start(s);
	pthread_mutex_unlock(&s->mu);
	ps__sched_reply_links(s, c);
}
