#!/usr/bin/python3
"""time_to_acc.py - the report half of bench/links/time_to_acc.sh.

Reads the run directories of one time_to_acc.sh run (RAW/<run>/run.txt:
link, system, codec, overlap and, for Ferry runs, local steps H,
fragments F, fragment delay D, outer optimizer; curve-0.csv: rank 0's
step,wall_s,...,test_acc rows; rank0.out and trainer-1.out: the JSON
summaries) and writes, under RESULTS (bench/results):
  time_to_acc.json        {"time_to_acc": [row...], "summary": {...},
                           "notes": [...], "command": ..., "plots":
                           [links with a <link>.png], "plots_local":
                           [links with a <link>-local.png]}
  latest.json             its "time_to_acc", "time_to_acc_notes" and
                          "time_to_acc_summary" replaced
  time_to_acc/<link>/<tag>.csv   accuracy vs wall time of each run
  time_to_acc/<link>.png  the per-step curves, when matplotlib is installed
  time_to_acc/<link>-local.png   the local-steps curves beside the unshaped
                          per-step baseline and the link's best per-step run
  time_to_acc/section.md  the docs/benchmarks.md section (markdown())

Each row has: link, system, codec, overlap, time_to_84_s, step_ms,
link_bound_ms, test_acc (issue 14), and local_steps (0: per-step),
fragments (1 for per-step rows), fragment_delay, outer (the servers'
outer optimizer OPT:LR[:MOMENTUM] of a local-steps row, else null),
bytes_per_sample, acc_3ep (issue 28). Times leave rank 0's test-set
evaluations out (the curve's wall time includes them; the summary's
eval_s, spread evenly over the evaluations, is subtracted). step_ms =
(wall - eval) / steps. link_bound_ms = the step time the busiest shaped
link allows at best: Ferry, max over links of the larger direction's
bytes per step (the server's link carries both trainers'); DDP, the ring
all-reduce's bytes per step on the slower trainer link. null when
unshaped. bytes_per_sample = the bytes every trainer pushed and pulled
(the summaries' bytes_pushed + bytes_pulled: wire bytes, after the
codecs) over the samples they trained on (the MLP's initial weights
are seeded on both sides: version 0 crosses no link). acc_3ep = the final test
accuracy of a run that completed 3 epochs, else null.

The summary (issue 28's "Done when", all from this one run): the
baseline is the unshaped uncompressed per-step Ferry row; for 100mbit,
10mbit and 1mbit the best local-steps row (the fastest to 84% among
those whose acc_3ep is no more than half a point below the baseline's;
the fastest of all when none is) and
ratio_vs_unshaped = its time_to_84_s over the baseline's (targets 1.1,
1.5, 3); bytes_reduction_10mbit = bytes_per_sample of the fastest
per-step row at 10mbit over the least bytes_per_sample of a local-steps
row at 10mbit that reached 84% with an accuracy (acc_3ep, else
test_acc) at least the per-step row's (bytes_local_row_10mbit; target
>= 20); acc_3ep_delta = each best row's acc_3ep minus
the baseline's (fractions: 0.005 is half a point; met when no more than
half a point below sync: delta >= -0.005).

Usage: time_to_acc.py RAW RESULTS [COMMAND]
       time_to_acc.py --splice RESULTS DOC   (DOC's section from RESULTS)
"""
import csv
import glob
import json
import os
import re
import sys

TARGET = 0.84
# (server link, trainer 0, trainer 1) of each link setting; None: unshaped
LINK_RATES = {"none": (None, None, None), "1gbit": (1e9, 1e9, 1e9),
              "100mbit": (1e8, 1e8, 1e8), "10mbit": (1e7, 1e7, 1e7),
              "mixed": (1e9, 1e9, 2e7), "1mbit": (1e6, 1e6, 1e6)}
