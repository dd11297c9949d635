// membersim.c — a member simulator for the scheduler (issue 30): N trainers
// and M servers that register, heartbeat and watch the placement map at
// the real rates, speaking the wire protocol (Pswire headers over nng REQ)
// directly, one connection per member, so that one process stands in for a
// thousand machines and the scheduler, not the members, is what is
// measured.
//
//   membersim --scheduler URL --trainers N [--servers M] [--floats F]
//             [--heartbeat-ms 1000] [--park-ms 250] [--watch stale|park]
//             [--warm-s 3] [--steady-s 10] [--changes 3]
//             [--sched-pid PID] [--json FILE]
//
// What each member does is what the real one does:
//   - a trainer registers with the job's tensor table (one tensor of F
//     floats, sync mode, plain SGD: what ferry_client_declare sends with
//     the default options) and heartbeats every --heartbeat-ms
//     (clients/src/heartbeat.c: role, rank, a 1 s deadline);
//   - a server (a fake URL: the scheduler never dials its servers outside
//     a Snapshot) registers, heartbeats with the epoch it holds, and
//     watches the map with a GetPlacement parked until the next epoch,
//     re-sent when it expires (ps/src/server/boot.c, PS_BOOT_PARK_MS);
//   - a trainer learns a new map when a server answers it STALE_EPOCH and
//     then fetches it (GetPlacement, min_epoch the new one). Here the first
//     server member to hold a new map tells every trainer at once (--watch
//     stale, the default: the burst a real job's next push causes), or
//     each trainer parks a watch like a server (--watch park: the worst
//     case, a parked call per member).
// With --servers 0 real servers are registered by someone else and
// trainer 0 parks a watch in their place.
//
// Phases: register everyone; wait until every member holds the first map
// (map_first_s); --warm-s of heartbeats; a --steady-s window in which the
// scheduler's CPU (utime + stime of /proc/PID/stat) over wall time is
// cpu_frac; then --changes map changes, each a trainer's Leave: the time
// from the Leave sent until every other member holds the new epoch
// (map_all_s: the worst; map_all_ms: each; map_change_cpu_ms: the
// scheduler's CPU over one, heartbeats included). The JSON (one object) also
// names the heartbeats and watches sent, the parked watches that expired
// (no news: re-sent) and every refusal, by status.
#define _GNU_SOURCE
#include <errno.h>
#include <nng/nng.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fb/fb.h"
#include "ferry.pb-c.h"
#include "psw/psw.h"

// How long a heartbeat waits for its answer at most (heartbeat.c).
#define HB_TMO_MS 1000
// A refused or failed watch is re-sent after this long.
#define RETRY_MS 100
// Statuses counted by number (Pswire Status values are small).
#define N_STATUS 32

// One activity of a member: its heartbeat, or its map watch. Each has a
// REQ context and an aio whose callback runs the steps of its state
// machine (sleep -> send -> receive).
enum act_step { STEP_IDLE, STEP_SLEEP, STEP_SEND, STEP_RECV };

struct member;

struct act {
	struct member *m;
	nng_ctx        ctx;
	nng_aio       *aio;
	enum act_step  step;
	uint8_t        method;
	uint64_t       rid;
	int            is_watch;
};

struct member {
	int              server; // a server member, else a trainer
	uint32_t         id; // rank, or the server index the scheduler gave
	nng_socket       sock;
	nng_ctx          sync_ctx; // Register and Leave (blocking calls)
	nng_aio         *sync_aio;
	struct act       hb, watch;
	atomic_int       left; // left the job: its activities stop
	atomic_int       busy; // the watch has a call in flight (stale mode)
	_Atomic uint64_t held; // the newest epoch it holds
	_Atomic uint64_t want; // stale mode: the epoch to fetch
	_Atomic uint64_t held_us;  // when it got that epoch (mono_us)
	_Atomic uint64_t next_rid; // hb and watch draw from it
};

