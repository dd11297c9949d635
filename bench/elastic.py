#!/usr/bin/python3
"""elastic.py — the soak of an elastic job (issue 27), driven by elastic.sh.

A local job: a scheduler with --trainers 1:6 and --state-dir, 2 servers,
short heartbeats (a dead trainer is out of the rounds in about a second),
trainers started without --rank (data leases). For --minutes M: random
joins, graceful leaves (SIGTERM) and kill -9s of trainers, 1..6 alive at a
time, about one every EVENT_S seconds, and one scheduler kill -9 + restart
on its --state-dir half way. Then the slowed trainers are replaced by
unslowed ones (graceful leaves) and the job finishes its epochs.

Checks, written to elastic.json:
  samples_lost / samples_doubled  from the scheduler's lease counters
      (/debug/state "lease_pool", else ferry_scheduler_lease_* metrics):
      epochs x 60000 positions consumed, none doubled
  hangs  exchanges (push to next weights) of any trainer longer than
      hang_bound_ms = --dead-after-ms + 1000 (the death-detection time of a
      silent member plus slack for a loaded machine; a killed trainer's
      closed connection is noticed in 0.4 s), from the trainers' "slow exchange" log
      lines (every exchange >= 1 s is logged) and their summaries'
      xchg_max_ms; max_wait_ms is the longest seen
  join_to_step_p99_ms  a joiner's registration (declare) to its first
      applied step, from its log line "first step applied ... after
      registering" (from_start: from the process's start, data loading
      included)
  acc  the job's final test accuracy ("job done: final test accuracy",
      printed by a trainer that was in the last rounds)
  acc_fixed  the same epochs with fixed ranks (--trainers N, --leases on:
      the same samples, exactly once), N the soak's mean number of live
      trainers (rounded), so that both make about as many updates
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

N_TRAIN = 60000
EVENT_S = 4.0          # mean time between events (>= 100 in 10 minutes)
DEAD_AFTER_MS = 2000   # silent members; a killed one's closed heartbeat
                       # connection is noticed in 2 x HEARTBEAT_MS
HEARTBEAT_MS = 200
SLOW_MS = 100          # per step, so that the epochs last the minutes
MAX_ALIVE = 6


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_file(path, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return open(path).read().strip()
        time.sleep(0.05)
    raise SystemExit("elastic: %s did not appear" % path)


class Job:
    def __init__(self, a, tag, trainers, epochs):
        self.a, self.tag, self.epochs = a, tag, epochs
        self.dir = os.path.join(a.raw, tag)
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.hport = free_port()
        self.url = "tcp://127.0.0.1:%d" % self.port
        self.http = "http://127.0.0.1:%d" % self.hport
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.state, exist_ok=True)
        self.sched_args = [a.ps, "--role=scheduler", "--listen=" + self.url,
                           "--trainers=" + trainers, "--servers=2",
                           "--state-dir=" + self.state,
                           "--heartbeat-ms=%d" % HEARTBEAT_MS,
                           "--dead-after-ms=%d" % DEAD_AFTER_MS,
                           "--http-listen=127.0.0.1:%d" % self.hport,
                           "--log-level=notice"]
        self.sched = None
        self.servers = []
        self.trainers = {}   # k -> dict(p, t0, slow, killed, termed)
        self.n = 0
        self.start_sched(0)
        for m in range(2):
            log = open(os.path.join(self.dir, "server-%d.log" % m), "w")
            self.servers.append(subprocess.Popen(
                [a.ps, "--role=server", "--scheduler=" + self.url,
                 "--heartbeat-ms=%d" % HEARTBEAT_MS],
                stdout=subprocess.DEVNULL, stderr=log))

    def start_sched(self, gen):
        log = open(os.path.join(self.dir, "scheduler-%d.log" % gen), "w")
        self.sched = subprocess.Popen(self.sched_args,
                                      stdout=subprocess.DEVNULL, stderr=log)
        end = time.time() + 30
        while time.time() < end:
            try:
                http_get(self.http + "/healthz", 1)
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("elastic: the scheduler did not come up")

    def trainer(self, slow=True, extra=()):
        k = self.n
        self.n += 1
        a = self.a
        args = [a.tr, "--scheduler=" + self.url, "--data=" + a.data,
                "--seed=3", "--epochs=%d" % self.epochs, "--batch=64",
                "--lr=0.1", "--heartbeat-ms=%d" % HEARTBEAT_MS,
                "--timeout-ms=120000", "--log-interval=0"] + list(extra)
        if slow and SLOW_MS:
            args.append("--slow-ms=%d" % SLOW_MS)
        out = open(os.path.join(self.dir, "t%d.out" % k), "w")
        err = open(os.path.join(self.dir, "t%d.log" % k), "w")
        self.trainers[k] = dict(p=subprocess.Popen(args, stdout=out,
                                                   stderr=err),
                                t0=time.time(), slow=slow, killed=False,
                                termed=False)
        return k

    def alive(self):
        return [k for k, t in self.trainers.items() if t["p"].poll() is None]

    def metrics(self):
        return http_get(self.http + "/metrics")

    def state_json(self):
        return json.loads(http_get(self.http + "/debug/state"))

    def stop(self):
        procs = [t["p"] for t in self.trainers.values()] + self.servers
        procs.append(self.sched)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def metric(text, name):
    m = re.search(r"^%s(?:\{[^}]*\})? ([0-9.eE+-]+)$" % re.escape(name),
                  text, re.M)
    return float(m.group(1)) if m else None


def pool_counts(job):
    """(consumed, doubled) over every epoch, from /debug/state, else the
    scheduler's metrics."""
    try:
        st = job.state_json()
        lp = st.get("lease_pool")
        if lp is not None:
            rows = lp if isinstance(lp, list) else [lp]

            def total(v):
                if isinstance(v, list):
                    return sum(total(x) for x in v)
                return float(v or 0)
            return (sum(total(r.get("consumed", 0)) for r in rows),
                    sum(total(r.get("doubled", 0)) for r in rows), "state")
    except (OSError, ValueError):
        pass
    t = job.metrics()
    return (metric(t, "ferry_scheduler_lease_positions_consumed_total"),
            metric(t, "ferry_scheduler_lease_doubled_total"), "metrics")


