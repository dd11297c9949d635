// tls_engine.c — the TLS engine under nng's tls+tcp:// transport: OpenSSL
// in place of the mbed TLS that Debian's libnng 1.5.2 is built with,
// registered once (psw__tls_engine_register) before any TLS configuration
// is made.
//
// Why: mbed TLS 2.28 as Debian builds it encrypts 30-80 times slower than
// OpenSSL on x86-64 with AES-NI (measured: AES-256-GCM 30 ms/MiB and
// ChaCha20-Poly1305 13 ms/MiB in mbed TLS against well under 1 ms/MiB in
// OpenSSL on the same loaded machine), so a 1 MiB push-pull over mbed TLS
// ran at about a quarter of plain tcp's goodput. nng 1.5 lets a program
// register its own engine (<nng/supplemental/tls/engine.h>): nng keeps
// the sockets, buffers and aios, and calls this file to configure, to
// handshake, and to turn plaintext into records and back. Records go to
// and come from nng through nng_tls_engine_send/recv, wrapped here in a
// custom OpenSSL BIO.
//
// The semantics follow nng's own engine: a client verifies its peer by
// default, a server only when told (NNG_TLS_AUTH_MODE_REQUIRED), a
// server name, when set, is sent (SNI) and checked against the peer's
// certificate; TLS 1.2 at least.
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/engine.h>
#include <nng/supplemental/tls/tls.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "psw/psw.h"
#include "tls_impl.h"

// The plaintext per TLS record: with the record's framing it fits nng's
// 16 KiB send ring (NNG_TLS_MAX_SEND_SIZE) whole.
#define RECORD_MAX (16384 - 64)

struct nng_tls_engine_config {
	SSL_CTX *ctx;
	int      server;
	char    *server_name; // NULL: none
};

struct nng_tls_engine_conn {
	SSL *ssl;
	BIO *bio;
	// The subject CN of the certificate the peer presented and that
	// verified ("" until the handshake is done, or when none did).
	char peer[PSW_TLS_NAME_MAX];
};

// The peer name conn_verified last saw on this thread (see
// psw__tls_engine_peer).
static _Thread_local int  seen;
static _Thread_local char seen_peer[PSW_TLS_NAME_MAX];

// ---- the BIO: records to and from nng --------------------------------------

static BIO_METHOD *bio_method;

static int
bio_write(BIO *b, const char *buf, size_t len, size_t *written)
{
	size_t n = len;
	int    rv;

	BIO_clear_retry_flags(b);
	rv = nng_tls_engine_send(BIO_get_data(b), (const uint8_t *) buf, &n);
	if (rv == 0) {
		*written = n;
		return 1;
	}
	if (rv == NNG_EAGAIN) {
		BIO_set_retry_write(b);
	}
	return 0;
}

static int
bio_read(BIO *b, char *buf, size_t len, size_t *got)
{
	size_t n = len;
	int    rv;

	BIO_clear_retry_flags(b);
	rv = nng_tls_engine_recv(BIO_get_data(b), (uint8_t *) buf, &n);
	if (rv == 0 && n > 0) {
		*got = n;
		return 1;
	}
	if (rv == NNG_EAGAIN || (rv == 0 && n == 0)) {
		BIO_set_retry_read(b);
	}
	return 0;
}

static long
bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void) b;
	(void) num;
	(void) ptr;
	// nng sends whatever it is given at once: nothing to flush.
	return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int
bio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

// ---- connections --------------------------------------------------------

// map_err turns the OpenSSL result r of a call on ssl into nng's terms.
static int
map_err(SSL *ssl, int r)
{
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return NNG_EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return NNG_ECLOSED;
	case SSL_ERROR_SSL:
		if (SSL_get_verify_result(ssl) != X509_V_OK) {
			ERR_clear_error();
			return NNG_EPEERAUTH;
		}
		ERR_clear_error();
		return NNG_ECRYPTO;
	default:
		ERR_clear_error();
		return NNG_ECLOSED;
	}
}