struct sim {
	const char      *url;
	int              trainers, servers, floats, park;
	unsigned         hb_ms, park_ms;
	double           warm_s, steady_s;
	int              changes;
	long             sched_pid;
	const char      *json;
	struct member   *mem; // [servers + trainers], servers first
	int              n;
	_Atomic uint64_t hb_sent, hb_ok, watch_sent, maps_got;
	_Atomic uint64_t refused[N_STATUS], transport_err;
	_Atomic uint64_t expired; // parked watches answered at deadline
	double change_cpu_s; // the scheduler's CPU from Leaves to all hold
	Pswire__JobConfig   job;
	Pswire__TensorDesc  td, *tdp;
	Pswire__OptimConfig oc;
	Pswire__LrSchedule  ls;
};

static struct sim S;

static uint64_t
mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000;
}

static void
die(const char *what)
{
	fprintf(stderr, "membersim: %s\n", what);
	exit(1);
}

// count_status notes a refusal (an answer with a non-OK status).
static void
count_status(int st)
{
	atomic_fetch_add(&S.refused[st >= 0 && st < N_STATUS ? st : 0], 1);
}

// ---- the requests --------------------------------------------------------

// leave_body fills l with the member's role and id (Heartbeat and Leave
// carry a LeaveRequest).
static void
leave_body(const struct member *m, Pswire__LeaveRequest *l)
{
	l->role = m->server ? PSWIRE__ROLE__ROLE_SERVER
	                    : PSWIRE__ROLE__ROLE_TRAINER;
	l->id   = m->id;
}

// act_request builds a's next request (a Heartbeat, or a GetPlacement for
// the epoch after the one held, or the wanted one) into *out.
static int
act_request(struct act *a, nng_msg **out)
{
	struct member              *m  = a->m;
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest        l  = PSWIRE__LEAVE_REQUEST__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	uint8_t                    *payload;

	a->rid       = atomic_fetch_add(&m->next_rid, 1);
	h.request_id = a->rid;
	h.rank       = m->server ? 0 : m->id;
	h.epoch      = atomic_load(&m->held);
	if (!a->is_watch) {
		leave_body(m, &l);
		h.body_case   = PSWIRE__HEADER__BODY_LEAVE_REQ;
		h.leave_req   = &l;
		h.deadline_ms = HB_TMO_MS;
		a->method     = PSWIRE__METHOD__HEARTBEAT;
	} else {
		uint64_t held   = atomic_load(&m->held);
		uint64_t want   = atomic_load(&m->want);
		gp.min_epoch    = want > held ? want : held + 1;
		h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
		h.placement_req = &gp;
		// Parked at most --park-ms (boot.c's PS_BOOT_PARK_MS); a
		// stale-mode fetch is answered at once.
		h.deadline_ms = S.park_ms;
		a->method     = PSWIRE__METHOD__GET_PLACEMENT;
	}
	size_t hl = protobuf_c_message_get_packed_size(&h.base);
	if (psw_msg_begin(out, hl, 0, &payload) != FB_OK) {
		return FB_ENOMEM;
	}
	if (psw_msg_finish(*out, a->method, 0, &h.base, hl, 0) != FB_OK) {
		nng_msg_free(*out);
		return FB_ENOSPC;
	}
	return FB_OK;
}

// act_sleep arms a's timer: its callback sends the next request.
static void
act_sleep(struct act *a, unsigned ms)
{
	a->step = STEP_SLEEP;
	nng_sleep_aio((nng_duration) ms, a->aio);
}

// act_send sends a's next request.
static void
act_send(struct act *a)
{
	nng_msg *req;
	if (atomic_load(&a->m->left) || act_request(a, &req) != FB_OK) {
		a->step = STEP_IDLE;
		atomic_store(&a->m->busy, 0);
		return;
	}
	a->step = STEP_SEND;
	nng_aio_set_timeout(a->aio,
	    a->is_watch ? (nng_duration) (S.park_ms + PSW_ANSWER_MARGIN_MS)
	                : HB_TMO_MS);
	nng_aio_set_msg(a->aio, req);
	nng_ctx_send(a->ctx, a->aio);
	if (a->is_watch) {
		atomic_fetch_add(&S.watch_sent, 1);
	} else {
		atomic_fetch_add(&S.hb_sent, 1);
	}
}

