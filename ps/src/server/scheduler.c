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
//
// Placement: when probing is on (probe-bytes > 0), every trainer first
// fetches the membership map (epoch 0: server URLs only), measures RTT and
// bandwidth to each server, and reports them (ReportLinks). Once every
// member and every report is in, the scheduler builds L[t][m] and B[t][m],
// places the shards (uniform round-robin, or the latency-aware solver of
// sharding/ that minimises the slowest trainer's predicted step time under
// the servers' memory capacity), logs the matrices, the assignment, F, LB
// and F/LB, and publishes epoch 1.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "comp/comp.h"
#include "ps/ps.h"
#include "rpc.h"
#include "shard/shard.h"

#define MAX_MEMBERS 4096
// Shards per job: every map lists them all, and servers keep a slot each.
#define PS_MAX_SHARDS (1u << 20)

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
	uint64_t                *capacity;     // [servers] bytes, 0 = unbounded
	double                  *lat, *bw;     // [trainers * servers]
	uint8_t                 *links_seen;   // [trainers]
	int                      n_links_seen;
	uint32_t                *assign;       // [n_assign] shard -> server
	size_t                   n_assign;
	uint64_t                *shard_size;   // [n_assign] bytes
	struct shard_report      report;       // of the published placement
	int                      have_report;
	char                     start_error[256];
	uint8_t                 *gone;         // [servers] left the job
	uint8_t                 *trainer_gone; // [trainers] left the job
};

static int
probing(const struct ps_scheduler *s)
{
	return s->opts.probe_bytes > 0;
}

static Pswire__JobConfig *
job_copy(const Pswire__JobConfig *j)
{
	size_t             n   = pswire__job_config__get_packed_size(j);
	uint8_t           *buf = fb_alloc(n ? n : 1);
	Pswire__JobConfig *c;
	if (buf == NULL) {
		return NULL;
	}
	pswire__job_config__pack(j, buf);
	c = pswire__job_config__unpack(NULL, n, buf);
	fb_free(buf);
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
		return FB_EINVAL;
	}
	for (size_t i = 0; i < j->n_tensors; i++) {
		if (j->tensors[i]->len == 0 ||
		    j->tensors[i]->len > (1ull << 34)) {
			snprintf(why, n, "tensor %zu length %llu not in 1..2^34",
			    i, (unsigned long long) j->tensors[i]->len);
			return FB_EINVAL;
		}
		if (strlen(j->tensors[i]->name) > 127) {
			snprintf(why, n, "tensor %zu name over 127 bytes", i);
			return FB_EINVAL;
		}
	}
	if (!(j->lr > 0 && j->lr < 1e6)) {
		snprintf(why, n, "learning rate %g not in (0, 1e6)", j->lr);
		return FB_EINVAL;
	}
	struct comp_codec cc;
	char              cwhy[128];
	if (comp_codec_parse_msg(j->codec_push, j->bucket, &cc, cwhy,
	        sizeof(cwhy)) != FB_OK) {
		snprintf(why, n, "codec-push '%s': %s", j->codec_push, cwhy);
		return FB_EINVAL;
	}
	if (comp_codec_parse_msg(j->codec_pull, j->bucket, &cc, cwhy,
	        sizeof(cwhy)) != FB_OK || cc.stochastic) {
		snprintf(why, n, "codec-pull '%s': %s", j->codec_pull,
		    cc.stochastic ? "the pull side rounds deterministically"
		                  : cwhy);
		return FB_EINVAL;
	}
	if (j->mode != PSWIRE__MODE__MODE_SYNC &&
	    j->mode != PSWIRE__MODE__MODE_ASYNC) {
		snprintf(why, n, "unknown mode %d", j->mode);
		return FB_EINVAL;
	}
	return FB_OK;
}

// wire_factor is rho of docs/algorithms.md §3.3: bytes on the wire per fp32
// byte of a shard, push plus pull, with the job's codecs.
static double
wire_factor(const Pswire__JobConfig *job)
{
	struct comp_codec a, b;
	const size_t      n = 1u << 20;
	if (comp_codec_parse(job->codec_push, job->bucket, &a) != FB_OK ||
	    comp_codec_parse(job->codec_pull, job->bucket, &b) != FB_OK) {
		return 2.0;
	}
	return (double) (comp_bound(&a, n) + comp_bound(&b, n)) / (4.0 * n);
}

// log_lines logs a multi-line text one line at a time.
static void
log_lines(const char *text)
{
	const char *p = text;
	while (*p != '\0') {
		const char *e = strchr(p, '\n');
		int         n = e ? (int) (e - p) : (int) strlen(p);
		FB_LOG(FB_LOG_NOTICE, "placement", "%.*s", n, p);
		p += n + (e != NULL);
	}
}

