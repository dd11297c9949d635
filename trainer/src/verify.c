// verify.c — trainer --verify 1: the spot-check verifier (issue 31,
// docs/security.md). It takes the trainers' own options (--data,
// --layers, --batch, --seed, --blas-threads, --scheduler, --secret-file),
// collects the pushes the servers kept for verification, recomputes each
// from the weights of its version and the batch its data step names, and
// reports one verdict per shard to the scheduler, which quarantines a
// rank on a mismatch.
//
// DESIGN
// The trainer's step is deterministic given (weights, batch): the CPU
// backend's gradient of the same rows at the same weights is the same
// bits. A kept push (AuditRecord, one per shard and server) carries the
// shard's weights at the round's version and the pushed floats; once
// every shard of a (rank, version) is in (verify_group.c), the weights are
// whole, the batch is rank's partition's minibatch for data step s =
// claim - 1 (epoch s / steps_per_epoch, minibatch s % steps_per_epoch,
// steps_per_epoch = tr_partition_steps(n, trainers, batch), as train.c),
// and tr_backend_grad on them gives what the plain loop pushes (r->g: its
// tr__scale_for_members is a no-op without --lr-scale-trainers, which
// --verify refuses). Each shard is compared bit for bit.
//
// Limits. Only fp32 pushes are kept (the servers skip codec pushes);
// only the plain sync loop of fixed-rank jobs claims data steps (not
// --overlap, local steps, leases or dlrm), so only those pushes are
// checked; the trainers must run the CPU backend with the verifier's
// --data, --layers, --batch and --seed (a different one is a mismatch on
// every push, honest or not). The verifier trusts nothing of a trainer
// but its claim, and the claim only chooses which of the trainer's own
// batches is recomputed: every batch of its partition is one it may
// honestly be asked for. A push whose record a server lost (its store
// full) or that only some servers kept (an outlier's) is never whole: it
// is skipped after GROUP_WAIT_MS and counted.
//
// It stops on SIGINT/SIGTERM, or when the map says every rank left or was
// quarantined (then it drains what the servers still hold first), and
// prints {"summary": {"verified", "mismatches", "skipped",
// "lost_by_servers", ...}}: verdicts sent (one per shard of a push),
// mismatches among them, shard records dropped unverified (their push
// never whole), and kept pushes the servers lost with their store full.
#include <ferry/ferry.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>

#include "step.h"
#include "tr_impl.h"
#include "verify.h"

#define MOD "verify"

// GROUPS: pushes assembled at once; GROUP_WAIT_MS: how long a group may
// wait for its next shard; MAP_EVERY_MS: how often the map is re-read;
// IDLE_US: the nap when no server had anything; AUDIT_MAX: records per
// Audit call at most; PUSHES_PER_CALL: pushes' worth asked per call;
// CALL_MS: a call's deadline at most (a dead server must not hold the
// loop long); WARN_EVERY_MS: failed Audits are logged once per.
#define GROUPS 16
#define GROUP_WAIT_MS 5000
#define MAP_EVERY_MS 500
#define IDLE_US 20000
#define AUDIT_MAX 64
#define PUSHES_PER_CALL 4
#define CALL_MS 5000
#define WARN_EVERY_MS 10000

struct verifier {
	const struct tr_config   *cfg;
	struct tr_backend        *be;
	struct tr_dataset         train, test;
	struct tr_params          g; // the recomputed gradient
	ferry_verifier           *fv;
	struct ferry_verifier_job job;
	struct tr__vgroups        groups;
	struct ferry_shard       *shards; // the map's (the same in every map)
	uint32_t                 *audit_max; // per server: records a call
	uint64_t                 *lost; // per server: its kept pushes lost
	struct tr_partition      *part; // per rank (count 0: not made yet)
	size_t                    steps_per_epoch;
	uint64_t                  verified, mismatches, reports_failed;
	uint64_t                  t0_ns;
	uint64_t                  next_warn_ms; // a failed Audit's next log
	volatile sig_atomic_t    *stop;
	char                      err[512];
};

