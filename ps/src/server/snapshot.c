// snapshot.c — a server's shards on disk: the snapshot file format, taking
// a snapshot (every --snapshot-every sync versions, or on request: the
// Snapshot rpc and ps_server_snapshot), the writer thread that puts it on
// disk, and restoring the file into the shards the first map gives this
// server (--restore).
//
// FORMAT (little-endian; format version 3). One file per server,
// DIR/server-<index>.snap (the newest; the one before it is kept as
// DIR/server-<index>.prev.snap for a rollback), where <index> is the server
// index the scheduler gives at registration (the same index for the same
// advertised URL, so a server restarted with the same --advertise/--listen and
// --snapshot-dir finds its file):
//   header  32 bytes: "FERRYSNP", u32 format version, u32 server index,
//           u64 snapshot version (the lowest of its dense shards', else
//           of its table shards'), u32 records (dense and table), u32
//           flags (bit 0: the records carry a pull reference and delta
//           log)
//   record  per shard: u32 tensor, u32 hlen, u64 offset, u64 len (elements),
//           u64 plen, then hlen bytes of a packed TransferRequest (shard id,
//           version, init, ref_crc and the delta log's bases, crcs and
//           lengths, the optimizer's name and state buffer count; no
//           staged pushes: a snapshot holds versions, not rounds in
//           progress), then plen payload bytes laid out as a Transfer's
//           (transfer.c): x, the optimizer state (optim_bufs x len
//           floats), then ref and the log entries.
//   or, per table shard (format 3), a record opening with u32
//           0xffffffff: its id, range, version, clocks and tbl_save
//           image of rows, optimizer and admission/eviction state
//           (rows_snap.c), in any order among the dense records.
//   trailer u32 CRC-32 (fb_crc32) of every byte before it.
// Format 2 is format 3 without table records, format 1 (before
// optimizers) format 2 without optimizer state: both still load (a job's
// table shards then start empty, taking the trainers' version); format 1
// is refused, naming the optimizer, by a job whose optimizer keeps state.
//
// TABLE SHARDS' VERSIONS. A table record holds the shard as it was at
// one hold of mu, at the version it records. A snapshot "now" (async,
// SSP, or version 0 asked) takes every table shard at the request, each
// at its own version (its count of updates). A sync snapshot of version
// V (asked, or every --snapshot-every) takes each table shard when it
// reaches V, like a dense shard, so that rows, optimizer state and dense
// weights are all of step V when the trainers push every table every
// step (ferry_client_step); a table shard already past V when the
// capture begins is taken at once at its own version. A restore and a
// rollback put each table shard back at its record's version.
//
// DESIGN.
// - Taking: under mu each shard's state is copied into one reused buffer
//   (p->buf; it grows only when this server's shards do, so a step never
//   allocates) when the shard reaches the snapshot's version; once every
//   held shard is in, the writer thread computes the CRC and writes the
//   file outside the lock. The cost under mu is one memcpy of the shard
//   (and its reference and log), the same as a Transfer's.
// - Writing (docs/style.md "Persistence"): a temp file opened with
//   O_CREAT|O_EXCL|O_NOFOLLOW, written, fsync'ed, closed, renamed over the
//   old file, then the directory fsync'ed. Any error removes the temp file
//   and keeps the previous snapshot. The bytes go out with O_DIRECT from
//   an aligned bounce buffer (CRC fused with the copy into it): buffered
//   writes of a few hundred MB ran at 0.15-0.3x of dd's speed here, as
//   the writer stalled in dirty-page throttling behind the server's own
//   large resident set, while direct writes skip the page cache and ran
//   at 2-4x dd's buffered speed (bench/snapshot.sh). A file system that
//   refuses O_DIRECT (tmpfs) gets buffered writes.
// - Loading: the whole file is read and checked (magic, format, CRC, every
//   record's bounds, protobuf and its fit to the map) before one shard is
//   touched, so a bad file is refused, naming the file, and nothing is
//   half-loaded.
// - Table shards: their images (tbl_save) are copied into the same
//   buffer under mu and written by the writer like the dense records;
//   the buffer grows for them at the capture and shrinks back to the
//   dense records' size after the write, so a second copy of the rows
//   lives only while a snapshot is taken and written.
// O_DIRECT is a Linux extension (see "writing" below for why it is used).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "snapshot.h"

