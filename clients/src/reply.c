// reply.c — taking a server's pull reply apart, shard by shard, and the
// pull sink: full shards and delta chains are applied to the client's
// reference and copied into the caller's tensors, or handed to the pull
// sink set with ferry_client_set_pull_sink.
//
// DESIGN. With a pull codec, the deltas are first applied to the client's
// copy of the shared reference, whose CRC is checked in the same pass as
// the copy to the caller (fb_crc32_copy); with a pull sink set, the sink
// holds the reference instead (a GPU trainer decodes on the device). The
// versions, the chain checks and the full resyncs stay here either way,
// and a shard whose reference lives on the other side of that switch is
// resynced rather than patched.
#include "client_impl.h"

// sink_rv turns a sink callback's result into the pull's: FERRY_OK and
// FERRY_ECORRUPT (resync the shard) pass; anything else fails the call.
static int
sink_rv(ferry_client *c, uint32_t id, const char *cb, int rv)
{
	if (rv == FERRY_OK || rv == FERRY_ECORRUPT) {
		return rv;
	}
	if (rv <= 0 || rv >= FERRY_ERR_COUNT) {
		return ferry__fail(c, FERRY_EINVAL,
		    "pull sink: %s of shard %u returned %d, not a ferry_err",
		    cb, id, rv);
	}
	return ferry__fail(c, rv, "pull sink: %s of shard %u failed: %s", cb,
	    id, ferry_strerror(rv));
}

// take_shard applies the reply refs of one shard (r[0..k)): to the
// client's reference and the caller's tensor, or through the pull sink
// when one is set. Returns FERRY_OK, or FERRY_ECORRUPT when the reference
// no longer matches the server's (the caller resyncs), or FERRY_EPROTO for
// a malformed reply (or the sink's error).
static int
take_shard(ferry_client *c, size_t m, int weights, uint32_t id,
    Pswire__ShardRef *const *r, size_t k, const struct psw_frame *f,
    float *const *w)
{
	const Pswire__ShardInfo *si   = c->pl->shards[id];
	const int                sink = c->has_sink;
	uint64_t                 ver  = c->shard_ver[id];
	float                   *dst = NULL, *ref = NULL;
	struct ferry_pull_piece  p = { 0 };
	int                      rv;
	// Whether dst is known to hold no NaN or Inf: 1 yes, 0 no, -1 not
	// checked yet.
	int                      finite = -1;

	if (!sink) {
		dst = w[si->tensor] + si->offset;
		ref = c->cpull.id == COMP_NONE || weights
		    ? dst
		    : c->ref[si->tensor] + si->offset;
	}
	p.shard  = id;
	p.tensor = si->tensor;
	p.offset = si->offset;
	p.len    = si->len;
	for (size_t j = 0; j < k; j++) {
		const Pswire__ShardRef *e = r[j];
		if (e->offset > f->payload_len ||
		    e->length > f->payload_len - e->offset) {
			return ferry__fail(c, FERRY_EPROTO,
			    "server %s: shard %u bytes outside the reply",
			    c->pl->servers[m], id);
		}
		p.data  = f->payload + e->offset;
		p.bytes = e->length;
		if (e->kind == PSWIRE__SHARD_KIND__SHARD_KIND_FULL) {
			if (k != 1 || e->codec != COMP_NONE ||
			    e->length != si->len * 4) {
				return ferry__fail(c, FERRY_EPROTO,
				    "server %s: bad full shard %u",
				    c->pl->servers[m], id);
			}
			ver = e->version;
			if (!sink) {
				// Into the caller's tensor: copy and check
				// in one pass (the check below is skipped).
				if (ref == dst) {
					finite = fb_copy_finite(ref, p.data,
					    si->len);
				} else {
					memcpy(ref, p.data, e->length);
				}
				c->ref_at[id] = weights ? REF_NONE : REF_HOST;
				continue;
			}
			if (c->cpull.id != COMP_NONE && !weights &&
			    fb_crc32(0, p.data, e->length) != e->crc) {
				return FERRY_ECORRUPT;
			}
			p.base_version = p.version = e->version;
			rv = c->sink.full(c->sink.arg, &p);
			rv = sink_rv(c, id, "full", rv);
			if (rv != FERRY_OK) {
				return rv;
			}
			c->ref_at[id]    = weights ? REF_NONE : REF_SINK;
			c->shard_ver[id] = ver;
			c->held[id]      = NULL; // on the sink's side
			return FERRY_OK; // a FULL is alone and carries no
			                 // check
		} else if (c->cpull.id == COMP_NONE ||
		    e->codec != c->cpull.id) {
			return ferry__fail(c, FERRY_EPROTO,
			    "server %s: delta for shard %u in codec %u",
			    c->pl->servers[m], id, e->codec);
		} else if (e->base_version < ver && e->version <= ver) {
			continue; // already applied (async: shards drift
			          // apart)
		} else if (e->base_version != ver ||
		    c->ref_at[id] != (sink ? REF_SINK : REF_HOST)) {
			// A gap in the chain, or no reference on this path
			// (the sink was set or cleared since): resync.
			return FERRY_ECORRUPT;
		} else if (e->length > 0 && sink) {
			if (e->length != comp_bound(&c->cpull, si->len)) {
				return ferry__fail(c, FERRY_EPROTO,
				    "server %s: delta for "
				    "shard %u has %llu bytes, not %zu",
				    c->pl->servers[m], id,
				    (unsigned long long) e->length,
				    comp_bound(&c->cpull, si->len));
			}
			p.codec        = c->cpull.id;
			p.bucket       = c->cpull.bucket;
			p.base_version = e->base_version;
			p.version      = e->version;
			rv             = sink_rv(c, id, "delta",
			                c->sink.delta(c->sink.arg, &p));
			if (rv != FERRY_OK) {
				return rv;
			}
			ver = e->version;
		} else {
			if (e->length > 0 &&
			    comp_decode_add(&c->cpull, p.data, e->length,
			        si->len, ref) != FB_OK) {
				return ferry__fail(c, FERRY_EPROTO,
				    "server %s: corrupt delta for shard %u",
				    c->pl->servers[m], id);
			}
			ver = e->version;
		}
	}
	if (sink) {
		// Only chains get here (a FULL returned above), and a chain
		// needs a pull codec.
		rv = sink_rv(c, id, "check",
		    c->sink.check(c->sink.arg, id, ver, r[k - 1]->crc));
		if (rv != FERRY_OK) {
			return rv;
		}
	} else if (c->cpull.id != COMP_NONE && !weights) {
		// Check and hand over in one pass; on a mismatch dst holds a
		// wrong copy, which the resync this triggers overwrites.
		if (fb_crc32_copy(0, dst, ref, si->len * 4) != r[k - 1]->crc) {
			return FERRY_ECORRUPT;
		}
	}
	if (finite < 0 && !sink) {
		finite = fb_all_finite(dst, si->len);
	}
	if (finite == 0) {
		// A server bug or a hostile server: never hand the caller
		// weights that would poison every later step.
		return ferry__fail(c, FERRY_EPROTO,
		    "server %s: pulled weights of shard %u hold NaN or Inf",
		    c->pl->servers[m], id);
	}
	c->shard_ver[id] = ver;
	// What a re-seed of this shard would be offered (seed.c): libferry's
	// own reference when there is one, else the caller's buffer.
	c->held[id] = sink ? NULL : ref;
	return FERRY_OK;
}

