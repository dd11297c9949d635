// test_join.c — a rank that a map adds joining the sync rounds at a round
// boundary (PullRequest.join), rounds that do not wait for it before,
// the SSP clock it starts with, and the lease marks a server's heartbeat
// carries (issue 27; ps/src/server/store.c's JOINS, heartbeat.c).
//
// A map adds a rank here the way a rank that left and registers again is
// added (gone, then not): the same server path as a new rank of an
// elastic job.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "pair.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"
#include "tap.h"

// Rounds before rank 2 joins, and rounds the three ranks push after.
#define JR 3
#define JK 3

static const struct ferry_tensor_desc descs[NT] = { { "a", 40 }, { "b", 7 },
	{ "c", 1 } };

// A test's state, shared by rank 0's hook and the main thread.
struct join_run {
	struct cluster *cl;
	int             mode;  // FERRY_MODE_*
	uint32_t        stale; // SSP staleness
	ferry_client   *c2;    // rank 2's second life
	pthread_t       th2;
	int             started2;
	float           w2[NT][40];
	int             rv2;
	int             out_of_range; // the late join pull was refused so
	char            err[256];
	pthread_t      *wait_for; // SSP: rank 1's thread, joined first
};

// open_rank registers `rank` of the 3-tensor job with a new client.
static ferry_client *
open_rank(const char *url, int rank, int mode, uint32_t stale)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	ferry_client     *c = NULL;
	o.scheduler_url     = url;
	o.rank              = rank;
	o.lr                = 0.5;
	o.mode              = mode;
	o.staleness         = stale;
	o.timeout_ms        = 20000;
	PT_OK(ferry_client_open(&o, &c));
	ck_assert_int_eq(ferry_client_declare(c, descs, NT), 0);
	return c;
}

// current_map fetches the scheduler's newest map (free it with
// pswire__header__free_unpacked on the returned header).
static Pswire__Header *
current_map(const char *url)
{
	Pswire__Header              h  = PSWIRE__HEADER__INIT;
	Pswire__GetPlacementRequest gp = PSWIRE__GET_PLACEMENT_REQUEST__INIT;
	gp.min_epoch                   = 1;
	h.body_case                    = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
	h.placement_req                = &gp;
	Pswire__Header *rh = pt_call(url, PSWIRE__METHOD__GET_PLACEMENT, &h);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__OK);
	return rh;
}

// join_pull sends rank 2's join pull for version j to every server, each
// listing the shards it holds, and returns the worst status (OK when all
// took it), with the first refusal's text in err.
static int
join_pull(struct cluster *cl, uint64_t j, char *err, size_t n)
{
	Pswire__Header    *mh    = current_map(ps_scheduler_url(cl->sched));
	Pswire__Placement *pl    = mh->placement;
	int                worst = PSWIRE__STATUS__OK;
	for (size_t m = 0; m < pl->n_servers; m++) {
		uint32_t            ids[16];
		Pswire__Header      h = PSWIRE__HEADER__INIT, *rh = NULL;
		Pswire__PullRequest q = PSWIRE__PULL_REQUEST__INIT;
		for (size_t i = 0; i < pl->n_shards; i++) {
			if (pl->shards[i]->server == m) {
				ck_assert_uint_lt(q.n_shards, 16);
				ids[q.n_shards++] = (uint32_t) i;
			}
		}
		if (q.n_shards == 0) {
			continue;
		}
		q.shards       = ids;
		q.join         = 1;
		q.join_version = j;
		q.full         = 1;
		h.epoch        = pl->epoch;
		h.rank         = 2;
		h.deadline_ms  = 5000;
		h.body_case    = PSWIRE__HEADER__BODY_PULL_REQ;
		h.pull_req     = &q;
		int st = pt_rpc(NULL, pl->servers[m], PSWIRE__METHOD__PULL, &h,
		    NULL, 0, &rh);
		ck_assert_int_ge(st, 0);
		if (st != PSWIRE__STATUS__OK && worst == PSWIRE__STATUS__OK) {
			worst = st;
			snprintf(err, n, "%s", rh != NULL ? rh->error : "");
		}
		if (rh != NULL) {
			pswire__header__free_unpacked(rh, NULL);
		}
	}
	pswire__header__free_unpacked(mh, NULL);
	return worst;
}

