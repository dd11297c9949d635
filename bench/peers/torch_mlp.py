#!/usr/bin/python3
"""torch_mlp.py - the PyTorch peers of Ferry's end-to-end benchmark.

Trains the same job as `trainer` (Fashion-MNIST, MLP 784-256-128-10, ReLU,
softmax cross-entropy, Kaiming-uniform weights bound sqrt(6/fan_in), zero
biases, pixels / 255, plain SGD lr 0.1 (or --optimizer momentum, nesterov,
adam, adamw, adagrad: torch.optim's), batch 64 per worker, each worker on a
seeded contiguous slice of a seeded permutation, reshuffled per epoch) with
one of three PyTorch set-ups, CPU only, one thread per process:

  single  one process, batch 64
  ddp     DistributedDataParallel, gloo, --world processes (default 2)
  rpc     torch.distributed.rpc parameter server: 1 server process holds the
          weights, --world trainers push gradients and get the averaged,
          updated weights back (synchronous averaging, like Ferry's sync mode)

Output mirrors the trainer's: progress lines `step N | train_loss ... |
test_loss ... | test_acc ... | step X ms | sent Y MB` from rank 0, then one
`{"summary": {...}}` line per trainer with the same keys (plus "system").
--curve FILE writes step,wall_s,train_loss,test_loss,test_acc,bytes_sent.
bytes_sent counts tensor payload only: rpc = gradients pushed; ddp = the
ring all-reduce estimate 2*(W-1)/W * model bytes per step; single = 0.

Usage: /usr/bin/python3 bench/peers/torch_mlp.py --mode ddp --epochs 3
"""
import argparse
import gzip
import json
import os
import struct
import sys
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS = [784, 256, 128, 10]


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def load_data(d):
    def xs(name):
        a = load_idx(os.path.join(d, name))
        return torch.from_numpy(a.reshape(a.shape[0], -1).astype(np.float32) / 255.0)

    def ys(name):
        return torch.from_numpy(load_idx(os.path.join(d, name)).astype(np.int64))

    return (xs("train-images-idx3-ubyte.gz"), ys("train-labels-idx1-ubyte.gz"),
            xs("t10k-images-idx3-ubyte.gz"), ys("t10k-labels-idx1-ubyte.gz"))


