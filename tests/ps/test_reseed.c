// test_reseed.c — lost shards re-seeded from the trainers' copies
// (docs/operations.md §12). On in-process servers spoken to with raw
// requests: a shard whose server died opens on the live server with the
// newest of the trainers' offers (values and version), refuses pushes and
// pulls until then, and trains on from that version; a bad offer is
// refused and changes nothing; an offer for a shard not being re-seeded is
// ignored and counted; --reseed-wait-ms opens a shard that not every
// trainer offered. On the scheduler alone (members faked over the wire): a
// dead server's shards move to the live servers holding the fewest bytes
// with their seed_gen raised, and a server that registers into its slot
// again (its URL, or --server-index) takes its shards back, re-seeded, at
// once.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "cluster.h"
#include "harness.h"
#include "ps_tests.h"
#include "pt.h"

// The server tests' job: one tensor of 48 floats, cut in 3 shards of 16.
#define RS_LEN 16

// A job of two raw trainers on two in-process servers that heartbeat, so
// that a closed server is declared dead quickly.
struct rs_job {
	struct ps_scheduler *sched;
	struct ps_server    *srv[2];
	const char          *url; // the scheduler's
};

// server_tracked says whether the scheduler tracks server m's heartbeats
// (it heartbeated and was not declared dead since).
static int
server_tracked(struct ps_scheduler *s, int m)
{
	struct obs_writer w = OBS_WRITER_INIT;
	char              want[128];
	PT_OK(obs_registry_write(ps_scheduler_metrics(s), &w));
	snprintf(want, sizeof(want),
	    "ferry_member_heartbeat_age_seconds{role=\"server\",id=\"%d\"} ",
	    m);
	int found = strstr(w.buf, want) != NULL;
	obs_writer_fini(&w);
	return found;
}

// rs_open starts the scheduler (servers servers, dead after dead_ms, a
// closed heartbeat connection after 2 x hb_ms) and the servers
// (--reseed-wait-ms wait_ms, heartbeats every 60 ms), registers trainers
// 0 and 1 and waits for the first map and the servers' first
// heartbeats.
static void
rs_open(struct rs_job *j, int servers, uint32_t wait_ms, uint32_t dead_ms,
    uint32_t hb_ms)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	char                     url[64];
	so.url           = pt_addr(url, sizeof(url), "tcp");
	so.trainers      = 2;
	so.servers       = servers;
	so.shard_bytes   = RS_LEN * 4;
	so.probe_bytes   = 0;
	so.dead_after_ms = dead_ms;
	so.heartbeat_ms  = hb_ms;
	PT_OK(ps_scheduler_open(&so, &j->sched));
	j->url = ps_scheduler_url(j->sched);
	for (int m = 0; m < servers; m++) {
		struct ps_server_opts o = PS_SERVER_OPTS_INIT;
		char                  surl[64];
		o.url            = pt_addr(surl, sizeof(surl), "tcp");
		o.scheduler_url  = j->url;
		o.heartbeat_ms   = 60;
		o.reseed_wait_ms = wait_ms;
		PT_OK(ps_server_open(&o, &j->srv[m]));
	}
	for (uint32_t r = 0; r < 2; r++) {
		pswire__header__free_unpacked(
		    pt_register_trainer(j->url, r, 1, 3 * RS_LEN), NULL);
	}
	pswire__header__free_unpacked(map_at_least(j->url, 1, 5000), NULL);
	// Both servers heartbeat (tracked) before a test kills one.
	for (int k = 0;
	     !server_tracked(j->sched, 0) || !server_tracked(j->sched, 1);
	     k++) {
		ck_assert_msg(k < 500, "servers not tracked after 5 s");
		fb_sleep_us(10000);
	}
}

static void
rs_close(struct rs_job *j)
{
	for (int m = 0; m < 2; m++) {
		ps_server_close(j->srv[m]);
	}
	ps_scheduler_close(j->sched);
}

