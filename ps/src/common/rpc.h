// rpc.h — the request loop shared by the scheduler and server roles.
//
// DESIGN. One nng REP socket with N contexts; each context is a small aio
// state machine (RECV -> handle -> SEND -> RECV), as nng's demo/async
// server. A handler runs on an nng callback thread and must not block: it
// either replies at once (ps__call_reply*) or parks the call (keeps the
// pointer and returns) and replies later from any thread. Until its reply
// is sent a parked call's context receives nothing more, so N bounds the
// number of requests in flight.
//
// LIMITS. A connection (an nng pipe) may hold at most a quarter of the
// contexts (at least 2) in calls not yet answered or whose answer is still
// being sent, and at most conn_bytes of their requests and answers; all
// the connections of one host (its IP address) at most three quarters of
// the contexts, so that a peer opening many connections still leaves a
// quarter to every other host (three quarters, not less: a local job
// runs every trainer on 127.0.0.1); all connections together at most
// total_bytes. A request over a limit is
// answered RESOURCE_EXHAUSTED before any handler sees it, so one peer that
// parks calls or never reads its answers cannot take the contexts or the
// memory the others need. When a connection closes, the role's pipe_gone
// hook answers the calls it parked, which frees their contexts. The counts
// are kept as calls are taken and released (rpclimits.h), so a check costs
// the same however many contexts there are.
//
// METRICS. Every request is counted here, the one place all of them pass:
// by method when answered (ferry_rpc_requests_total), by method and status
// when the answer is not OK (ferry_rpc_errors_total), bytes in and out,
// and the time from receipt to reply (parking included) per method. The
// series are registered at open and updated with relaxed atomics.
#ifndef PS_RPC_H
#define PS_RPC_H

#include <nng/nng.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ferry.pb-c.h"
#include "obs/obs.h"
#include "psw/psw.h"

struct ps_rpc;

// One request being served. Owned by the rpc; valid until replied.
struct ps_call {
	struct ps_rpc   *rpc;
	nng_ctx          ctx;
	nng_aio         *aio;
	// Atomic (seq_cst) although one thread at a time owns the call: nng
	// hands it between threads inside its own uninstrumented locks, and
	// this store before each hand-off and load after it is the edge
	// ThreadSanitizer can see.
	_Atomic int      state;
	_Atomic unsigned steps; // callbacks finished (the same edge at close)
	nng_msg         *req;   // the request message (freed on reply)
	struct psw_frame frame; // borrowed from req
	Pswire__Header  *hdr;   // unpacked; freed on reply
	uint64_t         deadline;     // absolute fb_clock_ms(); 0 = none
	struct ps_call  *next;         // for handlers' park lists
	uint64_t         park_version; // for handlers' use while parked
	uint64_t         t0_ns;        // fb_clock_ns() at receipt
	int              mix;          // method's metrics index
	// Who sent it: the signed identity, or under TLS alone the one its
	// connection's certificate names (PSW_ROLE_NONE: neither), and the
	// channel and counter its signature carried (the reply echoes them).
	struct psw_ident peer;
	uint64_t         chan, ctr;
	// LIMITS accounting (rpclimits.c: written under its lock; the pipe is
	// read by other threads, ps__call_list_drop_pipe): the id of the
	// connection this call holds bytes for (0: none), how many, the host
	// it came from (0: none, or not a network peer) and, under TLS, the
	// member its certificate names (0: none, or a shared certificate).
	_Atomic uint32_t pipe;
	_Atomic size_t   held;
	_Atomic uint64_t host;
	_Atomic uint64_t member;
	// The host and member of the connection this call came on (0: none),
	// found once per connection (rpclimits.h) and set before the handler
	// runs.
	uint64_t         host_key, member_key;
};

typedef void (*ps_rpc_handler)(void *arg, struct ps_call *call);

