// probe.c — link measurement: round-trip times and bandwidths to every
// server, measured with Probe rpcs when the scheduler asks for them (at
// declare time, then every reprobe_s seconds between operations) and
// reported to the scheduler, which places shards by them.
#include <stdlib.h>

#include "client_impl.h"

// probe_call sends one Probe of `bytes` payload to server m and returns
// the round-trip time in seconds.
static int
probe_call(ferry_client *c, size_t m, uint64_t bytes, uint32_t tmo,
    double *secs)
{
	struct conn      *cn = &c->conns[m];
	Pswire__Header    h  = PSWIRE__HEADER__INIT;
	nng_msg          *req, *rep = NULL;
	uint8_t          *payload;
	struct psw_frame  f;
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	size_t            hl;
	int               rv;

	h.request_id  = c->next_rid++;
	h.deadline_ms = tmo;
	hl            = pswire__header__get_packed_size(&h);
	if (psw_msg_begin(&req, hl, bytes, &payload) != FB_OK) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	memset(payload, 0, bytes);
	if (psw_msg_finish(req, PSWIRE__METHOD__PROBE, 0, &h.base, hl,
	        bytes) != FB_OK) {
		nng_msg_free(req);
		return ferry__fail(c, FERRY_EINVAL,
		    "probe of %llu bytes could not be framed",
		    (unsigned long long) bytes);
	}
	uint64_t t0 = fb_clock_ns();
	rv    = psw_call(c->auth, cn->ctx, cn->aio, req, PSWIRE__METHOD__PROBE,
	       h.request_id, (int) tmo, &rep, &f, &ph, &why);
	*secs = (double) (fb_clock_ns() - t0) * 1e-9;
	if (ph != NULL) {
		pswire__header__free_unpacked((Pswire__Header *) ph, NULL);
	}
	if (rep != NULL) {
		nng_msg_free(rep);
	}
	if (rv != FB_OK) {
		return ferry__fail(c, ferry__map_err(rv),
		    "probe of server %zu: %s", m, why ? why : fb_strerror(rv));
	}
	return FERRY_OK;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return x < y ? -1 : x > y;
}

// measure measures every server, keeps each link's figures in its
// connection (for codec "auto") and, with report, reports them to the
// scheduler. First the RTTs of all servers (median of cnt empty probes
// each), then the bandwidths (the best of two bulk probes of `bytes`, less
// one RTT): round trips never queue behind this trainer's own bulk
// transfers, and the best of two discounts a transfer that shared the
// link with another trainer's probe. A server that does not answer (it
// left) is reported as unusable (RTT 3600 s, 1 B/s) rather than failing
// the step.
static int
measure(ferry_client *c, uint32_t cnt, uint64_t bytes, int report)
{
	double  *rtt = fb_zalloc(c->n_conns * sizeof(double));
	double  *bw  = fb_zalloc(c->n_conns * sizeof(double));
	uint8_t *bad = fb_zalloc(c->n_conns);
	double   samples[64];
	int      rv = FERRY_OK;
	// The first probing also waits for connections; re-probes are quick
	// or the server is gone.
	uint32_t tmo = c->last_probe_ms == 0
	    ? ferry__timeout(c)
	    : (ferry__timeout(c) < 2000 ? ferry__timeout(c) : 2000);

	if (rtt == NULL || bw == NULL || bad == NULL) {
		rv = ferry__fail(c, FERRY_ENOMEM, "out of memory");
		goto done;
	}
	cnt = cnt < 1 ? 1 : cnt > 64 ? 64 : cnt;
	for (size_t m = 0; m < c->n_conns; m++) {
		double t = 0;
		// The first call may wait for the connection: not timed.
		int    ok = probe_call(c, m, 0, tmo, &t) == FERRY_OK;
		for (uint32_t i = 0; i < cnt && ok; i++) {
			ok = probe_call(c, m, 0, tmo, &samples[i]) == FERRY_OK;
		}
		if (!ok) {
			bad[m] = 1;
			continue;
		}
		qsort(samples, cnt, sizeof(double), cmp_double);
		rtt[m] = samples[cnt / 2];
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		for (int k = 0; k < 2 && !bad[m]; k++) {
			double t = 0;
			if (probe_call(c, m, bytes, ferry__timeout(c), &t) !=
			    FERRY_OK) {
				bad[m] = 1;
				break;
			}
			double tx = t - rtt[m];
			double b  = (double) bytes / (tx > 1e-7 ? tx : t);
			bw[m]     = b > bw[m] ? b : bw[m];
		}
		if (bad[m]) {
			rtt[m] = 3600.0;
			bw[m]  = 1.0;
		}
	}
	for (size_t m = 0; m < c->n_conns; m++) {
		c->conns[m].rtt_s  = rtt[m];
		c->conns[m].bw_bps = bw[m];
	}
	c->links_new = 1;
	if (report) {
		Pswire__Header             h = PSWIRE__HEADER__INIT;
		Pswire__ReportLinksRequest r =
		    PSWIRE__REPORT_LINKS_REQUEST__INIT;
		Pswire__Header *rh = NULL;
		r.rank             = (uint32_t) c->opts.rank;
		r.n_rtt_s          = c->n_conns;
		r.rtt_s            = rtt;
		r.n_bw_bps         = c->n_conns;
		r.bw_bps           = bw;
		h.body_case        = PSWIRE__HEADER__BODY_LINKS_REQ;
		h.links_req        = &r;
		rv = ferry__sched_call(c, &h, PSWIRE__METHOD__REPORT_LINKS,
		    ferry__timeout(c), &rh);
		if (rh != NULL) {
			pswire__header__free_unpacked(rh, NULL);
		}
	}
done:
	fb_free(rtt);
	fb_free(bw);
	fb_free(bad);
	return rv;
}

int
ferry__links_probe(ferry_client *c, uint32_t cnt, uint64_t bytes)
{
	return measure(c, cnt, bytes, 1);
}

int
ferry__links_measure(ferry_client *c, uint32_t cnt, uint64_t bytes)
{
	return measure(c, cnt, bytes, 0);
}

// ferry__links_reprobe measures the links again every reprobe_s seconds (when
// the scheduler asks for it) and reports them; the scheduler re-places
// shards if they changed enough. Runs between operations, on the
// connections' idle contexts.
int
ferry__links_reprobe(ferry_client *c)
{
	uint64_t now = fb_clock_ms();
	if (c->reprobe_s == 0 ||
	    now - c->last_probe_ms < (uint64_t) c->reprobe_s * 1000) {
		return FERRY_OK;
	}
	c->last_probe_ms = now;
	c->stats.reprobes++;
	return ferry__links_probe(c, c->probe_count, c->probe_bytes);
}
