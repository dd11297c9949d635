// metrics.c — the trainer's side of observability (metrics.h): its
// registry and series, the HTTP endpoints, readiness and /debug/state.
//
// DESIGN. libferry keeps its own counters (struct ferry_stats) and is not
// thread-safe, so the HTTP threads never call into the client: after each
// step the training thread copies ferry_client_stats (a struct copy) into
// the registry's atomics, and the endpoints read only those. A scrape
// therefore sees the counters as of the last finished step. The error
// feedback residual's norm would need a pass over every residual inside
// libferry per step: not exported (docs/operations.md lists it as not
// yet).
#include <stdio.h>
#include <string.h>

#include "metrics.h"
#include "tr_impl.h"

#define MOD "metrics"

static const char *const phases[] = { "joining", "running", "done" };

static int
ready(void *arg, char *why, size_t n)
{
	struct tr__metrics *m = arg;
	int                 p = atomic_load(&m->phase);
	if (p != TR_PHASE_RUNNING) {
		snprintf(why, n, "%s",
		    p == TR_PHASE_JOINING ? "joining the job (not started yet)"
		                          : "training has ended");
		return 0;
	}
	return 1;
}

static void
state(void *arg, struct obs_writer *w)
{
	struct tr__metrics *m = arg;
	int                 p = atomic_load(&m->phase);
	obs_writer_printf(w,
	    "{\"role\":\"trainer\",\"rank\":%d,\"phase\":\"%s\","
	    "\"trainers\":%d,\"steps\":%.0f,\"version\":%.0f,"
	    "\"map_changes\":%.0f,\"resyncs\":%.0f}",
	    m->rank, phases[p], p == TR_PHASE_JOINING ? 0 : m->trainers,
	    obs_metric_value(m->steps), obs_metric_value(m->version),
	    obs_metric_value(m->map_changes), obs_metric_value(m->resyncs));
}

// Steps between two updates of ferry_trainer_ef_residual_norm.
#define TR_EF_NORM_EVERY 50

// Upper bounds of the pull-staleness histogram's buckets (clocks).
static const double staleness_buckets[] = { 0, 1, 2, 4, 8, 16, 32, 64, 256 };

