// durable.h — writing a file so that a crash leaves either the old file
// or the new one, whole (docs/style.md "Persistence"). Shared by the
// server's snapshots (snapshot.c) and the scheduler's state
// (scheduler_state.c).
#ifndef PS_DURABLE_H
#define PS_DURABLE_H

#include <stddef.h>
#include <stdint.h>

// ps__durable_write puts buf[0..len) followed by its CRC-32 (fb_crc32, 4
// bytes little-endian: the file's trailer) on disk as path, through tmp:
// tmp is created with O_CREAT|O_EXCL|O_NOFOLLOW (a stale one, left by a
// crash mid-write, is removed first), written, fsync'ed, closed, renamed
// over path, then the directory dir is fsync'ed. Returns 0 or an errno;
// on error the temp file is removed, the previous file at path is kept,
// and the failing step is logged under module. Blocks on the disk: never
// call it from an rpc callback on a hot path.
int ps__durable_write(const char *dir, const char *path, const char *tmp,
    const uint8_t *buf, size_t len, const char *module);

#endif // PS_DURABLE_H
