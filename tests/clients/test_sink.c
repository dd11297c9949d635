// test_sink.c — libferry's pull sink (ferry_client_set_pull_sink) against
// the plain pull: a trainer whose sink keeps the shared reference itself
// (here on the host, with comp_decode_add and fb_crc32, as a GPU trainer
// does on the device) ends with bit-identical weights; a sink that
// reports a CRC mismatch gets the shard back in full; a sink set mid-run
// is resynced, never patched; a sink's own error fails the call.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "clients_tests.h"
#include "cluster.h"
#include "comp/comp.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "ps/ps.h"
#include "pt.h"

// One trainer thread. With use_sink, pulls go to a host sink that keeps
// its own reference in ref[][] (w[][] is then not written by pulls).
struct tr_arg {
	const char *url, *push, *pull;
	int         rank, steps;
	uint32_t    warmup;
	int         use_sink; // set the sink ...
	int         sink_at;  // ... before step sink_at (0: before version 0)
	int         corrupt_at; // > 0: drift the reference before that check
	int         fail_at;    // > 0: that delta returns FERRY_EUNSUPP
	float       w[NT][40], ref[NT][40];
	int         fulls, deltas, checks, mismatches;
	uint64_t    resyncs;
	struct ferry_pull_sink sink; // set by tr_main
	int                    rv;
	char                   err[256];
};

static int
sink_full(void *arg, const struct ferry_pull_piece *p)
{
	struct tr_arg *a = arg;
	ck_assert_uint_eq(p->bytes, p->len * 4);
	ck_assert_uint_eq(p->version, p->base_version);
	memcpy(a->ref[p->tensor] + p->offset, p->data, p->bytes);
	a->fulls++;
	return FERRY_OK;
}

static int
sink_delta(void *arg, const struct ferry_pull_piece *p)
{
	struct tr_arg    *a  = arg;
	struct comp_codec cc = COMP_CODEC_INIT;
	cc.id                = p->codec;
	cc.bucket            = p->bucket;
	ck_assert_uint_gt(p->bytes, 0);
	ck_assert_uint_eq(p->version, p->base_version + 1);
	if (++a->deltas == a->fail_at) {
		return FERRY_EUNSUPP;
	}
	if (comp_decode_add(&cc, p->data, p->bytes, p->len,
	        a->ref[p->tensor] + p->offset) != FB_OK) {
		return FERRY_EPROTO;
	}
	return FERRY_OK;
}

// sink_check finds the shard in ferry_client_shards' layout, which each
// thread stores in layout_of[rank] before its first pull.
static const struct ferry_shard *layout_of[2];

static int
sink_check(void *arg, uint32_t shard, uint64_t version, uint32_t crc)
{
	struct tr_arg            *a  = arg;
	const struct ferry_shard *sh = &layout_of[a->rank][shard];
	float                    *r  = a->ref[sh->tensor] + sh->offset;
	(void) version;
	if (++a->checks == a->corrupt_at) {
		r[0] = -r[0] + 1.0f; // the device reference drifted
	}
	if (fb_crc32(0, r, sh->len * 4) != crc) {
		a->mismatches++;
		return FERRY_ECORRUPT;
	}
	return FERRY_OK;
}

// sink_declared is a tr_arg's declared hook (harness.h): it stores the
// layout sink_check reads.
static int
sink_declared(struct pt_rank *r, ferry_client *c)
{
	struct tr_arg            *a = r->ctx;
	const struct ferry_shard *sh;
	size_t                    ns;
	uint32_t                  cid, bucket;
	int                       rv;

	if ((rv = ferry_client_shards(c, &sh, &ns, &cid, &bucket)) == 0) {
		layout_of[a->rank] = sh;
	}
	return rv;
}

// sink_step is a tr_arg's step: the sink set before step sink_at, and from
// then on pulls that go to it alone.
static int
sink_step(struct pt_rank *r, ferry_client *c, int k, float *const *g,
    float *const *w)
{
	struct tr_arg *a = r->ctx;
	int            rv;

	if (a->use_sink && k + 1 == a->sink_at &&
	    (rv = ferry_client_set_pull_sink(c, &a->sink)) != 0) {
		return rv;
	}
	float *const *dst = a->use_sink && k + 1 >= a->sink_at ? NULL : w;
	if (k < 0) {
		return ferry_client_pull(c, dst);
	}
	for (int t = 0; t < NT; t++) {
		for (size_t i = 0; i < lens[t]; i++) {
			g[t][i] = grad_for(a->rank, k, t, i);
		}
	}
	return ferry_client_push_pull(c, (const float *const *) g, 10, dst);
}

