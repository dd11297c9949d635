// pair.c — what the cluster suites share (pair.h): two trainer threads
// run on a cluster and compared bit for bit, the wait for the servers to
// apply a map, and a link report sent raw.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

#include "cluster.h"
#include "ferry.pb-c.h"
#include "ferry/ferry.h"
#include "harness.h"
#include "pair.h"
#include "ps/ps.h"
#include "pt.h"

double pair_link_budget;

// servers_caught_up waits (5 s at most) until every server of cl has
// applied the scheduler's current map, so that a trainer's next request
// meets it: on a loaded machine the few steps left could otherwise end
// before any server has heard of the move, and nobody re-fetches.
void
servers_caught_up(struct cluster *cl)
{
	char text[2048];
	ps_scheduler_stats(cl->sched, text, sizeof(text));
	unsigned long long want = pt_stat(text, "epoch:");
	for (int i = 0; i < 500; i++) {
		int behind = 0;
		for (int m = 0; m < cl->n_srv; m++) {
			ps_server_stats(cl->srv[m], text, sizeof(text));
			behind |= pt_stat(text, "map_epoch:") < want;
		}
		if (!behind) {
			return;
		}
		nng_msleep(10);
	}
	ck_abort_msg("servers did not apply map epoch %llu in 5 s", want);
}

// move_all is a trainer hook: it re-places every shard on the other
// server, in the middle of training, and waits until the servers have
// the new map.
void
move_all(void *arg, int step)
{
	struct cluster *cl = arg;
	uint32_t        assign[5];
	for (uint32_t i = 0; i < 5; i++) {
		assign[i] = (i + (uint32_t) (step / 3)) % 2;
	}
	PT_OK(ps_scheduler_replace(cl->sched, assign, 5));
	servers_caught_up(cl);
}

// pair_hook is rank 0's before_step: the pair_opts hook, every hook_at
// steps after the first.
static void
pair_hook(struct pt_rank *a, int k)
{
	const struct pair_opts *o = a->ctx;
	if (o->hook != NULL && o->hook_at > 0 && k > 0 &&
	    k % o->hook_at == 0) {
		o->hook(o->hook_arg, k);
	}
}

// train_pair trains ranks 0 and 1 on cl with o and checks they succeeded.
void
train_pair(struct cluster *cl, struct pt_rank a[2], const struct pair_opts *o)
{
	pthread_t th[2];
	for (int r = 0; r < 2; r++) {
		memset(&a[r], 0, sizeof(a[r]));
		if (r == 0) {
			a[r].before_step = pair_hook;
			a[r].ctx         = (void *) o;
		}
		a[r].url         = ps_scheduler_url(cl->sched);
		a[r].rank        = r;
		a[r].steps       = o->steps;
		a[r].codec_push  = o->push;
		a[r].codec_pull  = o->pull;
		a[r].warmup      = o->warmup;
		a[r].encoded     = o->encoded;
		a[r].link_budget = pair_link_budget;
		pthread_create(&th[r], NULL, pt_rank_main, &a[r]);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(th[r], NULL);
		ck_assert_msg(a[r].rv == 0, "rank %d (%s/%s): %s: %s", r,
		    o->push, o->pull, ferry_strerror(a[r].rv), a[r].err);
	}
}

// run_pair_hook trains 2 trainers x 2 servers for K steps with the
// codecs; with move_at > 0 rank 0 moves every shard every move_at steps.
void
run_pair_hook(struct pt_rank a[2], int K, const char *push, const char *pull,
    uint32_t warmup, int move_at)
{
	struct cluster   cl;
	struct pair_opts o = { K, push, pull, warmup, 0, NULL, NULL, 0 };
	cluster_open(&cl, 2, 2, PS_PLACEMENT_UNIFORM);
	if (move_at > 0) {
		o.hook     = move_all;
		o.hook_arg = &cl;
		o.hook_at  = move_at;
	}
	train_pair(&cl, a, &o);
	cluster_stop(&cl);
}

void
run_pair(struct pt_rank a[2], int K, const char *push, const char *pull,
    uint32_t warmup)
{
	run_pair_hook(a, K, push, pull, warmup, 0);
}

// same_weights checks that two runs ended with bit-identical weights.
void
same_weights(struct pt_rank x[2], struct pt_rank y[2])
{
	for (int r = 0; r < 2; r++) {
		for (int t = 0; t < NT; t++) {
			ck_assert_msg(memcmp(x[r].w[t], y[r].w[t],
			                  lens[t] * sizeof(float)) == 0,
			    "rank %d tensor %d differs", r, t);
		}
	}
}

// raw_report sends rank's link measurements for n servers and returns the
// reply's status.
int
raw_report(const char *url, uint32_t rank, size_t n, double *rtt, double *bw)
{
	Pswire__Header             h = PSWIRE__HEADER__INIT;
	Pswire__ReportLinksRequest r = PSWIRE__REPORT_LINKS_REQUEST__INIT;
	r.rank                       = rank;
	r.n_rtt_s                    = n;
	r.rtt_s                      = rtt;
	r.n_bw_bps                   = n;
	r.bw_bps                     = bw;
	h.body_case                  = PSWIRE__HEADER__BODY_LINKS_REQ;
	h.links_req                  = &r;
	Pswire__Header *rh = pt_call(url, PSWIRE__METHOD__REPORT_LINKS, &h);
	ck_assert_ptr_nonnull(rh);
	int st = rh->status;
	pswire__header__free_unpacked(rh, NULL);
	return st;
}
