#!/usr/bin/python3
"""scale_report.py - the "Scale" section of docs/benchmarks.md from
bench/results/scale.json (bench/scale.sh, issue 30).

make_report.py calls section(); run alone, it rewrites that section of a
benchmarks.md in place (after bench/scale.sh, without a whole
bench/run.sh):

  bench/results/scale_report.py [--json bench/results/scale.json]
      [--doc docs/benchmarks.md] [--plots docs/plots]

Every part of scale.sh is optional here: a part that did not run (or
failed) leaves its keys out of scale.json, and its table is left out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctr_report import splice  # noqa: E402 (beside this file)

TITLE = "## Scale: trainers, servers, model size and members (bench/scale.sh)"


def ok(cond):
    return "met" if cond else "**not met**"


def num(v, d=2):
    """A cell: floats to d decimals (more for small ones), None as a dash."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        if v != 0 and abs(v) < 10 ** -d:
            return f"{v:.3g}"
        return f"{v:,.{d}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def mb(b):
    """Bytes as MB or GB (decimal), the way the sweeps' sizes read."""
    if b is None:
        return "—"
    return f"{b / 1e9:g} GB" if b >= 1e9 else f"{b / 1e6:.3g} MB"


def table(rows, cols):
    """A Markdown table of rows (dicts). cols: (key, header, digits) in
    order; a column no row has is left out, and scalar keys not in cols
    are added after them under their own names (a part may add keys)."""
    if not rows:
        return []
    known = {c[0] for c in cols}
    extra = []
    for r in rows:
        for k, v in r.items():
            if k not in known and k not in extra and \
                    (v is None or isinstance(v, (int, float, str, bool))):
                extra.append(k)
    use = [c for c in cols if any(c[0] in r for r in rows)]
    use += [(k, k, 3) for k in extra]
    out = ["| " + " | ".join(h for _, h, _ in use) + " |",
           "|" + "---|" * len(use)]
    for r in rows:
        cells = []
        for k, _, d in use:
            v = r.get(k)
            cells.append(mb(v) if k == "bytes" and v is not None
                         else num(v, d))
        out.append("| " + " | ".join(cells) + " |")
    return out


SWEEP_COLS = [
    ("mode", "mode", 0), ("servers", "servers", 0),
    ("trainers", "trainers", 0), ("bytes", "model", 0),
    ("round_ms", "round ms (median)", 2), ("round_ms_p99", "p99 ms", 2),
    ("push_pulls_per_s", "push-pulls/s", 0),
    ("goodput_gbps", "goodput GB/s", 3),
    ("server_cpu_s", "server CPU s", 2),
    ("agg_gb_per_core_s", "aggregated GB per core-s", 3),
    ("server_cpu_s_per_gb", "server CPU s per GB", 3),
    ("server_rss_mb", "server RSS MB", 1),
    ("server_hwm_mb", "server peak RSS MB", 1), ("ok", "ok", 0),
]
# Columns the summary tables show; the others stay in scale.json.
SWEEP_SKIP = ("floats", "agg_bytes", "steps", "elapsed_s", "shards")


def runs_text(xs, d):
    """Each run's figure, for a row that is the median of several."""
    return ", ".join(num(x, d) for x in xs if x is not None)


def sweep_rows(rows):
    out = []
    for r in rows:
        o = {k: v for k, v in r.items() if k not in SWEEP_SKIP}
        if len(r.get("agg_gb_per_core_s_runs") or []) > 1:
            o["aggregated GB per core-s, each run"] = runs_text(
                r["agg_gb_per_core_s_runs"], 3)
        out.append(o)
    return out


def gnuplot(script):
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True,
                       capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError) as e:
        print("scale_report: gnuplot failed:", getattr(e, "stderr", e),
              file=sys.stderr)
        return False


