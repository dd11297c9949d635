// test_ops.c — ops.c's argument and state checks, which every public step
// call runs before it talks to a server: each case here is refused before
// any request is sent (the fake client has no servers to answer).
#include <stddef.h>
#include <string.h>

#include "clients_tests.h"
#include "fake.h"

static const uint64_t          lens2[2] = { 8, 4 };
static const struct fake_shard sh2[2]   = { { 0, 0, 8, 0 }, { 1, 0, 4, 0 } };

static int
nop_piece(void *arg, const struct ferry_pull_piece *p)
{
	(void) arg;
	(void) p;
	return FERRY_OK;
}

static int
nop_check(void *arg, uint32_t shard, uint64_t version, uint32_t crc)
{
	(void) arg;
	(void) shard;
	(void) version;
	(void) crc;
	return FERRY_OK;
}

// has asserts that the last error of c contains word.
static void
has(ferry_client *c, const char *word)
{
	ck_assert_msg(strstr(ferry_client_last_error(c), word) != NULL,
	    "last_error '%s' lacks '%s'", ferry_client_last_error(c), word);
}

START_TEST(test_before_declare)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	ferry_client     *c;
	float             buf[8], *w[2] = { buf, buf };
	const float      *g[2]     = { buf, buf };
	const uint8_t    *codes[2] = { NULL, NULL };

	o.scheduler_url = FAKE_URL;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_init_weights(c, g), FERRY_ESTATE);
	has(c, "declare the tensors first");
	ck_assert_int_eq(ferry_client_pull(c, w), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_push(c, g, 1), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_push_pull(c, g, 1, w), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_push_pull_encoded(c, codes, 1, w),
	    FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_leave(c), FERRY_ESTATE);
	ferry_client_close(c);

	ck_assert_int_eq(ferry_client_init_weights(NULL, g), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_pull(NULL, w), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_push(NULL, g, 1), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_push_pull(NULL, g, 1, w), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_push_pull_encoded(NULL, codes, 1, w),
	    FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_leave(NULL), FERRY_EINVAL);
}
END_TEST

START_TEST(test_declare_arguments)
{
	struct ferry_opts        o = FERRY_OPTS_INIT;
	ferry_client            *c;
	struct ferry_tensor_desc d[2] = { { "a", 8 }, { "b", 0 } };
	struct ferry_tensor_spec s[1] = {
		{ .name = "a", .len = 8, .kind = FERRY_TENSOR_AVERAGE }
	};

	o.scheduler_url = FAKE_URL;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_int_eq(ferry_client_declare(NULL, d, 1), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_declare(c, NULL, 1), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_declare(c, d, 0), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_declare_specs(NULL, s, 1), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_declare_specs(c, NULL, 1), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_declare_specs(c, s, 0), FERRY_EINVAL);
	// A count no array can hold is refused before any table is sized.
	ck_assert_int_eq(ferry_client_declare(c, d, SIZE_MAX), FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_declare_specs(c, s, SIZE_MAX),
	    FERRY_EINVAL);
	// Checked before the scheduler is asked: a zero length ...
	ck_assert_int_eq(ferry_client_declare(c, d, 2), FERRY_EINVAL);
	has(c, "tensor 1");
	ferry_client_close(c);
	// ... or a name that is missing.
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	d[0].name = NULL;
	ck_assert_int_eq(ferry_client_declare(c, d, 1), FERRY_EINVAL);
	has(c, "tensor 0");
	ferry_client_close(c);
	// A declared client refuses a second table.
	c         = fake_client(NULL, NULL, lens2, 2, 1, sh2, 2);
	d[0].name = "a";
	ck_assert_int_eq(ferry_client_declare(c, d, 1), FERRY_ESTATE);
	has(c, "already declared");
	ferry_client_close(c);
}
END_TEST

// The ABI promise (docs/libferry.md §3): a struct the caller allocates
// keeps its size and layout within a MAJOR version. A field added to
// ferry_tensor_desc (as 0313ba8 once did) would make a 0.1 program's
// array of descs unreadable to the newer library.
START_TEST(test_abi_tensor_structs)
{
	ck_assert_uint_eq(offsetof(struct ferry_tensor_desc, len),
	    sizeof(const char *));
	ck_assert_uint_eq(sizeof(struct ferry_tensor_desc),
	    sizeof(const char *) + sizeof(size_t));
	ck_assert_uint_eq(offsetof(struct ferry_tensor_spec, len),
	    offsetof(struct ferry_tensor_desc, len));
	ck_assert_uint_eq(offsetof(struct ferry_tensor_spec, kind),
	    sizeof(struct ferry_tensor_desc));
}
END_TEST

START_TEST(test_buffers_and_samples)
{
	ferry_client *c = fake_client(NULL, NULL, lens2, 2, 1, sh2, 2);
	float         buf[8];
	const float  *g[2] = { buf, buf };

	ck_assert_int_eq(ferry_client_init_weights(c, NULL), FERRY_EINVAL);
	has(c, "tensor buffer array is NULL");
	ck_assert_int_eq(ferry_client_pull(c, NULL), FERRY_EINVAL);
	has(c, "weight buffer array is NULL");
	ck_assert_int_eq(ferry_client_push(c, NULL, 1), FERRY_EINVAL);
	has(c, "tensor buffer array is NULL");
	ck_assert_int_eq(ferry_client_push(c, g, 0), FERRY_EINVAL);
	has(c, "n_samples");
	ferry_client_close(c);
}
END_TEST

