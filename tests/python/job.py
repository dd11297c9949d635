"""A Ferry job on loopback for the Python binding's tests.

LocalJob starts a ps-server scheduler (on a free port, read back through
--url-file) and its servers, hands out the scheduler URL, and stops every
process it started. The ps-server binary comes from $FERRY_PS_SERVER (set
by tests/python/CMakeLists.txt), else the build tree's build/ps/ps-server.
"""
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ps_server_bin():
    return os.environ.get("FERRY_PS_SERVER") or os.path.join(ROOT, "build", "ps", "ps-server")


class LocalJob:
    """Scheduler + servers for trainers ranks; use as a context manager."""

    def __init__(self, trainers, servers=1, shard_bytes=None, extra=()):
        self.dir = tempfile.TemporaryDirectory(prefix="ferry-pytest.")
        self.procs = []
        url_file = os.path.join(self.dir.name, "scheduler.url")
        flags = [f"--trainers={trainers}", f"--servers={servers}", "--log-level=warn"]
        if shard_bytes:
            flags.append(f"--shard-bytes={shard_bytes}")
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
                                        "--log-level=warn"])

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