// rank2_main is rank 2's second life once it joined at round JR: it pulls
// (version JR) and pushes rounds JR..JR+JK-1 with its gradients of those
// steps.
static void *
rank2_main(void *arg)
{
	struct join_run *j = arg;
	float            g[NT][40];
	float           *wp[NT], *gp[NT];
	for (int t = 0; t < NT; t++) {
		wp[t] = j->w2[t];
		gp[t] = g[t];
	}
	j->rv2 = ferry_client_pull(j->c2, wp);
	for (int k = JR; k < JR + JK && j->rv2 == 0; k++) {
		for (int t = 0; t < NT; t++) {
			for (size_t i = 0; i < lens[t]; i++) {
				g[t][i] = grad_for(2, k, t, i);
			}
		}
		j->rv2 = ferry_client_push_pull(j->c2,
		    (const float *const *) gp, 10, wp);
	}
	if (j->rv2 != 0) {
		snprintf(j->err, sizeof(j->err), "%s",
		    ferry_client_last_error(j->c2));
	}
	return NULL;
}

// sync_hook is rank 0's before_step in the sync test. Before step 1 rank
// 2 registers again (a map adds it: pending), and rounds 1..JR-1 then
// close without it. Before step JR (every shard at version JR) rank 2's
// join pull for JR-1 is refused, the one for JR taken, and rank 2 starts
// pushing: round JR waits for it.
static void
sync_hook(struct pt_rank *a, int k)
{
	struct join_run *j = a->ctx;
	if (k == 1) {
		j->c2 = open_rank(a->url, 2, j->mode, j->stale);
		servers_caught_up(j->cl);
	}
	if (k == JR) {
		char err[256]   = "";
		j->out_of_range = join_pull(j->cl, JR - 1, err, sizeof(err)) ==
		        PSWIRE__STATUS__OUT_OF_RANGE &&
		    strstr(err, "past join version") != NULL;
		ck_assert_msg(join_pull(j->cl, JR, err, sizeof(err)) ==
		        PSWIRE__STATUS__OK,
		    "join at %d: %s", JR, err);
		ck_assert_int_eq(pthread_create(&j->th2, NULL, rank2_main, j),
		    0);
		j->started2 = 1;
	}
}

// first_life registers rank 2 with the others (the job starts with all
// three) and makes it leave at once: it pushes nothing.
static void *
first_life(void *arg)
{
	struct pt_rank *a = arg;
	a->rejoin         = 1; // declare and pull only
	a->leave_at_end   = 1;
	return pt_rank_main(a);
}

// offset_step pushes step k + *ctx's gradients (the reference runs).
static int
offset_step(struct pt_rank *a, ferry_client *c, int k, float *const *g,
    float *const *w)
{
	const int *off = a->ctx;
	if (k < 0) {
		return ferry_client_pull(c, w);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			g[t][i] = grad_for(a->rank, k + *off, t, i);
		}
	}
	return ferry_client_push_pull(c, (const float *const *) g, 10, w);
}

static float ref_w[NT][40]; // the reference's weights at round JR

// offer_ref is rank 0's declared hook in the second reference run: it
// offers the first run's weights at round JR instead of i.
static int
offer_ref(struct pt_rank *a, ferry_client *c)
{
	(void) c;
	memcpy(a->w, ref_w, sizeof(ref_w));
	return 0;
}

