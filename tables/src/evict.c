// evict.c — removing rows: idle rows (tbl_evict_idle) and rows past a
// byte budget (tbl_evict_to). First version: whole eviction to follow.
#include "tbl_impl.h"

size_t
tbl_evict_idle(struct tbl *t, uint64_t version)
{
	(void) t;
	(void) version;
	return 0;
}

size_t
tbl_evict_to(struct tbl *t, size_t budget, enum tbl_evict policy)
{
	(void) t;
	(void) budget;
	(void) policy;
	return 0;
}
