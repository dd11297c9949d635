// test_audit.c — spot checks on the servers (issue 31), against live
// in-process sync jobs whose draw a test hook sets: every picked push is
// kept with the weights of its version and handed out once by Audit, its
// bytes the pushed ones exactly; rate 0 keeps none; the keyed draw keeps
// about its rate and the same (rank, version) on every server; a full
// store drops and counts; with a secret only an operator may collect.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"
#include "test_hooks.h"

#define KEY "a per-job key of more than 16 bytes"
#define AUDIT_KEY 0x5eed5eedcafef00dull
#define STEPS 3
#define MAX_STEPS 8
#define STEP0 100 // the data step each step k claims: STEP0 + k

// A job of 2 sync trainers (harness.h's 3 tensors, cut in 64-byte
// shards: 5 of them) and n servers, with a secret when key is set.
struct job {
	struct ps_scheduler *sched;
	struct ps_server    *srv[2];
	int                  n;
	char                 key[64];
};

static void
job_open(struct job *j, int servers, uint32_t keep, int secret)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64];

	memset(j, 0, sizeof(*j));
	j->n = servers;
	if (secret) {
		snprintf(j->key, sizeof(j->key), "/tmp/ferry-audit-XXXXXX");
		int fd = mkstemp(j->key);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, KEY, strlen(KEY)),
		    (ssize_t) strlen(KEY));
		close(fd);
		so.secret_file = j->key;
	}
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 2;
	so.servers     = (uint32_t) servers;
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	PT_OK(ps_scheduler_open(&so, &j->sched));
	for (int i = 0; i < servers; i++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url           = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url = ps_scheduler_url(j->sched);
		o.audit_keep    = keep;
		o.secret_file   = secret ? j->key : NULL;
		PT_OK(ps_server_open(&o, &j->srv[i]));
	}
}

static void
job_close(struct job *j)
{
	for (int i = 0; i < j->n; i++) {
		ps_server_close(j->srv[i]);
	}
	ps_scheduler_close(j->sched);
	if (j->key[0] != '\0') {
		unlink(j->key);
	}
}

// What each rank saw: the weights it pushed step k's gradient from.
struct seen {
	float w[MAX_STEPS][NT][40];
};

// claim_step claims data step STEP0 + k for step k's pushes and notes the
// weights they are computed from, then steps as usual.
static int
claim_step(struct pt_rank *a, ferry_client *c, int k, float *const *g,
    float *const *w)
{
	struct seen *s = a->ctx;
	if (k >= 0) {
		ck_assert_int_lt(k, MAX_STEPS);
		for (int t = 0; t < NT; t++) {
			memcpy(s->w[k][t], w[t], lens[t] * sizeof(float));
		}
		ferry_client_data_step(c, STEP0 + (uint64_t) k);
	}
	return pt_rank_step(a, c, k, g, w);
}

// train runs the 2 trainers for `steps` steps (key: the secret file, or
// NULL), filling seen.
static void
train(struct job *j, int steps, struct seen *seen)
{
	struct pt_rank a[2] = { { 0 } };
	for (int r = 0; r < 2; r++) {
		a[r].url   = ps_scheduler_url(j->sched);
		a[r].steps = steps;
		a[r].step  = claim_step;
		a[r].ctx   = &seen[r];
		a[r].key   = j->key[0] != '\0' ? j->key : NULL;
	}
	pt_ranks_train(a, 2);
}

// audit asks url for up to max kept pushes, plain and unsigned: the
// reply's status, its header in *rep (free with
// pswire__header__free_unpacked; NULL when not OK) and its payload copied
// into *payload (free with free()).
static int
audit(const char *url, uint32_t max, Pswire__Header **rep, uint8_t **payload)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__AuditRequest q = PSWIRE__AUDIT_REQUEST__INIT;
	nng_socket           s;
	nng_msg             *m;
	uint8_t             *p;
	struct psw_frame     f;
	const char          *why;
	int                  status = -1;

	q.max        = max;
	h.request_id = 1;
	h.body_case  = PSWIRE__HEADER__BODY_AUDIT_REQ;
	h.audit_req  = &q;
	size_t hl    = pswire__header__get_packed_size(&h);
	*rep         = NULL;
	*payload     = NULL;
	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	PT_OK(psw_msg_begin(&m, hl, 0, &p));
	PT_OK(psw_msg_finish(m, PSWIRE__METHOD__AUDIT, 0, &h.base, hl, 0));
	ck_assert_int_eq(nng_sendmsg(s, m, 0), 0);
	ck_assert_int_eq(nng_recvmsg(s, &m, 0), 0);
	PT_OK(psw_msg_parse(m, &f, &why));
	Pswire__Header *rh = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	ck_assert_ptr_nonnull(rh);
	status = (int) rh->status;
	if (status == PSWIRE__STATUS__OK) {
		ck_assert_int_eq(rh->body_case,
		    PSWIRE__HEADER__BODY_AUDIT_REP);
		*rep     = rh;
		*payload = malloc(f.payload_len + 1);
		ck_assert_ptr_nonnull(*payload);
		memcpy(*payload, f.payload, f.payload_len);
		// Every record's floats lie in the payload.
		for (size_t i = 0; i < rh->audit_rep->n_records; i++) {
			const Pswire__AuditRecord *r =
			    rh->audit_rep->records[i];
			ck_assert_uint_le(r->weights_offset + 4 * r->len,
			    f.payload_len);
			ck_assert_uint_le(r->push_offset + 4 * r->len,
			    f.payload_len);
		}
	} else {
		pswire__header__free_unpacked(rh, NULL);
	}
	nng_msg_free(m);
	nng_close(s);
	return status;
}

