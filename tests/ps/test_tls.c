// test_tls.c — a job over mutual TLS (--tls-cert, --tls-key, --tls-ca):
// it trains to the same weights, bit for bit, as the same job in the
// clear; a peer without a certificate, with one from another CA, or
// speaking plain tcp to a TLS port, gets no answer and changes nothing
// (the scheduler never counts it), while a member with the job's CA's
// certificate is served on the same port. Certificates are made at test
// time with openssl (scripts/tls-certs.sh); without openssl the tests say
// so and pass without running.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "obs/obs.h"
#include "ps/ps.h"
#include "harness.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

#define STEPS 3
#define SERVERS 2

struct tls_job {
	char                 dir[64], other[64]; // the job's CA; another CA
	int                  tls;
	const char          *key;       // --secret-file too (NULL: off)
	const char          *sched_as;  // the scheduler's certificate
	                                // (NULL: "scheduler")
	const char          *snap_dir;  // the servers' --snapshot-dir (NULL)
	const char          *server_as; // every server's certificate (NULL:
	                                // server i's own, "server-i")
	struct ps_scheduler *sched;
	struct ps_server    *srv[SERVERS];
};

// path_in writes <dir>/<name> into buf (static storage per call site is
// the caller's).
static const char *
path_in(char *buf, size_t n, const char *dir, const char *name)
{
	snprintf(buf, n, "%s/%s", dir, name);
	return buf;
}

// make_certs makes a CA and certificates for names in a fresh temp dir
// (written into dir); returns 0 when openssl is missing.
static int
make_certs(char *dir, size_t n, const char *names)
{
	char cmd[512];
	if (system("command -v openssl >/dev/null 2>&1") != 0) {
		return 0;
	}
	snprintf(dir, n, "/tmp/ferry-tls-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "bash %s %s %s", TLS_CERTS_SH, dir, names);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	return 1;
}

static void
rm_dir(const char *dir)
{
	char cmd[128];
	if (*dir != '\0') {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		ck_assert_int_eq(system(cmd), 0);
	}
}

// job_open starts a scheduler and SERVERS servers, over TLS when j->tls
// (certificates from j->dir), else plain tcp.
static void
job_open(struct tls_job *j)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64], cert[160], key[160], ca[160];

	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = SERVERS;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	so.secret_file = j->key;
	if (j->tls) {
		char sn[48];
		snprintf(sn, sizeof(sn), "%s.pem",
		    j->sched_as ? j->sched_as : "scheduler");
		so.tls_cert = path_in(cert, sizeof(cert), j->dir, sn);
		snprintf(sn, sizeof(sn), "%s.key",
		    j->sched_as ? j->sched_as : "scheduler");
		so.tls_key = path_in(key, sizeof(key), j->dir, sn);
		so.tls_ca  = path_in(ca, sizeof(ca), j->dir, "ca.pem");
	}
	PT_OK(ps_scheduler_open(&so, &j->sched));
	if (j->tls) {
		ck_assert_msg(
		    strncmp(ps_scheduler_url(j->sched), "tls+tcp://", 10) == 0,
		    "%s", ps_scheduler_url(j->sched));
	}
	for (int i = 0; i < SERVERS; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64], name[32];
		o.url           = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url = ps_scheduler_url(j->sched);
		o.secret_file   = j->key;
		o.snapshot_dir  = j->snap_dir;
		if (j->tls) {
			// An indexed certificate claims its slot: a server
			// that registers before the slots below it are taken
			// is refused and retries. "ferry-server" takes any.
			char base[24];
			snprintf(base, sizeof(base), "server-%d", i);
			const char *as = j->server_as ? j->server_as : base;
			snprintf(name, sizeof(name), "%.24s.pem", as);
			o.tls_cert = path_in(cert, sizeof(cert), j->dir, name);
			snprintf(name, sizeof(name), "%.24s.key", as);
			o.tls_key = path_in(key, sizeof(key), j->dir, name);
			o.tls_ca  = path_in(ca, sizeof(ca), j->dir, "ca.pem");
		}
		PT_OK(ps_server_open(&o, &j->srv[i]));
	}
}

