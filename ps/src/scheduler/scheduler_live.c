// scheduler_live.c — liveness: who is still there. Members heartbeat the
// scheduler (Heartbeat with their role and id); the sweeper thread declares
// a member dead once --dead-after-ms passes without a heartbeat or any
// other request from it, and answers parked GetPlacements whose deadline
// passed (scheduler_reply.c parks them).
//
// DESIGN. Only members that have heartbeated at least once are tracked
// (hb_* != 0): clients built before heartbeats, and tests that do not send
// them, are never declared dead. A dead trainer is treated as a Leave: the
// next map lists it as gone, so sync rounds stop waiting for it, and a
// round it already pushed to keeps its push (the servers' gone_trainers
// handling). A dead server's shards get a home again in a new map: each
// is promoted to a live backup (--replicas), or the job rolls back to
// snapshots when the server restarts from them (--snapshot-dir), or it is
// re-seeded from the trainers' copies onto a live server
// (scheduler_reseed.c): the trainers wait for that map instead of
// failing, and never train on freshly created (zero) shards. A server
// that was only stalled (SIGSTOP) and heartbeats again is back, holding
// what the map in force gives it.
// A member declared dead that registers again rejoins as after a Leave.
//
// SUSPECT. A member whose heartbeat connection closed, or that missed 2
// heartbeat periods, is suspect at once, until its next heartbeat: no
// shard is moved to or from a suspect (or dead) server
// (ps__sched_server_usable, which move planning asks), so a re-placement
// made while a server is being lost never sends shards to it, nor waits
// on one that cannot send. When a server is declared dead, the moves in
// flight through it are re-planned (ps__sched_moves_unwind): a shard its
// sender had not delivered goes back to the sender.
//
// A killed process closes its TCP connections at once, so the scheduler
// also watches the connection each member heartbeats on (nng's pipe
// events): when it closes and no heartbeat comes on a new connection
// within 2 x --heartbeat-ms (a live member's REQ socket redials and
// heartbeats within one period), the member is dead: about 2 s with the
// defaults instead of --dead-after-ms. A stopped process (SIGSTOP) keeps
// its connections open and is still judged by --dead-after-ms alone.
//
// With --replicas the dead server's shards are promoted to a backup in a
// new map instead (sched_server_dead).
#include <stdio.h>
#include <string.h>

#include "scheduler_impl.h"

// last_of returns the liveness slot of (role, id), or NULL when there is
// no such member. mu held.
static uint64_t *
last_of(struct ps_scheduler *s, int role, uint32_t id)
{
	if (role == PSWIRE__ROLE__ROLE_TRAINER &&
	    id < (uint32_t) s->opts.trainers) {
		return &s->hb_trainer[id];
	}
	if (role == PSWIRE__ROLE__ROLE_SERVER &&
	    id < (uint32_t) s->n_servers_seen) {
		return &s->hb_server[id];
	}
	return NULL;
}

// conn_of returns the heartbeat connection slot of (role, id), growing the
// table when grow is set; NULL when there is none (or no memory: then
// only --dead-after-ms judges the member). mu held.
static struct ps_sched_conn *
conn_of(struct ps_scheduler *s, int role, uint32_t id, int grow)
{
	size_t i = role == PSWIRE__ROLE__ROLE_TRAINER
	    ? id
	    : (size_t) s->opts.trainers + id;
	if (i >= s->n_hb_conn && grow) {
		size_t n = (size_t) s->opts.trainers +
		    (size_t) s->n_servers_seen;
		struct ps_sched_conn *c = fb_realloc(s->hb_conn,
		    n * sizeof(*c));
		if (c != NULL) {
			memset(c + s->n_hb_conn, 0,
			    (n - s->n_hb_conn) * sizeof(*c));
			s->hb_conn   = c;
			s->n_hb_conn = n;
		}
	}
	return i < s->n_hb_conn ? &s->hb_conn[i] : NULL;
}

