#!/usr/bin/python3
"""steady.py - the steady-state step time of one placement-bench job.

A job's first steps run while the start-up probes' traffic (a 4 MiB bulk
probe per trainer and server, --probe-bytes) still drains from tc tbf's
queues and empties its token buckets, so a step time averaged over the
whole run charges a probing job for its probes: equal assignments then
measure unequal (issue 14, scenario c). The step time is therefore taken
from each trainer's --step-times CSV (compute_ms + push_pull_ms per step),
after the first PL_SKIP steps (default 10), as the median (robust to the
shared machine's CPU spikes); the job's step is the slower rank's. Without
the CSVs it falls back to (wall_s - eval_s) / steps of the summaries.

Usage: steady.py DIR   (prints ms);  import: steady.step_ms(DIR)
"""
import csv
import json
import os
import statistics
import sys


def rank_steady_ms(path, skip):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    ms = [float(r["compute_ms"]) + float(r["push_pull_ms"]) for r in rows[skip:]]
    return statistics.median(ms) if ms else None


def summary_ms(d, r):
    for line in open(os.path.join(d, f"t{r}.out")):
        if line.startswith('{"summary"'):
            s = json.loads(line)["summary"]
            return (s["wall_s"] - s.get("eval_s", 0.0)) / s["steps"] * 1e3
    raise ValueError(f"no summary in {d}/t{r}.out")


def step_ms(d, skip=None):
    skip = int(os.environ.get("PL_SKIP", "10")) if skip is None else skip
    best = 0.0
    for r in (0, 1):
        p = os.path.join(d, f"t{r}.steps.csv")
        v = rank_steady_ms(p, skip) if os.path.exists(p) else None
        best = max(best, v if v is not None else summary_ms(d, r))
    return best


if __name__ == "__main__":
    print(f"{step_ms(sys.argv[1]):.3f}")
