// psw/psw.h — Ferry's wire framing: the fixed 16-byte frame header that
// precedes every message's protobuf Header and raw payload, and the status
// code helpers. Byte layout: docs/protocol.md.
//
// The generated protobuf-c code ("ferry.pb-c.h", package pswire) is built
// into the build tree and included by .c files only; no generated type
// appears in this header.
#ifndef PSW_PSW_H
#define PSW_PSW_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>
#include <protobuf-c/protobuf-c.h>

#define PSW_MAGIC 0x59524546u // "FERY" read as little-endian u32
#define PSW_VERSION 1u
#define PSW_FRAME_HDR 16u
// Caps on the untrusted lengths in a frame (payload cap is the transport's
// receive size, checked by the caller).
#define PSW_MAX_HEADER (1u << 20)

// Signing state (auth.c); NULL wherever authentication is off.
struct psw_auth;
// Mutual TLS state (tls.c); NULL wherever TLS is off.
struct psw_tls;
// Who sent a message (auth.c, tls.c).
struct psw_ident;

// Frame flags.
#define PSW_FLAG_REPLY 0x1u
// SIGNED: a PSW_AUTH_TRAILER-byte trailer follows the payload (auth.c).
#define PSW_FLAG_SIGNED 0x2u
#define PSW_AUTH_TRAILER 64u

// A parsed frame: pointers borrow the caller's buffer.
struct psw_frame {
	uint8_t        method;
	uint16_t       flags;
	const uint8_t *hdr; // protobuf Header bytes
	uint32_t       hdr_len;
	const uint8_t *payload; // raw payload bytes
	uint32_t       payload_len;
	const uint8_t *trailer; // PSW_AUTH_TRAILER bytes when SIGNED, or NULL
};

// psw_frame_put writes the 16-byte fixed header into dst.
void psw_frame_put(uint8_t *dst, uint8_t method, uint16_t flags,
    uint32_t hdr_len, uint32_t payload_len);

// psw_frame_parse validates buf (len bytes) as one frame and fills *f with
// pointers into buf. Returns FB_EPROTO with *why set to a static reason
// (bad magic, unknown version, lengths that do not add up, header too
// large) on any malformed input; never reads outside buf.
int psw_frame_parse(const void *buf, size_t len, struct psw_frame *f,
    const char **why);

// psw_status_name returns the gRPC-style name of a pswire Status value
// ("OK", "INVALID_ARGUMENT", ..., "STALE_EPOCH"); never NULL.
const char *psw_status_name(int status);

// psw_status_from_err maps a FB_E* error to the status that reports it.
int psw_status_from_err(int err);

// psw_method_name returns the rpc name of a method number ("Push", ...);
// "?" when unknown.
const char *psw_method_name(int method);

// ---- building and reading nng messages, zero-copy for payloads ----------
//
// psw_msg_begin allocates a message with room for a header of up to
// hdr_max packed bytes and payload_cap payload bytes, and returns in
// *payload where the payload goes; the caller writes (or encodes) it in
// place, then calls psw_msg_finish. hdr_max must bound the header's packed
// size after its lengths are filled in (pack the header once with the
// largest values to get it). Errors: FB_ENOMEM. Release with nng_msg_free
// if the message is not sent.
int psw_msg_begin(nng_msg **out, size_t hdr_max, size_t payload_cap,
    uint8_t **payload);

// psw_msg_reuse is psw_msg_begin on a message the caller already owns (a
// request being answered), so that a reply as large as its request costs
// no allocation and no zeroing: m is resized within its capacity and its
// old bytes are garbage. The signing trailer's room is reserved only when
// the capacity has it (signing appends it otherwise). Errors: FB_ENOSPC
// when m's capacity is too small (m is unchanged; use psw_msg_begin).
int psw_msg_reuse(nng_msg *m, size_t hdr_max, size_t payload_cap,
    uint8_t **payload);

