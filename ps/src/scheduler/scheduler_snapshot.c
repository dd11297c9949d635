// scheduler_snapshot.c — the Snapshot rpc sent to the scheduler: one
// snapshot of the whole job. The scheduler forwards it to every server of
// the map in force and answers with the version and the totals.
//
// DESIGN. In a sync job every server must write the same version, or a
// restore would mix versions: the scheduler asks each server for the
// highest and lowest versions its shards hold (a Snapshot query), picks
// V = that version when every shard holds the same one (between steps,
// or a job that has ended), else the highest + 1, which the round in
// progress commits (or the version the caller asked for), and sends
// Snapshot(V) to all servers at once (one thread each: a server refuses a
// version some shard is already past, so a slow fan-out could miss it);
// each server captures its shards as they commit V and answers once its
// file is on disk. In an async job versions are per shard and there is no
// common cut: each server writes its shards as they are now. The
// forwarding blocks on the servers, so it runs on its own thread (rpc
// callbacks never block), one snapshot at a time; the call's deadline
// (default PS_SCHED_SNAPSHOT_MS) bounds it.
//
// ROLLBACK. Without replicas a dead server's shards exist only in its
// snapshots. When it restarts with the same --snapshot-dir and identity
// it registers twice: the second time with the versions of its snapshot
// files. The other servers report theirs in every heartbeat. The
// scheduler picks V, the newest version every server holding shards has
// (shard_rollback_pick: each keeps its last two files, so a write cut
// short or skipped on one server still leaves a common one), and
// publishes the same map with rollback_version V and a new rollback_gen.
// Every server restores its shards from its snapshot of V; trainers that
// see the new generation re-pull version V and redo the steps from there.
// No common version: the restarted server is refused, naming what each
// lacks, and the job stays stopped (trainers fail at their deadline)
// rather than mixing versions.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <nng/nng.h>

#include "psw/psw.h"
#include "scheduler_impl.h"
#include "shard/shard.h"

// The forwarding's time limit when the caller gave no deadline.
#define PS_SCHED_SNAPSHOT_MS 60000u

// One server's part.
struct fwd_one {
	const char      *url;
	struct psw_auth *auth;    // signs the call (NULL: off)
	struct psw_tls  *tls;     // dials with TLS (NULL: plain tcp)
	struct psw_ident to;      // whom the call is signed for (auth.c)
	uint64_t         version; // asked for; then the snapshot's
	int              query;   // a query, not a snapshot
	uint32_t         timeout_ms;
	int              status;   // PSWIRE__STATUS__*
	char             err[256]; // when status != OK
	uint32_t         shards;   // from the reply
	uint64_t         bytes;    // from the reply
	uint64_t         low;      // a query's lowest shard version
	pthread_t        thread;
};

// The forwarding of one Snapshot call.
struct fwd {
	struct ps_scheduler *s;
	struct ps_call      *c;
	uint64_t             version; // asked for (0: pick)
	int                  async;
	uint32_t             timeout_ms;
	uint32_t             n;
	struct fwd_one      *one;  // [n]
	char               **urls; // [n] owned copies
};