// ferry__reply_take checks server s->m's pull reply for the shards in
// s->req and scatters them into w.
int
ferry__reply_take(ferry_client *c, struct slot *s, struct xfer *x,
    Pswire__Header *rh, const struct psw_frame *f)
{
	size_t m = s->m;
	size_t j = 0;
	if (s->method == PSWIRE__METHOD__PUSH) {
		return FERRY_OK;
	}
	if (rh->body_case != PSWIRE__HEADER__BODY_PULL_REP) {
		return ferry__fail(c, FERRY_EPROTO,
		    "server %s: reply has no pull body", c->pl->servers[m]);
	}
	Pswire__PullReply *p = rh->pull_rep;
	c->conns[m].link_pull_bytes += f->payload_len;
	for (size_t i = 0; i < s->req_n; i++) {
		size_t k = 0;
		while (j + k < p->n_shards &&
		    p->shards[j + k]->shard == s->req[i]) {
			k++;
		}
		if (k == 0) {
			return ferry__fail(c, FERRY_EPROTO,
			    "server %s: reply lacks shard %u",
			    c->pl->servers[m], s->req[i]);
		}
		for (size_t e = j; e < j + k; e++) {
			if (p->shards[e]->staleness > c->pull_stale) {
				c->pull_stale = p->shards[e]->staleness;
			}
		}
		// Codec "auto" may have pulled the weights themselves over
		// this link: fp32, no reference kept (the next pull of deltas
		// resyncs it in full).
		int rv = take_shard(c, m, s->pull_weights, s->req[i],
		    p->shards + j, k, f, x->w);
		if (rv == FERRY_ECORRUPT) {
			c->need_full[s->req[i]] = 1;
		} else if (rv != FERRY_OK) {
			return rv;
		}
		j += k;
	}
	if (j != p->n_shards) {
		return ferry__fail(c, FERRY_EPROTO,
		    "server %s: reply lists shards not asked for",
		    c->pl->servers[m]);
	}
	return FERRY_OK;
}

FERRY_API int
ferry_client_set_pull_sink(ferry_client *c, const struct ferry_pull_sink *sink)
{
	if (c == NULL) {
		return FERRY_EINVAL;
	}
	if (sink == NULL) {
		c->has_sink = 0;
		return FERRY_OK;
	}
	if (sink->full == NULL || sink->delta == NULL || sink->check == NULL) {
		return ferry__fail(c, FERRY_EINVAL,
		    "pull sink: full, delta and check are all required");
	}
	c->sink     = *sink;
	c->has_sink = 1;
	return FERRY_OK;
}
