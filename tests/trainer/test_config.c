// test_config.c — trainer flags: defaults, both spellings, FERRY_*
// variables under the flags, and errors that name the flag.
#include <stdlib.h>
#include <string.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"

#define ARGC(v) ((int) (sizeof(v) / sizeof((v)[0])))

// Defaults match the documented ones.
START_TEST(test_config_defaults)
{
	struct tr_config c;
	tr_config_defaults(&c);
	ck_assert_uint_eq(c.batch, 64);
	ck_assert(c.fo.lr == 0.1);
	ck_assert_int_eq(c.arch.n_layers, 3);
	ck_assert_uint_eq(c.arch.sizes[0], 784);
	ck_assert_str_eq(c.device, "cpu");
	ck_assert_int_eq(c.fo.mode, TR_MODE_SYNC);
	ck_assert_int_eq(c.blas_threads, 1);
	ck_assert_ptr_null(c.fo.scheduler_url);
	ck_assert_ptr_null(c.curve);
}
END_TEST

// Every flag parses, as "--f v" and "--f=v".
START_TEST(test_config_parse)
{
	char *argv[] = { "trainer", "--scheduler", "tcp://127.0.0.1:9",
		"--rank=3", "--data", "/d", "--layers", "10,5,2", "--batch",
		"32", "--lr=0.05", "--epochs", "4", "--seed", "99", "--mode",
		"async", "--log-interval", "0", "--codec-push", "q8",
		"--codec-pull=fp16", "--bucket", "512", "--warmup-steps", "10",
		"--max-steps", "20", "--device", "cuda:1", "--blas-threads",
		"2", "--curve", "c.csv", "--timeout-ms", "1000" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, ARGC(argv), argv, err, sizeof(err)));
	ck_assert_str_eq(c.fo.scheduler_url, "tcp://127.0.0.1:9");
	ck_assert_int_eq(c.fo.rank, 3);
	ck_assert_str_eq(c.data_dir, "/d");
	ck_assert_int_eq(c.arch.n_layers, 2);
	ck_assert_uint_eq(c.batch, 32);
	ck_assert(c.fo.lr == 0.05);
	ck_assert_int_eq(c.epochs, 4);
	ck_assert_uint_eq(c.fo.seed, 99);
	ck_assert_int_eq(c.fo.mode, TR_MODE_ASYNC);
	ck_assert_int_eq(c.log_interval, 0);
	ck_assert_str_eq(c.fo.codec_push, "q8");
	ck_assert_str_eq(c.fo.codec_pull, "fp16");
	ck_assert_uint_eq(c.fo.bucket, 512);
	ck_assert_uint_eq(c.fo.warmup_steps, 10);
	ck_assert_uint_eq(c.max_steps, 20);
	ck_assert_str_eq(c.device, "cuda:1");
	ck_assert_int_eq(c.blas_threads, 2);
	ck_assert_str_eq(c.curve, "c.csv");
	ck_assert_uint_eq(c.fo.timeout_ms, 1000);
	ck_assert_int_eq(c.help, 0);
}
END_TEST

// --help stops parsing and sets help; usage lists every flag.
START_TEST(test_config_help)
{
	char            *argv[] = { "trainer", "--help", "--bogus" };
	struct tr_config c;
	char            *text = NULL;
	size_t           len  = 0;
	FILE            *f;
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, ARGC(argv), argv, NULL, 0));
	ck_assert_int_eq(c.help, 1);
	f = open_memstream(&text, &len);
	tr_config_usage(f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "--blas-threads"));
	ck_assert_ptr_nonnull(strstr(text, "--max-steps"));
	free(text);
}
END_TEST

