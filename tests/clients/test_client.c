// test_client.c — client.c without a job: ferry_opts_check on good and
// bogus options, ferry_strerror for every code, the one fb_ → ferry error
// translation, the default deadline, and what the accessors and
// ferry_client_open do with bad arguments.
#include <math.h>
#include <string.h>

#include "clients_tests.h"
#include "fake.h"

static struct ferry_opts
good_opts(void)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	o.scheduler_url     = FAKE_URL;
	return o;
}

// check_bad asserts that o is refused and that the reason names `word`.
static void
check_bad(const struct ferry_opts *o, const char *word)
{
	char why[256] = "";
	ck_assert_int_eq(ferry_opts_check(o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_msg(strstr(why, word) != NULL, "why '%s' lacks '%s'", why,
	    word);
}

START_TEST(test_opts_good)
{
	struct ferry_opts o = good_opts();
	char              why[64];
	strcpy(why, "untouched");
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_OK);
	ck_assert_str_eq(why, "untouched");
	ck_assert_int_eq(ferry_opts_check(&o, NULL, 0), FERRY_OK);
	o.mode       = FERRY_MODE_ASYNC;
	o.codec_push = "q4";
	o.codec_pull = "q8";
	o.bucket     = 64;
	o.rank       = 7;
	o.lr         = 999999.0;
	ck_assert_int_eq(ferry_opts_check(&o, NULL, 0), FERRY_OK);
	o.codec_push = "q8:sr"; // stochastic rounding: pushes only
	ck_assert_int_eq(ferry_opts_check(&o, NULL, 0), FERRY_OK);
	o           = good_opts();
	o.mode      = FERRY_MODE_SSP;
	o.staleness = 4;
	ck_assert_int_eq(ferry_opts_check(&o, NULL, 0), FERRY_OK);
	o             = good_opts();
	o.sync_quorum = 2;
	ck_assert_int_eq(ferry_opts_check(&o, NULL, 0), FERRY_OK);
}
END_TEST

START_TEST(test_opts_bogus)
{
	struct ferry_opts o;
	char              longurl[300];
	char              why[8];

	check_bad(NULL, "NULL");
	o               = good_opts();
	o.scheduler_url = NULL;
	check_bad(&o, "scheduler_url");
	o.scheduler_url = "";
	check_bad(&o, "scheduler_url");
	memset(longurl, 'a', 256);
	longurl[256]    = '\0';
	o.scheduler_url = longurl;
	check_bad(&o, "scheduler_url");
	longurl[255] = '\0'; // 255 bytes: the longest accepted
	ck_assert_int_eq(ferry_opts_check(&o, NULL, 0), FERRY_OK);
	o      = good_opts();
	o.rank = -2; // -1 is FERRY_RANK_ANY (test_lease.c)
	check_bad(&o, "rank");
	o    = good_opts();
	o.lr = 0;
	check_bad(&o, "lr");
	o.lr = 1e6;
	check_bad(&o, "lr");
	o.lr = NAN;
	check_bad(&o, "lr");
	o.lr = -0.1;
	check_bad(&o, "lr");
	o      = good_opts();
	o.mode = 7;
	check_bad(&o, "mode");
	// Staleness is SSP's, a quorum sync mode's.
	o           = good_opts();
	o.staleness = 1;
	check_bad(&o, "staleness needs FERRY_MODE_SSP");
	o             = good_opts();
	o.mode        = FERRY_MODE_SSP;
	o.sync_quorum = 1;
	check_bad(&o, "sync_quorum needs FERRY_MODE_SYNC");
	o            = good_opts();
	o.codec_push = "zip";
	check_bad(&o, "codec_push 'zip'");
	o            = good_opts();
	o.codec_pull = "zip";
	check_bad(&o, "codec_pull 'zip'");
	o.codec_pull = "q8:sr";
	check_bad(&o, "stochastic");
	// The reason is cut to the caller's buffer, and n == 0 writes nothing.
	o      = good_opts();
	o.rank = -2;
	ck_assert_int_eq(ferry_opts_check(&o, why, sizeof(why)), FERRY_EINVAL);
	ck_assert_uint_eq(strlen(why), sizeof(why) - 1);
	strcpy(why, "x");
	ck_assert_int_eq(ferry_opts_check(&o, why, 0), FERRY_EINVAL);
	ck_assert_str_eq(why, "x");
}
END_TEST

START_TEST(test_strerror_every_code)
{
	for (int e = 0; e < FERRY_ERR_COUNT; e++) {
		const char *s = ferry_strerror(e);
		ck_assert_ptr_nonnull(s);
		ck_assert_msg(*s != '\0' && strcmp(s, "unknown error") != 0,
		    "code %d has no text", e);
		for (int k = 0; k < e; k++) {
			ck_assert_msg(strcmp(s, ferry_strerror(k)) != 0,
			    "codes %d and %d share '%s'", k, e, s);
		}
	}
	ck_assert_str_eq(ferry_strerror(FERRY_OK), "ok");
	ck_assert_str_eq(ferry_strerror(FERRY_ECORRUPT), "checksum mismatch");
	ck_assert_str_eq(ferry_strerror(FERRY_ESINK), "the pull sink failed");
	ck_assert_str_eq(ferry_strerror(-1), "unknown error");
	ck_assert_str_eq(ferry_strerror(FERRY_ERR_COUNT), "unknown error");
	ck_assert_str_eq(ferry_strerror(1 << 30), "unknown error");
}
END_TEST

START_TEST(test_map_err)
{
	ck_assert_int_eq(ferry__map_err(FB_OK), FERRY_OK);
	ck_assert_int_eq(ferry__map_err(FB_ETIMEDOUT), FERRY_ETIMEDOUT);
	ck_assert_int_eq(ferry__map_err(FB_EREMOTE), FERRY_EREMOTE);
	ck_assert_int_eq(ferry__map_err(FB_EPROTO), FERRY_EPROTO);
	ck_assert_int_eq(ferry__map_err(FB_ENOMEM), FERRY_ENOMEM);
	// Anything else is a connection that failed.
	ck_assert_int_eq(ferry__map_err(FB_ETRANSPORT), FERRY_ECONNECT);
	ck_assert_int_eq(ferry__map_err(FB_EINVAL), FERRY_ECONNECT);
	ck_assert_int_eq(ferry__map_err(12345), FERRY_ECONNECT);
}
END_TEST

START_TEST(test_open_and_accessors)
{
	struct ferry_opts         o = good_opts();
	struct ferry_stats        st;
	ferry_client             *c = NULL;
	const struct ferry_shard *sh;
	size_t                    n;
	uint32_t                  id, bucket;

	ck_assert_int_eq(ferry_client_open(&o, NULL), FERRY_EINVAL);
	o.lr = 0;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_EINVAL);
	ck_assert_ptr_null(c);
	o = good_opts();
	ck_assert_int_eq(ferry_client_open(NULL, &c), FERRY_EINVAL);
	// Nobody listens: the dial goes on in the background.
	o.codec_push = "q8";
	o.bucket     = 32;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(ferry__timeout(c), 60000);
	c->opts.timeout_ms = 1234;
	ck_assert_uint_eq(ferry__timeout(c), 1234);
	ck_assert_str_eq(ferry_client_last_error(c), "");
	ck_assert_int_eq(ferry_client_trainers(c), 0);
	ck_assert_int_eq(ferry_client_in_warmup(c), 0);
	ck_assert_int_eq(ferry_client_shards(c, &sh, &n, &id, &bucket),
	    FERRY_ESTATE);
	ck_assert_int_eq(ferry_client_shards(c, NULL, &n, &id, &bucket),
	    FERRY_EINVAL);
	ck_assert_int_eq(ferry_client_pull_codec(c, &id, &bucket), FERRY_OK);
	ck_assert_uint_eq(id, COMP_NONE);
	memset(&st, 0xff, sizeof(st));
	ferry_client_stats(c, &st);
	ck_assert_uint_eq(st.requests, 0);
	ck_assert_uint_eq(st.version, 0);
	ferry_client_close(c);

	// Every accessor takes NULL.
	ck_assert_str_eq(ferry_client_last_error(NULL), "");
	ck_assert_int_eq(ferry_client_trainers(NULL), 0);
	ck_assert_int_eq(ferry_client_in_warmup(NULL), 0);
	ck_assert_int_eq(ferry_client_pull_codec(NULL, &id, &bucket),
	    FERRY_EINVAL);
	ferry_client_stats(NULL, &st);
	ferry_client_close(NULL);
}
END_TEST