// psw_msg_finish packs hdr (a Pswire__Header) just before the payload,
// writes the frame header in front of it, and trims the message to
// 16 + packed + payload_len bytes. Errors: FB_ENOSPC if the packed header
// exceeds hdr_max or payload_len exceeds the reserved capacity.
int psw_msg_finish(nng_msg *m, uint8_t method, uint16_t flags,
    const ProtobufCMessage *hdr, size_t hdr_max, size_t payload_len);

// psw_msg_parse validates m's body as a frame (see psw_frame_parse).
int psw_msg_parse(nng_msg *m, struct psw_frame *f, const char **why);

// psw_reply_open validates a reply message: frame, REPLY flag, method,
// Header unpack, request id. On FB_OK or FB_EREMOTE, *hdr receives the
// unpacked Header (a Pswire__Header *; release it with
// pswire__header__free_unpacked) and *f the frame (borrowing rep's body).
// FB_EREMOTE means the peer answered a non-OK status (hdr->status,
// hdr->error). FB_EPROTO (with *why) means the reply is malformed; then
// *hdr is not set.
// With auth set, the reply must also pass psw_auth_check_reply (answering
// the request whose counter was reply_to, from the scheduler for methods
// 1..15 and from a server otherwise), else FB_EAUTH; a refusal that the
// peer itself signalled (UNAUTHENTICATED) comes back as FB_EREMOTE. Under
// TLS, with auth or without, a connection whose certificate names a
// member must name one of that role (psw_tls_check_sender), else FB_EAUTH.
int psw_reply_open(struct psw_auth *auth, nng_msg *rep, uint8_t method,
    uint64_t request_id, uint64_t reply_to, struct psw_frame *f,
    ProtobufCMessage **hdr, const char **why);

// psw_call signs req with auth (may be NULL), sends it on ctx (taking
// ownership of req, also on failure); when req goes to the scheduler and
// auth does not know the job run yet, a Stats call on ctx learns it first
// (a refusal that names another run makes auth forget it, so the next
// call learns the new one);
// waits up to timeout_ms for the reply, and opens it with psw_reply_open.
// On FB_OK/FB_EREMOTE *rep is the reply (free with nng_msg_free after the
// Header). Errors: FB_ETIMEDOUT, FB_ETRANSPORT, FB_EPROTO, FB_EREMOTE.
// Blocks the calling thread; aio must be idle and have no callback.
int psw_call(struct psw_auth *auth, nng_ctx ctx, nng_aio *aio, nng_msg *req,
    uint8_t method, uint64_t request_id, int timeout_ms, nng_msg **rep,
    struct psw_frame *f, ProtobufCMessage **hdr, const char **why);

// ---- the client end of an rpc (call.c) ------------------------------------
//
// psw_req_open opens a REQ socket that never re-sends a request (pushes are
// not idempotent), dials url without blocking (nng reconnects in the
// background), and opens one context and one aio without a callback for
// psw_call. max_msg caps the size of a reply (0: nng's default);
// reconn_min_ms and reconn_max_ms set the reconnect back-off (0: nng's
// default). On FB_OK the caller owns *sock, *ctx and *aio and releases
// them with nng_aio_free(*aio) and nng_close(*sock). Errors:
// FB_ETRANSPORT (nothing is left open), FB_EINVAL (url does not fit tls:
// psw_tls_url_why says why). tls (NULL: plain tcp) is the process's TLS
// state: with it the socket dials tls+tcp:// and presents its certificate.
int psw_req_open(const struct psw_tls *tls, const char *url, size_t max_msg,
    int reconn_min_ms, int reconn_max_ms, nng_socket *sock, nng_ctx *ctx,
    nng_aio **aio);

// psw_req_open_watched is psw_req_open with cb(pipe, event, arg)
// registered for NNG_PIPE_EV_ADD_POST and NNG_PIPE_EV_REM_POST before the
// socket dials, so that no connection goes unseen (one registered after
// the dial can miss a connection that came up in between).
int psw_req_open_watched(const struct psw_tls *tls, const char *url,
    size_t max_msg, int reconn_min_ms, int reconn_max_ms, nng_pipe_cb cb,
    void *arg, nng_socket *sock, nng_ctx *ctx, nng_aio **aio);

