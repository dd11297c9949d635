// test_quarantine.c — untrusted trainers, the scheduler's side (issue 31):
// a verifier's (operator-signed) mismatch quarantines a trainer of a
// signed sync job, which is then out of the rounds (the other rank trains
// on) and refused PERMISSION_DENIED on every rpc of the scheduler and of
// the servers; a trainer may not send verdicts; a Register declaring an
// attack is refused unless the job allows attacks; a server's heartbeat
// reporting an outlier streak at the threshold quarantines (without
// auth: by the ranks requests claim), the suspicion gauge follows the
// streak, and a restarted scheduler (--state-dir) still refuses the
// rank.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "fb/fb.h"
#include "ferry.pb-c.h"
#include "harness.h"
#include "obs/obs.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"
#include "scrape.h"

#define KEY "a per-job key of more than 16 bytes"
#define STEPS 4

struct job {
	char                 key[64];
	struct ps_scheduler *sched;
	struct ps_server    *srv[2];
	uint64_t             run;
	char                 urls[2][64]; // server i's URL in the map
	int                  verdict;     // rank 1's own Verified's status
	int                  installed;   // the servers installed its map
	double               epochs[3];   // the map's, then the servers'
};

static double prom(struct obs_registry *r, const char *name,
    const char *labels);

static void
job_open(struct job *j)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64];

	memset(j, 0, sizeof(*j));
	snprintf(j->key, sizeof(j->key), "/tmp/ferry-quar-XXXXXX");
	int fd = mkstemp(j->key);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, KEY, strlen(KEY)), (ssize_t) strlen(KEY));
	close(fd);
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = 2;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	so.secret_file = j->key;
	PT_OK(ps_scheduler_open(&so, &j->sched));
	for (int i = 0; i < 2; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url           = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url = ps_scheduler_url(j->sched);
		o.secret_file   = j->key;
		PT_OK(ps_server_open(&o, &j->srv[i]));
	}
}

// servers_slotted waits (10 s at most) until the scheduler tracks both
// servers' heartbeats, which they send once Register gave them a slot: a
// trainer's first offer then never meets a server still registering
// (refused "no slot yet", a retry this suite is not about).
static void
servers_slotted(struct job *j)
{
	struct obs_registry *reg = ps_scheduler_metrics(j->sched);
	for (uint64_t t0 = fb_clock_ms(); fb_clock_ms() - t0 < 10000;) {
		int n = 0;
		for (int i = 0; i < 2; i++) {
			char lab[48];
			snprintf(lab, sizeof(lab), "role=\"server\",id=\"%d\"",
			    i);
			n += prom(reg, "ferry_member_heartbeat_age_seconds",
			         lab) >= 0;
		}
		if (n == 2) {
			return;
		}
		fb_sleep_us(2000);
	}
	ck_abort_msg("the servers never heartbeated");
}

static void
job_close(struct job *j)
{
	for (int i = 0; i < 2; i++) {
		ps_server_close(j->srv[i]);
	}
	ps_scheduler_close(j->sched);
	unlink(j->key);
}

// call sends h for method to the scheduler (server < 0) or to server
// slot `server`, signed as who, and returns the status; with err, the
// reply's error text goes there (n bytes).
static int
call(const struct job *j, int server, struct psw_ident who, uint8_t method,
    Pswire__Header *h, char *err, size_t n)
{
	struct psw_ident to  = { PSW_ROLE_SCHEDULER, 0 };
	const char      *url = ps_scheduler_url(j->sched);
	Pswire__Header  *rep = NULL;
	if (server >= 0) {
		to.role = PSW_ROLE_SERVER;
		to.id   = (uint32_t) server;
		url     = j->urls[server];
	}
	struct pt_peer as = { j->key, who, NULL, NULL, to, j->run };
	int            st = pt_rpc(&as, url, method, h, NULL, 0, &rep);
	if (err != NULL) {
		snprintf(err, n, "%s", rep != NULL ? rep->error : "");
	}
	if (rep != NULL) {
		pswire__header__free_unpacked(rep, NULL);
	}
	return st;
}

