"""chaos.py - bench/chaos.sh's harness (issue 24): a sync job of 2 servers
and 3 trainers on loopback, one fault at a time for --minutes.

Run it through bench/chaos.sh, which finds the build and the data set;
this file is the harness: python3 bench/chaos/chaos.py --ps PS --tr TR
--data DIR [options] (see main() for them).

The job. The scheduler (--state-dir, a fixed --listen port), 2 servers
(fixed --listen ports) and 3 trainers: the default MLP, --batch 64, SGD,
lossless pull, --shard-bytes 65536 (19 shards over both servers),
--max-steps sized to keep it busy for the whole run (a short fault-free
calibration job measures the step rate; --steps sets it instead). Trainers
1 and 2 print a progress line every step, rank 0 every RANK0_INTERVAL
steps (rank 0 evaluates the test set at each of its lines).

The faults. After a pause of GAP_S seconds, one of six kinds, taken in a
shuffled rotation (every kind once per 6 faults): kill -9 or SIGSTOP of
the scheduler, of a server or of a trainer (which server or trainer: at
random). A killed member is restarted RESTART_S later with the same
argv (the scheduler on its URL and --state-dir, a server on its URL, a
trainer under its rank: it resumes at the job's version); a stopped one
is continued after STOP_S seconds (shorter than --dead-after-ms: a pause,
not a death; bench/lose_server.sh --signal stop covers the long stop).
Then the harness waits for recovery before the next pause.

Detection (detect_ms): from the fault to the first line of any other
member's log that notices it (job.first_notice: a warning or an error,
or a notice naming a fault, job.NOTICE_RE: the scheduler's dead or
suspect verdicts and lost shards, libferry's retries, re-fetches,
re-sends and back-offs, a re-seed, a promotion), before recovery. A fault
nobody logs (a short stop, a scheduler kill that training does not
need) is "undetected" and left out of the median. Recovery
(recover_ms): from the fault to the moment every trainer has printed a
progress line for a step past S + 1, S being the highest step any
trainer had printed at the fault (one step may be in flight). A trainer
that is not back within --recover-deadline-s is a hang. A healthy member
declared dead: a "member ROLE N dead" verdict of the scheduler between a
fault and its recovery that names a member other than the failed one,
still running (counted, not a failure: the issue's "no cascade").

The job is lost when a member exits by itself (a trainer with a non-zero
status, a server or the scheduler at all) or hangs; it is killed, the
loss logged, and a new job (fresh state, sized for the time left) takes
its place while at least 15 s are left. A job that finishes early is
followed by another the same way. Faults stop at --minutes (or when the
job is within a few steps of its end); the job then finishes alone (a
deadline counts a hang). acc is rank 0's final test_acc of the first job
that finished (the longest one), acc_fault_free that of a fault-free run
of the same flags (run after the chaos; --fault-free-acc skips it).

Output: RUN/faults.log (every fault, detection, recovery, loss, with log
excerpts), each job's logs in RUN/job-N/, a summary on stdout, and the
JSON (docs/benchmarks.md "Chaos" lists its keys). Exit 0 when no hang,
no job lost, every trainer finished every step, and (unless --no-acc-check)
acc is within 1 point of acc_fault_free; else 1.
"""
import argparse
import datetime
import json
import os
import random
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import job as jobmod  # noqa: E402

