#!/usr/bin/python3
"""time_to_acc.py - the report half of bench/links/time_to_acc.sh.

Reads the run directories of one time_to_acc.sh run (RAW/<run>/run.txt:
link, system, codec, overlap; curve-0.csv: rank 0's step,wall_s,...,
test_acc rows; rank0.out: the JSON summary) and writes, under RESULTS
(bench/results):
  time_to_acc.json        {"time_to_acc": [row...], "notes": [...], "command": ...,
                           "plots": [links with a <link>.png]}
  latest.json             its "time_to_acc" (and "time_to_acc_notes") replaced
  time_to_acc/<link>/<system>-<codec>-ov<o>.csv   accuracy vs wall time
  time_to_acc/<link>.png  the same curves, when matplotlib is installed
  time_to_acc/section.md  the docs/benchmarks.md section (markdown())

Each row has exactly: link, system, codec, overlap, time_to_84_s, step_ms,
link_bound_ms, test_acc. Times leave rank 0's test-set evaluations out
(the curve's wall time includes them; the summary's eval_s, spread evenly
over the evaluations, is subtracted). step_ms = (wall - eval) / steps.
link_bound_ms = the step time the busiest shaped link allows at best:
Ferry, max over links of the larger direction's bytes per step (the
server's link carries both trainers'); DDP, the ring all-reduce's bytes
per step on the slower trainer link. null when unshaped.

Usage: time_to_acc.py RAW RESULTS [COMMAND]
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
              "mixed": (1e9, 1e9, 2e7)}
LINK_ORDER = ["none", "1gbit", "100mbit", "10mbit", "mixed"]
# the full matrix of issue 14 (time_to_acc.sh's defaults)
FULL_CODECS = ["none/none", "q4/q4", "topk:0.01+q8/topk:0.02+q8",
               "randk:0.02+q8/topk:0.02+q8", "auto/auto"]


def not_run(table):
    """Cells of the full matrix without a row, one note per link."""
    have = {(r["link"], r["system"], r["codec"], r["overlap"]) for r in table}
    out = []
    for link in LINK_ORDER:
        miss = [f"{c} overlap {o}" for c in FULL_CODECS for o in (0, 1)
                if (link, "ferry", c, o) not in have]
        if (link, "torch-ddp", "none/none", 0) not in have:
            miss.append("torch-ddp")
        if len(miss) == 2 * len(FULL_CODECS) + 1:
            out.append(f"not run: link {link} (every cell)")
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


def row_for(d, notes):
    with open(os.path.join(d, "run.txt")) as f:
        link, system, codec, ov = [l.strip() for l in f][:4]
    row = {"link": link, "system": system, "codec": codec, "overlap": int(ov),
           "time_to_84_s": None, "step_ms": None, "link_bound_ms": None,
           "test_acc": None}
    rows = curve_rows(os.path.join(d, "curve-0.csv"))
    summ = summaries(os.path.join(d, "rank0.out"))
    s = summ[0] if summ else None
    if not rows:
        why = first_error(d)
        if "unknown codec 'auto'" in why:
            why = ("this trainer does not know `--codec-push auto` "
                   "(issue 14 item 4 not in this build): row left null")
        notes.append(f"{system} {link} {codec} overlap {ov}: no result "
                     f"({why})")
        return row, []
    eval_s = float(s.get("eval_s", 0)) if s else 0.0
    per_eval = eval_s / len(rows) if rows else 0.0
    if s is None:
        notes.append(f"{system} {link} {codec} overlap {ov}: stopped by "
                     "its time cap before a summary; times include the "
                     "evaluations")
    pts = []
    for i, r in enumerate(rows):
        t = float(r["wall_s"]) - per_eval * (i + 1)
        a = float(r["test_acc"])
        pts.append((t, a, int(r["step"])))
        if row["time_to_84_s"] is None and a >= TARGET:
            row["time_to_84_s"] = round(t, 2)
    row["test_acc"] = round(pts[-1][1], 4)
    steps = (s.get("steps_run") or s.get("steps")) if s else pts[-1][2]
    wall = float(s["wall_s"]) - eval_s if s else pts[-1][0]
    if steps:
        row["step_ms"] = round(wall / steps * 1e3, 2)
    srv, r0, r1 = LINK_RATES.get(link, (None, None, None))
    if system != "ferry" and steps and r0:
        # the ring all-reduce's bytes per step (the curve counts them)
        per = float(rows[-1]["bytes_sent"]) / int(rows[-1]["step"])
        row["link_bound_ms"] = round(per * 8e3 / min(r0, r1), 2)
    elif s and steps and r0:
        # each trainer's own bytes (auto picks per link); rank 1's
        # summary is in trainer-1.out, else rank 0's stand for it
        s1 = summaries(os.path.join(d, "trainer-1.out"))
        s1 = s1[0] if s1 else s
        up = [x["bytes_pushed"] / max(x.get("steps_run") or steps, 1)
              for x in (s, s1)]
        dn = [x["bytes_pulled"] / max(x.get("steps_run") or steps, 1)
              for x in (s, s1)]
        row["link_bound_ms"] = round(max(
            max(sum(up), sum(dn)) / srv, max(up[0], dn[0]) / r0,
            max(up[1], dn[1]) / r1) * 8e3, 2)
    return row, pts


def markdown(data):
    """The docs/benchmarks.md section of a time_to_acc.json's data, as
    lines (bench/results/make_report.py renders it from here)."""
    def f(v, d):
        return "-" if v is None else f"{v:.{d}f}"
    out = ["## Time to 84% test accuracy (bench/links/time_to_acc.sh)", "",
           f"Command: `{data.get('command') or 'bench/links/time_to_acc.sh'}`. "
           "Fashion-MNIST, the default MLP, 2 trainers, sync, 1 server, seed 1, "
           "up to 3 epochs or the run's time cap; `mixed` = trainer 0 at "
           "1 Gbit/s, trainer 1 at 20 Mbit/s. Times leave rank 0's "
           "evaluations out. `-`: never reached 84% (or no result). Curves: "
           "bench/results/time_to_acc/<link>/*.csv.", "",
           "| link | system | codec (push/pull) | overlap | time to 84% s | "
           "step ms | link bound ms | test acc |",
           "|---|---|---|---|---|---|---|---|"]
    for r in data.get("time_to_acc", []):
        out.append(f"| {r['link']} | {r['system']} | {r['codec']} | "
                   f"{r['overlap']} | {f(r['time_to_84_s'], 1)} | "
                   f"{f(r['step_ms'], 2)} | {f(r['link_bound_ms'], 2)} | "
                   f"{f(r['test_acc'], 4)} |")
    notes = [f"- {n}" for n in data.get("notes", [])]
    out += ([""] + notes if notes else []) + [""]
    for link in data.get("plots", []):
        out += [f"![test accuracy against wall time, link {link}]"
                f"(../bench/results/time_to_acc/{link}.png)", ""]
    return out


def plot(results, link, curves):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    # one colour per system and codec, dashed with --overlap 1
    colours = {}
    for label, pts in curves:
        key, ov = label.rsplit(" ", 1)
        c = colours.setdefault(key, f"C{len(colours) % 10}")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label,
                color=c, ls="--" if ov == "ov1" else "-")
    ax.axhline(TARGET, color="grey", ls=":")
    ax.set_xscale("log")  # 2 s to the 180 s cap on one link
    ax.set_xlabel("wall time, s (evaluations excluded, log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"Fashion-MNIST, 2 trainers, sync, link {link}")
    ax.legend(fontsize=8)
    fig.savefig(os.path.join(results, "time_to_acc", f"{link}.png"), dpi=100)
    plt.close(fig)
    return True


def main():
    raw, results = sys.argv[1], sys.argv[2]
    command = sys.argv[3] if len(sys.argv) > 3 else ""
    notes, table, by_link = [], [], {}
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
            cdir = os.path.join(results, "time_to_acc", row["link"])
            os.makedirs(cdir, exist_ok=True)
            with open(os.path.join(cdir, tag + ".csv"), "w") as f:
                f.write("wall_s,test_acc,step\n")
                for t, a, st in pts:
                    f.write(f"{t:.3f},{a:.4f},{st}\n")
            by_link.setdefault(row["link"], []).append(
                (f"{row['system']} {row['codec']} ov{row['overlap']}", pts))
    table.sort(key=lambda r: (LINK_ORDER.index(r["link"])
                              if r["link"] in LINK_ORDER else 9,
                              r["system"], r["codec"], r["overlap"]))
    plotted = [l for l, c in by_link.items() if plot(results, l, c)]
    if by_link and not plotted:
        notes.append("no plots: matplotlib is not installed (curves are "
                     "in bench/results/time_to_acc/<link>/*.csv)")
    notes += not_run(table)
    out = {"time_to_acc": table, "notes": notes, "command": command,
           "plots": sorted(plotted, key=lambda l: (LINK_ORDER.index(l)
                                                   if l in LINK_ORDER else 9))}
    with open(os.path.join(results, "time_to_acc.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.makedirs(os.path.join(results, "time_to_acc"), exist_ok=True)
    with open(os.path.join(results, "time_to_acc", "section.md"), "w") as f:
        f.write("\n".join(markdown(out)) + "\n")
    latest = os.path.join(results, "latest.json")
    if os.path.exists(latest):
        with open(latest) as f:
            lj = json.load(f)
        lj["time_to_acc"] = table
        lj["time_to_acc_notes"] = notes
        with open(latest, "w") as f:
            json.dump(lj, f, indent=1)
            f.write("\n")
    for r in table:
        print(json.dumps(r))
    for n in notes:
        print("note:", n)


if __name__ == "__main__":
    main()