// Both push-pull calls share one check, in one order: the input array,
// then the weight buffers (unless a sink takes the pulls), then n_samples.
START_TEST(test_push_pull_checks)
{
	ferry_client          *c;
	float                  buf[8], *w[2] = { buf, buf };
	const float           *g[2] = { buf, buf };
	uint8_t                code[64];
	const uint8_t         *codes[2] = { code, code };
	struct ferry_pull_sink sk = { nop_piece, nop_piece, nop_check, NULL };

	c = fake_client("q8", NULL, lens2, 2, 1, sh2, 2);

	ck_assert_int_eq(ferry_client_push_pull(c, NULL, 1, w), FERRY_EINVAL);
	has(c, "tensor buffer array is NULL");
	ck_assert_int_eq(ferry_client_push_pull_encoded(c, NULL, 1, w),
	    FERRY_EINVAL);
	has(c, "tensor buffer array is NULL");
	ck_assert_int_eq(ferry_client_push_pull(c, g, 1, NULL), FERRY_EINVAL);
	has(c, "weight buffer array is NULL");
	ck_assert_int_eq(ferry_client_push_pull_encoded(c, codes, 1, NULL),
	    FERRY_EINVAL);
	has(c, "weight buffer array is NULL");
	ck_assert_int_eq(ferry_client_push_pull(c, g, 0, w), FERRY_EINVAL);
	has(c, "n_samples");
	ck_assert_int_eq(ferry_client_push_pull_encoded(c, codes, 0, w),
	    FERRY_EINVAL);
	has(c, "n_samples");
	// With a sink, NULL weight buffers pass: n_samples is next.
	ck_assert_int_eq(ferry_client_set_pull_sink(c, &sk), FERRY_OK);
	ck_assert_int_eq(ferry_client_push_pull(c, g, 0, NULL), FERRY_EINVAL);
	has(c, "n_samples");
	ck_assert_int_eq(ferry_client_push_pull_encoded(c, codes, 0, NULL),
	    FERRY_EINVAL);
	has(c, "n_samples");
	// Encoded pushes wait for the end of the warm-up.
	c->opts.warmup_steps = 1;
	ck_assert_int_eq(ferry_client_push_pull_encoded(c, codes, 1, NULL),
	    FERRY_ESTATE);
	has(c, "end of warm-up");
	ferry_client_close(c);
}
END_TEST

START_TEST(test_encoded_needs_push_codec)
{
	ferry_client  *c = fake_client(NULL, NULL, lens2, 2, 1, sh2, 2);
	float          buf[8], *w[2] = { buf, buf };
	uint8_t        code[64];
	const uint8_t *codes[2] = { code, code };

	ck_assert_int_eq(ferry_client_push_pull_encoded(c, codes, 1, w),
	    FERRY_ESTATE);
	has(c, "encoded pushes need a push codec");
	ferry_client_close(c);
}
END_TEST

// The layer-wise calls: a range inside the declared tensors, each tensor
// started once per step with the same buffers, waits only on started
// tensors, no clipping, and no other step call while a step is open (the
// started request stays in flight: nobody answers; close cancels it).
START_TEST(test_layerwise_checks)
{
	ferry_client *c = fake_client(NULL, NULL, lens2, 2, 1, sh2, 2);
	float         buf[8], *w[2] = { buf, buf };
	const float  *g[2] = { buf, buf };

	ck_assert_int_eq(ferry_client_wait(c, 0, 1), FERRY_ESTATE);
	has(c, "no layer-wise push-pull in progress");
	ck_assert_int_eq(ferry_client_push_pull_start(c, g, 1, w, 2, 1),
	    FERRY_EINVAL);
	has(c, "not within the 2 declared");
	ck_assert_int_eq(ferry_client_push_pull_start(c, g, 1, w, 1, 0),
	    FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_push_pull_start(c, NULL, 1, w, 0, 1),
	    FERRY_EINVAL);
	has(c, "tensor buffer array is NULL");
	c->opts.clip_norm = 1.0;
	ck_assert_int_eq(ferry_client_push_pull_start(c, g, 1, w, 0, 1),
	    FERRY_ESTATE);
	has(c, "cannot clip");
	c->opts.clip_norm = 0;
	ck_assert_int_eq(ferry_client_push_pull_start(c, g, 1, w, 0, 1),
	    FERRY_OK);
	ck_assert_int_eq(ferry_client_push_pull_start(c, g, 1, w, 0, 1),
	    FERRY_EINVAL);
	has(c, "already started");
	ck_assert_int_eq(ferry_client_push_pull_start(c, g, 2, w, 1, 1),
	    FERRY_EINVAL);
	has(c, "same g, w and n_samples");
	ck_assert_int_eq(ferry_client_push_pull(c, g, 1, w), FERRY_ESTATE);
	has(c, "layer-wise push-pull is in progress");
	ck_assert_int_eq(ferry_client_pull(c, w), FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_wait(c, 1, 1), FERRY_ESTATE);
	has(c, "tensor 1 was not started");
	ck_assert_int_eq(c->stats.requests, 1); // tensor 0's, in flight
	ferry_client_close(c);
}
END_TEST

Suite *
suite_ops(void)
{
	Suite *s  = suite_create("ops");
	TCase *tc = tcase_create("state");
	tcase_add_test(tc, test_before_declare);
	tcase_add_test(tc, test_declare_arguments);
	tcase_add_test(tc, test_abi_tensor_structs);
	suite_add_tcase(s, tc);
	tc = tcase_create("arguments");
	tcase_add_test(tc, test_buffers_and_samples);
	tcase_add_test(tc, test_push_pull_checks);
	tcase_add_test(tc, test_encoded_needs_push_codec);
	tcase_add_test(tc, test_layerwise_checks);
	suite_add_tcase(s, tc);
	return s;
}