def progress(job):
    try:
        t = job.metrics()
    except OSError:
        return None
    e = metric(t, "ferry_scheduler_data_epoch")
    f = metric(t, "ferry_scheduler_data_epoch_progress")
    if e is None or f is None:
        return None
    return (e + f) / job.epochs


def read(path):
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""


def soak(a):
    epochs = a.epochs or max(1, round(a.minutes * 1.7))
    job = Job(a, "elastic", "1:%d" % MAX_ALIVE, epochs)
    rng = random.Random(a.seed)
    ev = dict(join=0, leave=0, kill=0, scheduler_restart=0)
    timeline = []
    t_start = time.time()
    for _ in range(3):
        job.trainer()
    restart_at = t_start + a.minutes * 30
    restarted = False
    end = t_start + a.minutes * 60
    alive_samples = []
    while time.time() < end:
        time.sleep(rng.uniform(0.5, 1.5) * EVENT_S)
        alive_samples.append(len(job.alive()))
        p = progress(job)
        if p is not None and p > 0.9:
            timeline.append((time.time() - t_start, "stop: 90% done"))
            break
        if not restarted and time.time() >= restart_at:
            job.sched.kill()
            job.sched.wait()
            job.start_sched(1)
            restarted = True
            ev["scheduler_restart"] += 1
            timeline.append((time.time() - t_start, "scheduler restart"))
            continue
        alive = job.alive()
        if len(alive) <= 1:
            kind = "join"
        elif len(alive) >= MAX_ALIVE:
            kind = rng.choice(["leave", "kill"])
        else:
            kind = rng.choices(["join", "leave", "kill"], [4, 3, 3])[0]
        if kind == "join":
            job.trainer()
        else:
            k = rng.choice(alive)
            t = job.trainers[k]
            if kind == "kill":
                t["killed"] = True
                t["p"].kill()
            else:
                t["termed"] = True
                t["p"].send_signal(signal.SIGTERM)
        ev[kind] += 1
        timeline.append((time.time() - t_start, kind))
    t_events = time.time() - t_start
    # The end: unslowed trainers take over (graceful leaves of the slowed
    # ones), and the job finishes its epochs.
    final = [job.trainer(slow=False) for _ in range(3)]
    for k in job.alive():
        if k not in final and job.trainers[k]["slow"]:
            job.trainers[k]["termed"] = True
            job.trainers[k]["p"].send_signal(signal.SIGTERM)
    deadline = time.time() + a.finish_s
    while job.alive() and time.time() < deadline:
        time.sleep(0.2)
    hung_at_end = len(job.alive())
    consumed, doubled, source = pool_counts(job)
    job.stop()
    wall = time.time() - t_start
    return job, dict(epochs=epochs, ev=ev, timeline=timeline,
                     t_events=t_events, wall=wall, consumed=consumed,
                     doubled=doubled, source=source, hung_at_end=hung_at_end,
                     mean_alive=(sum(alive_samples) / len(alive_samples)
                                 if alive_samples else 3.0))


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100.0 * (len(xs) - 1))))]