// srv_call sends h with len bytes of payload for method to url and
// returns the reply's status, its error text in err (n bytes) and, when
// out is not NULL, up to cap bytes of its payload.
static int
srv_call(const char *url, uint8_t method, Pswire__Header *h,
    const void *payload, size_t len, void *out, size_t cap, char *err,
    size_t n, Pswire__Header **rep)
{
	nng_socket       s;
	nng_msg         *m;
	uint8_t         *p;
	struct psw_frame f;
	const char      *why;
	int              status = -1;
	size_t           hl     = pswire__header__get_packed_size(h);

	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
	ck_assert_int_eq(nng_dial(s, url, NULL, 0), 0);
	PT_OK(psw_msg_begin(&m, hl, len, &p));
	if (len > 0) {
		memcpy(p, payload, len);
	}
	PT_OK(psw_msg_finish(m, method, 0, &h->base, hl, len));
	ck_assert_int_eq(nng_sendmsg(s, m, 0), 0);
	ck_assert_int_eq(nng_recvmsg(s, &m, 0), 0);
	PT_OK(psw_msg_parse(m, &f, &why));
	Pswire__Header *rh = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	ck_assert_ptr_nonnull(rh);
	status = (int) rh->status;
	snprintf(err, n, "%s", rh->error);
	if (out != NULL) {
		memcpy(out, f.payload,
		    f.payload_len < cap ? f.payload_len : cap);
	}
	if (rep != NULL) {
		*rep = rh;
	} else {
		pswire__header__free_unpacked(rh, NULL);
	}
	nng_msg_free(m);
	nng_close(s);
	return status;
}

// push_one sends rank's push (seed: an offer) of n floats v for shard
// at version under map epoch; returns the status, its error in err.
static int
push_one(const char *url, uint32_t rank, uint64_t epoch, uint32_t shard,
    uint64_t version, const float *v, size_t n, int seed, char err[256])
{
	Pswire__Header      h   = PSWIRE__HEADER__INIT;
	Pswire__PushRequest p   = PSWIRE__PUSH_REQUEST__INIT;
	Pswire__ShardRef    ref = PSWIRE__SHARD_REF__INIT, *refs = &ref;
	ref.shard     = shard;
	ref.version   = version;
	ref.length    = n * 4;
	p.n_shards    = 1;
	p.shards      = &refs;
	p.n_samples   = 1;
	p.seed        = seed;
	h.rank        = rank;
	h.epoch       = epoch;
	h.deadline_ms = 5000;
	h.body_case   = PSWIRE__HEADER__BODY_PUSH_REQ;
	h.push_req    = &p;
	return srv_call(url, PSWIRE__METHOD__PUSH, &h, v, n * 4, NULL, 0, err,
	    256, NULL);
}

// pull_one pulls shard in full at version (waiting for it) into out
// (RS_LEN floats); returns the status and the reply's version in *got.
static int
pull_one(const char *url, uint64_t epoch, uint32_t shard, uint64_t version,
    float *out, uint64_t *got, char err[256])
{
	Pswire__Header      h = PSWIRE__HEADER__INIT;
	Pswire__PullRequest q = PSWIRE__PULL_REQUEST__INIT;
	Pswire__Header     *rh;
	q.n_shards    = 1;
	q.shards      = &shard;
	q.version     = version;
	q.full        = 1;
	h.epoch       = epoch;
	h.deadline_ms = 5000;
	h.body_case   = PSWIRE__HEADER__BODY_PULL_REQ;
	h.pull_req    = &q;
	int st        = srv_call(url, PSWIRE__METHOD__PULL, &h, NULL, 0, out,
	           RS_LEN * 4, err, 256, &rh);
	if (st == PSWIRE__STATUS__OK) {
		ck_assert_int_eq(rh->body_case, PSWIRE__HEADER__BODY_PULL_REP);
		ck_assert_uint_eq(rh->pull_rep->n_shards, 1);
		ck_assert_uint_eq(rh->pull_rep->shards[0]->length, RS_LEN * 4);
		*got = rh->pull_rep->shards[0]->version;
	}
	pswire__header__free_unpacked(rh, NULL);
	return st;
}

// stat_of reads stats key of server s.
static uint64_t
stat_of(struct ps_server *s, const char *key)
{
	char text[4096];
	ps_server_stats(s, text, sizeof(text));
	return pt_stat(text, key);
}

