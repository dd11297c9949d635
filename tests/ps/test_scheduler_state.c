// test_scheduler_state.c — the scheduler's --state-dir: a scheduler
// closed mid-job and opened again on the same directory carries on with
// the same members and map, keeps its epochs increasing, and still serves
// joins, leaves and heartbeats; a damaged, truncated or foreign state file
// is refused and nothing is loaded.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry.pb-c.h"
#include "ps/ps.h"
#include "ps_tests.h"
#include "psw/psw.h"
#include "pt.h"

static char dir[64];
static char path[128];

static void
setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/ferry-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/scheduler.state", dir);
}

static void
teardown(void)
{
	char tmp[160];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(tmp);
	unlink(path);
	rmdir(dir);
}

static struct ps_scheduler_opts
opts(int trainers, int servers)
{
	struct ps_scheduler_opts o = PS_SCHEDULER_OPTS_INIT;
	o.url                      = "tcp://127.0.0.1:0";
	o.trainers                 = trainers;
	o.servers                  = servers;
	o.shard_bytes              = 16; // 4 shards of the 16-float tensor
	o.probe_bytes              = 0;
	o.dead_after_ms            = 0;
	o.state_dir                = dir;
	return o;
}

// register_id registers a server at srv_url and returns its id.
static uint32_t
register_id(const char *url, const char *srv_url)
{
	// register_server only returns the status: the map names the slot.
	ck_assert_int_eq(register_server(url, srv_url), 0);
	Pswire__Header *m  = map_at_least(url, 1, 3000);
	uint32_t        id = UINT32_MAX;
	for (size_t i = 0; i < m->placement->n_servers; i++) {
		if (strcmp(m->placement->servers[i], srv_url) == 0) {
			id = (uint32_t) i;
		}
	}
	pswire__header__free_unpacked(m, NULL);
	return id;
}

// shards_on counts the shards of map p on server m.
static size_t
shards_on(const Pswire__Placement *p, uint32_t m)
{
	size_t n = 0;
	for (size_t i = 0; i < p->n_shards; i++) {
		n += p->shards[i]->server == m;
	}
	return n;
}

