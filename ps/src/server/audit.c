// audit.c — spot checks on the server (issue 31, docs/security.md): at
// each sync round's close, the keyed draw picks some trainers' pushes (and
// the round's outliers, under a robust aggregate), and they are kept with
// the weights they were computed on until a verifier (an operator)
// collects them with the Audit rpc and recomputes them.
//
// DESIGN.
// - The draw is a keyed hash of (rank, version) (ps__audit_draw): every
//   server of a job has the same key from the scheduler, so they keep the
//   same steps of the same trainers, and a trainer, which never learns the
//   key, cannot tell which of its pushes will be checked. The hash is not
//   a cryptographic MAC: its outputs never leave the servers.
// - The store is a ring of opts.audit_keep records, oldest first, each
//   with room for two copies of the largest shard (weights, push), made
//   once with the first map: a round keeps pushes without allocating (the
//   buffer is one fb_alloc, whose pages the OS commits as records fill
//   them). When it is full, new picks are dropped and counted: a verifier
//   that falls behind loses the newest, not the ones it is about to read.
// - What is kept is what a verifier needs to recompute the push bit for
//   bit: the push's decoded fp32 values, which equal the trainer's bytes
//   only when the job pushes fp32 (codec "none"; other jobs' picks are
//   counted as skipped), the data step it claims (PushRequest.data_step;
//   unclaimed pushes are skipped too), and the weights the trainers held at
//   that version: the shard's weights, or with a pull codec the pull
//   reference they pulled (pull_ref.c).
// - Audit hands records out once each, oldest first, at most
//   PS_AUDIT_REPLY_MAX and opts.max_msg bytes of payload a reply (at least
//   one record), under mu like every reply.
#include <stdio.h>
#include <string.h>

#include "server_impl.h"
#include "test_hooks.h"

// The most records one Audit reply carries.
#define PS_AUDIT_REPLY_MAX 64u

// opts.audit_keep's default.
#define PS_AUDIT_KEEP_DEFAULT 64u

// One kept push: AuditRecord's fields; its floats are at buf + slot x 2 x
// cap (weights) and cap floats further (the push).
struct ps_audit_rec {
	uint32_t rank, shard, n_samples, reason;
	uint64_t version, data_step, len;
};

struct ps_audit {
	double               rate;
	uint64_t             key;
	uint32_t             keep;    // records the ring holds
	size_t               cap;     // floats of each copy: the largest shard
	struct ps_audit_rec *rec;     // [keep]
	float               *buf;     // [keep x 2 x cap]
	uint32_t             head, n; // the oldest record, how many held
	uint64_t             kept, dropped, served, skipped;
};

double
ps__audit_draw(uint64_t key, uint32_t rank, uint64_t version)
{
	// splitmix64: the golden-ratio step, then its finaliser (a
	// bijection whose every output bit depends on every input bit).
	uint64_t z = key ^ ((uint64_t) rank << 40) ^ version;
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double) (z >> 11) * 0x1.0p-53; // the top 53 bits in [0, 1)
}

void
ps__audit_close(struct ps_server *s)
{
	if (s->audit != NULL) {
		fb_free(s->audit->rec);
		fb_free(s->audit->buf);
		fb_free(s->audit);
		s->audit = NULL;
	}
}

int
ps__audit_open(struct ps_server *s)
{
	ps__audit_close(s);
	double rate = s->audit_rate;
	if (!(rate > 0.0)) {
		return FB_OK; // spot checks off (0, or not a number)
	}
	struct ps_audit *a = fb_zalloc(sizeof(*a));
	if (a == NULL) {
		return FB_ENOMEM;
	}
	a->rate = rate > 1.0 ? 1.0 : rate;
	a->key  = s->audit_key;
	a->keep = s->opts.audit_keep > 0 ? s->opts.audit_keep
	                                 : PS_AUDIT_KEEP_DEFAULT;
	a->cap  = s->stage_len > 0 ? s->stage_len : 1;
	a->rec  = fb_zalloc(a->keep * sizeof(*a->rec));
	a->buf  = fb_alloc((size_t) a->keep * 2 * a->cap * sizeof(float));
	if (a->rec == NULL || a->buf == NULL) {
		fb_free(a->rec);
		fb_free(a->buf);
		fb_free(a);
		return FB_ENOMEM;
	}
	s->audit = a;
	FB_LOG(FB_LOG_NOTICE, "audit",
	    "spot checks on: keeping %g of the sync pushes (and the "
	    "outliers), up to %u until a verifier collects them",
	    a->rate, a->keep);
	return FB_OK;
}