// A sync job where rank 2 joins at round JR equals, bit for bit (fp32),
// a replay of the same rounds with the same members: 2 trainers for JR
// rounds, then, from those weights, 3 trainers pushing the same
// gradients. While rank 2 is pending (added by a map, no join sent yet)
// the two others close rounds without it; a join pull for a round
// already closed is refused OUT_OF_RANGE.
START_TEST(test_join_round_boundary)
{
	struct cluster  cl;
	struct join_run j = { .cl = &cl, .mode = FERRY_MODE_SYNC };
	struct pt_rank  a[3], b[3];
	pthread_t       th[3];
	int             off = JR;

	cluster_open(&cl, 3, 2, PS_PLACEMENT_UNIFORM);
	memset(a, 0, sizeof(a));
	for (int r = 0; r < 3; r++) {
		a[r].url   = ps_scheduler_url(cl.sched);
		a[r].rank  = r;
		a[r].steps = JR + JK;
	}
	a[0].before_step = sync_hook;
	a[0].ctx         = &j;
	for (int r = 0; r < 3; r++) {
		pthread_create(&th[r], NULL,
		    r == 2 ? first_life : pt_rank_main, &a[r]);
	}
	for (int r = 0; r < 3; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	ck_assert_int_eq(j.started2, 1);
	pthread_join(j.th2, NULL);
	ck_assert_msg(j.rv2 == 0, "rank 2: %s: %s", ferry_strerror(j.rv2),
	    j.err);
	ck_assert_msg(j.out_of_range,
	    "a join pull for a closed round was "
	    "not refused OUT_OF_RANGE");
	ck_assert_uint_eq(a[0].stats.version, JR + JK);
	ferry_client_close(j.c2);
	cluster_stop(&cl);

	// The reference: rounds 0..JR-1 with ranks 0 and 1 ...
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	memset(b, 0, sizeof(b));
	for (int r = 0; r < 2; r++) {
		b[r].url   = ps_scheduler_url(cl.sched);
		b[r].steps = JR;
	}
	pt_ranks_train(b, 2);
	memcpy(ref_w, b[0].w, sizeof(ref_w));
	cluster_stop(&cl);
	// ... then rounds JR..JR+JK-1 with the three, from those weights.
	cluster_open(&cl, 3, 2, PS_PLACEMENT_UNIFORM);
	memset(b, 0, sizeof(b));
	for (int r = 0; r < 3; r++) {
		b[r].url   = ps_scheduler_url(cl.sched);
		b[r].steps = JK;
		b[r].step  = offset_step;
		b[r].ctx   = &off;
	}
	b[0].declared = offer_ref;
	pt_ranks_train(b, 3);
	cluster_stop(&cl);
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(
		    memcmp(a[0].w[t], b[0].w[t], lens[t] * sizeof(float)) == 0,
		    "tensor %d differs from the replay (e.g. [0] %.9g vs %.9g)",
		    t, (double) a[0].w[t][0], (double) b[0].w[t][0]);
		ck_assert(memcmp(j.w2[t], a[0].w[t], lens[t] * 4) == 0);
	}
}
END_TEST

// ssp_hook is rank 0's before_step in the SSP test: before its last step,
// once rank 1 finished, rank 2 registers again (a map adds it).
static void
ssp_hook(struct pt_rank *a, int k)
{
	struct join_run *j = a->ctx;
	if (k == a->steps - 1) {
		pthread_join(*j->wait_for, NULL);
		j->c2 = open_rank(a->url, 2, j->mode, j->stale);
		servers_caught_up(j->cl);
	}
}

