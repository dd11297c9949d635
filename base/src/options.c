// options.c — the table of every option Ferry's programs read (ps-server's
// scheduler and server roles, and the trainer): name, the roles that read
// it, type, default, bounds or choices, the --help line and the text of
// docs/operations.md. Only data lives here; config.c is the engine.
//
// DESIGN: one table for both programs, so that --help, the FERRY_*
// environment names, the docs (checked by a test) and the Kubernetes
// ConfigMap's keys (checked by deploy/k8s/validate against --help) cannot
// drift apart. An option two programs read with different meanings gets
// one entry per program. Cross-option rules (a multiple of 4, "latency
// needs probing") stay in the program that owns them.
#include "fb/config.h"

#define PS FB_ROLE_PS
#define SCH FB_ROLE_SCHEDULER
#define SRV FB_ROLE_SERVER
#define TR FB_ROLE_TRAINER

// Designated initialisers keep the enum and the table in step: a missing
// entry is a NULL name, which the engine's test catches.
#define INT(lo, hi) .type = FB_OPT_INT, .min = (lo), .max = (hi)
#define F64(lo, hi) .type = FB_OPT_F64, .fmin = (lo), .fmax = (hi)
#define ENUM(c) .type = FB_OPT_ENUM, .choices = (c)
#define STR .type = FB_OPT_STR
#define STR_NONEMPTY .type = FB_OPT_STR, .flags = FB_OPT_NONEMPTY

