// config.c — the trainer's configuration: its options are the trainer's
// entries of the one config table (base/src/options.c, engine in
// <fb/config.h>), which gives the names, defaults, bounds, FERRY_NAME
// environment variables, the --config file, --help and --print-config. This
// file only binds each option to its field of struct tr_config (the job's
// and the client's options straight into its struct ferry_opts fo, as
// libferry takes them: --mode's choices are in enum ferry_mode's order,
// strings borrow from the table's values) and checks what the table cannot:
// the --layers widths, the --device spelling, what --model dlrm needs
// (check_dlrm), what local steps need (check_local, which also turns
// the optimizer flags into the inner optimizer and the job's into the
// outer one) and what --attack needs (check_attack).
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attack.h"
#include "fb/config.h"
#include "ferry/ferry.h"
#include "inner.h"
#include "tr/ctr.h"
#include "tr_impl.h"

// How a value is stored in struct tr_config.
enum kind {
	K_TEXT,
	K_INT,
	K_U32,
	K_U64,
	K_SIZE,
	K_F64,
	K_ENUM,
	K_LAYERS,
	K_DEVICE,
	K_RANK
};

struct binding {
	enum fb_opt id;
	enum kind   kind;
	size_t      off;
};

#define OFF(f) offsetof(struct tr_config, f)
static const struct binding bindings[] = {
	{ FB_OPT_TR_SCHEDULER, K_TEXT, OFF(fo.scheduler_url) },
	{ FB_OPT_TR_RANK, K_RANK, OFF(fo.rank) }, // "any": FERRY_RANK_ANY
	{ FB_OPT_TR_DATA, K_TEXT, OFF(data_dir) },
	{ FB_OPT_TR_LAYERS, K_LAYERS, OFF(arch) },
	{ FB_OPT_TR_BATCH, K_SIZE, OFF(batch) },
	{ FB_OPT_TR_LR, K_F64, OFF(fo.lr) },
	{ FB_OPT_TR_EPOCHS, K_INT, OFF(epochs) },
	{ FB_OPT_TR_SEED, K_U64, OFF(fo.seed) },
	{ FB_OPT_TR_MODE, K_ENUM, OFF(fo.mode) }, // enum ferry_mode's order
	{ FB_OPT_TR_LOG_INTERVAL, K_INT, OFF(log_interval) },
	{ FB_OPT_TR_CODEC_PUSH, K_TEXT, OFF(fo.codec_push) },
	{ FB_OPT_TR_CODEC_PULL, K_TEXT, OFF(fo.codec_pull) },
	{ FB_OPT_TR_BUCKET, K_U32, OFF(fo.bucket) },
	{ FB_OPT_TR_WARMUP_STEPS, K_U32, OFF(fo.warmup_steps) },
	{ FB_OPT_TR_MAX_STEPS, K_U64, OFF(max_steps) },
	{ FB_OPT_TR_DEVICE, K_DEVICE, OFF(device) },
	{ FB_OPT_TR_BLAS_THREADS, K_INT, OFF(blas_threads) },
	{ FB_OPT_TR_CURVE, K_TEXT, OFF(curve) },
	{ FB_OPT_TR_STEP_TIMES, K_TEXT, OFF(step_times) },
	{ FB_OPT_TR_WEIGHTS_OUT, K_TEXT, OFF(weights_out) },
	{ FB_OPT_TR_TIMEOUT_MS, K_U32, OFF(fo.timeout_ms) },
	{ FB_OPT_TR_HTTP_LISTEN, K_TEXT, OFF(http_listen) },
	{ FB_OPT_TR_HTTP_URL_FILE, K_TEXT, OFF(http_url_file) },
	{ FB_OPT_TR_HEARTBEAT_MS, K_U32, OFF(fo.heartbeat_ms) },
	{ FB_OPT_TR_STALENESS, K_U32, OFF(fo.staleness) },
	{ FB_OPT_TR_SYNC_QUORUM, K_U32, OFF(fo.sync_quorum) },
	{ FB_OPT_TR_SLOW_MS, K_U32, OFF(slow_ms) },
	{ FB_OPT_TR_SECRET_FILE, K_TEXT, OFF(secret_file) },
	{ FB_OPT_TR_OPTIMIZER, K_TEXT, OFF(fo.optimizer) }, // checked choice
	{ FB_OPT_TR_MOMENTUM, K_F64, OFF(fo.momentum) },
	{ FB_OPT_TR_BETA1, K_F64, OFF(fo.beta1) },
	{ FB_OPT_TR_BETA2, K_F64, OFF(fo.beta2) },
	{ FB_OPT_TR_EPS, K_F64, OFF(fo.eps) },
	{ FB_OPT_TR_WEIGHT_DECAY, K_F64, OFF(fo.weight_decay) },
	{ FB_OPT_TR_LR_SCHEDULE, K_TEXT, OFF(fo.lr_schedule) },
	{ FB_OPT_TR_LR_WARMUP, K_U64, OFF(fo.lr_warmup) },
	{ FB_OPT_TR_LR_STEP_EVERY, K_U64, OFF(fo.lr_step_every) },
	{ FB_OPT_TR_LR_GAMMA, K_F64, OFF(fo.lr_gamma) },
	{ FB_OPT_TR_LR_MIN, K_F64, OFF(fo.lr_min) },
	{ FB_OPT_TR_LR_TOTAL_STEPS, K_U64, OFF(fo.lr_total_steps) },
	{ FB_OPT_TR_CLIP_NORM, K_F64, OFF(fo.clip_norm) },
	{ FB_OPT_TR_LINK_BUDGET, K_F64, OFF(fo.link_budget) },
	{ FB_OPT_TR_OVERLAP_LAYERS, K_U32, OFF(overlap_layers) },
	{ FB_OPT_TR_OVERLAP, K_INT, OFF(overlap) },
	{ FB_OPT_TR_TLS_CERT, K_TEXT, OFF(fo.tls_cert) },
	{ FB_OPT_TR_TLS_KEY, K_TEXT, OFF(fo.tls_key) },
	{ FB_OPT_TR_TLS_CA, K_TEXT, OFF(fo.tls_ca) },
	{ FB_OPT_TR_MODEL, K_ENUM, OFF(model) }, // enum tr_model's order
	{ FB_OPT_TR_TEST_DATA, K_TEXT, OFF(test_data) },
	{ FB_OPT_TR_EMB_DIM, K_U32, OFF(emb_dim) },
	{ FB_OPT_TR_BOTTOM, K_TEXT, OFF(bottom) },
	{ FB_OPT_TR_TOP, K_TEXT, OFF(top) },
	{ FB_OPT_TR_INTERACTION, K_TEXT, OFF(interaction) }, // checked choice
	{ FB_OPT_TR_TABLE_OPTIMIZER, K_TEXT, OFF(table_optimizer) },
	{ FB_OPT_TR_TABLE_LR, K_F64, OFF(table_lr) },
	{ FB_OPT_TR_TABLE_INIT_SCALE, K_F64, OFF(table_init_scale) },
	{ FB_OPT_TR_TABLE_CODEC_PUSH, K_TEXT, OFF(table_codec_push) },
	{ FB_OPT_TR_TABLE_CODEC_PULL, K_TEXT, OFF(table_codec_pull) },
	{ FB_OPT_TR_ADMIT_COUNT, K_U32, OFF(admit_count) },
	{ FB_OPT_TR_EVAL_ROWS, K_U64, OFF(eval_rows) },
	{ FB_OPT_TR_LEASES, K_ENUM, OFF(leases) }, // enum tr_leases' order
	{ FB_OPT_TR_LEASE_BATCHES, K_U32, OFF(lease_batches) },
	{ FB_OPT_TR_LR_SCALE_TRAINERS, K_U32, OFF(lr_scale_trainers) },
	{ FB_OPT_TR_LOCAL_STEPS, K_U32, OFF(local_steps) },
	{ FB_OPT_TR_FRAGMENTS, K_U32, OFF(fragments) },
	{ FB_OPT_TR_FRAGMENT_DELAY, K_U32, OFF(fragment_delay) },
	{ FB_OPT_TR_OUTER_OPTIMIZER, K_TEXT, OFF(outer_optimizer) },
	{ FB_OPT_TR_OUTER_LR, K_F64, OFF(outer_lr) },
	{ FB_OPT_TR_OUTER_MOMENTUM, K_F64, OFF(outer_momentum) },
	{ FB_OPT_TR_ATTACK, K_TEXT, OFF(attack) },
	{ FB_OPT_TR_ATTACK_RATE, K_F64, OFF(attack_rate) },
	{ FB_OPT_TR_VERIFY, K_INT, OFF(verify) },
};
#define N_BINDINGS (sizeof(bindings) / sizeof(bindings[0]))
_Static_assert(N_BINDINGS == FB_OPT_TR_VERIFY - FB_OPT_TR_SCHEDULER + 1,
    "every trainer option of base/src/options.c needs a binding");

