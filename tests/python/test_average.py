"""Client.declare(tensors, average=...) against a live job (NumPy): an
averaged tensor (FERRY_TENSOR_AVERAGE, e.g. BatchNorm running statistics)
pulls exactly the samples-weighted mean of what the ranks pushed, while the
job's other tensors follow the servers' momentum; another kind on a second
rank is a MismatchError; a name not in the table is InvalidArgument. Run by
tests/python/run.py (ctest python_average)."""
import unittest

import numpy as np

import ferry
from job import LocalJob, run_ranks

LR, MU, STEPS = 0.1, 0.9, 6
SAMPLES = (2, 6)  # per rank: the mean is weighted


def stat(rank, step):
    """Rank's own running statistic at step (multiples of 1/2: exact)."""
    base = np.arange(1, 9, dtype=np.float32) * (10 if rank else 1)
    return base + np.float32(step * (1 if rank else -1) * 0.5)


def grad(rank, step):
    return (np.arange(4, dtype=np.float32) - np.float32(rank)) * np.float32(step + 1)


class AverageTensors(unittest.TestCase):

    def rank_main(self, url, rank):
        n = SAMPLES[rank]
        W = np.linspace(-1, 1, 4).astype(np.float32)
        bn = np.zeros(8, np.float32)
        means = []
        with ferry.Client(url, rank, lr=LR, optimizer="momentum", momentum=MU,
                          timeout_ms=20000) as c:
            c.declare({"W": W, "bn.running_mean": bn}, average={"bn.running_mean"})
            if rank == 0:
                c.init_weights([W, bn])
            c.pull([W, bn])
            for k in range(STEPS):
                # the statistic times this rank's samples, as a gradient
                # summed over the batch would be
                c.push_pull([grad(rank, k), stat(rank, k) * np.float32(n)], n, [W, bn])
                means.append(bn.copy())
        return W.copy(), means

    def test_mean_weighted_by_samples_weights_get_momentum(self):
        with LocalJob(trainers=2, servers=2, shard_bytes=16) as job:
            out = run_ranks(lambda r: self.rank_main(job.url, r), 2)
        for k in range(STEPS):
            s = stat(0, k) * np.float32(SAMPLES[0]) + stat(1, k) * np.float32(SAMPLES[1])
            want = (s.astype(np.float64) / sum(SAMPLES)).astype(np.float32)
            for r in range(2):
                np.testing.assert_array_equal(out[r][1][k], want, err_msg=f"rank {r} step {k}")
        # W: the textbook momentum update on the samples-averaged gradient.
        x = np.linspace(-1, 1, 4).astype(np.float32).astype(np.float64)
        v = np.zeros(4)
        for k in range(STEPS):
            g = (grad(0, k) + grad(1, k)).astype(np.float64) / sum(SAMPLES)
            v = MU * v + g
            x -= LR * v
        np.testing.assert_allclose(out[0][0], x, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(out[0][0], out[1][0])

    def test_kind_mismatch_is_refused(self):
        def main(url, rank):
            with ferry.Client(url, rank, timeout_ms=300 if rank == 0 else 5000) as c:
                if rank == 0:
                    try:
                        c.declare([("W", 4), ("bn", 8)], average=["bn"])
                    except ferry.Error:
                        pass  # waits for rank 1 until its deadline
                    return None
                with self.assertRaises(ferry.MismatchError) as cm:
                    c.declare([("W", 4), ("bn", 8)])
                return str(cm.exception)

        with LocalJob(trainers=2) as job:
            main(job.url, 0)
            msg = main(job.url, 1)
        self.assertIn("tensors[1].kind", msg)

    def test_unknown_average_name(self):
        with LocalJob(trainers=1) as job:
            with ferry.Client(job.url, 0, timeout_ms=5000) as c:
                with self.assertRaisesRegex(ferry.InvalidArgument, "'running_var'"):
                    c.declare({"W": 4, "bn": 8}, average=("bn", "running_var"))
                # nothing was declared: a corrected call still works
                c.declare({"W": 4, "bn": 8}, average="bn")
                self.assertEqual(c.names, ("W", "bn"))


if __name__ == "__main__":
    unittest.main()
