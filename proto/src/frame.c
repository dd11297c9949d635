// frame.c — the fixed frame header and status helpers (docs/protocol.md).
#include "ferry.pb-c.h"
#include "fb/fb.h"
#include "psw/psw.h"

void
psw_frame_put(uint8_t *dst, uint8_t method, uint16_t flags, uint32_t hdr_len,
    uint32_t payload_len)
{
	fb_put_u32le(dst, PSW_MAGIC);
	dst[4] = PSW_VERSION;
	dst[5] = method;
	fb_put_u16le(dst + 6, flags);
	fb_put_u32le(dst + 8, hdr_len);
	fb_put_u32le(dst + 12, payload_len);
}

int
psw_frame_parse(const void *buf, size_t len, struct psw_frame *f,
    const char **why)
{
	const uint8_t *p = buf;
	uint32_t       hl, pl, tl;
	uint16_t       flags;

	if (p == NULL || len < PSW_FRAME_HDR) {
		*why = "frame shorter than its 16-byte header";
		return FB_EPROTO;
	}
	if (fb_get_u32le(p) != PSW_MAGIC) {
		*why = "bad frame magic (not a Ferry message)";
		return FB_EPROTO;
	}
	if (p[4] != PSW_VERSION) {
		*why = "unsupported protocol version";
		return FB_EPROTO;
	}
	hl    = fb_get_u32le(p + 8);
	pl    = fb_get_u32le(p + 12);
	flags = fb_get_u16le(p + 6);
	tl    = (flags & PSW_FLAG_SIGNED) ? PSW_AUTH_TRAILER : 0;
	if (hl > PSW_MAX_HEADER) {
		*why = "frame header length over the cap";
		return FB_EPROTO;
	}
	// 64-bit sum: no overflow for three u32 plus 16.
	if ((uint64_t) PSW_FRAME_HDR + hl + pl + tl != (uint64_t) len) {
		*why = "frame lengths do not match the message size";
		return FB_EPROTO;
	}
	f->method      = p[5];
	f->flags       = flags;
	f->hdr         = p + PSW_FRAME_HDR;
	f->hdr_len     = hl;
	f->payload     = p + PSW_FRAME_HDR + hl;
	f->payload_len = pl;
	f->trailer     = tl ? p + PSW_FRAME_HDR + hl + pl : NULL;
	return FB_OK;
}

const char *
psw_status_name(int status)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
	    &pswire__status__descriptor, status);
	return v != NULL ? v->name : "UNKNOWN_STATUS";
}

int
psw_status_from_err(int err)
{
	switch (err) {
	case FB_OK:
		return PSWIRE__STATUS__OK;
	case FB_EINVAL:
	case FB_EPROTO:
	case FB_ERANGE:
		return PSWIRE__STATUS__INVALID_ARGUMENT;
	case FB_ENOMEM:
	case FB_ENOSPC:
		return PSWIRE__STATUS__RESOURCE_EXHAUSTED;
	case FB_ENOTFOUND:
		return PSWIRE__STATUS__NOT_FOUND;
	case FB_ETIMEDOUT:
		return PSWIRE__STATUS__DEADLINE_EXCEEDED;
	case FB_ESTATE:
		return PSWIRE__STATUS__FAILED_PRECONDITION;
	case FB_ESTALE:
		return PSWIRE__STATUS__STALE_EPOCH;
	case FB_EBUSY:
	case FB_ECLOSED:
	case FB_ETRANSPORT:
		return PSWIRE__STATUS__UNAVAILABLE;
	case FB_ECORRUPT:
		return PSWIRE__STATUS__DATA_LOSS;
	case FB_EUNSUPP:
		return PSWIRE__STATUS__UNIMPLEMENTED;
	case FB_EAUTH:
		return PSWIRE__STATUS__UNAUTHENTICATED;
	default:
		return PSWIRE__STATUS__INTERNAL;
	}
}

const char *
psw_method_name(int method)
{
	switch (method) {
	case PSWIRE__METHOD__REGISTER:
		return "Register";
	case PSWIRE__METHOD__HEARTBEAT:
		return "Heartbeat";
	case PSWIRE__METHOD__GET_PLACEMENT:
		return "GetPlacement";
	case PSWIRE__METHOD__REPORT_LINKS:
		return "ReportLinks";
	case PSWIRE__METHOD__LEAVE:
		return "Leave";
	case PSWIRE__METHOD__LEASE:
		return "Lease";
	case PSWIRE__METHOD__PULL:
		return "Pull";
	case PSWIRE__METHOD__PUSH:
		return "Push";
	case PSWIRE__METHOD__PUSH_PULL:
		return "PushPull";
	case PSWIRE__METHOD__SNAPSHOT:
		return "Snapshot";
	case PSWIRE__METHOD__STATS:
		return "Stats";
	case PSWIRE__METHOD__PROBE:
		return "Probe";
	case PSWIRE__METHOD__TRANSFER:
		return "Transfer";
	case PSWIRE__METHOD__REPLICATE:
		return "Replicate";
	case PSWIRE__METHOD__ROWS:
		return "Rows";
	case PSWIRE__METHOD__AUDIT:
		return "Audit";
	case PSWIRE__METHOD__VERIFIED:
		return "Verified";
	default:
		return "?";
	}
}
