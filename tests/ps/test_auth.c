// test_auth.c — a job run with a secret (--secret-file), attacked over the
// wire: requests from outsiders (unsigned, or another key) and from a
// member acting for another (a late server Register, a Leave of another
// member, a push for another rank, a Snapshot from a trainer, a Replicate
// from a server that is not the shard's primary, a Transfer from a peer
// that never held the shard) and a replayed request are all refused, the map
// epoch does not move, the refusals are counted; then a real move lands and a
// trainer pulls the weights it left.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "obs/obs.h"
#include "ps/ps.h"
#include "harness.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

#define KEY "a per-job key of more than 16 bytes"
#define STEPS 3

struct job {
	char                 key[64], other_key[64];
	struct ps_scheduler *sched;
	struct ps_server    *srv[3];
	uint64_t             run;         // the job run (placement learns it)
	char                 urls[3][64]; // server i's URL in the map
};

// write_key writes text to a fresh temporary file named into path.
static void
write_key(char *path, size_t n, const char *text)
{
	snprintf(path, n, "/tmp/ferry-auth-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)),
	    (ssize_t) strlen(text));
	close(fd);
}

static void
job_open(struct job *j)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64];

	write_key(j->key, sizeof(j->key), KEY);
	write_key(j->other_key, sizeof(j->other_key),
	    "not the job's key at all");
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = 3;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	so.secret_file = j->key;
	PT_OK(ps_scheduler_open(&so, &j->sched));
	for (int i = 0; i < 3; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url           = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url = ps_scheduler_url(j->sched);
		o.secret_file   = j->key;
		PT_OK(ps_server_open(&o, &j->srv[i]));
	}
}

static void
job_close(struct job *j)
{
	for (int i = 0; i < 3; i++) {
		ps_server_close(j->srv[i]);
	}
	ps_scheduler_close(j->sched);
	unlink(j->key);
	unlink(j->other_key);
}

// receiver_of names whom a request sent to url is for: the server whose
// slot the map gives url, else the scheduler.
static struct psw_ident
receiver_of(const struct job *j, const char *url)
{
	struct psw_ident to = { PSW_ROLE_SCHEDULER, 0 };
	for (uint32_t i = 0; i < 3; i++) {
		if (strcmp(j->urls[i], url) == 0) {
			to.role = PSW_ROLE_SERVER;
			to.id   = i;
		}
	}
	return to;
}

// call sends header h with payload (len bytes) for method to url, signed
// as who with key_file (NULL: unsigned) for url's member in the job's
// run, and returns the reply's status.
static int
call(const struct job *j, const char *url, const char *key_file,
    struct psw_ident who, uint8_t method, Pswire__Header *h,
    const void *payload, size_t len)
{
	struct pt_peer as = { key_file, who, NULL, NULL, receiver_of(j, url),
		j->run };
	return pt_rpc(&as, url, method, h, payload, len, NULL);
}

// placement fetches the current map from the scheduler, signed as
// trainer-0 (free with pswire__placement__free_unpacked), and notes the
// job run and the servers' slots in j.
static Pswire__Placement *
placement(struct job *j)
{
	Pswire__Placement *pl = pt_signed_map(ps_scheduler_url(j->sched),
	    j->key, &j->run);
	ck_assert_uint_ne(j->run, 0);
	for (size_t i = 0; i < pl->n_servers && i < 3; i++) {
		snprintf(j->urls[i], sizeof(j->urls[i]), "%s", pl->servers[i]);
	}
	return pl;
}

static int
leave(struct job *j, const char *key, struct psw_ident who, int role,
    uint32_t id)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	l.role                 = role;
	l.id                   = id;
	h.body_case            = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req            = &l;
	return call(j, ps_scheduler_url(j->sched), key, who,
	    PSWIRE__METHOD__LEAVE, &h, NULL, 0);
}

static int
signed_register_server(struct job *j, const char *key, struct psw_ident who,
    const char *url)
{
	Pswire__Header          h = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest r = PSWIRE__REGISTER_REQUEST__INIT;
	r.role                    = PSWIRE__ROLE__ROLE_SERVER;
	r.url                     = (char *) url;
	h.body_case               = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req            = &r;
	return call(j, ps_scheduler_url(j->sched), key, who,
	    PSWIRE__METHOD__REGISTER, &h, NULL, 0);
}