// open_local loads the data and makes the CPU backend, as a trainer of
// the job does.
static int
open_local(struct verifier *v)
{
	const struct tr_config *cfg = v->cfg;
	struct tr_backend_opts  bo  = TR_BACKEND_OPTS_INIT;
	int                     rv;

	bo.blas_threads = cfg->blas_threads;
	bo.max_batch    = cfg->batch;
	if ((rv = tr_backend_alloc("cpu", &cfg->arch, &bo, &v->be, v->err,
	         sizeof(v->err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "backend: %s", v->err);
		return rv;
	}
	if ((rv = tr_data_load(cfg->data_dir,
	         (int) cfg->arch.sizes[cfg->arch.n_layers], &v->train,
	         &v->test, v->err, sizeof(v->err))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "load data: %s", v->err);
		return rv;
	}
	if (v->train.dim != cfg->arch.sizes[0]) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "--layers: input width %zu does not match the data's %zu",
		    cfg->arch.sizes[0], v->train.dim);
		return FB_EINVAL;
	}
	return tr_params_init(&v->g, &cfg->arch);
}

// failed logs a failed libferry call and returns FB_EREMOTE.
static int
failed(struct verifier *v, const char *op, int fe)
{
	FB_LOG(FB_LOG_ERR, MOD, "%s: %s: %s", op, ferry_strerror(fe),
	    ferry_verifier_last_error(v->fv));
	return FB_EREMOTE;
}

// job_check checks that the job's pushes are ones this verifier can
// recompute: its tensors are --layers' and its exchange the plain one.
static int
job_check(struct verifier *v)
{
	const struct ferry_verifier_job *j = &v->job;
	struct tr_params                 w = v->g;
	if (!j->plain) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "the job is not a sync job of fp32 pushes without "
		    "clipping or local steps: its pushes cannot be recomputed");
		return FB_EINVAL;
	}
	int same = j->n_tensors == w.n_tensors;
	for (size_t t = 0; same && t < w.n_tensors; t++) {
		same = j->tensor_len[t] == w.len[t];
	}
	if (!same) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "the job's tensors are not those of --layers: run the "
		    "verifier with the trainers' --layers");
		return FB_EINVAL;
	}
	if (j->seed != v->cfg->fo.seed) {
		FB_LOG(FB_LOG_WARN, MOD,
		    "the job declared seed %" PRIu64 ", --seed is %" PRIu64
		    ": the partitions will not be the trainers'",
		    j->seed, v->cfg->fo.seed);
	}
	v->steps_per_epoch = tr_partition_steps(v->train.n, (int) j->trainers,
	    v->cfg->batch);
	if (v->steps_per_epoch == 0) {
		FB_LOG(FB_LOG_ERR, MOD, "--batch %zu: larger than a partition",
		    v->cfg->batch);
		return FB_EINVAL;
	}
	// The job's arrays are lent until the next map: keep the shards.
	v->part   = fb_zalloc(j->trainers * sizeof(*v->part));
	v->shards = fb_alloc(j->n_shards * sizeof(*v->shards));
	if (v->part == NULL || v->shards == NULL) {
		return FB_ENOMEM;
	}
	memcpy(v->shards, j->shards, j->n_shards * sizeof(*v->shards));
	// Each server hands out its shards' records of the same pushes,
	// oldest first: asked for PUSHES_PER_CALL pushes' worth each, they
	// move through the pushes at one pace, and the groups waiting for a
	// slower server's shards stay few.
	v->audit_max = fb_zalloc(j->servers * sizeof(*v->audit_max));
	v->lost      = fb_zalloc(j->servers * sizeof(*v->lost));
	if (v->audit_max == NULL || v->lost == NULL) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < j->n_shards; i++) {
		v->audit_max[j->shard_server[i]] += PUSHES_PER_CALL;
	}
	for (uint32_t m = 0; m < j->servers; m++) {
		uint32_t *x = &v->audit_max[m];
		*x          = *x == 0 ? 1 : *x > AUDIT_MAX ? AUDIT_MAX : *x;
	}
	return tr__vgroups_init(&v->groups, &v->cfg->arch, v->shards,
	    j->n_shards, GROUPS);
}