// inst_build describes the placement problem for sharding/: shard sizes,
// the servers' capacities (divided by the copies a server keeps of each
// shard byte; 1 byte for a server that left, so it gets nothing), the
// link matrices and the wire factor. cap has one entry per server. mu held.
static void
inst_build(struct ps_scheduler *s, size_t ns, struct shard_inst *in,
    uint64_t *cap)
{
	uint32_t          T = (uint32_t) s->opts.trainers;
	uint32_t          M = (uint32_t) s->n_servers_seen;
	int               bounded = 0;
	// Bytes a server holds per shard byte: weights, one staging slot per
	// trainer and, with a pull codec, the reference and the delta log
	// (keep in step with ps/src/server/server.c: PS_DELTA_LOG = 4).
	double            copies = 1.0 + T;
	struct comp_codec pc;
	if (comp_codec_parse(s->job->codec_pull, s->job->bucket, &pc) ==
	        FB_OK &&
	    pc.id != COMP_NONE) {
		copies += 1.0 + 4.0 * (double) comp_bound(&pc, 1u << 20) /
		    (4.0 * (1u << 20));
	}
	for (uint32_t m = 0; m < M; m++) {
		cap[m] = s->capacity[m]
		    ? (uint64_t) ((double) s->capacity[m] / copies)
		    : UINT64_MAX;
		if (s->gone[m]) {
			cap[m] = 1;
		}
		bounded |= s->capacity[m] != 0 || s->gone[m];
	}
	*in            = (struct shard_inst) SHARD_INST_INIT;
	in->n_shards   = ns;
	in->n_servers  = M;
	in->n_trainers = T;
	in->size       = s->shard_size;
	in->cap        = bounded ? cap : NULL;
	in->lat        = s->lat;
	in->bw         = s->bw;
	in->rho        = wire_factor(s->job);
	in->k          = 1; // the pull rides on the push's reply
}

