// harness.h — what several ps suites share to drive an in-process job
// (cluster.h's, or their own): a trainer thread that trains one rank of
// the 3-tensor job to the end (plain, with a secret, or over TLS), one
// raw rpc sent as any peer (plain tcp, signed as any member, or over TLS
// with any certificate), and a metric read from a registry.
#ifndef PS_HARNESS_H
#define PS_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "obs/obs.h"
#include "psw/psw.h"

// One rank: pt_rank_main declares the job's 3 tensors, (rank 0) offers
// weights i, pulls, then runs `steps` sync push-pulls (lr 0.5) with
// grad_for's gradients, stopping at the first error.
struct pt_rank {
	const char *url; // the scheduler's
	int         rank, steps;
	const char *codec;   // push and pull (NULL: libferry's default)
	const char *key;     // --secret-file (NULL: off)
	const char *tls_dir; // trainer-<rank>.pem, .key and ca.pem (NULL)
	int         rejoin;  // declare and pull only: no offer, no steps
	// Called before step k (NULL: none), e.g. to inject a fault.
	void (*before_step)(struct pt_rank *a, int k);
	void    *ctx; // for before_step
	// Out: the weights it ends with, libferry's map changes, the first
	// error and libferry's last error text.
	float    w[NT][40];
	uint64_t map_changes;
	int      rv;
	char     err[256];
};

// pt_rank_main runs one rank (arg: struct pt_rank *) on the calling
// thread; a pthread start routine.
void *pt_rank_main(void *arg);

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
};

// pt_rpc sends header h and len bytes of payload for method to url as
// peer `as` (NULL: plain and unsigned) over a fresh connection and
// returns the reply's status, or -1 when no reply came within 10 s. With
// rep, the reply's Header is left there (free with
// pswire__header__free_unpacked; untouched when none came).
int pt_rpc(const struct pt_peer *as, const char *url, uint8_t method,
    Pswire__Header *h, const void *payload, size_t len, Pswire__Header **rep);

// pt_metric reads the unlabelled sample `name` from registry r.
double pt_metric(struct obs_registry *r, const char *name);

// pt_stat reads the line "key<n>" of an INFO-style stats text (as
// ps_server_stats and ps_scheduler_stats write; key at a line's start,
// so "epoch:" is not "map_epoch:"). Fails the test when it is absent.
uint64_t pt_stat(const char *text, const char *key);

#endif // PS_HARNESS_H