static void fan_out(uint64_t epoch);

// took_map notes that member m now holds epoch e (from a watch's answer).
static void
took_map(struct member *m, uint64_t e)
{
	uint64_t old = atomic_load(&m->held);
	while (e > old && !atomic_compare_exchange_weak(&m->held, &old, e)) {
	}
	if (e > old) {
		atomic_store(&m->held_us, mono_us());
		atomic_fetch_add(&S.maps_got, 1);
		if (!S.park && (m->server || S.servers == 0)) {
			fan_out(e); // its trainers' next push: STALE_EPOCH
		}
	}
}

// act_answer reads a's answer and returns how long to wait before its
// next request (0: at once; -1: the watch is done for now).
static int
act_answer(struct act *a)
{
	nng_msg          *rep = nng_aio_get_msg(a->aio);
	ProtobufCMessage *ph  = NULL;
	struct psw_frame  f;
	const char       *why = "";
	int rv = psw_reply_open(NULL, rep, a->method, a->rid, 0, &f, &ph,
	    &why);
	Pswire__Header *h    = (Pswire__Header *) ph;
	int             next = a->is_watch ? 0 : (int) S.hb_ms;
	if (rv == FB_OK && !a->is_watch) {
		atomic_fetch_add(&S.hb_ok, 1);
	} else if (rv == FB_OK &&
	    h->body_case == PSWIRE__HEADER__BODY_PLACEMENT) {
		took_map(a->m, h->placement->epoch);
	} else if (rv == FB_EREMOTE && a->is_watch &&
	    h->status == PSWIRE__STATUS__DEADLINE_EXCEEDED) {
		// An expired park: no news; re-sent at once (boot.c).
		atomic_fetch_add(&S.expired, 1);
	} else if (rv == FB_EREMOTE) {
		count_status(h->status); // refused: re-sent after a pause
		next = a->is_watch ? RETRY_MS : next;
	} else {
		if (atomic_fetch_add(&S.transport_err, 1) < 3) {
			fprintf(stderr, "membersim: %s: %s\n",
			    psw_method_name(a->method), why);
		}
		next = a->is_watch ? RETRY_MS : next;
	}
	if (h != NULL) {
		pswire__header__free_unpacked(h, NULL);
	}
	nng_msg_free(rep);
	if (a->is_watch && !S.park && !(a->m->server || S.servers == 0)) {
		// Stale mode: a trainer fetches until it holds what it wants.
		struct member *m = a->m;
		if (atomic_load(&m->held) >= atomic_load(&m->want)) {
			// Idle before busy is released: a fan_out that
			// then starts the watch owns the aio from there.
			a->step = STEP_IDLE;
			atomic_store(&m->busy, 0);
			if (atomic_load(&m->held) >= atomic_load(&m->want)) {
				return -1;
			}
			int zero = 0;
			if (!atomic_compare_exchange_strong(&m->busy, &zero,
			        1)) {
				return -1; // someone else started it
			}
		}
	}
	return next;
}

// act_cb is every activity's aio callback: the next step of its machine.
static void
act_cb(void *arg)
{
	struct act *a  = arg;
	int         rv = nng_aio_result(a->aio);
	int         next;

	switch (a->step) {
	case STEP_SLEEP:
		act_send(a);
		return;
	case STEP_SEND:
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(a->aio));
			atomic_fetch_add(&S.transport_err, 1);
			act_sleep(a, a->is_watch ? RETRY_MS : S.hb_ms);
			return;
		}
		a->step = STEP_RECV;
		nng_ctx_recv(a->ctx, a->aio);
		return;
	case STEP_RECV:
		// (nng 1.5.2's REQ context has been seen to end a receive
		// with no error and no message under a park-refuse storm.)
		if (rv != 0 || nng_aio_get_msg(a->aio) == NULL) {
			atomic_fetch_add(&S.transport_err, 1);
			next = a->is_watch ? RETRY_MS : (int) S.hb_ms;
		} else {
			next = act_answer(a);
		}
		if (next < 0) {
			return; // idle (act_answer said so)
		}
		if (next == 0) {
			act_send(a);
		} else {
			act_sleep(a, (unsigned) next);
		}
		return;
	default:
		return;
	}
}

