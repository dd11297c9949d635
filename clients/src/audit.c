// audit.c — the client's part in spot checks (issue 31,
// docs/security.md): the data step a trainer's pushes claim, which a
// verifier recomputes them from, and the verifier's own calls: the map
// (which shards, which servers), the servers' kept pushes (Audit) and its
// verdicts to the scheduler (Verified).
//
// DESIGN. A verifier is no trainer: it declares nothing, holds no weights
// and joins no round, so it shares none of ferry_client's machinery but
// the wire helpers of psw. It signs as the operator (psw_auth role
// OPERATOR), sends Header.rank UINT32_MAX (no trainer's: with signing off
// a scheduler that refuses a quarantined rank by Header.rank must not
// take the verifier for one), and calls one server at a time on one
// context per server. A record's floats are copied out of the reply into
// one grow-only buffer (the payload's offsets need not be 4-aligned), so
// polling allocates nothing once the buffers fit the largest reply.
#include <stdarg.h>
#include <stdio.h>

#include "client_impl.h"

FERRY_API void
ferry_client_data_step(ferry_client *c, uint64_t step)
{
	if (c != NULL) {
		c->data_step = step + 1;
	}
}

// A verifier's connection to server m of the map.
struct vconn {
	char      *url; // the map's URL it dialed (NULL: not open)
	nng_socket sock;
	nng_ctx    ctx;
	nng_aio   *aio;
};

struct ferry_verifier {
	char                       url[256];
	uint32_t                   tmo;  // each call's deadline (ms)
	struct psw_auth           *auth; // NULL: signing off
	struct psw_tls            *tls;  // NULL: plain tcp
	nng_socket                 sched;
	nng_ctx                    sched_ctx;
	nng_aio                   *sched_aio;
	uint64_t                   next_rid;
	Pswire__Placement         *pl; // the map held (NULL: none yet)
	struct vconn              *conns;
	size_t                     n_conns;
	// What ferry_verifier_map and ferry_verifier_audit lend out.
	uint64_t                  *tensor_len;
	struct ferry_shard        *shards;
	uint32_t                  *shard_server;
	struct ferry_audit_record *recs;
	size_t                     cap_recs;
	float                     *floats;
	size_t                     cap_floats;
	char                       err[512];
};

// vfail records why a call failed (ferry_verifier_last_error) and
// returns err.
static int
vfail(ferry_verifier *v, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->err, sizeof(v->err), fmt, ap);
	va_end(ap);
	return err;
}

FERRY_API int
ferry_verifier_open(const struct ferry_opts *o, const char *secret_file,
    ferry_verifier **out)
{
	ferry_verifier *v;
	char            why[300];
	int             rv;

	if (out == NULL || o == NULL || o->scheduler_url == NULL ||
	    *o->scheduler_url == '\0' || strlen(o->scheduler_url) >= 256) {
		return FERRY_EINVAL;
	}
	if ((v = fb_zalloc(sizeof(*v))) == NULL) {
		return FERRY_ENOMEM;
	}
	snprintf(v->url, sizeof(v->url), "%s", o->scheduler_url);
	v->tmo      = o->timeout_ms != 0 ? o->timeout_ms : 60000;
	v->next_rid = ((uint64_t) 0xfffe << 48) | 1; // apart from ranks'
	rv = psw_tls_open(o->tls_cert, o->tls_key, o->tls_ca, &v->tls, why,
	    sizeof(why));
	if (rv == FB_OK && secret_file != NULL && *secret_file != '\0') {
		rv = psw_auth_open(secret_file, PSW_ROLE_OPERATOR, 0, &v->auth,
		    why, sizeof(why));
	}
	if (rv != FB_OK) {
		psw_tls_close(v->tls);
		fb_free(v);
		return rv == FB_ENOMEM ? FERRY_ENOMEM : FERRY_EINVAL;
	}
	if (psw_req_open(v->tls, v->url, 1u << 30, 20, 500, &v->sched,
	        &v->sched_ctx, &v->sched_aio) != FB_OK) {
		psw_auth_close(v->auth);
		psw_tls_close(v->tls);
		fb_free(v);
		return FERRY_ECONNECT;
	}
	*out = v;
	return FERRY_OK;
}