const struct fb_option fb_options[FB_OPT_COUNT] = {
	// ---- both programs -----------------------------------------------
	[FB_OPT_CONFIG] = { "config", PS | TR, STR, .def = "", .unset = "none",
	    .help = "read options from FILE (key = value lines); flags and "
	            "FERRY_* variables override it",
	    .doc  = "read options from this file: `key = value` lines with "
	            "the names above, `#` comment lines; flags and `FERRY_*` "
	            "variables override it (§2.3)" },

	// ---- ps-server ---------------------------------------------------
	[FB_OPT_PS_ROLE]   = { "role", PS, ENUM("scheduler|server|snapshot"),
	      .def = "server", .help = "scheduler | server | snapshot",
	      .doc = "the part this process plays; `snapshot` asks the "
	               "scheduler at `--scheduler` for one snapshot of the "
	               "whole job, prints it and exits (see §7.2)" },
	[FB_OPT_PS_LISTEN] = { "listen", PS, STR, .def = "tcp://127.0.0.1:0",
	    .help = "URL to listen on (port 0 = any free port)",
	    .doc  = "URL to listen on; port 0 picks a free port" },
	[FB_OPT_PS_ADVERTISE]   = { "advertise", SRV, STR, .def = "",
	      .unset = "the bound listen URL",
	      .help  = "server: URL trainers dial",
	      .doc   = "URL trainers (and other servers) dial; set it when "
	                 "listening on `0.0.0.0` or behind NAT" },
	[FB_OPT_PS_SCHEDULER]   = { "scheduler", SRV, STR, .def = "",
	      .unset = "none; a server needs it",
	      .help  = "server: the scheduler's URL",
	      .doc   = "the scheduler's URL" },
	[FB_OPT_PS_TRAINERS]    = { "trainers", SCH, INT(1, 4096),
	       .flags = FB_OPT_RANGE, .def = "1",
	       .help = "scheduler: trainers expected before training starts "
	                  "(MIN:MAX: an elastic job)",
	       .doc  = "trainers expected before training starts; `MIN:MAX` "
	                  "makes the job elastic: it starts once MIN have "
	                  "registered and takes up to MAX (§2.2)" },
	[FB_OPT_PS_SERVERS]     = { "servers", SCH, INT(1, 4096), .def = "1",
	        .help = "scheduler: servers expected before training starts",
	        .doc  = "servers expected before training starts; more can join "
	                    "once it runs (§2.2)" },
	[FB_OPT_PS_SHARD_BYTES] = { "shard-bytes", SCH, INT(4, 1LL << 30),
	    .def  = "1048576",
	    .help = "scheduler: max bytes per shard (multiple of 4)",
	    .doc  = "max bytes per shard, a multiple of 4" },
	[FB_OPT_PS_PLACEMENT]   = { "placement", SCH, ENUM("uniform|latency"),
	      .def  = "uniform",
	      .help = "scheduler: uniform (round-robin) | latency (probe links, "
	                "solve)",
	      .doc  = "`uniform` (round-robin over shards) or `latency` (probe "
	                "links, minimise the slowest trainer's predicted step "
	                "time; keeps round-robin unless that predicts a step at "
	                "least 10% shorter)" },
	[FB_OPT_PS_PROBE_COUNT] = { "probe-count", SCH, INT(1, 1000),
	    .def  = "7",
	    .help = "scheduler: round trips per link for the RTT median",
	    .doc  = "round trips per link for the RTT median (the client uses "
	            "at most 64)" },
	[FB_OPT_PS_PROBE_BYTES] = { "probe-bytes", SCH, INT(0, 64LL << 20),
	    .def  = "1048576",
	    .help = "scheduler: bulk bytes per link for bandwidth (0: no "
	            "probing)",
	    .doc  = "bulk bytes per link for bandwidth; 0 turns probing off "
	            "(needs > 0 with `latency`)" },
	[FB_OPT_PS_SEED]        = { "seed", SCH, INT(0, INT64_MAX), .def = "1",
	           .help = "scheduler: placement solver seed",
	           .doc  = "placement solver seed (multi-start)" },
	[FB_OPT_PS_REPROBE_S] = { "reprobe-s", SCH, INT(0, 86400), .def = "0",
	    .help = "scheduler: trainers re-probe links this often; a change "
	            "over --reprobe-change-pct re-places shards (0: never)",
	    .doc  = "trainers re-measure their links this often, in seconds "
	            "(0: never; needs probing on); see §2.2" },
	[FB_OPT_PS_REPROBE_CHANGE_PCT] = { "reprobe-change-pct", SCH,
	    INT(1, 10000), .def = "50",
	    .help = "scheduler: link change (percent) that triggers a "
	            "re-placement",
	    .doc  = "a re-probed link that changed by more than this percent "
	            "triggers a re-placement" },
	[FB_OPT_PS_LEAVE_TIMEOUT_MS]   = { "leave-timeout-ms", SRV,
	      INT(0, 3600000), .def = "0",
	      .help = "server: on SIGTERM, leave the job and wait this long for "
	                "its shards to move to the other servers (0: exit at "
	                "once)",
	      .doc  = "on `SIGTERM`/`SIGINT`, leave the job and wait up to this "
	                "long for the shards to be delivered to the other servers "
	                "(0: exit at once, shards lost); see §2.2" },
	[FB_OPT_PS_CAPACITY_MB] = { "capacity-mb", SRV, INT(0, 1LL << 30),
	    .def  = "0",
	    .help = "server: memory for shards in MiB (0: unbounded)",
	    .doc  = "memory for shards in MiB (0: unbounded, given shards "
	            "like any other server); `latency` placement places "
	            "within it, a `uniform` placement that exceeds it stops "
	            "the job from starting" },
	[FB_OPT_PS_CONTEXTS]   = { "contexts", PS, INT(1, 65536), .def = "256",
	      .help = "requests served concurrently (nng REP contexts)" },
	[FB_OPT_PS_MAX_MSG_MB] = { "max-msg-mb", PS, INT(1, 4096),
	    .def = "256", .help = "receive size cap per message, MiB" },
	[FB_OPT_PS_URL_FILE]   = { "url-file", PS, STR, .def = "",
	      .unset = "none",
	      .help  = "write the bound listen URL to this file once listening",
	      .doc   = "write the bound listen URL to this file once listening "
	                 "(written to `FILE.tmp`, then renamed)" },
	[FB_OPT_PS_HTTP_LISTEN]    = { "http-listen", PS, STR, .def = "",
	       .unset = "off",
	       .help  = "serve /metrics, /healthz, /readyz, /debug/state on "
	                   "host:port (port 0: any free port)",
	       .doc   = "serve `/metrics`, `/healthz`, `/readyz` and "
	                   "`/debug/state` over HTTP on `host:port` or "
	                   "`http://host:port` (port 0 picks a free port); see "
	                   "[§11](#11-metrics-and-health)" },
	[FB_OPT_PS_HTTP_URL_FILE]  = { "http-url-file", PS, STR, .def = "",
	     .unset = "none",
	     .help  = "write the HTTP endpoints' base URL to this file",
	     .doc   = "write the HTTP endpoints' base URL (bound port filled "
	               "in) to this file once serving" },
	[FB_OPT_PS_LOG_LEVEL]      = { "log-level", PS,
	         ENUM("err|warn|notice|info|debug"), .def = "notice",
	         .help = "err | warn | notice | info | debug",
	         .doc  = "log threshold" },
	[FB_OPT_PS_STALL_WARN_MS]  = { "stall-warn-ms", SRV, INT(0, 86400000),
	     .def  = "10000",
	     .help = "server: log once when a sync round waits longer than "
	              "this for some trainers' pushes (0: never)",
	     .doc  = "a sync round that waits longer than this for the "
	              "pushes of some trainers logs, once, which ranks it waits "
	              "for and since when (0: never); see §7.1" },
	[FB_OPT_PS_HEARTBEAT_MS]   = { "heartbeat-ms", PS, INT(0, 3600000),
	      .def  = "1000",
	      .help = "server: heartbeat the scheduler this often (0: "
	                "never); scheduler: the members' period",
	      .doc  = "server: heartbeat the scheduler this often, so that it "
	                "notices when this server dies (0: never; the scheduler "
	                "then never declares it dead). Scheduler: the members' "
	                "period; a member whose heartbeat connection closes is "
	                "declared dead when none comes on a new connection "
	                "within twice this (0: only `--dead-after-ms`); see "
	                "§12" },
	[FB_OPT_PS_DEAD_AFTER_MS]  = { "dead-after-ms", SCH, INT(0, 86400000),
	     .def  = "5000",
	     .help = "scheduler: declare a member that heartbeats dead after "
	              "this long without one (0: never)",
	     .doc  = "a member that has heartbeated and then stays silent "
	              "this long is declared dead: a trainer is taken out of "
	              "the sync rounds, a server's lost shards are logged "
	              "(0: never); see §12" },
	[FB_OPT_PS_SNAPSHOT_DIR]   = { "snapshot-dir", SRV, STR, .def = "",
	      .unset = "no snapshots",
	      .help  = "server: write snapshots to DIR/server-<index>.snap "
	                 "(and restore from it)",
	      .doc   = "directory of this server's snapshot file "
	                 "`server-<index>.snap` (the one before it is kept as "
	                 "`server-<index>.prev.snap`): written every "
	                 "`--snapshot-every` versions or on a Snapshot rpc, "
	                 "loaded at start (`--restore`) and on a job's "
	                 "rollback; see §7.2" },
	[FB_OPT_PS_SNAPSHOT_EVERY] = { "snapshot-every", SRV,
	    INT(0, 1LL << 40), .def = "0",
	    .help = "server: snapshot every N sync versions (0: only on "
	            "request)",
	    .doc  = "in a sync job, snapshot the shards each time they reach "
	            "a multiple of this version (0: only on a Snapshot "
	            "rpc); needs `--snapshot-dir`" },
	[FB_OPT_PS_RESTORE]        = { "restore", SRV, ENUM("auto|yes|no"),
	           .def  = "auto",
	           .help = "server: load the snapshot at start: auto (when "
	                          "the file exists) | yes (required) | no",
	           .doc  = "load `--snapshot-dir`'s file into the shards the "
	                          "first map places here: `auto` when it exists, "
	                          "`yes` refuses to serve without it, `no` ignores "
	                          "it (a fresh job)" },
	[FB_OPT_PS_SERVER_INDEX]   = { "server-index", SRV, INT(-1, 65535),
	      .def  = "-1",
	      .help = "server: register into this slot (-1: any; a restart "
	                "under a new URL takes its old slot back)",
	      .doc  = "register into server slot I (-1: any). A server "
	                "restarted under the same advertised URL gets its slot "
	                "back without it; under a new URL it needs this, and is "
	                "refused (`FAILED_PRECONDITION`) while slot I's server "
	                "is alive at another URL; see §12" },
	[FB_OPT_PS_RESEED_WAIT_MS] = { "reseed-wait-ms", SRV, INT(0, 86400000),
	    .def = "5000",
	    .help =
	        "server: a shard being re-seeded opens this long after its "
	        "map with the newest offer so far, when not every trainer "
	        "offered",
	    .doc = "a lost shard re-seeded here from the trainers' copies "
	           "opens once every trainer in the job offered its copy, or "
	           "this long after the map that placed it here if at least "
	           "one did (the newest offer wins); see §12" },
	[FB_OPT_PS_SECRET_FILE]    = { "secret-file", PS, STR, .def = "",
	       .unset = "off",
	       .help  = "the job's key: sign every request and reply, refuse "
	                   "unsigned ones (docs/security.md)",
	       .doc   = "file holding the job's key (16 to 4096 bytes, the same "
	                   "for every member): every request and reply is signed "
	                   "(GMAC-AES256) and checked; unsigned, altered or "
	                   "replayed requests get `UNAUTHENTICATED` "
	                   "([security.md](security.md))" },
	[FB_OPT_PS_AUTH_WINDOW_MS] = { "auth-window-ms", PS, INT(0, 86400000),
	    .def  = "120000",
	    .help = "with --secret-file: refuse a request signed longer "
	            "ago, or further ahead, than this by our clock (0: no "
	            "bound)",
	    .doc  = "with `--secret-file`, a request whose signing time (the "
	            "sender's wall clock) is further than this from ours, "
	            "either way, is refused `UNAUTHENTICATED`: a replay "
	            "recorded earlier, or a member whose clock is off by more "
	            "(keep members' clocks synchronised, e.g. NTP; "
	            "[security.md](security.md)). 0: no bound" },
	[FB_OPT_PS_REPLICAS]       = { "replicas", SCH, INT(1, 16), .def = "1",
	          .help = "scheduler: copies of each shard: a primary and R-1 "
	                        "backups on other servers (1: none)",
	          .doc  = "each shard has a primary and R-1 backups on other "
	                        "servers; the primary forwards every update to them "
	                        "before answering, and when it dies a backup takes over "
	                        "(capped at the number of servers, with a warning); "
	                        "see §12" },
	[FB_OPT_PS_STATE_DIR]      = { "state-dir", SCH, STR, .def = "",
	         .unset = "nothing persisted",
	         .help  = "scheduler: keep the job, members and map in "
	                       "DIR/scheduler.state (and carry on from it)",
	         .doc   = "directory of the scheduler's state file "
	                       "`scheduler.state`: the job, its members and the map, "
	                       "written whenever they change; a scheduler restarted "
	                       "with the same directory carries on (see §12)" },
	[FB_OPT_PS_MAX_JOB_MB]     = { "max-job-mb", SCH, INT(1, 1LL << 24),
	        .def  = "16384",
	        .help = "scheduler: refuse a job whose tensors total more than "
	                    "this, MiB",
	        .doc  = "the most a job's declared tensors may total, MiB: a "
	                    "larger declaration (or one cut into more than 2^20 "
	                    "shards) gets `INVALID_ARGUMENT` before anything is "
	                    "built (docs/operations.md §13)" },
	[FB_OPT_PS_MAX_INFLIGHT_MB] = { "max-inflight-mb", PS,
	    INT(0, 1LL << 20), .def = "4096",
	    .help = "bytes all calls in progress may hold, MiB (0: no cap)",
	    .doc  = "the most all calls in progress (parked requests, "
	            "replies being sent) may hold together, MiB; one "
	            "connection may hold 2 x `--max-msg-mb` + 1 MiB and a "
	            "quarter of `--contexts` calls (0: no total cap; "
	            "docs/operations.md §13)" },
	[FB_OPT_PS_MAX_LR] = { "max-lr", SCH, F64(1e-12, 1e6), .def = "10",
	    .help = "scheduler: refuse a job whose learning rate is above "
	            "this",
	    .doc  = "the largest learning rate a job may declare: a "
	            "Register with a higher one gets `INVALID_ARGUMENT` "
	            "naming this flag (docs/operations.md §13)" },
	[FB_OPT_PS_MAX_SAMPLES_PER_PUSH] = { "max-samples-per-push", SRV,
	    INT(1, 1LL << 30), .def = "65536",
	    .help = "server: refuse a push declaring more samples than this",
	    .doc  = "the most samples one push may declare (`n_samples` "
	            "divides the learning rate, so a huge count silences a "
	            "push and outweighs the others): more gets "
	            "`INVALID_ARGUMENT` naming this flag "
	            "(docs/operations.md §13)" },
	[FB_OPT_PS_SPARSE_CAPACITY_MB]   = { "sparse-capacity-mb", SRV,
	      INT(0, 1LL << 24), .def = "0",
	      .help = "server: hold the sparse tables' rows here under this "
	                "many MiB, evicting rows past it (0: unbounded)",
	      .doc  = "the memory the sparse tables' shards on this server may "
	                "hold, MiB: after an update that goes past it, rows are "
	                "evicted (by `--sparse-evict`) until they hold about 90% "
	                "of it (0: unbounded)" },
	[FB_OPT_PS_SPARSE_EVICT]  = { "sparse-evict", SRV, ENUM("lru|lfu"),
	     .def  = "lru",
	     .help = "server: lru | lfu, which rows --sparse-capacity-mb "
	              "evicts first",
	     .doc  = "which rows `--sparse-capacity-mb` evicts first: the "
	              "least recently (`lru`) or least frequently (`lfu`) "
	              "updated" },
	[FB_OPT_PS_AGGREGATE]     = { "aggregate", SRV, STR_NONEMPTY,
	        .def  = "mean",
	        .help = "server: how a sync round combines its pushes: mean | "
	                    "median | trimmed:B | cclip:TAU[x][:BETA]",
	        .doc  = "how a sync round combines the trainers' pushes of a "
	                    "shard before the optimizer: `mean` (the sum over the "
	                    "samples), or robust to misbehaving trainers: `median` "
	                    "(coordinate-wise), `trimmed:B` (coordinate-wise mean "
	                    "without the B largest and B smallest), "
	                    "`cclip:TAU[x][:BETA]` (centered clipping of each "
	                    "trainer's momentum, BETA in [0, 1), 0.95 when left "
	                    "out, around the last aggregate, radius TAU per "
	                    "shard, or with `x` TAU times the round's median "
	                    "distance; BETA > 0 keeps trainers x the shard's "
	                    "floats per shard; 0: the pushes themselves); see "
	                    "[security.md](security.md) and "
	                    "[algorithms.md](algorithms.md) (robust aggregation)" },
	[FB_OPT_PS_AUDIT_KEEP]    = { "audit-keep", SRV, INT(1, 65536),
	       .def  = "64",
	       .help = "server: pushes kept for spot checks until a verifier "
	                  "collects them",
	       .doc  = "how many pushes (one shard's each) this server keeps "
	                  "for verification until a verifier collects them; past "
	                  "it new ones are dropped and counted" },
	[FB_OPT_PS_SPOT_CHECK]    = { "spot-check", SCH, F64(0, 1), .def = "0",
	       .help = "scheduler: share of pushes kept for verification by "
	                  "recomputation (0: off)",
	       .doc  = "the share of each trainer's sync pushes the servers "
	                  "keep, drawn by a key trainers do not know, for a "
	                  "verifier (`trainer --verify`) to recompute; pushes "
	                  "that a robust aggregate marks as outliers are kept "
	                  "too (0: off); see [security.md](security.md)" },
	[FB_OPT_PS_ALLOW_ATTACKS] = { "allow-attacks", SCH, INT(0, 1),
	    .def  = "0",
	    .help = "scheduler: 1 lets trainers with --attack join "
	            "(benchmarks and tests only)",
	    .doc  = "1 lets trainers that declare `--attack` register "
	            "(benchmarks and tests of robust aggregation only); "
	            "otherwise they are refused" },
	[FB_OPT_PS_QUARANTINE_OUTLIERS] = { "quarantine-outliers", SCH,
	    INT(0, 1000000000), .def = "0",
	    .help = "scheduler: quarantine a trainer whose pushes were "
	            "outliers this many sync rounds in a row (0: never)",
	    .doc  = "a trainer whose pushes a server's robust aggregate "
	            "marked as outliers in this many scored rounds in a "
	            "row is quarantined (0: never; a verified mismatch "
	            "always quarantines)" },
	[FB_OPT_PS_CPUS]     = { "cpus", PS, STR_NONEMPTY, .def = "auto",
	        .help = "CPUs this process's threads run on: auto | all | a "
	                    "list such as 0-3,8",
	        .doc  = "the CPUs this process's threads may run on: a list "
	                    "(`0-3,8`), `all` (wherever the kernel puts them), or "
	                    "`auto`: a scheduler keeps its threads on the one CPU "
	                    "it starts on, with batch scheduling (its work is many "
	                    "small messages handed between nng's threads, and a "
	                    "wake-up on another CPU, or one that preempts its waker, "
	                    "costs more than the message), a server takes them all. "
	                    "CPUs the process may not use are refused (§8)" },
	[FB_OPT_PS_TLS_CERT] = { "tls-cert", PS, STR, .def = "",
	    .unset = "off",
	    .help  = "this member's TLS certificate (PEM): mutual TLS with "
	             "--tls-key and --tls-ca (docs/security.md)",
	    .doc   = "this member's certificate (PEM, chain allowed). With "
	             "`--tls-key` and `--tls-ca` every connection is "
	             "`tls+tcp://` (`tcp://` URLs are mapped) and both ends "
	             "must present a certificate signed by the job's CA "
	             "([security.md](security.md))" },
	[FB_OPT_PS_TLS_KEY]  = { "tls-key", PS, STR, .def = "", .unset = "off",
	     .help = "the private key of --tls-cert (PEM, unencrypted)",
	     .doc  = "the unencrypted private key of `--tls-cert` (PEM)" },
	[FB_OPT_PS_TLS_CA]   = { "tls-ca", PS, STR, .def = "", .unset = "off",
	      .help = "the job's CA certificate(s) (PEM): peers must present a "
	                "certificate it signed",
	      .doc  = "the job's CA certificate(s) (PEM): every peer must "
	                "present a certificate signed by it" },

	// ---- trainer -----------------------------------------------------
	[FB_OPT_TR_SCHEDULER] = { "scheduler", TR, STR_NONEMPTY,
	    .unset = "required",
	    .help  = "scheduler URL, e.g. tcp://127.0.0.1:7000",
	    .doc   = "scheduler URL" },
	[FB_OPT_TR_RANK]      = { "rank", TR, STR_NONEMPTY, .def = "any",
	         .help = "this trainer's rank, or any: the scheduler gives the "
	                      "lowest free one",
	         .doc  = "this trainer's rank, 0..trainers−1, or `any`: the "
	                      "scheduler gives the lowest rank no live trainer holds "
	                      "(how an elastic job grows, §4.2)" },
	[FB_OPT_TR_DATA]      = { "data", TR, STR_NONEMPTY,
	         .def  = "/usr/share/datasets/fashion-mnist",
	         .help = "directory of IDX files (--model dlrm: the training "
	                      "file)",
	         .doc  = "directory of IDX files (`train-images-idx3-ubyte`, "
	                      "`train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, "
	                      "`t10k-labels-idx1-ubyte`, each `.gz` or plain); with "
	                      "`--model dlrm`, the training file (Criteo text, "
	                      "gzipped or not, or ferry-ctrgen's binary form)" },
	[FB_OPT_TR_LAYERS]    = { "layers", TR, STR_NONEMPTY,
	       .def  = "784,256,128,10",
	       .help = "MLP widths: input,hidden...,classes",
	       .doc  = "MLP widths: input, hidden..., classes" },
	[FB_OPT_TR_BATCH]     = { "batch", TR, INT(1, 65536), .def = "64",
	        .help = "minibatch size per trainer" },
	[FB_OPT_TR_LR]        = { "lr", TR, F64(1e-12, 1e6), .def = "0.1",
	           .help = "base learning rate (the servers' optimizer)",
	           .doc  = "base learning rate of the servers' optimizer "
	                          "(`--optimizer`; `--lr-schedule` varies it by "
	                          "version)" },
	[FB_OPT_TR_EPOCHS]    = { "epochs", TR, INT(1, 1000000), .def = "1",
	       .help = "epochs to train" },
	[FB_OPT_TR_SEED]      = { "seed", TR, INT(0, 9200000000000000000LL),
	         .def  = "42",
	         .help = "seed for the shuffle and the initial weights" },
	[FB_OPT_TR_MODE] = { "mode", TR, ENUM("sync|async|ssp"), .def = "sync",
	    .help = "sync, async or ssp (stale-synchronous, --staleness)",
	    .doc  = "synchronous rounds, asynchronous pushes, or "
	            "stale-synchronous parallel (`ssp`: asynchronous pushes, "
	            "reads at most `--staleness` clocks stale)" },
	[FB_OPT_TR_LOG_INTERVAL] = { "log-interval", TR, INT(0, 1000000000),
	    .def  = "100",
	    .help = "steps between progress lines (0: epoch ends only)" },
	[FB_OPT_TR_CODEC_PUSH]   = { "codec-push", TR, STR_NONEMPTY,
	      .def = "none", .help = "gradient codec (none, fp16, q8, ...)",
	      .doc = "gradient codec: `none`, `fp16`, `bf16`, `q8`, `q4`, `q2` "
	               "(`:sr` for stochastic rounding), `sign`, `topk:R`, "
	               "`topk:R+q8`, `topk:R+q4`, `randk:R`, `randk:R+q8`, "
	               "`randk:R+q4`, or `auto` (per server link, by "
	               "`--link-budget`)" },
	[FB_OPT_TR_CODEC_PULL]   = { "codec-pull", TR, STR_NONEMPTY,
	      .def = "none", .help = "weight-delta codec",
	      .doc = "weight-delta codec (same values, no `:sr`; `auto`: "
	               "per server link, the weights in fp32 or `topk:0.02+q8` "
	               "deltas)" },
	[FB_OPT_TR_BUCKET]       = { "bucket", TR, INT(0, 1 << 30), .def = "0",
	          .help = "quantization bucket (0: codec default)",
	          .doc  = "quantization bucket (0: 512)" },
	[FB_OPT_TR_WARMUP_STEPS] = { "warmup-steps", TR, INT(0, 1 << 30),
	    .def = "0", .help = "steps sent uncompressed first" },
	[FB_OPT_TR_MAX_STEPS]    = { "max-steps", TR,
	       INT(0, 9200000000000000000LL), .def = "0",
	       .help =
	           "stop when the job has done this many steps (sync: job steps, so a restarted trainer stops with the others; 0: unlimited)" },
	[FB_OPT_TR_DEVICE]       = { "device", TR, STR_NONEMPTY, .def = "cpu",
	          .help = "cpu, cuda (rank mod GPUs) or cuda:N",
	          .doc  = "`cpu`, `cuda` (rank mod GPU count) or `cuda:N`; a GPU "
	                        "request without a GPU fails at start" },
	[FB_OPT_TR_BLAS_THREADS] = { "blas-threads", TR, INT(1, 256),
	    .def = "1", .help = "OpenBLAS threads" },
	[FB_OPT_TR_CURVE]       = { "curve", TR, STR_NONEMPTY, .unset = "none",
	          .help = "write the training curve as CSV to FILE",
	          .doc  = "write the training curve as CSV (`step,wall_s,"
	                        "train_loss,test_loss,test_acc,bytes_sent`)" },
	[FB_OPT_TR_STEP_TIMES]  = { "step-times", TR, STR_NONEMPTY,
	     .unset = "none",
	     .help  = "write every step's times as CSV to FILE: step, "
	               "compute_ms (minibatch and gradient), push_pull_ms (the "
	               "exchange, waiting for the other trainers included)",
	     .doc   = "write every step's times as CSV "
	               "(`step,compute_ms,push_pull_ms`): where a slow job spends "
	               "its steps (compute vs the exchange, waiting for other "
	               "trainers included)" },
	[FB_OPT_TR_WEIGHTS_OUT] = { "weights-out", TR, STR_NONEMPTY,
	    .unset = "none",
	    .help  = "at the end, write the final weights to FILE (raw "
	             "float32, host byte order, tensors in order fc1.weight, "
	             "fc1.bias, ...)",
	    .doc = "write the final weights (raw float32, host order, tensors "
	           "in order)" },
	[FB_OPT_TR_TIMEOUT_MS]  = { "timeout-ms", TR, INT(0, 86400000),
	     .def  = "0",
	     .help = "deadline of each libferry call (0: library default)",
	     .doc  = "deadline of each libferry call (0: 60000)" },
	[FB_OPT_TR_HTTP_LISTEN] = { "http-listen", TR, STR, .def = "",
	    .unset = "off",
	    .help  = "serve /metrics, /healthz, /readyz, /debug/state on "
	             "host:port (port 0: any free port)",
	    .doc   = "serve `/metrics`, `/healthz`, `/readyz` and "
	             "`/debug/state` over HTTP on `host:port` or "
	             "`http://host:port` (port 0 picks a free port)" },
	[FB_OPT_TR_HTTP_URL_FILE] = { "http-url-file", TR, STR, .def = "",
	    .unset = "none",
	    .help  = "write the HTTP endpoints' base URL to this file",
	    .doc   = "write the HTTP endpoints' base URL (bound port filled "
	             "in) to this file once serving" },
	[FB_OPT_TR_HEARTBEAT_MS]  = { "heartbeat-ms", TR, INT(0, 3600000),
	     .def  = "1000",
	     .help = "heartbeat the scheduler this often (0: never)",
	     .doc  = "heartbeat the scheduler this often from a background "
	              "thread, so that it notices when this trainer dies and "
	              "stops the sync rounds from waiting for it (0: never); "
	              "see §12" },
	[FB_OPT_TR_STALENESS]     = { "staleness", TR, INT(0, 1000000000),
	        .def = "0",
	        .help =
	            "--mode ssp: clocks a trainer may run ahead of the slowest",
	        .doc = "`--mode ssp`: a trainer at clock c (c pushes done) reads "
	                   "weights holding every push up to clock c-K-1 and waits "
	                   "on the servers otherwise; 0 is sync, bit for bit (a job "
	                   "option)" },
	[FB_OPT_TR_SYNC_QUORUM]   = { "sync-quorum", TR, INT(0, 1000000),
	      .def  = "0",
	      .help = "sync: close a round once this many trainers pushed "
	                "(0: all)",
	      .doc  = "sync mode, backup trainers: a round closes once Q "
	                "trainers pushed; a later push for it is dropped "
	                "(FERRY_EBEHIND) and its trainer re-pulls; 0: every "
	                "trainer still in the job (a job option)" },
	[FB_OPT_TR_SLOW_MS]     = { "slow-ms", TR, INT(0, 3600000), .def = "0",
	        .help = "sleep this long every step (benchmarks: a straggler)",
	        .doc  = "sleep this many ms in every step, after the gradient: an "
	                    "artificial straggler for benchmarks (0: off)" },
	[FB_OPT_TR_SECRET_FILE] = { "secret-file", TR, STR, .def = "",
	    .unset = "off",
	    .help  = "the job's key: sign every request, check every reply "
	             "(docs/security.md)",
	    .doc   = "file holding the job's key, as `ps-server "
	             "--secret-file` ([security.md](security.md))" },
	[FB_OPT_TR_OPTIMIZER]   = { "optimizer", TR,
	      ENUM("sgd|momentum|nesterov|adam|adamw|adagrad"), .def = "sgd",
	      .help = "the servers' optimizer: sgd | momentum | nesterov | adam "
	                "| adamw | adagrad",
	      .doc  = "the optimizer the servers run on each shard "
	                "(docs/algorithms.md §5): `sgd`, `momentum`, `nesterov`, "
	                "`adam`, `adamw` or `adagrad`; its state lives, moves and "
	                "snapshots with the shard" },
	[FB_OPT_TR_MOMENTUM]    = { "momentum", TR, F64(0, 0.999999),
	       .def  = "0.9",
	       .help = "momentum and nesterov: the velocity's decay" },
	[FB_OPT_TR_BETA1] = { "beta1", TR, F64(0, 0.999999), .def = "0.9",
	    .help = "adam, adamw: decay of the first moment" },
	[FB_OPT_TR_BETA2] = { "beta2", TR, F64(0, 0.999999999), .def = "0.999",
	    .help = "adam, adamw: decay of the second moment" },
	[FB_OPT_TR_EPS]   = { "eps", TR, F64(1e-30, 1), .def = "1e-8",
	      .help = "adam, adamw, adagrad: added to the denominator" },
	[FB_OPT_TR_WEIGHT_DECAY]  = { "weight-decay", TR, F64(0, 999),
	     .def  = "0",
	     .help = "weight decay: L2 on the gradient (decoupled for adamw)" },
	[FB_OPT_TR_LR_SCHEDULE]   = { "lr-schedule", TR,
	      ENUM("constant|step|cosine"), .def = "constant",
	      .help = "lr by version: constant | step | cosine",
	      .doc  = "the learning rate the servers apply by version: "
	                "`constant`, `step` (times `--lr-gamma` every "
	                "`--lr-step-every` updates) or `cosine` (to `--lr-min` at "
	                "`--lr-total-steps`), after `--lr-warmup`" },
	[FB_OPT_TR_LR_WARMUP]     = { "lr-warmup", TR, INT(0, 1LL << 40),
	        .def  = "0",
	        .help = "updates of linear lr warm-up (not --warmup-steps, the "
	                    "codecs')",
	        .doc  = "updates of linear learning-rate warm-up, lr (t+1)/W "
	                    "(unrelated to `--warmup-steps`, the codecs' uncompressed "
	                    "start)" },
	[FB_OPT_TR_LR_STEP_EVERY] = { "lr-step-every", TR, INT(1, 1LL << 40),
	    .def = "1000", .help = "step schedule: updates between decays" },
	[FB_OPT_TR_LR_GAMMA] = { "lr-gamma", TR, F64(1e-12, 1), .def = "0.1",
	    .help = "step schedule: factor at each decay" },
	[FB_OPT_TR_LR_MIN]   = { "lr-min", TR, F64(0, 1e6), .def = "0",
	      .help = "cosine schedule: the final lr" },
	[FB_OPT_TR_LR_TOTAL_STEPS] = { "lr-total-steps", TR, INT(0, 1LL << 40),
	    .def  = "0",
	    .help = "cosine schedule: updates until lr-min (warm-up "
	            "included)" },
	[FB_OPT_TR_CLIP_NORM]   = { "clip-norm", TR, F64(0, 1e29), .def = "0",
	      .help = "clip each push's gradient to this global L2 norm per "
	                "sample (0: off)",
	      .doc  = "clip each trainer's gradient, before it is encoded and "
	                "pushed, to this global L2 norm over all tensors, per "
	                "sample (docs/algorithms.md §5.3; 0: off)" },
	[FB_OPT_TR_LINK_BUDGET] = { "link-budget", TR, F64(0.001, 1e6),
	    .def  = "1.0",
	    .help = "codec auto: a step's exchange may take this fraction of "
	            "its compute time",
	    .doc  = "with `--codec-push auto` / `--codec-pull auto`: each "
	            "server link gets the least lossy codec whose step "
	            "exchange (bytes over the probed bandwidth plus a round "
	            "trip) takes at most this fraction of the measured "
	            "compute time per step (docs/algorithms.md §2.8)" },
	[FB_OPT_TR_OVERLAP_LAYERS] = { "overlap-layers", TR, INT(0, 1),
	    .def  = "0",
	    .help = "push each layer's gradient as backward makes it (1)",
	    .doc  = "1: push-pull layer by layer, each layer's gradient as "
	            "soon as backward produced it (the last layer first), so "
	            "the exchange overlaps the rest of backward; the weights "
	            "are those of 0, bit for bit (docs/protocol.md). Needs "
	            "the CPU backend's host path and `--clip-norm 0`" },
	[FB_OPT_TR_OVERLAP]        = { "overlap", TR, INT(0, 1), .def = "0",
	           .help = "1: compute the next gradient while the push-pull runs "
	                          "(one step stale)",
	           .doc  = "1: compute step t+1's gradient on version t's weights "
	                          "while step t's push-pull runs, on a communication thread "
	                          "(one-step delayed weights, docs/algorithms.md §6.3; host "
	                          "path only); 0: every gradient on the newest version" },
	[FB_OPT_TR_TLS_CERT]       = { "tls-cert", TR, STR, .def = "",
	          .unset = "off",
	          .help  = "this trainer's TLS certificate (PEM), as ps-server "
	                         "--tls-cert",
	          .doc   = "this trainer's certificate (PEM), as `ps-server "
	                         "--tls-cert` ([security.md](security.md))" },
	[FB_OPT_TR_TLS_KEY] = { "tls-key", TR, STR, .def = "", .unset = "off",
	    .help = "the private key of --tls-cert (PEM, unencrypted)",
	    .doc  = "the unencrypted private key of `--tls-cert` (PEM)" },
	[FB_OPT_TR_TLS_CA]  = { "tls-ca", TR, STR, .def = "", .unset = "off",
	     .help = "the job's CA certificate(s) (PEM)",
	     .doc  = "the job's CA certificate(s) (PEM), as `ps-server "
	              "--tls-ca`" },

	// ---- trainer: CTR jobs (--model dlrm) -------------------------------
	[FB_OPT_TR_MODEL]     = { "model", TR, ENUM("mlp|dlrm"), .def = "mlp",
	        .help = "mlp (Fashion-MNIST, --layers) or dlrm (CTR: --data and "
	                    "--test-data Criteo files)",
	        .doc  = "`mlp`: the MLP of `--layers` on the IDX files of "
	                    "`--data`; `dlrm`: the DLRM-style CTR model "
	                    "(`--bottom`, `--top`, `--emb-dim`, `--interaction`) "
	                    "on Criteo-format files, `--data FILE` and "
	                    "`--test-data FILE`, its 26 embedding tables on the "
	                    "servers' sparse tables (see \"CTR jobs\")" },
	[FB_OPT_TR_TEST_DATA] = { "test-data", TR, STR, .def = "",
	    .unset = "none",
	    .help  = "--model dlrm: the test file (Criteo text or "
	             "ferry-ctrgen binary), evaluated by rank 0",
	    .doc   = "`--model dlrm`: the test file (Criteo text, gzipped "
	             "or not, or ferry-ctrgen's binary form); rank 0 "
	             "evaluates AUC and log loss on it (required)" },
	[FB_OPT_TR_EMB_DIM]   = { "emb-dim", TR, INT(1, 1024), .def = "16",
	      .help = "--model dlrm: floats per embedding row",
	      .doc =
	          "`--model dlrm`: floats per embedding row (one table per categorical field)" },
	[FB_OPT_TR_BOTTOM]    = { "bottom", TR, STR_NONEMPTY, .def = "64,16",
	       .help = "--model dlrm: bottom MLP widths after the 13 dense "
	                  "inputs",
	       .doc  = "`--model dlrm`: the bottom MLP's widths after the 13 "
	                  "dense inputs (ReLU after each; with `--interaction "
	                  "dot` the last equals `--emb-dim`)" },
	[FB_OPT_TR_TOP]       = { "top", TR, STR_NONEMPTY, .def = "64,1",
	          .help = "--model dlrm: top MLP widths after the interaction, "
	                        "the last 1",
	          .doc  = "`--model dlrm`: the top MLP's widths after the "
	                        "interaction, the last 1 (the logit)" },
	[FB_OPT_TR_INTERACTION]     = { "interaction", TR, ENUM("dot|cat"),
	        .def  = "dot",
	        .help = "--model dlrm: dot (pairwise dot products) or cat "
	                    "(concatenation)",
	        .doc  = "`--model dlrm`: the feature interaction, `dot` "
	                    "(DLRM's pairwise dot products) or `cat` "
	                    "(concatenation)" },
	[FB_OPT_TR_TABLE_OPTIMIZER] = { "table-optimizer", TR,
	    ENUM("sgd|adagrad|adam|ftrl"), .def = "adagrad",
	    .help = "--model dlrm: the embedding rows' optimizer (adagrad: "
	            "row-wise)",
	    .doc  = "`--model dlrm`: the row optimizer the servers run on "
	            "the embedding tables: `sgd`, `adagrad` (row-wise), "
	            "`adam` (lazy) or `ftrl` (docs/algorithms.md §7.2)" },
	[FB_OPT_TR_TABLE_LR] = { "table-lr", TR, F64(0, 1e6), .def = "0",
	    .help = "--model dlrm: the embedding tables' lr (0: --lr and "
	            "its schedule)",
	    .doc =
	        "`--model dlrm`: the embedding tables' learning rate (0: `--lr` and its schedule)" },
	[FB_OPT_TR_TABLE_INIT_SCALE]  = { "table-init-scale", TR, F64(0, 1e6),
	     .def  = "0.05",
	     .help = "--model dlrm: new embedding rows are uniform in "
	              "[-scale, scale)",
	     .doc =
	         "`--model dlrm`: a new embedding row is uniform in [-scale, scale)" },
	[FB_OPT_TR_TABLE_CODEC_PUSH]  = { "table-codec-push", TR,
	     ENUM("none|fp16|bf16|q8"), .def = "none",
	     .help = "--model dlrm: codec of the pushed row gradients",
	     .doc  = "`--model dlrm`: codec of the pushed row gradients: "
	              "`none`, `fp16`, `bf16` or `q8` (a scale per row)" },
	[FB_OPT_TR_TABLE_CODEC_PULL]  = { "table-codec-pull", TR,
	     ENUM("none|fp16|bf16|q8"), .def = "none",
	     .help = "--model dlrm: codec of the pulled rows",
	     .doc  = "`--model dlrm`: codec of the pulled rows (values as "
	              "`--table-codec-push`)" },
	[FB_OPT_TR_ADMIT_COUNT]       = { "admit-count", TR, INT(0, 1 << 30),
	          .def  = "0",
	          .help = "--model dlrm: create a row once its key was pushed "
	                        "this often (0: at once)",
	          .doc  = "`--model dlrm`: admission, a row is created once its "
	                        "key was pushed this many times (0, 1: at once); until "
	                        "then it reads as its initial values and its gradients "
	                        "are dropped" },
	[FB_OPT_TR_EVAL_ROWS]         = { "eval-rows", TR, INT(0, 1LL << 40),
	            .def  = "0",
	            .help = "--model dlrm: test rows of each progress evaluation "
	                            "(0: all; the final one uses all)",
	            .doc =
	                "`--model dlrm`: the test rows (the first N) rank 0 evaluates at each progress line; 0: all. The final evaluation always uses the whole test set" },
	[FB_OPT_TR_LEASES]            = { "leases", TR, ENUM("auto|on|off"),
	               .def  = "auto",
	               .help = "take batches from the scheduler's data leases (auto: "
	                                  "when the job is elastic)",
	               .doc  = "take each batch from the scheduler's data leases (every "
	                                  "sample of an epoch in exactly one applied update, "
	                                  "whoever joins or leaves) instead of a rank partition; "
	                                  "`auto`: when the job is elastic (`--trainers MIN:MAX`, "
	                                  "MIN < MAX)" },
	[FB_OPT_TR_LEASE_BATCHES]     = { "lease-batches", TR, INT(1, 1 << 20),
	        .def = "8", .help = "with leases: batches asked for per lease",
	        .doc = "with leases: a lease asks for `--batch` × this many "
	                   "positions" },
	[FB_OPT_TR_LR_SCALE_TRAINERS] = { "lr-scale-trainers", TR,
	    INT(0, 65536), .def = "0",
	    .help = "scale each pushed gradient by live trainers / N (0: "
	            "off)",
	    .doc  = "the linear scaling rule for elastic jobs: each pushed "
	            "gradient is scaled by the live trainers of the map "
	            "(`ferry_client_members`) over N, the trainer count "
	            "`--lr` was tuned for, so that the step grows with the "
	            "global batch; 0 (default): the lr per sample stays "
	            "`--lr` whatever the trainer count (docs/algorithms.md "
	            "§6.4). The MLP loop's plain exchange only (not with "
	            "`--overlap`, `--overlap-layers` or `--model dlrm`)" },

	// ---- trainer: local steps (DiLoCo, docs/algorithms.md §8) ----------
	[FB_OPT_TR_LOCAL_STEPS]    = { "local-steps", TR, INT(0, 100000),
	       .def  = "0",
	       .help = "H > 0: H inner steps on a local copy, then push the "
	                  "pseudo-gradient (0: every step)",
	       .doc  = "local steps (DiLoCo, docs/algorithms.md §8): each "
	                  "trainer takes H inner steps on its own copy of the "
	                  "weights with the inner optimizer (`--optimizer`, `--lr` "
	                  "and the other optimizer and schedule flags, which then "
	                  "run on the trainer: `sgd`, `momentum`, `nesterov` or "
	                  "`adamw`), then pushes its pseudo-gradient; the servers "
	                  "apply `--outer-optimizer` at `--outer-lr` times `--lr`. "
	                  "Rank partitions only (not with `--leases on`), the host "
	                  "path only; not with `--model dlrm`, `--overlap`, "
	                  "`--overlap-layers`, `--lr-scale-trainers` or "
	                  "`--clip-norm`. 0 (default): a push every step" },
	[FB_OPT_TR_FRAGMENTS]      = { "fragments", TR, INT(1, 64), .def = "1",
	         .help = "with --local-steps: sync the model in F staggered "
	                      "fragments (sync mode)",
	         .doc  = "streaming local steps: the shards are synced in F "
	                      "fragments (shard i in fragment i mod F), fragment f "
	                      "after inner steps s with s mod H = (f+1) H/F mod H, so "
	                      "each exchange carries 1/F of the model; needs "
	                      "`--local-steps` H with H mod F = 0 and `--mode sync`" },
	[FB_OPT_TR_FRAGMENT_DELAY] = { "fragment-delay", TR, INT(0, 100000),
	    .def  = "0",
	    .help = "--fragments > 1: wait for a fragment's exchange this "
	            "many inner steps after starting it (0: at once)",
	    .doc  = "with `--fragments` F > 1: a fragment's exchange runs "
	            "while the next D inner steps compute (D < H/F); the "
	            "local progress made meanwhile is kept on top of the "
	            "pulled weights. 0 (default): the exchange blocks" },
	[FB_OPT_TR_OUTER_OPTIMIZER] = { "outer-optimizer", TR,
	    ENUM("sgd|momentum|nesterov"), .def = "nesterov",
	    .help = "with --local-steps: the servers' optimizer on the "
	            "averaged pseudo-gradients",
	    .doc  = "with `--local-steps`: the optimizer the servers apply "
	            "to the averaged pseudo-gradients, `sgd`, `momentum` or "
	            "`nesterov` (its momentum is server state: it moves and "
	            "snapshots with the shards)" },
	[FB_OPT_TR_OUTER_LR] = { "outer-lr", TR, F64(1e-9, 1e6), .def = "0.7",
	    .help = "with --local-steps: the outer learning rate (constant)",
	    .doc  = "with `--local-steps`: the outer learning rate, constant "
	            "(1 with `sgd`: the plain average of the trainers' "
	            "weights)" },
	[FB_OPT_TR_OUTER_MOMENTUM] = { "outer-momentum", TR, F64(0, 0.999999),
	    .def  = "0.9",
	    .help = "with --local-steps: the outer optimizer's momentum" },
	[FB_OPT_TR_ATTACK]      = { "attack", TR, STR_NONEMPTY, .def = "none",
	         .help = "benchmarks and tests only: misbehave (sign-flip, "
	                      "scale:S, noise:SIGMA, alie:Z, ipm:EPS, label-flip, "
	                      "lazy:L); refused unless the scheduler allows attacks",
	         .doc  = "benchmarks and tests of robust aggregation only: push "
	                      "wrong gradients (`sign-flip`, `scale:S`, `noise:SIGMA`, "
	                      "`alie:Z`, `ipm:EPS`, `label-flip`, `lazy:L`); the "
	                      "scheduler refuses such a trainer unless started with "
	                      "`--allow-attacks 1`; see [security.md](security.md)" },
	[FB_OPT_TR_ATTACK_RATE] = { "attack-rate", TR, F64(0, 1), .def = "1",
	    .help = "with --attack: the share of pushes falsified (seeded)",
	    .doc  = "with `--attack`: the share of this trainer's pushes "
	            "that are falsified, drawn from `--seed` and the rank; "
	            "the others are honest" },
	[FB_OPT_TR_VERIFY]      = { "verify", TR, INT(0, 1), .def = "0",
	         .help = "1: run as a verifier: recompute the pushes the servers "
	                      "kept and report each verdict to the scheduler",
	         .doc  = "1: this process trains nothing; it collects the pushes "
	                      "the servers kept for spot checks (`--spot-check`), "
	                      "recomputes each from the weights of its version and "
	                      "its data step with the trainers' own options, and "
	                      "reports every verdict (signed as an operator) to the "
	                      "scheduler; see [security.md](security.md)" },
};