// fan_out tells every trainer that epoch is out (stale mode): each one
// not already fetching starts a GetPlacement for it.
static void
fan_out(uint64_t epoch)
{
	for (int i = S.servers; i < S.n; i++) {
		struct member *m   = &S.mem[i];
		uint64_t       old = atomic_load(&m->want);
		while (epoch > old &&
		    !atomic_compare_exchange_weak(&m->want, &old, epoch)) {
		}
		int zero = 0;
		if (atomic_load(&m->held) < epoch && !atomic_load(&m->left) &&
		    atomic_compare_exchange_strong(&m->busy, &zero, 1)) {
			act_send(&m->watch);
		}
	}
}

// ---- set-up: sockets and registration ------------------------------------

static void
act_open(struct member *m, struct act *a, int is_watch)
{
	a->m        = m;
	a->is_watch = is_watch;
	if (nng_ctx_open(&a->ctx, m->sock) != 0 ||
	    nng_aio_alloc(&a->aio, act_cb, a) != 0) {
		die("cannot open a context (out of memory?)");
	}
}

// member_open dials the scheduler for member i (its own connection).
static void
member_open(int i)
{
	struct member *m = &S.mem[i];
	m->server        = i < S.servers;
	m->id            = m->server ? UINT32_MAX : (uint32_t) (i - S.servers);
	m->next_rid      = ((uint64_t) (i + 1) << 40) | 1;
	if (psw_req_open(NULL, S.url, 1u << 20, 50, 1000, &m->sock,
	        &m->sync_ctx, &m->sync_aio) != FB_OK) {
		die("cannot dial the scheduler (too many open files?)");
	}
	act_open(m, &m->hb, 0);
	act_open(m, &m->watch, 1);
}

// sync_call sends h from member m and waits for the answer; returns the
// reply header (free it) or NULL, with the reason printed.
static Pswire__Header *
sync_call(struct member *m, Pswire__Header *h, uint8_t method, int tmo)
{
	ProtobufCMessage *ph  = NULL;
	const char       *why = "";
	h->request_id         = atomic_fetch_add(&m->next_rid, 1);
	h->deadline_ms        = (uint32_t) tmo;
	int rv = psw_call_header(NULL, m->sync_ctx, m->sync_aio, &h->base,
	    method, h->request_id, tmo + PSW_ANSWER_MARGIN_MS, &ph, &why);
	Pswire__Header *r = (Pswire__Header *) ph;
	if (rv == FB_EREMOTE) {
		fprintf(stderr, "membersim: %s %s %u: %s: %s\n",
		    psw_method_name(method), m->server ? "server" : "trainer",
		    m->id, psw_status_name(r->status), r->error);
		pswire__header__free_unpacked(r, NULL);
		return NULL;
	}
	if (rv != FB_OK) {
		fprintf(stderr, "membersim: %s: %s\n", psw_method_name(method),
		    why ? why : fb_strerror(rv));
		return NULL;
	}
	return r;
}

// report_links sends trainer m's link report to n servers, as a trainer
// does after probing them (clients/src/probe.c): loopback-like figures,
// the same for every link (the scheduler's cost is in the counts).
static void
report_links(struct member *m, uint32_t n)
{
	Pswire__Header             h  = PSWIRE__HEADER__INIT;
	Pswire__ReportLinksRequest rl = PSWIRE__REPORT_LINKS_REQUEST__INIT;
	double                    *v  = calloc(2 * (size_t) n, sizeof(*v));
	if (v == NULL) {
		die("out of memory");
	}
	for (uint32_t k = 0; k < n; k++) {
		v[k]     = 100e-6; // 100 us RTT
		v[n + k] = 1e9;    // 1 GB/s
	}
	rl.rank           = m->id;
	rl.n_rtt_s        = n;
	rl.rtt_s          = v;
	rl.n_bw_bps       = n;
	rl.bw_bps         = v + n;
	h.rank            = m->id;
	h.body_case       = PSWIRE__HEADER__BODY_LINKS_REQ;
	h.links_req       = &rl;
	Pswire__Header *r = sync_call(m, &h, PSWIRE__METHOD__REPORT_LINKS,
	    10000);
	free(v);
	if (r == NULL) {
		die("a ReportLinks failed");
	}
	pswire__header__free_unpacked(r, NULL);
}

