// codec_auto.c — link-aware codec choice (codec_push / codec_pull "auto",
// docs/algorithms.md §2.8): the two ladders of codecs, the budget rule
// that picks a rung per server link from its probed bandwidth and round
// trip and the measured compute time per step, the hysteresis that keeps
// a choice from flapping, the compute-time measurement, and
// ferry_client_link, which reports each link's codecs and bytes per step.
//
// DESIGN. The chooser (ferry__auto_costs, _time, _choose) is pure, so
// tests/clients checks it without a network. A choice changes only
// between operations, and the codes of one operation are staged with the
// rung of their shard (c->staged_rung) so that a re-sent request carries
// the same codec. Push error feedback needs nothing on a change: the
// residual is fp32 per value whatever the codec, and rung 0 (fp32) is
// sent through the same error-feedback encode, which flushes it. A pull
// moves between the weights (rung 0: the shard's reference is then
// dropped, REF_NONE) and the shared reference's deltas (rung 1): the
// first pull after the move asks for the full reference (request.c sets
// `full` for a shard with no reference), the existing resync.
#include <math.h>
#include <stdio.h>

#include "client_impl.h"

// The push ladder, least lossy first. Each rung sends fewer bytes per
// value than the one before and adds more error per step (error feedback
// delays that error rather than losing it, but a larger residual slows
// convergence): fp32 is exact; fp16 keeps 11 significant bits; q8, q4 and
// q2 keep 8, 4 and 2 bits per value against a per-bucket scale, every
// coordinate still moving each step; the top-k composites then move only
// the 5% and 1% largest coordinates a step (q8 values, about 2 + log2(1/R)
// bits an index), which costs more accuracy per step than any quantizer
// above them. bf16 is left out (fp16's bytes, 8x its rounding error on
// gradients, which have no range problem), sign (q2's bytes and more
// error) and randk (more error than topk at the same bytes) too.
static const char *const push_ladder[FERRY_AUTO_PUSH_RUNGS] = {
	"none",
	"fp16",
	"q8",
	"q4",
	"q2",
	"topk:0.05+q8",
	"topk:0.01+q8",
};

// The pull ladder: the weights themselves in fp32 (exact, no state), then
// the deltas of the shared reference in COMP_AUTO_REF (comp.h). The
// servers keep one reference per shard for every trainer, so the pull
// side has one compressed rung.
static const char *const pull_ladder[FERRY_AUTO_PULL_RUNGS] = {
	"none",
	COMP_AUTO_REF,
};

int
ferry__auto_push_codec(int r, uint32_t bucket, struct comp_codec *out)
{
	if (r < 0 || r >= FERRY_AUTO_PUSH_RUNGS) {
		return FB_EINVAL;
	}
	return comp_codec_parse(push_ladder[r], bucket, out);
}

const char *
ferry__auto_push_name(int r)
{
	return r >= 0 && r < FERRY_AUTO_PUSH_RUNGS ? push_ladder[r] : "?";
}

// auto_pull_name is pull rung r's name: "none" or COMP_AUTO_REF.
static const char *
auto_pull_name(int r)
{
	return r >= 0 && r < FERRY_AUTO_PULL_RUNGS ? pull_ladder[r] : "?";
}

void
ferry__auto_costs(struct ferry__auto_link *l, const uint64_t *lens, size_t n,
    uint32_t bucket)
{
	struct comp_codec cc;
	for (int r = 0; r < FERRY_AUTO_PUSH_RUNGS; r++) {
		l->push_bytes[r] = 0;
		if (ferry__auto_push_codec(r, bucket, &cc) != FB_OK) {
			continue; // the ladder parses: checked by the tests
		}
		for (size_t i = 0; i < n; i++) {
			l->push_bytes[r] += comp_bound(&cc, lens[i]);
		}
	}
	for (int r = 0; r < FERRY_AUTO_PULL_RUNGS; r++) {
		l->pull_bytes[r] = 0;
		if (comp_codec_parse(pull_ladder[r], bucket, &cc) != FB_OK) {
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			l->pull_bytes[r] += comp_bound(&cc, lens[i]);
		}
	}
}

double
ferry__auto_time(const struct ferry__auto_link *l, int p, int q)
{
	double bytes = (double) l->push_bytes[p] + (double) l->pull_bytes[q];
	return bytes / l->bw_bps + l->rtt_s;
}

