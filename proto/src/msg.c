// msg.c — building nng messages so that payloads are written in place.
//
// DESIGN. A message is frame(16) | header(h) | payload(p). The header's size
// depends on the payload's offsets and lengths, which are known only after
// the payload is encoded. So psw_msg_begin reserves 16 + hdr_max bytes in
// front, the caller encodes the payload in place, and psw_msg_finish packs
// the header right in front of the payload and trims the unused front bytes
// (nng_msg_trim only moves a pointer). The payload is never copied.
#include <string.h>

#include "ferry.pb-c.h"
#include "fb/fb.h"
#include "psw/psw.h"

int
psw_msg_begin(nng_msg **out, size_t hdr_max, size_t payload_cap,
    uint8_t **payload)
{
	nng_msg *m;
	// The trailer's room is reserved (and chopped by psw_msg_finish) so
	// that signing appends in place.
	if (nng_msg_alloc(&m,
	        PSW_FRAME_HDR + hdr_max + payload_cap + PSW_AUTH_TRAILER) !=
	    0) {
		return FB_ENOMEM;
	}
	*payload = (uint8_t *) nng_msg_body(m) + PSW_FRAME_HDR + hdr_max;
	*out     = m;
	return FB_OK;
}

int
psw_msg_reuse(nng_msg *m, size_t hdr_max, size_t payload_cap,
    uint8_t **payload)
{
	size_t need = PSW_FRAME_HDR + hdr_max + payload_cap;
	// Within the capacity nng_msg_realloc only moves the length. The
	// trailer's room is taken when it is there; when it is not (nng sized
	// the request to its bytes), the message is still reused: an unsigned
	// reply needs none, and signing appends it (nng then grows the
	// message once). Refusing it cost every sync step a zeroed reply as
	// large as the model.
	if (nng_msg_capacity(m) >= need + PSW_AUTH_TRAILER) {
		need += PSW_AUTH_TRAILER;
	}
	if (nng_msg_capacity(m) < need || nng_msg_realloc(m, need) != 0) {
		return FB_ENOSPC;
	}
	*payload = (uint8_t *) nng_msg_body(m) + PSW_FRAME_HDR + hdr_max;
	return FB_OK;
}

int
psw_msg_finish(nng_msg *m, uint8_t method, uint16_t flags,
    const ProtobufCMessage *hdr, size_t hdr_max, size_t payload_len)
{
	size_t   hl   = protobuf_c_message_get_packed_size(hdr);
	size_t   len  = nng_msg_len(m);
	uint8_t *body = nng_msg_body(m);

	if (hl > hdr_max || PSW_FRAME_HDR + hdr_max + payload_len > len ||
	    hl > PSW_MAX_HEADER || payload_len > UINT32_MAX) {
		return FB_ENOSPC;
	}
	size_t skip = hdr_max - hl;
	protobuf_c_message_pack(hdr, body + PSW_FRAME_HDR + skip);
	psw_frame_put(body + skip, method, flags, (uint32_t) hl,
	    (uint32_t) payload_len);
	nng_msg_chop(m, len - (PSW_FRAME_HDR + hdr_max + payload_len));
	nng_msg_trim(m, skip);
	return FB_OK;
}

int
psw_msg_parse(nng_msg *m, struct psw_frame *f, const char **why)
{
	return psw_frame_parse(nng_msg_body(m), nng_msg_len(m), f, why);
}

int
psw_reply_open(struct psw_auth *auth, nng_msg *rep, uint8_t method,
    uint64_t request_id, uint64_t reply_to, struct psw_frame *f,
    ProtobufCMessage **hdr, const char **why)
{
	Pswire__Header *h;
	int             want;
	int             arv;

	if (psw_msg_parse(rep, f, why) != FB_OK) {
		return FB_EPROTO;
	}
	if (!(f->flags & PSW_FLAG_REPLY)) {
		*why = "reply frame without the REPLY flag";
		return FB_EPROTO;
	}
	want = method < PSWIRE__METHOD__PULL ? PSW_ROLE_SCHEDULER
	                                     : PSW_ROLE_SERVER;
	arv  = psw_auth_check_reply(auth, f, reply_to, want, why);
	if (arv == FB_OK) {
		// Under TLS, with a secret or without: a member-named
		// certificate must be of the answering role (maps only from
		// ferry-scheduler's). A Snapshot is answered by a server, or
		// by the scheduler when an operator asks it for the job's.
		arv = psw_tls_check_sender(rep, want, why);
		if (arv != FB_OK &&
		    (method == PSWIRE__METHOD__SNAPSHOT ||
		        method == PSWIRE__METHOD__STATS)) {
			arv = psw_tls_check_sender(rep, PSW_ROLE_SCHEDULER,
			    why);
		}
	}
	h = pswire__header__unpack(NULL, f->hdr_len, f->hdr);
	if (arv != FB_OK) {
		// A peer that could not check our signature says so unsigned
		// (or signed with another key): pass its text on, as an
		// error, so the caller learns why; nothing else is believed.
		if (h != NULL &&
		    h->status == PSWIRE__STATUS__UNAUTHENTICATED) {
			*hdr = &h->base;
			*why = h->error;
			return FB_EREMOTE;
		}
		if (h != NULL) {
			pswire__header__free_unpacked(h, NULL);
		}
		return FB_EAUTH;
	}
	if (h == NULL) {
		*why = "reply header is not a valid protobuf Header";
		return FB_EPROTO;
	}
	// Errors for unparseable requests come back with request id 0 and
	// method 0; accept them so the status text reaches the caller.
	if (h->status == PSWIRE__STATUS__OK &&
	    (h->request_id != request_id || f->method != method)) {
		pswire__header__free_unpacked(h, NULL);
		*why = "reply does not match the request (id or method)";
		return FB_EPROTO;
	}
	*hdr = &h->base;
	*why = h->status == PSWIRE__STATUS__OK ? NULL : h->error;
	return h->status == PSWIRE__STATUS__OK ? FB_OK : FB_EREMOTE;
}

