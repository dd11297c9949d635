// http.c — the HTTP endpoints over nng's HTTP server
// (<nng/supplemental/http/http.h>, nng 1.5.2): /metrics, /healthz,
// /readyz and /debug/state, GET only.
//
// DESIGN. Each handler builds its whole reply in an obs_writer on nng's
// HTTP thread and copies it into the response: scrapes are rare (every few
// seconds) and replies small, so there is no streaming and no cache. The
// owner's callbacks (ready, state, the registry's collectors) take their
// own locks there; nothing here holds a lock. Port 0 asks the kernel for
// a free port, which nng_http_server_get_addr reads back.
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "obs_impl.h"

struct obs_http {
	struct obs_http_opts opts;
	nng_http_server     *srv;
	nng_url             *url;
	char                 base[128];
};

int
obs_http_url_parse(const char *listen, char *url, size_t n, char *why,
    size_t whyn)
{
	const char *hp = listen, *colon;
	char       *end;
	long        port;

	if (listen == NULL || *listen == '\0') {
		snprintf(why, whyn, "empty address");
		return FB_EINVAL;
	}
	if (strncmp(listen, "http://", 7) == 0) {
		hp = listen + 7;
	} else if (strstr(listen, "://") != NULL) {
		snprintf(why, whyn, "'%s': only http:// is served", listen);
		return FB_EINVAL;
	}
	if ((colon = strrchr(hp, ':')) == NULL) {
		snprintf(why, whyn, "'%s': expected host:port", listen);
		return FB_EINVAL;
	}
	port = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || (*end != '\0' && *end != '/') || port < 0 ||
	    port > 65535) {
		snprintf(why, whyn, "'%s': port must be 0..65535", listen);
		return FB_EINVAL;
	}
	// ":port" listens on every address.
	if ((size_t) snprintf(url, n, "http://%.*s:%ld",
	        colon == hp ? 7 : (int) (colon - hp),
	        colon == hp ? "0.0.0.0" : hp, port) >= n) {
		snprintf(why, whyn, "'%s': too long", listen);
		return FB_EINVAL;
	}
	return FB_OK;
}

