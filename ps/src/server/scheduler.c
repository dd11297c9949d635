// scheduler.c — the scheduler role: membership, the job's tensor table,
// the placement map and the start barrier.
//
// DESIGN. All state sits behind one mutex; requests are tiny and rare
// (registration, placement fetches), so there is nothing to stripe.
// GetPlacement calls that arrive before every expected member has
// registered are parked on a list and answered when the map is published,
// never by blocking a thread. The first trainer's JobConfig becomes the
// job's; it is deep-copied by packing and unpacking it, so the request
// message can be freed.
#include <pthread.h>
#include <stdio.h>

#include "comp/comp.h"
#include "ps/ps.h"
#include "rpc.h"
#include "shard/shard.h"

#define MAX_MEMBERS 4096

struct ps_scheduler {
	struct ps_scheduler_opts opts;
	struct ps_rpc           *rpc;
	pthread_mutex_t          mu;
	uint8_t                 *trainer_seen; // [trainers]
	int                      n_trainers_seen;
	char                   **server_urls;  // [servers]
	int                      n_servers_seen;
	Pswire__JobConfig       *job;          // owned (unpacked copy)
	Pswire__Placement       *placement;    // owned when published
	uint8_t                 *placement_buf;
	size_t                   placement_len;
	uint64_t                 epoch;
	struct ps_call          *parked;       // GetPlacement waiters
};

static Pswire__JobConfig *
job_copy(const Pswire__JobConfig *j)
{
	size_t             n   = pswire__job_config__get_packed_size(j);
	uint8_t           *buf = ps_alloc(n ? n : 1);
	Pswire__JobConfig *c;
	if (buf == NULL) {
		return NULL;
	}
	pswire__job_config__pack(j, buf);
	c = pswire__job_config__unpack(NULL, n, buf);
	ps_free(buf);
	return c;
}

// job_diff describes the first difference between a and b into why.
static int
job_diff(const Pswire__JobConfig *a, const Pswire__JobConfig *b, char *why,
    size_t n)
{
	if (a->n_tensors != b->n_tensors) {
		snprintf(why, n, "job has %zu tensors, declaration has %zu",
		    a->n_tensors, b->n_tensors);
		return 1;
	}
	for (size_t i = 0; i < a->n_tensors; i++) {
		if (strcmp(a->tensors[i]->name, b->tensors[i]->name) != 0 ||
		    a->tensors[i]->len != b->tensors[i]->len) {
			snprintf(why, n,
			    "tensor %zu: job has '%s' (%llu floats), "
			    "declaration has '%s' (%llu floats)",
			    i, a->tensors[i]->name,
			    (unsigned long long) a->tensors[i]->len,
			    b->tensors[i]->name,
			    (unsigned long long) b->tensors[i]->len);
			return 1;
		}
	}
	if (a->mode != b->mode || a->lr != b->lr ||
	    strcmp(a->codec_push, b->codec_push) != 0 ||
	    strcmp(a->codec_pull, b->codec_pull) != 0 ||
	    a->bucket != b->bucket || a->warmup_steps != b->warmup_steps) {
		snprintf(why, n,
		    "job options differ (mode/lr/codecs/bucket/warmup): job "
		    "has mode %d lr %g push %s pull %s",
		    a->mode, a->lr, a->codec_push, a->codec_pull);
		return 1;
	}
	return 0;
}

static int
check_job(const Pswire__JobConfig *j, char *why, size_t n)
{
	if (j->n_tensors == 0 || j->n_tensors > 65536) {
		snprintf(why, n, "tensor count %zu not in 1..65536",
		    j->n_tensors);
		return PS_EINVAL;
	}
	for (size_t i = 0; i < j->n_tensors; i++) {
		if (j->tensors[i]->len == 0 ||
		    j->tensors[i]->len > (1ull << 34)) {
			snprintf(why, n, "tensor %zu length %llu not in 1..2^34",
			    i, (unsigned long long) j->tensors[i]->len);
			return PS_EINVAL;
		}
		if (strlen(j->tensors[i]->name) > 127) {
			snprintf(why, n, "tensor %zu name over 127 bytes", i);
			return PS_EINVAL;
		}
	}
	if (!(j->lr > 0 && j->lr < 1e6)) {
		snprintf(why, n, "learning rate %g not in (0, 1e6)", j->lr);
		return PS_EINVAL;
	}
	struct comp_codec cc;
	char              cwhy[128];
	if (comp_codec_parse_msg(j->codec_push, j->bucket, &cc, cwhy,
	        sizeof(cwhy)) != PS_OK) {
		snprintf(why, n, "codec-push '%s': %s", j->codec_push, cwhy);
		return PS_EINVAL;
	}
	if (comp_codec_parse_msg(j->codec_pull, j->bucket, &cc, cwhy,
	        sizeof(cwhy)) != PS_OK || cc.stochastic) {
		snprintf(why, n, "codec-pull '%s': %s", j->codec_pull,
		    cc.stochastic ? "the pull side rounds deterministically"
		                  : cwhy);
		return PS_EINVAL;
	}
	if (j->mode != PSWIRE__MODE__MODE_SYNC &&
	    j->mode != PSWIRE__MODE__MODE_ASYNC) {
		snprintf(why, n, "unknown mode %d", j->mode);
		return PS_EINVAL;
	}
	return PS_OK;
}

