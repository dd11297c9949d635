// tr_impl.h — internal umbrella of the trainer library (not installed).
#ifndef TR_IMPL_H
#define TR_IMPL_H

#include <stdarg.h>

#include "fb/fb.h"
#include "tr/tr.h"

#ifdef __cplusplus
extern "C" { // backend_cuda.cu defines tr__backend_cuda_ops with C linkage
#endif

// tr__errf formats a message into err (errlen bytes) when err is non-NULL
// and returns rv, so failures read `return tr__errf(rv, err, n, ...)`.
int tr__errf(int rv, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// tr__params_alloc lays out p's tensors (p->n_tensors and p->len[] set by
// the caller) in one zeroed block, each 64-byte aligned, and sets p->t[]
// and p->total: the one layout of the MLP's and the DLRM's parameters.
// Errors: FB_ENOMEM (p zeroed).
int tr__params_alloc(struct tr_params *p);

// tr__params_shaped allocates p zeroed with w's tensors and lengths (a
// working copy of w's shape: local steps' weights, accumulators, optimizer
// state). Errors: FB_ENOMEM (p zeroed).
int tr__params_shaped(struct tr_params *p, const struct tr_params *w);

// The CPU backend (backend_cpu.c) and, when built, the CUDA one.
extern const struct tr_backend_ops tr__backend_cpu_ops;
#ifdef TR_HAVE_CUDA
extern const struct tr_backend_ops tr__backend_cuda_ops;
#endif

#ifdef __cplusplus
}
#endif
#endif // TR_IMPL_H
