// conf.c — the helpers the tables suites share.
#include "tables_tests.h"

struct tbl_conf
tt_conf(uint32_t dim, enum tbl_optim optim)
{
	struct tbl_conf c = {
		.dim        = dim,
		.table      = 1,
		.seed       = 7,
		.init       = TBL_INIT_UNIFORM,
		.init_scale = 0.1f,
		.optim      = optim,
		.beta1      = 0.9f,
		.beta2      = 0.999f,
		.eps        = 1e-8f,
		.ftrl_beta  = 1.0f,
	};
	return c;
}

struct tbl *
tt_open(const struct tbl_conf *conf)
{
	struct tbl *t = tbl_open(conf);
	ck_assert_msg(t != NULL, "tbl_open: %s",
	    tbl_conf_check(conf) ? tbl_conf_check(conf) : "no memory");
	return t;
}

void
tt_grads(float *g, size_t n, uint32_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < n; i++) {
		s    = tbl_key_hash(s + 0x9e3779b97f4a7c15ULL);
		g[i] = (float) ((int32_t) (s >> 40) - (1 << 23)) * 0x1p-23f;
	}
}