def plot_trainers(rows, plots):
    """scale_trainers.png: round time and aggregation per core against
    trainers, one line per (mode, servers). Returns its lines or []."""
    series = {}
    for r in rows:
        if r.get("ok", True) and r.get("round_ms") is not None:
            series.setdefault((r["mode"], r["servers"]), []).append(r)
    if not plots or not series:
        return []
    os.makedirs(plots, exist_ok=True)
    dat = tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False)
    names = []
    for (mode, servers), rs in sorted(series.items()):
        dat.write(f"# {mode} {servers}\n")
        for r in sorted(rs, key=lambda r: r["trainers"]):
            dat.write(f"{r['trainers']} {r['round_ms']} "
                      f"{r.get('agg_gb_per_core_s') or 'NaN'}\n")
        dat.write("\n\n")
        names.append(f"{mode}, {servers} server{'s' if servers > 1 else ''}")
    dat.close()
    left = ", ".join(f"'{dat.name}' index {i} using 1:2 w lp pt 7 t '{n}'"
                     for i, n in enumerate(names))
    right = ", ".join(f"'{dat.name}' index {i} using 1:3 w lp pt 7 t '{n}'"
                      for i, n in enumerate(names))
    out = os.path.join(plots, "scale_trainers.png")
    done = gnuplot(f"""set terminal pngcairo size 1100,460 font ',10'
set output '{out}'
set multiplot layout 1,2
set logscale x 2
set grid
set key top left
set xlabel 'trainers'
set ylabel 'round time, median (ms)'
set logscale y
set title 'push-pull round time (load-only)'
plot {left}
unset logscale y
set yrange [0:*]
set ylabel 'GB aggregated per server core-second'
set title 'server aggregation per core'
plot {right}
unset multiplot
""")
    os.unlink(dat.name)
    if not done:
        return []
    return ["![round time and aggregation per core against trainers]"
            "(plots/scale_trainers.png)", ""]


def targets(d):
    """The issue's 'done when' figures that scale.json holds."""
    t = []
    r = d.get("agg_per_core_ratio_64_vs_2")
    if r is not None:
        t.append(("server aggregation per core, 64 vs 2 sync trainers",
                  f"{r:.2f}x", ">= 0.8", ok(r >= 0.8)))
    wg = d.get("trainer_sweep_worst_growth") or {}
    for k, what in (("round_ms", "sync round time"),
                    ("cpu_per_gb", "server CPU per GB"),
                    ("rss", "server RSS")):
        g = wg.get(k)
        if g:
            t.append((f"worst step of the trainer sweep: {what} growth "
                      f"over trainers x bytes ({g['mode']}, "
                      f"{g['servers']} server(s), {g['from']} -> "
                      f"{g['to']} trainers)",
                      f"{g['value']:.2f}", "<= 1.2 (linear, with noise)",
                      ok(g["value"] <= 1.2)))
    if d.get("big_model_rss_ratio") is not None:
        r = d["big_model_rss_ratio"]
        t.append((f"{mb(d.get('big_model_bytes'))} model: server RSS / "
                  "(weights + optimizer state + pull reference)",
                  f"{r:.2f}", "<= 1.3", ok(r <= 1.3)))
    if d.get("big_model_goodput_ratio") is not None:
        r = d["big_model_goodput_ratio"]
        t.append(("push-pull goodput per byte, 1 GB / 1 MB", f"{r:.2f}",
                  ">= 0.7", ok(r >= 0.7)))
    if d.get("sched_cpu_frac") is not None:
        r = d["sched_cpu_frac"]
        t.append((f"scheduler CPU with {d.get('sched_members', '?')} "
                  "members heartbeating every 1 s", f"{100 * r:.2f}% of a core",
                  "<= 5%", ok(r <= 0.05)))
    if d.get("sched_map_all_s") is not None:
        r = d["sched_map_all_s"]
        t.append(("new map to every member", f"{r:.3f} s", "<= 2 s",
                  ok(r <= 2)))
    if d.get("sim_max_rel_error") is not None:
        r = d["sim_max_rel_error"]
        t.append(("simulator: largest error against a measured run",
                  f"{100 * r:.1f}%", "<= 15%", ok(r <= 0.15)))
    if not t:
        return []
    w = ["Targets (issue 30):", "", "| target | measured | goal | met |",
         "|---|---|---|---|"]
    w += [f"| {a} | {b} | {c} | {e} |" for a, b, c, e in t]
    return w + [""]


