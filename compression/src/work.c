// work.c — the comp library's one workspace: a per-thread buffer for what
// an encoder needs beyond the caller's buffers (top-k's candidate list and
// the gathered values of the sparse composites, a few times k entries).
//
// A buffer per thread keeps every comp function reentrant without a
// workspace argument in the public API. It grows to the largest request
// the thread has made and is kept until the thread exits (a pthread key
// frees it then), so a trainer or server thread that encodes the same
// shapes step after step allocates once, on its first step, and never on
// the hot path after that. It comes from fb_alloc, so fb_used_memory counts
// it.
#include <pthread.h>

#include "comp_impl.h"

static pthread_key_t  work_key;
static int            work_key_ok;
static pthread_once_t work_once = PTHREAD_ONCE_INIT;

static _Thread_local void  *work_buf;
static _Thread_local size_t work_size;

static void
work_free(void *p)
{
	fb_free(p);
}

static void
work_key_make(void)
{
	work_key_ok = pthread_key_create(&work_key, work_free) == 0;
}

void *
comp__work(size_t bytes)
{
	if (bytes <= work_size)
		return work_buf;
	pthread_once(&work_once, work_key_make);
	if (!work_key_ok)
		return NULL;
	// a little headroom, so that a thread whose shapes vary a bit
	// settles after a few steps rather than growing on each
	size_t want = bytes + bytes / 4 + 4096;
	void  *p    = fb_alloc(want);
	if (p == NULL || pthread_setspecific(work_key, p) != 0) {
		fb_free(p);
		return NULL;
	}
	fb_free(work_buf);
	work_buf  = p;
	work_size = want;
	return p;
}