// verified sends a verdict on rank's push to the scheduler at url, as who
// (key NULL: unsigned), and returns the status.
static int
verified(const char *url, const char *key, struct psw_ident who, uint32_t rank,
    int mismatch)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__VerifiedRequest v  = PSWIRE__VERIFIED_REQUEST__INIT;
	struct psw_ident        to = { PSW_ROLE_SCHEDULER, 0 };
	v.rank                     = rank;
	v.version                  = 2;
	v.data_step                = 2;
	v.mismatch                 = mismatch;
	v.differing                = 5;
	v.max_abs_diff             = 0.5f;
	h.body_case                = PSWIRE__HEADER__BODY_VERIFIED_REQ;
	h.verified_req             = &v;
	struct pt_peer as          = { key, who, NULL, NULL,
                key ? to : (struct psw_ident) { 0, 0 }, 0 };
	return pt_rpc(key ? &as : NULL, url, PSWIRE__METHOD__VERIFIED, &h,
	    NULL, 0, NULL);
}

// prom reads sample name{labels} of registry r (-1 when absent).
static double
prom(struct obs_registry *r, const char *name, const char *labels)
{
	struct obs_writer w = OBS_WRITER_INIT;
	double            v = -1;
	PT_OK(obs_registry_write(r, &w));
	if (pt_prom_value(w.buf, name, labels, &v) != 0) {
		v = -1;
	}
	obs_writer_fini(&w);
	return v;
}

// quarantine_self is rank 1's hook: before its step 1 it has a verifier
// (an operator) report a mismatch of its own push, then waits (10 s at
// most) until both servers installed a map past the one in force, so
// that its next push meets a server that knows.
static void
quarantine_self(struct pt_rank *a, int k)
{
	struct job      *j  = a->ctx;
	struct psw_ident op = { PSW_ROLE_OPERATOR, 0 };
	if (k != 1) {
		return;
	}
	double e0  = pt_metric(ps_scheduler_metrics(j->sched),
	     "ferry_scheduler_map_epoch");
	j->verdict = verified(ps_scheduler_url(j->sched), j->key, op, 1, 1);
	for (uint64_t t0 = fb_clock_ms(); fb_clock_ms() - t0 < 10000;) {
		int n = 0;
		for (int i = 0; i < 2; i++) {
			n += pt_metric(ps_server_metrics(j->srv[i]),
			         "ferry_server_map_epoch") > e0;
		}
		j->epochs[0] = e0;
		j->epochs[1] = pt_metric(ps_server_metrics(j->srv[0]),
		    "ferry_server_map_epoch");
		j->epochs[2] = pt_metric(ps_server_metrics(j->srv[1]),
		    "ferry_server_map_epoch");
		if ((j->installed = n == 2)) {
			break;
		}
		fb_sleep_us(2000);
	}
}

