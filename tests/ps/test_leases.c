// test_leases.c — data leases on the scheduler (issue 27): trainers lease
// and finish pieces of every epoch and each position is consumed exactly
// once (with random sizes and partial returns, through a trainer's death
// and through a scheduler restart on --state-dir); a dead trainer's lease
// is reclaimed only once every server installed the map that marks it
// gone, from the highest mark; bad requests are refused, naming what was
// wrong, and change nothing. Raw rpcs to an in-process scheduler.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry.pb-c.h"
#include "obs/obs.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

// A lease reply, copied out of its header.
struct grant {
	int      status;
	char     error[256];
	uint64_t id, start, count, held;
	uint32_t epoch, retry_ms;
	int      done;
};

static char dir[64];

static void
setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/ferry-leases-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void
teardown(void)
{
	char p[160];
	snprintf(p, sizeof(p), "%s/scheduler.state.tmp", dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/scheduler.state", dir);
	unlink(p);
	rmdir(dir);
}

// open_job opens a scheduler of t trainers and one server (state in dir
// when keep), registers them all and waits for the first map.
static struct ps_scheduler *
open_job(int t, int keep, uint32_t dead_after_ms)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	struct ps_scheduler     *s;
	o.url           = "tcp://127.0.0.1:0";
	o.trainers      = t;
	o.servers       = 1;
	o.shard_bytes   = 64;
	o.probe_bytes   = 0;
	o.dead_after_ms = dead_after_ms;
	o.heartbeat_ms  = dead_after_ms / 4;
	o.state_dir     = keep ? dir : NULL;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	for (int r = 0; r < t; r++) {
		ck_assert_int_eq(register_trainer(url, (uint32_t) r), 0);
	}
	pswire__header__free_unpacked(map_at_least(url, 1, 3000), NULL);
	return s;
}

// lease sends a Lease for rank (data set n x epochs, seed 7) and returns
// the reply.
static struct grant
lease(const char *url, uint32_t rank, uint64_t n, uint32_t epochs,
    uint64_t want, uint64_t done_id, uint64_t done_end, int release)
{
	Pswire__Header       h = PSWIRE__HEADER__INIT;
	Pswire__LeaseRequest r = PSWIRE__LEASE_REQUEST__INIT;
	struct grant         g = { 0 };
	r.rank                 = rank;
	r.dataset_size         = n;
	r.epochs               = epochs;
	r.seed                 = 7;
	r.want                 = want;
	r.done_id              = done_id;
	r.done_end             = done_end;
	r.release              = release;
	h.body_case            = PSWIRE__HEADER__BODY_LEASE_REQ;
	h.lease_req            = &r;
	Pswire__Header *rh = wire_call(url, PSWIRE__METHOD__LEASE, &h, 5000);
	ck_assert_msg(rh != NULL, "no reply to Lease");
	g.status = rh->status;
	snprintf(g.error, sizeof(g.error), "%s", rh->error ? rh->error : "");
	if (rh->status == 0) {
		ck_assert_int_eq(rh->body_case,
		    PSWIRE__HEADER__BODY_LEASE_REP);
		ck_assert_uint_eq(rh->lease_rep->seed, 7);
		g.id       = rh->lease_rep->id;
		g.epoch    = rh->lease_rep->epoch;
		g.start    = rh->lease_rep->start;
		g.count    = rh->lease_rep->count;
		g.done     = rh->lease_rep->done;
		g.retry_ms = rh->lease_rep->retry_ms;
		g.held     = rh->lease_rep->held;
	}
	pswire__header__free_unpacked(rh, NULL);
	return g;
}