LINK_ORDER = ["none", "1gbit", "100mbit", "10mbit", "mixed", "1mbit"]
# the full per-step matrix of issue 14 (time_to_acc.sh's defaults; its
# links: a per-step run at 1mbit is capped and not expected)
FULL_LINKS = ["none", "1gbit", "100mbit", "10mbit", "mixed"]
FULL_CODECS = ["none/none", "q4/q4", "topk:0.01+q8/topk:0.02+q8",
               "randk:0.02+q8/topk:0.02+q8", "auto/auto"]
# issue 28's targets: time to 84% over the unshaped per-step run's
RATIO_TARGETS = {"100mbit": 1.1, "10mbit": 1.5, "1mbit": 3.0}
BYTES_TARGET = 20.0
ACC_DELTA_TARGET = 0.005


def link_key(link):
    return LINK_ORDER.index(link) if link in LINK_ORDER else 9


def not_run(table):
    """Cells of the full per-step matrix without a row, one note per
    link."""
    have = {(r["link"], r["system"], r["codec"], r["overlap"])
            for r in table if not r.get("local_steps")}
    out = []
    for link in FULL_LINKS:
        miss = [f"{c} overlap {o}" for c in FULL_CODECS for o in (0, 1)
                if (link, "ferry", c, o) not in have]
        if (link, "torch-ddp", "none/none", 0) not in have:
            miss.append("torch-ddp")
        if len(miss) == 2 * len(FULL_CODECS) + 1:
            out.append(f"not run: link {link} (every per-step cell)")
        elif miss:
            out.append(f"not run: link {link}: " + ", ".join(miss))
    return out