// fit is the choice for budget_s without hysteresis: from (0, 0), demote
// the direction that sends more bytes (the other when it is at its last
// rung) until the step fits or both are at their last rung.
static void
fit(const struct ferry__auto_link *l, double budget_s, int *p, int *q)
{
	*p = 0;
	*q = 0;
	while (ferry__auto_time(l, *p, *q) > budget_s) {
		int p_can = *p + 1 < FERRY_AUTO_PUSH_RUNGS;
		int q_can = *q + 1 < FERRY_AUTO_PULL_RUNGS;
		if (!p_can && !q_can) {
			return;
		}
		if (p_can &&
		    (!q_can || l->push_bytes[*p] >= l->pull_bytes[*q])) {
			(*p)++;
		} else {
			(*q)++;
		}
	}
}

void
ferry__auto_choose(const struct ferry__auto_link *l, double budget_s,
    int cur_p, int cur_q, int *p, int *q)
{
	if (!(l->bw_bps > 0) || !(budget_s > 0)) {
		*p = cur_p < 0 ? 0 : cur_p;
		*q = cur_p < 0 ? 0 : cur_q;
		return;
	}
	if (cur_p < 0 ||
	    ferry__auto_time(l, cur_p, cur_q) > budget_s / FERRY_AUTO_UP) {
		fit(l, budget_s, p, q); // first choice, or well over budget
		return;
	}
	int up_p, up_q;
	fit(l, budget_s * FERRY_AUTO_UP, &up_p, &up_q);
	if (up_p <= cur_p && up_q <= cur_q && (up_p < cur_p || up_q < cur_q)) {
		*p = up_p;
		*q = up_q;
	} else {
		*p = cur_p;
		*q = cur_q;
	}
}

