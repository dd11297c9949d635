"""ferry.torch.Embedding and EmbeddingBag against live jobs: outputs and
row gradients equal nn.Embedding's / nn.EmbeddingBag's over the same rows
(sum and mean, offsets or 2-D input, per-sample weights, negative int64
keys read as uint64); a few sync steps of a tiny model (dense Adagrad on
the servers, row-wise Adagrad tables, prefetched rows) on 2 ranks equal 1
rank on the union of their batches and a hand-computed update; bad inputs
refused with errors naming what was wrong. Run by tests/python/run.py
(ctest python_torch_embedding)."""
import contextlib
import importlib.util
import io
import json
import os
import tempfile
import threading
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ferry
import ferry.torch as ft
from job import LocalJob, run_ranks

DIM = 4
KEYS = torch.tensor([-1, 0, 3, 5, 7, 11, 12, 2 ** 40])  # every key the tests use
TABLES = dict(init="uniform", init_scale=0.1, optimizer="adagrad")
SEEDED = threading.Lock()  # ranks are threads: torch's global RNG is shared


class Tiny(nn.Module):
    """A bag over table "a" and a lookup in table "b", then a linear."""

    def __init__(self, mode="sum"):
        super().__init__()
        self.bag = ft.EmbeddingBag(DIM, mode=mode, table=ferry.Table("a", DIM, lr=0.3, **TABLES))
        self.one = ft.Embedding(DIM, table={"name": "b", "dim": DIM, **TABLES})
        self.lin = nn.Linear(2 * DIM, 1)

    def forward(self, keys, offsets, single):
        return self.lin(torch.cat([self.bag(keys, offsets), self.one(single)], 1)).squeeze(1)


def batch(step, rank, n):
    """n samples for (step, rank): a bag of 1..3 keys each (repeats across
    bags), one key for table "b", a 0/1 label."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    lens = torch.randint(1, 4, (n,), generator=g)
    keys = KEYS[torch.randint(0, len(KEYS), (int(lens.sum()),), generator=g)]
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)[:-1]])
    single = KEYS[torch.randint(0, len(KEYS), (n,), generator=g)]
    y = torch.randint(0, 2, (n,), generator=g).float()
    return keys, offsets, single, y


def union(parts):
    """One batch of the parts' samples, in order."""
    keys = torch.cat([p[0] for p in parts])
    lens = [torch.diff(torch.cat([p[1], torch.tensor([len(p[0])])])) for p in parts]
    lens = torch.cat(lens)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)[:-1]])
    return (keys, offsets, torch.cat([p[2] for p in parts]), torch.cat([p[3] for p in parts]))