// reply sends status with body (len bytes) of content type ctype.
static void
reply(nng_aio *aio, uint16_t status, const char *ctype, const char *body,
    size_t len)
{
	nng_http_res *res;
	int           rv;
	if ((rv = nng_http_res_alloc(&res)) != 0) {
		nng_aio_finish(aio, rv);
		return;
	}
	if ((rv = nng_http_res_set_status(res, status)) != 0 ||
	    (rv = nng_http_res_set_header(res, "Content-Type", ctype)) != 0 ||
	    (rv = nng_http_res_set_header(res, "Cache-Control", "no-store")) !=
	        0 ||
	    (rv = nng_http_res_copy_data(res, body, len)) != 0) {
		nng_http_res_free(res);
		nng_aio_finish(aio, rv);
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

static struct obs_http *
handler_owner(nng_aio *aio)
{
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	return nng_http_handler_get_data(h);
}

// reply_writer sends w's text (or 500 when building it ran out of memory)
// and frees it.
static void
reply_writer(nng_aio *aio, struct obs_writer *w, const char *ctype)
{
	if (w->err != FB_OK) {
		static const char oom[] = "out of memory\n";
		reply(aio, 500, "text/plain", oom, sizeof(oom) - 1);
	} else {
		reply(aio, 200, ctype, w->buf ? w->buf : "", w->len);
	}
	obs_writer_fini(w);
}

static void
on_metrics(nng_aio *aio)
{
	struct obs_http  *h = handler_owner(aio);
	struct obs_writer w = OBS_WRITER_INIT;
	obs_registry_write(h->opts.reg, &w);
	reply_writer(aio, &w, "text/plain; version=0.0.4; charset=utf-8");
}

static void
on_healthz(nng_aio *aio)
{
	// Answering at all is the health signal: the process's threads run.
	static const char ok[] = "ok\n";
	reply(aio, 200, "text/plain", ok, sizeof(ok) - 1);
}

static void
on_readyz(nng_aio *aio)
{
	struct obs_http *h        = handler_owner(aio);
	char             why[256] = "";
	char             body[300];
	int              n;
	if (h->opts.ready == NULL ||
	    h->opts.ready(h->opts.arg, why, sizeof(why))) {
		static const char ok[] = "ready\n";
		reply(aio, 200, "text/plain", ok, sizeof(ok) - 1);
		return;
	}
	n = snprintf(body, sizeof(body), "not ready: %s\n", why);
	reply(aio, 503, "text/plain", body,
	    n < (int) sizeof(body) ? (size_t) n : sizeof(body) - 1);
}

static void
on_state(nng_aio *aio)
{
	struct obs_http  *h = handler_owner(aio);
	struct obs_writer w = OBS_WRITER_INIT;
	if (h->opts.state != NULL) {
		h->opts.state(h->opts.arg, &w);
	} else {
		obs_writer_printf(&w, "{}");
	}
	obs_writer_printf(&w, "\n");
	reply_writer(aio, &w, "application/json");
}

static const struct {
	const char *path;
	void (*fn)(nng_aio *);
} endpoints[] = {
	{ "/metrics", on_metrics },
	{ "/healthz", on_healthz },
	{ "/readyz", on_readyz },
	{ "/debug/state", on_state },
};

int
obs_http_open(const struct obs_http_opts *o, struct obs_http **out)
{
	struct obs_http *h;
	char             url[160], why[200];
	nng_sockaddr     sa;
	int              rv;

	if (o == NULL || o->reg == NULL ||
	    obs_http_url_parse(o->listen, url, sizeof(url), why,
	        sizeof(why)) != FB_OK) {
		return FB_EINVAL;
	}
	if ((h = fb_zalloc(sizeof(*h))) == NULL) {
		return FB_ENOMEM;
	}
	h->opts = *o;
	if ((rv = nng_url_parse(&h->url, url)) != 0 ||
	    (rv = nng_http_server_hold(&h->srv, h->url)) != 0) {
		goto fail;
	}
	for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
		nng_http_handler *hd;
		if ((rv = nng_http_handler_alloc(&hd, endpoints[i].path,
		         endpoints[i].fn)) != 0) {
			goto fail;
		}
		if ((rv = nng_http_handler_set_method(hd, "GET")) != 0 ||
		    (rv = nng_http_handler_set_data(hd, h, NULL)) != 0 ||
		    (rv = nng_http_server_add_handler(h->srv, hd)) != 0) {
			nng_http_handler_free(hd);
			goto fail;
		}
	}
	if ((rv = nng_http_server_start(h->srv)) != 0) {
		FB_LOG(FB_LOG_ERR, "http", "cannot listen on %s: %s", url,
		    nng_strerror(rv));
		goto fail;
	}
	if ((rv = nng_http_server_get_addr(h->srv, &sa)) != 0 ||
	    (sa.s_family != NNG_AF_INET && sa.s_family != NNG_AF_INET6)) {
		goto fail;
	}
	snprintf(h->base, sizeof(h->base), "http://%s:%u", h->url->u_hostname,
	    (unsigned) ntohs(sa.s_family == NNG_AF_INET ? sa.s_in.sa_port
	                                                : sa.s_in6.sa_port));
	*out = h;
	return FB_OK;
fail:
	FB_LOG(FB_LOG_ERR, "http", "%s: %s", url, nng_strerror(rv));
	obs_http_close(h);
	return rv == NNG_ENOMEM ? FB_ENOMEM : FB_ETRANSPORT;
}

int
obs_url_file_write(const char *path, const char *url)
{
	char tmp[4096];
	int  fd, e;
	errno = 0;
	// An unpredictable name created exclusively (mkstemp: O_CREAT |
	// O_EXCL, so never through a symlink someone planted), then renamed
	// over path: readers see the whole URL or nothing.
	if ((size_t) snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >=
	    sizeof(tmp)) {
		return FB_ESYSERR | ENAMETOOLONG;
	}
	if ((fd = mkstemp(tmp)) < 0) {
		return FB_ESYSERR | errno;
	}
	size_t  n  = strlen(url);
	ssize_t w  = write(fd, url, n);
	ssize_t nl = w == (ssize_t) n ? write(fd, "\n", 1) : -1;
	if (w != (ssize_t) n || nl != 1 || fchmod(fd, 0644) != 0) {
		e = errno != 0 ? errno : EIO;
		close(fd);
		unlink(tmp);
		return FB_ESYSERR | e;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0) {
		e = errno;
		unlink(tmp);
		return FB_ESYSERR | e;
	}
	return FB_OK;
}

const char *
obs_http_url(const struct obs_http *h)
{
	return h->base;
}

void
obs_http_close(struct obs_http *h)
{
	if (h == NULL) {
		return;
	}
	if (h->srv != NULL) {
		// Stopping waits for the handlers in flight; releasing the
		// last hold frees the handlers added to it.
		nng_http_server_stop(h->srv);
		nng_http_server_release(h->srv);
	}
	if (h->url != NULL) {
		nng_url_free(h->url);
	}
	fb_free(h);
}
