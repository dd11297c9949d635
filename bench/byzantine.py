#!/usr/bin/env python3
"""byzantine.py — untrusted trainers (issue 31), driven by byzantine.sh.

Two measurements on local jobs of 8 sync trainers (one server, a small
MLP on Fashion-MNIST, small batches so that nine processes fit two cores):

1. Robust aggregation. For every aggregate rule (mean, median, trimmed:B,
   cclip:TAU) a clean job (attack "none"), then f attackers (the highest
   ranks, so that rank 0, which evaluates, stays honest) running each
   attack for the whole job. Each row: the final test accuracy of rank 0
   (acc), the same rule's clean accuracy (acc_clean) and the median time
   per round (round_ms: rank 0's wall time less its evaluations, over its
   steps). The clean jobs run --repeat times, interleaved by rule, so that
   the rules' round times are compared on the same machine state.

2. Spot checks. --runs jobs, each with a new seed: rank 7 falsifies
   --falsify-rate of its pushes (noise, drawn from the seed), the
   scheduler keeps --rate of each trainer's pushes by its secret draw (and
   the pushes the robust aggregate marks as outliers), a verifier
   (trainer --verify 1) recomputes them, and a verified mismatch
   quarantines the trainer. A run ends when the falsifier is quarantined
   or after --catch-steps steps. caught_runs counts the runs where it was
   quarantined within --catch-steps versions (steps to catch: the version
   of the push whose verification caught it); false_positives counts the
   honest ranks quarantined in all runs. Then --lazy-runs more with a
   falsifier that pushes stale gradients (lazy:20), which stay inside the
   honest spread, so that only the random draw can find them
   (spot_check_more).

Writes --out: {"runs": [{attack, aggregate, attackers, trainers, acc,
acc_clean, round_ms}, ...], "spot_check": {rate, falsify_rate,
caught_runs, runs, median_steps_to_catch, false_positives, ...}, ...}.
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

TRAINERS = 8
LAYERS = "784,64,10"
BATCH = 16
LR = 0.1


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_file(path, timeout, procs=()):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return open(path).read().strip()
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError("a process exited before %s appeared"
                                   % path)
        time.sleep(0.02)
    raise RuntimeError("%s did not appear" % path)


class Job:
    """A scheduler, one server and TRAINERS trainers on loopback."""

    def __init__(self, a, tag, aggregate, attack="none", attackers=0,
                 steps=300, seed=1, spot=0.0, falsify=1.0, verifier=False):
        self.a, self.dir = a, os.path.join(a.raw, tag)
        os.makedirs(self.dir, exist_ok=True)
        self.procs, self.trainers = [], []
        url = "tcp://127.0.0.1:%d" % free_port()
        self.sched_log = os.path.join(self.dir, "scheduler.log")
        sched = [a.ps, "--role=scheduler", "--listen=" + url,
                 "--trainers=%d" % TRAINERS, "--servers=1",
                 "--allow-attacks=1", "--spot-check=%g" % spot,
                 # no link probing: the same shard cut in every run
                 # (cclip clips each shard, so the cut is part of the
                 # rule)
                 "--probe-bytes=0",
                 "--log-level=notice"]
        self.sched = self.spawn(sched, "scheduler")
        self.http = "127.0.0.1:%d" % free_port()
        srv = [a.ps, "--role=server", "--scheduler=" + url,
               "--aggregate=" + aggregate, "--log-level=notice",
               "--http-listen=" + self.http]
        self.spawn(srv, "server")
        common = ["--scheduler=" + url, "--data=" + a.data,
                  "--layers=" + LAYERS, "--batch=%d" % BATCH,
                  "--lr=%g" % a.lr, "--seed=%d" % seed, "--epochs=100",
                  "--max-steps=%d" % steps, "--log-interval=0",
                  "--blas-threads=1", "--timeout-ms=120000"]
        for r in range(TRAINERS):
            extra = []
            if attack != "none" and r >= TRAINERS - attackers:
                extra = ["--attack=" + attack,
                         "--attack-rate=%g" % falsify]
            self.trainers.append(self.spawn(
                [a.tr, "--rank=%d" % r] + common + extra, "t%d" % r))
        self.verifier = None
        if verifier:
            self.verifier = self.spawn([a.tr, "--verify=1"] + common,
                                       "verifier")

    def spawn(self, args, name):
        out = open(os.path.join(self.dir, name + ".out"), "w")
        err = open(os.path.join(self.dir, name + ".log"), "w")
        p = subprocess.Popen(args, stdout=out, stderr=err)
        self.procs.append(p)
        return p

    def stop(self, kill=False):
        """SIGTERM (kill: SIGKILL, for a job cut short: trainers blocked
        waiting for a map once the server is gone would sit out their
        --timeout-ms) and wait for every process."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def round_close_ms(self):
        """The server's time closing a sync round (aggregate, update,
        publish), ms per round: ferry_round_close_seconds_total over
        ferry_aggregate_rounds_total (None when not to be had)."""
        try:
            with urllib.request.urlopen("http://%s/metrics" % self.http,
                                        timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        close = re.search(r"^ferry_round_close_seconds_total ([0-9.eE+-]+)",
                          text, re.M)
        rounds = re.search(r"^ferry_aggregate_rounds_total\{[^}]*\} "
                           r"([0-9.eE+-]+)", text, re.M)
        if not close or not rounds or float(rounds.group(1)) == 0:
            return None
        return 1000.0 * float(close.group(1)) / float(rounds.group(1))

    def summary(self, rank=0):
        path = os.path.join(self.dir, "t%d.out" % rank)
        for line in reversed(open(path).read().splitlines()):
            if line.startswith('{"summary"'):
                return json.loads(line)["summary"]
        return None

    def quarantined(self):
        """[(rank, version or None)] from the scheduler's log lines."""
        got = []
        for line in open(self.sched_log, errors="replace"):
            m = re.search(r"trainer rank (\d+) quarantined: (.*)", line)
            if m:
                v = re.search(r"version (\d+)", m.group(2))
                got.append((int(m.group(1)), int(v.group(1)) if v else None))
        return got


def aggregation_run(a, tag, rule, attack, f, steps, seed=1):
    job = Job(a, tag, rule, attack, f, steps, seed=seed)
    try:
        rc = job.trainers[0].wait(a.timeout)
    except subprocess.TimeoutExpired:
        rc = None
    s = job.summary(0) if rc == 0 else None
    close_ms = job.round_close_ms()  # before the server stops
    job.stop()
    if s is None:
        # A mean that lets attackers blow the weights up ends the job:
        # the gradients turn NaN and the servers refuse them. That is
        # the attack winning, recorded as such (acc None, diverged).
        log = open(os.path.join(job.dir, "t0.log"), errors="replace").read()
        diverged = rc is not None and ("NaN" in log or "Inf" in log or
                                       "overflow" in log)
        print("byzantine: %s: rank 0 ended without a summary (rc %s%s); "
              "logs in %s" % (tag, rc, ", diverged" if diverged else "",
                              job.dir), file=sys.stderr)
        if diverged:
            return {"acc": None, "round_ms": None, "diverged": True}
        return None
    steps_run = max(1, s.get("steps_run") or s.get("steps") or 1)
    round_ms = 1000.0 * (s["wall_s"] - s.get("eval_s", 0.0)) / steps_run
    return {"acc": s.get("test_acc"), "round_ms": round(round_ms, 3),
            "close_ms": None if close_ms is None else round(close_ms, 4)}


def spot_run(a, k, seed, attack):
    job = Job(a, "spot-%s-%03d" % (attack.replace(":", ""), k),
              a.spot_aggregate, attack, 1,
              a.catch_steps, seed=seed, spot=a.rate,
              falsify=a.falsify_rate, verifier=True)
    caught, end = None, time.time() + a.timeout
    try:
        while time.time() < end:
            q = job.quarantined()
            if any(r == TRAINERS - 1 for r, _ in q):
                caught = q
                break
            if job.trainers[0].poll() is not None:
                break
            time.sleep(0.05)
        # the verifier may still be reporting the last kept pushes
        if caught is None:
            time.sleep(0.5)
            caught = job.quarantined()
    finally:
        job.stop(kill=True)
    q = job.quarantined()
    step = next((v for r, v in q if r == TRAINERS - 1), None)
    honest = sorted({r for r, _ in q if r != TRAINERS - 1})
    return {"seed": seed, "caught": step is not None,
            "steps_to_catch": step, "honest_quarantined": honest}


def merge_previous(a, res, attacks):
    """A partial run (--only, or --attacks none: the clean runs alone)
    replaces its own part of an existing --out and keeps the rest, so
    that the parts can be rerun apart (the clean runs' timings on a
    quiet machine, say)."""
    if not os.path.exists(a.out):
        return res
    try:
        old = json.load(open(a.out))
    except ValueError:
        return res
    if a.skip_spot:
        for k in ("spot_check", "spot_check_more"):
            if k in old:
                res[k] = old[k]
    if a.skip_aggregation:
        for k, v in old.items():
            if k not in ("spot_check", "spot_check_more", "command",
                         "when"):
                res[k] = v
        res["runs"] = old.get("runs", [])
    elif attacks == ["none"] or not attacks:
        # the clean runs only: the attacked rows stay
        res["runs"] += [r for r in old.get("runs", [])
                        if r["attack"] != "none"]
        res["steps"] = old.get("steps", res["steps"])
    else:
        # attacked rows of other attacker counts (or other attacks) than
        # this run's stay; the clean rows are this run's
        ran = {(r["attack"], r["attackers"], r["aggregate"])
               for r in res["runs"]}
        fs = {int(x) for x in a.attackers.split(",")}
        res["runs"] += [r for r in old.get("runs", [])
                        if r["attack"] != "none" and
                        (r["attack"], r["attackers"], r["aggregate"])
                        not in ran and
                        (r["attackers"] not in fs or
                         r["attack"] not in attacks)]
    res["parts"] = dict(old.get("parts", {}))
    part = "spot" if a.skip_aggregation else (
        "clean" if attacks == ["none"] else
        "aggregation" if a.skip_spot else "all")
    res["parts"][part] = {"command": a.command, "when": res["when"]}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ps", required=True)
    ap.add_argument("--tr", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--attackers", default="1,2,3")
    ap.add_argument("--attacks", default="sign-flip,scale:-10,noise:1,"
                    "alie:1,ipm:4,label-flip,lazy:20")
    ap.add_argument("--aggregates", default="mean,median,trimmed:2,"
                    "cclip:1x")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rate", type=float, default=0.02)
    ap.add_argument("--falsify-rate", type=float, default=0.1)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--catch-steps", type=int, default=500)
    ap.add_argument("--lazy-runs", type=int, default=20)
    ap.add_argument("--spot-aggregate", default="cclip:1x")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--skip-spot", action="store_true")
    ap.add_argument("--skip-aggregation", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.raw, exist_ok=True)
    rules = a.aggregates.split(",")
    attacks = a.attacks.split(",")
    fs = [int(x) for x in a.attackers.split(",")]
    res = {"command": a.command, "when": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "trainers": TRAINERS,
        "layers": LAYERS, "batch": BATCH, "lr": a.lr, "steps": a.steps,
        "runs": []}

    if not a.skip_aggregation:
        clean = {r: [] for r in rules}
        for i in range(a.repeat):
            for rule in rules:
                x = aggregation_run(a, "clean-%s-%d" % (rule, i), rule,
                                    "none", 0, a.steps)
                if x and x["acc"] is not None:
                    clean[rule].append(x)
                    print("byzantine: clean %-10s acc %.4f round %.2f ms"
                          % (rule, x["acc"], x["round_ms"]),
                          file=sys.stderr)
        # Accuracy over --seeds seeds (data order and initial weights;
        # the repeats above are seed 1): one seed's accuracy moves by a
        # point or two with any change to the run.
        seeds = list(range(1, a.seeds + 1))
        acc_seeds = {r: [clean[r][0]["acc"]] if clean[r] else []
                     for r in rules}
        for seed in seeds[1:]:
            for rule in rules:
                x = aggregation_run(a, "clean-%s-s%d" % (rule, seed), rule,
                                    "none", 0, a.steps, seed)
                if x and x["acc"] is not None:
                    acc_seeds[rule].append(x["acc"])
        acc_clean = {}
        for rule in rules:
            if not clean[rule]:
                continue
            acc_clean[rule] = statistics.mean(acc_seeds[rule])
            res["runs"].append({
                "attack": "none", "aggregate": rule, "attackers": 0,
                "trainers": TRAINERS, "acc": acc_clean[rule],
                "acc_clean": acc_clean[rule], "seeds": seeds,
                "acc_seeds": acc_seeds[rule],
                "round_ms": statistics.median(
                    x["round_ms"] for x in clean[rule]),
                "round_ms_all": [x["round_ms"] for x in clean[rule]],
                "close_ms": statistics.median(
                    x["close_ms"] for x in clean[rule]
                    if x["close_ms"] is not None)
                if any(x["close_ms"] is not None for x in clean[rule])
                else None})
        base = next((r for r in res["runs"] if r["aggregate"] == "mean"),
                    None)
        if base:
            res["robust_round_ratio"] = {
                r["aggregate"]: round(r["round_ms"] / base["round_ms"], 4)
                for r in res["runs"]}
            # What each rule adds to closing a round (the server's own
            # time, measured inside it: steadier than the round times of
            # nine processes sharing the cores), as a share of mean's
            # round time.
            if base.get("close_ms") is not None:
                res["robust_close_share"] = {
                    r["aggregate"]: round((r["close_ms"] -
                                           base["close_ms"]) /
                                          base["round_ms"], 4)
                    for r in res["runs"] if r.get("close_ms") is not None}
        for f in fs:
            for attack in attacks:
                if attack == "none":
                    continue  # the clean runs above
                for rule in rules:
                    tag = "%s-%s-f%d" % (attack.replace(":", ""),
                                         rule.replace(":", ""), f)
                    xs = [aggregation_run(a, tag + ("-s%d" % s if s > 1
                                                    else ""), rule,
                                          attack, f, a.steps, s)
                          for s in range(1, a.seeds + 1)]
                    if any(x is None for x in xs):
                        continue
                    x = dict(xs[0])
                    if any(y.get("diverged") for y in xs):
                        # a seed whose job ended in NaN: the attack won
                        x = {"acc": None, "round_ms": None,
                             "diverged": True}
                    else:
                        x["acc"] = statistics.mean(y["acc"] for y in xs)
                    x["acc_seeds"] = [y["acc"] for y in xs]
                    print("byzantine: %-12s f=%d %-10s acc %s (clean "
                          "%.4f)" % (attack, f, rule, x["acc"],
                                     acc_clean.get(rule, float("nan"))),
                          file=sys.stderr)
                    row = {"attack": attack, "aggregate": rule,
                           "attackers": f, "trainers": TRAINERS,
                           "acc": x["acc"], "acc_clean": acc_clean.get(rule),
                           "round_ms": x["round_ms"]}
                    if x.get("diverged"):
                        row["diverged"] = True
                    row["seeds"] = list(range(1, a.seeds + 1))
                    row["acc_seeds"] = x["acc_seeds"]
                    res["runs"].append(row)

    if not a.skip_spot:
        attacks = [("noise:%g" % a.noise, a.runs)]
        if a.lazy_runs > 0:
            # a falsifier whose pushes stay inside the honest spread:
            # only the random draw finds it
            attacks.append(("lazy:20", a.lazy_runs))
        for attack, n in attacks:
            runs = []
            for k in range(n):
                x = spot_run(a, k, 1000 + k, attack)
                runs.append(x)
                print("byzantine: spot check %s run %d: %s"
                      % (attack, k, x), file=sys.stderr)
            caught = [x for x in runs if x["caught"] and
                      x["steps_to_catch"] is not None and
                      x["steps_to_catch"] < a.catch_steps]
            sc = {
                "rate": a.rate, "falsify_rate": a.falsify_rate,
                "caught_runs": len(caught), "runs": len(runs),
                "median_steps_to_catch": statistics.median(
                    x["steps_to_catch"] for x in caught) if caught
                else None,
                "false_positives": sum(len(x["honest_quarantined"])
                                       for x in runs),
                "catch_steps": a.catch_steps, "attack": attack,
                "aggregate": a.spot_aggregate, "per_run": runs}
            if "spot_check" not in res:
                res["spot_check"] = sc
            else:
                res.setdefault("spot_check_more", []).append(sc)

    res = merge_previous(a, res, attacks)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)
        fh.write("\n")
    print("byzantine: wrote %s" % a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