// publish builds the placement map; called with mu held once every member
// is in. Returns PS_OK or an error (logged).
static int
publish(struct ps_scheduler *s)
{
	size_t             nt = s->job->n_tensors, ns = 0;
	uint64_t          *lens;
	struct shard_desc *sd = NULL;
	uint32_t          *assign = NULL;
	int                rv;
	Pswire__Placement  p = PSWIRE__PLACEMENT__INIT;
	Pswire__ShardInfo *infos = NULL, **ptrs = NULL;

	if ((lens = ps_alloc(nt * sizeof(*lens))) == NULL) {
		return PS_ENOMEM;
	}
	for (size_t i = 0; i < nt; i++) {
		lens[i] = s->job->tensors[i]->len;
	}
	rv = shard_split(lens, nt, s->opts.shard_bytes, &sd, &ns);
	ps_free(lens);
	if (rv != PS_OK) {
		return rv;
	}
	assign = ps_alloc(ns * sizeof(*assign));
	infos  = ps_alloc(ns * sizeof(*infos));
	ptrs   = ps_alloc(ns * sizeof(*ptrs));
	if (assign == NULL || infos == NULL || ptrs == NULL) {
		rv = PS_ENOMEM;
		goto done;
	}
	if ((rv = shard_place_uniform(ns, (uint32_t) s->opts.servers,
	         assign)) != PS_OK) {
		goto done;
	}
	for (size_t i = 0; i < ns; i++) {
		pswire__shard_info__init(&infos[i]);
		infos[i].tensor = sd[i].tensor;
		infos[i].index  = sd[i].index;
		infos[i].offset = sd[i].offset;
		infos[i].len    = sd[i].len;
		infos[i].server = assign[i];
		ptrs[i]         = &infos[i];
	}
	p.epoch       = ++s->epoch;
	p.n_servers   = (size_t) s->opts.servers;
	p.servers     = s->server_urls;
	p.n_shards    = ns;
	p.shards      = ptrs;
	p.job         = s->job;
	p.trainers    = (uint32_t) s->opts.trainers;
	// Keep a private deep copy (pack + unpack) to answer fetches from.
	s->placement_len = pswire__placement__get_packed_size(&p);
	if ((s->placement_buf = ps_alloc(s->placement_len)) == NULL) {
		rv = PS_ENOMEM;
		goto done;
	}
	pswire__placement__pack(&p, s->placement_buf);
	s->placement = pswire__placement__unpack(NULL, s->placement_len,
	    s->placement_buf);
	if (s->placement == NULL) {
		rv = PS_ENOMEM;
		goto done;
	}
	PS_LOG(PS_LOG_NOTICE, "placement",
	    "epoch %llu: %zu shards on %d servers (uniform), %d trainers",
	    (unsigned long long) p.epoch, ns, s->opts.servers,
	    s->opts.trainers);
	for (size_t i = 0; i < ns; i++) {
		PS_LOG(PS_LOG_INFO, "placement",
		    "shard %zu = tensor %u '%s' [%llu, +%llu) -> server %u",
		    i, sd[i].tensor, s->job->tensors[sd[i].tensor]->name,
		    (unsigned long long) sd[i].offset,
		    (unsigned long long) sd[i].len, assign[i]);
	}
	rv = PS_OK;
done:
	ps_free(sd);
	ps_free(assign);
	ps_free(infos);
	ps_free(ptrs);
	return rv;
}

