// snapshot.c — a server's shards on disk: the snapshot file format, taking
// a snapshot (every --snapshot-every sync versions, or on request: the
// Snapshot rpc and ps_server_snapshot), the writer thread that puts it on
// disk, and restoring the file into the shards the first map gives this
// server (--restore).
//
// FORMAT (little-endian; format version 1). One file per server,
// DIR/server-<index>.snap, where <index> is the server index the
// scheduler gives at registration (the same index for the same advertised
// URL, so a server restarted with the same --advertise/--listen and
// --snapshot-dir finds its file):
//   header  32 bytes: "FERRYSNP", u32 format version, u32 server index,
//           u64 snapshot version (the lowest of its shards'), u32 records,
//           u32 flags (bit 0: the records carry a pull reference and
//           delta log)
//   record  per shard: u32 tensor, u32 hlen, u64 offset, u64 len (elements),
//           u64 plen, then hlen bytes of a packed TransferRequest (shard id,
//           version, init, ref_crc and the delta log's bases, crcs and
//           lengths; no staged pushes: a snapshot holds versions, not
//           rounds in progress), then plen payload bytes laid out as a
//           Transfer's (transfer.c): x, then ref and the log entries.
//   trailer u32 CRC-32 (fb_crc32) of every byte before it.
// Optimizer state: SGD has none; a later optimizer adds its buffers as
// more payload and bumps the format version.
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
//   and keeps the previous snapshot.
// - Loading: the whole file is read and checked (magic, format, CRC, every
//   record's bounds, protobuf and its fit to the map) before one shard is
//   touched, so a bad file is refused, naming the file, and nothing is
//   half-loaded.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server_impl.h"

#define SNAP_MAGIC "FERRYSNP"
#define SNAP_FORMAT 1u
#define SNAP_HDR 32
#define SNAP_REC 32
#define SNAP_TRAILER 4
#define SNAP_FLAG_REF 1u
// The packed TransferRequest of a record is at most this long (5 scalars
// and PS_DELTA_LOG entries of three varints).
#define SNAP_HMAX (64 + PS_DELTA_LOG * 32)

enum snap_state {
	SNAP_IDLE,      // nothing in the buffer
	SNAP_CAPTURING, // shards are copied in as they reach p->version
	SNAP_FULL,      // every shard is in: the writer's turn
	SNAP_WRITING,   // the writer owns the buffer
};

struct ps_snap {
	char            path[512], tmp[520];
	const char     *dir;
	uint64_t        every;
	pthread_t       thread;
	pthread_cond_t  wake; // on s->mu: the buffer is FULL, or quit
	pthread_cond_t  done; // on s->mu: a write finished (CLOCK_MONOTONIC)
	int             quit;
	int             state;     // enum snap_state
	int             requested; // the capture was asked for (not periodic)
	uint64_t        version;   // version being captured (0: "now")
	uint64_t        low;       // lowest version captured
	uint32_t        n_rec;
	uint8_t        *buf;
	size_t          cap, len;
	uint64_t        seq, done_seq; // captures begun, writes finished
	int             done_rv;
	uint64_t        done_version;
	struct ps_call *call; // a Snapshot rpc waiting for this capture
	uint64_t        skip_logged;
	// stats (under mu)
	uint64_t        n_written, n_failed, n_skipped;
	uint64_t        last_bytes, last_write_ns, last_version;
	uint64_t        restore_bytes, restore_ns, restore_version;
	uint32_t        restore_shards;
};

static void
put_u64(uint8_t *p, uint64_t v)
{
	fb_put_u32le(p, (uint32_t) v);
	fb_put_u32le(p + 4, (uint32_t) (v >> 32));
}

static uint64_t
get_u64(const uint8_t *p)
{
	return (uint64_t) fb_get_u32le(p) |
	    ((uint64_t) fb_get_u32le(p + 4) << 32);
}

// ---- taking a snapshot (mu held) ---------------------------------------------