class MLP(nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.fcs = nn.ModuleList(
            nn.Linear(LAYERS[i], LAYERS[i + 1]) for i in range(len(LAYERS) - 1))
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for fc in self.fcs:
                bound = (6.0 / fc.in_features) ** 0.5
                fc.weight.copy_((torch.rand(fc.weight.shape, generator=g) * 2 - 1) * bound)
                fc.bias.zero_()

    def forward(self, x):
        for fc in self.fcs[:-1]:
            x = F.relu(fc(x))
        return self.fcs[-1](x)


def partition(n, rank, world, seed):
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n * rank // world: n * (rank + 1) // world]


def epoch_order(part, epoch, seed, rank):
    g = torch.Generator().manual_seed(seed * 1000003 + epoch * 101 + rank)
    return part[torch.randperm(len(part), generator=g)]


def evaluate(model, xt, yt):
    with torch.no_grad():
        out = model(xt)
        loss = F.cross_entropy(out, yt).item()
        acc = (out.argmax(1) == yt).float().mean().item()
    return loss, acc


class Reporter:
    """Progress lines, curve rows and the summary, shaped like trainer's."""

    def __init__(self, args, rank, world, mode):
        self.a, self.rank, self.world, self.mode = args, rank, world, mode
        self.curve = None
        if args.curve and rank == 0:
            self.curve = open(args.curve, "w")
            self.curve.write("step,wall_s,train_loss,test_loss,test_acc,bytes_sent\n")
        self.t0 = time.perf_counter()
        self.eval_s = 0.0
        self.iv_loss = 0.0
        self.iv_n = 0
        self.iv_t = 0.0
        self.iv_steps = 0
        self.test = None
        self.bytes_sent = 0
        self.bytes_recv = 0

    def report(self, step, model, xt, yt):
        if self.rank == 0:
            t = time.perf_counter()
            self.test = evaluate(model, xt, yt)
            self.eval_s += time.perf_counter() - t
        wall = time.perf_counter() - self.t0
        loss = self.iv_loss / self.iv_n if self.iv_n else float("nan")
        ms = self.iv_t * 1e3 / self.iv_steps if self.iv_steps else 0.0
        if self.rank == 0:
            print(f"step {step} | train_loss {loss:.4f} | test_loss {self.test[0]:.4f}"
                  f" | test_acc {self.test[1]:.4f} | step {ms:.1f} ms"
                  f" | sent {self.bytes_sent * 1e-6:.2f} MB", flush=True)
        if self.curve:
            self.curve.write(f"{step},{wall:.6f},{loss:.6f},{self.test[0]:.6f},"
                             f"{self.test[1]:.6f},{self.bytes_sent}\n")
            self.curve.flush()
        self.iv_loss = self.iv_t = 0.0
        self.iv_n = self.iv_steps = 0

    def summary(self, steps, samples, spe):
        wall = time.perf_counter() - self.t0
        s = {"epochs": steps / spe, "steps": steps, "samples": samples,
             "wall_s": round(wall, 3), "samples_per_s": round(samples / wall, 1)}
        if self.rank == 0 and self.test:
            s["test_acc"] = round(self.test[1], 4)
            s["test_loss"] = round(self.test[0], 4)
        s.update({"bytes_pushed": self.bytes_sent, "bytes_pulled": self.bytes_recv,
                  "rank": self.rank, "trainers": self.world,
                  "eval_s": round(self.eval_s, 3), "batch": self.a.batch,
                  "mode": "sync", "device": "cpu", "system": "torch-" + self.mode})
        print(json.dumps({"summary": s}), flush=True)


def model_bytes(model):
    return sum(p.numel() * 4 for p in model.parameters())


def train_loop(args, rank, world, mode, model, step_fn, traffic=None):
    """Shared loop: step_fn(loss_tensor) does backward + update + comms.
    traffic, when given, returns the (bytes sent, bytes received) counted
    by the transport itself (torch_ferry.py: libferry's stats); it is read
    at each report instead of estimating bytes per step."""
    xs, ys, xt, yt = load_data(args.data)
    part = partition(xs.shape[0], rank, world, args.seed)
    spe = (xs.shape[0] // world) // args.batch
    rep = Reporter(args, rank, world, mode)
    if mode == "ddp":
        per_step = int(2 * (world - 1) / world * model_bytes(model))
    elif mode == "rpc":
        per_step = model_bytes(model)
    else:  # single; or traffic() counts them
        per_step = 0
    step = samples = 0
    rep.t0 = time.perf_counter()
    for e in range(args.epochs):
        order = epoch_order(part, e, args.seed, rank)
        for k in range(spe):
            if args.max_steps and step >= args.max_steps:
                break
            ts = time.perf_counter()
            idx = order[k * args.batch:(k + 1) * args.batch]
            out = model(xs[idx])
            loss = F.cross_entropy(out, ys[idx])
            step_fn(loss)
            step += 1
            samples += args.batch
            rep.bytes_sent += per_step
            rep.bytes_recv += per_step
            rep.iv_loss += loss.item() * args.batch
            rep.iv_n += args.batch
            rep.iv_steps += 1
            rep.iv_t += time.perf_counter() - ts
            if args.log_interval and step % args.log_interval == 0:
                if traffic:
                    rep.bytes_sent, rep.bytes_recv = traffic()
                rep.report(step, model, xt, yt)
        if rep.iv_steps:
            if traffic:
                rep.bytes_sent, rep.bytes_recv = traffic()
            rep.report(step, model, xt, yt)
    if traffic:
        rep.bytes_sent, rep.bytes_recv = traffic()
    rep.summary(step, samples, spe)


def make_optimizer(params, args):
    """torch.optim's counterpart of the trainer's --optimizer (the rules
    Ferry's servers implement, docs/algorithms.md section 5)."""
    if args.optimizer == "momentum":
        return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)
    if args.optimizer == "nesterov":
        return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum,
                               nesterov=True)
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    if args.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=args.lr, eps=1e-8)
    return torch.optim.SGD(params, lr=args.lr)


def run_single(args):
    torch.set_num_threads(1)
    model = MLP(args.seed)
    opt = make_optimizer(model.parameters(), args)

    def step(loss):
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    train_loop(args, 0, 1, "single", model, step)