// refused_everywhere checks that every rpc signed as trainer 1 is refused
// PERMISSION_DENIED as quarantined, at the scheduler and at server 0.
static void
refused_everywhere(struct job *j)
{
	struct psw_ident t1      = { PSW_ROLE_TRAINER, 1 };
	static const int sched[] = { PSWIRE__METHOD__REGISTER,
		PSWIRE__METHOD__HEARTBEAT, PSWIRE__METHOD__GET_PLACEMENT,
		PSWIRE__METHOD__REPORT_LINKS, PSWIRE__METHOD__LEAVE,
		PSWIRE__METHOD__LEASE, PSWIRE__METHOD__STATS };
	static const int srv[] = { PSWIRE__METHOD__PULL, PSWIRE__METHOD__PUSH,
		PSWIRE__METHOD__PUSH_PULL, PSWIRE__METHOD__ROWS,
		PSWIRE__METHOD__PROBE, PSWIRE__METHOD__STATS };
	Pswire__RegisterRequest     rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__LeaveRequest        l  = PSWIRE__LEAVE_REQUEST__INIT;
	Pswire__GetPlacementRequest g  = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	Pswire__ReportLinksRequest  lk = PSWIRE__REPORT_LINKS_REQUEST__INIT;
	Pswire__LeaseRequest        ls = PSWIRE__LEASE_REQUEST__INIT;
	Pswire__PushRequest         p  = PSWIRE__PUSH_REQUEST__INIT;
	Pswire__PullRequest         pu = PSWIRE__PULL_REQUEST__INIT;
	Pswire__RowsRequest         rw = PSWIRE__ROWS_REQUEST__INIT;
	Pswire__ProbeRequest        pr = PSWIRE__PROBE_REQUEST__INIT;
	char                        err[512];

	rr.role = l.role = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank = l.id = lk.rank = ls.rank = 1;
	for (size_t i = 0; i < sizeof(sched) / sizeof(sched[0]); i++) {
		Pswire__Header h = PSWIRE__HEADER__INIT;
		h.rank           = 1;
		switch (sched[i]) {
		case PSWIRE__METHOD__REGISTER:
			h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
			h.register_req = &rr;
			break;
		case PSWIRE__METHOD__HEARTBEAT:
		case PSWIRE__METHOD__LEAVE:
			h.body_case = PSWIRE__HEADER__BODY_LEAVE_REQ;
			h.leave_req = &l;
			break;
		case PSWIRE__METHOD__GET_PLACEMENT:
			h.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
			h.placement_req = &g;
			break;
		case PSWIRE__METHOD__REPORT_LINKS:
			h.body_case = PSWIRE__HEADER__BODY_LINKS_REQ;
			h.links_req = &lk;
			break;
		case PSWIRE__METHOD__LEASE:
			h.body_case = PSWIRE__HEADER__BODY_LEASE_REQ;
			h.lease_req = &ls;
			break;
		default:
			break;
		}
		ck_assert_msg(call(j, -1, t1, (uint8_t) sched[i], &h, err,
		                  sizeof(err)) ==
		        PSWIRE__STATUS__PERMISSION_DENIED,
		    "scheduler %s from trainer 1: not refused",
		    psw_method_name(sched[i]));
		ck_assert_msg(strstr(err, "trainer rank 1 is quarantined"),
		    "scheduler %s: %s", psw_method_name(sched[i]), err);
	}
	for (size_t i = 0; i < sizeof(srv) / sizeof(srv[0]); i++) {
		Pswire__Header h = PSWIRE__HEADER__INIT;
		h.rank           = 1;
		switch (srv[i]) {
		case PSWIRE__METHOD__PUSH:
		case PSWIRE__METHOD__PUSH_PULL:
			h.body_case = PSWIRE__HEADER__BODY_PUSH_REQ;
			h.push_req  = &p;
			break;
		case PSWIRE__METHOD__PULL:
			h.body_case = PSWIRE__HEADER__BODY_PULL_REQ;
			h.pull_req  = &pu;
			break;
		case PSWIRE__METHOD__ROWS:
			h.body_case = PSWIRE__HEADER__BODY_ROWS_REQ;
			h.rows_req  = &rw;
			break;
		case PSWIRE__METHOD__PROBE:
			h.body_case = PSWIRE__HEADER__BODY_PROBE_REQ;
			h.probe_req = &pr;
			break;
		default:
			break;
		}
		ck_assert_msg(
		    call(j, 0, t1, (uint8_t) srv[i], &h, err, sizeof(err)) ==
		        PSWIRE__STATUS__PERMISSION_DENIED,
		    "server %s from trainer 1: not refused",
		    psw_method_name(srv[i]));
		ck_assert_msg(strstr(err, "trainer rank 1 is quarantined"),
		    "server %s: %s", psw_method_name(srv[i]), err);
	}
}