// member_register registers member i: a server by a fake URL (the
// scheduler gives it its index), a trainer by rank with the job.
static void
member_register(int i)
{
	struct member          *m  = &S.mem[i];
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	char                    url[64];
	if (m->server) {
		snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", 40000 + i);
		rr.role = PSWIRE__ROLE__ROLE_SERVER;
		rr.url  = url;
	} else {
		rr.role = PSWIRE__ROLE__ROLE_TRAINER;
		rr.rank = m->id;
		rr.job  = &S.job;
		h.rank  = m->id;
	}
	h.body_case       = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req    = &rr;
	Pswire__Header *r = sync_call(m, &h, PSWIRE__METHOD__REGISTER, 10000);
	if (r == NULL) {
		die("a Register failed");
	}
	const Pswire__RegisterReply *rep = r->body_case ==
	        PSWIRE__HEADER__BODY_REGISTER_REP
	    ? r->register_rep
	    : NULL;
	if (m->server && rep != NULL) {
		m->id = rep->id;
	}
	uint32_t probe_servers = rep != NULL && rep->probe ? rep->servers : 0;
	pswire__header__free_unpacked(r, NULL);
	if (probe_servers > 0) {
		report_links(m, probe_servers);
	}
}

// job_init fills S.job as ferry_client_declare does with the defaults.
static void
job_init(void)
{
	pswire__job_config__init(&S.job);
	pswire__tensor_desc__init(&S.td);
	pswire__optim_config__init(&S.oc);
	pswire__lr_schedule__init(&S.ls);
	S.td.name         = "w";
	S.td.len          = (uint64_t) S.floats;
	S.tdp             = &S.td;
	S.job.n_tensors   = 1;
	S.job.tensors     = &S.tdp;
	S.job.mode        = PSWIRE__MODE__MODE_SYNC;
	S.job.lr          = 0.1;
	S.job.codec_push  = "none";
	S.job.codec_pull  = "none";
	S.oc.name         = "sgd";
	S.oc.beta1        = 0.9f;
	S.oc.beta2        = 0.999f;
	S.oc.eps          = 1e-8f;
	S.ls.kind         = "constant";
	S.job.optim       = &S.oc;
	S.job.lr_schedule = &S.ls;
}

// ---- measuring -----------------------------------------------------------

// proc_cpu_s returns utime + stime of pid in seconds (-1: unreadable).
static double
proc_cpu_s(long pid)
{
	char  path[64], buf[1024];
	FILE *f;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if ((f = fopen(path, "r")) == NULL) {
		return -1;
	}
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n]           = '\0';
	char         *p  = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	// After ") ": state, then fields 4..13; utime and stime are 14, 15.
	if (p == NULL ||
	    sscanf(p + 2,
	        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
	        "%lu %lu",
	        &ut, &st) != 2) {
		return -1;
	}
	return (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
}

// proc_kb returns the field ("VmRSS:", "VmHWM:") of pid's status in kB.
static double
proc_kb(long pid, const char *field)
{
	char   path[64], line[256];
	FILE  *f;
	double kb = -1;
	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if ((f = fopen(path, "r")) == NULL) {
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, field, strlen(field)) == 0) {
			kb = strtod(line + strlen(field), NULL);
		}
	}
	fclose(f);
	return kb;
}

