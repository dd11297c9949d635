"""ferry with PyTorch: CPU tensors go in place, and
ferry.torch.FerryParameterServer trains a module whose parameters equal
what the plain binding pulls and a one-process reference. Run by
tests/python/run.py (ctest python_torch)."""
import threading
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ferry
from ferry.torch import FerryParameterServer
from job import LocalJob, run_ranks

LR, STEPS, BATCH = 0.2, 10, 16

# nn.Linear draws its initial weights from torch's one global generator, and
# the two ranks build their Net in two threads at once: without the lock
# their draws interleave and the weights depend on the schedule.
_INIT = threading.Lock()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        with _INIT:
            torch.manual_seed(3)
            self.fc1 = nn.Linear(6, 5)
            self.fc2 = nn.Linear(5, 3)
        self.unused = nn.Parameter(torch.ones(4))  # never gets a .grad

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def batches(rank):
    g = torch.Generator().manual_seed(50 + rank)
    x = torch.randn(STEPS * BATCH, 6, generator=g)
    y = torch.randint(0, 3, (STEPS * BATCH,), generator=g)
    return [(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]) for i in range(STEPS)]


def sum_grads(model, x, y, mean_times_n):
    """The gradients a rank pushes: rank 0 (the helper) backpropagates the
    mean loss and the helper scales by n; rank 1 the summed loss."""
    model.zero_grad(set_to_none=True)
    if mean_times_n:
        F.cross_entropy(model(x), y).backward()
        return [p.grad * len(y) if p.grad is not None else torch.zeros_like(p)
                for p in model.parameters()]
    F.cross_entropy(model(x), y, reduction="sum").backward()
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for p in model.parameters()]


class TorchHelper(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)

    def rank0(self, url):
        """The helper drives a module."""
        model = Net()
        with ferry.Client(url, 0, lr=LR, timeout_ms=20000) as c:
            ps = FerryParameterServer(model, c)
            ps.start()
            losses = []
            for x, y in batches(0):
                ps.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                ps.step(len(y))
                losses.append(loss.item())
            return model, losses, c.stats()

    def rank1(self, url):
        """The plain binding: NumPy weights, gradients from a torch copy."""
        model = Net()
        names = [n for n, _ in model.named_parameters()]
        ws = [np.zeros(p.numel(), np.float32) for p in model.parameters()]
        with ferry.Client(url, 1, lr=LR, timeout_ms=20000) as c:
            c.declare(dict(zip(names, ws)))
            c.pull(ws)
            for x, y in batches(1):
                with torch.no_grad():
                    for p, w in zip(model.parameters(), ws):
                        p.copy_(torch.from_numpy(w).view_as(p))
                gs = [g.numpy() for g in sum_grads(model, x, y, False)]
                c.push_pull(gs, len(y), ws)
            return ws

    def test_helper_trains_and_equals_binding_and_reference(self):
        with LocalJob(trainers=2) as job:
            out = run_ranks(lambda r: self.rank0(job.url) if r == 0 else self.rank1(job.url), 2)
        (model, losses, st), ws = out
        self.assertEqual(st.version, STEPS)
        # The helper's parameters are exactly the weights the binding pulled.
        for p, w in zip(model.parameters(), ws):
            np.testing.assert_array_equal(p.detach().numpy().ravel(), w)
        # ... and exactly one-process SGD on both ranks' batches, computed
        # as the server does: w -= (float)(lr / n) * (g0 + g1).
        ref = Net()
        for (x0, y0), (x1, y1) in zip(batches(0), batches(1)):
            g0 = sum_grads(ref, x0, y0, True)
            g1 = sum_grads(ref, x1, y1, False)
            scale = float(np.float32(LR / (len(y0) + len(y1))))
            with torch.no_grad():
                for p, a, b in zip(ref.parameters(), g0, g1):
                    p.sub_((a + b) * scale)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=name)
        self.assertTrue(torch.equal(model.unused, torch.ones(4)), "zeros pushed for no grad")
        self.assertFalse(torch.equal(model.fc1.weight, Net().fc1.weight), "it trained")
        self.assertLess(np.mean(losses[-3:]), np.mean(losses[:3]))

    def test_helper_rejects_what_it_cannot_hold(self):
        c = ferry.Client("tcp://127.0.0.1:9", 0)
        with self.assertRaisesRegex(ferry.InvalidArgument, "parameter 'unused': dtype torch.float64"):
            FerryParameterServer(Net().double(), c)
        with self.assertRaisesRegex(TypeError, "ferry.Client"):
            FerryParameterServer(Net(), object())
        c.close()


class TorchTensors(unittest.TestCase):
    """Tensors, like arrays, are used in place or refused with a reason."""

    @classmethod
    def setUpClass(cls):
        cls.job = LocalJob(trainers=1)
        cls.c = ferry.Client(cls.job.url, 0, timeout_ms=10000)
        cls.w = torch.zeros(2, 3)
        cls.c.declare({"w": cls.w})
        cls.c.init_weights(cls.w)  # one tensor: a bare tensor will do
        cls.c.pull(cls.w)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.job.stop()

    def test_refused(self):
        for t, pat in ((torch.zeros(6, dtype=torch.float64), "dtype torch.float64"),
                       (torch.zeros(3, 2).t(), "not contiguous"),
                       (torch.zeros(12)[::2], "not contiguous"),
                       (torch.zeros(7), "7 elements, want 6")):
            with self.assertRaisesRegex(ferry.InvalidArgument, pat):
                self.c.push(t, 1)

    def test_in_place(self):
        v = self.c.stats().version
        ptr = self.w.data_ptr()
        self.c.push_pull(torch.ones(6), 4, self.w)
        self.assertEqual(self.w.data_ptr(), ptr)
        self.assertEqual(self.c.stats().version, v + 1)
        self.assertTrue(bool((self.w < 0).all()))
        # a tensor sharing a NumPy array's memory sees the same pull
        a = np.empty(6, np.float32)
        self.c.pull(torch.from_numpy(a))
        np.testing.assert_array_equal(a, self.w.numpy().ravel())


if __name__ == "__main__":
    unittest.main()
