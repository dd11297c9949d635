// test_train.c — end to end on Fashion-MNIST with real processes: the
// data-parallel identity (sync, no compression, k trainers == one process
// on the union of their minibatches) and accuracy after one epoch.
//
// The data set is read from $FERRY_DATA_DIR when set, else from FASHION_DIR
// (the dataset-fashion-mnist package's path, set in CMakeLists.txt); the
// trainers get the same directory with --data. Every test here needs it, so
// without it main.c skips the whole executable (exit 77, which ctest
// reports as skipped): FERRY_DATA_DIR=/nonexistent ctest -R integration.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "integration_tests.h"
#include "pt.h"
#include "tr/tr.h"

#define SEED "7"
#define STEPS 20

const char *
it_data_dir(void)
{
	const char *d = getenv("FERRY_DATA_DIR");
	return d != NULL && d[0] != '\0' ? d : FASHION_DIR;
}

int
it_have_data(void)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz",
	    it_data_dir());
	if (access(path, R_OK) == 0) {
		return 1;
	}
	snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte",
	    it_data_dir());
	return access(path, R_OK) == 0;
}

// Two trainers, 2 servers, 20 sync steps without compression: the final
// weights equal one process taking SGD steps on the union of the two
// ranks' step-k minibatches (relative L2 error <= 1e-5).
START_TEST(test_train_sync_equals_single_process)
{
	struct lc              c;
	struct tr_arch         a;
	struct tr_dataset      train, test;
	struct tr_partition    p[2];
	struct tr_params       w, g, got;
	struct tr_backend     *be = NULL;
	struct tr_backend_opts bo = TR_BACKEND_OPTS_INIT;
	char                   err[256], path[300];
	uint32_t               idx[128];
	const uint32_t        *bi;
	double                 loss;

	lc_start(&c, 2, 2, NULL);
	for (int r = 0; r < 2; r++) {
		char wo[320], stf[320], data[520];
		snprintf(wo, sizeof(wo), "--weights-out=%s/w%d.bin", c.dir, r);
		snprintf(stf, sizeof(stf), "--step-times=%s/st%d.csv", c.dir,
		    r);
		snprintf(data, sizeof(data), "--data=%s", it_data_dir());
		const char *flags[] = { "--seed=" SEED, "--max-steps=20",
			"--log-interval=0", "--batch=64", "--lr=0.1", wo, stf,
			data, NULL };
		lc_trainer(&c, r, flags);
	}
	int ok = lc_wait_trainers(&c, 120);
	lc_stop(&c);
	ck_assert_msg(ok == 2, "trainers failed; logs in %s", c.dir);

	// --step-times: a header and one row per step, in order, with times.
	snprintf(path, sizeof(path), "%s/st1.csv", c.dir);
	FILE *stf = fopen(path, "r");
	ck_assert_msg(stf != NULL, "no %s", path);
	char line[128];
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), stf));
	ck_assert_str_eq(line, "step,compute_ms,push_pull_ms\n");
	for (unsigned k = 0; k < STEPS; k++) {
		unsigned step;
		double   cm, pm;
		ck_assert_int_eq(fscanf(stf, "%u,%lf,%lf", &step, &cm, &pm),
		    3);
		ck_assert_uint_eq(step, k);
		ck_assert(cm > 0 && pm > 0);
	}
	ck_assert_int_eq(fscanf(stf, "%127s", line), EOF);
	fclose(stf);

	// The single-process reference.
	PT_OK(tr_arch_parse("784,256,128,10", &a, err, sizeof(err)));
	PT_OK(
	    tr_data_load(it_data_dir(), 10, &train, &test, err, sizeof(err)));
	PT_OK(tr_params_init(&w, &a));
	PT_OK(tr_params_init(&g, &a));
	PT_OK(tr_params_init(&got, &a));
	tr_params_randomize(&w, 7);
	bo.max_batch = 128;
	PT_OK(tr_backend_alloc("cpu", &a, &bo, &be, err, sizeof(err)));
	for (int r = 0; r < 2; r++) {
		PT_OK(tr_partition_init(&p[r], train.n, r, 2, 7));
	}
	for (size_t k = 0; k < STEPS; k++) {
		for (int r = 0; r < 2; r++) {
			PT_OK(tr_partition_batch(&p[r], 0, k, 64, &bi));
			memcpy(idx + 64 * r, bi, 64 * sizeof(uint32_t));
		}
		PT_OK(tr_backend_set_weights(be, (const float *const *) w.t));
		PT_OK(tr_backend_grad(be, &train, idx, 128, g.t, &loss));
		tr_params_sgd(&w, &g, 0.1, 128);
	}
	struct tr_params init;
	PT_OK(tr_params_init(&init, &a));
	tr_params_randomize(&init, 7);
	for (int r = 0; r < 2; r++) {
		double num = 0, den = 0, moved = 0;
		FILE  *f;
		snprintf(path, sizeof(path), "%s/w%d.bin", c.dir, r);
		ck_assert_ptr_nonnull(f = fopen(path, "rb"));
		// The file holds the tensors back to back, in table order.
		for (size_t t = 0; t < got.n_tensors; t++) {
			ck_assert_uint_eq(
			    fread(got.t[t], sizeof(float), got.len[t], f),
			    got.len[t]);
			for (size_t i = 0; i < got.len[t]; i++) {
				double d = (double) got.t[t][i] - w.t[t][i];
				num += d * d;
				den += (double) w.t[t][i] * w.t[t][i];
				d = (double) w.t[t][i] - init.t[t][i];
				moved += d * d;
			}
		}
		ck_assert_int_eq(fgetc(f), EOF);
		fclose(f);
		// The weights did move (the check is not vacuous) ...
		ck_assert_msg(sqrt(moved / den) > 1e-3,
		    "no training happened");
		// ... and match the single process.
		ck_assert_msg(sqrt(num / den) <= 1e-5,
		    "rank %d: relative error %.3g > 1e-5", r, sqrt(num / den));
	}
	tr_params_fini(&init);
	tr_backend_free(be);
	tr_partition_fini(&p[0]);
	tr_partition_fini(&p[1]);
	tr_params_fini(&w);
	tr_params_fini(&g);
	tr_params_fini(&got);
	tr_dataset_fini(&train);
	tr_dataset_fini(&test);
}
END_TEST

