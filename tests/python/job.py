"""What the Python binding's tests share: LocalJob, a Ferry job on loopback
(ferry.run's: the scheduler on a free port read back through --url-file,
its servers, each process stopped at the end; ps-server from
$FERRY_PS_SERVER, set by tests/python/CMakeLists.txt), and run_ranks, one
function per rank in threads.
"""
import threading

from ferry.run import LocalJob

__all__ = ["LocalJob", "run_ranks"]


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