// A job runs (epoch 1), trainer 1 leaves (epoch 2), the scheduler goes
// away and a new one opens on the same directory: it serves the same map
// at epoch 2 at once, knows the members (a re-registration keeps its
// slot, heartbeats are accepted), and the next change (a server joins)
// publishes epoch 3, never a reused one.
START_TEST(test_scheduler_state_carries_on)
{
	struct ps_scheduler_opts o = opts(2, 2);
	struct ps_scheduler     *s;
	char                     text[8192];

	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:2"), 0);
	ck_assert_int_eq(register_trainer(url, 0), 0);
	ck_assert_int_eq(register_trainer(url, 1), 0);
	Pswire__Header *m1 = map_at_least(url, 1, 3000);
	ck_assert_uint_eq(m1->placement->epoch, 1);
	ck_assert_uint_eq(m1->placement->n_shards, 4);
	ck_assert_uint_gt(shards_on(m1->placement, 1), 0);
	pswire__header__free_unpacked(m1, NULL);
	ck_assert_int_eq(member_call(url, PSWIRE__METHOD__LEAVE,
	                     PSWIRE__ROLE__ROLE_TRAINER, 1),
	    0);
	Pswire__Header *m2 = map_at_least(url, 2, 3000);
	ck_assert_uint_eq(m2->placement->epoch, 2);
	ck_assert_uint_eq(m2->placement->n_gone_trainers, 1);
	size_t   packed = pswire__placement__get_packed_size(m2->placement);
	uint8_t *want   = malloc(packed);
	pswire__placement__pack(m2->placement, want);
	pswire__header__free_unpacked(m2, NULL);
	ps_scheduler_close(s);

	// A new scheduler (another port) on the same directory.
	PT_OK(ps_scheduler_open(&o, &s));
	url = ps_scheduler_url(s);
	ps_scheduler_stats(s, text, sizeof(text));
	ck_assert_msg(strstr(text, "epoch:2\r\n") != NULL, "%s", text);
	ck_assert_msg(strstr(text, "servers:2/2\r\n") != NULL, "%s", text);
	ck_assert_msg(strstr(text, "trainers:2/2\r\n") != NULL, "%s", text);
	char why[128];
	ck_assert_int_eq(ps_scheduler_ready(s, why, sizeof(why)), 1);
	Pswire__Header *m3 = map_at_least(url, 1, 3000);
	size_t   got       = pswire__placement__get_packed_size(m3->placement);
	uint8_t *buf       = malloc(got);
	pswire__placement__pack(m3->placement, buf);
	ck_assert_uint_eq(got, packed);
	ck_assert(memcmp(buf, want, got) == 0); // the same map, bit for bit
	free(buf);
	free(want);
	pswire__header__free_unpacked(m3, NULL);

	// Members carry on: server 0 keeps its slot, heartbeats are
	// accepted, the trainer that left is told so.
	ck_assert_uint_eq(register_id(url, "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 0), 0);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 0), 0);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_TRAINER, 1),
	    PSWIRE__STATUS__FAILED_PRECONDITION);
	ck_assert_int_eq(heartbeat(url, PSWIRE__ROLE__ROLE_SERVER, 2),
	    PSWIRE__STATUS__INVALID_ARGUMENT);

	// A join re-places (uniform) under the next epoch: 3, not 1.
	ck_assert_uint_eq(register_id(url, "tcp://127.0.0.1:3"), 2);
	Pswire__Header *m4 = map_at_least(url, 3, 3000);
	ck_assert_uint_eq(m4->placement->epoch, 3);
	ck_assert_uint_eq(m4->placement->n_servers, 3);
	ck_assert_uint_gt(shards_on(m4->placement, 2), 0);
	ck_assert_uint_eq(m4->placement->n_gone_trainers, 1);
	pswire__header__free_unpacked(m4, NULL);
	// And the rank that left rejoins under epoch 4.
	ck_assert_int_eq(register_trainer(url, 1), 0);
	Pswire__Header *m5 = map_at_least(url, 4, 3000);
	ck_assert_uint_eq(m5->placement->n_gone_trainers, 0);
	pswire__header__free_unpacked(m5, NULL);
	ps_scheduler_close(s);

	// Third life: the joined server (index 2) is remembered too.
	PT_OK(ps_scheduler_open(&o, &s));
	ps_scheduler_stats(s, text, sizeof(text));
	ck_assert_msg(strstr(text, "epoch:4\r\n") != NULL, "%s", text);
	ck_assert_msg(strstr(text, "servers:3/2\r\n") != NULL, "%s", text);
	ps_scheduler_close(s);
}
END_TEST

// A state saved before the job started (only some members in) is loaded
// as such: the job starts once the rest register.
START_TEST(test_scheduler_state_before_start)
{
	struct ps_scheduler_opts o = opts(1, 2);
	struct ps_scheduler     *s;
	PT_OK(ps_scheduler_open(&o, &s));
	ck_assert_int_eq(
	    register_server(ps_scheduler_url(s), "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_trainer(ps_scheduler_url(s), 0), 0);
	ps_scheduler_close(s);
	PT_OK(ps_scheduler_open(&o, &s));
	const char *url = ps_scheduler_url(s);
	char        why[128];
	ck_assert_int_eq(ps_scheduler_ready(s, why, sizeof(why)), 0);
	ck_assert_int_eq(register_server(url, "tcp://127.0.0.1:2"), 0);
	Pswire__Header *m = map_at_least(url, 1, 3000);
	ck_assert_uint_eq(m->placement->epoch, 1);
	ck_assert_uint_eq(m->placement->n_servers, 2);
	ck_assert_str_eq(m->placement->servers[0], "tcp://127.0.0.1:1");
	pswire__header__free_unpacked(m, NULL);
	ps_scheduler_close(s);
}
END_TEST

// write_state leaves a valid state file of a running 1x1 job.
static void
write_state(void)
{
	struct ps_scheduler_opts o = opts(1, 1);
	struct ps_scheduler     *s;
	PT_OK(ps_scheduler_open(&o, &s));
	ck_assert_int_eq(
	    register_server(ps_scheduler_url(s), "tcp://127.0.0.1:1"), 0);
	ck_assert_int_eq(register_trainer(ps_scheduler_url(s), 0), 0);
	pswire__header__free_unpacked(
	    map_at_least(ps_scheduler_url(s), 1, 3000), NULL);
	ps_scheduler_close(s);
}

// patch overwrites byte off of the state file (flips it) or, with
// truncate_to >= 0, cuts the file there.
static void
patch(long off, long truncate_to)
{
	if (truncate_to >= 0) {
		ck_assert_int_eq(truncate(path, truncate_to), 0);
		return;
	}
	FILE *f = fopen(path, "r+b");
	ck_assert_ptr_nonnull(f);
	fseek(f, off, SEEK_SET);
	int c = fgetc(f);
	fseek(f, off, SEEK_SET);
	fputc(c ^ 0x5a, f);
	fclose(f);
}

// Flipped bytes (header, payload, trailer), a truncated file and a file
// of another job (trainer count) are refused: open fails, and the file
// is left alone for the operator.
START_TEST(test_scheduler_state_bogus)
{
	struct ps_scheduler_opts o = opts(1, 1);
	struct ps_scheduler     *s = NULL;
	struct stat              st;
	long                     offs[] = { 0, 9, 13, 30, -1 };

	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		write_state();
		ck_assert_int_eq(stat(path, &st), 0);
		patch(offs[i] >= 0 ? offs[i] : st.st_size - 1, -1);
		int rv = ps_scheduler_open(&o, &s);
		ck_assert_msg(rv == FB_ECORRUPT || rv == FB_EPROTO,
		    "byte %ld flipped: %s", offs[i], fb_strerror(rv));
		ck_assert_int_eq(stat(path, &st), 0); // kept for a look
		unlink(path);
	}
	write_state();
	ck_assert_int_eq(stat(path, &st), 0);
	patch(0, st.st_size - 7);
	PT_FAIL(ps_scheduler_open(&o, &s), FB_ECORRUPT);
	patch(0, 10);
	PT_FAIL(ps_scheduler_open(&o, &s), FB_ECORRUPT);
	unlink(path);

	write_state();
	o.trainers = 2; // another job's state
	PT_FAIL(ps_scheduler_open(&o, &s), FB_EPROTO);
	o.trainers  = 1;
	o.state_dir = path; // a file, not a directory
	PT_FAIL(ps_scheduler_open(&o, &s), FB_EINVAL);
	o.state_dir = "/nonexistent/ferry-state";
	PT_FAIL(ps_scheduler_open(&o, &s), FB_EINVAL);
	o.state_dir = dir;
	PT_OK(ps_scheduler_open(&o, &s)); // the good file still loads
	ps_scheduler_close(s);
}
END_TEST

Suite *
suite_scheduler_state(void)
{
	Suite *s  = suite_create("scheduler_state");
	TCase *tc = tcase_create("state");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_scheduler_state_carries_on);
	tcase_add_test(tc, test_scheduler_state_before_start);
	tcase_add_test(tc, test_scheduler_state_bogus);
	suite_add_tcase(s, tc);
	return s;
}