// choose fills assign[0..ns) for the shards (sizes in s->shard_size) by
// the configured policy, skipping servers that left, and records the
// model's figures in s->report when links were measured. mu held.
static int
choose(struct ps_scheduler *s, size_t ns, uint32_t *assign)
{
	struct shard_inst in;
	uint32_t          T   = (uint32_t) s->opts.trainers;
	uint32_t          M   = (uint32_t) s->n_servers_seen;
	uint64_t         *cap = fb_alloc(M * sizeof(uint64_t));
	double           *tt  = fb_alloc(T * sizeof(double));
	int               rv;

	if (cap == NULL || tt == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	inst_build(s, ns, &in, cap);
	if (s->opts.placement == PS_PLACEMENT_LATENCY) {
		struct shard_solve_opts so = SHARD_SOLVE_OPTS_INIT;
		so.seed = s->opts.seed;
		rv      = shard_solve(&in, &so, assign, tt, &s->report);
		if (rv == FB_ENOSPC) {
			snprintf(s->start_error, sizeof(s->start_error),
			    "no placement fits the servers' capacity "
			    "(--capacity-mb): the shards need more memory");
		}
		if (rv != FB_OK) {
			goto done;
		}
		// Probes are noisy: unless the solver predicts a clear gain
		// (10%) over round-robin, keep round-robin, which spreads the
		// load evenly over links that measure about the same.
		uint32_t *rr = fb_alloc(ns * sizeof(uint32_t));
		double    f_rr, fsum_rr;
		uint32_t  n_alive = 0;
		for (uint32_t m = 0; rr != NULL && m < M; m++) {
			if (!s->gone[m]) {
				cap[n_alive++] = m; // index map, as below
			}
		}
		if (rr != NULL && n_alive > 0 &&
		    shard_place_uniform(ns, n_alive, rr) == FB_OK) {
			for (size_t i = 0; i < ns; i++) {
				rr[i] = (uint32_t) cap[rr[i]];
			}
			inst_build(s, ns, &in, cap);
			if (shard_cost(&in, rr, &f_rr, &fsum_rr, tt) == FB_OK &&
			    (in.cap == NULL ||
			        shard_assign_check(&in, rr) == FB_OK) &&
			    s->report.f > 0.9 * f_rr) {
				FB_LOG(FB_LOG_NOTICE, "placement",
				    "solver %.3f ms vs round-robin %.3f ms: "
				    "within 10%%, keeping round-robin",
				    s->report.f * 1e3, f_rr * 1e3);
				memcpy(assign, rr, ns * sizeof(uint32_t));
				s->report.f     = f_rr;
				s->report.f_sum = fsum_rr;
				s->report.ratio = s->report.lb > 0
				    ? f_rr / s->report.lb
				    : 0;
			}
		}
		fb_free(rr);
		inst_build(s, ns, &in, cap);
	} else {
		// Round-robin over the servers still in the job: place on
		// indices 0..alive-1, then map index k to the k-th such server.
		uint32_t n_alive = 0;
		for (uint32_t m = 0; m < M; m++) {
			if (!s->gone[m]) {
				cap[n_alive++] = m; // cap doubles as the index map
			}
		}
		if ((rv = shard_place_uniform(ns, n_alive, assign)) != FB_OK) {
			goto done;
		}
		for (size_t i = 0; i < ns; i++) {
			assign[i] = (uint32_t) cap[assign[i]];
		}
		inst_build(s, ns, &in, cap);
		if (in.cap != NULL && shard_assign_check(&in, assign) != FB_OK) {
			snprintf(s->start_error, sizeof(s->start_error),
			    "uniform placement exceeds a server's capacity "
			    "(--capacity-mb); add servers or memory");
			rv = FB_ENOSPC;
			goto done;
		}
		if (probing(s)) {
			double f, fsum, lb;
			if (shard_cost(&in, assign, &f, &fsum, tt) == FB_OK &&
			    shard_lower_bound(&in, &lb) == FB_OK) {
				memset(&s->report, 0, sizeof(s->report));
				s->report.f     = f;
				s->report.f_sum = fsum;
				s->report.lb    = lb;
				s->report.ratio = lb > 0 ? f / lb : 0;
			}
		}
	}
	s->have_report = probing(s);
	if (probing(s)) {
		size_t n   = shard_format_bound(&in);
		char  *buf = n ? fb_alloc(n) : NULL;
		size_t w;
		if (buf != NULL && shard_format(&in, assign, buf, n, &w) == FB_OK) {
			log_lines(buf);
		}
		fb_free(buf);
		FB_LOG(FB_LOG_NOTICE, "placement",
		    "predicted step comm %.3f ms, lower bound %.3f ms, "
		    "F/LB %.3f", s->report.f * 1e3, s->report.lb * 1e3,
		    s->report.ratio);
	}
	rv = FB_OK;
done:
	fb_free(cap);
	fb_free(tt);
	return rv;
}

// current_cost is F of the published assignment under the links known
// now. mu held.
static double
current_cost(struct ps_scheduler *s)
{
	struct shard_inst in;
	uint64_t *cap = fb_alloc((size_t) s->n_servers_seen * sizeof(uint64_t));
	double   *tt  = fb_alloc((size_t) s->opts.trainers * sizeof(double));
	double    f = HUGE_VAL, fsum;
	if (cap != NULL && tt != NULL) {
		inst_build(s, s->n_assign, &in, cap);
		in.cap = NULL; // the current map is what it is
		if (shard_cost(&in, s->assign, &f, &fsum, tt) != FB_OK) {
			f = HUGE_VAL;
		}
	}
	fb_free(cap);
	fb_free(tt);
	return f;
}

static int republish(struct ps_scheduler *s, const uint32_t *assign);

// replan computes a new placement after links or membership changed and
// publishes it when `force` (a server left and its shards must go, or one
// joined under uniform placement) or when it beats the current one by more
// than 10% under the new links. mu held.
static void
replan(struct ps_scheduler *s, const char *why, int force)
{
	uint32_t           *na  = fb_alloc(s->n_assign * sizeof(uint32_t));
	double              now = current_cost(s);
	struct shard_report old = s->report; // of the published map
	int                 rv;
	if (na == NULL) {
		FB_LOG(FB_LOG_ERR, "placement", "replan (%s): out of memory", why);
		return;
	}
	s->start_error[0] = '\0';
	if ((rv = choose(s, s->n_assign, na)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "placement", "replan (%s): %s", why,
		    s->start_error[0] ? s->start_error : fb_strerror(rv));
		s->start_error[0] = '\0'; // the running job goes on
	} else if (force || s->report.f < 0.9 * now) {
		FB_LOG(FB_LOG_NOTICE, "placement", "replan (%s): predicted "
		    "%.3f ms -> %.3f ms", why, now * 1e3, s->report.f * 1e3);
		republish(s, na);
	} else {
		FB_LOG(FB_LOG_NOTICE, "placement", "replan (%s): keeping the "
		    "map (%.3f ms, new %.3f ms)", why, now * 1e3,
		    s->report.f * 1e3);
		s->report   = old; // Stats describe the map in force
		s->report.f = now;
	}
	fb_free(na);
}

// publish builds the placement map; called with mu held once every member
// is in. Returns FB_OK or an error (logged).
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

	if ((lens = fb_alloc(nt * sizeof(*lens))) == NULL) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < nt; i++) {
		lens[i] = s->job->tensors[i]->len;
	}
	rv = shard_split(lens, nt, s->opts.shard_bytes, &sd, &ns);
	fb_free(lens);
	if (rv != FB_OK) {
		return rv;
	}
	if (ns > PS_MAX_SHARDS) {
		snprintf(s->start_error, sizeof(s->start_error),
		    "the tensors make %zu shards of at most %llu bytes; the cap "
		    "is %u: raise --shard-bytes", ns,
		    (unsigned long long) s->opts.shard_bytes, PS_MAX_SHARDS);
		fb_free(sd);
		return FB_ERANGE;
	}
	assign = fb_alloc(ns * sizeof(*assign));
	infos  = fb_alloc(ns * sizeof(*infos));
	ptrs   = fb_alloc(ns * sizeof(*ptrs));
	if (assign == NULL || infos == NULL || ptrs == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	fb_free(s->shard_size);
	if ((s->shard_size = fb_alloc(ns * sizeof(uint64_t))) == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	for (size_t i = 0; i < ns; i++) {
		s->shard_size[i] = sd[i].len * 4;
	}
	if ((rv = choose(s, ns, assign)) != FB_OK) {
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
	p.n_servers   = (size_t) s->n_servers_seen;
	p.servers     = s->server_urls;
	p.n_shards    = ns;
	p.shards      = ptrs;
	p.job         = s->job;
	p.trainers    = (uint32_t) s->opts.trainers;
	// Keep a private deep copy (pack + unpack) to answer fetches from.
	s->placement_len = pswire__placement__get_packed_size(&p);
	if ((s->placement_buf = fb_alloc(s->placement_len)) == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	pswire__placement__pack(&p, s->placement_buf);
	s->placement = pswire__placement__unpack(NULL, s->placement_len,
	    s->placement_buf);
	if (s->placement == NULL) {
		rv = FB_ENOMEM;
		goto done;
	}
	FB_LOG(FB_LOG_NOTICE, "placement",
	    "epoch %llu: %zu shards on %d servers (%s), %d trainers",
	    (unsigned long long) p.epoch, ns, s->n_servers_seen,
	    s->opts.placement == PS_PLACEMENT_LATENCY ? "latency" : "uniform",
	    s->opts.trainers);
	for (size_t i = 0; i < ns; i++) {
		FB_LOG(FB_LOG_INFO, "placement",
		    "shard %zu = tensor %u '%s' [%llu, +%llu) -> server %u",
		    i, sd[i].tensor, s->job->tensors[sd[i].tensor]->name,
		    (unsigned long long) sd[i].offset,
		    (unsigned long long) sd[i].len, assign[i]);
	}
	rv = FB_OK;
done:
	fb_free(sd);
	if (rv == FB_OK) {
		fb_free(s->assign);
		s->assign   = assign;
		s->n_assign = ns;
	} else {
		fb_free(assign);
	}
	fb_free(infos);
	fb_free(ptrs);
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

// answer_parked answers every parked GetPlacement that can be: with the
// map, the membership map (min_epoch 0), or the start error. mu held.
static void
answer_parked(struct ps_scheduler *s)
{
	struct ps_call **pp = &s->parked;
	while (*pp != NULL) {
		struct ps_call *c = *pp;
		if (s->start_error[0] != '\0') {
			*pp = c->next;
			ps__call_reply_err(c, PSWIRE__STATUS__FAILED_PRECONDITION,
			    "job cannot start: %s", s->start_error);
		} else if (s->placement != NULL &&
		    s->placement->epoch >= c->park_version) {
			*pp = c->next;
			answer_placement(s, c);
		} else if (c->park_version == 0 &&
		    s->n_servers_seen == s->opts.servers) {
			*pp = c->next;
			answer_membership(s, c);
		} else {
			pp = &c->next;
		}
	}
}

static void
maybe_start(struct ps_scheduler *s)
{
	int rv;
	if (s->placement == NULL && s->start_error[0] == '\0' &&
	    s->job != NULL && s->n_trainers_seen == s->opts.trainers &&
	    s->n_servers_seen == s->opts.servers &&
	    (!probing(s) || s->n_links_seen == s->opts.trainers)) {
		if ((rv = publish(s)) != FB_OK) {
			if (s->start_error[0] == '\0') {
				snprintf(s->start_error, sizeof(s->start_error),
				    "cannot place shards: %s", fb_strerror(rv));
			}
			FB_LOG(FB_LOG_ERR, "placement", "%s", s->start_error);
		}
	}
	answer_parked(s);
}

static void on_simple(struct ps_scheduler *s, struct ps_call *c);

static int
cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return x < y ? -1 : x > y;
}

// grow_servers makes room for one more server in the member arrays (the
// link matrices are T x M, row-major, so they are re-laid out). Until the
// trainers re-probe, the newcomer's links are estimated as the median of
// each trainer's links. mu held.
static int
grow_servers(struct ps_scheduler *s)
{
	size_t M = (size_t) s->n_servers_seen, T = (size_t) s->opts.trainers;
	char     **urls = fb_realloc(s->server_urls, (M + 1) * sizeof(char *));
	if (urls == NULL) {
		return FB_ENOMEM;
	}
	s->server_urls    = urls;
	urls[M]           = NULL;
	uint64_t *cap     = fb_realloc(s->capacity, (M + 1) * sizeof(uint64_t));
	uint8_t  *gone    = fb_realloc(s->gone, M + 1);
	double   *lat     = fb_alloc(T * (M + 1) * sizeof(double));
	double   *bw      = fb_alloc(T * (M + 1) * sizeof(double));
	double   *tmp     = fb_alloc((M ? M : 1) * sizeof(double));
	if (cap != NULL) {
		s->capacity = cap;
	}
	if (gone != NULL) {
		s->gone = gone;
	}
	if (cap == NULL || gone == NULL || lat == NULL || bw == NULL ||
	    tmp == NULL) {
		fb_free(lat);
		fb_free(bw);
		fb_free(tmp);
		return FB_ENOMEM;
	}
	cap[M]  = 0;
	gone[M] = 0;
	for (size_t t = 0; t < T; t++) {
		for (size_t m = 0; m < M; m++) {
			lat[t * (M + 1) + m] = s->lat[t * M + m];
			bw[t * (M + 1) + m]  = s->bw[t * M + m];
		}
		for (int k = 0; k < 2; k++) {
			const double *src = k ? s->bw : s->lat;
			for (size_t m = 0; m < M; m++) {
				tmp[m] = src[t * M + m];
			}
			qsort(tmp, M, sizeof(double), cmp_dbl);
			(k ? bw : lat)[t * (M + 1) + M] = M ? tmp[M / 2] : 1.0;
		}
	}
	fb_free(s->lat);
	fb_free(s->bw);
	fb_free(tmp);
	s->lat = lat;
	s->bw  = bw;
	return FB_OK;
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
			if (s->n_servers_seen >= s->opts.servers &&
			    s->placement == NULL) {
				pthread_mutex_unlock(&s->mu);
				ps__call_reply_err(c,
				    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
				    "job expects %d servers; all registered",
				    s->opts.servers);
				return;
			}
			if (s->n_servers_seen >= s->opts.servers &&
			    grow_servers(s) != FB_OK) {
				pthread_mutex_unlock(&s->mu);
				ps__call_reply_err(c,
				    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
				    "cannot add a server: out of memory");
				return;
			}
			idx = s->n_servers_seen;
			if ((s->server_urls[idx] = fb_strdup(r->url)) == NULL) {
				pthread_mutex_unlock(&s->mu);
				ps__call_reply_err(c,
				    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
				    "out of memory");
				return;
			}
			s->capacity[idx] = r->capacity_bytes;
			s->n_servers_seen++;
			FB_LOG(FB_LOG_NOTICE, "members",
			    "server %d registered at %s (%d/%d)", idx, r->url,
			    s->n_servers_seen, s->opts.servers);
			if (s->placement != NULL) {
				// Joining a running job: it gets shards by a
				// new map and receives them by Transfer.
				rep.late = 1;
				replan(s, "a server joined",
				    s->opts.placement == PS_PLACEMENT_UNIFORM);
			}
		} else {
			rep.late = s->placement != NULL;
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
		if (check_job(r->job, why, sizeof(why)) != FB_OK) {
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
			FB_LOG(FB_LOG_NOTICE, "members",
			    "job declared by rank %u: %zu tensors, mode %s, "
			    "lr %g", r->rank, s->job->n_tensors,
			    s->job->mode ? "async" : "sync", s->job->lr);
		}
		if (s->trainer_gone[r->rank]) {
			// A rank that left comes back: rounds wait for it again
			// from the next map on.
			s->trainer_gone[r->rank] = 0;
			FB_LOG(FB_LOG_NOTICE, "members", "trainer %u rejoins",
			    r->rank);
			if (s->placement != NULL) {
				republish(s, s->assign);
			}
		}
		if (!s->trainer_seen[r->rank]) {
			s->trainer_seen[r->rank] = 1;
			s->n_trainers_seen++;
			FB_LOG(FB_LOG_NOTICE, "members",
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
	rep.servers     = (uint32_t) s->n_servers_seen;
	rep.probe       = probing(s) && r->role == PSWIRE__ROLE__ROLE_TRAINER;
	rep.probe_count = s->opts.probe_count;
	rep.probe_bytes = s->opts.probe_bytes;
	rep.reprobe_s   = s->opts.reprobe_s;
	h.body_case     = PSWIRE__HEADER__BODY_REGISTER_REP;
	h.register_rep  = &rep;
	maybe_start(s);
	ps__call_reply(c, &h);
	pthread_mutex_unlock(&s->mu);
}

static void
on_get_placement(struct ps_scheduler *s, struct ps_call *c)
{
	c->park_version = c->hdr->body_case == PSWIRE__HEADER__BODY_PLACEMENT_REQ
	    ? c->hdr->placement_req->min_epoch
	    : 1;
	pthread_mutex_lock(&s->mu);
	c->next   = s->parked;
	s->parked = c;
	answer_parked(s);
	pthread_mutex_unlock(&s->mu);
}

static void
on_report_links(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__ReportLinksRequest *r = c->hdr->links_req;
	size_t                      M = (size_t) s->n_servers_seen;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_LINKS_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "ReportLinks needs a links_req body");
		return;
	}
	// A trainer that has not fetched a map with a newly joined server yet
	// reports fewer servers: the first n are updated.
	if (r->rank >= (uint32_t) s->opts.trainers || r->n_rtt_s == 0 ||
	    r->n_rtt_s > M || r->n_bw_bps != r->n_rtt_s ||
	    (s->placement == NULL && r->n_rtt_s != M)) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "link report from rank %u: need %zu RTTs and bandwidths "
		    "for %d trainers, got %zu and %zu", r->rank, M,
		    s->opts.trainers, r->n_rtt_s, r->n_bw_bps);
		return;
	}
	M = r->n_rtt_s;
	for (size_t m = 0; m < M; m++) {
		if (!isfinite(r->rtt_s[m]) || r->rtt_s[m] < 0 ||
		    r->rtt_s[m] > 3600 || !isfinite(r->bw_bps[m]) ||
		    r->bw_bps[m] <= 0) {
			ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "link report from rank %u: server %zu has rtt %g s, "
			    "bandwidth %g B/s", r->rank, m, r->rtt_s[m],
			    r->bw_bps[m]);
			return;
		}
	}
	pthread_mutex_lock(&s->mu);
	// A re-probe (the job has started) that finds a link changed by more
	// than the threshold triggers a re-placement.
	int    changed = 0;
	double th      = s->opts.reprobe_change_pct / 100.0;
	size_t stride = (size_t) s->n_servers_seen;
	for (size_t m = 0; s->placement != NULL && m < M; m++) {
		double l0 = s->lat[r->rank * stride + m];
		double b0 = s->bw[r->rank * stride + m];
		changed |= fabs(r->rtt_s[m] - l0) > th * fmax(l0, 1e-4) ||
		    fabs(r->bw_bps[m] - b0) > th * b0;
	}
	for (size_t m = 0; m < M; m++) {
		s->lat[r->rank * stride + m] = r->rtt_s[m];
		s->bw[r->rank * stride + m]  = r->bw_bps[m];
		FB_LOG(FB_LOG_INFO, "links",
		    "trainer %u -> server %zu: rtt %.3f ms, %.1f MB/s", r->rank,
		    m, r->rtt_s[m] * 1e3, r->bw_bps[m] / 1e6);
	}
	if (!s->links_seen[r->rank]) {
		s->links_seen[r->rank] = 1;
		s->n_links_seen++;
	}
	if (changed && s->opts.placement == PS_PLACEMENT_LATENCY) {
		replan(s, "links changed", 0);
	}
	maybe_start(s);
	pthread_mutex_unlock(&s->mu);
	on_simple(s, c);
}

