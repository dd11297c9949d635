// jobconf.h — what the scheduler and the server share about a job's
// config: reading its optimizer and lr schedule out of the JobConfig
// (jobconf.c). The scheduler checks a job with it; a server sets up its
// update with it (the update itself is the server role's own).
#ifndef PS_JOBCONF_H
#define PS_JOBCONF_H

#include <stddef.h>

#include "fb/optim.h"
#include "ferry.pb-c.h"

// ps__job_optim reads job's optimizer, lr schedule and clip norm into *o
// and *sc (absent messages: SGD, constant lr) and checks them. Errors:
// FB_EINVAL with a reason in why (n bytes); *o and *sc untouched then. Pure.
int ps__job_optim(const Pswire__JobConfig *job, struct fb_optim *o,
    struct fb_lr_sched *sc, char *why, size_t n);

#endif // PS_JOBCONF_H
