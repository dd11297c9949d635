// fake.c — see fake.h.
#include <check.h>
#include <stdlib.h>

#include "fake.h"

Pswire__Placement *
fake_map(size_t n_tensors, size_t n_servers, const struct fake_shard *sh,
    size_t n_shards, uint64_t epoch)
{
	Pswire__Placement pl  = PSWIRE__PLACEMENT__INIT;
	Pswire__JobConfig job = PSWIRE__JOB_CONFIG__INIT;
	Pswire__ShardInfo si[128], *sp[128];
	char             *urls[8];
	uint8_t          *buf;
	size_t            len;

	ck_assert_uint_le(n_shards, 128);
	ck_assert_uint_le(n_servers, 8);
	for (size_t m = 0; m < n_servers; m++) {
		urls[m] = FAKE_URL;
	}
	for (size_t i = 0; i < n_shards; i++) {
		pswire__shard_info__init(&si[i]);
		si[i].tensor = sh[i].tensor;
		si[i].offset = sh[i].offset;
		si[i].len    = sh[i].len;
		si[i].server = sh[i].server;
		sp[i]        = &si[i];
	}
	job.n_tensors = n_tensors; // the names are not checked
	pl.epoch      = epoch;
	pl.n_servers  = n_servers;
	pl.servers    = urls;
	pl.n_shards   = n_shards;
	pl.shards     = sp;
	pl.job        = &job;
	pl.trainers   = 2;
	if (n_tensors > 0) {
		Pswire__TensorDesc **td  = calloc(n_tensors, sizeof(*td));
		Pswire__TensorDesc   one = PSWIRE__TENSOR_DESC__INIT;
		ck_assert_ptr_nonnull(td);
		for (size_t t = 0; t < n_tensors; t++) {
			td[t] = &one;
		}
		job.tensors = td;
	}
	len = pswire__placement__get_packed_size(&pl);
	buf = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(buf);
	pswire__placement__pack(&pl, buf);
	Pswire__Placement *out = pswire__placement__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(out);
	free(buf);
	free(job.tensors);
	return out;
}

ferry_client *
fake_client(const char *push, const char *pull, const uint64_t *tensor_len,
    size_t n_tensors, size_t n_servers, const struct fake_shard *sh,
    size_t n_shards)
{
	struct ferry_opts o = FERRY_OPTS_INIT;
	ferry_client     *c = NULL;

	o.scheduler_url = FAKE_URL;
	o.rank          = 3;
	o.codec_push    = push;
	o.codec_pull    = pull;
	ck_assert_int_eq(ferry_client_open(&o, &c), FERRY_OK);
	c->n_tensors  = n_tensors;
	c->tensor_len = fb_alloc(n_tensors * sizeof(uint64_t));
	ck_assert_ptr_nonnull(c->tensor_len);
	memcpy(c->tensor_len, tensor_len, n_tensors * sizeof(uint64_t));
	c->pl = fake_map(n_tensors, n_servers, sh, n_shards, 1);
	ck_assert_int_eq(ferry__placement_check(c, c->pl), FERRY_OK);
	ck_assert_int_eq(ferry__conns_open(c, c->pl), FERRY_OK);
	ck_assert_int_eq(ferry__conns_assign(c), FERRY_OK);
	c->shard_ver = fb_zalloc(n_shards * sizeof(uint64_t) + 1);
	c->need      = fb_zalloc(n_shards + 1);
	c->need_full = fb_zalloc(n_shards + 1);
	c->ref_at    = fb_zalloc(n_shards + 1);
	c->held      = fb_zalloc(n_shards * sizeof(*c->held) + 1);
	c->seed_seen = fb_zalloc(n_shards * sizeof(uint64_t) + 1);
	c->code_off  = fb_zalloc(n_shards * sizeof(size_t) + 1);
	c->resid     = fb_zalloc(n_tensors * sizeof(float *));
	c->ref       = fb_zalloc(n_tensors * sizeof(float *));
	ck_assert(c->shard_ver && c->need && c->need_full && c->ref_at &&
	    c->held && c->seed_seen && c->code_off && c->resid && c->ref);
	for (size_t t = 0; t < n_tensors && c->cpull.id != COMP_NONE; t++) {
		c->ref[t] = fb_zalloc(tensor_len[t] * sizeof(float));
		ck_assert_ptr_nonnull(c->ref[t]);
	}
	c->declared = 1;
	return c;
}