// sched_call sends h to the scheduler and returns its reply header in *rh
// (free with pswire__header__free_unpacked).
static int
sched_call(ferry_verifier *v, Pswire__Header *h, uint8_t method,
    Pswire__Header **rh)
{
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	int               rv;

	h->request_id  = v->next_rid++;
	h->deadline_ms = v->tmo;
	h->rank        = UINT32_MAX;
	rv = psw_call_header(v->auth, v->sched_ctx, v->sched_aio, &h->base,
	    method, h->request_id, (int) v->tmo + PSW_ANSWER_MARGIN_MS, &ph,
	    &why);
	if (rv == FB_EREMOTE) {
		Pswire__Header *r  = (Pswire__Header *) ph;
		int             st = r->status;
		rv                 = vfail(v,
                    st == PSWIRE__STATUS__DEADLINE_EXCEEDED ? FERRY_ETIMEDOUT
		                                                            : FERRY_EREMOTE,
		                    "scheduler %s: %s: %s", v->url, psw_status_name(st),
		                    r->error);
		pswire__header__free_unpacked(r, NULL);
		return rv;
	}
	if (rv != FB_OK) {
		return vfail(v, ferry__map_err(rv), "scheduler %s: %s", v->url,
		    why ? why : fb_strerror(rv));
	}
	*rh = (Pswire__Header *) ph;
	return FERRY_OK;
}

// map_check says what makes map p unusable, or NULL.
static const char *
map_check(const Pswire__Placement *p)
{
	const Pswire__JobConfig *j = p->job;
	if (j == NULL || j->n_tensors == 0 || p->n_servers == 0 ||
	    p->n_servers > 4096 || p->n_shards == 0 || p->trainers == 0 ||
	    p->trainers > 65536) {
		return "no job, tensors, servers, shards or trainers";
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		const Pswire__ShardInfo *s = p->shards[i];
		if (s->tensor >= j->n_tensors || s->server >= p->n_servers ||
		    s->len == 0 || s->offset > j->tensors[s->tensor]->len ||
		    s->len > j->tensors[s->tensor]->len - s->offset) {
			return "a shard outside its tensor or the servers";
		}
	}
	return NULL;
}

// conns_open dials every server of the map held whose URL is new (a
// server restarted under another URL is dialed again).
static int
conns_open(ferry_verifier *v)
{
	const Pswire__Placement *p = v->pl;
	if (p->n_servers > v->n_conns) {
		struct vconn *cs = fb_realloc(v->conns,
		    p->n_servers * sizeof(*cs));
		if (cs == NULL) {
			return vfail(v, FERRY_ENOMEM, "out of memory");
		}
		memset(cs + v->n_conns, 0,
		    (p->n_servers - v->n_conns) * sizeof(*cs));
		v->conns   = cs;
		v->n_conns = p->n_servers;
	}
	for (size_t m = 0; m < p->n_servers; m++) {
		struct vconn *cn = &v->conns[m];
		if (cn->url != NULL && strcmp(cn->url, p->servers[m]) == 0) {
			continue;
		}
		if (cn->url != NULL) {
			nng_close(cn->sock);
			nng_aio_free(cn->aio);
			fb_free(cn->url);
			cn->url = NULL;
		}
		if (psw_req_open(v->tls, p->servers[m], 1u << 30, 20, 500,
		        &cn->sock, &cn->ctx, &cn->aio) != FB_OK) {
			return vfail(v, FERRY_ECONNECT,
			    "cannot dial server %s", p->servers[m]);
		}
		if ((cn->url = fb_strdup(p->servers[m])) == NULL ||
		    psw_auth_set_peer(v->auth, cn->ctx, PSW_ROLE_SERVER,
		        (uint32_t) m) != FB_OK) {
			fb_free(cn->url);
			cn->url = NULL;
			nng_close(cn->sock);
			nng_aio_free(cn->aio);
			return vfail(v, FERRY_ENOMEM, "out of memory");
		}
	}
	return FERRY_OK;
}

