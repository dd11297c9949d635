"""ferry.torch.LocalSteps: a local-steps job (DiLoCo) driven by a PyTorch
inner optimizer. H = 1 with inner SGD and outer SGD at lr 1 trains like
the plain sync job (ferry.torch.Optimizer) up to float rounding; with
outer SGD at lr 1 an outer round sets the samples-weighted mean of the
ranks' local weights; H = 4 with inner AdamW and the default outer
Nesterov trains (the loss falls) in one server round per 4 steps, both
ranks ending on the same weights; the staged exchange (the GPU path,
driven with CPU tensors) equals the in-place one bit for bit; bad
combinations are refused naming the field. Two ranks run as threads. Run
by tests/python/run.py (ctest python_local_steps).
"""
import threading
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

import ferry
import ferry.torch
from ferry import _lib
from ferry.torch import LocalSteps, Optimizer
from job import LocalJob, run_ranks

LR, STEPS, BATCH = 0.2, 6, 16

# the two ranks build their Net in two threads at once: the lock keeps
# torch's global generator's draws in order
_INIT = threading.Lock()

# libferry's ferry_opts with the local-steps job fields (issue 28)
HAS_LOCAL = "local_steps" in dict(_lib.Opts._fields_)
needs_local = unittest.skipUnless(HAS_LOCAL, "this binding's ferry_opts has no local_steps")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        with _INIT:
            torch.manual_seed(3)
            self.fc1 = nn.Linear(6, 8)
            self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def batches(rank, steps=STEPS, batch=BATCH):
    """Synthetic 3-class data: the class is the argmax of a fixed linear
    map of x, so a small net can learn it."""
    g = torch.Generator().manual_seed(50 + rank)
    x = torch.randn(steps * batch, 6, generator=g)
    w = torch.Generator().manual_seed(7)
    y = (x @ torch.randn(6, 3, generator=w)).argmax(1)
    return [(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
            for i in range(steps)]


def loop(model, opt, data):
    """A plain PyTorch loop; the losses of its steps."""
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(n_samples=len(x))
        losses.append(loss.item())
    return losses


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def run_job(fn, trainers=2):
    with LocalJob(trainers=trainers) as job:
        return run_ranks(lambda r: fn(job.url, r), trainers)


def local_rank(url, rank, h, make_inner, data, exchange="auto", **outer):
    """One rank of a local-steps job: (weights, losses, client stats,
    rounds)."""
    model = Net()
    inner = make_inner(model)
    lr = inner.param_groups[0]["lr"]
    with ferry.Client(url, rank, local_steps=h, inner_lr=lr, **outer) as c:
        opt = LocalSteps(model.parameters(), c, inner, n_samples=BATCH, exchange=exchange)
        losses = loop(model, opt, data)
        return params(model), losses, c.stats(), opt.rounds


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=LR)


