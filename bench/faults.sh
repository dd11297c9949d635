#!/usr/bin/env bash
# faults.sh — how fast a job gets over a death, what replicas cost, and how
# fast snapshots go (issue 11). Writes bench/results/faults.json with the
# medians over RUNS runs:
#   detect_ms    a trainer SIGKILLed mid-job (2 servers, 2 trainers, sync,
#                --heartbeat-ms and --dead-after-ms at their defaults) ->
#                the scheduler's log line publishing the map without it
#   recover_ms   the same kill -> the first step the surviving trainer
#                completes after that map (stamped as its progress line
#                arrives; --log-interval 1)
#   replicas_overhead  1 - samples/s with --replicas 2 / with --replicas 1
#                (both trainers' samples/s summed, a fault-free sync job);
#                null, with a note, when ps-server has no --replicas
#   snapshot_write_gbps, snapshot_restore_gbps, dd_write_gbps
#                from bench/snapshot.sh run in the same go (dd beside each
#                snapshot on the same disk)
# plus each run's raw numbers and the targets of the issue's "Done when"
# (detect <= 3 s, recover <= 5 s, replicas <= 15%, write >= 0.5 x dd).
#
#   bench/faults.sh [RUNS] [SNAPSHOT_MB]     # defaults: 5 runs, 256 MB
#
# Builds with scripts/setup.sh (FERRY_BUILD_DIR picks the build
# directory); FERRY_DATA_DIR picks the data set (default
# /usr/share/datasets/fashion-mnist). Logs of every run stay in a temp
# directory printed at the end; FERRY_RESULTS_DIR picks where the JSON
# goes (default bench/results).
#
#   bench/faults.sh --smoke       # seconds (ctest -L bench-smoke): 1 run,
#                                 # 8 MB, the others' --smoke, what is
#                                 # built, the JSON in the temp directory
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0
if [ "${1:-}" = --smoke ]; then
	smoke=1
	set -- 1 8
fi
RUNS=${1:-5} MB=${2:-256}
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "faults.sh: RUNS must be a positive integer" >&2; exit 2; }
[[ "$MB" =~ ^[1-9][0-9]*$ ]] || { echo "faults.sh: SNAPSHOT_MB must be a positive integer" >&2; exit 2; }
((smoke)) || scripts/setup.sh
BUILD=${FERRY_BUILD_DIR:-build}
((smoke)) || cmake --build "$BUILD" -j2 --target ps-server trainer snapshot_bench >/dev/null
PS="$BUILD/ps/ps-server" TR="$BUILD/trainer/trainer"
DATA=${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -d "$DATA" ]; then
	((!smoke)) || { echo "faults.sh: SKIP: no data set"; exit 77; }
	echo "faults.sh: no data set at $DATA (set FERRY_DATA_DIR)" >&2
	exit 1
fi
LOGS=$(mktemp -d /tmp/ferry-faults.XXXXXX)
export FERRY_RESULTS_DIR=${FERRY_RESULTS_DIR:-bench/results}
((!smoke)) || FERRY_RESULTS_DIR=$LOGS
# The sizes of the scripts this one runs (with --smoke, their own).
snap_args=("$MB" "$RUNS") rep_args=("$RUNS")
((!smoke)) || snap_args=(--smoke) rep_args=(--smoke)

# Snapshots first: a quiet machine for the disk.
echo "faults.sh: snapshots (bench/snapshot.sh $MB $RUNS)" >&2
FERRY_BUILD_DIR="$BUILD" bench/snapshot.sh "${snap_args[@]}" >"$LOGS/snapshot.txt"
cat "$LOGS/snapshot.txt" >&2

# What replicas cost: bench/replicas.sh, the one place it is measured.
REPLICAS=0
if "$PS" --help 2>&1 | grep -q -- '--replicas'; then
	REPLICAS=1
	echo "faults.sh: replicas (bench/replicas.sh $RUNS)" >&2
	FERRY_BUILD_DIR="$BUILD" FERRY_DATA_DIR="$DATA" bench/replicas.sh \
		"${rep_args[@]}" "$LOGS/replicas.json" >&2
fi

python3 - "$PS" "$TR" "$DATA" "$LOGS" "$RUNS" "$REPLICAS" "$FERRY_RESULTS_DIR" <<'PY'
import datetime, json, os, random, re, signal, statistics, subprocess, sys
import threading, time

PS, TR, DATA, LOGS = sys.argv[1:5]
RUNS, REPLICAS = int(sys.argv[5]), int(sys.argv[6])
RESULTS = sys.argv[7]
rng = random.Random(11)


def log_time(line):
    """The epoch seconds of a Ferry log line ('2026-11-22T17:29:49.123Z')."""
    ts = line.split(" ", 1)[0]
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