// The SSP, quorum and straggler flags land in their fields; each is off
// by default.
START_TEST(test_config_parse_ssp)
{
	char *argv[] = { "trainer", "--mode", "ssp", "--staleness", "4",
		"--sync-quorum=3", "--slow-ms", "12" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	ck_assert_uint_eq(c.fo.staleness, 0);
	ck_assert_uint_eq(c.fo.sync_quorum, 0);
	ck_assert_uint_eq(c.slow_ms, 0);
	PT_OK(tr_config_parse(&c, ARGC(argv), argv, err, sizeof(err)));
	ck_assert_int_eq(c.fo.mode, TR_MODE_SSP);
	ck_assert_uint_eq(c.fo.staleness, 4);
	ck_assert_uint_eq(c.fo.sync_quorum, 3);
	ck_assert_uint_eq(c.slow_ms, 12);
	tr_config_fini(&c);
}
END_TEST

// Bad flags and values fail with a message that names the flag.
START_TEST(test_config_parse_bogus)
{
	static const char *cases[][3] = {
		{ "--nope", "1", "--nope" },
		{ "--batch", "0", "--batch" },
		{ "--batch", "x", "--batch" },
		{ "--lr", "-1", "--lr" },
		{ "--lr", "abc", "--lr" },
		{ "--mode", "bsp", "--mode" },
		{ "--staleness", "-1", "--staleness" },
		{ "--slow-ms", "x", "--slow-ms" },
		{ "--device", "gpu", "--device" },
		{ "--layers", "10", "--layers" },
		{ "--rank", "-1", "--rank" },
		{ "--rank", "anyone", "--rank" },
		{ "--rank", "65536", "--rank" },
		{ "--leases", "maybe", "--leases" },
		{ "--lease-batches", "0", "--lease-batches" },
		{ "--epochs", "0", "--epochs" },
		{ "--blas-threads", "0", "--blas-threads" },
		{ "--scheduler", "", "--scheduler" },
		{ "stray", "x", "stray" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char            *argv[] = { "trainer", (char *) cases[i][0],
			           (char *) cases[i][1] };
		struct tr_config c;
		char             err[256] = "";
		tr_config_defaults(&c);
		ck_assert_msg(tr_config_parse(&c, 3, argv, err, sizeof(err)) !=
		        FB_OK,
		    "%s %s accepted", cases[i][0], cases[i][1]);
		ck_assert_msg(strstr(err, cases[i][2]) != NULL,
		    "'%s' does not name %s", err, cases[i][2]);
	}
	char            *argv[] = { "trainer", "--batch" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	PT_FAIL(tr_config_parse(&c, 2, argv, err, sizeof(err)), FB_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "missing"));
}
END_TEST

// Elastic jobs: no --rank (or --rank any) asks for the lowest free rank;
// --leases and --lease-batches land in their fields.
START_TEST(test_config_elastic)
{
	char *argv[] = { "trainer", "--rank", "any", "--leases", "on",
		"--lease-batches=4" };
	char *num[]  = { "trainer", "--rank=5", "--leases", "off" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	ck_assert_int_eq(c.fo.rank, FERRY_RANK_ANY);
	ck_assert_int_eq(c.leases, TR_LEASES_AUTO);
	ck_assert_uint_eq(c.lease_batches, 8);
	PT_OK(tr_config_parse(&c, ARGC(argv), argv, err, sizeof(err)));
	ck_assert_int_eq(c.fo.rank, FERRY_RANK_ANY);
	ck_assert_int_eq(c.leases, TR_LEASES_ON);
	ck_assert_uint_eq(c.lease_batches, 4);
	PT_OK(tr_config_parse(&c, ARGC(num), num, err, sizeof(err)));
	ck_assert_int_eq(c.fo.rank, 5);
	ck_assert_int_eq(c.leases, TR_LEASES_OFF);
	tr_config_fini(&c);
}
END_TEST

// --lr-scale-trainers scales the plain exchange's gradient: with
// --overlap-layers (or --overlap, or --model dlrm) it is refused, naming
// the flag; alone it parses.
START_TEST(test_config_lr_scale_trainers_bogus)
{
	char            *layered[] = { "trainer", "--lr-scale-trainers=4",
		           "--overlap-layers=1" };
	char            *alone[]   = { "trainer", "--lr-scale-trainers=4" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	PT_FAIL(tr_config_parse(&c, 3, layered, err, sizeof(err)), FB_EINVAL);
	ck_assert_msg(strstr(err, "--lr-scale-trainers") &&
	        strstr(err, "--overlap-layers"),
	    "'%s' does not name the flags", err);
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, 2, alone, err, sizeof(err)));
	ck_assert_uint_eq(c.lr_scale_trainers, 4);
	tr_config_fini(&c);
}
END_TEST

// --local-steps: the optimizer flags become the inner optimizer and the
// job's fields the outer one (constant, at --outer-lr), with inner_lr,
// local_steps and fragments for the servers; defaults nesterov 0.7/0.9.
START_TEST(test_config_local_steps)
{
	char *argv[]  = { "trainer", "--local-steps=8", "--optimizer=adamw",
		 "--lr=0.01", "--weight-decay=0.1", "--lr-schedule=cosine",
		 "--lr-total-steps=100", "--fragments=4",
		 "--fragment-delay=1" };
	char *outer[] = { "trainer", "--local-steps=1", "--outer-optimizer",
		"sgd", "--outer-lr=1" };
	char *plain[] = { "trainer", "--optimizer=adam", "--lr=0.2" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, ARGC(argv), argv, err, sizeof(err)));
	ck_assert_uint_eq(c.local_steps, 8);
	ck_assert_uint_eq(c.fragments, 4);
	ck_assert_uint_eq(c.fragment_delay, 1);
	ck_assert_str_eq(c.inner.optimizer, "adamw");
	ck_assert(c.inner.lr == 0.01 && c.inner.weight_decay == 0.1);
	ck_assert_str_eq(c.inner.lr_schedule, "cosine");
	ck_assert_str_eq(c.fo.optimizer, "nesterov");
	ck_assert(c.fo.lr == 0.7 && c.fo.momentum == 0.9);
	ck_assert(c.fo.weight_decay == 0 && c.fo.inner_lr == 0.01);
	ck_assert_str_eq(c.fo.lr_schedule, "constant");
	ck_assert_uint_eq(c.fo.local_steps, 8);
	ck_assert_uint_eq(c.fo.fragments, 4);
	tr_config_fini(&c);
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, ARGC(outer), outer, err, sizeof(err)));
	ck_assert_str_eq(c.fo.optimizer, "sgd");
	ck_assert(c.fo.lr == 1.0 && c.fo.inner_lr == 0.1);
	ck_assert_str_eq(c.inner.optimizer, "sgd");
	tr_config_fini(&c);
	// Without --local-steps the flags stay the servers' optimizer.
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, ARGC(plain), plain, err, sizeof(err)));
	ck_assert_str_eq(c.fo.optimizer, "adam");
	ck_assert(c.fo.lr == 0.2 && c.fo.inner_lr == 0);
	ck_assert_uint_eq(c.fo.local_steps, 0);
	tr_config_fini(&c);
}
END_TEST

