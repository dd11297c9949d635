// tls_impl.h — what tls.c and tls_engine.c share: registering Ferry's
// OpenSSL engine under nng's tls+tcp:// transport.
#ifndef PSW_TLS_IMPL_H
#define PSW_TLS_IMPL_H

#include <stddef.h>

#include <nng/nng.h>

// psw__tls_engine_register makes OpenSSL nng's TLS engine for the rest of
// the process (once; any thread; before the first TLS configuration is
// made, or that one keeps nng's own engine). Returns 0, or -1 when it
// could not (nng's built-in engine then stays).
int psw__tls_engine_register(void);

// psw__tls_engine_peer writes into name (size n) the subject CN of the
// verified certificate the peer of pipe p presented. Returns 0, or -1
// (not a TLS pipe of this engine, no verified certificate, no CN).
int psw__tls_engine_peer(nng_pipe p, char *name, size_t n);

#endif