// server_hb sends server 0's heartbeat with installed_epoch and one mark
// (rank, id, end) when id != 0; returns the status.
static int
server_hb(const char *url, uint64_t installed, uint32_t rank, uint64_t id,
    uint64_t end)
{
	Pswire__Header       h  = PSWIRE__HEADER__INIT;
	Pswire__LeaveRequest l  = PSWIRE__LEAVE_REQUEST__INIT;
	Pswire__LeaseMark    mk = PSWIRE__LEASE_MARK__INIT;
	Pswire__LeaseMark   *mp = &mk;
	mk.rank                 = rank;
	mk.lease_id             = id;
	mk.end                  = end;
	l.role                  = PSWIRE__ROLE__ROLE_SERVER;
	l.id                    = 0;
	l.installed_epoch       = installed;
	l.n_lease_marks         = id != 0;
	l.lease_marks           = &mp;
	h.body_case             = PSWIRE__HEADER__BODY_LEAVE_REQ;
	h.leave_req             = &l;
	return status_of(url, PSWIRE__METHOD__HEARTBEAT, &h);
}

// state_json returns /debug/state's JSON (free it).
static char *
state_json(struct ps_scheduler *s)
{
	struct obs_writer w = OBS_WRITER_INIT;
	ps_scheduler_state_json(s, &w);
	ck_assert_int_eq(w.err, 0);
	char *j = strdup(w.buf);
	obs_writer_fini(&w);
	return j;
}

// has says whether /debug/state holds text.
static int
has(struct ps_scheduler *s, const char *text)
{
	char *j  = state_json(s);
	int   ok = strstr(j, text) != NULL;
	free(j);
	return ok;
}

// The positions consumed, per epoch: a count per position, which must
// never exceed 1.
struct cover {
	uint8_t *seen;
	uint64_t n;
	uint32_t epochs;
};

static void
cover_add(struct cover *c, uint32_t e, uint64_t a, uint64_t b)
{
	ck_assert_uint_lt(e, c->epochs);
	ck_assert_uint_le(b, c->n);
	for (uint64_t p = a; p < b; p++) {
		ck_assert_msg(c->seen[e * c->n + p] == 0,
		    "epoch %u position %llu consumed twice", e,
		    (unsigned long long) p);
		c->seen[e * c->n + p] = 1;
	}
}

static void
cover_full(const struct cover *c)
{
	for (uint64_t i = 0; i < c->n * c->epochs; i++) {
		ck_assert_msg(c->seen[i] == 1,
		    "epoch %llu position %llu never "
		    "consumed",
		    (unsigned long long) (i / c->n),
		    (unsigned long long) (i % c->n));
	}
}

// run_trainers has trainers [0, t) lease and finish pieces at random
// (want 1..64, done_end the whole lease, a part, or nothing) until the
// scheduler says done, or until `steps` requests when steps > 0. held[r]
// is rank r's lease (carried over between calls). Returns 1 when done.
static int
run_trainers(const char *url, int t, struct cover *c, struct grant *held,
    unsigned *seed, int steps)
{
	int done = 0;
	for (int k = 0; !done && (steps == 0 || k < steps); k++) {
		ck_assert_int_lt(k, 100000);
		uint32_t      r   = (uint32_t) (rand_r(seed) % (unsigned) t);
		struct grant *h   = &held[r];
		uint64_t      end = 0;
		if (h->id != 0) {
			int how = rand_r(seed) % 4;
			end     = how == 0 ? 0
			        : how == 1
			        ? h->start + rand_r(seed) % (h->count + 1)
			        : h->start + h->count;
			if (end > h->start) {
				cover_add(c, h->epoch, h->start, end);
			}
		}
		struct grant g = lease(url, r, c->n, c->epochs,
		    1 + (uint64_t) (rand_r(seed) % 64), h->id, end, 0);
		ck_assert_msg(g.status == 0, "%s", g.error);
		if (g.id != 0) {
			ck_assert_uint_ge(g.count, 1);
			ck_assert_uint_le(g.count, 64);
		} else {
			ck_assert(g.done || g.retry_ms > 0);
		}
		*h   = g;
		done = g.done;
	}
	return done;
}