// transfer sends a forged Transfer of shard id (len floats, all 7.0) to
// url, stamped with epoch, signed as who.
static int
transfer(const struct job *j, const char *url, const char *key,
    struct psw_ident who, uint32_t id, uint64_t len, uint64_t epoch)
{
	Pswire__Header          h        = PSWIRE__HEADER__INIT;
	Pswire__TransferRequest t        = PSWIRE__TRANSFER_REQUEST__INIT;
	uint8_t                 state[2] = { 0, 0 };
	float                   x[64];
	for (int i = 0; i < 64; i++) {
		x[i] = 7.0f;
	}
	t.shard        = id;
	t.version      = 1000;
	t.samples      = 0;
	t.state.data   = state;
	t.state.len    = 2;
	h.epoch        = epoch;
	h.body_case    = PSWIRE__HEADER__BODY_TRANSFER_REQ;
	h.transfer_req = &t;
	return call(j, url, key, who, PSWIRE__METHOD__TRANSFER, &h, x,
	    len * 4);
}

START_TEST(test_auth_forgeries_refused)
{
	struct job     j;
	struct pt_rank a[2] = { { 0 } };

	job_open(&j);
	for (int r = 0; r < 2; r++) {
		a[r].url   = ps_scheduler_url(j.sched);
		a[r].key   = j.key;
		a[r].steps = STEPS;
	}
	pt_ranks_train(a, 2);
	Pswire__Placement   *pl    = placement(&j);
	uint64_t             epoch = pl->epoch;
	struct psw_ident     t0    = { PSW_ROLE_TRAINER, 0 };
	struct psw_ident     s0    = { PSW_ROLE_SERVER, 0 };
	const char          *sched = ps_scheduler_url(j.sched);
	struct obs_registry *reg   = ps_scheduler_metrics(j.sched);
	double unauth0 = pt_metric(reg, "ferry_rpc_unauthenticated_total");

	// Outsiders: no signature, or another key.
	ck_assert_int_eq(
	    signed_register_server(&j, NULL, t0, "tcp://127.0.0.1:9"),
	    PSWIRE__STATUS__UNAUTHENTICATED);
	ck_assert_int_eq(
	    signed_register_server(&j, j.other_key, s0, "tcp://127.0.0.1:9"),
	    PSWIRE__STATUS__UNAUTHENTICATED);
	ck_assert_int_eq(leave(&j, NULL, t0, PSWIRE__ROLE__ROLE_SERVER, 1),
	    PSWIRE__STATUS__UNAUTHENTICATED);
	ck_assert_double_eq(pt_metric(reg, "ferry_rpc_unauthenticated_total"),
	    unauth0 + 3);
	// Members acting for others: a late Register of a new server by a
	// trainer and by server 0, Leaves of another trainer and server.
	ck_assert_int_eq(
	    signed_register_server(&j, j.key, t0, "tcp://127.0.0.1:9"),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(
	    signed_register_server(&j, j.key, s0, "tcp://127.0.0.1:9"),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(leave(&j, j.key, t0, PSWIRE__ROLE__ROLE_TRAINER, 1),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(leave(&j, j.key, t0, PSWIRE__ROLE__ROLE_SERVER, 1),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(leave(&j, j.key, s0, PSWIRE__ROLE__ROLE_SERVER, 2),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_double_ge(pt_metric(reg, "ferry_rpc_denied_total"), 5);

	// A push for rank 1 signed by trainer 0, to every server.
	for (int i = 0; i < 3; i++) {
		Pswire__Header      h = PSWIRE__HEADER__INIT;
		Pswire__PushRequest p = PSWIRE__PUSH_REQUEST__INIT;
		h.rank                = 1;
		h.epoch               = epoch;
		h.body_case           = PSWIRE__HEADER__BODY_PUSH_REQ;
		h.push_req            = &p;
		ck_assert_int_eq(call(&j, ps_server_url(j.srv[i]), j.key, t0,
		                     PSWIRE__METHOD__PUSH, &h, NULL, 0),
		    PSWIRE__STATUS__PERMISSION_DENIED);
	}

	// Snapshot is the operator's (through the scheduler, which forwards
	// it to the servers): a trainer may not ask either.
	{
		Pswire__Header          h  = PSWIRE__HEADER__INIT;
		Pswire__SnapshotRequest r  = PSWIRE__SNAPSHOT_REQUEST__INIT;
		struct psw_ident        op = { PSW_ROLE_OPERATOR, 0 };
		h.body_case                = PSWIRE__HEADER__BODY_SNAPSHOT_REQ;
		h.snapshot_req             = &r;
		ck_assert_int_eq(call(&j, sched, j.key, t0,
		                     PSWIRE__METHOD__SNAPSHOT, &h, NULL, 0),
		    PSWIRE__STATUS__PERMISSION_DENIED);
		ck_assert_int_eq(call(&j, ps_server_url(j.srv[0]), j.key, t0,
		                     PSWIRE__METHOD__SNAPSHOT, &h, NULL, 0),
		    PSWIRE__STATUS__PERMISSION_DENIED);
		// An operator gets past the role check (the servers have no
		// --snapshot-dir, so the snapshot itself fails).
		int st = call(&j, sched, j.key, op, PSWIRE__METHOD__SNAPSHOT,
		    &h, NULL, 0);
		ck_assert_int_ne(st, PSWIRE__STATUS__PERMISSION_DENIED);
		ck_assert_int_ne(st, PSWIRE__STATUS__UNAUTHENTICATED);
	}

	// Replicate of shard 0 (an update for its backups) from anyone but
	// its primary in the current map: refused. The primary itself gets
	// past the role check (no backups here: UNAVAILABLE).
	for (int i = 0; i < 3; i++) {
		Pswire__Header           h  = PSWIRE__HEADER__INIT;
		Pswire__ReplicateRequest rq = PSWIRE__REPLICATE_REQUEST__INIT;
		uint32_t                 primary     = pl->shards[0]->server;
		struct psw_ident         not_primary = { PSW_ROLE_SERVER,
			        (primary + 1) % 3 };
		struct psw_ident is_primary = { PSW_ROLE_SERVER, primary };
		h.epoch                     = epoch;
		h.body_case     = PSWIRE__HEADER__BODY_REPLICATE_REQ;
		h.replicate_req = &rq;
		rq.shard        = 0;
		const char *url = ps_server_url(j.srv[i]);
		ck_assert_int_eq(call(&j, url, j.key, not_primary,
		                     PSWIRE__METHOD__REPLICATE, &h, NULL, 0),
		    PSWIRE__STATUS__PERMISSION_DENIED);
		ck_assert_int_eq(call(&j, url, j.key, t0,
		                     PSWIRE__METHOD__REPLICATE, &h, NULL, 0),
		    PSWIRE__STATUS__PERMISSION_DENIED);
		ck_assert_int_ne(call(&j, url, j.key, is_primary,
		                     PSWIRE__METHOD__REPLICATE, &h, NULL, 0),
		    PSWIRE__STATUS__PERMISSION_DENIED);
	}

	// A replayed request: the same signed Heartbeat twice.
	{
		Pswire__Header       h = PSWIRE__HEADER__INIT;
		Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
		struct psw_auth     *au;
		nng_socket           s;
		nng_msg             *m, *again, *rep;
		uint8_t             *p;
		char                 err[256];
		l.role      = PSWIRE__ROLE__ROLE_TRAINER;
		l.id        = 0;
		h.body_case = PSWIRE__HEADER__BODY_LEAVE_REQ;
		h.leave_req = &l;
		size_t hl   = pswire__header__get_packed_size(&h);
		PT_OK(psw_auth_open(j.key, PSW_ROLE_TRAINER, 0, &au, err,
		    sizeof(err)));
		PT_OK(psw_msg_begin(&m, hl, 0, &p));
		PT_OK(psw_msg_finish(m, PSWIRE__METHOD__HEARTBEAT, 0, &h.base,
		    hl, 0));
		psw_auth_set_run(au, j.run);
		PT_OK(psw_auth_sign(au, m, 42, 0, NULL));
		ck_assert_int_eq(nng_msg_dup(&again, m), 0);
		ck_assert_int_eq(nng_req0_open(&s), 0);
		nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
		ck_assert_int_eq(nng_dial(s, sched, NULL, 0), 0);
		for (int k = 0; k < 2; k++) {
			struct psw_frame f;
			const char      *why;
			ck_assert_int_eq(nng_sendmsg(s, k ? again : m, 0), 0);
			ck_assert_int_eq(nng_recvmsg(s, &rep, 0), 0);
			PT_OK(psw_msg_parse(rep, &f, &why));
			Pswire__Header *rh = pswire__header__unpack(NULL,
			    f.hdr_len, f.hdr);
			ck_assert_int_eq(rh->status,
			    k ? PSWIRE__STATUS__UNAUTHENTICATED
			      : PSWIRE__STATUS__OK);
			pswire__header__free_unpacked(rh, NULL);
			nng_msg_free(rep);
		}
		nng_close(s);
		psw_auth_close(au);
	}

	// Nothing above moved the map.
	Pswire__Placement *pl2 = placement(&j);
	ck_assert_uint_eq(pl2->epoch, epoch);
	ck_assert_uint_eq(pl2->n_servers, 3);
	pswire__placement__free_unpacked(pl2, NULL);

	// A forged Transfer of shard 0 to the server the next map gives it,
	// from a trainer and from the third server (which never held it),
	// stamped with the next epoch: refused.
	uint32_t    owner = pl->shards[0]->server;
	uint32_t    to = (owner + 1) % 3, other = (owner + 2) % 3;
	uint64_t    len    = pl->shards[0]->len;
	const char *to_url = NULL;
	for (int i = 0; i < 3; i++) {
		if (strcmp(ps_server_url(j.srv[i]), pl->servers[to]) == 0) {
			to_url = ps_server_url(j.srv[i]);
		}
	}
	ck_assert_ptr_nonnull(to_url);
	struct psw_ident so = { PSW_ROLE_SERVER, other };
	ck_assert_int_eq(transfer(&j, to_url, j.key, t0, 0, len, epoch + 1),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(transfer(&j, to_url, j.key, so, 0, len, epoch + 1),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(transfer(&j, to_url, NULL, so, 0, len, epoch + 1),
	    PSWIRE__STATUS__UNAUTHENTICATED);

	// The real move: every shard to the next server. Then rank 0 comes
	// back and pulls exactly the weights the job ended with.
	uint32_t *assign = calloc(pl->n_shards, sizeof(*assign));
	for (size_t i = 0; i < pl->n_shards; i++) {
		assign[i] = (pl->shards[i]->server + 1) % 3;
	}
	PT_OK(ps_scheduler_replace(j.sched, assign, pl->n_shards));
	free(assign);
	pswire__placement__free_unpacked(pl, NULL);
	struct pt_rank back = { .url = sched, .key = j.key, .rejoin = 1 };
	pt_ranks_train(&back, 1);
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			ck_assert_float_eq(back.w[t][i], a[0].w[t][i]);
		}
	}
	job_close(&j);
}
END_TEST

// A trainer with the wrong key gets a clear error from the scheduler and
// the job never counts it.
START_TEST(test_auth_wrong_key_trainer)
{
	struct job               j;
	struct ferry_opts        o     = FERRY_OPTS_INIT;
	ferry_client            *c     = NULL;
	struct ferry_tensor_desc d[NT] = { { "a", 40, FERRY_TENSOR_WEIGHTS },
		{ "b", 7, FERRY_TENSOR_WEIGHTS },
		{ "c", 1, FERRY_TENSOR_WEIGHTS } };

	job_open(&j);
	o.scheduler_url = ps_scheduler_url(j.sched);
	o.timeout_ms    = 3000;
	ck_assert_int_eq(ferry_client_open(&o, &c), 0);
	ck_assert_int_eq(ferry_client_set_secret_file(c, "/nonexistent/k"),
	    FERRY_EINVAL);
	ck_assert_msg(strstr(ferry_client_last_error(c), "/nonexistent/k"),
	    "%s", ferry_client_last_error(c));
	ck_assert_int_eq(ferry_client_set_secret_file(c, j.other_key), 0);
	ck_assert_int_eq(ferry_client_declare(c, d, NT), FERRY_EREMOTE);
	ck_assert_msg(strstr(ferry_client_last_error(c), "UNAUTHENTICATED"),
	    "%s", ferry_client_last_error(c));
	ferry_client_close(c);
	char stats[4096];
	ps_scheduler_stats(j.sched, stats, sizeof(stats));
	ck_assert_msg(strstr(stats, "trainers:0/2") != NULL, "%s", stats);
	job_close(&j);
}
END_TEST

Suite *
suite_auth(void)
{
	Suite *s  = suite_create("auth");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_auth_forgeries_refused);
	tcase_add_test(tc, test_auth_wrong_key_trainer);
	suite_add_tcase(s, tc);
	return s;
}