// all_hold waits (up to tmo_s) until every member still in holds at least
// epoch e; returns the latest time one got it (mono_us), 0 on timeout.
static uint64_t
all_hold(uint64_t e, double tmo_s)
{
	uint64_t end = mono_us() + (uint64_t) (tmo_s * 1e6);
	while (mono_us() < end) {
		uint64_t last = 0;
		int      ok   = 1;
		for (int i = 0; i < S.n && ok; i++) {
			struct member *m = &S.mem[i];
			if (atomic_load(&m->left)) {
				continue;
			}
			ok         = atomic_load(&m->held) >= e;
			uint64_t t = atomic_load(&m->held_us);
			last       = t > last ? t : last;
		}
		if (ok) {
			return last;
		}
		usleep(2000);
	}
	fprintf(stderr,
	    "membersim: not every member holds epoch %llu: %llu watches "
	    "sent, %llu maps taken, %llu heartbeats (%llu ok)\n",
	    (unsigned long long) e,
	    (unsigned long long) atomic_load(&S.watch_sent),
	    (unsigned long long) atomic_load(&S.maps_got),
	    (unsigned long long) atomic_load(&S.hb_sent),
	    (unsigned long long) atomic_load(&S.hb_ok));
	return 0;
}

// max_epoch is the newest epoch any member holds.
static uint64_t
max_epoch(void)
{
	uint64_t e = 0;
	for (int i = 0; i < S.n; i++) {
		uint64_t h = atomic_load(&S.mem[i].held);
		e          = h > e ? h : e;
	}
	return e;
}

// change_map makes trainer `rank` leave and returns the seconds from its
// Leave until every other member holds the next epoch (-1: timed out).
static double
change_map(uint32_t rank)
{
	struct member *m = &S.mem[S.servers + (int) rank];
	uint64_t       e = max_epoch() + 1;
	atomic_store(&m->left, 1);
	// Let its own calls end (a heartbeat after the Leave is refused).
	nng_aio_cancel(m->hb.aio);
	nng_aio_cancel(m->watch.aio);
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	leave_body(m, &l);
	h.body_case        = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req        = &l;
	h.rank             = rank;
	double          c0 = S.sched_pid > 0 ? proc_cpu_s(S.sched_pid) : 0;
	uint64_t        t0 = mono_us();
	Pswire__Header *r  = sync_call(m, &h, PSWIRE__METHOD__LEAVE, 5000);
	if (r == NULL) {
		return -1;
	}
	pswire__header__free_unpacked(r, NULL);
	uint64_t t1 = all_hold(e, 30);
	if (S.sched_pid > 0) {
		S.change_cpu_s += proc_cpu_s(S.sched_pid) - c0;
	}
	return t1 == 0 ? -1 : (double) (t1 > t0 ? t1 - t0 : 0) / 1e6;
}

// ---- main ----------------------------------------------------------------

static void
usage(void)
{
	fprintf(stderr,
	    "usage: membersim --scheduler URL --trainers N [--servers M] "
	    "[--floats F]\n"
	    "                 [--heartbeat-ms MS] [--park-ms MS] "
	    "[--watch stale|park]\n"
	    "                 [--warm-s S] [--steady-s S] [--changes K] "
	    "[--sched-pid PID]\n"
	    "                 [--json FILE]\n");
	exit(2);
}

static void
parse_args(int argc, char **argv)
{
	S.servers  = 1;
	S.floats   = 1 << 16;
	S.hb_ms    = 1000;
	S.park_ms  = 250;
	S.warm_s   = 3;
	S.steady_s = 10;
	S.changes  = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i],
		           *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL) {
			usage();
		}
		i++;
		if (strcmp(a, "--scheduler") == 0) {
			S.url = v;
		} else if (strcmp(a, "--trainers") == 0) {
			S.trainers = atoi(v);
		} else if (strcmp(a, "--servers") == 0) {
			S.servers = atoi(v);
		} else if (strcmp(a, "--floats") == 0) {
			S.floats = atoi(v);
		} else if (strcmp(a, "--heartbeat-ms") == 0) {
			S.hb_ms = (unsigned) atoi(v);
		} else if (strcmp(a, "--park-ms") == 0) {
			S.park_ms = (unsigned) atoi(v);
		} else if (strcmp(a, "--watch") == 0) {
			S.park = strcmp(v, "park") == 0;
		} else if (strcmp(a, "--warm-s") == 0) {
			S.warm_s = atof(v);
		} else if (strcmp(a, "--steady-s") == 0) {
			S.steady_s = atof(v);
		} else if (strcmp(a, "--changes") == 0) {
			S.changes = atoi(v);
		} else if (strcmp(a, "--sched-pid") == 0) {
			S.sched_pid = atol(v);
		} else if (strcmp(a, "--json") == 0) {
			S.json = v;
		} else {
			usage();
		}
	}
	if (S.url == NULL || S.trainers < 1 || S.servers < 0 || S.floats < 1 ||
	    S.hb_ms < 1 || S.changes >= S.trainers) {
		usage();
	}
}

