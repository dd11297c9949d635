// test_lease.c — lease.c and the elastic parts of declare.c, pull.c and
// request.c: the data permutation (pinned values, a permutation), the
// FERRY_RANK_ANY option, and, against a fake peer that plays scheduler
// and server on one socket, a rank given by the scheduler (headers and
// request ids follow it), the lease calls' done_id/done_end, the lease
// mark on every push, the join pull of a client that declared into a
// running sync job, and a rejoin after a leave.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "clients_tests.h"
#include "fake.h"
#include "pt.h"

START_TEST(test_permutation_pinned)
{
	// The contract's generator (splitmix64, Fisher-Yates from the top),
	// computed independently: the Python binding must give the same.
	static const uint32_t e0[10] = { 2, 3, 9, 7, 5, 8, 6, 4, 0, 1 };
	static const uint32_t e1[10] = { 0, 8, 1, 6, 4, 3, 5, 9, 2, 7 };
	static const uint32_t big[8] = { 843, 657, 767, 518, 214, 680, 875,
		287 };
	uint32_t              out[1000];
	uint8_t               seen[1000] = { 0 };

	ferry_data_permutation(42, 0, 10, out);
	ck_assert_mem_eq(out, e0, sizeof(e0));
	ferry_data_permutation(42, 1, 10, out);
	ck_assert_mem_eq(out, e1, sizeof(e1));
	ferry_data_permutation(7, 3, 1000, out);
	ck_assert_mem_eq(out, big, sizeof(big));
	for (size_t i = 0; i < 1000; i++) {
		ck_assert_uint_lt(out[i], 1000);
		ck_assert_uint_eq(seen[out[i]], 0);
		seen[out[i]] = 1;
	}
	// n 1: the identity; n 0 and NULL: no-ops.
	out[0] = 77;
	ferry_data_permutation(1, 0, 1, out);
	ck_assert_uint_eq(out[0], 0);
	out[0] = 77;
	ferry_data_permutation(1, 0, 0, out);
	ck_assert_uint_eq(out[0], 77);
	ferry_data_permutation(1, 0, 5, NULL);
}
END_TEST

START_TEST(test_rank_any_opts)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	char              why[128];
	ferry_client     *c = NULL;
	o.scheduler_url     = FAKE_URL;
	o.rank              = FERRY_RANK_ANY;
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_OK);
	o.rank = -2;
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "FERRY_RANK_ANY"));
	o.rank = FERRY_RANK_ANY;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_rank(c), -1); // not declared yet
	ck_assert_int_eq(ferry_client_elastic(c), 0);
	// No lease calls before declare.
	struct ferry_lease l;
	ck_assert_int_eq(ferry_client_lease_next(c, 10, 1, 0, 5, &l),
	    FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_lease_release(c), FERRY_OK);
	ck_assert_int_eq(ferry_client_rejoin(c), FERRY_ESTATE);
	// Rankless clients' Registers have request ids of their own (the
	// scheduler takes one it saw as a re-sent Register).
	ferry_client *d = NULL;
	ck_assert_int_eq(ferry_client_open(&o, &d), FERRY_OK);
	ck_assert_uint_ne(c->next_rid, d->next_rid);
	ck_assert_uint_eq(c->next_rid >> 48, 0xffff);
	ferry_client_close(d);
	ferry_client_close(c);
	ck_assert_int_eq(ferry_client_rank(NULL), -1);
}
END_TEST

// The fake peer: scheduler and the one server of its map, on one REP
// socket. What it saw is kept under mu.
struct peer {
	nng_socket      sock;
	char            url[64];
	pthread_t       th;
	pthread_mutex_t mu;
	uint64_t        version;      // every shard's, in pull replies
	int             refuse_joins; // refuse these joins as past: a round
	                              // closed (the version moves on)
	uint64_t        next_lease;
	// Seen:
	int             registers, any_rank;
	uint32_t        reg_rank;
	int             leases;
	uint32_t        lease_rank;
	uint64_t        done_id, done_end, want;
	int             release;
	int             pushes;
	uint32_t        push_rank;
	uint64_t        push_rid, push_lease_id, push_lease_end;
	int             pulls, joins;
	uint64_t        join_version, join_want;
	int             leaves;
};

