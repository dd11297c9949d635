"""ferry.run: start a Ferry job and its Python trainers, like torchrun.

    python3 -m ferry.run --trainers N [--servers M] [--scheduler URL]
                         [--log-dir DIR] [--ps-server PATH] [--mode MODE]
                         SCRIPT ARGS...

Without --scheduler it starts a scheduler and M (default 1) servers of
ps-server on loopback (free ports: the scheduler writes the URL it bound to
--url-file, which the launcher waits for), then N trainer processes
`sys.executable SCRIPT ARGS...`, each with the environment a trainer needs
(read back by ferry.run.env()):

    FERRY_SCHEDULER  the scheduler's URL
    FERRY_RANK       this trainer's rank, 0..FERRY_TRAINERS-1
    FERRY_TRAINERS   the job's number of trainers
    FERRY_LOG_DIR    the folder of the job's logs
    FERRY_MODE       sync | async | ssp (when --mode was given)
    FERRY_LIB        the libferry.so the launcher loaded (when a path)

Every log goes to one folder (--log-dir, default a new temporary one, named
on stderr): scheduler.log, server-<i>.log, trainer-<r>.log (stdout and
stderr). Rank 0's stdout (with --rank-base, that of the first rank started
here) is also copied to the launcher's stdout, so the launcher's last line
is rank 0's last line. The first trainer that fails
stops the job: the others are stopped, and the launcher exits with that
trainer's exit code (128 + the signal for a killed one); else 0. SIGINT and
SIGTERM are passed on to the trainers, then the servers are stopped.

With --scheduler URL only the trainers start, joining a job started
elsewhere; --rank-base K and --world W let two machines split the ranks
(this one runs ranks K..K+N-1 of W).

LocalJob is the job part alone (scheduler and servers, no trainers), for
code that runs its own trainers: the tests, the benchmarks.
"""
import argparse
import collections
import os
import queue
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time


class JobEnv(collections.namedtuple("JobEnv", "scheduler rank trainers log_dir")):
    """What ferry.run hands a trainer: the scheduler's URL, this trainer's
    rank, the job's trainer count and the log folder (None when unset);
    .mode is the job mode ("sync" unless the launcher was given --mode)."""

    __slots__ = ()

    @property
    def mode(self):
        return os.environ.get("FERRY_MODE") or "sync"


# The variables a trainer reads; the servers get none of them (ps-server
# reads FERRY_<OPTION> variables as its options: FERRY_SCHEDULER and
# FERRY_TRAINERS are two of them).
_JOB_VARS = ("FERRY_SCHEDULER", "FERRY_RANK", "FERRY_TRAINERS", "FERRY_LOG_DIR", "FERRY_MODE")

# How long a stopped process gets to exit before it is killed, and how long
# the scheduler gets to write its URL.
STOP_GRACE_S = 10.0
START_TIMEOUT_S = 30.0


def env():
    """The JobEnv of this trainer, from the variables ferry.run sets.

    Raises RuntimeError naming the missing or malformed variable, so that a
    script run by hand says how to run it."""
    def need(name):
        v = os.environ.get(name)
        if not v:
            raise RuntimeError(f"ferry.run.env: ${name} is not set: start this script with "
                               f"`python3 -m ferry.run --trainers N SCRIPT ...`")
        return v

    def number(name):
        v = need(name)
        try:
            return int(v)
        except ValueError:
            raise RuntimeError(f"ferry.run.env: ${name} must be an integer, got {v!r}") from None

    url = need("FERRY_SCHEDULER")
    rank, trainers = number("FERRY_RANK"), number("FERRY_TRAINERS")
    if not 0 <= rank < trainers:
        raise RuntimeError(f"ferry.run.env: $FERRY_RANK {rank} is not in 0..{trainers - 1}")
    return JobEnv(url, rank, trainers, os.environ.get("FERRY_LOG_DIR"))


def _package_dirs():
    """(the folder holding this package, the checkout it sits in or None)."""
    here = os.path.dirname(os.path.abspath(__file__))
    parent = os.path.dirname(here)
    repo = os.path.dirname(parent)
    if os.path.basename(parent) == "python" and os.path.isdir(os.path.join(repo, "ps")):
        return parent, repo
    return parent, None


def _lib_path():
    """The path of the libferry.so this interpreter loads, or None."""
    try:
        from . import client
    except ImportError:
        return None
    return client.LIB_PATH if os.sep in client.LIB_PATH else None


