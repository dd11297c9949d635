"""Elastic jobs in the Python binding (libferry 0.4): data_permutation
equals libferry's and the contract's generator, a Client opened with
rank=None is given its rank by a live job's scheduler, and the lease calls
check their arguments. Run by tests/python/run.py (ctest python_elastic)."""
import ctypes
import unittest

import numpy as np

import ferry
from ferry.client import LIB
from job import LocalJob

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def reference_permutation(seed, epoch, n):
    """The contract's permutation (issue 27 §5), written out in Python:
    Fisher-Yates from the top over a splitmix64 stream seeded by
    seed ^ (GOLDEN * (epoch + 1))."""
    s = (seed ^ (GOLDEN * (epoch + 1))) & M64
    out = list(range(n))
    for i in range(n - 1, 0, -1):
        s = (s + GOLDEN) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        j = z % (i + 1)
        out[i], out[j] = out[j], out[i]
    return out


class Permutation(unittest.TestCase):
    def test_equals_c_and_reference(self):
        for seed, epoch, n in [(42, 0, 10), (42, 1, 10), (7, 3, 1000), (2 ** 64 - 1, 9, 257),
                               (0, 0, 1)]:
            got = ferry.data_permutation(seed, epoch, n)
            self.assertEqual(got.dtype, np.uint32)
            # libferry called straight through ctypes, into a C array
            buf = (ctypes.c_uint32 * n)()
            LIB.ferry_data_permutation(seed, epoch, n, ctypes.cast(buf, ctypes.c_void_p))
            self.assertEqual(got.tolist(), list(buf))
            self.assertEqual(got.tolist(), reference_permutation(seed, epoch, n))
            self.assertEqual(sorted(got.tolist()), list(range(n)))
        self.assertEqual(ferry.data_permutation(42, 0, 10).tolist(), [2, 3, 9, 7, 5, 8, 6, 4, 0, 1])
        self.assertEqual(len(ferry.data_permutation(1, 0, 0)), 0)

    def test_bad_arguments(self):
        with self.assertRaises(ferry.InvalidArgument):
            ferry.data_permutation(-1, 0, 4)
        with self.assertRaises(ferry.InvalidArgument):
            ferry.data_permutation(0, 2 ** 32, 4)


class GivenRank(unittest.TestCase):
    def test_rank_none_is_given_one(self):
        with LocalJob(trainers=1) as job:
            with ferry.Client(job.url, timeout_ms=20000) as c:
                self.assertIsNone(c.rank)  # not declared yet
                self.assertFalse(c.elastic)
                w = np.zeros(4, np.float32)
                c.declare({"w": w})
                self.assertEqual(c.rank, 0)
                self.assertFalse(c.elastic)  # --trainers 1: fixed membership
                c.init_weights([np.ones(4, np.float32)])
                c.pull([w])
                np.testing.assert_array_equal(w, np.ones(4, np.float32))
                c.push_pull([np.ones(4, np.float32)], 1, [w])
                self.assertEqual(c.stats().version, 1)
                with self.assertRaises(ferry.InvalidArgument):
                    c.lease_next(0, 1, 0, 8)  # an empty data set
                with self.assertRaises(ferry.StateError):
                    c.rejoin()  # not left
                c.lease_release()  # none held: nothing to do
                c.leave()
            self.assertEqual(c.rank, 0)  # kept once closed

    def test_elastic_job_members_and_leases(self):
        # --trainers 1:3: the job starts with one trainer; a second, given
        # rank 1, joins it; leases cover the data set exactly once.
        with LocalJob(trainers="1:3") as job:
            w = np.zeros(4, np.float32)
            a = ferry.Client(job.url, timeout_ms=20000)
            a.declare({"w": w})
            self.assertEqual(a.rank, 0)
            self.assertTrue(a.elastic)
            self.assertEqual(a.members, 1)
            a.init_weights([np.ones(4, np.float32)])
            b = ferry.Client(job.url, timeout_ms=20000)
            b.declare({"w": w})
            self.assertEqual(b.rank, 1)
            self.assertEqual(b.members, 2)  # its map lists both
            la = a.lease_next(100, 1, 7, 60)
            lb = b.lease_next(100, 1, 7, 60)
            self.assertEqual((la.start, la.count), (0, 60))
            self.assertEqual((lb.start, lb.count), (60, 40))
            a.lease_mark(la.id, la.start + la.count)
            b.lease_mark(lb.id, lb.start + lb.count)
            # Both consumed all of theirs: nothing is left, and once
            # neither holds a lease the data set is done.
            self.assertFalse(a.lease_next(100, 1, 7, 60))
            end = b.lease_next(100, 1, 7, 60)
            self.assertFalse(end)
            self.assertTrue(end.done)
            b.leave()
            a.leave()
            b.close()
            a.close()

    def test_rank_given_is_kept(self):
        c = ferry.Client("tcp://127.0.0.1:9", 3)
        self.assertEqual(c.rank, 3)
        c.close()


if __name__ == "__main__":
    unittest.main()
