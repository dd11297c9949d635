// scheduler_reply.c — what the scheduler answers: GetPlacement, parked
// until a map exists, and the acknowledgements of Heartbeat, Leave and
// ReportLinks.
//
// DESIGN. GetPlacement calls that arrive before every expected member has
// registered are parked on a list and answered when the map is published,
// never by blocking a thread (an rpc handler must not block). Each parked
// call holds a REP context, so each has an expiry (its deadline, at most
// PS_SCHED_PARK_MAX_MS) and the sweeper of scheduler_live.c answers the
// expired ones. A call's
// min_epoch says which map it waits for: 0 is the membership map (server
// URLs only, for probing), 1 the first placement, higher a newer one. The
// three acknowledgements carry the same body, the job's trainer and server
// counts, but answer different rpcs, so each has its own function.
#include <pthread.h>
#include <string.h>

#include "scheduler_impl.h"

// map_reply_bytes returns the packed Header (epoch and map, no request
// id) of the GetPlacement answer for the map in force, packing it once
// per map; NULL when out of memory. mu held; s->placement != NULL.
static const uint8_t *
map_reply_bytes(struct ps_scheduler *s)
{
	if (s->map_reply == NULL ||
	    s->map_reply_epoch != s->placement->epoch) {
		Pswire__Header h = PSWIRE__HEADER__INIT;
		h.epoch          = s->placement->epoch;
		h.body_case      = PSWIRE__HEADER__BODY_PLACEMENT;
		h.placement      = s->placement;
		size_t   n       = pswire__header__get_packed_size(&h);
		uint8_t *b       = fb_alloc(n > 0 ? n : 1);
		if (b == NULL) {
			return NULL;
		}
		fb_free(s->map_reply);
		s->map_reply       = b;
		s->map_reply_len   = pswire__header__pack(&h, b);
		s->map_reply_epoch = s->placement->epoch;
	}
	return s->map_reply;
}

// answer_placement replies with the map in force. The Header is the
// call's request id followed by the map's packed bytes (a protobuf
// message's fields may come in any order): packing the map for every
// member cost 1,000 packs of every shard's entry per new map. mu held.
static void
answer_placement(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__Header id   = PSWIRE__HEADER__INIT;
	const uint8_t *tail = map_reply_bytes(s);
	nng_msg       *m;
	uint8_t       *payload;
	id.request_id = c->hdr->request_id;
	size_t il     = pswire__header__get_packed_size(&id);
	size_t hl     = il + s->map_reply_len;
	if (tail == NULL || hl > PSW_MAX_HEADER ||
	    psw_msg_begin(&m, hl, 0, &payload) != FB_OK) {
		// Out of memory, or a map over the cap: the general path
		// answers, or says why it cannot.
		Pswire__Header h = PSWIRE__HEADER__INIT;
		h.epoch          = s->placement->epoch;
		h.body_case      = PSWIRE__HEADER__BODY_PLACEMENT;
		h.placement      = s->placement;
		ps__call_reply(c, &h);
		return;
	}
	uint8_t *body = nng_msg_body(m);
	pswire__header__pack(&id, body + PSW_FRAME_HDR);
	memcpy(body + PSW_FRAME_HDR + il, tail, s->map_reply_len);
	psw_frame_put(body, c->frame.method, PSW_FLAG_REPLY, (uint32_t) hl, 0);
	// psw_msg_begin reserved the signing trailer's room: cut it.
	nng_msg_chop(m, nng_msg_len(m) - (PSW_FRAME_HDR + hl));
	ps__call_reply_msg(c, m);
}

// answer_membership replies with epoch 0: the server URLs, no shards.
static void
answer_membership(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__Header    h = PSWIRE__HEADER__INIT;
	Pswire__Placement p = PSWIRE__PLACEMENT__INIT;
	p.n_servers         = (size_t) s->n_servers_seen;
	p.servers           = s->server_urls;
	p.trainers          = (uint32_t) s->opts.trainers;
	h.body_case         = PSWIRE__HEADER__BODY_PLACEMENT;
	h.placement         = &p;
	ps__call_reply(c, &h);
}

