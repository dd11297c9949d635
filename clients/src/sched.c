// sched.c — the scheduler's side of a client: header-only calls to the
// scheduler, fetching the placement map (the first one and, when a shard
// moved, the next epoch), checking it against the declared tensor table,
// and the reset after a rollback. The connections a map names are
// conn.c's.
#include "client_impl.h"

// ferry__sched_call sends h (no payload) to the scheduler and returns the
// reply header in *rh (free with pswire__header__free_unpacked). It waits
// PSW_ANSWER_MARGIN_MS past the deadline it sends: the scheduler answers
// first, even a call it parked.
int
ferry__sched_call(ferry_client *c, Pswire__Header *h, uint8_t method,
    uint32_t tmo, Pswire__Header **rh)
{
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	int               rv;

	h->request_id  = c->next_rid++;
	h->deadline_ms = tmo;
	h->rank        = (uint32_t) c->opts.rank;
	c->stats.requests++;
	rv = psw_call_header(c->auth, c->sched_ctx, c->sched_aio, &h->base,
	    method, h->request_id, (int) tmo + PSW_ANSWER_MARGIN_MS, &ph,
	    &why);
	if (rv == FB_EREMOTE) {
		Pswire__Header *r   = (Pswire__Header *) ph;
		int             st  = r->status;
		int             err = FERRY_EREMOTE;
		if (st == PSWIRE__STATUS__FAILED_PRECONDITION) {
			err = FERRY_EMISMATCH;
		} else if (st == PSWIRE__STATUS__DEADLINE_EXCEEDED) {
			err = FERRY_ETIMEDOUT;
		}
		ferry__fail(c, err, "scheduler %s: %s: %s", c->url,
		    psw_status_name(st), r->error);
		pswire__header__free_unpacked(r, NULL);
		return err;
	}
	if (rv != FB_OK) {
		return ferry__fail(c, ferry__map_err(rv), "scheduler %s: %s",
		    c->url, why ? why : fb_strerror(rv));
	}
	*rh = (Pswire__Header *) ph;
	return FERRY_OK;
}

// ferry__placement_check validates the map against the declared table.
int
ferry__placement_check(ferry_client *c, const Pswire__Placement *pl)
{
	if (pl->job == NULL || pl->job->n_tensors != c->n_tensors ||
	    pl->n_servers == 0 || pl->n_servers > 4096) {
		return ferry__fail(c, FERRY_EPROTO,
		    "placement does not match the declared tensor table");
	}
	for (size_t i = 0; i < pl->n_shards; i++) {
		const Pswire__ShardInfo *s = pl->shards[i];
		if (s->tensor >= c->n_tensors || s->server >= pl->n_servers ||
		    s->len == 0 || s->offset > c->tensor_len[s->tensor] ||
		    s->len > c->tensor_len[s->tensor] - s->offset) {
			return ferry__fail(c, FERRY_EPROTO,
			    "placement shard %zu is out of range", i);
		}
	}
	return FERRY_OK;
}

// ferry__map_fetch asks the scheduler for the map of at least min_epoch
// (0: the membership map) and returns the reply header in *rh.
int
ferry__map_fetch(ferry_client *c, uint64_t min_epoch, Pswire__Header **rh)
{
	Pswire__Header              g  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	int                         rv;
	gp.min_epoch    = min_epoch;
	g.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	g.placement_req = &gp;
	if ((rv = ferry__sched_call(c, &g, PSWIRE__METHOD__GET_PLACEMENT,
	         ferry__timeout(c), rh)) != FERRY_OK) {
		return rv;
	}
	if ((*rh)->body_case != PSWIRE__HEADER__BODY_PLACEMENT ||
	    (*rh)->placement->n_servers == 0 ||
	    (*rh)->placement->n_servers > 4096) {
		pswire__header__free_unpacked(*rh, NULL);
		*rh = NULL;
		return ferry__fail(c, FERRY_EPROTO,
		    "GetPlacement reply has no map");
	}
	return FERRY_OK;
}

// rollback resets the client to the version the new map rolls the job
// back to (a server restarted from its snapshot, no replicas): every
// shard is held at that version with no reference (the next pull asks for
// it in full), the push error feedback is dropped (the residuals belong
// to the undone steps, and a fault-free run's at that version were never
// saved: dropping them is what a trainer restarted there has), and the
// caller is told with FERRY_EROLLBACK so that it pulls and moves its
// data position back. The sync round in progress is forgotten by the
// servers too.
static int
rollback(ferry_client *c)
{
	uint64_t v = c->pl->rollback_version;
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->shard_ver[i] = v;
		c->ref_at[i]    = REF_NONE;
		c->need_full[i] = 0;
		c->held[i]      = NULL;
	}
	for (size_t t = 0; t < c->n_tensors; t++) {
		if (c->resid[t] != NULL) {
			memset(c->resid[t], 0,
			    c->tensor_len[t] * sizeof(float));
		}
	}
	c->version       = v;
	c->want          = c->lockstep ? v : 0;
	c->stats.version = v;
	c->rows_probe    = 1; // the tables rolled back too (rows.c)
	return ferry__fail(c, FERRY_EROLLBACK,
	    "the job rolled back to version %llu (placement epoch %llu): a "
	    "server restarted from its snapshot; pull and go on from there",
	    (unsigned long long) v, (unsigned long long) c->pl->epoch);
}

// map_install makes np (taken) the map held: it must match the job; new
// servers are dialed, shards re-assigned, and a rollback or re-seed that
// it announces is acted on.
static int
map_install(ferry_client *c, Pswire__Placement *np)
{
	int rv;
	if (np->n_shards != c->pl->n_shards ||
	    ferry__placement_check(c, np) != FERRY_OK) {
		pswire__placement__free_unpacked(np, NULL);
		return ferry__fail(c, FERRY_EPROTO,
		    "new placement map does not match the job");
	}
	int rolled = np->rollback_gen > c->pl->rollback_gen;
	pswire__placement__free_unpacked(c->pl, NULL);
	c->pl = np;
	c->stats.map_changes++;
	if ((rv = ferry__conns_open(c, c->pl)) != FERRY_OK ||
	    (rv = ferry__conns_assign(c)) != FERRY_OK) {
		return rv;
	}
	if (rolled) {
		return rollback(c);
	}
	ferry__seed_offers(c);
	return FERRY_OK;
}

// map_take fetches the map of epoch >= min_epoch and installs it when it
// is newer than the one held.
static int
map_take(ferry_client *c, uint64_t min_epoch)
{
	Pswire__Header *rh = NULL;
	int             rv;
	if ((rv = ferry__map_fetch(c, min_epoch, &rh)) != FERRY_OK) {
		return rv;
	}
	Pswire__Placement *np = rh->placement;
	rh->placement         = NULL;
	rh->body_case         = PSWIRE__HEADER__BODY__NOT_SET;
	pswire__header__free_unpacked(rh, NULL);
	if (np->epoch <= c->pl->epoch) {
		pswire__placement__free_unpacked(np, NULL);
		return FERRY_OK;
	}
	return map_install(c, np);
}

// ferry__map_refetch replaces the map with the scheduler's next epoch.
int
ferry__map_refetch(ferry_client *c)
{
	return map_take(c, c->pl->epoch + 1);
}

// ferry__map_catch_up asks for the map held's epoch or later: the
// scheduler answers at once with the map in force.
int
ferry__map_catch_up(ferry_client *c)
{
	return map_take(c, c->pl->epoch > 0 ? c->pl->epoch : 1);
}