// check_record checks kept push r (payload p) against what rank r->rank
// saw and pushed at step r->version, shard info si.
static void
check_record(const Pswire__AuditRecord *r, const uint8_t *p,
    const Pswire__ShardInfo *si, const struct seen *seen)
{
	ck_assert_uint_lt(r->rank, 2);
	ck_assert_uint_lt(r->version, MAX_STEPS);
	ck_assert_uint_eq(r->data_step, STEP0 + r->version + 1);
	ck_assert_uint_eq(r->len, si->len);
	ck_assert_uint_eq(r->n_samples, 10);
	const float *w = seen[r->rank].w[r->version][si->tensor] + si->offset;
	ck_assert_msg(memcmp(p + r->weights_offset, w, r->len * 4) == 0,
	    "rank %u version %llu shard %u: kept weights differ", r->rank,
	    (unsigned long long) r->version, r->shard);
	for (uint64_t i = 0; i < r->len; i++) {
		float want = grad_for((int) r->rank, (int) r->version,
		    (int) si->tensor, si->offset + i);
		float got;
		memcpy(&got, p + r->push_offset + 4 * i, 4);
		ck_assert_msg(memcmp(&got, &want, 4) == 0,
		    "rank %u version %llu shard %u [%llu]: pushed %g, kept %g",
		    r->rank, (unsigned long long) r->version, r->shard,
		    (unsigned long long) i, (double) want, (double) got);
	}
}