// one_call sends o's Snapshot (or query) to its server and records the
// answer in o. Blocks up to o->timeout_ms.
static void
one_call(struct fwd_one *o)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__SnapshotRequest r  = PSWIRE__SNAPSHOT_REQUEST__INIT;
	ProtobufCMessage       *ph = NULL;
	nng_socket              sock;
	nng_ctx                 ctx;
	nng_aio                *aio;
	const char             *why = "";
	int                     rv;

	o->status = PSWIRE__STATUS__UNAVAILABLE;
	if (psw_req_open(o->tls, o->url, 0, 50, 1000, &sock, &ctx, &aio) !=
	    FB_OK) {
		snprintf(o->err, sizeof(o->err), "cannot dial %s", o->url);
		return;
	}
	if (psw_auth_set_peer(o->auth, ctx, o->to.role, o->to.id) != FB_OK) {
		snprintf(o->err, sizeof(o->err), "out of memory");
		nng_aio_free(aio);
		nng_close(sock);
		return;
	}
	r.version          = o->version;
	r.query            = o->query;
	h.request_id       = 1;
	h.deadline_ms      = o->timeout_ms;
	h.body_case        = PSWIRE__HEADER__BODY_SNAPSHOT_REQ;
	h.snapshot_req     = &r;
	rv                 = psw_call_header(o->auth, ctx, aio, &h.base,
	                    PSWIRE__METHOD__SNAPSHOT, 1, (int) o->timeout_ms, &ph, &why);
	Pswire__Header *rh = (Pswire__Header *) ph;
	if (rv == FB_OK &&
	    rh->body_case == PSWIRE__HEADER__BODY_SNAPSHOT_REP) {
		o->status  = PSWIRE__STATUS__OK;
		o->version = rh->snapshot_rep->version;
		o->shards  = rh->snapshot_rep->shards;
		o->bytes   = rh->snapshot_rep->bytes;
		o->low     = rh->snapshot_rep->low;
	} else if (rv == FB_EREMOTE && rh != NULL) {
		o->status = rh->status;
		snprintf(o->err, sizeof(o->err), "%s", rh->error);
	} else {
		o->status = rv == FB_ETIMEDOUT
		    ? PSWIRE__STATUS__DEADLINE_EXCEEDED
		    : PSWIRE__STATUS__UNAVAILABLE;
		snprintf(o->err, sizeof(o->err), "%s",
		    why && *why ? why : fb_strerror(rv));
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	nng_aio_free(aio);
	nng_close(sock);
}

static void *
one_main(void *arg)
{
	one_call(arg);
	return NULL;
}

// fan_out runs every server's call at once and waits for all of them.
static void
fan_out(struct fwd *f)
{
	for (uint32_t i = 0; i < f->n; i++) {
		if (pthread_create(&f->one[i].thread, NULL, one_main,
		        &f->one[i]) != 0) {
			one_call(&f->one[i]); // no thread: do it here
			f->one[i].thread = pthread_self();
		}
	}
	for (uint32_t i = 0; i < f->n; i++) {
		if (!pthread_equal(f->one[i].thread, pthread_self())) {
			pthread_join(f->one[i].thread, NULL);
		}
	}
}

// first_error returns the index of the first server that failed, or n.
static uint32_t
first_error(const struct fwd *f)
{
	uint32_t i = 0;
	while (i < f->n && f->one[i].status == PSWIRE__STATUS__OK) {
		i++;
	}
	return i;
}

static void
fwd_free(struct fwd *f)
{
	for (uint32_t i = 0; f->urls != NULL && i < f->n; i++) {
		fb_free(f->urls[i]);
	}
	fb_free(f->urls);
	fb_free(f->one);
	fb_free(f);
}

// idle lets the next Snapshot call start (it joins this thread first).
static void
idle(struct ps_scheduler *s)
{
	pthread_mutex_lock(&s->mu);
	s->snap_running = 0;
	pthread_mutex_unlock(&s->mu);
}

