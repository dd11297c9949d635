"""ferry.Client against a live job (NumPy): training equals a one-process
reference, errors map to their classes, arrays are checked and never
copied. Run by tests/python/run.py (ctest python_binding)."""
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import numpy as np

import ferry
from job import LocalJob, run_ranks

LR = 0.1
TLS_CERTS_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                            "scripts", "tls-certs.sh")
CLASSES, FEATURES = 3, 8


def make_data(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, n)
    return x, y


def softmax_grads(W, b, x, y):
    """Gradients of softmax cross-entropy SUMMED over the batch (float32)."""
    z = x @ W + b
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    return (x.T @ p).astype(np.float32), p.sum(axis=0).astype(np.float32)


def init_weights():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((FEATURES, CLASSES)).astype(np.float32) * 0.1,
            np.zeros(CLASSES, np.float32))


class TrainTwoRanks(unittest.TestCase):
    """Two ranks, sync, no compression: the servers' weights after every
    step are exactly single-process SGD on the union of the batches."""

    STEPS, BATCH = 12, 16

    def batches(self, rank):
        x, y = make_data(100 + rank, self.STEPS * self.BATCH)
        return [(x[i * self.BATCH:(i + 1) * self.BATCH], y[i * self.BATCH:(i + 1) * self.BATCH])
                for i in range(self.STEPS)]

    def rank_main(self, url, rank, secret_file=None, tls=None):
        W, b = init_weights()
        if rank:
            W[:] = 0  # rank 1 starts from whatever rank 0 offered
        with ferry.Client(url, rank, lr=LR, timeout_ms=20000, secret_file=secret_file,
                          **(tls or {})) as c:
            # declare by arrays on rank 0, by lengths on rank 1: one table
            c.declare({"W": W, "b": b} if rank == 0 else [("W", W.size), ("b", 3)])
            self.assertEqual(c.trainers, 2)
            if rank == 0:
                c.init_weights([W, b])
            c.pull([W, b])  # into the 2-D W in place
            for x, y in self.batches(rank):
                gW, gb = softmax_grads(W, b, x, y)
                out = c.push_pull({"W": gW, "b": gb}, len(y), [W, b])
                self.assertIs(out[0], W)
            return W.copy(), b.copy(), c.stats()

    def test_two_ranks_equal_numpy_reference(self):
        self.check_two_ranks(None)

    def test_signed_job_equals_numpy_reference(self):
        # Every request and reply signed (--secret-file): the same weights.
        with tempfile.NamedTemporaryFile("w", suffix=".key") as key:
            key.write("python binding test key 0123456789\n")
            key.flush()
            self.check_two_ranks(key.name)

    @unittest.skipIf(shutil.which("openssl") is None, "no openssl to make certificates")
    def test_tls_job_equals_numpy_reference(self):
        # Every connection over mutual TLS (certificates of a throw-away CA).
        with tempfile.TemporaryDirectory(prefix="ferry-pytls.") as d:
            # One certificate for the scheduler and servers, naming no member
            # (as deploy/k8s): a scheduler with a server's would be refused.
            subprocess.run(["bash", TLS_CERTS_SH, d, "member", "trainer"], check=True)
            member = [f"--tls-cert={d}/member.pem", f"--tls-key={d}/member.key",
                      f"--tls-ca={d}/ca.pem"]
            tls = {"tls_cert": f"{d}/trainer.pem", "tls_key": f"{d}/trainer.key",
                   "tls_ca": f"{d}/ca.pem"}
            self.check_two_ranks(None, member, tls)

    def check_two_ranks(self, secret_file, member_flags=(), tls=None):
        with LocalJob(trainers=2, secret_file=secret_file, member_flags=member_flags) as job:
            self.assertEqual(job.url.startswith("tls+tcp://"), tls is not None)
            res = run_ranks(lambda r: self.rank_main(job.url, r, secret_file, tls), 2)
        W, b = init_weights()
        b0, b1 = self.batches(0), self.batches(1)
        for (x0, y0), (x1, y1) in zip(b0, b1):
            g0, g1 = softmax_grads(W, b, x0, y0), softmax_grads(W, b, x1, y1)
            scale = np.float32(LR / (len(y0) + len(y1)))  # as the server: (float)(lr / n)
            W = W - scale * (g0[0] + g1[0])
            b = b - scale * (g0[1] + g1[1])
        for rW, rb, st in res:
            np.testing.assert_array_equal(rW, W)
            np.testing.assert_array_equal(rb, b)
            self.assertEqual(st.version, self.STEPS)
            self.assertGreater(st.bytes_pushed, self.STEPS * 4 * (W.size + b.size))
            self.assertGreater(st.bytes_pulled, self.STEPS * 4 * (W.size + b.size))
        self.assertFalse(np.array_equal(W, init_weights()[0]), "the model did not train")
        d = res[0][2].as_dict()
        self.assertEqual(set(d), {"bytes_pushed", "bytes_pulled", "requests", "version",
                                  "resyncs", "map_changes", "reprobes", "pulls",
                                  "staleness_last", "staleness_max", "staleness_sum"})
        self.assertEqual(d["staleness_max"], 0)  # sync mode: never stale