int
ferry__auto_init(ferry_client *c)
{
	c->auto_push = strcmp(c->codec_push, COMP_AUTO_SPEC) == 0;
	c->auto_pull = strcmp(c->codec_pull, COMP_AUTO_SPEC) == 0;
	// No step has been timed yet, so there is no budget: every link
	// starts at the most compressed rungs, and the first timed step (the
	// first push-pull after a pull, or else the second) moves a fast link
	// up at once. The other guess costs far more: one fp32 exchange of
	// the MLP takes 1.5 s over 10 Mbit/s, against one step's coarser
	// gradient (kept in the residual) on a fast link.
	for (size_t m = 0; m < c->n_conns; m++) {
		if (c->auto_push) {
			c->conns[m].push_rung = FERRY_AUTO_PUSH_RUNGS - 1;
		}
		if (c->auto_pull) {
			c->conns[m].pull_rung = FERRY_AUTO_PULL_RUNGS - 1;
		}
	}
	if (!c->auto_push) {
		return FERRY_OK;
	}
	for (int r = 0; r < FERRY_AUTO_PUSH_RUNGS; r++) {
		if (ferry__auto_push_codec(r, c->opts.bucket,
		        &c->auto_codec[r]) != FB_OK) {
			return ferry__fail(c, FERRY_EINVAL,
			    "codec auto: rung %s with bucket %u does not parse",
			    push_ladder[r], c->opts.bucket);
		}
	}
	if ((c->staged_rung = fb_zalloc(c->pl->n_shards)) == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	return FERRY_OK;
}

size_t
ferry__auto_bound(const ferry_client *c, size_t len)
{
	if (!c->auto_push) {
		return comp_bound(&c->cpush, len);
	}
	size_t most = 0;
	for (int r = 0; r < FERRY_AUTO_PUSH_RUNGS; r++) {
		size_t b = comp_bound(&c->auto_codec[r], len);
		most     = b > most ? b : most;
	}
	return most;
}

// rechoose applies ferry__auto_choose to every link at the current
// compute time and logs, through opts.log, each change. A link's bytes
// per step restart from zero when its choice changes.
static void
rechoose(ferry_client *c)
{
	double budget = (c->opts.link_budget > 0 ? c->opts.link_budget : 1.0) *
	    c->compute_s;
	for (size_t m = 0; m < c->n_conns; m++) {
		struct conn            *cn = &c->conns[m];
		struct ferry__auto_link l  = { .bw_bps = cn->bw_bps,
			 .rtt_s                        = cn->rtt_s };
		uint64_t                lens_stack[64], *lens = lens_stack;
		int                     p, q;
		if (cn->n > 64 &&
		    (lens = fb_alloc(cn->n * sizeof(*lens))) == NULL) {
			continue; // keep the current choice
		}
		for (size_t k = 0; k < cn->n; k++) {
			lens[k] = c->pl->shards[cn->shards[k]]->len;
		}
		ferry__auto_costs(&l, lens, cn->n, c->opts.bucket);
		if (lens != lens_stack) {
			fb_free(lens);
		}
		ferry__auto_choose(&l, budget, cn->push_rung, cn->pull_rung,
		    &p, &q);
		if (!c->auto_push) {
			p = cn->push_rung;
		}
		if (!c->auto_pull) {
			q = cn->pull_rung;
		}
		if (p == cn->push_rung && q == cn->pull_rung) {
			continue;
		}
		if (c->opts.log != NULL) {
			char msg[256];
			snprintf(msg, sizeof(msg),
			    "codec auto: server %s: push %s -> %s, pull %s -> "
			    "%s (%.3g MB/s, rtt %.3g ms, step budget %.3g ms)",
			    c->pl->servers[m],
			    ferry__auto_push_name(cn->push_rung),
			    ferry__auto_push_name(p),
			    auto_pull_name(cn->pull_rung), auto_pull_name(q),
			    cn->bw_bps / 1e6, cn->rtt_s * 1e3, budget * 1e3);
			c->opts.log(c->opts.log_arg, FERRY_LOG_NOTICE, msg);
		}
		cn->push_rung       = (uint8_t) p;
		cn->pull_rung       = (uint8_t) q;
		cn->link_push_bytes = cn->link_pull_bytes = cn->link_steps = 0;
	}
	c->chosen_compute_s   = c->compute_s;
	c->links_new          = 0;
	c->steps_since_choice = 0;
}

void
ferry__auto_step(ferry_client *c)
{
	if (!c->auto_push && !c->auto_pull) {
		// Fixed codecs: the link report's bytes are per step too.
		for (size_t m = 0; m < c->n_conns; m++) {
			c->conns[m].link_steps++;
		}
		return;
	}
	uint64_t now = fb_clock_ns();
	if (c->op_end_ns != 0) {
		double gap = (double) (now - c->op_end_ns) * 1e-9;
		// An evaluation pass or a checkpoint between two steps is no
		// step's compute: a sample counts at most 4x the average, so
		// a lasting change still gets through in a few steps.
		if (c->compute_s > 0 && gap > 4 * c->compute_s) {
			gap = 4 * c->compute_s;
		}
		c->compute_s = c->compute_s > 0
		    ? 0.8 * c->compute_s + 0.2 * gap
		    : gap;
	}
	c->steps_since_choice++;
	if (c->compute_s > 0 &&
	    (c->links_new || c->chosen_compute_s == 0 ||
	        (c->steps_since_choice >= FERRY_AUTO_DWELL &&
	            fabs(c->compute_s - c->chosen_compute_s) >
	                FERRY_AUTO_RECHOOSE * c->chosen_compute_s))) {
		rechoose(c);
	}
	// After the choice: this step's bytes count for the rung they use.
	for (size_t m = 0; m < c->n_conns; m++) {
		c->conns[m].link_steps++;
	}
}

void
ferry__auto_step_end(ferry_client *c)
{
	c->op_end_ns = fb_clock_ns();
}

const struct comp_codec *
ferry__auto_codec(const ferry_client *c, const struct xfer *x, size_t i)
{
	if (!c->auto_push || x->codec == &c->cnone || x->codes != NULL) {
		return x->codec;
	}
	return &c->auto_codec[c->staged_rung[i]];
}

FERRY_API int
ferry_client_link(const ferry_client *c, size_t m, struct ferry_link *out)
{
	if (c == NULL || out == NULL || !c->declared || m >= c->n_conns) {
		return FERRY_EINVAL;
	}
	const struct conn *cn = &c->conns[m];
	uint64_t           st = cn->link_steps ? cn->link_steps : 1;
	memset(out, 0, sizeof(*out));
	out->server     = c->pl->servers[m];
	out->codec_push = c->auto_push ? ferry__auto_push_name(cn->push_rung)
	                               : c->codec_push;
	out->codec_pull = c->auto_pull ? auto_pull_name(cn->pull_rung)
	                               : c->codec_pull;
	out->bw_bps     = cn->bw_bps;
	out->rtt_s      = cn->rtt_s;
	out->push_bytes_per_step = (double) cn->link_push_bytes / (double) st;
	out->pull_bytes_per_step = (double) cn->link_pull_bytes / (double) st;
	out->steps               = cn->link_steps;
	return FERRY_OK;
}
