// identity.c — binding a request's signed identity to its connection's
// certificate when a job runs with both mutual TLS and a secret.
//
// A signed request names its sender in its trailer (auth.c), but every
// member holds the same key, so a member could sign as another. Under
// TLS each connection also carries the certificate its peer proved it
// holds during the handshake (tls_engine.c reads its subject CN: e.g.
// "ferry-trainer-3"). Here the two must agree: the trailer's role must be
// the certificate's, and a trainer's rank, or a server's index when the
// certificate names one, must be the certificate's. A request whose
// trailer claims anyone else is refused before any handler reads it, so
// the role checks of docs/security.md (a rank pushes only for itself,
// only servers register as servers, maps only from the scheduler) hold
// for identities that come from certificates, not from the shared key.
// A certificate whose CN names no member (one shared by every pod, e.g.
// "ferry-member") proves membership only: its trailer is taken as is, as
// without TLS (docs/security.md says what that trusts).
#include <stdio.h>

#include <nng/nng.h>

#include "fb/fb.h"
#include "psw/psw.h"
#include "rpc.h"

int
ps__call_cert_check(const struct ps_call *c, const char **why)
{
	static _Thread_local char msg[192];
	struct psw_ident          cert;
	char                      cn[PSW_TLS_NAME_MAX], claim[48];

	if (psw_tls_peer(nng_msg_get_pipe(c->req), &cert, cn, sizeof(cn)) !=
	    FB_OK) {
		return FB_OK; // a shared certificate: membership only
	}
	int same = cert.role == c->peer.role &&
	    (cert.role != PSW_ROLE_TRAINER || cert.id == c->peer.id) &&
	    (cert.role != PSW_ROLE_SERVER || cert.id == PSW_ID_UNASSIGNED ||
	        c->peer.id == PSW_ID_UNASSIGNED || cert.id == c->peer.id);
	if (!same) {
		snprintf(msg, sizeof(msg),
		    "signed as %s over a connection whose certificate is %s",
		    psw_ident_format(c->peer, claim, sizeof(claim)), cn);
		*why = msg;
		return FB_EAUTH;
	}
	return FB_OK;
}