START_TEST(test_audit_keeps_pushes)
{
	struct job      j;
	struct seen     seen[2];
	Pswire__Header *rep;
	uint8_t        *p;
	const char     *url;
	uint8_t         got[2][8][STEPS] = { { { 0 } } };

	job_open(&j, 1, 0, 0);
	url = ps_server_url(j.srv[0]);
	// Before the first map: not yet.
	ck_assert_int_eq(audit(url, 8, &rep, &p), PSWIRE__STATUS__UNAVAILABLE);
	ps_server_test_audit(j.srv[0], 1.0, AUDIT_KEY);
	train(&j, STEPS, seen);
	Pswire__Header *mh = map_at_least(ps_scheduler_url(j.sched), 1, 5000);
	Pswire__Placement *pl = mh->placement;
	ck_assert_uint_eq(pl->n_shards, 5);
	// Every push of every round: 2 ranks x 5 shards x STEPS.
	unsigned want = 2 * 5 * STEPS;
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_kept"), want);
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_skipped"), 0);
	ck_assert_int_eq(audit(url, 0, &rep, &p),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	// In two calls (max 4, then the cap), oldest first, once each.
	unsigned n            = 0;
	uint64_t last_version = 0;
	for (int call = 0; call < 2; call++) {
		ck_assert_int_eq(audit(url, call == 0 ? 4 : 1000, &rep, &p),
		    PSWIRE__STATUS__OK);
		Pswire__AuditReply *ar = rep->audit_rep;
		ck_assert_uint_eq(ar->n_records, call == 0 ? 4 : want - 4);
		ck_assert_uint_eq(ar->dropped, 0);
		for (size_t i = 0; i < ar->n_records; i++) {
			const Pswire__AuditRecord *r = ar->records[i];
			ck_assert_uint_lt(r->shard, pl->n_shards);
			ck_assert_uint_eq(r->reason, 1);
			ck_assert_uint_eq(r->server, 0);
			ck_assert_uint_ge(r->version, last_version);
			last_version = r->version;
			check_record(r, p, pl->shards[r->shard], seen);
			ck_assert_uint_eq(got[r->rank][r->shard][r->version],
			    0);
			got[r->rank][r->shard][r->version] = 1;
			n++;
		}
		pswire__header__free_unpacked(rep, NULL);
		free(p);
	}
	ck_assert_uint_eq(n, want);
	// Handed out once: none left.
	ck_assert_int_eq(audit(url, 8, &rep, &p), PSWIRE__STATUS__OK);
	ck_assert_uint_eq(rep->audit_rep->n_records, 0);
	pswire__header__free_unpacked(rep, NULL);
	free(p);
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_served"), want);
	struct obs_registry *reg = ps_server_metrics(j.srv[0]);
	ck_assert_double_eq(pt_metric(reg, "ferry_audits_kept_total"), want);
	ck_assert_double_eq(pt_metric(reg, "ferry_audits_served_total"), want);
	ck_assert_double_eq(pt_metric(reg, "ferry_audits_dropped_total"), 0);
	pswire__header__free_unpacked(mh, NULL);
	job_close(&j);
}
END_TEST

START_TEST(test_audit_rate_zero_keeps_none)
{
	struct job      j;
	struct seen     seen[2];
	Pswire__Header *rep;
	uint8_t        *p;

	job_open(&j, 1, 0, 0);
	ps_server_test_audit(j.srv[0], 0.0, AUDIT_KEY);
	train(&j, STEPS, seen);
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_kept"), 0);
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_skipped"), 0);
	// Spot checks off: Audit says so.
	ck_assert_int_eq(audit(ps_server_url(j.srv[0]), 8, &rep, &p),
	    PSWIRE__STATUS__FAILED_PRECONDITION);
	job_close(&j);
}
END_TEST

START_TEST(test_audit_draw_rate)
{
	// Over many (rank, version), the draw keeps about its rate, and
	// another key picks other pushes.
	const double rates[] = { 0.02, 0.1, 0.5 };
	for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++) {
		uint64_t n = 0, same = 0, total = 0;
		for (uint32_t r = 0; r < 64; r++) {
			for (uint64_t v = 0; v < 8000; v++) {
				int a = ps_server_test_audit_draw(AUDIT_KEY, r,
				            v) < rates[k];
				int b = ps_server_test_audit_draw(
				            AUDIT_KEY + 1, r, v) < rates[k];
				n += (uint64_t) a;
				same += (uint64_t) (a && b);
				total++;
			}
		}
		double f = (double) n / (double) total;
		ck_assert_msg(f > rates[k] * 0.97 && f < rates[k] * 1.03,
		    "rate %g kept %g", rates[k], f);
		// Independent keys: both keep about rate^2.
		double both = (double) same / (double) total;
		ck_assert_msg(both < rates[k] * rates[k] * 1.2 + 1e-4,
		    "rate %g: keys agree on %g", rates[k], both);
	}
	for (uint32_t r = 0; r < 16; r++) {
		double d = ps_server_test_audit_draw(AUDIT_KEY, r, r);
		ck_assert(d >= 0.0 && d < 1.0);
	}
}
END_TEST

START_TEST(test_audit_same_draw_on_every_server)
{
	struct job  j;
	struct seen seen[2];
	int         picked[2][MAX_STEPS];
	unsigned    n_picked = 0;

	// A key whose picks at rate 0.5 are neither none nor all.
	for (int r = 0; r < 2; r++) {
		for (int v = 0; v < MAX_STEPS; v++) {
			picked[r][v] = ps_server_test_audit_draw(AUDIT_KEY,
			                   (uint32_t) r, (uint64_t) v) < 0.5;
			n_picked += (unsigned) picked[r][v];
		}
	}
	ck_assert_uint_gt(n_picked, 0);
	ck_assert_uint_lt(n_picked, 2 * MAX_STEPS);
	job_open(&j, 2, 0, 0);
	for (int i = 0; i < 2; i++) {
		ps_server_test_audit(j.srv[i], 0.5, AUDIT_KEY);
	}
	train(&j, MAX_STEPS, seen);
	Pswire__Header *mh = map_at_least(ps_scheduler_url(j.sched), 1, 5000);
	Pswire__Placement *pl = mh->placement;
	for (int i = 0; i < 2; i++) {
		Pswire__Header *rep;
		uint8_t        *p;
		unsigned        held                 = 0;
		uint8_t         got[5][2][MAX_STEPS] = { { { 0 } } };
		// Servers register in any order: srv[i] has its own index.
		uint32_t index = (uint32_t) server_stat(j.srv[i], "index");
		for (size_t k = 0; k < pl->n_shards; k++) {
			held += pl->shards[k]->server == index;
		}
		ck_assert_uint_gt(held, 0); // both servers hold shards
		ck_assert_int_eq(audit(ps_server_url(j.srv[i]), 64, &rep, &p),
		    PSWIRE__STATUS__OK);
		Pswire__AuditReply *ar = rep->audit_rep;
		// Exactly the picked (rank, version) of each shard held.
		ck_assert_uint_eq(ar->n_records, held * n_picked);
		for (size_t k = 0; k < ar->n_records; k++) {
			const Pswire__AuditRecord *r = ar->records[k];
			ck_assert_uint_lt(r->shard, 5);
			ck_assert_uint_eq(r->server, index);
			ck_assert_uint_eq(pl->shards[r->shard]->server, index);
			ck_assert_int_eq(picked[r->rank][r->version], 1);
			ck_assert_int_eq(got[r->shard][r->rank][r->version],
			    0);
			got[r->shard][r->rank][r->version] = 1;
			check_record(r, p, pl->shards[r->shard], seen);
		}
		pswire__header__free_unpacked(rep, NULL);
		free(p);
	}
	pswire__header__free_unpacked(mh, NULL);
	job_close(&j);
}
END_TEST