class Job:
    """A scheduler, 2 servers and 2 trainers on loopback, logs in d."""

    def __init__(self, d, ps_flags, tr_flags, stamp_rank=None):
        os.makedirs(d)
        self.d, self.procs, self.stamps = d, [], []
        urlf = f"{d}/scheduler.url"
        self.spawn([PS, "--role=scheduler", "--trainers=2", "--servers=2",
                    f"--url-file={urlf}"] + ps_flags, "scheduler")
        end = time.time() + 20
        while not os.path.exists(urlf) or not open(urlf).read().strip():
            if time.time() > end:
                sys.exit(f"faults.sh: the scheduler did not start ({d})")
            time.sleep(0.02)
        url = open(urlf).read().strip()
        for m in range(2):
            self.spawn([PS, "--role=server", f"--scheduler={url}"] + ps_flags,
                       f"server-{m}")
        self.trainers = []
        for r in range(2):
            argv = [TR, f"--scheduler={url}", f"--rank={r}",
                    f"--data={DATA}"] + tr_flags
            p = self.spawn(argv, f"trainer-{r}",
                           pipe=(r == stamp_rank))
            self.trainers.append(p)
            if r == stamp_rank:
                threading.Thread(target=self.stamp, args=(p,),
                                 daemon=True).start()

    def spawn(self, argv, name, pipe=False):
        out = subprocess.PIPE if pipe else open(f"{self.d}/{name}.out", "w")
        p = subprocess.Popen(argv, stdout=out,
                             stderr=open(f"{self.d}/{name}.log", "w"),
                             text=True)
        self.procs.append(p)
        return p

    def stamp(self, p):
        """Stamps each 'step N' progress line of p with its arrival."""
        with open(f"{self.d}/stamped.out", "w") as f:
            for line in p.stdout:
                t = time.time()
                f.write(f"{t:.6f} {line}")
                m = re.match(r"step (\d+) \|", line)
                if m:
                    self.stamps.append((t, int(m.group(1))))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def fault_run(i):
    """One SIGKILL of trainer 1 at a random moment; (detect_ms, recover_ms)."""
    d = f"{LOGS}/kill-{i}"
    flags = ["--layers=784,64,10", "--batch=32", "--max-steps=1000000",
             "--epochs=1000", "--log-interval=1", "--seed=1",
             "--timeout-ms=30000"]
    job = Job(d, [], flags, stamp_rank=0)
    try:
        end = time.time() + 60
        while len(job.stamps) < 50:  # both train
            if time.time() > end:
                sys.exit(f"faults.sh: the job did not start ({d})")
            time.sleep(0.02)
        time.sleep(rng.uniform(0.2, 1.5))  # a random step
        t_kill = time.time()
        job.trainers[1].send_signal(signal.SIGKILL)
        # Wait (20 s at most) for the map without rank 1, then a step.
        t_map = None
        end = t_kill + 20
        while time.time() < end:
            dead = False
            for line in open(f"{d}/scheduler.log"):
                if "member trainer 1 dead" in line:
                    dead = True
                elif dead and re.search(r"placement: epoch \d+:", line):
                    t_map = log_time(line)
                    break
            if t_map is not None:
                after = [t for t, _ in list(job.stamps) if t > t_map]
                if after:
                    return ((t_map - t_kill) * 1e3, (after[0] - t_kill) * 1e3)
            time.sleep(0.05)
        sys.exit(f"faults.sh: no recovery within 20 s of the kill ({d})")
    finally:
        job.stop()


detect, recover = [], []
for i in range(RUNS):
    dm, rm = fault_run(i)
    detect.append(round(dm, 1))
    recover.append(round(rm, 1))
    print(f"faults.sh: run {i + 1}/{RUNS}: detect {dm:.0f} ms, "
          f"recover {rm:.0f} ms", file=sys.stderr)

out = {}
out["detect_ms"] = round(statistics.median(detect), 1)
out["recover_ms"] = round(statistics.median(recover), 1)
if REPLICAS:
    out.update(json.load(open(f"{LOGS}/replicas.json")))
else:
    out["replicas_overhead"] = None
    out["replicas_note"] = ("ps-server has no --replicas option in this "
                            "build: not measured")
snap = json.load(open(f"{RESULTS}/snapshot.json"))
for k in ("snapshot_write_gbps", "snapshot_restore_gbps", "dd_write_gbps",
          "write_vs_dd"):
    out[k] = snap[k]
out["detect_ms_runs"], out["recover_ms_runs"] = detect, recover
out["runs"], out["snapshot_mb"] = RUNS, snap["mb"]
out["defaults"] = {"heartbeat_ms": 1000, "dead_after_ms": 5000}
ro = out["replicas_overhead"]
out["targets_met"] = {
    "detect_ms<=3000": out["detect_ms"] <= 3000,
    "recover_ms<=5000": out["recover_ms"] <= 5000,
    "replicas_overhead<=0.15": None if ro is None else ro <= 0.15,
    "snapshot_write>=0.5*dd": out["write_vs_dd"] >= 0.5,
}
json.dump(out, open(f"{RESULTS}/faults.json", "w"), indent=1)
print(json.dumps(out, indent=1))
PY
echo "faults.sh: logs in $LOGS" >&2