static size_t
rec_bound(const struct ps_server *s, const struct srv_shard *sh)
{
	size_t b = SNAP_REC + SNAP_HMAX + sh->len * 4;
	if (!s->pull_none) {
		b += sh->len * 4 + (size_t) s->log_k * sh->log_cap;
	}
	return b;
}

// snap_begin starts capturing version v (0: every shard now) into the
// buffer, growing it if this server's shards outgrew it. Returns -1 when
// out of memory (nothing captured).
static int
snap_begin(struct ps_server *s, uint64_t v, int requested)
{
	struct ps_snap *p    = s->snap;
	size_t          need = SNAP_HDR + SNAP_TRAILER;
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0) {
			need += rec_bound(s, &s->shards[i]);
		}
	}
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
	p->n_rec     = 0;
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

	t.shard   = sh->id;
	t.version = sh->version;
	t.init    = sh->init != 0;
	if (!s->pull_none) {
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
	put_u64(r + 8, sh->offset);
	put_u64(r + 16, sh->len);
	put_u64(r + 24, plen);
	pswire__transfer_request__pack(&t, r + SNAP_REC);
	d = r + SNAP_REC + hl;
	memcpy(d, sh->x, sh->len * 4);
	d += sh->len * 4;
	if (!s->pull_none) {
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

// snap_maybe_full hands the buffer to the writer once every held shard is
// in it.
static void
snap_maybe_full(struct ps_server *s)
{
	struct ps_snap *p = s->snap;
	if (p->state != SNAP_CAPTURING || p->n_rec < s->n_shards) {
		return;
	}
	memcpy(p->buf, SNAP_MAGIC, 8);
	fb_put_u32le(p->buf + 8, SNAP_FORMAT);
	fb_put_u32le(p->buf + 12, s->index);
	put_u64(p->buf + 16, p->n_rec ? p->low : p->version);
	fb_put_u32le(p->buf + 24, p->n_rec);
	fb_put_u32le(p->buf + 28, s->pull_none ? 0 : SNAP_FLAG_REF);
	p->state = SNAP_FULL;
	pthread_cond_signal(&p->wake);
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
	if (p->every == 0 || v % p->every != 0 || s->mode != 0) {
		return;
	}
	if (p->state == SNAP_FULL || p->state == SNAP_WRITING) {
		if (p->skip_logged != v) {
			p->skip_logged = v;
			p->n_skipped++;
			FB_LOG(FB_LOG_WARN, "snapshot",
			    "version %llu not snapshotted: the previous "
			    "snapshot is still being written (raise "
			    "--snapshot-every)",
			    (unsigned long long) v);
		}
		return;
	}
	if (p->state == SNAP_CAPTURING && (p->requested || p->version > v)) {
		return;
	}
	// IDLE, or a periodic capture some shard never reached (it moved
	// away): start this version's.
	if (snap_begin(s, v, 0) == 0) {
		snap_add(s, sh);
		snap_maybe_full(s);
	}
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
	if (snap_begin(s, v, 1) != 0) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0 &&
		    (v == 0 || s->shards[i].version == v)) {
			snap_add(s, &s->shards[i]);
		}
	}
	*seq = p->seq;
	snap_maybe_full(s);
	return FB_OK;
}

// ---- writing ----------------------------------------------------------------

// Files are written in chunks of this size, each CRC'ed just before it
// is written: the chunk is still in the cache for the kernel's copy, and
// one huge write() runs at a fraction of the disk's speed.
#define SNAP_CHUNK (1u << 20)

// write_all writes len bytes of buf to fd. Returns 0 or errno.
static int
write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			return n < 0 ? errno : EIO;
		}
		buf += n;
		len -= (size_t) n;
	}
	return 0;
}