TRAINERS, SERVERS = 3, 2
RANK0_INTERVAL = 20
GAP_S = (0.5, 2.0)        # pause before a fault
STOP_S = (1.0, 4.0)       # SIGSTOP length (--dead-after-ms is 5 s)
RESTART_S = 1.0           # kill -> restart
END_MARGIN = 60           # no fault this close to the last step
KINDS = [(sig, role) for sig in ("kill", "stop")
         for role in ("scheduler", "server", "trainer")]


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Chaos:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.flog = open(f"{a.run}/faults.log", "w")
        self.faults = []          # one dict per fault
        self.jobs = []            # one dict per job
        self.job = None
        self.kinds = []

    # --- logging -----------------------------------------------------------
    def log(self, msg, echo=False):
        line = f"{now_iso()} {msg}"
        self.flog.write(line + "\n")
        self.flog.flush()
        if echo or self.a.verbose:
            print(f"chaos: {msg}", file=sys.stderr, flush=True)

    # --- the job -----------------------------------------------------------
    def tr_flags(self, d, steps):
        spe = (60000 // TRAINERS) // 64
        epochs = steps // spe + 2

        def flags(r):
            return [f"--data={self.a.data}", "--batch=64", "--seed=1",
                    f"--max-steps={steps}", f"--epochs={epochs}",
                    "--timeout-ms=30000",
                    f"--log-interval={RANK0_INTERVAL if r == 0 else 1}",
                    f"--weights-out={d}/w{r}.bin"]
        return flags

    def new_job(self, name, steps):
        d = f"{self.a.run}/{name}"
        os.makedirs(d)
        j = jobmod.Job(d, self.a.ps, self.a.tr, SERVERS, TRAINERS,
                       [f"--replicas={self.a.replicas}"],
                       ["--shard-bytes=65536"], self.tr_flags(d, steps))
        j.steps = steps
        return j

    def run_plain(self, name, steps, deadline_s):
        """A fault-free job of steps steps: (rank 0 summary, steps/s) or
        (None, None) with the reason logged."""
        j = self.new_job(name, steps)
        self.job = j
        try:
            if not j.start():
                self.log(f"{name}: the scheduler did not start", True)
                return None, None
            end = time.time() + deadline_s
            while any(m.rc() is None for m in j.trainers):
                if time.time() > end:
                    self.log(f"{name}: not done within {deadline_s} s", True)
                    return None, None
                time.sleep(0.05)
            bad = [m.name for m in j.trainers if m.rc() != 0]
            if bad:
                self.log(f"{name}: {bad} failed: {j.trainers[0].tail()}",
                         True)
                return None, None
            time.sleep(0.2)  # the stamping threads read the summary line
            s = j.trainers[0].summary
            lines = j.trainers[1].steps
            rate = None
            if len(lines) > 20:
                rate = (lines[-1][1] - lines[10][1]) / max(
                    lines[-1][0] - lines[10][0], 1e-3)
            return s, rate
        finally:
            j.close()

    # --- one fault ---------------------------------------------------------
    def pick(self):
        if not self.kinds:
            self.kinds = list(self.a.kinds)
            self.rng.shuffle(self.kinds)
        sig, role = self.kinds.pop()
        j = self.job
        if role == "scheduler":
            m = j.members["scheduler"]
        elif role == "server":
            m = self.rng.choice(j.servers)
        else:
            m = self.rng.choice(j.trainers)
        return sig, m

    def lost(self, reason):
        """Why the job is lost now, or None: a member that exited by itself."""
        for m in self.job.members.values():
            rc = m.rc()
            if rc is None or m.killed:
                continue
            if m in self.job.trainers and rc == 0:
                continue
            return f"{m.name} exited {rc} by itself {reason}: " + \
                " | ".join(m.tail(3))
        return None

    def sleep_watch(self, s, reason):
        """Sleeps s seconds; returns the loss reason if the job is lost."""
        end = time.time() + s
        while time.time() < end:
            why = self.lost(reason)
            if why:
                return why
            time.sleep(0.05)
        return None

    def one_fault(self, n):
        """Injects fault n and waits for recovery. Returns None, or the
        reason the job is lost ('hang: ...' for a missed deadline)."""
        j = self.job
        sig, m = self.pick()
        kind = f"{sig} {m.name.split('-')[0]}"
        top = j.max_step()
        rec = {"n": n, "kind": kind, "member": m.name, "step": top}
        self.faults.append(rec)
        t_f = time.time()
        rec["t_s"] = round(t_f - self.t_start, 3)
        if sig == "kill":
            m.kill()
            self.log(f"fault {n}: kill -9 {m.name} (pid {m.proc.pid}) at "
                     f"step {top}")
            why = self.sleep_watch(RESTART_S, f"after fault {n}")
            if why is None:
                m.start()
                self.log(f"fault {n}: {m.name} restarted (pid "
                         f"{m.proc.pid}, incarnation {m.inc})")
        else:
            dur = self.rng.uniform(*STOP_S)
            m.signal(signal.SIGSTOP)
            self.log(f"fault {n}: SIGSTOP {m.name} (pid {m.proc.pid}) for "
                     f"{dur:.1f} s at step {top}")
            why = self.sleep_watch(dur, f"after fault {n}")
            m.signal(signal.SIGCONT)
            self.log(f"fault {n}: SIGCONT {m.name}")
        rec["end_s"] = round(time.time() - self.t_start, 3)
        if why is None:
            why = self.wait_recovery(n, rec, t_f, top)
        t1 = t_f + rec["recover_ms"] / 1e3 if rec.get("recover_ms") else \
            time.time()
        hit = j.first_notice(t_f, t1, m.name)
        if hit is not None:
            rec["detect_ms"] = round((hit[0] - t_f) * 1e3, 1)
            rec["detect_line"] = hit[1][:300]
            self.log(f"fault {n}: detected +{rec['detect_ms']:.0f} ms: "
                     f"{hit[1][:300]}")
        else:
            rec["detect_ms"] = None
            self.log(f"fault {n}: no member logged it")
        dead = j.healthy_dead(t_f, t1, m)
        if dead:
            rec["healthy_declared_dead"] = dead
            self.log(f"fault {n}: a healthy member declared dead: {dead}")
        if why is not None:
            rec["outcome"] = "hang" if why.startswith("hang") else "lost"
            rec["why"] = why[:600]
        else:
            rec["outcome"] = "recovered"
        return why

    def wait_recovery(self, n, rec, t_f, top):
        """Waits for every trainer's line past top + 1 (or its exit 0)."""
        j = self.job
        end = t_f + self.a.recover_deadline_s
        while True:
            why = self.lost(f"after fault {n}")
            if why:
                return why
            back = []
            for m in j.trainers:
                s = [t for t, st in m.steps_after(t_f) if st > top + 1]
                if s:
                    back.append(s[0])
                elif m.rc() == 0 and not m.killed:
                    back.append(t_f)
                else:
                    back = None
                    break
            if back is not None:
                rec["recover_ms"] = round((max(back) - t_f) * 1e3, 1)
                now = [m.last_step() for m in j.trainers]
                self.log(f"fault {n}: recovered +{rec['recover_ms']:.0f} "
                         f"ms (steps now {now})")
                return None
            if time.time() > end:
                late = [m.name for m in j.trainers
                        if not [1 for _, st in m.steps_after(t_f)
                                if st > top + 1]]
                return (f"hang: no progress of {late} within "
                        f"{self.a.recover_deadline_s} s of fault {n}: " +
                        " | ".join(x for mm in late
                                   for x in j.members[mm].tail(2)))
            time.sleep(0.02)

    # --- one job under faults ----------------------------------------------
    def run_job(self, idx, steps, fault_end):
        name = f"job-{idx}"
        j = self.job = self.new_job(name, steps)
        info = {"name": name, "steps": steps, "faults": 0}
        self.jobs.append(info)
        self.log(f"{name}: starting, --max-steps {steps}", True)
        try:
            if not j.start():
                info["status"] = "lost"
                info["why"] = "the scheduler did not start"
                return info
            end = time.time() + 120
            while min((len(m.steps) for m in j.trainers)) == 0:
                why = self.lost("before the first step")
                if why or time.time() > end:
                    info["status"] = "lost"
                    info["why"] = why or "no step within 120 s of the start"
                    return info
                time.sleep(0.05)
            why = None
            while time.time() < fault_end:
                why = self.sleep_watch(self.rng.uniform(*GAP_S), "between "
                                       "faults")
                if why or time.time() >= fault_end:
                    break
                if j.max_step() >= steps - END_MARGIN or any(
                        m.rc() is not None for m in j.trainers):
                    break
                why = self.one_fault(len(self.faults) + 1)
                info["faults"] += 1
                if why:
                    break
            if why is None:
                why = self.finish(j)
            if why is not None:
                info["status"] = "hang" if why.startswith("hang") else "lost"
                info["why"] = why[:600]
                self.log(f"{name}: LOST: {why}", True)
                return info
            info["status"] = "finished"
            info["acc"] = j.trainers[0].summary.get("test_acc")
            self.log(f"{name}: finished all {steps} steps, acc "
                     f"{info['acc']}", True)
            return info
        finally:
            j.close()

    def finish(self, j):
        """Waits for the trainers to end; None when all did every step."""
        left = max(j.steps - max(j.max_step(), 0), 0)
        dl = left / max(self.rate, 1) * 3 + self.a.recover_deadline_s
        end = time.time() + dl
        while any(m.rc() is None for m in j.trainers):
            why = self.lost("at the end")
            if why:
                return why
            if time.time() > end:
                return (f"hang: the trainers did not end within {dl:.0f} s "
                        f"(steps {[m.last_step() for m in j.trainers]})")
            time.sleep(0.05)
        why = self.lost("at the end")
        if why:
            return why
        time.sleep(0.2)  # the stamping threads read the summary lines
        short = [f"{m.name} at {m.summary and m.summary.get('version')}"
                 for m in j.trainers
                 if not m.summary or m.summary.get("version") != j.steps]
        if short:
            return f"lost: trainers ended short of step {j.steps}: {short}"
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ps", required=True)
    p.add_argument("--tr", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--json", default="")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--steps", type=int, default=0,
                   help="--max-steps of the job (0: sized from a calibration)")
    p.add_argument("--fill", type=float, default=0.7,
                   help="share of the run the job's steps take fault-free")
    p.add_argument("--fault-free-acc", type=float, default=None)
    p.add_argument("--recover-deadline-s", type=float, default=60)
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--no-acc-check", action="store_true")
    p.add_argument("--kinds", default=",".join(f"{s}-{r}" for s, r in KINDS),
                   help="the fault kinds, comma-separated: kill-scheduler, "
                   "stop-server, ... (default: all six)")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    names = {f"{s}-{r}": (s, r) for s, r in KINDS}
    try:
        a.kinds = [names[k] for k in a.kinds.split(",")]
    except KeyError as e:
        p.error(f"--kinds: unknown kind {e} (known: {', '.join(names)})")
    c = Chaos(a)
    jobmod.install_exit_handlers(lambda: c.job and c.job.close())
    try:
        return run(c, a)
    finally:
        if c.job:
            c.job.close()


def run(c, a):
    # The step rate: a short fault-free job (or the rate --steps implies).
    c.rate = 80.0
    if a.steps <= 0:
        _, rate = c.run_plain("calibrate", 400, 300)
        if rate is None:
            c.log(f"calibration failed: sizing for {c.rate} steps/s", True)
        else:
            c.rate = rate
            c.log(f"calibration: {rate:.1f} steps/s", True)
    c.t_start = time.time()
    fault_end = c.t_start + a.minutes * 60
    idx = 0
    while True:
        left = fault_end - time.time()
        if idx > 0 and left < 15:
            break
        idx += 1
        steps = a.steps if a.steps > 0 and idx == 1 else max(
            int(c.rate * left * a.fill), 300)
        c.run_job(idx, steps, fault_end)
        if time.time() >= fault_end:
            break
    chaos_s = time.time() - c.t_start
    done = [jb for jb in c.jobs if jb["status"] == "finished"]
    ref = max(done, key=lambda jb: jb["steps"]) if done else None
    acc = ref["acc"] if ref else None
    acc_ff = a.fault_free_acc
    if ref and acc_ff is None:
        c.log(f"fault-free run of {ref['steps']} steps", True)
        s, _ = c.run_plain("fault-free", ref["steps"],
                           ref["steps"] / max(c.rate, 1) * 4 + 120)
        acc_ff = s.get("test_acc") if s else None
    return report(c, a, chaos_s, ref, acc, acc_ff)


def report(c, a, chaos_s, ref, acc, acc_ff):
    f = c.faults
    det = [x["detect_ms"] for x in f if x.get("detect_ms") is not None]
    rec = [x["recover_ms"] for x in f if x.get("recover_ms") is not None]
    by_kind = {}
    for x in f:
        k = by_kind.setdefault(x["kind"], {"faults": 0, "detected": 0,
                                           "recovered": 0, "recover_ms": []})
        k["faults"] += 1
        k["detected"] += x.get("detect_ms") is not None
        if x.get("recover_ms") is not None:
            k["recovered"] += 1
            k["recover_ms"].append(x["recover_ms"])
    for k in by_kind.values():
        r = k.pop("recover_ms")
        k["recover_ms_median"] = round(statistics.median(r), 1) if r else None
        k["recover_ms_max"] = max(r) if r else None
    hangs = sum(jb["status"] == "hang" for jb in c.jobs)
    lost = sum(jb["status"] != "finished" for jb in c.jobs)

    def med(v):
        return round(statistics.median(v), 1) if v else None
    out = {
        "faults": len(f), "hangs": hangs, "jobs_lost": lost,
        "acc": acc, "acc_fault_free": acc_ff,
        "detect_ms_median": med(det),
        "recover_ms_median": med(rec),
        "recover_ms_max": max(rec) if rec else None,
        "detect_ms_max": max(det) if det else None,
        "undetected": len(f) - len(det),
        "healthy_declared_dead": sum(len(x.get("healthy_declared_dead", []))
                                     for x in f),
        "minutes": a.minutes, "chaos_s": round(chaos_s, 1),
        "replicas": a.replicas, "seed": a.seed,
        "kinds": [f"{s}-{r}" for s, r in a.kinds],
        "steps_per_s_calibrated": round(c.rate, 1),
        "faults_by_kind": by_kind,
        "jobs": c.jobs,
        "job": {"servers": SERVERS, "trainers": TRAINERS, "mode": "sync",
                "optimizer": "sgd", "codec_pull": "none",
                "shard_bytes": 65536, "batch": 64,
                "layers": "784,256,128,10", "timeout_ms": 30000,
                "heartbeat_ms": 1000, "dead_after_ms": 5000},
        "fault_log": f,
    }
    ok = hangs == 0 and lost == 0 and ref is not None
    acc_ok = None
    if acc is not None and acc_ff is not None:
        acc_ok = abs(acc - acc_ff) <= 0.01
        if not a.no_acc_check:
            ok = ok and acc_ok
    out["acc_within_1_point"] = acc_ok
    out["passed"] = ok
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")
    kinds = ", ".join(f"{k} {v['faults']}" for k, v in sorted(by_kind.items()))
    print(f"chaos: {len(f)} faults in {chaos_s / 60:.1f} min ({kinds}); "
          f"hangs {hangs}, jobs lost {lost} of {len(c.jobs)}")
    print(f"chaos: detect median {out['detect_ms_median']} ms, max "
          f"{out['detect_ms_max']} ms ({out['undetected']} undetected); "
          f"recover median {out['recover_ms_median']} ms, max "
          f"{out['recover_ms_max']} ms")
    print(f"chaos: healthy members declared dead: "
          f"{out['healthy_declared_dead']}")
    print(f"chaos: acc {acc} vs fault-free {acc_ff}; "
          f"{'PASS' if ok else 'FAIL'}; fault log {a.run}/faults.log")
    for jb in c.jobs:
        if jb["status"] != "finished":
            print(f"chaos: {jb['name']} {jb['status']}: {jb.get('why')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