// parse_rank reads --rank: a number 0..65535, or "any" (FERRY_RANK_ANY:
// the scheduler gives the lowest free rank).
static int
parse_rank(const char *v, int *rank, char *err, size_t errlen)
{
	char *end;
	long  n;
	if (strcmp(v, "any") == 0) {
		*rank = FERRY_RANK_ANY;
		return FB_OK;
	}
	n = strtol(v, &end, 10);
	if (*v < '0' || *v > '9' || *end != '\0' || n < 0 || n > 65535) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--rank '%s': expected 0..65535 or any", v);
	}
	*rank = (int) n;
	return FB_OK;
}

// store copies the checked value of b from fc into c.
static int
store(struct tr_config *c, const struct binding *b, const struct fb_config *fc,
    char *err, size_t errlen)
{
	void       *p = (char *) c + b->off;
	const char *v = fb_config_str(fc, b->id);
	int         is_cuda, ordinal;
	switch (b->kind) {
	case K_TEXT:
		*(const char **) p = v;
		break;
	case K_LAYERS:
		return tr_arch_parse(v, p, err, errlen);
	case K_DEVICE:
		if (tr_device_parse(v, &is_cuda, &ordinal) != FB_OK) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--%s '%s': expected cpu, cuda or cuda:N",
			    fb_options[b->id].name, v);
		}
		*(const char **) p = v;
		break;
	case K_RANK:
		return parse_rank(v, p, err, errlen);
	case K_ENUM:
		*(int *) p = fb_config_enum(fc, b->id);
		break;
	case K_F64:
		*(double *) p = fb_config_f64(fc, b->id);
		break;
	case K_INT:
		*(int *) p = (int) fb_config_int(fc, b->id);
		break;
	case K_U32:
		*(uint32_t *) p = (uint32_t) fb_config_int(fc, b->id);
		break;
	case K_U64:
		*(uint64_t *) p = (uint64_t) fb_config_int(fc, b->id);
		break;
	case K_SIZE:
		*(size_t *) p = (size_t) fb_config_int(fc, b->id);
		break;
	}
	return FB_OK;
}