// write_crc writes len bytes of buf to fd, chunk by chunk, then their
// CRC-32 (the file's trailer). Returns 0 or errno.
static int
write_crc(int fd, const uint8_t *buf, size_t len)
{
	uint32_t crc = 0;
	uint8_t  trailer[SNAP_TRAILER];
	int      e = 0;

	for (size_t off = 0; off < len && e == 0; off += SNAP_CHUNK) {
		size_t n = len - off < SNAP_CHUNK ? len - off : SNAP_CHUNK;
		crc      = fb_crc32(crc, buf + off, n);
		e        = write_all(fd, buf + off, n);
	}
	fb_put_u32le(trailer, crc);
	return e != 0 ? e : write_all(fd, trailer, SNAP_TRAILER);
}

// snap_write_file puts buf and its CRC on disk as p->path through p->tmp:
// create exclusively, write, fsync, close, rename, fsync the directory.
// Returns 0
// or errno (logged, temp file removed, the old file kept).
static int
snap_write_file(struct ps_snap *p, const uint8_t *buf, size_t len)
{
	const char *step = "create";
	int         fd, e = 0, flags;

	flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	fd    = open(p->tmp, flags, 0644);
	if (fd < 0 && errno == EEXIST) {
		// Left by a crash mid-write: never a good snapshot.
		unlink(p->tmp);
		fd = open(p->tmp, flags, 0644);
	}
	if (fd < 0) {
		e = errno;
		goto fail;
	}
	step = "write";
	if ((e = write_crc(fd, buf, len)) == 0) {
		step = "fsync";
		e    = fsync(fd) != 0 ? errno : 0;
	}
	if (close(fd) != 0 && e == 0) {
		step = "close";
		e    = errno;
	}
	if (e == 0) {
		step = "rename";
		e    = rename(p->tmp, p->path) != 0 ? errno : 0;
	}
	if (e != 0) {
		unlink(p->tmp);
		goto fail;
	}
	// The rename is durable once the directory is.
	if ((fd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		if (fsync(fd) != 0) {
			FB_LOG(FB_LOG_WARN, "snapshot", "fsync %s: %s", p->dir,
			    strerror(errno));
		}
		close(fd);
	}
	return 0;
fail:
	FB_LOG(FB_LOG_ERR, "snapshot", "%s %s: %s (previous snapshot kept)",
	    step, step[0] == 'r' ? p->path : p->tmp, strerror(e));
	return e;
}

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
		uint64_t version = get_u64(p->buf + 16);
		uint64_t t0      = fb_clock_ns();
		pthread_mutex_unlock(&s->mu);

		int e = snap_write_file(p, p->buf, len);

		pthread_mutex_lock(&s->mu);
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
			    "version %llu: %u shards, %zu bytes to %s",
			    (unsigned long long) version, p->n_rec,
			    len + SNAP_TRAILER, p->path);
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
				r.shards     = p->n_rec;
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
	p->dir   = dir;
	p->every = s->opts.snapshot_every;
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

// snap_paths names this server's file once its index is known. mu held.
static void
snap_paths(struct ps_server *s)
{
	struct ps_snap *p = s->snap;
	snprintf(p->path, sizeof(p->path), "%s/server-%u.snap", p->dir,
	    s->index);
	snprintf(p->tmp, sizeof(p->tmp), "%s.tmp", p->path);
}

void
ps__on_snapshot(struct ps_server *s, struct ps_call *c)
{
	uint64_t v = 0, seq;
	int      rv;

	if (c->hdr->body_case == PSWIRE__HEADER__BODY_SNAPSHOT_REQ) {
		v = c->hdr->snapshot_req->version;
	}
	pthread_mutex_lock(&s->mu);
	if (s->snap == NULL) {
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
	    "restore_shards:%u\r\nrestore_bytes:%llu\r\nrestore_us:%llu\r\n",
	    p->dir, (unsigned long long) p->n_written,
	    (unsigned long long) p->n_failed,
	    (unsigned long long) p->n_skipped,
	    (unsigned long long) p->last_version,
	    (unsigned long long) p->last_bytes,
	    (unsigned long long) (p->last_write_ns / 1000),
	    (unsigned long long) p->restore_version, p->restore_shards,
	    (unsigned long long) p->restore_bytes,
	    (unsigned long long) (p->restore_ns / 1000));
}

