// declare.c — joining and leaving a job: ferry_client_declare_tables
// (and ferry_client_declare_specs, the same with no sparse tables, and
// ferry_client_declare, its all-weights form) registers the tensor table
// and the sparse tables (tables.c checks them) with the scheduler, probes
// the links when the scheduler asks for it, waits for the first placement
// map and allocates the per-shard and per-tensor state every later
// operation uses;
// ferry_client_leave tells the scheduler this trainer is gone, and
// ferry_client_rejoin registers it again under its rank. Declare and
// rejoin start the heartbeat thread (heartbeat.c) and leave stops it.
// A trainer opened with FERRY_RANK_ANY learns its rank from the
// scheduler's Register reply here (register_run).
#include "client_impl.h"

// rank_take adopts rank r, which the scheduler gave a FERRY_RANK_ANY
// client: opts.rank (every header, the heartbeat and the leave carry
// it), the signing identity (trainer-<r> from now on), the request ids'
// rank bits (the counter bits go on, so no id repeats) and the
// stochastic rounding seed, as ferry_client_open sets them for a rank
// given in opts.
static void
rank_take(ferry_client *c, uint32_t r)
{
	c->opts.rank = (int) r;
	if (c->auth != NULL) {
		psw_auth_set_self(c->auth, PSW_ROLE_TRAINER, r);
	}
	c->next_rid = ((uint64_t) r << 48) | (c->next_rid & 0xffffffffffffull);
	c->rng = c->opts.seed ^ (0x9e3779b97f4a7c15ull * (uint64_t) (r + 1));
}

// register_run sends the trainer's Register for job (any_rank while the
// client has no rank yet) and returns the reply header in *rh (the
// caller frees it). A rank given is checked and taken; the reply's
// elastic flag is kept. Errors: those of ferry__sched_call, FERRY_EPROTO
// (a reply without a usable rank).
static int
register_run(ferry_client *c, Pswire__JobConfig *job, Pswire__Header **rh)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	int                     rv;
	int                     any = c->any_rank && c->opts.rank < 0;

	rr.role        = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank        = any ? 0 : (uint32_t) c->opts.rank;
	rr.any_rank    = any;
	rr.attack      = c->attack; // "" when honest: not sent
	rr.job         = job;
	h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req = &rr;
	if ((rv = ferry__sched_call(c, &h, PSWIRE__METHOD__REGISTER,
	         ferry__timeout(c), rh)) != FERRY_OK) {
		return rv;
	}
	const Pswire__RegisterReply *rep = (*rh)->body_case ==
	        PSWIRE__HEADER__BODY_REGISTER_REP
	    ? (*rh)->register_rep
	    : NULL;
	if (any) {
		if (rep == NULL || rep->id >= INT32_MAX ||
		    (rep->trainers > 0 && rep->id >= rep->trainers)) {
			return ferry__fail(c, FERRY_EPROTO,
			    "scheduler %s: Register reply gives no usable rank "
			    "(a scheduler older than 0.4 cannot give ranks: "
			    "pass one)",
			    c->url);
		}
		rank_take(c, rep->id);
	}
	c->elastic = rep != NULL && rep->elastic;
	return FERRY_OK;
}

