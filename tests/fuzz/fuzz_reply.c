// fuzz_reply.c — libFuzzer target: libferry's pull-reply application
// (clients/src/reply.c), driven in-process on a client built by hand: one
// server holding a 40-float tensor in two shards of 20, a pull reference
// per codec, and the versions the input declares. Input: codec index,
// the held versions of shards 0 and 1 (a byte each), then one reply
// frame (frame header, Header with a PullReply, payload) as a server
// sends it. Full shards, delta chains (decode-add into the reference,
// the CRC check, the version chain rules) and every refusal run as they
// do in a trainer; crashes, sanitizer reports and non-finite weights
// handed to the caller are the findings.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LEN 40u
#define SHARD 20u

static const char *specs[] = { "none", "fp16", "bf16", "q8", "q4", "q2",
	"sign", "topk:0.1", "topk:0.5+q8" };

static struct ferry_client c;
static struct conn         cn;
static Pswire__Placement   pl = PSWIRE__PLACEMENT__INIT;
static Pswire__ShardInfo   si[2], *sip[2] = { &si[0], &si[1] };
static char               *urls[1] = { "inproc://fuzz-reply" };
static uint64_t            shard_ver[2];
static uint8_t             need_full[2], ref_at[2];
static const float        *held[2];
static uint32_t            req[2] = { 0, 1 };
static struct slot         sl; // the request the reply answers
static float               ref0[LEN], w0[LEN];
static float              *refs[1] = { ref0 };

// setup builds the client's placement once; each input resets the rest.
static void
setup(void)
{
	pswire__shard_info__init(&si[0]);
	pswire__shard_info__init(&si[1]);
	si[0].len    = SHARD;
	si[1].offset = SHARD;
	si[1].len    = SHARD;
	pl.n_servers = 1;
	pl.servers   = urls;
	pl.n_shards  = 2;
	pl.shards    = sip;
	c.pl         = &pl;
	c.n_tensors  = 1;
	c.shard_ver  = shard_ver;
	c.need_full  = need_full;
	c.ref_at     = ref_at;
	c.held       = held;
	c.ref        = refs;
	c.conns      = &cn;
	c.n_conns    = 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct psw_frame f;
	const char      *why;
	struct xfer      x    = { 0 };
	float *const     w[1] = { w0 };

	if (size < 3) {
		return 0;
	}
	if (c.pl == NULL) {
		setup();
	}
	if (comp_codec_parse(specs[data[0] % (sizeof(specs) / sizeof(*specs))],
	        8, &c.cpull) != FB_OK) {
		abort();
	}
	shard_ver[0] = data[1];
	shard_ver[1] = data[2];
	need_full[0] = need_full[1] = 0;
	ref_at[0] = ref_at[1] = REF_HOST;
	memset(ref0, 0, sizeof(ref0));
	memset(w0, 0, sizeof(w0));
	sl.method       = PSWIRE__METHOD__PULL;
	sl.req          = req;
	sl.req_n        = 2;
	sl.m            = 0;
	sl.pull_weights = 0;
	c.has_sink      = 0;
	c.pull_stale    = 0;
	x.op            = OP_PULL;
	x.w             = w;
	if (psw_frame_parse(data + 3, size - 3, &f, &why) != FB_OK) {
		return 0;
	}
	Pswire__Header *h = pswire__header__unpack(NULL, f.hdr_len, f.hdr);
	if (h == NULL) {
		return 0;
	}
	if (ferry__reply_take(&c, &sl, &x, h, &f) == FERRY_OK) {
		// What was taken without a resync is what the caller trains
		// on: it must be finite.
		for (uint32_t s = 0; s < 2; s++) {
			for (uint32_t i = 0; i < SHARD && !need_full[s]; i++) {
				if (!isfinite(w0[s * SHARD + i])) {
					abort();
				}
			}
		}
	}
	pswire__header__free_unpacked(h, NULL);
	return 0;
}
