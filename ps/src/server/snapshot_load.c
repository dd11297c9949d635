// snapshot_load.c — reading a server's snapshot file back: checking all
// of it (magic, format version, CRC, every record's bounds and its fit to
// the job, the table shards' rows images) before one shard is touched,
// then copying it into the shards and table shards the first map places
// here (ps__snap_restore) or a running server holds (ps__snap_rollback),
// and the stand-alone check (ps_snapshot_check). The format and the
// writing side are in snapshot.c, table records in rows_snap.c.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot.h"

// A record checked against the file's bounds: a dense shard's, or with
// table set a table shard's (tr).
struct snap_rec {
	int                      table;
	struct snap_trec         tr;
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
	uint32_t         format, index, n_rec, flags, n_trec;
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
		tbl_close(f->rec[i].tr.staged);
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
	f->format = fb_get_u32le(f->buf + 8);
	if (f->format < SNAP_FORMAT_V1 || f->format > SNAP_FORMAT) {
		return errmsg(msg, n, FB_EPROTO, path,
		    "format version %u; this build reads %u to %u", f->format,
		    SNAP_FORMAT_V1, SNAP_FORMAT);
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
	f->version = fb_get_u64le(f->buf + 16);
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
		if (f->format >= 3 && fb_get_u32le(p) == SNAP_TTAG) {
			char   why[256];
			size_t used;
			if (ps__tsnap_parse(p, end - off, &r->tr, &used, why,
			        sizeof(why)) != 0) {
				return errmsg(msg, n, FB_EPROTO, path,
				    "record %u: %s", i, why);
			}
			r->table = 1;
			f->n_trec++;
			off += used;
			continue;
		}
		r->tensor = fb_get_u32le(p);
		r->offset = fb_get_u64le(p + 8);
		r->len    = fb_get_u64le(p + 16);
		r->plen   = fb_get_u64le(p + 24);
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
		snprintf(msg, n,
		    "snapshot %s: version %llu, %u shards, %u table shards",
		    path, (unsigned long long) f.version, f.n_rec - f.n_trec,
		    f.n_trec);
	}
	snap_file_free(&f);
	return rv;
}