// answer_one answers c when it can be: with the start error, the map
// (once its epoch reaches the call's min_epoch) or the membership map
// (min_epoch 0, every server in). Returns 1 when it did, 0 when c must
// stay parked. mu held.
static int
answer_one(struct ps_scheduler *s, struct ps_call *c)
{
	if (s->start_error[0] != '\0') {
		ps__call_reply_err(c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "job cannot start: %s", s->start_error);
	} else if (s->placement != NULL &&
	    s->placement->epoch >= c->park_version) {
		answer_placement(s, c);
	} else if (c->park_version == 0 &&
	    s->n_servers_seen == s->opts.servers) {
		answer_membership(s, c);
	} else {
		return 0;
	}
	return 1;
}

void
ps__sched_answer_parked(struct ps_scheduler *s)
{
	struct ps_call **pp = &s->parked;
	while (*pp != NULL) {
		struct ps_call *c    = *pp;
		struct ps_call *next = c->next;
		if (answer_one(s, c)) {
			*pp = next; // c belongs to the rpc again
		} else {
			pp = &c->next;
		}
	}
}

void
ps__sched_on_get_placement(struct ps_scheduler *s, struct ps_call *c)
{
	c->park_version = c->hdr->body_case ==
	        PSWIRE__HEADER__BODY_PLACEMENT_REQ
	    ? c->hdr->placement_req->min_epoch
	    : 1;
	// Every parked call expires: a client that gave up (the servers'
	// watch threads re-send every second) must not hold a context for
	// ever, or the scheduler stops reading requests.
	uint64_t cap = fb_clock_ms() + PS_SCHED_PARK_MAX_MS;
	if (c->deadline == 0 || c->deadline > cap) {
		c->deadline = cap;
	}
	pthread_mutex_lock(&s->mu);
	// Only this call can be answered now: the parked ones were
	// answered when what they wait for changed (every such change calls
	// ps__sched_answer_parked). Walking them all here cost O(parked)
	// per fetch, O(members^2) a second with a watch per member.
	if (!answer_one(s, c)) {
		c->next   = s->parked;
		s->parked = c;
	}
	pthread_mutex_unlock(&s->mu);
}

void
ps__sched_reply_counts(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__Header        h   = PSWIRE__HEADER__INIT;
	Pswire__RegisterReply rep = PSWIRE__REGISTER_REPLY__INIT;
	rep.trainers              = (uint32_t) s->opts.trainers;
	pthread_mutex_lock(&s->mu); // a Register may be adding a server
	rep.servers = (uint32_t) s->n_servers_seen;
	pthread_mutex_unlock(&s->mu);
	h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REP;
	h.register_rep = &rep;
	ps__call_reply(c, &h);
}

void
ps__sched_reply_leave(struct ps_scheduler *s, struct ps_call *c)
{
	ps__sched_reply_counts(s, c);
}

void
ps__sched_reply_links(struct ps_scheduler *s, struct ps_call *c)
{
	ps__sched_reply_counts(s, c);
}

void
ps__sched_pipe_gone(void *arg, uint32_t pipe)
{
	struct ps_scheduler *s = arg;
	pthread_mutex_lock(&s->mu);
	(void) ps__call_list_drop_pipe(&s->parked, pipe);
	pthread_mutex_unlock(&s->mu);
}

void
ps__sched_expire_parked(struct ps_scheduler *s, uint64_t now_ms)
{
	struct ps_call **pp = &s->parked;
	while (*pp != NULL) {
		struct ps_call *c = *pp;
		if (c->deadline != 0 && c->deadline <= now_ms) {
			*pp = c->next;
			ps__call_reply_err(c,
			    PSWIRE__STATUS__DEADLINE_EXCEEDED,
			    "no map of epoch %llu before the deadline",
			    (unsigned long long) c->park_version);
		} else {
			pp = &c->next;
		}
	}
}
