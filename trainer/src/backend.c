// backend.c — picks a compute backend from a --device string.
//
// To add a backend: implement struct tr_backend_ops in its own file (see
// the contract in tr.h and backend_cpu.c), declare it in tr_impl.h, and
// route a device string to it here. The CUDA backend is compiled only when
// CMake finds nvcc (FERRY_CUDA_ENABLED), which defines TR_HAVE_CUDA.
#include <string.h>

#include "tr_impl.h"

int
tr_device_parse(const char *device, int *is_cuda, int *ordinal)
{
	int64_t v;
	if (device == NULL || is_cuda == NULL || ordinal == NULL) {
		return FB_EINVAL;
	}
	if (strcmp(device, "cpu") == 0) {
		*is_cuda = 0;
		*ordinal = -1;
		return FB_OK;
	}
	if (strcmp(device, "cuda") == 0) {
		*is_cuda = 1;
		*ordinal = -1;
		return FB_OK;
	}
	if (strncmp(device, "cuda:", 5) == 0 &&
	    fb_parse_i64(device + 5, 0, 1023, &v) == FB_OK) {
		*is_cuda = 1;
		*ordinal = (int) v;
		return FB_OK;
	}
	return FB_EINVAL;
}

int
tr_backend_has_cuda(void)
{
#ifdef TR_HAVE_CUDA
	return 1;
#else
	return 0;
#endif
}

int
tr_backend_alloc(const char *device, const struct tr_arch *a,
    const struct tr_backend_opts *opts, struct tr_backend **out, char *err,
    size_t errlen)
{
	const struct tr_backend_ops *ops;
	struct tr_backend_opts       o;
	struct tr_backend           *b;
	int                          is_cuda, ordinal, rv;
	if (a == NULL || opts == NULL || out == NULL) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "backend: bad arguments");
	}
	if (tr_device_parse(device, &is_cuda, &ordinal) != FB_OK) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--device '%s': expected cpu, cuda or cuda:N",
		    device ? device : "(null)");
	}
	o        = *opts;
	o.device = ordinal;
	if (is_cuda) {
#ifdef TR_HAVE_CUDA
		ops = &tr__backend_cuda_ops;
#else
		return tr__errf(FB_EUNSUPP, err, errlen,
		    "--device %s: this trainer was built without the CUDA "
		    "backend (needs nvcc at build time)",
		    device);
#endif
	} else {
		ops = &tr__backend_cpu_ops;
	}
	if ((b = fb_zalloc(sizeof(*b))) == NULL) {
		return tr__errf(FB_ENOMEM, err, errlen, "backend: no memory");
	}
	b->ops  = ops;
	b->arch = *a;
	if ((rv = ops->alloc(a, &o, &b->state, err, errlen)) != FB_OK) {
		fb_free(b);
		return rv;
	}
	*out = b;
	return FB_OK;
}

void
tr_backend_free(struct tr_backend *b)
{
	if (b == NULL) {
		return;
	}
	b->ops->free(b->state);
	fb_free(b);
}

int
tr_backend_pin(struct tr_backend *b, const struct tr_params *p)
{
	if (b == NULL || p == NULL || p->n_tensors == 0) {
		return FB_EINVAL;
	}
	if (b->ops->pin == NULL) {
		return FB_OK;
	}
	// tr_params_init lays the tensors out in order in one block.
	char *lo = (char *) p->t[0];
	char *hi = (char *) (p->t[p->n_tensors - 1] +
	    p->len[p->n_tensors - 1]);
	return b->ops->pin(b->state, lo, (size_t) (hi - lo));
}