def ddp_worker(rank, args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    model = DDP(MLP(args.seed))
    opt = make_optimizer(model.parameters(), args)

    def step(loss):
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP averages the gradients across ranks here
        opt.step()

    dist.barrier()
    train_loop(args, rank, args.world, "ddp", model, step)
    dist.barrier()
    dist.destroy_process_group()


# --- rpc parameter server -------------------------------------------------
# The server process holds PS_STATE; trainers call ps_push_pull by RPC. A
# round completes when every trainer of the job pushed: the server averages
# the gradients, applies SGD and answers every parked call with the new
# weights (torch.futures + async_execution: no thread blocks per trainer).
PS_STATE = None


class ParamServer:
    def __init__(self, seed, lr, world):
        self.model = MLP(seed)
        self.lr = lr
        self.world = world
        self.lock = threading.Lock()
        self.acc = None
        self.count = 0
        self.fut = torch.futures.Future()

    def weights(self):
        return [p.detach().clone() for p in self.model.parameters()]


def ps_get_weights():
    return PS_STATE.weights()


@torch.distributed.rpc.functions.async_execution
def ps_push_pull(grads):
    ps = PS_STATE
    with ps.lock:
        if ps.acc is None:
            ps.acc = [g.clone() for g in grads]
        else:
            for a, g in zip(ps.acc, grads):
                a.add_(g)
        ps.count += 1
        fut = ps.fut
        if ps.count == ps.world:
            with torch.no_grad():
                for p, a in zip(ps.model.parameters(), ps.acc):
                    p.sub_(a, alpha=ps.lr / ps.world)
            ps.acc = None
            ps.count = 0
            ps.fut = torch.futures.Future()
            fut.set_result(ps.weights())
    return fut


def rpc_worker(rank, args):
    import torch.distributed.rpc as rpc
    global PS_STATE
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=600)
    if rank == 0:
        PS_STATE = ParamServer(args.seed, args.lr, args.world)
        rpc.init_rpc("ps", rank=0, world_size=args.world + 1, rpc_backend_options=opts)
        rpc.shutdown()
        return
    trank = rank - 1
    rpc.init_rpc(f"trainer{trank}", rank=rank, world_size=args.world + 1,
                 rpc_backend_options=opts)
    model = MLP(args.seed)
    params = list(model.parameters())

    def load(ws):
        with torch.no_grad():
            for p, w in zip(params, ws):
                p.copy_(w)

    load(rpc.rpc_sync("ps", ps_get_weights))

    def step(loss):
        for p in params:
            p.grad = None
        loss.backward()
        load(rpc.rpc_sync("ps", ps_push_pull, args=([p.grad for p in params],)))

    train_loop(args, trank, args.world, "rpc", model, step)
    rpc.shutdown()


def add_job_args(ap):
    """The job's options that every peer shares (torch_ferry.py too), so
    that the same flags mean the same training run."""
    ap.add_argument("--world", type=int, default=2, help="trainer processes (not single)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--log-interval", type=int, default=100)
    ap.add_argument("--curve", default=None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["single", "ddp", "rpc"], default="single")
    add_job_args(ap)
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--optimizer", default="sgd",
                    choices=["sgd", "momentum", "nesterov", "adam", "adamw",
                             "adagrad"],
                    help="torch.optim rule (single and ddp; rpc is SGD)")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--rank", type=int, default=-1,
                    help="ddp: run only this rank here (one process per host, e.g. "
                    "per network namespace of bench/links); default: spawn all")
    ap.add_argument("--master-addr", default="127.0.0.1",
                    help="ddp: rank 0's address (with --rank)")
    args = ap.parse_args()
    if args.mode == "rpc" and args.optimizer != "sgd":
        ap.error("--mode rpc applies SGD only; use single or ddp")
    if args.mode == "single":
        run_single(args)
        return
    import torch.multiprocessing as mp
    if args.mode == "ddp" and args.rank >= 0:
        ddp_worker(args.rank, args)
    elif args.mode == "ddp":
        mp.spawn(ddp_worker, args=(args,), nprocs=args.world, join=True)
    else:
        mp.spawn(rpc_worker, args=(args,), nprocs=args.world + 1, join=True)


if __name__ == "__main__":
    sys.exit(main())
