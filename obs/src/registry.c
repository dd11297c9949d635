// registry.c — the metrics registry: families and their series, relaxed
// atomic updates, and the walk that writes them in the Prometheus text
// format (the format itself is text.c's).
//
// DESIGN. A family (one metric name) holds its series in registration
// order; a series holds one value: an integer counter, a gauge's double
// (as its bit pattern in an atomic uint64, so that set and add are
// lock-free), or a histogram's bucket counts, count and sum. Everything is
// allocated at registration; an update is one to three relaxed atomic
// operations and never allocates. A scrape reads each atomic once, so a
// histogram's buckets, count and sum may be a few observations apart from
// each other: Prometheus tolerates that, and no lock on the hot path is
// worth exactness here. Families are found by name with a linear search
// at registration only.
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "obs_impl.h"

const double obs_latency_buckets[] = { 50e-6, 100e-6, 250e-6, 500e-6, 1e-3,
	2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5,
	10, 30, 60 };
const size_t obs_latency_nbuckets  = sizeof(obs_latency_buckets) /
    sizeof(obs_latency_buckets[0]);

struct obs_metric {
	struct obs_family    *fam;
	char                  labels[OBS_LABELS_MAX];
	unsigned              flags;
	atomic_uint_fast64_t  u;   // counter value, gauge bits, hist count
	atomic_uint_fast64_t  sum; // histogram: the sum's bits
	atomic_uint_fast64_t *bkt; // histogram: [nbounds] (not cumulative)
	struct obs_metric    *next;
};

struct obs_family {
	char               name[OBS_NAME_MAX];
	char              *help;
	enum obs_type      type;
	double             bounds[OBS_MAX_BUCKETS];
	size_t             nbounds;
	struct obs_metric *first, *last;
	struct obs_family *next;
};

struct obs_collector {
	obs_collect_fn        fn;
	void                 *arg;
	struct obs_collector *next;
};

struct obs_registry {
	struct obs_family    *first, *last;
	struct obs_collector *coll, *coll_last;
};

