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
#include "tbl/tbl.h"

// ps__job_optim reads job's optimizer, lr schedule and clip norm into *o
// and *sc (absent messages: SGD, constant lr) and checks them. Errors:
// FB_EINVAL with a reason in why (n bytes); *o and *sc untouched then. Pure.
int ps__job_optim(const Pswire__JobConfig *job, struct fb_optim *o,
    struct fb_lr_sched *sc, char *why, size_t n);

// ps__job_kinds checks that every tensor of job has a known kind
// (TENSOR_WEIGHTS or TENSOR_AVERAGE): FB_OK, or FB_EINVAL with the first
// tensor that has not, named, in why (n bytes). Pure.
int ps__job_kinds(const Pswire__JobConfig *job, char *why, size_t n);

// ps__job_local checks the job's local-steps fields (docs/algorithms.md
// §7) for coherence: local_steps > 0 and inner_lr > 0 go together,
// inner_lr < 1e6, fragments <= PS_MAX_FRAGMENTS, and fragments > 1 needs
// local steps, sync mode and local_steps % fragments == 0. FB_OK, or
// FB_EINVAL with a reason naming the field in why (n bytes). Pure.
int ps__job_local(const Pswire__JobConfig *job, char *why, size_t n);

// The most fragments a job's shards may be synced in.
#define PS_MAX_FRAGMENTS 4096u

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
	// Local steps: the pushes are pseudo-gradients and each update's lr
	// is the schedule's times lr_mul (inner_lr; 1.0 when local_steps is
	// 0, which changes no bit: x * 1.0 == x).
	uint32_t           local_steps;
	uint32_t           fragments;
	double             inner_lr;
	double             lr_mul;
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

// A sparse table as a server runs it (JobConfig.tables[t]), read by
// ps__table_read: the store's conf, the lr, the placement inputs and the
// row codecs (bucket = dim: one scale per row).
struct ps_table {
	struct tbl_conf   conf;
	double            lr;     // TableDesc.lr (0: the job's lr schedule)
	uint32_t          shards; // TableDesc.shards (0: one per server)
	uint64_t          expected_rows; // 0 read as 1,000,000
	struct comp_codec cpush, cpull;
};

// The most hash ranges a table may be cut into, and the most tables.
#define PS_TABLE_MAX_SHARDS 65536u
#define PS_MAX_TABLES 4096u

// ps__table_read derives table t of job (t < job->n_tables) into *out:
// the one place a TableDesc becomes a tbl_conf (zero fields take the
// defaults TableDesc names; the row seed is JobConfig.seed, the table its
// index). Errors: FB_EINVAL with a reason naming the table and the field
// in why (n bytes); *out partly written then. Pure.
int ps__table_read(const Pswire__JobConfig *job, size_t t,
    struct ps_table *out, char *why, size_t n);

// ps__job_tables checks every table of job (ps__table_read) and that their
// names are distinct: FB_OK, or FB_EINVAL with the first problem in why.
// Pure.
int ps__job_tables(const Pswire__JobConfig *job, char *why, size_t n);

#endif // PS_JOBCONF_H
