// crc.c — the host half of crc.h: the slice-by-4 tables and the fold of
// per-chunk CRCs with zlib's crc32_combine.
#include <zlib.h>

#include "crc.h"

void
fcuda__crc_tables(uint32_t t[1024])
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++) {
			c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
		}
		t[i] = c;
	}
	for (uint32_t i = 256; i < 1024; i++) {
		t[i] = (t[i - 256] >> 8) ^ t[t[i - 256] & 0xff];
	}
}

uint32_t
fcuda__crc32_fold(const uint32_t *chunk_crc, size_t bytes)
{
	size_t   n, last;
	uint32_t crc;
	if (bytes == 0) {
		return 0;
	}
	n    = (bytes + FCUDA_CRC_CHUNK - 1) / FCUDA_CRC_CHUNK;
	last = bytes - (n - 1) * FCUDA_CRC_CHUNK;
	crc  = chunk_crc[0];
#if ZLIB_VERNUM >= 0x12c0
	// One precomputed operator for the full chunks (zlib >= 1.2.12).
	uLong op = crc32_combine_gen(FCUDA_CRC_CHUNK);
	for (size_t i = 1; i + 1 < n; i++) {
		crc = (uint32_t) crc32_combine_op(crc, chunk_crc[i], op);
	}
#else
	for (size_t i = 1; i + 1 < n; i++) {
		crc = (uint32_t) crc32_combine(crc, chunk_crc[i],
		    FCUDA_CRC_CHUNK);
	}
#endif
	if (n > 1) {
		crc = (uint32_t) crc32_combine(crc, chunk_crc[n - 1],
		    (z_off_t) last);
	}
	return crc;
}
