// fuzz_codec.c — libFuzzer target: every codec's decoder and decode-add
// (the server decodes pushes, libferry decodes pull deltas) on any code
// bytes. Input: codec index, bucket, value count, then the code bytes.
// A decoder either refuses the bytes or writes exactly n values.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comp/comp.h"
#include "fb/fb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *specs[] = { "none", "fp16", "bf16", "q8", "q4", "q2",
	"sign", "topk:0.1", "topk:0.5" };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct comp_codec cc = COMP_CODEC_INIT;
	static float      out[1 << 14], ref[1 << 14];
	if (size < 5) {
		return 0;
	}
	const char *spec   = specs[data[0] % (sizeof(specs) / sizeof(*specs))];
	uint32_t    bucket = 1u + (uint32_t) (data[1] | (data[2] & 0x0f) << 8);
	size_t      n      = 1u + (size_t) ((data[3] | data[4] << 8) & 0x3fff);
	if (comp_codec_parse(spec, bucket, &cc) != FB_OK) {
		return 0;
	}
	data += 5;
	size -= 5;
	if (comp_decode(&cc, data, size, n, out) == FB_OK) {
		for (size_t i = 0; i < n; i++) {
			volatile float v = out[i]; // every value written
			(void) v;
		}
	}
	memset(ref, 0, n * sizeof(float));
	(void) comp_decode_add(&cc, data, size, n, ref);
	return 0;
}
