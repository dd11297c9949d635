// test_reply.c — reply.c: a pull reply taken apart without a server. Full
// shards land in the caller's tensors; delta chains are checked against
// the reference's CRC (a mismatch or a gap flags the shard for a resync);
// malformed replies are refused; with a pull sink the pieces go to the
// sink, whose own errors fail the call.
#include <string.h>

#include "clients_tests.h"
#include "fake.h"

// Tensor 0 of 8 floats in two shards, both on server 0.
static const uint64_t          lens[1] = { 8 };
static const struct fake_shard sh[2]   = { { 0, 0, 4, 0 }, { 0, 4, 4, 0 } };

// A reply under construction: up to 4 refs over one payload.
struct rep {
	Pswire__Header    h;
	Pswire__PullReply p;
	Pswire__ShardRef  r[4], *rp[4];
	uint8_t           payload[64];
	struct psw_frame  f;
};

// rep_init starts an empty pull reply, with the request of server 0 set
// to shards 0 and 1 (a pull).
static void
rep_init(ferry_client *c, struct rep *r)
{
	struct slot *cn = &c->conns[0].slots[0];
	memset(r, 0, sizeof(*r));
	pswire__header__init(&r->h);
	pswire__pull_reply__init(&r->p);
	r->h.body_case = PSWIRE__HEADER__BODY_PULL_REP;
	r->h.pull_rep  = &r->p;
	r->p.shards    = r->rp;
	r->f.payload   = r->payload;
	cn->method     = PSWIRE__METHOD__PULL;
	cn->req_n      = 2;
	cn->req[0]     = 0;
	cn->req[1]     = 1;
}

// rep_add appends a ref for shard `shard` of `len` payload bytes (copied
// from data, which may be NULL for zeros).
static Pswire__ShardRef *
rep_add(struct rep *r, uint32_t shard, int kind, const void *data, size_t len)
{
	Pswire__ShardRef *e = &r->r[r->p.n_shards];
	pswire__shard_ref__init(e);
	e->shard  = shard;
	e->kind   = kind;
	e->offset = r->f.payload_len;
	e->length = len;
	if (data != NULL) {
		memcpy(r->payload + e->offset, data, len);
	}
	r->f.payload_len += (uint32_t) len;
	r->rp[r->p.n_shards++] = e;
	return e;
}

static int
take(ferry_client *c, struct rep *r, float *const *w)
{
	struct xfer x = { .op = OP_PULL, .w = w };
	return ferry__reply_take(c, &c->conns[0].slots[0], &x, &r->h, &r->f);
}

static const float vals[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

START_TEST(test_full_shards)
{
	ferry_client     *c    = fake_client(NULL, NULL, lens, 1, 1, sh, 2);
	float             w[8] = { 0 }, *wp[1] = { w };
	struct rep        r;
	Pswire__ShardRef *e;

	rep_init(c, &r);
	rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16)
	    ->version = 5;
	rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals + 4, 16)
	    ->version = 6;
	ck_assert_int_eq(take(c, &r, wp), FERRY_OK);
	ck_assert_mem_eq(w, vals, sizeof(vals));
	ck_assert_uint_eq(c->shard_ver[0], 5);
	ck_assert_uint_eq(c->shard_ver[1], 6);
	ck_assert_int_eq(c->ref_at[0], REF_HOST);
	ck_assert_int_eq(c->need_full[0] | c->need_full[1], 0);
	// Without a pull codec, a re-seed is offered the caller's buffer the
	// pull wrote, until a push computes its gradient there.
	ck_assert_ptr_eq(c->held[0], w);
	ck_assert_ptr_eq(c->held[1], w + 4);
	ferry__seed_forget_aliases(c, (const float *const *) wp);
	ck_assert_ptr_null(c->held[0]);
	ck_assert_ptr_null(c->held[1]);

	// A push has no pull body to take.
	c->conns[0].slots[0].method = PSWIRE__METHOD__PUSH;
	r.h.body_case               = PSWIRE__HEADER__BODY__NOT_SET;
	ck_assert_int_eq(
	    ferry__reply_take(c, &c->conns[0].slots[0], NULL, &r.h, &r.f),
	    FERRY_OK);

	// A FULL of the wrong size.
	rep_init(c, &r);
	rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 12);
	rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "bad full shard 0"));
	// Bytes past the payload.
	rep_init(c, &r);
	rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	e = rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	e->offset = 20;
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "outside the reply"));
	ferry_client_close(c);
}
END_TEST

START_TEST(test_malformed_replies)
{
	ferry_client *c = fake_client(NULL, NULL, lens, 1, 1, sh, 2);
	float         w[8], *wp[1] = { w };
	struct rep    r;

	rep_init(c, &r);
	r.h.body_case = PSWIRE__HEADER__BODY__NOT_SET;
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "no pull body"));
	// Shard 1 missing.
	rep_init(c, &r);
	rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "lacks shard 1"));
	// Out of order: shard 1 first.
	rep_init(c, &r);
	rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "lacks shard 0"));
	// A shard not asked for.
	rep_init(c, &r);
	c->conns[0].slots[0].req_n = 1;
	rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "not asked for"));
	// A delta without a pull codec.
	rep_init(c, &r);
	rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, NULL, 0);
	rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_ptr_nonnull(strstr(c->err, "delta for shard 0"));
	ferry_client_close(c);
}
END_TEST

