#!/usr/bin/python3
# prometheus_dashboard.py: every PromQL expression of the Grafana dashboard
# (deploy/monitoring/ferry-dashboard.json) must return data from a real
# Prometheus (Debian's `prometheus`) scraping a real local job. The offline
# check (deploy/k8s/validate) only knows that the metric names exist in the
# sources; this one catches a wrong label, a series that never appears, a
# histogram without buckets or a rate over a counter nobody increments.
#
# The job: a scheduler, 2 servers and trainers on loopback, every process
# serving its /metrics (--http-listen=127.0.0.1:0). Prometheus scrapes each
# one every second (file_sd targets, rewritten as members come and go,
# with `namespace` and `pod` labels as a Kubernetes scrape would give),
# keeping its data in a temp dir. The job is made to exercise what the
# dashboard shows: a trainer asking for a rank the job does not have (a
# request error), a trainer killed with SIGKILL (a death) and one that
# leaves on SIGTERM; an elastic job also gets a trainer joining after the
# start. Every wait is on an event (a URL file, the targets API saying up, a
# log line, a query returning data), each bounded by a deadline.
#
# Environment:
#   FERRY_BUILD_DIR           the build (default build/)
#   FERRY_PROM_TRAINERS       the scheduler's --trainers: N (fixed ranks, the
#                             trainers get --rank) or MIN:MAX (elastic, the
#                             trainers start without --rank); default 2
#   FERRY_PROM_SKIP_METRICS   metric names (comma or space separated): the
#                             expressions naming one are skipped, not
#                             failed (for a build that lacks them)
#   FERRY_PROM_KEEP=1         keep the run dir (logs, Prometheus config)
#   FERRY_PROMETHEUS          the prometheus binary (default: on PATH)
#   CI                        set: a missing prometheus or data set fails
# Without prometheus (apt-get install prometheus) and CI unset, it prints
# SKIP and passes, like k8s_validate.sh.
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
DASHBOARD = os.path.join(ROOT, "deploy", "monitoring", "ferry-dashboard.json")
DATA = "/usr/share/datasets/fashion-mnist"
NAMESPACE = "ferry-test"
# Grafana's $__rate_interval is at least 4 scrape intervals (1 s here).
RATE_INTERVAL = "10s"
DEADLINE_S = 90  # for each wait, and for all queries to return data


def log(msg):
    print(msg, flush=True)


def skip_or_fail(why):
    if os.environ.get("CI"):
        log(f"FAIL prometheus_dashboard: {why} and CI is set")
        sys.exit(1)
    log(f"SKIP prometheus_dashboard: {why}")
    sys.exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, deadline_s=DEADLINE_S, procs=()):
    """Polls cond() until it returns a true value (returned); fails with
    `what` after deadline_s or when one of procs exits."""
    end = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        for p in procs:
            if p.proc.poll() is not None:
                raise RuntimeError(f"{what}: {p.name} exited "
                                   f"({p.proc.returncode}); see {p.log}")
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not after {deadline_s} s")
        time.sleep(0.1)


def ready(base):
    """Whether the member at base answers /readyz with 200."""
    if not base:
        return False
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except (urllib.error.URLError, OSError, ValueError):
        return None


class Member:
    """One process of the job, with its log and HTTP URL file."""

    def __init__(self, run, name, argv, http=True):
        self.name = name
        self.log = os.path.join(run, name + ".log")
        self.url_file = os.path.join(run, name + ".http")
        if http:
            argv = argv + ["--http-listen=127.0.0.1:0",
                           f"--http-url-file={self.url_file}"]
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(argv, stdout=f,
                                         stderr=subprocess.STDOUT)

    def http(self):
        try:
            with open(self.url_file) as f:
                return f.read().strip()
        except OSError:
            return ""

    def log_count(self, pattern):
        """Lines of the log matching pattern."""
        with open(self.log, errors="replace") as f:
            return len(re.findall(pattern, f.read(), re.M))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)


