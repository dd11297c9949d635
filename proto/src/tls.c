// tls.c — mutual TLS for every Ferry connection (--tls-cert, --tls-key,
// --tls-ca): the two nng TLS configurations a process uses (one for the
// connections it dials, one for those it accepts), the tcp:// to
// tls+tcp:// mapping of URLs, and the one dial and the one listen that
// apply them.
//
// Both ends present their certificate and both require the peer's, checked
// against the job's CA (NNG_TLS_AUTH_MODE_REQUIRED both ways): a peer
// without a certificate signed by that CA never completes the handshake,
// so no byte of its requests reaches a handler. No server name is set on
// the dialing side: members are named by their certificates (e.g.
// "ferry-server-1"), not by the host names in the URLs they are dialed
// at, so the check is CA membership, not the host name
// (docs/security.md says what that trusts). The records are made by
// OpenSSL through tls_engine.c, not by nng's built-in mbed TLS.
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "fb/fb.h"
#include "psw/psw.h"
#include "tls_impl.h"

// A PEM certificate chain or key larger than this is not one.
#define PEM_MAX (1u << 20)

// Set once any psw_tls_open succeeds in this process: before that no
// connection can be TLS, so psw_tls_check_sender skips the pipe look-up
// on every reply of a plain job.
static atomic_int tls_seen;

struct psw_tls {
	nng_tls_config *dial;   // NNG_TLS_MODE_CLIENT
	nng_tls_config *listen; // NNG_TLS_MODE_SERVER
};

// read_pem reads path whole into a NUL-terminated heap string (*out, to
// fb_free). On failure it writes why, naming flag and path.
static int
read_pem(const char *flag, const char *path, char **out, char *why, size_t n)
{
	FILE  *fp;
	char  *buf;
	size_t len = 0, got;

	if ((fp = fopen(path, "rb")) == NULL) {
		snprintf(why, n, "%s %s: %s", flag, path, strerror(errno));
		return FB_EINVAL;
	}
	if ((buf = fb_alloc(PEM_MAX + 1)) == NULL) {
		fclose(fp);
		snprintf(why, n, "%s %s: out of memory", flag, path);
		return FB_ENOMEM;
	}
	while (len <= PEM_MAX &&
	    (got = fread(buf + len, 1, PEM_MAX + 1 - len, fp)) > 0) {
		len += got;
	}
	int err = ferror(fp);
	fclose(fp);
	if (err || len == 0 || len > PEM_MAX ||
	    memchr(buf, '\0', len) != NULL ||
	    strstr(buf, "-----BEGIN ") == NULL) {
		snprintf(why, n, "%s %s: %s", flag, path,
		    err            ? "read error"
		        : len == 0 ? "empty file"
		        : len > PEM_MAX
		        ? "larger than 1 MiB"
		        : "not a PEM file (no -----BEGIN line)");
		fb_free(buf);
		return FB_EINVAL;
	}
	buf[len] = '\0';
	*out     = buf;
	return FB_OK;
}

// config_open makes one nng TLS configuration of mode with our certificate
// and key (PEM text) and the CA file, requiring the peer's certificate.
static int
config_open(nng_tls_mode mode, const char *cert, const char *key,
    const char *cert_path, const char *key_path, const char *ca_path,
    nng_tls_config **out, char *why, size_t n)
{
	nng_tls_config *c;
	int             rv;

	if ((rv = nng_tls_config_alloc(&c, mode)) != 0) {
		snprintf(why, n, "TLS: %s (is libnng built with TLS?)",
		    nng_strerror(rv));
		return rv == NNG_ENOMEM ? FB_ENOMEM : FB_EINVAL;
	}
	if ((rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED)) !=
	    0) {
		snprintf(why, n, "TLS: cannot require peer certificates: %s",
		    nng_strerror(rv));
	} else if ((rv = nng_tls_config_ca_file(c, ca_path)) != 0) {
		snprintf(why, n,
		    "--tls-ca %s: not a readable PEM CA certificate (%s)",
		    ca_path, nng_strerror(rv));
	} else if ((rv = nng_tls_config_own_cert(c, cert, key, NULL)) != 0) {
		snprintf(why, n,
		    "--tls-cert %s / --tls-key %s: not a PEM certificate "
		    "and its unencrypted private key (%s)",
		    cert_path, key_path, nng_strerror(rv));
	}
	if (rv != 0) {
		nng_tls_config_free(c);
		return FB_EINVAL;
	}
	*out = c;
	return FB_OK;
}

static int
is_set(const char *s)
{
	return s != NULL && *s != '\0';
}

