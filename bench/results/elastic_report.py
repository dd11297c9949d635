#!/usr/bin/python3
"""elastic_report.py - the "Elastic soak" section of docs/benchmarks.md
from bench/results/elastic.json (bench/elastic.sh).

make_report.py calls section(); run alone, it rewrites that section of a
benchmarks.md in place (after bench/elastic.sh, without a whole
bench/run.sh):

  bench/results/elastic_report.py [--json bench/results/elastic.json]
      [--doc docs/benchmarks.md]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctr_report import splice  # noqa: E402 (beside this file)

TITLE = "## Elastic soak: joins, leaves and kill -9s (bench/elastic.sh)"


def ok(cond):
    return "met" if cond else "**not met**"


def section(path):
    """The section's Markdown lines (empty when path is missing)."""
    if not os.path.exists(path):
        return []
    d = json.load(open(path))
    ev = d.get("events_by_kind", {})
    w = [TITLE, ""]
    w.append(
        f"`{d.get('command') or 'bench/elastic.sh'}`: a local Fashion-MNIST "
        f"job of `--trainers 1:6` (2 servers, sync, batch 64, a scheduler "
        f"with `--state-dir`, `--dead-after-ms {d['dead_after_ms']}`), "
        f"trainers started without `--rank` on data leases. For "
        f"{d['events_s']:.0f} s, {d['events']} random events "
        f"({ev.get('join', 0)} joins, {ev.get('leave', 0)} graceful leaves "
        f"by SIGTERM, {ev.get('kill', 0)} `kill -9`s, "
        f"{ev.get('scheduler_restart', 0)} scheduler `kill -9` and restart "
        f"on its state), 1 to 6 trainers alive ({d['mean_alive']} on "
        f"average), each sleeping `--slow-ms {d['slow_ms']}` a step so "
        f"that the epochs last the minutes; then unslowed trainers take "
        f"over and the job finishes its {d['epochs']} epochs. "
        f"Exactly once is read from the scheduler's lease counters "
        f"(`/debug/state`, or its state file): every position of every "
        f"epoch consumed, none returned and admitted again. A hang is an "
        f"exchange longer than the death-detection time + 1 s "
        f"({d['hang_bound_ms']} ms); join to step runs from a trainer's "
        f"registration to its first applied step. The fixed run trains the "
        f"same samples with {d['fixed_trainers']} fixed ranks on leases.")
    w.append("")
    w.append("| figure | value |")
    w.append("|---|---|")
    w.append(f"| samples expected / consumed | {d['samples_expected']:,} / "
             f"{int(d['samples_consumed'] or 0):,} |")
    w.append(f"| samples lost / doubled | {d['samples_lost']} / "
             f"{d['samples_doubled']} |")
    w.append(f"| hangs (longest exchange) | {d['hangs']} "
             f"({d['max_wait_ms']:.0f} ms) |")
    w.append(f"| join to first step, p50 / p99 | "
             f"{d['join_to_step_p50_ms']:.0f} / "
             f"{d['join_to_step_p99_ms']:.0f} ms "
             f"({d['joins_measured']} joins) |")
    w.append(f"| process start to first step, p99 | "
             f"{d['join_to_step_from_start_p99_ms']:.0f} ms |")
    if "repulls" in d:
        w.append(f"| re-pulls of any trainer (a push late for its round) | "
                 f"{d['repulls']} |")
    w.append(f"| trainers failed / refused a join | {d['trainer_failures']}"
             f" / {d['joins_refused']} |")
    w.append(f"| final test accuracy: soak / fixed ranks | {d['acc']:.4f} / "
             f"{d['acc_fixed']:.4f} ({d['acc_diff_points']:+.2f} points) |")
    w.append("")
    w.append("Targets (issue 27):")
    w.append("")
    w.append("| target | measured | met |")
    w.append("|---|---|---|")
    w.append(f"| join to first step p99 <= 2 s | "
             f"{d['join_to_step_p99_ms']:.0f} ms | "
             f"{ok(d['join_to_step_p99_ms'] <= 2000)} |")
    w.append(f"| 0 hangs, 0 samples lost or doubled | {d['hangs']}, "
             f"{d['samples_lost']}, {d['samples_doubled']} | "
             f"{ok(d['hangs'] == 0 and d['samples_lost'] == 0 and d['samples_doubled'] == 0)} |")
    w.append(f"| final accuracy within 1 point of fixed membership | "
             f"{d['acc_diff_points']:+.2f} points | "
             f"{ok(abs(d['acc_diff_points']) <= 1.0)} |")
    w.append("")
    return w


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(here, "elastic.json"))
    ap.add_argument("--doc", default=os.path.join(root, "docs",
                                                  "benchmarks.md"))
    a = ap.parse_args()
    lines = section(a.json)
    if not lines:
        sys.exit(f"elastic_report: no {a.json} (run bench/elastic.sh)")
    splice(a.doc, lines, TITLE)
    print(f"elastic_report: wrote its section into {a.doc}")


if __name__ == "__main__":
    main()
