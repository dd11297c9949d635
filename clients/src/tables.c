// tables.c — the sparse tables a trainer declares: checking each
// ferry_table_spec and turning it into its JobConfig.tables entry, the
// routing the map gives them (each table's hash-range count and first
// table shard id, from Placement.table_shards), and the per-table
// counters ferry_client_table_stats returns.
//
// DESIGN. The spec's zero fields travel as zero (the servers apply the
// defaults), and names that mean the default travel as "" ("sgd",
// "none"), so two trainers that spell a default differently still declare
// the same job (the scheduler compares the JobConfig whole). The routing
// is read again whenever the map's epoch changes: a table shard keeps its
// id for the job's life, only its server may change, and the server is
// read from the map at each request (rows.c).
#include <math.h>
#include <stdio.h>

#include "client_impl.h"
#include "tbl/tbl.h"

// TABLE_SHARDS_MAX bounds a table's hash ranges (TableDesc.shards).
#define TABLE_SHARDS_MAX 65536u

// The row optimizers a table may name ("" is sgd).
static const char *const OPTIMS[] = { "sgd", "adagrad", "adam", "ftrl" };

// The row codecs ("" is none): one scale per row for q8.
static const char *const ROW_CODECS[] = { "none", "fp16", "bf16", "q8" };

// name_in returns the canonical wire form of name among names[0..n) ("" for
// NULL or names[0], the default), or NULL when it is not one of them.
static const char *
name_in(const char *name, const char *const *names, size_t n)
{
	if (name == NULL || name[0] == '\0' || strcmp(name, names[0]) == 0) {
		return "";
	}
	for (size_t i = 1; i < n; i++) {
		if (strcmp(name, names[i]) == 0) {
			return names[i];
		}
	}
	return NULL;
}

// nonneg reports whether v is finite and >= 0.
static int
nonneg(double v)
{
	return isfinite(v) && v >= 0;
}

// spec_field names the first field of t that is wrong (NULL: none), with
// its rule.
static const char *
spec_field(const struct ferry_table_spec *t)
{
	if (t->dim == 0 || t->dim > 4096) {
		return "dim: must be 1..4096";
	}
	if (t->init > FERRY_ROW_NORMAL) {
		return "init: must be FERRY_ROW_ZEROS, _UNIFORM or _NORMAL";
	}
	if (!nonneg(t->init_scale)) {
		return "init_scale: must be finite and >= 0";
	}
	if (name_in(t->optimizer, OPTIMS, 4) == NULL) {
		return "optimizer: must be sgd, adagrad, adam or ftrl";
	}
	if (!nonneg(t->lr) || !nonneg(t->eps) || !nonneg(t->adagrad_init)) {
		return "lr, eps, adagrad_init: must be finite and >= 0";
	}
	if (!nonneg(t->beta1) || t->beta1 >= 1 || !nonneg(t->beta2) ||
	    t->beta2 >= 1) {
		return "beta1, beta2: must be in [0, 1)";
	}
	if (!nonneg(t->ftrl_beta) || !nonneg(t->ftrl_l1) ||
	    !nonneg(t->ftrl_l2)) {
		return "ftrl_beta, ftrl_l1, ftrl_l2: must be finite and >= 0";
	}
	if (t->shards > TABLE_SHARDS_MAX) {
		return "shards: at most 65536";
	}
	if (!(t->admit_prob >= 0 && t->admit_prob <= 1)) {
		return "admit_prob: must be in [0, 1]";
	}
	if (name_in(t->codec_push, ROW_CODECS, 4) == NULL) {
		return "codec_push: must be none, fp16, bf16 or q8";
	}
	if (name_in(t->codec_pull, ROW_CODECS, 4) == NULL) {
		return "codec_pull: must be none, fp16, bf16 or q8";
	}
	return NULL;
}

// desc_fill fills td from the checked spec t, field by field.
static void
desc_fill(const struct ferry_table_spec *t, Pswire__TableDesc *td)
{
	pswire__table_desc__init(td);
	td->name          = (char *) t->name;
	td->dim           = t->dim;
	td->init          = (Pswire__RowInit) t->init;
	td->init_scale    = t->init_scale;
	td->optim         = (char *) name_in(t->optimizer, OPTIMS, 4);
	td->lr            = t->lr;
	td->beta1         = t->beta1;
	td->beta2         = t->beta2;
	td->eps           = t->eps;
	td->adagrad_init  = t->adagrad_init;
	td->ftrl_beta     = t->ftrl_beta;
	td->ftrl_l1       = t->ftrl_l1;
	td->ftrl_l2       = t->ftrl_l2;
	td->shards        = t->shards;
	td->expected_rows = t->expected_rows;
	td->admit_count   = t->admit_count;
	td->admit_prob    = (float) t->admit_prob;
	td->evict_after   = t->evict_after;
	td->codec_push    = (char *) name_in(t->codec_push, ROW_CODECS, 4);
	td->codec_pull    = (char *) name_in(t->codec_pull, ROW_CODECS, 4);
}