// ---- loading ------------------------------------------------------------------

// A record checked against the file's bounds.
struct snap_rec {
	uint32_t                 tensor;
	uint64_t                 offset, len, plen;
	Pswire__TransferRequest *t;
	const uint8_t           *payload;
};

// A snapshot file read and checked: the bytes, the header's fields and
// the records.
struct snap_file {
	uint8_t         *buf;
	size_t           len;
	uint32_t         index, n_rec, flags;
	uint64_t         version;
	struct snap_rec *rec;
};

static void
snap_file_free(struct snap_file *f)
{
	for (uint32_t i = 0; f->rec != NULL && i < f->n_rec; i++) {
		if (f->rec[i].t != NULL) {
			pswire__transfer_request__free_unpacked(f->rec[i].t,
			    NULL);
		}
	}
	fb_free(f->rec);
	fb_free(f->buf);
	memset(f, 0, sizeof(*f));
}

static int errmsg(char *msg, size_t n, int rv, const char *path,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int
errmsg(char *msg, size_t n, int rv, const char *path, const char *fmt, ...)
{
	char    why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(msg, n, "snapshot %s: %s", path, why);
	return rv;
}

// snap_file_read reads path whole and checks its structure (not its fit to
// a job). Errors as ps_snapshot_check.
static int
snap_file_read(const char *path, struct snap_file *f, char *msg, size_t n)
{
	struct stat st;
	size_t      off;
	int         fd, e;

	memset(f, 0, sizeof(*f));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		e = errno;
		return errmsg(msg, n,
		    e == ENOENT ? FB_ENOTFOUND
		                : (int) (FB_ESYSERR | (unsigned) e),
		    path, "%s", strerror(e));
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return errmsg(msg, n, FB_EPROTO, path, "not a regular file");
	}
	f->len = (size_t) st.st_size;
	if (f->len < SNAP_HDR + SNAP_TRAILER) {
		close(fd);
		return errmsg(msg, n, FB_ECORRUPT, path,
		    "truncated: %zu bytes, shorter than a header", f->len);
	}
	if ((f->buf = fb_alloc(f->len)) == NULL) {
		close(fd);
		return errmsg(msg, n, FB_ENOMEM, path, "out of memory");
	}
	for (off = 0; off < f->len;) {
		ssize_t r = read(fd, f->buf + off, f->len - off);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			e = r < 0 ? errno : EIO;
			close(fd);
			return errmsg(msg, n,
			    (int) (FB_ESYSERR | (unsigned) e), path,
			    "read: %s", strerror(e));
		}
		off += (size_t) r;
	}
	close(fd);
	if (memcmp(f->buf, SNAP_MAGIC, 8) != 0) {
		return errmsg(msg, n, FB_EPROTO, path,
		    "not a Ferry snapshot (bad magic)");
	}
	if (fb_get_u32le(f->buf + 8) != SNAP_FORMAT) {
		return errmsg(msg, n, FB_EPROTO, path,
		    "format version %u; this build reads %u",
		    fb_get_u32le(f->buf + 8), SNAP_FORMAT);
	}
	uint32_t want = fb_get_u32le(f->buf + f->len - SNAP_TRAILER);
	uint32_t got  = fb_crc32(0, f->buf, f->len - SNAP_TRAILER);
	if (want != got) {
		return errmsg(msg, n, FB_ECORRUPT, path,
		    "CRC mismatch (file 0x%08x, computed 0x%08x): truncated "
		    "or corrupt",
		    want, got);
	}
	f->index   = fb_get_u32le(f->buf + 12);
	f->version = get_u64(f->buf + 16);
	f->n_rec   = fb_get_u32le(f->buf + 24);
	f->flags   = fb_get_u32le(f->buf + 28);
	if (f->n_rec > (f->len - SNAP_HDR) / SNAP_REC ||
	    (f->rec = fb_zalloc((f->n_rec + 1) * sizeof(*f->rec))) == NULL) {
		return errmsg(msg, n, FB_EPROTO, path, "%u records do not fit",
		    f->n_rec);
	}
	off = SNAP_HDR;
	for (uint32_t i = 0; i < f->n_rec; i++) {
		struct snap_rec *r   = &f->rec[i];
		size_t           end = f->len - SNAP_TRAILER;
		if (end - off < SNAP_REC) {
			return errmsg(msg, n, FB_EPROTO, path,
			    "record %u: cut short", i);
		}
		const uint8_t *p  = f->buf + off;
		uint32_t       hl = fb_get_u32le(p + 4);
		r->tensor         = fb_get_u32le(p);
		r->offset         = get_u64(p + 8);
		r->len            = get_u64(p + 16);
		r->plen           = get_u64(p + 24);
		off += SNAP_REC;
		if (hl > SNAP_HMAX || r->plen > end - off - hl ||
		    hl > end - off) {
			return errmsg(msg, n, FB_EPROTO, path,
			    "record %u: lengths %u + %llu pass the end", i, hl,
			    (unsigned long long) r->plen);
		}
		r->t = pswire__transfer_request__unpack(NULL, hl,
		    f->buf + off);
		if (r->t == NULL) {
			return errmsg(msg, n, FB_EPROTO, path,
			    "record %u: bad shard header", i);
		}
		r->payload = f->buf + off + hl;
		off += hl + r->plen;
	}
	if (off != f->len - SNAP_TRAILER) {
		return errmsg(msg, n, FB_EPROTO, path,
		    "%zu bytes after the last record",
		    f->len - SNAP_TRAILER - off);
	}
	return FB_OK;
}

