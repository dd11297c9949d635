// rows_park.c — the pull half of a Rows call: the reply (each pull
// block's rows, looked up in the request's key order and encoded in the
// table's pull codec), parking a call until the versions it wants exist,
// the deadline sweep of parked calls, and the tables' stats and metrics.
//
// DESIGN. Parked Rows calls live on their own list, s->rows_parked, beside
// the dense pulls' s->parked and handled the same way: the nng context is
// simply not answered; whoever advances a table shard's version (a push
// closing a sync round or applied async, a map that closes rounds for
// trainers that left) calls ps__rows_wake under mu, which answers the
// calls that became ready from that thread; the pull sweeper answers
// those whose deadline passed (DEADLINE_EXCEEDED) and a closed
// connection's are answered CANCELLED (pull.c). A reply is built in the
// request's own buffer when it is large enough, after its pull keys are
// copied to a grow-only scratch (the reply overwrites them).
#include <stdio.h>
#include <string.h>

#include "obs/obs.h"
#include "server_impl.h"

// ssp_ok reports whether rank's SSP read of ts may proceed: the slowest
// rank still in the job is at most K clocks behind it. mu held.
static int
ssp_ok(const struct ps_server *s, const struct srv_tshard *ts, uint32_t rank)
{
	uint64_t lo = UINT64_MAX;
	if (!s->job.ssp || s->job.mode == PSWIRE__MODE__MODE_SYNC ||
	    rank >= s->trainers) {
		return 1;
	}
	for (uint32_t r = 0; r < s->trainers; r++) {
		if (!s->gone[r] && ts->clock[r] < lo) {
			lo = ts->clock[r];
		}
	}
	return lo == UINT64_MAX || ts->clock[rank] <= lo + s->job.staleness;
}

int
ps__rows_ready(struct ps_server *s, struct ps_call *c)
{
	const Pswire__RowsRequest *p = c->hdr->rows_req;
	for (size_t i = 0; i < p->n_pull; i++) {
		int32_t k = s->tlocal[p->pull[i]->shard];
		if (k < 0) {
			return 0; // dropped: ps__rows_drop_parked answers it
		}
		const struct srv_tshard *ts = &s->tshards[k];
		if ((s->job.mode == PSWIRE__MODE__MODE_SYNC &&
		        ts->version < p->pull[i]->version) ||
		    !ssp_ok(s, ts, c->hdr->rank) || ts->fwd_pending > 0) {
			return 0; // (a version every backup holds:
			          // rows_repl.c)
		}
	}
	// An applied push is acknowledged once every backup holds it.
	for (size_t i = 0;
	     s->job.mode != PSWIRE__MODE__MODE_SYNC && i < p->n_push; i++) {
		int32_t k = s->tlocal[p->push[i]->shard];
		if (k >= 0 && s->tshards[k].fwd_pending > 0) {
			return 0;
		}
	}
	return 1;
}

// grow makes *buf hold at least n elements of size es (grow-only).
static int
grow(void **buf, size_t *cap, size_t n, size_t es)
{
	if (n <= *cap) {
		return FB_OK;
	}
	void *b = fb_realloc(*buf, n * es);
	if (b == NULL) {
		return FB_ENOMEM;
	}
	*buf = b;
	*cap = n;
	return FB_OK;
}

// rows_size sizes the reply: each pull block's rows in its table's pull
// codec (fills blk[], rows_offset and rows_length), the keys and the
// largest block's floats. mu held.
static size_t
rows_size(struct ps_server *s, const Pswire__RowsRequest *p,
    Pswire__RowBlock *blk, size_t *keys, size_t *maxvals)
{
	size_t off = 0;
	*keys      = 0;
	*maxvals   = 0;
	for (size_t i = 0; i < p->n_pull; i++) {
		const Pswire__RowBlock  *b  = p->pull[i];
		const struct srv_tshard *ts = &s->tshards[s->tlocal[b->shard]];
		size_t                   v  = (size_t) b->n * ts->tb.conf.dim;
		pswire__row_block__init(&blk[i]);
		blk[i].shard       = b->shard;
		blk[i].version     = ts->version;
		blk[i].n           = b->n;
		blk[i].codec       = ts->tb.cpull.id;
		blk[i].rows_offset = off;
		blk[i].rows_length = comp_bound(&ts->tb.cpull, v);
		off += blk[i].rows_length;
		*keys += b->n;
		*maxvals = v > *maxvals ? v : *maxvals;
	}
	return off;
}