// job_fill describes the map held in *job (the arrays v lends).
static int
job_fill(ferry_verifier *v, struct ferry_verifier_job *job)
{
	const Pswire__Placement *p = v->pl;
	const Pswire__JobConfig *j = p->job;
	uint64_t *tl = fb_realloc(v->tensor_len, j->n_tensors * sizeof(*tl));
	if (tl != NULL) {
		v->tensor_len = tl;
	}
	struct ferry_shard *sh = fb_realloc(v->shards,
	    p->n_shards * sizeof(*sh));
	if (sh != NULL) {
		v->shards = sh;
	}
	uint32_t *ss = fb_realloc(v->shard_server, p->n_shards * sizeof(*ss));
	if (ss != NULL) {
		v->shard_server = ss;
	}
	uint8_t *gone = fb_zalloc(p->trainers);
	if (tl == NULL || sh == NULL || ss == NULL || gone == NULL) {
		fb_free(gone);
		return vfail(v, FERRY_ENOMEM, "out of memory");
	}
	for (size_t t = 0; t < j->n_tensors; t++) {
		tl[t] = j->tensors[t]->len;
	}
	for (size_t i = 0; i < p->n_shards; i++) {
		sh[i] = (struct ferry_shard) { .tensor = p->shards[i]->tensor,
			.offset                        = p->shards[i]->offset,
			.len                           = p->shards[i]->len,
			.code_bytes = p->shards[i]->len * 4 };
		ss[i] = p->shards[i]->server;
	}
	size_t n_gone = 0;
	for (size_t i = 0; i < p->n_gone_trainers; i++) {
		uint32_t r = p->gone_trainers[i];
		if (r < p->trainers && !gone[r]) {
			gone[r] = 1;
			n_gone++;
		}
	}
	fb_free(gone);
	const char *cp = j->codec_push;
	memset(job, 0, sizeof(*job));
	job->epoch        = p->epoch;
	job->trainers     = p->trainers;
	job->servers      = (uint32_t) p->n_servers;
	job->n_tensors    = j->n_tensors;
	job->tensor_len   = tl;
	job->n_shards     = p->n_shards;
	job->shards       = sh;
	job->shard_server = ss;
	job->seed         = j->seed;
	job->plain        = j->mode == PSWIRE__MODE__MODE_SYNC &&
	    (cp == NULL || *cp == '\0' || strcmp(cp, "none") == 0) &&
	    j->clip_norm == 0 && j->local_steps == 0;
	job->ended         = n_gone == p->trainers;
	job->n_quarantined = p->n_quarantined;
	job->quarantined   = p->quarantined;
	return FERRY_OK;
}

FERRY_API int
ferry_verifier_map(ferry_verifier *v, struct ferry_verifier_job *job)
{
	Pswire__Header              g  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	Pswire__Header             *rh = NULL;
	const char                 *bad;
	int                         rv;

	if (v == NULL || job == NULL) {
		return FERRY_EINVAL;
	}
	// The first waits for the job's first map; later ones get the map
	// in force at once.
	gp.min_epoch    = v->pl != NULL ? v->pl->epoch : 1;
	g.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	g.placement_req = &gp;
	if ((rv = sched_call(v, &g, PSWIRE__METHOD__GET_PLACEMENT, &rh)) !=
	    FERRY_OK) {
		return rv;
	}
	bad = rh->body_case != PSWIRE__HEADER__BODY_PLACEMENT
	    ? "no map"
	    : map_check(rh->placement);
	if (bad != NULL) {
		pswire__header__free_unpacked(rh, NULL);
		return vfail(v, FERRY_EPROTO, "scheduler %s: GetPlacement: %s",
		    v->url, bad);
	}
	Pswire__Placement *np = rh->placement;
	rh->placement         = NULL;
	rh->body_case         = PSWIRE__HEADER__BODY__NOT_SET;
	pswire__header__free_unpacked(rh, NULL);
	if (v->pl != NULL) {
		pswire__placement__free_unpacked(v->pl, NULL);
	}
	v->pl = np;
	if ((rv = conns_open(v)) != FERRY_OK) {
		return rv;
	}
	return job_fill(v, job);
}