class Job:
    def __init__(self, run, build, trainers):
        self.run, self.build = run, build
        self.spec = trainers
        self.elastic = ":" in trainers
        self.members = []
        self.next_name = 0
        ps = os.path.join(build, "ps", "ps-server")
        url_file = os.path.join(run, "scheduler.url")
        self.sched = self.add("scheduler", [
            ps, "--role=scheduler", f"--trainers={trainers}",
            "--servers=2", f"--url-file={url_file}",
            "--dead-after-ms=2000"])
        self.url = wait_for("scheduler URL", lambda: os.path.exists(
            url_file) and open(url_file).read().strip(),
            procs=[self.sched])
        for i in range(2):
            self.add(f"server-{i}", [ps, "--role=server",
                                     f"--scheduler={self.url}"])

    def add(self, name, argv, http=True):
        m = Member(self.run, name, argv, http)
        self.members.append(m)
        return m

    def trainer(self, rank=None, http=True):
        """Starts a trainer: with --rank when rank is given (or the job
        has fixed ranks), else rankless (elastic)."""
        argv = [os.path.join(self.build, "trainer", "trainer"),
                f"--scheduler={self.url}", "--epochs=1000",
                "--layers=784,32,10", "--batch=32", "--log-interval=0",
                "--slow-ms=20", "--heartbeat-ms=500", f"--data={DATA}"]
        if rank is not None:
            argv.append(f"--rank={rank}")
        name = f"trainer-{self.next_name}"
        self.next_name += 1
        return self.add(name, argv, http)

    def targets(self):
        """file_sd entries of the members serving /metrics now."""
        out = []
        for m in self.members:
            u = m.http() if m.proc.poll() is None else ""
            if u:
                out.append({"targets": [u.split("://", 1)[1]],
                            "labels": {"namespace": NAMESPACE,
                                       "pod": m.name}})
        return out

    def stop(self):
        for m in reversed(self.members):
            m.stop()
        end = time.monotonic() + 20
        for m in self.members:
            try:
                m.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()