// rows_fill looks up and encodes every block's rows into payload. mu
// held. FB_OK, or an encode error (rows not finite).
static int
rows_fill(struct ps_server *s, const Pswire__RowsRequest *p,
    const Pswire__RowBlock *blk, uint8_t *payload)
{
	const uint64_t *keys = s->kscratch;
	for (size_t i = 0; i < p->n_pull; i++) {
		struct srv_tshard *ts = &s->tshards[s->tlocal[blk[i].shard]];
		size_t             v  = (size_t) blk[i].n * ts->tb.conf.dim, w;
		uint8_t           *o  = payload + blk[i].rows_offset;
		if (v == 0) {
			continue; // no key (a version probe): no bytes
		}
		tbl_lookup(ts->t, keys, blk[i].n, s->rscratch);
		keys += blk[i].n;
		if (ts->tb.cpull.id == COMP_NONE) {
			memcpy(o, s->rscratch, v * 4);
		} else if (v > 0 &&
		    comp_encode(&ts->tb.cpull, s->rscratch, v, NULL, o,
		        blk[i].rows_length, &w) != FB_OK) {
			return FB_EINVAL;
		}
	}
	return FB_OK;
}

void
ps__rows_answer(struct ps_server *s, struct ps_call *c)
{
	const Pswire__RowsRequest *p   = c->hdr->rows_req;
	Pswire__Header             h   = PSWIRE__HEADER__INIT;
	Pswire__RowsReply          rep = PSWIRE__ROWS_REPLY__INIT;
	Pswire__RowBlock           blk_stack[16], *blk   = blk_stack;
	Pswire__RowBlock          *ptr_stack[16], **ptrs = ptr_stack;
	size_t                     nk = 0, maxv = 0, off, hl, k = 0;
	nng_msg                   *m = NULL;
	uint8_t                   *payload;

	if (p->n_pull > 16) {
		blk  = fb_alloc(p->n_pull * sizeof(*blk));
		ptrs = fb_alloc(p->n_pull * sizeof(*ptrs));
	}
	off = blk != NULL && ptrs != NULL ? rows_size(s, p, blk, &nk, &maxv)
	                                  : 0;
	if (blk == NULL || ptrs == NULL ||
	    grow((void **) &s->kscratch, &s->kscratch_cap, nk, 8) != FB_OK ||
	    grow((void **) &s->rscratch, &s->rscratch_cap, maxv, 4) != FB_OK) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__RESOURCE_EXHAUSTED,
		    "out of memory building a Rows reply");
		goto done;
	}
	// The keys, out of the request before its buffer holds the reply.
	for (size_t i = 0; i < p->n_pull; i++) {
		ptrs[i] = &blk[i];
		if (p->pull[i]->n == 0) {
			continue; // (the scratch and payload may be NULL)
		}
		memcpy(s->kscratch + k,
		    c->frame.payload + p->pull[i]->keys_offset,
		    (size_t) p->pull[i]->n * 8);
		k += p->pull[i]->n;
	}
	rep.n_rows   = p->n_pull;
	rep.rows     = ptrs;
	h.request_id = c->hdr->request_id;
	h.epoch      = s->pl->epoch;
	h.body_case  = PSWIRE__HEADER__BODY_ROWS_REP;
	h.rows_rep   = &rep;
	hl           = pswire__header__get_packed_size(&h);
	m            = ps__call_take_req(c);
	if (m == NULL || psw_msg_reuse(m, hl, off, &payload) != FB_OK) {
		nng_msg_free(m);
		if (psw_msg_begin(&m, hl, off, &payload) != FB_OK) {
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__RESOURCE_EXHAUSTED,
			    "out of memory building a Rows reply");
			goto done;
		}
	}
	if (rows_fill(s, p, blk, payload) != FB_OK ||
	    psw_msg_finish(m, c->frame.method, PSW_FLAG_REPLY, &h.base, hl,
	        off) != FB_OK) {
		nng_msg_free(m);
		ps__server_reply_err(s, c, PSWIRE__STATUS__INTERNAL,
		    "Rows reply (%zu blocks, %zu bytes) could not be built",
		    p->n_pull, off);
		goto done;
	}
	atomic_fetch_add_explicit(&s->bytes_out, nng_msg_len(m),
	    memory_order_relaxed);
	if (p->n_pull > 0) {
		atomic_fetch_add_explicit(&s->n_rows_pull, 1,
		    memory_order_relaxed);
	}
	ps__call_reply_msg(c, m);