int
ps_snapshot_check(const char *path, char *msg, size_t n)
{
	struct snap_file f;
	int              rv = snap_file_read(path, &f, msg, n);
	if (rv == FB_OK) {
		snprintf(msg, n, "snapshot %s: version %llu, %u shards", path,
		    (unsigned long long) f.version, f.n_rec);
	}
	snap_file_free(&f);
	return rv;
}

// snap_fit checks record r against this server's job: the shard exists
// with the same slice and length, and the payload holds what the job's
// pull codec needs. Returns 1 when it is placed here, 0 when elsewhere
// (skipped), -1 (msg filled) when it does not fit. mu held.
static int
snap_fit(const struct ps_server *s, const char *path, const struct snap_rec *r,
    int with_ref, char *msg, size_t n)
{
	const Pswire__TransferRequest *t = r->t;
	const struct srv_shard        *sh;
	uint64_t                       need;

	if (t->shard >= s->n_global) {
		errmsg(msg, n, 0, path, "shard %u: the job has %zu", t->shard,
		    s->n_global);
		return -1;
	}
	sh = &s->shards[t->shard];
	if (sh->tensor != r->tensor || sh->offset != r->offset ||
	    sh->len != r->len) {
		errmsg(msg, n, 0, path,
		    "shard %u is tensor %u [%llu, +%llu) but the job's is "
		    "tensor %u [%llu, +%llu): another job's snapshot?",
		    t->shard, r->tensor, (unsigned long long) r->offset,
		    (unsigned long long) r->len, sh->tensor,
		    (unsigned long long) sh->offset,
		    (unsigned long long) sh->len);
		return -1;
	}
	if (with_ref != !s->pull_none) {
		errmsg(msg, n, 0, path,
		    "taken %s a pull codec, the job runs %s one",
		    with_ref ? "with" : "without",
		    s->pull_none ? "without" : "with");
		return -1;
	}
	need = sh->len * 4;
	if (!s->pull_none) {
		if (t->n_log_base != s->log_k || t->n_log_crc != s->log_k ||
		    t->n_log_len != s->log_k) {
			errmsg(msg, n, 0, path, "shard %u: delta log of %zu",
			    t->shard, t->n_log_len);
			return -1;
		}
		need += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			if (t->log_len[k] > comp_bound(&s->cpull, sh->len)) {
				errmsg(msg, n, 0, path,
				    "shard %u: delta log entry too long",
				    t->shard);
				return -1;
			}
			need += t->log_len[k];
		}
	}
	if (need != r->plen) {
		errmsg(msg, n, 0, path,
		    "shard %u: %llu payload bytes, expected %llu", t->shard,
		    (unsigned long long) r->plen, (unsigned long long) need);
		return -1;
	}
	return s->local[t->shard] >= 0;
}