static void
job_close(struct tls_job *j)
{
	for (int i = 0; i < SERVERS; i++) {
		ps_server_close(j->srv[i]);
	}
	ps_scheduler_close(j->sched);
}

// train_all trains ranks 0 and 1 on j's open job (TLS per j->tls, with
// j->key) to the end, each with its own certificate; both must succeed.
static void
train_all(struct tls_job *j, struct pt_rank a[2])
{
	memset(a, 0, 2 * sizeof(*a));
	for (int r = 0; r < 2; r++) {
		a[r].url     = ps_scheduler_url(j->sched);
		a[r].steps   = STEPS;
		a[r].tls_dir = j->tls ? j->dir : NULL;
		a[r].key     = j->key;
	}
	pt_ranks_train(a, 2);
}

// run_job trains 2 ranks on a job (TLS per j->tls) and leaves rank 0's
// final weights in w0.
static void
run_job(struct tls_job *j, float w0[NT][40])
{
	struct pt_rank a[2];

	job_open(j);
	train_all(j, a);
	job_close(j);
	memcpy(w0, a[0].w, sizeof(a[0].w));
}

#define MEMBERS "scheduler server-0 server-1 trainer-0 trainer-1"

// The same job over TLS and in the clear ends with the same weights, bit
// for bit.
START_TEST(test_tls_job_equals_plain)
{
	struct tls_job plain = { 0 }, tls = { 0 };
	float          wp[NT][40], wt[NT][40];

	if (!make_certs(tls.dir, sizeof(tls.dir), MEMBERS)) {
		fprintf(stderr, "test_tls: no openssl, not run\n");
		return;
	}
	tls.tls = 1;
	run_job(&plain, wp);
	run_job(&tls, wt);
	rm_dir(tls.dir);
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(memcmp(wp[t], wt[t], lens[t] * sizeof(float)) ==
		        0,
		    "tensor %d differs over TLS", t);
	}
	// And the job did train: rank 0's weights moved off their start.
	ck_assert_float_ne(wp[0][1], 1.0f);
}
END_TEST

enum peer {
	PEER_PLAIN,    // plain tcp to the TLS port
	PEER_NO_CERT,  // TLS, trusts the job's CA, presents no certificate
	PEER_OTHER_CA, // TLS with a certificate of another CA
	PEER_MEMBER,   // TLS with a certificate of the job's CA (control)
};

