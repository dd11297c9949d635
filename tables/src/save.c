// save.c — a shard's image for snapshots and moves. First version: images
// to follow.
#include "tbl_impl.h"

size_t
tbl_save_size(const struct tbl *t)
{
	(void) t;
	return 0;
}

void
tbl_save(const struct tbl *t, uint8_t *out)
{
	(void) t;
	(void) out;
}

const char *
tbl_load(struct tbl *t, const uint8_t *in, size_t len)
{
	(void) t;
	(void) in;
	(void) len;
	return "table images are not implemented yet";
}