// on_leave: a server that leaves gracefully gets no shard in the next
// map; the servers move its shards away (it waits for that, then exits).
static void
on_leave(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__LeaveRequest *l = c->hdr->leave_req;
	int                   alive = 0;

	if (c->hdr->body_case != PSWIRE__HEADER__BODY_LEAVE_REQ) {
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "Leave needs a leave_req body");
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (l->role == PSWIRE__ROLE__ROLE_TRAINER) {
		// A trainer that leaves: sync rounds stop waiting for it (a
		// new map lists it as gone; servers complete pending rounds).
		if (l->id >= (uint32_t) s->opts.trainers) {
			pthread_mutex_unlock(&s->mu);
			ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
			    "no trainer %u", l->id);
			return;
		}
		if (!s->trainer_gone[l->id]) {
			s->trainer_gone[l->id] = 1;
			FB_LOG(FB_LOG_NOTICE, "members", "trainer %u leaves",
			    l->id);
			if (s->placement != NULL) {
				republish(s, s->assign);
			}
		}
		pthread_mutex_unlock(&s->mu);
		on_simple(s, c);
		return;
	}
	if (l->role != PSWIRE__ROLE__ROLE_SERVER) {
		pthread_mutex_unlock(&s->mu);
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "unknown role %d", l->role);
		return;
	}
	for (int m = 0; m < s->n_servers_seen; m++) {
		alive += !s->gone[m];
	}
	if (l->id >= (uint32_t) s->n_servers_seen) {
		pthread_mutex_unlock(&s->mu);
		ps__call_reply_err(c, PSWIRE__STATUS__INVALID_ARGUMENT,
		    "no server %u", l->id);
		return;
	}
	if (!s->gone[l->id] && alive <= 1) {
		pthread_mutex_unlock(&s->mu);
		ps__call_reply_err(c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "server %u is the last one: its shards have nowhere to go",
		    l->id);
		return;
	}
	if (!s->gone[l->id]) {
		s->gone[l->id] = 1;
		FB_LOG(FB_LOG_NOTICE, "members", "server %u leaves", l->id);
		if (s->placement != NULL) {
			replan(s, "a server left", 1);
		}
	}
	pthread_mutex_unlock(&s->mu);
	on_simple(s, c);
}

