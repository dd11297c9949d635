#!/usr/bin/python3
"""byzantine_report.py - the "Untrusted trainers" section of
docs/benchmarks.md from bench/results/byzantine.json (bench/byzantine.sh).

make_report.py calls section(); run alone, it rewrites that section of a
benchmarks.md in place (after bench/byzantine.sh, without a whole
bench/run.sh):

  bench/results/byzantine_report.py [--json bench/results/byzantine.json]
      [--doc docs/benchmarks.md]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctr_report import splice  # noqa: E402 (beside this file)

TITLE = "## Untrusted trainers: robust aggregation and spot checks " \
    "(bench/byzantine.sh)"


def ok(cond):
    return "met" if cond else "**not met**"


def pct(v):
    return "-" if v is None else f"{100 * v:.1f}"


def accuracy_table(d):
    runs = [r for r in d.get("runs", []) if r["attack"] != "none"]
    if not runs:
        return []
    rules = []
    for r in d["runs"]:
        if r["aggregate"] not in rules:
            rules.append(r["aggregate"])
    w = []
    for f in sorted({r["attackers"] for r in runs}):
        w += [f"Final test accuracy (%), {f} of {d['trainers']} trainers "
              "attacking (clean run of the same rule in the first row; "
              "bold: more than 2 points below it):", "",
              "| attack | " + " | ".join(f"`{x}`" for x in rules) + " |",
              "|---|" + "---|" * len(rules)]
        # each row's own clean accuracy (the same seeds as its runs)
        clean = {}
        for r in runs:
            if r["attackers"] == f and r["acc_clean"] is not None:
                clean.setdefault(r["aggregate"], r["acc_clean"])
        seeds = {len(r.get("seeds", [1])) for r in runs
                 if r["attackers"] == f}
        if seeds and max(seeds) > 1:
            w[-4] = w[-4].rstrip(":") + f", mean over {max(seeds)} seeds:"
        w.append("| none | " + " | ".join(
            pct(clean[x]) if x in clean else "-" for x in rules) + " |")
        attacks = []
        for r in runs:
            if r["attackers"] == f and r["attack"] not in attacks:
                attacks.append(r["attack"])
        for at in attacks:
            cells = []
            for x in rules:
                r = next((r for r in runs if r["attackers"] == f and
                          r["attack"] == at and r["aggregate"] == x), None)
                if r is not None and r.get("diverged"):
                    cells.append("**diverged**")
                    continue
                if r is None or r["acc"] is None:
                    cells.append("-")
                    continue
                c = pct(r["acc"])
                if r["acc_clean"] is not None and \
                        r["acc"] < r["acc_clean"] - 0.02:
                    c = f"**{c}**"
                cells.append(c)
            w.append(f"| `{at}` | " + " | ".join(cells) + " |")
        w.append("")
    return w


def targets(d):
    w = []
    runs = d.get("runs", [])
    two = [r for r in runs if r["attackers"] == 2]
    if two:
        attacks = sorted({r["attack"] for r in two})

        def drop(at, rule):
            r = next((r for r in two if r["attack"] == at and
                      r["aggregate"] == rule), None)
            if r is not None and r.get("diverged"):
                return 1.0  # the job ended with NaN weights: all lost
            if r is None or r["acc"] is None or r["acc_clean"] is None:
                return None
            return r["acc_clean"] - r["acc"]
        cclip = [x for x in {r["aggregate"] for r in two}
                 if x.startswith("cclip")]
        worst = max((drop(at, c) or 0 for at in attacks for c in cclip),
                    default=None)
        mean_broken = [at for at in attacks
                       if (drop(at, "mean") or 0) > 0.10]
        w.append(f"| 2 of 8 attacking, `cclip`: largest loss against its "
                 f"clean run | {pct(worst)} points | <= 2 "
                 f"({ok(worst is not None and worst <= 0.02)}) |")
        w.append(f"| 2 of 8 attacking, `mean` loses > 10 points | "
                 f"{len(mean_broken)} attacks ({', '.join(mean_broken)}) "
                 f"| >= 3 ({ok(len(mean_broken) >= 3)}) |")
    ratio = d.get("robust_round_ratio") or {}
    share = d.get("robust_close_share") or {}
    for rule, v in sorted(ratio.items()):
        if rule == "mean":
            continue
        sh = share.get(rule)
        w.append(f"| no attacker, `{rule}`: round time / `mean`'s (wall, "
                 f"rank 0; what the rule adds to the server's time "
                 f"closing a round, over `mean`'s round time) | "
                 f"{v:.3f} ({'-' if sh is None else f'{100 * sh:.1f}%'}) | "
                 f"<= 1.10 ({ok(v <= 1.10)}) |")
    sc = d.get("spot_check")
    if sc:
        frac = sc["caught_runs"] / sc["runs"] if sc["runs"] else 0
        w.append(f"| spot checks at {100 * sc['rate']:g}%: runs catching a "
                 f"trainer that falsifies {100 * sc['falsify_rate']:g}% "
                 f"within {sc.get('catch_steps', 500)} steps | "
                 f"{sc['caught_runs']}/{sc['runs']} (median "
                 f"{sc['median_steps_to_catch']} steps) | >= 99% "
                 f"({ok(frac >= 0.99)}) |")
        for mo in d.get("spot_check_more", []):
            w.append(f"| the same with `{mo['attack']}` (inside the honest "
                     f"spread: found by the random draw only) | "
                     f"{mo['caught_runs']}/{mo['runs']} (median "
                     f"{mo['median_steps_to_catch']} steps) | "
                     f"(1 - (1 - {mo['rate']:g} x {mo['falsify_rate']:g})"
                     f"^{mo.get('catch_steps', 500)} = "
                     f"{100 * (1 - (1 - mo['rate'] * mo['falsify_rate']) ** mo.get('catch_steps', 500)):.0f}% expected) |")
        fp = sc["false_positives"] + sum(
            mo["false_positives"] for mo in d.get("spot_check_more", []))
        w.append(f"| honest trainers quarantined | "
                 f"{fp} | 0 ({ok(fp == 0)}) |")
    if not w:
        return []
    return ["| target | measured | goal |", "|---|---|---|"] + w + [""]


def section(path):
    """The section's Markdown lines (empty when path is missing)."""
    if not os.path.exists(path):
        return []
    d = json.load(open(path))
    w = [TITLE, ""]
    w.append(
        f"`{d.get('command') or 'bench/byzantine.sh'}` on {d.get('when')}: "
        f"local jobs of {d['trainers']} sync trainers, one server, a "
        f"{d['layers']} MLP on Fashion-MNIST (batch {d['batch']}, lr "
        f"{d['lr']}, {d['steps']} steps, the same seed in every run); "
        "attackers are the highest ranks, accuracy is rank 0's on the test "
        "set, round time is rank 0's wall time less its evaluations over "
        "its steps (the clean runs repeated, medians). Raw numbers: "
        "[`bench/results/byzantine.json`](../bench/results/byzantine.json); "
        "the rules and the threat model: [security.md](security.md). "
        "*diverged*: the attackers drove the weights to where the "
        "gradients hold NaN and the servers refuse them, ending the job.")
    w.append("")
    w += targets(d) + accuracy_table(d)
    sc = d.get("spot_check")
    if sc:
        w.append(
            f"Spot checks: {sc['runs']} jobs with seeds 1000.., rank 7 "
            f"pushing `{sc.get('attack')}` on {100 * sc['falsify_rate']:g}% "
            f"of its steps (honest otherwise), `--aggregate "
            f"{sc.get('aggregate')}`, the scheduler's `--spot-check "
            f"{sc['rate']:g}` and one verifier (`trainer --verify 1`); "
            "a verified mismatch quarantines. Pushes the robust aggregate "
            "marks as outliers are kept for verification besides the "
            "random draw: with the random draw alone, 2% of steps find "
            "one of 10% falsified pushes within 500 steps in only "
            "1 - (1 - 0.002)^500 = 63% of runs.")
        w.append("")
    return w


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(here, "byzantine.json"))
    ap.add_argument("--doc", default=os.path.join(root, "docs",
                                                  "benchmarks.md"))
    a = ap.parse_args()
    lines = section(a.json)
    if not lines:
        sys.exit(f"byzantine_report: no {a.json} (run bench/byzantine.sh)")
    splice(a.doc, lines, TITLE)
    print(f"byzantine_report: wrote its section into {a.doc}")


if __name__ == "__main__":
    main()