// ps__rpc_open listens on url with ncontexts contexts and starts serving
// (with tls, borrowed, may be NULL: on tls+tcp://, see psw_tls_listen);
// handler(arg, call) is called for every well-formed request (frames that
// cannot be parsed get an INVALID_ARGUMENT reply here, with the reason).
// With auth (borrowed, may be NULL) every request must pass
// psw_auth_check_request, else it is answered UNAUTHENTICATED here and
// counted (ferry_rpc_unauthenticated_total), and every reply is signed.
// max_msg caps the receive size. The request metrics (METRICS above) are
// registered in reg, which must outlive the rpc. *out is released with
// ps__rpc_close. Errors: FB_ENOMEM, FB_ETRANSPORT (cannot listen),
// FB_EINVAL (url does not fit tls).
int ps__rpc_open(struct psw_tls *tls, const char *url, int ncontexts,
    size_t max_msg, struct psw_auth *auth, ps_rpc_handler handler, void *arg,
    struct obs_registry *reg, struct ps_rpc **out);

// ps__host_key (identity.c) names the host at the other end of pipe: its IPv4
// or IPv6 address folded into 64 bits (never 0), or 0 when the pipe has no IP
// peer (ipc, inproc). With text, also writes the address there ("?"
// when it has none).
uint64_t ps__host_key(nng_pipe pipe, char *text, size_t n);

// ps__open_auth opens the signing state of a role from secret_file
// (NULL: *out = NULL, authentication off) with the freshness window
// window_ms (psw_auth_set_window; 0: no bound), logging why it cannot.
// Errors: FB_EINVAL, FB_ENOMEM.
int ps__open_auth(const char *secret_file, int role, uint32_t id,
    uint32_t window_ms, struct psw_auth **out);

// ps__open_tls opens the mutual TLS state from the three PEM files (all
// NULL or empty: *out = NULL, plain tcp), logging why it cannot.
// Errors: FB_EINVAL, FB_ENOMEM.
int ps__open_tls(const char *cert, const char *key, const char *ca,
    struct psw_tls **out);

// ps__call_cert_check checks, in a job with both TLS and a secret, that
// the identity c's request was signed as (c->peer) is the one the
// certificate of c's connection names (identity.c); a server signed
// without an index gets the certificate's in c->peer. Errors: FB_EAUTH
// with *why set (static per thread, valid until the next call).
int ps__call_cert_check(struct ps_call *c, const char **why);

// ps__call_cert_ident sets c->peer, in a job with TLS and no secret, to
// the member the certificate of c's connection names (identity.c);
// PSW_ROLE_NONE when it names none (a shared certificate: membership
// only).
void ps__call_cert_ident(struct ps_call *c);

// ps__rpc_grow raises the contexts to ncontexts (at most 65536; never
// lowers them), opening and starting the new ones while the others serve:
// a role that learns how many peers may park calls at once (a sync
// server, its trainers) makes room for them. FB_ENOMEM leaves those that
// could be opened. Not concurrently with itself or ps__rpc_close.
int ps__rpc_grow(struct ps_rpc *rpc, int ncontexts);

// ps__rpc_contexts returns how many contexts rpc serves with.
int ps__rpc_contexts(const struct ps_rpc *rpc);

// ps__rpc_auth_on tells whether requests are authenticated (a secret or
// TLS): the handlers' role checks apply only then.
int ps__rpc_auth_on(const struct ps_rpc *rpc);

// ps__rpc_quarantine refuses, from now on and before any handler, every
// request of the n trainer ranks of ranks (quarantined: issue 31,
// docs/security.md): PERMISSION_DENIED "trainer rank R is quarantined",
// counted as ferry_rpc_refused_total{reason="quarantined"}. A request is
// a rank's by its identity (signed as, or over the certificate of,
// trainer R); without identities by the rank it claims on the requests
// only trainers send (refusals.h). Idempotent; never undone. Any thread.
void ps__rpc_quarantine(struct ps_rpc *rpc, const uint32_t *ranks, size_t n);

// ps__rpc_set_limits sets the LIMITS above: conn_bytes per connection and
// total_bytes over all (0: no total cap), and pipe_gone(arg, pipe id),
// called on an nng thread when a connection closes so that the role can
// answer the calls that connection parked (NULL: none). Call right after
// ps__rpc_open; until then a connection may hold 2 * max_msg + 1 MiB.
void ps__rpc_set_limits(struct ps_rpc *rpc, size_t conn_bytes,
    size_t total_bytes, void (*pipe_gone)(void *arg, uint32_t pipe));