@needs_local
class TestLocalSteps(unittest.TestCase):
    def test_h1_is_sync_sgd(self):
        """H = 1, inner SGD, outer SGD lr 1 == the sync job at lr LR.

        Not bit for bit: P = (theta_start - theta) * (B / LR) recovers the
        gradient from a difference of weights. theta = theta_start -
        fl(LR * g) is rounded to the weights' float32 grid, so P carries an
        error of up to half an ulp of the weight times B / LR, which the
        server's (LR / (2 B)) * sum P turns back into about half an ulp of
        the weight per rank and step (plus the products' own roundings, of
        the update's size). The tolerance is 4 ulps of the largest weight
        per step: a few times that bound, far below one step's update."""
        def plain(url, rank):
            model = Net()
            with ferry.Client(url, rank, lr=LR) as c:
                opt = Optimizer(model.parameters(), c, n_samples=BATCH)
                loop(model, opt, batches(rank))
                return params(model)

        ref = run_job(plain)
        got = run_job(lambda url, r: local_rank(url, r, 1, sgd, batches(r),
                                                optimizer="sgd", lr=1.0))
        for w, _, st, rounds in got:
            self.assertEqual((st.version, rounds), (STEPS, STEPS))
            for a, b in zip(w, ref[0]):
                tol = STEPS * 4 * torch.finfo(torch.float32).eps * b.abs().max().item()
                torch.testing.assert_close(a, b, rtol=0, atol=tol)
        # not trivially equal: the job moved the weights
        self.assertGreater(max((a - b).abs().max().item()
                               for a, b in zip(ref[0], params(Net()))), 1e-3)

    def test_outer_round_is_weighted_mean(self):
        """Outer SGD at lr 1, H = 3, ranks of 8 and 16 samples a step: the
        round's global weights are the samples-weighted mean of the ranks'
        local weights after their 3 inner steps (computed here without
        Ferry), whatever the inner optimizer (momentum SGD)."""
        h, sizes = 3, (8, 16)

        def inner(model):
            return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def data(rank):
            return batches(rank, h, sizes[rank])

        got = run_job(lambda url, r: local_rank(url, r, h, inner, data(r),
                                                optimizer="sgd", lr=1.0))
        local = []
        for r in range(2):
            model = Net()
            opt = inner(model)
            for x, y in data(r):
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
            local.append(params(model))
        n0, n1 = h * sizes[0], h * sizes[1]
        for w, _, st, rounds in got:
            self.assertEqual((st.version, rounds), (1, 1))
            for a, w0, w1 in zip(w, *local):
                want = (n0 * w0 + n1 * w1) / (n0 + n1)
                torch.testing.assert_close(a, want, rtol=1e-5, atol=1e-6)
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(got[0][0], got[1][0])))

    def test_h4_adamw_trains(self):
        """H = 4, inner AdamW, outer Nesterov (the defaults, lr 0.7): the
        loss falls, the servers took one round per 4 steps, and both ranks
        hold the same (global) weights at the end."""
        steps, h = 48, 4

        def adamw(model):
            return torch.optim.AdamW(model.parameters(), lr=0.01)

        got = run_job(lambda url, r: local_rank(url, r, h, adamw, batches(r, steps)))
        for w, losses, st, rounds in got:
            self.assertEqual((st.version, rounds), (steps // h, steps // h))
            first, last = sum(losses[:h]) / h, sum(losses[-h:]) / h
            self.assertLess(last, 0.6 * first, losses)
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(got[0][0], got[1][0])))

    def test_staged_equals_host(self):
        """The flat staged exchange (device parameters' path, here with CPU
        tensors) computes the same pseudo-gradients bit for bit."""
        def run(exchange):
            return run_job(lambda url, r: local_rank(
                url, r, 2, sgd, batches(r), exchange=exchange, optimizer="momentum", lr=0.5))

        host, staged = run("host"), run("staged")
        for (a, *_), (b, *_) in zip(host, staged):
            self.assertTrue(all(torch.equal(x, y) for x, y in zip(a, b)))


class TestRefused(unittest.TestCase):
    URL = "tcp://127.0.0.1:1"  # opening connects nothing

    def assertNames(self, field, fn):
        with self.assertRaises(ferry.InvalidArgument) as cm:
            fn()
        self.assertIn(field, str(cm.exception))

    @needs_local
    def test_nonpositive_inner_lr(self):
        """A local-steps job with inner_lr <= 0: ferry_opts_check refuses
        it, naming inner_lr; so does LocalSteps for an inner lr of 0."""
        for lr in (0.0, -0.1):
            self.assertNames("inner_lr", lambda: ferry.Client(self.URL, 0, local_steps=4,
                                                              inner_lr=lr))
        model = Net()
        with ferry.Client(self.URL, 0, local_steps=4, inner_lr=0.1) as c:
            zero = torch.optim.SGD(model.parameters(), lr=0.0)
            self.assertNames("inner_lr", lambda: LocalSteps(model.parameters(), c, zero))

    @needs_local
    def test_job_mismatch(self):
        """The inner optimizer's lr must be the job's inner_lr, local_steps
        the job's H; a job without local steps is refused."""
        model = Net()
        inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with ferry.Client(self.URL, 0, local_steps=4, inner_lr=1e-2) as c:
            self.assertNames("inner_lr", lambda: LocalSteps(model.parameters(), c, inner))
        with ferry.Client(self.URL, 0, local_steps=4, inner_lr=1e-3) as c:
            self.assertNames("local_steps", lambda: LocalSteps(model.parameters(), c, inner,
                                                               local_steps=8))
            self.assertEqual((c.local_steps, c.inner_lr), (4, 1e-3))
        with ferry.Client(self.URL, 0) as c:
            self.assertNames("local_steps", lambda: LocalSteps(model.parameters(), c, inner))

    def test_unsupported_binding(self):
        """Without the struct's fields the options are refused, not
        dropped."""
        if HAS_LOCAL:
            self.skipTest("this binding has the local-steps fields")
        with self.assertRaises(ferry.UnsupportedError):
            ferry.Client(self.URL, 0, local_steps=4, inner_lr=0.1)


if __name__ == "__main__":
    unittest.main()