// run_epoch trains 2 trainers x 2 servers for one epoch with extra flags
// and returns rank 0's test accuracy.
static double
it_run_epoch(const char *codec_push, const char *codec_pull)
{
	return it_run_epoch_with(codec_push, codec_pull, NULL);
}

double
it_run_epoch_with(const char *codec_push, const char *codec_pull,
    const char *extra)
{
	struct lc c;
	char      cp[64], cl[64], data[520], out[300];
	snprintf(cp, sizeof(cp), "--codec-push=%s", codec_push);
	snprintf(cl, sizeof(cl), "--codec-pull=%s", codec_pull);
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 2, NULL);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--epochs=1", "--log-interval=0",
			"--seed=1", cp, cl, data, extra, NULL };
		lc_trainer(&c, r, flags);
	}
	int ok = lc_wait_trainers(&c, 240);
	lc_stop(&c);
	ck_assert_msg(ok == 2, "trainers failed; logs in %s", c.dir);
	return lc_summary_value(lc_path(&c, "trainer-0.out", out, sizeof(out)),
	    "test_acc");
}

// run_weights runs 2 trainers on 2 servers for STEPS sync steps, the
// scheduler and servers with the extra flags sflags, the trainers with
// tflags (NULL-terminated, at most 4; may be NULL), and reads rank 0's
// final weights into buf (size n); returns their size. *warned says
// whether the scheduler warned at start that the job is open.
static size_t
run_weights(const char **sflags, const char **tflags, char *buf, size_t n,
    int *warned)
{
	struct lc c;
	char      path[300];

	lc_start(&c, 2, 2, sflags);
	for (int r = 0; r < 2; r++) {
		char wo[320], data[520];
		snprintf(wo, sizeof(wo), "--weights-out=%s/w%d.bin", c.dir, r);
		snprintf(data, sizeof(data), "--data=%s", it_data_dir());
		const char *flags[16] = { "--seed=" SEED, "--max-steps=20",
			"--log-interval=0", "--batch=64", "--lr=0.1", wo,
			data };
		for (int i = 0; tflags != NULL && tflags[i] != NULL && i < 4;
		     i++) {
			flags[7 + i] = tflags[i];
		}
		lc_trainer(&c, r, flags);
	}
	int ok = lc_wait_trainers(&c, 120);
	lc_stop(&c);
	ck_assert_msg(ok == 2, "trainers failed; logs in %s", c.dir);
	FILE *f = fopen(lc_path(&c, "w0.bin", path, sizeof(path)), "rb");
	ck_assert_msg(f != NULL, "no %s", path);
	size_t got = fread(buf, 1, n, f);
	fclose(f);
	char line[512];
	*warned = 0;
	f       = fopen(lc_path(&c, "scheduler.log", path, sizeof(path)), "r");
	ck_assert_msg(f != NULL, "no %s", path);
	while (fgets(line, sizeof(line), f) != NULL) {
		*warned |= strstr(line, "no --secret-file") != NULL;
	}
	fclose(f);
	return got;
}