static uint64_t
dbits(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

static double
bitsd(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

// add_double adds v to the double whose bits a holds (CAS loop).
static void
add_double(atomic_uint_fast64_t *a, double v)
{
	uint_fast64_t old = atomic_load_explicit(a, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(a, &old,
	    dbits(bitsd(old) + v), memory_order_relaxed,
	    memory_order_relaxed)) {
	}
}

// name_ok reports whether n is a valid metric name that fits.
static int
name_ok(const char *n)
{
	if (n == NULL || *n == '\0' || strlen(n) >= OBS_NAME_MAX ||
	    !(obs__alpha(n[0]) || n[0] == '_' || n[0] == ':')) {
		return 0;
	}
	for (const char *p = n; *p; p++) {
		if (!(obs__alpha(*p) || (*p >= '0' && *p <= '9') ||
		        *p == '_' || *p == ':')) {
			return 0;
		}
	}
	return 1;
}

int
obs_registry_alloc(struct obs_registry **out)
{
	struct obs_registry *r = fb_zalloc(sizeof(*r));
	if (r == NULL) {
		return FB_ENOMEM;
	}
	*out = r;
	return FB_OK;
}

void
obs_registry_free(struct obs_registry *r)
{
	if (r == NULL) {
		return;
	}
	for (struct obs_family *f = r->first, *fn; f != NULL; f = fn) {
		fn = f->next;
		for (struct obs_metric *m = f->first, *mn; m != NULL; m = mn) {
			mn = m->next;
			fb_free(m->bkt);
			fb_free(m);
		}
		fb_free(f->help);
		fb_free(f);
	}
	for (struct obs_collector *c = r->coll, *cn; c != NULL; c = cn) {
		cn = c->next;
		fb_free(c);
	}
	fb_free(r);
}

// family_get finds family name or makes it; FB_EINVAL when it exists with
// another type or other buckets.
static int
family_get(struct obs_registry *r, enum obs_type type, const char *name,
    const char *help, const double *bounds, size_t nb, struct obs_family **out)
{
	struct obs_family *f;
	for (f = r->first; f != NULL; f = f->next) {
		if (strcmp(f->name, name) == 0) {
			if (f->type != type || f->nbounds != nb ||
			    (nb > 0 &&
			        memcmp(f->bounds, bounds,
			            nb * sizeof(double)))) {
				return FB_EINVAL;
			}
			*out = f;
			return FB_OK;
		}
	}
	if ((f = fb_zalloc(sizeof(*f))) == NULL) {
		return FB_ENOMEM;
	}
	help = help != NULL ? help : "";
	if ((f->help = fb_alloc(strlen(help) + 1)) == NULL) {
		fb_free(f);
		return FB_ENOMEM;
	}
	memcpy(f->help, help, strlen(help) + 1);
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->type    = type;
	f->nbounds = nb;
	if (nb > 0) {
		memcpy(f->bounds, bounds, nb * sizeof(double));
	}
	if (r->last != NULL) {
		r->last->next = f;
	} else {
		r->first = f;
	}
	r->last = f;
	*out    = f;
	return FB_OK;
}

int
obs_metric_add(struct obs_registry *r, enum obs_type type, const char *name,
    const char *help, const char *labels, const double *bounds, size_t nbounds,
    unsigned flags, struct obs_metric **out)
{
	struct obs_family *f;
	struct obs_metric *m;
	int                rv;

	labels = labels != NULL ? labels : "";
	if (r == NULL || out == NULL || !name_ok(name) ||
	    strlen(labels) >= OBS_LABELS_MAX ||
	    (type == OBS_HISTOGRAM) != (nbounds > 0) ||
	    nbounds > OBS_MAX_BUCKETS) {
		return FB_EINVAL;
	}
	for (size_t i = 1; i < nbounds; i++) {
		if (!(bounds[i] > bounds[i - 1])) {
			return FB_EINVAL;
		}
	}
	if ((rv = family_get(r, type, name, help, bounds, nbounds, &f)) !=
	    FB_OK) {
		return rv;
	}
	if ((m = fb_zalloc(sizeof(*m))) == NULL) {
		return FB_ENOMEM;
	}
	if (nbounds > 0 &&
	    (m->bkt = fb_zalloc(nbounds * sizeof(*m->bkt))) == NULL) {
		fb_free(m);
		return FB_ENOMEM;
	}
	m->fam   = f;
	m->flags = flags;
	snprintf(m->labels, sizeof(m->labels), "%s", labels);
	atomic_init(&m->u, type == OBS_GAUGE ? dbits(0.0) : 0);
	atomic_init(&m->sum, dbits(0.0));
	if (f->last != NULL) {
		f->last->next = m;
	} else {
		f->first = m;
	}
	f->last = m;
	*out    = m;
	return FB_OK;
}

int
obs_collector_add(struct obs_registry *r, obs_collect_fn fn, void *arg)
{
	struct obs_collector *c;
	if (r == NULL || fn == NULL) {
		return FB_EINVAL;
	}
	if ((c = fb_zalloc(sizeof(*c))) == NULL) {
		return FB_ENOMEM;
	}
	c->fn  = fn;
	c->arg = arg;
	if (r->coll_last != NULL) {
		r->coll_last->next = c;
	} else {
		r->coll = c;
	}
	r->coll_last = c;
	return FB_OK;
}

void
obs_counter_add(struct obs_metric *m, uint64_t v)
{
	atomic_fetch_add_explicit(&m->u, v, memory_order_relaxed);
}

void
obs_counter_set(struct obs_metric *m, uint64_t v)
{
	atomic_store_explicit(&m->u, v, memory_order_relaxed);
}

void
obs_gauge_set(struct obs_metric *m, double v)
{
	atomic_store_explicit(&m->u, dbits(v), memory_order_relaxed);
}

void
obs_gauge_add(struct obs_metric *m, double v)
{
	add_double(&m->u, v);
}

void
obs_histogram_observe(struct obs_metric *m, double v)
{
	const struct obs_family *f = m->fam;
	size_t                   i = 0;
	// A handful of bounds: a linear scan beats a binary search here.
	while (i < f->nbounds && v > f->bounds[i]) {
		i++;
	}
	if (i < f->nbounds) {
		atomic_fetch_add_explicit(&m->bkt[i], 1, memory_order_relaxed);
	}
	add_double(&m->sum, v);
	atomic_fetch_add_explicit(&m->u, 1, memory_order_relaxed);
}

double
obs_metric_value(const struct obs_metric *m)
{
	uint64_t u = atomic_load_explicit((atomic_uint_fast64_t *) &m->u,
	    memory_order_relaxed);
	return m->fam->type == OBS_GAUGE ? bitsd(u) : (double) u;
}

// write_histogram writes the cumulative buckets, _sum and _count of m.
static void
write_histogram(struct obs_writer *w, const struct obs_metric *m)
{
	const struct obs_family *f = m->fam;
	char                     name[OBS_NAME_MAX + 16];
	char                     lab[OBS_LABELS_MAX + 48];
	const char              *sep = m->labels[0] ? "," : "";
	uint64_t                 cum = 0, count;

	snprintf(name, sizeof(name), "%s_bucket", f->name);
	for (size_t i = 0; i < f->nbounds; i++) {
		char le[40];
		cum += atomic_load_explicit(&m->bkt[i], memory_order_relaxed);
		obs__fmt_double(le, sizeof(le), f->bounds[i]);
		snprintf(lab, sizeof(lab), "%s%sle=\"%s\"", m->labels, sep,
		    le);
		obs_write_sample(w, name, lab, (double) cum);
	}
	count = atomic_load_explicit(&m->u, memory_order_relaxed);
	// The count was read last: it covers every bucket read above.
	count = count < cum ? cum : count;
	snprintf(lab, sizeof(lab), "%s%sle=\"+Inf\"", m->labels, sep);
	obs_write_sample(w, name, lab, (double) count);
	snprintf(name, sizeof(name), "%s_sum", f->name);
	obs_write_sample(w, name, m->labels,
	    bitsd(atomic_load_explicit(&m->sum, memory_order_relaxed)));
	snprintf(name, sizeof(name), "%s_count", f->name);
	obs_write_sample(w, name, m->labels, (double) count);
}

int
obs_registry_write(struct obs_registry *r, struct obs_writer *w)
{
	for (struct obs_family *f = r->first; f != NULL; f = f->next) {
		obs_write_family(w, f->name, f->help, f->type);
		for (struct obs_metric *m = f->first; m != NULL; m = m->next) {
			if ((m->flags & OBS_HIDE_ZERO) &&
			    atomic_load_explicit(&m->u,
			        memory_order_relaxed) == 0) {
				continue;
			}
			if (f->type == OBS_HISTOGRAM) {
				write_histogram(w, m);
			} else {
				obs_write_sample(w, f->name, m->labels,
				    obs_metric_value(m));
			}
		}
	}
	for (struct obs_collector *c = r->coll; c != NULL; c = c->next) {
		c->fn(c->arg, w);
	}
	return w->err;
}
