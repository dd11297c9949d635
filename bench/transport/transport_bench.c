// transport_bench.c — Ferry's transport benchmark and its ceiling.
//
// Sweep mode (default): for each transport (tcp:// loopback, ipc://), each
// topology (P clients -> P servers, P = 1, 2) and each payload size, start a
// fresh job (ps-server scheduler + P servers as child processes, async mode,
// one float32 tensor of the payload size) and time libferry's push, pull and
// push-pull from P client threads. In the same run, the same clients time a
// raw nng REQ/REP exchange of the same bytes against P child echo servers
// (this program with --echo-server): "echo" (payload both ways, the ceiling
// of push-pull), "send" (payload up, 8 bytes back: the ceiling of push) and
// "recv" (8 bytes up, payload back: the ceiling of pull). The payload is
// split the way Ferry's placement splits it: shards of --shard-bytes dealt
// round-robin over the servers, one message per server, sent in parallel.
//
// Goodput = payload bytes moved per second over all clients, counting both
// directions for push-pull and echo. Each cell is timed --repeats times
// (each at least --min-time seconds); goodput is the median of repeats,
// latency p50/p99 are over every operation of every repeat.
//
// Scale mode (--scale 1,4,16,64): one server, N client threads (ranks) of
// one async job pushing and pulling a fixed model (--model-floats, default
// the Fashion-MNIST MLP's 235146 floats) for --duration seconds: push-pulls
// per second, aggregation GB/s (pushes/s * model bytes) and the server's
// RSS (VmRSS and VmHWM from /proc/PID/status).
//
// Output: a table on stdout and, with --json FILE, one JSON object
// {"transport": [...]} or {"scale": [...]}.
#define _GNU_SOURCE
#include <errno.h>
#include <ferry/ferry.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_P 64
#define MAX_SERVERS 4
#define MAX_OPS 200000

static const char *ps_bin      = "build/ps/ps-server";
static double      min_time    = 0.3;
static int         repeats     = 3;
static size_t      shard_bytes = 1048576;
static char        tmpdir[256];
static int         cluster_seq;
// "tcp+signed": tcp with --secret-file on every process (docs/security.md),
// so that one run compares signed goodput with plain.
static int         signing;
static char        secret_path[300];
// "tls": tcp with mutual TLS on every process (--tls-cert, --tls-key,
// --tls-ca; certificates of a throw-away CA made once per run with
// scripts/tls-certs.sh). The raw echo stays plain tcp.
static int         tls;
static char        tls_dir[300];

static double
now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static void
die(const char *fmt, const char *a)
{
	fprintf(stderr, "transport_bench: ");
	fprintf(stderr, fmt, a);
	fprintf(stderr, "\n");
	exit(1);
}

// ---- child processes --------------------------------------------------

struct proc {
	pid_t pid;
	char  url[256];
};