// job_keep packs job into c->job_packed: a rejoin registers the same
// JobConfig (the scheduler compares it whole).
static int
job_keep(ferry_client *c, const Pswire__JobConfig *job)
{
	size_t n = pswire__job_config__get_packed_size(job);
	fb_free(c->job_packed);
	if ((c->job_packed = fb_alloc(n ? n : 1)) == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	c->job_packed_len = pswire__job_config__pack(job, c->job_packed);
	return FERRY_OK;
}

// job_from_opts fills job (and its optim and lr_schedule, oc and ls) with
// c's job settings: the one place a ferry_opts job field becomes its
// JobConfig field (the scheduler compares and copies the message whole).
// Strings are c's checked, canonical copies (client.c); the tensors are
// the caller's.
static void
job_from_opts(const ferry_client *c, Pswire__JobConfig *job,
    Pswire__OptimConfig *oc, Pswire__LrSchedule *ls)
{
	job->mode         = c->opts.mode;
	job->lr           = c->opts.lr;
	job->codec_push   = (char *) c->codec_push;
	job->codec_pull   = (char *) c->codec_pull;
	job->bucket       = c->opts.bucket;
	job->warmup_steps = c->opts.warmup_steps;
	job->staleness    = c->opts.staleness;
	job->sync_quorum  = c->opts.sync_quorum;
	job->clip_norm    = c->opts.clip_norm;
	job->local_steps  = c->opts.local_steps;
	job->inner_lr     = c->opts.inner_lr;
	// 0 and 1 both mean "the whole model at once": sent as 0 so that
	// two trainers that spell it differently run one job.
	job->fragments   = c->opts.fragments > 1 ? c->opts.fragments : 0;
	oc->name         = (char *) c->optimizer;
	oc->momentum     = c->opts.momentum;
	oc->beta1        = c->opts.beta1;
	oc->beta2        = c->opts.beta2;
	oc->eps          = c->opts.eps;
	oc->weight_decay = c->opts.weight_decay;
	ls->kind         = (char *) c->lr_schedule;
	ls->lr_warmup    = c->opts.lr_warmup;
	ls->step_every   = c->opts.lr_step_every;
	ls->gamma        = c->opts.lr_gamma;
	ls->lr_min       = c->opts.lr_min;
	ls->total_steps  = c->opts.lr_total_steps;
	job->optim       = oc;
	job->lr_schedule = ls;
	// The rows' and seeded tensors' initial values hang on the seed. A
	// job without either leaves it out: trainers of a dense job may seed
	// their stochastic codecs differently, and the scheduler compares the
	// JobConfig whole.
	job->seed = c->n_tables > 0 || c->any_seeded ? c->opts.seed : 0;
}

// state_alloc sizes what the client keeps per shard and per tensor once
// the first map is known: versions, the shard layout, the push codes and
// clip buffer, the error-feedback residuals and pull references. Returns
// FERRY_OK or FERRY_ENOMEM (ferry_client_close frees what was made).
static int
state_alloc(ferry_client *c, const struct ferry_tensor_spec *d, size_t n)
{
	int rv;

	c->shard_ver = fb_zalloc(c->pl->n_shards * sizeof(uint64_t));
	c->need      = fb_zalloc(c->pl->n_shards);
	c->need_full = fb_zalloc(c->pl->n_shards);
	c->ref_at    = fb_zalloc(c->pl->n_shards);
	c->held      = fb_zalloc(c->pl->n_shards * sizeof(*c->held));
	c->seed_seen = fb_zalloc(c->pl->n_shards * sizeof(uint64_t));
	c->code_off  = fb_zalloc(c->pl->n_shards * sizeof(size_t));
	c->layout    = fb_zalloc(c->pl->n_shards * sizeof(*c->layout));
	if (c->need == NULL || c->need_full == NULL || c->code_off == NULL ||
	    c->layout == NULL || c->ref_at == NULL || c->held == NULL ||
	    c->seed_seen == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < c->pl->n_shards; i++) {
		c->layout[i].tensor     = c->pl->shards[i]->tensor;
		c->layout[i].offset     = c->pl->shards[i]->offset;
		c->layout[i].len        = c->pl->shards[i]->len;
		c->layout[i].code_bytes = comp_bound(&c->cpush,
		    c->pl->shards[i]->len);
	}
	if ((rv = ferry__auto_init(c)) != FERRY_OK) {
		return rv;
	}
	if (c->cpush.id != COMP_NONE) {
		size_t total = 0;
		for (size_t i = 0; i < c->pl->n_shards; i++) {
			c->code_off[i] = total;
			total += ferry__auto_bound(c, c->pl->shards[i]->len);
		}
		if ((c->codes = fb_alloc(total ? total : 1)) == NULL) {
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
	}
	if (c->opts.clip_norm > 0 && c->cpush.id != COMP_NONE) {
		// Clipped codes are encoded from one shard's scaled copy.
		size_t maxlen = 1;
		for (size_t i = 0; i < c->pl->n_shards; i++) {
			if (c->pl->shards[i]->len > maxlen) {
				maxlen = c->pl->shards[i]->len;
			}
		}
		if ((c->clip = fb_alloc(maxlen * sizeof(float))) == NULL) {
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
	}
	c->resid = fb_zalloc(n * sizeof(float *));
	c->ref   = fb_zalloc(n * sizeof(float *));
	if (c->shard_ver == NULL || c->resid == NULL || c->ref == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	for (size_t t = 0; t < n; t++) {
		if (c->cpush.id != COMP_NONE &&
		    (c->resid[t] = fb_zalloc(d[t].len * sizeof(float))) ==
		        NULL) {
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
		if (c->cpull.id != COMP_NONE &&
		    (c->ref[t] = fb_zalloc(d[t].len * sizeof(float))) ==
		        NULL) {
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
	}
	return FERRY_OK;
}

// tensor_descs checks the caller's tensor specs d[0..n) and fills the
// job's TensorDescs (tds, pointed to by tdp) and the client's per-tensor
// arrays from them. Returns FERRY_OK or FERRY_EINVAL naming the tensor.
static int
tensor_descs(ferry_client *c, const struct ferry_tensor_spec *d, size_t n,
    Pswire__TensorDesc *tds, Pswire__TensorDesc **tdp)
{
	for (size_t i = 0; i < n; i++) {
		if (d[i].name == NULL || strlen(d[i].name) > 127 ||
		    d[i].len == 0) {
			return ferry__fail(c, FERRY_EINVAL,
			    "tensor %zu: needs a name of at most 127 bytes "
			    "and a length > 0",
			    i);
		}
		if (d[i].kind != FERRY_TENSOR_WEIGHTS &&
		    d[i].kind != FERRY_TENSOR_AVERAGE) {
			return ferry__fail(c, FERRY_EINVAL,
			    "tensor %zu ('%s'): unknown kind %u (0: weights, "
			    "1: average)",
			    i, d[i].name, d[i].kind);
		}
		char iwhy[96];
		if (fb_init_check(d[i].init, d[i].init_scale, iwhy,
		        sizeof(iwhy)) != FB_OK) {
			return ferry__fail(c, FERRY_EINVAL,
			    "tensor %zu ('%s'): %s", i, d[i].name, iwhy);
		}
		pswire__tensor_desc__init(&tds[i]);
		tds[i].init        = (Pswire__TensorInit) d[i].init;
		tds[i].init_scale  = d[i].init_scale;
		c->tensor_init[i]  = (uint8_t) d[i].init;
		c->tensor_scale[i] = d[i].init_scale;
		c->any_seeded |= fb_init_seeded(d[i].init);
		tds[i].name      = (char *) d[i].name;
		tds[i].len       = d[i].len;
		tds[i].kind      = d[i].kind == FERRY_TENSOR_AVERAGE
		         ? PSWIRE__TENSOR_KIND__TENSOR_AVERAGE
		         : PSWIRE__TENSOR_KIND__TENSOR_WEIGHTS;
		tdp[i]           = &tds[i];
		c->tensor_len[i] = d[i].len;
		c->tensor_avg[i] = d[i].kind == FERRY_TENSOR_AVERAGE;
	}
	return FERRY_OK;
}

// declare_run is ferry_client_declare_tables and, with no tables,
// ferry_client_declare_specs: the one declare path.
static int
declare_run(ferry_client *c, const struct ferry_tensor_spec *d, size_t n,
    const struct ferry_table_spec *tables, size_t n_tables)
{
	Pswire__JobConfig   job = PSWIRE__JOB_CONFIG__INIT;
	Pswire__OptimConfig oc  = PSWIRE__OPTIM_CONFIG__INIT;
	Pswire__LrSchedule  ls  = PSWIRE__LR_SCHEDULE__INIT;
	Pswire__TensorDesc *tds = NULL, **tdp = NULL;
	Pswire__TableDesc  *tbd = NULL, **tbp = NULL;
	Pswire__Header     *rh = NULL;
	int                 rv;

	// n structs exist at d, so n * sizeof(Pswire__TensorDesc) (the
	// largest per-tensor table below) cannot wrap; the check says so.
	// The same for the tables.
	if (c == NULL || d == NULL || n == 0 ||
	    n > SIZE_MAX / sizeof(Pswire__TensorDesc) ||
	    (tables == NULL && n_tables > 0) ||
	    n_tables > SIZE_MAX / sizeof(Pswire__TableDesc)) {
		return FERRY_EINVAL;
	}
	if (c->declared) {
		return ferry__fail(c, FERRY_ESTATE,
		    "tensors already declared");
	}
	tbd = fb_alloc((n_tables ? n_tables : 1) * sizeof(*tbd));
	tbp = fb_alloc((n_tables ? n_tables : 1) * sizeof(*tbp));
	if (tbd == NULL || tbp == NULL) {
		rv = ferry__fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	if ((rv = ferry__tables_take(c, tables, n_tables, tbd)) != FERRY_OK) {
		goto done;
	}
	for (size_t i = 0; i < n_tables; i++) {
		tbp[i] = &tbd[i];
	}
	// A declare that failed before may have left them.
	fb_free(c->tensor_len);
	fb_free(c->tensor_avg);
	fb_free(c->tensor_init);
	fb_free(c->tensor_scale);
	c->tensor_len   = fb_alloc(n * sizeof(*c->tensor_len));
	c->tensor_avg   = fb_zalloc(n);
	c->tensor_init  = fb_zalloc(n);
	c->tensor_scale = fb_zalloc(n * sizeof(*c->tensor_scale));
	c->any_seeded   = 0;
	tds             = fb_alloc(n * sizeof(*tds));
	tdp             = fb_alloc(n * sizeof(*tdp));
	if (c->tensor_len == NULL || c->tensor_avg == NULL || tds == NULL ||
	    c->tensor_init == NULL || c->tensor_scale == NULL || tdp == NULL) {
		rv = ferry__fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	if ((rv = tensor_descs(c, d, n, tds, tdp)) != FERRY_OK) {
		goto done;
	}
	c->n_tensors  = n;
	job.n_tensors = n;
	job.tensors   = tdp;
	job.n_tables  = n_tables;
	job.tables    = tbp;
	job_from_opts(c, &job, &oc, &ls);
	if ((rv = job_keep(c, &job)) != FERRY_OK ||
	    (rv = register_run(c, &job, &rh)) != FERRY_OK) {
		goto done;
	}

	if (rh->body_case == PSWIRE__HEADER__BODY_REGISTER_REP &&
	    rh->register_rep->probe) {
		c->probe_count = rh->register_rep->probe_count;
		c->probe_bytes = rh->register_rep->probe_bytes;
		c->reprobe_s   = rh->register_rep->reprobe_s;
		pswire__header__free_unpacked(rh, NULL);
		rh = NULL;
		if ((rv = ferry__map_fetch(c, 0, &rh)) != FERRY_OK ||
		    (rv = ferry__conns_open(c, rh->placement)) != FERRY_OK ||
		    (rv = ferry__links_probe(c, c->probe_count,
		         c->probe_bytes)) != FERRY_OK) {
			goto done;
		}
		c->last_probe_ms = fb_clock_ms();
	}
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
		rh = NULL;
	}

	// Wait (server-side, parked) for every member, then fetch the map.
	if ((rv = ferry__map_fetch(c, 1, &rh)) != FERRY_OK) {
		goto done;
	}
	c->pl         = rh->placement;
	rh->placement = NULL;
	rh->body_case = PSWIRE__HEADER__BODY__NOT_SET;
	if ((rv = ferry__placement_check(c, c->pl)) != FERRY_OK ||
	    (rv = ferry__conns_open(c, c->pl)) != FERRY_OK ||
	    (rv = ferry__conns_assign(c)) != FERRY_OK) {
		goto done;
	}
	if ((rv = state_alloc(c, d, n)) != FERRY_OK ||
	    (rv = ferry__tables_route(c)) != FERRY_OK) {
		goto done;
	}
	ferry__seed_seen(c);
	// "auto" chooses codecs by the links: measure them here when the
	// scheduler did not ask for probes (kept, not reported).
	if ((c->auto_push || c->auto_pull) && c->last_probe_ms == 0 &&
	    (rv = ferry__links_measure(c, 7, 1u << 20)) != FERRY_OK) {
		goto done;
	}
	if ((rv = ferry__hb_start(c)) != FERRY_OK) {
		goto done;
	}
	c->declared = 1;
	// A sync job may be running already: the first pull joins its
	// rounds (pull.c says when it must).
	c->join_pending = c->lockstep;
done:
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	fb_free(tds);
	fb_free(tdp);
	fb_free(tbd);
	fb_free(tbp);
	return rv;
}

FERRY_API int
ferry_client_declare_specs(ferry_client *c, const struct ferry_tensor_spec *d,
    size_t n)
{
	return declare_run(c, d, n, NULL, 0);
}

FERRY_API int
ferry_client_declare_tables(ferry_client *c,
    const struct ferry_tensor_spec *specs, size_t n,
    const struct ferry_table_spec *tables, size_t n_tables)
{
	return declare_run(c, specs, n, tables, n_tables);
}

// The 0.1 call: its struct has no kind (docs/libferry.md §3 keeps its
// size), so every tensor is WEIGHTS. One declare path: the descs become
// specs here and ferry_client_declare_specs checks them.
FERRY_API int
ferry_client_declare(ferry_client *c, const struct ferry_tensor_desc *d,
    size_t n)
{
	struct ferry_tensor_spec *s;
	int                       rv;

	if (c == NULL || d == NULL || n == 0 || n > SIZE_MAX / sizeof(*s)) {
		return FERRY_EINVAL;
	}
	if ((s = fb_alloc(n * sizeof(*s))) == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		s[i].name       = d[i].name;
		s[i].len        = d[i].len;
		s[i].kind       = FERRY_TENSOR_WEIGHTS;
		s[i].init       = FERRY_INIT_OFFER;
		s[i].init_scale = 0;
	}
	rv = ferry_client_declare_specs(c, s, n);
	fb_free(s);
	return rv;
}

FERRY_API int
ferry_client_leave(ferry_client *c)
{
	Pswire__Header       h  = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l  = PSWIRE__LEAVE_REQUEST__INIT;
	Pswire__Header      *rh = NULL;
	int                  rv;
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return ferry__fail(c, FERRY_ESTATE,
		    "declare the tensors first");
	}
	// Heartbeats stop first: one that arrived after the Leave would be
	// refused, and a trainer that left must not be declared dead. Their
	// socket closes with the client (ferry__hb_halt says why).
	ferry__hb_halt(c);
	l.role      = PSWIRE__ROLE__ROLE_TRAINER;
	l.id        = (uint32_t) c->opts.rank;
	h.body_case = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req = &l;
	// Short: a trainer leaves while stopping, maybe with the job gone.
	rv = ferry__sched_call(c, &h, PSWIRE__METHOD__LEAVE,
	    ferry__timeout(c) < 3000 ? ferry__timeout(c) : 3000, &rh);
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	// Gone from the job (or stopping with it gone): a rejoin may follow.
	// The scheduler takes back a lease left held (the positions after
	// its last mark return to the pool), so none is held any more.
	c->left       = 1;
	c->lease_held = 0;
	return rv;
}

FERRY_API int
ferry_client_rejoin(ferry_client *c)
{
	Pswire__JobConfig *job;
	Pswire__Header    *rh = NULL;
	int                rv;
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared || !c->left) {
		return ferry__fail(c, FERRY_ESTATE,
		    "rejoin follows ferry_client_leave");
	}
	job = pswire__job_config__unpack(NULL, c->job_packed_len,
	    c->job_packed);
	if (job == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	rv = register_run(c, job, &rh);
	pswire__job_config__free_unpacked(job, NULL);
	if (rh != NULL) {
		pswire__header__free_unpacked(rh, NULL);
	}
	// The links were measured at declare; the map that lists this rank
	// again is out once the Register is answered.
	if (rv != FERRY_OK) {
		return rv;
	}
	// A rollback while away is the caller's to hear (pull, go on from
	// the version in ferry_client_stats), once it is back in the job.
	int hb = FERRY_OK;
	rv     = ferry__map_catch_up(c);
	if ((rv != FERRY_OK && rv != FERRY_EROLLBACK) ||
	    (hb = ferry__hb_start(c)) != FERRY_OK) {
		return rv != FERRY_OK && rv != FERRY_EROLLBACK ? rv : hb;
	}
	c->left         = 0;
	c->join_pending = c->lockstep;
	return rv;
}