def find_ps_server(explicit=None):
    """The ps-server to run: explicit, $FERRY_PS_SERVER, the build tree of
    the checkout this package sits in, the prefix `cmake --install` put
    this package in, the prefix of the libferry.so loaded, pkg-config's
    prefix of ferry, then PATH. Raises RuntimeError naming every place
    tried."""
    tried = []

    def ok(path, why):
        if path and os.access(path, os.X_OK) and os.path.isfile(path):
            return True
        tried.append(f"{path} ({why})")
        return False

    if explicit:
        if ok(explicit, "--ps-server"):
            return explicit
        raise RuntimeError(f"ferry.run: --ps-server {explicit} is not an executable file")
    cands = []
    if os.environ.get("FERRY_PS_SERVER"):
        cands.append((os.environ["FERRY_PS_SERVER"], "$FERRY_PS_SERVER"))
    _, repo = _package_dirs()
    if repo:
        cands.append((os.path.join(repo, "build", "ps", "ps-server"), "build tree"))
    try:
        from . import _prefix
        cands.append((os.path.join(_prefix.PREFIX, _prefix.BINDIR, "ps-server"),
                      "cmake --install prefix"))
    except ImportError:
        pass
    lib = _lib_path()
    if lib:
        libdir = os.path.dirname(os.path.realpath(lib))
        for up in (os.path.dirname(libdir), os.path.dirname(os.path.dirname(libdir))):
            cands.append((os.path.join(up, "bin", "ps-server"), "beside " + lib))
    pc = _pkg_config("prefix")
    if pc:
        cands.append((os.path.join(pc, "bin", "ps-server"), "pkg-config ferry"))
    for path, why in cands:
        if ok(path, why):
            return path
    path = shutil.which("ps-server")
    if path:
        return path
    tried.append("PATH (no ps-server)")
    raise RuntimeError("ferry.run: cannot find ps-server; tried " + "; ".join(tried)
                       + ". Pass --ps-server PATH or set FERRY_PS_SERVER")


