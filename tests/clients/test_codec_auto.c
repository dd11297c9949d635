// test_codec_auto.c — codec_auto.c: the ladders' sizes, the budget rule
// (which rungs a link gets for a bandwidth, shard sizes and compute time),
// its hysteresis, and what "auto" puts in a request: each link's push
// codec in its ShardRefs, error feedback across rungs, and the pull's
// request for the weights.
#include <math.h>
#include <string.h>

#include "clients_tests.h"
#include "fake.h"

// link_of builds a link of one shard of n values at bw bytes/s and rtt.
static struct ferry__auto_link
link_of(uint64_t n, double bw, double rtt)
{
	struct ferry__auto_link l = { .bw_bps = bw, .rtt_s = rtt };
	ferry__auto_costs(&l, &n, 1, 0);
	return l;
}

// Every rung parses, and each sends fewer bytes than the one before it
// (the ladder's order); the pull's rung 0 is fp32, rung 1 the shared
// reference's codec.
START_TEST(test_auto_ladder_bytes_fall)
{
	struct comp_codec       cc, ref;
	struct ferry__auto_link l = link_of(1000000, 0, 0);
	for (int r = 0; r < FERRY_AUTO_PUSH_RUNGS; r++) {
		ck_assert_int_eq(ferry__auto_push_codec(r, 0, &cc), FB_OK);
		ck_assert_uint_eq(l.push_bytes[r], comp_bound(&cc, 1000000));
		if (r > 0) {
			ck_assert_uint_lt(l.push_bytes[r],
			    l.push_bytes[r - 1]);
		}
	}
	ck_assert_int_eq(ferry__auto_push_codec(FERRY_AUTO_PUSH_RUNGS, 0, &cc),
	    FB_EINVAL);
	ck_assert_str_eq(ferry__auto_push_name(0), "none");
	ck_assert_uint_eq(l.push_bytes[0], 4000000);
	ck_assert_uint_eq(l.pull_bytes[0], 4000000);
	ck_assert_int_eq(comp_codec_parse(COMP_AUTO_REF, 0, &ref), FB_OK);
	ck_assert_uint_eq(l.pull_bytes[1], comp_bound(&ref, 1000000));
	// "auto" reads as the reference's codec for the servers.
	ck_assert_int_eq(comp_codec_parse("auto", 0, &cc), FB_OK);
	ck_assert_uint_eq(cc.id, ref.id);
	ck_assert_float_eq(cc.topk_ratio, ref.topk_ratio);
}
END_TEST

// The budget rule on one shard of 1M values at 1 GB/s, no round trip:
// fp32 both ways is 8 ms, fp16 push 6 ms, fp16 push and reference pull
// about 2.09 ms.
START_TEST(test_auto_choose_budget)
{
	struct ferry__auto_link l = link_of(1000000, 1e9, 0);
	int                     p, q;
	// Room for everything: the least lossy rungs.
	ferry__auto_choose(&l, 0.010, -1, 0, &p, &q);
	ck_assert_int_eq(p, 0);
	ck_assert_int_eq(q, 0);
	// 6.5 ms: the push demoted once (it sent as many bytes as the pull).
	ferry__auto_choose(&l, 0.0065, -1, 0, &p, &q);
	ck_assert_int_eq(p, 1);
	ck_assert_int_eq(q, 0);
	// 3.5 ms: then the pull, which sends more than fp16 pushes.
	ferry__auto_choose(&l, 0.0035, -1, 0, &p, &q);
	ck_assert_int_eq(p, 1);
	ck_assert_int_eq(q, 1);
	ck_assert(ferry__auto_time(&l, p, q) <= 0.0035);
	// 1.5 ms: q8 pushes (about 1.1 ms with the reference pull).
	ferry__auto_choose(&l, 0.0015, -1, 0, &p, &q);
	ck_assert_int_eq(p, 2);
	ck_assert_int_eq(q, 1);
	// A round trip counts: 0.5 ms more leaves 1.5 ms only for q4.
	struct ferry__auto_link far = link_of(1000000, 1e9, 0.0005);
	ferry__auto_choose(&far, 0.0015, -1, 0, &p, &q);
	ck_assert_int_eq(p, 3);
	ck_assert_int_eq(q, 1);
	// Nothing fits 20 Mbit/s in 1 ms: the most compressed rungs.
	struct ferry__auto_link slow = link_of(1000000, 2.5e6, 0.001);
	ferry__auto_choose(&slow, 0.001, -1, 0, &p, &q);
	ck_assert_int_eq(p, FERRY_AUTO_PUSH_RUNGS - 1);
	ck_assert_int_eq(q, FERRY_AUTO_PULL_RUNGS - 1);
	// Not probed, or no compute time yet: the least lossy, or as is.
	struct ferry__auto_link unknown = link_of(1000000, 0, 0);
	ferry__auto_choose(&unknown, 0.001, -1, 0, &p, &q);
	ck_assert_int_eq(p, 0);
	ck_assert_int_eq(q, 0);
	ferry__auto_choose(&l, 0, 3, 1, &p, &q);
	ck_assert_int_eq(p, 3);
	ck_assert_int_eq(q, 1);
}
END_TEST