// ---- mutual TLS (tls.c) ---------------------------------------------------
//
// With --tls-cert, --tls-key and --tls-ca every connection a process dials
// or accepts is tls+tcp://, and both ends must present a certificate
// signed by the job's CA (docs/security.md). struct psw_tls holds the two
// nng TLS configurations; NULL wherever TLS is off.

// psw_tls_open loads our certificate (PEM, chain allowed), its unencrypted
// private key and the CA certificate(s) from the three files. All three
// empty or NULL: TLS off, *out = NULL and FB_OK. Errors (a one-line reason
// naming the flag and file in why): FB_EINVAL (one or two of three given,
// unreadable, not PEM, key not usable), FB_ENOMEM.
int psw_tls_open(const char *cert, const char *key, const char *ca,
    struct psw_tls **out, char *why, size_t n);

// The longest certificate name psw_tls_peer reports, NUL included.
#define PSW_TLS_NAME_MAX 64

// psw_tls_peer finds who the peer of pipe p is from its certificate: the
// subject CN, verified against the job's CA during the handshake, is
// written into name (size n) and read as a member: "ferry-trainer-R",
// "ferry-server-I" (or "ferry-server": a server whose index the
// scheduler assigns), "ferry-scheduler", "ferry-operator". Errors:
// FB_EAUTH (no verified certificate on p, or a CN that names no member:
// *who is PSW_ROLE_NONE, name holds the CN or "").
int psw_tls_peer(nng_pipe p, struct psw_ident *who, char *name, size_t n);

// psw_tls_check_sender checks that message m (a reply) came over a
// connection whose certificate, if it names a member (psw_tls_peer), is
// of role want_role. Plain tcp pipes and certificates naming no member
// pass (and every message, at no cost, in a process that never opened
// TLS). Errors: FB_EAUTH with *why set.
int psw_tls_check_sender(nng_msg *m, int want_role, const char **why);

// psw_tls_close frees t (NULL: no-op) once no dialer or listener made
// with it is still open (nng holds its own reference while they are).
void psw_tls_close(struct psw_tls *t);

// psw_tls_url writes into out (size n) the URL to use for url under t:
// with TLS, tcp://, tcp4:// and tcp6:// become tls+tcp://...; tls+tcp://
// stays. Errors: FB_EINVAL (tls+tcp:// without TLS, another scheme with
// TLS, or out too small; psw_tls_url_why says which in words).
int psw_tls_url(const struct psw_tls *t, const char *url, char *out, size_t n);

// psw_tls_url_why returns a static sentence saying why psw_tls_url
// refused url.
const char *psw_tls_url_why(const struct psw_tls *t, const char *url);

// psw_tls_dial dials url (mapped by psw_tls_url) on s without blocking,
// with t's client configuration. Errors: FB_EINVAL (url), FB_ETRANSPORT.
int psw_tls_dial(const struct psw_tls *t, nng_socket s, const char *url);

// psw_tls_listen listens on url (mapped by psw_tls_url) on s with t's
// server configuration and a receive cap of max_msg (0: nng's), and writes
// the URL it is bound to into bound (size n; a tcp port 0 replaced by the
// port chosen). Logs and returns FB_EINVAL (url) or FB_ETRANSPORT.
int psw_tls_listen(const struct psw_tls *t, nng_socket s, const char *url,
    size_t max_msg, nng_listener *l, char *bound, size_t n);

// PSW_ANSWER_MARGIN_MS: how much longer than the deadline_ms it sends a
// caller of a peer that parks calls (the scheduler's GetPlacement) waits
// for the answer. The peer answers an expired call DEADLINE_EXCEEDED, so
// the answer arrives before the caller gives up and is never still in
// flight when the caller moves on or closes the socket: nng 1.5.2 can hang
// for good closing a socket while a reply arrives (nanomsg/nng#1543: the
// transport's receive, stopped between a message's header and body, never
// completes the protocol's, and the reaper waits on it for ever).
#define PSW_ANSWER_MARGIN_MS 500

