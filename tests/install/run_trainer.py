"""A trainer for ferry.run's tests (tests/install/run_launch.sh and
pip_run.sh): a few sync push-pulls of a known gradient through the job
ferry.run started, checked against the plain SGD they must give, then a
last stdout line `{"summary": {...}}` like the examples print.

    python3 -m ferry.run --trainers 2 run_trainer.py [--steps N]
                         [--fail-rank R --fail-code C]

--fail-rank R makes rank R exit with code C before it joins the job: the
others then wait for it in their first pull until the launcher stops them.
"""
import argparse
import json
import sys

import numpy as np

import ferry
import ferry.run

LR, N = 0.5, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-code", type=int, default=3)
    a = ap.parse_args()
    job = ferry.run.env()
    w = np.zeros(N, np.float32)
    if job.rank == a.fail_rank:
        print(f"rank {job.rank}: failing on purpose", file=sys.stderr, flush=True)
        sys.exit(a.fail_code)
    with ferry.Client(job.scheduler, job.rank, lr=LR, mode=job.mode) as c:
        c.declare({"w": w})
        if job.rank == 0:
            c.init_weights([w])
        c.pull([w])
        print(f"rank {job.rank}: joined a job of {job.trainers} trainers", flush=True)
        for _ in range(a.steps):
            g = np.full(N, job.rank + 1, np.float32)  # one sample's gradient
            c.push_pull([g], 1, [w])
    # Sync SGD of the mean gradient: each step moves every weight by
    # -LR * mean(1..trainers).
    want = -LR * a.steps * (job.trainers + 1) / 2
    if not np.allclose(w, want, atol=1e-5):
        sys.exit(f"rank {job.rank}: w = {w[0]}, want {want}")
    if job.rank == 0:
        print(json.dumps({"summary": {"system": "ferry-run-test", "trainers": job.trainers,
                                      "steps": a.steps, "w": float(w[0])}}))


if __name__ == "__main__":
    main()
