// client.c — libferry's front door: opening and closing the client,
// checking its options, the read-only accessors (shards, codecs, stats,
// last error) and the library's version.
//
// DESIGN. The client holds one REQ socket to the scheduler and one REQ
// socket (one context, one aio) per server; the files of clients/src each
// own one part of its life: declare.c joins the job, sched.c talks to the
// scheduler and keeps the placement map, conn.c keeps one connection per
// server and its request slots, probe.c measures the links, ops.c checks
// the public step calls, exchange.c runs them in rounds over every
// server, pull.c is a pull's own path through it, request.c builds the
// requests and reply.c takes the replies apart (into the caller's tensors
// or a pull sink); errors.c holds the error texts and the one fb → ferry
// error translation. The structs they share live in client_impl.h. This
// file calls into its neighbours; none calls into it.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/random.h>

#include "client_impl.h"

// Two steps so that the macros expand before they are turned into text.
#define FERRY_STR_(x) #x
#define FERRY_STR(x) FERRY_STR_(x)

FERRY_API const char *
ferry_version(void)
{
	return FERRY_STR(FERRY_VERSION_MAJOR) "." FERRY_STR(
	    FERRY_VERSION_MINOR) "." FERRY_STR(FERRY_VERSION_PATCH);
}

// opts_optim parses and checks o's optimizer and lr schedule into *op and
// *sc: FB_OK, or FB_EINVAL with a reason in why.
static int
opts_optim(const struct ferry_opts *o, struct fb_optim *op,
    struct fb_lr_sched *sc, char *why, size_t n)
{
	struct fb_optim    ko = FB_OPTIM_INIT;
	struct fb_lr_sched ks = FB_LR_SCHED_INIT;
	ko.momentum           = o->momentum;
	ko.beta1              = o->beta1;
	ko.beta2              = o->beta2;
	ko.eps                = o->eps;
	ko.weight_decay       = o->weight_decay;
	ks.lr                 = o->lr;
	ks.warmup             = o->lr_warmup;
	ks.step_every         = o->lr_step_every;
	ks.gamma              = o->lr_gamma;
	ks.lr_min             = o->lr_min;
	ks.total              = o->lr_total_steps;
	if (fb_optim_finish(o->optimizer, o->lr_schedule, &ko, &ks, why, n) !=
	    FB_OK) {
		return FB_EINVAL;
	}
	*op = ko;
	*sc = ks;
	return FB_OK;
}

// opts_tls_check loads o's TLS files once (then frees them) and checks
// the scheduler URL fits: NULL when fine, else the reason written in buf.
static const char *
opts_tls_check(const struct ferry_opts *o, char *buf, size_t n)
{
	struct psw_tls *t = NULL;
	char            u[300];

	if (psw_tls_open(o->tls_cert, o->tls_key, o->tls_ca, &t, buf, n) !=
	    FB_OK) {
		return buf;
	}
	if (psw_tls_url(t, o->scheduler_url, u, sizeof(u)) != FB_OK) {
		snprintf(buf, n, "scheduler_url %s: %s", o->scheduler_url,
		    psw_tls_url_why(t, o->scheduler_url));
		psw_tls_close(t);
		return buf;
	}
	psw_tls_close(t);
	return NULL;
}

// opts_local_check checks the local-steps fields as the scheduler does
// (ps__job_local): NULL when coherent, else the reason, written in buf.
static const char *
opts_local_check(const struct ferry_opts *o, char *buf, size_t n)
{
	if (o->local_steps > 0 && !(o->inner_lr > 0 && o->inner_lr < 1e6)) {
		snprintf(buf, n, "local_steps %u needs inner_lr in (0, 1e6)",
		    o->local_steps);
	} else if (o->local_steps == 0 && o->inner_lr != 0) {
		snprintf(buf, n, "inner_lr %g needs local_steps > 0",
		    o->inner_lr);
	} else if (o->fragments > FERRY_MAX_FRAGMENTS) {
		snprintf(buf, n, "fragments %u over %u", o->fragments,
		    FERRY_MAX_FRAGMENTS);
	} else if (o->fragments > 1 && o->local_steps == 0) {
		snprintf(buf, n, "fragments %u needs local_steps > 0",
		    o->fragments);
	} else if (o->fragments > 1 && o->mode != FERRY_MODE_SYNC) {
		snprintf(buf, n, "fragments %u needs FERRY_MODE_SYNC",
		    o->fragments);
	} else if (o->fragments > 1 && o->local_steps % o->fragments != 0) {
		snprintf(buf, n, "fragments %u must divide local_steps %u",
		    o->fragments, o->local_steps);
	} else {
		return NULL;
	}
	return buf;
}

