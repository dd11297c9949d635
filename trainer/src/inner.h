// inner.h — the inner optimizer of local steps (private to tr): the
// trainer-side update of its own copy of the weights between outer rounds,
// and the accumulator of the phase's directions that becomes the pushed
// pseudo-gradient (docs/algorithms.md §7). inner.c has the arithmetic;
// local.c drives it.
#ifndef TR_INNER_H
#define TR_INNER_H

#include <stddef.h>
#include <stdint.h>

#include "fb/optim.h"
#include "ferry/ferry.h"
#include "tr/tr.h"

// The inner optimizer and its buffers, all allocated by tr__inner_init so
// that a step allocates nothing. Shapes are those of the weights it was
// made for (tensors aligned apart, as tr_params lays them out).
struct tr__inner {
	struct fb_optim    o;     // sgd, momentum, nesterov or adamw
	struct fb_lr_sched sc;    // the inner schedule, by inner job step
	double             batch; // B: --batch, the unit of A
	struct tr_params   s1;    // momentum's v, adamw's first moment
	struct tr_params   s2;    // adamw's second moment
	struct tr_params   acc;   // A: sum of c_k d_k since the last reset
	struct tr_params   p;     // P = (n/B) A when n != B
	uint64_t           t;     // inner steps taken (adamw's correction)
	int                fresh; // A is all zero: the next step stores
};

// tr__inner_opts reads the inner optimizer and schedule of fo (the
// optimizer flags as given: --optimizer, --lr, --momentum, ...) into *o
// and *sc and checks them: sgd, momentum, nesterov or adamw, the others'
// parameters in range. Errors: FB_EINVAL with the reason in why (n
// bytes; may be NULL).
int tr__inner_opts(const struct ferry_opts *fo, struct fb_optim *o,
    struct fb_lr_sched *sc, char *why, size_t n);

// tr__inner_init makes in for weights shaped like w (zeroed state, A
// zero) with the inner optimizer of fo and batch B. Errors: FB_EINVAL
// (reason in why), FB_ENOMEM. Release with tr__inner_fini (safe on a
// zeroed or partly made in).
int  tr__inner_init(struct tr__inner *in, const struct ferry_opts *fo,
     size_t batch, const struct tr_params *w, char *why, size_t n);
void tr__inner_fini(struct tr__inner *in);

// tr__inner_step takes inner step k (0-based, the job's inner step: the
// schedule's t) for the summed gradient g of bk samples: the direction d
// in summed units, w -= (float) (eta_k / bk) * d, A += c_k d with c_k =
// (eta_k / eta) (B / bk) (no multiply when c_k is 1). No allocation.
void tr__inner_step(struct tr__inner *in, struct tr_params *w,
    const struct tr_params *g, size_t bk, uint64_t k);

// tr__inner_pseudo returns the pseudo-gradient P = (n/B) A of a phase of
// n samples: A itself when n == B, else in->p (overwritten).
const struct tr_params *tr__inner_pseudo(struct tr__inner *in, uint64_t n);

// tr__inner_pseudo_spans writes (n/B) A over the spans (ns of them) into
// the same elements of out (plainly A's when n == B).
void tr__inner_pseudo_spans(const struct tr__inner *in, uint64_t n,
    const struct ferry_span *spans, size_t ns, struct tr_params *out);

// tr__inner_reset zeroes A (the outer round took it); the optimizer's
// state stays, as DiLoCo keeps it across rounds.
void tr__inner_reset(struct tr__inner *in);

// tr__inner_reset_spans zeroes A over the spans (ns of them) only: one
// fragment's round took them.
void tr__inner_reset_spans(struct tr__inner *in,
    const struct ferry_span *spans, size_t ns);

// tr__inner_fragment_due reports whether fragment f of F is synced after
// inner step s (1-based) of a job of h local steps: s % h == ((f + 1) h /
// F) % h, so each fragment once per h steps, staggered by h/F (F = 1:
// after every h-th step).
int tr__inner_fragment_due(uint64_t s, uint32_t f, uint32_t h, uint32_t nf);

#endif // TR_INNER_H
