// jobconf.h — what the scheduler and the server share about a job's
// config: reading its optimizer and lr schedule out of the JobConfig, and
// the job as a server runs it (struct ps_job), derived in one place
// (jobconf.c). The scheduler checks a job with ps__job_optim; a server
// keeps a ps_job and reads its fields where it uses them (the update
// itself is the server role's own).
#ifndef PS_JOBCONF_H
#define PS_JOBCONF_H

#include <stddef.h>

#include "comp/comp.h"
#include "fb/optim.h"
#include "ferry.pb-c.h"

// ps__job_optim reads job's optimizer, lr schedule and clip norm into *o
// and *sc (absent messages: SGD, constant lr) and checks them. Errors:
// FB_EINVAL with a reason in why (n bytes); *o and *sc untouched then. Pure.
int ps__job_optim(const Pswire__JobConfig *job, struct fb_optim *o,
    struct fb_lr_sched *sc, char *why, size_t n);

// ps__job_kinds checks that every tensor of job has a known kind
// (TENSOR_WEIGHTS or TENSOR_AVERAGE): FB_OK, or FB_EINVAL with the first
// tensor that has not, named, in why (n bytes). Pure.
int ps__job_kinds(const Pswire__JobConfig *job, char *why, size_t n);

// The job as a server runs it: the JobConfig's fields, and what follows
// from them, read once from the first map (ps__job_read).
struct ps_job {
	// How pushes apply: MODE_SYNC or MODE_ASYNC. SSP with staleness 0 is
	// BSP and runs the sync rounds (bit for bit); with K > 0 its pushes
	// apply as async ones.
	int                mode;
	int                ssp; // job mode MODE_SSP: pulls wait on clocks
	uint32_t           staleness; // SSP: K
	uint32_t           quorum; // sync: ranks that close a round (0: all)
	double             lr;
	uint32_t           warmup; // versions <= warmup are fp32
	// The optimizer and lr schedule (ps__job_optim), and the state
	// buffers each shard keeps for it (fb_optim_state_bufs).
	struct fb_optim    optim;
	struct fb_lr_sched lr_sched;
	uint32_t           optim_bufs;
	struct comp_codec  cpush, cpull;
	int                pull_none; // no pull codec: send x in full
	int                push_auto; // codec_push "auto": each push's refs
	                              // name their codec
};

// ps__job_read derives *j from job: the one place a JobConfig field becomes
// a server's setting. Errors: FB_EINVAL with a reason in why (n bytes)
// when the optimizer or a codec cannot be run; *j partly written then.
int ps__job_read(const Pswire__JobConfig *job, struct ps_job *j, char *why,
    size_t n);

#endif // PS_JOBCONF_H
