// loadgen.c — a load-only Ferry trainer (issue 30): K ranks of a job as
// threads of one process, each its own ferry_client, pushing and pulling
// gradients of any size with no compute, so that dozens of trainers fit on
// one machine and what is measured is the servers, not a model.
//
//   loadgen --scheduler URL --trainers N [--rank-base R] [--ranks K]
//           --floats F [--tensors T] [--mode sync|async] [--steps S]
//           [--warmup W] [--rate HZ] [--grad const|quadratic]
//           [--optimizer O] [--lr X] [--codec-push C] [--codec-pull C]
//           [--timeout-ms MS] [--watch-pids P1,P2,...] [--json FILE]
//
// Each rank declares the job's table (T tensors, F floats in all, seeded
// zeros: nothing is offered), pulls version 0, runs W warm-up push-pulls,
// then S timed ones. The timed window opens and closes on a barrier of
// every rank of this process; --watch-pids samples the CPU time
// (/proc/P/stat) of those processes at both ends and their VmRSS and VmHWM
// (/proc/P/status) at the end. --grad const pushes one fixed random
// gradient (shared by the ranks: libferry never writes a gradient);
// quadratic pushes g = w - t for a fixed pseudo-random t, so that the job
// trains and rank 0's loss 0.5|w - t|^2 must fall. --rate HZ paces each
// rank's steps on absolute deadlines (0: as fast as possible).
//
// Output: a summary line on stderr and, with --json, one JSON object
// (bench/scale/trainers.sh and the contract in issue 30 read its keys).
// Exit status 0 when every rank finished (and, quadratic, the loss fell).
#define _GNU_SOURCE
#include <ferry/ferry.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LG_MAX_PIDS 64
#define LG_MAX_TENSORS 4096

struct lg_args {
	const char *sched_url;
	int         trainers, rank_base, ranks;
	size_t      floats, tensors;
	int         mode; // enum ferry_mode
	int         steps, warmup;
	double      rate;
	int         quadratic;
	const char *optimizer;
	double      lr;
	const char *codec_push, *codec_pull;
	uint32_t    timeout_ms;
	int         pids[LG_MAX_PIDS];
	int         n_pids;
	const char *json;
};

// What every rank shares: the table, the constant gradient or the
// quadratic's target, and the barrier of the timed window (ranks + the
// main thread, which samples the watched processes between its halves).
struct lg_shared {
	const struct lg_args    *a;
	struct ferry_tensor_spec specs[LG_MAX_TENSORS];
	char              names[LG_MAX_TENSORS][24]; // "t" and any size_t
	size_t            off[LG_MAX_TENSORS];
	float            *grad;   // const mode: the gradient
	float            *target; // quadratic mode: t
	pthread_barrier_t bar;
	int               fail; // atomic
};

struct lg_rank {
	struct lg_shared  *sh;
	int                rank;
	double            *times; // seconds per timed step
	int                rv;
	char               err[256];
	double             loss_first, loss_last;
	struct ferry_stats s0, s1;
};

static double
now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