class TrainMomentum(unittest.TestCase):
    """The optimizer keywords reach the servers: two ranks with momentum
    and a step lr schedule equal the textbook update in float64 on the
    averaged gradients (1e-6 relative), and lr() follows the schedule."""

    STEPS, BATCH = 12, 16

    def rank_main(self, url, rank, batches):
        W, b = init_weights()
        with ferry.Client(url, rank, lr=LR, timeout_ms=20000, optimizer="momentum",
                          momentum=0.8, lr_schedule="step", lr_step_every=5,
                          lr_gamma=0.5) as c:
            c.declare({"W": W, "b": b})
            if rank == 0:
                c.init_weights([W, b])
            c.pull([W, b])
            self.assertEqual(c.lr(), LR)
            for x, y in batches[rank]:
                gW, gb = softmax_grads(W, b, x, y)
                c.push_pull({"W": gW, "b": gb}, len(y), [W, b])
            self.assertAlmostEqual(c.lr(), LR * 0.25, delta=1e-15)  # 12 // 5 decays
            return W.copy(), b.copy()

    def test_momentum_equals_reference(self):
        batches = [TrainTwoRanks.batches(self, r) for r in (0, 1)]
        with LocalJob(trainers=2) as job:
            res = run_ranks(lambda r: self.rank_main(job.url, r, batches), 2)
        W0, b0 = init_weights()
        W, b = W0.astype(np.float64), b0.astype(np.float64)
        vW, vb = np.zeros_like(W), np.zeros_like(b)
        for k, ((x0, y0), (x1, y1)) in enumerate(zip(*batches)):
            # the servers see the float32 gradients the ranks computed
            Wf, bf = W.astype(np.float32), b.astype(np.float32)
            g0, g1 = softmax_grads(Wf, bf, x0, y0), softmax_grads(Wf, bf, x1, y1)
            n = len(y0) + len(y1)
            lr = LR * 0.5 ** (k // 5)
            vW = 0.8 * vW + (g0[0] + g1[0]).astype(np.float64) / n
            vb = 0.8 * vb + (g0[1] + g1[1]).astype(np.float64) / n
            W, b = W - lr * vW, b - lr * vb
        for rW, rb in res:
            self.assertLess(np.linalg.norm(rW - W), 1e-5 * np.linalg.norm(W))
            self.assertLess(np.linalg.norm(rb - b), 1e-5 * np.linalg.norm(b) + 1e-7)

    def test_bad_optimizer_options(self):
        for kw, pat in (({"optimizer": "lamb"}, "optimizer 'lamb'"),
                        ({"optimizer": "adam", "beta2": 1.0}, "beta2"),
                        ({"lr_schedule": "cosine"}, "lr-total-steps"),
                        ({"clip_norm": -1.0}, "clip_norm"),
                        ({"lr_warmup": -1}, "lr_warmup")):
            with self.assertRaisesRegex(ferry.InvalidArgument, pat):
                ferry.Client("tcp://127.0.0.1:9", 0, **kw)


class Errors(unittest.TestCase):
    """Every failure reaches Python as the ferry.Error subclass of its code,
    with the reason."""

    def test_error_classes_cover_every_code(self):
        seen = set()
        for code in range(1, 14):
            cls = ferry.error_class(code)
            self.assertTrue(issubclass(cls, ferry.Error))
            self.assertEqual(cls.code, code)
            self.assertNotIn(cls, seen)
            seen.add(cls)
            e = cls("push", "why")
            self.assertEqual(e.code, code)
            self.assertIn(ferry.strerror(code), str(e))
            self.assertIn("why", str(e))
        self.assertIs(ferry.error_class(99), ferry.Error)
        self.assertTrue(issubclass(ferry.TimedOut, TimeoutError))
        self.assertTrue(issubclass(ferry.ConnectError, ConnectionError))
        self.assertTrue(issubclass(ferry.InvalidArgument, ValueError))

    def test_bad_codec_is_invalid_argument_with_reason(self):
        with self.assertRaises(ferry.InvalidArgument) as cm:
            ferry.Client("tcp://127.0.0.1:9", 0, codec_push="q3")
        self.assertEqual(cm.exception.code, 1)
        self.assertIn("codec_push 'q3'", str(cm.exception))
        with self.assertRaisesRegex(ferry.InvalidArgument, "codec_pull"):
            ferry.Client("tcp://127.0.0.1:9", 0, codec_pull="bogus")

    def test_bad_options(self):
        for kw, pat in (({"mode": "bsp"}, "mode"), ({"lr": -1.0}, "lr"),
                        ({"timeout_ms": -5}, "timeout_ms"), ({"bucket": 1 << 40}, "bucket")):
            with self.assertRaisesRegex(ferry.InvalidArgument, pat):
                ferry.Client("tcp://127.0.0.1:9", 0, **kw)
        with self.assertRaisesRegex(ferry.InvalidArgument, "rank"):
            ferry.Client("tcp://127.0.0.1:9", -1)
        with self.assertRaisesRegex(ferry.InvalidArgument, "scheduler_url"):
            ferry.Client("", 0)
        with self.assertRaisesRegex(ferry.InvalidArgument, "/nonexistent/job.key"):
            ferry.Client("tcp://127.0.0.1:9", 0, secret_file="/nonexistent/job.key")

    def test_call_before_declare_is_state_error(self):
        c = ferry.Client("tcp://127.0.0.1:9", 0)
        with self.assertRaises(ferry.StateError):
            c.push([np.zeros(1, np.float32)], 1)
        with self.assertRaises(ferry.StateError):
            c.leave()  # the library's own ESTATE
        c.close()

    def test_closed_client(self):
        c = ferry.Client("tcp://127.0.0.1:9", 0)
        c.close()
        c.close()  # idempotent
        with self.assertRaises(ferry.ClosedError) as cm:
            c.pull([np.zeros(1, np.float32)])
        self.assertEqual(cm.exception.code, 10)

    def test_dead_scheduler_times_out(self):
        with LocalJob(trainers=1) as job:
            job.kill_scheduler()
            t = time.monotonic()
            with ferry.Client(job.url, 0, timeout_ms=400) as c:
                with self.assertRaises(ferry.TimedOut) as cm:
                    c.declare({"w": 4})
            self.assertIsInstance(cm.exception, TimeoutError)
            self.assertEqual(cm.exception.code, 4)
            self.assertEqual(cm.exception.op, "declare")
            self.assertLess(time.monotonic() - t, 10)

    def test_rank_out_of_range_is_remote_error_with_message(self):
        with LocalJob(trainers=1) as job:
            with ferry.Client(job.url, 5, timeout_ms=5000) as c:
                with self.assertRaises(ferry.RemoteError) as cm:
                    c.declare({"w": 4})
        self.assertEqual(cm.exception.code, 5)
        self.assertTrue(cm.exception.message, "the scheduler's reason is carried")

    def test_different_table_is_mismatch(self):
        with LocalJob(trainers=2) as job:
            first = ferry.Client(job.url, 0, timeout_ms=1500)
            t = threading.Thread(target=lambda: self.assertRaises(ferry.Error, first.declare,
                                                                  {"w": 4}))
            t.start()
            time.sleep(0.3)  # rank 0's table becomes the job's
            with ferry.Client(job.url, 1, timeout_ms=5000) as c:
                with self.assertRaises(ferry.MismatchError) as cm:
                    c.declare({"w": 5})
            t.join()
            first.close()
        self.assertEqual(cm.exception.code, 7)


class Arrays(unittest.TestCase):
    """Arrays must be usable in place: float32, C-contiguous, the declared
    length (writable for pulls); anything else is a clear InvalidArgument
    and leaves the client usable."""

    @classmethod
    def setUpClass(cls):
        cls.job = LocalJob(trainers=1)
        cls.c = ferry.Client(cls.job.url, 0, timeout_ms=10000)
        cls.w = np.zeros(6, np.float32)
        cls.c.declare({"w": cls.w, "v": 2})
        cls.v = np.zeros(2, np.float32)
        cls.c.init_weights([cls.w, cls.v])
        cls.c.pull([cls.w, cls.v])

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.job.stop()

    def bad(self, arrays, pattern, op="push_pull"):
        with self.assertRaisesRegex(ferry.InvalidArgument, pattern) as cm:
            if op == "pull":
                self.c.pull(arrays)
            else:
                self.c.push_pull(arrays, 1, [self.w, self.v])
        self.assertEqual(cm.exception.code, 1)

    def test_wrong_dtype(self):
        self.bad([np.zeros(6), self.v], "'w': dtype <f8, want float32")
        self.bad([np.zeros(6, np.float16), self.v], "dtype <f2")
        self.bad([np.zeros(6, ">f4"), self.v], "dtype >f4")

    def test_not_contiguous(self):
        self.bad([np.zeros(12, np.float32)[::2], self.v], "not C-contiguous")
        self.bad([np.zeros((3, 2), np.float32).T, self.v], "not C-contiguous")

    def test_wrong_length(self):
        self.bad([np.zeros(5, np.float32), self.v], "'w': 5 elements, want 6")
        self.bad([self.w], "1 arrays for 2 declared tensors")
        self.bad({"w": self.w}, "no array for tensor 'v'")

    def test_not_an_array(self):
        self.bad([[0.0] * 6, self.v], "a list is not an array")
        self.bad(3, "want a list of 2 arrays")

    def test_read_only_pull_target(self):
        ro = np.zeros(6, np.float32)
        ro.flags.writeable = False
        self.bad([ro, self.v], "read-only", op="pull")

    def test_bad_sample_count(self):
        for n in (0, -1, 1 << 32, 2.0):
            with self.assertRaisesRegex(ferry.InvalidArgument, "n_samples"):
                self.c.push([self.w, self.v], n)

    def test_in_place_and_usable_after_errors(self):
        self.bad([np.zeros(6), self.v], "dtype")
        before = self.c.stats().version
        g = np.ones((2, 3), np.float32)  # any shape of the right size
        w2 = self.w.reshape(2, 3)  # a view: the pull lands in self.w
        out = self.c.push_pull([g, np.zeros(2, np.float32)], 10, [w2, self.v])
        self.assertIs(out[0], w2)
        self.assertEqual(self.c.stats().version, before + 1)
        self.assertTrue(np.all(self.w < 0))  # w -= 0.1 * 1 / 10, in place
        got = self.c.pull()  # fresh arrays when none are given
        np.testing.assert_array_equal(got[0], self.w)
        self.assertEqual(got[1].dtype, np.float32)


class Leaving(unittest.TestCase):
    def test_with_block_leaves_on_exception(self):
        """A rank whose loop dies inside `with` leaves the job: the other
        rank's sync rounds complete without it, well before its deadline."""
        with LocalJob(trainers=2) as job:
            def rank(r):
                w = np.zeros(3, np.float32)
                if r == 1:
                    with self.assertRaises(RuntimeError):
                        with ferry.Client(job.url, 1, timeout_ms=20000) as c:
                            c.declare({"w": w})
                            c.pull([w])
                            raise RuntimeError("the trainer's own bug")
                    return None
                with ferry.Client(job.url, 0, timeout_ms=20000) as c:
                    c.declare({"w": w})
                    c.init_weights([w])
                    c.pull([w])
                    t = time.monotonic()
                    for _ in range(3):
                        c.push_pull([np.ones(3, np.float32)], 1, [w])
                    return time.monotonic() - t, w.copy()

            took, w = run_ranks(rank, 2)[0]
        self.assertLess(took, 10)
        np.testing.assert_allclose(w, -0.3 * np.ones(3), rtol=1e-6)


if __name__ == "__main__":
    unittest.main()