done:
	if (blk != blk_stack) {
		fb_free(blk);
		fb_free(ptrs);
	}
}

void
ps__rows_park(struct ps_server *s, struct ps_call *c)
{
	if (ps__rows_ready(s, c)) {
		ps__rows_answer(s, c);
		return;
	}
	// Every parked call expires, as a parked pull does (pull.c).
	uint64_t cap = fb_clock_ms() + s->opts.park_max_ms;
	if (c->deadline == 0 || c->deadline > cap) {
		c->deadline = cap;
	}
	c->next        = s->rows_parked;
	s->rows_parked = c;
}

void
ps__rows_wake(struct ps_server *s)
{
	struct ps_call **pp = &s->rows_parked;
	while (*pp != NULL) {
		struct ps_call *c = *pp;
		if (ps__rows_ready(s, c)) {
			*pp = c->next;
			ps__rows_answer(s, c);
		} else {
			pp = &c->next;
		}
	}
}

void
ps__rows_sweep(struct ps_server *s, uint64_t now)
{
	struct ps_call **pp = &s->rows_parked;
	while (*pp != NULL) {
		struct ps_call *c = *pp;
		if (c->deadline != 0 && c->deadline <= now) {
			*pp = c->next;
			ps__server_reply_err(s, c,
			    PSWIRE__STATUS__DEADLINE_EXCEEDED,
			    "Rows: the table shards' versions were not reached "
			    "before the deadline");
		} else {
			pp = &c->next;
		}
	}
}

void
ps__rows_drop_parked(struct ps_server *s, uint32_t id, uint64_t epoch,
    int moved_applied)
{
	struct ps_call **pp = &s->rows_parked;
	while (*pp != NULL) {
		struct ps_call            *c   = *pp;
		const Pswire__RowsRequest *p   = c->hdr->rows_req;
		int                        hit = 0;
		for (size_t i = 0; i < p->n_pull && !hit; i++) {
			hit = p->pull[i]->shard == id;
		}
		if (!hit) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		if (moved_applied) {
			ps__server_reply_err(s, c, PSWIRE__STATUS__ABORTED,
			    "table shard %u moved (epoch %llu): the push was "
			    "applied; pull again from its new server",
			    id, (unsigned long long) epoch);
		} else {
			ps__server_reply_err(s, c, PSWIRE__STATUS__STALE_EPOCH,
			    "table shard %u moved (epoch %llu): fetch the new "
			    "map",
			    id, (unsigned long long) epoch);
		}
	}
}

// table_sum adds the stats of table t's shards held here into *st. mu
// held.
static void
table_sum(const struct ps_server *s, uint32_t t, struct tbl_stats *st)
{
	memset(st, 0, sizeof(*st));
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		struct tbl_stats one;
		if (s->tshards[k].table != t || s->tshards[k].backup) {
			continue;
		}
		tbl_get_stats(s->tshards[k].t, &one);
		st->rows += one.rows;
		st->bytes += one.bytes;
		st->admitted += one.admitted;
		st->rejected += one.rejected;
		st->evicted += one.evicted;
		st->lookups += one.lookups;
		st->hits += one.hits;
	}
}