def _pkg_config(var):
    """`pkg-config --variable=VAR ferry`, or None."""
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "--variable=" + var, "ferry"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _tail(path, n=2000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


class LocalJob:
    """A Ferry job on loopback: a ps-server scheduler for `trainers` trainers
    and `servers` servers; .url is the scheduler's URL. Use it as a context
    manager, or call stop().

    The scheduler binds a free port and writes its URL to --url-file;
    LocalJob waits for that file (while the scheduler still runs, at most
    START_TIMEOUT_S), not for a fixed time. Each process leads its own
    process group and writes its stderr to log(name), name "scheduler" or
    "server-<i>", in log_dir (default a new temporary folder that stop()
    removes). The processes get this environment less the variables of
    ferry.run's trainers (ps-server reads $FERRY_<OPTION> as its options).

    shard_bytes and secret_file are the ps-server options of those names
    (secret_file for every process); member_flags go to every process,
    scheduler_flags and server_flags to one kind; ps_server is the binary
    (default find_ps_server()). Raises RuntimeError, having stopped what it
    started, when the scheduler exits or writes no URL in time."""

    def __init__(self, trainers, servers=1, *, shard_bytes=None, secret_file=None,
                 member_flags=(), scheduler_flags=(), server_flags=(), log_dir=None,
                 ps_server=None):
        self._tmp = None if log_dir else tempfile.TemporaryDirectory(prefix="ferry-job.")
        self.log_dir = os.path.abspath(log_dir) if log_dir else self._tmp.name
        os.makedirs(self.log_dir, exist_ok=True)
        self.procs = []  # (name, Popen): the scheduler first
        common = list(member_flags) + ([f"--secret-file={secret_file}"] if secret_file else [])
        try:
            bin_ = find_ps_server(ps_server)
            url_file = os.path.join(self.log_dir, "scheduler.url")
            if os.path.exists(url_file):
                os.unlink(url_file)
            flags = ["--role=scheduler", f"--trainers={trainers}", f"--servers={servers}",
                     f"--url-file={url_file}"]
            if shard_bytes:
                flags.append(f"--shard-bytes={shard_bytes}")
            self.scheduler = self._spawn(bin_, "scheduler",
                                         flags + common + list(scheduler_flags))
            self.url = self._wait_url(url_file)
            for i in range(servers):
                self._spawn(bin_, f"server-{i}", ["--role=server", f"--scheduler={self.url}"]
                            + common + list(server_flags))
        except BaseException:
            self.stop()
            raise

    def log(self, name):
        """The path of process name's log."""
        return os.path.join(self.log_dir, name + ".log")

    def tail(self, name, n=2000):
        """The last n characters of process name's log ("" when none)."""
        return _tail(self.log(name), n)

    def _spawn(self, bin_, name, flags):
        env = {k: v for k, v in os.environ.items() if k not in _JOB_VARS}
        with open(self.log(name), "wb") as log:
            p = subprocess.Popen([bin_] + flags, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=log, env=env,
                                 start_new_session=True)
        self.procs.append((name, p))
        return p

    def _wait_url(self, url_file):
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (os.path.exists(url_file) and os.path.getsize(url_file) > 0):
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"ferry.run: the scheduler exited "
                                   f"({self.scheduler.returncode}): " + self.tail("scheduler", 800))
            if time.monotonic() > deadline:
                raise RuntimeError("ferry.run: the scheduler wrote no URL in "
                                   f"{START_TIMEOUT_S:.0f} s: " + self.tail("scheduler", 800))
            time.sleep(0.01)
        with open(url_file) as f:
            return f.read().strip()

    def kill_scheduler(self):
        """SIGKILL the scheduler and reap it (a failure test's lost
        scheduler)."""
        _killpg(self.scheduler, signal.SIGKILL)
        self.scheduler.wait()

    def stop(self):
        """Stop the servers, then the scheduler (SIGTERM, SIGKILL after
        STOP_GRACE_S); remove log_dir when LocalJob made it."""
        _stop_all([p for _, p in reversed(self.procs)], signal.SIGTERM)
        self.procs = []
        if self._tmp:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="python3 -m ferry.run",
        description="Start a Ferry job (scheduler and servers on loopback) and N trainer "
        "processes of SCRIPT, like torchrun.")
    ap.add_argument("--trainers", type=int, required=True, help="trainer processes to start")
    ap.add_argument("--servers", type=int, default=1, help="ps-server servers (default 1)")
    ap.add_argument("--scheduler", help="join the job of this scheduler URL: start only "
                    "the trainers")
    ap.add_argument("--rank-base", type=int, default=0, help="with --scheduler: the first "
                    "rank started here (default 0)")
    ap.add_argument("--world", type=int, help="with --scheduler: the job's trainers on all "
                    "machines (default rank-base + trainers)")
    ap.add_argument("--log-dir", help="folder for every log (default: a new temporary one)")
    ap.add_argument("--ps-server", help="the ps-server binary (default: $FERRY_PS_SERVER, "
                    "the build tree, the installed one)")
    ap.add_argument("--mode", choices=("sync", "async", "ssp"),
                    help="job mode, handed to the trainers as $FERRY_MODE")
    ap.add_argument("--shard-bytes", type=int, help="scheduler: max bytes per shard")
    ap.add_argument("--scheduler-flag", action="append", default=[], metavar="FLAG",
                    help="extra ps-server flag for the scheduler, e.g. --scheduler-flag="
                    "--replicas=2 (repeatable)")
    ap.add_argument("--server-flag", action="append", default=[], metavar="FLAG",
                    help="extra ps-server flag for each server (repeatable)")
    ap.add_argument("script", help="the trainer's Python script")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = ap.parse_args(argv)
    if a.trainers < 1:
        ap.error("--trainers must be at least 1")
    if a.servers < 1:
        ap.error("--servers must be at least 1")
    if a.rank_base < 0:
        ap.error("--rank-base must not be negative")
    if a.world is None:
        a.world = a.rank_base + a.trainers
    if a.rank_base + a.trainers > a.world:
        ap.error(f"ranks {a.rank_base}..{a.rank_base + a.trainers - 1} do not fit "
                 f"--world {a.world}")
    if not a.scheduler and (a.rank_base or a.world != a.trainers):
        ap.error("--rank-base and --world need --scheduler (a local job runs every rank)")
    return a