// keep stores rank r's push of sh's round as the newest record (room
// checked by the caller), for reason. mu held.
static void
keep(struct ps_server *s, struct srv_shard *sh, uint32_t r, uint32_t reason)
{
	struct ps_audit     *a    = s->audit;
	uint32_t             slot = (a->head + a->n) % a->keep;
	struct ps_audit_rec *rec  = &a->rec[slot];
	float               *w    = a->buf + (size_t) slot * 2 * a->cap;
	// The weights the trainers pulled at this version (pull.c): the
	// shard's, or with a pull codec the reference they hold.
	const float *x = s->job.pull_none || sh->ref == NULL ? sh->x : sh->ref;

	rec->rank      = r;
	rec->shard     = sh->id;
	rec->n_samples = sh->n_samp[r];
	rec->reason    = reason;
	rec->version   = sh->version;
	rec->data_step = sh->claim[r];
	rec->len       = sh->len;
	memcpy(w, x, sh->len * sizeof(float));
	// A lent push (any alignment) or a staged one: the same bytes.
	memcpy(w + a->cap,
	    sh->src[r] != NULL ? (const void *) sh->src[r]
	                       : (const void *) sh->slot[r],
	    sh->len * sizeof(float));
	a->n++;
	a->kept++;
	obs_counter_add(s->audits_kept, 1);
}

void
ps__audit_round(struct ps_server *s, struct srv_shard *sh,
    const uint8_t *outlier)
{
	struct ps_audit *a = s->audit;
	if (a == NULL) {
		return;
	}
	// The decoded values are the trainer's bytes only when it pushed
	// fp32; with a codec the verifier could not compare bit for bit.
	int fp32 = s->job.cpush.id == COMP_NONE && !s->job.push_auto;
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (sh->state[r] != PS_SLOT_PUSHED) {
			continue;
		}
		uint32_t reason = outlier != NULL && outlier[r]        ? 2
		    : ps__audit_draw(a->key, r, sh->version) < a->rate ? 1
		                                                       : 0;
		if (reason == 0) {
			continue;
		}
		if (sh->claim[r] == 0 || !fp32 || sh->len > a->cap ||
		    (sh->src[r] == NULL && sh->slot[r] == NULL)) {
			a->skipped++;
		} else if (a->n == a->keep) {
			a->dropped++;
			obs_counter_add(s->audits_dropped, 1);
		} else {
			keep(s, sh, r, reason);
		}
	}
}

// take answers c with the n oldest records (n >= 1, held), which leave the
// store once the reply is built; an error reply otherwise (they stay).
// mu held.
static void
take(struct ps_server *s, struct ps_call *c, uint32_t n)
{
	struct ps_audit     *a   = s->audit;
	Pswire__Header       h   = PSWIRE__HEADER__INIT;
	Pswire__AuditReply   rep = PSWIRE__AUDIT_REPLY__INIT;
	Pswire__AuditRecord  recs[PS_AUDIT_REPLY_MAX];
	Pswire__AuditRecord *ptrs[PS_AUDIT_REPLY_MAX];
	uint64_t             off = 0;
	nng_msg             *m;
	uint8_t             *payload;

	for (uint32_t i = 0; i < n; i++) {
		const struct ps_audit_rec *k =
		    &a->rec[(a->head + i) % a->keep];
		Pswire__AuditRecord *r = &recs[i];
		pswire__audit_record__init(r);
		ptrs[i]           = r;
		r->rank           = k->rank;
		r->version        = k->version;
		r->data_step      = k->data_step;
		r->shard          = k->shard;
		r->len            = k->len;
		r->n_samples      = k->n_samples;
		r->reason         = k->reason;
		r->server         = s->index;
		r->weights_offset = off;
		r->push_offset    = off + k->len * 4;
		off += 2 * k->len * 4;
	}
	rep.n_records = n;
	rep.records   = ptrs;
	rep.dropped   = a->dropped;
	h.request_id  = c->hdr->request_id;
	h.body_case   = PSWIRE__HEADER__BODY_AUDIT_REP;
	h.audit_rep   = &rep;
	size_t hl     = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&m, hl, off, &payload) != FB_OK) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory for an Audit reply of %u records", n);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t     slot = (a->head + i) % a->keep;
		const float *w    = a->buf + (size_t) slot * 2 * a->cap;
		size_t       len  = a->rec[slot].len * 4;
		// Little-endian hosts only (checked at start-up).
		memcpy(payload + recs[i].weights_offset, w, len);
		memcpy(payload + recs[i].push_offset, w + a->cap, len);
	}
	if (psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h.base, hl,
	        off) != FB_OK) {
		nng_msg_free(m);
		ps__server_reply_err(s, c, PSWIRE__STATUS__INTERNAL,
		    "an Audit reply of %u records could not be framed", n);
		return;
	}
	a->head = (a->head + n) % a->keep;
	a->n -= n;
	a->served += n;
	obs_counter_add(s->audits_served, n);
	atomic_fetch_add_explicit(&s->bytes_out, nng_msg_len(m),
	    memory_order_relaxed);
	ps__call_reply_msg(c, m);
}