FERRY_API int
ferry_opts_check(const struct ferry_opts *o, char *why, size_t n)
{
	struct fb_optim    op;
	struct fb_lr_sched sc;
	struct comp_codec  cc;
	char               cwhy[128] = "";
	const char        *msg       = NULL;
	char               buf[256];

	if (o == NULL) {
		msg = "opts is NULL";
	} else if (o->scheduler_url == NULL || *o->scheduler_url == '\0' ||
	    strlen(o->scheduler_url) >= 256) {
		msg = "scheduler_url must be a URL of 1..255 bytes";
	} else if (o->rank < 0 && o->rank != FERRY_RANK_ANY) {
		msg = "rank must be >= 0, or FERRY_RANK_ANY (-1: the "
		      "scheduler gives one)";
	} else if (!(o->lr > 0 && o->lr < 1e6)) {
		msg = "lr must be in (0, 1e6)";
	} else if (o->mode != FERRY_MODE_SYNC && o->mode != FERRY_MODE_ASYNC &&
	    o->mode != FERRY_MODE_SSP) {
		msg = "mode must be FERRY_MODE_SYNC, FERRY_MODE_ASYNC or "
		      "FERRY_MODE_SSP";
	} else if (o->staleness != 0 && o->mode != FERRY_MODE_SSP) {
		msg = "staleness needs FERRY_MODE_SSP";
	} else if (o->sync_quorum != 0 && o->mode != FERRY_MODE_SYNC) {
		msg = "sync_quorum needs FERRY_MODE_SYNC";
	} else if (comp_codec_parse_msg(o->codec_push ? o->codec_push : "none",
	               o->bucket, &cc, cwhy, sizeof(cwhy)) != FB_OK) {
		snprintf(buf, sizeof(buf), "codec_push '%s': %s",
		    o->codec_push, cwhy);
		msg = buf;
	} else if (comp_codec_parse_msg(o->codec_pull ? o->codec_pull : "none",
	               o->bucket, &cc, cwhy, sizeof(cwhy)) != FB_OK) {
		snprintf(buf, sizeof(buf), "codec_pull '%s': %s",
		    o->codec_pull, cwhy);
		msg = buf;
	} else if (cc.stochastic) {
		msg = "codec_pull cannot use stochastic rounding (:sr): both "
		      "sides must round the same way";
	} else if (opts_optim(o, &op, &sc, cwhy, sizeof(cwhy)) != FB_OK) {
		snprintf(buf, sizeof(buf), "%s", cwhy);
		msg = buf;
	} else if (!(o->clip_norm >= 0 && o->clip_norm < 1e30)) {
		msg = "clip_norm must be in [0, 1e30) (0: off)";
	} else if (!(o->link_budget >= 0 && o->link_budget <= 1e6)) {
		msg = "link_budget must be in [0, 1e6] (0: 1.0)";
	} else if ((msg = opts_local_check(o, buf, sizeof(buf))) != NULL) {
		// msg says why
	} else {
		msg = opts_tls_check(o, buf, sizeof(buf));
	}
	if (msg != NULL && why != NULL && n > 0) {
		snprintf(why, n, "%s", msg);
	}
	return msg != NULL ? FERRY_EINVAL : FERRY_OK;
}

// tune_malloc runs fb_malloc_tune for pthread_once.
static void
tune_malloc(void)
{
	(void) fb_malloc_tune();
}