// Hysteresis: a choice that fits stays until a less lossy one fits
// FERRY_AUTO_UP of the budget; one over budget stays until it exceeds
// the budget over FERRY_AUTO_UP, then moves at once.
START_TEST(test_auto_choose_hysteresis)
{
	struct ferry__auto_link l = link_of(1000000, 1e9, 0);
	int                     p, q;
	// From (1, 1), 6.5 ms would allow (1, 0) (6 ms), but 80% of it
	// (5.2 ms) does not: stay.
	ferry__auto_choose(&l, 0.0065, 1, 1, &p, &q);
	ck_assert_int_eq(p, 1);
	ck_assert_int_eq(q, 1);
	// 7.6 ms: (1, 0) fits 6.08 ms: move up.
	ferry__auto_choose(&l, 0.0076, 1, 1, &p, &q);
	ck_assert_int_eq(p, 1);
	ck_assert_int_eq(q, 0);
	// Back at 6.5 ms (1, 0) still fits: no flapping down either.
	ferry__auto_choose(&l, 0.0065, p, q, &p, &q);
	ck_assert_int_eq(p, 1);
	ck_assert_int_eq(q, 0);
	// 5 ms: (1, 0) is over budget but within 5 / 0.8 = 6.25 ms: stay.
	ferry__auto_choose(&l, 0.005, 1, 0, &p, &q);
	ck_assert_int_eq(p, 1);
	ck_assert_int_eq(q, 0);
	// 4.5 ms (5.6 ms with the margin): down at once, to the fit for
	// 4.5 ms.
	ferry__auto_choose(&l, 0.0045, 1, 0, &p, &q);
	ck_assert_int_eq(p, 1);
	ck_assert_int_eq(q, 1);
	// A choice more lossy in one direction only is no move up: from
	// (0, 1) (4.09 ms) at 9 ms the fit for 7.2 ms is (1, 0): stay.
	ferry__auto_choose(&l, 0.009, 0, 1, &p, &q);
	ck_assert_int_eq(p, 0);
	ck_assert_int_eq(q, 1);
}
END_TEST

// Tensor 0 of 40 floats: shards 0 and 2 on server 0, shard 1 on server 1.
static const uint64_t          lens[1] = { 40 };
static const struct fake_shard sh[3]   = { { 0, 0, 16, 0 }, { 0, 16, 16, 1 },
	  { 0, 32, 8, 0 } };

// auto_client is a fake client with codec "auto" both ways, its codes
// staging area and residuals as ferry_client_declare sizes them.
static ferry_client *
auto_client(void)
{
	ferry_client *c     = fake_client("auto", "auto", lens, 1, 2, sh, 3);
	size_t        total = 0;
	ck_assert_int_eq(ferry__auto_init(c), FERRY_OK);
	ck_assert(c->auto_push && c->auto_pull);
	for (size_t i = 0; i < 3; i++) {
		c->code_off[i] = total;
		total += ferry__auto_bound(c, c->pl->shards[i]->len);
	}
	c->codes    = fb_alloc(total);
	c->resid[0] = fb_zalloc(40 * sizeof(float));
	ck_assert(c->codes != NULL && c->resid[0] != NULL);
	return c;
}