// ps__rpc_pipe_held returns the bytes the other calls of c's connection
// hold (requests parked, answers being sent), for handlers that bound
// what one peer may ask for (Probe).
size_t ps__rpc_pipe_held(const struct ps_call *c);

// ps__call_list_drop_pipe answers CANCELLED ("connection closed") to every
// call on the list (linked by `next`, a role's parked calls) that came on
// connection pipe, unlinks them and returns how many. The role holds the
// lock that guards its list.
int ps__call_list_drop_pipe(struct ps_call **list, uint32_t pipe);

// ps__rpc_url writes the bound URL (with the real port if url had port 0).
const char *ps__rpc_url(const struct ps_rpc *rpc);

// ps__rpc_close stops serving, waits for callbacks to finish and frees.
void ps__rpc_close(struct ps_rpc *rpc);

// ps__call_acts_as tells whether c's sender may act for (role, id), an
// enum psw_role and a rank or server index: always when the sender has no
// identity (authentication off, or TLS alone with a certificate that
// names no member); else when it is that member, or an operator and
// operator_ok. A trainer signed without a rank acts for no rank. Under TLS
// alone an unindexed server certificate
// ("ferry-server") acts as any server slot. When not, it answers c
// PERMISSION_DENIED (naming both), counted, and returns 0.
int ps__call_acts_as(struct ps_call *c, int role, uint32_t id,
    int operator_ok);

// ps__call_may_join tells whether c's sender may register as a trainer
// with any_rank (elastic jobs): a sender without identity (as above), or
// a trainer, signed without a rank (PSW_ID_UNASSIGNED: the only request
// such a signer may make) or with one. *rank is the rank its signature or
// its connection's certificate names (PSW_ID_UNASSIGNED: none, any free
// rank). When not, it answers c PERMISSION_DENIED and returns 0.
int ps__call_may_join(struct ps_call *c, uint32_t *rank);

// ps__call_cert_rank (identity.c) returns the rank the certificate of c's
// connection names (ferry-trainer-<rank>), or PSW_ID_UNASSIGNED when it
// names none (no TLS, or another member's).
uint32_t ps__call_cert_rank(struct ps_call *c);

// ps__role_of maps a wire Role (pswire ROLE_*) to an enum psw_role.
int      ps__role_of(int wire_role);
// ps__call_pipe returns the id of the connection (nng pipe) call came in
// on, 0 when unknown (its request was already taken). Valid until replied.
uint32_t ps__call_pipe(const struct ps_call *call);

// ps__rpc_on_pipe_closed makes nng call gone(arg, pipe_id) on one of its
// threads each time a connection to this socket closes (a peer that exits
// or is killed closes its connections at once). Only one watcher; call it
// once, after open. gone may take locks but must not block for long; it
// is not called once ps__rpc_close has returned.
void ps__rpc_on_pipe_closed(struct ps_rpc *rpc,
    void (*gone)(void *arg, uint32_t pipe_id), void *arg);

// ps__call_take_req detaches the request message from call and returns it
// (the caller owns it: reuse it for the reply or free it). call->frame
// still holds its values, but its pointers must no longer be used.
nng_msg *ps__call_take_req(struct ps_call *call);

// ps__call_reply_err answers call with a status and message (printf-style).
void ps__call_reply_err(struct ps_call *call, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// ps__call_reply answers call with header h (request id, status OK filled
// in here) and no payload.
void ps__call_reply(struct ps_call *call, Pswire__Header *h);

// ps__call_reply_stats answers call with an INFO-style text (StatsReply).
void ps__call_reply_stats(struct ps_call *call, const char *text);

// ps__call_reply_msg sends a prepared reply (built with psw_msg_begin/
// psw_msg_finish; its request_id must be the call's). Takes ownership of m.
void ps__call_reply_msg(struct ps_call *call, nng_msg *m);

#endif // PS_RPC_H
