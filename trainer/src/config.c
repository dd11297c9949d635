// config.c — the trainer's flags: one table gives parsing, bounds and
// --help, so they cannot drift apart.
#include <stddef.h>
#include <string.h>

#include "tr_impl.h"

enum kind { K_STR, K_INT, K_U32, K_U64, K_SIZE, K_F64, K_LAYERS, K_MODE,
	K_DEVICE };

struct flag {
	const char *name;
	enum kind   kind;
	size_t      off;
	double      min, max;
	const char *def;  // default, as text for --help
	const char *help;
};

#define OFF(f) offsetof(struct tr_config, f)
static const struct flag flags[] = {
	{ "scheduler", K_STR, OFF(scheduler), 0, 0, "(required)",
	    "scheduler URL, e.g. tcp://127.0.0.1:7000" },
	{ "rank", K_INT, OFF(rank), 0, 65535, "0", "this trainer's rank" },
	{ "data", K_STR, OFF(data_dir), 0, 0,
	    "/usr/share/datasets/fashion-mnist", "directory of IDX files" },
	{ "layers", K_LAYERS, OFF(arch), 0, 0, "784,256,128,10",
	    "MLP widths: input,hidden...,classes" },
	{ "batch", K_SIZE, OFF(batch), 1, 65536, "64",
	    "minibatch size per trainer" },
	{ "lr", K_F64, OFF(lr), 1e-12, 1e6, "0.1", "SGD learning rate" },
	{ "epochs", K_INT, OFF(epochs), 1, 1000000, "1", "epochs to train" },
	{ "seed", K_U64, OFF(seed), 0, 9.2e18, "42",
	    "seed for the shuffle and the initial weights" },
	{ "mode", K_MODE, OFF(mode), 0, 0, "sync", "sync or async" },
	{ "log-interval", K_INT, OFF(log_interval), 0, 1e9, "100",
	    "steps between progress lines (0: epoch ends only)" },
	{ "codec-push", K_STR, OFF(codec_push), 0, 0, "none",
	    "gradient codec (none, fp16, q8, ...)" },
	{ "codec-pull", K_STR, OFF(codec_pull), 0, 0, "none",
	    "weight-delta codec" },
	{ "bucket", K_U32, OFF(bucket), 0, 1 << 30, "0",
	    "quantization bucket (0: codec default)" },
	{ "warmup-steps", K_U32, OFF(warmup_steps), 0, 1 << 30, "0",
	    "steps sent uncompressed first" },
	{ "max-steps", K_U64, OFF(max_steps), 0, 9.2e18, "0",
	    "stop after this many steps (0: unlimited)" },
	{ "device", K_DEVICE, OFF(device), 0, 0, "cpu",
	    "cpu, cuda (rank mod GPUs) or cuda:N" },
	{ "blas-threads", K_INT, OFF(blas_threads), 1, 256, "1",
	    "OpenBLAS threads" },
	{ "curve", K_STR, OFF(curve), 0, 0, "(none)",
	    "write the training curve as CSV to FILE" },
	{ "step-times", K_STR, OFF(step_times), 0, 0, "(none)",
	    "write every step's times as CSV to FILE: step, compute_ms "
	    "(minibatch and gradient), push_pull_ms (the exchange, waiting "
	    "for the other trainers included)" },
	{ "weights-out", K_STR, OFF(weights_out), 0, 0, "(none)",
	    "at the end, write the final weights to FILE (raw float32, "
	    "host byte order, tensors in order fc1.weight, fc1.bias, ...)" },
	{ "timeout-ms", K_U32, OFF(timeout_ms), 0, 86400000, "0",
	    "deadline of each libferry call (0: library default)" },
};
#define N_FLAGS (sizeof(flags) / sizeof(flags[0]))

void
tr_config_defaults(struct tr_config *c)
{
	memset(c, 0, sizeof(*c));
	c->data_dir = "/usr/share/datasets/fashion-mnist";
	(void) tr_arch_parse("784,256,128,10", &c->arch, NULL, 0);
	c->batch        = 64;
	c->lr           = 0.1;
	c->epochs       = 1;
	c->seed         = 42;
	c->mode         = TR_MODE_SYNC;
	c->log_interval = 100;
	c->codec_push   = "none";
	c->codec_pull   = "none";
	c->device       = "cpu";
	c->blas_threads = 1;
}