// read_req builds server m's request for its shards and unpacks it.
static Pswire__Header *
read_req(ferry_client *c, size_t m, uint8_t method, struct xfer *x,
    nng_msg **msg)
{
	struct conn     *cn = &c->conns[m];
	struct slot     *sl = &cn->slots[0];
	struct psw_frame f;
	const char      *why = "";
	sl->method           = method;
	sl->req_n            = cn->n;
	memcpy(sl->req, cn->shards, cn->n * sizeof(uint32_t));
	ck_assert_int_eq(ferry__request_build(c, sl, x, msg), FB_OK);
	ck_assert_int_eq(psw_msg_parse(*msg, &f, &why), FB_OK);
	Pswire__Header *h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	ck_assert_ptr_nonnull(h);
	return h;
}

// Each link's pushes carry its own rung's codec (q4 on server 0, fp32 on
// server 1), sized as that codec; the fp32 rung goes through error
// feedback too, so its residual is flushed to zero while q4's keeps what
// it could not send.
START_TEST(test_auto_request_per_link)
{
	ferry_client     *c = auto_client();
	float             g[40];
	// Staging room covers every rung: a sparse rung's count and index
	// block outgrow fp32 on a one-value shard.
	struct comp_codec last;
	ck_assert_int_eq(
	    ferry__auto_push_codec(FERRY_AUTO_PUSH_RUNGS - 1, 0, &last),
	    FB_OK);
	ck_assert_uint_gt(comp_bound(&last, 1), 4);
	ck_assert_uint_eq(ferry__auto_bound(c, 1), comp_bound(&last, 1));
	const float *gp[1] = { g };
	nng_msg     *msg;
	for (int i = 0; i < 40; i++) {
		g[i]           = sinf((float) i) * 0.3f;
		c->resid[0][i] = 0.01f; // left over from an earlier rung
	}
	c->conns[0].push_rung = 3; // q4
	c->conns[1].push_rung = 0; // fp32
	c->conns[1].pull_rung = 0; // the weights
	struct xfer x = { .op = OP_PUSH_PULL, .g = gp, .n_samples = 1 };
	x.codec       = &c->cpush;
	ck_assert_int_eq(ferry__codes_stage(c, &x, 0, 1), FERRY_OK);
	ck_assert_uint_eq(c->staged_rung[0], 3);
	ck_assert_uint_eq(c->staged_rung[1], 0);
	ck_assert_uint_eq(c->staged_rung[2], 3);
	for (int i = 16; i < 32; i++) { // shard 1, fp32: exact, flushed
		ck_assert_float_eq(c->resid[0][i], 0.0f);
	}
	double e0 = 0;
	for (int i = 0; i < 16; i++) {
		e0 += fabs(c->resid[0][i]);
	}
	ck_assert(e0 > 0); // q4 left a residual

	Pswire__Header   *h = read_req(c, 0, PSWIRE__METHOD__PUSH_PULL, &x,
	      &msg);
	struct comp_codec q4;
	ck_assert_int_eq(comp_codec_parse("q4", 0, &q4), FB_OK);
	ck_assert_uint_eq(h->push_req->n_shards, 2);
	for (size_t i = 0; i < 2; i++) {
		const Pswire__ShardRef *r = h->push_req->shards[i];
		ck_assert_uint_eq(r->codec, COMP_Q4);
		ck_assert_uint_eq(r->bucket, q4.bucket);
		ck_assert_uint_eq(r->length,
		    comp_bound(&q4, c->pl->shards[r->shard]->len));
	}
	// Server 0's pull goes on with the shared reference (rung 1).
	c->conns[0].pull_rung = 1;
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(msg);
	h = read_req(c, 0, PSWIRE__METHOD__PUSH_PULL, &x, &msg);
	ck_assert(!h->push_req->pull_weights);
	ck_assert(!c->conns[0].slots[0].pull_weights);
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(msg);

	h = read_req(c, 1, PSWIRE__METHOD__PUSH_PULL, &x, &msg);
	ck_assert_uint_eq(h->push_req->n_shards, 1);
	ck_assert_uint_eq(h->push_req->shards[0]->codec, COMP_NONE);
	ck_assert_uint_eq(h->push_req->shards[0]->length, 16 * 4);
	// Rung 0 of the pull: the weights themselves.
	ck_assert(h->push_req->pull_weights);
	ck_assert(c->conns[1].slots[0].pull_weights);
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(msg);

	// A sparse rung names its ratio.
	c->conns[0].push_rung = FERRY_AUTO_PUSH_RUNGS - 1;
	ck_assert_int_eq(ferry__codes_stage(c, &x, 0, 1), FERRY_OK);
	h = read_req(c, 0, PSWIRE__METHOD__PUSH, &x, &msg);
	ck_assert_uint_eq(h->push_req->shards[0]->codec, COMP_TOPK_Q8);
	ck_assert_float_eq(h->push_req->shards[0]->topk_ratio, 0.01f);
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(msg);

	// A pull names the weights by the rung too; warm-up pushes fp32.
	struct xfer pl = { .op = OP_PULL };
	h              = read_req(c, 1, PSWIRE__METHOD__PULL, &pl, &msg);
	ck_assert(h->pull_req->weights);
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(msg);
	struct xfer warm = { .op = OP_PUSH, .g = gp, .n_samples = 1 };
	warm.codec       = &c->cnone;
	h                = read_req(c, 0, PSWIRE__METHOD__PUSH, &warm, &msg);
	ck_assert_uint_eq(h->push_req->shards[0]->codec, COMP_NONE);
	pswire__header__free_unpacked(h, NULL);
	nng_msg_free(msg);
	ferry_client_close(c);
}
END_TEST