def summaries(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.startswith('{"summary"'):
                    out.append(json.loads(line)["summary"])
    except OSError:
        pass
    return out


def curve_rows(path):
    try:
        with open(path) as f:
            return [r for r in csv.DictReader(f) if r.get("test_acc")]
    except OSError:
        return []


def first_error(d):
    for name in ("job.err", "rank0.err"):
        try:
            with open(os.path.join(d, name)) as f:
                lines = [l.strip() for l in f if " E " in l or "rror" in l]
            if lines:
                return lines[-1][:240]
        except OSError:
            pass
    return "no output"


def read_run(d):
    """run.txt: link, system, codec, overlap[, H, F, D, outer]."""
    with open(os.path.join(d, "run.txt")) as f:
        v = [l.strip() for l in f]
    v += [""] * (8 - len(v))
    return {"link": v[0], "system": v[1], "codec": v[2],
            "overlap": int(v[3]), "local_steps": int(v[4] or 0),
            "fragments": int(v[5] or 1), "fragment_delay": int(v[6] or 0),
            "outer": v[7] or None}


def label(row):
    """What a run is, in words (notes, plot legends)."""
    out = f"{row['system']} {row['link']} {row['codec']}"
    if row["local_steps"]:
        return (out + f" H {row['local_steps']} F {row['fragments']} "
                f"D {row['fragment_delay']} outer {row['outer']}")
    return out + f" overlap {row['overlap']}"


def wire_stats(row, s, s1, steps, notes):
    """bytes_per_sample and link_bound_ms of a Ferry row from the
    summaries of rank 0 (s) and rank 1 (s1; None: rank 0's stand for
    it)."""
    both = [s] + ([s1] if s1 else [])
    wire = sum(x.get("bytes_pushed", 0) + x.get("bytes_pulled", 0)
               for x in both)
    samples = sum(x.get("samples", 0) for x in both)
    if samples:
        row["bytes_per_sample"] = round(wire / samples, 2)
    if s1 is None:
        notes.append(f"{label(row)}: no summary of rank 1; its bytes "
                     "are taken as rank 0's")
        s1 = s
    srv, r0, r1 = LINK_RATES.get(row["link"], (None, None, None))
    if not (steps and r0):
        return
    # each trainer's own bytes (auto picks per link)
    up = [x["bytes_pushed"] / max(x.get("steps_run") or steps, 1)
          for x in (s, s1)]
    dn = [x["bytes_pulled"] / max(x.get("steps_run") or steps, 1)
          for x in (s, s1)]
    row["link_bound_ms"] = round(max(
        max(sum(up), sum(dn)) / srv, max(up[0], dn[0]) / r0,
        max(up[1], dn[1]) / r1) * 8e3, 2)


def row_for(d, notes):
    run = read_run(d)
    row = {"link": run["link"], "system": run["system"],
           "codec": run["codec"], "overlap": run["overlap"],
           "time_to_84_s": None, "step_ms": None, "link_bound_ms": None,
           "test_acc": None, "local_steps": run["local_steps"],
           "fragments": run["fragments"],
           "fragment_delay": run["fragment_delay"], "outer": run["outer"],
           "bytes_per_sample": None,
           "acc_3ep": None}
    rows = curve_rows(os.path.join(d, "curve-0.csv"))
    summ = summaries(os.path.join(d, "rank0.out"))
    s = summ[0] if summ else None
    if not rows:
        why = first_error(d)
        if "unknown codec 'auto'" in why:
            why = ("this trainer does not know `--codec-push auto` "
                   "(issue 14 item 4 not in this build): row left null")
        notes.append(f"{label(row)}: no result ({why})")
        return row, []
    eval_s = float(s.get("eval_s", 0)) if s else 0.0
    per_eval = eval_s / len(rows) if rows else 0.0
    if s is None:
        notes.append(f"{label(row)}: stopped by its time cap before a "
                     "summary; times include the evaluations")
    pts = []
    for i, r in enumerate(rows):
        t = float(r["wall_s"]) - per_eval * (i + 1)
        a = float(r["test_acc"])
        pts.append((t, a, int(r["step"])))
        if row["time_to_84_s"] is None and a >= TARGET:
            row["time_to_84_s"] = round(t, 2)
    row["test_acc"] = round(pts[-1][1], 4)
    if s and s.get("test_acc") is not None:
        row["test_acc"] = round(float(s["test_acc"]), 4)
    if s and float(s.get("epochs", 0)) >= 3 - 1e-6:
        row["acc_3ep"] = row["test_acc"]
    steps = (s.get("steps_run") or s.get("steps")) if s else pts[-1][2]
    wall = float(s["wall_s"]) - eval_s if s else pts[-1][0]
    if steps:
        row["step_ms"] = round(wall / steps * 1e3, 2)
    r0 = LINK_RATES.get(row["link"], (None, None, None))[1]
    if row["system"] != "ferry":
        # the ring all-reduce's bytes per step (the curve counts them)
        per = float(rows[-1]["bytes_sent"]) / max(int(rows[-1]["step"]), 1)
        if steps and r0:
            r1 = LINK_RATES[row["link"]][2]
            row["link_bound_ms"] = round(per * 8e3 / min(r0, r1), 2)
    elif s:
        s1 = summaries(os.path.join(d, "trainer-1.out"))
        wire_stats(row, s, s1[0] if s1 else None, steps, notes)
    return row, pts


def best(rows):
    """The fastest row to 84% (None: none got there)."""
    ok = [r for r in rows if r["time_to_84_s"] is not None]
    return min(ok, key=lambda r: r["time_to_84_s"]) if ok else None


def brief(r):
    keys = ("link", "codec", "overlap", "local_steps", "fragments",
            "fragment_delay", "outer", "time_to_84_s", "test_acc",
            "acc_3ep", "bytes_per_sample")
    return {k: r.get(k) for k in keys} if r else None


def summary(table):
    """Issue 28's "Done when" figures of one run's rows (module doc)."""
    ferry = [r for r in table if r["system"] == "ferry"]
    per_step = [r for r in ferry if not r["local_steps"]]
    local = [r for r in ferry if r["local_steps"]]
    base = next((r for r in per_step if r["link"] == "none"
                 and r["codec"] == "none/none" and r["overlap"] == 0), None)
    bt = base["time_to_84_s"] if base else None
    out = {"baseline": brief(base), "targets": {
        "ratio_vs_unshaped": RATIO_TARGETS,
        "bytes_reduction_10mbit": BYTES_TARGET,
        "acc_3ep_delta": ACC_DELTA_TARGET},
        "best_local": {}, "ratio_vs_unshaped": {}, "acc_3ep_delta": {},
        "meets": {}}
    for link, goal in RATIO_TARGETS.items():
        here = [r for r in local if r["link"] == link]
        keeps = [r for r in here if base and r["acc_3ep"] is not None
                 and base["acc_3ep"] is not None
                 and r["acc_3ep"] >= base["acc_3ep"] - ACC_DELTA_TARGET]
        b = best(keeps) or best(here)
        out["best_local"][link] = brief(b)
        ratio = (round(b["time_to_84_s"] / bt, 3) if b and bt else None)
        out["ratio_vs_unshaped"][link] = ratio
        d = None
        if b and base and b["acc_3ep"] is not None \
                and base["acc_3ep"] is not None:
            d = round(b["acc_3ep"] - base["acc_3ep"], 4)
        out["acc_3ep_delta"][link] = d
        out["meets"][f"ratio_{link}"] = (ratio <= goal
                                         if ratio is not None else None)
        out["meets"][f"acc_3ep_{link}"] = (d >= -ACC_DELTA_TARGET
                                           if d is not None else None)
    # bytes: the fastest per-step row at 10mbit against the local-steps
    # row there with the fewest bytes per sample that reached 84% at no
    # less accuracy
    ps = best([r for r in per_step if r["link"] == "10mbit"])

    def acc(r):
        return r["acc_3ep"] if r["acc_3ep"] is not None else r["test_acc"]
    ok = []
    if ps:
        ok = [r for r in local if r["link"] == "10mbit"
              and r["time_to_84_s"] is not None and acc(r) is not None
              and acc(r) >= acc(ps)]
    out["bytes_per_step_row_10mbit"] = brief(ps)
    key = "bytes_per_sample"
    have = [r for r in ok if r[key]]
    ls = min(have, key=lambda r: r[key]) if have else None
    red = None
    if ps and ls and ps[key]:
        red = round(ps[key] / ls[key], 2)
    out["bytes_local_row_10mbit"] = brief(ls)
    out["bytes_reduction_10mbit"] = red
    out["meets"]["bytes_10mbit"] = (
        red >= BYTES_TARGET if red is not None else None)
    return out


def fmt(v, d):
    return "-" if v is None else f"{v:.{d}f}"


def local_markdown(data):
    """The "Local steps" part of the section (issue 28)."""
    rows = [r for r in data.get("time_to_acc", [])
            if r.get("local_steps")]
    sm = data.get("summary") or {}
    if not rows:
        return []
    base = sm.get("baseline") or {}
    bt = base.get("time_to_84_s")
    out = ["### Local steps (DiLoCo: H inner steps, an outer optimizer on "
           "the servers)", "",
           "Each trainer takes H inner steps (the trainer's --optimizer, "
           "--lr: the inner optimizer), then pushes its pseudo-gradient; "
           "the servers apply the outer optimizer (`outer`: OPT:LR"
           "[:MOMENTUM]). F fragments: the shards are synced in F "
           "staggered groups, D inner steps late. `x unshaped`: time to "
           "84% over the unshaped uncompressed per-step run's of the same "
           "bench run "
           f"({fmt(bt, 2)} s). bytes/sample: push + pull wire bytes of "
           "every trainer over its samples. acc 3 ep: test "
           "accuracy after 3 epochs (`-`: the run stopped earlier); "
           "`within 0.5 pt`: no more than half a point below sync. The "
           "best run of a link is the fastest to 84% of those within "
           "0.5 pt (the fastest of all when none is).", ""]
    meets = sm.get("meets") or {}

    def yes(k):
        v = meets.get(k)
        return "-" if v is None else ("yes" if v else "no")
    ratios = sm.get("ratio_vs_unshaped") or {}
    deltas = sm.get("acc_3ep_delta") or {}
    tg = (sm.get("targets") or {}).get("ratio_vs_unshaped") or {}
    out += ["| link | best local-steps run | time to 84% s | x unshaped "
            "(target) | met | acc 3 ep - sync | within 0.5 pt |",
            "|---|---|---|---|---|---|---|"]
    for link, b in (sm.get("best_local") or {}).items():
        what = "-" if not b else (
            f"H {b['local_steps']} F {b['fragments']} D "
            f"{b['fragment_delay']} {b['codec']} {b['outer']}")
        d = deltas.get(link)
        out.append(f"| {link} | {what} | "
                   f"{fmt(b and b['time_to_84_s'], 2)} | "
                   f"{fmt(ratios.get(link), 2)} (<= {tg.get(link)}) | "
                   f"{yes('ratio_' + link)} | "
                   f"{fmt(None if d is None else d * 100, 2)} pt | "
                   f"{yes('acc_3ep_' + link)} |")
    ps = sm.get("bytes_per_step_row_10mbit")

    def run(r, key):
        if not r:
            return "none"
        return (f"H {r['local_steps']} F {r['fragments']} {r['codec']} "
                f"{r['outer']}: {fmt(r.get(key), 1)} B, acc "
                f"{fmt(r['acc_3ep'] or r['test_acc'], 4)}, 84% at "
                f"{fmt(r['time_to_84_s'], 2)} s")
    out += ["", "Bytes per sample at 10 Mbit/s, against the fastest "
            "per-step run " + (
                f"({ps['codec']} overlap {ps['overlap']}: "
                f"{fmt(ps['bytes_per_sample'], 1)} B, acc "
                f"{fmt(ps['acc_3ep'] or ps['test_acc'], 4)})"
                if ps else "(none)")
            + "; the local-steps run with the fewest that reached 84% at "
            "no less accuracy: "
            + run(sm.get("bytes_local_row_10mbit"), "bytes_per_sample")
            + f" ({fmt(sm.get('bytes_reduction_10mbit'), 1)}x fewer; met: "
            f"{yes('bytes_10mbit')}). Target: "
            f">= {BYTES_TARGET:.0f}x.",
            "", "| link | H | F | D | codec (push/pull) | outer | "
            "time to 84% s | x unshaped | step ms | bytes/sample | "
            "acc 3 ep | test acc |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["time_to_84_s"]
        out.append(
            f"| {r['link']} | {r['local_steps']} | {r['fragments']} | "
            f"{r['fragment_delay']} | {r['codec']} | {r['outer']} | "
            f"{fmt(t, 1)} | {fmt(t / bt if t and bt else None, 2)} | "
            f"{fmt(r['step_ms'], 2)} | {fmt(r['bytes_per_sample'], 1)} | "
            f"{fmt(r['acc_3ep'], 4)} | {fmt(r['test_acc'], 4)} |")
    out.append("")
    for link in data.get("plots_local", []):
        out += [f"![local steps: test accuracy against wall time, link "
                f"{link}](../bench/results/time_to_acc/{link}-local.png)",
                ""]
    return out


def markdown(data):
    """The docs/benchmarks.md section of a time_to_acc.json's data, as
    lines (bench/results/make_report.py renders it from here)."""
    out = ["## Time to 84% test accuracy (bench/links/time_to_acc.sh)", "",
           f"Command: `{data.get('command') or 'bench/links/time_to_acc.sh'}`. "
           "Fashion-MNIST, the default MLP, 2 trainers, sync, 1 server, seed 1, "
           "up to 3 epochs or the run's time cap; `mixed` = trainer 0 at "
           "1 Gbit/s, trainer 1 at 20 Mbit/s. Times leave rank 0's "
           "evaluations out. `-`: never reached 84% (or no result). Curves: "
           "bench/results/time_to_acc/<link>/*.csv.", "",
           "| link | system | codec (push/pull) | overlap | time to 84% s | "
           "step ms | link bound ms | test acc | bytes/sample |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in data.get("time_to_acc", []):
        if r.get("local_steps"):
            continue
        out.append(f"| {r['link']} | {r['system']} | {r['codec']} | "
                   f"{r['overlap']} | {fmt(r['time_to_84_s'], 1)} | "
                   f"{fmt(r['step_ms'], 2)} | {fmt(r['link_bound_ms'], 2)} | "
                   f"{fmt(r['test_acc'], 4)} | "
                   f"{fmt(r.get('bytes_per_sample'), 1)} |")
    notes = [f"- {n}" for n in data.get("notes", [])]
    out += ([""] + notes if notes else []) + [""]
    for link in data.get("plots", []):
        out += [f"![test accuracy against wall time, link {link}]"
                f"(../bench/results/time_to_acc/{link}.png)", ""]
    return out + local_markdown(data)


def plot(results, link, curves, local=False):
    """One link's curves (label, points, dashed) into <link>.png, or
    <link>-local.png."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    cmap = plt.get_cmap("tab20")  # a local-steps matrix has > 10 runs
    for i, (lab, pts, dashed) in enumerate(curves):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=lab,
                color=cmap(i % 20), ls="--" if dashed else "-")
    ax.axhline(TARGET, color="grey", ls=":")
    ax.set_xscale("log")  # 2 s to the 180 s cap on one link
    ax.set_xlabel("wall time, s (evaluations excluded, log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.6, 0.9)
    ax.set_title(f"Fashion-MNIST, 2 trainers, sync, link {link}"
                 + (": local steps" if local else ""))
    ax.legend(fontsize=7, loc="lower right")
    name = f"{link}-local.png" if local else f"{link}.png"
    fig.savefig(os.path.join(results, "time_to_acc", name), dpi=100)
    plt.close(fig)
    return True


def plot_all(results, runs):
    """The per-step plot of each link (one colour per system and codec,
    dashed with --overlap 1) and the local-steps plot of each link with
    local-steps runs (beside the unshaped uncompressed per-step run and
    the link's fastest per-step run, dashed)."""
    by_link, local = {}, {}
    for row, pts in runs:
        if row["local_steps"]:
            local.setdefault(row["link"], []).append((row, pts))
        else:
            by_link.setdefault(row["link"], []).append((row, pts))
    plotted, plotted_local = [], []
    for link, rs in by_link.items():
        rs = sorted(rs, key=lambda x: (x[0]["system"], x[0]["codec"],
                                       x[0]["overlap"]))
        curves = [(f"{r['system']} {r['codec']} ov{r['overlap']}", p,
                   r["overlap"] == 1) for r, p in rs]
        if plot(results, link, curves):
            plotted.append(link)
    for link, rs in local.items():
        curves = []
        ref = [x for x in by_link.get("none", []) if x[0]["system"] ==
               "ferry" and x[0]["codec"] == "none/none"
               and x[0]["overlap"] == 0]
        ref += [x for x in by_link.get(link, []) if x[0] is best(
            [y[0] for y in by_link.get(link, [])
             if y[0]["system"] == "ferry"]) and link != "none"]
        for r, p in ref:
            curves.append((f"per-step {r['link']} {r['codec']} "
                           f"ov{r['overlap']}", p, True))
        for r, p in sorted(rs, key=lambda x: (
                x[0]["local_steps"], x[0]["fragments"], x[0]["codec"],
                x[0]["outer"] or "")):
            curves.append((f"H{r['local_steps']} F{r['fragments']} "
                           f"{r['codec']} {r['outer']}", p, False))
        if plot(results, link, curves, local=True):
            plotted_local.append(link)
    return plotted, plotted_local


def splice(results, doc):
    """Replace the time-to-84% section of DOC (docs/benchmarks.md: from
    its heading to the next "## ") with RESULTS/time_to_acc.json's, so a
    run of time_to_acc.sh alone updates the page as bench/run.sh's
    make_report.py would."""
    with open(os.path.join(results, "time_to_acc.json")) as f:
        data = json.load(f)
    with open(doc) as f:
        lines = f.read().split("\n")
    head = "## Time to 84% test accuracy"
    starts = [i for i, l in enumerate(lines) if l.startswith(head)]
    if not starts:
        print(f"time_to_acc: no '{head}' section in {doc}; left alone")
        return
    a = starts[0]
    b = next((i for i in range(a + 1, len(lines))
              if lines[i].startswith("## ")), len(lines))
    lines[a:b] = markdown(data)
    with open(doc, "w") as f:
        f.write("\n".join(lines))
    print(f"time_to_acc: wrote its section of {doc}")


def main():
    if sys.argv[1] == "--splice":
        splice(sys.argv[2], sys.argv[3])
        return
    raw, results = sys.argv[1], sys.argv[2]
    command = sys.argv[3] if len(sys.argv) > 3 else ""
    notes, table, runs = [], [], []
    # time_to_acc.json is this one run's, whole: so are the curves (a
    # curve of an earlier run's codec would sit beside rows without it).
    for old in (glob.glob(os.path.join(results, "time_to_acc", "*", "*.csv"))
                + glob.glob(os.path.join(results, "time_to_acc", "*.png"))):
        os.remove(old)
    for d in sorted(glob.glob(os.path.join(raw, "*"))):
        if not os.path.exists(os.path.join(d, "run.txt")):
            continue
        row, pts = row_for(d, notes)
        table.append(row)
        if pts:
            tag = re.sub(r"[^A-Za-z0-9.-]", "_", f"{row['system']}-"
                         f"{row['codec']}") + f"-ov{row['overlap']}"
            if row["local_steps"]:
                tag += re.sub(r"[^A-Za-z0-9.-]", "_", (
                    f"-h{row['local_steps']}-f{row['fragments']}-"
                    f"d{row['fragment_delay']}-{row['outer']}"))
            cdir = os.path.join(results, "time_to_acc", row["link"])
            os.makedirs(cdir, exist_ok=True)
            with open(os.path.join(cdir, tag + ".csv"), "w") as f:
                f.write("wall_s,test_acc,step\n")
                for t, a, st in pts:
                    f.write(f"{t:.3f},{a:.4f},{st}\n")
            runs.append((row, pts))
    table.sort(key=lambda r: (link_key(r["link"]), r["local_steps"] > 0,
                              r["system"], r["local_steps"],
                              r["fragments"], r["codec"], r["overlap"],
                              r["outer"] or ""))
    os.makedirs(os.path.join(results, "time_to_acc"), exist_ok=True)
    plotted, plotted_local = plot_all(results, runs)
    if runs and not plotted + plotted_local:
        notes.append("no plots: matplotlib is not installed (curves are "
                     "in bench/results/time_to_acc/<link>/*.csv)")
    notes += not_run(table)
    out = {"time_to_acc": table, "summary": summary(table), "notes": notes,
           "command": command,
           "plots": sorted(plotted, key=link_key),
           "plots_local": sorted(plotted_local, key=link_key)}
    with open(os.path.join(results, "time_to_acc.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    with open(os.path.join(results, "time_to_acc", "section.md"), "w") as f:
        f.write("\n".join(markdown(out)) + "\n")
    latest = os.path.join(results, "latest.json")
    if os.path.exists(latest):
        with open(latest) as f:
            lj = json.load(f)
        lj["time_to_acc"] = table
        lj["time_to_acc_notes"] = notes
        lj["time_to_acc_summary"] = out["summary"]
        with open(latest, "w") as f:
            json.dump(lj, f, indent=1)
            f.write("\n")
    for r in table:
        print(json.dumps(r))
    print(json.dumps({"summary": out["summary"]}))
    for n in notes:
        print("note:", n)


if __name__ == "__main__":
    main()
