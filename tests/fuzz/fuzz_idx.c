// fuzz_idx.c — libFuzzer target: the IDX image loader on any file (plain,
// or gzip when the input starts with gzip's magic), with a small valid
// label file beside it. The loader must refuse bad files with an error,
// and never allocate from the header more than the file backs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fb/fb.h"
#include "tr/tr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char img[64], lbl[64];

// init writes the label file (4 labels) once and picks the paths.
static void
init(void)
{
	static const uint8_t labels[12] = { 0, 0, 8, 1, 0, 0, 0, 4, 1, 2, 3,
		4 };
	snprintf(img, sizeof(img), "/dev/shm/ferry-fuzz-idx-%d.img",
	    (int) getpid());
	snprintf(lbl, sizeof(lbl), "/dev/shm/ferry-fuzz-idx-%d.lbl",
	    (int) getpid());
	FILE *f = fopen(lbl, "wb");
	if (f == NULL ||
	    fwrite(labels, 1, sizeof(labels), f) != sizeof(labels)) {
		abort();
	}
	fclose(f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tr_dataset ds;
	char              err[256];
	if (img[0] == '\0') {
		init();
	}
	FILE *f = fopen(img, "wb");
	if (f == NULL || fwrite(data, 1, size, f) != size) {
		abort();
	}
	fclose(f);
	size_t used = fb_used_memory();
	if (tr_dataset_load_idx(&ds, img, lbl, 10, err, sizeof(err)) ==
	    FB_OK) {
		tr_dataset_fini(&ds);
	} else if (err[0] == '\0') {
		abort(); // every refusal explains itself
	}
	if (fb_used_memory() != used) {
		abort(); // a leak on some path
	}
	return 0;
}