// What local steps cannot run with is refused, naming the flag.
START_TEST(test_config_local_steps_bogus)
{
	static const struct {
		const char *a, *b, *c, *want;
	} cases[] = {
		{ "--local-steps=8", "--overlap=1", NULL, "--overlap 1" },
		{ "--local-steps=8", "--overlap-layers=1", NULL,
		    "--overlap-layers" },
		{ "--local-steps=8", "--lr-scale-trainers=2", NULL,
		    "--lr-scale-trainers" },
		{ "--local-steps=8", "--clip-norm=1", NULL, "--clip-norm" },
		{ "--local-steps=8", "--leases=on", NULL, "--leases on" },
		{ "--local-steps=8", "--optimizer=adagrad", NULL, "adagrad" },
		{ "--local-steps=8", "--optimizer=adam", NULL, "adam" },
		{ "--local-steps=8", "--fragments=3", NULL, "divide" },
		{ "--local-steps=8", "--fragments=2", "--mode=async",
		    "--mode sync" },
		{ "--local-steps=8", "--fragments=2", "--fragment-delay=4",
		    "--fragment-delay 4" },
		{ "--local-steps=8", "--fragment-delay=1", NULL,
		    "--fragments > 1" },
		{ "--fragments=2", NULL, NULL, "--local-steps" },
		{ "--local-steps=100000", "--batch=65536", NULL, "samples" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char            *argv[] = { "trainer", (char *) cases[i].a,
			           (char *) cases[i].b, (char *) cases[i].c };
		int              argc   = cases[i].c ? 4 : cases[i].b ? 3 : 2;
		struct tr_config c;
		char             err[256] = "";
		tr_config_defaults(&c);
		PT_FAIL(tr_config_parse(&c, argc, argv, err, sizeof(err)),
		    FB_EINVAL);
		ck_assert_msg(strstr(err, cases[i].want) != NULL,
		    "case %zu: '%s' does not name '%s'", i, err,
		    cases[i].want);
		tr_config_fini(&c);
	}
}
END_TEST

// --overlap 1 and --overlap-layers 1 are two exchanges for one step: the
// pair is refused naming both flags; either alone parses.
START_TEST(test_config_overlap_exclusive_bogus)
{
	char *both[] = { "trainer", "--overlap=1", "--overlap-layers=1" };
	char *one[]  = { "trainer", "--overlap=1" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	PT_FAIL(tr_config_parse(&c, 3, both, err, sizeof(err)), FB_EINVAL);
	ck_assert_msg(strstr(err, "--overlap 1") &&
	        strstr(err, "--overlap-layers"),
	    "'%s' does not name both flags", err);
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, 2, one, err, sizeof(err)));
	ck_assert_int_eq(c.overlap, 1);
	tr_config_fini(&c);
}
END_TEST