static void
on_stats(struct ps_scheduler *s, struct ps_call *c)
{
	char text[8192];
	ps_scheduler_stats(s, text, sizeof(text));
	ps__call_reply_stats(c, text);
}

static void
on_simple(struct ps_scheduler *s, struct ps_call *c)
{
	Pswire__Header        h   = PSWIRE__HEADER__INIT;
	Pswire__RegisterReply rep = PSWIRE__REGISTER_REPLY__INIT;
	(void) s;
	rep.trainers   = (uint32_t) s->opts.trainers;
	rep.servers    = (uint32_t) s->n_servers_seen;
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
		on_simple(s, c);
		break;
	case PSWIRE__METHOD__LEAVE:
		on_leave(s, c);
		break;
	case PSWIRE__METHOD__REPORT_LINKS:
		on_report_links(s, c);
		break;
	case PSWIRE__METHOD__STATS:
		on_stats(s, c);
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
	    o->shard_bytes % 4 != 0 || o->contexts < 1 ||
	    (o->placement != PS_PLACEMENT_UNIFORM &&
	     o->placement != PS_PLACEMENT_LATENCY) ||
	    (o->placement == PS_PLACEMENT_LATENCY && o->probe_bytes == 0) ||
	    o->probe_count < 1 || o->probe_count > 1000) {
		return FB_EINVAL;
	}
	if ((s = fb_zalloc(sizeof(*s))) == NULL) {
		return FB_ENOMEM;
	}
	s->opts = *o;
	pthread_mutex_init(&s->mu, NULL);
	s->trainer_seen = fb_zalloc((size_t) o->trainers);
	s->server_urls  = fb_zalloc(sizeof(char *) * (size_t) o->servers);
	s->capacity     = fb_zalloc(sizeof(uint64_t) * (size_t) o->servers);
	s->lat = fb_zalloc(sizeof(double) * (size_t) o->servers * o->trainers);
	s->bw  = fb_zalloc(sizeof(double) * (size_t) o->servers * o->trainers);
	s->links_seen = fb_zalloc((size_t) o->trainers);
	s->gone       = fb_zalloc((size_t) o->servers);
	s->trainer_gone = fb_zalloc((size_t) o->trainers);
	if (s->trainer_seen == NULL || s->server_urls == NULL ||
	    s->capacity == NULL || s->lat == NULL || s->bw == NULL ||
	    s->links_seen == NULL || s->gone == NULL ||
	    s->trainer_gone == NULL) {
		ps_scheduler_close(s);
		return FB_ENOMEM;
	}
	if ((rv = ps__rpc_open(o->url, o->contexts, o->max_msg, dispatch, s,
	         &s->rpc)) != FB_OK) {
		ps_scheduler_close(s);
		return rv;
	}
	FB_LOG(FB_LOG_NOTICE, "scheduler",
	    "listening on %s; expecting %d servers, %d trainers",
	    ps__rpc_url(s->rpc), o->servers, o->trainers);
	*out = s;
	return FB_OK;
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
	fb_free(s->placement_buf);
	for (int i = 0; s->server_urls && i < s->n_servers_seen; i++) {
		fb_free(s->server_urls[i]);
	}
	fb_free(s->server_urls);
	fb_free(s->trainer_seen);
	fb_free(s->capacity);
	fb_free(s->lat);
	fb_free(s->bw);
	fb_free(s->links_seen);
	fb_free(s->gone);
	fb_free(s->trainer_gone);
	fb_free(s->assign);
	fb_free(s->shard_size);
	pthread_mutex_destroy(&s->mu);
	fb_free(s);
}