void
tr_config_defaults(struct tr_config *c)
{
	struct fb_config fc;
	memset(c, 0, sizeof(*c));
	fb_config_init(&fc, FB_ROLE_TRAINER);
	for (size_t i = 0; i < N_BINDINGS; i++) {
		// The table's defaults are ours: a bad one is a bug.
		int rv = store(c, &bindings[i], &fc, NULL, 0);
		FB_ASSERT(rv == FB_OK);
	}
	c->fo.attack = c->attack; // "none": honest
}

// local_refused names what a local-steps job cannot run with, or NULL.
static const char *
local_refused(const struct tr_config *c)
{
	return c->model == TR_MODEL_DLRM ? "--model dlrm"
	    : c->overlap                 ? "--overlap 1"
	    : c->overlap_layers          ? "--overlap-layers 1"
	    : c->lr_scale_trainers != 0  ? "--lr-scale-trainers"
	    : c->fo.clip_norm > 0        ? "--clip-norm"
	    : c->leases == TR_LEASES_ON  ? "--leases on"
	                                 : NULL;
}

// check_local checks --local-steps, --fragments and --fragment-delay
// and, with local steps, moves the optimizer flags as given into
// c->inner (the trainer's inner optimizer) and fills c->fo with the
// job's: the outer optimizer at --outer-lr, constant, with inner_lr.
static int
check_local(struct tr_config *c, char *err, size_t errlen)
{
	struct fb_optim    o;
	struct fb_lr_sched sc;
	uint32_t           h = c->local_steps, f = c->fragments;
	const char        *no;
	if (h == 0) {
		if (f > 1 || c->fragment_delay > 0) {
			return tr__errf(FB_EINVAL, err, errlen,
			    "--fragments and --fragment-delay stream local "
			    "steps: they need --local-steps H > 0");
		}
		return FB_OK;
	}
	if ((no = local_refused(c)) != NULL) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--local-steps runs the MLP's plain exchange on rank "
		    "partitions, on the host: not with %s",
		    no);
	}
	if ((uint64_t) h * c->batch > UINT32_MAX) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--local-steps %u x --batch %zu: a phase's samples must "
		    "fit a push's 32-bit count",
		    h, c->batch);
	}
	if (f > 1 && h % f != 0) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--fragments %u must divide --local-steps %u", f, h);
	}
	if (f > 1 && c->fo.mode != TR_MODE_SYNC) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--fragments %u: streaming needs --mode sync", f);
	}
	if (c->fragment_delay > 0 && (f <= 1 || c->fragment_delay >= h / f)) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--fragment-delay %u: needs --fragments > 1 and must be "
		    "below --local-steps / --fragments (%u)",
		    c->fragment_delay, f > 1 ? h / f : 0);
	}
	if (tr__inner_opts(&c->fo, &o, &sc, err, errlen) != FB_OK) {
		return FB_EINVAL;
	}
	c->inner           = c->fo;
	c->fo.optimizer    = c->outer_optimizer;
	c->fo.momentum     = c->outer_momentum;
	c->fo.lr           = c->outer_lr;
	c->fo.lr_schedule  = "constant";
	c->fo.lr_warmup    = 0;
	c->fo.weight_decay = 0;
	c->fo.inner_lr     = c->inner.lr;
	c->fo.local_steps  = h;
	c->fo.fragments    = f;
	return FB_OK;
}