// register_as sends a trainer Register for rank 0 to the scheduler at
// url as peer; returns the reply's status, or -1 when no reply came
// within 1.5 s (the connection never completed).
static int
register_as(struct tls_job *j, const char *url, enum peer peer)
{
	Pswire__Header          h      = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest r      = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       job    = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td     = PSWIRE__TENSOR_DESC__INIT;
	Pswire__TensorDesc     *tds[1] = { &td };
	nng_socket              s;
	nng_dialer              d;
	nng_tls_config         *cfg = NULL;
	struct psw_tls         *t   = NULL;
	nng_msg                *m;
	uint8_t                *p;
	struct psw_frame        f;
	const char             *why;
	char                    u[300], cert[160], key[160], ca[160], err[300];
	int                     status = -1;

	td.name        = "a";
	td.len         = 16;
	job.n_tensors  = 1;
	job.tensors    = tds;
	job.mode       = PSWIRE__MODE__MODE_SYNC;
	job.lr         = 0.1;
	job.codec_push = "none";
	job.codec_pull = "none";
	r.role         = PSWIRE__ROLE__ROLE_TRAINER;
	r.rank         = 0;
	r.job          = &job;
	h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req = &r;
	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 1500);
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 1500);
	switch (peer) {
	case PEER_PLAIN:
		// tls+tcp://host:port -> tcp://host:port
		snprintf(u, sizeof(u), "%s", url + 4);
		ck_assert_int_eq(nng_dialer_create(&d, s, u), 0);
		break;
	case PEER_NO_CERT:
		ck_assert_int_eq(nng_dialer_create(&d, s, url), 0);
		ck_assert_int_eq(
		    nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT), 0);
		ck_assert_int_eq(
		    nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED),
		    0);
		ck_assert_int_eq(
		    nng_tls_config_ca_file(cfg,
		        path_in(ca, sizeof(ca), j->dir, "ca.pem")),
		    0);
		ck_assert_int_eq(
		    nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg), 0);
		break;
	case PEER_OTHER_CA:
	case PEER_MEMBER: {
		const char *dir = peer == PEER_MEMBER ? j->dir : j->other;
		PT_OK(psw_tls_open(
		    path_in(cert, sizeof(cert), dir, "trainer-0.pem"),
		    path_in(key, sizeof(key), dir, "trainer-0.key"),
		    path_in(ca, sizeof(ca), dir, "ca.pem"), &t, err,
		    sizeof(err)));
		PT_OK(psw_tls_dial(t, s, url));
		break;
	}
	}
	if (peer != PEER_MEMBER && peer != PEER_OTHER_CA) {
		ck_assert_int_eq(nng_dialer_start(d, NNG_FLAG_NONBLOCK), 0);
	}
	size_t hl = pswire__header__get_packed_size(&h);
	PT_OK(psw_msg_begin(&m, hl, 0, &p));
	PT_OK(psw_msg_finish(m, PSWIRE__METHOD__REGISTER, 0, &h.base, hl, 0));
	if (nng_sendmsg(s, m, 0) != 0) {
		nng_msg_free(m);
	} else if (nng_recvmsg(s, &m, 0) == 0) {
		PT_OK(psw_msg_parse(m, &f, &why));
		Pswire__Header *rh = pswire__header__unpack(NULL, f.hdr_len,
		    f.hdr);
		ck_assert_ptr_nonnull(rh);
		status = (int) rh->status;
		pswire__header__free_unpacked(rh, NULL);
		nng_msg_free(m);
	}
	nng_close(s);
	if (cfg != NULL) {
		nng_tls_config_free(cfg);
	}
	psw_tls_close(t);
	return status;
}

// Strangers get no answer and change nothing; a member is served.
START_TEST(test_tls_strangers_refused)
{
	struct tls_job j = { 0 };
	char           stats[4096];

	if (!make_certs(j.dir, sizeof(j.dir), MEMBERS) ||
	    !make_certs(j.other, sizeof(j.other), "trainer-0")) {
		fprintf(stderr, "test_tls: no openssl, not run\n");
		return;
	}
	j.tls = 1;
	job_open(&j);
	const char *url = ps_scheduler_url(j.sched);
	ck_assert_int_eq(register_as(&j, url, PEER_PLAIN), -1);
	ck_assert_int_eq(register_as(&j, url, PEER_NO_CERT), -1);
	ck_assert_int_eq(register_as(&j, url, PEER_OTHER_CA), -1);
	ps_scheduler_stats(j.sched, stats, sizeof(stats));
	ck_assert_msg(strstr(stats, "trainers:0/2") != NULL, "%s", stats);
	// The same call from a member with the job's CA's certificate is
	// answered and counted: the refusals above were TLS's.
	ck_assert_int_eq(register_as(&j, url, PEER_MEMBER),
	    PSWIRE__STATUS__OK);
	ps_scheduler_stats(j.sched, stats, sizeof(stats));
	ck_assert_msg(strstr(stats, "trainers:1/2") != NULL, "%s", stats);
	job_close(&j);
	rm_dir(j.dir);
	rm_dir(j.other);
}
END_TEST

// tls_call sends header h (and len bytes of payload) for method to url
// over TLS with the job's CA's certificate <cert_name>.pem, signed as who
// with j->key when the job has one (else unsigned: TLS alone), and
// returns the reply's status (pt_rpc).
static int
tls_call(struct tls_job *j, const char *cert_name, const char *url,
    struct psw_ident who, uint8_t method, Pswire__Header *h,
    const void *payload, size_t len, Pswire__Header **rep)
{
	struct pt_peer as = { .key = j->key,
		.who               = who,
		.tls_dir           = j->dir,
		.cert              = cert_name };
	return pt_rpc(&as, url, method, h, payload, len, rep);
}