// ---- taking a snapshot (mu held) ---------------------------------------------

static size_t
rec_bound(const struct ps_server *s, const struct srv_shard *sh)
{
	size_t b = SNAP_REC + SNAP_HMAX +
	    sh->len * 4 * (1 + ps__shard_opt_bufs(s, sh));
	if (!s->job.pull_none) {
		b += sh->len * 4 + (size_t) s->log_k * sh->log_cap;
	}
	return b;
}

// snap_begin starts capturing version v (0: every shard now) into the
// buffer, growing it if this server's shards outgrew it (table shards:
// their images now, and an eighth more for rows admitted before they
// reach v). Returns -1 when out of memory (nothing captured).
static int
snap_begin(struct ps_server *s, uint64_t v, int requested)
{
	struct ps_snap *p    = s->snap;
	size_t          need = SNAP_HDR + SNAP_TRAILER, tneed = 0;
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0) {
			need += rec_bound(s, &s->shards[i]);
		}
	}
	p->dense_cap = need;
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		tneed += ps__tsnap_size(s, &s->tshards[k]);
	}
	need += tneed + tneed / 8;
	if (need > p->cap) {
		uint8_t *nb = fb_realloc(p->buf, need);
		if (nb == NULL) {
			FB_LOG(FB_LOG_ERR, "snapshot",
			    "out of memory for a %zu-byte snapshot", need);
			return -1;
		}
		p->buf = nb;
		p->cap = need;
	}
	p->state     = SNAP_CAPTURING;
	p->requested = requested;
	p->version   = v;
	p->low       = UINT64_MAX;
	p->tlow      = UINT64_MAX;
	p->n_rec     = 0;
	p->n_trec    = 0;
	p->len       = SNAP_HDR;
	p->seq++;
	return 0;
}

// snap_add copies shard sh's state into the buffer as one record.
static void
snap_add(struct ps_server *s, const struct srv_shard *sh)
{
	struct ps_snap         *p = s->snap;
	Pswire__TransferRequest t = PSWIRE__TRANSFER_REQUEST__INIT;
	uint64_t                lb[PS_DELTA_LOG], ll[PS_DELTA_LOG];
	uint32_t                lc[PS_DELTA_LOG];
	uint64_t                plen = sh->len * 4;
	uint8_t                *r    = p->buf + p->len, *d;
	size_t                  hl;

	t.shard      = sh->id;
	t.version    = sh->version;
	t.init       = sh->init != 0;
	t.optim_bufs = ps__shard_opt_bufs(s, sh);
	t.optim      = (char *) fb_optim_name(s->job.optim.kind);
	plen += (uint64_t) t.optim_bufs * sh->len * 4;
	if (!s->job.pull_none) {
		for (uint32_t k = 0; k < s->log_k; k++) {
			int empty = sh->log_base[k] == UINT64_MAX;
			lb[k]     = sh->log_base[k];
			lc[k]     = sh->log_crc[k];
			ll[k]     = empty ? 0 : sh->log_len[k];
			plen += ll[k];
		}
		plen += sh->len * 4;
		t.ref_crc    = sh->ref_crc;
		t.n_log_base = t.n_log_crc = t.n_log_len = s->log_k;
		t.log_base                               = lb;
		t.log_crc                                = lc;
		t.log_len                                = ll;
	}
	hl = pswire__transfer_request__get_packed_size(&t);
	FB_ASSERT(hl <= SNAP_HMAX); // our own values, bounded by the format
	fb_put_u32le(r, sh->tensor);
	fb_put_u32le(r + 4, (uint32_t) hl);
	fb_put_u64le(r + 8, sh->offset);
	fb_put_u64le(r + 16, sh->len);
	fb_put_u64le(r + 24, plen);
	pswire__transfer_request__pack(&t, r + SNAP_REC);
	d = r + SNAP_REC + hl;
	memcpy(d, sh->x, sh->len * 4);
	d += sh->len * 4;
	if (t.optim_bufs > 0) {
		memcpy(d, sh->opt, (size_t) t.optim_bufs * sh->len * 4);
		d += (size_t) t.optim_bufs * sh->len * 4;
	}
	if (!s->job.pull_none) {
		memcpy(d, sh->ref, sh->len * 4);
		d += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			memcpy(d, sh->log + (size_t) k * sh->log_cap, ll[k]);
			d += ll[k];
		}
	}
	p->len += SNAP_REC + hl + plen;
	p->n_rec++;
	if (sh->version < p->low) {
		p->low = sh->version;
	}
}