// series registers the trainer's series. FB_OK or the first error.
static int
series(struct tr__metrics *m)
{
	struct {
		struct obs_metric **out;
		enum obs_type       type;
		const char         *name, *help, *labels;
	} t[] = {
		{ &m->steps, OBS_COUNTER, "ferry_trainer_steps_total",
		    "Training steps finished.", NULL },
		{ &m->samples, OBS_COUNTER, "ferry_trainer_samples_total",
		    "Training samples processed.", NULL },
		{ &m->pp_seconds, OBS_HISTOGRAM,
		    "ferry_trainer_push_pull_duration_seconds",
		    "Time of each step's push-pull, waiting for the other "
		    "trainers included.",
		    NULL },
		{ &m->compute_seconds, OBS_HISTOGRAM,
		    "ferry_trainer_compute_duration_seconds",
		    "Time of each step's minibatch and gradient.", NULL },
		{ &m->bytes_out, OBS_COUNTER, "ferry_trainer_sent_bytes_total",
		    "Bytes sent to servers by pushes (frames included).",
		    NULL },
		{ &m->bytes_in, OBS_COUNTER,
		    "ferry_trainer_received_bytes_total",
		    "Bytes received from servers by pulls (frames included).",
		    NULL },
		{ &m->requests, OBS_COUNTER, "ferry_trainer_requests_total",
		    "Requests libferry sent (all kinds).", NULL },
		{ &m->version, OBS_GAUGE, "ferry_trainer_version",
		    "Version of the weights this trainer holds.", NULL },
		{ &m->resyncs, OBS_COUNTER, "ferry_trainer_resyncs_total",
		    "Full pulls after a reference checksum mismatch.", NULL },
		{ &m->map_changes, OBS_COUNTER,
		    "ferry_trainer_map_changes_total",
		    "Placement maps re-fetched because shards moved.", NULL },
		{ &m->reprobes, OBS_COUNTER, "ferry_trainer_reprobes_total",
		    "Link re-measurements reported to the scheduler.", NULL },
		{ &m->ratio_push, OBS_GAUGE,
		    "ferry_trainer_codec_compression_ratio",
		    "fp32 bytes over wire bytes (frames included) of the "
		    "steps so far, by direction.",
		    "direction=\"push\"" },
		{ &m->ratio_pull, OBS_GAUGE,
		    "ferry_trainer_codec_compression_ratio", NULL,
		    "direction=\"pull\"" },
		{ &m->ef_norm, OBS_GAUGE, "ferry_trainer_ef_residual_norm",
		    "L2 norm of libferry's push error-feedback residual "
		    "(0 without a push codec or with GPU-side encoding).",
		    NULL },
		{ &m->dropped, OBS_COUNTER,
		    "ferry_trainer_dropped_pushes_total",
		    "Pushes refused as late for a closed round (sync quorum, "
		    "rejoin): the trainer re-pulled.",
		    NULL },
		{ &m->outer_rounds, OBS_COUNTER,
		    "ferry_trainer_outer_rounds_total",
		    "Outer rounds of local steps (pseudo-gradient pushes) "
		    "finished.",
		    NULL },
		{ &m->outer_bytes, OBS_GAUGE, "ferry_trainer_outer_bytes",
		    "Bytes pushed and pulled by the last outer round of "
		    "local steps.",
		    NULL },
		{ &m->pg_norm, OBS_GAUGE, "ferry_trainer_pseudo_grad_norm",
		    "L2 norm of the last outer round's pseudo-gradient per "
		    "sample (P / n).",
		    NULL },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		int hist = t[i].type == OBS_HISTOGRAM;
		int rv   = obs_metric_add(m->reg, t[i].type, t[i].name,
		      t[i].help, t[i].labels, hist ? obs_latency_buckets : NULL,
                    hist ? obs_latency_nbuckets : 0, 0, t[i].out);
		if (rv != FB_OK) {
			return rv;
		}
	}
	// Staleness counts clocks, not seconds: its own buckets.
	int rv = obs_metric_add(m->reg, OBS_HISTOGRAM,
	    "ferry_trainer_staleness",
	    "Clocks the slowest trainer's pushes in each pulled weights "
	    "lagged this trainer's clock (0 in sync mode; at most "
	    "--staleness in ssp mode).",
	    NULL, staleness_buckets,
	    sizeof(staleness_buckets) / sizeof(staleness_buckets[0]), 0,
	    &m->staleness);
	if (rv != FB_OK) {
		return rv;
	}
	return obs_process_register(m->reg);
}

int
tr__metrics_open(struct tr__metrics *m, const struct tr_config *cfg,
    size_t n_params)
{
	struct obs_http_opts o = { 0 };
	int                  rv;

	memset(m, 0, sizeof(*m));
	if (cfg->http_listen == NULL || *cfg->http_listen == '\0') {
		return FB_OK;
	}
	m->rank       = cfg->fo.rank;
	m->fp32_bytes = (uint64_t) n_params * sizeof(float);
	m->local      = cfg->local_steps > 0;
	atomic_init(&m->phase, TR_PHASE_JOINING);
	if ((rv = obs_registry_alloc(&m->reg)) != FB_OK ||
	    (rv = series(m)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "metrics: %s", fb_strerror(rv));
		return rv;
	}
	o.listen = cfg->http_listen;
	o.reg    = m->reg;
	o.ready  = ready;
	o.state  = state;
	o.arg    = m;
	if ((rv = obs_http_open(&o, &m->http)) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "--http-listen=%s: %s",
		    cfg->http_listen, fb_strerror(rv));
		return rv;
	}
	FB_LOG(FB_LOG_NOTICE, MOD, "http endpoints on %s",
	    obs_http_url(m->http));
	if (cfg->http_url_file != NULL && *cfg->http_url_file != '\0' &&
	    (rv = obs_url_file_write(cfg->http_url_file,
	         obs_http_url(m->http))) != FB_OK) {
		FB_LOG(FB_LOG_ERR, MOD, "cannot write --http-url-file %s: %s",
		    cfg->http_url_file, fb_strerror(rv));
	}
	return FB_OK;
}

