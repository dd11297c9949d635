// fb/optim.h — the optimizer and learning-rate schedule of a job, as plain
// data and pure functions shared by the servers (which apply the update,
// ps/src/server/optim.c), libferry (which declares them and reports the
// current lr) and the trainer (which parses the flags). No I/O, no
// allocation, no locks: every function here is thread-safe.
//
// The update rules themselves are in ps/src/server/optim.c and
// docs/algorithms.md §5; what lives here is what both ends of the wire must
// agree on: the names, the parameter checks and lr(version).
#ifndef FB_OPTIM_H
#define FB_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The optimizers servers run. The names (fb_optim_name) travel in the job
// config, so a name never changes meaning.
enum fb_optim_kind {
	FB_OPTIM_SGD = 0,  // x -= lr * g
	FB_OPTIM_MOMENTUM, // heavy ball: v = mu v + g; x -= lr v
	FB_OPTIM_NESTEROV, // v = mu v + g; x -= lr (g + mu v)
	FB_OPTIM_ADAM,     // Adam with bias correction, L2 decay on g
	FB_OPTIM_ADAMW,    // Adam with decoupled weight decay
	FB_OPTIM_ADAGRAD,  // G += g^2; x -= lr g / (sqrt(G) + eps)
	FB_OPTIM_COUNT,
};

// The learning-rate schedules (all with optional linear warm-up).
enum fb_lr_kind {
	FB_LR_CONSTANT = 0,
	FB_LR_STEP,   // lr * gamma^floor(t / step_every)
	FB_LR_COSINE, // cosine from lr to lr_min over total_steps
	FB_LR_COUNT,
};

// A job's optimizer. FB_OPTIM_INIT gives SGD and the usual defaults
// (PyTorch's) for the others' parameters.
struct fb_optim {
	int    kind; // enum fb_optim_kind
	double momentum;
	double beta1, beta2, eps;
	double weight_decay; // L2 on the gradient; decoupled for adamw
};
#define FB_OPTIM_INIT                                                         \
	{                                                                     \
		FB_OPTIM_SGD, 0.9, 0.9, 0.999, 1e-8, 0.0                      \
	}

// A job's learning rate as a function of the shard version. t counts the
// updates already applied (the version an update starts from).
struct fb_lr_sched {
	double   lr;         // base learning rate
	int      kind;       // enum fb_lr_kind
	uint64_t warmup;     // updates with a linear ramp (0: none)
	uint64_t step_every; // FB_LR_STEP: decay period, in updates
	double   gamma;      // FB_LR_STEP: decay factor
	double   lr_min;     // FB_LR_COSINE: the floor
	uint64_t total;      // FB_LR_COSINE: updates until lr_min
};
#define FB_LR_SCHED_INIT                                                      \
	{                                                                     \
		0.1, FB_LR_CONSTANT, 0, 1000, 0.1, 0.0, 0                     \
	}

// fb_optim_parse maps a name ("sgd", "momentum", "nesterov", "adam",
// "adamw", "adagrad"; NULL or "" mean "sgd") to *kind. Errors: FB_EINVAL
// (*kind untouched).
int fb_optim_parse(const char *name, int *kind);

// fb_optim_name returns the name of kind ("?" when out of range); static.
const char *fb_optim_name(int kind);

// fb_optim_state_bufs returns how many len-float state buffers kind keeps
// beside each shard's weights: 0 (sgd), 1 (momentum, nesterov, adagrad's
// sum of squares) or 2 (adam, adamw: m and v).
uint32_t fb_optim_state_bufs(int kind);

// fb_lr_parse maps "constant", "step" or "cosine" (NULL or "": constant)
// to *kind. Errors: FB_EINVAL.
int fb_lr_parse(const char *name, int *kind);

// fb_lr_name returns the name of kind ("?" when out of range); static.
const char *fb_lr_name(int kind);

// fb_optim_check validates o and sc together (ranges, a step schedule's
// period, a cosine's total); on failure writes a reason into why (n
// bytes; why may be NULL) and returns FB_EINVAL.
int fb_optim_check(const struct fb_optim *o, const struct fb_lr_sched *sc,
    char *why, size_t n);

// fb_optim_finish completes an optimizer and schedule whose parameters the
// caller filled in (from flags, ferry_opts or a job config): it parses the
// names optimizer and schedule (NULL or "": sgd, constant) into o->kind and
// sc->kind, then runs fb_optim_check. Errors: FB_EINVAL with a reason
// naming what was wrong in why (n bytes; may be NULL).
int fb_optim_finish(const char *optimizer, const char *schedule,
    struct fb_optim *o, struct fb_lr_sched *sc, char *why, size_t n);

// fb_lr_at returns the learning rate of the update that starts from
// version t (docs/algorithms.md §5.2): warm-up ramps lr * (t+1)/warmup for
// t < warmup; after it, the schedule runs on u = t - warmup.
double fb_lr_at(const struct fb_lr_sched *sc, uint64_t t);

#ifdef __cplusplus
}
#endif
#endif // FB_OPTIM_H