// snap_shrink gives back the room the table shards' images took: they
// are not kept between snapshots (a second copy of the rows held for
// nothing). mu held; the buffer not in use.
static void
snap_shrink(struct ps_snap *p)
{
	if (p->dense_cap > 0 && p->cap > p->dense_cap) {
		uint8_t *nb = fb_realloc(p->buf, p->dense_cap);
		if (nb != NULL) {
			p->buf = nb;
			p->cap = p->dense_cap;
		}
	}
}

// snap_abandon gives up the capture in progress (out of memory): a
// Snapshot call and ps_server_snapshot waiting for it are told.
static void
snap_abandon(struct ps_server *s)
{
	struct ps_snap *p = s->snap;
	p->state          = SNAP_IDLE;
	snap_shrink(p);
	p->n_failed++;
	p->done_seq = p->seq;
	p->done_rv  = FB_ENOMEM;
	if (p->call != NULL) {
		ps__server_reply_err(s, p->call, PSWIRE__STATUS__INTERNAL,
		    "snapshot: out of memory for the table shards' rows");
		p->call = NULL;
	}
	pthread_cond_broadcast(&p->done);
}

// snap_tadd copies table shard ts's record (its rows image) into the
// buffer, growing it when the rows outgrew the room snap_begin left.
// Returns -1 when out of memory (the capture is abandoned).
static int
snap_tadd(struct ps_server *s, const struct srv_tshard *ts)
{
	struct ps_snap *p    = s->snap;
	size_t          need = ps__tsnap_size(s, ts);
	if (p->cap - p->len < need + SNAP_TRAILER) {
		size_t   cap = p->len + need + SNAP_TRAILER;
		uint8_t *nb  = fb_realloc(p->buf, cap + cap / 8);
		if (nb == NULL) {
			FB_LOG(FB_LOG_ERR, "snapshot",
			    "out of memory for table shard %u's %zu bytes: "
			    "snapshot abandoned",
			    ts->id, need);
			snap_abandon(s);
			return -1;
		}
		p->buf = nb;
		p->cap = cap + cap / 8;
	}
	ps__tsnap_write(s, ts, p->buf + p->len);
	p->len += need;
	p->n_rec++;
	p->n_trec++;
	if (ts->version < p->tlow) {
		p->tlow = ts->version;
	}
	return 0;
}

// snap_add_at adds every held shard at version v and every table shard
// at v or past it (0: all of them, now). A table shard past v is taken
// at its own version (a table the trainers do not push in step with the
// dense tensors): the capture never waits for a version it passed.
// Returns -1 when the capture was abandoned.
static int
snap_add_at(struct ps_server *s, uint64_t v)
{
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0 &&
		    (v == 0 || s->shards[i].version == v)) {
			snap_add(s, &s->shards[i]);
		}
	}
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		if (v == 0 || s->tshards[k].version >= v) {
			if (snap_tadd(s, &s->tshards[k]) != 0) {
				return -1;
			}
		}
	}
	return 0;
}