#define LEN 4

// peer_reply sends h (and payload bytes of zeros) as the reply to method.
static void
peer_reply(struct peer *p, uint8_t method, Pswire__Header *h, size_t payload)
{
	nng_msg *rep;
	uint8_t *pl;
	size_t   hl = pswire__header__get_packed_size(h);
	PT_OK(psw_msg_begin(&rep, hl, payload, &pl));
	memset(pl, 0, payload);
	PT_OK(psw_msg_finish(rep, method, PSW_FLAG_REPLY, &h->base, hl,
	    payload));
	if (nng_sendmsg(p->sock, rep, 0) != 0) {
		nng_msg_free(rep);
	}
}

// peer_pull answers a pull of q's shards with FULL fp32 zeros at the
// peer's version.
static void
peer_pull(struct peer *p, uint8_t method, Pswire__Header *h,
    const Pswire__PullRequest *q, size_t n)
{
	Pswire__PullReply pr = PSWIRE__PULL_REPLY__INIT;
	Pswire__ShardRef  r[8], *rp[8];
	uint64_t          v;
	ck_assert_uint_le(n, 8);
	pthread_mutex_lock(&p->mu);
	v = p->version;
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; i < n; i++) {
		pswire__shard_ref__init(&r[i]);
		r[i].shard   = q != NULL ? q->shards[i] : 0;
		r[i].kind    = PSWIRE__SHARD_KIND__SHARD_KIND_FULL;
		r[i].version = v;
		r[i].offset  = i * LEN * 4;
		r[i].length  = LEN * 4;
		rp[i]        = &r[i];
	}
	pr.n_shards  = n;
	pr.shards    = rp;
	h->body_case = PSWIRE__HEADER__BODY_PULL_REP;
	h->pull_rep  = &pr;
	peer_reply(p, method, h, n * LEN * 4);
}

// peer_map answers GetPlacement: one tensor of LEN floats in one shard on
// the peer itself.
static void
peer_map(struct peer *p, uint8_t method, Pswire__Header *h)
{
	Pswire__Placement   pl  = PSWIRE__PLACEMENT__INIT;
	Pswire__JobConfig   jc  = PSWIRE__JOB_CONFIG__INIT;
	Pswire__TensorDesc  td  = PSWIRE__TENSOR_DESC__INIT;
	Pswire__TensorDesc *tp  = &td;
	Pswire__ShardInfo   si  = PSWIRE__SHARD_INFO__INIT;
	Pswire__ShardInfo  *sp  = &si;
	char               *srv = p->url;
	td.name                 = "w";
	td.len                  = LEN;
	jc.n_tensors            = 1;
	jc.tensors              = &tp;
	si.len                  = LEN;
	pl.epoch                = 1;
	pl.trainers             = 8;
	pl.n_servers            = 1;
	pl.servers              = &srv;
	pl.n_shards             = 1;
	pl.shards               = &sp;
	pl.job                  = &jc;
	h->body_case            = PSWIRE__HEADER__BODY_PLACEMENT;
	h->placement            = &pl;
	peer_reply(p, method, h, 0);
}

// peer_take records what request q (method m) says.
static void
peer_take(struct peer *p, uint8_t m, const Pswire__Header *q)
{
	pthread_mutex_lock(&p->mu);
	if (m == PSWIRE__METHOD__REGISTER && q->register_req != NULL) {
		p->registers++;
		p->any_rank = q->register_req->any_rank;
		p->reg_rank = q->register_req->rank;
	} else if (m == PSWIRE__METHOD__LEASE && q->lease_req != NULL) {
		p->leases++;
		p->lease_rank = q->lease_req->rank;
		p->done_id    = q->lease_req->done_id;
		p->done_end   = q->lease_req->done_end;
		p->want       = q->lease_req->want;
		p->release    = q->lease_req->release;
	} else if (m == PSWIRE__METHOD__PUSH && q->push_req != NULL) {
		p->pushes++;
		p->push_rank      = q->rank;
		p->push_rid       = q->request_id;
		p->push_lease_id  = q->push_req->lease_id;
		p->push_lease_end = q->push_req->lease_end;
	} else if (m == PSWIRE__METHOD__PULL && q->pull_req != NULL) {
		p->pulls++;
		if (q->pull_req->join) {
			p->joins++;
			p->join_version = q->pull_req->join_version;
			p->join_want    = q->pull_req->version;
		}
	} else if (m == PSWIRE__METHOD__LEAVE) {
		p->leaves++;
	}
	pthread_mutex_unlock(&p->mu);
}

