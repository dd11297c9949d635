// metrics.h — the trainer's HTTP endpoints and metrics (private to tr):
// step times, libferry's counters, the compression ratio, readiness and
// /debug/state. metrics.c owns them; train.c calls these at set-up and at
// the end, step.c after each step.
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "obs/obs.h"
#include "tr/tr.h"

// Where the run is, for /readyz and /debug/state.
enum tr__phase {
	TR_PHASE_JOINING = 0, // declaring, waiting for the job to start
	TR_PHASE_RUNNING = 1, // version 0 pulled: training
	TR_PHASE_DONE    = 2, // the loop ended (or failed)
};

// The trainer's metrics. Zero-initialise; tr__metrics_open fills it when
// --http-listen is set, else every call below is a no-op.
struct tr__metrics {
	struct obs_registry *reg; // NULL: off
	struct obs_http     *http;
	struct obs_metric   *steps, *samples, *pp_seconds, *compute_seconds;
	struct obs_metric   *bytes_out, *bytes_in, *requests, *version;
	struct obs_metric   *resyncs, *map_changes, *reprobes;
	struct obs_metric   *ratio_push, *ratio_pull;
	struct obs_metric   *ef_norm; // every TR_EF_NORM_EVERY steps
	struct obs_metric   *staleness, *dropped;
	// local steps: outer rounds, their bytes, the pseudo-gradient norm
	struct obs_metric   *outer_rounds, *outer_bytes, *pg_norm;
	uint64_t             outer_base; // bytes both ways at the last round
	int                  local;      // --local-steps: ratios per round
	double               rounds;     // outer rounds so far (fractional)
	atomic_int           phase;      // enum tr__phase
	int                  rank, trainers;
	uint64_t             fp32_bytes; // one full gradient, in bytes
	// libferry's byte counts when training began (the init offer and
	// the version-0 pull are not steps)
	uint64_t             base_out, base_in;
};

// tr__metrics_open starts the endpoints on cfg->http_listen (nothing when
// it is empty) for a model of n_params floats, and writes the base URL to
// cfg->http_url_file when set. Errors: FB_EINVAL (bad address),
// FB_ETRANSPORT (cannot listen), FB_ENOMEM; logged. Release with
// tr__metrics_close either way.
int tr__metrics_open(struct tr__metrics *m, const struct tr_config *cfg,
    size_t n_params);

// tr__metrics_phase records the run's phase (enum tr__phase); for
// RUNNING, fc (version 0 pulled) gives the job's trainer count and the
// byte counts the compression ratio starts from. Training thread only.
void tr__metrics_phase(struct tr__metrics *m, int phase, ferry_client *fc);

// tr__metrics_step counts a finished step of n samples that computed for
// compute_ns and exchanged for pp_ns, with `dropped` pushes refused as
// late so far, and copies libferry's counters of fc (the step's pull
// staleness among them). No allocation, no lock. Training thread only.
void tr__metrics_step(struct tr__metrics *m, ferry_client *fc, size_t n,
    uint64_t compute_ns, uint64_t pp_ns, uint64_t dropped);

// tr__metrics_outer records an outer round of local steps (rounds done
// so far: fragment exchanges / F with fragments) whose pseudo-gradient
// P/n had L2 norm `norm`: the whole rounds, and the bytes pushed and
// pulled since the previous round (or the start of training); the
// compression ratio counts the fractional rounds. Training thread only.
void tr__metrics_outer(struct tr__metrics *m, ferry_client *fc, double rounds,
    double norm);

// tr__metrics_close stops the endpoints and frees the registry.
void tr__metrics_close(struct tr__metrics *m);

#endif // TR_METRICS_H