static void
answer_placement(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__Header h = PSWIRE__HEADER__INIT;
	h.epoch          = s->placement->epoch;
	h.body_case      = PSWIRE__HEADER__BODY_PLACEMENT;
	h.placement      = s->placement;
	ps__call_reply(c, &h);
}

static void
maybe_start(struct ps_scheduler *s)
{
	int rv;
	if (s->placement != NULL || s->job == NULL ||
	    s->n_trainers_seen < s->opts.trainers ||
	    s->n_servers_seen < s->opts.servers) {
		return;
	}
	if ((rv = publish(s)) != PS_OK) {
		PS_LOG(PS_LOG_ERR, "placement", "cannot place shards: %s",
		    ps_strerror(rv));
		return;
	}
	while (s->parked != NULL) {
		struct ps_call *c = s->parked;
		s->parked         = c->next;
		answer_placement(s, c);
	}
}

static void
on_register(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__RegisterRequest *r   = c->hdr->register_req;
	Pswire__Header           h   = PSWIRE__HEADER__INIT;
	Pswire__RegisterReply    rep = PSWIRE__REGISTER_REPLY__INIT;
	char                     why[512];

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_REGISTER_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Register needs a register_req body");
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (r->role == PSWIRE__ROLE__ROLE_SERVER) {
		int idx = -1;
		if (strlen(r->url) == 0 || strlen(r->url) > 255) {
			pthread_mutex_unlock(&s->mu);
			ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "server registration needs a url of 1..255 bytes");
			return;
		}
		for (int i = 0; i < s->n_servers_seen; i++) {
			if (strcmp(s->server_urls[i], r->url) == 0) {
				idx = i; // re-registration: same slot
			}
		}
		if (idx < 0) {
			if (s->n_servers_seen >= s->opts.servers) {
				pthread_mutex_unlock(&s->mu);
				ps__call_reply_err(c,
				    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
				    "job expects %d servers; all registered",
				    s->opts.servers);
				return;
			}
			idx = s->n_servers_seen;
			if ((s->server_urls[idx] = ps_strdup(r->url)) == NULL) {
				pthread_mutex_unlock(&s->mu);
				ps__call_reply_err(c,
				    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
				    "out of memory");
				return;
			}
			s->n_servers_seen++;
			PS_LOG(PS_LOG_NOTICE, "members",
			    "server %d registered at %s (%d/%d)", idx, r->url,
			    s->n_servers_seen, s->opts.servers);
		}
		rep.id = (uint32_t) idx;
	} else if (r->role == PSWIRE__ROLE__ROLE_TRAINER) {
		if (r->rank >= (uint32_t) s->opts.trainers) {
			pthread_mutex_unlock(&s->mu);
			ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "rank %u out of range: job has %d trainers",
			    r->rank, s->opts.trainers);
			return;
		}
		if (r->job == NULL) {
			pthread_mutex_unlock(&s->mu);
			ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "trainer registration needs the tensor table");
			return;
		}
		if (check_job(r->job, why, sizeof(why)) != PS_OK) {
			pthread_mutex_unlock(&s->mu);
			ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "bad job declaration: %s", why);
			return;
		}
		if (s->job != NULL && job_diff(s->job, r->job, why, sizeof(why))) {
			pthread_mutex_unlock(&s->mu);
			ps__call_reply_err(c,
			    PSWIRE__STATUS__FAILED_PRECONDITION,
			    "declaration does not match the job: %s", why);
			return;
		}
		if (s->job == NULL) {
			if ((s->job = job_copy(r->job)) == NULL) {
				pthread_mutex_unlock(&s->mu);
				ps__call_reply_err(c,
				    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
				    "out of memory");
				return;
			}
			if (s->job->shard_bytes == 0) {
				s->job->shard_bytes = s->opts.shard_bytes;
			}
			PS_LOG(PS_LOG_NOTICE, "members",
			    "job declared by rank %u: %zu tensors, mode %s, "
			    "lr %g", r->rank, s->job->n_tensors,
			    s->job->mode ? "async" : "sync", s->job->lr);
		}
		if (!s->trainer_seen[r->rank]) {
			s->trainer_seen[r->rank] = 1;
			s->n_trainers_seen++;
			PS_LOG(PS_LOG_NOTICE, "members",
			    "trainer %u registered (%d/%d)", r->rank,
			    s->n_trainers_seen, s->opts.trainers);
		}
		rep.id = r->rank;
	} else {
		pthread_mutex_unlock(&s->mu);
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "unknown role %d", r->role);
		return;
	}
	rep.trainers    = (uint32_t) s->opts.trainers;
	rep.servers     = (uint32_t) s->opts.servers;
	h.body_case     = PSWIRE__HEADER__BODY_REGISTER_REP;
	h.register_rep  = &rep;
	maybe_start(s);
	ps__call_reply(c, &h);
	pthread_mutex_unlock(&s->mu);
}