// wait_seeding waits until server s has at least n shards being
// re-seeded (it applied the map that re-seeds them).
static void
wait_seeding(struct ps_server *s, uint64_t n)
{
	for (int k = 0; stat_of(s, "shards_seeding:") < n; k++) {
		ck_assert_msg(k < 500,
		    "no shard is being re-seeded after 5 s");
		fb_sleep_us(10000);
	}
}

// rs_kill closes the server at index 1 of the first map and returns the
// other; *map2 receives the map that re-seeds the dead one's shards and
// *shard the first of them.
static struct ps_server *
rs_kill(struct rs_job *j, Pswire__Header **map2, uint32_t *shard)
{
	Pswire__Header *m1     = map_at_least(j->url, 1, 5000);
	int             victim = strcmp(m1->placement->servers[1],
	                             ps_server_url(j->srv[0])) == 0
	                ? 0
	                : 1;
	*shard                 = UINT32_MAX;
	for (size_t i = 0; i < m1->placement->n_shards; i++) {
		if (m1->placement->shards[i]->server == 1 &&
		    *shard == UINT32_MAX) {
			*shard = (uint32_t) i;
		}
	}
	ck_assert_uint_ne(*shard, UINT32_MAX);
	ps_server_close(j->srv[victim]);
	j->srv[victim] = NULL;
	*map2          = map_at_least(j->url, m1->placement->epoch + 1, 5000);
	Pswire__Placement *p = (*map2)->placement;
	for (size_t i = 0; i < p->n_shards; i++) {
		int was = m1->placement->shards[i]->server == 1;
		ck_assert_uint_eq(p->shards[i]->server, 0);
		ck_assert_uint_eq(p->shards[i]->seed_gen, (uint64_t) was);
	}
	pswire__header__free_unpacked(m1, NULL);
	return j->srv[1 - victim];
}