// Before any step is timed there is no budget: every link starts at the
// most compressed rungs. Once a step's compute time is measured, a link
// with room moves up at once and a slow one stays.
START_TEST(test_auto_first_step_compressed)
{
	ferry_client *c = auto_client();
	for (size_t m = 0; m < 2; m++) {
		ck_assert_int_eq(c->conns[m].push_rung,
		    FERRY_AUTO_PUSH_RUNGS - 1);
		ck_assert_int_eq(c->conns[m].pull_rung,
		    FERRY_AUTO_PULL_RUNGS - 1);
	}
	c->conns[0].bw_bps = 1e9; // 40 floats fit 10 ms many times over
	c->conns[1].bw_bps = 1.0; // nothing fits
	ferry__auto_step(c);      // the first step: nothing to time yet
	ck_assert_int_eq(c->conns[0].push_rung, FERRY_AUTO_PUSH_RUNGS - 1);
	// The first step's compute: 10 ms between two push-pulls.
	c->op_end_ns = fb_clock_ns() - 10000000;
	ferry__auto_step(c);
	ck_assert(c->compute_s >= 0.01);
	ck_assert_int_eq(c->conns[0].push_rung, 0);
	ck_assert_int_eq(c->conns[0].pull_rung, 0);
	ck_assert_int_eq(c->conns[1].push_rung, FERRY_AUTO_PUSH_RUNGS - 1);
	ck_assert_int_eq(c->conns[1].pull_rung, FERRY_AUTO_PULL_RUNGS - 1);
	ferry_client_close(c);
}
END_TEST

// ferry_client_link reports each link's rung names and bytes per step,
// and refuses an index past the last server.
START_TEST(test_auto_link_report)
{
	ferry_client     *c = auto_client();
	struct ferry_link l;
	c->conns[1].push_rung       = 2;
	c->conns[1].pull_rung       = 1;
	c->conns[1].link_push_bytes = 3000;
	c->conns[1].link_pull_bytes = 600;
	c->conns[1].link_steps      = 3;
	c->conns[0].push_rung       = 0;
	c->conns[0].pull_rung       = 0;
	ck_assert_int_eq(ferry_client_link(c, 1, &l), FERRY_OK);
	ck_assert_str_eq(l.codec_push, "q8");
	ck_assert_str_eq(l.codec_pull, COMP_AUTO_REF);
	ck_assert_double_eq(l.push_bytes_per_step, 1000.0);
	ck_assert_double_eq(l.pull_bytes_per_step, 200.0);
	ck_assert_int_eq(ferry_client_link(c, 0, &l), FERRY_OK);
	ck_assert_str_eq(l.codec_push, "none");
	ck_assert_str_eq(l.codec_pull, "none");
	ck_assert_int_eq(ferry_client_link(c, 2, &l), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_link(NULL, 0, &l), FERRY_EINVAL);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_codec_auto(void)
{
	Suite *s  = suite_create("codec_auto");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_auto_ladder_bytes_fall);
	tcase_add_test(tc, test_auto_choose_budget);
	tcase_add_test(tc, test_auto_choose_hysteresis);
	tcase_add_test(tc, test_auto_request_per_link);
	tcase_add_test(tc, test_auto_first_step_compressed);
	tcase_add_test(tc, test_auto_link_report);
	suite_add_tcase(s, tc);
	return s;
}
