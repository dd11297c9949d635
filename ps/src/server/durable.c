// durable.c — a file written so that it survives a crash: temp file,
// write with a CRC trailer, fsync, close, rename, directory fsync (redis
// rdbSave). Used by the server's snapshots and the scheduler's state;
// each caller owns its own header and checks the CRC when it reads.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "durable.h"
#include "fb/fb.h"

// Files are written in chunks of this size, each CRC'ed just before it
// is written: the chunk is still in the cache for the kernel's copy, and
// one huge write() runs at a fraction of the disk's speed.
#define DURABLE_CHUNK (1u << 20)

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
	uint8_t  trailer[4];
	int      e = 0;

	for (size_t off = 0; off < len && e == 0; off += DURABLE_CHUNK) {
		size_t n = len - off < DURABLE_CHUNK ? len - off
		                                     : DURABLE_CHUNK;
		crc      = fb_crc32(crc, buf + off, n);
		e        = write_all(fd, buf + off, n);
	}
	fb_put_u32le(trailer, crc);
	return e != 0 ? e : write_all(fd, trailer, sizeof(trailer));
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