int
ferry__tables_take(ferry_client *c, const struct ferry_table_spec *t, size_t n,
    Pswire__TableDesc *td)
{
	struct ferry__table *tabs;
	const char          *why;
	for (size_t i = 0; i < n; i++) {
		if (t[i].name == NULL || t[i].name[0] == '\0' ||
		    strlen(t[i].name) > 127) {
			return ferry__fail(c, FERRY_EINVAL,
			    "table %zu: name: needs 1..127 bytes", i);
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(t[i].name, t[j].name) == 0) {
				return ferry__fail(c, FERRY_EINVAL,
				    "table %zu ('%s'): name: table %zu has it "
				    "too",
				    i, t[i].name, j);
			}
		}
		if ((why = spec_field(&t[i])) != NULL) {
			return ferry__fail(c, FERRY_EINVAL,
			    "table %zu ('%s'): %s", i, t[i].name, why);
		}
	}
	if ((tabs = fb_zalloc((n ? n : 1) * sizeof(*tabs))) == NULL) {
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const char *cp = name_in(t[i].codec_push, ROW_CODECS, 4);
		const char *cq = name_in(t[i].codec_pull, ROW_CODECS, 4);
		desc_fill(&t[i], &td[i]);
		snprintf(tabs[i].name, sizeof(tabs[i].name), "%s", t[i].name);
		tabs[i].dim = t[i].dim;
		// Checked names and dim <= 4096 buckets: these cannot fail.
		(void) comp_codec_parse(cp[0] ? cp : "none", t[i].dim,
		    &tabs[i].cpush);
		(void) comp_codec_parse(cq[0] ? cq : "none", t[i].dim,
		    &tabs[i].cpull);
	}
	fb_free(c->tables);
	c->tables   = tabs;
	c->n_tables = n;
	return FERRY_OK;
}

// route_read sets each table's range count and first id from the map's
// table_shards, checking that they list every table's ranges in order,
// each the hash range tbl_range_start gives, on a listed server.
static int
route_read(ferry_client *c, const Pswire__Placement *pl)
{
	size_t id = 0;
	for (size_t t = 0; t < c->n_tables; t++) {
		struct ferry__table *tab   = &c->tables[t];
		size_t               first = id;
		while (id < pl->n_table_shards &&
		    pl->table_shards[id]->tensor == t) {
			const Pswire__ShardInfo *si = pl->table_shards[id];
			if (si->index != id - first ||
			    si->server >= pl->n_servers) {
				return ferry__fail(c, FERRY_EPROTO,
				    "map: table shard %zu (table '%s') is out "
				    "of order or on no listed server",
				    id, tab->name);
			}
			id++;
		}
		uint32_t s = (uint32_t) (id - first);
		if (s == 0 || s > TABLE_SHARDS_MAX) {
			return ferry__fail(c, FERRY_EPROTO,
			    "map: table '%s' has %u hash ranges", tab->name,
			    s);
		}
		for (uint32_t i = 0; i < s; i++) {
			const Pswire__ShardInfo *si =
			    pl->table_shards[first + i];
			uint64_t lo = tbl_range_start(i, s);
			if (si->offset != lo ||
			    si->len != tbl_range_start(i + 1, s) - lo) {
				return ferry__fail(c, FERRY_EPROTO,
				    "map: table '%s' range %u is not hash range "
				    "%u of %u",
				    tab->name, i, i, s);
			}
		}
		tab->first  = (uint32_t) first;
		tab->shards = s;
	}
	if (id != pl->n_table_shards) {
		return ferry__fail(c, FERRY_EPROTO,
		    "map: %zu table shards for %zu declared tables",
		    pl->n_table_shards, c->n_tables);
	}
	return FERRY_OK;
}

// tables_state_free frees the per-table-shard state (NULL: none).
static void
tables_state_free(ferry_client *c)
{
	fb_free(c->rneed);
	fb_free(c->rsent);
	fb_free(c->rver);
	fb_free(c->rblk);
	fb_free(c->rblkp);
	c->rneed = NULL;
	c->rsent = NULL;
	c->rver  = NULL;
	c->rblk  = NULL;
	c->rblkp = NULL;
}

int
ferry__tables_route(ferry_client *c)
{
	size_t n = c->pl->n_table_shards;
	int    rv;
	if (c->rneed != NULL && c->route_epoch == c->pl->epoch) {
		return FERRY_OK;
	}
	if ((rv = route_read(c, c->pl)) != FERRY_OK) {
		return rv;
	}
	if (c->rneed != NULL && n != c->n_tshards) {
		return ferry__fail(c, FERRY_EPROTO,
		    "map: %zu table shards, %zu before", n, c->n_tshards);
	}
	if (c->rneed == NULL) {
		size_t k     = n ? n : 1;
		c->rneed     = fb_zalloc(k);
		c->rsent     = fb_zalloc(k * sizeof(*c->rsent));
		c->rver      = fb_zalloc(k * sizeof(*c->rver));
		c->rblk      = fb_zalloc(2 * k * sizeof(*c->rblk));
		c->rblkp     = fb_zalloc(2 * k * sizeof(*c->rblkp));
		c->n_tshards = n;
		if (c->rneed == NULL || c->rsent == NULL || c->rver == NULL ||
		    c->rblk == NULL || c->rblkp == NULL) {
			tables_state_free(c);
			return ferry__fail(c, FERRY_ENOMEM, "out of memory");
		}
	}
	c->route_epoch = c->pl->epoch;
	return FERRY_OK;
}

void
ferry__tables_free(ferry_client *c)
{
	tables_state_free(c);
	ferry__dedup_free(&c->dd_push);
	ferry__dedup_free(&c->dd_pull);
	fb_free(c->tables);
	c->tables   = NULL;
	c->n_tables = 0;
}

FERRY_API int
ferry_client_table_stats(const ferry_client *c, uint32_t table,
    struct ferry_table_stats *st)
{
	if (c == NULL || st == NULL) {
		return FERRY_EINVAL;
	}
	if (table >= c->n_tables) {
		return ferry__fail((ferry_client *) c, FERRY_EINVAL,
		    "unknown table %u (%zu declared)", table, c->n_tables);
	}
	*st = c->tables[table].stats;
	return FERRY_OK;
}
