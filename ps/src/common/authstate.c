// authstate.c — what signing keeps on disk so that a restart on the same
// --state-dir cannot be replayed into (docs/security.md "What persists"):
// the job run and each sender's counter floor.
//
// DESIGN. Two files under the state dir:
// - auth.run: the job run (auth.c DESIGN), drawn from the OS's random
//   source when the file is missing (a new job) and written durably
//   (durable.c) before the scheduler serves; a restart reads it back, so
//   the members' requests, signed with the run they learned, still pass,
//   while requests recorded under an earlier job's run never do.
// - auth.floors and auth.floors.log: the highest request counter taken
//   from each sender. psw_auth_on_accept tells us of every counter before
//   the handler runs; we append a 16-byte record (role u8, 0 u8[3], id
//   u32, counter u64, little-endian) to the log with one write(2), which
//   survives the process dying at any point after it (the page cache).
//   The log is folded into auth.floors (a durable file: the records, then
//   a CRC) at start and whenever it passes LOG_MAX bytes, then truncated.
//   At start every sender's floor (auth.floors, then the log; a torn last
//   record is dropped) goes into psw_auth_set_floor, so each request
//   accepted before the restart is refused as a replay. The log is not
//   fsync'ed: a machine crash may lose its last records, a window that
//   the freshness bound (2 minutes by default) still closes.
// The scheduler takes control-plane requests only (registers, heartbeats,
// maps): one short write each is cheap next to the request itself.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "authstate.h"
#include "durable.h"
#include "fb/fb.h"

#define REC 16u
#define LOG_MAX (1u << 20)
#define RUN_MAGIC 0x4e555246u // "FRUN"

struct floor_ent {
	struct psw_ident who;
	uint64_t         counter;
};

struct ps_auth_state {
	char              dir[512];
	char              run_path[600], floors_path[600], log_path[600];
	char              tmp_path[610];
	int               log_fd;
	size_t            log_bytes;
	struct floor_ent *ent; // each sender's highest counter
	size_t            n, cap;
};

// rec_put writes one record.
static void
rec_put(uint8_t *p, struct psw_ident who, uint64_t counter)
{
	memset(p, 0, REC);
	p[0] = (uint8_t) who.role;
	fb_put_u32le(p + 4, who.id);
	fb_put_u64le(p + 8, counter);
}

// note raises who's floor in st to counter. FB_OK or FB_ENOMEM.
static int
note(struct ps_auth_state *st, struct psw_ident who, uint64_t counter)
{
	for (size_t i = 0; i < st->n; i++) {
		if (st->ent[i].who.role == who.role &&
		    st->ent[i].who.id == who.id) {
			if (counter > st->ent[i].counter) {
				st->ent[i].counter = counter;
			}
			return FB_OK;
		}
	}
	if (st->n == st->cap) {
		size_t            cap = st->cap ? st->cap * 2 : 32;
		struct floor_ent *ne  = fb_realloc(st->ent, cap * sizeof(*ne));
		if (ne == NULL) {
			return FB_ENOMEM;
		}
		st->ent = ne;
		st->cap = cap;
	}
	st->ent[st->n].who     = who;
	st->ent[st->n].counter = counter;
	st->n++;
	return FB_OK;
}

// read_file reads path whole into *buf (caller frees), length *len.
// Returns 0, ENOENT when missing, or another errno.
static int
read_file(const char *path, uint8_t **buf, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	long  n;

	*buf = NULL;
	*len = 0;
	if (fp == NULL) {
		return errno;
	}
	if (fseek(fp, 0, SEEK_END) != 0 || (n = ftell(fp)) < 0 ||
	    fseek(fp, 0, SEEK_SET) != 0) {
		fclose(fp);
		return EIO;
	}
	if ((*buf = fb_alloc((size_t) n + 1)) == NULL) {
		fclose(fp);
		return ENOMEM;
	}
	*len = fread(*buf, 1, (size_t) n, fp);
	fclose(fp);
	return 0;
}