// fd_limit raises the open-file limit to its hard cap: one connection per
// member.
static void
fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void) setrlimit(RLIMIT_NOFILE, &rl);
	}
}

// start_all starts every member's heartbeat (spread over one period, as
// independent machines are) and the watches.
static void
start_all(void)
{
	for (int i = 0; i < S.n; i++) {
		struct member *m = &S.mem[i];
		act_sleep(&m->hb,
		    (unsigned) ((uint64_t) i * S.hb_ms / (uint64_t) S.n));
		int watches = S.park || m->server ||
		    (S.servers == 0 && i == 0);
		if (watches) {
			act_send(&m->watch);
		} else {
			// Stale mode: a trainer fetches the first map
			// (ferry_client_declare), then waits for news.
			// (A server's fan_out may have started it.)
			uint64_t zero64 = 0;
			int      zero   = 0;
			(void) atomic_compare_exchange_strong(&m->want,
			    &zero64, 1);
			if (atomic_compare_exchange_strong(&m->busy, &zero,
			        1)) {
				act_send(&m->watch);
			}
		}
	}
}

struct result {
	double   first_s, wall_s, cpu_s, rss_mb, hwm_mb;
	double   change_s[64];
	int      n_change;
	double   map_all_s;
	uint64_t hb_sent, hb_ok, watch_sent;
};

static void
write_json(const struct result *r)
{
	FILE *f = S.json ? fopen(S.json, "w") : stdout;
	if (f == NULL) {
		die("cannot write the JSON file");
	}
	fprintf(f,
	    "{\"members\": %d, \"trainers\": %d, \"servers\": %d, "
	    "\"floats\": %d, "
	    "\"watch\": \"%s\", \"heartbeat_ms\": %u, \"steady_s\": %.3f, "
	    "\"sched_cpu_s\": %.3f, \"cpu_frac\": %.5f, \"rss_mb\": %.1f, "
	    "\"hwm_mb\": %.1f, \"map_first_s\": %.4f, \"map_all_s\": %.4f, "
	    "\"map_all_ms\": [",
	    S.n, S.trainers, S.servers, S.floats, S.park ? "park" : "stale",
	    S.hb_ms, r->wall_s, r->cpu_s,
	    r->wall_s > 0 ? r->cpu_s / r->wall_s : 0, r->rss_mb, r->hwm_mb,
	    r->first_s, r->map_all_s);
	for (int i = 0; i < r->n_change; i++) {
		fprintf(f, "%s%.1f", i ? ", " : "", r->change_s[i] * 1e3);
	}
	fprintf(f,
	    "], \"map_change_cpu_ms\": %.1f, "
	    "\"heartbeats_per_s\": %.1f, \"heartbeats_ok\": %llu, "
	    "\"heartbeats_sent\": %llu, \"watches_sent\": %llu, "
	    "\"watches_expired\": %llu, \"transport_errors\": %llu, "
	    "\"refused\": {",
	    r->n_change > 0 ? 1e3 * S.change_cpu_s / r->n_change : 0,
	    r->wall_s > 0 ? (double) r->hb_ok / r->wall_s : 0,
	    (unsigned long long) r->hb_ok, (unsigned long long) r->hb_sent,
	    (unsigned long long) r->watch_sent,
	    (unsigned long long) atomic_load(&S.expired),
	    (unsigned long long) atomic_load(&S.transport_err));
	int first = 1;
	for (int st = 0; st < N_STATUS; st++) {
		uint64_t n = atomic_load(&S.refused[st]);
		if (n > 0) {
			fprintf(f, "%s\"%s\": %llu", first ? "" : ", ",
			    psw_status_name(st), (unsigned long long) n);
			first = 0;
		}
	}
	int ok = r->first_s >= 0 && r->map_all_s >= 0 &&
	    r->hb_ok * 10 >= r->hb_sent * 9;
	fprintf(f, "}, \"ok\": %s}\n", ok ? "true" : "false");
	if (f != stdout) {
		fclose(f);
	}
}

