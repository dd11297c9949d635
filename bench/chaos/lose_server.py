"""lose_server.py - bench/lose_server.sh's harness: issue 24's scenario
(lose a server of a running job without replicas) run N times.

Run it through bench/lose_server.sh, which finds the build and the data
set: python3 bench/chaos/lose_server.py --ps PS --tr TR --data DIR --run
DIR [options] (see main()).

The job: a scheduler, 2 servers and 2 trainers on loopback, sync, SGD,
lossless pull, everything else at its default (--shard-bytes, --epochs 1
unless given), fixed --listen ports so that a restarted server has the
same URL. Rank 1 prints every step, rank 0 every 20 (it evaluates at each
of its lines). A fault-free run first gives the reference weights (each
trainer's --weights-out) and the job's step count. Each run then kills -9
one server (at random) at a random moment of the job (once a step drawn
from the middle 90% of its steps is printed) and restarts it 1 s later
with the same flags (--signal kill), or SIGSTOPs it for --stop-s
(default 10 s, past --dead-after-ms) and continues it (--signal stop).
Per run it prints and records: whether the job finished (every trainer
exit 0 within --deadline-s; else the job is killed and the run counts as
not finished), whether each trainer's final weights equal the fault-free
run's byte for byte, the detection time (fault -> the first warning,
error or fault-naming notice in another member's log, job.first_notice)
and the recovery time (fault -> every trainer has printed a step past
S + 1, S the highest step printed at the fault), and the healthy members
the scheduler declared dead (any "member X N dead" line but the lost
server's, or a trainer's after it had exited).

Exit 0 when every run finished with equal weights and no healthy member
declared dead; 1 otherwise.
"""
import argparse
import filecmp
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import job as jobmod  # noqa: E402

