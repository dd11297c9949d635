// rows_build.c — one server's Rows request in a rows exchange (rows.c):
// its blocks planned (a push block for each table shard of that server
// still owed, a pull block for each with wanted keys; the version each
// names) and written into the payload (keys, counts, the gradients in the
// table's push codec), in the last reply's message when it is big enough.
#include <string.h>

#include "client_impl.h"

const struct ferry__table *
ferry__rows_table(const ferry_client *c, size_t id)
{
	return &c->tables[c->pl->table_shards[id]->tensor];
}

// blocks_plan fills c->rblk with server m's blocks still owed and not in
// flight (push blocks first, then pull blocks at c->rblk + n_tshards) and
// returns the payload bytes they take; *np and *nq count them.
static size_t
blocks_plan(ferry_client *c, const struct ferry__rows_kind *x, size_t m,
    size_t *np, size_t *nq)
{
	size_t plen = 0, nts = c->n_tshards;
	*np = *nq = 0;
	for (int pull = 0; pull < 2; pull++) {
		const struct ferry__dedup *d = pull ? &c->dd_pull
		                                    : &c->dd_push;
		for (size_t i = 0; i < nts; i++) {
			const struct ferry__table *t = ferry__rows_table(c, i);
			uint8_t bit = pull ? RNEED_PULL : RNEED_PUSH;
			if (c->pl->table_shards[i]->server != m ||
			    !(c->rneed[i] & bit) || c->rsent[i] != 0) {
				continue;
			}
			size_t            k = pull ? nts + (*nq)++ : (*np)++;
			Pswire__RowBlock *b = &c->rblk[k];
			size_t            n = d->sh_n[i];
			pswire__row_block__init(b);
			c->rblkp[k]    = b;
			b->shard       = (uint32_t) i;
			b->n           = (uint32_t) n;
			b->keys_offset = plen;
			plen += 8 * n;
			if (c->lockstep && !x->probe) {
				b->version = c->rows_version +
				    (pull && x->pushing ? 1 : 0);
			} else {
				b->version = pull ? 0 : c->rver[i];
			}
			if (pull) {
				continue;
			}
			b->counts_offset = plen;
			plen += 4 * n;
			b->rows_offset = plen;
			b->rows_length = n ? comp_bound(&t->cpush, n * t->dim)
			                   : 0;
			b->codec       = t->cpush.id;
			plen += b->rows_length;
		}
	}
	return plen;
}

// blocks_write writes the planned blocks' bytes into payload: keys (and,
// on a push, counts and the encoded gradients) in each shard's order.
static int
blocks_write(ferry_client *c, size_t np, size_t nq, uint8_t *payload)
{
	for (size_t k = 0; k < np + nq; k++) {
		int                     pull = k >= np;
		const Pswire__RowBlock *b =
		    c->rblkp[pull ? c->n_tshards + k - np : k];
		const struct ferry__dedup *d = pull ? &c->dd_pull
		                                    : &c->dd_push;
		const struct ferry__table *t = ferry__rows_table(c, b->shard);
		const uint32_t *o = d->order + d->sh_first[b->shard];
		size_t          len;
		for (size_t i = 0; i < b->n; i++) {
			memcpy(payload + b->keys_offset + 8 * i, &d->key[o[i]],
			    8);
		}
		if (pull || b->n == 0) {
			continue;
		}
		for (size_t i = 0; i < b->n; i++) {
			memcpy(payload + b->counts_offset + 4 * i,
			    &d->count[o[i]], 4);
		}
		const float *g = d->rows + d->sh_rows[b->shard];
		if (comp_encode(&t->cpush, g, (size_t) b->n * t->dim, NULL,
		        payload + b->rows_offset, b->rows_length,
		        &len) != FB_OK) {
			return ferry__fail(c, FERRY_EINVAL,
			    "table '%s': a pushed row gradient is NaN or Inf "
			    "(codec %s)",
			    t->name, comp_codec_name(t->cpush.id));
		}
	}
	return FERRY_OK;
}

int
ferry__rows_build(ferry_client *c, const struct ferry__rows_kind *x, size_t m,
    nng_msg **out)
{
	Pswire__Header      h  = PSWIRE__HEADER__INIT;
	Pswire__RowsRequest rr = PSWIRE__ROWS_REQUEST__INIT;
	struct slot        *s  = &c->conns[m].slots[FERRY_ROWS_SLOT];
	size_t              np, nq, hl, plen;
	uint8_t            *payload;
	int                 rv;
	*out = NULL;
	plen = blocks_plan(c, x, m, &np, &nq);
	if (np + nq == 0) {
		return FERRY_OK;
	}
	rr.n_push    = np;
	rr.push      = c->rblkp;
	rr.n_pull    = nq;
	rr.pull      = c->rblkp + c->n_tshards;
	rr.n_samples = x->pushing ? x->n_samples : 0;
	rr.resend    = x->resend != 0;
	h.request_id = s->rid = c->next_rid++;
	h.deadline_ms         = ferry__timeout(c);
	h.epoch               = c->pl->epoch;
	h.rank                = (uint32_t) c->opts.rank;
	h.body_case           = PSWIRE__HEADER__BODY_ROWS_REQ;
	h.rows_req            = &rr;
	hl                    = pswire__header__get_packed_size(&h);
	// The last reply from this server is about this big: built there.
	if (s->spare != NULL &&
	    psw_msg_reuse(s->spare, hl, plen, &payload) == FB_OK) {
		*out     = s->spare;
		s->spare = NULL;
	} else if ((rv = psw_msg_begin(out, hl, plen, &payload)) != FB_OK) {
		*out = NULL;
		return ferry__fail(c, FERRY_ENOMEM, "out of memory");
	}
	if ((rv = blocks_write(c, np, nq, payload)) != FERRY_OK ||
	    (rv = psw_msg_finish(*out, PSWIRE__METHOD__ROWS, 0, &h.base, hl,
	         plen)) != FB_OK) {
		nng_msg_free(*out);
		*out = NULL;
		return rv == FERRY_EINVAL ? rv
		                          : ferry__fail(c, ferry__map_err(rv),
		                                "cannot build a Rows request");
	}
	for (size_t k = 0; k < np; k++) {
		c->rsent[c->rblkp[k]->shard] = (uint32_t) m + 1;
	}
	for (size_t k = 0; k < nq; k++) {
		c->rsent[c->rblkp[c->n_tshards + k]->shard] = (uint32_t) m + 1;
	}
	return FERRY_OK;
}