int
main(int argc, char **argv)
{
	struct result r = { 0 };
	parse_args(argc, argv);
	fd_limit();
	job_init();
	S.n   = S.servers + S.trainers;
	S.mem = calloc((size_t) S.n, sizeof(*S.mem));
	if (S.mem == NULL) {
		die("out of memory");
	}
	for (int i = 0; i < S.n; i++) {
		member_open(i);
	}
	for (int i = 0; i < S.n; i++) {
		member_register(i); // servers first: the map needs them
	}
	uint64_t t0 = mono_us();
	start_all();
	uint64_t t1 = all_hold(1, S.n / 50.0 + 10);
	r.first_s   = t1 == 0 ? -1 : (double) (t1 - t0) / 1e6;
	fprintf(stderr, "membersim: %d members hold map 1 after %.3f s\n", S.n,
	    r.first_s);
	usleep((useconds_t) (S.warm_s * 1e6));
	uint64_t hb0 = atomic_load(&S.hb_ok), hs0 = atomic_load(&S.hb_sent);
	uint64_t w0 = atomic_load(&S.watch_sent);
	double   c0 = S.sched_pid > 0 ? proc_cpu_s(S.sched_pid) : 0;
	uint64_t s0 = mono_us();
	usleep((useconds_t) (S.steady_s * 1e6));
	double   c1  = S.sched_pid > 0 ? proc_cpu_s(S.sched_pid) : 0;
	uint64_t s1  = mono_us();
	r.wall_s     = (double) (s1 - s0) / 1e6;
	r.cpu_s      = c1 - c0;
	r.hb_ok      = atomic_load(&S.hb_ok) - hb0;
	r.hb_sent    = atomic_load(&S.hb_sent) - hs0;
	r.watch_sent = atomic_load(&S.watch_sent) - w0;
	if (S.sched_pid > 0) {
		r.rss_mb = proc_kb(S.sched_pid, "VmRSS:") / 1024;
		r.hwm_mb = proc_kb(S.sched_pid, "VmHWM:") / 1024;
	}
	fprintf(stderr,
	    "membersim: steady %.1f s: scheduler cpu %.3f s (%.2f%% of a "
	    "core), %llu heartbeats ok of %llu\n",
	    r.wall_s, r.cpu_s, 100 * r.cpu_s / r.wall_s,
	    (unsigned long long) r.hb_ok, (unsigned long long) r.hb_sent);
	r.map_all_s = 0;
	for (int k = 0; k < S.changes && k < 64; k++) {
		// The highest ranks leave: trainer 0 may be a watcher.
		double d = change_map((uint32_t) (S.trainers - 1 - k));
		r.change_s[r.n_change++] = d;
		r.map_all_s              = d < 0 || r.map_all_s < 0 ? -1
		                 : d > r.map_all_s                  ? d
		                                   : r.map_all_s;
		fprintf(stderr,
		    "membersim: map change %d: all hold it after "
		    "%.3f s\n",
		    k + 1, d);
		usleep(200000);
	}
	write_json(&r);
	fflush(NULL);
	// Not closing 1,000 sockets with calls in flight: nng 1.5.2 can hang
	// closing one while a reply arrives (psw.h, PSW_ANSWER_MARGIN_MS).
	_exit(0);
}