class Launcher:
    """The processes of one ferry.run: a LocalJob, then trainers; stop()
    ends whatever is still running."""

    def __init__(self, args):
        self.a = args
        self.job = None  # the LocalJob, unless --scheduler
        self.trainers = []  # (rank, Popen)
        self.tees = []
        self.done = queue.Queue()  # (rank, exit code) as trainers exit
        if args.log_dir:
            os.makedirs(args.log_dir, exist_ok=True)
            self.log_dir = os.path.abspath(args.log_dir)
        else:
            self.log_dir = tempfile.mkdtemp(prefix="ferry-run.")

    def log(self, name):
        return os.path.join(self.log_dir, name + ".log")

    def start_job(self):
        """Scheduler and servers (a LocalJob); returns the scheduler's URL."""
        a = self.a
        self.job = LocalJob(a.world, a.servers, shard_bytes=a.shard_bytes,
                            scheduler_flags=a.scheduler_flag, server_flags=a.server_flag,
                            log_dir=self.log_dir, ps_server=a.ps_server)
        return self.job.url

    def _trainer_env(self, url, rank):
        e = dict(os.environ)
        e.update(FERRY_SCHEDULER=url, FERRY_RANK=str(rank), FERRY_TRAINERS=str(self.a.world),
                 FERRY_LOG_DIR=self.log_dir)
        e.setdefault("PYTHONUNBUFFERED", "1")  # logs and the tee as they happen
        if self.a.mode:
            e["FERRY_MODE"] = self.a.mode
        lib = _lib_path()
        if lib:
            e["FERRY_LIB"] = lib
        # The trainers import the package this launcher runs from, also
        # when that is a checkout on PYTHONPATH or a copy run from its
        # own folder.
        parent, _ = _package_dirs()
        sites = set(site.getsitepackages() + [site.getusersitepackages()])
        path = [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p]
        if parent not in sites and parent not in path:
            e["PYTHONPATH"] = os.pathsep.join([parent] + path)
        return e

    def start_trainers(self, url):
        a = self.a
        for rank in range(a.rank_base, a.rank_base + a.trainers):
            fd = os.open(self.log(f"trainer-{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                         | os.O_APPEND, 0o644)
            tee = rank == a.rank_base
            try:
                p = subprocess.Popen([sys.executable, a.script] + a.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE if tee else fd, stderr=fd,
                                     env=self._trainer_env(url, rank), start_new_session=True)
            except BaseException:
                os.close(fd)
                raise
            self.trainers.append((rank, p))
            if tee:
                t = threading.Thread(target=_tee, args=(p.stdout, fd), daemon=True)
                t.start()
                self.tees.append(t)
            else:
                os.close(fd)
            w = threading.Thread(target=self._wait_one, args=(rank, p), daemon=True)
            w.start()

    def _wait_one(self, rank, p):
        self.done.put((rank, p.wait()))

    def wait(self):
        """Wait until every trainer exited or one failed; returns the exit
        code of the first failure (0 when all succeeded)."""
        left = len(self.trainers)
        while left:
            rank, rc = self.done.get()
            left -= 1
            if rc != 0:
                code = 128 - rc if rc < 0 else rc
                print(f"ferry.run: trainer {rank} exited with {_describe(rc)}; stopping the "
                      f"job. Its log ({self.log(f'trainer-{rank}')}) ends:\n"
                      + _tail(self.log(f"trainer-{rank}")), file=sys.stderr)
                return code
        return 0

    def signal_trainers(self, sig):
        for _, p in self.trainers:
            _killpg(p, sig)

    def stop(self, sig=signal.SIGTERM):
        """Stop the trainers still running (sig, then SIGKILL after a
        grace), then the servers and the scheduler."""
        _stop_all([p for _, p in self.trainers], sig)
        for t in self.tees:
            t.join(timeout=STOP_GRACE_S)
        if self.job:
            self.job.stop()


def _describe(rc):
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit code {rc}"


def _killpg(p, sig):
    """Send sig to p's process group (p leads one: start_new_session), so
    that a trainer's own children (data loaders) get it too."""
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_all(procs, sig):
    for p in procs:
        _killpg(p, sig)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _killpg(p, signal.SIGKILL)
            p.wait()


def _tee(pipe, fd):
    """Copy rank 0's stdout to its log and to our stdout, line by line."""
    out = getattr(sys.stdout, "buffer", None)  # None: a caller's stand-in stdout
    for line in iter(pipe.readline, b""):
        os.write(fd, line)
        try:
            if out:
                out.write(line)
                out.flush()
        except (OSError, ValueError):
            pass  # our stdout went away: the log still gets everything
    pipe.close()
    os.close(fd)


class _Stop(Exception):
    def __init__(self, sig):
        super().__init__(sig)
        self.sig = sig


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isfile(a.script):
        print(f"ferry.run: no such script: {a.script}", file=sys.stderr)
        return 2
    la = Launcher(a)
    print(f"ferry.run: logs in {la.log_dir}", file=sys.stderr)

    def on_signal(sig, _frame):
        raise _Stop(sig)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    stop_sig = signal.SIGTERM
    try:
        url = a.scheduler or la.start_job()
        la.start_trainers(url)
        return la.wait()
    except _Stop as e:
        # Ctrl-C reaches only us (the children have their own sessions):
        # the trainers get the same signal, so a Python trainer sees a
        # KeyboardInterrupt for SIGINT.
        stop_sig = e.sig
        print(f"ferry.run: {signal.Signals(e.sig).name}: stopping the job", file=sys.stderr)
        return 128 + e.sig
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C does not cut the clean-up
        la.stop(stop_sig)
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