static int
conn_init(nng_tls_engine_conn *ec, void *tls, nng_tls_engine_config *cfg)
{
	if ((ec->ssl = SSL_new(cfg->ctx)) == NULL ||
	    (ec->bio = BIO_new(bio_method)) == NULL) {
		SSL_free(ec->ssl);
		ec->ssl = NULL;
		return NNG_ENOMEM;
	}
	BIO_set_data(ec->bio, tls);
	SSL_set_bio(ec->ssl, ec->bio, ec->bio); // the SSL owns the BIO
	if (cfg->server) {
		SSL_set_accept_state(ec->ssl);
	} else {
		SSL_set_connect_state(ec->ssl);
		if (cfg->server_name != NULL &&
		    (!SSL_set_tlsext_host_name(ec->ssl, cfg->server_name) ||
		        !SSL_set1_host(ec->ssl, cfg->server_name))) {
			return NNG_ENOMEM;
		}
	}
	return 0;
}

static void
conn_fini(nng_tls_engine_conn *ec)
{
	SSL_free(ec->ssl);
	ec->ssl = NULL;
}

static void
conn_close(nng_tls_engine_conn *ec)
{
	if (ec->ssl != NULL) {
		(void) SSL_shutdown(ec->ssl);
		ERR_clear_error();
	}
}

static int
conn_handshake(nng_tls_engine_conn *ec)
{
	int   r = SSL_do_handshake(ec->ssl);
	X509 *x;
	if (r != 1) {
		return map_err(ec->ssl, r);
	}
	ec->peer[0] = '\0';
	if ((x = SSL_get0_peer_certificate(ec->ssl)) != NULL &&
	    SSL_get_verify_result(ec->ssl) == X509_V_OK &&
	    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName,
	        ec->peer, (int) sizeof(ec->peer)) < 0) {
		ec->peer[0] = '\0';
	}
	ERR_clear_error();
	return 0;
}

static int
conn_recv(nng_tls_engine_conn *ec, uint8_t *buf, size_t *szp)
{
	size_t n = 0;
	int    r = SSL_read_ex(ec->ssl, buf, *szp, &n);
	if (r != 1) {
		return map_err(ec->ssl, r);
	}
	*szp = n;
	return 0;
}

static int
conn_send(nng_tls_engine_conn *ec, const uint8_t *buf, size_t *szp)
{
	size_t n = 0;
	int    r = SSL_write_ex(ec->ssl, buf, *szp, &n);
	if (r != 1) {
		return map_err(ec->ssl, r);
	}
	*szp = n;
	return 0;
}

static bool
conn_verified(nng_tls_engine_conn *ec)
{
	bool ok = SSL_get0_peer_certificate(ec->ssl) != NULL &&
	    SSL_get_verify_result(ec->ssl) == X509_V_OK;
	// nng asks this on the thread that reads the pipe's
	// NNG_OPT_TLS_VERIFIED, for that pipe's connection, under its lock:
	// the one way to learn which connection a pipe is.
	seen = 1;
	snprintf(seen_peer, sizeof(seen_peer), "%s", ok ? ec->peer : "");
	return ok;
}

// ---- configurations -------------------------------------------------------

// verify_optional accepts any chain (NNG_TLS_AUTH_MODE_OPTIONAL: the
// result is still recorded and read by conn_verified).
static int
verify_optional(int ok, X509_STORE_CTX *x)
{
	(void) ok;
	(void) x;
	return 1;
}