// records_take checks the records of an Audit reply from server m against
// the map held and payload (len bytes) and copies them into v's buffers.
static int
records_take(ferry_verifier *v, uint32_t m, const Pswire__AuditReply *ar,
    const uint8_t *payload, size_t len)
{
	const Pswire__Placement *p      = v->pl;
	size_t                   floats = 0;
	for (size_t i = 0; i < ar->n_records; i++) {
		const Pswire__AuditRecord *r = ar->records[i];
		uint64_t                   b = r->len * 4;
		if (r->shard >= p->n_shards ||
		    r->len != p->shards[r->shard]->len || r->server != m ||
		    r->rank >= p->trainers || b > len ||
		    r->weights_offset > len - b || r->push_offset > len - b) {
			return vfail(v, FERRY_EPROTO,
			    "server %s: Audit record %zu (rank %u, shard %u, "
			    "%llu floats) does not fit the map or the payload",
			    p->servers[m], i, r->rank, r->shard,
			    (unsigned long long) r->len);
		}
		floats += 2 * (size_t) r->len;
	}
	if (ar->n_records > v->cap_recs) {
		void *n = fb_realloc(v->recs,
		    ar->n_records * sizeof(*v->recs));
		if (n == NULL) {
			return vfail(v, FERRY_ENOMEM, "out of memory");
		}
		v->recs     = n;
		v->cap_recs = ar->n_records;
	}
	if (floats > v->cap_floats) {
		void *n = fb_realloc(v->floats, floats * sizeof(float));
		if (n == NULL) {
			return vfail(v, FERRY_ENOMEM, "out of memory");
		}
		v->floats     = n;
		v->cap_floats = floats;
	}
	float *f = v->floats;
	for (size_t i = 0; i < ar->n_records; i++) {
		const Pswire__AuditRecord *r = ar->records[i];
		size_t                     b = (size_t) r->len * 4;
		memcpy(f, payload + r->weights_offset, b);
		memcpy(f + r->len, payload + r->push_offset, b);
		v->recs[i] = (struct ferry_audit_record) { .rank = r->rank,
			.version                                 = r->version,
			.data_step = r->data_step,
			.shard     = r->shard,
			.len       = r->len,
			.n_samples = r->n_samples,
			.reason    = r->reason,
			.server    = r->server,
			.weights   = f,
			.push      = f + r->len };
		f += 2 * r->len;
	}
	return FERRY_OK;
}

