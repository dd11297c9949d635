// test_request.c — request.c: the bytes of a request as a server reads
// them (header fields, ShardRefs, payload sizes and contents) for pulls,
// fp32 pushes, staged codes and the caller's own codes, and the staging
// of codes with error feedback.
#include <math.h>
#include <string.h>

#include "clients_tests.h"
#include "fake.h"

// Tensor 0 of 40 floats in three shards over servers 0 and 1, tensor 1 of
// 7 on server 0.
static const uint64_t          lens[2] = { 40, 7 };
static const struct fake_shard sh[4]   = { { 0, 0, 16, 0 }, { 0, 16, 16, 1 },
	  { 0, 32, 8, 0 }, { 1, 0, 7, 0 } };

// A request as read back: its frame and unpacked header.
struct sent {
	nng_msg         *msg;
	struct psw_frame f;
	Pswire__Header  *h;
};

// build runs ferry__request_build for the shards of server m that x's
// operation sends, with method `method`, and reads the message back.
static void
build(ferry_client *c, size_t m, uint8_t method, struct xfer *x,
    struct sent *s)
{
	struct conn *cn  = &c->conns[m];
	struct slot *sl  = &cn->slots[0];
	const char  *why = "";
	sl->method       = method;
	sl->req_n        = cn->n;
	memcpy(sl->req, cn->shards, cn->n * sizeof(uint32_t));
	ck_assert_int_eq(ferry__request_build(c, sl, x, &s->msg), FB_OK);
	ck_assert_int_eq(psw_msg_parse(s->msg, &s->f, &why), FB_OK);
	ck_assert_uint_eq(s->f.method, method);
	s->h = pswire__header__unpack(NULL, s->f.hdr_len, s->f.hdr);
	ck_assert_ptr_nonnull(s->h);
	ck_assert_uint_eq(s->h->request_id, sl->rid);
	ck_assert_uint_eq(s->h->rank, 3);
	ck_assert_uint_eq(s->h->epoch, c->pl->epoch);
	ck_assert_uint_eq(s->h->deadline_ms, ferry__timeout(c));
}

static void
sent_free(struct sent *s)
{
	pswire__header__free_unpacked(s->h, NULL);
	nng_msg_free(s->msg);
}

START_TEST(test_pull_request)
{
	ferry_client *c = fake_client(NULL, "q8", lens, 2, 2, sh, 4);
	struct xfer   x = { .op = OP_PULL, .pull_want = 9 };
	struct sent   s;

	c->shard_ver[0] = 5;
	c->shard_ver[2] = 4;
	c->shard_ver[3] = 6;
	c->ref_at[0] = c->ref_at[2] = c->ref_at[3] = REF_HOST;
	build(c, 0, PSWIRE__METHOD__PULL, &x, &s);
	ck_assert_uint_eq(s.f.payload_len, 0);
	ck_assert_int_eq(s.h->body_case, PSWIRE__HEADER__BODY_PULL_REQ);
	ck_assert_uint_eq(s.h->pull_req->n_shards, 3);
	ck_assert_uint_eq(s.h->pull_req->shards[0], 0);
	ck_assert_uint_eq(s.h->pull_req->shards[1], 2);
	ck_assert_uint_eq(s.h->pull_req->shards[2], 3);
	ck_assert_uint_eq(s.h->pull_req->version, 9);
	ck_assert_uint_eq(s.h->pull_req->have_version, 4); // the oldest
	ck_assert(!s.h->pull_req->full); // every reference is held
	sent_free(&s);

	// A shard never pulled has no reference: the request asks for FULL.
	c->ref_at[2] = REF_NONE;
	build(c, 0, PSWIRE__METHOD__PULL, &x, &s);
	ck_assert(s.h->pull_req->full);
	sent_free(&s);
	// So does a resync.
	c->ref_at[2] = REF_HOST;
	x.op         = OP_PULL_FULL;
	build(c, 0, PSWIRE__METHOD__PULL, &x, &s);
	ck_assert(s.h->pull_req->full);
	sent_free(&s);
	ferry_client_close(c);

	// Without a pull codec every pull is FULL.
	c    = fake_client(NULL, NULL, lens, 2, 2, sh, 4);
	x.op = OP_PULL;
	memset(c->ref_at, REF_HOST, 4);
	build(c, 1, PSWIRE__METHOD__PULL, &x, &s);
	ck_assert(s.h->pull_req->full);
	ck_assert_uint_eq(s.h->pull_req->n_shards, 1);
	sent_free(&s);
	ferry_client_close(c);
}
END_TEST