static int
config_auth(nng_tls_engine_config *cfg, nng_tls_auth_mode mode)
{
	switch (mode) {
	case NNG_TLS_AUTH_MODE_NONE:
		SSL_CTX_set_verify(cfg->ctx, SSL_VERIFY_NONE, NULL);
		return 0;
	case NNG_TLS_AUTH_MODE_OPTIONAL:
		SSL_CTX_set_verify(cfg->ctx, SSL_VERIFY_PEER, verify_optional);
		return 0;
	case NNG_TLS_AUTH_MODE_REQUIRED:
		SSL_CTX_set_verify(cfg->ctx,
		    SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
		return 0;
	}
	return NNG_EINVAL;
}

static int
config_init(nng_tls_engine_config *cfg, nng_tls_mode mode)
{
	cfg->server      = mode == NNG_TLS_MODE_SERVER;
	cfg->server_name = NULL;
	cfg->ctx         = SSL_CTX_new(
	            cfg->server ? TLS_server_method() : TLS_client_method());
	if (cfg->ctx == NULL) {
		return NNG_ENOMEM;
	}
	SSL_CTX_set_min_proto_version(cfg->ctx, TLS1_2_VERSION);
	// nng hands back the same bytes after NNG_EAGAIN, not always at the
	// same address; and a large write may go out record by record.
	SSL_CTX_set_mode(cfg->ctx,
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
	        SSL_MODE_ENABLE_PARTIAL_WRITE);
	// nng 1.5.2 sends through a 16 KiB ring, one TCP send at a time: a
	// full 16 KiB record (plus its 22 to 29 bytes of framing) would not
	// fit and would take two sends. Records of RECORD_MAX fit whole (no
	// measurable change on the loaded 2-core machine).
	SSL_CTX_set_max_send_fragment(cfg->ctx, RECORD_MAX);
	return config_auth(cfg,
	    cfg->server ? NNG_TLS_AUTH_MODE_NONE : NNG_TLS_AUTH_MODE_REQUIRED);
}

static void
config_fini(nng_tls_engine_config *cfg)
{
	SSL_CTX_free(cfg->ctx);
	OPENSSL_free(cfg->server_name);
	cfg->ctx         = NULL;
	cfg->server_name = NULL;
}

static int
config_server(nng_tls_engine_config *cfg, const char *name)
{
	char *dup = OPENSSL_strdup(name);
	if (dup == NULL) {
		return NNG_ENOMEM;
	}
	OPENSSL_free(cfg->server_name);
	cfg->server_name = dup;
	return 0;
}

static int
config_ca_chain(nng_tls_engine_config *cfg, const char *certs, const char *crl)
{
	X509_STORE *st = SSL_CTX_get_cert_store(cfg->ctx);
	BIO        *b  = BIO_new_mem_buf(certs, -1);
	X509       *x;
	int         n = 0;

	if (b == NULL) {
		return NNG_ENOMEM;
	}
	while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
		int ok = X509_STORE_add_cert(st, x);
		X509_free(x);
		if (!ok) {
			BIO_free(b);
			ERR_clear_error();
			return NNG_EINVAL;
		}
		n++;
	}
	BIO_free(b);
	ERR_clear_error(); // the end of the PEM blocks
	if (n == 0) {
		return NNG_EINVAL;
	}
	if (crl != NULL && *crl != '\0') {
		X509_CRL *c;
		if ((b = BIO_new_mem_buf(crl, -1)) == NULL) {
			return NNG_ENOMEM;
		}
		while (
		    (c = PEM_read_bio_X509_CRL(b, NULL, NULL, NULL)) != NULL) {
			X509_STORE_add_crl(st, c);
			X509_CRL_free(c);
		}
		BIO_free(b);
		ERR_clear_error();
		X509_STORE_set_flags(st,
		    X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
	}
	return 0;
}

static int
config_own_cert(nng_tls_engine_config *cfg, const char *cert, const char *key,
    const char *pass)
{
	BIO      *b;
	X509     *x;
	EVP_PKEY *pk;
	int       rv = NNG_EINVAL;

	if ((b = BIO_new_mem_buf(cert, -1)) == NULL) {
		return NNG_ENOMEM;
	}
	if ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL &&
	    SSL_CTX_use_certificate(cfg->ctx, x) == 1) {
		X509 *c;
		rv = 0;
		// The rest of the file is the chain to present with it.
		SSL_CTX_clear_chain_certs(cfg->ctx);
		while ((c = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
			if (SSL_CTX_add0_chain_cert(cfg->ctx, c) != 1) {
				X509_free(c);
				rv = NNG_EINVAL;
				break;
			}
		}
	}
	X509_free(x);
	BIO_free(b);
	ERR_clear_error();
	if (rv != 0) {
		return rv;
	}
	if ((b = BIO_new_mem_buf(key, -1)) == NULL) {
		return NNG_ENOMEM;
	}
	pk = PEM_read_bio_PrivateKey(b, NULL, NULL, (void *) pass);
	BIO_free(b);
	if (pk == NULL || SSL_CTX_use_PrivateKey(cfg->ctx, pk) != 1 ||
	    SSL_CTX_check_private_key(cfg->ctx) != 1) {
		rv = NNG_EINVAL; // unreadable, or not the certificate's key
	}
	EVP_PKEY_free(pk);
	ERR_clear_error();
	return rv;
}

static int
config_version(nng_tls_engine_config *cfg, nng_tls_version min,
    nng_tls_version max)
{
	if (min > max || max < NNG_TLS_1_2) {
		return NNG_ENOTSUP; // below 1.2 is not offered
	}
	SSL_CTX_set_min_proto_version(cfg->ctx,
	    min < NNG_TLS_1_2 ? TLS1_2_VERSION : (int) min);
	SSL_CTX_set_max_proto_version(cfg->ctx,
	    max > NNG_TLS_1_3 ? TLS1_3_VERSION : (int) max);
	return 0;
}

static nng_tls_engine_conn_ops conn_ops = {
	.size      = sizeof(nng_tls_engine_conn),
	.init      = conn_init,
	.fini      = conn_fini,
	.close     = conn_close,
	.handshake = conn_handshake,
	.recv      = conn_recv,
	.send      = conn_send,
	.verified  = conn_verified,
};

static nng_tls_engine_config_ops config_ops = {
	.size     = sizeof(nng_tls_engine_config),
	.init     = config_init,
	.fini     = config_fini,
	.server   = config_server,
	.auth     = config_auth,
	.ca_chain = config_ca_chain,
	.own_cert = config_own_cert,
	.version  = config_version,
};

static nng_tls_engine engine = {
	.version     = NNG_TLS_ENGINE_VERSION,
	.config_ops  = &config_ops,
	.conn_ops    = &conn_ops,
	.name        = "openssl",
	.description = "OpenSSL (Ferry's nng TLS engine)",
	.fips_mode   = false,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int            registered;

static void
do_register(void)
{
	nng_tls_config *probe;

	// nng registers its built-in engine when it initialises, which
	// nng_tls_config_alloc triggers: let that happen first, so that it
	// does not replace this engine later.
	if (nng_tls_config_alloc(&probe, NNG_TLS_MODE_CLIENT) == 0) {
		nng_tls_config_free(probe);
	}
	if ((bio_method = BIO_meth_new(
	         BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ferry-nng")) ==
	        NULL ||
	    !BIO_meth_set_write_ex(bio_method, bio_write) ||
	    !BIO_meth_set_read_ex(bio_method, bio_read) ||
	    !BIO_meth_set_ctrl(bio_method, bio_ctrl) ||
	    !BIO_meth_set_create(bio_method, bio_create)) {
		return;
	}
	registered = nng_tls_engine_register(&engine) == 0;
}

int
psw__tls_engine_peer(nng_pipe p, char *name, size_t n)
{
	bool v = false;

	seen = 0;
	if (nng_pipe_get_bool(p, NNG_OPT_TLS_VERIFIED, &v) != 0 || !v ||
	    !seen || seen_peer[0] == '\0') {
		return -1;
	}
	snprintf(name, n, "%s", seen_peer);
	return 0;
}

int
psw__tls_engine_register(void)
{
	pthread_once(&once, do_register);
	return registered ? 0 : -1;
}
