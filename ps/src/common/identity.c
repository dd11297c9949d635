// identity.c — who a request comes from when a job runs with mutual TLS:
// the identity its connection's certificate names, alone or bound to the
// identity a signed request claims.
//
// Under TLS each connection carries the certificate its peer proved it
// holds during the handshake (tls_engine.c reads its subject CN: e.g.
// "ferry-trainer-3"). Without a secret that certificate is the request's
// identity (ps__call_cert_ident): the handlers' role checks (rpc.h
// ps__call_acts_as, docs/security.md) then compare the rank, server index
// or role a request names with the certificate's, so trainer-1's
// certificate cannot push for rank 0 nor register a server. With a
// secret a signed request names its sender in its trailer (auth.c), but
// every member holds the same key, so a member could sign as another;
// here the two must agree (ps__call_cert_check): the trailer's role must
// be the certificate's, and a trainer's rank, or a server's index when
// the certificate names one, must be the certificate's (a server not yet
// registered, signing without an index, takes the certificate's; a
// trainer not yet given a rank signs without one on its any_rank
// Register, and gets the certificate's). A
// request whose trailer claims anyone else is refused before any handler
// reads it.
// A certificate whose CN names no member (one shared by every pod, e.g.
// "ferry-member") proves membership only: without a secret the request
// has no identity and the role checks pass, as without TLS; with one its
// trailer is taken as is (docs/security.md says what that trusts).
//
// Without a certificate, a peer is its host: ps__host_key names it, for
// the per-host limits (rpc.c) and the refusal counts (refusals.c).
#include <arpa/inet.h>
#include <stdio.h>

#include <nng/nng.h>

#include "fb/fb.h"
#include "psw/psw.h"
#include "rpc.h"

int
ps__call_cert_check(struct ps_call *c, const char **why)
{
	static _Thread_local char msg[192];
	struct psw_ident          cert;
	char                      cn[PSW_TLS_NAME_MAX], claim[48];

	if (psw_tls_peer(nng_msg_get_pipe(c->req), &cert, cn, sizeof(cn)) !=
	    FB_OK) {
		return FB_OK; // a shared certificate: membership only
	}
	// A trainer not yet given a rank signs without one, on its
	// Register (any_rank) only: the handler gives it the certificate's.
	int joining = c->peer.role == PSW_ROLE_TRAINER &&
	    c->peer.id == PSW_ID_UNASSIGNED &&
	    c->frame.method == PSWIRE__METHOD__REGISTER;
	int same = cert.role == c->peer.role &&
	    (cert.role != PSW_ROLE_TRAINER || cert.id == c->peer.id ||
	        joining) &&
	    (cert.role != PSW_ROLE_SERVER || cert.id == PSW_ID_UNASSIGNED ||
	        c->peer.id == PSW_ID_UNASSIGNED || cert.id == c->peer.id);
	if (!same) {
		snprintf(msg, sizeof(msg),
		    "signed as %s over a connection whose certificate is %s",
		    psw_ident_format(c->peer, claim, sizeof(claim)), cn);
		*why = msg;
		return FB_EAUTH;
	}
	if (cert.role == PSW_ROLE_SERVER && c->peer.id == PSW_ID_UNASSIGNED) {
		// A server not yet registered signs without an index: its
		// certificate's, if it names one, is the slot it may take.
		c->peer.id = cert.id;
	}
	return FB_OK;
}

uint32_t
ps__call_cert_rank(struct ps_call *c)
{
	struct psw_ident cert;
	char             cn[PSW_TLS_NAME_MAX];

	if (c->req == NULL ||
	    psw_tls_peer(nng_msg_get_pipe(c->req), &cert, cn, sizeof(cn)) !=
	        FB_OK ||
	    cert.role != PSW_ROLE_TRAINER) {
		return PSW_ID_UNASSIGNED;
	}
	return cert.id;
}

void
ps__call_cert_ident(struct ps_call *c)
{
	char cn[PSW_TLS_NAME_MAX];

	if (psw_tls_peer(nng_msg_get_pipe(c->req), &c->peer, cn, sizeof(cn)) !=
	    FB_OK) {
		c->peer.role = PSW_ROLE_NONE; // a shared certificate
		c->peer.id   = 0;
	}
}

uint64_t
ps__host_key(nng_pipe pipe, char *text, size_t n)
{
	nng_sockaddr sa;
	uint64_t     k = 0;
	if (text != NULL && n > 0) {
		snprintf(text, n, "?");
	}
	if (nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &sa) != 0) {
		return 0;
	}
	if (sa.s_family == NNG_AF_INET) {
		k = (1ull << 32) | sa.s_in.sa_addr;
		if (text != NULL) {
			inet_ntop(AF_INET, &sa.s_in.sa_addr, text,
			    (socklen_t) n);
		}
	} else if (sa.s_family == NNG_AF_INET6) {
		k = 1469598103934665603ull; // FNV-1a over the 16 bytes
		for (int i = 0; i < 16; i++) {
			k = (k ^ sa.s_in6.sa_addr[i]) * 1099511628211ull;
		}
		k |= 1ull << 63; // never 0, never an IPv4 key
		if (text != NULL) {
			inet_ntop(AF_INET6, sa.s_in6.sa_addr, text,
			    (socklen_t) n);
		}
	}
	return k;
}
