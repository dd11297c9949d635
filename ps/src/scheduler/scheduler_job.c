// scheduler_job.c — the job declaration: checking a trainer's tensor table
// and options, comparing it with the job's, and keeping a private copy.
//
// DESIGN. The first trainer's JobConfig becomes the job's; every later
// declaration must match it, every field of it but the ones the scheduler
// fills in (sched_fields), so that a trainer started with other flags is
// refused at registration rather than training a different model. Both the
// comparison (by the message's field descriptors, naming the first field
// that differs) and the copy (pack, then unpack: deep, so the request can
// be freed) take the message whole: a new job option needs no line here.
// Nothing here touches the scheduler's state: these are pure functions of
// the messages.
#include <stdio.h>
#include <string.h>

#include "comp/comp.h"
#include "jobconf.h"
#include "scheduler_impl.h"

// Fields of a JobConfig that the scheduler fills in (from its own
// options, after the first declaration), not a trainer: never compared.
static const char *const sched_fields[] = { "shard_bytes" };

// elem_size is the size of one element of a repeated field of type t.
static size_t
elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return 8;
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(void *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	default: // the 32-bit integers, float and enum
		return 4;
	}
}

// scalar_text writes the scalar value of type f->type at p into buf, with
// prec digits for floating point.
static void
scalar_text(const ProtobufCFieldDescriptor *f, const void *p, int prec,
    char *buf, size_t n)
{
	const ProtobufCEnumValue *ev;
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		snprintf(buf, n, "%d", *(const int32_t *) p);
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		snprintf(buf, n, "%lld", (long long) *(const int64_t *) p);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		snprintf(buf, n, "%u", *(const uint32_t *) p);
		break;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		snprintf(buf, n, "%llu",
		    (unsigned long long) *(const uint64_t *) p);
		break;
	case PROTOBUF_C_TYPE_FLOAT:
		snprintf(buf, n, "%.*g", prec, (double) *(const float *) p);
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		snprintf(buf, n, "%.*g", prec, *(const double *) p);
		break;
	case PROTOBUF_C_TYPE_BOOL:
		snprintf(buf, n, "%s",
		    *(const protobuf_c_boolean *) p ? "true" : "false");
		break;
	case PROTOBUF_C_TYPE_ENUM:
		ev = protobuf_c_enum_descriptor_get_value(f->descriptor,
		    *(const int *) p);
		if (ev != NULL) {
			snprintf(buf, n, "%s", ev->name);
		} else {
			snprintf(buf, n, "%d", *(const int *) p);
		}
		break;
	case PROTOBUF_C_TYPE_STRING:
		snprintf(buf, n, "'%s'",
		    *(char *const *) p != NULL ? *(char *const *) p : "");
		break;
	default: // bytes (a message never gets here)
		snprintf(buf, n, "%zu bytes",
		    ((const ProtobufCBinaryData *) p)->len);
		break;
	}
}

// scalar_equal reports whether the scalars of type f->type at pa and pb
// are equal: floating point by value, strings by text (NULL as "").
static int
scalar_equal(const ProtobufCFieldDescriptor *f, const void *pa, const void *pb)
{
	const ProtobufCBinaryData *ba = pa, *bb = pb;
	const char                *sa, *sb;
	switch (f->type) {
	case PROTOBUF_C_TYPE_FLOAT:
		return *(const float *) pa == *(const float *) pb;
	case PROTOBUF_C_TYPE_DOUBLE:
		return *(const double *) pa == *(const double *) pb;
	case PROTOBUF_C_TYPE_STRING:
		sa = *(char *const *) pa;
		sb = *(char *const *) pb;
		return strcmp(sa != NULL ? sa : "", sb != NULL ? sb : "") == 0;
	case PROTOBUF_C_TYPE_BYTES:
		return ba->len == bb->len &&
		    (ba->len == 0 || memcmp(ba->data, bb->data, ba->len) == 0);
	default:
		return memcmp(pa, pb, elem_size(f->type)) == 0;
	}
}

// differs writes "PATH: job has A, this trainer B" into why and returns 1.
// Values that print alike with %g are printed in full.
static int
differs(const char *path, const ProtobufCFieldDescriptor *f, const void *pa,
    const void *pb, char *why, size_t n)
{
	char ta[160], tb[160];
	scalar_text(f, pa, 6, ta, sizeof(ta));
	scalar_text(f, pb, 6, tb, sizeof(tb));
	if (strcmp(ta, tb) == 0) {
		scalar_text(f, pa, 17, ta, sizeof(ta));
		scalar_text(f, pb, 17, tb, sizeof(tb));
	}
	snprintf(why, n, "%s: job has %s, this trainer %s", path, ta, tb);
	return 1;
}