// (a) Three trainers, two epochs of 1000, random wants and partial
// returns: every position of each epoch consumed exactly once.
START_TEST(test_leases_exactly_once)
{
	struct ps_scheduler *s    = open_job(3, 0, 0);
	const char          *url  = ps_scheduler_url(s);
	struct grant         h[3] = { 0 };
	struct cover         c    = { calloc(2000, 1), 1000, 2 };
	unsigned             seed = 27;
	ck_assert(run_trainers(url, 3, &c, h, &seed, 0));
	cover_full(&c);
	ck_assert_msg(has(s, "\"consumed\":2000,"), "%s", state_json(s));
	ck_assert_msg(has(s, "\"doubled\":0,"), "%s", state_json(s));
	ck_assert_msg(has(s, "\"leases\":[]"), "%s", state_json(s));
	struct obs_writer m = OBS_WRITER_INIT;
	PT_OK(obs_registry_write(ps_scheduler_metrics(s), &m));
	ck_assert_ptr_nonnull(strstr(m.buf,
	    "\nferry_scheduler_lease_positions_consumed_total 2000\n"));
	ck_assert_ptr_nonnull(
	    strstr(m.buf, "\nferry_scheduler_leases_outstanding 0\n"));
	ck_assert_ptr_nonnull(
	    strstr(m.buf, "\nferry_scheduler_data_epoch_progress 1\n"));
	ck_assert_ptr_nonnull(
	    strstr(m.buf, "\nferry_scheduler_data_epoch 1\n"));
	ck_assert_ptr_nonnull(
	    strstr(m.buf, "\nferry_scheduler_lease_doubled_total 0\n"));
	obs_writer_fini(&m);
	free(c.seen);
	ps_scheduler_close(s);
}
END_TEST

// (b) Trainer 1 dies holding [0, 10) of epoch 0 with 7 positions marked:
// nothing comes back while the server reports a map older than the one
// that marks it gone; then [7, 10) does, and goes to the next grant. A
// mark that arrives after that counts as doubled.
START_TEST(test_leases_reclaim_after_death)
{
	struct ps_scheduler *s   = open_job(2, 0, 2000);
	const char          *url = ps_scheduler_url(s);
	char                 want[128];

	ck_assert_int_eq(server_hb(url, 1, 0, 0, 0), 0);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 0), 0);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 1), 0);
	struct grant g1 = lease(url, 1, 100, 1, 10, 0, 0, 0);
	ck_assert_uint_eq(g1.start, 0);
	ck_assert_uint_eq(g1.count, 10);
	struct grant g0 = lease(url, 0, 100, 1, 90, 0, 0, 0);
	ck_assert_uint_eq(g0.start, 10);
	ck_assert_uint_eq(g0.count, 90);
	// Trainer 0 finishes; the pool is empty, trainer 1's lease is held.
	struct grant w = lease(url, 0, 100, 1, 90, g0.id, 100, 0);
	ck_assert_uint_eq(w.id, 0);
	ck_assert_uint_eq(w.done, 0);
	ck_assert_uint_gt(w.retry_ms, 0);
	// Trainer 1 goes silent; trainer 0 and the server go on.
	uint64_t until = fb_clock_ms() + 10000;
	while (!has(s,
	    "{\"rank\":1,\"registered\":true,\"gone\":true,\"live\":false}")) {
		ck_assert_msg(fb_clock_ms() < until, "trainer 1 never dead");
		ck_assert_int_eq(server_hb(url, 1, 1, g1.id, 7), 0);
		ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 0),
		    0);
		fb_sleep_us(50000); // the heartbeat period, not a wait
	}
	Pswire__Header *m = map_at_least(url, 2, 3000);
	uint64_t        E = m->placement->epoch;
	pswire__header__free_unpacked(m, NULL);
	// The server still reports the map before it: nothing comes back.
	ck_assert_int_eq(server_hb(url, E - 1, 1, g1.id, 7), 0);
	ck_assert_msg(has(s, "\"reclaiming\":true"), "%s", state_json(s));
	w = lease(url, 0, 100, 1, 90, 0, 0, 0);
	ck_assert_uint_eq(w.id, 0);
	ck_assert_uint_gt(w.retry_ms, 0);
	// It installs map E: [7, 10) goes back, and to the next grant.
	ck_assert_int_eq(server_hb(url, E, 1, g1.id, 7), 0);
	ck_assert_msg(has(s, "\"leases\":[]"), "%s", state_json(s));
	snprintf(want, sizeof(want),
	    "\"free\":3,\"consumed\":97,"
	    "\"returned\":3,\"doubled\":0");
	ck_assert_msg(has(s, want), "%s", state_json(s));
	w = lease(url, 0, 100, 1, 90, 0, 0, 0);
	ck_assert_uint_eq(w.start, 7);
	ck_assert_uint_eq(w.count, 3);
	// A late mark past 7 is evidence of doubling.
	ck_assert_int_eq(server_hb(url, E, 1, g1.id, 9), 0);
	ck_assert_msg(has(s, "\"doubled\":2"), "%s", state_json(s));
	// Trainer 1 comes back: naming the lease it lost is no error, and
	// gives nothing back twice.
	ck_assert_int_eq(register_trainer(url, 1), 0);
	struct grant b = lease(url, 1, 100, 1, 90, g1.id, 10, 0);
	ck_assert_msg(b.status == 0, "%s", b.error);
	ck_assert_uint_eq(b.id, 0);
	ck_assert_uint_gt(b.retry_ms, 0);
	w = lease(url, 0, 100, 1, 90, w.id, 10, 0);
	ck_assert(w.done);
	ck_assert_msg(has(s, "\"consumed\":100,\"returned\":3,"), "%s",
	    state_json(s));
	ps_scheduler_close(s);
}
END_TEST