// With a pull codec: a FULL sets the reference (CRC-checked); a chain of
// empty deltas ("no change") moves the version when the CRC matches, and
// flags the shard for a resync on a CRC mismatch or a gap in the chain.
START_TEST(test_delta_chains)
{
	ferry_client     *c    = fake_client(NULL, "q8", lens, 1, 1, sh, 2);
	float             w[8] = { 0 }, *wp[1] = { w };
	struct rep        r;
	Pswire__ShardRef *e;
	uint32_t          crc0 = fb_crc32(0, vals, 16);
	uint32_t          crc1 = fb_crc32(0, vals + 4, 16);

	// FULLs are checked too (the copy to w is the check's pass): shard 1's
	// CRC is wrong.
	rep_init(c, &r);
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	e->version = 3, e->crc = crc0;
	e = rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals + 4, 16);
	e->version = 3, e->crc = crc0;
	ck_assert_int_eq(take(c, &r, wp), FERRY_OK);
	ck_assert_mem_eq(c->ref[0], vals, sizeof(vals));
	ck_assert_int_eq(c->ref_at[1], REF_HOST);
	// With one, the reference both sides keep (libferry's own copy).
	ck_assert_ptr_eq(c->held[0], c->ref[0]);
	ck_assert_ptr_null(c->held[1]); // its CRC was wrong
	ck_assert_uint_eq(c->shard_ver[0], 3);
	ck_assert_uint_eq(c->shard_ver[1], 0);
	ck_assert_int_eq(c->need_full[1], 1);
	c->need_full[1] = 0;
	c->shard_ver[1] = 3;

	// 3 -> 4 -> 5 for shard 0, CRC right; 3 -> 4 for shard 1, CRC wrong.
	memset(w, 0, sizeof(w));
	rep_init(c, &r);
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, NULL, 0);
	e->codec = COMP_Q8, e->base_version = 3, e->version = 4;
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, NULL, 0);
	e->codec = COMP_Q8, e->base_version = 4, e->version = 5;
	e->crc = crc0;
	e      = rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, NULL, 0);
	e->codec = COMP_Q8, e->base_version = 3, e->version = 4;
	e->crc = crc1 ^ 1;
	ck_assert_int_eq(take(c, &r, wp), FERRY_OK);
	ck_assert_uint_eq(c->shard_ver[0], 5);
	ck_assert_mem_eq(w, vals, 16); // handed over with the check
	ck_assert_int_eq(c->need_full[0], 0);
	ck_assert_uint_eq(c->shard_ver[1], 3);
	ck_assert_int_eq(c->need_full[1], 1);

	// A gap (base 7, held 5) and a delta in another codec.
	c->need_full[1] = 0;
	rep_init(c, &r);
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, NULL, 0);
	e->codec = COMP_Q8, e->base_version = 7, e->version = 8;
	e->crc = crc0;
	e      = rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, NULL, 0);
	e->codec = COMP_Q4, e->base_version = 3, e->version = 4;
	ck_assert_int_eq(take(c, &r, wp), FERRY_EPROTO);
	ck_assert_int_eq(c->need_full[0], 1);
	ck_assert_ptr_nonnull(strstr(c->err, "in codec"));
	ferry_client_close(c);
}
END_TEST

// A sink that records what it is given and answers `rv`.
struct rec {
	int                     fulls, deltas, checks, rv;
	struct ferry_pull_piece last;
	uint32_t                crc;
};

static int
rec_full(void *arg, const struct ferry_pull_piece *p)
{
	struct rec *s = arg;
	s->fulls++;
	s->last = *p;
	return s->rv;
}

static int
rec_delta(void *arg, const struct ferry_pull_piece *p)
{
	struct rec *s = arg;
	s->deltas++;
	s->last = *p;
	return s->rv;
}

static int
rec_check(void *arg, uint32_t shard, uint64_t version, uint32_t crc)
{
	struct rec *s = arg;
	(void) shard;
	(void) version;
	s->checks++;
	s->crc = crc;
	return s->rv;
}

