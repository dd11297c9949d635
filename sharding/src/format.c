// format.c — a human-readable description of a placement, for the
// scheduler's log. Every number is printed with a bounded width (%.4g is at
// most 11 characters, integers at most 20 digits), which is what makes
// shard_format_bound exact enough to size a buffer once.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "shard_impl.h"

// A cursor over the caller's buffer; overflow is sticky.
struct out {
	char  *buf;
	size_t len, pos;
	int    full;
};

__attribute__((format(printf, 2, 3))) static void
put(struct out *o, const char *fmt, ...)
{
	if (o->full)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(o->buf + o->pos, o->len - o->pos, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= o->len - o->pos) {
		o->full = 1;
		return;
	}
	o->pos += (size_t) n;
}

size_t
shard_format_bound(const struct shard_inst *inst)
{
	uint64_t total;
	if (shard__inst_check(inst, &total) != FB_OK)
		return 0;
	size_t S = inst->n_shards, M = inst->n_servers, T = inst->n_trainers;
	// header and totals 256; matrix rows "  t<u32>:" + M·" %10.4g";
	// server lines; the assignment " <u32>" per shard; trainer times.
	return 512 + 2 * (M * 12 + T * (16 + M * 12)) + M * 96 + S * 11 +
	    T * 28;
}

int
shard_format(const struct shard_inst *inst, const uint32_t *assign, char *buf,
    size_t len, size_t *written)
{
	struct shard__ws w;
	int              rv;
	if (buf == NULL || assign == NULL)
		return FB_EINVAL;
	if ((rv = shard__ws_init(&w, inst)) != FB_OK)
		return rv;
	for (size_t i = 0; i < w.S; i++) {
		if (assign[i] >= w.M) {
			shard__ws_fini(&w);
			return FB_EINVAL;
		}
	}
	memcpy(w.a, assign, sizeof(uint32_t) * w.S);
	shard__ws_rebuild(&w);
	double lb = shard__lb(inst, w.total);

	struct out o = { buf, len, 0, len == 0 };
	if (len > 0)
		buf[0] = '\0';
	uint32_t M = w.M, T = w.T;
	put(&o,
	    "placement: %zu shards (%llu bytes) on %u servers for %u "
	    "trainers, model %c, rho %.4g, k %u\n",
	    w.S, (unsigned long long) w.total, (unsigned) M, (unsigned) T,
	    inst->model == SHARD_MODEL_A ? 'A' : 'B', inst->rho,
	    (unsigned) inst->k);
	for (int which = 0; which < 2; which++) {
		put(&o, "%s\n       ",
		    which == 0 ? "L[t][m] (ms):" : "B[t][m] (MB/s):");
		for (uint32_t m = 0; m < M; m++) {
			char lab[16];
			snprintf(lab, sizeof(lab), "m%u", (unsigned) m);
			put(&o, " %10s", lab);
		}
		put(&o, "\n");
		for (uint32_t t = 0; t < T; t++) {
			put(&o, "  t%-4u", (unsigned) t);
			for (uint32_t m = 0; m < M; m++) {
				size_t tm = (size_t) t * M + m;
				double v  = which == 0 ? inst->lat[tm] * 1e3
				                       : inst->bw[tm] / 1e6;
				put(&o, " %10.4g", v);
			}
			put(&o, "\n");
		}
	}
	put(&o, "servers:\n");
	for (uint32_t m = 0; m < M; m++) {
		size_t n = 0;
		for (size_t i = 0; i < w.S; i++)
			n += w.a[i] == m;
		put(&o, "  m%-4u %zu shards, %llu bytes", (unsigned) m, n,
		    (unsigned long long) w.load[m]);
		if (w.cap[m] != UINT64_MAX)
			put(&o, " of %llu%s\n", (unsigned long long) w.cap[m],
			    w.load[m] > w.cap[m] ? " OVER CAPACITY" : "");
		else
			put(&o, ", unbounded\n");
	}
	put(&o, "assign:");
	for (size_t i = 0; i < w.S; i++)
		put(&o, " %u", (unsigned) w.a[i]);
	put(&o, "\ntrainer time (ms):");
	for (uint32_t t = 0; t < T; t++)
		put(&o, " t%u=%.4g", (unsigned) t, w.time[t] * 1e3);
	put(&o, "\nF %.4g ms, LB %.4g ms, F/LB %.4g\n", w.f * 1e3, lb * 1e3,
	    shard__ratio(w.f, lb));
	shard__ws_fini(&w);
	if (o.full)
		return FB_ENOSPC;
	if (written != NULL)
		*written = o.pos;
	return FB_OK;
}