// tr_main trains one tr_arg on the shared trainer thread (harness.h);
// stopping early, it leaves, as ferry_client_close's comment asks, so
// that the other rank does not wait for this one's pushes until its
// deadline.
static void *
tr_main(void *arg)
{
	struct tr_arg *a = arg;
	struct pt_rank r = {
		.url            = a->url,
		.rank           = a->rank,
		.steps          = a->steps,
		.codec_push     = a->push,
		.codec_pull     = a->pull,
		.warmup         = a->warmup,
		.leave_on_error = 1,
		.declared       = sink_declared,
		.step           = sink_step,
		.ctx            = a,
	};
	a->sink = (struct ferry_pull_sink) { sink_full, sink_delta, sink_check,
		a };
	pt_rank_main(&r);
	memcpy(a->w, r.w, sizeof(a->w));
	a->resyncs = r.stats.resyncs;
	a->rv      = r.rv;
	snprintf(a->err, sizeof(a->err), "%s", r.err);
	return NULL;
}

// run trains ranks 0 and 1 for 8 steps; rank 0 takes its pulls per s
// (which may be NULL: plain pulls). Returns after both threads ended.
static void
run(struct tr_arg a[2], const char *push, const char *pull,
    const struct tr_arg *s)
{
	struct cluster cl;
	pthread_t      th[2];
	// 64-byte shards cut tensor 0 in three over both servers.
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	for (int r = 0; r < 2; r++) {
		if (r == 0 && s != NULL) {
			a[r] = *s;
		} else {
			memset(&a[r], 0, sizeof(a[r]));
		}
		a[r].url    = ps_scheduler_url(cl.sched);
		a[r].rank   = r;
		a[r].steps  = 8;
		a[r].push   = push;
		a[r].pull   = pull;
		a[r].warmup = 2;
		pthread_create(&th[r], NULL, tr_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
	}
	cluster_stop(&cl);
}

static void
ok_both(const struct tr_arg a[2], const char *what)
{
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(a[r].rv == 0, "%s: rank %d: %s: %s", what, r,
		    ferry_strerror(a[r].rv), a[r].err);
	}
}

// same checks that rank 0's sink reference and rank 1's weights equal the
// plain run's weights bit for bit.
static void
same(const struct tr_arg plain[2], const struct tr_arg sunk[2],
    const char *what)
{
	for (int t = 0; t < NT; t++) {
		ck_assert_msg(memcmp(plain[0].w[t], sunk[0].ref[t],
		                  lens[t] * sizeof(float)) == 0,
		    "%s: rank 0 sink reference of tensor %d differs", what, t);
		ck_assert_msg(memcmp(plain[1].w[t], sunk[1].w[t],
		                  lens[t] * sizeof(float)) == 0,
		    "%s: rank 1 tensor %d differs", what, t);
	}
}

static const char *const codecs[][2] = { { "q8", "q8" }, { "q4", "q4" } };