// (c) Two trainers consume part of 2 epochs of 300, the scheduler closes
// and opens again on its state: the held leases are still theirs (a
// repeat gets the same lease), they finish them and the rest, and every
// position is consumed exactly once.
START_TEST(test_leases_across_restart)
{
	struct ps_scheduler *s    = open_job(2, 1, 0);
	struct grant         h[2] = { 0 };
	struct cover         c    = { calloc(600, 1), 300, 2 };
	unsigned             seed = 5;
	ck_assert(!run_trainers(ps_scheduler_url(s), 2, &c, h, &seed, 20));
	ps_scheduler_close(s);

	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	o.url                      = "tcp://127.0.0.1:0";
	o.trainers                 = 2;
	o.servers                  = 1;
	o.shard_bytes              = 64;
	o.probe_bytes              = 0;
	o.dead_after_ms            = 0;
	o.state_dir                = dir;
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	for (uint32_t r = 0; r < 2; r++) {
		if (h[r].id != 0) {
			struct grant g = lease(url, r, 300, 2, 5, 0, 0, 0);
			ck_assert_uint_eq(g.id, h[r].id); // still its lease
			ck_assert_uint_eq(g.start, h[r].start);
			ck_assert_uint_eq(g.count, h[r].count);
		}
	}
	ck_assert(run_trainers(url, 2, &c, h, &seed, 0));
	cover_full(&c);
	ck_assert_msg(has(s, "\"consumed\":600,"), "%s", state_json(s));
	free(c.seen);
	ps_scheduler_close(s);
}
END_TEST

// check_refused sends a bad request and checks its status, that the
// message names `what`, and that the state did not change.
static void
check_refused(struct ps_scheduler *s, struct grant g, int status,
    const char *what, const char *before)
{
	char *after = state_json(s);
	ck_assert_msg(g.status == status, "status %d (%s), want %d", g.status,
	    g.error, status);
	ck_assert_msg(strstr(g.error, what) != NULL, "\"%s\" does not name %s",
	    g.error, what);
	ck_assert_str_eq(after, before);
	free(after);
}

