// peers.h — whom the requests sent on each nng context go to: the table
// behind psw_auth_set_peer (auth.c), keyed by the context's id.
#ifndef PSW_PEERS_H
#define PSW_PEERS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "psw/psw.h"

struct psw__peer;

struct psw__peers {
	pthread_mutex_t   mu;   // guards the rest
	struct psw__peer *slot; // open addressing on the context id
	size_t            n, cap;
};

// psw__peers_init makes p an empty table.
void psw__peers_init(struct psw__peers *p);

// psw__peers_free releases p's memory.
void psw__peers_free(struct psw__peers *p);

// psw__peers_set names to as the receiver of context ctx (an nng_ctx_id,
// not 0), replacing what it named before. Errors: FB_ENOMEM.
int psw__peers_set(struct psw__peers *p, uint32_t ctx, struct psw_ident to);

// psw__peers_get writes the receiver named for ctx into *to. Errors:
// FB_ENOTFOUND (none named; *to unchanged). No allocation.
int psw__peers_get(struct psw__peers *p, uint32_t ctx, struct psw_ident *to);

#endif // PSW_PEERS_H
