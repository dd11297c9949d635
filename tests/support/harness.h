// harness.h — what the suites that drive an in-process job share
// (cluster.h's, or their own; library pt_harness): the one trainer thread
// that trains a rank of the 3-tensor job (plain, with a secret, over TLS,
// with any codec or consistency mode, with a test's own step), the raw
// rpc sent as any peer (plain tcp, signed as any member, or over TLS with
// any certificate), the raw frame sent as bytes, and a metric read from
// a registry.
#ifndef PT_HARNESS_H
#define PT_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "obs/obs.h"
#include "psw/psw.h"

// PT_STOP, returned by a pt_rank's step, ends its steps without an error.
#define PT_STOP 1000

// One rank: pt_rank_main declares the job's 3 tensors (initial weights
// w[t][i] = i), (rank 0) offers them, pulls, then runs `steps` push-pulls
// with grad_for's gradients over 10 samples, stopping at the first error.
// Zeroed fields are FERRY_OPTS_INIT's options and no fault.
struct pt_rank {
	const char *url; // the scheduler's
	int         rank, steps;
	// Job options: mode, lr (0: 0.5), codecs (codec, when set, is both
	// directions), warmup_steps, staleness, sync_quorum, link_budget.
	int         mode;
	double      lr;
	const char *codec, *codec_push, *codec_pull;
	uint32_t    warmup, staleness, quorum;
	double      link_budget;
	const char *key;          // --secret-file (NULL: off)
	const char *tls_dir;      // trainer-<rank>.pem, .key and ca.pem (NULL)
	int         rejoin;       // declare and pull only: no offer, no steps
	int         leave_at;     // > 0: leave the job before step leave_at
	int         leave_at_end; // leave after the last step
	int         leave_on_error; // leave when a call failed, so that the
	                            // other ranks do not wait for this one
	int         nan_at;  // > 0: first push a NaN (odd ranks Inf) there
	int         encoded; // after warm-up, push codes encoded here with
	                     // error feedback (resid), as a GPU trainer does
	// Called before step k (NULL: none), e.g. to inject a fault.
	void (*before_step)(struct pt_rank *a, int k);
	// Called once the table is declared, before the offer (NULL: none);
	// a non-zero return is the rank's error.
	int (*declared)(struct pt_rank *a, ferry_client *c);
	// A test's own step k (NULL: pt_rank_step), given the gradient
	// buffers g and the weights w; k = -1 is the first pull. Returns a
	// FERRY_* code, or PT_STOP to end the steps there.
	int (*step)(struct pt_rank *a, ferry_client *c, int k, float *const *g,
	    float *const *w);
	void                 *ctx; // for the hooks
	// Out: the weights it ends with, the error-feedback residual, the
	// client's stats and fault counters at the end, whether the non-finite
	// push was refused with a message, the first error and libferry's last
	// error text.
	float                 w[NT][40];
	float                 resid[NT][40];
	struct ferry_stats    stats;
	struct ferry_recovery recovery;
	int                   nan_refused;
	int                   rv;
	char                  err[256];
};

// pt_rank_main runs one rank (arg: struct pt_rank *) on the calling
// thread; a pthread start routine.
void *pt_rank_main(void *arg);

// pt_rank_step is the plain step: k = -1 pulls into w; k >= 0 fills g with
// grad_for's gradients and pushes them (the NaN first at nan_at, the
// codes itself when encoded).
int pt_rank_step(struct pt_rank *a, ferry_client *c, int k, float *const *g,
    float *const *w);

// pt_ranks_run runs ranks a[0..n) (url, steps and the options filled in
// by the caller; rank i is a[i], at most 8) on their own threads to the
// end; each one's result is in its rv and err.
void pt_ranks_run(struct pt_rank *a, int n);

// pt_ranks_train is pt_ranks_run, then fails the test, naming the rank
// and why, unless each succeeded.
void pt_ranks_train(struct pt_rank *a, int n);

// Who a raw rpc comes from: signed as `who` with the key file `key`
// (NULL: unsigned) and, with tls_dir, over TLS with certificate
// <tls_dir>/<cert>.pem (its .key) of the CA <tls_dir>/ca.pem.
struct pt_peer {
	const char      *key;
	struct psw_ident who;
	const char      *tls_dir, *cert;
	// Whom a signed request is for ((0, 0): the scheduler for its
	// methods, else no server) and the job run it carries (0: none,
	// taken by the scheduler only; a signed scheduler reply names it:
	// psw_auth_run after psw_call).
	struct psw_ident to;
	uint64_t         run;
};

// pt_rpc sends header h and len bytes of payload for method to url as
// peer `as` (NULL: plain and unsigned) over a fresh connection and
// returns the reply's status, or -1 when no reply came within 10 s. With
// rep, the reply's Header is left there (free with
// pswire__header__free_unpacked; untouched when none came).
int pt_rpc(const struct pt_peer *as, const char *url, uint8_t method,
    Pswire__Header *h, const void *payload, size_t len, Pswire__Header **rep);

// pt_call is pt_rpc plain, without payload: the reply header (free with
// pswire__header__free_unpacked), or NULL when none came.
Pswire__Header *pt_call(const char *url, uint8_t method, Pswire__Header *h);

// pt_register_trainer registers trainer `rank` of a job of nt tensors
// ("t0", "t1", ...) of len floats each, sync, lr 0.1, no codecs, as a raw
// Register, and returns the reply (free with pswire__header__free_unpacked;
// fails the test when none came). For tests that declare jobs no
// ferry_client would (huge ones) or need no trainer behind the rank.
Pswire__Header *pt_register_trainer(const char *url, uint32_t rank, size_t nt,
    uint64_t len);

// pt_signed_map fetches the map of epoch >= 1 from the scheduler at url,
// signed with the key file `key` as trainer-0 with a fresh signing state
// (a new process's), and the job run it learned into *run (free the map
// with pswire__placement__free_unpacked). Fails the test when no map comes.
Pswire__Placement *pt_signed_map(const char *url, const char *key,
    uint64_t *run);

// pt_pull_msg builds a Pull of shard 0 at version `version` under map
// epoch 1 (sync: it parks until the version exists), with `payload` junk
// bytes after the header; request id rid.
nng_msg *pt_pull_msg(uint64_t rid, uint64_t version, size_t payload);

// pt_send_msg sends message m, whatever it holds, to url on a fresh
// connection (no re-send: a dropped oversize request must not loop) and
// returns the reply's status and, in err (n bytes), its error text; -1
// when no parseable reply came within 5 s.
int pt_send_msg(const char *url, nng_msg *m, char *err, size_t n);

// pt_send_raw is pt_send_msg of len bytes buf.
int pt_send_raw(const char *url, const void *buf, size_t len, char *err,
    size_t n);

// pt_metric reads the unlabelled sample `name` from registry r.
double pt_metric(struct obs_registry *r, const char *name);

// pt_stat reads the line "key<n>" of an INFO-style stats text (as
// ps_server_stats and ps_scheduler_stats write; key at a line's start,
// so "epoch:" is not "map_epoch:"). Fails the test when it is absent.
uint64_t pt_stat(const char *text, const char *key);

#endif // PT_HARNESS_H