static void *
peer_main(void *arg)
{
	struct peer *p = arg;
	nng_msg     *m;
	while (nng_recvmsg(p->sock, &m, 0) == 0) {
		struct psw_frame      fr;
		const char           *why;
		Pswire__Header        h  = PSWIRE__HEADER__INIT;
		Pswire__RegisterReply rr = PSWIRE__REGISTER_REPLY__INIT;
		Pswire__LeaseReply    lr = PSWIRE__LEASE_REPLY__INIT;
		Pswire__Header       *q;
		if (psw_msg_parse(m, &fr, &why) != FB_OK ||
		    (q = pswire__header__unpack(NULL, fr.hdr_len, fr.hdr)) ==
		        NULL) {
			nng_msg_free(m);
			continue;
		}
		peer_take(p, fr.method, q);
		h.request_id = q->request_id;
		switch (fr.method) {
		case PSWIRE__METHOD__REGISTER:
			rr.id           = 5;
			rr.trainers     = 8;
			rr.min_trainers = 1;
			rr.elastic      = 1;
			h.body_case     = PSWIRE__HEADER__BODY_REGISTER_REP;
			h.register_rep  = &rr;
			peer_reply(p, fr.method, &h, 0);
			break;
		case PSWIRE__METHOD__GET_PLACEMENT:
			peer_map(p, fr.method, &h);
			break;
		case PSWIRE__METHOD__LEASE:
			if (!q->lease_req->release) {
				lr.id    = ++p->next_lease;
				lr.start = (lr.id - 1) * 10;
				lr.count = 10;
				lr.seed  = 99;
				lr.epoch = 1;
			}
			h.body_case = PSWIRE__HEADER__BODY_LEASE_REP;
			h.lease_rep = &lr;
			peer_reply(p, fr.method, &h, 0);
			break;
		case PSWIRE__METHOD__PULL:
			pthread_mutex_lock(&p->mu);
			int refuse = q->pull_req->join && p->refuse_joins > 0;
			if (refuse) {
				p->refuse_joins--;
				p->version++;
			}
			pthread_mutex_unlock(&p->mu);
			if (refuse) {
				h.status = PSWIRE__STATUS__OUT_OF_RANGE;
				h.error =
				    "join: shard 0 is past the join version";
				peer_reply(p, fr.method, &h, 0);
				break;
			}
			peer_pull(p, fr.method, &h, q->pull_req,
			    q->pull_req->n_shards);
			break;
		default: // push, leave: OK
			peer_reply(p, fr.method, &h, 0);
		}
		pswire__header__free_unpacked(q, NULL);
		nng_msg_free(m);
	}
	return NULL;
}

static void
peer_open(struct peer *p, uint64_t version)
{
	memset(p, 0, sizeof(*p));
	p->version = version;
	pthread_mutex_init(&p->mu, NULL);
	ck_assert_int_eq(nng_rep0_open(&p->sock), 0);
	snprintf(p->url, sizeof(p->url), "tcp://127.0.0.1:%d", pt_free_port());
	ck_assert_int_eq(nng_listen(p->sock, p->url, NULL, 0), 0);
	ck_assert_int_eq(pthread_create(&p->th, NULL, peer_main, p), 0);
}

static void
peer_close(struct peer *p)
{
	nng_close(p->sock);
	pthread_join(p->th, NULL);
	pthread_mutex_destroy(&p->mu);
}