FERRY_API int
ferry_verifier_audit(ferry_verifier *v, uint32_t server, uint32_t max,
    const struct ferry_audit_record **recs, size_t *n, uint64_t *dropped)
{
	Pswire__Header       h  = PSWIRE__HEADER__INIT;
	Pswire__AuditRequest aq = PSWIRE__AUDIT_REQUEST__INIT;
	nng_msg             *req, *rep = NULL;
	uint8_t             *payload;
	struct psw_frame     f;
	ProtobufCMessage    *ph  = NULL;
	const char          *why = "";
	int                  rv;

	if (v == NULL || recs == NULL || n == NULL) {
		return FERRY_EINVAL;
	}
	*n = 0;
	if (v->pl == NULL) {
		return vfail(v, FERRY_ESTATE,
		    "no map yet: ferry_verifier_map");
	}
	if (server >= v->pl->n_servers) {
		return vfail(v, FERRY_EINVAL, "server %u: the map has %zu",
		    server, v->pl->n_servers);
	}
	struct vconn *cn = &v->conns[server];
	aq.max           = max != 0 ? max : UINT32_MAX; // the server caps it
	h.body_case      = PSWIRE__HEADER__BODY_AUDIT_REQ;
	h.audit_req      = &aq;
	h.request_id     = v->next_rid++;
	h.deadline_ms    = v->tmo;
	h.rank           = UINT32_MAX;
	size_t hl        = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&req, hl, 0, &payload) != FB_OK) {
		return vfail(v, FERRY_ENOMEM, "out of memory");
	}
	if (psw_msg_finish(req, PSWIRE__METHOD__AUDIT, 0, &h.base, hl, 0) !=
	    FB_OK) {
		nng_msg_free(req);
		return vfail(v, FERRY_EINVAL, "Audit could not be framed");
	}
	rv = psw_call(v->auth, cn->ctx, cn->aio, req, PSWIRE__METHOD__AUDIT,
	    h.request_id, (int) v->tmo, &rep, &f, &ph, &why);
	Pswire__Header *rh = (Pswire__Header *) ph;
	if (rv == FB_EREMOTE) {
		rv = vfail(v, FERRY_EREMOTE, "server %s: Audit: %s: %s",
		    cn->url, psw_status_name((int) rh->status), rh->error);
	} else if (rv != FB_OK) {
		rv = vfail(v, ferry__map_err(rv), "server %s: Audit: %s",
		    cn->url, why ? why : fb_strerror(rv));
	} else if (rh->body_case != PSWIRE__HEADER__BODY_AUDIT_REP) {
		rv = vfail(v, FERRY_EPROTO, "server %s: Audit: no records",
		    cn->url);
	} else if ((rv = records_take(v, server, rh->audit_rep, f.payload,
	                f.payload_len)) == FERRY_OK) {
		*recs = v->recs;
		*n    = rh->audit_rep->n_records;
		if (dropped != NULL) {
			*dropped = rh->audit_rep->dropped;
		}
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	if (rep != NULL) {
		nng_msg_free(rep);
	}
	return rv;
}

FERRY_API int
ferry_verifier_report(ferry_verifier *v, const struct ferry_verdict *vd)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__VerifiedRequest vq = PSWIRE__VERIFIED_REQUEST__INIT;
	Pswire__Header         *rh = NULL;
	int                     rv;

	if (v == NULL || vd == NULL) {
		return FERRY_EINVAL;
	}
	vq.rank           = vd->rank;
	vq.version        = vd->version;
	vq.data_step      = vd->data_step;
	vq.shard          = vd->shard;
	vq.server         = vd->server;
	vq.mismatch       = vd->mismatch != 0;
	vq.pushed_crc     = vd->pushed_crc;
	vq.recomputed_crc = vd->recomputed_crc;
	vq.differing      = vd->differing;
	vq.max_abs_diff   = vd->max_abs_diff;
	h.body_case       = PSWIRE__HEADER__BODY_VERIFIED_REQ;
	h.verified_req    = &vq;
	if ((rv = sched_call(v, &h, PSWIRE__METHOD__VERIFIED, &rh)) ==
	    FERRY_OK) {
		pswire__header__free_unpacked(rh, NULL);
	}
	return rv;
}

FERRY_API const char *
ferry_verifier_last_error(const ferry_verifier *v)
{
	return v != NULL ? v->err : "";
}

FERRY_API void
ferry_verifier_close(ferry_verifier *v)
{
	if (v == NULL) {
		return;
	}
	for (size_t m = 0; m < v->n_conns; m++) {
		if (v->conns[m].url != NULL) {
			nng_close(v->conns[m].sock);
			nng_aio_free(v->conns[m].aio);
			fb_free(v->conns[m].url);
		}
	}
	fb_free(v->conns);
	nng_close(v->sched);
	nng_aio_free(v->sched_aio);
	if (v->pl != NULL) {
		pswire__placement__free_unpacked(v->pl, NULL);
	}
	psw_auth_close(v->auth);
	psw_tls_close(v->tls);
	fb_free(v->tensor_len);
	fb_free(v->shards);
	fb_free(v->shard_server);
	fb_free(v->recs);
	fb_free(v->floats);
	fb_free(v);
}