// SSP: a rank that a map adds starts at the slowest rank's clock, not 0.
// Ranks 0 and 1 push 4 times (clocks 4), rank 2 is added, and rank 0's
// fifth push-pull (clock 5) reads within staleness 1 of the slowest
// rank: with rank 2 at clock 0 it would wait until its deadline.
START_TEST(test_join_ssp_clock)
{
	struct cluster  cl;
	struct join_run j = { .cl = &cl, .mode = FERRY_MODE_SSP, .stale = 1 };
	struct pt_rank  a[3];
	pthread_t       th[3];

	cluster_open(&cl, 3, 2, PS_PLACEMENT_UNIFORM);
	memset(a, 0, sizeof(a));
	for (int r = 0; r < 3; r++) {
		a[r].url       = ps_scheduler_url(cl.sched);
		a[r].rank      = r;
		a[r].mode      = FERRY_MODE_SSP;
		a[r].staleness = 1;
		a[r].steps     = r == 0 ? 5 : 4;
	}
	a[0].before_step = ssp_hook;
	a[0].ctx         = &j;
	j.wait_for       = &th[1];
	for (int r = 0; r < 3; r++) {
		pthread_create(&th[r], NULL,
		    r == 2 ? first_life : pt_rank_main, &a[r]);
	}
	pthread_join(th[0], NULL); // rank 0's hook joins rank 1
	pthread_join(th[2], NULL);
	for (int r = 0; r < 3; r++) {
		ck_assert_msg(a[r].rv == 0, "rank %d: %s: %s", r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
	ck_assert_uint_eq(a[0].stats.version, 9); // 4 + 5 pushes applied
	ferry_client_close(j.c2);
	cluster_stop(&cl);
}
END_TEST

// raw_push pushes 8 floats for shard 0 at version v as rank 0 (init: the
// version-0 offer) with lease mark (id, end); returns the status.
static int
raw_push(const char *url, uint64_t epoch, uint64_t v, int init, uint64_t id,
    uint64_t end)
{
	Pswire__Header      h = PSWIRE__HEADER__INIT;
	Pswire__PushRequest p = PSWIRE__PUSH_REQUEST__INIT;
	Pswire__ShardRef    r = PSWIRE__SHARD_REF__INIT, *rp = &r;
	float               x[8];
	for (int i = 0; i < 8; i++) {
		x[i] = 0.25f * (float) i;
	}
	r.shard     = 0;
	r.version   = v;
	r.length    = sizeof(x);
	p.shards    = &rp;
	p.n_shards  = 1;
	p.n_samples = 1;
	p.init      = init;
	p.lease_id  = id;
	p.lease_end = end;
	h.epoch     = epoch;
	h.body_case = PSWIRE__HEADER__BODY_PUSH_REQ;
	h.push_req  = &p;
	return pt_rpc(NULL, url, PSWIRE__METHOD__PUSH, &h, x, sizeof(x), NULL);
}

// last_marks unpacks the newest heartbeat tap t recorded into *out (free
// with pswire__header__free_unpacked), or NULL when none is recorded.
static Pswire__Header *
last_heartbeat(struct pt_tap *t)
{
	size_t n = pt_tap_count(t, PSWIRE__METHOD__HEARTBEAT);
	if (n == 0) {
		return NULL;
	}
	nng_msg *m = pt_tap_get(t, PSWIRE__METHOD__HEARTBEAT, n - 1);
	ck_assert_ptr_nonnull(m);
	struct psw_frame f;
	const char      *why;
	PT_OK(psw_msg_parse(m, &f, &why));
	Pswire__Header *h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	nng_msg_free(m);
	ck_assert_ptr_nonnull(h);
	ck_assert_int_eq(h->body_case, PSWIRE__HEADER__BODY_LEAVE_REQ);
	return h;
}

// A server's heartbeat carries the newest lease mark of each rank's
// admitted pushes (a higher id, or the same id and a higher end: an
// older one pushed later changes nothing) and the map epoch it installed.
START_TEST(test_join_lease_marks)
{
	struct ps_scheduler_opts so = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o  = PS_SERVER_OPTS_INIT;
	struct ps_scheduler     *sched;
	struct ps_server        *srv;
	char                     url[64], surl[64];
	so.url         = pt_addr(url, sizeof(url), "tcp");
	so.trainers    = 1;
	so.servers     = 1;
	so.shard_bytes = 64;
	PT_OK(ps_scheduler_open(&so, &sched));
	struct pt_tap *tap = pt_tap_open(ps_scheduler_url(sched));
	o.url              = pt_addr(surl, sizeof(surl), "tcp");
	o.scheduler_url    = pt_tap_url(tap);
	o.heartbeat_ms     = 20;
	PT_OK(ps_server_open(&o, &srv));
	// The raw trainer answers the link probe itself, once the server
	// registered (a report for servers not known yet is refused).
	char text[8192];
	for (int i = 0; i < 500; i++) {
		ps_scheduler_stats(sched, text, sizeof(text));
		if (strstr(text, "servers:1/1\r\n") != NULL) {
			break;
		}
		nng_msleep(10);
	}
	pswire__header__free_unpacked(
	    pt_register_trainer(ps_scheduler_url(sched), 0, 1, 8), NULL);
	double rtt = 1e-6, bw = 100e6;
	ck_assert_int_eq(raw_report(ps_scheduler_url(sched), 0, 1, &rtt, &bw),
	    PSWIRE__STATUS__OK);
	Pswire__Header *mh    = current_map(ps_scheduler_url(sched));
	uint64_t        epoch = mh->placement->epoch;
	ck_assert_uint_eq(mh->placement->n_shards, 1);
	pswire__header__free_unpacked(mh, NULL);
	const char *su = ps_server_url(srv);
	int         st = -1;
	for (int i = 0; i < 500 && st != PSWIRE__STATUS__OK; i++) {
		st = raw_push(su, epoch, 0, 1, 0, 0); // until it has the map
		if (st != PSWIRE__STATUS__OK) {
			nng_msleep(10);
		}
	}
	ck_assert_int_eq(st, PSWIRE__STATUS__OK);
	ck_assert_int_eq(raw_push(su, epoch, 0, 0, 7, 100), 0);
	ck_assert_int_eq(raw_push(su, epoch, 1, 0, 7, 50), 0);  // older end
	ck_assert_int_eq(raw_push(su, epoch, 2, 0, 5, 500), 0); // older id
	ck_assert_int_eq(raw_push(su, epoch, 3, 0, 0, 0), 0);   // no mark
	// The first heartbeat recorded from now on holds all four pushes.
	size_t          from = pt_tap_count(tap, PSWIRE__METHOD__HEARTBEAT);
	Pswire__Header *hb   = NULL;
	for (int i = 0; i < 500; i++) {
		if (pt_tap_count(tap, PSWIRE__METHOD__HEARTBEAT) > from + 1) {
			hb = last_heartbeat(tap);
			break;
		}
		nng_msleep(10);
	}
	ck_assert_ptr_nonnull(hb);
	Pswire__LeaveRequest *l = hb->leave_req;
	ck_assert_uint_eq(l->installed_epoch, epoch);
	ck_assert_uint_eq(l->n_lease_marks, 1);
	ck_assert_uint_eq(l->lease_marks[0]->rank, 0);
	ck_assert_uint_eq(l->lease_marks[0]->lease_id, 7);
	ck_assert_uint_eq(l->lease_marks[0]->end, 100);
	pswire__header__free_unpacked(hb, NULL);
	ck_assert_int_eq(raw_push(su, epoch, 4, 0, 8, 10), 0); // newer id
	from = pt_tap_count(tap, PSWIRE__METHOD__HEARTBEAT);
	for (int i = 0; i < 500; i++) {
		if (pt_tap_count(tap, PSWIRE__METHOD__HEARTBEAT) > from + 1) {
			break;
		}
		nng_msleep(10);
	}
	hb = last_heartbeat(tap);
	ck_assert_ptr_nonnull(hb);
	ck_assert_uint_eq(hb->leave_req->n_lease_marks, 1);
	ck_assert_uint_eq(hb->leave_req->lease_marks[0]->lease_id, 8);
	ck_assert_uint_eq(hb->leave_req->lease_marks[0]->end, 10);
	pswire__header__free_unpacked(hb, NULL);
	ps_server_close(srv);
	pt_tap_close(tap);
	ps_scheduler_close(sched);
}
END_TEST

Suite *
suite_join(void)
{
	Suite *s  = suite_create("join");
	TCase *tc = tcase_create("join");

	// Each test starts its own scheduler and servers (the sync one
	// three jobs); a round that waited for a pending rank would end
	// in the trainers' 20 s timeout.
	tcase_set_tags(tc, "cluster");
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_join_round_boundary);
	tcase_add_test(tc, test_join_ssp_clock);
	tcase_add_test(tc, test_join_lease_marks);
	suite_add_tcase(s, tc);
	return s;
}