FERRY_API int
ferry_client_open(const struct ferry_opts *o, ferry_client **out)
{
	ferry_client *c;

	if (out == NULL || ferry_opts_check(o, NULL, 0) != FERRY_OK) {
		return FERRY_EINVAL;
	}
	// Once per process (ferry.h says why); a second call changes nothing.
	static pthread_once_t tuned = PTHREAD_ONCE_INIT;
	(void) pthread_once(&tuned, tune_malloc);
	if ((c = fb_zalloc(sizeof(*c))) == NULL) {
		return FERRY_ENOMEM;
	}
	c->opts = *o;
	// SSP with staleness 0 runs the sync protocol (the servers do too).
	c->lockstep = o->mode == FERRY_MODE_SYNC ||
	    (o->mode == FERRY_MODE_SSP && o->staleness == 0);
	// The tables may be past version 0 (a running or restored job): the
	// first rows call learns their version (rows.c).
	c->rows_probe = 1;
	snprintf(c->url, sizeof(c->url), "%s", o->scheduler_url);
	snprintf(c->codec_push, sizeof(c->codec_push), "%s",
	    o->codec_push ? o->codec_push : "none");
	snprintf(c->codec_pull, sizeof(c->codec_pull), "%s",
	    o->codec_pull ? o->codec_pull : "none");
	c->opts.scheduler_url = c->url;
	c->opts.codec_push    = c->codec_push;
	c->opts.codec_pull    = c->codec_pull;
	snprintf(c->attack, sizeof(c->attack), "%s",
	    o->attack != NULL && strcmp(o->attack, "none") != 0 ? o->attack
	                                                        : "");
	c->opts.attack = c->attack;
	// Checked by ferry_opts_check above: these cannot fail now.
	(void) opts_optim(o, &c->optim, &c->lr_sched, NULL, 0);
	snprintf(c->optimizer, sizeof(c->optimizer), "%s",
	    fb_optim_name(c->optim.kind));
	snprintf(c->lr_schedule, sizeof(c->lr_schedule), "%s",
	    fb_lr_name(c->lr_sched.kind));
	c->opts.optimizer   = c->optimizer;
	c->opts.lr_schedule = c->lr_schedule;
	// A rank the scheduler will give (FERRY_RANK_ANY): the ids and
	// the seed are set again from it once declare learns it.
	c->any_rank = o->rank == FERRY_RANK_ANY;
	c->next_rid = ((uint64_t) (unsigned) o->rank << 48) | 1;
	if (c->any_rank) {
		// The scheduler knows a re-sent rankless Register by its
		// request id: two rankless trainers must not share theirs.
		uint64_t r = 0;
		if (getrandom(&r, sizeof(r), 0) != sizeof(r)) {
			r = fb_clock_ms() ^ (uint64_t) (uintptr_t) c;
		}
		c->next_rid |= (r & 0x7fffffffffffull) << 1;
	}
	c->rng = o->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t) (o->rank + 1));
	if (comp_codec_parse(c->codec_push, o->bucket, &c->cpush) != FB_OK ||
	    comp_codec_parse(c->codec_pull, o->bucket, &c->cpull) != FB_OK ||
	    c->cpull.stochastic ||
	    comp_codec_parse("none", 0, &c->cnone) != FB_OK) {
		fb_free(c);
		return FERRY_EINVAL;
	}
	// The files were read by ferry_opts_check above; they are read again
	// (and may have changed) here.
	char why[300];
	int rv = psw_tls_open(o->tls_cert, o->tls_key, o->tls_ca, &c->tls, why,
	    sizeof(why));
	if (rv != FB_OK) {
		fb_free(c);
		return rv == FB_ENOMEM ? FERRY_ENOMEM : FERRY_EINVAL;
	}
	c->opts.tls_cert = c->opts.tls_key = c->opts.tls_ca = NULL;
	if (psw_req_open(c->tls, c->url, 1u << 30, 20, 500, &c->sched,
	        &c->sched_ctx, &c->sched_aio) != FB_OK) {
		psw_tls_close(c->tls);
		fb_free(c);
		return FERRY_ECONNECT;
	}
	*out = c;
	return FERRY_OK;
}

FERRY_API int
ferry_client_set_secret_file(ferry_client *c, const char *path)
{
	struct psw_auth *a = NULL;
	char             why[300];
	int              rv;

	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (path == NULL || *path == '\0') {
		return ferry__fail(c, FERRY_EINVAL,
		    "secret file path is empty");
	}
	if (c->n_tensors > 0) {
		return ferry__fail(c, FERRY_ESTATE,
		    "set the secret file before declare");
	}
	// A trainer waiting for its rank signs as an unassigned one (the
	// way a server does before it has an index) until declare learns
	// the rank the scheduler gave.
	uint32_t id = c->opts.rank >= 0 ? (uint32_t) c->opts.rank
	                                : PSW_ID_UNASSIGNED;
	if ((rv = psw_auth_open(path, PSW_ROLE_TRAINER, id, &a, why,
	         sizeof(why))) != FB_OK) {
		return ferry__fail(c,
		    rv == FB_ENOMEM ? FERRY_ENOMEM : FERRY_EINVAL, "%s", why);
	}
	psw_auth_close(c->auth);
	c->auth = a;
	return FERRY_OK;
}