// psw_call_header signs (with auth, may be NULL) and sends a request made
// of hdr alone (a Pswire__Header with
// no payload) and waits for its reply, as psw_call. On FB_OK or FB_EREMOTE
// *rhdr is the reply's unpacked Header (release it with
// pswire__header__free_unpacked); the reply message itself is already
// freed. Errors as psw_call, plus FB_ENOMEM and FB_ENOSPC (the header is
// over PSW_MAX_HEADER); *why always points to a static or borrowed text.
// Blocks the calling thread; aio must be idle and have no callback.
int psw_call_header(struct psw_auth *auth, nng_ctx ctx, nng_aio *aio,
    const ProtobufCMessage *hdr, uint8_t method, uint64_t request_id,
    int timeout_ms, ProtobufCMessage **rhdr, const char **why);

// ---- who sent a message: signed frames (auth.c) ---------------------------
//
// With a per-job secret (--secret-file), every request and reply carries a
// PSW_AUTH_TRAILER-byte trailer after its payload and the SIGNED frame
// flag: the sender's identity, the receiver's (a request's), a channel, a
// counter (wall-clock nanoseconds), the counter of the request a reply
// answers, the job run, and a GMAC-AES256 tag over the frame header, the
// protobuf Header, the payload and those fields (docs/protocol.md,
// docs/security.md). Without a secret, psw_auth is NULL everywhere and
// every function below is a no-op that accepts.

// A member's role, as its identity names it ("trainer-3", "server-1",
// "scheduler", "operator").
enum psw_role {
	PSW_ROLE_NONE = 0, // unauthenticated (auth off)
	PSW_ROLE_TRAINER,
	PSW_ROLE_SERVER,
	PSW_ROLE_SCHEDULER,
	PSW_ROLE_OPERATOR,
};
// The id of a server that has not registered yet.
#define PSW_ID_UNASSIGNED UINT32_MAX

struct psw_ident {
	int      role; // enum psw_role
	uint32_t id;   // trainer rank or server index; 0 for the others
};

struct psw_auth;

// psw_auth_open reads the job's key from secret_file (at least 16 bytes;
// a trailing newline is dropped) and returns signing state for a member
// whose identity is (role, id). Errors, with a one-line reason in why
// (size n): FB_EINVAL (unreadable or short file), FB_ENOMEM.
int psw_auth_open(const char *secret_file, int role, uint32_t id,
    struct psw_auth **out, char *why, size_t n);

// psw_auth_close frees a (NULL: no-op). No call may be using it.
void psw_auth_close(struct psw_auth *a);

// psw_auth_set_self changes the identity a signs with (a server learns its
// index when it registers). Thread-safe.
void psw_auth_set_self(struct psw_auth *a, int role, uint32_t id);

// psw_auth_channel names the stream of requests sent on ctx: counters are
// checked per (sender, channel), so requests on different sockets may
// arrive in any order while each socket's stay strictly ordered.
uint64_t psw_auth_channel(const struct psw_auth *a, nng_ctx ctx);

// psw_auth_set_peer names the receiver of the requests a signs for
// context ctx: (PSW_ROLE_SERVER, index) for a server's slot. Call it when
// the context is opened, before its first request; a context never named
// sends to the scheduler for methods below PSWIRE__METHOD__PULL (and for
// an operator's calls), else to no server (every server refuses it).
// No-op with a NULL a. Errors: FB_EINVAL (ctx not open), FB_ENOMEM.
int psw_auth_set_peer(struct psw_auth *a, nng_ctx ctx, int role, uint32_t id);

// psw_auth_receiver returns whom a request of method sent on ctx is
// signed for (psw_auth_set_peer, else the default above); (0, 0) with a
// NULL a.
struct psw_ident psw_auth_receiver(struct psw_auth *a, nng_ctx ctx,
    int method);