static int
read_url(const char *path, char *url, size_t n, pid_t pid)
{
	for (int i = 0; i < 400; i++) {
		FILE *f = fopen(path, "r");
		if (f != NULL) {
			size_t k = fread(url, 1, n - 1, f);
			fclose(f);
			url[k] = '\0';
			while (k > 0 &&
			    (url[k - 1] == '\n' || url[k - 1] == ' ')) {
				url[--k] = '\0';
			}
			if (k > 0) {
				return 0;
			}
		}
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

// spawn runs argv with stderr to log, waits for url_file, fills p.
static int
spawn(char *const argv[], const char *url_file, const char *log,
    struct proc *p)
{
	unlink(url_file);
	pid_t pid = fork();
	if (pid < 0) {
		return -1;
	}
	if (pid == 0) {
		FILE *f = freopen(log, "w", stderr);
		(void) f;
		execv(argv[0], argv);
		_exit(127);
	}
	p->pid = pid;
	return read_url(url_file, p->url, sizeof(p->url), pid);
}

static void
stop(struct proc *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		waitpid(p->pid, NULL, 0);
		p->pid = 0;
	}
}

static void
listen_url(const char *transport, char *buf, size_t n, const char *what)
{
	if (strcmp(transport, "ipc") == 0) {
		snprintf(buf, n, "ipc://%s/%s-%d.sock", tmpdir, what,
		    cluster_seq++);
	} else {
		snprintf(buf, n, "tcp://127.0.0.1:0");
	}
}

struct cluster {
	struct proc sched, srv[MAX_SERVERS];
	int         n_srv;
};

static int
cluster_up(struct cluster *c, const char *transport, int servers, int trainers)
{
	char a_role[64], a_tr[64], a_sv[64], a_sb[64], a_listen[400],
	    a_url[400], a_sched[400], urlf[300], logf[300];
	char a_secret[340], a_cert[340], a_key[340], a_ca[340];
	char a_scert[340], a_skey[340]; // the scheduler's own certificate
	memset(c, 0, sizeof(*c));
	c->n_srv = servers;
	signing  = strstr(transport, "+signed") != NULL;
	tls      = strcmp(transport, "tls") == 0;
	if (tls && *tls_dir == '\0') {
		char cmd[700];
		snprintf(tls_dir, sizeof(tls_dir), "%s/tls", tmpdir);
		snprintf(cmd, sizeof(cmd),
		    "bash scripts/tls-certs.sh %s scheduler server trainer",
		    tls_dir);
		if (system(cmd) != 0) {
			die("cannot make certificates (%s)", cmd);
		}
	}
	snprintf(a_cert, sizeof(a_cert), "--tls-cert=%s/server.pem", tls_dir);
	snprintf(a_key, sizeof(a_key), "--tls-key=%s/server.key", tls_dir);
	snprintf(a_ca, sizeof(a_ca), "--tls-ca=%s/ca.pem", tls_dir);
	// Members accept maps only from ferry-scheduler's certificate.
	snprintf(a_scert, sizeof(a_scert), "--tls-cert=%s/scheduler.pem",
	    tls_dir);
	snprintf(a_skey, sizeof(a_skey), "--tls-key=%s/scheduler.key",
	    tls_dir);
	if (signing) {
		snprintf(secret_path, sizeof(secret_path), "%s/job.key",
		    tmpdir);
		FILE *kf = fopen(secret_path, "w");
		if (kf == NULL) {
			die("cannot write %s", secret_path);
		}
		fputs("transport bench key, not secret\n", kf);
		fclose(kf);
		snprintf(a_secret, sizeof(a_secret), "--secret-file=%s",
		    secret_path);
	}
	listen_url(transport, urlf, sizeof(urlf), "sched");
	snprintf(a_listen, sizeof(a_listen), "--listen=%s", urlf);
	snprintf(urlf, sizeof(urlf), "%s/sched.url", tmpdir);
	snprintf(a_url, sizeof(a_url), "--url-file=%s", urlf);
	snprintf(logf, sizeof(logf), "%s/sched.log", tmpdir);
	snprintf(a_role, sizeof(a_role), "--role=scheduler");
	snprintf(a_tr, sizeof(a_tr), "--trainers=%d", trainers);
	snprintf(a_sv, sizeof(a_sv), "--servers=%d", servers);
	snprintf(a_sb, sizeof(a_sb), "--shard-bytes=%zu", shard_bytes);
	char *sargv[] = { (char *) ps_bin, a_role, a_tr, a_sv, a_sb, a_listen,
		a_url, "--log-level=warn", tls ? a_scert : NULL, a_skey, a_ca,
		NULL };
	if (signing) {
		sargv[8] = a_secret;
		sargv[9] = NULL;
	}
	if (spawn(sargv, urlf, logf, &c->sched) != 0) {
		fprintf(stderr, "transport_bench: scheduler failed, see %s\n",
		    logf);
		return -1;
	}
	snprintf(a_sched, sizeof(a_sched), "--scheduler=%s", c->sched.url);
	for (int i = 0; i < servers; i++) {
		listen_url(transport, urlf, sizeof(urlf), "srv");
		snprintf(a_listen, sizeof(a_listen), "--listen=%s", urlf);
		snprintf(urlf, sizeof(urlf), "%s/srv%d.url", tmpdir, i);
		snprintf(a_url, sizeof(a_url), "--url-file=%s", urlf);
		snprintf(logf, sizeof(logf), "%s/srv%d.log", tmpdir, i);
		char *vargv[] = { (char *) ps_bin, "--role=server", a_sched,
			a_listen, a_url, "--log-level=warn",
			tls ? a_cert : NULL, a_key, a_ca, NULL };
		if (signing) {
			vargv[6] = a_secret;
			vargv[7] = NULL;
		}
		if (spawn(vargv, urlf, logf, &c->srv[i]) != 0) {
			fprintf(stderr,
			    "transport_bench: server failed, see %s\n", logf);
			return -1;
		}
	}
	return 0;
}

static void
cluster_down(struct cluster *c)
{
	for (int i = 0; i < c->n_srv; i++) {
		stop(&c->srv[i]);
	}
	stop(&c->sched);
}

// ---- raw nng echo server (child) ------------------------------------
// Request: 8-byte little-endian reply length R, then anything. R == ~0:
// echo the request message itself (no copy); else reply R bytes copied
// from a static buffer (as a pull copies weights into its reply).

struct echo_ctx {
	nng_socket sock;
	nng_ctx    ctx;
	nng_aio   *aio;
	int        sending;
};

static uint8_t *echo_src;
static size_t   echo_src_len;

static void
echo_cb(void *arg)
{
	struct echo_ctx *e = arg;
	if (nng_aio_result(e->aio) != 0) {
		if (e->sending) {
			nng_msg_free(nng_aio_get_msg(e->aio));
		}
		if (nng_aio_result(e->aio) == NNG_ECLOSED) {
			return;
		}
		e->sending = 0;
		nng_ctx_recv(e->ctx, e->aio);
		return;
	}
	if (e->sending) {
		e->sending = 0;
		nng_ctx_recv(e->ctx, e->aio);
		return;
	}
	nng_msg *m = nng_aio_get_msg(e->aio);
	uint64_t r = ~(uint64_t) 0;
	if (nng_msg_len(m) >= 8) {
		memcpy(&r, nng_msg_body(m), 8);
	}
	if (r != ~(uint64_t) 0) {
		nng_msg *o;
		if (r > echo_src_len || nng_msg_alloc(&o, r) != 0) {
			r = 0;
			nng_msg_alloc(&o, 0);
		}
		memcpy(nng_msg_body(o), echo_src, r);
		nng_msg_free(m);
		m = o;
	}
	e->sending = 1;
	nng_aio_set_msg(e->aio, m);
	nng_ctx_send(e->ctx, e->aio);
}

static int
echo_server(const char *url, const char *url_file)
{
	nng_socket      s;
	nng_listener    l;
	struct echo_ctx ctx[16];
	char            buf[256];
	size_t          sz = sizeof(buf);
	echo_src_len       = 256u << 20;
	echo_src           = calloc(1, echo_src_len);
	if (nng_rep0_open(&s) != 0) {
		return 1;
	}
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0);
	if (nng_listen(s, url, &l, 0) != 0) {
		fprintf(stderr, "echo: cannot listen on %s\n", url);
		return 1;
	}
	// Report the bound URL (port 0 resolved) like ps-server does.
	if (strncmp(url, "tcp://", 6) == 0) {
		int port = 0;
		nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port);
		snprintf(buf, sizeof(buf), "tcp://127.0.0.1:%d", port);
	} else {
		snprintf(buf, sizeof(buf), "%s", url);
	}
	(void) sz;
	for (int i = 0; i < 16; i++) {
		ctx[i].sock    = s;
		ctx[i].sending = 0;
		nng_ctx_open(&ctx[i].ctx, s);
		nng_aio_alloc(&ctx[i].aio, echo_cb, &ctx[i]);
		nng_ctx_recv(ctx[i].ctx, ctx[i].aio);
	}
	char tmp[300];
	snprintf(tmp, sizeof(tmp), "%s.tmp", url_file);
	FILE *f = fopen(tmp, "w");
	if (f == NULL) {
		return 1;
	}
	fprintf(f, "%s\n", buf);
	fclose(f);
	rename(tmp, url_file);
	for (;;) {
		pause();
	}
}