// A job whose every request and reply is signed (--secret-file) trains
// to the same weights, bit for bit, as the same job in the clear, which
// alone gets the start-up warning that it is open to its network.
START_TEST(test_train_signed_equals_plain)
{
	static char plain[1 << 20], signed_[1 << 20];
	char        key[64] = "/tmp/ferry-key-XXXXXX", sf[96];
	int         fd      = mkstemp(key);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "integration test key 0123456789", 31), 31);
	close(fd);
	snprintf(sf, sizeof(sf), "--secret-file=%s", key);
	const char *flags[] = { sf, NULL };
	int         open_warned, signed_warned;
	size_t n = run_weights(NULL, NULL, plain, sizeof(plain), &open_warned);
	size_t m = run_weights(flags, flags, signed_, sizeof(signed_),
	    &signed_warned);
	unlink(key);
	ck_assert_msg(open_warned, "no warning that the plain job is open");
	ck_assert_msg(!signed_warned, "the signed job warned it is open");
	ck_assert_uint_gt(n, 0);
	ck_assert_uint_eq(n, m);
	ck_assert_msg(memcmp(plain, signed_, n) == 0,
	    "signed job's weights differ from the plain job's");
}
END_TEST

// --lr-scale-trainers N scales each push by the live trainers over N:
// two trainers at --lr 0.05 with N = 1 (each gradient doubled) train to
// the same weights, bit for bit, as at --lr 0.1 unscaled (doubling is
// exact in floats, and so is halving the step's lr / samples).
START_TEST(test_train_lr_scale_trainers)
{
	static char plain[1 << 20], scaled[1 << 20];
	const char *flags[] = { "--lr=0.05", "--lr-scale-trainers=1", NULL };
	int         warned;
	size_t      n = run_weights(NULL, NULL, plain, sizeof(plain), &warned);
	size_t m = run_weights(NULL, flags, scaled, sizeof(scaled), &warned);
	ck_assert_uint_gt(n, 0);
	ck_assert_uint_eq(n, m);
	ck_assert_msg(memcmp(plain, scaled, n) == 0,
	    "--lr 0.05 scaled by 2/1 differs from --lr 0.1");
}
END_TEST

// Layer-wise push-pulls (--overlap-layers 1: each layer pushed as
// backward makes it, requests of several layers in flight at once) train
// a sync job to the same weights, bit for bit, as whole-model push-pulls:
// in fp32 and with q4 pushes (error feedback per tensor) and q8 pulls.
START_TEST(test_train_layerwise_equals_whole)
{
	static char        whole[1 << 20], layered[1 << 20];
	static const char *codecs[][3] = {
		{ "--codec-push=none", "--codec-pull=none", NULL },
		{ "--codec-push=q4", "--codec-pull=q8", NULL },
	};
	for (size_t k = 0; k < 2; k++) {
		const char *lw[] = { codecs[k][0], codecs[k][1],
			"--overlap-layers=1", NULL };
		int         warned;
		size_t n = run_weights(NULL, codecs[k], whole, sizeof(whole),
		    &warned);
		size_t m = run_weights(NULL, lw, layered, sizeof(layered),
		    &warned);
		ck_assert_uint_gt(n, 0);
		ck_assert_uint_eq(n, m);
		ck_assert_msg(memcmp(whole, layered, n) == 0,
		    "%s/%s: layer-wise weights differ from whole push-pulls",
		    codecs[k][0], codecs[k][1]);
	}
}
END_TEST