// attack_refused names what an --attack run cannot run with, or NULL:
// attacks falsify the plain loop's per-step gradient on the host.
static const char *
attack_refused(const struct tr_config *c)
{
	return c->model == TR_MODEL_DLRM ? "--model dlrm"
	    : c->overlap                 ? "--overlap 1"
	    : c->overlap_layers          ? "--overlap-layers 1"
	    : c->local_steps > 0         ? "--local-steps"
	    : c->leases == TR_LEASES_ON  ? "--leases on"
	    : c->verify                  ? "--verify 1"
	                                 : NULL;
}

// check_attack checks --attack's spec and what it cannot run with, and
// hands it to libferry, which declares it on Register (the scheduler
// refuses it unless the job allows attacks).
static int
check_attack(struct tr_config *c, char *err, size_t errlen)
{
	struct tr__attack_spec sp;
	const char            *no;
	int rv = tr__attack_parse(c->attack, &sp, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	c->fo.attack = c->attack;
	if (sp.kind != TR__ATTACK_NONE && (no = attack_refused(c)) != NULL) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--attack %s falsifies the plain loop's gradients "
		    "(benchmarks and tests only): not with %s",
		    c->attack, no);
	}
	return FB_OK;
}

void
tr_config_usage(FILE *f)
{
	fb_config_usage(f, FB_ROLE_TRAINER,
	    "usage: trainer --scheduler URL [--rank R|any] [flags]");
}