// ---- measurement ----------------------------------------------------

enum op { OP_PUSH, OP_PULL, OP_PUSHPULL, OP_ECHO, OP_SEND, OP_RECV, N_OPS };
static const char *op_names[N_OPS] = { "push", "pull", "push_pull", "echo",
	"send", "recv" };

struct shared {
	pthread_barrier_t bar;
	const char       *sched_url;
	const char       *echo_urls[MAX_SERVERS];
	int               n_servers, n_clients;
	size_t            payload; // bytes
	int               fail;
	// per op, per repeat: start/stop stamps from every client
	double            t_start[N_OPS][16], t_end[N_OPS][16];
	uint64_t          ops[N_OPS][16];
};

struct client {
	struct shared *sh;
	int            rank;
	double        *lat[N_OPS];
	size_t         n_lat[N_OPS];
	double         ep_start[N_OPS][16], ep_end[N_OPS][16];
	uint64_t       ep_ops[N_OPS][16];
};

// raw nng: one REQ socket per echo server.
struct raw {
	nng_socket s[MAX_SERVERS];
	nng_ctx    ctx[MAX_SERVERS];
	nng_aio   *aio[MAX_SERVERS];
	size_t     bytes[MAX_SERVERS]; // payload share per server
	int        n;
};

static int
raw_open(struct raw *r, struct shared *sh)
{
	memset(r, 0, sizeof(*r));
	r->n = sh->n_servers;
	// Ferry's split: shards of shard_bytes, round-robin over servers.
	size_t left = sh->payload;
	for (int k = 0; left > 0; k++) {
		size_t b = left < shard_bytes ? left : shard_bytes;
		r->bytes[k % r->n] += b;
		left -= b;
	}
	for (int i = 0; i < r->n; i++) {
		if (nng_req0_open(&r->s[i]) != 0) {
			return -1;
		}
		nng_socket_set_size(r->s[i], NNG_OPT_RECVMAXSZ, 0);
		nng_socket_set_ms(r->s[i], NNG_OPT_REQ_RESENDTIME,
		    NNG_DURATION_INFINITE);
		if (nng_dial(r->s[i], sh->echo_urls[i], NULL, 0) != 0 ||
		    nng_ctx_open(&r->ctx[i], r->s[i]) != 0 ||
		    nng_aio_alloc(&r->aio[i], NULL, NULL) != 0) {
			return -1;
		}
		nng_aio_set_timeout(r->aio[i], 60000);
	}
	return 0;
}