// snap_maybe_full hands the buffer to the writer once every held shard is
// in it.
static void
snap_maybe_full(struct ps_server *s)
{
	struct ps_snap *p     = s->snap;
	uint32_t        dense = p->n_rec - p->n_trec;
	if (p->state != SNAP_CAPTURING || dense < s->n_shards ||
	    p->n_trec < s->n_tshards) {
		return;
	}
	// The file's version is its dense shards' lowest (what the
	// scheduler's rollback matches), else its table shards'.
	memcpy(p->buf, SNAP_MAGIC, 8);
	fb_put_u32le(p->buf + 8, SNAP_FORMAT);
	fb_put_u32le(p->buf + 12, s->index);
	fb_put_u64le(p->buf + 16,
	    dense           ? p->low
	        : p->n_trec ? p->tlow
	                    : p->version);
	fb_put_u32le(p->buf + 24, p->n_rec);
	fb_put_u32le(p->buf + 28, s->job.pull_none ? 0 : SNAP_FLAG_REF);
	p->state = SNAP_FULL;
	pthread_cond_signal(&p->wake);
}

// snap_skip counts and logs (once) periodic version v, which a shard
// reached while the previous snapshot was still being written.
static void
snap_skip(struct ps_server *s, uint64_t v)
{
	struct ps_snap *p = s->snap;
	if (p->skip_logged != v) {
		p->skip_logged = v;
		p->n_skipped++;
		FB_LOG(FB_LOG_WARN, "snapshot",
		    "version %llu not snapshotted: the previous snapshot is "
		    "still being written (raise --snapshot-every)",
		    (unsigned long long) v);
	}
}

// snap_periodic starts --snapshot-every's capture of version v, which a
// shard (dense or table: whichever reaches v first) has just reached,
// unless one is in the way. mu held.
static void
snap_periodic(struct ps_server *s, uint64_t v)
{
	struct ps_snap *p = s->snap;
	if (p->every == 0 || v % p->every != 0 || s->job.mode != 0) {
		return;
	}
	if (p->state == SNAP_FULL || p->state == SNAP_WRITING) {
		snap_skip(s, v);
		return;
	}
	if (p->state == SNAP_CAPTURING && (p->requested || p->version > v)) {
		return;
	}
	// IDLE, or a periodic capture some shard never reached (it moved
	// away): start this version's.
	if (snap_begin(s, v, 0) == 0 && snap_add_at(s, v) == 0) {
		snap_maybe_full(s);
	}
}

void
ps__snap_on_version(struct ps_server *s, struct srv_shard *sh)
{
	struct ps_snap *p = s->snap;
	uint64_t        v = sh->version;

	if (p->state == SNAP_CAPTURING && p->version == v) {
		snap_add(s, sh);
		snap_maybe_full(s);
		return;
	}
	snap_periodic(s, v);
}

void
ps__snap_on_tversion(struct ps_server *s, struct srv_tshard *ts)
{
	struct ps_snap *p = s->snap;
	uint64_t        v = ts->version;

	if (p == NULL) {
		return;
	}
	if (p->state == SNAP_CAPTURING && p->version == v) {
		if (snap_tadd(s, ts) == 0) {
			snap_maybe_full(s);
		}
		return;
	}
	snap_periodic(s, v);
}

