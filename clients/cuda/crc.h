// crc.h — CRC-32 of fp32 buffers in fixed-size chunks, so that a GPU can
// checksum a reference it keeps without copying it back (private to
// libferry_cuda and tr).
//
// The value is zlib's crc32 (the IEEE polynomial, reflected, init and final
// xor 0xffffffff), the CRC the server sends with each pull delta
// (fb_crc32). A buffer of `bytes` bytes is cut into chunks of
// FCUDA_CRC_CHUNK bytes (the last one shorter); each chunk's CRC is computed
// independently (on the device: one thread per chunk, slice-by-4 tables),
// then the host folds them in order with zlib's crc32_combine.
// fcuda__crc_words is shared by the host (tests) and the device kernel, so
// the CPU tests check the very code the kernel runs.
#ifndef FCUDA_CRC_H
#define FCUDA_CRC_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define FCUDA_HD __host__ __device__
#else
#define FCUDA_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define FCUDA_CRC_CHUNK 4096u // bytes per chunk: a multiple of 4

// fcuda__crc_tables fills the slice-by-4 tables, four of 256 entries one
// after the other (T_k = t + 256 k): T_0 is the classic byte-at-a-time
// table of the reflected polynomial 0xedb88320, and
// T_k[i] = (T_{k-1}[i] >> 8) ^ T_0[T_{k-1}[i] & 0xff].
void fcuda__crc_tables(uint32_t t[1024]);

// fcuda__crc32_fold returns the CRC-32 of a buffer of `bytes` bytes from the
// CRC-32s of its chunks (ceil(bytes / FCUDA_CRC_CHUNK) of them, in order).
// 0 for bytes == 0 (zlib's crc32 of nothing).
uint32_t fcuda__crc32_fold(const uint32_t *chunk_crc, size_t bytes);

// fcuda__crc_words returns the CRC-32 of n_words little-endian 32-bit words
// (4 * n_words bytes, in memory order on a little-endian machine), from
// the tables of fcuda__crc_tables.
static inline FCUDA_HD uint32_t
fcuda__crc_words(const uint32_t *t, const uint32_t *w, size_t n_words)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n_words; i++) {
		c ^= w[i];
		c = t[768 + (c & 0xff)] ^ t[512 + ((c >> 8) & 0xff)] ^
		    t[256 + ((c >> 16) & 0xff)] ^ t[c >> 24];
	}
	return c ^ 0xffffffffu;
}

#ifdef __cplusplus
}
#endif
#endif // FCUDA_CRC_H
