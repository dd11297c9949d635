"""ferry.torch.Optimizer: a plain PyTorch loop changed only in its optimizer
line trains bit for bit like FerryParameterServer; overlap=True (pushes
from autograd hooks) and the flat staged exchange (the GPU path, driven
with CPU tensors) give the same weights bit for bit; module buffers are
averaged; tensors Ferry cannot hold are refused naming the parameter. Two
ranks run as threads. Run by tests/python/run.py (ctest python_torch_optim).
"""
import ctypes
import threading
import unittest
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ferry
import ferry.torch
from ferry.torch import FerryParameterServer, Optimizer
from job import LocalJob, run_ranks

LR, STEPS, BATCH = 0.2, 6, 16

# the two ranks build their Net in two threads at once: the lock keeps
# torch's global generator's draws in order
_INIT = threading.Lock()


class Net(nn.Module):
    def __init__(self, bn=False):
        super().__init__()
        with _INIT:
            torch.manual_seed(3)
            self.fc1 = nn.Linear(6, 8)
            self.fc2 = nn.Linear(8, 8)
            self.fc3 = nn.Linear(8, 3)
            self.bn = nn.BatchNorm1d(8) if bn else None
        self.unused = nn.Parameter(torch.ones(4))  # never gets a .grad

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.bn is not None:
            h = self.bn(h)
        return self.fc3(F.relu(self.fc2(h)))


def batches(rank):
    g = torch.Generator().manual_seed(50 + rank)
    x = torch.randn(STEPS * BATCH, 6, generator=g) + rank
    y = torch.randint(0, 3, (STEPS * BATCH,), generator=g)
    return [(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]) for i in range(STEPS)]


def loop(model, opt, data, on_backward=None):
    """An existing PyTorch loop: nothing Ferry in it."""
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if on_backward:
            on_backward()
        opt.step()
        losses.append(loss.item())
    return losses


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def run_job(fn, trainers=2):
    with LocalJob(trainers=trainers) as job:
        return run_ranks(lambda r: fn(job.url, r), trainers)


class FakeCuda:
    """ferry.cuda's interface over CPU memory: DeviceExchange(client, w_ptr,
    g_ptr, stream) sees every declared tensor packed back to back."""

    calls = {}
    lock = threading.Lock()

    @staticmethod
    def available():
        return True

    class DeviceExchange:
        def __init__(self, client, w_ptr, g_ptr, stream_ptr=0):
            self.c = client
            n = sum(client.lengths)
            w = np.ctypeslib.as_array((ctypes.c_float * n).from_address(w_ptr))
            g = np.ctypeslib.as_array((ctypes.c_float * n).from_address(g_ptr))
            offs = np.cumsum((0,) + client.lengths)
            self.w = [w[a:b] for a, b in zip(offs, offs[1:])]
            self.g = [g[a:b] for a, b in zip(offs, offs[1:])]

        def count(self, what):
            with FakeCuda.lock:
                FakeCuda.calls[what] = FakeCuda.calls.get(what, 0) + 1

        def init_weights(self):
            self.count("init_weights")
            self.c.init_weights(self.w)

        def pull(self):
            self.count("pull")
            self.c.pull(self.w)

        def push_pull(self, n_samples):
            self.count("push_pull")
            self.c.push_pull(self.g, n_samples, self.w)

        def close(self):
            self.count("close")


