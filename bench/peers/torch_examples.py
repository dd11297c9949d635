#!/usr/bin/python3
"""torch_examples.py - the PyTorch examples through Ferry and through DDP.

Runs examples/torch_cnn.py (Fashion-MNIST) and examples/torch_transformer.py
(character-level LM on GPL-3) three ways, same model, initial weights, data,
per-trainer batch, lr and steps, 2 trainers each:

  ddp            the example's --backend ddp: 2 ranks, gloo (nccl on CUDA),
                 DistributedDataParallel + torch.optim.SGD
  ferry          python3 -m ferry.run --trainers 2 --servers 1: the servers
                 apply SGD (ferry.torch.Optimizer), gradients pushed at
                 opt.step(), after backward
  ferry-overlap  the same with --overlap: gradients pushed from autograd's
                 hooks as backward produces them, in buckets of --bucket-mb

--reps runs of each, interleaved (ddp, ferry, ferry-overlap, ddp, ...: the
machine's speed drifts between minutes), and takes the medians of
samples_per_s and of test_acc / val_loss. Writes --out (default
bench/results/torch_peers.json) with every run's summary, the medians, the
ratios and the issue's targets (accuracy within 0.5 point / loss within 2%
of DDP; Ferry CNN >= 1.5x DDP samples/s; overlap not slower than the push
at the end of backward), and prints a table.

  --quick  200 CNN steps, 60 transformer steps, 3 reps (a few minutes)
  --smoke  a few steps, 1 rep, --out in --raw (ctest -L bench-smoke); exit
           77 (skipped) without the data set or the text

Default (full): 1 CNN epoch (468 steps of 2 x 64), 300 transformer steps
(2 x 32 windows of 64 characters), 3 reps. Binaries come from --build
(default $FERRY_BUILD_DIR, else build/), built by scripts/setup.sh when
missing (not with FERRY_SKIP_SETUP=1). Logs of each run in --raw (default
a new temp dir, printed).

Usage: /usr/bin/python3 bench/peers/torch_examples.py [--quick] [--device cuda]
"""
import argparse
import datetime
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = sys.executable
CONFIGS = ("ddp", "ferry", "ferry-overlap")
MODELS = {
    # name: (script, quality key, higher is better, data it needs)
    "cnn": ("examples/torch_cnn.py", "test_acc", True, "/usr/share/datasets/fashion-mnist"),
    "transformer": ("examples/torch_transformer.py", "val_loss", False,
                    "/usr/share/common-licenses/GPL-3"),
}

# ferry-overlap's buckets: a few per model, so that the pushes of the last
# layers go out while backward computes the first layers' gradients (the
# Optimizer's default, 1 MiB, holds either model whole: one push, at the
# end of backward). CNN: fc | conv2.weight | conv1 (20, 51, 2 KB);
# transformer (456 KB): about 4.
OVERLAP_BUCKET_MB = {"cnn": 0.025, "transformer": 0.125}


def binaries(build, may_build):
    """(ps-server, libferry.so) of build, running scripts/setup.sh first
    when one is missing."""
    ps = os.path.join(build, "ps", "ps-server")
    lib = os.path.join(build, "clients", "libferry.so")
    if not (os.access(ps, os.X_OK) and os.path.exists(lib)):
        if not may_build:
            sys.exit(f"torch_examples: {ps} or {lib} missing (FERRY_SKIP_SETUP is set)")
        env = dict(os.environ, FERRY_BUILD_DIR=build)
        subprocess.run([os.path.join(ROOT, "scripts", "setup.sh")], env=env, check=True,
                       stdout=sys.stderr)
    return ps, lib