// (d) Bad requests are refused with a message and change nothing.
START_TEST(test_leases_bad_input)
{
	struct ps_scheduler *s   = open_job(2, 0, 0);
	const char          *url = ps_scheduler_url(s);
	struct grant         g1  = lease(url, 1, 100, 2, 10, 0, 0, 0);
	struct grant         g0  = lease(url, 0, 100, 2, 10, 0, 0, 0);
	ck_assert_uint_ne(g1.id, 0);
	ck_assert_uint_ne(g0.id, 0);
	char *st = state_json(s);
	check_refused(s, lease(url, 0, 100, 2, 0, 0, 0, 0),
	    PSWIRE__STATUS__INVALID_ARGUMENT, "want 0", st);
	check_refused(s, lease(url, 0, 0, 2, 5, 0, 0, 0),
	    PSWIRE__STATUS__INVALID_ARGUMENT, "dataset_size 0", st);
	check_refused(s, lease(url, 0, 1ull << 32, 2, 5, 0, 0, 0),
	    PSWIRE__STATUS__INVALID_ARGUMENT, "dataset_size 4294967296", st);
	check_refused(s, lease(url, 0, 100, 0, 5, 0, 0, 0),
	    PSWIRE__STATUS__INVALID_ARGUMENT, "epochs 0", st);
	check_refused(s, lease(url, 0, 100, 2, 5, g1.id, 0, 0),
	    PSWIRE__STATUS__INVALID_ARGUMENT, "is not a lease trainer 0 holds",
	    st);
	check_refused(s, lease(url, 0, 100, 2, 5, 999, 0, 0),
	    PSWIRE__STATUS__INVALID_ARGUMENT, "done_id 999", st);
	check_refused(s,
	    lease(url, 0, 100, 2, 5, g0.id, g0.start + g0.count + 1, 0),
	    PSWIRE__STATUS__INVALID_ARGUMENT, "outside lease", st);
	check_refused(s, lease(url, 0, 100, 3, 5, 0, 0, 0),
	    PSWIRE__STATUS__FAILED_PRECONDITION,
	    "epochs 3, but the job's is 2", st);
	check_refused(s, lease(url, 2, 100, 2, 5, 0, 0, 0),
	    PSWIRE__STATUS__FAILED_PRECONDITION, "trainer 2 is not in the job",
	    st);
	Pswire__Header  h  = PSWIRE__HEADER__INIT;
	Pswire__Header *rh = wire_call(url, PSWIRE__METHOD__LEASE, &h, 5000);
	ck_assert_ptr_nonnull(rh);
	ck_assert_int_eq(rh->status, PSWIRE__STATUS__INVALID_ARGUMENT);
	pswire__header__free_unpacked(rh, NULL);
	// A repeat of a request whose reply was lost gets the same lease;
	// a release gives it back.
	struct grant again = lease(url, 0, 100, 2, 5, 0, 0, 0);
	ck_assert_uint_eq(again.id, g0.id);
	struct grant rel = lease(url, 0, 100, 2, 0, g0.id, g0.start + 4, 1);
	ck_assert_int_eq(rel.status, 0);
	ck_assert_uint_eq(rel.id, 0);
	ck_assert_uint_eq(rel.retry_ms, 0);
	ck_assert_msg(has(s, "\"returned\":6,"), "%s", state_json(s));
	free(st);
	ps_scheduler_close(s);
}
END_TEST

// (e) The first caller fixes the data set: another dataset_size is
// refused, naming both.
START_TEST(test_leases_mismatch)
{
	struct ps_scheduler *s   = open_job(2, 0, 0);
	const char          *url = ps_scheduler_url(s);
	ck_assert_uint_ne(lease(url, 0, 100, 1, 10, 0, 0, 0).id, 0);
	char *st = state_json(s);
	check_refused(s, lease(url, 1, 200, 1, 10, 0, 0, 0),
	    PSWIRE__STATUS__FAILED_PRECONDITION,
	    "dataset_size 200, but the job's is 100", st);
	free(st);
	ps_scheduler_close(s);
}
END_TEST

Suite *
suite_leases(void)
{
	Suite *s  = suite_create("leases");
	TCase *tc = tcase_create("leases");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_leases_exactly_once);
	tcase_add_test(tc, test_leases_reclaim_after_death);
	tcase_add_test(tc, test_leases_across_restart);
	tcase_add_test(tc, test_leases_bad_input);
	tcase_add_test(tc, test_leases_mismatch);
	suite_add_tcase(s, tc);
	return s;
}