// join waits for the job's map (the verifier may start first).
static int
join(struct verifier *v)
{
	struct ferry_opts fo = v->cfg->fo;
	int               fe;
	fo.timeout_ms = fo.timeout_ms != 0 && fo.timeout_ms < CALL_MS
	    ? fo.timeout_ms
	    : CALL_MS;
	if ((fe = ferry_verifier_open(&fo, v->cfg->secret_file, &v->fv)) !=
	    FERRY_OK) {
		FB_LOG(FB_LOG_ERR, MOD,
		    "open: %s (--scheduler, --secret-file, "
		    "--tls-*)",
		    ferry_strerror(fe));
		return FB_EINVAL;
	}
	while ((fe = ferry_verifier_map(v->fv, &v->job)) == FERRY_ETIMEDOUT ||
	    fe == FERRY_ECONNECT) {
		if (*v->stop) {
			return FB_ECLOSED;
		}
		if (fe == FERRY_ECONNECT) {
			fb_sleep_us(10 * IDLE_US); // not there yet: no spin
		}
	}
	if (fe != FERRY_OK) {
		return failed(v, "the job's map", fe);
	}
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "verifying %u trainers' kept pushes: %zu shards on %u servers",
	    v->job.trainers, v->job.n_shards, v->job.servers);
	return job_check(v);
}

// recompute sets *idx to rank's batch at data step `step` and computes
// its gradient at weights w into v->g.
static int
recompute(struct verifier *v, uint32_t rank, uint64_t step,
    const struct tr_params *w)
{
	const uint32_t *idx;
	double          loss;
	int             rv;
	if (v->part[rank].count == 0 &&
	    (rv = tr_partition_init(&v->part[rank], v->train.n, (int) rank,
	         (int) v->job.trainers, v->cfg->fo.seed)) != FB_OK) {
		return rv;
	}
	if ((rv = tr__verify_batch(&v->part[rank], step, v->steps_per_epoch,
	         v->cfg->batch, &idx)) != FB_OK ||
	    (rv = tr_backend_set_weights(v->be, tr_params_cptrs(w))) !=
	        FB_OK) {
		return rv;
	}
	return tr_backend_grad(v->be, &v->train, idx, v->cfg->batch, v->g.t,
	    &loss);
}

// report sends vd, logging a mismatch as the evidence it is.
static void
report(struct verifier *v, const struct ferry_verdict *vd, size_t len,
    const char *why)
{
	int fe;
	v->verified++;
	if (vd->mismatch) {
		v->mismatches++;
		FB_LOG(FB_LOG_WARN, MOD,
		    "rank %u's push at version %" PRIu64 " (data step %" PRIu64
		    ") shard %u from server %u: mismatch: %s%" PRIu64
		    " of %zu elements differ, max |diff| %g (crc %08x, "
		    "recomputed %08x)",
		    vd->rank, vd->version,
		    vd->data_step > 0 ? vd->data_step - 1 : 0, vd->shard,
		    vd->server, why, vd->differing, len,
		    (double) vd->max_abs_diff, vd->pushed_crc,
		    vd->recomputed_crc);
	}
	if ((fe = ferry_verifier_report(v->fv, vd)) != FERRY_OK) {
		v->reports_failed++;
		FB_LOG(FB_LOG_WARN, MOD, "Verified: %s: %s",
		    ferry_strerror(fe), ferry_verifier_last_error(v->fv));
	}
}

// verify_group recomputes group g's push and reports a verdict per shard.
static void
verify_group(struct verifier *v, struct tr__vgroup *g)
{
	const char *why = "";
	int         rv  = g->data_step == 0
	             ? FB_ERANGE
	             : recompute(v, g->rank, g->data_step - 1, &g->w);
	if (rv != FB_OK) {
		// A claim naming no batch of the rank's: nothing it pushed
		// can be reproduced.
		why = "its claim names no batch: ";
		for (size_t t = 0; t < v->g.n_tensors; t++) {
			memset(v->g.t[t], 0, v->g.len[t] * sizeof(float));
		}
	} else if (g->n_samples != v->cfg->batch) {
		why = "it claims another sample count: ";
	}
	for (size_t i = 0; i < v->job.n_shards; i++) {
		const struct ferry_shard *s  = &v->shards[i];
		struct ferry_verdict      vd = { .rank = g->rank,
			     .version                  = g->version,
			     .data_step                = g->claim[i],
			     .shard                    = (uint32_t) i,
			     .server                   = g->server[i] };
		tr__verify_compare(g->p.t[s->tensor] + s->offset,
		    v->g.t[s->tensor] + s->offset, s->len, &vd);
		if (*why != '\0' || g->claim[i] != g->data_step) {
			vd.mismatch = 1;
			why         = *why != '\0' ? why
			                           : "its shards claim other steps: ";
		}
		report(v, &vd, s->len, why);
	}
	tr__vgroups_release(&v->groups, g);
}