void
tr_config_usage(FILE *f)
{
	fprintf(f, "usage: trainer --scheduler URL --rank R [flags]\n\n");
	for (size_t i = 0; i < N_FLAGS; i++) {
		char lhs[40];
		snprintf(lhs, sizeof(lhs), "--%s", flags[i].name);
		fprintf(f, "  %-16s %s (default %s)\n", lhs, flags[i].help,
		    flags[i].def);
	}
	fprintf(f, "  %-16s %s\n", "--help", "print this help and exit");
}

static int
set_flag(struct tr_config *c, const struct flag *fl, const char *v,
    char *err, size_t errlen)
{
	void   *p = (char *) c + fl->off;
	int64_t i;
	double  d;
	int     rv = FB_OK, a, b;
	switch (fl->kind) {
	case K_STR:
		if (*v == '\0') {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--%s: empty value", fl->name);
		}
		*(const char **) p = v;
		return FB_OK;
	case K_LAYERS:
		return tr_arch_parse(v, p, err, errlen);
	case K_MODE:
		if (strcmp(v, "sync") == 0) {
			*(int *) p = TR_MODE_SYNC;
		} else if (strcmp(v, "async") == 0) {
			*(int *) p = TR_MODE_ASYNC;
		} else {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--%s '%s': expected sync or async", fl->name, v);
		}
		return FB_OK;
	case K_DEVICE:
		if (tr_device_parse(v, &a, &b) != FB_OK) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--%s '%s': expected cpu, cuda or cuda:N", fl->name,
			    v);
		}
		*(const char **) p = v;
		return FB_OK;
	case K_F64:
		rv = fb_parse_f64(v, fl->min, fl->max, &d);
		if (rv == FB_OK) {
			*(double *) p = d;
			return FB_OK;
		}
		return tr__errf(rv, err, errlen,
		    "--%s '%s': expected a number in [%g, %g]", fl->name, v,
		    fl->min, fl->max);
	default:
		rv = fb_parse_i64(v, (int64_t) fl->min, (int64_t) fl->max, &i);
		if (rv != FB_OK) {
			return tr__errf(rv, err, errlen,
			    "--%s '%s': expected an integer in [%.0f, %.0f]",
			    fl->name, v, fl->min, fl->max);
		}
		switch (fl->kind) {
		case K_INT:
			*(int *) p = (int) i;
			break;
		case K_U32:
			*(uint32_t *) p = (uint32_t) i;
			break;
		case K_U64:
			*(uint64_t *) p = (uint64_t) i;
			break;
		default:
			*(size_t *) p = (size_t) i;
			break;
		}
		return FB_OK;
	}
}

int
tr_config_parse(struct tr_config *c, int argc, char **argv, char *err,
    size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *val = NULL, *eq;
		size_t      nlen;
		const struct flag *fl = NULL;
		int         rv;
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			c->help = 1;
			return FB_OK;
		}
		if (strncmp(arg, "--", 2) != 0) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "unexpected argument '%s' (flags start with --)",
			    arg);
		}
		arg += 2;
		eq   = strchr(arg, '=');
		nlen = eq ? (size_t) (eq - arg) : strlen(arg);
		for (size_t j = 0; j < N_FLAGS; j++) {
			if (strlen(flags[j].name) == nlen &&
			    strncmp(flags[j].name, arg, nlen) == 0) {
				fl = &flags[j];
				break;
			}
		}
		if (fl == NULL) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "unknown flag '--%.*s' (see --help)", (int) nlen,
			    arg);
		}
		if (eq != NULL) {
			val = eq + 1;
		} else if (i + 1 < argc) {
			val = argv[++i];
		} else {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--%s: missing value", fl->name);
		}
		if ((rv = set_flag(c, fl, val, err, errlen)) != FB_OK) {
			return rv;
		}
	}
	return FB_OK;
}