class OptimizerTrains(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)

    def with_optimizer(self, url, rank, **kw):
        model = Net()
        started = []
        with ferry.Client(url, rank, lr=LR, timeout_ms=20000) as c:
            opt = Optimizer(model.parameters(), c, n_samples=BATCH, module=model, **kw)
            ov = opt._overlap
            hook = (lambda: started.append(sum(ov.started))) if ov else None
            losses = loop(model, opt, batches(rank), hook)
            nb = len(ov.buckets) if ov else 0
            opt.close()
            return params(model), losses, c.stats().version, started, opt.names, nb

    def with_parameter_server(self, url, rank):
        model = Net()
        with ferry.Client(url, rank, lr=LR, timeout_ms=20000) as c:
            ps = FerryParameterServer(model, c)
            ps.start()
            for x, y in batches(rank):
                ps.zero_grad()
                F.cross_entropy(model(x), y).backward()
                ps.step(len(y))
            return params(model)

    def assert_same(self, a, b, what):
        for i, (p, q) in enumerate(zip(a, b)):
            self.assertTrue(torch.equal(p, q), f"{what}: parameter {i} differs")

    def test_drop_in_equals_parameter_server(self):
        # the loop really is a plain torch loop
        model = Net()
        loop(model, torch.optim.SGD(model.parameters(), lr=LR), batches(0))
        ref = run_job(self.with_parameter_server)
        out = run_job(lambda u, r: self.with_optimizer(u, r))
        for r in range(2):
            ps, (opt, _, version, _, names, _) = ref[r], out[r]
            self.assertEqual(version, STEPS)
            self.assert_same(opt, ps, f"rank {r}: Optimizer vs FerryParameterServer")
            self.assertEqual(names[:2], ["unused", "fc1.weight"])
        self.assert_same(out[0][0], out[1][0], "rank 0 vs rank 1")
        self.assertTrue(torch.equal(out[0][0][0], torch.ones(4)), "zeros pushed for no grad")
        self.assertFalse(torch.equal(out[0][0][1], params(Net())[1]), "it trained")

    def test_overlap_equals_end_of_backward(self):
        plain = run_job(lambda u, r: self.with_optimizer(u, r))
        # ~100-byte buckets: each layer's weight and bias apart
        over = run_job(lambda u, r: self.with_optimizer(u, r, overlap=True, bucket_mb=1e-4))
        for r in range(2):
            self.assert_same(over[r][0], plain[r][0], f"rank {r}: overlap vs not")
            # buckets left during backward, before step(); the one holding
            # the unused parameter only at step()
            nb = over[r][5]
            self.assertGreater(nb, 3)
            self.assertEqual(over[r][3], [nb - 1] * STEPS)

    def test_overlap_step_with_other_n_samples_ends_the_step(self):
        # buckets left with opt.n_samples during backward: a step() naming
        # another count is warned about and ends the step with the pushes'
        # one, so the next backward starts a fresh step
        def trainer(url, rank):
            model = Net()
            with ferry.Client(url, rank, lr=LR, timeout_ms=20000) as c:
                opt = Optimizer(model.parameters(), c, n_samples=BATCH, overlap=True,
                                bucket_mb=1e-4)
                for k, (x, y) in enumerate(batches(rank)):
                    opt.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    opt.step(n_samples=BATCH + 1 if k == 1 else None)
                opt.pull()  # the due version again, in place: a no-op here
                opt.close()
                return params(model), c.stats().version

        # warnings.catch_warnings swaps process-wide state: entered by
        # each rank's thread it raced the other's exit and lost records,
        # so it is entered once here, around both ranks
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = run_job(trainer)
        # (torch may warn too over the whole job: only ferry's count)
        caught = [str(m.message) for m in w if "n_samples" in str(m.message)]
        plain = run_job(lambda u, r: self.with_optimizer(u, r))
        self.assertEqual(len(caught), 2, caught)  # one per rank
        for m in caught:
            self.assertIn(f"n_samples={BATCH + 1}", m)
        for r in range(2):
            got, version = out[r]
            self.assertEqual(version, STEPS)
            self.assert_same(got, plain[r][0], f"rank {r}: the step kept n_samples={BATCH}")

    def test_staged_exchange_equals_in_place(self):
        # the GPU path's flat buffers and host staging, on CPU tensors
        plain = run_job(lambda u, r: self.with_optimizer(u, r))
        staged = run_job(lambda u, r: self.with_optimizer(u, r, exchange="staged"))
        for r in range(2):
            self.assert_same(staged[r][0], plain[r][0], f"rank {r}: staged vs in place")

    def test_device_exchange_glue(self):
        # the libferry_cuda engine's calls, with a stand-in DeviceExchange
        # that moves the flat buffers by address as libferry_cuda would
        plain = run_job(lambda u, r: self.with_optimizer(u, r, exchange="staged"))
        real = ferry.torch._engine
        ferry.torch._engine = lambda c, p, b, gim, _ex: ferry.torch._Device(c, p, b, gim, FakeCuda)
        try:
            dev = run_job(lambda u, r: self.with_optimizer(u, r))
        finally:
            ferry.torch._engine = real
        for r in range(2):
            self.assert_same(dev[r][0], plain[r][0], f"rank {r}: device vs staged")
        self.assertEqual(FakeCuda.calls, {"init_weights": 1, "pull": 2, "push_pull": 2 * STEPS,
                                          "close": 2})

    def test_staged_layout(self):
        # parameters are views of flat_w; backward accumulates straight
        # into flat_g through the .grad views opt.zero_grad() leaves
        def body(url, rank):
            model = Net()
            with ferry.Client(url, rank, lr=LR, timeout_ms=20000) as c:
                opt = Optimizer(model.parameters(), c, n_samples=BATCH, exchange="staged")
                self.assertEqual(opt.exchange, "staged")
                eng = opt._eng
                base = eng.flat_w.data_ptr()
                for i, p in enumerate(model.parameters()):
                    self.assertEqual(p.data_ptr(), eng.w_views[i].data_ptr())
                self.assertEqual(eng.w_views[0].data_ptr(), base)
                x, y = batches(rank)[0]
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                for i, p in enumerate(model.parameters()):
                    self.assertEqual(p.grad.data_ptr(), eng.g_views[i].data_ptr())
                opt.step()
                return float(eng.flat_w[-1])
        run_job(body)


