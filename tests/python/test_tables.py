"""Sparse tables through the Python binding against a live job: keys as
NumPy uint64 arrays and torch int64 tensors, rows written into the
caller's arrays in place, two sync ranks agreeing on every row, step()
with a dense tensor beside the tables, and wrong dtypes, shapes or layouts
refused with a ValueError. Run by tests/python/run.py (ctest
python_tables)."""
import unittest

import numpy as np

import ferry
from job import LocalJob, run_ranks

try:
    import torch
except ImportError:  # the torch half is skipped, the rest still runs
    torch = None

TABLES = [ferry.Table("emb", 4, init="uniform", init_scale=0.1, optimizer="adagrad", lr=0.1),
          {"name": "bias", "dim": 1}]
STEPS = 3


def batch(rank, k):
    """Rank's keys (a repeat, overlapping the other rank's) and row
    gradients at step k: dyadic values, exact in any summation order."""
    ks = [(k + i * (rank + 1)) % 9 + 1 for i in range(5)]
    keys = np.array(ks + ks[:1], dtype=np.uint64)
    g4 = ((np.arange(24, dtype=np.float32).reshape(6, 4) * (rank + 1) + k) % 5 - 2) / 8
    return keys, g4.astype(np.float32), (g4[:, :1] * 2).astype(np.float32)


def as_keys(keys, rank):
    """Rank 1 passes torch int64 tensors when torch is there."""
    if rank == 1 and torch is not None:
        return torch.from_numpy(keys.astype(np.int64))
    return keys


class Tables(unittest.TestCase):

    def rank_main(self, url, rank):
        all_keys = np.arange(1, 11, dtype=np.uint64)
        with ferry.Client(url, rank, lr=0.5, seed=99, timeout_ms=20000) as c:
            w = np.zeros(3, np.float32)
            c.declare({"w": w}, tables=TABLES)
            self.assertEqual(c.tables, ("emb", "bias"))
            if rank == 0:
                c.init_weights([w])
            c.pull([w])
            init = np.empty((10, 4), np.float32)
            got = c.rows_pull("emb", as_keys(all_keys, rank), init)
            self.assertIs(got, init)  # written in place
            for k in range(STEPS):
                keys, g4, g1 = batch(rank, k)
                kk = as_keys(keys, rank)
                out4 = np.full((6, 4), np.nan, np.float32)
                out1 = torch.empty(6, 1) if torch is not None else np.empty((6, 1), np.float32)
                _, outs = c.step([np.ones(3, np.float32)], 8, [w],
                                 push=[("emb", kk, g4), (1, kk, g1)],
                                 pull=[("emb", kk, out4), ("bias", kk, out1)])
                self.assertIs(outs[0], out4)
                self.assertIs(outs[1], out1)
                np.testing.assert_array_equal(out4[0], out4[5])  # the same key twice
            final = c.rows_push_pull([], 8, [(0, all_keys, None), (1, all_keys, None)])
            st = c.table_stats("emb")
            self.assertEqual(st["keys_pushed"], 6 * STEPS)
            self.assertLess(st["rows_pushed"], st["keys_pushed"])
        return init, [np.asarray(f) for f in final], w.copy()

    def test_two_ranks_agree(self):
        with LocalJob(trainers=2, servers=2) as job:
            out = run_ranks(lambda r: self.rank_main(job.url, r), 2)
        (i0, f0, w0), (i1, f1, w1) = out
        np.testing.assert_array_equal(i0, i1)  # rows from (seed, table, key)
        self.assertTrue(np.all(np.abs(i0) <= 0.1) and np.any(i0 != 0))
        for a, b in zip(f0, f1):
            np.testing.assert_array_equal(a, b)
        self.assertFalse(np.array_equal(f0[0], i0))  # the pushes applied
        self.assertTrue(np.all(f0[0][9] == i0[9]))  # key 10: never pushed
        np.testing.assert_array_equal(w0, w1)
        self.assertTrue(np.all(w0 != 0))  # the dense half stepped too

    def test_bad_arrays_refused(self):
        with LocalJob(trainers=1, servers=1) as job:
            with ferry.Client(job.url, 0, timeout_ms=20000) as c:
                c.declare({"w": 2}, tables=[ferry.Table("t", 3)])
                keys = np.array([1, 2], np.uint64)
                bad = [
                    (keys.astype(np.float64), None, "dtype"),
                    (keys.astype(np.int32), None, "dtype"),
                    ([1, 2], None, "NumPy uint64"),
                    (keys, np.zeros((2, 3), np.float64), "float32"),
                    (keys, np.zeros((2, 4), np.float32), "want 2 keys x dim 3"),
                    (keys, np.zeros((3, 2), np.float32).T, "C-contiguous"),
                    (np.array([1, 2, 3, 4], np.uint64)[::2], None, "C-contiguous"),
                ]
                if torch is not None:
                    bad += [(torch.tensor([1, 2], dtype=torch.int32), None, "torch.int64"),
                            (torch.tensor([1, 2]), torch.zeros(2, 3, dtype=torch.float64),
                             "torch.float32")]
                for k, out, word in bad:
                    with self.assertRaises(ValueError) as cm:
                        c.rows_pull("t", k, out)
                    self.assertIn(word, str(cm.exception))
                with self.assertRaises(ValueError):
                    c.rows_pull("nope", keys)
                rows = c.rows_pull(0, keys)
                self.assertEqual(rows.shape, (2, 3))
                np.testing.assert_array_equal(rows, 0)

    def test_bad_spec_named(self):
        with LocalJob(trainers=1, servers=1) as job:
            with ferry.Client(job.url, 0, timeout_ms=5000) as c:
                with self.assertRaises(ferry.InvalidArgument) as cm:
                    c.declare({"w": 2}, tables=[{"name": "t", "dim": 4, "codec_pull": "q4"}])
                self.assertIn("codec_pull", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