// A shard whose server died opens on the live server with the newest
// offer's values and version; before that its pushes and pulls get
// UNAVAILABLE, bad offers are refused without changing it, and after it
// a round of both ranks advances it from that version. An offer once it
// is open is ignored and counted.
START_TEST(test_reseed_newest_offer_opens)
{
	struct rs_job     j;
	Pswire__Header   *m2;
	uint32_t          x;
	float             a[RS_LEN], b[RS_LEN], g[RS_LEN], got[RS_LEN];
	char              err[256];
	uint64_t          ver = 0;
	struct ps_server *live;

	rs_open(&j, 2, 60000, 300, 60);
	live           = rs_kill(&j, &m2, &x);
	const char *u  = ps_server_url(live);
	uint64_t    ep = m2->placement->epoch;
	wait_seeding(live, 1);
	for (int i = 0; i < RS_LEN; i++) {
		a[i] = (float) i * 0.25f;
		b[i] = 1.0f / (float) (i + 3); // not exact in decimal
		g[i] = 1.0f;
	}
	ck_assert_int_eq(push_one(u, 0, ep, x, 0, g, RS_LEN, 0, err),
	    PSWIRE__STATUS__UNAVAILABLE);
	ck_assert_msg(strstr(err, "re-seeded") != NULL, "%s", err);
	ck_assert_int_eq(pull_one(u, ep, x, 0, got, &ver, err),
	    PSWIRE__STATUS__UNAVAILABLE);
	// Bad offers: refused, naming the shard; nothing taken.
	ck_assert_int_eq(push_one(u, 0, ep, x, 9, a, RS_LEN - 1, 1, err),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	a[3] = NAN;
	ck_assert_int_eq(push_one(u, 0, ep, x, 99, a, RS_LEN, 1, err),
	    PSWIRE__STATUS__INVALID_ARGUMENT);
	char want[32];
	snprintf(want, sizeof(want), "shard %u", x);
	ck_assert_msg(strstr(err, want) && strstr(err, "NaN"), "%s", err);
	a[3] = 0.75f;
	// An offer under a map the server has not applied: offer again.
	ck_assert_int_eq(push_one(u, 1, ep + 1, x, 7, b, RS_LEN, 1, err),
	    PSWIRE__STATUS__UNAVAILABLE);
	// Rank 1 is at version 7, rank 0 at 4: rank 1's copy wins, and the
	// shard opens once both offered.
	ck_assert_int_eq(push_one(u, 1, ep, x, 7, b, RS_LEN, 1, err),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(push_one(u, 0, ep, x, 0, g, RS_LEN, 0, err),
	    PSWIRE__STATUS__UNAVAILABLE);
	ck_assert_int_eq(push_one(u, 0, ep, x, 4, a, RS_LEN, 1, err),
	    PSWIRE__STATUS__OK);
	ck_assert_double_eq(
	    pt_metric(ps_server_metrics(live), "ferry_shards_reseeded_total"),
	    1);
	ck_assert_int_eq(pull_one(u, ep, x, 7, got, &ver, err),
	    PSWIRE__STATUS__OK);
	ck_assert_uint_eq(ver, 7);
	ck_assert_mem_eq(got, b, sizeof(b));
	// A sync round of both ranks from version 7: x -= lr * sum / 2.
	for (uint32_t r = 0; r < 2; r++) {
		ck_assert_int_eq(push_one(u, r, ep, x, 7, g, RS_LEN, 0, err),
		    PSWIRE__STATUS__OK);
	}
	ck_assert_int_eq(pull_one(u, ep, x, 8, got, &ver, err),
	    PSWIRE__STATUS__OK);
	ck_assert_uint_eq(ver, 8);
	for (int i = 0; i < RS_LEN; i++) {
		ck_assert_float_eq_tol(got[i], b[i] - 0.1f, 1e-6f);
	}
	// A late offer: OK, ignored, counted; the shard is unchanged.
	ck_assert_int_eq(push_one(u, 0, ep, x, 9, a, RS_LEN, 1, err),
	    PSWIRE__STATUS__OK);
	ck_assert_double_eq(pt_metric(ps_server_metrics(live),
	                        "ferry_seed_offers_ignored_total"),
	    1);
	float again[RS_LEN];
	ck_assert_int_eq(pull_one(u, ep, x, 8, again, &ver, err),
	    PSWIRE__STATUS__OK);
	ck_assert_uint_eq(ver, 8);
	ck_assert_mem_eq(again, got, sizeof(got));
	pswire__header__free_unpacked(m2, NULL);
	rs_close(&j);
}
END_TEST

// With one rank's offer only, the shard opens --reseed-wait-ms after the
// map, at that offer; until then it still refuses pushes.
START_TEST(test_reseed_wait_opens_with_some_offers)
{
	struct rs_job     j;
	Pswire__Header   *m2;
	uint32_t          x;
	float             b[RS_LEN], got[RS_LEN];
	char              err[256];
	uint64_t          ver = 0;
	struct ps_server *live;

	rs_open(&j, 2, 800, 300, 60);
	live           = rs_kill(&j, &m2, &x);
	const char *u  = ps_server_url(live);
	uint64_t    ep = m2->placement->epoch;
	wait_seeding(live, 1);
	for (int i = 0; i < RS_LEN; i++) {
		b[i] = (float) i - 5.5f;
	}
	ck_assert_int_eq(push_one(u, 1, ep, x, 3, b, RS_LEN, 1, err),
	    PSWIRE__STATUS__OK);
	ck_assert_double_eq(
	    pt_metric(ps_server_metrics(live), "ferry_shards_reseeded_total"),
	    0);
	// The pull waits for version 3, which exists once the wait is over.
	ck_assert_int_eq(pull_one(u, ep, x, 3, got, &ver, err),
	    PSWIRE__STATUS__UNAVAILABLE);
	for (int k = 0; pt_metric(ps_server_metrics(live),
	                    "ferry_shards_reseeded_total") < 1;
	     k++) {
		ck_assert_msg(k < 500, "not opened 5 s after its map");
		fb_sleep_us(10000);
	}
	ck_assert_int_eq(pull_one(u, ep, x, 3, got, &ver, err),
	    PSWIRE__STATUS__OK);
	ck_assert_uint_eq(ver, 3);
	ck_assert_mem_eq(got, b, sizeof(b));
	pswire__header__free_unpacked(m2, NULL);
	rs_close(&j);
}
END_TEST

// A server restarted empty on the same URL (no snapshots; its old
// process's heartbeat connection closed, but it is far from being
// declared dead) takes its slot back at once and creates its shards
// itself, re-seeded from the trainers' offers.
START_TEST(test_reseed_restart_same_url)
{
	struct rs_job   j;
	char            err[256], surl[64];
	float           b[RS_LEN], got[RS_LEN];
	uint64_t        ver = 0;
	Pswire__Header *m1;

	rs_open(&j, 2, 60000, 60000, 30000);
	m1    = map_at_least(j.url, 1, 5000);
	int k = strcmp(m1->placement->servers[1], ps_server_url(j.srv[0])) == 0
	    ? 0
	    : 1;
	uint32_t x = UINT32_MAX;
	for (size_t i = 0; i < m1->placement->n_shards && x == UINT32_MAX;
	     i++) {
		x = m1->placement->shards[i]->server == 1 ? (uint32_t) i : x;
	}
	snprintf(surl, sizeof(surl), "%s", ps_server_url(j.srv[k]));
	ps_server_close(j.srv[k]);
	struct ps_server_opts o = PS_SERVER_OPTS_INIT;
	o.url                   = surl;
	o.scheduler_url         = j.url;
	o.heartbeat_ms          = 60;
	PT_OK(ps_server_open(&o, &j.srv[k]));
	Pswire__Header *m2 = map_at_least(j.url, 2, 5000);
	uint64_t        ep = m2->placement->epoch;
	ck_assert_uint_eq(m2->placement->shards[x]->server, 1);
	ck_assert_uint_eq(m2->placement->shards[x]->seed_gen, 1);
	wait_seeding(j.srv[k], 1);
	for (int i = 0; i < RS_LEN; i++) {
		b[i] = (float) i * 3.0f;
	}
	ck_assert_int_eq(push_one(surl, 1, ep, x, 5, b, RS_LEN, 1, err),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(push_one(surl, 0, ep, x, 5, b, RS_LEN, 1, err),
	    PSWIRE__STATUS__OK);
	ck_assert_int_eq(pull_one(surl, ep, x, 5, got, &ver, err),
	    PSWIRE__STATUS__OK);
	ck_assert_uint_eq(ver, 5);
	ck_assert_mem_eq(got, b, sizeof(b));
	pswire__header__free_unpacked(m1, NULL);
	pswire__header__free_unpacked(m2, NULL);
	rs_close(&j);
}
END_TEST

// e2e_kill is rank 0's before_step: close server 1 before step 6.
static void
e2e_kill(struct pt_rank *a, int k)
{
	struct cluster *cl = a->ctx;
	if (k == 6) {
		ps_server_close(cl->srv[1]);
		cl->srv[1] = NULL;
	}
}

// e2e_run trains 2 ranks of the 3-tensor job for 14 steps on 2 servers
// without replicas (fp32), server 1 killed before step 6 when kill; the
// ranks' final weights are left in a.
static void
e2e_run(struct pt_rank a[2], int kill)
{
	struct cluster cl;
	cluster_open_replicas(&cl, 2, 2, PS_PLACEMENT_UNIFORM, 1,
	    kill ? 500 : 0);
	memset(a, 0, 2 * sizeof(*a));
	for (int r = 0; r < 2; r++) {
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].steps = 14;
		a[r].codec = "none";
	}
	if (kill) {
		a[0].before_step = e2e_kill;
		a[0].ctx         = &cl;
	}
	pt_ranks_train(a, 2);
	cluster_stop(&cl);
}

// The scenario on libferry clients: a server of a sync job
// without replicas or snapshots dies mid-training; its shards are
// re-seeded from the trainers' copies on the live server and the job ends
// with weights bit-identical to a run without the fault (SGD, lossless
// pull).
START_TEST(test_reseed_job_survives_server_death)
{
	struct pt_rank still[2], died[2];
	e2e_run(still, 0);
	e2e_run(died, 1);
	for (int r = 0; r < 2; r++) {
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(still[r].w[t], died[r].w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "rank %d tensor %d differs", r, t);
		}
	}
}
END_TEST

// ---- the scheduler alone ------------------------------------------------

// sched_open starts a scheduler for one trainer and `servers` fake
// servers (URLs tcp://127.0.0.1:1..), dead after dead_ms (a closed
// heartbeat connection after 2 x hb_ms), and starts the job: 6 shards of
// 16 floats.
static struct ps_scheduler *
sched_open(int servers, uint32_t dead_ms, uint32_t hb_ms)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	char                     url[64], surl[64];
	so.url           = pt_addr(url, sizeof(url), "tcp");
	so.trainers      = 1;
	so.servers       = servers;
	so.shard_bytes   = RS_LEN * 4;
	so.probe_bytes   = 0;
	so.dead_after_ms = dead_ms;
	so.heartbeat_ms  = hb_ms;
	PT_OK(ps_scheduler_open(&so, &s));
	for (int m = 0; m < servers; m++) {
		snprintf(surl, sizeof(surl), "tcp://127.0.0.1:%d", m + 1);
		ck_assert_int_eq(register_server(ps_scheduler_url(s), surl),
		    PSWIRE__STATUS__OK);
	}
	pswire__header__free_unpacked(
	    pt_register_trainer(ps_scheduler_url(s), 0, 1, 6 * RS_LEN), NULL);
	return s;
}

