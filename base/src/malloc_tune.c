// malloc_tune.c — fb_malloc_tune: keep glibc's allocator from handing a
// message's memory back to the kernel between one message and the next.
//
// DESIGN. Every request and reply nng receives is a fresh message of its
// whole size (about 1 MiB on the data path: a request carries whole
// shards up to the client's 1 MiB request size), freed once answered.
// With glibc's defaults such a block is either mmap'd (128 KiB threshold,
// raised to the largest block freed so far) and unmapped on free, or
// carved from a thread arena whose free top is given back (madvise) once
// it passes twice that threshold, which a few messages in flight do at
// every round. Either way the next message lands on fresh pages: a fault
// per 4 KiB page while nng's receive zero-fills the block, and a TLB
// flush on every CPU when it is unmapped. ps-server has set these two
// thresholds since its replicas showed about 100 faults per step per
// server; libferry's clients had not, and issue 30's sweep found it
// there (perf of loadgen, 1 server, 4 sync trainers: page faults under
// that zero fill, 17% of the client's CPU; rounds of 4 and 8 trainers
// took 3x longer per push-pull than rounds of 2, a cost growing faster
// than the work, gone with the settings). Fixed thresholds (either
// setting also stops glibc's dynamic raise) keep blocks up to MMAP_MAX in
// the arenas and up to TRIM_MAX of free memory there: a process's
// resident memory stays at its high-water mark, for a server its shards
// plus the messages of one busy round.
//
// An operator's own choice wins: with malloc settings in GLIBC_TUNABLES
// nothing is changed. Other C libraries (musl) and the sanitizers'
// allocators have no such knobs: nothing to do.
#include <stdlib.h>
#include <string.h>

#include "fb/fb.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// glibc's upper bound for M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2).
#define MMAP_MAX (32u << 20)
#define TRIM_MAX (128u << 20)

int
fb_malloc_tune(void)
{
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) &&                   \
    !defined(__SANITIZE_THREAD__)
	const char *t = getenv("GLIBC_TUNABLES");
	if (t != NULL && strstr(t, "glibc.malloc.") != NULL) {
		return 0;
	}
	// mallopt returns 1 on success.
	return mallopt(M_MMAP_THRESHOLD, (int) MMAP_MAX) == 1 &&
	    mallopt(M_TRIM_THRESHOLD, (int) TRIM_MAX) == 1;
#else
	return 0;
#endif
}