// snap_request starts a requested capture of version v (0: now). mu held.
// Returns FB_OK, FB_ESTATE (no placement, or a shard past v) or FB_EBUSY.
static int
snap_request(struct ps_server *s, uint64_t v, uint64_t *seq)
{
	struct ps_snap *p = s->snap;
	if (!atomic_load(&s->ready) || s->pl == NULL) {
		return FB_ESTATE;
	}
	if (p->state == SNAP_FULL || p->state == SNAP_WRITING ||
	    (p->state == SNAP_CAPTURING && p->requested)) {
		return FB_EBUSY;
	}
	for (size_t i = 0; v != 0 && i < s->n_global; i++) {
		if (s->local[i] >= 0 && s->shards[i].version > v) {
			return FB_ESTATE;
		}
	}
	if (snap_begin(s, v, 1) != 0 || snap_add_at(s, v) != 0) {
		return FB_ENOMEM;
	}
	*seq = p->seq;
	snap_maybe_full(s);
	return FB_OK;
}

// ---- writing ----------------------------------------------------------------

static void *
snap_writer(void *arg)
{
	struct ps_server *s = arg;
	struct ps_snap   *p = s->snap;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!p->quit && p->state != SNAP_FULL) {
			pthread_cond_wait(&p->wake, &s->mu);
		}
		if (p->state != SNAP_FULL) {
			break; // quit
		}
		p->state         = SNAP_WRITING;
		size_t   len     = p->len;
		uint64_t version = fb_get_u64le(p->buf + 16);
		uint64_t t0      = fb_clock_ns();
		uint64_t cur     = p->held[0];
		pthread_mutex_unlock(&s->mu);

		// The file in place becomes the previous one (kept for a
		// rollback) unless it already holds this version: a second
		// name for it is made first and takes the previous one's place
		// only once the new file is in, so a failed write changes
		// neither file.
		char keep[540];
		snprintf(keep, sizeof(keep), "%s.tmp", p->prev);
		(void) unlink(keep);
		int linked = cur != SNAP_NONE && cur != version &&
		    link(p->path, keep) == 0;
		int e = ps__durable_write(p->dir, p->path, p->tmp, p->buf, len,
		    "snapshot");
		int rotated = linked && e == 0 && rename(keep, p->prev) == 0;
		if (linked && !rotated) {
			(void) unlink(keep);
		}

		pthread_mutex_lock(&s->mu);
		snap_shrink(p);
		if (rotated) {
			p->held[1] = cur;
		}
		if (e == 0) {
			p->held[0] = version;
		}
		p->state    = SNAP_IDLE;
		p->done_seq = p->seq;
		p->done_rv  = e ? (int) (FB_ESYSERR | (unsigned) e) : FB_OK;
		p->done_version = version;
		if (e == 0) {
			p->n_written++;
			p->last_bytes    = len + SNAP_TRAILER;
			p->last_write_ns = fb_clock_ns() - t0;
			p->last_version  = version;
			FB_LOG(FB_LOG_INFO, "snapshot",
			    "version %llu: %u shards and %u table shards, "
			    "%zu bytes to %s",
			    (unsigned long long) version, p->n_rec - p->n_trec,
			    p->n_trec, len + SNAP_TRAILER, p->path);
		} else {
			p->n_failed++;
		}
		if (p->call != NULL) {
			Pswire__Header        h = PSWIRE__HEADER__INIT;
			Pswire__SnapshotReply r = PSWIRE__SNAPSHOT_REPLY__INIT;
			if (e != 0) {
				ps__server_reply_err(s, p->call,
				    PSWIRE__STATUS__INTERNAL,
				    "snapshot %s: %s", p->path, strerror(e));
			} else {
				r.version    = version;
				r.shards     = p->n_rec - p->n_trec;
				r.bytes      = len + SNAP_TRAILER;
				h.request_id = p->call->hdr->request_id;
				h.body_case =
				    PSWIRE__HEADER__BODY_SNAPSHOT_REP;
				h.snapshot_rep = &r;
				ps__call_reply(p->call, &h);
			}
			p->call = NULL;
		}
		pthread_cond_broadcast(&p->done);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

// ---- open, close, requests -----------------------------------------------------