START_TEST(test_audit_store_bound)
{
	struct job      j;
	struct seen     seen[2];
	Pswire__Header *rep;
	uint8_t        *p;
	const char     *url;

	job_open(&j, 1, 4, 0);
	url = ps_server_url(j.srv[0]);
	ps_server_test_audit(j.srv[0], 1.0, AUDIT_KEY);
	train(&j, STEPS, seen);
	unsigned picks = 2 * 5 * STEPS;
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_kept"), 4);
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_dropped"), picks - 4);
	ck_assert_double_eq(pt_metric(ps_server_metrics(j.srv[0]),
	                        "ferry_audits_dropped_total"),
	    picks - 4);
	// The 4 kept are the oldest: the first round's.
	ck_assert_int_eq(audit(url, 64, &rep, &p), PSWIRE__STATUS__OK);
	ck_assert_uint_eq(rep->audit_rep->n_records, 4);
	ck_assert_uint_eq(rep->audit_rep->dropped, picks - 4);
	for (size_t k = 0; k < 4; k++) {
		ck_assert_uint_eq(rep->audit_rep->records[k]->version, 0);
	}
	pswire__header__free_unpacked(rep, NULL);
	free(p);
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_held"), 0);
	job_close(&j);
}
END_TEST

START_TEST(test_audit_operator_only)
{
	struct job       j;
	struct seen      seen[2];
	uint64_t         run = 0;
	struct psw_ident t0  = { PSW_ROLE_TRAINER, 0 };
	struct psw_ident op  = { PSW_ROLE_OPERATOR, 0 };
	struct psw_ident to  = { PSW_ROLE_SERVER, 0 };

	job_open(&j, 1, 0, 1);
	ps_server_test_audit(j.srv[0], 1.0, AUDIT_KEY);
	train(&j, STEPS, seen);
	Pswire__Placement *pl = pt_signed_map(ps_scheduler_url(j.sched), j.key,
	    &run);
	pswire__placement__free_unpacked(pl, NULL);
	const char *url = ps_server_url(j.srv[0]);
	for (int k = 0; k < 3; k++) {
		Pswire__Header       h  = PSWIRE__HEADER__INIT;
		Pswire__AuditRequest q  = PSWIRE__AUDIT_REQUEST__INIT;
		Pswire__Header      *rh = NULL;
		struct pt_peer as = { k == 0 ? NULL : j.key, k == 2 ? op : t0,
			NULL, NULL, to, run };
		q.max       = 64;
		h.body_case = PSWIRE__HEADER__BODY_AUDIT_REQ;
		h.audit_req = &q;
		int st = pt_rpc(&as, url, PSWIRE__METHOD__AUDIT, &h, NULL, 0,
		    &rh);
		ck_assert_ptr_nonnull(rh);
		if (k == 0) {
			// Unsigned: not a member.
			ck_assert_int_eq(st, PSWIRE__STATUS__UNAUTHENTICATED);
		} else if (k == 1) {
			// A trainer may not see which pushes are checked.
			ck_assert_int_eq(st,
			    PSWIRE__STATUS__PERMISSION_DENIED);
			ck_assert_ptr_nonnull(strstr(rh->error, "trainer-0"));
		} else {
			ck_assert_int_eq(st, PSWIRE__STATUS__OK);
			ck_assert_uint_eq(rh->audit_rep->n_records,
			    2 * 5 * STEPS);
		}
		pswire__header__free_unpacked(rh, NULL);
	}
	ck_assert_uint_eq(server_stat(j.srv[0], "audits_served"),
	    2 * 5 * STEPS);
	job_close(&j);
}
END_TEST

Suite *
suite_audit(void)
{
	Suite *s  = suite_create("audit");
	TCase *tc = tcase_create("audit");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_audit_keeps_pushes);
	tcase_add_test(tc, test_audit_rate_zero_keeps_none);
	tcase_add_test(tc, test_audit_draw_rate);
	tcase_add_test(tc, test_audit_same_draw_on_every_server);
	tcase_add_test(tc, test_audit_store_bound);
	tcase_add_test(tc, test_audit_operator_only);
	suite_add_tcase(s, tc);
	return s;
}