void
tr__metrics_phase(struct tr__metrics *m, int phase, ferry_client *fc)
{
	struct ferry_stats st;
	if (m->reg == NULL) {
		return;
	}
	if (phase == TR_PHASE_RUNNING) {
		// The ratio counts steps only: not the init offer and the
		// version-0 pull that came before.
		ferry_client_stats(fc, &st);
		m->base_out   = st.bytes_pushed;
		m->base_in    = st.bytes_pulled;
		m->outer_base = st.bytes_pushed + st.bytes_pulled;
		m->trainers   = ferry_client_trainers(fc);
	}
	atomic_store(&m->phase, phase);
}

void
tr__metrics_step(struct tr__metrics *m, ferry_client *fc, size_t n,
    uint64_t compute_ns, uint64_t pp_ns, uint64_t dropped)
{
	struct ferry_stats st;
	double             steps;
	if (m->reg == NULL) {
		return;
	}
	ferry_client_stats(fc, &st);
	obs_counter_add(m->steps, 1);
	obs_counter_add(m->samples, n);
	obs_histogram_observe(m->compute_seconds, (double) compute_ns * 1e-9);
	obs_histogram_observe(m->pp_seconds, (double) pp_ns * 1e-9);
	obs_counter_set(m->bytes_out, st.bytes_pushed);
	obs_counter_set(m->bytes_in, st.bytes_pulled);
	obs_counter_set(m->requests, st.requests);
	obs_gauge_set(m->version, (double) st.version);
	obs_counter_set(m->resyncs, st.resyncs);
	obs_counter_set(m->map_changes, st.map_changes);
	obs_counter_set(m->reprobes, st.reprobes);
	obs_counter_set(m->dropped, dropped);
	obs_histogram_observe(m->staleness, (double) st.staleness_last);
	steps = obs_metric_value(m->steps);
	// The norm reads the whole residual: often enough for a dashboard,
	// rarely enough to cost nothing measurable per step.
	if (((uint64_t) steps - 1) % TR_EF_NORM_EVERY == 0) {
		obs_gauge_set(m->ef_norm, ferry_client_ef_residual_norm(fc));
	}
	if (m->local) {
		// Local steps exchange the model once per outer round.
		steps = m->rounds;
	}
	if (st.bytes_pushed > m->base_out) {
		obs_gauge_set(m->ratio_push,
		    steps * (double) m->fp32_bytes /
		        (double) (st.bytes_pushed - m->base_out));
	}
	if (st.bytes_pulled > m->base_in) {
		obs_gauge_set(m->ratio_pull,
		    steps * (double) m->fp32_bytes /
		        (double) (st.bytes_pulled - m->base_in));
	}
}

void
tr__metrics_outer(struct tr__metrics *m, ferry_client *fc, double rounds,
    double norm)
{
	struct ferry_stats st;
	if (m->reg == NULL) {
		return;
	}
	ferry_client_stats(fc, &st);
	uint64_t both = st.bytes_pushed + st.bytes_pulled;
	obs_counter_set(m->outer_rounds, (uint64_t) rounds);
	m->rounds = rounds;
	obs_gauge_set(m->outer_bytes, (double) (both - m->outer_base));
	obs_gauge_set(m->pg_norm, norm);
	m->outer_base = both;
}

void
tr__metrics_close(struct tr__metrics *m)
{
	obs_http_close(m->http);
	obs_registry_free(m->reg);
	memset(m, 0, sizeof(*m));
}