class Prom:
    def __init__(self, run, job, prom_bin):
        self.job = job
        self.sd = os.path.join(run, "targets.json")
        self.write_targets()
        cfg = os.path.join(run, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(
                "global:\n"
                "  scrape_interval: 1s\n"
                "  scrape_timeout: 1s\n"
                "  evaluation_interval: 1s\n"
                "scrape_configs:\n"
                "  - job_name: ferry\n"
                "    file_sd_configs:\n"
                f"      - files: [{json.dumps(self.sd)}]\n"
                "        refresh_interval: 1s\n")
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.member = job.add("prometheus", [
            prom_bin,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={os.path.join(run, 'tsdb')}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn"], http=False)

    def write_targets(self):
        """Rewrites the targets file (atomically) when members changed;
        returns the number of targets."""
        t = self.job.targets()
        tmp = self.sd + ".tmp"
        with open(tmp, "w") as f:
            json.dump(t, f)
        os.replace(tmp, self.sd)
        return len(t)

    def targets_up(self, want):
        """True once `want` targets are scraped and all are up."""
        self.write_targets()
        r = get_json(self.base + "/api/v1/targets?state=active")
        if not r or r.get("status") != "success":
            return False
        act = r["data"]["activeTargets"]
        return len(act) >= want and all(t["health"] == "up" for t in act)

    def query(self, expr):
        q = urllib.parse.urlencode({"query": expr})
        r = get_json(f"{self.base}/api/v1/query?{q}")
        if not r:
            return None, "no answer"
        if r.get("status") != "success":
            return None, f"{r.get('errorType')}: {r.get('error')}"
        return r["data"]["result"], None

    def label_values(self, label, match):
        q = urllib.parse.urlencode({"match[]": match})
        r = get_json(f"{self.base}/api/v1/label/{label}/values?{q}")
        return r["data"] if r and r.get("status") == "success" else []


def dashboard_exprs():
    """(panel title, expression as Grafana would send it) for every target
    of every panel (rows' collapsed panels included)."""
    with open(DASHBOARD) as f:
        d = json.load(f)
    out = []
    for p in d["panels"]:
        for q in ([p] + p.get("panels", [])):
            for t in q.get("targets", []):
                e = t["expr"]
                e = e.replace("$__rate_interval", RATE_INTERVAL)
                e = e.replace("${namespace}", NAMESPACE)
                e = e.replace("$namespace", NAMESPACE)
                out.append((q.get("title", "?"), t["expr"], e))
    return d, out


def has_data(result):
    """A vector with at least one sample that is a number (a quantile over
    buckets that did not move is NaN: Grafana shows nothing)."""
    return any(s["value"][1] not in ("NaN", "+Inf", "-Inf")
               for s in result or [])


def exercise(job, prom):
    """Makes the job produce what the dashboard's error and membership
    panels show."""
    # A request error: a rank no job of MAX <= 4096 slots has.
    bad = job.trainer(rank=4095, http=False)
    wait_for("the out-of-range trainer to be refused",
             lambda: bad.proc.poll() is not None)
    log(f"ferry: trainer --rank=4095 refused (exit {bad.proc.returncode})")
    trainers = [m for m in job.members
                if m.name.startswith("trainer") and m is not bad]
    # A death: SIGKILL, then the scheduler declares it dead.
    victim = trainers[-1]
    dead = r"trainer \d+ dead"
    n = job.sched.log_count(dead)
    victim.stop(signal.SIGKILL)
    victim.proc.wait()
    prom.write_targets()
    wait_for("the scheduler to declare the killed trainer dead",
             lambda: job.sched.log_count(dead) > n, procs=[job.sched])
    log("ferry: killed trainer declared dead")
    # A replacement: joins (elastic) or rejoins under its rank (fixed).
    rank = None if job.elastic else len(trainers) - 1
    t = job.trainer(rank=rank)
    wait_for("the replacement trainer's endpoint", t.http, procs=[t])
    if job.elastic:
        # One more joins, then one leaves gracefully.
        joined, left = r"trainer \d+ joined", r"trainer \d+ (left|leaves)"
        n_joined, n_left = (job.sched.log_count(joined),
                            job.sched.log_count(left))
        extra = job.trainer()
        wait_for("the joining trainer's endpoint", extra.http,
                 procs=[extra])
        wait_for("the scheduler to log a join",
                 lambda: job.sched.log_count(joined) > n_joined,
                 procs=[job.sched])
        # Running (its first version in hand): the leave under test is
        # the graceful one of a training trainer.
        wait_for("the joining trainer to be ready",
                 lambda: ready(extra.http()), procs=[extra])
        extra.stop(signal.SIGTERM)
        extra.proc.wait(30)
        wait_for("the scheduler to log a leave",
                 lambda: job.sched.log_count(left) > n_left,
                 procs=[job.sched])
        log("ferry: a trainer joined and one left")
    prom.write_targets()


def main():
    build = os.path.realpath(os.environ.get("FERRY_BUILD_DIR",
                                            os.path.join(ROOT, "build")))
    prom_bin = shutil.which(os.environ.get("FERRY_PROMETHEUS",
                                           "prometheus"))
    if not prom_bin:
        skip_or_fail("prometheus not installed "
                     "(apt-get install prometheus)")
    if not os.path.isdir(DATA):
        skip_or_fail(f"no data set at {DATA}")
    for b in ("ps/ps-server", "trainer/trainer"):
        if not os.access(os.path.join(build, b), os.X_OK):
            log(f"FAIL prometheus_dashboard: no {build}/{b}")
            return 1
    spec = os.environ.get("FERRY_PROM_TRAINERS", "2")
    if not re.fullmatch(r"[1-9][0-9]*(:[1-9][0-9]*)?", spec):
        log(f"FAIL prometheus_dashboard: FERRY_PROM_TRAINERS={spec!r}: "
            "want N or MIN:MAX")
        return 1
    skip = set(re.split(r"[,\s]+",
                        os.environ.get("FERRY_PROM_SKIP_METRICS", "")))
    skip.discard("")
    lo, hi = (int(x) for x in (spec.split(":") * 2)[:2])
    n_start = max(lo, min(2, hi))  # two at least, to kill one
    run = tempfile.mkdtemp(prefix="ferry-prom.")
    job = None
    ok = False
    try:
        job = Job(run, build, spec)
        for r in range(n_start):
            job.trainer(rank=None if job.elastic else r)
        prom = Prom(run, job, prom_bin)
        want = 3 + n_start
        wait_for("every member's /metrics URL",
                 lambda: len(job.targets()) >= want, procs=job.members)
        wait_for("Prometheus to scrape every member (targets up)",
                 lambda: prom.targets_up(want), procs=job.members)
        log(f"ferry: job of {spec} trainers up, {want} targets scraped "
            f"by {prom.base}; run dir {run}")
        wait_for("a first training step",
                 lambda: has_data(prom.query(
                     "ferry_trainer_steps_total > 0")[0]),
                 procs=job.members)
        exercise(job, prom)
        ok = check(prom, skip)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"FAIL prometheus_dashboard: {e}")
    finally:
        if job:
            job.stop()
        if not ok:
            for m in job.members if job else []:
                with open(m.log, errors="replace") as f:
                    tail = f.read().splitlines()[-8:]
                log(f"--- {m.name} ({m.log}):")
                for line in tail:
                    log("    " + line)
        if ok and not os.environ.get("FERRY_PROM_KEEP"):
            shutil.rmtree(run, ignore_errors=True)
        else:
            log(f"ferry: run dir kept: {run}")
    return 0 if ok else 1


def check(prom, skip):
    """Queries every expression until it returns data or the deadline
    passes; logs each one's outcome. True when none failed."""
    d, exprs = dashboard_exprs()
    pending = []
    for title, raw, e in exprs:
        named = set(re.findall(r"\b(ferry_[a-z0-9_]+)", e))
        named = {re.sub(r"_(bucket|sum|count)$", "", n) for n in named}
        if named & skip:
            log(f"SKIP  [{title}] {raw}  (names "
                f"{', '.join(sorted(named & skip))})")
        else:
            pending.append((title, raw, e))
    why = {}
    end = time.monotonic() + DEADLINE_S
    while pending and time.monotonic() < end:
        left = []
        for title, raw, e in pending:
            res, err = prom.query(e)
            if has_data(res):
                log(f"OK    [{title}] {raw}  ({len(res)} series)")
            else:
                why[(title, raw)] = err or (
                    "only NaN/Inf" if res else "no data")
                left.append((title, raw, e))
        pending = left
        if pending:
            time.sleep(1)
    for title, raw, e in pending:
        log(f"FAIL  [{title}] {raw}: {why[(title, raw)]}")
    # The dashboard's namespace variable lists the job's namespace.
    var_ok = True
    for v in d.get("templating", {}).get("list", []):
        m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)",
                         str(v.get("query", "")))
        if v.get("type") == "query" and m:
            vals = prom.label_values(m.group(2), m.group(1))
            if NAMESPACE not in vals and m.group(2) == "namespace":
                log(f"FAIL  variable {v['name']}: {v['query']} "
                    f"gives {vals}")
                var_ok = False
            else:
                log(f"OK    variable {v['name']}: {v['query']} "
                    f"gives {vals}")
    n = len(exprs)
    log(f"prometheus_dashboard: {n - len(pending)}/{n} expressions "
        f"checked or skipped, {len(pending)} without data")
    return not pending and var_ok


if __name__ == "__main__":
    sys.exit(main())
