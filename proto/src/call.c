// call.c — the client end of a Ferry rpc: a REQ socket with one context,
// and a call whose request is a Header alone (no payload).
//
// The scheduler's clients (servers registering and watching the map,
// libferry), the servers' shard moves and a server's leave all open a REQ
// socket the same way and make header-only calls; this is the one copy.
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "ferry.pb-c.h"
#include "fb/fb.h"
#include "psw/psw.h"

int
psw_req_open(const struct psw_tls *tls, const char *url, size_t max_msg,
    int reconn_min_ms, int reconn_max_ms, nng_socket *sock, nng_ctx *ctx,
    nng_aio **aio)
{
	return psw_req_open_watched(tls, url, max_msg, reconn_min_ms,
	    reconn_max_ms, NULL, NULL, sock, ctx, aio);
}

int
psw_req_open_watched(const struct psw_tls *tls, const char *url,
    size_t max_msg, int reconn_min_ms, int reconn_max_ms, nng_pipe_cb cb,
    void *arg, nng_socket *sock, nng_ctx *ctx, nng_aio **aio)
{
	nng_socket s;
	nng_ctx    cx;
	nng_aio   *a = NULL;

	if (nng_req0_open(&s) != 0) {
		return FB_ETRANSPORT;
	}
	// A request is never re-sent by nng: pushes are not idempotent.
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if (reconn_min_ms > 0) {
		nng_socket_set_ms(s, NNG_OPT_RECONNMINT, reconn_min_ms);
	}
	if (reconn_max_ms > 0) {
		nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, reconn_max_ms);
	}
	if (max_msg > 0) {
		nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, max_msg);
	}
	if (cb != NULL &&
	    (nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, cb, arg) != 0 ||
	        nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, cb, arg) != 0)) {
		nng_close(s);
		return FB_ETRANSPORT;
	}
	int rv = psw_tls_dial(tls, s, url);
	if (rv != FB_OK || nng_ctx_open(&cx, s) != 0 ||
	    nng_aio_alloc(&a, NULL, NULL) != 0) {
		nng_close(s);
		return rv != FB_OK ? rv : FB_ETRANSPORT;
	}
	*sock = s;
	*ctx  = cx;
	*aio  = a;
	return FB_OK;
}

int
psw_call_header(struct psw_auth *auth, nng_ctx ctx, nng_aio *aio,
    const ProtobufCMessage *hdr, uint8_t method, uint64_t request_id,
    int timeout_ms, ProtobufCMessage **rhdr, const char **why)
{
	nng_msg         *req, *rep = NULL;
	uint8_t         *payload;
	struct psw_frame f;
	size_t           hl = protobuf_c_message_get_packed_size(hdr);
	int              rv;

	*why = "";
	if (psw_msg_begin(&req, hl, 0, &payload) != FB_OK) {
		*why = "out of memory";
		return FB_ENOMEM;
	}
	if ((rv = psw_msg_finish(req, method, 0, hdr, hl, 0)) != FB_OK) {
		nng_msg_free(req);
		*why = "request header too large";
		return rv;
	}
	rv = psw_call(auth, ctx, aio, req, method, request_id, timeout_ms,
	    &rep, &f, rhdr, why);
	if (rep != NULL) {
		// The header was unpacked into its own memory: the reply's
		// bytes are no longer needed.
		nng_msg_free(rep);
	}
	return rv;
}
