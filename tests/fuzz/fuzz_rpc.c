// fuzz_rpc.c — libFuzzer target: every request a scheduler or a server
// decodes, driven in-process. A scheduler and a server of a running job
// (one trainer, on libferry, has declared and offered its weights) listen
// on inproc://; each input's first byte picks the role, the rest is sent
// as one raw message and its answer awaited (20 ms: the server parks at
// most 10 ms, so a parked call costs little of the fuzzer's time). A call the
// role parks is abandoned by closing the connection, which also drives the
// pipe_gone path. Crashes, hangs and sanitizer reports are the findings.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "ferry/ferry.h"
#include "ps/ps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ps_scheduler *sched;
static struct ps_server    *srv;
static ferry_client        *trainer;
static nng_socket           sock[2];
static int                  open_[2];

// dial opens role r's REQ socket (0: server, 1: scheduler).
static void
dial(int r)
{
	const char *url = r == 0 ? ps_server_url(srv)
	                         : ps_scheduler_url(sched);
	if (nng_req0_open(&sock[r]) != 0 ||
	    nng_dial(sock[r], url, NULL, 0) != 0) {
		abort();
	}
	nng_socket_set_ms(sock[r], NNG_OPT_RECVTIMEO, 20);
	nng_socket_set_ms(sock[r], NNG_OPT_REQ_RESENDTIME,
	    NNG_DURATION_INFINITE);
	open_[r] = 1;
}

// start brings the job up once: scheduler, server, one trainer that has
// declared two tensors, offered version 0 and pulled it.
static void
start(void)
{
	struct ps_scheduler_opts so   = PS_SCHEDULER_OPTS_INIT;
	struct ps_server_opts    o    = PS_SERVER_OPTS_INIT;
	struct ferry_opts        fo   = FERRY_OPTS_INIT;
	struct ferry_tensor_desc d[2] = { { "w", 40, FERRY_TENSOR_WEIGHTS },
		{ "b", 7, FERRY_TENSOR_WEIGHTS } };
	static float             w0[40], w1[7];
	float                   *wp[2] = { w0, w1 };
	fb_log_set_level(FB_LOG_ERR - 1); // silent: errors are expected here
	so.url         = "inproc://ferry-fuzz-sched";
	so.shard_bytes = 64;
	so.probe_bytes = 0;
	o.url          = "inproc://ferry-fuzz-srv";
	o.park_max_ms  = 10;
	if (ps_scheduler_open(&so, &sched) != FB_OK) {
		abort();
	}
	o.scheduler_url  = ps_scheduler_url(sched);
	fo.scheduler_url = o.scheduler_url;
	fo.codec_pull    = "q8";
	fo.timeout_ms    = 5000;
	if (ps_server_open(&o, &srv) != FB_OK ||
	    ferry_client_open(&fo, &trainer) != 0 ||
	    ferry_client_declare(trainer, d, 2) != 0 ||
	    ferry_client_init_weights(trainer, (const float *const *) wp) !=
	        0 ||
	    ferry_client_pull(trainer, wp) != 0) {
		fprintf(stderr, "fuzz_rpc: cannot start the job\n");
		abort();
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	nng_msg *m;
	if (sched == NULL) {
		start();
	}
	if (size < 1) {
		return 0;
	}
	int r = data[0] & 1;
	if (!open_[r]) {
		dial(r);
	}
	if (nng_msg_alloc(&m, size - 1) != 0) {
		return 0;
	}
	memcpy(nng_msg_body(m), data + 1, size - 1);
	if (nng_sendmsg(sock[r], m, 0) != 0) {
		nng_msg_free(m);
		return 0;
	}
	if (nng_recvmsg(sock[r], &m, 0) == 0) {
		nng_msg_free(m);
	} else {
		// Parked (or dropped): hang up, which answers what it parked.
		nng_close(sock[r]);
		open_[r] = 0;
	}
	return 0;
}