static void
on_get_placement(struct ps_scheduler *s, struct ps_call *c)
{
	pthread_mutex_lock(&s->mu);
	if (s->placement != NULL) {
		answer_placement(s, c);
	} else {
		c->next   = s->parked;
		s->parked = c;
	}
	pthread_mutex_unlock(&s->mu);
}

static void
on_simple(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__Header        h   = PSWIRE__HEADER__INIT;
	Pswire__RegisterReply rep = PSWIRE__REGISTER_REPLY__INIT;
	(void) s;
	rep.trainers   = (uint32_t) s->opts.trainers;
	rep.servers    = (uint32_t) s->opts.servers;
	h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REP;
	h.register_rep = &rep;
	ps__call_reply(c, &h);
}

static void
dispatch(void *arg, struct ps_call *c)
{
	struct ps_scheduler *s = arg;
	switch (c->frame.method) {
	case PSWIRE__METHOD__REGISTER:
		on_register(s, c);
		break;
	case PSWIRE__METHOD__GET_PLACEMENT:
		on_get_placement(s, c);
		break;
	case PSWIRE__METHOD__HEARTBEAT:
	case PSWIRE__METHOD__LEAVE:
		on_simple(s, c);
		break;
	default:
		ps__call_reply_err(c, PSWIRE__STATUS__UNIMPLEMENTED,
		    "method %u (%s) is not served by the scheduler",
		    c->frame.method, psw_method_name(c->frame.method));
	}
}

int
ps_scheduler_open(const struct ps_scheduler_opts *o, struct ps_scheduler **out)
{
	struct ps_scheduler *s;
	int                  rv;

	if (o == NULL || o->url == NULL || o->trainers < 1 ||
	    o->trainers > MAX_MEMBERS || o->servers < 1 ||
	    o->servers > MAX_MEMBERS || o->shard_bytes < 4 ||
	    o->shard_bytes % 4 != 0 || o->contexts < 1) {
		return PS_EINVAL;
	}
	if ((s = ps_zalloc(sizeof(*s))) == NULL) {
		return PS_ENOMEM;
	}
	s->opts = *o;
	pthread_mutex_init(&s->mu, NULL);
	s->trainer_seen = ps_zalloc((size_t) o->trainers);
	s->server_urls  = ps_zalloc(sizeof(char *) * (size_t) o->servers);
	if (s->trainer_seen == NULL || s->server_urls == NULL) {
		ps_scheduler_close(s);
		return PS_ENOMEM;
	}
	if ((rv = ps__rpc_open(o->url, o->contexts, o->max_msg, dispatch, s,
	         &s->rpc)) != PS_OK) {
		ps_scheduler_close(s);
		return rv;
	}
	PS_LOG(PS_LOG_NOTICE, "scheduler",
	    "listening on %s; expecting %d servers, %d trainers",
	    ps__rpc_url(s->rpc), o->servers, o->trainers);
	*out = s;
	return PS_OK;
}

const char *
ps_scheduler_url(const struct ps_scheduler *s)
{
	return ps__rpc_url(s->rpc);
}

void
ps_scheduler_close(struct ps_scheduler *s)
{
	if (s == NULL) {
		return;
	}
	ps__rpc_close(s->rpc); // parked calls die with their contexts
	if (s->job != NULL) {
		pswire__job_config__free_unpacked(s->job, NULL);
	}
	if (s->placement != NULL) {
		pswire__placement__free_unpacked(s->placement, NULL);
	}
	ps_free(s->placement_buf);
	for (int i = 0; s->server_urls && i < s->opts.servers; i++) {
		ps_free(s->server_urls[i]);
	}
	ps_free(s->server_urls);
	ps_free(s->trainer_seen);
	pthread_mutex_destroy(&s->mu);
	ps_free(s);
}