// forget_conn stops watching a member's connection (its sent epoch
// stays: a dead server's moves are unwound with it). mu held.
static void
forget_conn(struct ps_scheduler *s, int role, uint32_t id)
{
	struct ps_sched_conn *c = conn_of(s, role, id, 0);
	if (c != NULL) {
		c->pipe      = 0;
		c->closed_ms = 0;
		c->suspect   = 0;
	}
}

// suspect_log logs that member slot i of hb_conn (trainers first) became
// suspect, and why. mu held.
static void
suspect_log(const struct ps_scheduler *s, size_t i, const char *why)
{
	int srv = i >= (size_t) s->opts.trainers;
	FB_LOG(FB_LOG_WARN, "members",
	    "%s %zu suspect: %s; no shard moves to or from it until it "
	    "heartbeats again",
	    srv ? "server" : "trainer",
	    srv ? i - (size_t) s->opts.trainers : i, why);
}

void
ps__sched_live_pipe_closed(void *arg, uint32_t pipe_id)
{
	struct ps_scheduler *s = arg;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->n_hb_conn; i++) {
		if (s->hb_conn[i].pipe == pipe_id) {
			s->hb_conn[i].pipe      = 0;
			s->hb_conn[i].closed_ms = fb_clock_ms();
			if (!s->hb_conn[i].suspect) {
				s->hb_conn[i].suspect = 1;
				suspect_log(s, i,
				    "its heartbeat connection closed");
			}
		}
	}
	pthread_mutex_unlock(&s->mu);
}

void
ps__sched_touch(struct ps_scheduler *s, int role, uint32_t id)
{
	uint64_t *last = last_of(s, role, id);
	if (last != NULL && *last != 0) {
		*last = fb_clock_ms();
	}
}

void
ps__sched_live_untrack(struct ps_scheduler *s, int role, uint32_t id)
{
	uint64_t *last = last_of(s, role, id);
	if (last != NULL) {
		*last = 0;
	}
	forget_conn(s, role, id);
}

void
ps__sched_drop_trainer(struct ps_scheduler *s, uint32_t id)
{
	ps__sched_live_untrack(s, PSWIRE__ROLE__ROLE_TRAINER, id);
	if (!s->trainer_gone[id]) {
		s->trainer_gone[id] = 1;
		if (s->placement != NULL) {
			ps__sched_republish(s, s->assign);
		}
	}
}