START_TEST(test_quarantine_verified_mismatch)
{
	struct job       j;
	struct pt_rank   a[2] = { { 0 } };
	struct psw_ident t0   = { PSW_ROLE_TRAINER, 0 };
	struct psw_ident op   = { PSW_ROLE_OPERATOR, 0 };

	job_open(&j);
	for (int r = 0; r < 2; r++) {
		a[r].url   = ps_scheduler_url(j.sched);
		a[r].key   = j.key;
		a[r].steps = STEPS;
		a[r].ctx   = &j;
	}
	a[1].before_step = quarantine_self;
	servers_slotted(&j);
	pt_ranks_run(a, 2);
	ck_assert_int_eq(j.verdict, PSWIRE__STATUS__OK);
	ck_assert_msg(j.installed,
	    "the servers never installed the map after epoch %g: %g, %g",
	    j.epochs[0], j.epochs[1], j.epochs[2]);
	// Rank 0 trained to the end: its rounds stopped waiting for rank 1,
	// whose next push was refused.
	ck_assert_msg(a[0].rv == 0, "rank 0: %s", a[0].err);
	ck_assert_int_ne(a[1].rv, 0);
	ck_assert_msg(strstr(a[1].err, "quarantined"), "rank 1: %s", a[1].err);

	Pswire__Placement *pl = pt_signed_map(ps_scheduler_url(j.sched), j.key,
	    &j.run);
	for (size_t i = 0; i < pl->n_servers && i < 2; i++) {
		snprintf(j.urls[i], sizeof(j.urls[i]), "%s", pl->servers[i]);
	}
	ck_assert_uint_eq(pl->n_quarantined, 1);
	ck_assert_uint_eq(pl->quarantined[0], 1);
	ck_assert_uint_eq(pl->n_gone_trainers, 1);
	ck_assert_uint_eq(pl->gone_trainers[0], 1);
	pswire__placement__free_unpacked(pl, NULL);

	refused_everywhere(&j);
	// Rank 0 is not: its Stats are answered at both.
	Pswire__Header h = PSWIRE__HEADER__INIT;
	ck_assert_int_eq(call(&j, -1, t0, PSWIRE__METHOD__STATS, &h, NULL, 0),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(call(&j, 0, t0, PSWIRE__METHOD__STATS, &h, NULL, 0),
	    PSWIRE__STATUS__OK);

	// Verdicts come from operators only, about a trainer slot.
	const char *sched = ps_scheduler_url(j.sched);
	ck_assert_int_eq(verified(sched, j.key, t0, 0, 1),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(verified(sched, j.key, op, 7, 1),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(verified(sched, j.key, op, 0, 0), PSWIRE__STATUS__OK);

	struct obs_registry *reg = ps_scheduler_metrics(j.sched);
	ck_assert_double_eq(prom(reg, "ferry_trainers_quarantined", NULL), 1);
	ck_assert_double_eq(prom(reg, "ferry_trainer_suspicion", "rank=\"1\""),
	    1);
	ck_assert_double_eq(prom(reg, "ferry_trainer_suspicion", "rank=\"0\""),
	    0);
	ck_assert_double_eq(prom(reg, "ferry_trainer_verifications_total",
	                        "rank=\"1\",result=\"mismatch\""),
	    1);
	ck_assert_double_eq(prom(reg, "ferry_trainer_verifications_total",
	                        "rank=\"0\",result=\"ok\""),
	    1);
	ck_assert_double_ge(
	    prom(reg, "ferry_rpc_refused_total", "reason=\"quarantined\""), 7);
	// (server slot 0 of the map is either process)
	ck_assert_double_ge(prom(ps_server_metrics(j.srv[0]),
	                        "ferry_rpc_refused_total",
	                        "reason=\"quarantined\"") +
	        prom(ps_server_metrics(j.srv[1]), "ferry_rpc_refused_total",
	            "reason=\"quarantined\""),
	    6);
	char text[8192];
	ps_scheduler_stats(j.sched, text, sizeof(text));
	ck_assert_uint_eq(pt_stat(text, "trainers_quarantined:"), 1);
	job_close(&j);
}
END_TEST

// open_sched opens a scheduler of 3 trainers and 1 server without auth
// (state_dir may be NULL) with the given trust options.
static struct ps_scheduler *
open_sched(int allow_attacks, uint32_t outliers, const char *state_dir)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	char                     url[64];
	so.url                 = pt_addr(url, sizeof(url), "tcp");
	so.trainers            = 3;
	so.servers             = 1;
	so.probe_bytes         = 0;
	so.allow_attacks       = allow_attacks;
	so.quarantine_outliers = outliers;
	so.spot_check          = 0.25;
	so.state_dir           = state_dir;
	PT_OK(ps_scheduler_open(&so, &s));
	return s;
}

// register_attacker registers rank with a one-tensor job declaring
// attack; returns the status and the error text in err (n bytes).
static int
register_attacker(const char *url, uint32_t rank, const char *attack,
    char *err, size_t n)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	Pswire__JobConfig       jc = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc      td = PSWIRE__TENSOR_DESC__INIT, *tp = &td;
	Pswire__Header         *rep = NULL;
	td.name                     = "w";
	td.len                      = 16;
	jc.n_tensors                = 1;
	jc.tensors                  = &tp;
	jc.lr                       = 0.1;
	jc.codec_push               = "none";
	jc.codec_pull               = "none";
	rr.role                     = PSWIRE__ROLE__ROLE_TRAINER;
	rr.rank                     = rank;
	rr.job                      = &jc;
	rr.attack                   = (char *) attack;
	h.body_case                 = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req              = &rr;
	int st = pt_rpc(NULL, url, PSWIRE__METHOD__REGISTER, &h, NULL, 0,
	    &rep);
	snprintf(err, n, "%s", rep != NULL ? rep->error : "");
	if (rep != NULL) {
		pswire__header__free_unpacked(rep, NULL);
	}
	return st;
}

START_TEST(test_quarantine_attack_refused)
{
	char                 err[512];
	struct ps_scheduler *s = open_sched(0, 0, NULL);
	ck_assert_int_eq(register_attacker(ps_scheduler_url(s), 0, "sign-flip",
	                     err, sizeof(err)),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_msg(strstr(err, "--attack sign-flip") &&
	        strstr(err, "--allow-attacks"),
	    "%s", err);
	// An honest trainer is welcome.
	ck_assert_int_eq(
	    register_attacker(ps_scheduler_url(s), 0, "", err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	ps_scheduler_close(s);
	s = open_sched(1, 0, NULL);
	ck_assert_int_eq(register_attacker(ps_scheduler_url(s), 0, "sign-flip",
	                     err, sizeof(err)),
	    PSWIRE__STATUS__OK);
	ps_scheduler_close(s);
}
END_TEST

// server_heartbeat sends server 0's heartbeat reporting rank's outlier
// counts (and rank 0's: clean) and returns the status.
static int
server_heartbeat(const char *url, uint32_t rank, uint64_t rounds,
    uint64_t outliers, uint64_t streak)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l = PSWIRE__LEAVE_REQUEST__INIT;
	Pswire__RankOutliers o[2], *op[2] = { &o[0], &o[1] };
	pswire__rank_outliers__init(&o[0]);
	pswire__rank_outliers__init(&o[1]);
	o[0].rank     = 0;
	o[0].rounds   = rounds;
	o[1].rank     = rank;
	o[1].rounds   = rounds;
	o[1].outliers = outliers;
	o[1].streak   = streak;
	l.role        = PSWIRE__ROLE__ROLE_SERVER;
	l.id          = 0;
	l.n_outliers  = 2;
	l.outliers    = op;
	h.body_case   = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req   = &l;
	return status_of(url, PSWIRE__METHOD__HEARTBEAT, &h);
}

START_TEST(test_quarantine_outlier_streak)
{
	char dir[] = "/tmp/ferry-quar-state-XXXXXX", path[128];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	struct ps_scheduler *s   = open_sched(0, 3, dir);
	const char          *url = ps_scheduler_url(s);

	// A server learns the spot checks' share and key at Register.
	{
		Pswire__Header          h = PSWIRE__HEADER__INIT;
		Pswire__RegisterRequest r = PSWIRE__REGISTER_REQUEST__INIT;
		r.role                    = PSWIRE__ROLE__ROLE_SERVER;
		r.url                     = "tcp://127.0.0.1:9";
		h.body_case               = PSWIRE__HEADER__BODY_REGISTER_REQ;
		h.register_req            = &r;
		Pswire__Header *rh = wire_call(url, PSWIRE__METHOD__REGISTER,
		    &h, 3000);
		ck_assert_ptr_nonnull(rh);
		ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
		ck_assert_double_eq(rh->register_rep->audit_rate, 0.25);
		ck_assert_uint_ne(rh->register_rep->audit_key, 0);
		pswire__header__free_unpacked(rh, NULL);
	}
	for (uint32_t r = 0; r < 3; r++) {
		ck_assert_int_eq(register_trainer(url, r), PSWIRE__STATUS__OK);
	}
	pswire__header__free_unpacked(map_at_least(url, 1, 5000), NULL);

	// A streak below the threshold: suspicion 2/3, still a member.
	struct obs_registry *reg = ps_scheduler_metrics(s);
	ck_assert_int_eq(server_heartbeat(url, 2, 5, 2, 2),
	    PSWIRE__STATUS__OK);
	ck_assert_double_eq_tol(
	    prom(reg, "ferry_trainer_suspicion", "rank=\"2\""), 2.0 / 3, 1e-9);
	ck_assert_double_eq(
	    prom(reg, "ferry_trainer_outliers_total", "rank=\"2\""), 2);
	ck_assert_double_eq(prom(reg, "ferry_trainer_suspicion", "rank=\"0\""),
	    0);
	ck_assert_double_eq(prom(reg, "ferry_trainers_quarantined", NULL), 0);
	// At the threshold: quarantined, out of the next map.
	ck_assert_int_eq(server_heartbeat(url, 2, 6, 3, 3),
	    PSWIRE__STATUS__OK);
	Pswire__Header *m = map_at_least(url, 2, 5000);
	ck_assert_uint_eq(m->placement->n_quarantined, 1);
	ck_assert_uint_eq(m->placement->quarantined[0], 2);
	ck_assert_uint_eq(m->placement->n_gone_trainers, 1);
	pswire__header__free_unpacked(m, NULL);
	ck_assert_double_eq(prom(reg, "ferry_trainer_suspicion", "rank=\"2\""),
	    1);
	ck_assert_double_eq(prom(reg, "ferry_trainers_quarantined", NULL), 1);
	{ // and /debug/state says so
		struct obs_writer w = OBS_WRITER_INIT;
		char              why[128];
		ps_scheduler_state_json(s, &w);
		ck_assert_msg(pt_json_check(w.buf, why, sizeof(why)) == 0,
		    "%s: %s", why, w.buf);
		ck_assert_msg(strstr(w.buf,
		                  "{\"rank\":2,\"quarantined\":true,"
		                  "\"suspicion\":1,\"outliers\":3,"),
		    "%s", w.buf);
		obs_writer_fini(&w);
	}
	// Without auth the rank a request claims is refused.
	ck_assert_int_eq(register_trainer(url, 2),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 2),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 0),
	    PSWIRE__STATUS__OK);
	// Without auth a verdict needs no signature (claims only).
	ck_assert_int_eq(
	    verified(url, NULL, (struct psw_ident) { 0, 0 }, 5, 1),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	ck_assert_int_eq(
	    verified(url, NULL, (struct psw_ident) { 0, 0 }, 1, 1),
	    PSWIRE__STATUS__OK);
	ck_assert_double_eq(prom(reg, "ferry_trainers_quarantined", NULL), 2);

	// A restarted scheduler keeps refusing them (--state-dir).
	ps_scheduler_close(s);
	s   = open_sched(0, 3, dir);
	url = ps_scheduler_url(s);
	ck_assert_double_eq(
	    prom(ps_scheduler_metrics(s), "ferry_trainers_quarantined", NULL),
	    2);
	ck_assert_int_eq(register_trainer(url, 2),
	    PSWIRE__STATUS__PERMISSION_DENIED);
	ck_assert_int_eq(register_trainer(url, 0), PSWIRE__STATUS__OK);
	ps_scheduler_close(s);
	snprintf(path, sizeof(path), "%s/scheduler.state", dir);
	unlink(path);
	rmdir(dir);
}
END_TEST

Suite *
suite_quarantine(void)
{
	Suite *s  = suite_create("quarantine");
	TCase *tc = tcase_create("quarantine");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_quarantine_verified_mismatch);
	tcase_add_test(tc, test_quarantine_attack_refused);
	tcase_add_test(tc, test_quarantine_outlier_streak);
	suite_add_tcase(s, tc);
	return s;
}