// learn_run asks the scheduler on ctx for the job run before a request
// that needs it (auth.c DESIGN): a Stats call, the one request the
// scheduler takes without a run (it changes nothing, so a replay of it
// does nothing), whose signed answer names the run. Errors as psw_call.
static int
learn_run(struct psw_auth *auth, nng_ctx ctx, nng_aio *aio,
    uint64_t request_id, int timeout_ms, const char **why)
{
	Pswire__Header    h  = PSWIRE__HEADER__INIT;
	ProtobufCMessage *ph = NULL;

	// The context goes to the scheduler (its method said so): name it,
	// or the Stats, a method servers answer too, would go to no one.
	if (psw_auth_set_peer(auth, ctx, PSW_ROLE_SCHEDULER, 0) != FB_OK) {
		*why = "out of memory";
		return FB_ENOMEM;
	}
	h.request_id = request_id;
	int rv       = psw_call_header(auth, ctx, aio, &h.base,
	          PSWIRE__METHOD__STATS, request_id, timeout_ms, &ph, why);
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
	return rv;
}

// forget_stale_run clears auth's run when the scheduler refused a request
// for carrying another one (it restarted as a new job): the next call
// learns the new run. A forged refusal costs one more Stats call.
static void
forget_stale_run(struct psw_auth *auth, int to_scheduler, int rv,
    ProtobufCMessage *hdr)
{
	const Pswire__Header *h = (const Pswire__Header *) hdr;
	if (to_scheduler && rv == FB_EREMOTE && h != NULL &&
	    h->status == PSWIRE__STATUS__UNAUTHENTICATED && h->error != NULL &&
	    strstr(h->error, "another job run") != NULL) {
		psw_auth_set_run(auth, 0);
	}
}

int
psw_call(struct psw_auth *auth, nng_ctx ctx, nng_aio *aio, nng_msg *req,
    uint8_t method, uint64_t request_id, int timeout_ms, nng_msg **rep,
    struct psw_frame *f, ProtobufCMessage **hdr, const char **why)
{
	int      rv;
	nng_msg *m;
	uint64_t ctr;
	int      to_sched = auth != NULL &&
	    psw_auth_receiver(auth, ctx, method).role == PSW_ROLE_SCHEDULER;

	if (to_sched && method != PSWIRE__METHOD__STATS &&
	    psw_auth_run(auth) == 0) {
		// Refused (FB_EREMOTE: another key, say): send the request
		// anyway, so that its own refusal reaches the caller.
		rv = learn_run(auth, ctx, aio, request_id, timeout_ms, why);
		if (rv != FB_OK && rv != FB_EREMOTE) {
			nng_msg_free(req);
			return rv;
		}
	}
	if (psw_auth_sign(auth, req, psw_auth_channel(auth, ctx), 0, &ctr) !=
	    FB_OK) {
		nng_msg_free(req);
		*why = "out of memory signing the request";
		return FB_ENOMEM;
	}

	nng_aio_set_timeout(aio, timeout_ms);
	nng_aio_set_msg(aio, req);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	if ((rv = nng_aio_result(aio)) != 0) {
		nng_msg_free(req);
		*why = nng_strerror(rv);
		return rv == NNG_ETIMEDOUT ? FB_ETIMEDOUT : FB_ETRANSPORT;
	}
	nng_ctx_recv(ctx, aio);
	nng_aio_wait(aio);
	if ((rv = nng_aio_result(aio)) != 0) {
		*why = nng_strerror(rv);
		return rv == NNG_ETIMEDOUT ? FB_ETIMEDOUT : FB_ETRANSPORT;
	}
	m  = nng_aio_get_msg(aio);
	rv = psw_reply_open(auth, m, method, request_id, ctr, f, hdr, why);
	forget_stale_run(auth, to_sched, rv, rv == FB_EREMOTE ? *hdr : NULL);
	if (rv != FB_OK && rv != FB_EREMOTE) {
		nng_msg_free(m);
		return rv;
	}
	*rep = m;
	return rv;
}