// check_dlrm checks what --model dlrm needs: a training FILE (not the
// MLP's IDX directory, the --data default), a test file, widths that
// make a model, and none of the MLP loop's own machinery.
static int
check_dlrm(const struct tr_config *c, char *err, size_t errlen)
{
	struct tr_dlrm_arch a;
	struct stat         st;
	if (stat(c->data_dir, &st) == 0 && S_ISDIR(st.st_mode)) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--model dlrm: --data %s is a directory; give the "
		    "training FILE (Criteo text or ferry-ctrgen binary)",
		    c->data_dir);
	}
	if (c->test_data == NULL || *c->test_data == '\0') {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--model dlrm needs --test-data FILE (the test set its "
		    "AUC is measured on)");
	}
	if (c->overlap || c->overlap_layers) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--model dlrm: --overlap and --overlap-layers are the "
		    "MLP loop's; leave them 0");
	}
	if (strcmp(c->device, "cpu") != 0) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--model dlrm runs on the CPU: --device %s is not "
		    "supported",
		    c->device);
	}
	return tr_dlrm_arch_parse(c->bottom, c->top, c->emb_dim,
	    c->interaction, &a, err, errlen);
}

int
tr_config_parse(struct tr_config *c, int argc, char **argv, char *err,
    size_t errlen)
{
	struct fb_config *fc = &c->src;
	int               rv;
	fb_config_fini(fc);
	rv = fb_config_load(fc, FB_ROLE_TRAINER, argc, argv, err, errlen);
	if (rv != FB_OK) {
		return rv;
	}
	if (fc->help) {
		c->help = 1;
		return FB_OK;
	}
	c->print_config = fc->print;
	// Only what the file, the environment or a flag set: the rest of c
	// is the caller's (tr_config_defaults, or values of its own).
	for (size_t i = 0; i < N_BINDINGS; i++) {
		enum fb_opt id = bindings[i].id;
		if (fb_config_source_of(fc, id) == FB_CFG_DEFAULT) {
			continue;
		}
		if ((rv = store(c, &bindings[i], fc, err, errlen)) != FB_OK) {
			// The table's checks name the line; ours (--layers,
			// --device) name the flag: add the line.
			if (fb_config_source_of(fc, id) == FB_CFG_FILE &&
			    err != NULL && errlen > 0) {
				char msg[512];
				snprintf(msg, sizeof(msg), "%s", err);
				snprintf(err, errlen, "%s:%u: %s", fc->file,
				    fc->v[id].line, msg);
			}
			return rv;
		}
	}
	if (c->model == TR_MODEL_DLRM &&
	    (rv = check_dlrm(c, err, errlen)) != FB_OK) {
		return rv;
	}
	if (c->lr_scale_trainers != 0 &&
	    (c->model == TR_MODEL_DLRM || c->overlap || c->overlap_layers)) {
		return tr__errf(FB_EINVAL, err, errlen,
		    "--lr-scale-trainers scales the MLP loop's plain "
		    "exchange: not with --model dlrm, --overlap or "
		    "--overlap-layers");
	}
	if (c->overlap && c->overlap_layers) {
		// Two different exchanges: delayed weights for the whole
		// step, or exact layer-by-layer; one step cannot be both.
		return tr__errf(FB_EINVAL, err, errlen,
		    "--overlap 1 and --overlap-layers 1 exclude each other: "
		    "choose one");
	}
	if (c->verify &&
	    (c->model == TR_MODEL_DLRM || strcmp(c->device, "cpu") != 0 ||
	        c->lr_scale_trainers != 0 || c->local_steps != 0)) {
		// The verifier recomputes the MLP plain loop's CPU step
		// (check_attack refuses an attack beside it).
		return tr__errf(FB_EINVAL, err, errlen,
		    "--verify 1 recomputes the plain loop's MLP step on the "
		    "CPU: not with --model dlrm, --device other than cpu, "
		    "--lr-scale-trainers or --local-steps");
	}
	if ((rv = check_attack(c, err, errlen)) != FB_OK) {
		return rv;
	}
	return check_local(c, err, errlen);
}

void
tr_config_print(const struct tr_config *c, FILE *f)
{
	fb_config_print(&c->src, f);
}

void
tr_config_fini(struct tr_config *c)
{
	fb_config_fini(&c->src);
}
