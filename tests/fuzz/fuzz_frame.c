// fuzz_frame.c — libFuzzer target: the 16-byte frame parser and the
// protobuf Header unpack, on any bytes a peer can send. A frame that
// parses must describe bytes inside the input.
#include <stdint.h>
#include <stdlib.h>

#include "ferry.pb-c.h"
#include "fb/fb.h"
#include "psw/psw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct psw_frame f;
	const char      *why = NULL;
	if (psw_frame_parse(data, size, &f, &why) != FB_OK) {
		return 0;
	}
	if (f.hdr < data || f.hdr + f.hdr_len > data + size ||
	    (f.payload_len > 0 &&
	        (f.payload < data ||
	            f.payload + f.payload_len > data + size))) {
		abort(); // a parsed frame must stay inside the input
	}
	Pswire__Header *h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	if (h != NULL) {
		(void) psw_status_name(h->status);
		pswire__header__free_unpacked(h, NULL);
	}
	return 0;
}
