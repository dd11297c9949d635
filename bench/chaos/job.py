"""job.py - the processes of one Ferry job on loopback, for the fault benches.

bench/chaos/chaos.py (bench/chaos.sh) and bench/chaos/lose_server.py
(bench/lose_server.sh) share it: a Job starts a scheduler, servers and
trainers on fixed loopback ports (so that a member restarted after a kill
gets the same URL: --listen for servers and the scheduler, whose
--state-dir keeps its job), kills, stops, continues and restarts any of
them, stamps every progress line of a trainer as it arrives, and reads the
members' logs for the first line in which one of them notices a fault.

Every process runs with PR_SET_PDEATHSIG: if the bench itself dies (even of
SIGKILL) the kernel kills its job with it. Job.close() kills what is left
and is idempotent; the benches call it from finally blocks and from their
SIGTERM/SIGINT handlers. Nothing here waits without a deadline.

Files of a job in its directory D: NAME.I.log (stderr) and NAME.I.out
(stdout; a trainer's lines prefixed with their arrival time, epoch
seconds) of incarnation I (0 first, 1 after the first restart, ...) of
member NAME (scheduler, server-M, trainer-R); scheduler.url; state/ (the
scheduler's --state-dir); wR.bin (trainer R's --weights-out).
"""
import ctypes
import datetime
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

# A trainer's progress line: "step 120 | train_loss ...".
STEP_RE = re.compile(r"^step (\d+) \|")

# The log lines in which a member notices that another one failed (the
# definition of "detection", docs/benchmarks.md "Chaos"): any warning or
# error (levels W and E), and notices that name a fault: the scheduler's
# liveness verdicts (dead, suspect, lost shards), libferry's retries and
# waits in a trainer (a transport error, a re-fetched map, a re-send, a
# back-off), a re-seed, a promotion, a lost scheduler. NOTICE_RE is
# matched case-insensitively on the message of a notice, in the log of a
# member other than the failed one.
NOTICE_RE = re.compile(
    r"\bdead\b|suspect|\blost\b|re-?fetch|re-?send|re-?sent|retr(y|ies|ying)|"
    r"re-?connect|re-?seed|unavailable|cannot connect|connection "
    r"(reset|refused|closed)|timed out|still waiting|back(ing)? off|"
    r"not answer|unreachable|re-?rout|promoted|stale|refused", re.I)
# Warnings and notices that say nothing about a fault.
NOTICE_IGNORE_RE = re.compile(r"no --secret-file|config: ")
# The scheduler's verdict on a member.
DEAD_RE = re.compile(r"member (server|trainer) (\d+) dead")
# A server's log line naming its slot.
REGISTERED_RE = re.compile(r"registered as server (\d+)")
# A log line: "2026-11-22T17:29:49.123Z W scheduler members: ...".
LOG_RE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z (\S) (\S+) (.*)$")


