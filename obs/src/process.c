// process.c — the process's own numbers, read from /proc/self at scrape
// time: CPU seconds (user + system, from stat), resident memory (statm)
// and the start time. A file that cannot be read or parsed leaves its
// sample out rather than report a made-up number.
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "obs_impl.h"

// read_file reads up to n-1 bytes of path into buf (NUL-terminated).
static int
read_file(const char *path, char *buf, size_t n)
{
	FILE  *f = fopen(path, "r");
	size_t k;
	if (f == NULL) {
		return -1;
	}
	k = fread(buf, 1, n - 1, f);
	fclose(f);
	buf[k] = '\0';
	return k > 0 ? 0 : -1;
}

// stat_fields reads utime, stime (fields 14, 15) and starttime (22) of
// /proc/self/stat, in clock ticks. The command name (field 2) may hold
// spaces and parentheses, so parsing starts after its last ')'.
static int
stat_fields(unsigned long long *ut, unsigned long long *st,
    unsigned long long *start)
{
	char        buf[1024];
	const char *p;
	if (read_file("/proc/self/stat", buf, sizeof(buf)) != 0 ||
	    (p = strrchr(buf, ')')) == NULL) {
		return -1;
	}
	// After ')': field 3 (state) onwards.
	if (sscanf(p + 1,
	        " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
	        "%*d %*d %*d %*d %*d %*d %llu",
	        ut, st, start) != 3) {
		return -1;
	}
	return 0;
}

// boot_time returns the system's boot time in Unix seconds (btime of
// /proc/stat), or 0.
static double
boot_time(void)
{
	char        buf[8192];
	const char *p;
	if (read_file("/proc/stat", buf, sizeof(buf)) != 0 ||
	    (p = strstr(buf, "\nbtime ")) == NULL) {
		return 0;
	}
	return strtod(p + 7, NULL);
}

static void
collect(void *arg, struct obs_writer *w)
{
	unsigned long long ut, st, start, pages, rss;
	long               tick = sysconf(_SC_CLK_TCK);
	long               page = sysconf(_SC_PAGESIZE);
	char               buf[256];
	(void) arg;

	obs_write_family(w, "ferry_process_cpu_seconds_total",
	    "User and system CPU time of the process, in seconds.",
	    OBS_COUNTER);
	if (stat_fields(&ut, &st, &start) == 0 && tick > 0) {
		obs_write_sample(w, "ferry_process_cpu_seconds_total", NULL,
		    (double) (ut + st) / (double) tick);
	}
	obs_write_family(w, "ferry_process_resident_memory_bytes",
	    "Resident set size of the process, in bytes.", OBS_GAUGE);
	if (read_file("/proc/self/statm", buf, sizeof(buf)) == 0 &&
	    sscanf(buf, "%llu %llu", &pages, &rss) == 2 && page > 0) {
		obs_write_sample(w, "ferry_process_resident_memory_bytes",
		    NULL, (double) rss * (double) page);
	}
	obs_write_family(w, "ferry_process_start_time_seconds",
	    "Start time of the process since the Unix epoch, in seconds.",
	    OBS_GAUGE);
	if (stat_fields(&ut, &st, &start) == 0 && tick > 0) {
		double bt = boot_time();
		if (bt > 0) {
			obs_write_sample(w, "ferry_process_start_time_seconds",
			    NULL, bt + (double) start / (double) tick);
		}
	}
}

int
obs_process_register(struct obs_registry *r)
{
	return obs_collector_add(r, collect, NULL);
}