// declared opens a FERRY_RANK_ANY sync client on p and declares.
static ferry_client *
declared(struct peer *p)
{
	struct ferry_opts        o = FERRY_OPTS_INIT;
	struct ferry_tensor_spec t = { .name = "w", .len = LEN };
	ferry_client            *c = NULL;
	o.scheduler_url            = p->url;
	o.rank                     = FERRY_RANK_ANY;
	o.timeout_ms               = 5000;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_declare_specs(c, &t, 1), FERRY_OK);
	return c;
}

START_TEST(test_rank_given_and_leases)
{
	struct peer        p;
	struct ferry_lease l;
	float              g[LEN] = { 1, 2, 3, 4 }, w[LEN];
	const float       *gp[1]  = { g };
	float             *wp[1]  = { w };
	peer_open(&p, 0);
	ferry_client *c = declared(&p);

	ck_assert_int_eq(p.registers, 1);
	ck_assert(p.any_rank);
	ck_assert_int_eq(ferry_client_rank(c), 5);
	ck_assert_int_eq(ferry_client_elastic(c), 1);

	// The first lease gives nothing back.
	ck_assert_int_eq(ferry_client_lease_next(c, 100, 2, 99, 10, &l),
	    FERRY_OK);
	ck_assert_uint_eq(l.id, 1);
	ck_assert_uint_eq(l.count, 10);
	ck_assert_uint_eq(l.epoch, 1);
	ck_assert_uint_eq(l.seed, 99);
	ck_assert(!l.done);
	pthread_mutex_lock(&p.mu);
	ck_assert_uint_eq(p.lease_rank, 5);
	ck_assert_uint_eq(p.done_id, 0);
	ck_assert_uint_eq(p.want, 10);
	pthread_mutex_unlock(&p.mu);

	// The mark rides on the push, under the given rank.
	ferry_client_lease_mark(c, l.id, 4);
	ck_assert_int_eq(ferry_client_pull(c, wp), FERRY_OK);
	ck_assert_int_eq(ferry_client_push(c, gp, 4), FERRY_OK);
	pthread_mutex_lock(&p.mu);
	ck_assert_int_eq(p.pushes, 1);
	ck_assert_uint_eq(p.push_lease_id, 1);
	ck_assert_uint_eq(p.push_lease_end, 4);
	ck_assert_uint_eq(p.push_rank, 5);
	ck_assert_uint_eq(p.push_rid >> 48, 5);
	ck_assert_int_eq(p.joins, 0); // version 0: no join pull
	pthread_mutex_unlock(&p.mu);

	// The next lease gives the first back, consumed up to the mark.
	ck_assert_int_eq(ferry_client_lease_next(c, 100, 2, 99, 10, &l),
	    FERRY_OK);
	ck_assert_uint_eq(l.id, 2);
	pthread_mutex_lock(&p.mu);
	ck_assert_uint_eq(p.done_id, 1);
	ck_assert_uint_eq(p.done_end, 4);
	pthread_mutex_unlock(&p.mu);

	// Never marked: nothing of lease 2 consumed; the old mark (lease
	// 1) still rides on pushes until changed.
	ck_assert_int_eq(ferry_client_lease_release(c), FERRY_OK);
	pthread_mutex_lock(&p.mu);
	ck_assert(p.release);
	ck_assert_uint_eq(p.done_id, 2);
	ck_assert_uint_eq(p.done_end, 0);
	int leases = p.leases;
	pthread_mutex_unlock(&p.mu);
	// Nothing held now: a release sends nothing.
	ck_assert_int_eq(ferry_client_lease_release(c), FERRY_OK);
	pthread_mutex_lock(&p.mu);
	ck_assert_int_eq(p.leases, leases);
	pthread_mutex_unlock(&p.mu);
	ck_assert_int_eq(ferry_client_lease_next(c, 0, 2, 99, 10, &l),
	    FERRY_EINVAL);

	ferry_client_close(c);
	peer_close(&p);
}
END_TEST