def log_time(ts):
    """The epoch seconds of a log line's time stamp (UTC, no 'Z')."""
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # Runs in the child before exec: SIGKILL it when the bench dies.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Member:
    """One member of the job: its argv, its incarnations, its progress."""

    def __init__(self, job, name, argv, progress):
        self.job, self.name, self.argv = job, name, argv
        self.progress = progress  # stamp stdout's step lines
        self.inc = -1             # incarnation of the running process
        self.proc = None
        self.stopped = False      # SIGSTOPped and not continued yet
        self.killed = False       # the bench killed this incarnation
        self.steps = []           # (arrival, step) over all incarnations
        self.summary = None       # the last incarnation's summary, if any
        self.exit_t = None        # when rc() first saw it exited
        self.lock = threading.Lock()

    def start(self):
        """Starts the next incarnation."""
        self.inc += 1
        d = self.job.dir
        err = open(f"{d}/{self.name}.{self.inc}.log", "w")
        out = subprocess.PIPE if self.progress else open(
            f"{d}/{self.name}.{self.inc}.out", "w")
        self.killed = self.stopped = False
        self.summary = self.exit_t = None
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err,
                                     text=True, preexec_fn=_die_with_parent)
        err.close()
        if self.progress:
            threading.Thread(target=self._stamp, args=(self.proc, self.inc),
                             daemon=True).start()
        else:
            out.close()
        return self.proc

    def _stamp(self, proc, inc):
        with open(f"{self.job.dir}/{self.name}.{inc}.out", "w") as f:
            for line in proc.stdout:
                t = time.time()
                f.write(f"{t:.6f} {line}")
                f.flush()
                m = STEP_RE.match(line)
                if m:
                    with self.lock:
                        self.steps.append((t, int(m.group(1))))
                elif line.startswith('{"summary"'):
                    try:
                        self.summary = json.loads(line)["summary"]
                    except ValueError:
                        pass

    def signal(self, sig):
        """Sends sig to the running incarnation (a no-op once it exited)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig in (signal.SIGCONT, signal.SIGKILL):
            self.stopped = False

    def kill(self):
        """SIGKILLs the running incarnation and reaps it (5 s at most)."""
        self.killed = True
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def rc(self):
        """The exit status of the running incarnation, None while it runs
        (the first call that sees it exited stamps exit_t)."""
        rc = None if self.proc is None else self.proc.poll()
        if rc is not None and self.exit_t is None:
            self.exit_t = time.time()
        return rc

    def last_step(self):
        with self.lock:
            return self.steps[-1][1] if self.steps else None

    def steps_after(self, t):
        """The (arrival, step) lines stamped after t."""
        with self.lock:
            return [s for s in self.steps if s[0] > t]

    def indices(self):
        """The server indices this member registered as, over all its
        incarnations (a restarted server may get a new slot)."""
        out = set()
        for inc in range(self.inc + 1):
            try:
                with open(f"{self.job.dir}/{self.name}.{inc}.log",
                          errors="replace") as f:
                    out.update(int(x) for x in REGISTERED_RE.findall(
                        f.read()))
            except OSError:
                pass
        return out

    def tail(self, n=4):
        """The last n warnings and errors of the running incarnation's log
        (its last n lines when it has none)."""
        try:
            with open(f"{self.job.dir}/{self.name}.{self.inc}.log",
                      errors="replace") as f:
                lines = [ln.rstrip("\n") for ln in f]
        except OSError:
            return []
        bad = []
        for ln in lines:
            m = LOG_RE.match(ln)
            if m and m.group(2) in "WE" and \
                    not NOTICE_IGNORE_RE.search(m.group(4)):
                bad.append(ln)
        return (bad or lines)[-n:]


class Job:
    """A scheduler, servers and trainers on fixed loopback ports in d.

    ps_flags go to every ps-server, sched_flags to the scheduler only,
    tr_flags(rank) is each trainer's flag list (its --scheduler and --rank
    are added here)."""

    def __init__(self, d, ps, tr, servers, trainers, ps_flags, sched_flags,
                 tr_flags):
        os.makedirs(f"{d}/state", exist_ok=True)
        self.dir = d
        self.url = f"tcp://127.0.0.1:{free_port()}"
        self.members = {}
        self.closed = False
        urlf = f"{d}/scheduler.url"
        self._add("scheduler", [
            ps, "--role=scheduler", f"--listen={self.url}",
            f"--url-file={urlf}", f"--state-dir={d}/state",
            f"--servers={servers}", f"--trainers={trainers}"] + ps_flags +
            sched_flags, False)
        self.servers = []
        for m in range(servers):
            url = f"tcp://127.0.0.1:{free_port()}"
            self.servers.append(self._add(f"server-{m}", [
                ps, "--role=server", f"--scheduler={self.url}",
                f"--listen={url}"] + ps_flags, False))
        self.trainers = []
        for r in range(trainers):
            self.trainers.append(self._add(f"trainer-{r}", [
                tr, f"--scheduler={self.url}", f"--rank={r}"] + tr_flags(r),
                True))

    def _add(self, name, argv, progress):
        m = Member(self, name, argv, progress)
        self.members[name] = m
        return m

    def start(self, deadline_s=30):
        """Starts the scheduler, waits for its URL, starts the servers one
        by one, each once the one before registered (so that server-M is
        the scheduler's server M), then the trainers. False when the
        scheduler did not come up within deadline_s."""
        sch = self.members["scheduler"]
        sch.start()
        end = time.time() + deadline_s
        urlf = f"{self.dir}/scheduler.url"
        while not (os.path.exists(urlf) and open(urlf).read().strip()):
            if time.time() > end or sch.rc() is not None:
                return False
            time.sleep(0.02)
        for m in self.servers:
            m.start()
            while not m.indices() and m.rc() is None and time.time() < end:
                time.sleep(0.02)
        self.t_trainers = time.time()
        for m in self.trainers:
            m.start()
        return True

    def max_step(self):
        """The highest step any trainer has printed (-1: none yet)."""
        s = [m.last_step() for m in self.trainers]
        return max([x for x in s if x is not None], default=-1)

    def healthy_dead(self, t0, t1, victim):
        """The scheduler's "member ROLE N dead" lines stamped in [t0, t1]
        that name a member other than victim (a Member, or None) which
        was still running: a trainer whose process had exited is dead
        indeed. victim stands for every server slot it registered as."""
        mine = set()
        if victim in self.servers:
            mine = {f"server {x}" for x in victim.indices()}
        elif victim in self.trainers:
            mine = {f"trainer {self.trainers.index(victim)}"}
        out = []
        sch = self.members["scheduler"]
        for inc in range(sch.inc + 1):
            try:
                f = open(f"{self.dir}/scheduler.{inc}.log", errors="replace")
            except OSError:
                continue
            with f:
                for line in f:
                    m = DEAD_RE.search(line)
                    lt = LOG_RE.match(line)
                    if m is None or lt is None:
                        continue
                    t = log_time(lt.group(1))
                    who = f"{m.group(1)} {m.group(2)}"
                    if t < t0 - 0.001 or t > t1 or who in mine:
                        continue
                    if m.group(1) == "trainer" and \
                            int(m.group(2)) < len(self.trainers):
                        tm = self.trainers[int(m.group(2))]
                        if tm.exit_t is not None and t > tm.exit_t:
                            continue
                    out.append(line.rstrip("\n")[:240])
        return out

    def first_notice(self, t0, t1, skip):
        """The first log line stamped in [t0, t1] (epoch seconds) of any
        member but skip that matches NOTICE_RE: (time, 'member: line') or
        None. Log stamps have ms resolution, so t0 is taken 1 ms early."""
        best = None
        for name, m in self.members.items():
            if name == skip:
                continue
            for inc in range(m.inc + 1):
                hit = _first_notice_in(
                    f"{self.dir}/{name}.{inc}.log", t0 - 0.001, t1)
                if hit is not None and (best is None or hit[0] < best[0]):
                    best = (hit[0], f"{name}: {hit[1]}")
        return best

    def close(self):
        """Kills every member still running and reaps it; idempotent."""
        if self.closed:
            return
        self.closed = True
        for m in self.members.values():
            m.signal(signal.SIGKILL)
        for m in self.members.values():
            if m.proc is not None:
                try:
                    m.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass


def _first_notice_in(path, t0, t1):
    try:
        f = open(path, errors="replace")
    except OSError:
        return None
    with f:
        for line in f:
            m = LOG_RE.match(line)
            if m is None:
                continue
            t = log_time(m.group(1))
            if t < t0:
                continue
            if t > t1:
                return None
            msg = m.group(4)
            if NOTICE_IGNORE_RE.search(msg):
                continue
            if m.group(2) in "WE" or NOTICE_RE.search(msg):
                return (t, line.rstrip("\n"))
    return None


def install_exit_handlers(cleanup):
    """SIGTERM, SIGINT and SIGHUP run cleanup() and exit 130."""
    def handler(signum, _frame):
        cleanup()
        os._exit(130)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, handler)