def analyse(job):
    joins, joins_start, waits, accs = [], [], [], []
    # A trainer that finds its push late for its round pulls and redoes
    # the step ("behind the job"): a join must never cause one.
    repulls = 0
    failed, refused, no_step, early_term = [], 0, 0, 0
    first = re.compile(r"first step applied at version \d+: ([0-9.]+) ms "
                       r"after start, ([0-9.]+) ms after registering")
    slow = re.compile(r"slow exchange: ([0-9.]+) ms")
    acc = re.compile(r"final test accuracy ([0-9.]+)")
    for k, t in job.trainers.items():
        lg = read(os.path.join(job.dir, "t%d.log" % k))
        out = read(os.path.join(job.dir, "t%d.out" % k))
        m = first.search(lg)
        if m:
            joins_start.append(float(m.group(1)))
            joins.append(float(m.group(2)))
        else:
            no_step += 1
        waits += [float(x) for x in slow.findall(lg)]
        for x in re.findall(r'"xchg_max_ms": ([0-9.]+)', out):
            waits.append(float(x))
        accs += [float(x) for x in acc.findall(lg)]
        repulls += lg.count("behind the job")
        rc = t["p"].returncode
        if t["termed"] and rc == -signal.SIGTERM:
            # SIGTERM before the trainer caught signals (loading its
            # data): it held nothing yet.
            early_term += 1
        elif rc not in (0, None) and not t["killed"]:
            if "flapping" in lg or "job full" in lg:
                refused += 1
            else:
                failed.append(dict(trainer=k, rc=rc, log=lg[-600:]))
    return dict(joins=joins, joins_start=joins_start, waits=waits,
                accs=accs, failed=failed, refused=refused, no_step=no_step,
                repulls=repulls,
                early_term=early_term)


def fixed_run(a, epochs, trainers):
    job = Job(a, "fixed", str(trainers), epochs)
    for r in range(trainers):
        job.trainer(slow=False, extra=["--rank=%d" % r, "--leases=on"])
    deadline = time.time() + a.finish_s
    while job.alive() and time.time() < deadline:
        time.sleep(0.2)
    accs = []
    for k in job.trainers:
        accs += [float(x) for x in re.findall(
            r"final test accuracy ([0-9.]+)",
            read(os.path.join(job.dir, "t%d.log" % k)))]
    job.stop()
    return accs[-1] if accs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--finish-s", type=float, default=900)
    ap.add_argument("--no-fixed", action="store_true")
    ap.add_argument("--ps", required=True)
    ap.add_argument("--tr", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="")
    a = ap.parse_args()
    job, s = soak(a)
    r = analyse(job)
    expected = s["epochs"] * N_TRAIN
    consumed = s["consumed"]
    hang_bound = DEAD_AFTER_MS + 1000
    acc = r["accs"][-1] if r["accs"] else None
    # As many fixed ranks as the soak had alive on average: the same
    # samples in about as many updates.
    fixed_n = max(1, int(round(s["mean_alive"])))
    acc_fixed = None if a.no_fixed else fixed_run(a, s["epochs"], fixed_n)
    res = {
        "minutes": a.minutes,
        "epochs": s["epochs"],
        "events": sum(s["ev"].values()),
        "events_by_kind": s["ev"],
        "events_s": round(s["t_events"], 1),
        "wall_s": round(s["wall"], 1),
        "hangs": sum(1 for w in r["waits"] if w > hang_bound),
        "hang_bound_ms": hang_bound,
        "max_wait_ms": max(r["waits"]) if r["waits"] else 0.0,
        "trainers_left_running": s["hung_at_end"],
        "samples_expected": expected,
        "samples_consumed": consumed,
        "samples_lost": (None if consumed is None
                         else max(0, expected - int(consumed))),
        "samples_doubled": (None if consumed is None or s["doubled"] is None
                            else int(s["doubled"]) +
                            max(0, int(consumed) - expected)),
        "counts_from": s["source"],
        "join_to_step_p50_ms": pct(r["joins"], 50),
        "join_to_step_p99_ms": pct(r["joins"], 99),
        "join_to_step_from_start_p99_ms": pct(r["joins_start"], 99),
        "joins_measured": len(r["joins"]),
        "trainers_without_a_step": r["no_step"],
        "joins_refused": r["refused"],
        "terminated_in_startup": r["early_term"],
        "trainer_failures": len(r["failed"]),
        "repulls": r["repulls"],
        "acc": acc,
        "acc_fixed": acc_fixed,
        "fixed_trainers": fixed_n,
        "mean_alive": round(s["mean_alive"], 2),
        "acc_diff_points": (None if acc is None or acc_fixed is None
                            else round(100 * (acc - acc_fixed), 2)),
        "dead_after_ms": DEAD_AFTER_MS,
        "slow_ms": SLOW_MS,
        "raw": a.raw,
        "command": a.command,
    }
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    for fl in r["failed"][:3]:
        sys.stderr.write("elastic: trainer %d exited %s:\n%s\n" %
                         (fl["trainer"], fl["rc"], fl["log"]))
    print(json.dumps({k: res[k] for k in (
        "events", "hangs", "samples_lost", "samples_doubled",
        "join_to_step_p99_ms", "acc", "acc_fixed")}))
    ok = (res["samples_lost"] == 0 and res["samples_doubled"] == 0 and
          res["hangs"] == 0 and res["trainers_left_running"] == 0 and
          acc is not None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
