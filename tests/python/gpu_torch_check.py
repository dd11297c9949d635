"""ferry.torch on a GPU against the same job on the CPU (run by hand on a
machine with CUDA; exits 77 where torch sees no CUDA device).

    FERRY_LIB=build/clients/libferry.so FERRY_PS_SERVER=build/ps/ps-server \\
    PYTHONPATH=python python3 tests/python/gpu_torch_check.py

Trains a small MLP (with a BatchNorm, whose buffers are averaged) for 5
sync steps with 2 ranks as threads, through ferry.torch.Optimizer, with
the parameters on cuda and on cpu, and compares the final weights as the
C trainer's trainer_gpu_vs_cpu test does (tests/trainer/gpu_vs_cpu.sh):
the two ranks of a job bit for bit; cpu vs cuda within 1e-5 with no codec
and within 1e-3 with q8 both ways (a rounding difference may move a code
by one step). The cuda runs use whatever exchange the Optimizer picks
("device": libferry_cuda, or "staged"), and once more forced to "staged".
Prints one JSON line {"gpu_torch_check": {...}} with the figures; exits 0
when every bound holds, else 1.
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch  # noqa: E402
except ImportError:
    print("gpu_torch_check: SKIP: no torch", file=sys.stderr)
    sys.exit(77)

if not torch.cuda.is_available():
    print("gpu_torch_check: SKIP: torch sees no CUDA device", file=sys.stderr)
    sys.exit(77)

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ferry  # noqa: E402
from ferry.torch import Optimizer  # noqa: E402
from job import LocalJob, run_ranks  # noqa: E402

STEPS, BATCH, LR = 5, 64, 0.1
BOUND = {"none": 1e-5, "q8": 1e-3}
_INIT = threading.Lock()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        with _INIT:
            torch.manual_seed(7)
            self.fc1 = nn.Linear(32, 64)
            self.bn = nn.BatchNorm1d(64)
            self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x))))


def data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(STEPS * BATCH, 32, generator=g)
    y = torch.randint(0, 10, (STEPS * BATCH,), generator=g)
    return [(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]) for i in range(STEPS)]


def trainer(url, rank, device, codec, exchange):
    model = Net().to(device)
    batches = [(x.to(device), y.to(device)) for x, y in data(rank)]
    with ferry.Client(url, rank, lr=LR, codec_push=codec, codec_pull=codec,
                      timeout_ms=60000) as c:
        opt = Optimizer(model.parameters(), c, n_samples=BATCH, module=model,
                        exchange=exchange)
        t0 = time.perf_counter()
        for x, y in batches:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        w = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]
                      + [b.detach().reshape(-1).float().cpu() for b in model.buffers()])
        used = opt.exchange
        opt.close()
        return w, used, STEPS / dt


def job(device, codec, exchange="auto"):
    with LocalJob(trainers=2) as j:
        out = run_ranks(lambda r: trainer(j.url, r, device, codec, exchange), 2)
    (w0, used, sps), (w1, _, _) = out
    return w0, torch.equal(w0, w1), used, sps


def main():
    torch.set_num_threads(1)
    figs, ok = {"device_name": torch.cuda.get_device_name(0), "torch": torch.__version__}, True
    for codec in ("none", "q8"):
        cpu, cpu_same, _, cpu_sps = job("cpu", codec)
        for exchange in ("auto", "staged"):
            gpu, gpu_same, used, gpu_sps = job("cuda", codec, exchange)
            d = (gpu - cpu).abs().max().item()
            figs[f"{codec}.{exchange}"] = {"exchange": used, "max_abs_dw": d,
                                           "bound": BOUND[codec], "ranks_equal_cuda": gpu_same,
                                           "ranks_equal_cpu": cpu_same,
                                           "steps_per_s_cuda": round(gpu_sps, 1),
                                           "steps_per_s_cpu": round(cpu_sps, 1)}
            ok = ok and gpu_same and cpu_same and d <= BOUND[codec]
    figs["ok"] = ok
    print(json.dumps({"gpu_torch_check": figs}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