// signed_register sends a Register of role (trainer: for rank; server:
// at a URL nobody listens on) to the scheduler with tls_call; returns the
// reply's status.
static int
signed_register(struct tls_job *j, const char *cert_name, struct psw_ident who,
    int role, uint32_t rank)
{
	Pswire__Header          h      = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest r      = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       job    = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td     = PSWIRE__TENSOR_DESC__INIT;
	Pswire__TensorDesc     *tds[1] = { &td };

	td.name        = "a";
	td.len         = 16;
	job.n_tensors  = 1;
	job.tensors    = tds;
	job.lr         = 0.1;
	job.codec_push = "none";
	job.codec_pull = "none";
	r.role         = role;
	r.rank         = rank;
	r.job          = role == PSWIRE__ROLE__ROLE_TRAINER ? &job : NULL;
	r.url = role == PSWIRE__ROLE__ROLE_SERVER ? "tcp://127.0.0.1:9" : "";
	h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req = &r;
	return tls_call(j, cert_name, ps_scheduler_url(j->sched), who,
	    PSWIRE__METHOD__REGISTER, &h, NULL, 0, NULL);
}

// write_key writes a job key into a fresh temporary file named into kf.
static void
write_key(char kf[64])
{
	int fd;
	snprintf(kf, 64, "/tmp/ferry-tls-key-XXXXXX");
	ck_assert_int_ge(fd = mkstemp(kf), 0);
	ck_assert_int_eq(write(fd, "a per-job key of 16+ bytes", 26), 26);
	close(fd);
}

// wait_servers waits up to 10 s for the scheduler to count n servers.
static void
wait_servers(struct tls_job *j, int n)
{
	char stats[4096], want[32];

	snprintf(want, sizeof(want), "servers:%d/", n);
	for (int i = 0; i < 200; i++) {
		ps_scheduler_stats(j->sched, stats, sizeof(stats));
		if (strstr(stats, want) != NULL) {
			return;
		}
		nng_msleep(50);
	}
	ck_assert_msg(0, "want %s: %s", want, stats);
}

// leave_as sends a Leave of member (role, id) to the scheduler over TLS
// with certificate cert_name; returns the reply's status.
static int
leave_as(struct tls_job *j, const char *cert_name, int role, uint32_t id)
{
	Pswire__Header       h      = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l      = PSWIRE__LEAVE_REQUEST__INIT;
	struct psw_ident     nobody = { PSW_ROLE_NONE, 0 };
	l.role                      = role;
	l.id                        = id;
	h.body_case                 = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req                 = &l;
	return tls_call(j, cert_name, ps_scheduler_url(j->sched), nobody,
	    PSWIRE__METHOD__LEAVE, &h, NULL, 0, NULL);
}