void
ps__on_audit(struct ps_server *s, struct ps_call *c)
{
	char who[48];

	// The kept pushes name the trainers' steps the servers check: a
	// trainer that could read them would know which to falsify.
	if (ps__rpc_auth_on(s->rpc) && c->peer.role != PSW_ROLE_OPERATOR) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__PERMISSION_DENIED,
		    "%s may not collect kept pushes (Audit is an operator's)",
		    psw_ident_format(c->peer, who, sizeof(who)));
		return;
	}
	if (c->hdr->body_case != PSWIRE__HEADER__BODY_AUDIT_REQ) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Audit without an AuditRequest body");
		return;
	}
	uint32_t max = c->hdr->audit_req->max;
	if (max == 0) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "AuditRequest.max is 0: ask for 1 or more records (at "
		    "most %u a reply)",
		    PS_AUDIT_REPLY_MAX);
		return;
	}
	max = max < PS_AUDIT_REPLY_MAX ? max : PS_AUDIT_REPLY_MAX;
	pthread_mutex_lock(&s->mu);
	struct ps_audit *a = s->audit;
	if (a == NULL) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "spot checks are off on this server (the scheduler's "
		    "--spot-check is 0): no pushes are kept");
		pthread_mutex_unlock(&s->mu);
		return;
	}
	// As many of the oldest as max and the message cap allow, at least
	// one (a record is two shards: smaller than any message a job
	// moves).
	uint64_t budget = s->opts.max_msg > 0 ? s->opts.max_msg : UINT64_MAX;
	uint64_t bytes  = 0;
	uint32_t n      = 0;
	while (n < max && n < a->n) {
		uint64_t b = 8 * a->rec[(a->head + n) % a->keep].len;
		if (n > 0 && bytes + b > budget) {
			break;
		}
		bytes += b;
		n++;
	}
	if (n == 0) {
		// None kept yet: an empty reply that says how many were lost.
		Pswire__Header     h   = PSWIRE__HEADER__INIT;
		Pswire__AuditReply rep = PSWIRE__AUDIT_REPLY__INIT;
		rep.dropped            = a->dropped;
		h.request_id           = c->hdr->request_id;
		h.body_case            = PSWIRE__HEADER__BODY_AUDIT_REP;
		h.audit_rep            = &rep;
		ps__call_reply(c, &h);
	} else {
		take(s, c, n);
	}
	pthread_mutex_unlock(&s->mu);
}

void
ps__audit_stats(struct ps_server *s, char *buf, size_t n)
{
	const struct ps_audit *a = s->audit;
	snprintf(buf, n,
	    "# Audit\r\naudit_rate:%g\r\naudits_held:%u\r\naudits_kept:%llu\r\n"
	    "audits_dropped:%llu\r\naudits_served:%llu\r\n"
	    "audits_skipped:%llu\r\n",
	    a != NULL ? a->rate : 0.0, a != NULL ? a->n : 0,
	    (unsigned long long) (a != NULL ? a->kept : 0),
	    (unsigned long long) (a != NULL ? a->dropped : 0),
	    (unsigned long long) (a != NULL ? a->served : 0),
	    (unsigned long long) (a != NULL ? a->skipped : 0));
}

void
ps_server_test_audit(struct ps_server *s, double rate, uint64_t key)
{
	pthread_mutex_lock(&s->mu);
	s->audit_rate = rate;
	s->audit_key  = key;
	s->audit_set  = 1;
	if (s->pl != NULL && ps__audit_open(s) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "audit", "out of memory for spot checks");
	}
	pthread_mutex_unlock(&s->mu);
}

double
ps_server_test_audit_draw(uint64_t key, uint32_t rank, uint64_t version)
{
	return ps__audit_draw(key, rank, version);
}