// snap_apply installs record r into its shard (checked by snap_fit).
static void
snap_apply(struct ps_server *s, const struct snap_rec *r)
{
	const Pswire__TransferRequest *t  = r->t;
	struct srv_shard              *sh = &s->shards[t->shard];
	const uint8_t                 *p  = r->payload;

	memcpy(sh->x, p, sh->len * 4);
	p += sh->len * 4;
	if (!s->pull_none) {
		memcpy(sh->ref, p, sh->len * 4);
		p += sh->len * 4;
		for (uint32_t k = 0; k < s->log_k; k++) {
			sh->log_base[k] = t->log_base[k];
			sh->log_crc[k]  = t->log_crc[k];
			sh->log_len[k]  = t->log_len[k];
			memcpy(sh->log + (size_t) k * sh->log_cap, p,
			    t->log_len[k]);
			p += t->log_len[k];
		}
		sh->ref_crc = t->ref_crc;
	}
	sh->version = t->version;
	sh->init    = t->init;
}

int
ps__snap_restore(struct ps_server *s)
{
	struct ps_snap  *p = s->snap;
	struct snap_file f;
	char             msg[512];
	uint64_t         t0   = fb_clock_ns();
	uint32_t         mine = 0;
	int              rv, restore = s->opts.restore;

	if (p == NULL) {
		return FB_OK;
	}
	snap_paths(s);
	if (restore == PS_RESTORE_NO) {
		return FB_OK;
	}
	rv = snap_file_read(p->path, &f, msg, sizeof(msg));
	if (rv == FB_ENOTFOUND && restore == PS_RESTORE_AUTO) {
		FB_LOG(FB_LOG_NOTICE, "snapshot",
		    "no snapshot at %s: starting from the trainers' weights",
		    p->path);
		snap_file_free(&f);
		return FB_OK;
	}
	if (rv == FB_OK && f.index != s->index) {
		rv = errmsg(msg, sizeof(msg), FB_EPROTO, p->path,
		    "written by server %u, this is server %u", f.index,
		    s->index);
	}
	// Check every record before touching a shard.
	for (uint32_t i = 0; rv == FB_OK && i < f.n_rec; i++) {
		int fit = snap_fit(s, p->path, &f.rec[i],
		    (f.flags & SNAP_FLAG_REF) != 0, msg, sizeof(msg));
		if (fit < 0) {
			rv = FB_EPROTO;
		}
		mine += fit > 0;
	}
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, "snapshot", "refused, nothing loaded: %s",
		    msg);
		snap_file_free(&f);
		return rv;
	}
	for (uint32_t i = 0; i < f.n_rec; i++) {
		if (s->local[f.rec[i].t->shard] >= 0) {
			snap_apply(s, &f.rec[i]);
		}
	}
	p->restore_version = f.version;
	p->restore_shards  = mine;
	p->restore_bytes   = f.len;
	p->restore_ns      = fb_clock_ns() - t0;
	FB_LOG(FB_LOG_NOTICE, "snapshot",
	    "restored %u of %u held shards from %s: the job rolls back to "
	    "version %llu (the trainers resume from there)",
	    mine, s->n_shards, p->path, (unsigned long long) f.version);
	if (mine < s->n_shards) {
		FB_LOG(FB_LOG_WARN, "snapshot",
		    "%u shards placed here are not in %s: they start from "
		    "the trainers' initial weights",
		    s->n_shards - mine, p->path);
	}
	snap_file_free(&f);
	return FB_OK;
}