// register_slot registers a server at srv_url asking for slot (-1: any)
// and returns the reply (free with pswire__header__free_unpacked).
static Pswire__Header *
register_slot(const char *url, const char *srv_url, int slot)
{
	Pswire__Header          h  = PSWIRE__HEADER__INIT;
	Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
	rr.role                    = PSWIRE__ROLE__ROLE_SERVER;
	rr.url                     = (char *) srv_url;
	rr.slot                    = slot >= 0 ? (uint32_t) slot + 1 : 0;
	h.body_case                = PSWIRE__HEADER__BODY_REGISTER_REQ;
	h.register_req             = &rr;
	Pswire__Header *rh = wire_call(url, PSWIRE__METHOD__REGISTER, &h,
	    3000);
	ck_assert_ptr_nonnull(rh);
	return rh;
}

// A server declared dead in a job without replicas or snapshots: its
// shards move to the live servers holding the fewest bytes, one each,
// with their seed_gen raised; the others stay as they were.
START_TEST(test_reseed_sched_dead_server_moves_shards)
{
	struct ps_scheduler *s   = sched_open(3, 300, 60);
	const char          *url = ps_scheduler_url(s);
	Pswire__Header      *m1  = map_at_least(url, 1, 5000);
	Pswire__Placement   *p1  = m1->placement;
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 2),
	    PSWIRE__STATUS__OK);
	Pswire__Header    *m2    = map_at_least(url, p1->epoch + 1, 5000);
	Pswire__Placement *p2    = m2->placement;
	int                to[3] = { 0 };
	for (size_t i = 0; i < p2->n_shards; i++) {
		if (p1->shards[i]->server == 2) {
			ck_assert_uint_ne(p2->shards[i]->server, 2);
			ck_assert_uint_eq(p2->shards[i]->seed_gen, 1);
			to[p2->shards[i]->server]++;
		} else {
			ck_assert_uint_eq(p2->shards[i]->server,
			    p1->shards[i]->server);
			ck_assert_uint_eq(p2->shards[i]->seed_gen, 0);
		}
	}
	ck_assert_int_eq(to[0], 1);
	ck_assert_int_eq(to[1], 1);
	pswire__header__free_unpacked(m1, NULL);
	pswire__header__free_unpacked(m2, NULL);
	ps_scheduler_close(s);
}
END_TEST