// unit_rand maps an index to a fixed value in [-1, 1) (splitmix64), the
// same in every rank and every run.
static float
unit_rand(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (float) ((double) (x >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static double
loss_of(const struct lg_shared *sh, const float *w)
{
	double l = 0;
	for (size_t i = 0; i < sh->a->floats; i++) {
		double d = (double) w[i] - (double) sh->target[i];
		l += d * d;
	}
	return 0.5 * l;
}

// step pushes this rank's gradient and pulls the next weights.
static int
step(struct lg_shared *sh, ferry_client *c, const float *const *gp, float *g,
    float *const *wp, const float *w)
{
	if (sh->target != NULL) {
		for (size_t i = 0; i < sh->a->floats; i++) {
			g[i] = w[i] - sh->target[i];
		}
	}
	return ferry_client_push_pull(c, gp, 1, wp);
}

static int
rank_join(struct lg_rank *r, ferry_client **c)
{
	const struct lg_args *a = r->sh->a;
	struct ferry_opts     o = FERRY_OPTS_INIT;
	int                   rv;

	o.scheduler_url = a->sched_url;
	o.rank          = r->rank;
	o.mode          = a->mode;
	o.lr            = a->lr;
	o.codec_push    = a->codec_push;
	o.codec_pull    = a->codec_pull;
	o.optimizer     = a->optimizer;
	o.timeout_ms    = a->timeout_ms;
	if ((rv = ferry_client_open(&o, c)) != 0) {
		snprintf(r->err, sizeof(r->err), "open: %s",
		    ferry_strerror(rv));
		return rv;
	}
	if ((rv = ferry_client_declare_specs(*c, r->sh->specs, a->tensors)) !=
	    0) {
		snprintf(r->err, sizeof(r->err), "declare: %s: %s",
		    ferry_strerror(rv), ferry_client_last_error(*c));
	}
	return rv;
}

// rank_main: join, pull, warm up, then the timed steps between the
// barrier's waits. A rank that fails leaves the job (so that sync rounds
// do not wait for it) and still passes every barrier.
static void *
rank_main(void *arg)
{
	struct lg_rank       *r  = arg;
	struct lg_shared     *sh = r->sh;
	const struct lg_args *a  = sh->a;
	ferry_client         *c  = NULL;
	float                *w  = calloc(a->floats, sizeof(float));
	float        *g = sh->target != NULL ? calloc(a->floats, sizeof(float))
	                                     : sh->grad;
	const float **gp = calloc(a->tensors, sizeof(*gp));
	float       **wp = calloc(a->tensors, sizeof(*wp));
	int           k  = 0;

	if (w == NULL || g == NULL || gp == NULL || wp == NULL) {
		snprintf(r->err, sizeof(r->err), "out of memory");
		r->rv = FERRY_ENOMEM;
		goto barriers;
	}
	for (size_t t = 0; t < a->tensors; t++) {
		gp[t] = g + sh->off[t];
		wp[t] = w + sh->off[t];
	}
	if ((r->rv = rank_join(r, &c)) != 0) {
		goto barriers;
	}
	if ((r->rv = ferry_client_pull(c, wp)) != 0) {
		goto fail;
	}
	if (sh->target != NULL) {
		r->loss_first = loss_of(sh, w);
	}
	for (k = 0; k < a->warmup; k++) {
		if ((r->rv = step(sh, c, gp, g, wp, w)) != 0) {
			goto fail;
		}
	}
	ferry_client_stats(c, &r->s0);
	goto barriers;
fail:
	snprintf(r->err, sizeof(r->err), "step %d: %s: %s", k,
	    ferry_strerror(r->rv), ferry_client_last_error(c));
barriers:
	if (r->rv != 0) {
		__atomic_store_n(&sh->fail, 1, __ATOMIC_SEQ_CST);
		if (c != NULL) {
			(void) ferry_client_leave(c);
		}
	}
	pthread_barrier_wait(&sh->bar); // every rank ready
	pthread_barrier_wait(&sh->bar); // the main thread sampled: go
	double t0 = now_s(), period = a->rate > 0 ? 1.0 / a->rate : 0;
	for (k = 0; r->rv == 0 && k < a->steps; k++) {
		if (period > 0) {
			double          due = t0 + k * period;
			struct timespec ts  = { (time_t) due,
				 (long) ((due - (double) (time_t) due) * 1e9) };
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts,
			    NULL);
		}
		double s = now_s();
		if ((r->rv = step(sh, c, gp, g, wp, w)) != 0) {
			snprintf(r->err, sizeof(r->err),
			    "timed step %d: %s: %s", k, ferry_strerror(r->rv),
			    ferry_client_last_error(c));
			__atomic_store_n(&sh->fail, 1, __ATOMIC_SEQ_CST);
			(void) ferry_client_leave(c);
			break;
		}
		r->times[k] = now_s() - s;
	}
	pthread_barrier_wait(&sh->bar); // the window ends
	if (r->rv == 0) {
		ferry_client_stats(c, &r->s1);
		if (sh->target != NULL) {
			r->loss_last = loss_of(sh, w);
		}
		(void) ferry_client_leave(c);
	}
	ferry_client_close(c);
	if (g != sh->grad) {
		free(g);
	}
	free(w);
	free(gp);
	free(wp);
	return NULL;
}

// ---- watched processes ------------------------------------------------

struct lg_watch {
	double cpu0[LG_MAX_PIDS], cpu1[LG_MAX_PIDS];
	double rss_mb[LG_MAX_PIDS], hwm_mb[LG_MAX_PIDS];
};

// proc_cpu returns utime + stime of pid in seconds (-1 if unreadable).
static double
proc_cpu(int pid)
{
	char          path[64], buf[1024];
	unsigned long ut = 0, st = 0;
	FILE         *f;
	size_t        n;
	char         *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL) {
		return -1;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	// The command name may hold spaces: fields count from its ')'.
	if ((p = strrchr(buf, ')')) == NULL ||
	    sscanf(p + 1,
	        " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
	        &st) != 2) {
		return -1;
	}
	return (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
}

static void
proc_mem(int pid, double *rss_mb, double *hwm_mb)
{
	char  path[64], line[256];
	long  rss = 0, hwm = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((f = fopen(path, "r")) != NULL) {
		while (fgets(line, sizeof(line), f) != NULL) {
			sscanf(line, "VmRSS: %ld", &rss);
			sscanf(line, "VmHWM: %ld", &hwm);
		}
		fclose(f);
	}
	*rss_mb = (double) rss / 1024.0;
	*hwm_mb = (double) hwm / 1024.0;
}

// ---- arguments ----------------------------------------------------------

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: loadgen --scheduler URL --trainers N [--rank-base R] "
	    "[--ranks K]\n"
	    "               --floats F [--tensors T] [--mode sync|async]\n"
	    "               [--steps S] [--warmup W] [--rate HZ]\n"
	    "               [--grad const|quadratic] [--optimizer O] "
	    "[--lr X]\n"
	    "               [--codec-push C] [--codec-pull C] "
	    "[--timeout-ms MS]\n"
	    "               [--watch-pids P1,P2,...] [--json FILE]\n"
	    "A load-only trainer: ranks R..R+K-1 of an N-trainer job as "
	    "threads,\npushing and pulling F floats with no compute "
	    "(bench/scale/loadgen.c).\n");
}

static int
parse_pids(struct lg_args *a, const char *v)
{
	char buf[1024], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", v);
	for (char *t = strtok_r(buf, ",", &save); t != NULL;
	     t       = strtok_r(NULL, ",", &save)) {
		char *end;
		long  p = strtol(t, &end, 10);
		if (*end != '\0' || p <= 0 || a->n_pids == LG_MAX_PIDS) {
			return -1;
		}
		a->pids[a->n_pids++] = (int) p;
	}
	return 0;
}

// num reads a non-negative number into *out; -1 if v is not one.
static int
num(const char *v, double *out)
{
	char *end;
	if (v == NULL) {
		return -1;
	}
	*out = strtod(v, &end);
	return *end != '\0' || end == v || !(*out >= 0) ? -1 : 0;
}

static int
parse_one(struct lg_args *a, const char *k, const char *v)
{
	double x     = 0;
	int    isnum = num(v, &x) == 0;

	if (strcmp(k, "--scheduler") == 0) {
		a->sched_url = v;
	} else if (strcmp(k, "--mode") == 0 && v != NULL) {
		if (strcmp(v, "sync") != 0 && strcmp(v, "async") != 0) {
			return -1;
		}
		a->mode = strcmp(v, "sync") == 0 ? FERRY_MODE_SYNC
		                                 : FERRY_MODE_ASYNC;
	} else if (strcmp(k, "--grad") == 0 && v != NULL) {
		if (strcmp(v, "const") != 0 && strcmp(v, "quadratic") != 0) {
			return -1;
		}
		a->quadratic = strcmp(v, "quadratic") == 0;
	} else if (strcmp(k, "--optimizer") == 0) {
		a->optimizer = v;
	} else if (strcmp(k, "--codec-push") == 0) {
		a->codec_push = v;
	} else if (strcmp(k, "--codec-pull") == 0) {
		a->codec_pull = v;
	} else if (strcmp(k, "--json") == 0) {
		a->json = v;
	} else if (strcmp(k, "--watch-pids") == 0 && v != NULL) {
		return parse_pids(a, v);
	} else if (!isnum) {
		return -1;
	} else if (strcmp(k, "--trainers") == 0) {
		a->trainers = (int) x;
	} else if (strcmp(k, "--rank-base") == 0) {
		a->rank_base = (int) x;
	} else if (strcmp(k, "--ranks") == 0) {
		a->ranks = (int) x;
	} else if (strcmp(k, "--floats") == 0) {
		a->floats = (size_t) x;
	} else if (strcmp(k, "--tensors") == 0) {
		a->tensors = (size_t) x;
	} else if (strcmp(k, "--steps") == 0) {
		a->steps = (int) x;
	} else if (strcmp(k, "--warmup") == 0) {
		a->warmup = (int) x;
	} else if (strcmp(k, "--rate") == 0) {
		a->rate = x;
	} else if (strcmp(k, "--lr") == 0) {
		a->lr = x;
	} else if (strcmp(k, "--timeout-ms") == 0) {
		a->timeout_ms = (uint32_t) x;
	} else {
		return -1;
	}
	return v == NULL ? -1 : 1;
}

static int
parse_args(struct lg_args *a, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		char        key[64];
		const char *k  = argv[i],
		           *v  = i + 1 < argc ? argv[i + 1] : NULL;
		const char *eq = strchr(k, '=');
		if (strcmp(k, "-h") == 0 || strcmp(k, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (eq != NULL && (size_t) (eq - k) < sizeof(key)) {
			// --name=value
			snprintf(key, sizeof(key), "%.*s", (int) (eq - k), k);
			k = key;
			v = eq + 1;
		}
		if (parse_one(a, k, v) < 0) {
			fprintf(stderr, "loadgen: bad option %s %s\n", argv[i],
			    eq == NULL && v != NULL ? v : "");
			usage(stderr);
			return -1;
		}
		i += eq == NULL;
	}
	if (a->ranks == 0) {
		a->ranks = a->trainers - a->rank_base;
	}
	if (a->sched_url == NULL || a->trainers < 1 || a->floats == 0 ||
	    a->tensors < 1 || a->tensors > LG_MAX_TENSORS ||
	    a->tensors > a->floats || a->ranks < 1 || a->rank_base < 0 ||
	    a->rank_base + a->ranks > a->trainers || a->steps < 1) {
		fprintf(stderr,
		    "loadgen: need --scheduler, --trainers N >= 1, --floats F "
		    ">= 1, 1 <= --tensors <= min(F, %d), --steps >= 1 and "
		    "ranks inside 0..N-1\n",
		    LG_MAX_TENSORS);
		return -1;
	}
	return 0;
}

// ---- the run -----------------------------------------------------------

static int
cmp_d(const void *x, const void *y)
{
	double a = *(const double *) x, b = *(const double *) y;
	return a < b ? -1 : a > b;
}

// shared_init cuts the model into tensors and makes the gradient or the
// target (the same bits in every process of the job).
static int
shared_init(struct lg_shared *sh, const struct lg_args *a)
{
	size_t off = 0;

	memset(sh, 0, sizeof(*sh));
	sh->a = a;
	for (size_t t = 0; t < a->tensors; t++) {
		size_t len = a->floats / a->tensors +
		    (t < a->floats % a->tensors ? 1 : 0);
		snprintf(sh->names[t], sizeof(sh->names[t]), "t%zu", t);
		sh->specs[t].name = sh->names[t];
		sh->specs[t].len  = len;
		sh->specs[t].kind = FERRY_TENSOR_WEIGHTS;
		sh->specs[t].init = FERRY_INIT_ZEROS;
		sh->off[t]        = off;
		off += len;
	}
	float *v = malloc(a->floats * sizeof(float));
	if (v == NULL) {
		return -1;
	}
	// A small constant gradient keeps the weights finite for any run.
	for (size_t i = 0; i < a->floats; i++) {
		v[i] = unit_rand(i) * (a->quadratic ? 1.0f : 1e-3f);
	}
	if (a->quadratic) {
		sh->target = v;
	} else {
		sh->grad = v;
	}
	return 0;
}

// run_window drives the barriers from the main thread and samples the
// watched processes at both ends of the timed window.
static double
run_window(struct lg_shared *sh, struct lg_watch *wt)
{
	const struct lg_args *a = sh->a;
	double                t0, t1;

	pthread_barrier_wait(&sh->bar);
	for (int i = 0; i < a->n_pids; i++) {
		wt->cpu0[i] = proc_cpu(a->pids[i]);
	}
	t0 = now_s();
	pthread_barrier_wait(&sh->bar);
	pthread_barrier_wait(&sh->bar);
	t1 = now_s();
	for (int i = 0; i < a->n_pids; i++) {
		wt->cpu1[i] = proc_cpu(a->pids[i]);
		proc_mem(a->pids[i], &wt->rss_mb[i], &wt->hwm_mb[i]);
	}
	return t1 - t0;
}

static void
write_json(FILE *f, const struct lg_args *a, struct lg_rank *r,
    const struct lg_watch *wt, double elapsed, int ok)
{
	size_t   n     = (size_t) a->ranks * (size_t) a->steps;
	double  *t     = malloc((n > 0 ? n : 1) * sizeof(double));
	double   bytes = 4.0 * (double) a->floats, cpu = 0, rss = 0, hwm = 0;
	uint64_t wpush = 0, wpull = 0;
	size_t   m = 0;

	for (int i = 0; i < a->ranks; i++) {
		for (int k = 0; ok && t != NULL && k < a->steps; k++) {
			t[m++] = r[i].times[k];
		}
		wpush += r[i].s1.bytes_pushed - r[i].s0.bytes_pushed;
		wpull += r[i].s1.bytes_pulled - r[i].s0.bytes_pulled;
	}
	if (m > 0) {
		qsort(t, m, sizeof(double), cmp_d);
	}
	double med = m > 0 ? t[m / 2] * 1e3 : 0;
	double p99 = m > 0 ? t[(size_t) ((double) (m - 1) * 0.99)] * 1e3 : 0;
	double pps = ok && elapsed > 0 ? (double) n / elapsed : 0;
	fprintf(f,
	    "{\"trainers\": %d, \"ranks\": %d, \"rank_base\": %d, "
	    "\"mode\": \"%s\", \"tensors\": %zu, \"floats\": %zu, "
	    "\"bytes\": %.0f, \"steps\": %d, \"warmup\": %d, "
	    "\"rate_hz\": %g, \"grad\": \"%s\", \"optimizer\": \"%s\", "
	    "\"elapsed_s\": %.6f, \"round_ms_median\": %.4f, "
	    "\"round_ms_p99\": %.4f, \"push_pulls_per_s\": %.3f, "
	    "\"goodput_gbps\": %.6f, \"agg_bytes\": %.0f, "
	    "\"wire_bytes_pushed\": %llu, \"wire_bytes_pulled\": %llu, "
	    "\"watched\": [",
	    a->trainers, a->ranks, a->rank_base,
	    a->mode == FERRY_MODE_SYNC ? "sync" : "async", a->tensors,
	    a->floats, bytes, a->steps, a->warmup, a->rate,
	    a->quadratic ? "quadratic" : "const",
	    a->optimizer != NULL ? a->optimizer : "sgd", elapsed, med, p99,
	    pps, pps * 2 * bytes / 1e9, ok ? (double) n * bytes : 0.0,
	    (unsigned long long) wpush, (unsigned long long) wpull);
	for (int i = 0; i < a->n_pids; i++) {
		double c = wt->cpu1[i] - wt->cpu0[i];
		fprintf(f,
		    "%s{\"pid\": %d, \"cpu_s\": %.3f, \"rss_mb\": %.2f, "
		    "\"hwm_mb\": %.2f}",
		    i ? ", " : "", a->pids[i], c, wt->rss_mb[i],
		    wt->hwm_mb[i]);
		cpu += c;
		rss += wt->rss_mb[i];
		hwm += wt->hwm_mb[i];
	}
	fprintf(f,
	    "], \"watched_cpu_s\": %.3f, \"watched_rss_mb\": %.2f, "
	    "\"watched_hwm_mb\": %.2f, ",
	    cpu, rss, hwm);
	if (a->quadratic && a->rank_base == 0) {
		fprintf(f, "\"loss_first\": %.9g, \"loss_last\": %.9g, ",
		    r[0].loss_first, r[0].loss_last);
	} else {
		fprintf(f, "\"loss_first\": null, \"loss_last\": null, ");
	}
	fprintf(f, "\"ok\": %s}\n", ok ? "true" : "false");
	free(t);
}

int
main(int argc, char **argv)
{
	struct lg_args          a = { .trainers = 0,
		         .tensors               = 1,
		         .mode                  = FERRY_MODE_SYNC,
		         .steps                 = 100,
		         .warmup                = 3,
		         .lr                    = 0.1,
		         .timeout_ms            = 120000 };
	static struct lg_shared sh;
	static struct lg_watch  wt;
	int                     ok = 1;

	if (parse_args(&a, argc, argv) != 0) {
		return 2;
	}
	if (shared_init(&sh, &a) != 0) {
		fprintf(stderr, "loadgen: out of memory\n");
		return 1;
	}
	struct lg_rank *r  = calloc((size_t) a.ranks, sizeof(*r));
	pthread_t      *th = calloc((size_t) a.ranks, sizeof(*th));
	if (r == NULL || th == NULL) {
		fprintf(stderr, "loadgen: out of memory\n");
		return 1;
	}
	pthread_barrier_init(&sh.bar, NULL, (unsigned) a.ranks + 1);
	for (int i = 0; i < a.ranks; i++) {
		r[i].sh    = &sh;
		r[i].rank  = a.rank_base + i;
		r[i].times = calloc((size_t) a.steps, sizeof(double));
		if (r[i].times == NULL ||
		    pthread_create(&th[i], NULL, rank_main, &r[i]) != 0) {
			fprintf(stderr, "loadgen: cannot start rank %d\n",
			    r[i].rank);
			return 1;
		}
	}
	double elapsed = run_window(&sh, &wt);
	for (int i = 0; i < a.ranks; i++) {
		pthread_join(th[i], NULL);
		if (r[i].rv != 0) {
			fprintf(stderr, "loadgen: rank %d: %s\n", r[i].rank,
			    r[i].err);
			ok = 0;
		}
	}
	if (ok && a.quadratic && a.rank_base == 0 &&
	    !(r[0].loss_last < r[0].loss_first)) {
		fprintf(stderr, "loadgen: loss did not fall (%g -> %g)\n",
		    r[0].loss_first, r[0].loss_last);
		ok = 0;
	}
	double pps = ok ? (double) a.ranks * a.steps / elapsed : 0;
	fprintf(stderr,
	    "loadgen: %d/%d ranks %s %zu floats: %d steps in %.3f s, "
	    "%.1f push-pulls/s, %.3f GB/s%s\n",
	    a.ranks, a.trainers, a.mode == FERRY_MODE_SYNC ? "sync" : "async",
	    a.floats, a.steps, elapsed, pps, pps * 8.0 * a.floats / 1e9,
	    ok ? "" : " (FAILED)");
	if (a.json != NULL) {
		FILE *f = fopen(a.json, "w");
		if (f == NULL) {
			fprintf(stderr, "loadgen: cannot write %s\n", a.json);
			return 1;
		}
		write_json(f, &a, r, &wt, elapsed, ok);
		fclose(f);
	}
	for (int i = 0; i < a.ranks; i++) {
		free(r[i].times);
	}
	free(r);
	free(th);
	free(sh.grad);
	free(sh.target);
	return ok ? 0 : 1;
}