static void
raw_close(struct raw *r)
{
	for (int i = 0; i < r->n; i++) {
		nng_aio_free(r->aio[i]);
		nng_close(r->s[i]);
	}
}

// raw_op: one exchange with every server holding a share, in parallel.
static int
raw_op(struct raw *r, enum op op, const uint8_t *src)
{
	int rv = 0;
	for (int i = 0; i < r->n; i++) {
		nng_msg *m;
		size_t   up   = op == OP_RECV ? 8 : r->bytes[i];
		uint64_t want = op == OP_ECHO ? ~(uint64_t) 0
		    : op == OP_SEND           ? 8
		                              : r->bytes[i];
		if (r->bytes[i] == 0) {
			continue;
		}
		if (up < 8) {
			up = 8;
		}
		if (nng_msg_alloc(&m, up) != 0) {
			return -1;
		}
		memcpy(nng_msg_body(m), src, up); // as Ferry copies gradients
		memcpy(nng_msg_body(m), &want, 8);
		nng_aio_set_msg(r->aio[i], m);
		nng_ctx_send(r->ctx[i], r->aio[i]);
	}
	for (int i = 0; i < r->n; i++) {
		if (r->bytes[i] == 0) {
			continue;
		}
		nng_aio_wait(r->aio[i]);
		if (nng_aio_result(r->aio[i]) != 0) {
			nng_msg_free(nng_aio_get_msg(r->aio[i]));
			rv = -1;
			continue;
		}
		nng_ctx_recv(r->ctx[i], r->aio[i]);
	}
	for (int i = 0; i < r->n; i++) {
		if (r->bytes[i] == 0) {
			continue;
		}
		nng_aio_wait(r->aio[i]);
		if (nng_aio_result(r->aio[i]) != 0) {
			rv = -1;
			continue;
		}
		nng_msg *m = nng_aio_get_msg(r->aio[i]);
		nng_msg_free(m);
	}
	return rv;
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return x < y ? -1 : x > y;
}

// join_job opens a libferry client of rank `rank` on a one-tensor async
// job (rank 0 offers the initial weights w). Prints the error with `who`
// and returns non-zero on failure; *fc is set either way (may be NULL).
static int
join_job(const char *sched_url, int rank, const struct ferry_tensor_desc *d,
    float *const *w, ferry_client **fc, const char *who)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	char              cert[340], key[340], ca[340];
	int               rv;
	if (tls) {
		snprintf(cert, sizeof(cert), "%s/trainer.pem", tls_dir);
		snprintf(key, sizeof(key), "%s/trainer.key", tls_dir);
		snprintf(ca, sizeof(ca), "%s/ca.pem", tls_dir);
		o.tls_cert = cert;
		o.tls_key  = key;
		o.tls_ca   = ca;
	}
	o.scheduler_url = sched_url;
	o.rank          = rank;
	o.mode          = FERRY_MODE_ASYNC;
	o.lr            = 1e-9;
	o.timeout_ms    = 120000;
	*fc             = NULL;
	if ((rv = ferry_client_open(&o, fc)) != 0 ||
	    (signing &&
	        (rv = ferry_client_set_secret_file(*fc, secret_path)) != 0) ||
	    (rv = ferry_client_declare(*fc, d, 1)) != 0 ||
	    (rank == 0 &&
	        (rv = ferry_client_init_weights(*fc,
	             (const float *const *) w)) != 0)) {
		fprintf(stderr, "%s: rank %d: %s: %s\n", who, rank,
		    ferry_strerror(rv),
		    *fc ? ferry_client_last_error(*fc) : "");
		return -1;
	}
	return 0;
}

