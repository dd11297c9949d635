// scheduler_job.c — the job declaration: checking a trainer's tensor table
// and options, comparing it with the job's, and keeping a private copy.
//
// DESIGN. The first trainer's JobConfig becomes the job's; every later
// declaration must match it (tensors, mode, learning rate, codecs, bucket,
// warm-up, optimizer, lr schedule, clip norm), so that a trainer started with
// other flags is refused at registration rather than training a different
// model. The copy is deep (pack, then unpack), so the request message can be
// freed. Nothing here touches the scheduler's state: these are pure
// functions of the messages.
#include <stdio.h>
#include <string.h>

#include "comp/comp.h"
#include "jobconf.h"
#include "scheduler_impl.h"

// packed_equal reports whether two optional sub-messages pack to the same
// bytes (both absent counts as equal): protobuf-c packs fields in number
// order, so equal values give equal bytes.
static int
packed_equal(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
	uint8_t ba[512], bb[512];
	size_t  na, nb;
	if (a == NULL || b == NULL) {
		return a == b;
	}
	na = protobuf_c_message_get_packed_size(a);
	nb = protobuf_c_message_get_packed_size(b);
	if (na != nb || na > sizeof(ba)) {
		return 0;
	}
	protobuf_c_message_pack(a, ba);
	protobuf_c_message_pack(b, bb);
	return memcmp(ba, bb, na) == 0;
}

Pswire__JobConfig *
ps__sched_job_copy(const Pswire__JobConfig *j)
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

int
ps__sched_job_diff(const Pswire__JobConfig *a, const Pswire__JobConfig *b,
    char *why, size_t n)
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
	    a->bucket != b->bucket || a->warmup_steps != b->warmup_steps ||
	    a->staleness != b->staleness || a->sync_quorum != b->sync_quorum) {
		snprintf(why, n,
		    "job options differ (mode/lr/codecs/bucket/warmup/"
		    "staleness/quorum): job has mode %d lr %g push %s pull %s "
		    "staleness %u quorum %u",
		    a->mode, a->lr, a->codec_push, a->codec_pull, a->staleness,
		    a->sync_quorum);
		return 1;
	}
	if (!packed_equal((const ProtobufCMessage *) a->optim,
	        (const ProtobufCMessage *) b->optim) ||
	    !packed_equal((const ProtobufCMessage *) a->lr_schedule,
	        (const ProtobufCMessage *) b->lr_schedule) ||
	    a->clip_norm != b->clip_norm) {
		snprintf(why, n,
		    "job options differ (optimizer, lr schedule or clip "
		    "norm): job has optimizer %s, lr schedule %s, clip norm "
		    "%g",
		    a->optim != NULL ? a->optim->name : "sgd",
		    a->lr_schedule != NULL ? a->lr_schedule->kind : "constant",
		    a->clip_norm);
		return 1;
	}
	return 0;
}

// job_size_check refuses a job whose tensors total more than the
// scheduler's max_job_bytes or would be cut into more than its max_shards
// shards, counting without building anything (a hostile declaration must
// not make the scheduler allocate). Lengths are checked (<= 2^34) before.
static int
job_size_check(const Pswire__JobConfig *j, const struct ps_scheduler_opts *o,
    char *why, size_t n)
{
	uint64_t bytes = 0, shards = 0, max_shards = o->max_shards;
	if (max_shards == 0 || max_shards > PS_MAX_SHARDS) {
		max_shards = PS_MAX_SHARDS;
	}
	for (size_t i = 0; i < j->n_tensors; i++) {
		uint64_t per = o->shard_bytes / 4;
		uint64_t len = j->tensors[i]->len;
		bytes += len * 4; // <= 65536 * 2^36: no overflow
		shards += len / per + (len % per != 0);
	}
	if (o->max_job_bytes != 0 && bytes > o->max_job_bytes) {
		snprintf(why, n,
		    "the tensors total %llu bytes; the job cap (--max-job-mb) "
		    "is %llu MiB",
		    (unsigned long long) bytes,
		    (unsigned long long) (o->max_job_bytes >> 20));
		return FB_EINVAL;
	}
	if (shards > max_shards) {
		snprintf(why, n,
		    "the tensors make %llu shards of at most %llu bytes; the "
		    "cap is %llu: raise --shard-bytes",
		    (unsigned long long) shards,
		    (unsigned long long) o->shard_bytes,
		    (unsigned long long) max_shards);
		return FB_EINVAL;
	}
	return FB_OK;
}