// psw_auth_set_run sets the job run a signs with and accepts (the
// scheduler draws it; a member learns it from the first scheduler reply
// it accepts, psw_auth_check_reply). Thread-safe; no-op with a NULL a.
void psw_auth_set_run(struct psw_auth *a, uint64_t run);

// psw_auth_run returns the job run a signs with (0: not known yet).
uint64_t psw_auth_run(const struct psw_auth *a);

// psw_auth_set_window sets how far a request's counter may be from the
// receiver's wall clock, either way (default 120000 ms; 0: no bound).
void psw_auth_set_window(struct psw_auth *a, uint32_t window_ms);

// psw_auth_set_floor refuses every request of who whose counter is not
// above counter (a floor loaded from disk at start). Errors: FB_ENOMEM.
int psw_auth_set_floor(struct psw_auth *a, struct psw_ident who,
    uint64_t counter);

// A hook told of each request counter a accepts, before the caller acts
// on it, with a's table lock held (keep it short). Non-zero refuses the
// request ("cannot record the sender's counter").
typedef int (
    *psw_auth_accept_fn)(void *arg, struct psw_ident who, uint64_t counter);

// psw_auth_on_accept sets a's hook (fn NULL: none).
void psw_auth_on_accept(struct psw_auth *a, psw_auth_accept_fn fn, void *arg);

// psw_auth_sign appends the trailer to m (a finished message, see
// psw_msg_finish) and sets the SIGNED flag. reply_to is 0 for a request,
// else the counter of the request answered; *counter (may be NULL)
// receives the counter used. A request is signed for the receiver named
// for the context whose psw_auth_channel is channel (psw_auth_set_peer).
// No-op with a NULL a. Errors: FB_ENOMEM.
int psw_auth_sign(struct psw_auth *a, nng_msg *m, uint64_t channel,
    uint64_t reply_to, uint64_t *counter);

// psw_auth_sign_to is psw_auth_sign for the receiver to, named here.
int psw_auth_sign_to(struct psw_auth *a, nng_msg *m, uint64_t channel,
    struct psw_ident to, uint64_t reply_to, uint64_t *counter);

// psw_auth_check_request checks the request frame f (parsed from its
// message): signed, MAC right, a request (not a reply), for this
// receiver (its role and slot, psw_auth_set_self) and this run (a Stats
// with run 0 too at the scheduler), its counter within the window of our
// clock, and its (sender, channel) counter above the last accepted one and the
// sender's floor, which it then becomes (after the accept hook took it).
// *who, *channel and *counter receive the trailer's fields. With a NULL
// a: FB_OK, *who is PSW_ROLE_NONE. Errors: FB_EAUTH with *why set
// (nothing is recorded).
int psw_auth_check_request(struct psw_auth *a, const struct psw_frame *f,
    struct psw_ident *who, uint64_t *channel, uint64_t *counter,
    const char **why);

// psw_auth_reason names the reason *why of a refusal by
// psw_auth_check_request, for a metric's label: "unsigned",
// "bad_signature", "reply_as_request", "wrong_receiver", "wrong_run",
// "stale", "future", "replay", "internal"; any other text (the caller's
// own checks): "identity".
const char *psw_auth_reason(const char *why);

// psw_auth_check_reply checks the reply frame f: signed, MAC right, an
// answer to the request whose counter was reply_to, from a sender of role
// want_role (a Snapshot or Stats reply also from the scheduler: it answers an
// operator's Snapshot of the job). A scheduler's reply that passes sets
// a's run to the one it was signed with. Errors: FB_EAUTH with *why set.
int psw_auth_check_reply(struct psw_auth *a, const struct psw_frame *f,
    uint64_t reply_to, int want_role, const char **why);

// psw_auth_refused returns how many messages a refused (a metric).
uint64_t psw_auth_refused(const struct psw_auth *a);

// psw_ident_format writes who as "trainer-3", "server-1", "scheduler",
// "operator" or "anyone" into buf (size n) and returns buf.
const char *psw_ident_format(struct psw_ident who, char *buf, size_t n);

#endif // PSW_PSW_H
