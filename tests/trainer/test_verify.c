// test_verify.c — the spot-check verifier's pieces (verify_group.c): kept
// pushes gathered shard by shard from several servers, the batch a claim
// names being the one the trainer's plain loop took, and a trainer's step
// recomputed by another backend bit for bit (a changed element caught).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pt.h"
#include "tr_impl.h"
#include "trainer_tests.h"
#include "verify.h"

#define LAYERS "12,8,3"
#define N_SAMPLES 240
#define TRAINERS 3
#define BATCH 8
#define SEED 7

// cut_shards cuts the model of a into shards of at most max floats per
// tensor, as the scheduler's map does; returns how many (<= cap).
static size_t
cut_shards(const struct tr_params *p, size_t max, struct ferry_shard *sh,
    size_t cap)
{
	size_t n = 0;
	for (size_t t = 0; t < p->n_tensors; t++) {
		for (size_t o = 0; o < p->len[t]; o += max) {
			ck_assert_uint_lt(n, cap);
			size_t len = p->len[t] - o < max ? p->len[t] - o : max;
			sh[n++]    = (struct ferry_shard) {
				   .tensor     = (uint32_t) t,
				   .offset     = o,
				   .len        = len,
				   .code_bytes = len * 4
			};
		}
	}
	return n;
}

// record makes shard i's audit record of (rank, version) from w and p.
static struct ferry_audit_record
record(const struct ferry_shard *sh, uint32_t i, uint32_t rank,
    uint64_t version, const struct tr_params *w, const struct tr_params *p)
{
	const struct ferry_shard *s = &sh[i];
	return (struct ferry_audit_record) { .rank = rank,
		.version                           = version,
		.data_step                         = version + 1,
		.shard                             = i,
		.len                               = s->len,
		.n_samples                         = BATCH,
		.reason                            = 1,
		.server                            = i % 2,
		.weights = w->t[s->tensor] + s->offset,
		.push    = p->t[s->tensor] + s->offset };
}

// A push's records complete its group only with the last shard, in any
// order and interleaved with another push's; a repeated shard is skipped;
// the weights and the push come out whole.
START_TEST(test_vgroups_assemble)
{
	struct tr_arch     a;
	struct tr_params   w, p;
	struct ferry_shard sh[64];
	struct tr__vgroups gs;
	PT_OK(tr_arch_parse(LAYERS, &a, NULL, 0));
	PT_OK(tr_params_init(&w, &a));
	PT_OK(tr_params_init(&p, &a));
	tr_params_randomize(&w, 1);
	tr_params_randomize(&p, 2);
	size_t ns = cut_shards(&w, 20, sh, 64);
	ck_assert_uint_gt(ns, 3);
	PT_OK(tr__vgroups_init(&gs, &a, sh, ns, 4));
	struct tr__vgroup *done = NULL;
	// Shards in reverse order for (1, 5), interleaved with (2, 5).
	for (size_t k = 0; k < ns; k++) {
		uint32_t                  i = (uint32_t) (ns - 1 - k);
		struct ferry_audit_record r = record(sh, i, 1, 5, &w, &p);
		ck_assert_ptr_null(done);
		done = tr__vgroups_add(&gs, &r, 100);
		if (k == 1) {
			r = record(sh, i, 1, 5, &w, &p); // again: skipped
			ck_assert_ptr_null(tr__vgroups_add(&gs, &r, 100));
		}
		r = record(sh, 0, 2, 5, &w, &p);
		if (k == 0) {
			ck_assert_ptr_null(tr__vgroups_add(&gs, &r, 100));
		}
	}
	ck_assert_ptr_nonnull(done);
	ck_assert_uint_eq(done->rank, 1);
	ck_assert_uint_eq(done->version, 5);
	ck_assert_uint_eq(done->data_step, 6);
	ck_assert_uint_eq(gs.skipped, 1);
	for (size_t t = 0; t < w.n_tensors; t++) { // tensors sit apart
		ck_assert_mem_eq(done->w.t[t], w.t[t], w.len[t] * 4);
		ck_assert_mem_eq(done->p.t[t], p.t[t], p.len[t] * 4);
	}
	tr__vgroups_release(&gs, done);
	// (2, 5) never completes: the wait drops it, its shard skipped.
	ck_assert_uint_eq(tr__vgroups_expire(&gs, 200, 1000), 0);
	ck_assert_uint_eq(tr__vgroups_expire(&gs, 1100, 1000), 1);
	ck_assert_uint_eq(gs.skipped, 2);
	// More pushes in flight than groups: the longest waiting goes.
	for (uint32_t r = 0; r < 5; r++) {
		struct ferry_audit_record x = record(sh, 0, r, 9, &w, &p);
		ck_assert_ptr_null(tr__vgroups_add(&gs, &x, 2000 + r));
	}
	ck_assert_uint_eq(gs.skipped, 3);
	ck_assert_uint_eq(tr__vgroups_expire(&gs, 9000, 0), 4);
	tr__vgroups_fini(&gs);
	tr_params_fini(&w);
	tr_params_fini(&p);
}
END_TEST