// The CTR flags (--model dlrm) land in their fields; their defaults are
// the documented ones and leave the MLP as the model.
START_TEST(test_config_dlrm)
{
	char            *argv[] = { "trainer", "--model", "dlrm", "--data",
		           "/nonexistent/train.tsv", "--test-data=/nonexistent/test.bin",
		           "--emb-dim", "8", "--bottom", "32,8", "--top=16,1",
		           "--interaction", "cat", "--table-optimizer", "ftrl",
		           "--table-lr", "0.02", "--table-init-scale=0.01",
		           "--table-codec-push", "fp16", "--table-codec-pull=q8",
		           "--admit-count", "2", "--eval-rows", "5000" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	ck_assert_int_eq(c.model, TR_MODEL_MLP);
	ck_assert_str_eq(c.test_data, "");
	ck_assert_uint_eq(c.emb_dim, 16);
	ck_assert_str_eq(c.bottom, "64,16");
	ck_assert_str_eq(c.top, "64,1");
	ck_assert_str_eq(c.interaction, "dot");
	ck_assert_str_eq(c.table_optimizer, "adagrad");
	ck_assert(c.table_lr == 0 && c.table_init_scale == 0.05);
	ck_assert_str_eq(c.table_codec_push, "none");
	ck_assert_str_eq(c.table_codec_pull, "none");
	ck_assert_uint_eq(c.admit_count, 0);
	ck_assert_uint_eq(c.eval_rows, 0);
	ck_assert_int_eq(c.epochs, 1);
	PT_OK(tr_config_parse(&c, ARGC(argv), argv, err, sizeof(err)));
	ck_assert_int_eq(c.model, TR_MODEL_DLRM);
	ck_assert_str_eq(c.data_dir, "/nonexistent/train.tsv");
	ck_assert_str_eq(c.test_data, "/nonexistent/test.bin");
	ck_assert_uint_eq(c.emb_dim, 8);
	ck_assert_str_eq(c.bottom, "32,8");
	ck_assert_str_eq(c.top, "16,1");
	ck_assert_str_eq(c.interaction, "cat");
	ck_assert_str_eq(c.table_optimizer, "ftrl");
	ck_assert(c.table_lr == 0.02 && c.table_init_scale == 0.01);
	ck_assert_str_eq(c.table_codec_push, "fp16");
	ck_assert_str_eq(c.table_codec_pull, "q8");
	ck_assert_uint_eq(c.admit_count, 2);
	ck_assert_uint_eq(c.eval_rows, 5000);
	tr_config_fini(&c);
}
END_TEST

// --model dlrm refuses what it cannot train, naming the flag: no test
// file, a directory (the MLP's --data default) for the training file,
// widths that make no model, the MLP loop's overlap and a GPU; a bad
// choice of a CTR flag is refused whatever the model.
START_TEST(test_config_dlrm_bogus)
{
	static const char *cases[][4] = {
		{ "--data=/nonexistent/t.tsv", "--emb-dim=16", "--eval-rows=0",
		    "--test-data" },
		{ "--data=/tmp", "--test-data=/x", "--eval-rows=0",
		    "directory" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x", "--emb-dim=8",
		    "--bottom" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x", "--top=8,2",
		    "--top" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x", "--overlap=1",
		    "--overlap" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x",
		    "--device=cuda", "--device" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x",
		    "--interaction=sum", "--interaction" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x",
		    "--table-optimizer=momentum", "--table-optimizer" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x",
		    "--table-codec-pull=q4", "--table-codec-pull" },
		{ "--data=/nonexistent/t.tsv", "--test-data=/x", "--emb-dim=0",
		    "--emb-dim" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char            *argv[] = { "trainer", "--model=dlrm",
			           (char *) cases[i][0], (char *) cases[i][1],
			           (char *) cases[i][2] };
		struct tr_config c;
		char             err[256] = "";
		tr_config_defaults(&c);
		ck_assert_msg(tr_config_parse(&c, ARGC(argv), argv, err,
		                  sizeof(err)) != FB_OK,
		    "case %zu (%s) accepted", i, cases[i][2]);
		ck_assert_msg(strstr(err, cases[i][3]) != NULL,
		    "case %zu: '%s' does not name %s", i, err, cases[i][3]);
		tr_config_fini(&c);
	}
	// The MLP ignores the CTR model's widths.
	char            *mlp[] = { "trainer", "--emb-dim=8", "--top=8,2" };
	struct tr_config c;
	char             err[256] = "";
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, ARGC(mlp), mlp, err, sizeof(err)));
	tr_config_fini(&c);
}
END_TEST

