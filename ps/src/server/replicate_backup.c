// replicate_backup.c — --replicas on a backup: checking and applying
// the Replicate updates a dense shard's primary forwards (replicate.c
// sends them; a table shard's are rows_repl.c's), and the test hook that
// corrupts backups.
//
// DESIGN. See replicate.c: a backup checks the update's base (the CRC of
// its weights) and floats, acknowledges, and only then applies it with
// the primary's own pass (ps__repl_apply_agg), reading the request's
// bytes in place; a backup that diverged refuses later updates until its
// primary resyncs it.
#include <stdio.h>
#include <string.h>

#include "server_impl.h"
#include "test_hooks.h"

// replicate_check checks Replicate q (payload p, checked length) against
// backup shard sh: with init it installs the version-0 weights; an update
// whose base and floats check is to be applied after the acknowledgement
// (*apply set; ps__on_replicate applies it from the request's own bytes,
// nothing copied). Returns the status to answer (OK: applied, to apply,
// or already there) with a message in why. mu held.
static int
replicate_check(struct ps_server *s, struct srv_shard *sh,
    const Pswire__ReplicateRequest *q, const uint8_t *p, int *apply, char *why,
    size_t n)
{
	*apply = 0;
	if (q->init) {
		if (!sh->init) {
			if (!fb_copy_finite(sh->x, p, sh->len)) {
				memset(sh->x, 0, sh->len * 4);
				snprintf(why, n,
				    "initial weights hold NaN or Inf");
				return PSWIRE__STATUS__INVALID_ARGUMENT;
			}
			sh->crc_ok = 0;
			if (ps__shard_crc(sh) != q->crc) {
				memset(sh->x, 0, sh->len * 4);
				sh->crc_ok = 0;
				snprintf(why, n,
				    "initial weights' crc %08x, primary %08x",
				    sh->crc, q->crc);
				return PSWIRE__STATUS__DATA_LOSS;
			}
			sh->init = 1;
			ps__ref_publish(s, sh);
		}
		return PSWIRE__STATUS__OK;
	}
	if (!sh->init || q->version > sh->version + 1) {
		snprintf(why, n, "backup at version %llu, update makes %llu",
		    (unsigned long long) sh->version,
		    (unsigned long long) q->version);
		return PSWIRE__STATUS__UNAVAILABLE;
	}
	if (q->version <= sh->version) {
		return PSWIRE__STATUS__OK; // a retry of one applied
	}
	if (q->samples == 0 || q->samples > (1ull << 40)) {
		snprintf(why, n, "samples %llu out of range",
		    (unsigned long long) q->samples);
		return PSWIRE__STATUS__INVALID_ARGUMENT;
	}
	uint32_t crc = ps__shard_crc(sh);
	if (crc != q->crc) {
		FB_LOG(FB_LOG_ERR, "replica",
		    "shard %u diverged from its primary at version %llu "
		    "(crc %08x, primary %08x); awaiting a resync",
		    sh->id, (unsigned long long) sh->version, crc, q->crc);
		sh->init = 0; // refuse later updates until resynced
		snprintf(why, n, "backup's weights differ (crc %08x vs %08x)",
		    crc, q->crc);
		return PSWIRE__STATUS__DATA_LOSS;
	}
	if (!fb_all_finite(p, sh->len)) {
		snprintf(why, n, "aggregate holds NaN or Inf");
		return PSWIRE__STATUS__INVALID_ARGUMENT;
	}
	*apply = 1;
	return PSWIRE__STATUS__OK;
}

void
ps__on_replicate(struct ps_server *s, struct ps_call *c)
{
	Pswire__ReplicateRequest *q;
	Pswire__Header            h = PSWIRE__HEADER__INIT;
	char                      why[160];
	int                       st;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_REPLICATE_REQ) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Replicate needs a replicate_req body");
		return;
	}
	q = c->hdr->replicate_req;
	pthread_mutex_lock(&s->mu);
	if (s->pl != NULL && q->table) {
		ps__rows_on_replicate(s, c, q); // rows_repl.c
		goto out;
	}
	if (s->pl == NULL || q->shard >= s->n_global) {
		ps__server_reply_err(s, c,
		    s->pl == NULL ? PSWIRE__STATUS__UNAVAILABLE
		                  : PSWIRE__STATUS__INVALID_ARGUMENT,
		    "replicate shard %u: not started or no such shard",
		    q->shard);
		goto out;
	}
	// Only the shard's primary in this server's map updates its backups
	// (with authentication on; PERMISSION_DENIED names the primary).
	if (!ps__call_acts_as(c, PSW_ROLE_SERVER,
	        s->pl->shards[q->shard]->server, 0)) {
		goto out;
	}
	struct srv_shard *sh = &s->shards[q->shard];
	if (s->local[q->shard] < 0 || !sh->backup) {
		// Not a backup here (yet): the rebuild or the map that makes
		// it one may be on its way.
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "shard %u is not held here as a backup (epoch %llu)",
		    q->shard, (unsigned long long) s->pl->epoch);
		goto out;
	}
	if (c->frame.payload_len != sh->len * 4) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u: %llu payload bytes, expected %llu", q->shard,
		    (unsigned long long) c->frame.payload_len,
		    (unsigned long long) sh->len * 4);
		goto out;
	}
	why[0]           = '\0';
	int      apply   = 0;
	uint64_t samples = q->samples;
	st = replicate_check(s, sh, q, c->frame.payload, &apply, why,
	    sizeof(why));
	if (st != PSWIRE__STATUS__OK) {
		ps__server_reply_err(s, c, st, "shard %u: %s", q->shard, why);
		goto out;
	}
	// Acknowledged first: the aggregate is held here (the request's
	// bytes, kept past the reply, under mu) and applied before anything
	// else sees the shard, so the primary's wait ends one apply sooner.
	// The payload is read in place when it is float-aligned (fwd_build
	// pads the header so that it is); else it is copied to s->sum.
	const float *agg = NULL;
	nng_msg     *req = NULL;
	if (apply &&
	    ((uintptr_t) c->frame.payload & (_Alignof(float) - 1)) == 0) {
		agg = (const float *) (const void *) c->frame.payload;
		req = ps__call_take_req(c);
	} else if (apply) {
		memcpy(s->sum, c->frame.payload, sh->len * 4);
		agg = s->sum;
	}
	h.request_id = c->hdr->request_id;
	ps__call_reply(c, &h); // releases c (q with it)
	if (apply) {
		ps__repl_apply_agg(s, sh, agg, NULL, samples);
	}
	if (req != NULL) {
		nng_msg_free(req);
	}
out:
	pthread_mutex_unlock(&s->mu);
}

int
ps_server_test_corrupt_backups(struct ps_server *s)
{
	int n = 0;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; s->pl != NULL && i < s->n_global; i++) {
		struct srv_shard *sh = &s->shards[i];
		if (s->local[i] >= 0 && sh->backup && sh->init) {
			uint32_t bits;
			memcpy(&bits, &sh->x[0], 4);
			bits ^= 1u;
			memcpy(&sh->x[0], &bits, 4);
			sh->crc_ok = 0;
			n++;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return n;
}