// A job over mutual TLS (certificates of a throw-away CA made with
// openssl at test time) trains to the same weights, bit for bit, as the
// same job in the clear, and its scheduler listens on tls+tcp://.
START_TEST(test_train_tls_equals_plain)
{
	static char plain[1 << 20], tls[1 << 20];
	char        dir[64] = "/tmp/ferry-it-tls-XXXXXX", cmd[512];
	char        sc[128], sk[128], tc[128], tk[128], ca[128];

	if (system("command -v openssl >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test_train_tls_equals_plain: no openssl\n");
		return;
	}
	ck_assert_ptr_nonnull(mkdtemp(dir));
	// One certificate shared by the scheduler and the servers (a CN
	// naming no member, as deploy/k8s mounts): it proves membership,
	// and a scheduler with a server's certificate would be refused.
	snprintf(cmd, sizeof(cmd), "bash %s %s member trainer", TLS_CERTS_SH,
	    dir);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	snprintf(sc, sizeof(sc), "--tls-cert=%s/member.pem", dir);
	snprintf(sk, sizeof(sk), "--tls-key=%s/member.key", dir);
	snprintf(tc, sizeof(tc), "--tls-cert=%s/trainer.pem", dir);
	snprintf(tk, sizeof(tk), "--tls-key=%s/trainer.key", dir);
	snprintf(ca, sizeof(ca), "--tls-ca=%s/ca.pem", dir);
	const char *sflags[] = { sc, sk, ca, NULL };
	const char *tflags[] = { tc, tk, ca, NULL };
	int         w1, w2;
	size_t      n = run_weights(NULL, NULL, plain, sizeof(plain), &w1);
	size_t      m = run_weights(sflags, tflags, tls, sizeof(tls), &w2);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_msg(w1 && !w2, "open-job warning: plain %d, tls %d", w1, w2);
	ck_assert_uint_gt(n, 0);
	ck_assert_uint_eq(n, m);
	ck_assert_msg(memcmp(plain, tls, n) == 0,
	    "the TLS job's weights differ from the plain job's");
}
END_TEST

// One epoch with the defaults reaches >= 80% test accuracy.
START_TEST(test_train_one_epoch_accuracy)
{
	double acc = it_run_epoch("none", "none");
	ck_assert_msg(acc >= 0.80, "test accuracy %.4f < 0.80", acc);
}
END_TEST

// One epoch with q4 pushes and q8 reference-delta pulls (AQ-SGD style)
// still reaches >= 80% and stays within 1 point of fp32 at one epoch.
START_TEST(test_train_one_epoch_q4_q8)
{
	double fp32 = it_run_epoch("none", "none");
	double q    = it_run_epoch("q4", "q8");
	ck_assert_msg(q >= 0.80, "q4/q8 test accuracy %.4f < 0.80", q);
	ck_assert_msg(q >= fp32 - 0.01, "q4/q8 %.4f vs fp32 %.4f", q, fp32);
}
END_TEST

// run_straggler trains `trainers` trainers x 1 server for 30 steps of a
// small MLP with the job flags `mode` (NULL-terminated), the last rank
// slowed by --slow-ms=20, and leaves the outputs in c->dir.
static void
run_straggler(struct lc *c, int trainers, const char **mode)
{
	char data[520];
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(c, trainers, 1, NULL);
	for (int r = 0; r < trainers; r++) {
		const char *flags[16] = { "--max-steps=30", "--log-interval=0",
			"--layers=784,32,10", "--seed=1", data,
			r == trainers - 1 ? "--slow-ms=20" : "--slow-ms=0" };
		size_t      n         = 6;
		for (size_t i = 0; mode[i] != NULL && n < 15; i++) {
			flags[n++] = mode[i];
		}
		flags[n] = NULL;
		lc_trainer(c, r, flags);
	}
	int ok = lc_wait_trainers(c, 240);
	lc_stop(c);
	ck_assert_msg(ok == trainers, "trainers failed; logs in %s", c->dir);
}

// The trainer's summary counts what the job did: with --sync-quorum 2 of
// 3 the slowed rank's late pushes are dropped (and counted), sync reads
// are never stale; in ssp mode the fast rank reads ahead of the slow one
// by at most --staleness clocks, and does run ahead.
START_TEST(test_train_straggler_summaries)
{
	struct lc   c;
	char        out[300];
	const char *quorum[] = { "--sync-quorum=2", NULL };
	const char *ssp[]    = { "--mode=ssp", "--staleness=2", NULL };

	run_straggler(&c, 3, quorum);
	lc_path(&c, "trainer-2.out", out, sizeof(out));
	ck_assert_msg(lc_summary_value(out, "dropped_pushes") >= 1,
	    "the slowed rank had no push dropped; logs in %s", c.dir);
	ck_assert(lc_summary_value(out, "staleness_max") == 0);
	ck_assert(lc_summary_value(out, "version") == 30);

	run_straggler(&c, 2, ssp);
	lc_path(&c, "trainer-0.out", out, sizeof(out));
	double smax = lc_summary_value(out, "staleness_max");
	ck_assert_msg(smax >= 1 && smax <= 2, "staleness_max %g not in 1..2",
	    smax);
	ck_assert(lc_summary_value(out, "staleness_mean") > 0);
	ck_assert(lc_summary_value(out, "dropped_pushes") == 0);
}
END_TEST