int
ps__sched_job_check(const Pswire__JobConfig *j,
    const struct ps_scheduler_opts *o, char *why, size_t n)
{
	if (j->n_tensors == 0 || j->n_tensors > 65536) {
		snprintf(why, n, "tensor count %zu not in 1..65536",
		    j->n_tensors);
		return FB_EINVAL;
	}
	for (size_t i = 0; i < j->n_tensors; i++) {
		if (j->tensors[i]->len == 0 ||
		    j->tensors[i]->len > (1ull << 34)) {
			snprintf(why, n,
			    "tensor %zu length %llu not in 1..2^34", i,
			    (unsigned long long) j->tensors[i]->len);
			return FB_EINVAL;
		}
		if (strlen(j->tensors[i]->name) > 127) {
			snprintf(why, n, "tensor %zu name over 127 bytes", i);
			return FB_EINVAL;
		}
	}
	if (job_size_check(j, o, why, n) != FB_OK) {
		return FB_EINVAL;
	}
	if (!(j->lr > 0 && j->lr < 1e6)) {
		snprintf(why, n, "learning rate %g not in (0, 1e6)", j->lr);
		return FB_EINVAL;
	}
	if (o->max_lr > 0 && j->lr > o->max_lr) {
		snprintf(why, n,
		    "learning rate %g is above the scheduler's --max-lr %g",
		    j->lr, o->max_lr);
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
	        sizeof(cwhy)) != FB_OK ||
	    cc.stochastic) {
		snprintf(why, n, "codec-pull '%s': %s", j->codec_pull,
		    cc.stochastic ? "the pull side rounds deterministically"
		                  : cwhy);
		return FB_EINVAL;
	}
	struct fb_optim    opt;
	struct fb_lr_sched sc;
	char               owhy[128];
	if (ps__job_optim(j, &opt, &sc, owhy, sizeof(owhy)) != FB_OK) {
		snprintf(why, n, "optimizer: %s", owhy);
		return FB_EINVAL;
	}
	if (j->mode != PSWIRE__MODE__MODE_SYNC &&
	    j->mode != PSWIRE__MODE__MODE_ASYNC &&
	    j->mode != PSWIRE__MODE__MODE_SSP) {
		snprintf(why, n, "unknown mode %d", j->mode);
		return FB_EINVAL;
	}
	int applies_async = j->mode == PSWIRE__MODE__MODE_ASYNC ||
	    (j->mode == PSWIRE__MODE__MODE_SSP && j->staleness > 0);
	if (o->replicas > 1 && o->servers > 1 && applies_async) {
		// Backups apply a primary's sync rounds (replicate.c); an
		// async push is not forwarded, so a promoted backup would
		// hold stale weights: refused rather than unprotected.
		snprintf(why, n,
		    "the scheduler keeps --replicas %u copies, which covers "
		    "sync jobs only; this job declares %s mode (use sync "
		    "mode, or --replicas 1)",
		    o->replicas,
		    j->mode == PSWIRE__MODE__MODE_ASYNC ? "async" : "ssp");
		return FB_EINVAL;
	}
	if (j->sync_quorum != 0 && j->mode != PSWIRE__MODE__MODE_SYNC) {
		snprintf(why, n, "sync quorum %u needs sync mode",
		    j->sync_quorum);
		return FB_EINVAL;
	}
	return FB_OK;
}