// fwd_main is the forwarding thread: pick the version, fan out, answer.
static void *
fwd_main(void *arg)
{
	struct fwd           *f = arg;
	struct ps_scheduler  *s = f->s;
	Pswire__Header        h = PSWIRE__HEADER__INIT;
	Pswire__SnapshotReply r = PSWIRE__SNAPSHOT_REPLY__INIT;
	uint64_t              v = f->version;
	uint32_t              bad;

	// Auto version: the shards may pass V between the query and the
	// request (a step is quick); a server then refuses, and a new query
	// picks a later V. The servers that took V have written it by then
	// (fan_out waits for every answer) and write the new V over it.
	for (int tries = 0;; tries++) {
		if (!f->async && f->version == 0) {
			uint64_t high = 0, low = UINT64_MAX;
			for (uint32_t i = 0; i < f->n; i++) {
				f->one[i].query = 1;
			}
			fan_out(f);
			if ((bad = first_error(f)) < f->n) {
				goto fail;
			}
			for (uint32_t i = 0; i < f->n; i++) {
				high = f->one[i].version > high
				    ? f->one[i].version
				    : high;
				low  = f->one[i].low < low ? f->one[i].low
				                           : low;
				f->one[i].query = 0;
			}
			// Every shard at one version (between steps, or the
			// job has ended): that version, at once. Otherwise the
			// next, which the round in progress commits; a retry
			// goes further ahead.
			v = tries == 0 && low == high
			    ? high
			    : high + 1 + (uint64_t) tries;
		}
		for (uint32_t i = 0; i < f->n; i++) {
			f->one[i].version = f->async ? 0 : v;
		}
		FB_LOG(FB_LOG_NOTICE, "snapshot",
		    "asking %u servers for a snapshot %s%llu", f->n,
		    f->async ? "now (async: no common version) "
		             : "of version ",
		    (unsigned long long) (f->async ? 0 : v));
		fan_out(f);
		bad = first_error(f);
		if (bad == f->n || f->async || f->version != 0 || tries >= 4 ||
		    f->one[bad].status !=
		        PSWIRE__STATUS__FAILED_PRECONDITION) {
			break;
		}
		FB_LOG(FB_LOG_INFO, "snapshot",
		    "version %llu passed before server %s got the request: "
		    "asking again",
		    (unsigned long long) v, f->one[bad].url);
	}
	if (bad < f->n) {
		goto fail;
	}
	r.version = UINT64_MAX;
	for (uint32_t i = 0; i < f->n; i++) {
		r.version = f->one[i].version < r.version ? f->one[i].version
		                                          : r.version;
		r.shards += f->one[i].shards;
		r.bytes += f->one[i].bytes;
	}
	r.servers = f->n;
	FB_LOG(FB_LOG_NOTICE, "snapshot",
	    "version %llu written by %u servers: %u shards, %llu bytes",
	    (unsigned long long) r.version, f->n, r.shards,
	    (unsigned long long) r.bytes);
	h.request_id   = f->c->hdr->request_id;
	h.body_case    = PSWIRE__HEADER__BODY_SNAPSHOT_REP;
	h.snapshot_rep = &r;
	idle(s); // before the answer: the caller may ask again at once
	ps__call_reply(f->c, &h);
	goto done;
fail:
	FB_LOG(FB_LOG_ERR, "snapshot", "server %s: %s: %s", f->one[bad].url,
	    psw_status_name(f->one[bad].status), f->one[bad].err);
	idle(s);
	ps__call_reply_err(f->c, f->one[bad].status,
	    "snapshot%s: server %u (%s): %s",
	    f->one[bad].query ? " query" : "", bad, f->one[bad].url,
	    f->one[bad].err);
done:
	fwd_free(f);
	return NULL;
}

// fwd_alloc gathers the servers of the map in force (those that did not
// leave: they hold every shard) for call c. NULL when out of memory. mu
// held; the job has started.
static struct fwd *
fwd_alloc(struct ps_scheduler *s, struct ps_call *c)
{
	struct fwd *f = fb_zalloc(sizeof(*f));
	uint32_t    M = (uint32_t) s->n_servers_seen, k = 0;
	if (f == NULL ||
	    (f->one = fb_zalloc(sizeof(*f->one) * (M ? M : 1))) == NULL ||
	    (f->urls = fb_zalloc(sizeof(char *) * (M ? M : 1))) == NULL) {
		fwd_free(f);
		return NULL;
	}
	f->s          = s;
	f->c          = c;
	f->timeout_ms = c->hdr->deadline_ms ? c->hdr->deadline_ms
	                                    : PS_SCHED_SNAPSHOT_MS;
	f->async      = s->job->mode != PSWIRE__MODE__MODE_SYNC;
	if (c->hdr->body_case == PSWIRE__HEADER__BODY_SNAPSHOT_REQ) {
		f->version = c->hdr->snapshot_req->version;
	}
	for (uint32_t m = 0; m < M; m++) {
		if (s->gone[m]) {
			continue;
		}
		if ((f->urls[k] = fb_strdup(s->server_urls[m])) == NULL) {
			f->n = k;
			fwd_free(f);
			return NULL;
		}
		f->one[k].url        = f->urls[k];
		f->one[k].timeout_ms = f->timeout_ms;
		f->one[k].auth       = f->s->auth;
		f->one[k].to.role    = PSW_ROLE_SERVER;
		f->one[k].to.id      = m;
		f->one[k].tls        = f->s->tls;
		k++;
	}
	f->n = k;
	return f;
}