// msg_diff compares messages a and b of one type field by field, in field
// number order, by their descriptor (so a new field is compared without
// a line here): 1 and the first difference in why (its path from the
// JobConfig, e.g. "tensors[1].len" or "optim.name"), or 0.
static int
msg_diff(const ProtobufCMessage *a, const ProtobufCMessage *b,
    const char *prefix, int top, char *why, size_t n)
{
	const ProtobufCMessageDescriptor *d = a->descriptor;
	char                              path[128];
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f    = &d->fields[i];
		const char                     *ca   = (const char *) a;
		const char                     *cb   = (const char *) b;
		int                             skip = 0;
		for (size_t k = 0;
		     top && k < sizeof(sched_fields) / sizeof(sched_fields[0]);
		     k++) {
			skip |= strcmp(f->name, sched_fields[k]) == 0;
		}
		if (skip) {
			continue;
		}
		snprintf(path, sizeof(path), "%s%s", prefix, f->name);
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t na = *(
			    const size_t *) (ca + f->quantifier_offset);
			size_t nb = *(
			    const size_t *) (cb + f->quantifier_offset);
			size_t es = elem_size(f->type);
			if (na != nb) {
				snprintf(why, n,
				    "%s: job has %zu, this trainer %zu", path,
				    na, nb);
				return 1;
			}
			for (size_t k = 0; k < na; k++) {
				const char *ea = *(char *const *) (ca +
				                     f->offset) +
				    k * es;
				const char *eb = *(char *const *) (cb +
				                     f->offset) +
				    k * es;
				char ep[160];
				snprintf(ep, sizeof(ep), "%s[%zu]", path, k);
				if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
					strcat(ep, ".");
					if (msg_diff(
					        *(ProtobufCMessage *const *)
					            ea,
					        *(ProtobufCMessage *const *)
					            eb,
					        ep, 0, why, n)) {
						return 1;
					}
				} else if (!scalar_equal(f, ea, eb)) {
					return differs(ep, f, ea, eb, why, n);
				}
			}
			continue;
		}
		if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
		    f->quantifier_offset != 0 &&
		    !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    f->type != PROTOBUF_C_TYPE_MESSAGE &&
		    f->type != PROTOBUF_C_TYPE_STRING) {
			protobuf_c_boolean ha, hb;
			ha = *(const protobuf_c_boolean *) (ca +
			    f->quantifier_offset);
			hb = *(const protobuf_c_boolean *) (cb +
			    f->quantifier_offset);
			if (ha != hb) {
				snprintf(why, n,
				    "%s: job has %s, this trainer %s", path,
				    ha ? "one" : "none", hb ? "one" : "none");
				return 1;
			}
			if (!ha) {
				continue;
			}
		}
		if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
			const ProtobufCMessage *ma, *mb;
			char                    sub[160];
			ma = *(ProtobufCMessage *const *) (ca + f->offset);
			mb = *(ProtobufCMessage *const *) (cb + f->offset);
			if (ma == NULL || mb == NULL) {
				if (ma != mb) {
					snprintf(why, n,
					    "%s: job has %s, this trainer %s",
					    path, ma != NULL ? "one" : "none",
					    mb != NULL ? "one" : "none");
					return 1;
				}
				continue;
			}
			snprintf(sub, sizeof(sub), "%s.", path);
			if (msg_diff(ma, mb, sub, 0, why, n)) {
				return 1;
			}
		} else if (!scalar_equal(f, ca + f->offset, cb + f->offset)) {
			return differs(path, f, ca + f->offset, cb + f->offset,
			    why, n);
		}
	}
	return 0;
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
	const ProtobufCEnumValue *mode;
	char                      first[384];
	if (!msg_diff(&a->base, &b->base, "", 1, first, sizeof(first))) {
		return 0;
	}
	// What the job runs, for the operator who restarts the trainer.
	mode = protobuf_c_enum_descriptor_get_value(&pswire__mode__descriptor,
	    a->mode);
	snprintf(why, n,
	    "%s (the job: mode %s, lr %g, optimizer %s, lr schedule %s, "
	    "clip norm %g)",
	    first, mode != NULL ? mode->name : "?", a->lr,
	    a->optim != NULL && *a->optim->name != '\0' ? a->optim->name
	                                                : "sgd",
	    a->lr_schedule != NULL && *a->lr_schedule->kind != '\0'
	        ? a->lr_schedule->kind
	        : "constant",
	    a->clip_norm);
	return 1;
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
	for (size_t i = 0; i < j->n_tables; i++) {
		// A table's ranges are shards too (0: one per server).
		uint32_t ts = j->tables[i]->shards;
		shards += ts != 0 ? ts : (uint64_t) o->servers;
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
	if (ps__job_kinds(j, why, n) != FB_OK ||
	    ps__job_tables(j, why, n) != FB_OK) {
		return FB_EINVAL;
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
	if (ps__job_local(j, why, n) != FB_OK) {
		return FB_EINVAL;
	}
	return FB_OK;
}