int
psw_tls_open(const char *cert, const char *key, const char *ca,
    struct psw_tls **out, char *why, size_t n)
{
	struct psw_tls *t;
	char           *cert_pem = NULL, *key_pem = NULL;
	int             rv;

	*out = NULL;
	if (!is_set(cert) && !is_set(key) && !is_set(ca)) {
		return FB_OK; // TLS off
	}
	if (!is_set(cert) || !is_set(key) || !is_set(ca)) {
		snprintf(why, n,
		    "TLS needs all three of --tls-cert, --tls-key and "
		    "--tls-ca (missing %s)",
		    !is_set(cert)      ? "--tls-cert"
		        : !is_set(key) ? "--tls-key"
		                       : "--tls-ca");
		return FB_EINVAL;
	}
	if (psw__tls_engine_register() != 0) {
		FB_LOG(FB_LOG_WARN, "tls",
		    "cannot install the OpenSSL engine: TLS runs on nng's "
		    "built-in engine (slower)");
	}
	if ((t = fb_zalloc(sizeof(*t))) == NULL) {
		snprintf(why, n, "TLS: out of memory");
		return FB_ENOMEM;
	}
	if ((rv = read_pem("--tls-cert", cert, &cert_pem, why, n)) != FB_OK ||
	    (rv = read_pem("--tls-key", key, &key_pem, why, n)) != FB_OK ||
	    (rv = config_open(NNG_TLS_MODE_CLIENT, cert_pem, key_pem, cert,
	         key, ca, &t->dial, why, n)) != FB_OK ||
	    (rv = config_open(NNG_TLS_MODE_SERVER, cert_pem, key_pem, cert,
	         key, ca, &t->listen, why, n)) != FB_OK) {
		psw_tls_close(t);
	} else {
		atomic_store_explicit(&tls_seen, 1, memory_order_relaxed);
		*out = t;
	}
	if (key_pem != NULL) {
		// The private key's copy goes; nng keeps its own parsed one.
		memset(key_pem, 0, strlen(key_pem));
	}
	fb_free(key_pem);
	fb_free(cert_pem);
	return rv;
}

void
psw_tls_close(struct psw_tls *t)
{
	if (t == NULL) {
		return;
	}
	if (t->dial != NULL) {
		nng_tls_config_free(t->dial);
	}
	if (t->listen != NULL) {
		nng_tls_config_free(t->listen);
	}
	fb_free(t);
}

int
psw_tls_url(const struct psw_tls *t, const char *url, char *out, size_t n)
{
	int w;

	if (url == NULL) {
		return FB_EINVAL;
	}
	if (strncmp(url, "tls+tcp", 7) == 0) {
		if (t == NULL) {
			return FB_EINVAL; // no certificate to present
		}
		w = snprintf(out, n, "%s", url);
	} else if (t != NULL && strncmp(url, "tcp", 3) == 0 &&
	    (url[3] == ':' || url[3] == '4' || url[3] == '6')) {
		// tcp://, tcp4://, tcp6:// -> tls+tcp://, tls+tcp4://, ...
		w = snprintf(out, n, "tls+%s", url);
	} else if (t != NULL) {
		return FB_EINVAL; // ipc://, inproc://: TLS cannot cover them
	} else {
		w = snprintf(out, n, "%s", url);
	}
	return w < 0 || (size_t) w >= n ? FB_EINVAL : FB_OK;
}

const char *
psw_tls_url_why(const struct psw_tls *t, const char *url)
{
	if (url != NULL && strncmp(url, "tls+tcp", 7) == 0 && t == NULL) {
		return "a tls+tcp:// URL needs --tls-cert, --tls-key and "
		       "--tls-ca";
	}
	if (t != NULL) {
		return "with TLS on, URLs must be tcp:// or tls+tcp:// "
		       "(and at most 255 bytes)";
	}
	return "URL too long";
}

int
psw_tls_dial(const struct psw_tls *t, nng_socket s, const char *url)
{
	char       u[300];
	nng_dialer d;

	if (psw_tls_url(t, url, u, sizeof(u)) != FB_OK) {
		return FB_EINVAL;
	}
	if (nng_dialer_create(&d, s, u) != 0) {
		return FB_ETRANSPORT;
	}
	if (t != NULL &&
	    nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, t->dial) != 0) {
		nng_dialer_close(d);
		return FB_ETRANSPORT;
	}
	if (nng_dialer_start(d, NNG_FLAG_NONBLOCK) != 0) {
		nng_dialer_close(d);
		return FB_ETRANSPORT;
	}
	return FB_OK;
}

