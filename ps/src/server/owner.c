// owner.c — shard admission: whether a request naming a shard and a
// placement epoch can be served by this server now, and, when it cannot,
// the status that tells the client what to do (fetch the new map, retry,
// or give up). Pulls and pushes check every shard they name with it.
#include "server_impl.h"

int
ps__server_own_shard(struct ps_server *s, struct ps_call *c, uint32_t id,
    uint64_t epoch)
{
	uint64_t mine = s->pl->epoch;
	if (id >= s->n_global) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u does not exist (the job has %zu)", id,
		    s->n_global);
		return -1;
	}
	if (s->local[id] >= 0 && s->shards[id].backup) {
		// A backup is not served: the client's map is older than
		// ours (the primary moved) or newer (a promotion here is on
		// its way).
		ps__server_reply_err(s, c,
		    epoch > mine ? PSWIRE__STATUS__UNAVAILABLE
		                 : PSWIRE__STATUS__STALE_EPOCH,
		    "shard %u is a backup here (epoch %llu, request %llu)", id,
		    (unsigned long long) mine, (unsigned long long) epoch);
		return -1;
	}
	if (s->local[id] >= 0 && s->shards[id].seeding) {
		// Its only copy was lost: it waits for the trainers' offers
		// of theirs (seed.c).
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "shard %u is being re-seeded; retry", id);
		return -1;
	}
	if (s->local[id] >= 0 && epoch < s->rollback_epoch) {
		// Made before the job rolled back: its versions are undone.
		ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
		    "the job rolled back to a snapshot at placement epoch "
		    "%llu; the request uses epoch %llu: fetch the new map",
		    (unsigned long long) s->rollback_epoch,
		    (unsigned long long) epoch);
		return -1;
	}
	if (s->local[id] >= 0 && epoch > mine && s->snap != NULL) {
		// The client has a newer map, which may order a rollback
		// this server has not applied yet: wait for it.
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "placement epoch %llu is not applied here yet (have "
		    "%llu); retry",
		    (unsigned long long) epoch, (unsigned long long) mine);
		return -1;
	}
	if (s->local[id] >= 0) {
		return 0; // held: served whatever map the client uses
	}
	if (s->local[id] == PS_SHARD_ARRIVING || epoch > mine) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "shard %u is moving here (epoch %llu); retry", id,
		    (unsigned long long) mine);
	} else if (epoch < mine) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
		    "shard %u moved: request uses placement epoch %llu, "
		    "current is %llu",
		    id, (unsigned long long) epoch, (unsigned long long) mine);
	} else {
		ps__server_reply_err(s, c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "shard %u is not placed on this server", id);
	}
	return -1;
}