// republish publishes the current map with shards reassigned (assign,
// one server index per shard) as the next epoch. mu held.
static int
republish(struct ps_scheduler *s, const uint32_t *assign)
{
	Pswire__Placement *p = s->placement, *np;
	Pswire__Placement  q = PSWIRE__PLACEMENT__INIT;
	uint8_t           *buf;
	size_t             len, n = p->n_shards;
	int                moved = 0;

	for (size_t i = 0; i < n; i++) {
		moved += p->shards[i]->server != assign[i];
		p->shards[i]->server = assign[i];
		s->assign[i]         = assign[i];
	}
	// The next map: the same shards and job, the current members (a
	// server may have joined).
	q.epoch     = ++s->epoch;
	q.n_servers = (size_t) s->n_servers_seen;
	q.servers   = s->server_urls;
	q.n_shards  = n;
	q.shards    = p->shards;
	q.job       = p->job;
	q.trainers  = p->trainers;
	uint32_t gone_t[4096];
	for (int t = 0; t < s->opts.trainers && q.n_gone_trainers < 4096; t++) {
		if (s->trainer_gone[t]) {
			gone_t[q.n_gone_trainers++] = (uint32_t) t;
		}
	}
	q.gone_trainers = gone_t;
	len         = pswire__placement__get_packed_size(&q);
	if ((buf = fb_alloc(len)) == NULL) {
		return FB_ENOMEM;
	}
	pswire__placement__pack(&q, buf);
	if ((np = pswire__placement__unpack(NULL, len, buf)) == NULL) {
		fb_free(buf);
		return FB_ENOMEM;
	}
	pswire__placement__free_unpacked(s->placement, NULL);
	fb_free(s->placement_buf);
	s->placement     = np;
	s->placement_buf = buf;
	s->placement_len = len;
	FB_LOG(FB_LOG_NOTICE, "placement", "epoch %llu: %d of %zu shards "
	    "move, %d servers", (unsigned long long) s->epoch, moved, n,
	    s->n_servers_seen);
	answer_parked(s);
	return FB_OK;
}