// A client that declares into a running sync job (its shards at version
// 7) follows its first pull with a join pull at 7; refused as past (a
// round closed meanwhile), it pulls again and joins at 8. A push clears
// it, and a rejoin after a leave (same rank, no any_rank) joins again.
START_TEST(test_join_pull_and_rejoin)
{
	struct peer  p;
	float        g[LEN] = { 1, 2, 3, 4 }, w[LEN];
	const float *gp[1]  = { g };
	float       *wp[1]  = { w };
	peer_open(&p, 7);
	pthread_mutex_lock(&p.mu);
	p.refuse_joins = 1;
	pthread_mutex_unlock(&p.mu);
	ferry_client *c = declared(&p);

	ck_assert_int_eq(ferry_client_pull(c, wp), FERRY_OK);
	pthread_mutex_lock(&p.mu);
	ck_assert_int_eq(p.pulls, 4); // pull, join 7, pull, join 8
	ck_assert_int_eq(p.joins, 2);
	ck_assert_uint_eq(p.join_version, 8);
	ck_assert_uint_eq(p.join_want, 8);
	pthread_mutex_unlock(&p.mu);
	struct ferry_stats st;
	ferry_client_stats(c, &st);
	ck_assert_uint_eq(st.version, 8);
	// Joined: the next pull is a plain one.
	ck_assert_int_eq(ferry_client_pull(c, wp), FERRY_OK);
	pthread_mutex_lock(&p.mu);
	ck_assert_int_eq(p.joins, 2);
	pthread_mutex_unlock(&p.mu);
	ck_assert_int_eq(ferry_client_push(c, gp, 1), FERRY_OK);

	ck_assert_int_eq(ferry_client_leave(c), FERRY_OK);
	ck_assert_int_eq(ferry_client_rejoin(c), FERRY_OK);
	ck_assert_int_eq(ferry_client_rejoin(c), FERRY_ESTATE); // not left
	pthread_mutex_lock(&p.mu);
	ck_assert_int_eq(p.leaves, 1);
	ck_assert_int_eq(p.registers, 2);
	ck_assert(!p.any_rank);
	ck_assert_uint_eq(p.reg_rank, 5);
	pthread_mutex_unlock(&p.mu);
	ck_assert_int_eq(ferry_client_rank(c), 5);
	pthread_mutex_lock(&p.mu);
	p.version = 9; // the job went on meanwhile
	pthread_mutex_unlock(&p.mu);
	ck_assert_int_eq(ferry_client_pull(c, wp), FERRY_OK);
	pthread_mutex_lock(&p.mu);
	ck_assert_int_eq(p.joins, 3);
	ck_assert_uint_eq(p.join_version, 9);
	pthread_mutex_unlock(&p.mu);

	ferry_client_close(c);
	peer_close(&p);
}
END_TEST

// ferry__join_due: a join at the newest version pulled when the shards'
// versions are at most one round apart, none at version 0 (fake_client is
// sync).
START_TEST(test_join_due)
{
	static const uint64_t          lens[1] = { 8 };
	static const struct fake_shard sh[2]   = { { 0, 0, 4, 0 },
		  { 0, 4, 4, 0 } };
	ferry_client *c = fake_client(NULL, NULL, lens, 1, 1, sh, 2);
	uint64_t      j = 9;
	c->join_pending = 1;
	ck_assert_int_eq(ferry__join_due(c, &j), 0); // version 0
	c->shard_ver[0] = 3;
	c->shard_ver[1] = 4;
	ck_assert_int_eq(ferry__join_due(c, &j), 1); // a round closing
	ck_assert_uint_eq(j, 4);
	c->shard_ver[0] = 2;
	ck_assert_int_eq(ferry__join_due(c, &j), 0); // too far apart
	c->shard_ver[0] = 4;
	ck_assert_int_eq(ferry__join_due(c, &j), 1);
	ck_assert_uint_eq(j, 4);
	c->join_pending = 0;
	ck_assert_int_eq(ferry__join_due(c, &j), 0);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_lease(void)
{
	Suite *s  = suite_create("lease");
	TCase *tc = tcase_create("lease");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_permutation_pinned);
	tcase_add_test(tc, test_rank_any_opts);
	tcase_add_test(tc, test_rank_given_and_leases);
	tcase_add_test(tc, test_join_pull_and_rejoin);
	tcase_add_test(tc, test_join_due);
	suite_add_tcase(s, tc);
	return s;
}