// A server that registers again at its URL while it holds shards, after
// it heartbeated, is a restarted, empty process: the next map, published
// at once (far within --dead-after-ms), keeps its shards on it with their
// seed_gen raised, and it is told it is not late (it creates them
// itself); the same Register re-sent changes nothing more. Server 0,
// never tracked, registering again changes nothing.
START_TEST(test_reseed_sched_same_url_takes_slot)
{
	struct ps_scheduler *s   = sched_open(2, 60000, 30000);
	const char          *url = ps_scheduler_url(s);
	Pswire__Header      *m1  = map_at_least(url, 1, 5000);
	// Server 1 heartbeats (tracked: it ran); server 0 never did, and its
	// Register again changes nothing.
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 1),
	    PSWIRE__STATUS__OK);
	Pswire__Header *r0 = register_slot(url, "tcp://127.0.0.1:1", -1);
	ck_assert_int_eq(r0->status, PSWIRE__STATUS__OK);
	ck_assert(r0->register_rep->late);
	pswire__header__free_unpacked(r0, NULL);
	Pswire__Header *rh = register_slot(url, "tcp://127.0.0.1:2", -1);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	ck_assert_uint_eq(rh->register_rep->id, 1);
	ck_assert(!rh->register_rep->late);
	pswire__header__free_unpacked(rh, NULL);
	uint64_t           t0 = fb_clock_ms();
	Pswire__Header    *m2 = map_at_least(url, 2, 2000);
	Pswire__Placement *p2 = m2->placement;
	ck_assert_uint_lt(fb_clock_ms() - t0, 2000);
	for (size_t i = 0; i < p2->n_shards; i++) {
		ck_assert_uint_eq(p2->shards[i]->server,
		    m1->placement->shards[i]->server);
		ck_assert_uint_eq(p2->shards[i]->seed_gen,
		    p2->shards[i]->server == 1);
	}
	// The same Register re-sent (its answer lost): nothing more.
	rh = register_slot(url, "tcp://127.0.0.1:2", -1);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	pswire__header__free_unpacked(rh, NULL);
	char text[8192];
	ps_scheduler_stats(s, text, sizeof(text));
	ck_assert_msg(strstr(text, "epoch:2\r\n") != NULL, "%s", text);
	pswire__header__free_unpacked(m1, NULL);
	pswire__header__free_unpacked(m2, NULL);
	ps_scheduler_close(s);
}
END_TEST