int
ps__snap_open(struct ps_server *s)
{
	struct ps_snap    *p;
	pthread_condattr_t ca;
	const char        *dir = s->opts.snapshot_dir;
	struct stat        st;

	if (dir == NULL || *dir == '\0') {
		return FB_OK;
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		FB_LOG(FB_LOG_ERR, "snapshot", "--snapshot-dir %s: %s", dir,
		    errno ? strerror(errno) : "not a directory");
		return FB_EINVAL;
	}
	if ((p = fb_zalloc(sizeof(*p))) == NULL) {
		return FB_ENOMEM;
	}
	p->dir     = dir;
	p->every   = s->opts.snapshot_every;
	p->held[0] = p->held[1] = SNAP_NONE;
	pthread_cond_init(&p->wake, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->done, &ca);
	pthread_condattr_destroy(&ca);
	s->snap = p;
	pthread_create(&p->thread, NULL, snap_writer, s);
	return FB_OK;
}

void
ps__snap_close(struct ps_server *s)
{
	struct ps_snap *p = s->snap;
	if (p == NULL) {
		return;
	}
	pthread_mutex_lock(&s->mu);
	p->quit = 1;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&s->mu);
	pthread_join(p->thread, NULL);
	// rpc callbacks may still run: they read s->snap under mu.
	pthread_mutex_lock(&s->mu);
	if (p->call != NULL) {
		ps__server_reply_err(s, p->call, PSWIRE__STATUS__UNAVAILABLE,
		    "server closing before its snapshot was complete");
	}
	s->snap = NULL;
	pthread_mutex_unlock(&s->mu);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done);
	fb_free(p->buf);
	fb_free(p);
}

// snap_query answers a Snapshot query: the highest and lowest versions
// of the shards and table shards held here (the scheduler picks one
// version for every server from these), and how many shards. Writes
// nothing. mu held.
static void
snap_query(struct ps_server *s, struct ps_call *c)
{
	Pswire__Header        h = PSWIRE__HEADER__INIT;
	Pswire__SnapshotReply r = PSWIRE__SNAPSHOT_REPLY__INIT;
	if (!atomic_load(&s->ready) || s->pl == NULL) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__UNAVAILABLE,
		    "no placement yet");
		return;
	}
	r.low = UINT64_MAX;
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0) {
			uint64_t v = s->shards[i].version;
			r.version  = v > r.version ? v : r.version;
			r.low      = v < r.low ? v : r.low;
		}
	}
	// Table shards count too: a sync snapshot of V waits for them (a
	// server holding only table shards reports theirs).
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		uint64_t v = s->tshards[k].version;
		r.version  = v > r.version ? v : r.version;
		r.low      = v < r.low ? v : r.low;
	}
	r.low          = r.low == UINT64_MAX ? r.version : r.low;
	r.shards       = s->n_shards;
	h.request_id   = c->hdr->request_id;
	h.body_case    = PSWIRE__HEADER__BODY_SNAPSHOT_REP;
	h.snapshot_rep = &r;
	ps__call_reply(c, &h);
}

void
ps__on_snapshot(struct ps_server *s, struct ps_call *c)
{
	uint64_t v = 0, seq;
	int      rv;

	// Snapshots (and their queries) are the scheduler's, forwarding an
	// operator's request, or an operator's (with authentication on).
	if (!ps__call_acts_as(c, PSW_ROLE_SCHEDULER, 0, 1)) {
		return;
	}
	if (c->hdr->body_case == PSWIRE__HEADER__BODY_SNAPSHOT_REQ) {
		v = c->hdr->snapshot_req->version;
	}
	pthread_mutex_lock(&s->mu);
	if (c->hdr->body_case == PSWIRE__HEADER__BODY_SNAPSHOT_REQ &&
	    c->hdr->snapshot_req->query) {
		snap_query(s, c);
	} else if (s->snap == NULL) {
		ps__server_reply_err(s, c, PSWIRE__STATUS__FAILED_PRECONDITION,
		    "this server has no --snapshot-dir");
	} else if ((rv = snap_request(s, v, &seq)) == FB_OK) {
		s->snap->call = c; // the writer answers
	} else {
		ps__server_reply_err(s, c,
		    rv == FB_EBUSY ? PSWIRE__STATUS__UNAVAILABLE
		                   : PSWIRE__STATUS__FAILED_PRECONDITION,
		    "snapshot at version %llu: %s", (unsigned long long) v,
		    rv == FB_EBUSY ? "another snapshot is in progress; retry"
		        : rv == FB_ESTATE
		        ? "no placement yet, or a shard is past "
		          "that version"
		        : fb_strerror(rv));
	}
	pthread_mutex_unlock(&s->mu);
}

