// cpus.c — --cpus: the CPUs ps-server's threads run on (see cpus.h DESIGN).
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpus.h"

char *
ps__cpus_format(const cpu_set_t *set, char *buf, size_t n)
{
	size_t used = 0;
	if (n == 0) {
		return buf;
	}
	buf[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, set)) {
			continue;
		}
		int last = c;
		while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set)) {
			last++;
		}
		int w = last > c ? snprintf(buf + used, n - used, "%s%d-%d",
		                       used ? "," : "", c, last)
		                 : snprintf(buf + used, n - used, "%s%d",
		                       used ? "," : "", c);
		if (w < 0 || (size_t) w >= n - used) {
			break; // truncated: what fits stays
		}
		used += (size_t) w;
		c = last;
	}
	return buf;
}

// cpu_number reads a CPU number at *p (digits only) and moves *p past it.
// Returns the number, or -1 when there are no digits or it is too large.
static int
cpu_number(const char **p)
{
	long v = 0;
	if (**p < '0' || **p > '9') {
		return -1;
	}
	while (**p >= '0' && **p <= '9') {
		v = v * 10 + (**p - '0');
		if (v >= CPU_SETSIZE) {
			return -1;
		}
		(*p)++;
	}
	return (int) v;
}

int
ps__cpus_parse(const char *spec, int is_scheduler, const cpu_set_t *allowed,
    int now, cpu_set_t *out, char *err, size_t n)
{
	char have[256];
	CPU_ZERO(out);
	if (strcmp(spec, "all") == 0 ||
	    (strcmp(spec, "auto") == 0 && !is_scheduler)) {
		*out = *allowed;
		return 0;
	}
	if (strcmp(spec, "auto") == 0) {
		if (now < 0 || now >= CPU_SETSIZE ||
		    !CPU_ISSET(now, allowed)) {
			for (now = 0; now < CPU_SETSIZE; now++) {
				if (CPU_ISSET(now, allowed)) {
					break;
				}
			}
		}
		if (now < CPU_SETSIZE) {
			CPU_SET(now, out);
		} else {
			*out = *allowed; // none allowed at all: leave it be
		}
		return 0;
	}
	const char *p = spec;
	for (;;) {
		const char *at = p;
		int         lo = cpu_number(&p), hi = lo;
		if (lo >= 0 && *p == '-') {
			p++;
			hi = cpu_number(&p);
		}
		if (lo < 0 || hi < lo || (*p != ',' && *p != '\0')) {
			snprintf(err, n,
			    "--cpus=%s: \"%.*s\" is not a CPU number or range "
			    "(a list such as 0-3,8, or auto, or all; CPUs "
			    "below %d)",
			    spec, (int) strcspn(at, ","), at, CPU_SETSIZE);
			return -1;
		}
		for (int c = lo; c <= hi; c++) {
			if (!CPU_ISSET(c, allowed)) {
				snprintf(err, n,
				    "--cpus=%s: CPU %d is not one this process "
				    "may run on (allowed: %s)",
				    spec, c,
				    ps__cpus_format(allowed, have,
				        sizeof(have)));
				return -1;
			}
			CPU_SET(c, out);
		}
		if (*p == '\0') {
			return 0;
		}
		p++; // past the comma
	}
}

int
ps__cpus_apply(const char *spec, int is_scheduler, char *err, size_t n)
{
	cpu_set_t allowed, want;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
		// Cannot tell what is allowed (a kernel without affinity):
		// a list still gets checked for its syntax below.
		CPU_ZERO(&allowed);
		for (int c = 0; c < CPU_SETSIZE; c++) {
			CPU_SET(c, &allowed);
		}
		if (ps__cpus_parse(spec, is_scheduler, &allowed, -1, &want,
		        err, n) != 0) {
			return -1;
		}
		return 0;
	}
	if (ps__cpus_parse(spec, is_scheduler, &allowed, sched_getcpu(), &want,
	        err, n) != 0) {
		return -1;
	}
	if (is_scheduler && strcmp(spec, "auto") == 0) {
		// Batch scheduling: a thread nng wakes waits for the waker
		// to block instead of preempting it half-way through its
		// message (see cpus.h). Best effort: a kernel or a sandbox
		// that refuses keeps the default policy.
		struct sched_param none = { 0 };
		(void) sched_setscheduler(0, SCHED_BATCH, &none);
	}
	if (CPU_EQUAL(&want, &allowed)) {
		return 0;
	}
	if (sched_setaffinity(0, sizeof(want), &want) != 0) {
		snprintf(err, n, "--cpus=%s: sched_setaffinity: %s", spec,
		    strerror(errno));
		return -1;
	}
	return 0;
}