def trainer_lines(d, plots):
    w = []
    ts, ss = d.get("trainer_sweep"), d.get("server_sweep")
    if ts:
        w += ["### Trainers (bench/scale/trainers.sh)", "",
              "Load-only trainers (`bench/scale/loadgen`: K ranks as "
              "threads of one process, each a libferry client pushing and "
              "pulling the model with no compute) against 1 and 2 servers "
              "on loopback, a fresh job per run; a row is the median of "
              "its cell's runs (`repeats`; the runs go round every cell in "
              "turn), each figure its own median. Round time is the median "
              "push-pull (in sync mode, one round); server CPU is the "
              "servers' user + system time over the timed window "
              "(/proc), and aggregated GB per core-second is the gradient "
              "bytes the servers applied over that CPU time. Every process "
              "shares the machine's cores: the trainers' own CPU competes "
              "with the servers' (a 2-core machine bends early for that "
              "reason alone). Until libferry kept message-sized blocks in "
              "its heap as ps-server does (docs/operations.md §8, "
              "\"Memory\"), each reply was faulted in page by page and "
              "unmapped after: 4 and 8 sync trainers on one server took "
              "8.9 and 14.8 ms a round, 3x the push-pull cost of 2 "
              "trainers (the 07:13Z run's rows: 7.3 and 13.4 ms); with it "
              "2.5 and 4.9 ms.", ""]
        w += plot_trainers(ts, plots)
        w += table(sweep_rows(ts), SWEEP_COLS) + [""]
    ctl = d.get("trainer_sweep_control")
    if ctl:
        w += ["Control: 2 sync trainers whose model is as large as the "
              "largest count's trainers x bytes, so that a round holds the "
              "same bytes in flight. Aggregation per core that bends as far "
              "here as with many trainers is the round's bytes leaving the "
              "caches, not a cost per trainer.", ""]
        w += table(sweep_rows(ctl), SWEEP_COLS) + [""]
    if ss:
        w += ["### Servers (bench/scale/trainers.sh)", "",
              "Servers 1 to 8 with the same trainers, the model cut into "
              "equal shards dealt over them.", ""]
        w += table(sweep_rows(ss), SWEEP_COLS) + [""]
    g = d.get("trainer_sweep_growth")
    if g:
        w += ["Growth between consecutive trainer counts (each cost's "
              "ratio over the growth of trainers x bytes: round time and "
              "RSS divided by the trainer ratio, CPU per GB as is; above 1 "
              "is a step that cost more than linear):", ""]
        w += table(g, [("mode", "mode", 0), ("servers", "servers", 0),
                       ("from", "from", 0), ("to", "to trainers", 0),
                       ("round_ms", "round time", 2),
                       ("cpu_per_gb", "CPU per GB", 2),
                       ("rss", "RSS", 2)]) + [""]
    return w


def model_lines(d):
    w = []
    ms = d.get("model_sweep")
    if ms:
        w += ["### Model size (bench/scale/model.sh)", "",
              "Dense model 1 MB to 1 GB: push-pull time and goodput "
              "against a memcpy and a raw loopback of the same bytes; "
              "server RSS against the state it must hold (weights, "
              "optimizer state, pull reference).", ""]
        w += table(ms, [
            ("bytes", "model", 0), ("floats", "floats", 0),
            ("servers", "servers", 0), ("trainers", "trainers", 0),
            ("shards", "shards", 0), ("push_pull_ms", "push-pull ms", 2),
            ("goodput_gbps", "goodput GB/s", 3),
            ("memcpy_gbps", "memcpy GB/s", 2),
            ("loopback_gbps", "loopback GB/s", 3),
            ("server_rss_mb", "server RSS MB", 1),
            ("state_mb", "state MB", 1), ("rss_ratio", "RSS / state", 2)])
        w.append("")
    rs = d.get("rows_sweep")
    if rs:
        w += ["Sparse tables:", ""]
        w += table(rs, [("rows", "rows", 0), ("dim", "dim", 0)]) + [""]
    big = [(k, d[k]) for k in ("big_model_bytes", "big_model_steps",
                               "big_model_rss_ratio",
                               "big_model_goodput_ratio",
                               "big_model_loss_first", "big_model_loss_last")
           if d.get(k) is not None]
    if big:
        w += ["| big model | value |", "|---|---|"]
        for k, v in big:
            w.append(f"| {k[len('big_model_'):].replace('_', ' ')} | "
                     f"{mb(v) if k == 'big_model_bytes' else num(v, 3)} |")
        w.append("")
    return w


def sched_lines(d):
    w = []
    keys = [("sched_members", "members", 0),
            ("sched_cpu_frac", "scheduler CPU (fraction of a core)", 4),
            ("sched_map_all_s", "new map to every member (s)", 3),
            ("sched_rss_mb", "scheduler RSS (MB)", 1)]
    have = [(k, h, p) for k, h, p in keys if d.get(k) is not None]
    if not have and not d.get("sched_sweep"):
        return w
    w += ["### Scheduler (bench/scale/sched.sh)", "",
          "Simulated members (`bench/scale/membersim`) that register, "
          "heartbeat every second and watch the map at the real rates. "
          "The scheduler runs as deployed: `--cpus=auto`, its threads on "
          "one CPU with batch scheduling (docs/operations.md §8); before "
          "`--cpus` (the run of 2026-11-28T01:39Z) the 1,000-member row "
          "measured 7.9% in a single run. "
          "The largest size with "
          "`--watch stale` runs `repeats` times; its row is the runs' "
          "medians.", ""]
    if have:
        w += ["| figure | value |", "|---|---|"]
        w += [f"| {h} | {num(d[k], p)} |" for k, h, p in have]
        w.append("")
    srows = []
    for r in d.get("sched_sweep") or []:
        o = dict(r)
        if len(r.get("cpu_frac_runs") or []) > 1:
            o["CPU, each run"] = runs_text(r["cpu_frac_runs"], 4)
        srows.append(o)
    w += table(srows, [
        ("members", "members", 0), ("cpu_frac", "CPU (fraction of a core)", 4),
        ("map_all_s", "map to all (s)", 3), ("rss_mb", "RSS MB", 1)])
    return w + ([""] if d.get("sched_sweep") else [])