// The batch a claim names is the one the trainer's plain loop took at
// that job step (train.c: tr_job_position, then tr_partition_batch on the
// rank's partition), across epochs, from a partition of its own.
START_TEST(test_verify_batch_is_trainers)
{
	size_t   spe   = tr_partition_steps(N_SAMPLES, TRAINERS, BATCH);
	uint64_t total = tr_job_steps(spe, 3, 0);
	ck_assert_uint_gt(spe, 1);
	for (int rank = 0; rank < TRAINERS; rank++) {
		struct tr_partition tp, vp;
		PT_OK(tr_partition_init(&tp, N_SAMPLES, rank, TRAINERS, SEED));
		PT_OK(tr_partition_init(&vp, N_SAMPLES, rank, TRAINERS, SEED));
		for (uint64_t s = 0; s < total; s++) {
			struct tr_position pos;
			const uint32_t    *ti, *vi;
			PT_OK(tr_job_position(s, spe, total, &pos));
			PT_OK(tr_partition_batch(&tp, pos.epoch, pos.k, BATCH,
			    &ti));
			// The verifier's claims come in any order.
			uint64_t back = total - 1 - s;
			PT_OK(tr__verify_batch(&vp, back, spe, BATCH, &vi));
			PT_OK(tr__verify_batch(&vp, s, spe, BATCH, &vi));
			ck_assert_mem_eq(ti, vi, BATCH * sizeof(uint32_t));
		}
		const uint32_t *idx;
		ck_assert_int_eq(
		    tr__verify_batch(&vp, UINT64_MAX - 1, spe, BATCH, &idx),
		    FB_ERANGE);
		tr_partition_fini(&tp);
		tr_partition_fini(&vp);
	}
}
END_TEST