// A fake client shows what the accessors give once declared.
START_TEST(test_declared_accessors)
{
	static const uint64_t          len[2] = { 40, 7 };
	static const struct fake_shard sh[3]  = { { 0, 0, 16, 0 },
		 { 0, 16, 24, 1 }, { 1, 0, 7, 0 } };
	ferry_client *c = fake_client("q8", "q4", len, 2, 2, sh, 3);
	const struct ferry_shard *lay;
	size_t                    n;
	uint32_t                  id, bucket;

	c->layout = fb_zalloc(3 * sizeof(*c->layout));
	ck_assert_int_eq(ferry_client_shards(c, &lay, &n, &id, &bucket),
	    FERRY_OK);
	ck_assert_ptr_eq(lay, c->layout);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(id, COMP_Q8);
	ck_assert_uint_eq(bucket, c->cpush.bucket);
	ck_assert_int_eq(ferry_client_pull_codec(c, &id, &bucket), FERRY_OK);
	ck_assert_uint_eq(id, COMP_Q4);
	ck_assert_int_eq(ferry_client_trainers(c), 2);
	c->opts.warmup_steps = 2;
	ck_assert_int_eq(ferry_client_in_warmup(c), 1);
	c->version = 2;
	ck_assert_int_eq(ferry_client_in_warmup(c), 0);
	ferry_client_close(c);
}
END_TEST

Suite *
suite_client(void)
{
	Suite *s  = suite_create("client");
	TCase *tc = tcase_create("opts");
	tcase_add_test(tc, test_opts_good);
	tcase_add_test(tc, test_opts_bogus);
	suite_add_tcase(s, tc);
	tc = tcase_create("errors");
	tcase_add_test(tc, test_strerror_every_code);
	tcase_add_test(tc, test_map_err);
	suite_add_tcase(s, tc);
	tc = tcase_create("accessors");
	tcase_add_test(tc, test_open_and_accessors);
	tcase_add_test(tc, test_declared_accessors);
	suite_add_tcase(s, tc);
	return s;
}