// A sink that decodes the deltas onto its own reference ends bit-identical
// to libferry's own pulls, for q8 and q4 pulls: it was given the fulls of
// the warm-up and then delta chains, every one checked, and no resync
// (nor in the plain run: a first pull asks for FULL).
// A sink whose reference drifted reports the CRC mismatch; libferry
// re-pulls that shard in full into the sink, and training ends exactly
// where the plain run does.
START_TEST(test_sink_equals_plain_pull)
{
	for (size_t i = 0; i < 2; i++) {
		struct tr_arg plain[2], sunk[2], s = { 0 };
		s.use_sink = 1;
		run(plain, codecs[i][0], codecs[i][1], NULL);
		run(sunk, codecs[i][0], codecs[i][1], &s);
		ok_both(plain, "plain");
		ok_both(sunk, "sink");
		same(plain, sunk, codecs[i][1]);
		ck_assert_int_ge(sunk[0].fulls, 1);
		ck_assert_int_gt(sunk[0].deltas, 0);
		ck_assert_int_gt(sunk[0].checks, 0);
		ck_assert_int_eq(sunk[0].mismatches, 0);
		ck_assert_uint_eq(plain[0].resyncs, 0);
		ck_assert_uint_eq(plain[1].resyncs, 0);
		ck_assert_uint_eq(sunk[0].resyncs, 0);

		int fulls    = sunk[0].fulls;
		s.corrupt_at = 7; // after the warm-up: a chain's check
		run(sunk, codecs[i][0], codecs[i][1], &s);
		ok_both(sunk, "drifting sink");
		same(plain, sunk, codecs[i][1]);
		ck_assert_int_eq(sunk[0].mismatches, 1);
		ck_assert_uint_eq(sunk[0].resyncs, 1);
		ck_assert_int_eq(sunk[0].fulls, fulls + 1);

		if (i == 0) {
			// A sink set mid-run (after the warm-up, when replies
			// are deltas) holds no reference yet: every shard is
			// pulled in full once (one resync), never patched.
			memset(&s, 0, sizeof(s));
			s.use_sink = 1;
			s.sink_at  = 5;
			run(sunk, codecs[i][0], codecs[i][1], &s);
			ok_both(sunk, "sink set midway");
			same(plain, sunk, "q8 midway");
			ck_assert_int_eq(sunk[0].fulls, 5); // every shard
			ck_assert_int_eq(sunk[0].mismatches, 0);
			ck_assert_uint_eq(sunk[0].resyncs, 1);
		}
	}
}
END_TEST

// Without a pull codec every pull reaches the sink as a full, unchecked.
START_TEST(test_sink_no_pull_codec)
{
	struct tr_arg plain[2], sunk[2], s = { 0 };
	s.use_sink = 1;
	run(plain, "q8", "none", NULL);
	run(sunk, "q8", "none", &s);
	ok_both(plain, "plain");
	ok_both(sunk, "sink");
	same(plain, sunk, "none");
	ck_assert_int_eq(sunk[0].deltas, 0);
	ck_assert_int_eq(sunk[0].checks, 0);
	ck_assert_int_gt(sunk[0].fulls, 8);
}
END_TEST

// A sink's own failure (not a mismatch) fails the call with its code and
// names the shard; bad sinks and NULL buffers without a sink are refused.
START_TEST(test_sink_bogus)
{
	struct tr_arg          sunk[2], s = { 0 };
	struct ferry_opts      o   = FERRY_OPTS_INIT;
	struct ferry_pull_sink bad = { sink_full, sink_delta, NULL, NULL };
	ferry_client          *c;
	uint32_t               id, bucket;

	s.use_sink = 1;
	s.fail_at  = 1; // the first delta: rank 0's step 2, after warm-up
	run(sunk, "q8", "q8", &s);
	ck_assert_int_eq(sunk[0].rv, FERRY_EUNSUPP);
	ck_assert_msg(strstr(sunk[0].err, "pull sink: delta of shard") != NULL,
	    "last_error: %s", sunk[0].err);

	o.scheduler_url = "tcp://127.0.0.1:1";
	o.codec_pull    = "q4";
	o.bucket        = 64;
	PT_OK(ferry_client_open(&o, &c));
	ck_assert_int_eq(ferry_client_set_pull_sink(NULL, &bad), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_set_pull_sink(c, &bad), FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(ferry_client_last_error(c), "check"));
	ck_assert_int_eq(ferry_client_set_pull_sink(c, NULL), FERRY_OK);
	ck_assert_int_eq(ferry_client_pull_codec(c, &id, NULL), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_pull_codec(c, &id, &bucket), FERRY_OK);
	ck_assert_uint_eq(id, COMP_Q4);
	ck_assert_uint_eq(bucket, 64);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_sink(void)
{
	Suite *s  = suite_create("sink");
	TCase *tc = tcase_create("sink");
	tcase_set_tags(tc, "cluster"); // see tests/clients/CMakeLists.txt
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_sink_equals_plain_pull);
	tcase_add_test(tc, test_sink_no_pull_codec);
	tcase_add_test(tc, test_sink_bogus);
	suite_add_tcase(s, tc);
	return s;
}