def train(url, rank, world, steps, b, via="ps"):
    """steps sync steps of Tiny with batch b per rank, each step's next
    batch prefetched, through FerryParameterServer (via "ps") or
    ferry.torch.Optimizer ("opt"); returns (dense weights, table a's rows,
    table b's rows) of KEYS, and the rows before the first step."""
    with SEEDED:
        torch.manual_seed(7)
        m = Tiny()
    with ferry.Client(url, rank, lr=0.1, optimizer="adagrad", seed=5,
                      timeout_ms=30000) as c:
        if via == "ps":
            ps = ft.FerryParameterServer(m, c)
            ps.start()
        else:
            ps = ft.Optimizer(m.parameters(), c, module=m)
        rows0 = [c.rows_pull(t, KEYS) for t in ("a", "b")]
        data = [[batch(k, r, b) for r in range(2 // world * rank, 2 // world * (rank + 1))]
                for k in range(steps + 1)]
        data = [union(d) for d in data]
        for k in range(steps):
            keys, offsets, single, y = data[k]
            ps.zero_grad()
            assert (m.bag._st.next is not None) == (k > 0)  # the step pulled its rows
            F.binary_cross_entropy_with_logits(m(keys, offsets, single), y).backward()
            assert m.bag._st.next is None and m.one._st.next is None  # used, not pulled again
            nk = data[k + 1]
            m.bag.prefetch(nk[0])
            m.one.prefetch(nk[2])
            ps.step(n_samples=len(y))
        w = [p.detach().clone() for p in m.parameters()]
        rows = [c.rows_pull(t, KEYS) for t in ("a", "b")]
    return w, rows, rows0


def reference(steps, b, rows0, lr=0.1, table_lr=(0.3, 0.1), eps=1e-8):
    """The same steps in one process: nn.EmbeddingBag / nn.Embedding over
    the rows of KEYS (index i = KEYS[i]), torch.optim.Adagrad for the
    dense part, row-wise Adagrad by hand on the rows' mean gradients."""
    torch.manual_seed(7)
    m = Tiny()
    bag = nn.EmbeddingBag(len(KEYS), DIM, mode="sum", sparse=True)
    one = nn.Embedding(len(KEYS), DIM, sparse=True)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(rows0[0]))
        one.weight.copy_(torch.from_numpy(rows0[1]))
    opt = torch.optim.Adagrad(m.lin.parameters(), lr=lr, eps=eps)
    acc = [torch.zeros(len(KEYS)), torch.zeros(len(KEYS))]
    index = {int(k): i for i, k in enumerate(KEYS)}

    def ids(t):
        return torch.tensor([index[int(k)] for k in t])

    for k in range(steps):
        keys, offsets, single, y = union([batch(k, 0, b), batch(k, 1, b)])
        opt.zero_grad()
        bag.weight.grad = one.weight.grad = None
        z = m.lin(torch.cat([bag(ids(keys), offsets), one(ids(single))], 1)).squeeze(1)
        F.binary_cross_entropy_with_logits(z, y).backward()
        opt.step()
        with torch.no_grad():
            for j, e in enumerate((bag, one)):
                g = e.weight.grad.coalesce()
                for i, gi in zip(g.indices()[0].tolist(), g.values()):
                    acc[j][i] += (gi * gi).mean()
                    e.weight[i] -= table_lr[j] * gi / (acc[j][i].sqrt() + eps)
    rows = [bag.weight.detach().numpy(), one.weight.detach().numpy()]
    return [p.detach() for p in m.lin.parameters()], rows


class Grads(unittest.TestCase):
    """One rank: forward and backward against torch's own modules."""

    @classmethod
    def setUpClass(cls):
        cls.job = LocalJob(trainers=1, servers=2)
        cls.client = ferry.Client(cls.job.url, 0, timeout_ms=20000, seed=3)
        cls.model = nn.ModuleDict({"sum": ft.EmbeddingBag(DIM, "sum", table=ferry.Table(
            "s", DIM, init="normal", init_scale=0.5)),
            "mean": ft.EmbeddingBag(DIM, "mean", table=ferry.Table("m", 0, init="uniform",
                                                                   init_scale=0.5)),
            "one": ft.Embedding(DIM, "e"),
            "lin": nn.Linear(DIM, 1)})
        cls.ps = ft.FerryParameterServer(cls.model, cls.client)
        cls.ps.start()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.job.stop()

    def check(self, mod, call):
        """call(module, index of a key) under Ferry's module and under an
        nn module over the same rows: equal outputs, equal row grads."""
        w = torch.from_numpy(self.client.rows_pull(mod.table.name, KEYS))
        index = {int(k): i for i, k in enumerate(KEYS)}
        mod.train()
        out = call(mod, lambda t: t)
        (out * torch.arange(1, out.numel() + 1).view_as(out)).sum().backward()
        keys, leaf = mod._st.pending[-1]
        mod._st.pending.clear()
        if isinstance(mod, ft.Embedding):
            ref = nn.Embedding(len(KEYS), DIM)
        else:
            ref = nn.EmbeddingBag(len(KEYS), DIM, mode=mod.mode)
        ref.weight.data.copy_(w)
        rout = call(ref, lambda t: t.clone().apply_(lambda k: index[k]))
        (rout * torch.arange(1, rout.numel() + 1).view_as(rout)).sum().backward()
        torch.testing.assert_close(out, rout, rtol=0, atol=0)
        rows = [index[int(k)] for k in keys]
        torch.testing.assert_close(leaf.grad, ref.weight.grad[rows], rtol=0, atol=0)
        self.assertEqual(len(keys), len(set(keys.tolist())))  # one gradient per key
        unused = sorted(set(range(len(KEYS))) - set(rows))
        self.assertTrue(torch.all(ref.weight.grad[unused] == 0))

    def test_bag_offsets(self):
        keys = KEYS[[0, 2, 2, 7, 3, 0, 5]]
        offsets = torch.tensor([0, 3, 3, 5])  # an empty bag too
        for mode in ("sum", "mean"):
            with self.subTest(mode=mode):
                self.check(self.model[mode], lambda m, f: m(f(keys), offsets))

    def test_bag_2d_and_weights(self):
        keys = KEYS[torch.tensor([[0, 2, 2], [7, 1, 0]])]
        for mode in ("sum", "mean"):
            self.check(self.model[mode], lambda m, f: m(f(keys)))
        psw = torch.tensor([0.5, -1.0, 2.0, 1.0, 0.25, 3.0])
        flat, offsets = keys.reshape(-1), torch.tensor([0, 2, 6])
        self.check(self.model["sum"],
                   lambda m, f: m(f(flat), offsets, per_sample_weights=psw))
        bag = self.model["mean"]
        bag.include_last_offset = True
        try:
            self.check(bag, lambda m, f: (m(f(flat), offsets) if isinstance(m, ft.EmbeddingBag)
                                          else nn.functional.embedding_bag(
                                              f(flat), m.weight, offsets, mode="mean",
                                              include_last_offset=True)))
        finally:
            bag.include_last_offset = False

    def test_embedding(self):
        keys = KEYS[torch.tensor([[0, 1, 2], [2, 7, 0]])]
        self.check(self.model["one"], lambda m, f: m(f(keys)))

    def test_no_grad_records_nothing(self):
        mod = self.model["sum"]
        with torch.no_grad():
            out = mod(KEYS[[0, 1]].view(1, 2))
        self.assertEqual(mod._st.pending, [])
        mod.eval()
        try:
            mod(KEYS[[0, 1]].view(1, 2))
        finally:
            mod.train()
        self.assertEqual(mod._st.pending, [])
        rows = self.client.rows_pull("s", KEYS[[0, 1]])
        torch.testing.assert_close(out[0], torch.from_numpy(rows).sum(0))

    def test_bad_inputs(self):
        bag, one = self.model["sum"], self.model["one"]
        keys = torch.tensor([1, 2, 3])
        bad = [
            (lambda: bag(keys.int(), torch.tensor([0])), "torch.int64"),
            (lambda: bag(keys.float(), torch.tensor([0])), "torch.int64"),
            (lambda: bag([1, 2, 3], torch.tensor([0])), "int64 tensor"),
            (lambda: bag(keys), "needs offsets"),
            (lambda: bag(keys.view(1, 3), torch.tensor([0])), "2-D"),
            (lambda: bag(keys.view(1, 1, 3)), "3-D"),
            (lambda: bag(keys, torch.tensor([0], dtype=torch.int32)), "offsets"),
            (lambda: self.model["mean"](keys.view(1, 3), per_sample_weights=torch.ones(1, 3)),
             "mode='sum'"),
            (lambda: one(keys.int()), "torch.int64"),
            (lambda: one.prefetch(keys.double()), "torch.int64"),
            (lambda: ft.EmbeddingBag(DIM, "max", table="x"), "mode"),
            (lambda: ft.EmbeddingBag(DIM, "sum"), "table="),
            (lambda: ft.Embedding(DIM, ferry.Table("x", DIM + 1)), "embedding_dim"),
            (lambda: ft.Embedding(DIM, 5), "ferry.Table"),
            (lambda: ft.Embedding(DIM, {"name": "x", "bogus": 1}), "bogus"),
        ]
        for i, (fn, word) in enumerate(bad):
            with self.subTest(i=i, word=word):
                with self.assertRaises(ValueError) as cm:
                    fn()
                self.assertIn(word, str(cm.exception))
        with self.assertRaises(ferry.StateError) as cm:
            ft.Embedding(DIM, "loose")(keys)
        self.assertIn("FerryParameterServer", str(cm.exception))
        self.assertEqual(bag._st.pending, [])

    def test_optimizer_refuses_overlap(self):
        model = nn.Sequential(ft.Embedding(DIM, "e"), nn.Linear(DIM, 1))
        with self.assertRaises(ferry.InvalidArgument) as cm:
            ft.Optimizer(model.parameters(), self.client, module=model, overlap=True,
                         declare=False)
        self.assertIn("overlap=False", str(cm.exception))

    def test_unknown_table(self):
        model = nn.Sequential(ft.Embedding(DIM, "nowhere"), nn.Linear(DIM, 1))
        with self.assertRaises(ferry.InvalidArgument) as cm:
            ft.FerryParameterServer(model, self.client, declare=False)
        self.assertIn("unknown table 'nowhere'", str(cm.exception))
        twice = nn.Sequential(ft.Embedding(DIM, "t"), ft.Embedding(DIM, ferry.Table("t", DIM,
                                                                                    lr=1.0)),
                              nn.Linear(DIM, 1))
        with self.assertRaises(ferry.InvalidArgument) as cm:
            ft.FerryParameterServer(twice, self.client, declare=False)
        self.assertIn("different specs", str(cm.exception))


class Steps(unittest.TestCase):
    """Sync steps: 2 ranks == 1 rank on the union == a hand-computed
    update."""

    STEPS, B = 3, 6

    def test_two_ranks_equal_one_and_reference(self):
        with LocalJob(trainers=2, servers=2) as job:
            two = run_ranks(lambda r: train(job.url, r, 2, self.STEPS, self.B), 2)
        with LocalJob(trainers=1, servers=1) as job:
            one = train(job.url, 0, 1, self.STEPS, self.B)
        with LocalJob(trainers=1, servers=1) as job:
            opt = train(job.url, 0, 1, self.STEPS, self.B, via="opt")
        for a, b in zip(one[0] + one[1], opt[0] + opt[1]):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same step
        (w0, r0, i0), (w1, r1, _) = two
        for a, b in zip(w0, w1):
            torch.testing.assert_close(a, b, rtol=0, atol=0)  # ranks agree exactly
        for a, b in zip(r0, r1):
            np.testing.assert_array_equal(a, b)
        w, rows, init = one
        for a, b in zip(i0, init):
            np.testing.assert_array_equal(a, b)  # rows from (seed, table, key)
        for a, b in zip(w0, w):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(r0, rows):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        self.assertFalse(np.allclose(rows[0], init[0]))  # the tables moved
        ref_w, ref_rows = reference(self.STEPS, self.B, init)
        for a, b in zip(w, ref_w):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(rows, ref_rows):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def example():
    """examples/torch_dlrm.py as a module."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "torch_dlrm.py")
    spec = importlib.util.spec_from_file_location("torch_dlrm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Example(unittest.TestCase):
    """examples/torch_dlrm.py end to end on a tiny set: the readers, the
    AUC, and a few steps of single and of ferry with the summary line."""

    @classmethod
    def setUpClass(cls):
        cls.ex = example()
        cls.tmp = tempfile.TemporaryDirectory(prefix="torch-dlrm.")
        with contextlib.redirect_stdout(io.StringIO()):
            cls.ex.make_data(cls.tmp.name, 3000, 1000, 1)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_text_equals_binary(self):
        ex = self.ex
        cat = ["a1", "", "foobar", "FFFFFFFFFFFFFFFF", "12345678901234567"] + ["0"] * 21
        lines = ["\t".join(["1", "5", "", "-3"] + ["0"] * 10 + cat),
                 "\t".join(["0"] + ["1"] * 13 + ["b"] * 26)]
        tsv = os.path.join(self.tmp.name, "t.tsv")
        with open(tsv, "w") as f:
            f.write("\r\n".join(lines) + "\n")
        label, dense, keys = ex.load(tsv)
        np.testing.assert_array_equal(label, [1, 0])
        self.assertEqual(dense[0, 0], np.float32(np.log1p(5.0)))
        self.assertEqual(list(dense[0, 1:3]), [0, 0])  # missing, negative
        self.assertEqual(keys.shape, (26, 2))  # field-major
        self.assertEqual(keys[:5, 0].tolist(), [0xa1, 2 ** 64 - 1, 0x85944171f73967e8,
                                                2 ** 64 - 1, ex._fnv("12345678901234567")])
        self.assertGreaterEqual(int(keys[4, 0]), 2 ** 63)
        binp = os.path.join(self.tmp.name, "t.bin")
        ex.write_bin(binp, label, dense, keys.T)
        for a, b in zip(ex.load(binp), (label, dense, keys)):
            np.testing.assert_array_equal(a, b)
        with open(tsv, "a") as f:
            f.write("\t".join(["1", "x"] + ["0"] * 38) + "\n")
        with self.assertRaises(SystemExit) as cm:
            ex.load(tsv)
        self.assertIn(":3: column 2 (I1)", str(cm.exception.code))

    def test_auc(self):
        score = np.array([0.1, 0.4, 0.35, 0.8, 0.4, 0.4], np.float32)
        label = np.array([0, 0, 1, 1, 1, 0], np.float32)
        pos, neg = score[label == 1], score[label == 0]
        want = np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg])
        self.assertAlmostEqual(self.ex.auc(score, label), want, places=12)

    def run_main(self, argv):
        out = io.StringIO()
        d = self.tmp.name
        with contextlib.redirect_stdout(out):
            self.ex.main(argv + ["--data", os.path.join(d, "train.bin"), "--test-data",
                                 os.path.join(d, "test.bin"), "--max-steps", "20",
                                 "--batch", "32", "--log-interval", "10",
                                 "--eval-rows", "200"])
        lines = out.getvalue().splitlines()
        s = json.loads(lines[-1])
        for k in ("system", "samples_per_s", "auc", "logloss", "wall_s", "samples"):
            self.assertIn(k, s)
        self.assertEqual(s["samples"], 20 * 32 * s["trainers"])
        self.assertTrue(0 <= s["auc"] <= 1, s)
        self.assertTrue(lines[0].startswith("step 10 |"), lines[0])
        return s

    def test_single(self):
        self.assertEqual(self.run_main(["--system", "single"])["system"], "torch-single")

    def test_ferry(self):
        curve = os.path.join(self.tmp.name, "curve.csv")
        with LocalJob(trainers=1, servers=2) as job:
            s = self.run_main(["--system", "ferry", "--scheduler", job.url, "--rank", "0",
                               "--trainers", "1", "--curve", curve])
        self.assertEqual(s["system"], "ferry-torch")
        # --init ferry: one process starts from the job's very weights and
        # rows, so after the same 20 steps both score the test rows alike
        # (only the order of float sums differs).
        single = self.run_main(["--system", "single"])
        self.assertAlmostEqual(s["auc"], single["auc"], delta=1e-3)
        self.assertAlmostEqual(s["logloss"], single["logloss"], delta=1e-3)
        with open(curve) as f:
            rows = f.read().splitlines()
        self.assertEqual(rows[0], "step,wall_s,samples,auc,logloss")
        self.assertEqual([r.split(",")[0] for r in rows[1:]], ["10", "20"])


if __name__ == "__main__":
    unittest.main()
