#!/usr/bin/python3
"""ctr_report.py - the "CTR" section of docs/benchmarks.md from
bench/results/ctr.json (bench/ctr.sh), and its plot of test AUC against
wall time (docs/plots/ctr_auc_vs_time.svg, drawn here: no plotting
package needed).

make_report.py calls section(); run alone, it rewrites that section of a
benchmarks.md in place (after bench/ctr.sh, without a whole bench/run.sh):

  bench/results/ctr_report.py [--json bench/results/ctr.json]
      [--doc docs/benchmarks.md] [--plots docs/plots]
"""
import argparse
import csv
import json
import os
import sys

TITLE = "## A recommendation model: DLRM on generated CTR data (bench/ctr.sh)"
NAMES = {
    "ferry": "Ferry, C trainer (2 trainers, 2 servers)",
    "ferry-torch": "PyTorch on Ferry (2 trainers, 2 servers)",
    "torch-single": "PyTorch, one process (quality reference)",
    "torch-ddp": "PyTorch DDP, 2 gloo ranks",
    "ferry-cap25": "Ferry, --sparse-capacity-mb at 25% of the tables",
    "ferry-admit": "Ferry, admission (--admit-count 2)",
    "ferry-100mbit": "Ferry over 100 Mbit/s links (rows q8, dense fp16)",
    "ferry-10mbit": "Ferry over 10 Mbit/s links (rows q8, dense fp16)",
}
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#7f7f7f"]


def read_curve(path):
    with open(path) as f:
        return [(float(r["wall_s"]), float(r["auc"])) for r in csv.DictReader(f)]