// fill gives tensor t the values t * 100 + i.
static void
fill(float w[2][40])
{
	for (int t = 0; t < 2; t++) {
		for (uint64_t i = 0; i < lens[t]; i++) {
			w[t][i] = (float) t * 100 + (float) i;
		}
	}
}

START_TEST(test_push_fp32)
{
	ferry_client *c = fake_client(NULL, NULL, lens, 2, 2, sh, 4);
	float         g[2][40];
	const float  *gp[2] = { g[0], g[1] };
	struct xfer   x     = {
		      .op        = OP_PUSH,
		      .g         = gp,
		      .n_samples = 32,
		      .codec     = &c->cnone,
	};
	struct sent s;

	fill(g);
	// Sync: every shard is pushed for the version the client holds,
	// even one it pulled further (it answers OUT_OF_RANGE then).
	c->version      = 7;
	c->shard_ver[0] = 7;
	c->shard_ver[2] = 8;
	build(c, 0, PSWIRE__METHOD__PUSH, &x, &s);
	ck_assert_int_eq(s.h->body_case, PSWIRE__HEADER__BODY_PUSH_REQ);
	Pswire__PushRequest *pr = s.h->push_req;
	ck_assert_uint_eq(pr->n_samples, 32);
	ck_assert(!pr->init);
	ck_assert_uint_eq(pr->n_shards, 3);
	// fp32, back to back: 16 + 8 + 7 floats.
	ck_assert_uint_eq(s.f.payload_len, (16 + 8 + 7) * 4);
	static const uint32_t ids[3] = { 0, 2, 3 };
	static const uint64_t off[3] = { 0, 16 * 4, 24 * 4 };
	const float          *src[3] = { g[0], g[0] + 32, g[1] };
	for (size_t i = 0; i < 3; i++) {
		const Pswire__ShardRef *r = pr->shards[i];
		ck_assert_uint_eq(r->shard, ids[i]);
		ck_assert_uint_eq(r->codec, COMP_NONE);
		ck_assert_uint_eq(r->offset, off[i]);
		ck_assert_uint_eq(r->length, sh[ids[i]].len * 4);
		ck_assert_mem_eq(s.f.payload + r->offset, src[i], r->length);
	}
	ck_assert_uint_eq(pr->shards[0]->version, 7);
	ck_assert_uint_eq(pr->shards[1]->version, 7);
	ck_assert(!pr->resend);
	sent_free(&s);

	// Once the exchange has cancelled requests to re-send them
	// (exchange.c, REQUEUE_MS), its pushes are marked so.
	x.requeued = 1;
	build(c, 0, PSWIRE__METHOD__PUSH, &x, &s);
	ck_assert(s.h->push_req->resend);
	sent_free(&s);
	x.requeued = 0;

	// Async: each shard's own version (shards drift apart).
	c->opts.mode = FERRY_MODE_ASYNC;
	c->lockstep  = 0; // as ferry_client_open sets it for async
	build(c, 0, PSWIRE__METHOD__PUSH, &x, &s);
	ck_assert_uint_eq(s.h->push_req->shards[0]->version, 7);
	ck_assert_uint_eq(s.h->push_req->shards[1]->version, 8);
	sent_free(&s);
	c->opts.mode = FERRY_MODE_SYNC;
	c->lockstep  = 1;

	// An init offer is a push with init set.
	x.op = OP_INIT;
	build(c, 1, PSWIRE__METHOD__PUSH, &x, &s);
	ck_assert(s.h->push_req->init);
	ck_assert_uint_eq(s.f.payload_len, 16 * 4);
	ck_assert_mem_eq(s.f.payload, g[0] + 16, 16 * 4);
	sent_free(&s);
	ferry_client_close(c);
}
END_TEST

