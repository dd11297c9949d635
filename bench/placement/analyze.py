#!/usr/bin/python3
"""analyze.py RUNDIR EVALPLACE OUT_JSON OUT_MD_TABLE

RUNDIR/<scenario>/<placement>-<rep>/ holds one job (sch.log, t0.out, t1.out).
RUNDIR/base/latency-<rep>/ is the unshaped run used for compute time:
compute_ms = median over reps of (measured step ms - logged F ms).
For every run: measured step (steady.py: max over ranks of the median step
after the first 10, once the start-up probes' traffic has drained), the
logged F and LB, and, through EVALPLACE (Ferry's shard_cost/shard_solve on the
logged L and B matrices), the exact optimum F by enumeration and the solver F.
"""
import json, os, re, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from steady import step_ms  # noqa: E402  (steady step after the probes)

rundir, evalplace, out_json, out_md = sys.argv[1:5]
TENSORS = [784 * 256, 256, 256 * 128, 128, 128 * 10, 10]  # default 784-256-128-10
DESC = json.load(open(os.path.join(rundir, "scenarios.json")))


def parse_log(d):
    lines = [l.split("placement: ", 1)[1].rstrip("\n")
             for l in open(os.path.join(d, "sch.log")) if "placement: " in l]
    info = {"L": [], "B": [], "members": []}
    mode = None
    for l in lines:
        if l.startswith("L[t][m]"):
            mode = "L"; continue
        if l.startswith("B[t][m]"):
            mode = "B"; continue
        m = re.match(r"\s+t(\d+)\s+(.*)", l)
        if mode and m:
            info[mode].append([float(x) for x in m.group(2).split()])
            continue
        if re.match(r"\s+m0\s+m1", l):
            continue
        mode = None
        # The scheduler cuts link-sized shards below --shard-bytes when a
        # link is slow ("slowest link ...: shards of N bytes"): evalplace
        # must cut the same way, or its shard count differs from the map's.
        m = re.search(r"shards of (\d+) bytes \(--shard-bytes", l)
        if m:
            info["shard_bytes"] = int(m.group(1))
        m = re.match(r"placement: .* model (\w), rho ([\d.]+), k (\d+)", l)
        if m:
            info["rho"], info["k"] = float(m.group(2)), int(m.group(3))
        m = re.match(r"assign: (.*)", l)
        if m:
            info["assign"] = [int(x) for x in m.group(1).split()]
        m = re.match(r"F ([\d.]+) ms, LB ([\d.]+) ms", l)
        if m:
            info["F"], info["LB"] = float(m.group(1)), float(m.group(2))
        m = re.match(r"\s+m(\d+)\s+(\d+) shards, (\d+) bytes", l)
        if m:
            info.setdefault("loads", {})[int(m.group(1))] = int(m.group(3))
    for l in open(os.path.join(d, "sch.log")):
        m = re.search(r"server (\d+) registered at (\S+)", l)
        if m:
            info["members"].append(f"m{m.group(1)}={m.group(2)}")
    return info


