// local.c — the local-steps loop (--local-steps H, DiLoCo;
// docs/algorithms.md §8): each trainer takes H inner steps on its own copy
// of the weights with the inner optimizer (inner.c), then pushes its
// pseudo-gradient and takes the job's new weights; with --fragments F the
// model is synced in F staggered fragments instead.
//
// DESIGN
// Buffers: r->w holds the GLOBAL weights, the ones libferry pulled (its
// reference when a server dies, so they are never changed here), and
// `loc` the trainer's own, which the backend computes on (handed over
// with tr__run_set_weights after each inner step: a pointer on the CPU).
// Each inner step is the plain loop's gradient (same minibatch order,
// r->g, the host path: no device encoder or pull sink in this mode), then
// tr__inner_step. Steps are inner steps: --epochs and --max-steps count
// them, and in lockstep (sync) a version is an outer round, so a trainer
// that (re)joins at version v starts at inner step v H.
//
// F = 1: after inner step s (1-based) with s % H == 0, or the job's last
// step (a shorter last phase: no sample is dropped), one push-pull of P =
// (n/B) A with n_samples = n (the phase's samples) into r->w; then loc =
// r->w and A = 0, the inner optimizer's state kept. A push the round had
// closed without (FERRY_EBEHIND) or a rollback (FERRY_EROLLBACK) is
// answered by a pull, loc = global and A = 0: the phase's local steps are
// lost, as the plain loop loses a step; a rollback in lockstep also moves
// the step back to the rolled-back version's, as step.c does.
//
// F > 1: fragment f (its spans from ferry_client_fragment_spans) is
// synced after inner step s when s % H == ((f + 1) H / F) % H, with its
// own sample count n_f since its last sync: P_f = (n_f/B) A_f is written
// into `snap` (libferry reads it until the wait), A_f is zeroed, and the
// exchange either blocks (--fragment-delay 0: loc_f = pulled_f) or runs
// while the next D inner steps compute; at its wait loc_f = pulled_f +
// (loc_f - loc_f at the start), and A_f holds what accumulated since the
// start. At most one fragment is in flight (D < H/F). At the job's last
// step every fragment with samples is synced, blocking, in order: every
// rank runs the same schedule, so the rounds match.
//
// Progress lines and the curve come at exchange ends (nothing in flight)
// when a --log-interval or an epoch end was crossed: the test accuracy is
// the global weights' (for F > 1 the backend is handed r->w for the
// evaluation and loc again after it).
#include <ferry/ferry.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inner.h"
#include "step.h"
#include "tr_impl.h"

#define MOD "train"
#define MAX_FRAGMENTS 64

// The loop's state beside the run's: made by local_open, released by
// local_close.
struct local {
	struct tr__inner   in;
	struct tr_params   loc;   // the trainer's own weights (the backend's)
	struct tr_params   snap;  // F > 1: fragment pushes are read from here
	struct tr_params   start; // D > 0: loc at the in-flight start
	uint32_t           h, f, d;
	uint64_t           n;                 // F = 1: samples of the phase
	uint64_t           nf[MAX_FRAGMENTS]; // F > 1: each fragment's
	struct ferry_span *spans[MAX_FRAGMENTS];
	size_t             nspans[MAX_FRAGMENTS];
	int                busy;      // a fragment's exchange is in flight
	uint32_t           busy_f;    // which one
	uint64_t           wait_at;   // the inner step to wait for it after
	uint64_t           busy_n;    // its samples
	double             busy_norm; // its |P/n|
	uint64_t           exchanges; // completed (fragment) exchanges
	int                synced;    // this step ended an exchange
	int                rolled;    // this step met a rollback
};

// open_spans reads every fragment's spans from libferry.
static int
open_spans(struct tr__run *r, struct local *L)
{
	for (uint32_t f = 0; f < L->f; f++) {
		size_t n  = 0;
		int    fe = ferry_client_fragment_spans(r->fc, f, NULL, 0, &n);
		if (fe != FERRY_OK && (fe != FERRY_EINVAL || n == 0)) {
			return tr__run_failed(r, "fragment_spans", fe);
		}
		L->spans[f] = calloc(n > 0 ? n : 1, sizeof(struct ferry_span));
		if (L->spans[f] == NULL) {
			return FB_ENOMEM;
		}
		fe = ferry_client_fragment_spans(r->fc, f, L->spans[f], n,
		    &L->nspans[f]);
		if (fe != FERRY_OK) {
			return tr__run_failed(r, "fragment_spans", fe);
		}
	}
	return FB_OK;
}

