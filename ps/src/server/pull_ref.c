// pull_ref.c — the pull reference and its delta log (docs/algorithms.md
// §2.4). With a pull codec each shard keeps a reference `ref` that every
// trainer also holds; after each update the server encodes
// d = Q(x - ref), applies ref += deq(d) and keeps the last log_k encoded
// deltas, so that a pull can be answered with the chain of deltas the
// caller is missing instead of the full reference.
#include <string.h>

#include "server_impl.h"

void
ps__ref_log_reset(struct ps_server *s, struct srv_shard *sh)
{
	for (uint32_t k = 0; k < s->log_k; k++) {
		sh->log_base[k] = UINT64_MAX;
	}
}

void
ps__ref_publish(struct ps_server *s, struct srv_shard *sh)
{
	if (s->job.pull_none) {
		return;
	}
	if (sh->version > s->job.warmup) {
		uint64_t base = sh->version - 1;
		uint32_t slot = (uint32_t) (base % s->log_k);
		size_t   n;
		int      rv = comp_ref_encode(&s->job.cpull, sh->x, sh->ref,
		         sh->len, s->scratch, sh->log + (size_t) slot * sh->log_cap,
		         sh->log_cap, &n);
		if (rv == FB_OK) {
			sh->ref_crc        = fb_crc32(0, sh->ref, sh->len * 4);
			sh->log_base[slot] = base;
			sh->log_len[slot]  = n;
			sh->log_crc[slot]  = sh->ref_crc;
			return;
		}
		FB_LOG(FB_LOG_WARN, "store",
		    "shard %u: pull delta encode "
		    "failed (%s); trainers resync in full",
		    sh->id, fb_strerror(rv));
	}
	// Warm-up (or encode failure): the reference is the weights.
	memcpy(sh->ref, sh->x, sh->len * 4);
	sh->ref_crc = fb_crc32(0, sh->ref, sh->len * 4);
	ps__ref_log_reset(s, sh);
}

int
ps__ref_plan(const struct ps_server *s, const struct srv_shard *sh,
    uint64_t have, int full, size_t *nrefs, size_t *bytes)
{
	uint64_t cur = sh->version;
	if (!s->job.pull_none && !full && have <= cur &&
	    cur - have <= s->log_k) {
		size_t b  = 0;
		int    ok = 1;
		for (uint64_t v = have; v < cur && ok; v++) {
			uint32_t slot = (uint32_t) (v % s->log_k);
			ok            = sh->log_base[slot] == v;
			b += sh->log_len[slot];
		}
		if (ok) {
			*nrefs = cur > have ? (size_t) (cur - have) : 1;
			*bytes = b;
			return PS_PLAN_CHAIN;
		}
	}
	*nrefs = 1;
	*bytes = sh->len * 4;
	return PS_PLAN_FULL;
}

uint32_t
ps__delta_log_depth(const struct comp_codec *c, size_t maxlen)
{
	size_t entry  = comp_bound(c, maxlen);
	size_t budget = (size_t) ((double) maxlen * 4 * PS_DELTA_LOG_BUDGET);
	size_t k      = entry > 0 ? budget / entry : PS_DELTA_LOG;
	return k < 1 ? 1 : k > PS_DELTA_LOG ? PS_DELTA_LOG : (uint32_t) k;
}