// map_epoch fetches the scheduler's current map over TLS with
// trainer-0's certificate and returns its epoch.
static uint64_t
map_epoch(struct tls_job *j)
{
	Pswire__Header              h   = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest g   = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	struct psw_ident            t0  = { PSW_ROLE_TRAINER, 0 };
	Pswire__Header             *rep = NULL;
	g.min_epoch                     = 1;
	h.body_case                     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req                 = &g;
	ck_assert_int_eq(tls_call(j, "trainer-0", ps_scheduler_url(j->sched),
	                     t0, PSWIRE__METHOD__GET_PLACEMENT, &h, NULL, 0,
	                     &rep),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(rep->body_case, PSWIRE__HEADER__BODY_PLACEMENT);
	uint64_t epoch = rep->placement->epoch;
	pswire__header__free_unpacked(rep, NULL);
	return epoch;
}

// push_as sends an empty Push for rank to server i over TLS with
// certificate cert_name; returns the reply's status.
static int
push_as(struct tls_job *j, int i, const char *cert_name, uint32_t rank,
    uint64_t epoch)
{
	Pswire__Header      h      = PSWIRE__HEADER__INIT;
	Pswire__PushRequest p      = PSWIRE__PUSH_REQUEST__INIT;
	struct psw_ident    nobody = { PSW_ROLE_NONE, 0 };
	h.rank                     = rank;
	h.epoch                    = epoch;
	h.body_case                = PSWIRE__HEADER__BODY_PUSH_REQ;
	h.push_req                 = &p;
	return tls_call(j, cert_name, ps_server_url(j->srv[i]), nobody,
	    PSWIRE__METHOD__PUSH, &h, NULL, 0, NULL);
}

// With TLS and no secret, who a request comes from is its certificate:
// trainer-1's certificate may not register, push, report links or leave
// for rank 0, nor register or take out a server; server-0's may not take
// a new slot nor take out server 1; a trainer's may not Transfer a
// shard. Each is PERMISSION_DENIED and counted, the map's epoch does not
// move, and rank 0 then pulls exactly the weights the job trained to.
START_TEST(test_tls_alone_roles_from_certificate)
{
	struct tls_job   j = { 0 };
	struct pt_rank   a[2];
	struct psw_ident nobody = { PSW_ROLE_NONE, 0 };
	char             stats[4096];

	if (!make_certs(j.dir, sizeof(j.dir), MEMBERS)) {
		fprintf(stderr, "test_tls: no openssl, not run\n");
		return;
	}
	j.tls = 1; // and no secret
	job_open(&j);
	train_all(&j, a);
	uint64_t             epoch  = map_epoch(&j);
	struct obs_registry *reg    = ps_scheduler_metrics(j.sched);
	double               denied = pt_metric(reg, "ferry_rpc_denied_total");

	// The scheduler's rpcs, each for another member.
	ck_assert_int_eq(signed_register(&j, "trainer-1", nobody,
	                     PSWIRE__ROLE__ROLE_TRAINER, 0),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(signed_register(&j, "trainer-1", nobody,
	                     PSWIRE__ROLE__ROLE_SERVER, 0),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(signed_register(&j, "server-0", nobody,
	                     PSWIRE__ROLE__ROLE_SERVER, 0),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(
	    leave_as(&j, "trainer-1", PSWIRE__ROLE__ROLE_TRAINER, 0),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(
	    leave_as(&j, "trainer-1", PSWIRE__ROLE__ROLE_SERVER, 1),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(
	    leave_as(&j, "server-0", PSWIRE__ROLE__ROLE_SERVER, 1),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	{
		Pswire__Header             h = PSWIRE__HEADER__INIT;
		Pswire__ReportLinksRequest r =
		    PSWIRE__REPORT_LINKS_REQUEST__INIT;
		double rtt[2] = { 3600, 3600 };
		double bw[2]  = { 1, 1 };
		r.rank        = 0;
		r.n_rtt_s     = 2;
		r.rtt_s       = rtt;
		r.n_bw_bps    = 2;
		r.bw_bps      = bw;
		h.body_case   = PSWIRE__HEADER__BODY_LINKS_REQ;
		h.links_req   = &r;
		ck_assert_int_eq(tls_call(&j, "trainer-1",
		                     ps_scheduler_url(j.sched), nobody,
		                     PSWIRE__METHOD__REPORT_LINKS, &h, NULL, 0,
		                     NULL),
		    PSWIRE__STATUS__PERMISSION_DENIED);
	}
	ck_assert_double_eq(pt_metric(reg, "ferry_rpc_denied_total"),
	    denied + 7);
	ps_scheduler_stats(j.sched, stats, sizeof(stats));
	ck_assert_msg(strstr(stats, "servers:2/2") != NULL, "%s", stats);

	// The servers' rpcs: a push for rank 0 by trainer-1 (the same
	// certificate pushing for its own rank gets past the role check),
	// and a Transfer of shard 0 from a trainer.
	for (int i = 0; i < SERVERS; i++) {
		struct obs_registry *sr = ps_server_metrics(j.srv[i]);
		double d0 = pt_metric(sr, "ferry_rpc_denied_total");
		ck_assert_int_eq(push_as(&j, i, "trainer-1", 0, epoch),
		    PSWIRE__STATUS__PERMISSION_DENIED);
		ck_assert_int_ne(push_as(&j, i, "trainer-1", 1, epoch),
		    PSWIRE__STATUS__PERMISSION_DENIED);

		Pswire__Header          h = PSWIRE__HEADER__INIT;
		Pswire__TransferRequest t = PSWIRE__TRANSFER_REQUEST__INIT;
		uint8_t                 state[2] = { 0, 0 };
		float                   x[16];
		for (int k = 0; k < 16; k++) {
			x[k] = 7.0f;
		}
		t.shard        = 0;
		t.version      = 1000;
		t.state.data   = state;
		t.state.len    = 2;
		h.epoch        = epoch + 1;
		h.body_case    = PSWIRE__HEADER__BODY_TRANSFER_REQ;
		h.transfer_req = &t;
		ck_assert_int_eq(
		    tls_call(&j, "trainer-0", ps_server_url(j.srv[i]), nobody,
		        PSWIRE__METHOD__TRANSFER, &h, x, sizeof(x), NULL),
		    PSWIRE__STATUS__PERMISSION_DENIED);
		ck_assert_double_eq(pt_metric(sr, "ferry_rpc_denied_total"),
		    d0 + 2);
	}
	ck_assert_uint_eq(map_epoch(&j), epoch);

	// Rank 0 comes back with its own certificate and pulls exactly the
	// weights the job trained to: nothing above changed them.
	struct pt_rank back = { .url = ps_scheduler_url(j.sched),
		.tls_dir             = j.dir,
		.rejoin              = 1 };
	pt_ranks_train(&back, 1);
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(
		    memcmp(back.w[t], a[0].w[t], lens[t] * sizeof(float)) == 0,
		    "tensor %d changed", t);
	}
	job_close(&j);
	rm_dir(j.dir);
}
END_TEST

// ps_job_snapshot (`ps-server --role=snapshot`) over TLS, alone and with
// a secret: with the operator's certificate every server writes its
// file; a trainer's certificate is refused (PERMISSION_DENIED), and
// without a certificate the TLS scheduler never answers.
START_TEST(test_tls_job_snapshot)
{
	for (int with_key = 0; with_key < 2; with_key++) {
		struct tls_job              j = { 0 };
		struct pt_rank              a[2];
		struct ps_job_snapshot      js;
		struct ps_job_snapshot_auth au = { 0 };
		char kf[64]                    = "/tmp/ferry-tls-key-XXXXXX";
		char snap[64]                  = "/tmp/ferry-tls-snap-XXXXXX";
		char cert[160], key[160], ca[160], err[512];

		if (!make_certs(j.dir, sizeof(j.dir),
		        MEMBERS " server operator")) {
			fprintf(stderr, "test_tls: no openssl, not run\n");
			return;
		}
		if (with_key) {
			write_key(kf);
			j.key          = kf;
			au.secret_file = kf;
		}
		ck_assert_ptr_nonnull(mkdtemp(snap));
		j.tls      = 1;
		j.snap_dir = snap;
		job_open(&j);
		train_all(&j, a);
		const char *url = ps_scheduler_url(j.sched);
		au.tls_ca       = path_in(ca, sizeof(ca), j.dir, "ca.pem");
		au.tls_cert     = path_in(cert, sizeof(cert), j.dir,
		        "operator.pem");
		au.tls_key = path_in(key, sizeof(key), j.dir, "operator.key");
		int rv     = ps_job_snapshot(url, &au, 0, 20000, &js, err,
		        sizeof(err));
		ck_assert_msg(rv == FB_OK, "key %d: %s", with_key, err);
		ck_assert_uint_eq(js.version, STEPS);
		ck_assert_uint_gt(js.shards, 0);
		ck_assert_uint_gt(js.bytes, 0);
		// A trainer's certificate is not the operator's.
		au.tls_cert = path_in(cert, sizeof(cert), j.dir,
		    "trainer-0.pem");
		au.tls_key = path_in(key, sizeof(key), j.dir, "trainer-0.key");
		// (With the key, signing as the operator over trainer-0's
		// certificate is UNAUTHENTICATED; without, the certificate is
		// the identity and the role check refuses it.)
		rv = ps_job_snapshot(url, &au, 0, 5000, &js, err, sizeof(err));
		ck_assert_int_eq(rv, FB_EREMOTE);
		ck_assert_msg(strstr(err,
		                  with_key ? "UNAUTHENTICATED"
		                           : "PERMISSION_DENIED") != NULL,
		    "key %d: %s", with_key, err);
		// No certificate: TLS never lets the call through.
		struct ps_job_snapshot_auth plain = { 0 };
		plain.secret_file                 = au.secret_file;
		rv = ps_job_snapshot(url, &plain, 0, 1500, &js, err,
		    sizeof(err));
		ck_assert_int_ne(rv, FB_OK);
		// Half the TLS flags: named.
		au.tls_key = NULL;
		rv = ps_job_snapshot(url, &au, 0, 1500, &js, err, sizeof(err));
		ck_assert_int_eq(rv, FB_EINVAL);
		ck_assert_msg(strstr(err, "--tls-key") != NULL, "%s", err);
		job_close(&j);
		rm_dir(j.dir);
		rm_dir(snap);
		if (with_key) {
			unlink(kf);
		}
	}
}
END_TEST

// With TLS and a secret, the identity a request is signed as must be the
// one its connection's certificate names: trainer-0's certificate cannot
// act for rank 1, nor as a server, although it holds the job's key; the
// same certificate acting as itself is served.
START_TEST(test_tls_identity_from_certificate)
{
	struct tls_job   j      = { 0 };
	char             kf[64] = "/tmp/ferry-tls-key-XXXXXX", stats[4096];
	struct psw_ident t0     = { PSW_ROLE_TRAINER, 0 };
	struct psw_ident t1     = { PSW_ROLE_TRAINER, 1 };
	struct psw_ident srv    = { PSW_ROLE_SERVER, PSW_ID_UNASSIGNED };

	if (!make_certs(j.dir, sizeof(j.dir), MEMBERS " server")) {
		fprintf(stderr, "test_tls: no openssl, not run\n");
		return;
	}
	write_key(kf);
	j.tls       = 1;
	j.key       = kf;
	j.server_as = "server"; // (test_tls_job_snapshot: indexed ones)
	job_open(&j);
	wait_servers(&j, 2);
	// trainer-0's certificate signing as trainer-1, for rank 1.
	ck_assert_int_eq(signed_register(&j, "trainer-0", t1,
	                     PSWIRE__ROLE__ROLE_TRAINER, 1),
	    PSWIRE__STATUS__UNAUTHENTICATED);
	// trainer-0's certificate signing as a server, registering one.
	ck_assert_int_eq(signed_register(&j, "trainer-0", srv,
	                     PSWIRE__ROLE__ROLE_SERVER, 0),
	    PSWIRE__STATUS__UNAUTHENTICATED);
	// trainer-0 as itself may not register a server either (roles).
	ck_assert_int_eq(
	    signed_register(&j, "trainer-0", t0, PSWIRE__ROLE__ROLE_SERVER, 0),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ps_scheduler_stats(j.sched, stats, sizeof(stats));
	ck_assert_msg(strstr(stats, "trainers:0/2") != NULL, "%s", stats);
	ck_assert_msg(strstr(stats, "servers:2/2") != NULL, "%s", stats);
	// trainer-0's certificate as itself, for rank 0: served.
	ck_assert_int_eq(signed_register(&j, "trainer-0", t0,
	                     PSWIRE__ROLE__ROLE_TRAINER, 0),
	    PSWIRE__STATUS__OK);
	ps_scheduler_stats(j.sched, stats, sizeof(stats));
	ck_assert_msg(strstr(stats, "trainers:1/2") != NULL, "%s", stats);
	job_close(&j);
	unlink(kf);
	rm_dir(j.dir);
}
END_TEST

// With TLS, with a secret and without, a trainer accepts the scheduler's
// replies (maps among them) only over a connection with the scheduler's
// certificate: a "scheduler" with the job's CA (and key) but trainer-0's
// certificate is refused.
START_TEST(test_tls_maps_only_from_scheduler_certificate)
{
	for (int with_key = 0; with_key < 2; with_key++) {
		struct tls_job           j      = { 0 };
		char                     kf[64] = "/tmp/ferry-tls-key-XXXXXX";
		char                     cert[160], key[160], ca[160];
		struct ferry_opts        o    = FERRY_OPTS_INIT;
		struct ferry_tensor_desc d[1] = { { "a", 40,
		    FERRY_TENSOR_WEIGHTS } };
		ferry_client            *c    = NULL;

		if (!make_certs(j.dir, sizeof(j.dir), MEMBERS " server")) {
			fprintf(stderr, "test_tls: no openssl, not run\n");
			return;
		}
		if (with_key) {
			write_key(kf);
			j.key = kf;
		}
		j.tls      = 1;
		j.sched_as = "trainer-0";
		job_open(&j);
		o.scheduler_url = ps_scheduler_url(j.sched);
		o.rank          = 1;
		o.timeout_ms    = 3000;
		o.tls_cert      = path_in(cert, sizeof(cert), j.dir,
		         "trainer-1.pem");
		o.tls_key = path_in(key, sizeof(key), j.dir, "trainer-1.key");
		o.tls_ca  = path_in(ca, sizeof(ca), j.dir, "ca.pem");
		ck_assert_int_eq(ferry_client_open(&o, &c), 0);
		if (with_key) {
			ck_assert_int_eq(ferry_client_set_secret_file(c, kf),
			    0);
		}
		ck_assert_int_ne(ferry_client_declare(c, d, 1), 0);
		ck_assert_msg(strstr(ferry_client_last_error(c),
		                  "not the scheduler's") != NULL,
		    "key %d: %s", with_key, ferry_client_last_error(c));
		ferry_client_close(c);
		job_close(&j);
		if (with_key) {
			unlink(kf);
		}
		rm_dir(j.dir);
	}
}
END_TEST

// Bad TLS options get a clear error naming what is wrong, before any
// connection.
START_TEST(test_tls_bad_options)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	char              why[300], dir[64], cert[160], key[160], ca[160];

	o.scheduler_url = "tls+tcp://127.0.0.1:1";
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_msg(strstr(why, "--tls-ca") != NULL, "%s", why);
	o.tls_cert = "/nonexistent/c.pem";
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_msg(strstr(why, "missing --tls-key") != NULL, "%s", why);
	o.tls_key = "/nonexistent/c.key";
	o.tls_ca  = "/nonexistent/ca.pem";
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_msg(strstr(why, "--tls-cert /nonexistent/c.pem") != NULL,
	    "%s", why);
	if (!make_certs(dir, sizeof(dir), "trainer-0")) {
		return;
	}
	o.tls_cert = path_in(cert, sizeof(cert), dir, "trainer-0.pem");
	o.tls_key  = path_in(key, sizeof(key), dir, "ca.pem"); // not a key
	o.tls_ca   = path_in(ca, sizeof(ca), dir, "ca.pem");
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_msg(strstr(why, "--tls-key") != NULL, "%s", why);
	o.tls_key       = path_in(key, sizeof(key), dir, "trainer-0.key");
	o.scheduler_url = "ipc:///tmp/x";
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_msg(strstr(why, "tcp:// or tls+tcp://") != NULL, "%s", why);
	o.scheduler_url = "tcp://127.0.0.1:1";
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_OK);
	rm_dir(dir);
}
END_TEST

Suite *
suite_tls(void)
{
	Suite *s  = suite_create("tls");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_tls_job_equals_plain);
	tcase_add_test(tc, test_tls_strangers_refused);
	tcase_add_test(tc, test_tls_bad_options);
	tcase_add_test(tc, test_tls_identity_from_certificate);
	tcase_add_test(tc, test_tls_maps_only_from_scheduler_certificate);
	tcase_add_test(tc, test_tls_alone_roles_from_certificate);
	tcase_add_test(tc, test_tls_job_snapshot);
	suite_add_tcase(s, tc);
	return s;
}