// local_open makes the loop's buffers (nothing is allocated per step)
// from the weights the run pulled, and hands loc to the backend.
static int
local_open(struct tr__run *r, struct local *L)
{
	const struct tr_config *cfg = r->cfg;
	int                     rv;

	L->h = cfg->local_steps;
	L->f = cfg->fragments > 1 ? cfg->fragments : 1;
	L->d = cfg->fragment_delay;
	if ((rv = tr__inner_init(&L->in, &cfg->inner, cfg->batch, &r->w,
	         r->err, sizeof(r->err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "%s", r->err);
		return rv;
	}
	if ((rv = tr__params_shaped(&L->loc, &r->w)) != FB_OK ||
	    (L->f > 1 && (rv = tr__params_shaped(&L->snap, &r->w)) != FB_OK) ||
	    (L->d > 0 &&
	        (rv = tr__params_shaped(&L->start, &r->w)) != FB_OK)) {
		FB_LOG(FB_LOG_ERR, MOD, "local steps: %s", fb_strerror(rv));
		return rv;
	}
	if (L->f > 1 && (rv = open_spans(r, L)) != FB_OK) {
		return rv;
	}
	tr_params_copy(&L->loc, &r->w);
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "local steps: %u inner steps (%s) per outer round, %u "
	    "fragment(s), delay %u",
	    L->h, fb_optim_name(L->in.o.kind), L->f, L->d);
	return tr__run_set_weights(r, &L->loc);
}

static void
local_close(struct local *L)
{
	tr__inner_fini(&L->in);
	tr_params_fini(&L->loc);
	tr_params_fini(&L->snap);
	tr_params_fini(&L->start);
	for (uint32_t f = 0; f < MAX_FRAGMENTS; f++) {
		free(L->spans[f]);
	}
}

// adopt_all takes the global weights as the local ones and starts every
// phase afresh (A = 0, no samples): after a round, a pull or a rollback.
static void
adopt_all(struct tr__run *r, struct local *L)
{
	tr_params_copy(&L->loc, &r->w);
	tr__inner_reset(&L->in);
	L->n = 0;
	memset(L->nf, 0, sizeof(L->nf));
}

// adopt_fragment sets fragment f of loc from the pulled weights: plainly,
// or keeping the progress made since the exchange started (merge).
static void
adopt_fragment(struct tr__run *r, struct local *L, uint32_t f, int merge)
{
	for (size_t s = 0; s < L->nspans[f]; s++) {
		const struct ferry_span *sp = &L->spans[f][s];
		const float             *g  = r->w.t[sp->tensor] + sp->offset;
		float                   *x = L->loc.t[sp->tensor] + sp->offset;
		const float *x0 = merge ? L->start.t[sp->tensor] + sp->offset
		                        : NULL;
		for (size_t j = 0; j < sp->len; j++) {
			x[j] = merge ? g[j] + (x[j] - x0[j]) : g[j];
		}
	}
}

// pseudo_norm is the L2 norm of P / n over the spans of fragment f, or of
// the whole of P when spans is NULL.
static double
pseudo_norm(const struct tr_params *p, uint64_t n,
    const struct ferry_span *spans, size_t ns)
{
	double sum   = 0.0;
	size_t count = spans != NULL ? ns : p->n_tensors;
	for (size_t s = 0; s < count; s++) {
		size_t       t = spans != NULL ? spans[s].tensor : s;
		const float *x = p->t[t] +
		    (spans != NULL ? spans[s].offset : 0);
		size_t len = spans != NULL ? spans[s].len : p->len[t];
		for (size_t j = 0; j < len; j++) {
			sum += (double) x[j] * (double) x[j];
		}
	}
	return n > 0 ? sqrt(sum) / (double) n : 0.0;
}

// rolled_back takes the job's rollback: pulls the rolled-back weights in
// full (bounded retries), makes them the local ones and, in lockstep,
// moves the inner step back to the version's first (F = 1).
static int
rolled_back(struct tr__run *r, struct local *L)
{
	struct ferry_stats st;
	int                fe = FERRY_EROLLBACK;

	FB_LOG(FB_LOG_WARN, MOD, "rank %d: %s", r->rank,
	    ferry_client_last_error(r->fc));
	for (int k = 0; k < 4 && fe == FERRY_EROLLBACK; k++) {
		fe = FERRY_OK;
		for (uint32_t f = 0; L->f > 1 && f < L->f && fe == FERRY_OK;
		     f++) {
			fe = ferry_client_fragment_pull(r->fc, f, r->w.t);
		}
		if (L->f == 1) {
			fe = ferry_client_pull(r->fc, r->w.t);
		}
	}
	if (fe != FERRY_OK) {
		return tr__run_failed(r, "pull after a rollback", fe);
	}
	ferry_client_stats(r->fc, &st);
	if (L->f == 1 && tr__run_lockstep(r->cfg)) {
		uint64_t s  = st.version * L->h;
		r->rep.step = s < r->total ? s : r->total;
	}
	adopt_all(r, L);
	L->rolled = 1;
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "rank %d resumes at version %llu (inner step %llu)", r->rank,
	    (unsigned long long) st.version, (unsigned long long) r->rep.step);
	return FB_OK;
}