// --server-index: a server under a new URL may not take the slot of a
// live server (refused, naming the slot and its URL); once that server is
// declared dead (its shards had nowhere to go: the only server), the new
// one takes its slot and URL, and its shards, re-seeded.
START_TEST(test_reseed_sched_server_index)
{
	struct ps_scheduler *s   = sched_open(1, 300, 60);
	const char          *url = ps_scheduler_url(s);
	Pswire__Header      *m1  = map_at_least(url, 1, 5000);
	Pswire__Header      *rh  = register_slot(url, "tcp://127.0.0.1:9", 0);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__FAILED_PRECONDITION);
	ck_assert_msg(strstr(rh->error, "slot 0") &&
	        strstr(rh->error, "tcp://127.0.0.1:1"),
	    "%s", rh->error);
	pswire__header__free_unpacked(rh, NULL);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 0),
	    PSWIRE__STATUS__OK);
	// Declared dead: no longer tracked (no heartbeat age).
	for (int k = 0; server_tracked(s, 0); k++) {
		ck_assert_msg(k < 500, "server 0 not declared dead after 5 s");
		fb_sleep_us(10000);
	}
	rh = register_slot(url, "tcp://127.0.0.1:9", 0);
	ck_assert_msg(rh->status == PSWIRE__STATUS__OK, "%s", rh->error);
	ck_assert_uint_eq(rh->register_rep->id, 0);
	ck_assert(!rh->register_rep->late);
	pswire__header__free_unpacked(rh, NULL);
	Pswire__Header *m2 = map_at_least(url, m1->placement->epoch + 1, 2000);
	Pswire__Placement *p2 = m2->placement;
	ck_assert_str_eq(p2->servers[0], "tcp://127.0.0.1:9");
	for (size_t i = 0; i < p2->n_shards; i++) {
		ck_assert_uint_eq(p2->shards[i]->server, 0);
		ck_assert_uint_eq(p2->shards[i]->seed_gen, 1);
	}
	pswire__header__free_unpacked(m1, NULL);
	pswire__header__free_unpacked(m2, NULL);
	ps_scheduler_close(s);
}
END_TEST

Suite *
suite_reseed(void)
{
	Suite *s  = suite_create("reseed");
	TCase *tc = tcase_create("reseed");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_reseed_newest_offer_opens);
	tcase_add_test(tc, test_reseed_wait_opens_with_some_offers);
	tcase_add_test(tc, test_reseed_restart_same_url);
	tcase_add_test(tc, test_reseed_job_survives_server_death);
	tcase_add_test(tc, test_reseed_sched_dead_server_moves_shards);
	tcase_add_test(tc, test_reseed_sched_same_url_takes_slot);
	tcase_add_test(tc, test_reseed_sched_server_index);
	suite_add_tcase(s, tc);
	return s;
}