void
ps__sched_on_snapshot(struct ps_scheduler *s, struct ps_call *c)
{
	struct fwd *f      = NULL;
	int         status = PSWIRE__STATUS__OK;
	const char *why    = "";

	// An operator's (with authentication on): a member may not make
	// every server write its shards.
	if (!ps__call_acts_as(c, PSW_ROLE_OPERATOR, 0, 1)) {
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (s->placement == NULL) {
		status = PSWIRE__STATUS__FAILED_PRECONDITION;
		why    = "the job has not started";
	} else if (s->snap_running) {
		status = PSWIRE__STATUS__UNAVAILABLE;
		why    = "another snapshot is in progress; retry";
	} else if ((f = fwd_alloc(s, c)) == NULL) {
		status = PSWIRE__STATUS__RESOURCE_EXHAUSTED;
		why    = "out of memory";
	} else {
		if (s->snap_joinable) {
			pthread_join(s->snap_thread, NULL); // it has finished
			s->snap_joinable = 0;
		}
		if (pthread_create(&s->snap_thread, NULL, fwd_main, f) != 0) {
			status = PSWIRE__STATUS__RESOURCE_EXHAUSTED;
			why    = "cannot start a thread";
			fwd_free(f);
		} else {
			s->snap_running = s->snap_joinable = 1;
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (status != PSWIRE__STATUS__OK) {
		ps__call_reply_err(c, status, "Snapshot: %s", why);
	}
}

void
ps__sched_snapshot_stop(struct ps_scheduler *s)
{
	pthread_mutex_lock(&s->mu);
	int joinable     = s->snap_joinable;
	s->snap_joinable = 0;
	pthread_mutex_unlock(&s->mu);
	if (joinable) {
		pthread_join(s->snap_thread, NULL);
	}
}

int
ps_job_snapshot(const char            *scheduler_url,
    const struct ps_job_snapshot_auth *auth, uint64_t version,
    uint32_t timeout_ms, struct ps_job_snapshot *out, char *err, size_t n)
{
	struct ps_job_snapshot_auth none = { 0 };
	struct fwd_one              o;
	int                         rv;

	if (scheduler_url == NULL || out == NULL || timeout_ms == 0) {
		return FB_EINVAL;
	}
	auth = auth != NULL ? auth : &none;
	memset(&o, 0, sizeof(o));
	o.url        = scheduler_url;
	o.to.role    = PSW_ROLE_SCHEDULER;
	o.version    = version;
	o.timeout_ms = timeout_ms;
	if ((rv = ps__open_auth(auth->secret_file, PSW_ROLE_OPERATOR, 0, 0,
	         &o.auth)) != FB_OK) {
		snprintf(err, n, "cannot read the job's key %s",
		    auth->secret_file);
		return rv;
	}
	if ((rv = psw_tls_open(auth->tls_cert, auth->tls_key, auth->tls_ca,
	         &o.tls, err, n)) != FB_OK) {
		psw_auth_close(o.auth);
		return rv;
	}
	one_call(&o);
	psw_auth_close(o.auth);
	psw_tls_close(o.tls);
	if (o.status != PSWIRE__STATUS__OK) {
		snprintf(err, n, "%s: %s", psw_status_name(o.status), o.err);
		return o.status == PSWIRE__STATUS__DEADLINE_EXCEEDED
		    ? FB_ETIMEDOUT
		    : FB_EREMOTE;
	}
	out->version = o.version;
	out->shards  = o.shards;
	out->bytes   = o.bytes;
	if (n > 0) {
		err[0] = '\0';
	}
	return FB_OK;
}

// ---- rollback ----------------------------------------------------------------

void
ps__sched_snap_held(struct ps_scheduler *s, uint32_t m, const uint64_t *v,
    size_t n)
{
	if (m >= PS_MAX_MEMBERS) {
		return;
	}
	n = n < PS_SNAP_REPORTED ? n : PS_SNAP_REPORTED;
	if (n > 0) { // v may be NULL for none
		memcpy(s->snap_held[m], v, n * sizeof(*v));
	}
	s->n_snap_held[m] = (uint32_t) n;
	if (s->rb_pending != 0) {
		s->rb_fresh[m] = 1;
		ps__sched_rollback_check(s, 0);
	}
}

// versions_text writes server m's reported versions as "a, b" (or "none").
static void
versions_text(const struct ps_scheduler *s, uint32_t m, char *buf, size_t n)
{
	size_t used = 0;
	buf[0]      = '\0';
	for (uint32_t j = 0; j < s->n_snap_held[m] && used < n; j++) {
		used += (size_t) snprintf(buf + used, n - used, "%s%llu",
		    j ? ", " : "", (unsigned long long) s->snap_held[m][j]);
	}
	if (s->n_snap_held[m] == 0) {
		snprintf(buf, n, "none");
	}
}

void
ps__sched_rollback_begin(struct ps_scheduler *s, uint32_t m, const uint64_t *v,
    size_t n, Pswire__RegisterReply *rep)
{
	s->rb_pending  = m + 1;
	s->rb_since_ms = fb_clock_ms();
	memset(s->rb_fresh, 0, sizeof(s->rb_fresh));
	FB_LOG(n > 0 ? FB_LOG_NOTICE : FB_LOG_WARN, "snapshot",
	    "server %u restarted with %zu snapshot(s): the job rolls back "
	    "once every server has reported its snapshots",
	    m, n);
	rep->late         = 0;
	rep->wait_epoch   = s->epoch + 1;
	rep->rollback_gen = s->rollback_gen;
	ps__sched_snap_held(s, m, v, n);
	if (s->rb_pending != 0) {
		// Still waiting: on disk before the restarted server is told
		// to wait for it, so a scheduler restart does not lose it.
		ps__sched_state_save(s);
	}
}

void
ps__sched_rollback_check(struct ps_scheduler *s, int expired)
{
	size_t   M   = (size_t) s->n_servers_seen;
	uint32_t m   = s->rb_pending - 1;
	uint8_t *use = fb_zalloc(M ? M : 1);
	uint64_t V;
	uint32_t missing;
	int      rv;

	if (s->rb_pending == 0 || use == NULL) {
		fb_free(use);
		return;
	}
	for (size_t i = 0; i < s->n_assign; i++) {
		if (s->assign[i] < M) {
			use[s->assign[i]] = 1;
		}
	}
	for (size_t i = 0; i < M && !expired; i++) {
		if (use[i] && !s->rb_fresh[i]) {
			fb_free(use);
			return; // wait for its next heartbeat
		}
	}
	s->rb_pending = 0;
	rv = shard_rollback_pick(M, use, &s->snap_held[0][0], s->n_snap_held,
	    PS_SNAP_REPORTED, &V, &missing);
	fb_free(use);
	if (rv != FB_OK) {
		char mine[96], theirs[96];
		versions_text(s, m, mine, sizeof(mine));
		versions_text(s, missing < M ? missing : m, theirs,
		    sizeof(theirs));
		FB_LOG(FB_LOG_ERR, "snapshot",
		    "cannot roll the job back after server %u restarted: no "
		    "snapshot version is held by every server (server %u "
		    "holds %s; server %u holds %s%s): the job cannot continue "
		    "consistently and stops here",
		    m, m, mine, missing, theirs,
		    expired ? "; not every server reported in time" : "");
		ps__sched_state_save(s); // no longer pending
		return;
	}
	s->rollback_version = V;
	s->rollback_gen++;
	FB_LOG(FB_LOG_WARN, "snapshot",
	    "rolling back job to version %llu (server %u restarted from its "
	    "snapshot; rollback %llu)",
	    (unsigned long long) V, m, (unsigned long long) s->rollback_gen);
	if ((rv = ps__sched_republish(s, s->assign)) != FB_OK) {
		s->rollback_gen--;
		FB_LOG(FB_LOG_ERR, "snapshot",
		    "cannot publish the rollback map: %s", fb_strerror(rv));
		ps__sched_state_save(s); // no longer pending
	}
}