FERRY_API void
ferry_client_close(ferry_client *c)
{
	if (c == NULL) {
		return;
	}
	ferry__hb_stop(c);
	if (c->ax != NULL || c->fx_busy) {
		// a layer-wise push-pull or a fragment round left running
		ferry__xfer_abort(c);
	}
	ferry__rows_close(c);  // before the slots it may use
	ferry__conns_close(c); // slots, sockets, the completion lock
	fb_free(c->ax);
	fb_free(c->ax_started);
	fb_free(c->fx);
	nng_close(c->sched);
	nng_aio_free(c->sched_aio);
	psw_auth_close(c->auth);
	psw_tls_close(c->tls);
	if (c->pl != NULL) {
		pswire__placement__free_unpacked(c->pl, NULL);
	}
	for (size_t t = 0; t < c->n_tensors; t++) {
		if (c->resid != NULL) {
			fb_free(c->resid[t]);
		}
		if (c->ref != NULL) {
			fb_free(c->ref[t]);
		}
	}
	fb_free(c->resid);
	fb_free(c->ref);
	fb_free(c->shard_ver);
	fb_free(c->need);
	fb_free(c->need_full);
	fb_free(c->ref_at);
	fb_free(c->held);
	fb_free(c->seed_seen);
	fb_free(c->codes);
	fb_free(c->code_off);
	fb_free(c->staged_rung);
	fb_free(c->layout);
	fb_free(c->clip);
	fb_free(c->tensor_len);
	fb_free(c->tensor_avg);
	fb_free(c->tensor_init);
	fb_free(c->tensor_scale);
	fb_free(c->job_packed);
	fb_free(c);
}

FERRY_API int
ferry_client_shards(const ferry_client *c, const struct ferry_shard **shards,
    size_t *n, uint32_t *codec_id, uint32_t *bucket)
{
	if (c == NULL || shards == NULL || n == NULL || codec_id == NULL ||
	    bucket == NULL) {
		return FERRY_EINVAL;
	}
	if (!c->declared) {
		return FERRY_ESTATE;
	}
	*shards   = c->layout;
	*n        = c->pl->n_shards;
	*codec_id = c->cpush.id;
	*bucket   = c->cpush.bucket;
	return FERRY_OK;
}

FERRY_API int
ferry_client_in_warmup(const ferry_client *c)
{
	return c != NULL && c->version < c->opts.warmup_steps;
}

FERRY_API int
ferry_client_pull_codec(const ferry_client *c, uint32_t *codec_id,
    uint32_t *bucket)
{
	if (c == NULL || codec_id == NULL || bucket == NULL) {
		return FERRY_EINVAL;
	}
	*codec_id = c->cpull.id;
	*bucket   = c->cpull.bucket;
	return FERRY_OK;
}

FERRY_API void
ferry_client_stats(const ferry_client *c, struct ferry_stats *st)
{
	if (c != NULL && st != NULL) {
		*st = c->stats;
	}
}

FERRY_API void
ferry_client_recovery(const ferry_client *c, struct ferry_recovery *st)
{
	if (st != NULL) {
		*st = c != NULL ? c->recovery : (struct ferry_recovery) { 0 };
	}
}

FERRY_API const char *
ferry_client_last_error(const ferry_client *c)
{
	return c != NULL ? c->err : "";
}

FERRY_API int
ferry_client_trainers(const ferry_client *c)
{
	return c != NULL && c->pl != NULL ? (int) c->pl->trainers : 0;
}

FERRY_API double
ferry_client_ef_residual_norm(const ferry_client *c)
{
	double sum = 0;
	if (c == NULL || c->resid == NULL) {
		return 0;
	}
	for (size_t t = 0; t < c->n_tensors; t++) {
		const float *e = c->resid[t];
		for (size_t i = 0; e != NULL && i < c->tensor_len[t]; i++) {
			sum += (double) e[i] * e[i];
		}
	}
	return sqrt(sum);
}

FERRY_API double
ferry_client_lr(const ferry_client *c)
{
	return c != NULL ? fb_lr_at(&c->lr_sched, c->version) : 0.0;
}