// label writes table="name" (the name escaped for a label value) into
// buf.
static void
label(const char *name, char *buf, size_t n)
{
	size_t o = (size_t) snprintf(buf, n, "table=\"");
	for (const char *p = name; *p != '\0' && o + 4 < n; p++) {
		if (*p == '"' || *p == '\\') {
			buf[o++] = '\\';
			buf[o++] = *p;
		} else if (*p == '\n') {
			buf[o++] = '\\';
			buf[o++] = 'n';
		} else {
			buf[o++] = *p;
		}
	}
	snprintf(buf + o, n - o, "\"");
}

void
ps__rows_stats(struct ps_server *s, char *buf, size_t n)
{
	size_t           o   = 0;
	size_t           nt  = s->pl != NULL ? s->pl->job->n_tables : 0;
	uint64_t         tot = 0;
	uint32_t         nb  = 0;
	struct tbl_stats st;
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		tot += tbl_bytes(s->tshards[k].t);
		nb += s->tshards[k].backup != 0;
	}
	// Shards and rows count the primaries; bytes, the memory held.
	o += (size_t) snprintf(buf, n,
	    "# Tables\r\ntable_shards:%u\r\ntable_backups:%u\r\n"
	    "table_bytes:%llu\r\n"
	    "sparse_capacity:%llu\r\ncapacity_evicted:%llu\r\n"
	    "rows_pushes:%llu\r\nrows_pulls:%llu\r\n",
	    s->n_tshards - nb, nb, (unsigned long long) tot,
	    (unsigned long long) s->opts.sparse_capacity,
	    (unsigned long long) s->cap_evicted,
	    (unsigned long long) atomic_load(&s->n_rows_push),
	    (unsigned long long) atomic_load(&s->n_rows_pull));
	for (uint32_t t = 0; t < nt && o < n; t++) {
		table_sum(s, t, &st);
		o += (size_t) snprintf(buf + o, n - o,
		    "table_%.64s:rows=%llu,bytes=%llu,admitted=%llu,"
		    "rejected=%llu,evicted=%llu,lookups=%llu,hits=%llu\r\n",
		    s->pl->job->tables[t]->name, (unsigned long long) st.rows,
		    (unsigned long long) st.bytes,
		    (unsigned long long) st.admitted,
		    (unsigned long long) st.rejected,
		    (unsigned long long) st.evicted,
		    (unsigned long long) st.lookups,
		    (unsigned long long) st.hits);
	}
}

void
ps__rows_metrics(struct ps_server *s, struct obs_writer *w)
{
	static const struct {
		const char   *name, *help;
		enum obs_type type;
	} fam[] = {
		{ "ferry_table_rows", "Rows held here, per table.",
		    OBS_GAUGE },
		{ "ferry_table_bytes", "Memory the table's shards hold here.",
		    OBS_GAUGE },
		{ "ferry_table_admitted_total", "Rows created (admitted).",
		    OBS_COUNTER },
		{ "ferry_table_rejected_total",
		    "Updates of absent keys dropped by admission.",
		    OBS_COUNTER },
		{ "ferry_table_evicted_total",
		    "Rows evicted (idle or budget).", OBS_COUNTER },
		{ "ferry_table_lookups_total", "Keys looked up.",
		    OBS_COUNTER },
		{ "ferry_table_hits_total",
		    "Keys looked up that were present.", OBS_COUNTER },
	};
	size_t           nt = s->pl != NULL ? s->pl->job->n_tables : 0;
	char             lab[300];
	struct tbl_stats st;
	// Declared in every job (no series without tables), as every
	// documented family is (docs/operations.md §11.2).
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		obs_write_family(w, fam[f].name, fam[f].help, fam[f].type);
		for (uint32_t t = 0; t < nt; t++) {
			uint64_t v[7];
			table_sum(s, t, &st);
			v[0] = st.rows;
			v[1] = st.bytes;
			v[2] = st.admitted;
			v[3] = st.rejected;
			v[4] = st.evicted;
			v[5] = st.lookups;
			v[6] = st.hits;
			label(s->pl->job->tables[t]->name, lab, sizeof(lab));
			obs_write_sample(w, fam[f].name, lab, (double) v[f]);
		}
	}
}