int
ps_server_snapshot(struct ps_server *s, uint64_t version, uint32_t timeout_ms,
    uint64_t *written)
{
	struct ps_snap *p = s->snap;
	uint64_t        seq, end = fb_clock_ms() + timeout_ms;
	struct timespec ts = { (time_t) (end / 1000),
		(long) (end % 1000) * 1000000L };
	int             rv;

	if (p == NULL) {
		return FB_ESTATE;
	}
	pthread_mutex_lock(&s->mu);
	rv = snap_request(s, version, &seq);
	while (rv == FB_OK && p->done_seq < seq) {
		if (pthread_cond_timedwait(&p->done, &s->mu, &ts) != 0 &&
		    p->done_seq < seq) {
			rv = FB_ETIMEDOUT;
		}
	}
	if (rv == FB_OK) {
		rv = p->done_rv;
		if (written != NULL) {
			*written = p->done_version;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rv;
}

size_t
ps__snap_held(struct ps_server *s, uint64_t *held, protobuf_c_boolean *has)
{
	size_t n = 0;
	// s->snap is set before the boot thread starts and cleared after it
	// ended: no lock to read it.
	*has = s->snap != NULL;
	if (s->snap == NULL) {
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	// While a snapshot is taken or written, the older file may be
	// rotated out at any moment: only the newer one is sure to stay.
	int keep = s->snap->state != SNAP_IDLE ? 1 : SNAP_KEEP;
	for (int k = 0; k < keep; k++) {
		if (s->snap->held[k] != SNAP_NONE) {
			held[n++] = s->snap->held[k];
		}
	}
	pthread_mutex_unlock(&s->mu);
	return n;
}

void
ps__snap_stats(struct ps_server *s, char *buf, size_t n)
{
	struct ps_snap *p = s->snap;
	if (p == NULL) {
		snprintf(buf, n, "# Snapshot\r\nsnapshot_dir:\r\n");
		return;
	}
	snprintf(buf, n,
	    "# Snapshot\r\nsnapshot_dir:%s\r\nsnapshots_written:%llu\r\n"
	    "snapshots_failed:%llu\r\nsnapshots_skipped:%llu\r\n"
	    "snapshot_version:%llu\r\nsnapshot_bytes:%llu\r\n"
	    "snapshot_write_us:%llu\r\nrestore_version:%llu\r\n"
	    "restore_shards:%u\r\nrestore_table_shards:%u\r\n"
	    "restore_bytes:%llu\r\nrestore_us:%llu\r\n"
	    "rollbacks:%llu\r\n",
	    p->dir, (unsigned long long) p->n_written,
	    (unsigned long long) p->n_failed,
	    (unsigned long long) p->n_skipped,
	    (unsigned long long) p->last_version,
	    (unsigned long long) p->last_bytes,
	    (unsigned long long) (p->last_write_ns / 1000),
	    (unsigned long long) p->restore_version, p->restore_shards,
	    p->restore_tshards, (unsigned long long) p->restore_bytes,
	    (unsigned long long) (p->restore_ns / 1000),
	    (unsigned long long) p->n_rollbacks);
}