int
psw_tls_listen(const struct psw_tls *t, nng_socket s, const char *url,
    size_t max_msg, nng_listener *l, char *bound, size_t n)
{
	char         u[300];
	nng_listener ln = NNG_LISTENER_INITIALIZER;
	int          rv;

	if (psw_tls_url(t, url, u, sizeof(u)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, "tls", "cannot listen on %s: %s", url,
		    psw_tls_url_why(t, url));
		return FB_EINVAL;
	}
	if ((rv = nng_listener_create(&ln, s, u)) != 0 ||
	    (t != NULL &&
	        (rv = nng_listener_set_ptr(ln, NNG_OPT_TLS_CONFIG,
	             t->listen)) != 0) ||
	    (max_msg > 0 &&
	        (rv = nng_listener_set_size(ln, NNG_OPT_RECVMAXSZ, max_msg)) !=
	            0) ||
	    (rv = nng_listener_start(ln, 0)) != 0) {
		FB_LOG(FB_LOG_ERR, "tls", "cannot listen on %s: %s", u,
		    nng_strerror(rv));
		if (nng_listener_id(ln) > 0) {
			nng_listener_close(ln);
		}
		return FB_ETRANSPORT;
	}
	snprintf(bound, n, "%s", u);
	int         port = 0;
	const char *colon;
	if ((strncmp(u, "tcp", 3) == 0 || strncmp(u, "tls+tcp", 7) == 0) &&
	    nng_listener_get_int(ln, NNG_OPT_TCP_BOUND_PORT, &port) == 0 &&
	    (colon = strrchr(u, ':')) != NULL) {
		// Rewrite "tcp://host:0" with the bound port.
		snprintf(bound, n, "%.*s:%d", (int) (colon - u), u, port);
	}
	*l = ln;
	return FB_OK;
}

// member_id parses the decimal index after prefix in cn into *id (at most
// 2^31 - 1); 1 when cn is exactly prefix followed by one.
static int
member_id(const char *cn, const char *prefix, uint32_t *id)
{
	size_t        k = strlen(prefix);
	unsigned long v = 0;

	if (strncmp(cn, prefix, k) != 0 || cn[k] < '0' || cn[k] > '9' ||
	    (cn[k] == '0' && cn[k + 1] != '\0')) {
		return 0;
	}
	for (const char *p = cn + k; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || v > 214748364ul) {
			return 0;
		}
		v = v * 10 + (unsigned long) (*p - '0');
	}
	if (v > 2147483647ul) {
		return 0;
	}
	*id = (uint32_t) v;
	return 1;
}

int
psw_tls_peer(nng_pipe p, struct psw_ident *who, char *name, size_t n)
{
	char     cn[PSW_TLS_NAME_MAX];
	uint32_t id;

	who->role = PSW_ROLE_NONE;
	who->id   = 0;
	if (n > 0) {
		name[0] = '\0';
	}
	if (psw__tls_engine_peer(p, cn, sizeof(cn)) != 0) {
		return FB_EAUTH;
	}
	snprintf(name, n, "%s", cn);
	if (member_id(cn, "ferry-trainer-", &id)) {
		who->role = PSW_ROLE_TRAINER;
		who->id   = id;
	} else if (member_id(cn, "ferry-server-", &id)) {
		who->role = PSW_ROLE_SERVER;
		who->id   = id;
	} else if (strcmp(cn, "ferry-server") == 0) {
		who->role = PSW_ROLE_SERVER;
		who->id   = PSW_ID_UNASSIGNED;
	} else if (strcmp(cn, "ferry-scheduler") == 0) {
		who->role = PSW_ROLE_SCHEDULER;
	} else if (strcmp(cn, "ferry-operator") == 0) {
		who->role = PSW_ROLE_OPERATOR;
	} else {
		return FB_EAUTH;
	}
	return FB_OK;
}

int
psw_tls_check_sender(nng_msg *m, int want_role, const char **why)
{
	struct psw_ident who;
	char             cn[PSW_TLS_NAME_MAX];

	if (!atomic_load_explicit(&tls_seen, memory_order_relaxed) ||
	    psw_tls_peer(nng_msg_get_pipe(m), &who, cn, sizeof(cn)) != FB_OK ||
	    who.role == want_role) {
		return FB_OK;
	}
	*why = want_role == PSW_ROLE_SCHEDULER
	    ? "reply from a connection whose certificate is not the "
	      "scheduler's"
	    : "reply from a connection whose certificate is not a server's";
	return FB_EAUTH;
}