class Bench:
    def __init__(self, a):
        self.a = a
        self.job = None

    def tr_flags(self, d):
        a = self.a

        def flags(r):
            f = [f"--data={a.data}", "--seed=1", f"--epochs={a.epochs}",
                 f"--log-interval={20 if r == 0 else 1}",
                 f"--weights-out={d}/w{r}.bin"]
            if a.max_steps:
                f.append(f"--max-steps={a.max_steps}")
            return f
        return flags

    def new_job(self, name):
        d = f"{self.a.run}/{name}"
        os.makedirs(d)
        ps = [f"--replicas={self.a.replicas}"]
        sched = [f"--shard-bytes={self.a.shard_bytes}"] \
            if self.a.shard_bytes else []
        self.job = jobmod.Job(d, self.a.ps, self.a.tr, 2, 2, ps, sched,
                              self.tr_flags(d))
        return self.job

    def wait_trainers(self, j, deadline):
        """True when both trainers exited before deadline (epoch s)."""
        while any(m.rc() is None for m in j.trainers):
            if time.time() > deadline:
                return False
            time.sleep(0.05)
        return True

    def reference(self):
        j = self.new_job("fault-free")
        try:
            if not j.start():
                sys.exit("lose_server: the fault-free job did not start")
            ok = self.wait_trainers(j, time.time() + self.a.deadline_s)
            rcs = [m.rc() for m in j.trainers]
            if not ok or rcs != [0, 0] or not all(m.steps
                                                  for m in j.trainers):
                sys.exit(f"lose_server: the fault-free run failed (trainer "
                         f"exit {rcs}; logs in {j.dir})")
            return j.dir, j.max_step()
        finally:
            j.close()

    def one(self, i, ref_dir, steps, rng):
        a = self.a
        j = self.new_job(f"run-{i}")
        victim = rng.choice(j.servers)
        at = rng.randint(max(1, steps // 20), max(1, steps * 19 // 20))
        r = {"run": i, "server": victim.name, "signal": a.signal,
             "at_step": at}
        try:
            if not j.start():
                r.update(finished=False, why="the scheduler did not start")
                return r
            end = time.time() + a.deadline_s
            while j.max_step() < at and time.time() < end and all(
                    m.rc() is None for m in j.trainers):
                time.sleep(0.002)
            top = j.max_step()
            t_f = time.time()
            r["at_s"], r["step"] = round(t_f - j.t_trainers, 3), top
            if a.signal == "kill":
                victim.kill()
                time.sleep(1)
                victim.start()
            else:
                victim.signal(signal.SIGSTOP)
                time.sleep(a.stop_s)
                victim.signal(signal.SIGCONT)
            done = self.wait_trainers(j, t_f + a.deadline_s)
            rcs = [m.rc() for m in j.trainers]
            r["trainer_rc"] = rcs
            r["finished"] = done and rcs == [0, 0]
            if not done:
                r["why"] = f"not done within {a.deadline_s} s of the fault"
            elif not r["finished"]:
                r["why"] = " | ".join(x for m in j.trainers if m.rc()
                                      for x in m.tail(1))
            self.measure(j, r, t_f, top, victim, ref_dir)
            return r
        finally:
            j.close()

    def measure(self, j, r, t_f, top, victim, ref_dir):
        back = []
        for m in j.trainers:
            s = [t for t, st in m.steps_after(t_f) if st > top + 1]
            back.append(s[0] if s else None)
        r["recover_ms"] = round((max(back) - t_f) * 1e3, 1) \
            if None not in back else None
        t1 = t_f + r["recover_ms"] / 1e3 if r["recover_ms"] else time.time()
        hit = j.first_notice(t_f, t1, victim.name)
        r["detect_ms"] = round((hit[0] - t_f) * 1e3, 1) if hit else None
        r["detect_line"] = hit[1][:300] if hit else None
        eq = []
        for k in range(2):
            w, wr = f"{j.dir}/w{k}.bin", f"{ref_dir}/w{k}.bin"
            eq.append(os.path.exists(w) and filecmp.cmp(w, wr, shallow=False))
        r["weights_equal"] = all(eq) if r["finished"] else None
        r["server_index"] = sorted(victim.indices())
        dead = j.healthy_dead(0, time.time(), victim)
        r["healthy_declared_dead"] = dead


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ps", required=True)
    p.add_argument("--tr", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--json", default="")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--signal", choices=("kill", "stop"), default="kill")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--stop-s", type=float, default=10)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--shard-bytes", type=int, default=0)
    p.add_argument("--deadline-s", type=float, default=240)
    p.add_argument("--seed", type=int, default=24)
    a = p.parse_args()
    b = Bench(a)
    jobmod.install_exit_handlers(lambda: b.job and b.job.close())
    rng = random.Random(a.seed)
    ref_dir, steps = b.reference()
    print(f"lose_server: fault-free run: {steps} steps; runs in {a.run}",
          flush=True)
    runs = []
    for i in range(1, a.runs + 1):
        r = b.one(i, ref_dir, steps, rng)
        runs.append(r)
        yn = {True: "yes", False: "NO", None: "-"}
        print(f"run {i}: {a.signal} {r['server']} at {r.get('at_s')} s "
              f"(step {r.get('step')}): finished {yn[r['finished']]}, "
              f"weights equal {yn[r.get('weights_equal')]}, detect "
              f"{r.get('detect_ms')} ms, recover {r.get('recover_ms')} ms"
              + (f", healthy declared dead: {r['healthy_declared_dead']}"
                 if r.get("healthy_declared_dead") else "")
              + (f"; {r['why']}" if r.get("why") else ""), flush=True)
        if r.get("detect_line"):
            print(f"  detected by {r['detect_line']}", flush=True)
    fin = sum(bool(r["finished"]) for r in runs)
    eq = sum(bool(r.get("weights_equal")) for r in runs)
    hd = sum(bool(r.get("healthy_declared_dead")) for r in runs)
    print(f"lose_server: {fin}/{len(runs)} finished, {eq}/{len(runs)} with "
          f"the fault-free weights, {hd} with a healthy member declared "
          f"dead ({a.signal}, --replicas {a.replicas})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"signal": a.signal, "replicas": a.replicas,
                       "runs": len(runs), "finished": fin,
                       "weights_equal": eq, "healthy_declared_dead": hd,
                       "per_run": runs}, f, indent=1)
            f.write("\n")
    return 0 if fin == eq == len(runs) and hd == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