// behind answers a push the round closed without (FERRY_EBEHIND): pull
// (fragment f's, or everything's when f is F) and lose the phase.
static int
behind(struct tr__run *r, struct local *L, uint32_t f)
{
	int fe;
	r->rep.dropped++;
	FB_LOG(FB_LOG_NOTICE, MOD, "behind the job: %s; pulling",
	    ferry_client_last_error(r->fc));
	if (f == L->f) {
		if ((fe = ferry_client_pull(r->fc, r->w.t)) != FERRY_OK) {
			return tr__run_failed(r, "pull", fe);
		}
		adopt_all(r, L);
		return FB_OK;
	}
	if ((fe = ferry_client_fragment_pull(r->fc, f, r->w.t)) != FERRY_OK) {
		return tr__run_failed(r, "fragment_pull", fe);
	}
	adopt_fragment(r, L, f, 0);
	tr__inner_reset_spans(&L->in, L->spans[f], L->nspans[f]);
	L->nf[f] = 0;
	return FB_OK;
}

// outer_round pushes the phase's pseudo-gradient (F = 1) and takes the
// job's new weights.
static int
outer_round(struct tr__run *r, struct local *L)
{
	const struct tr_params *p = tr__inner_pseudo(&L->in, L->n);
	uint64_t                n = L->n;
	int    fe   = ferry_client_push_pull(r->fc, tr_params_cptrs(p),
	         (uint32_t) n, r->w.t);
	double norm = fe == FERRY_OK ? pseudo_norm(p, n, NULL, 0) : 0.0;
	L->synced   = 1;
	if (fe == FERRY_EROLLBACK) {
		return rolled_back(r, L);
	}
	if (fe == FERRY_EBEHIND) {
		return behind(r, L, L->f);
	}
	if (fe != FERRY_OK) {
		return tr__run_failed(r, "push_pull", fe);
	}
	adopt_all(r, L);
	r->rep.outer_rounds = ++L->exchanges;
	tr__metrics_outer(&r->met, r->fc, (double) L->exchanges, norm);
	FB_LOG(FB_LOG_DEBUG, MOD, "outer round %llu: %llu samples, |P/n| %.6g",
	    (unsigned long long) L->exchanges, (unsigned long long) n, norm);
	return FB_OK;
}

