// snapshot_bench.c — how fast a parameter server writes its snapshot and
// loads it back, on a job of a given size: a scheduler, one server (with
// --snapshot-dir) and one trainer (libferry) in this process. Each
// repetition times ps_server_snapshot (the copy under the lock, the
// CRC, write, fsync, rename and the directory's fsync) and then a restore:
// the file's pages are dropped from the page cache (posix_fadvise), a new
// job is started on the same directory and the server's own restore time
// (read, CRC, checks, copy into the shards; stats "restore_us") is read
// back. Prints one JSON line per repetition:
//   {"bytes": B, "first_s": S, "write_s": S, "file_s": S, "restore_s": S}
// first_s is the server's first ps_server_snapshot (its buffer is faulted
// in), write_s the second (the steady state: the buffer is reused), file_s
// the writer thread's part of it (CRC, write, fsync, rename, directory
// fsync).
//
//   snapshot_bench DIR [MB] [REPS]     (defaults: 256 MB, 3 repetitions)
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fb/fb.h"
#include "ferry/ferry.h"
#include "ps/ps.h"

struct job {
	struct ps_scheduler *sched;
	struct ps_server    *srv;
	ferry_client        *c;
};

static void
die(const char *what, int rv)
{
	fprintf(stderr, "snapshot_bench: %s: %s\n", what, fb_strerror(rv));
	exit(1);
}

// job_open starts a job of n floats (tensors of at most 64 Mi floats) on
// dir; w holds the initial weights (and receives the pulled ones).
static void
job_open(struct job *j, const char *dir, int restore, float **w, size_t *lens,
    int nt)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ferry_opts        fo = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[64];
	char                     names[64][16];
	int                      rv;

	so.url         = "tcp://127.0.0.1:0";
	so.shard_bytes = 16u << 20;
	so.max_msg     = 1u << 30;
	if ((rv = ps_scheduler_open(&so, &j->sched)) != FB_OK) {
		die("scheduler", rv);
	}
	o.url           = "tcp://127.0.0.1:0";
	o.scheduler_url = ps_scheduler_url(j->sched);
	o.max_msg       = 1u << 30;
	o.snapshot_dir  = dir;
	o.restore       = restore;
	if ((rv = ps_server_open(&o, &j->srv)) != FB_OK) {
		die("server", rv);
	}
	fo.scheduler_url = ps_scheduler_url(j->sched);
	fo.timeout_ms    = 120000;
	for (int t = 0; t < nt; t++) {
		snprintf(names[t], sizeof(names[t]), "t%d", t);
		d[t].name = names[t];
		d[t].len  = lens[t];
		d[t].kind = FERRY_TENSOR_WEIGHTS;
	}
	if (ferry_client_open(&fo, &j->c) != 0 ||
	    ferry_client_declare(j->c, d, (size_t) nt) != 0 ||
	    ferry_client_init_weights(j->c, (const float *const *) w) != 0 ||
	    ferry_client_pull(j->c, w) != 0) {
		fprintf(stderr, "snapshot_bench: trainer: %s\n",
		    ferry_client_last_error(j->c));
		exit(1);
	}
}

static void
job_close(struct job *j)
{
	ferry_client_close(j->c);
	ps_server_close(j->srv);
	ps_scheduler_close(j->sched);
}

static uint64_t
stat_u64(struct ps_server *s, const char *key)
{
	char        text[4096], pat[64];
	const char *p;
	ps_server_stats(s, text, sizeof(text));
	snprintf(pat, sizeof(pat), "\n%s:", key);
	p = strstr(text, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

int
main(int argc, char **argv)
{
	const char *dir  = argc > 1 ? argv[1] : NULL;
	long        mb   = argc > 2 ? atol(argv[2]) : 256;
	int         reps = argc > 3 ? atoi(argv[3]) : 3;
	size_t      n, lens[64];
	float      *w[64];
	int         nt = 0;
	char        path[512];

	if (dir == NULL || mb < 1 || mb > 16384 || reps < 1) {
		fprintf(stderr, "usage: snapshot_bench DIR [MB] [REPS]\n");
		return 2;
	}
	fb_log_set_level(FB_LOG_WARN);
	n = (size_t) mb << 18; // floats
	for (size_t left = n; left > 0 && nt < 64; nt++) {
		lens[nt] = left > (64u << 20) ? 64u << 20 : left;
		left -= lens[nt];
		if ((w[nt] = malloc(lens[nt] * sizeof(float))) == NULL) {
			die("weights", FB_ENOMEM);
		}
		for (size_t i = 0; i < lens[nt]; i++) {
			w[nt][i] = (float) (i % 1000) * 0.001f;
		}
	}
	snprintf(path, sizeof(path), "%s/server-0.snap", dir);
	for (int r = 0; r < reps; r++) {
		struct job j;
		uint64_t   t0, t1, v;
		double     first_s = 0, write_s = 0, file_s = 0;
		int        rv, fd;

		job_open(&j, dir, PS_RESTORE_NO, w, lens, nt);
		// The first snapshot of a server also faults in its buffer;
		// later ones reuse it: time both.
		for (int k = 0; k < 2; k++) {
			t0 = fb_clock_ns();
			rv = ps_server_snapshot(j.srv, 0, 600000, &v);
			if (rv != FB_OK) {
				die("snapshot", rv);
			}
			t1      = fb_clock_ns();
			first_s = k == 0 ? (double) (t1 - t0) * 1e-9 : first_s;
			write_s = (double) (t1 - t0) * 1e-9;
			file_s  = (double) stat_u64(j.srv,
			              "snapshot_write_us") *
			    1e-6;
		}
		job_close(&j);
		// Cold read: the file's (clean, fsync'ed) pages leave the
		// cache.
		if ((fd = open(path, O_RDONLY)) >= 0) {
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
		job_open(&j, dir, PS_RESTORE_YES, w, lens, nt);
		printf("{\"bytes\": %llu, \"first_s\": %.6f, \"write_s\": "
		       "%.6f, \"file_s\": %.6f, \"restore_s\": %.6f}\n",
		    (unsigned long long) stat_u64(j.srv, "restore_bytes"),
		    first_s, write_s, file_s,
		    (double) stat_u64(j.srv, "restore_us") * 1e-6);
		fflush(stdout);
		job_close(&j);
	}
	for (int t = 0; t < nt; t++) {
		free(w[t]);
	}
	return 0;
}