// The last reply from a server is reused for the next push body when it
// is large enough.
START_TEST(test_push_reuses_spare)
{
	ferry_client *c = fake_client(NULL, NULL, lens, 2, 2, sh, 4);
	float         g[2][40];
	const float  *gp[2] = { g[0], g[1] };
	struct xfer   x     = {
		      .op        = OP_PUSH,
		      .g         = gp,
		      .n_samples = 1,
		      .codec     = &c->cnone,
	};
	struct sent s;
	nng_msg    *spare;

	fill(g);
	ck_assert_int_eq(nng_msg_alloc(&spare, 4096), 0);
	c->conns[1].slots[0].spare = spare;
	build(c, 1, PSWIRE__METHOD__PUSH_PULL, &x, &s);
	ck_assert_ptr_eq(s.msg, spare);
	ck_assert_ptr_null(c->conns[1].slots[0].spare);
	ck_assert_mem_eq(s.f.payload, g[0] + 16, 16 * 4);
	sent_free(&s);
	ferry_client_close(c);
}
END_TEST

// More than 64 shards in one request (the ShardRefs no longer fit on the
// stack).
START_TEST(test_push_many_shards)
{
	static const uint64_t len1[1] = { 100 };
	struct fake_shard     many[100];
	float                 g[100];
	const float          *gp[1] = { g };

	for (uint32_t i = 0; i < 100; i++) {
		many[i] = (struct fake_shard) { 0, i, 1, 0 };
		g[i]    = (float) i * 0.5f;
	}
	ferry_client *c = fake_client(NULL, NULL, len1, 1, 1, many, 100);
	struct xfer   x = {
		  .op        = OP_PUSH,
		  .g         = gp,
		  .n_samples = 1,
		  .codec     = &c->cnone,
	};
	struct sent s;
	build(c, 0, PSWIRE__METHOD__PUSH, &x, &s);
	ck_assert_uint_eq(s.h->push_req->n_shards, 100);
	ck_assert_uint_eq(s.f.payload_len, 400);
	ck_assert_uint_eq(s.h->push_req->shards[99]->offset, 396);
	ck_assert_mem_eq(s.f.payload, g, 400);
	sent_free(&s);
	ferry_client_close(c);
}
END_TEST

// Staged codes: each shard's codes are what comp_ef_encode gives with a
// zero residual, sized comp_bound; a NaN gradient is refused.
START_TEST(test_push_staged_codes)
{
	ferry_client *c = fake_client("q8", NULL, lens, 2, 2, sh, 4);
	float         g[2][40];
	const float  *gp[2] = { g[0], g[1] };
	struct xfer   x     = {
		      .op        = OP_PUSH,
		      .g         = gp,
		      .n_samples = 1,
		      .codec     = &c->cpush,
	};
	struct sent s;
	size_t      total = 0;

	fill(g);
	for (size_t i = 0; i < 4; i++) {
		c->code_off[i] = total;
		total += comp_bound(&c->cpush, sh[i].len);
	}
	c->codes = fb_alloc(total);
	for (size_t t = 0; t < 2; t++) {
		c->resid[t] = fb_zalloc(lens[t] * sizeof(float));
	}
	ck_assert_int_eq(ferry__codes_stage(c, &x, 0, c->n_tensors), FERRY_OK);
	ck_assert(x.staged);
	build(c, 1, PSWIRE__METHOD__PUSH, &x, &s);
	const Pswire__ShardRef *r = s.h->push_req->shards[0];
	ck_assert_uint_eq(r->codec, COMP_Q8);
	ck_assert_uint_eq(r->bucket, c->cpush.bucket);
	ck_assert_uint_eq(r->length, comp_bound(&c->cpush, 16));
	ck_assert_uint_eq(s.f.payload_len, r->length);
	uint8_t  want[256];
	float    e[16] = { 0 };
	size_t   out;
	uint64_t rng = 1;
	ck_assert_uint_le(r->length, sizeof(want));
	ck_assert_int_eq(comp_ef_encode(&c->cpush, g[0] + 16, e, 16, &rng,
	                     want, sizeof(want), &out),
	    FB_OK);
	ck_assert_uint_eq(out, r->length);
	ck_assert_mem_eq(s.f.payload, want, out);
	sent_free(&s);

	g[1][3]  = NAN;
	x.staged = 0;
	ck_assert_int_eq(ferry__codes_stage(c, &x, 0, c->n_tensors),
	    FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(c->err, "tensor 1 cannot be encoded"));
	ck_assert(!x.staged);
	ferry_client_close(c);
}
END_TEST