def svg_plot(series, out, title):
    """series: [(label, [(x, y)...])]: a line plot as a standalone SVG."""
    W, H, L, R, T, B = 900, 520, 70, 290, 40, 50
    pts = [p for _, s in series for p in s]
    if not pts:
        return False
    x1 = max(x for x, _ in pts) * 1.05 or 1
    y0 = min(y for _, y in pts)
    y1 = max(y for _, y in pts)
    y0, y1 = y0 - 0.01 * (y1 - y0 + 1e-3), y1 + 0.01 * (y1 - y0 + 1e-3)

    def X(x):
        return L + (W - L - R) * x / x1

    def Y(y):
        return H - B - (H - T - B) * (y - y0) / (y1 - y0)

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2 - R / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for i in range(6):
        yv = y0 + (y1 - y0) * i / 5
        xv = x1 * i / 5
        o.append(f'<line x1="{L}" y1="{Y(yv):.1f}" x2="{W - R}" y2="{Y(yv):.1f}" '
                 'stroke="#ddd"/>')
        o.append(f'<text x="{L - 6}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.3f}</text>')
        o.append(f'<line x1="{X(xv):.1f}" y1="{T}" x2="{X(xv):.1f}" y2="{H - B}" '
                 'stroke="#ddd"/>')
        o.append(f'<text x="{X(xv):.1f}" y="{H - B + 16}" text-anchor="middle">{xv:.0f}</text>')
    o.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" '
             'stroke="black"/>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">'
             'wall time (s, evaluation excluded)</text>')
    o.append(f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
             f'transform="rotate(-90 16 {(T + H - B) / 2})">test AUC</text>')
    for i, (label, s) in enumerate(series):
        c = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s)
        o.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in s:
            o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="2.5" fill="{c}"/>')
        ly = T + 10 + 18 * i
        o.append(f'<line x1="{W - R + 12}" y1="{ly}" x2="{W - R + 36}" y2="{ly}" '
                 f'stroke="{c}" stroke-width="2"/>')
        o.append(f'<text x="{W - R + 42}" y="{ly + 4}">{label}</text>')
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")
    return True


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def section(ctr_json, plots_dir, plots_rel="plots"):
    """The section's Markdown lines (empty when ctr_json is missing)."""
    if not os.path.exists(ctr_json):
        return []
    d = json.load(open(ctr_json))
    base = os.path.dirname(os.path.abspath(ctr_json))
    runs = d["runs"]
    m, dat, r = d["model"], d["data"], d["ratios"]
    w = [TITLE, ""]
    w.append(
        f"`{d['command']}`: {dat['rows']:,} training and {dat['test_rows']:,} test rows "
        f"from `ferry-ctrgen --vocab-scale {dat['vocab_scale']}` "
        f"({fmt(dat.get('total_vocab'), ',')} ids over 26 fields, positive rate "
        f"{fmt(dat.get('positive_rate'), '.3f')}); the data's own ceiling (the hidden "
        f"model's AUC on the test rows) is **{d['auc_ceiling']:.4f}**. One pass, the "
        f"same model everywhere (embeddings dim {m['emb_dim']}, bottom {m['bottom']}, "
        f"{m['interaction']} interaction, top {m['top']}), global batch "
        f"{m['global_batch']:,} ({m['batch_per_trainer']:,} per trainer), dense Adagrad "
        f"lr {m['lr']}, row-wise Adagrad lr {m['table_lr']} for the embeddings, and the "
        "same initial weights and rows (`examples/torch_dlrm.py --init ferry`). "
        "samples/s: the job's samples over its wall time, evaluation excluded; "
        "rows: the median of the interleaved repeats by samples/s (all repeats in "
        "brackets). bytes/step: loopback bytes sent by every process over the "
        "global steps (over emulated links: the trainers' own counters). Memory: "
        "the servers' peak RSS summed (PyTorch: the process's peak RSS, each rank "
        "for DDP), and the tables' bytes on the servers at the end.")
    w.append("")
    w.append("| system | samples/s | AUC | log loss | wall s | bytes/step | memory MB | table MB |")
    w.append("|---|---|---|---|---|---|---|---|")
    for x in runs:
        allsps = ", ".join(f"{v:,.0f}" for v in x.get("samples_per_s_all", []) if v)
        w.append(
            f"| {NAMES.get(x['system'], x['system'])} | {fmt(x['samples_per_s'], ',.0f')}"
            f"{f' ({allsps})' if x.get('repeats', 1) > 1 else ''} | {fmt(x['auc'], '.4f')} | "
            f"{fmt(x['logloss'], '.4f')} | {fmt(x['wall_s'], '.2f')} | "
            f"{fmt(x.get('bytes_per_step'), ',.0f')} | {fmt(x.get('server_rss_mb'), ',.0f')} | "
            f"{fmt(x.get('table_mb'), '.1f')} |")
    w.append("")

    def ok(c):
        return "-" if c is None else ("met" if c else "**not met**")

    def ge(v, t):
        return None if v is None else v >= t

    def within(v, t):
        return None if v is None else abs(v) <= t

    w.append("Targets (issue 26):")
    w.append("")
    w.append("| target | measured | met |")
    w.append("|---|---|---|")
    w.append(f"| Ferry C trainer's AUC within 0.002 of one-process PyTorch | "
             f"{fmt(r.get('ferry_auc_minus_single'), '+.5f')} | "
             f"{ok(within(r.get('ferry_auc_minus_single'), 0.002))} |")
    w.append(f"| PyTorch on Ferry's AUC within 0.002 of it | "
             f"{fmt(r.get('ferry_torch_auc_minus_single'), '+.5f')} | "
             f"{ok(within(r.get('ferry_torch_auc_minus_single'), 0.002))} |")
    w.append(f"| with a 25% memory cap, within 0.005 | "
             f"{fmt(r.get('ferry_cap25_auc_minus_single'), '+.5f')} | "
             f"{ok(within(r.get('ferry_cap25_auc_minus_single'), 0.005))} |")
    w.append(f"| Ferry samples/s >= 3x DDP's | "
             f"{fmt(r.get('ferry_over_ddp_samples_per_s'), '.2f')}x | "
             f"{ok(ge(r.get('ferry_over_ddp_samples_per_s'), 3))} |")
    w.append(f"| PyTorch on Ferry >= 2x DDP's | "
             f"{fmt(r.get('ferry_torch_over_ddp_samples_per_s'), '.2f')}x | "
             f"{ok(ge(r.get('ferry_torch_over_ddp_samples_per_s'), 2))} |")
    reach = r.get("ferry_100mbit_reaches_unshaped_auc")
    wall = r.get("ferry_100mbit_wall_over_unshaped")
    w.append(f"| 100 Mbit/s: the unshaped run's final AUC within 1.5x its wall time | "
             f"{fmt(wall, '.2f')}x the wall time, AUC "
             f"{fmt(r.get('ferry_100mbit_auc_minus_unshaped'), '+.5f')} | "
             f"{ok(None if wall is None else (wall <= 1.5 and bool(reach)))} |")
    w.append("")
    series = []
    for x in runs:
        c = x.get("curve")
        if c and os.path.exists(os.path.join(base, c)):
            series.append((x["system"], read_curve(os.path.join(base, c))))
    os.makedirs(plots_dir, exist_ok=True)
    if svg_plot(series, os.path.join(plots_dir, "ctr_auc_vs_time.svg"),
                "DLRM on generated CTR data: test AUC vs wall time"):
        w.append(f"![test AUC against wall time]({plots_rel}/ctr_auc_vs_time.svg)")
        w.append("")
        w.append("Progress points are evaluated on the first rows of the test set "
                 "(`--eval-rows`), the last point of each curve on all of it.")
        w.append("")
    return w


def splice(doc, lines, title=TITLE):
    """Replace the section titled title in doc (up to the next '## '), or
    add it before the '## SSP sweep' section (else at the end). The other
    report modules beside this one (elastic_report.py) use it too."""
    text = open(doc).read().split("\n")
    start = next((i for i, l in enumerate(text) if l == title), None)
    if start is None:
        at = next((i for i, l in enumerate(text) if l.startswith("## SSP sweep")), len(text))
        text[at:at] = lines
    else:
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")),
                   len(text))
        text[start:end] = lines
    with open(doc, "w") as f:
        f.write("\n".join(text))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(here, "ctr.json"))
    ap.add_argument("--doc", default=os.path.join(root, "docs", "benchmarks.md"))
    ap.add_argument("--plots", default=os.path.join(root, "docs", "plots"))
    a = ap.parse_args()
    lines = section(a.json, a.plots)
    if not lines:
        sys.exit(f"ctr_report: no {a.json} (run bench/ctr.sh)")
    splice(a.doc, lines)
    print(f"ctr_report: wrote its section into {a.doc}")


if __name__ == "__main__":
    main()