def sim_lines(d):
    w = []
    costs, val = d.get("sim_costs"), d.get("sim_validation")
    pred = d.get("sim_predictions")
    if not (costs or val or pred or d.get("sim_bottleneck_1000")):
        return w
    w += ["### Simulator (bench/sim/)", "",
          "A discrete-event model of sync, SSP and local-step rounds, fed "
          "by the per-message and per-byte costs measured above.", ""]
    if isinstance(costs, dict) and costs:
        w += ["Costs it was fed:", "", "| cost | value |", "|---|---|"]
        for k, v in costs.items():
            v = json.dumps(v) if isinstance(v, (dict, list)) else num(v, 4)
            w.append(f"| {k} | {v} |")
        w.append("")
    if val:
        m = d.get("sim_max_rel_error")
        w += ["Validation against the measured runs" +
              (f" (largest error {100 * m:.1f}%):" if m is not None else ":"),
              ""]
        n = d.get("sim_rows_checked")
        if n:
            w += [f"Of the {n} rows not calibrated on, "
                  f"{d.get('sim_rows_within_15pct')} are predicted within "
                  "15%, and "
                  f"{d.get('sim_rows_within_15pct_or_run_spread')} within "
                  "15% or within their own runs' spread (`run_spread`: "
                  "how far the cell's slowest or fastest run strays from "
                  "the median of its runs; the largest is "
                  f"{100 * (d.get('sim_max_run_spread') or 0):.0f}%). A "
                  "cell whose runs disagree by more than 15% cannot be "
                  "predicted within 15% of every run of it.", ""]
        w += table(val, [
            ("part", "part", 0), ("mode", "mode", 0),
            ("servers", "servers", 0), ("trainers", "trainers", 0),
            ("bytes", "model", 0), ("measured_ms", "measured ms", 2),
            ("predicted_ms", "predicted ms", 2),
            ("rel_error", "error", 3), ("run_spread", "run spread", 3)]) + [""]
    if pred:
        w += ["Predictions:", ""]
        w += table(pred, [
            ("trainers", "trainers", 0), ("servers", "servers", 0),
            ("mode", "mode", 0), ("links", "links", 0),
            ("bytes", "model", 0), ("round_ms", "round ms", 1),
            ("bottleneck", "bottleneck", 0)]) + [""]
    if d.get("sim_bottleneck_1000"):
        w += [f"At 1,000 trainers: {d['sim_bottleneck_1000']}", ""]
    return w


def section(path, plots=None):
    """The section's Markdown lines (empty when path is missing or holds
    none of the parts). plots: where to write PNGs (None: no plots)."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return []
    body = trainer_lines(d, plots) + model_lines(d) + sched_lines(d) + \
        sim_lines(d)
    tg = targets(d)
    if not body and not tg:
        return []
    w = [TITLE, ""]
    where = ""
    if d.get("when"):
        where = (f" on {d['when']} ({d.get('cores', '?')} cores, "
                 f"{d.get('machine', '?')})")
    parts = d.get("parts") or {}
    runs = {}
    for name, pr in parts.items():
        runs.setdefault((pr.get("command"), pr.get("when")), []).append(name)
    if len(runs) > 1:  # parts from different runs (--only): say which
        where = f" ({d.get('cores', '?')} cores, {d.get('machine', '?')}; " + \
            "; ".join(f"{', '.join(names)}: `{cmd}` on {when}"
                      for (cmd, when), names in runs.items()) + ")"
        d = dict(d, command="bench/scale.sh")
    w.append(f"`{d.get('command') or 'bench/scale.sh'}`{where}. "
             "How Ferry's cost grows with "
             "trainers, servers, model size and members, and a simulator "
             "of much larger jobs fitted to these runs (issue 30). Raw "
             "numbers: [`bench/results/scale.json`]"
             "(../bench/results/scale.json).")
    w.append("")
    return w + tg + body


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(here, "scale.json"))
    ap.add_argument("--doc", default=os.path.join(root, "docs",
                                                  "benchmarks.md"))
    ap.add_argument("--plots", default=os.path.join(root, "docs", "plots"))
    a = ap.parse_args()
    lines = section(a.json, a.plots)
    if not lines:
        sys.exit(f"scale_report: nothing in {a.json} (run bench/scale.sh)")
    splice(a.doc, lines, TITLE)
    print(f"scale_report: wrote its section into {a.doc}")


if __name__ == "__main__":
    main()