// Seeded version 0: the MLP declares its initial weights by a seeded
// rule, so rank 0 offers nothing and no rank's first pull carries the
// weights. Two steps with q8 both ways move about a quarter of the model
// (235146 floats) per step each way; an offer, or a full pull of version
// 0, alone would be the whole model.
START_TEST(test_train_seeded_v0_bytes)
{
	struct lc    c;
	char         data[520], out[300];
	const double model = 235146.0 * 4;
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 2, NULL);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--max-steps=2", "--log-interval=0",
			"--seed=1", "--codec-push=q8", "--codec-pull=q8", data,
			NULL };
		lc_trainer(&c, r, flags);
	}
	int ok = lc_wait_trainers(&c, 120);
	lc_stop(&c);
	ck_assert_msg(ok == 2, "trainers failed; logs in %s", c.dir);
	for (int r = 0; r < 2; r++) {
		char name[32];
		snprintf(name, sizeof(name), "trainer-%d.out", r);
		lc_path(&c, name, out, sizeof(out));
		double pushed = lc_summary_value(out, "bytes_pushed");
		double pulled = lc_summary_value(out, "bytes_pulled");
		ck_assert_msg(pushed > 0 && pushed < model && pulled > 0 &&
		        pulled < model,
		    "rank %d: pushed %.0f, pulled %.0f bytes; the model is "
		    "%.0f (logs in %s)",
		    r, pushed, pulled, model, c.dir);
	}
}
END_TEST

// The servers' optimizer in a real job: two trainer processes, two
// servers, adam with a cosine schedule after warm-up, clipping and q8
// pushes, one epoch. It trains (>= 80%), and rank 0's last progress line
// shows the schedule's final lr (the cosine ends at --lr-min by step 400
// of the epoch's 468).
START_TEST(test_train_one_epoch_adam_schedule)
{
	struct lc c;
	char      data[520], out[300], line[512], last[512] = "";
	FILE     *f;
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 2, NULL);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--epochs=1", "--log-interval=0",
			"--seed=1", "--optimizer=adam", "--lr=0.001",
			"--lr-schedule=cosine", "--lr-warmup=50",
			"--lr-min=0.0001", "--lr-total-steps=400",
			"--clip-norm=5", "--codec-push=q8", data, NULL };
		lc_trainer(&c, r, flags);
	}
	int ok = lc_wait_trainers(&c, 240);
	lc_stop(&c);
	ck_assert_msg(ok == 2, "trainers failed; logs in %s", c.dir);
	lc_path(&c, "trainer-0.out", out, sizeof(out));
	double acc = lc_summary_value(out, "test_acc");
	ck_assert_msg(acc >= 0.80, "adam test accuracy %.4f < 0.80", acc);
	ck_assert_ptr_nonnull(f = fopen(out, "r"));
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "step ", 5) == 0) {
			snprintf(last, sizeof(last), "%s", line);
		}
	}
	fclose(f);
	ck_assert_msg(strstr(last, "| lr 0.0001 |") != NULL,
	    "last progress line: %s", last);
}
END_TEST

