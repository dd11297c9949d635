// seeds.c — fuzz_seeds: writes the seed corpora of tests/fuzz (one file
// per well-formed example of what each target reads) into DIR/<target>/.
// Run after changing the wire format: fuzz_seeds tests/fuzz/corpus.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "comp/comp.h"
#include "ferry.pb-c.h"
#include "fb/fb.h"
#include "psw/psw.h"

static const char *root;

// put writes n bytes as DIR/target/name.
static void
put(const char *target, const char *name, const void *b, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, target);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
	FILE *f = fopen(path, "wb");
	if (f == NULL || fwrite(b, 1, n, f) != n) {
		fprintf(stderr, "fuzz_seeds: %s: %s\n", path, strerror(errno));
		return;
	}
	fclose(f);
}

// frame writes a framed request (method, header h, payload of plen
// bytes 0x11) into out (prefixed by `prefix` bytes, 0 or 1) and returns
// its size.
static size_t
frame(uint8_t *out, int prefix, uint8_t method, Pswire__Header *h, size_t plen)
{
	size_t hl = pswire__header__pack(h, out + prefix + PSW_FRAME_HDR);
	psw_frame_put(out + prefix, method, 0, (uint32_t) hl, (uint32_t) plen);
	memset(out + prefix + PSW_FRAME_HDR + hl, 0x11, plen);
	return prefix + PSW_FRAME_HDR + hl + plen;
}