int
ps_scheduler_replace(struct ps_scheduler *s, const uint32_t *assign,
    size_t n)
{
	int rv;
	if (s == NULL || assign == NULL) {
		return FB_EINVAL;
	}
	pthread_mutex_lock(&s->mu);
	if (s->placement == NULL) {
		rv = FB_ESTATE;
	} else if (n != s->placement->n_shards) {
		rv = FB_EINVAL;
	} else {
		rv = FB_OK;
		for (size_t i = 0; i < n; i++) {
			if (assign[i] >= (uint32_t) s->n_servers_seen) {
				rv = FB_EINVAL;
			}
		}
		if (rv == FB_OK) {
			rv = republish(s, assign);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rv;
}

void
ps_scheduler_stats(struct ps_scheduler *s, char *buf, size_t n)
{
	size_t   off = 0;
	uint32_t M   = (uint32_t) s->n_servers_seen;
#define OUT(...)                                                             \
	do {                                                                 \
		if (off < n) {                                               \
			int k_ = snprintf(buf + off, n - off, __VA_ARGS__);  \
			off += k_ > 0 ? (size_t) k_ : 0;                     \
		}                                                            \
	} while (0)
	pthread_mutex_lock(&s->mu);
	OUT("# Scheduler\r\nrole:scheduler\r\nurl:%s\r\n",
	    ps__rpc_url(s->rpc));
	OUT("trainers:%d/%d\r\nservers:%d/%d\r\nlink_reports:%d\r\n",
	    s->n_trainers_seen, s->opts.trainers, s->n_servers_seen,
	    s->opts.servers, s->n_links_seen);
	OUT("epoch:%llu\r\nplacement:%s\r\nstart_error:%s\r\n",
	    (unsigned long long) s->epoch,
	    s->opts.placement == PS_PLACEMENT_LATENCY ? "latency" : "uniform",
	    s->start_error);
	OUT("# Placement\r\n");
	if (s->have_report) {
		OUT("predicted_step_s:%.6f\r\nlower_bound_s:%.6f\r\n"
		    "f_over_lb:%.4f\r\n", s->report.f, s->report.lb,
		    s->report.ratio);
	}
	for (int t = 0; s->have_report && t < s->opts.trainers; t++) {
		for (uint32_t m = 0; m < M; m++) {
			OUT("link_t%d_m%u:rtt_s=%.6f,bw_Bps=%.0f\r\n", t, m,
			    s->lat[(size_t) t * M + m],
			    s->bw[(size_t) t * M + m]);
		}
	}
	for (uint32_t m = 0; m < M && s->assign != NULL; m++) {
		uint64_t load = 0;
		size_t   cnt  = 0;
		for (size_t i = 0; i < s->n_assign; i++) {
			if (s->assign[i] == m) {
				load += s->shard_size[i];
				cnt++;
			}
		}
		OUT("server_%u:shards=%zu,bytes=%llu\r\n", m, cnt,
		    (unsigned long long) load);
	}
	for (size_t i = 0; i < s->n_assign; i++) {
		OUT("shard_%zu:server=%u,bytes=%llu\r\n", i, s->assign[i],
		    (unsigned long long) s->shard_size[i]);
	}
	pthread_mutex_unlock(&s->mu);
#undef OUT
	if (n > 0) {
		buf[n - 1] = '\0';
	}
}