// load_records notes every whole record of buf[0..len).
static int
load_records(struct ps_auth_state *st, const uint8_t *buf, size_t len)
{
	for (size_t off = 0; off + REC <= len; off += REC) {
		struct psw_ident who = { buf[off],
			fb_get_u32le(buf + off + 4) };
		if (who.role < PSW_ROLE_TRAINER ||
		    who.role > PSW_ROLE_OPERATOR) {
			continue; // zeroes a crash left: not a record
		}
		if (note(st, who, fb_get_u64le(buf + off + 8)) != FB_OK) {
			return FB_ENOMEM;
		}
	}
	return FB_OK;
}

// run_open reads the job run from st->run_path, or draws and writes one.
static int
run_open(struct ps_auth_state *st, uint64_t *run)
{
	uint8_t *buf;
	size_t   len;
	uint8_t  out[16];
	int      e = read_file(st->run_path, &buf, &len);

	if (e == 0) {
		int ok = len == sizeof(out) + 4 &&
		    fb_get_u32le(buf) == RUN_MAGIC &&
		    fb_crc32(0, buf, sizeof(out)) ==
		        fb_get_u32le(buf + sizeof(out));
		*run = ok ? fb_get_u64le(buf + 8) : 0;
		fb_free(buf);
		if (!ok || *run == 0) {
			FB_LOG(FB_LOG_ERR, "auth",
			    "%s is damaged (not %zu bytes, or a bad CRC): "
			    "remove it to start a new job run",
			    st->run_path, sizeof(out) + 4);
			return FB_ECORRUPT;
		}
		FB_LOG(FB_LOG_NOTICE, "auth", "job run %016llx (from %s)",
		    (unsigned long long) *run, st->run_path);
		return FB_OK;
	}
	if (e != ENOENT) {
		FB_LOG(FB_LOG_ERR, "auth", "cannot read %s: %s", st->run_path,
		    strerror(e));
		return FB_EINVAL;
	}
	*run = 0;
	while (*run == 0) {
		if (getrandom(run, sizeof(*run), 0) != sizeof(*run)) {
			return FB_ESYSERR | errno;
		}
	}
	fb_put_u32le(out, RUN_MAGIC);
	fb_put_u32le(out + 4, 1);
	fb_put_u64le(out + 8, *run);
	snprintf(st->tmp_path, sizeof(st->tmp_path), "%s.tmp", st->run_path);
	if (ps__durable_write(st->dir, st->run_path, st->tmp_path, out,
	        sizeof(out), "auth") != 0) {
		return FB_EINVAL;
	}
	FB_LOG(FB_LOG_NOTICE, "auth", "job run %016llx (new, kept in %s)",
	    (unsigned long long) *run, st->run_path);
	return FB_OK;
}

// fold writes st's floors durably to auth.floors and empties the log.
static int
fold(struct ps_auth_state *st)
{
	size_t   len = st->n * REC;
	uint8_t *buf = fb_alloc(len + 1);

	if (buf == NULL) {
		return FB_ENOMEM;
	}
	for (size_t i = 0; i < st->n; i++) {
		rec_put(buf + i * REC, st->ent[i].who, st->ent[i].counter);
	}
	snprintf(st->tmp_path, sizeof(st->tmp_path), "%s.tmp",
	    st->floors_path);
	int e = ps__durable_write(st->dir, st->floors_path, st->tmp_path, buf,
	    len, "auth");
	fb_free(buf);
	if (e != 0) {
		return FB_ESYSERR | e;
	}
	if (ftruncate(st->log_fd, 0) != 0) {
		return FB_ESYSERR | errno;
	}
	st->log_bytes = 0;
	return FB_OK;
}