// requests writes one seed per request kind for target, each message
// prefixed by `prefix` bytes (fuzz_rpc's role byte: role).
static void
requests(const char *target, int prefix)
{
	static uint8_t out[1 << 16];
	uint32_t       ids[2] = { 0, 1 };
	size_t         n;
	{ // Pull of shards 0 and 1 at version 0
		Pswire__Header      h = PSWIRE__HEADER__INIT;
		Pswire__PullRequest p = PSWIRE__PULL_REQUEST__INIT;
		h.request_id          = 1;
		h.epoch               = 1;
		h.deadline_ms         = 50;
		h.body_case           = PSWIRE__HEADER__BODY_PULL_REQ;
		h.pull_req            = &p;
		p.n_shards            = 2;
		p.shards              = ids;
		out[0]                = 0;
		n = frame(out, prefix, PSWIRE__METHOD__PULL, &h, 0);
		put(target, "pull", out, n);
	}
	{ // Push of shard 0 (16 floats), version 0, fp32
		Pswire__Header      h = PSWIRE__HEADER__INIT;
		Pswire__PushRequest p = PSWIRE__PUSH_REQUEST__INIT;
		Pswire__ShardRef    r = PSWIRE__SHARD_REF__INIT, *rp = &r;
		h.request_id  = 2;
		h.epoch       = 1;
		h.deadline_ms = 50;
		h.body_case   = PSWIRE__HEADER__BODY_PUSH_REQ;
		h.push_req    = &p;
		p.n_shards    = 1;
		p.shards      = &rp;
		p.n_samples   = 1;
		r.length      = 64;
		out[0]        = 0;
		n = frame(out, prefix, PSWIRE__METHOD__PUSH, &h, 64);
		put(target, "push", out, n);
		n = frame(out, prefix, PSWIRE__METHOD__PUSH_PULL, &h, 64);
		put(target, "push_pull", out, n);
	}
	{ // Probe
		Pswire__Header       h = PSWIRE__HEADER__INIT;
		Pswire__ProbeRequest p = PSWIRE__PROBE_REQUEST__INIT;
		h.body_case            = PSWIRE__HEADER__BODY_PROBE_REQ;
		h.probe_req            = &p;
		p.reply_bytes          = 1024;
		out[0]                 = 0;
		n = frame(out, prefix, PSWIRE__METHOD__PROBE, &h, 16);
		put(target, "probe", out, n);
	}
	{ // Transfer of shard 0 with no state
		Pswire__Header          h     = PSWIRE__HEADER__INIT;
		Pswire__TransferRequest t     = PSWIRE__TRANSFER_REQUEST__INIT;
		uint8_t                 st[1] = { 0 };
		h.epoch                       = 2;
		h.body_case    = PSWIRE__HEADER__BODY_TRANSFER_REQ;
		h.transfer_req = &t;
		t.state.len    = 1;
		t.state.data   = st;
		t.version      = 3;
		t.init         = 1;
		out[0]         = 0;
		n = frame(out, prefix, PSWIRE__METHOD__TRANSFER, &h, 64);
		put(target, "transfer", out, n);
	}
	{ // Register (trainer rank 0, a job of one tensor), GetPlacement,
	  // Heartbeat, ReportLinks, Leave, Stats: the scheduler's requests
		Pswire__Header          h  = PSWIRE__HEADER__INIT;
		Pswire__RegisterRequest rr = PSWIRE__REGISTER_REQUEST__INIT;
		Pswire__JobConfig       j  = PSWIRE__JOB_CONFIG__INIT;
		Pswire__TensorDesc td = PSWIRE__TENSOR_DESC__INIT, *tp = &td;
		td.name        = "w";
		td.len         = 40;
		j.n_tensors    = 1;
		j.tensors      = &tp;
		j.lr           = 0.1;
		j.codec_push   = "none";
		j.codec_pull   = "q8";
		rr.role        = PSWIRE__ROLE__ROLE_TRAINER;
		rr.job         = &j;
		h.body_case    = PSWIRE__HEADER__BODY_REGISTER_REQ;
		h.register_req = &rr;
		out[0]         = 1;
		n = frame(out, prefix, PSWIRE__METHOD__REGISTER, &h, 0);
		put(target, "register", out, n);

		Pswire__Header              g = PSWIRE__HEADER__INIT;
		Pswire__GetPlacementRequest gp =
		    PSWIRE__GET_PLACEMENT_REQUEST__INIT;
		gp.min_epoch    = 1;
		g.deadline_ms   = 50;
		g.body_case     = PSWIRE__HEADER__BODY_PLACEMENT_REQ;
		g.placement_req = &gp;
		n = frame(out, prefix, PSWIRE__METHOD__GET_PLACEMENT, &g, 0);
		put(target, "get_placement", out, n);

		Pswire__Header       l  = PSWIRE__HEADER__INIT;
		Pswire__LeaveRequest lr = PSWIRE__LEAVE_REQUEST__INIT;
		lr.role                 = PSWIRE__ROLE__ROLE_TRAINER;
		l.body_case             = PSWIRE__HEADER__BODY_LEAVE_REQ;
		l.leave_req             = &lr;
		n = frame(out, prefix, PSWIRE__METHOD__HEARTBEAT, &l, 0);
		put(target, "heartbeat", out, n);

		Pswire__Header             rl = PSWIRE__HEADER__INIT;
		Pswire__ReportLinksRequest rq =
		    PSWIRE__REPORT_LINKS_REQUEST__INIT;
		double rtt[1] = { 0.001 }, bw[1] = { 1e9 };
		rq.n_rtt_s   = 1;
		rq.rtt_s     = rtt;
		rq.n_bw_bps  = 1;
		rq.bw_bps    = bw;
		rl.body_case = PSWIRE__HEADER__BODY_LINKS_REQ;
		rl.links_req = &rq;
		n = frame(out, prefix, PSWIRE__METHOD__REPORT_LINKS, &rl, 0);
		put(target, "report_links", out, n);

		Pswire__Header s = PSWIRE__HEADER__INIT;
		n = frame(out, prefix, PSWIRE__METHOD__STATS, &s, 0);
		put(target, "stats", out, n);
	}
	{ // Audit (a server's kept pushes) and Verified (a verdict): the
	  // spot checks' requests (issue 31)
		Pswire__Header       h = PSWIRE__HEADER__INIT;
		Pswire__AuditRequest a = PSWIRE__AUDIT_REQUEST__INIT;
		a.max                  = 4;
		h.body_case            = PSWIRE__HEADER__BODY_AUDIT_REQ;
		h.audit_req            = &a;
		out[0]                 = 0;
		n = frame(out, prefix, PSWIRE__METHOD__AUDIT, &h, 0);
		put(target, "audit", out, n);

		Pswire__Header          g = PSWIRE__HEADER__INIT;
		Pswire__VerifiedRequest v = PSWIRE__VERIFIED_REQUEST__INIT;
		v.rank                    = 1;
		v.version                 = 3;
		v.data_step               = 4;
		v.mismatch                = 1;
		v.differing               = 2;
		v.max_abs_diff            = 0.5f;
		g.body_case               = PSWIRE__HEADER__BODY_VERIFIED_REQ;
		g.verified_req            = &v;
		out[0]                    = 1;
		n = frame(out, prefix, PSWIRE__METHOD__VERIFIED, &g, 0);
		put(target, "verified", out, n);
	}
}

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz_seeds DIR\n");
		return 2;
	}
	root = argv[1];
	mkdir(root, 0755);
	requests("fuzz_frame", 0);
	requests("fuzz_rpc", 1);
	{ // a map of one tensor in two shards on one server
		Pswire__Placement  pl = PSWIRE__PLACEMENT__INIT;
		Pswire__JobConfig  j  = PSWIRE__JOB_CONFIG__INIT;
		Pswire__TensorDesc td = PSWIRE__TENSOR_DESC__INIT, *tp = &td;
		Pswire__ShardInfo  s0 = PSWIRE__SHARD_INFO__INIT, s1 = s0;
		Pswire__ShardInfo *sp[2]   = { &s0, &s1 };
		char              *urls[1] = { "tcp://127.0.0.1:1" };
		static uint8_t     out[4096];
		td.name      = "w";
		td.len       = 40;
		j.n_tensors  = 1;
		j.tensors    = &tp;
		j.lr         = 0.1;
		j.codec_push = "none";
		j.codec_pull = "none";
		s0.len       = 20;
		s1.offset    = 20;
		s1.len       = 20;
		pl.epoch     = 1;
		pl.trainers  = 2;
		pl.n_servers = 1;
		pl.servers   = urls;
		pl.n_shards  = 2;
		pl.shards    = sp;
		pl.job       = &j;
		put("fuzz_map", "two_shards", out,
		    pswire__placement__pack(&pl, out));
	}
	{ // codecs: each codec over 64 values of junk codes
		static uint8_t out[1024];
		for (int c = 0; c < 9; c++) {
			char name[16];
			out[0] = (uint8_t) c;
			out[1] = 31; // bucket 32
			out[2] = 0;
			out[3] = 64; // n = 65
			out[4] = 0;
			for (int i = 5; i < 5 + 300; i++) {
				out[i] = (uint8_t) (i * 37);
			}
			snprintf(name, sizeof(name), "codec%d", c);
			put("fuzz_codec", name, out, 305);
		}
	}
	{ // a valid 4-image IDX file of 2 x 2 pixels
		uint8_t idx[16 + 16] = { 0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0,
			0, 0, 2 };
		for (int i = 0; i < 16; i++) {
			idx[16 + i] = (uint8_t) (i * 16);
		}
		put("fuzz_idx", "four_images", idx, sizeof(idx));
	}
	{ // fuzz_ctr: a Criteo text line (missing columns, a non-hex value),
	  // and a binary file of one record (label 1, dense 0, keys i+1)
		static const char line[] =
		    "1\t\t-1\t9\t5\t30\t21\t17\t15\t108\t\t44\t1\t4"
		    "\te32f7d73\t41362dd8\ta046ba34\te905383c\t953f55e6"
		    "\t7232e185\tb3e81c89\t003eaa28\t6571d9e1\t84d11c6e"
		    "\te818fda9\t88e56329\tffc6ccf6\tzz\t7a5d6aa5\tcff4b3cd"
		    "\t2380294c\t8d7dd968\t7b72cda6\t2fe943b7\t9d2cfe56"
		    "\t34ca055d\t\t8a72d81e\tb3b08499\t71237057\n";
		static uint8_t bin[32 + 264] = { 'F', 'E', 'R', 'R', 'Y', 'C',
			'T', 'R', 1, 0, 0, 0, 13, 0, 0, 0, 26, 0, 0, 0, 0, 0,
			0, 0, 1 };
		bin[32 + 2]                  = 0x80; // f32 1.0, little-endian
		bin[32 + 3]                  = 0x3f;
		for (int i = 0; i < 26; i++) {
			bin[32 + 56 + 8 * i] = (uint8_t) (i + 1);
		}
		put("fuzz_ctr", "line", line, sizeof(line) - 1);
		put("fuzz_ctr", "one_record", bin, sizeof(bin));
	}
	{ // fuzz_reply: a pull reply of a 40-float tensor in two shards of
	  // 20, for each pull codec index (fuzz_reply's list): shard 0 full,
	  // shard 1 a chain of two deltas from the version held (1); and one
	  // of two full shards.
		static const char *specs[] = { "none", "fp16", "bf16", "q8",
			"q4", "q2", "sign", "topk:0.1", "topk:0.5+q8" };
		static uint8_t     out[4096];
		static float       zero[20], ref[20];
		static uint8_t     code[1024];
		for (int ci = 0; ci < 9; ci++) {
			struct comp_codec cc = COMP_CODEC_INIT;
			Pswire__Header    h  = PSWIRE__HEADER__INIT;
			Pswire__PullReply pr = PSWIRE__PULL_REPLY__INIT;
			Pswire__ShardRef  r[3],
			    *rp[3] = { &r[0], &r[1], &r[2] };
			float  step[20], scratch[20];
			size_t n, plen = 80, bound;
			char   name[32];
			(void) comp_codec_parse(specs[ci], 8, &cc);
			bound = comp_bound(&cc, 20);
			for (int i = 0; i < 3; i++) {
				pswire__shard_ref__init(&r[i]);
			}
			r[0].shard   = 0;
			r[0].kind    = PSWIRE__SHARD_KIND__SHARD_KIND_FULL;
			r[0].length  = 80;
			r[0].version = 2;
			memset(ref, 0, sizeof(ref));
			for (int k = 1; k < 3 && ci > 0; k++) {
				for (int i = 0; i < 20; i++) {
					step[i] = 0.01f * (float) (i * k - 7);
				}
				size_t got = 0;
				if (comp_ref_encode(&cc, step, ref, 20,
				        scratch, code + plen - 80, bound,
				        &got) != FB_OK) {
					got = 0;
				}
				r[k].shard = 1;
				r[k].kind =
				    PSWIRE__SHARD_KIND__SHARD_KIND_DELTA;
				r[k].codec        = cc.id;
				r[k].bucket       = cc.bucket;
				r[k].offset       = plen;
				r[k].length       = got;
				r[k].base_version = (uint64_t) k;
				r[k].version      = (uint64_t) k + 1;
				r[k].crc = fb_crc32(0, ref, sizeof(ref));
				plen += got;
			}
			pr.n_shards = ci > 0 ? 3 : 1;
			pr.shards   = rp;
			h.body_case = PSWIRE__HEADER__BODY_PULL_REP;
			h.pull_rep  = &pr;
			out[0]      = (uint8_t) ci;
			out[1]      = 0;
			out[2]      = 1;
			size_t hl   = pswire__header__pack(&h,
			      out + 3 + PSW_FRAME_HDR);
			psw_frame_put(out + 3, PSWIRE__METHOD__PULL,
			    PSW_FLAG_REPLY, (uint32_t) hl, (uint32_t) plen);
			memcpy(out + 3 + PSW_FRAME_HDR + hl, zero, 80);
			memcpy(out + 3 + PSW_FRAME_HDR + hl + 80, code,
			    plen - 80);
			n = 3 + PSW_FRAME_HDR + hl + plen;
			snprintf(name, sizeof(name), "chain%d", ci);
			put("fuzz_reply", name, out, n);
		}
	}
	return 0;
}