static void *
client_main(void *arg)
{
	struct client           *cl = arg;
	struct shared           *sh = cl->sh;
	ferry_client            *fc = NULL;
	struct raw               raw;
	size_t                   len   = sh->payload / 4;
	float                   *g     = calloc(len, 4);
	float                   *w     = calloc(len, 4);
	uint8_t                 *src   = calloc(sh->payload + 8, 1);
	const float *const       gp[1] = { g };
	float *const             wp[1] = { w };
	struct ferry_tensor_desc d     = { "t", len, FERRY_TENSOR_WEIGHTS };
	int                      rv;

	if (join_job(sh->sched_url, cl->rank, &d, wp, &fc,
	        "transport_bench") != 0) {
		sh->fail = 1;
	}
	if (raw_open(&raw, sh) != 0) {
		fprintf(stderr, "transport_bench: raw dial failed\n");
		sh->fail = 1;
	}
	pthread_barrier_wait(&sh->bar);
	if (!sh->fail && (rv = ferry_client_pull(fc, wp)) != 0) {
		fprintf(stderr, "transport_bench: pull v0: %s\n",
		    ferry_client_last_error(fc));
		sh->fail = 1;
	}
	for (int op = 0; op < N_OPS; op++) {
		cl->lat[op]   = malloc(MAX_OPS * sizeof(double));
		cl->n_lat[op] = 0;
	}
	// Interleave the ops per repeat so drift hits all of them alike.
	for (int rep = 0; rep < repeats; rep++) {
		for (int op = 0; op < N_OPS; op++) {
			pthread_barrier_wait(&sh->bar);
			if (sh->fail) {
				continue;
			}
			double   t0 = now_s(), t = t0;
			uint64_t n = 0;
			// Warm-up op, untimed.
			if (rep == 0) {
				if (op == OP_PUSH)
					rv = ferry_client_push(fc, gp, 1);
				else if (op == OP_PULL)
					rv = ferry_client_pull(fc, wp);
				else if (op == OP_PUSHPULL)
					rv = ferry_client_push_pull(fc, gp, 1,
					    wp);
				else
					rv = raw_op(&raw, (enum op) op, src);
				t0 = t = now_s();
			}
			while ((t - t0 < min_time || n < 3) && n < 5000) {
				double s = now_s();
				switch (op) {
				case OP_PUSH:
					rv = ferry_client_push(fc, gp, 1);
					break;
				case OP_PULL:
					rv = ferry_client_pull(fc, wp);
					break;
				case OP_PUSHPULL:
					rv = ferry_client_push_pull(fc, gp, 1,
					    wp);
					break;
				default:
					rv = raw_op(&raw, (enum op) op, src);
				}
				t = now_s();
				if (rv != 0) {
					fprintf(stderr,
					    "transport_bench: %s: %s\n",
					    op_names[op],
					    op < OP_ECHO
					        ? ferry_client_last_error(fc)
					        : "nng error");
					sh->fail = 1;
					break;
				}
				if (cl->n_lat[op] < MAX_OPS) {
					cl->lat[op][cl->n_lat[op]++] = t - s;
				}
				n++;
			}
			cl->ep_start[op][rep] = t0;
			cl->ep_end[op][rep]   = t;
			cl->ep_ops[op][rep]   = n;
		}
	}
	raw_close(&raw);
	ferry_client_close(fc);
	free(g);
	free(w);
	free(src);
	return NULL;
}

struct cell {
	double gbps, p50_us, p99_us;
};