// FERRY_<NAME> variables set options under the flags; tr_config_defaults
// ignores them, and options set by neither keep the caller's values.
START_TEST(test_config_env)
{
	char            *argv[] = { "trainer", "--batch=16" };
	struct tr_config c;
	char             err[256] = "";
	setenv("FERRY_BATCH", "32", 1);
	setenv("FERRY_CODEC_PUSH", "q8", 1);
	setenv("FERRY_MODE", "async", 1);
	tr_config_defaults(&c);
	ck_assert_uint_eq(c.batch, 64);
	ck_assert_str_eq(c.fo.codec_push, "none");
	c.epochs = 7;
	PT_OK(tr_config_parse(&c, ARGC(argv), argv, err, sizeof(err)));
	ck_assert_uint_eq(c.batch, 16);
	ck_assert_str_eq(c.fo.codec_push, "q8");
	ck_assert_int_eq(c.fo.mode, TR_MODE_ASYNC);
	ck_assert_int_eq(c.epochs, 7);
	setenv("FERRY_DEVICE", "gpu", 1);
	PT_FAIL(tr_config_parse(&c, 1, argv, err, sizeof(err)), FB_EINVAL);
	ck_assert_msg(strstr(err, "--device") != NULL, "%s", err);
	unsetenv("FERRY_DEVICE");
	setenv("FERRY_BATCH", "0", 1);
	PT_FAIL(tr_config_parse(&c, 1, argv, err, sizeof(err)), FB_ERANGE);
	ck_assert_msg(strstr(err, "FERRY_BATCH") != NULL, "%s", err);
	unsetenv("FERRY_BATCH");
	unsetenv("FERRY_CODEC_PUSH");
	unsetenv("FERRY_MODE");
}
END_TEST

Suite *
suite_config(void)
{
	Suite *s  = suite_create("config");
	TCase *tc = tcase_create("flags");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_config_defaults);
	tcase_add_test(tc, test_config_parse);
	tcase_add_test(tc, test_config_parse_ssp);
	tcase_add_test(tc, test_config_help);
	tcase_add_test(tc, test_config_parse_bogus);
	tcase_add_test(tc, test_config_env);
	tcase_add_test(tc, test_config_overlap_exclusive_bogus);
	tcase_add_test(tc, test_config_lr_scale_trainers_bogus);
	tcase_add_test(tc, test_config_local_steps);
	tcase_add_test(tc, test_config_local_steps_bogus);
	tcase_add_test(tc, test_config_dlrm);
	tcase_add_test(tc, test_config_elastic);
	tcase_add_test(tc, test_config_dlrm_bogus);
	suite_add_tcase(s, tc);
	return s;
}