START_TEST(test_pull_sink)
{
	ferry_client          *c  = fake_client(NULL, "q8", lens, 1, 1, sh, 2);
	struct rec             rs = { 0 };
	struct ferry_pull_sink sk = { rec_full, rec_delta, rec_check, &rs };
	struct rep             r;
	Pswire__ShardRef      *e;
	uint8_t                code[64] = { 0 };
	size_t                 cb       = comp_bound(&c->cpull, 4);

	ck_assert_int_eq(ferry_client_set_pull_sink(c, &sk), FERRY_OK);
	// FULLs reach the sink with their CRC checked here.
	rep_init(c, &r);
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals, 16);
	e->version = 2, e->crc = fb_crc32(0, vals, 16);
	e = rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_FULL, vals + 4, 16);
	e->version = 2, e->crc = fb_crc32(0, vals + 4, 16);
	ck_assert_int_eq(take(c, &r, NULL), FERRY_OK);
	ck_assert_int_eq(rs.fulls, 2);
	ck_assert_uint_eq(rs.last.shard, 1);
	ck_assert_uint_eq(rs.last.offset, 4);
	ck_assert_uint_eq(rs.last.len, 4);
	ck_assert_uint_eq(rs.last.bytes, 16);
	ck_assert_uint_eq(rs.last.version, 2);
	ck_assert_int_eq(c->ref_at[0], REF_SINK);
	ck_assert_uint_eq(c->shard_ver[1], 2);

	// A delta of comp_bound bytes goes to the sink, then its check.
	ck_assert_uint_le(cb, sizeof(code));
	rep_init(c, &r);
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, code, cb);
	e->codec = COMP_Q8, e->base_version = 2, e->version = 3;
	e->crc = 0xabcd;
	e = rep_add(&r, 1, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, code, cb);
	e->codec = COMP_Q8, e->base_version = 2, e->version = 3;
	ck_assert_int_eq(take(c, &r, NULL), FERRY_OK);
	ck_assert_int_eq(rs.deltas, 2);
	ck_assert_int_eq(rs.checks, 2);
	ck_assert_uint_eq(rs.last.codec, COMP_Q8);
	ck_assert_uint_eq(rs.last.base_version, 2);
	ck_assert_uint_eq(rs.last.bytes, cb);
	ck_assert_uint_eq(c->shard_ver[0], 3);

	// The sink's mismatch asks for a resync; its own error fails.
	rs.rv = FERRY_ECORRUPT;
	rep_init(c, &r);
	c->conns[0].slots[0].req_n = 1;
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, code, cb);
	e->codec = COMP_Q8, e->base_version = 3, e->version = 4;
	ck_assert_int_eq(take(c, &r, NULL), FERRY_OK);
	ck_assert_int_eq(c->need_full[0], 1);
	ck_assert_uint_eq(c->shard_ver[0], 3);
	rs.rv = FERRY_ESINK;
	ck_assert_int_eq(take(c, &r, NULL), FERRY_ESINK);
	ck_assert_ptr_nonnull(strstr(c->err, "pull sink: delta of shard 0"));
	rs.rv = 99; // not a ferry_err
	ck_assert_int_eq(take(c, &r, NULL), FERRY_EINVAL);
	ck_assert_ptr_nonnull(strstr(c->err, "not a ferry_err"));
	// A delta of the wrong size never reaches the sink.
	rs.rv     = FERRY_OK;
	int seen  = rs.deltas;
	e->length = cb - 1;
	ck_assert_int_eq(take(c, &r, NULL), FERRY_EPROTO);
	ck_assert_int_eq(rs.deltas, seen);
	ferry_client_close(c);
}
END_TEST

// A reference held on the other side of the sink switch is not patched.
START_TEST(test_sink_switch_resyncs)
{
	ferry_client          *c  = fake_client(NULL, "q8", lens, 1, 1, sh, 2);
	struct rec             rs = { 0 };
	struct ferry_pull_sink sk = { rec_full, rec_delta, rec_check, &rs };
	float                  w[8], *wp[1] = { w };
	struct rep             r;
	Pswire__ShardRef      *e;

	c->ref_at[0] = c->ref_at[1] = REF_HOST;
	c->shard_ver[0] = c->shard_ver[1] = 3;
	ck_assert_int_eq(ferry_client_set_pull_sink(c, &sk), FERRY_OK);
	rep_init(c, &r);
	c->conns[0].slots[0].req_n = 1;
	e = rep_add(&r, 0, PSWIRE__SHARD_KIND__SHARD_KIND_DELTA, NULL, 0);
	e->codec = COMP_Q8, e->base_version = 3, e->version = 4;
	ck_assert_int_eq(take(c, &r, NULL), FERRY_OK);
	ck_assert_int_eq(c->need_full[0], 1);
	ck_assert_int_eq(rs.deltas + rs.checks, 0);
	// And back: a sink reference is no host reference.
	c->need_full[0] = 0;
	c->ref_at[0]    = REF_SINK;
	ck_assert_int_eq(ferry_client_set_pull_sink(c, NULL), FERRY_OK);
	ck_assert_int_eq(take(c, &r, wp), FERRY_OK);
	ck_assert_int_eq(c->need_full[0], 1);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_reply(void)
{
	Suite *s  = suite_create("reply");
	TCase *tc = tcase_create("buffers");
	tcase_add_test(tc, test_full_shards);
	tcase_add_test(tc, test_malformed_replies);
	tcase_add_test(tc, test_delta_chains);
	suite_add_tcase(s, tc);
	tc = tcase_create("sink");
	tcase_add_test(tc, test_pull_sink);
	tcase_add_test(tc, test_sink_switch_resyncs);
	suite_add_tcase(s, tc);
	return s;
}