// The residual norm is the L2 norm of what one error-feedback step from a
// zero residual leaves out, over every shard: a wrong sum, a missed tensor
// or shard, or a norm of the gradient instead would fail.
START_TEST(test_ef_residual_norm)
{
	ferry_client *c = fake_client("q4", NULL, lens, 2, 2, sh, 4);
	float         g[2][40];
	const float  *gp[2] = { g[0], g[1] };
	struct xfer   x     = {
		      .op        = OP_PUSH,
		      .g         = gp,
		      .n_samples = 1,
		      .codec     = &c->cpush,
	};
	size_t total = 0;
	double want  = 0;

	ck_assert(ferry_client_ef_residual_norm(NULL) == 0);
	fill(g);
	for (size_t i = 0; i < 4; i++) {
		c->code_off[i] = total;
		total += comp_bound(&c->cpush, sh[i].len);
	}
	c->codes = fb_alloc(total);
	for (size_t t = 0; t < 2; t++) {
		c->resid[t] = fb_zalloc(lens[t] * sizeof(float));
	}
	ck_assert(ferry_client_ef_residual_norm(c) == 0);
	ck_assert_int_eq(ferry__codes_stage(c, &x, 0, c->n_tensors), FERRY_OK);
	for (size_t i = 0; i < 4; i++) {
		float    e[16] = { 0 };
		uint8_t  codes[256];
		size_t   out;
		uint64_t rng = 1;
		ck_assert_int_eq(
		    comp_ef_encode(&c->cpush, g[sh[i].tensor] + sh[i].offset,
		        e, sh[i].len, &rng, codes, sizeof(codes), &out),
		    FB_OK);
		for (size_t j = 0; j < sh[i].len; j++) {
			want += (double) e[j] * e[j];
		}
	}
	want = sqrt(want);
	ck_assert(want > 0);
	ck_assert_double_eq_tol(ferry_client_ef_residual_norm(c), want,
	    1e-9 * want);
	ferry_client_close(c);
}
END_TEST

// The caller's codes (push_pull_encoded) go out as given.
START_TEST(test_push_caller_codes)
{
	ferry_client  *c = fake_client("q4", NULL, lens, 2, 2, sh, 4);
	uint8_t        code[4][64];
	const uint8_t *cp[4] = { code[0], code[1], code[2], code[3] };
	struct xfer    x     = {
		       .op        = OP_PUSH_PULL,
		       .codes     = cp,
		       .n_samples = 1,
		       .codec     = &c->cpush,
	};
	struct sent s;

	for (size_t i = 0; i < 4; i++) {
		ck_assert_uint_le(comp_bound(&c->cpush, sh[i].len), 64);
		memset(code[i], 0x10 + (int) i, 64);
	}
	build(c, 0, PSWIRE__METHOD__PUSH_PULL, &x, &s);
	size_t at = 0;
	for (size_t i = 0; i < 3; i++) {
		const Pswire__ShardRef *r = s.h->push_req->shards[i];
		size_t b = comp_bound(&c->cpush, sh[r->shard].len);
		ck_assert_uint_eq(r->codec, COMP_Q4);
		ck_assert_uint_eq(r->offset, at);
		ck_assert_uint_eq(r->length, b);
		ck_assert_mem_eq(s.f.payload + at, code[r->shard], b);
		at += b;
	}
	ck_assert_uint_eq(s.f.payload_len, at);
	sent_free(&s);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_request(void)
{
	Suite *s  = suite_create("request");
	TCase *tc = tcase_create("pull");
	tcase_add_test(tc, test_pull_request);
	suite_add_tcase(s, tc);
	tc = tcase_create("push");
	tcase_add_test(tc, test_push_fp32);
	tcase_add_test(tc, test_push_reuses_spare);
	tcase_add_test(tc, test_push_many_shards);
	tcase_add_test(tc, test_push_staged_codes);
	tcase_add_test(tc, test_push_caller_codes);
	tcase_add_test(tc, test_ef_residual_norm);
	suite_add_tcase(s, tc);
	return s;
}
