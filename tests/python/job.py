"""A Ferry job on loopback for the Python binding's tests.

LocalJob starts a ps-server scheduler (on a free port, read back through
--url-file) and its servers, hands out the scheduler URL, and stops every
process it started. The ps-server binary comes from $FERRY_PS_SERVER (set
by tests/python/CMakeLists.txt), else the build tree's build/ps/ps-server.
run_ranks runs one function per rank, in threads.
"""
import os
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ps_server_bin():
    return os.environ.get("FERRY_PS_SERVER") or os.path.join(ROOT, "build", "ps", "ps-server")


class LocalJob:
    """Scheduler + servers for trainers ranks; use as a context manager."""

    def __init__(self, trainers, servers=1, shard_bytes=None, extra=(), secret_file=None,
                 member_flags=()):
        self.dir = tempfile.TemporaryDirectory(prefix="ferry-pytest.")
        self.procs = []
        url_file = os.path.join(self.dir.name, "scheduler.url")
        flags = [f"--trainers={trainers}", f"--servers={servers}", "--log-level=warn"]
        if shard_bytes:
            flags.append(f"--shard-bytes={shard_bytes}")
        signed = [f"--secret-file={secret_file}"] if secret_file else []
        signed += list(member_flags)  # e.g. --tls-*: scheduler and servers
        flags += signed
        self.scheduler = self._start("scheduler", ["--role=scheduler", f"--url-file={url_file}"]
                                     + flags + list(extra))
        for _ in range(400):
            if os.path.exists(url_file) and os.path.getsize(url_file) > 0:
                break
            if self.scheduler.poll() is not None:
                raise RuntimeError("scheduler exited: " + self.log("scheduler"))
            time.sleep(0.025)
        else:
            raise RuntimeError("scheduler wrote no URL: " + self.log("scheduler"))
        with open(url_file) as f:
            self.url = f.read().strip()
        for i in range(servers):
            self._start(f"server-{i}", ["--role=server", f"--scheduler={self.url}",
                                        "--log-level=warn"] + signed)

    def _start(self, name, args):
        err = open(os.path.join(self.dir.name, name + ".log"), "w")
        p = subprocess.Popen([ps_server_bin()] + args, stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        self.procs.append(p)
        return p

    def log(self, name):
        try:
            with open(os.path.join(self.dir.name, name + ".log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def kill_scheduler(self):
        self.scheduler.kill()
        self.scheduler.wait()

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        self.dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def run_ranks(fn, n):
    """Run fn(rank) for ranks 0..n-1, each in its own thread (ctypes
    releases the GIL in libferry's calls); returns their results in rank
    order and re-raises the first error."""
    out, errs = [None] * n, []

    def body(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: B902 (handed to the main thread)
            errs.append(e)

    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return out