// fragment_done finishes fragment f's exchange, which returned fe.
static int
fragment_done(struct tr__run *r, struct local *L, uint32_t f, int fe,
    double norm, uint64_t n)
{
	int merge = L->busy;
	L->busy   = 0;
	L->synced = 1;
	if (fe == FERRY_EROLLBACK) {
		return rolled_back(r, L);
	}
	if (fe == FERRY_EBEHIND) {
		return behind(r, L, f);
	}
	if (fe != FERRY_OK) {
		return tr__run_failed(r, "fragment exchange", fe);
	}
	adopt_fragment(r, L, f, merge);
	L->exchanges++;
	r->rep.outer_rounds = L->exchanges / L->f;
	tr__metrics_outer(&r->met, r->fc,
	    (double) L->exchanges / (double) L->f, norm);
	FB_LOG(FB_LOG_DEBUG, MOD,
	    "fragment %u exchange %llu: %llu samples, |P/n| %.6g", f,
	    (unsigned long long) L->exchanges, (unsigned long long) n, norm);
	return FB_OK;
}

// fragment_start starts fragment f's exchange after inner step s, and
// waits for it at once when blocking.
static int
fragment_start(struct tr__run *r, struct local *L, uint32_t f, uint64_t s,
    int blocking)
{
	const struct ferry_span *sp = L->spans[f];
	size_t                   ns = L->nspans[f];
	uint64_t                 n  = L->nf[f];

	tr__inner_pseudo_spans(&L->in, n, sp, ns, &L->snap);
	tr__inner_reset_spans(&L->in, sp, ns);
	L->nf[f]    = 0;
	double norm = pseudo_norm(&L->snap, n, sp, ns);
	if (!blocking) {
		for (size_t k = 0; k < ns; k++) {
			memcpy(L->start.t[sp[k].tensor] + sp[k].offset,
			    L->loc.t[sp[k].tensor] + sp[k].offset,
			    sp[k].len * sizeof(float));
		}
	}
	int fe = ferry_client_fragment_start(r->fc, f,
	    tr_params_cptrs(&L->snap), (uint32_t) n, r->w.t);
	if (fe == FERRY_OK && !blocking) {
		L->busy      = 1;
		L->busy_f    = f;
		L->wait_at   = s + L->d;
		L->busy_n    = n;
		L->busy_norm = norm;
		return FB_OK;
	}
	if (fe == FERRY_OK) {
		fe = ferry_client_fragment_wait(r->fc);
	}
	return fragment_done(r, L, f, fe, norm, n);
}

// fragments runs the fragment schedule after inner step s: the wait due
// now, then the fragments due (all of them, blocking, at the last step).
static int
fragments(struct tr__run *r, struct local *L, uint64_t s)
{
	int last = s >= r->total, rv;
	if (L->busy && (s >= L->wait_at || last)) {
		int fe = ferry_client_fragment_wait(r->fc);
		if ((rv = fragment_done(r, L, L->busy_f, fe, L->busy_norm,
		         L->busy_n)) != FB_OK) {
			return rv;
		}
	}
	for (uint32_t f = 0; f < L->f && !L->rolled; f++) {
		if (L->nspans[f] == 0) {
			L->nf[f] = 0; // more fragments than shards: none here
			continue;
		}
		if (last ? L->nf[f] > 0
		         : tr__inner_fragment_due(s, f, L->h, L->f)) {
			rv = fragment_start(r, L, f, s, last || L->d == 0);
			if (rv != FB_OK) {
				return rv;
			}
		}
	}
	return FB_OK;
}

// report_due says whether a progress line is due after an exchange: a
// --log-interval or an epoch end was crossed since the last one.
static int
report_due(const struct tr__run *r)
{
	uint64_t s = r->rep.step, l = r->rep.last_report;
	uint64_t iv = r->cfg->log_interval > 0
	    ? (uint64_t) r->cfg->log_interval
	    : 0;
	if (s == l) {
		return 0;
	}
	return (iv > 0 && s / iv > l / iv) ||
	    s / r->steps_per_epoch > l / r->steps_per_epoch;
}

// report prints a progress line on the global weights (r->w): the local
// ones equal them after a whole-model round.
static int
report(struct tr__run *r, struct local *L)
{
	int rv;
	if (L->f == 1) {
		return tr__run_report(r);
	}
	if ((rv = tr__run_set_weights(r, &r->w)) != FB_OK ||
	    (rv = tr__run_report(r)) != FB_OK) {
		return rv;
	}
	return tr__run_set_weights(r, &L->loc);
}

