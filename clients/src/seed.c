// seed.c — a trainer's part in re-seeding a lost shard: when a new map
// raises a shard's seed_gen (its only copy died with its server, no
// replica or snapshot held it), the client offers the values it holds for
// it, at the version it holds, to the shard's new server, which keeps the
// newest offer (docs/operations.md §12).
//
// DESIGN. What the client holds of a shard is where its last pull put it
// (c->held, kept by reply.c): the pull reference with a pull codec (the
// reference both sides keep, owned here), else the caller's buffer (no
// copy is made on the hot path; ferry.h asks callers to leave the buffers
// of the last pull alone until the next one, and a push whose gradient
// buffer is that buffer forgets it: ferry__seed_forget_aliases). Offers
// are sent once per raised seed_gen, right after the map that raised it
// is installed, when no request is in flight: one synchronous Push with
// PushRequest.seed per server, on the connection's probe context.
#include <stdio.h>
#include <string.h>

#include "client_impl.h"

// offer sends server m an offer of the k shards in ids (each held) and
// returns FERRY_OK or the failure (logged by the caller, never fatal: the
// server opens the shard with the other trainers' offers); *unavailable
// says whether the server answered UNAVAILABLE.
static int
offer(ferry_client *c, size_t m, const uint32_t *ids, size_t k,
    int *unavailable)
{
	struct conn        *cn = &c->conns[m];
	Pswire__Header      h  = PSWIRE__HEADER__INIT;
	Pswire__PushRequest pr = PSWIRE__PUSH_REQUEST__INIT;
	Pswire__ShardRef   *refs;
	Pswire__ShardRef  **ptrs;
	nng_msg            *req, *rep = NULL;
	uint8_t            *payload;
	struct psw_frame    f;
	ProtobufCMessage   *ph   = NULL;
	const char         *why  = "";
	uint64_t            plen = 0;
	size_t              hl;
	int                 rv;

	refs = fb_alloc(k * sizeof(*refs));
	ptrs = fb_alloc(k * sizeof(*ptrs));
	if (refs == NULL || ptrs == NULL) {
		fb_free(refs);
		fb_free(ptrs);
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	for (size_t j = 0; j < k; j++) {
		const Pswire__ShardInfo *si = c->pl->shards[ids[j]];
		pswire__shard_ref__init(&refs[j]);
		refs[j].shard   = ids[j];
		refs[j].version = c->shard_ver[ids[j]];
		refs[j].codec   = c->cnone.id;
		refs[j].offset  = plen;
		refs[j].length  = si->len * 4;
		plen += refs[j].length;
		ptrs[j] = &refs[j];
	}
	pr.n_shards   = k;
	pr.shards     = ptrs;
	pr.seed       = 1;
	h.request_id  = c->next_rid++;
	h.deadline_ms = ferry__timeout(c);
	h.epoch       = c->pl->epoch;
	h.rank        = (uint32_t) c->opts.rank;
	h.body_case   = PSWIRE__HEADER__BODY_PUSH_REQ;
	h.push_req    = &pr;
	hl            = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&req, hl, plen, &payload) != FB_OK) {
		rv = ferry__fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t j = 0; j < k; j++) {
		memcpy(payload + refs[j].offset, c->held[ids[j]],
		    refs[j].length);
	}
	if (psw_msg_finish(req, PSWIRE__METHOD__PUSH, 0, &h.base, hl, plen) !=
	    FB_OK) {
		nng_msg_free(req);
		rv = ferry__fail(c, FERRY_EINVAL, "offer could not be framed");
		goto done;
	}
	c->stats.requests++;
	rv = psw_call(c->auth, cn->ctx, cn->aio, req, PSWIRE__METHOD__PUSH,
	    h.request_id, (int) h.deadline_ms, &rep, &f, &ph, &why);
	*unavailable = 0;
	if (rv == FB_EREMOTE) {
		Pswire__Header *r = (Pswire__Header *) ph;
		*unavailable      = r->status == PSWIRE__STATUS__UNAVAILABLE;
		rv = ferry__fail(c, FERRY_EREMOTE, "server %s: %s: %s",
		    c->pl->servers[m], psw_status_name((int) r->status),
		    r->error);
	} else if (rv != FB_OK) {
		rv = ferry__fail(c, ferry__map_err(rv), "server %s: %s",
		    c->pl->servers[m], why ? why : fb_strerror(rv));
	}
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
	if (rep != NULL) {
		nng_msg_free(rep);
	}
done:
	fb_free(refs);
	fb_free(ptrs);
	return rv;
}

// offer_until_taken offers until server m takes the offer or a call's
// deadline passes: a server that has not applied the map re-seeding the
// shards yet answers UNAVAILABLE (it has no shard to put the values in),
// and a server restarting in its slot may not listen yet. A repeat is
// harmless: an offer for a shard that is no longer seeding is ignored.
static int
offer_until_taken(ferry_client *c, size_t m, const uint32_t *ids, size_t k)
{
	uint64_t deadline = fb_clock_ms() + ferry__timeout(c);
	int      rv, unavailable = 0;
	while ((rv = offer(c, m, ids, k, &unavailable)) != FERRY_OK &&
	    (rv == FERRY_ECONNECT || rv == FERRY_ETIMEDOUT || unavailable) &&
	    fb_clock_ms() < deadline) {
		fb_sleep_us(20000);
	}
	return rv;
}

void
ferry__seed_seen(ferry_client *c)
{
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->seed_seen[i] = c->pl->shards[i]->seed_gen;
	}
}

void
ferry__seed_offers(ferry_client *c)
{
	uint32_t *ids = fb_alloc(c->pl->n_shards * sizeof(uint32_t));
	if (ids == NULL) {
		return; // the server opens the shard with others' offers
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		size_t k = 0;
		for (size_t j = 0; j < c->conns[m].n; j++) {
			uint32_t i = c->conns[m].shards[j];
			if (c->pl->shards[i]->seed_gen <= c->seed_seen[i]) {
				continue;
			}
			c->seed_seen[i] = c->pl->shards[i]->seed_gen;
			// A push its old server took ("applied", ABORTED: only
			// the pull left) died with that server: the re-seeded
			// shard holds only the offers, so push again (marked a
			// re-send: a shard already past counts it once).
			if (c->need[i] == NEED_PULL) {
				c->need[i] = NEED_MAIN;
			}
			if (c->held[i] == NULL) {
				c->recovery.seeds_unheld++;
			} else {
				ids[k++] = i;
			}
		}
		if (k == 0) {
			continue;
		}
		int  rv = offer_until_taken(c, m, ids, k);
		char msg[700];
		if (rv == FERRY_OK) {
			c->recovery.seeds_offered += k;
			snprintf(msg, sizeof(msg),
			    "offered %zu shard(s) to their re-seed on server "
			    "%s (the only copy was lost with a server)",
			    k, c->pl->servers[m]);
		} else {
			snprintf(msg, sizeof(msg),
			    "offer of %zu shard(s) to their re-seed on server "
			    "%s failed: %s",
			    k, c->pl->servers[m], c->err);
		}
		if (c->opts.log != NULL) {
			c->opts.log(c->opts.log_arg,
			    rv == FERRY_OK ? FERRY_LOG_NOTICE : FERRY_LOG_WARN,
			    msg);
		}
	}
	fb_free(ids);
}

void
ferry__seed_forget_aliases(ferry_client *c, const float *const *g)
{
	if (g == NULL) {
		return;
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		const Pswire__ShardInfo *si = c->pl->shards[i];
		if (c->held[i] == g[si->tensor] + si->offset) {
			c->held[i] = NULL;
		}
	}
}