class OptimizerBuffers(unittest.TestCase):
    """BatchNorm's running stats: the samples-weighted mean of the ranks'."""

    def setUp(self):
        torch.set_num_threads(1)

    def trainer(self, url, rank, **kw):
        """Trains; returns the declared names, each step's buffers before
        and after opt.step(), the model and n_samples."""
        model = Net(bn=True)
        n = BATCH if rank == 0 else BATCH // 2  # the mean is weighted
        before, after = [], []

        def bufs():
            return {k: b.clone() for k, b in model.named_buffers()}

        with ferry.Client(url, rank, lr=LR, timeout_ms=20000) as c:
            opt = Optimizer(model.parameters(), c, n_samples=n, module=model, **kw)
            for x, y in batches(rank):
                opt.zero_grad()
                F.cross_entropy(model(x[:n]), y[:n]).backward()
                before.append(bufs())
                opt.step()
                after.append(bufs())
            return opt.names, before, after, model, n

    def assert_mean(self, out, step):
        (_, b0, a0, _, n0), (_, b1, a1, _, n1) = out
        for k in ("bn.running_mean", "bn.running_var"):
            self.assertFalse(torch.equal(b0[step][k], b1[step][k]), "the ranks differed")
            want = (b0[step][k] * n0 + b1[step][k] * n1) / (n0 + n1)
            for a in (a0, a1):
                np.testing.assert_allclose(a[step][k].numpy(), want.numpy(), rtol=1e-6,
                                           atol=1e-7, err_msg=f"{k} after step {step}")

    def test_mean_every_step(self):
        out = run_job(lambda u, r: self.trainer(u, r))
        names = out[0][0]
        self.assertIn("bn.running_mean", names)
        self.assertIn("bn.running_var", names)
        self.assertNotIn("bn.num_batches_tracked", names)
        for step in range(STEPS):
            self.assert_mean(out, step)
        # integer buffers stay local (each rank counted its own batches)
        self.assertEqual(int(out[0][3].bn.num_batches_tracked), STEPS)

    def test_every_n_steps(self):
        out = run_job(lambda u, r: self.trainer(u, r, buffers_every=3))
        for r in range(2):
            _, before, after, _, _ = out[r]
            for step in (0, 1, 3, 4):  # no copy: the rank's own stats
                self.assertTrue(torch.equal(before[step]["bn.running_mean"],
                                            after[step]["bn.running_mean"]))
        for step in (2, 5):
            self.assert_mean(out, step)

    def test_overlap_and_staged_move_buffers_alike(self):
        ref = run_job(lambda u, r: self.trainer(u, r))
        for kw in ({"overlap": True, "bucket_mb": 1e-4}, {"exchange": "staged"}):
            out = run_job(lambda u, r: self.trainer(u, r, **kw))
            for r in range(2):
                for k, b in ref[r][2][-1].items():
                    self.assertTrue(torch.equal(out[r][2][-1][k], b), f"{kw}: {k}")
                for p, q in zip(out[r][3].parameters(), ref[r][3].parameters()):
                    self.assertTrue(torch.equal(p, q), f"{kw}: parameters")

    def test_local_buffers_not_shared(self):
        out = run_job(lambda u, r: self.trainer(u, r, buffers="local"))
        self.assertNotIn("bn.running_mean", out[0][0])
        self.assertFalse(torch.equal(out[0][3].bn.running_mean, out[1][3].bn.running_mean))
        self.assert_params_equal(out[0][3], out[1][3])

    def assert_params_equal(self, a, b):
        for p, q in zip(a.parameters(), b.parameters()):
            self.assertTrue(torch.equal(p, q))


class OptimizerRefuses(unittest.TestCase):
    def setUp(self):
        self.c = ferry.Client("tcp://127.0.0.1:9", 0)  # connects at declare

    def tearDown(self):
        self.c.close()

    def refused(self, model, pattern):
        with self.assertRaisesRegex(ferry.InvalidArgument, pattern):
            Optimizer(model.parameters(), self.c, module=model)

    def test_bad_tensors_named(self):
        self.refused(Net().double(), r"parameter 'unused': dtype torch.float64")
        m = Net()
        m.fc2.weight = nn.Parameter(torch.zeros(8, 8).t())
        self.refused(m, r"parameter 'fc2.weight': not contiguous")
        m = Net()
        m.fc3.bias = nn.Parameter(torch.zeros(3, device="meta"))
        self.refused(m, r"parameter 'fc3.bias': on meta, the others on cpu \(mixed devices\)")
        m = Net()
        m.unused = nn.Parameter(torch.sparse_coo_tensor([[0]], [1.0], (4,)))
        self.refused(m, r"parameter 'unused': layout torch.sparse_coo")
        with self.assertRaisesRegex(ferry.InvalidArgument, r"parameter 'param1': dtype"):
            Optimizer([torch.zeros(2), torch.zeros(2, dtype=torch.float64)], self.c)
        with self.assertRaisesRegex(TypeError, "ferry.Client"):
            Optimizer(Net().parameters(), object())
        m = Net()
        m.fc1.bias = nn.Parameter(torch.zeros(8, device="meta"))
        with self.assertRaisesRegex(ferry.InvalidArgument, r"'fc1.bias': on meta, want cpu"):
            FerryParameterServer(m, self.c)


if __name__ == "__main__":
    unittest.main()