// A trainer's gradient (its backend, its partition) recomputed by the
// verifier's own backend from the assembled records matches bit for bit
// on every shard; one changed element is one differing element of one
// shard, with both CRCs named.
START_TEST(test_verify_recompute_matches)
{
	struct tr_arch         a;
	struct tr_dataset      ds;
	struct tr_params       w, g, vg;
	struct tr_backend     *tb, *vb;
	struct tr_backend_opts o = TR_BACKEND_OPTS_INIT;
	struct tr_partition    tp, vp;
	struct ferry_shard     sh[64];
	struct tr__vgroups     gs;
	const uint32_t        *idx;
	double                 loss;
	char                   err[256];
	PT_OK(tr_arch_parse(LAYERS, &a, NULL, 0));
	PT_OK(tr_dataset_synthetic(&ds, N_SAMPLES, a.sizes[0], 3, SEED));
	PT_OK(tr_params_init(&w, &a));
	PT_OK(tr_params_init(&g, &a));
	PT_OK(tr_params_init(&vg, &a));
	tr_params_randomize(&w, SEED);
	o.max_batch = BATCH;
	PT_OK(tr_backend_alloc("cpu", &a, &o, &tb, err, sizeof(err)));
	PT_OK(tr_backend_alloc("cpu", &a, &o, &vb, err, sizeof(err)));
	size_t spe = tr_partition_steps(N_SAMPLES, TRAINERS, BATCH);
	PT_OK(tr_partition_init(&tp, N_SAMPLES, 2, TRAINERS, SEED));
	PT_OK(tr_partition_init(&vp, N_SAMPLES, 2, TRAINERS, SEED));
	// Rank 2's step at version spe + 3 (epoch 1, minibatch 3).
	uint64_t v = spe + 3;
	PT_OK(tr_partition_batch(&tp, 1, 3, BATCH, &idx));
	PT_OK(tr_backend_set_weights(tb, tr_params_cptrs(&w)));
	PT_OK(tr_backend_grad(tb, &ds, idx, BATCH, g.t, &loss));
	g.t[1][2] = nextafterf(g.t[1][2], INFINITY); // falsified
	size_t ns = cut_shards(&w, 20, sh, 64);
	PT_OK(tr__vgroups_init(&gs, &a, sh, ns, 2));
	struct tr__vgroup *done = NULL;
	for (uint32_t i = 0; i < ns; i++) {
		struct ferry_audit_record r = record(sh, i, 2, v, &w, &g);
		done                        = tr__vgroups_add(&gs, &r, 1);
	}
	ck_assert_ptr_nonnull(done);
	PT_OK(tr__verify_batch(&vp, done->data_step - 1, spe, BATCH, &idx));
	PT_OK(tr_backend_set_weights(vb, tr_params_cptrs(&done->w)));
	PT_OK(tr_backend_grad(vb, &ds, idx, BATCH, vg.t, &loss));
	size_t bad = 0;
	for (size_t i = 0; i < ns; i++) {
		struct ferry_verdict vd = { 0 };
		const float *pp = done->p.t[sh[i].tensor] + sh[i].offset;
		const float *rp = vg.t[sh[i].tensor] + sh[i].offset;
		tr__verify_compare(pp, rp, sh[i].len, &vd);
		if (sh[i].tensor == 1 && sh[i].offset <= 2 &&
		    2 < sh[i].offset + sh[i].len) {
			bad++;
			ck_assert_int_eq(vd.mismatch, 1);
			ck_assert_uint_eq(vd.differing, 1);
			ck_assert_uint_ne(vd.pushed_crc, vd.recomputed_crc);
			ck_assert(vd.max_abs_diff > 0);
		} else {
			ck_assert_msg(!vd.mismatch, "shard %zu: %llu differ",
			    i, (unsigned long long) vd.differing);
			ck_assert_uint_eq(vd.pushed_crc, vd.recomputed_crc);
			ck_assert(vd.max_abs_diff == 0);
		}
	}
	ck_assert_uint_eq(bad, 1);
	tr__vgroups_fini(&gs);
	tr_partition_fini(&tp);
	tr_partition_fini(&vp);
	tr_backend_free(tb);
	tr_backend_free(vb);
	tr_params_fini(&w);
	tr_params_fini(&g);
	tr_params_fini(&vg);
	tr_dataset_fini(&ds);
}
END_TEST

// A difference that is not a number counts, with an infinite max.
START_TEST(test_verify_compare_nan)
{
	float                p[3] = { 1.0f, NAN, -0.0f };
	float                q[3] = { 1.0f, 2.0f, 0.0f };
	struct ferry_verdict vd   = { 0 };
	tr__verify_compare(p, q, 3, &vd);
	ck_assert_int_eq(vd.mismatch, 1);
	ck_assert_uint_eq(vd.differing, 2); // -0 and 0: other bits
	ck_assert(isinf(vd.max_abs_diff));
}
END_TEST

// --verify 1 takes the trainers' options but refuses those whose step it
// cannot recompute (and an attack of its own); alone it parses.
START_TEST(test_verify_config)
{
	static const char *refused[] = { "--model=dlrm", "--device=cuda",
		"--lr-scale-trainers=2", "--local-steps=4",
		"--attack=sign-flip" };
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct tr_config c;
		char             err[512] = "";
		char *argv[] = { "trainer", "--verify=1", (char *) refused[i],
			NULL };
		tr_config_defaults(&c);
		ck_assert_int_ne(
		    tr_config_parse(&c, 3, argv, err, sizeof(err)), FB_OK);
		ck_assert_msg(strstr(err, "--verify") != NULL ||
		        strstr(err, "dlrm") != NULL,
		    "%s: %s", refused[i], err);
		tr_config_fini(&c);
	}
	struct tr_config c;
	char             err[512] = "";
	char *argv[] = { "trainer", "--verify=1", "--seed=3", NULL };
	tr_config_defaults(&c);
	PT_OK(tr_config_parse(&c, 3, argv, err, sizeof(err)));
	ck_assert_int_eq(c.verify, 1);
	tr_config_fini(&c);
}
END_TEST

Suite *
suite_verify(void)
{
	Suite *s  = suite_create("verify");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_vgroups_assemble);
	tcase_add_test(tc, test_verify_batch_is_trainers);
	tcase_add_test(tc, test_verify_recompute_matches);
	tcase_add_test(tc, test_verify_compare_nan);
	tcase_add_test(tc, test_verify_config);
	suite_add_tcase(s, tc);
	return s;
}