def command(model, cfg, args, log_dir):
    script = os.path.join(ROOT, MODELS[model][0])
    if model == "cnn":
        flags = ["--epochs", "1"] + (["--max-steps", str(args.cnn_steps)]
                                     if args.cnn_steps else [])
    else:
        flags = ["--max-steps", str(args.lm_steps)]
    flags += ["--device", args.device, "--seed", str(args.seed)]
    if cfg == "ddp":
        return [PY, script, "--backend", "ddp", "--ddp-world", "2"] + flags
    run = [PY, "-m", "ferry.run", "--trainers", "2", "--servers", "1",
           "--log-dir", log_dir, "--ps-server", args.ps_server]
    if cfg == "ferry-overlap":
        flags += ["--overlap", "--bucket-mb", str(args.bucket_mb or OVERLAP_BUCKET_MB[model])]
    return run + [script, "--backend", "ferry"] + flags


def stop_group(proc):
    """SIGTERM to proc's process group (ferry.run then stops its job in
    order), SIGKILL to what is left after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; its group may not be
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def run_one(model, cfg, rep, args):
    """One run: its summary dict, or None (the reason logged)."""
    name = f"{model}-{cfg}-r{rep}"
    log_dir = os.path.join(args.raw, name)
    os.makedirs(log_dir, exist_ok=True)
    cmd = command(model, cfg, args, log_dir)
    t = time.perf_counter()
    with open(os.path.join(log_dir, "run.out"), "w") as out, \
            open(os.path.join(log_dir, "run.err"), "w") as err:
        # Its own process group: on a timeout the whole run goes (the DDP
        # ranks, or ferry.run's scheduler, servers and trainers).
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
            stop_group(proc)
    wall = time.perf_counter() - t
    with open(os.path.join(log_dir, "run.out")) as f:
        lines = [ln for ln in f.read().splitlines() if ln.startswith('{"summary"')]
    if rc != 0 or not lines:
        with open(os.path.join(log_dir, "run.err")) as f:
            tail = f.read().strip().splitlines()[-3:]
        print(f"torch_examples: {name} failed (exit {rc}): {' / '.join(tail)[:300]}; "
              f"logs in {log_dir}", file=sys.stderr)
        return None
    s = json.loads(lines[-1])["summary"]
    s["run_wall_s"] = round(wall, 2)
    print(f"torch_examples: {name}: {s['samples_per_s']} samples/s, "
          f"{MODELS[model][1]} {s[MODELS[model][1]]} ({wall:.1f} s)", file=sys.stderr)
    return s


def median(runs, key):
    v = [r[key] for r in runs if r and key in r]
    return statistics.median(v) if v else None


def targets(model, med):
    """The issue's targets for one model from the medians."""
    q = MODELS[model][1]
    d, f, o = med.get("ddp", {}), med.get("ferry", {}), med.get("ferry-overlap", {})
    out = []

    def add(name, value, goal, ok):
        out.append({"target": name, "value": value, "goal": goal,
                    "met": None if value is None else bool(ok)})

    for cfg, m in (("ferry", f), ("ferry-overlap", o)):
        if q == "test_acc":
            v = None if None in (m.get(q), d.get(q)) else round((m[q] - d[q]) * 100, 2)
            add(f"{cfg} test_acc - ddp (points)", v, "within +-0.5",
                v is not None and abs(v) <= 0.5)
        else:
            v = None if None in (m.get(q), d.get(q)) else round((m[q] / d[q] - 1) * 100, 2)
            add(f"{cfg} val_loss vs ddp (%)", v, "within +-2%", v is not None and abs(v) <= 2)
    sps = "samples_per_s"
    r = None if None in (f.get(sps), d.get(sps)) else round(f[sps] / d[sps], 3)
    add("ferry / ddp samples/s", r, ">= 1.5" if model == "cnn" else "(reported)",
        r is not None and (r >= 1.5 or model != "cnn"))
    r = None if None in (o.get(sps), f.get(sps)) else round(o[sps] / f[sps], 3)
    add("ferry-overlap / ferry samples/s", r, ">= 1.0", r is not None and r >= 1.0)
    return out


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--reps", type=int, default=None, help="runs of each (default 3; smoke 1)")
    ap.add_argument("--models", default="cnn,transformer")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--build", default=os.environ.get("FERRY_BUILD_DIR")
                    or os.path.join(ROOT, "build"))
    ap.add_argument("--raw", default=None, help="folder for the runs' logs")
    ap.add_argument("--out", default=None, help="JSON results (default "
                    "bench/results/torch_peers.json; --smoke: in --raw)")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="ferry-overlap's --bucket-mb (default per model: cnn 0.025, "
                    "transformer 0.125)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            ap.error(f"--models: unknown {m!r} (cnn, transformer)")
    if args.smoke:
        args.cnn_steps, args.lm_steps, reps = 5, 3, 1
    elif args.quick:
        args.cnn_steps, args.lm_steps, reps = 200, 60, 3
    else:
        args.cnn_steps, args.lm_steps, reps = 0, 300, 3
    args.reps = args.reps or reps
    for m in models:
        if not os.path.exists(MODELS[m][3]):
            print(f"torch_examples: SKIP: no {MODELS[m][3]}")
            return 77
    if importlib.util.find_spec("torch") is None:  # the examples need it
        print("torch_examples: SKIP: no torch")
        return 77
    args.build = os.path.abspath(args.build)
    args.ps_server, lib = binaries(args.build, os.environ.get("FERRY_SKIP_SETUP") != "1")
    os.environ["FERRY_LIB"] = lib
    os.environ["FERRY_PS_SERVER"] = args.ps_server
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    args.raw = args.raw or tempfile.mkdtemp(prefix="ferry-torch-peers.")
    os.makedirs(args.raw, exist_ok=True)
    out = args.out or (os.path.join(args.raw, "torch_peers.json") if args.smoke else
                       os.path.join(ROOT, "bench", "results", "torch_peers.json"))
    print(f"torch_examples: logs in {args.raw}", file=sys.stderr)
    load0 = loadavg()
    t0 = time.time()
    runs = {m: {c: [] for c in CONFIGS} for m in models}
    for m in models:
        for rep in range(1, args.reps + 1):
            for cfg in CONFIGS:
                runs[m][cfg].append(run_one(m, cfg, rep, args))
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
           "commit": git_commit(), "device": args.device, "cores": os.cpu_count(),
           "loadavg_before": load0, "loadavg_after": loadavg(),
           "wall_s": round(time.time() - t0, 1), "reps": args.reps,
           "mode": "smoke" if args.smoke else "quick" if args.quick else "full",
           "command": "/usr/bin/python3 bench/peers/torch_examples.py"
           + (" --smoke" if args.smoke else " --quick" if args.quick else "")
           + (" --device cuda" if args.device == "cuda" else ""),
           "models": {}}
    failed = False
    for m in models:
        q = MODELS[m][1]
        med = {}
        for cfg in CONFIGS:
            ok = [r for r in runs[m][cfg] if r]
            failed |= len(ok) < len(runs[m][cfg])
            if ok:
                med[cfg] = {"samples_per_s": median(ok, "samples_per_s"), q: median(ok, q),
                            "runs": len(ok), "steps": ok[0]["steps"],
                            "epochs": ok[0]["epochs"], "batch": ok[0]["batch"]}
        res["models"][m] = {"script": MODELS[m][0], "quality": q, "medians": med,
                            "targets": targets(m, med), "runs": runs[m]}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    for m in models:
        r = res["models"][m]
        print(f"{m}: medians of {args.reps} ({r['quality']}, samples/s)")
        for cfg, v in r["medians"].items():
            print(f"  {cfg:14s} {v[r['quality']]!s:>8}  {v['samples_per_s']!s:>9}")
        for t in r["targets"]:
            met = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
            print(f"  {t['target']}: {t['value']} (goal {t['goal']}): {met}")
    print(f"torch_examples: wrote {out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