// snap_fit checks record r (of a format fmt file) against this server's
// job: the shard exists with the same slice and length, it carries the
// job's optimizer state, and the payload holds what the job's pull codec
// needs. Returns 1 when it is placed here, 0 when elsewhere
// (skipped), -1 (msg filled) when it does not fit. mu held.
static int
snap_fit(const struct ps_server *s, const char *path, const struct snap_rec *r,
    uint32_t fmt, int with_ref, char *msg, size_t n)
{
	const Pswire__TransferRequest *t = r->t;
	const struct srv_shard        *sh;
	uint64_t                       need;
	char                           why[160];

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
	if (with_ref != !s->job.pull_none) {
		errmsg(msg, n, 0, path,
		    "taken %s a pull codec, the job runs %s one",
		    with_ref ? "with" : "without",
		    s->job.pull_none ? "without" : "with");
		return -1;
	}
	if (ps__optim_state_fits(s, sh, t, why, sizeof(why)) != 0) {
		if (fmt == SNAP_FORMAT_V1) {
			errmsg(msg, n, 0, path,
			    "format 1 (taken before optimizers) holds no "
			    "optimizer state, but the job runs %s: restart "
			    "with --optimizer sgd, or without --restore",
			    fb_optim_name(s->job.optim.kind));
		} else {
			errmsg(msg, n, 0, path, "shard %u %s", t->shard, why);
		}
		return -1;
	}
	need = sh->len * 4 * (1 + (uint64_t) ps__shard_opt_bufs(s, sh));
	if (!s->job.pull_none) {
		// A log of another depth (a snapshot taken before the
		// depth was per job) is read and dropped:
		// ps__shard_load_state.
		if (t->n_log_base != t->n_log_len ||
		    t->n_log_crc != t->n_log_len || t->n_log_len == 0 ||
		    t->n_log_len > PS_DELTA_LOG) {
			errmsg(msg, n, 0, path, "shard %u: delta log of %zu",
			    t->shard, t->n_log_len);
			return -1;
		}
		need += sh->len * 4;
		for (size_t k = 0; k < t->n_log_len; k++) {
			if (t->log_len[k] >
			    comp_bound(&s->job.cpull, sh->len)) {
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

// snap_paths names this server's files once its index is known. mu held.
static void
snap_paths(struct ps_server *s)
{
	struct ps_snap *p = s->snap;
	snprintf(p->path, sizeof(p->path), "%s/server-%u.snap", p->dir,
	    s->index);
	snprintf(p->tmp, sizeof(p->tmp), "%s.tmp", p->path);
	snprintf(p->prev, sizeof(p->prev), "%s/server-%u.prev.snap", p->dir,
	    s->index);
}

// head_version reads the version in the header of the snapshot at path
// written by server idx: SNAP_NONE when there is none or the header is not
// one (the whole file is checked when it is loaded).
static uint64_t
head_version(const char *path, uint32_t idx)
{
	uint8_t h[SNAP_HDR];
	int     fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t r  = fd < 0 ? -1 : read(fd, h, sizeof(h));
	if (fd >= 0) {
		close(fd);
	}
	if (r != (ssize_t) sizeof(h) || memcmp(h, SNAP_MAGIC, 8) != 0 ||
	    fb_get_u32le(h + 12) != idx) {
		return SNAP_NONE;
	}
	return fb_get_u64le(h + 16);
}

void
ps__snap_scan(struct ps_server *s, uint64_t *held)
{
	struct ps_snap *p = s->snap;
	held[0] = held[1] = SNAP_NONE;
	if (p == NULL) {
		return;
	}
	snap_paths(s);
	p->held[0] = head_version(p->path, s->index);
	p->held[1] = head_version(p->prev, s->index);
	held[0]    = p->held[0];
	held[1]    = p->held[1];
}

// snap_read_version reads and checks this server's snapshot of version
// want (SNAP_NONE: the newest) from its file or the previous one into f.
// Errors as ps_snapshot_check, FB_ENOTFOUND when neither holds it (msg
// filled).
static int
snap_read_version(struct ps_server *s, uint64_t want, struct snap_file *f,
    const char **path, char *msg, size_t n)
{
	struct ps_snap *p  = s->snap;
	int             rv = snap_file_read(p->path, f, msg, n);
	*path              = p->path;
	if (rv == FB_OK && (want == SNAP_NONE || f->version == want)) {
		return FB_OK;
	}
	if (rv == FB_OK || rv == FB_ENOTFOUND) {
		char first[512];
		snprintf(first, sizeof(first), "%s", msg);
		snap_file_free(f);
		*path = p->prev;
		rv    = snap_file_read(p->prev, f, msg, n);
		if (rv == FB_OK && want != SNAP_NONE && f->version != want) {
			rv = FB_ENOTFOUND;
		}
		if (rv == FB_ENOTFOUND) {
			snap_file_free(f);
			*path = p->path;
			if (want == SNAP_NONE) {
				snprintf(msg, n, "%s", first);
			} else {
				errmsg(msg, n, FB_ENOTFOUND, p->path,
				    "no snapshot of version %llu there nor in "
				    "%s",
				    (unsigned long long) want, p->prev);
			}
		}
	}
	return rv;
}

// snap_check_all checks every record of f against the job of map pl
// before one shard is touched (the table shards' images placed here are
// loaded into new stores); *mine and *tmine count the shards and table
// shards placed here. FB_OK or FB_EPROTO (msg filled). mu held.
static int
snap_check_all(struct ps_server *s, const Pswire__Placement *pl,
    const char *path, struct snap_file *f, uint32_t *mine, uint32_t *tmine,
    char *msg, size_t n)
{
	int rv = FB_OK;
	*mine  = 0;
	*tmine = 0;
	if (f->index != s->index) {
		return errmsg(msg, n, FB_EPROTO, path,
		    "written by server %u, this is server %u", f->index,
		    s->index);
	}
	// Table shards named once each (a second record of one would hide
	// a missing one from the rollback's count).
	uint8_t *seen = fb_zalloc(pl->n_table_shards + 1);
	if (seen == NULL) {
		return errmsg(msg, n, FB_ENOMEM, path, "out of memory");
	}
	for (uint32_t i = 0; rv == FB_OK && i < f->n_rec; i++) {
		char why[384];
		int  fit;
		if (f->rec[i].table) {
			fit = ps__tsnap_fit(s, pl, &f->rec[i].tr, why,
			    sizeof(why));
			if (fit >= 0 && seen[f->rec[i].tr.id]++ != 0) {
				snprintf(why, sizeof(why),
				    "table shard %u has two records",
				    f->rec[i].tr.id);
				fit = -1;
			}
			if (fit < 0) {
				errmsg(msg, n, 0, path, "%s", why);
				rv = FB_EPROTO;
			}
			*tmine += fit > 0;
			continue;
		}
		fit = snap_fit(s, path, &f->rec[i], f->format,
		    (f->flags & SNAP_FLAG_REF) != 0, msg, n);
		if (fit < 0) {
			rv = FB_EPROTO;
		}
		*mine += fit > 0;
	}
	fb_free(seen);
	return rv;
}

// snap_load_all copies every record of f placed here into its shard;
// the table shards it holds no record of start empty at the trainers'
// version (adopt). mu held (or the server not serving yet).
static void
snap_load_all(struct ps_server *s, struct snap_file *f)
{
	for (uint32_t k = 0; k < s->n_tshards; k++) {
		s->tshards[k].adopt = 1;
	}
	for (uint32_t i = 0; i < f->n_rec; i++) {
		if (f->rec[i].table) {
			if (f->rec[i].tr.staged != NULL) {
				ps__tsnap_install(s, &f->rec[i].tr);
			}
			continue;
		}
		if (s->local[f->rec[i].t->shard] >= 0) {
			struct srv_shard *sh = &s->shards[f->rec[i].t->shard];
			ps__shard_load_state(s, sh, f->rec[i].t,
			    f->rec[i].payload);
			sh->version = f->rec[i].t->version;
			sh->init    = f->rec[i].t->init;
		}
	}
}

// snap_loaded loads f's records placed here (mine and tmine of them;
// the load began at t0) and records the restore in the stats. mu held
// (or the server not serving yet).
static void
snap_loaded(struct ps_server *s, struct snap_file *f, uint32_t mine,
    uint32_t tmine, uint64_t t0)
{
	struct ps_snap *p = s->snap;
	snap_load_all(s, f);
	p->restore_version = f->version;
	p->restore_shards  = mine;
	p->restore_tshards = tmine;
	p->restore_bytes   = f->len;
	p->restore_ns      = fb_clock_ns() - t0;
}

int
ps__snap_restore(struct ps_server *s, const Pswire__Placement *pl,
    uint64_t want)
{
	struct ps_snap  *p = s->snap;
	struct snap_file f;
	char             msg[512];
	const char      *path;
	uint64_t         t0   = fb_clock_ns();
	uint32_t         mine = 0, tmine = 0;
	int              rv, restore     = s->opts.restore;

	if (p == NULL) {
		return FB_OK;
	}
	snap_paths(s);
	if (restore == PS_RESTORE_NO && want == SNAP_NONE) {
		return FB_OK;
	}
	rv = snap_read_version(s, want, &f, &path, msg, sizeof(msg));
	if (rv == FB_ENOTFOUND && restore == PS_RESTORE_AUTO &&
	    want == SNAP_NONE) {
		FB_LOG(FB_LOG_NOTICE, "snapshot",
		    "no snapshot at %s: starting from the trainers' weights",
		    p->path);
		snap_file_free(&f);
		return FB_OK;
	}
	// Check every record before touching a shard.
	if (rv == FB_OK) {
		rv = snap_check_all(s, pl, path, &f, &mine, &tmine, msg,
		    sizeof(msg));
	}
	if (rv != FB_OK) {
		FB_LOG(FB_LOG_ERR, "snapshot", "refused, nothing loaded: %s",
		    msg);
		snap_file_free(&f);
		return rv;
	}
	snap_loaded(s, &f, mine, tmine, t0);
	FB_LOG(FB_LOG_NOTICE, "snapshot",
	    "restored %u of %u held shards and %u of %u table shards from "
	    "%s: the job rolls back to version %llu (the trainers resume "
	    "from there)",
	    mine, s->n_shards, tmine, s->n_tshards, path,
	    (unsigned long long) f.version);
	if (mine < s->n_shards) {
		FB_LOG(FB_LOG_WARN, "snapshot",
		    "%u shards placed here are not in %s: they start from "
		    "the trainers' initial weights",
		    s->n_shards - mine, path);
	}
	if (tmine < s->n_tshards) {
		FB_LOG(FB_LOG_WARN, "snapshot",
		    "%u table shards placed here are not in %s: their rows "
		    "start empty",
		    s->n_tshards - tmine, path);
	}
	snap_file_free(&f);
	return FB_OK;
}

// decoding reports whether a push is still decoding into a shard held
// here (outside the lock). mu held.
static int
decoding(const struct ps_server *s)
{
	for (size_t i = 0; i < s->n_global; i++) {
		for (uint32_t r = 0; s->local[i] >= 0 && r < s->trainers;
		     r++) {
			if (s->shards[i].state[r] == PS_SLOT_DECODING) {
				return 1;
			}
		}
	}
	return 0;
}

// round_reset forgets shard sh's round in progress and its clocks: the
// versions after the rollback's are redone from scratch. mu held.
static void
round_reset(struct ps_server *s, struct srv_shard *sh)
{
	memset(sh->state, PS_SLOT_FREE, s->trainers);
	ps__stage_drop(s, sh);
	if (sh->clock != NULL) {
		memset(sh->clock, 0, s->trainers * sizeof(*sh->clock));
	}
	sh->n_pushed     = 0;
	sh->samples      = 0;
	sh->round_t0     = 0;
	sh->stall_warned = 0;
}

int
ps__snap_rollback(struct ps_server *s, uint64_t version, uint64_t epoch)
{
	struct ps_snap  *p = s->snap;
	struct snap_file f;
	char             msg[512];
	const char      *path;
	uint64_t         t0   = fb_clock_ns();
	uint32_t         mine = 0, tmine = 0;
	int              rv;

	if (p == NULL) {
		FB_LOG(FB_LOG_ERR, "snapshot",
		    "the job rolls back to version %llu, but this server has "
		    "no --snapshot-dir: its shards keep their versions",
		    (unsigned long long) version);
		return FB_ESTATE;
	}
	// The file is read and checked as a file (format, checksums) outside
	// the lock: the server keeps serving (the scheduler's new map already
	// tells the trainers to stop). Its records are checked against the
	// shards placed here under mu, which guards them, and the shards are
	// then replaced in the same hold.
	rv = snap_read_version(s, version, &f, &path, msg, sizeof(msg));
	pthread_mutex_lock(&s->mu);
	if (rv == FB_OK) {
		rv = snap_check_all(s, s->pl, path, &f, &mine, &tmine, msg,
		    sizeof(msg));
	}
	if (rv == FB_OK && (mine < s->n_shards || tmine < s->n_tshards)) {
		rv = errmsg(msg, sizeof(msg), FB_EPROTO, path,
		    "holds %u of the %u shards and %u of the %u table shards "
		    "placed here",
		    mine, s->n_shards, tmine, s->n_tshards);
	}
	if (rv != FB_OK) {
		pthread_mutex_unlock(&s->mu);
		FB_LOG(FB_LOG_ERR, "snapshot",
		    "cannot roll back to version %llu, nothing loaded: %s",
		    (unsigned long long) version, msg);
		snap_file_free(&f);
		return rv;
	}
	while (decoding(s)) {
		pthread_cond_wait(&s->decoded, &s->mu);
	}
	snap_loaded(s, &f, mine, tmine, t0);
	for (size_t i = 0; i < s->n_global; i++) {
		if (s->local[i] >= 0 && !s->shards[i].backup) {
			round_reset(s, &s->shards[i]);
		}
	}
	if (p->state == SNAP_CAPTURING) {
		// Records of versions that are now undone: start again.
		p->state = SNAP_IDLE;
		if (p->call != NULL) {
			ps__server_reply_err(s, p->call,
			    PSWIRE__STATUS__ABORTED,
			    "the job rolled back to version %llu during the "
			    "snapshot",
			    (unsigned long long) version);
			p->call = NULL;
		}
	}
	s->rollback_epoch = epoch;
	// Every parked call waits for a version that will now be redone.
	ps__pull_abort_all(s, epoch);
	p->n_rollbacks++;
	pthread_mutex_unlock(&s->mu);
	FB_LOG(FB_LOG_NOTICE, "snapshot",
	    "rolled back to version %llu: %u shards and %u table shards "
	    "restored from %s (placement epoch %llu)",
	    (unsigned long long) version, mine, tmine, path,
	    (unsigned long long) epoch);
	snap_file_free(&f);
	return FB_OK;
}