// inner_step runs inner step r->rep.step (minibatch k of epoch e), then
// the exchanges due after it, and counts and reports it.
static int
inner_step(struct tr__run *r, struct local *L, long e, size_t k)
{
	const struct tr_config *cfg = r->cfg;
	const uint32_t         *idx;
	double                  loss;
	uint64_t                ts = fb_clock_ns(), tx, s = r->rep.step + 1;
	int                     rv = FB_OK;

	if ((rv = tr_partition_batch(&r->part, e, k, cfg->batch, &idx)) !=
	        FB_OK ||
	    (rv = tr_backend_grad(r->be, &r->train, idx, cfg->batch, r->g.t,
	         &loss)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "inner step %llu: %s",
		    (unsigned long long) r->rep.step, fb_strerror(rv));
		return rv;
	}
	if (cfg->slow_ms > 0) {
		fb_sleep_us((uint64_t) cfg->slow_ms * 1000u);
	}
	tr__inner_step(&L->in, &L->loc, &r->g, cfg->batch, r->rep.step);
	if ((rv = tr__run_set_weights(r, &L->loc)) != FB_OK) {
		return rv;
	}
	L->n += cfg->batch;
	for (uint32_t f = 0; f < L->f; f++) {
		L->nf[f] += cfg->batch;
	}
	tx        = fb_clock_ns();
	L->synced = L->rolled = 0;
	rv                    = FB_OK;
	if (L->f > 1) {
		rv = fragments(r, L, s);
	} else if (s % L->h == 0 || s >= r->total) {
		rv = outer_round(r, L);
	}
	// An exchange changed loc: a backend that copies the weights (the
	// GPU's) must see them before the next gradient or evaluation.
	if (rv == FB_OK && (L->synced || L->rolled)) {
		rv = tr__run_set_weights(r, &L->loc);
	}
	if (rv != FB_OK) {
		return rv;
	}
	if (L->rolled) {
		return FB_OK; // not counted: the job moved back
	}
	uint64_t te = fb_clock_ns();
	if (L->synced && L->f == 1 && tr__run_lockstep(cfg)) {
		// The version says where the job is (further on when the
		// round finished without this trainer).
		struct ferry_stats st;
		ferry_client_stats(r->fc, &st);
		s = st.version * L->h < r->total ? st.version * L->h
		                                 : r->total;
	}
	tr__report_step_time(&r->rep, ts, tx);
	tr__report_step(&r->rep, s, cfg->batch, loss, te - ts);
	tr__metrics_step(&r->met, r->fc, cfg->batch, tx - ts, te - tx,
	    r->rep.dropped);
	if (L->synced && !L->busy && report_due(r)) {
		return report(r, L);
	}
	return FB_OK;
}

// finish_flight waits for a fragment still in flight when the loop stops
// on a signal (its result no longer matters: the trainer leaves).
static void
finish_flight(struct tr__run *r, struct local *L)
{
	if (L->busy) {
		(void) ferry_client_fragment_wait(r->fc);
		L->busy = 0;
	}
}

int
tr__train_local(struct tr__run *r, volatile sig_atomic_t *stop)
{
	struct local       L = { 0 };
	struct tr_position pos;
	int                rv;

	if ((rv = local_open(r, &L)) == FB_OK) {
		while (!*stop &&
		    tr_job_position(r->rep.step, r->steps_per_epoch, r->total,
		        &pos) == FB_OK) {
			if ((rv = inner_step(r, &L, pos.epoch, pos.k)) !=
			    FB_OK) {
				break;
			}
		}
		finish_flight(r, &L);
	}
	// The backend must not keep loc, freed here: it gets the global
	// weights, which the last round left equal to the local ones (the
	// final progress line and --weights-out read those).
	int sv = tr__run_set_weights(r, &r->w);
	local_close(&L);
	if (rv == FB_OK) {
		rv = sv;
	}
	return rv;
}

uint64_t
tr__local_start(const struct tr__run *r, uint64_t version)
{
	uint64_t h = r->cfg->local_steps, s;
	if (!tr__run_lockstep(r->cfg)) {
		return 0;
	}
	s = version * h;
	return s < r->total ? s : r->total;
}