// run_auto trains one epoch as it_run_epoch with codec "auto" both ways
// and --link-budget budget, and checks every trainer's summary: each of
// its links ("links" of the JSON line) uses push codec push and pull
// codec pull. Returns rank 0's test accuracy.
static double
run_auto(const char *budget, const char *push, const char *pull)
{
	struct lc c;
	char      lb[64], data[520], out[300], line[8192], want[128];
	snprintf(lb, sizeof(lb), "--link-budget=%s", budget);
	snprintf(data, sizeof(data), "--data=%s", it_data_dir());
	lc_start(&c, 2, 2, NULL);
	for (int r = 0; r < 2; r++) {
		const char *flags[] = { "--epochs=1", "--log-interval=0",
			"--seed=1", "--codec-push=auto", "--codec-pull=auto",
			lb, data, NULL };
		lc_trainer(&c, r, flags);
	}
	int ok = lc_wait_trainers(&c, 240);
	lc_stop(&c);
	ck_assert_msg(ok == 2, "trainers failed; logs in %s", c.dir);
	snprintf(want, sizeof(want),
	    "\"codec_push\": \"%s\", \"codec_pull\": \"%s\"", push, pull);
	for (int r = 0; r < 2; r++) {
		char  name[32];
		FILE *f;
		int   links = 0;
		snprintf(name, sizeof(name), "trainer-%d.out", r);
		lc_path(&c, name, out, sizeof(out));
		ck_assert_ptr_nonnull(f = fopen(out, "r"));
		while (fgets(line, sizeof(line), f) != NULL) {
			char *s = strstr(line, "{\"summary\"");
			for (char *l = s ? strstr(s, "{\"server\"") : NULL;
			     l != NULL; l = strstr(l + 1, "{\"server\"")) {
				ck_assert_msg(strstr(l, want) ==
				        l + strcspn(l, ",") + 2,
				    "rank %d link %d: want %s in %s", r, links,
				    want, l);
				links++;
			}
		}
		fclose(f);
		ck_assert_msg(links == 2, "rank %d: %d links in its summary",
		    r, links);
	}
	return lc_summary_value(lc_path(&c, "trainer-0.out", out, sizeof(out)),
	    "test_acc");
}

// Codec "auto" on unshaped loopback: with a budget every link fits, each
// picks the least lossy codecs (fp32 both ways) and trains; with a budget
// nothing fits, each picks the most compressed rungs (the top-1% push and
// the shared reference's deltas), which still trains to >= 80% — the
// servers decode each ref's own codec and the pulls resync from the
// weights to the reference when the choice moves there.
START_TEST(test_train_one_epoch_auto)
{
	double acc = run_auto("1000", "none", "none");
	ck_assert_msg(acc >= 0.80, "auto (fp32) test accuracy %.4f < 0.80",
	    acc);
	acc = run_auto("0.001", "topk:0.01+q8", "topk:0.02+q8");
	ck_assert_msg(acc >= 0.80, "auto (top-k) test accuracy %.4f < 0.80",
	    acc);
}
END_TEST

// One epoch with top-1% q8 pushes (Elias-Fano indices, error feedback) and
// top-5% q8 reference-delta pulls (EF21-P), over 100x fewer push bytes,
// still reaches >= 80% and stays within 1 point of fp32 (docs/algorithms.md,
// sparse composites).
START_TEST(test_train_one_epoch_topk_q8)
{
	double fp32 = it_run_epoch("none", "none");
	double q    = it_run_epoch("topk:0.01+q8", "topk:0.05+q8");
	ck_assert_msg(q >= 0.80, "topk+q8 test accuracy %.4f < 0.80", q);
	ck_assert_msg(q >= fp32 - 0.01, "topk+q8 %.4f vs fp32 %.4f", q, fp32);
}
END_TEST

Suite *
suite_train(void)
{
	Suite *s  = suite_create("train");
	TCase *tc = tcase_create("train");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_train_sync_equals_single_process);
	tcase_add_test(tc, test_train_one_epoch_accuracy);
	tcase_add_test(tc, test_train_one_epoch_q4_q8);
	tcase_add_test(tc, test_train_straggler_summaries);
	tcase_add_test(tc, test_train_seeded_v0_bytes);
	tcase_add_test(tc, test_train_one_epoch_adam_schedule);
	tcase_add_test(tc, test_train_one_epoch_topk_q8);
	suite_add_tcase(s, tc);
	// Its own case: `CK_RUN_CASE=auto` runs it alone.
	TCase *ta = tcase_create("auto");
	tcase_set_timeout(ta, 300);
	tcase_add_test(ta, test_train_one_epoch_auto);
	suite_add_tcase(s, ta);
	// Their own case, so that `CK_RUN_CASE=signed` runs them alone
	// (signed requests, TLS and layer-wise, each against a plain job).
	TCase *ts = tcase_create("signed");
	tcase_set_timeout(ts, 300);
	tcase_add_test(ts, test_train_signed_equals_plain);
	tcase_add_test(ts, test_train_lr_scale_trainers);
	tcase_add_test(ts, test_train_layerwise_equals_whole);
	tcase_add_test(ts, test_train_tls_equals_plain);
	suite_add_tcase(s, ts);
	return s;
}
