// fuzz_map.c — libFuzzer target: a placement map as a server receives it
// from the scheduler (or from a peer claiming to be it). Whatever
// ps__map_check accepts must be safe to build: every shard inside its
// tensor (offset + len without wrapping) and its staging buffers' size
// (len * 4 * trainers) computable without overflow.
#include <stdint.h>
#include <stdlib.h>

#include "server_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Pswire__Placement *pl = pswire__placement__unpack(NULL, size, data);
	if (pl == NULL) {
		return 0;
	}
	if (ps__map_check(pl) == FB_OK) {
		for (size_t i = 0; i < pl->n_shards; i++) {
			Pswire__ShardInfo *si = pl->shards[i];
			uint64_t tl  = pl->job->tensors[si->tensor]->len;
			uint64_t end = si->offset + si->len;
			if (end < si->offset || end > tl ||
			    si->len > UINT64_MAX / 4 / pl->trainers ||
			    si->server >= pl->n_servers) {
				abort(); // accepted a map it cannot build
			}
		}
	}
	pswire__placement__free_unpacked(pl, NULL);
	return 0;
}
