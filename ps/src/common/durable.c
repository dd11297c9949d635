// durable.c — a file written so that it survives a crash: temp file,
// write with a CRC trailer (O_DIRECT from an aligned bounce buffer where
// the file system allows: buffered writes stalled in the kernel's
// dirty-page throttling at a fraction of the disk's speed), fsync, close,
// rename, directory fsync (redis rdbSave). Used by the server's snapshots and
// the scheduler's state; each caller owns its own header and checks the CRC
// when it reads.
#define _GNU_SOURCE // O_DIRECT
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "durable.h"
#include "fb/fb.h"

// Files are written in chunks of this size, each CRC'ed while it is
// copied into the aligned bounce buffer it is written from.
#define DURABLE_CHUNK (4u << 20)
// O_DIRECT wants buffer addresses, lengths and file offsets aligned to
// the device's logical block; 4096 covers every common one.
#define DURABLE_ALIGN 4096u
// The CRC-32 trailer after the data.
#define DURABLE_TRAILER 4u

// write_all writes len bytes of buf to fd. Returns 0 or errno; *done
// (when not NULL) gets the bytes written either way.
static int
write_all(int fd, const uint8_t *buf, size_t len, size_t *done)
{
	size_t off = 0;
	int    e   = 0;
	while (off < len) {
		ssize_t n = write(fd, buf + off, len - off);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			e = n < 0 ? errno : EIO;
			break;
		}
		off += (size_t) n;
	}
	if (done != NULL) {
		*done = off;
	}
	return e;
}

// set_direct turns O_DIRECT on or off on fd. Returns 0 or errno.
static int
set_direct(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) {
		return errno;
	}
	fl = on ? fl | O_DIRECT : fl & ~O_DIRECT;
	return fcntl(fd, F_SETFL, fl) != 0 ? errno : 0;
}

// write_chunk writes n bytes of the aligned bounce buffer b: directly
// while *direct and n is a whole number of blocks, else buffered (the
// file's tail, or a file system that refused O_DIRECT: then *direct is
// cleared for the rest of the file). Returns 0 or errno.
static int
write_chunk(int fd, const uint8_t *b, size_t n, int *direct)
{
	if (*direct && n % DURABLE_ALIGN == 0) {
		size_t done = 0;
		int    e    = write_all(fd, b, n, &done);
		if (e != EINVAL || done != 0) {
			return e;
		}
		// Refused before a byte was written: go buffered.
	}
	if (*direct) {
		*direct = 0;
		int e   = set_direct(fd, 0);
		if (e != 0) {
			return e;
		}
	}
	return write_all(fd, b, n, NULL);
}

// write_crc writes len bytes of buf to fd, chunk by chunk, then their
// CRC-32 (the file's trailer). Returns 0 or errno.
static int
write_crc(int fd, const uint8_t *buf, size_t len)
{
	uint32_t crc = 0;
	int      e = 0, direct = set_direct(fd, 1) == 0;
	// One allocation per file (not a hot path), aligned by hand as
	// every allocation goes through fb_alloc.
	uint8_t *raw = fb_alloc(
	    DURABLE_CHUNK + DURABLE_TRAILER + DURABLE_ALIGN);
	if (raw == NULL) {
		return ENOMEM;
	}
	uint8_t *b = raw + (DURABLE_ALIGN - (uintptr_t) raw % DURABLE_ALIGN);

	for (size_t off = 0; e == 0; off += DURABLE_CHUNK) {
		size_t n = len - off < DURABLE_CHUNK ? len - off
		                                     : DURABLE_CHUNK;
		crc      = fb_crc32_copy(crc, b, buf + off, n);
		if (off + n == len) { // the last chunk carries the trailer
			fb_put_u32le(b + n, crc);
			size_t t = n + DURABLE_TRAILER,
			       a = t - t % DURABLE_ALIGN;
			e        = a > 0 ? write_chunk(fd, b, a, &direct) : 0;
			if (e == 0 && t > a) { // the unaligned tail: buffered
				e = write_chunk(fd, b + a, t - a, &direct);
			}
			break;
		}
		e = write_chunk(fd, b, n, &direct);
	}
	fb_free(raw);
	return e;
}

int
ps__durable_write(const char *dir, const char *path, const char *tmp,
    const uint8_t *buf, size_t len, const char *module)
{
	const char *step = "create";
	int         fd, e = 0, flags;

	flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	fd    = open(tmp, flags, 0644);
	if (fd < 0 && errno == EEXIST) {
		// Left by a crash mid-write: never a good file.
		unlink(tmp);
		fd = open(tmp, flags, 0644);
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
		e    = rename(tmp, path) != 0 ? errno : 0;
	}
	if (e != 0) {
		unlink(tmp);
		goto fail;
	}
	// The rename is durable once the directory is.
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		if (fsync(fd) != 0) {
			FB_LOG(FB_LOG_WARN, module, "fsync %s: %s", dir,
			    strerror(errno));
		}
		close(fd);
	}
	return 0;
fail:
	FB_LOG(FB_LOG_ERR, module, "%s %s: %s (previous file kept)", step,
	    step[0] == 'r' ? path : tmp, strerror(e));
	return e;
}