// poll_servers collects every server's kept pushes once and verifies the
// pushes they complete; returns the records received. A server that cannot be
// reached is logged and passed over (it may be restarting).
static size_t
poll_servers(struct verifier *v)
{
	const struct ferry_audit_record *recs;
	size_t                           n, got = 0;
	int                              fe;
	for (uint32_t m = 0; m < v->job.servers && !*v->stop; m++) {
		if ((fe = ferry_verifier_audit(v->fv, m, v->audit_max[m],
		         &recs, &n, &v->lost[m])) != FERRY_OK) {
			// Every poll would say it again: once in
			// WARN_EVERY_MS.
			if (fb_clock_ms() >= v->next_warn_ms) {
				FB_LOG(FB_LOG_WARN, MOD, "Audit: %s: %s",
				    ferry_strerror(fe),
				    ferry_verifier_last_error(v->fv));
				v->next_warn_ms = fb_clock_ms() +
				    WARN_EVERY_MS;
			}
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			struct tr__vgroup *g = tr__vgroups_add(&v->groups,
			    &recs[i], fb_clock_ms());
			if (g != NULL) {
				verify_group(v, g);
			}
		}
		got += n;
	}
	return got;
}

// loop polls until a signal or the job's end (then drains the servers).
static void
loop(struct verifier *v)
{
	uint64_t next_map = fb_clock_ms() + MAP_EVERY_MS;
	int      ended    = 0;
	while (!*v->stop) {
		size_t got = poll_servers(v);
		tr__vgroups_expire(&v->groups, fb_clock_ms(), GROUP_WAIT_MS);
		if (ended && got == 0) {
			break; // drained after the job's end
		}
		if (!ended && fb_clock_ms() >= next_map) {
			// Same shards in every map: only the end is read.
			struct ferry_verifier_job j;
			int fe   = ferry_verifier_map(v->fv, &j);
			ended    = fe == FERRY_OK && j.ended;
			next_map = fb_clock_ms() + MAP_EVERY_MS;
		}
		if (got == 0 && !ended) {
			fb_sleep_us(IDLE_US);
		}
	}
	tr__vgroups_expire(&v->groups, fb_clock_ms(), 0);
	FB_LOG(FB_LOG_NOTICE, MOD,
	    "%s: %" PRIu64 " verified, %" PRIu64 " mismatches, %" PRIu64
	    " skipped",
	    *v->stop ? "stopped by a signal" : "the job ended", v->verified,
	    v->mismatches, v->groups.skipped);
}

int
tr__verify_run(const struct tr_config *cfg, FILE *out)
{
	struct verifier v = { 0 };
	int             rv;

	v.cfg   = cfg;
	v.stop  = tr__run_catch_signals();
	v.t0_ns = fb_clock_ns();
	if ((rv = open_local(&v)) == FB_OK && (rv = join(&v)) == FB_OK) {
		loop(&v);
		uint64_t lost = 0;
		for (uint32_t m = 0; m < v.job.servers; m++) {
			lost += v.lost[m];
		}
		fprintf(out,
		    "{\"summary\": {\"verify\": 1, \"verified\": %" PRIu64
		    ", \"mismatches\": %" PRIu64 ", \"skipped\": %" PRIu64
		    ", \"lost_by_servers\": %" PRIu64
		    ", \"reports_failed\": %" PRIu64
		    ", \"trainers\": %u, \"wall_s\": %.3f}}\n",
		    v.verified, v.mismatches, v.groups.skipped, lost,
		    v.reports_failed, v.job.trainers,
		    (double) (fb_clock_ns() - v.t0_ns) * 1e-9);
		fflush(out);
	}
	if (rv == FB_ECLOSED) {
		rv = FB_OK; // stopped before the job started
	}
	for (uint32_t r = 0; v.part != NULL && r < v.job.trainers; r++) {
		tr_partition_fini(&v.part[r]);
	}
	fb_free(v.part);
	fb_free(v.shards);
	fb_free(v.audit_max);
	fb_free(v.lost);
	tr__vgroups_fini(&v.groups);
	ferry_verifier_close(v.fv);
	tr_backend_free(v.be);
	tr_params_fini(&v.g);
	tr_dataset_fini(&v.train);
	tr_dataset_fini(&v.test);
	return rv;
}
