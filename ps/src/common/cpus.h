// cpus.h — which CPUs ps-server's threads run on (--cpus).
//
// DESIGN: a scheduler's work is many small messages (a thousand members'
// heartbeats a second), each handed from nng's poller thread to its task
// threads and back. On two or more CPUs those hand-offs wake threads on
// other CPUs, and a cross-CPU wake-up (an interrupt between CPUs, an exit
// to the hypervisor on a virtual machine) costs more than the message's
// own work: keeping every thread on one CPU cut the scheduler's CPU for
// 1,000 members from 7.1-9.0% of a core to 4.7-5.5% (bench/scale/sched.sh).
// On that one CPU a woken thread still preempts its waker half-way through
// a message; batch scheduling (SCHED_BATCH: no preemption on wake-up) lets
// the waker finish first, which took it from a median 7.4% to 4.8% in
// interleaved runs on a busier day. Both are what `auto` means for a
// scheduler. A server's messages are large and its work parallel: it
// keeps every CPU and the default policy. Threads inherit their creator's
// CPUs and policy, so the choice is applied once, before nng starts its
// threads.
#ifndef PS_CPUS_H
#define PS_CPUS_H

// cpu_set_t is a GNU extension: define _GNU_SOURCE before any include.
#ifndef _GNU_SOURCE
#error "cpus.h needs _GNU_SOURCE defined before the first include"
#endif
#include <sched.h>
#include <stddef.h>

// ps__cpus_parse reads spec (--cpus) for a process allowed on *allowed
// and running on CPU now (sched_getcpu; -1 when unknown) into *out:
// "all" is *allowed; "auto" is one CPU (now, or the first allowed) for a
// scheduler (is_scheduler != 0) and *allowed otherwise; a list ("0-3,8")
// is those CPUs, each of which must be allowed. Returns 0, or -1 with a
// message naming what was wrong in err (n bytes).
int ps__cpus_parse(const char *spec, int is_scheduler,
    const cpu_set_t *allowed, int now, cpu_set_t *out, char *err, size_t n);

// ps__cpus_apply restricts the calling thread, and so every thread it
// creates afterwards, to the CPUs spec names (ps__cpus_parse); a
// scheduler's "auto" also asks for batch scheduling (SCHED_BATCH, best
// effort). Call it before anything starts a thread. Returns 0 (also where the
// CPUs cannot be read: nothing is changed), or -1 with a message in err.
int ps__cpus_apply(const char *spec, int is_scheduler, char *err, size_t n);

// ps__cpus_format writes the CPUs of *set as a list ("0-3,8") into buf (n
// bytes, truncated) and returns buf.
char *ps__cpus_format(const cpu_set_t *set, char *buf, size_t n);

#endif