static double
median(double *v, int n)
{
	qsort(v, (size_t) n, sizeof(double), cmp_d);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// run_point measures every op for one (transport, P, payload).
static int
run_point(const char *transport, int P, size_t payload, struct cell *out)
{
	struct cluster c;
	struct proc    echo[MAX_SERVERS];
	struct shared  sh;
	struct client  cl[MAX_P];
	pthread_t      th[MAX_P];
	int            rv = 0;

	memset(&sh, 0, sizeof(sh));
	memset(echo, 0, sizeof(echo));
	if (cluster_up(&c, transport, P, P) != 0) {
		cluster_down(&c);
		return -1;
	}
	for (int i = 0; i < P; i++) {
		char url[300], urlf[300], logf[300];
		listen_url(transport, url, sizeof(url), "echo");
		snprintf(urlf, sizeof(urlf), "%s/echo%d.url", tmpdir, i);
		snprintf(logf, sizeof(logf), "%s/echo%d.log", tmpdir, i);
		char *argv[] = { "/proc/self/exe", "--echo-server", url, urlf,
			NULL };
		char  self[512];
		ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (k > 0) {
			self[k] = '\0';
			argv[0] = self;
		}
		if (spawn(argv, urlf, logf, &echo[i]) != 0) {
			fprintf(stderr,
			    "transport_bench: echo server failed\n");
			rv = -1;
			goto done;
		}
		sh.echo_urls[i] = echo[i].url;
	}
	sh.sched_url = c.sched.url;
	sh.n_servers = P;
	sh.n_clients = P;
	sh.payload   = payload;
	pthread_barrier_init(&sh.bar, NULL, (unsigned) P);
	for (int i = 0; i < P; i++) {
		memset(&cl[i], 0, sizeof(cl[i]));
		cl[i].sh   = &sh;
		cl[i].rank = i;
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	}
	for (int i = 0; i < P; i++) {
		pthread_join(th[i], NULL);
	}
	pthread_barrier_destroy(&sh.bar);
	if (sh.fail) {
		rv = -1;
	}
	for (int op = 0; op < N_OPS && rv == 0; op++) {
		double g[16];
		size_t nl   = 0;
		int    both = op == OP_PUSHPULL || op == OP_ECHO;
		for (int rep = 0; rep < repeats; rep++) {
			double   t0 = 1e300, t1 = 0;
			uint64_t n = 0;
			for (int i = 0; i < P; i++) {
				if (cl[i].ep_start[op][rep] < t0)
					t0 = cl[i].ep_start[op][rep];
				if (cl[i].ep_end[op][rep] > t1)
					t1 = cl[i].ep_end[op][rep];
				n += cl[i].ep_ops[op][rep];
			}
			g[rep] = (double) n * (double) payload *
			    (both ? 2 : 1) * 8e-9 / (t1 - t0);
		}
		out[op].gbps = median(g, repeats);
		for (int i = 0; i < P; i++) {
			nl += cl[i].n_lat[op];
		}
		double *all = malloc((nl ? nl : 1) * sizeof(double));
		nl          = 0;
		for (int i = 0; i < P; i++) {
			memcpy(all + nl, cl[i].lat[op],
			    cl[i].n_lat[op] * sizeof(double));
			nl += cl[i].n_lat[op];
		}
		qsort(all, nl, sizeof(double), cmp_d);
		out[op].p50_us = nl ? all[nl / 2] * 1e6 : 0;
		out[op].p99_us = nl
		    ? all[(size_t) ((double) (nl - 1) * 0.99)] * 1e6
		    : 0;
		free(all);
	}
	for (int i = 0; i < P; i++) {
		for (int op = 0; op < N_OPS; op++) {
			free(cl[i].lat[op]);
		}
	}
done:
	for (int i = 0; i < P; i++) {
		stop(&echo[i]);
	}
	cluster_down(&c);
	return rv;
}

// ---- scale mode -------------------------------------------------------

struct sc_shared {
	const char       *sched_url;
	size_t            len;
	double            duration;
	pthread_barrier_t bar;
	volatile int      fail;
	int               done; // clients finished (atomic)
};
struct sc_client {
	struct sc_shared *sh;
	int               rank;
	uint64_t          ops;
	double            t0, t1;
};

static void *
sc_main(void *arg)
{
	struct sc_client        *cl    = arg;
	struct sc_shared        *sh    = cl->sh;
	ferry_client            *fc    = NULL;
	float                   *g     = calloc(sh->len, 4);
	float                   *w     = calloc(sh->len, 4);
	const float *const       gp[1] = { g };
	float *const             wp[1] = { w };
	struct ferry_tensor_desc d     = { "model", sh->len,
		    FERRY_TENSOR_WEIGHTS };
	if (join_job(sh->sched_url, cl->rank, &d, wp, &fc, "scale") != 0) {
		sh->fail = 1;
	}
	pthread_barrier_wait(&sh->bar);
	if (!sh->fail && ferry_client_pull(fc, wp) != 0) {
		sh->fail = 1;
	}
	pthread_barrier_wait(&sh->bar);
	cl->t0 = cl->t1 = now_s();
	while (!sh->fail && cl->t1 - cl->t0 < sh->duration) {
		if (ferry_client_push_pull(fc, gp, 1, wp) != 0) {
			fprintf(stderr, "scale: push_pull: %s\n",
			    ferry_client_last_error(fc));
			sh->fail = 1;
			break;
		}
		cl->ops++;
		cl->t1 = now_s();
	}
	ferry_client_close(fc);
	free(g);
	free(w);
	__atomic_add_fetch(&sh->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void
proc_rss(pid_t pid, long *rss_kb, long *hwm_kb)
{
	char  path[64], line[256];
	FILE *f;
	*rss_kb = *hwm_kb = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
	if ((f = fopen(path, "r")) == NULL) {
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "VmRSS: %ld", rss_kb);
		sscanf(line, "VmHWM: %ld", hwm_kb);
	}
	fclose(f);
}

static int
run_scale(const char *list, size_t len, double duration, FILE *json)
{
	char buf[256];
	int  first = 1;
	snprintf(buf, sizeof(buf), "%s", list);
	printf("%8s %12s %12s %12s %12s %12s\n", "clients", "pushes/s",
	    "agg_GB/s", "p_mean_ms", "rss_MB", "hwm_MB");
	if (json) {
		fprintf(json, "{\"scale\": [");
	}
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
		int               n = atoi(tok);
		struct cluster    c;
		struct sc_shared  sh;
		struct sc_client *cl = calloc((size_t) n, sizeof(*cl));
		pthread_t        *th = calloc((size_t) n, sizeof(*th));
		long              rss, hwm;
		if (n < 1 || n > 256) {
			die("bad client count '%s'", tok);
		}
		if (cluster_up(&c, "tcp", 1, n) != 0) {
			cluster_down(&c);
			return 1;
		}
		memset(&sh, 0, sizeof(sh));
		sh.sched_url = c.sched.url;
		sh.len       = len;
		sh.duration  = duration;
		pthread_barrier_init(&sh.bar, NULL, (unsigned) n);
		for (int i = 0; i < n; i++) {
			cl[i].sh   = &sh;
			cl[i].rank = i;
			pthread_create(&th[i], NULL, sc_main, &cl[i]);
		}
		// Sample the server's RSS while the clients run.
		long peak = 0;
		while (__atomic_load_n(&sh.done, __ATOMIC_SEQ_CST) < n) {
			proc_rss(c.srv[0].pid, &rss, &hwm);
			if (rss > peak) {
				peak = rss;
			}
			usleep(50000);
		}
		for (int i = 0; i < n; i++) {
			pthread_join(th[i], NULL);
		}
		proc_rss(c.srv[0].pid, &rss, &hwm);
		rss = peak;
		cluster_down(&c);
		if (sh.fail) {
			fprintf(stderr, "scale: %d clients failed\n", n);
			return 1;
		}
		double   t0 = 1e300, t1 = 0;
		uint64_t ops = 0;
		for (int i = 0; i < n; i++) {
			if (cl[i].t0 < t0)
				t0 = cl[i].t0;
			if (cl[i].t1 > t1)
				t1 = cl[i].t1;
			ops += cl[i].ops;
		}
		double rate = (double) ops / (t1 - t0);
		double gbs  = rate * (double) len * 4 * 1e-9;
		double lat  = rate > 0 ? (double) n / rate * 1e3 : 0;
		printf("%8d %12.1f %12.3f %12.3f %12.1f %12.1f\n", n, rate,
		    gbs, lat, rss / 1024.0, hwm / 1024.0);
		if (json) {
			fprintf(json,
			    "%s{\"clients\": %d, \"model_bytes\": %zu, "
			    "\"pushes_per_s\": %.1f, \"agg_gbytes_per_s\": %.4f, "
			    "\"mean_latency_ms\": %.3f, \"server_rss_mb\": %.1f, "
			    "\"server_hwm_mb\": %.1f, \"mode\": \"async\", "
			    "\"duration_s\": %.2f}",
			    first ? "" : ", ", n, len * 4, rate, gbs, lat,
			    rss / 1024.0, hwm / 1024.0, t1 - t0);
			first = 0;
		}
		pthread_barrier_destroy(&sh.bar);
		free(cl);
		free(th);
	}
	if (json) {
		fprintf(json, "]}\n");
	}
	return 0;
}

static void
usage(void)
{
	printf(
	    "usage: transport_bench [flags]\n"
	    "  --ps PATH          ps-server binary (default build/ps/ps-server)\n"
	    "  --payloads LIST    bytes, k/M suffixes (default 4k,64k,1M,16M,64M)\n"
	    "  --transports LIST  tcp,ipc,tcp+signed,tls (default tcp,ipc;\n"
	    "                     tcp+signed: every process --secret-file;\n"
	    "                     tls: every process --tls-*, raw echo tcp)\n"
	    "  --pairs LIST       clients=servers per point (default 1,2)\n"
	    "  --repeats N        timed repeats per cell (default 3)\n"
	    "  --min-time S       seconds per repeat at least (default 0.3)\n"
	    "  --shard-bytes N    job shard size (default 1048576)\n"
	    "  --scale LIST       scale mode: client counts, e.g. 1,4,16,64\n"
	    "  --model-floats N   scale mode model size (default 235146)\n"
	    "  --duration S       scale mode seconds per point (default 2)\n"
	    "  --json FILE        also write results as JSON\n"
	    "  --echo-server URL URLFILE   (internal) raw nng echo server\n");
}

static size_t
parse_size(const char *s)
{
	char  *end;
	double v = strtod(s, &end);
	if (*end == 'k' || *end == 'K')
		v *= 1024;
	else if (*end == 'M' || *end == 'm')
		v *= 1048576;
	return (size_t) v;
}

int
main(int argc, char **argv)
{
	const char *payloads   = "4k,64k,1M,16M,64M";
	const char *transports = "tcp,ipc";
	const char *pairs      = "1,2";
	const char *scale      = NULL;
	const char *json_path  = NULL;
	size_t      model      = 235146;
	double      duration   = 2.0;
	FILE       *json       = NULL;

	signal(SIGPIPE, SIG_IGN);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--echo-server") == 0 && i + 2 < argc) {
			return echo_server(argv[i + 1], argv[i + 2]);
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage();
			return 0;
		} else if (v == NULL) {
			die("%s needs a value (see --help)", a);
		} else if (strcmp(a, "--ps") == 0)
			ps_bin = v;
		else if (strcmp(a, "--payloads") == 0)
			payloads = v;
		else if (strcmp(a, "--transports") == 0)
			transports = v;
		else if (strcmp(a, "--pairs") == 0)
			pairs = v;
		else if (strcmp(a, "--repeats") == 0)
			repeats = atoi(v);
		else if (strcmp(a, "--min-time") == 0)
			min_time = atof(v);
		else if (strcmp(a, "--shard-bytes") == 0)
			shard_bytes = parse_size(v);
		else if (strcmp(a, "--scale") == 0)
			scale = v;
		else if (strcmp(a, "--model-floats") == 0)
			model = (size_t) atol(v);
		else if (strcmp(a, "--duration") == 0)
			duration = atof(v);
		else if (strcmp(a, "--json") == 0)
			json_path = v;
		else
			die("unknown flag %s (see --help)", a);
		i++;
	}
	if (repeats < 1 || repeats > 16) {
		die("--repeats must be 1..16%s", "");
	}
	if (access(ps_bin, X_OK) != 0) {
		die("ps-server not found at %s (use --ps)", ps_bin);
	}
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/ferry-tbench.XXXXXX");
	if (mkdtemp(tmpdir) == NULL) {
		die("mkdtemp failed%s", "");
	}
	if (json_path && (json = fopen(json_path, "w")) == NULL) {
		die("cannot write %s", json_path);
	}
	if (scale != NULL) {
		int rv = run_scale(scale, model, duration, json);
		if (json)
			fclose(json);
		return rv;
	}
	printf("%-4s %2s %10s %-10s %10s %10s %10s\n", "tr", "P", "payload",
	    "op", "Gbps", "p50_us", "p99_us");
	if (json) {
		fprintf(json, "{\"transport\": [");
	}
	int  first = 1, failed = 0;
	char tb[64], pb[64], lb[256];
	snprintf(tb, sizeof(tb), "%s", transports);
	char *sv1;
	for (char *t = strtok_r(tb, ",", &sv1); t;
	     t       = strtok_r(NULL, ",", &sv1)) {
		char *sv2;
		snprintf(pb, sizeof(pb), "%s", pairs);
		for (char *p = strtok_r(pb, ",", &sv2); p;
		     p       = strtok_r(NULL, ",", &sv2)) {
			int   P = atoi(p);
			char *sv3;
			if (P < 1 || P > MAX_SERVERS) {
				die("--pairs entries must be 1..4, got %s", p);
			}
			snprintf(lb, sizeof(lb), "%s", payloads);
			for (char *s = strtok_r(lb, ",", &sv3); s;
			     s       = strtok_r(NULL, ",", &sv3)) {
				size_t      pl = parse_size(s);
				struct cell cells[N_OPS];
				pl = (pl + 3) & ~(size_t) 3;
				memset(cells, 0, sizeof(cells));
				if (run_point(t, P, pl, cells) != 0) {
					fprintf(stderr,
					    "transport_bench: %s P=%d %zu failed\n",
					    t, P, pl);
					failed = 1;
					continue;
				}
				for (int op = 0; op < N_OPS; op++) {
					printf(
					    "%-4s %2d %10zu %-10s %10.3f %10.1f %10.1f\n",
					    t, P, pl, op_names[op],
					    cells[op].gbps, cells[op].p50_us,
					    cells[op].p99_us);
				}
				fflush(stdout);
				if (json) {
					fprintf(json,
					    "%s{\"transport\": \"%s\", \"clients\": %d, "
					    "\"servers\": %d, \"payload_bytes\": %zu",
					    first ? "" : ", ", t, P, P, pl);
					for (int op = 0; op < N_OPS; op++) {
						fprintf(json,
						    ", \"%s_gbps\": %.4f, \"%s_p50_us\": %.1f, "
						    "\"%s_p99_us\": %.1f",
						    op_names[op],
						    cells[op].gbps,
						    op_names[op],
						    cells[op].p50_us,
						    op_names[op],
						    cells[op].p99_us);
					}
					fprintf(json,
					    ", \"ferry_gbps\": %.4f, \"nng_echo_gbps\": %.4f, "
					    "\"ratio_push_pull_vs_echo\": %.4f}",
					    cells[OP_PUSHPULL].gbps,
					    cells[OP_ECHO].gbps,
					    cells[OP_ECHO].gbps > 0
					        ? cells[OP_PUSHPULL].gbps /
					            cells[OP_ECHO].gbps
					        : 0);
					first = 0;
				}
			}
		}
	}
	if (json) {
		fprintf(json, "], \"repeats\": %d, \"min_time_s\": %.2f}\n",
		    repeats, min_time);
		fclose(json);
	}
	if (*tls_dir != '\0') {
		char cmd[340];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", tls_dir);
		if (system(cmd) != 0) {
			fprintf(stderr, "transport_bench: cannot remove %s\n",
			    tls_dir);
		}
	}
	return failed;
}