void
ps__sched_on_heartbeat(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__LeaveRequest *l      = c->hdr->leave_req;
	int                   status = 0;
	char                  msg[160];

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_LEAVE_REQ) {
		ps__sched_reply_counts(s, c); // a probe of the scheduler
		return;
	}
	if (!ps__call_acts_as(c, ps__role_of(l->role), l->id, 0)) {
		return;
	}
	pthread_mutex_lock(&s->mu);
	uint64_t *last = last_of(s, l->role, l->id);
	if (last == NULL) {
		status = PSWIRE__STATUS__INVALID_ARGUMENT;
		snprintf(msg, sizeof(msg), "heartbeat from unknown %s %u",
		    l->role == PSWIRE__ROLE__ROLE_SERVER ? "server"
		                                         : "trainer",
		    l->id);
	} else if (l->role == PSWIRE__ROLE__ROLE_TRAINER &&
	    s->trainer_gone[l->id]) {
		// Declared dead (or left): rounds no longer wait for it, so
		// its pushes would not count. It must register again.
		status = PSWIRE__STATUS__FAILED_PRECONDITION;
		snprintf(msg, sizeof(msg),
		    "trainer %u is not in the job (it left or was declared "
		    "dead): register again",
		    l->id);
	} else {
		if (*last == 0) {
			FB_LOG(FB_LOG_INFO, "live", "tracking %s %u",
			    l->role == PSWIRE__ROLE__ROLE_SERVER ? "server"
			                                         : "trainer",
			    l->id);
		}
		*last = fb_clock_ms();
		if (l->role == PSWIRE__ROLE__ROLE_SERVER && l->has_snapshots) {
			ps__sched_snap_held(s, l->id, l->snapshot_versions,
			    l->n_snapshot_versions);
		}
		struct ps_sched_conn *conn = conn_of(s, l->role, l->id, 1);
		if (conn != NULL) {
			conn->pipe      = ps__call_pipe(c);
			conn->closed_ms = 0;
			if (conn->suspect) {
				FB_LOG(FB_LOG_NOTICE, "members",
				    "%s %u heartbeats again: no longer "
				    "suspect",
				    l->role == PSWIRE__ROLE__ROLE_SERVER
				        ? "server"
				        : "trainer",
				    l->id);
			}
			conn->suspect = 0;
			if (l->role == PSWIRE__ROLE__ROLE_SERVER) {
				conn->sent_epoch = c->hdr->epoch;
			}
		}
		if (l->role == PSWIRE__ROLE__ROLE_SERVER &&
		    s->server_dead[l->id]) {
			s->server_dead[l->id] = 0;
			FB_LOG(FB_LOG_NOTICE, "members",
			    "server %u heartbeats again after it was declared "
			    "dead: it is back, holding what the map in force "
			    "gives it",
			    l->id);
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (status != 0) {
		ps__call_reply_err(c, status, "%s", msg);
	} else {
		ps__sched_reply_counts(s, c);
	}
}

// sched_server_dead takes dead server m out of the map: with replicas, its
// shards are promoted to their first live backup and every list it was in
// is filled up again, in a new map; without, its shards are re-seeded from
// the trainers' copies onto live servers (scheduler_reseed.c). mu held.
static void
sched_server_dead(struct ps_scheduler *s, uint32_t m)
{
	size_t   lost = 0, first = 0;
	uint64_t bytes = 0;
	for (size_t i = 0; i < s->n_assign; i++) {
		if (s->assign[i] == m) {
			first = lost == 0 ? i : first;
			lost++;
			bytes += s->shard_size[i];
		}
	}
	s->server_dead[m] = 1;
	if (s->n_backups > 0 && s->placement != NULL) {
		// Replicas: a backup of each of its shards takes over.
		uint32_t *keep = fb_alloc(s->n_assign * sizeof(*keep));
		int       rv   = keep == NULL ? FB_ENOMEM : FB_OK;
		if (keep != NULL) {
			memcpy(keep, s->assign, s->n_assign * sizeof(*keep));
			rv = ps__sched_republish(s, keep);
		}
		fb_free(keep);
		if (rv != FB_OK) {
			FB_LOG(FB_LOG_ERR, "members",
			    "server %u: cannot promote its backups: %s", m,
			    fb_strerror(rv));
		}
		return;
	}
	if (lost > 0) {
		FB_LOG(FB_LOG_WARN, "members",
		    "server %u's %zu shard(s) (%llu bytes, the first is shard "
		    "%zu) lost their only copy",
		    m, lost, (unsigned long long) bytes, first);
		ps__sched_reseed_dead(s, m); // from the trainers' copies
	}
}

// elapsed is now - t, or 0 when t is later than now: a heartbeat or a
// close stamped after the sweeper read its clock (it waited for the lock)
// is no silence at all, not an unsigned wrap into "dead for 584 million
// years".
static uint64_t
elapsed(uint64_t now, uint64_t t)
{
	return t > now ? 0 : now - t;
}

// sweep_members declares dead every tracked member silent for longer than
// dead_after_ms, or whose heartbeat connection closed more than the grace
// (2 x heartbeat_ms, at most dead_after_ms) ago with no heartbeat since.
// mu held.
static void
sweep_members(struct ps_scheduler *s, uint64_t now)
{
	uint64_t after = s->opts.dead_after_ms;
	uint64_t grace = 2 * (uint64_t) s->opts.heartbeat_ms;
	grace          = grace == 0 || grace > after ? after : grace;
	for (int r = 0; r < 2; r++) {
		int       n    = r ? s->n_servers_seen : s->opts.trainers;
		uint64_t *last = r ? s->hb_server : s->hb_trainer;
		int       role = r ? PSWIRE__ROLE__ROLE_SERVER
		                   : PSWIRE__ROLE__ROLE_TRAINER;
		for (int i = 0; i < n; i++) {
			struct ps_sched_conn *c = conn_of(s, role,
			    (uint32_t) i, 0);
			int dropped             = last[i] != 0 && c != NULL &&
			    c->closed_ms != 0 &&
			    elapsed(now, c->closed_ms) > grace;
			if (r && s->gone[i]) {
				// Left on purpose (its shards moved away):
				// never "dead", whatever its connection does.
				last[i] = 0;
				forget_conn(s, role, (uint32_t) i);
				continue;
			}
			if (last[i] != 0 && c != NULL && !c->suspect &&
			    elapsed(now, last[i]) > grace) {
				// Stalled (SIGSTOP, a long pause): suspect
				// long before it is dead.
				c->suspect = 1;
				suspect_log(s, (size_t) (c - s->hb_conn),
				    "no heartbeat for 2 periods");
			}
			if (last[i] == 0 ||
			    (elapsed(now, last[i]) <= after && !dropped)) {
				continue;
			}
			if (dropped) {
				FB_LOG(FB_LOG_WARN, "members",
				    "member %s %d dead: its heartbeat "
				    "connection closed %.1f s ago and no "
				    "heartbeat came on a new one",
				    r ? "server" : "trainer", i,
				    (double) elapsed(now, c->closed_ms) / 1e3);
			} else {
				FB_LOG(FB_LOG_WARN, "members",
				    "member %s %d dead: no heartbeat for "
				    "%.1f s",
				    r ? "server" : "trainer", i,
				    (double) elapsed(now, last[i]) / 1e3);
			}
			last[i] = 0;
			forget_conn(s, role, (uint32_t) i);
			if (r) {
				ps__sched_moves_unwind(s, (uint32_t) i);
				sched_server_dead(s, (uint32_t) i);
			} else {
				ps__sched_drop_trainer(s, (uint32_t) i);
				ps__sched_trainer_dead(s, (uint32_t) i);
			}
		}
	}
}

// sweep_main is the sweeper thread: every tick (dead_after/10, at most
// 100 ms, at least 10 ms) it expires parked calls and sweeps members.
static void *
sweep_main(void *arg)
{
	struct ps_scheduler *s    = arg;
	uint64_t             tick = s->opts.dead_after_ms / 10;
	tick = tick == 0 || tick > 100 ? 100 : tick < 10 ? 10 : tick;
	while (!atomic_load(&s->closing)) {
		fb_sleep_us((unsigned) tick * 1000u);
		pthread_mutex_lock(&s->mu);
		// Read the clock under the lock: stamps written before we got
		// it are then never later than now.
		uint64_t now = fb_clock_ms();
		ps__sched_expire_parked(s, now);
		if (s->opts.dead_after_ms > 0) {
			sweep_members(s, now);
		}
		if (s->rb_pending != 0 &&
		    now - s->rb_since_ms >= s->opts.dead_after_ms) {
			// A server that never reported: decide anyway.
			ps__sched_rollback_check(s, 1);
		}
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

int
ps__sched_live_start(struct ps_scheduler *s)
{
	if (pthread_create(&s->sweeper, NULL, sweep_main, s) != 0) {
		return FB_ENOMEM;
	}
	s->sweeper_on = 1;
	return FB_OK;
}

void
ps__sched_live_stop(struct ps_scheduler *s)
{
	if (s->sweeper_on) {
		atomic_store(&s->closing, 1);
		pthread_join(s->sweeper, NULL);
		s->sweeper_on = 0;
	}
}