def evaluate(info):
    T, M = len(info["L"]), len(info["L"][0])
    sb = info.get("shard_bytes", 65536)  # placement.sh's --shard-bytes
    inp = [T, M, info["rho"], info["k"], sb, len(TENSORS), *TENSORS]
    inp += [v for row in info["L"] for v in row] + [v for row in info["B"] for v in row]
    inp += [len(info["assign"]), *info["assign"]]
    out = subprocess.run([evalplace], input=" ".join(map(str, inp)),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def r3(f, *xs):
    """f(*xs) rounded to 3 places, or None when an input is missing (a
    scenario whose runs all failed, or no optimum: see evaluate)."""
    return None if any(x is None for x in xs) else round(f(*xs), 3)


runs = {}
for scen in sorted(os.listdir(rundir)):
    sd = os.path.join(rundir, scen)
    if not os.path.isdir(sd):
        continue
    for r in sorted(os.listdir(sd)):
        d = os.path.join(sd, r)
        try:
            info = parse_log(d)
            rec = {"step_ms": step_ms(d), **info, **evaluate(info)}
            # evalplace enumerates the optimum only for few shards (the
            # link-sized cut of a slow link makes ~100): -1 then.
            if rec["opt_ms"] < 0:
                rec["opt_ms"] = rec["solver_over_opt"] = None
        except Exception as e:  # a failed run is reported, not hidden
            rec = {"error": repr(e)}
            print(f"analyze.py: {d}: {e!r}", file=sys.stderr)
        runs.setdefault(scen, {}).setdefault(r.rsplit("-", 1)[0], []).append(rec)

ok = lambda rs: [x for x in rs if "error" not in x]
base = ok(runs.get("base", {}).get("latency", []))
compute = med([x["step_ms"] - x["F"] for x in base])
results = []
for scen in [s for s in DESC if s in runs]:
    u, l = ok(runs[scen].get("uniform", [])), ok(runs[scen].get("latency", []))
    us, ls = med([x["step_ms"] for x in u]), med([x["step_ms"] for x in l])
    lf, uf = med([x["F"] for x in l]), med([x["F"] for x in u])
    opt = med([x["opt_ms"] for x in l])
    # without a base run (placement.sh --scenarios): no compute estimate
    cpt = compute if compute is not None else float("nan")
    pred = r3(lambda a, b: a + b, lf, cpt)
    upred = r3(lambda a, b: a + b, uf, cpt)
    over = [x["solver_over_opt"] for x in l if x["solver_over_opt"] is not None]
    f_opt = [x["F"] / x["opt_ms"] for x in l if x["opt_ms"]]
    results.append({
        "scenario": scen,
        "description": DESC[scen],
        "uniform_step_ms": us,
        "latency_step_ms": ls,
        "predicted_step_ms": pred,
        "optimum_step_ms": r3(lambda a, b: a + b, opt, cpt),
        "uniform_predicted_step_ms": upred,
        "speedup_latency_vs_uniform": r3(lambda a, b: a / b, us, ls),
        "latency_pred_error": r3(lambda a, b: a / b - 1, ls, pred),
        "uniform_pred_error": r3(lambda a, b: a / b - 1, us, upred),
        "compute_ms": compute,
        "latency_F_ms": lf, "uniform_F_ms": uf,
        "optimum_comm_ms": opt,
        "lb_ms": med([x["LB"] for x in l]),
        "solver_over_opt_max": max(over) if over else None,
        "logged_F_over_opt_max": round(max(f_opt), 4) if f_opt else None,
        "uniform_step_ms_runs": [round(x["step_ms"], 3) for x in u],
        "latency_step_ms_runs": [round(x["step_ms"], 3) for x in l],
        # the latency runs that chose uniform's very assignment (the
        # solver keeps round-robin within 10%): equal work, so their step
        # should match uniform's within noise
        "latency_same_assign_step_ms": med([x["step_ms"] for x in l
                                            if u and x.get("assign") == u[0].get("assign")]),
        "latency_same_assign_runs": sum(1 for x in l
                                        if u and x.get("assign") == u[0].get("assign")),
        "latency_loads_bytes": l[0].get("loads") if l else None,
        "uniform_loads_bytes": u[0].get("loads") if u else None,
        "L_ms_latency_run0": l[0]["L"] if l else None,
        "B_MBps_latency_run0": l[0]["B"] if l else None,
        "servers": l[0]["members"] if l else None,
        "failed_runs": sum(len(v) for v in runs[scen].values()) - len(u) - len(l),
    })
# A run of some scenarios (placement.sh --scenarios) keeps the others'
# rows of the previous results.
if os.path.exists(out_json):
    done = {r["scenario"] for r in results}
    try:
        results += [r for r in json.load(open(out_json)) if r.get("scenario") not in done]
    except (ValueError, TypeError):
        pass
    results.sort(key=lambda r: r["scenario"])
json.dump(results, open(out_json, "w"), indent=1)
pct = lambda x: "n/a" if x is None else f"{x:+.0%}"
with open(out_md, "w") as f:
    f.write(f"compute per step (unshaped, median of {len(base)} runs of step - F): {compute} ms\n\n")
    f.write("| scenario | uniform step ms | latency step ms | speedup | predicted ms (F+compute) | latency err | uniform predicted | uniform err | optimum ms | solver F / opt |\n")
    f.write("|---|---|---|---|---|---|---|---|---|---|\n")
    for r in results:
        f.write(f"| {r['scenario']} | {r['uniform_step_ms']} | {r['latency_step_ms']} | "
                f"{r['speedup_latency_vs_uniform']}x | {r['predicted_step_ms']} | "
                f"{pct(r['latency_pred_error'])} | {r['uniform_predicted_step_ms']} | "
                f"{pct(r['uniform_pred_error'])} | {r['optimum_step_ms']} | {r['solver_over_opt_max']} |\n")
print(open(out_md).read())
# A scenario none of whose runs could be read is a broken bench, not a
# result: say so in the exit status (the table above still shows the rest).
broken = [s for s in runs if not any(ok(v) for v in runs[s].values())]
if broken:
    sys.exit(f"analyze.py: no usable run in scenario(s) {' '.join(broken)}")