// on_accept is the psw_auth hook: log the counter before it is acted on.
static int
on_accept(void *arg, struct psw_ident who, uint64_t counter)
{
	struct ps_auth_state *st = arg;
	uint8_t               rec[REC];

	rec_put(rec, who, counter);
	if (note(st, who, counter) != FB_OK ||
	    write(st->log_fd, rec, REC) != (ssize_t) REC) {
		return -1;
	}
	st->log_bytes += REC;
	if (st->log_bytes >= LOG_MAX && fold(st) != FB_OK) {
		// The log keeps growing; the floors stay right.
		FB_LOG(FB_LOG_WARN, "auth", "cannot fold %s into %s",
		    st->log_path, st->floors_path);
	}
	return 0;
}

// floors_open loads every floor into a and opens the log.
static int
floors_open(struct ps_auth_state *st, struct psw_auth *a)
{
	uint8_t *buf;
	size_t   len;
	int      e = read_file(st->floors_path, &buf, &len);

	if (e == 0) {
		int ok = len >= 4 &&
		    fb_crc32(0, buf, len - 4) == fb_get_u32le(buf + len - 4);
		if (!ok || load_records(st, buf, len - 4) != FB_OK) {
			fb_free(buf);
			FB_LOG(FB_LOG_ERR, "auth",
			    "%s is damaged (bad CRC): refusing to start, "
			    "since it cannot tell which requests were taken",
			    st->floors_path);
			return FB_ECORRUPT;
		}
		fb_free(buf);
	}
	if ((e = read_file(st->log_path, &buf, &len)) == 0) {
		int rv = load_records(st, buf, len);
		fb_free(buf);
		if (rv != FB_OK) {
			return rv;
		}
	}
	for (size_t i = 0; i < st->n; i++) {
		if (psw_auth_set_floor(a, st->ent[i].who,
		        st->ent[i].counter) != FB_OK) {
			return FB_ENOMEM;
		}
	}
	st->log_fd = open(st->log_path,
	    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (st->log_fd < 0) {
		FB_LOG(FB_LOG_ERR, "auth", "cannot open %s: %s", st->log_path,
		    strerror(errno));
		return FB_EINVAL;
	}
	return fold(st);
}

int
ps__auth_state_open(struct psw_auth *a, const char *state_dir,
    struct ps_auth_state **out)
{
	struct ps_auth_state *st;
	uint64_t              run = 0;
	int                   rv;

	*out = NULL;
	if (a == NULL) {
		return FB_OK;
	}
	if (state_dir == NULL || state_dir[0] == '\0') {
		// No state: every start is a new job run.
		while (run == 0) {
			if (getrandom(&run, sizeof(run), 0) != sizeof(run)) {
				return FB_ESYSERR | errno;
			}
		}
		psw_auth_set_run(a, run);
		FB_LOG(FB_LOG_INFO, "auth", "job run %016llx (no --state-dir)",
		    (unsigned long long) run);
		return FB_OK;
	}
	if ((st = fb_zalloc(sizeof(*st))) == NULL) {
		return FB_ENOMEM;
	}
	st->log_fd = -1;
	snprintf(st->dir, sizeof(st->dir), "%s", state_dir);
	snprintf(st->run_path, sizeof(st->run_path), "%s/auth.run", state_dir);
	snprintf(st->floors_path, sizeof(st->floors_path), "%s/auth.floors",
	    state_dir);
	snprintf(st->log_path, sizeof(st->log_path), "%s/auth.floors.log",
	    state_dir);
	if ((rv = run_open(st, &run)) != FB_OK ||
	    (rv = floors_open(st, a)) != FB_OK) {
		ps__auth_state_close(a, st);
		return rv;
	}
	psw_auth_set_run(a, run);
	psw_auth_on_accept(a, on_accept, st);
	*out = st;
	return FB_OK;
}

void
ps__auth_state_close(struct psw_auth *a, struct ps_auth_state *st)
{
	if (st == NULL) {
		return;
	}
	psw_auth_on_accept(a, NULL, NULL);
	if (st->log_fd >= 0) {
		close(st->log_fd);
	}
	fb_free(st->ent);
	fb_free(st);
}
