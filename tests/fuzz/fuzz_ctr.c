// fuzz_ctr.c — libFuzzer target: the CTR data reader (tr/ctr.h) on any
// bytes: tr_ctr_parse_line on the input as one line, and tr_ctr_load on
// it as a file (text, binary when it starts with the magic, gzip when it
// starts with gzip's). Both must refuse bad input with an explained error,
// never crash, and never leak.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fb/fb.h"
#include "tr/ctr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tr_ctr_data d;
	float              label, dense[TR_CTR_DENSE];
	uint64_t           keys[TR_CTR_CAT];
	char               err[512];
	size_t             used;
	FILE              *f;
	if (path[0] == '\0') {
		snprintf(path, sizeof(path), "/dev/shm/ferry-fuzz-ctr-%d",
		    (int) getpid());
	}
	err[0] = '\0';
	if (tr_ctr_parse_line((const char *) data, size, &label, dense, keys,
	        err, sizeof(err)) != FB_OK &&
	    err[0] == '\0') {
		abort(); // every refusal explains itself
	}
	f = fopen(path, "wb");
	if (f == NULL || fwrite(data, 1, size, f) != size) {
		abort();
	}
	fclose(f);
	used   = fb_used_memory();
	err[0] = '\0';
	if (tr_ctr_load(path, 0, &d, err, sizeof(err)) == FB_OK) {
		tr_ctr_fini(&d);
	} else if (err[0] == '\0' || d.n != 0 || d.keys != NULL) {
		abort();
	}
	if (fb_used_memory() != used) {
		abort(); // a leak on some path
	}
	return 0;
}
