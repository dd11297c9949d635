#!/usr/bin/python3
"""torch_cnn.py - a small CNN on Fashion-MNIST, trained through Ferry or DDP.

A plain PyTorch training loop (conv 1->16 5x5, ReLU, max-pool 2, conv
16->32 5x5, ReLU, max-pool 2, linear 512->10; softmax cross-entropy; SGD)
with two ways to run it on several processes:

  ferry  the servers of a Ferry job apply SGD: the loop is the standard one
         with only its optimizer line changed, to
             opt = ferry.torch.Optimizer(model.parameters(), client)
         Start it with the launcher (scheduler, servers and trainers):
             python3 -m ferry.run --trainers 2 examples/torch_cnn.py
         With --local-steps H the job takes local steps (DiLoCo): each
         trainer runs H steps of its own --inner optimizer at --lr, then
         the servers apply the outer one (--outer-optimizer, --outer-lr,
         default Nesterov at 0.7) to the averaged weight changes:
             opt = ferry.torch.LocalSteps(net.parameters(), client, inner)
  ddp    torch.distributed + DistributedDataParallel + torch.optim.SGD
         (gloo on CPU, nccl on CUDA). It spawns its own --ddp-world ranks
         on loopback, or runs as one rank under torch.distributed.run:
             python3 examples/torch_cnn.py --backend ddp --ddp-world 2

Both use the same model and initial weights (--seed), the same data
partition (each rank a contiguous slice of a seeded permutation,
reshuffled each epoch), the same per-rank --batch and --lr: the update is
the same mean gradient times lr, so the two train alike. Rank 0 evaluates
the 10k test images after the last step and prints, as its last stdout
line, {"summary": {...}} with test_acc, samples_per_s (the job's samples,
all ranks, over the training wall time), trainers, device, backend,
epochs and steps.

The data: the four idx files of Fashion-MNIST in --data (default
/usr/share/datasets/fashion-mnist; train-images-idx3-ubyte.gz, ...).
One thread per process on CPU (--threads).
"""
import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)   # 28 -> 24, pooled to 12
        self.conv2 = nn.Conv2d(16, 32, 5)  # 12 -> 8, pooled to 4
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data(d):
    """(train images, train labels, test images, test labels): images as
    float32 N x 1 x 28 x 28 in [0, 1], labels int64."""
    def images(name):
        a = load_idx(os.path.join(d, name))
        return torch.from_numpy(a.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)

    def labels(name):
        return torch.from_numpy(load_idx(os.path.join(d, name)).astype(np.int64))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def evaluate(model, xt, yt):
    """(mean loss, accuracy) over the test set, in chunks."""
    loss = correct = 0.0
    with torch.no_grad():
        for i in range(0, len(xt), 1000):
            out = model(xt[i:i + 1000])
            loss += F.cross_entropy(out, yt[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == yt[i:i + 1000]).sum().item()
    return loss / len(xt), correct / len(xt)


def train(args, rank, world, make_optimizer):
    """The loop every backend runs; make_optimizer(model) wraps the model
    (DDP) and returns (model to call, optimizer, extra summary keys)."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    xs, ys, xt, yt = load_data(args.data)
    xs, ys, xt, yt = xs.to(device), ys.to(device), xt.to(device), yt.to(device)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    net = Net().to(device)
    model, opt, extra = make_optimizer(net, device)
    n = len(xs)
    part = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed))
    part = part[n * rank // world:n * (rank + 1) // world]
    spe = len(part) // args.batch  # steps per epoch
    steps = spe * args.epochs
    if args.max_steps:
        steps = min(steps, args.max_steps)
    step = 0
    iv_loss = 0.0
    t0 = time.perf_counter()
    while step < steps:
        g = torch.Generator().manual_seed(args.seed * 1000003 + (step // spe) * 101 + rank)
        order = part[torch.randperm(len(part), generator=g)].to(device)
        for k in range(spe):
            if step >= steps:
                break
            idx = order[k * args.batch:(k + 1) * args.batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            step += 1
            if args.log_interval:
                iv_loss += loss.item()
                if step % args.log_interval == 0 and rank == 0:
                    print(f"step {step} | train_loss {iv_loss / args.log_interval:.4f}"
                          f" | {time.perf_counter() - t0:.1f} s", flush=True)
                    iv_loss = 0.0
    if getattr(opt, "phase_steps", 0):
        opt.round()  # local steps: end on the global weights, every rank alike
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    if rank != 0:
        return
    test_loss, test_acc = evaluate(net, xt, yt)
    s = {"system": f"torch-{args.backend}", "model": "cnn", "backend": args.backend,
         "test_acc": round(test_acc, 4), "test_loss": round(test_loss, 4),
         "samples_per_s": round(steps * args.batch * world / train_s, 1),
         "train_s": round(train_s, 3), "trainers": world, "device": device.type,
         "epochs": round(steps / spe, 3), "steps": steps, "batch": args.batch,
         "lr": args.lr, "seed": args.seed, "threads": args.threads}
    s.update({k: v() if callable(v) else v for k, v in extra.items()})
    print(json.dumps({"summary": s}), flush=True)


def run_ferry(args):
    """One trainer of a Ferry job started by python3 -m ferry.run."""
    import ferry
    import ferry.run
    import ferry.torch

    env = ferry.run.env()  # FERRY_SCHEDULER, FERRY_RANK, FERRY_TRAINERS
    bucket = {} if args.bucket_mb is None else {"bucket_mb": args.bucket_mb}
    job = {"lr": args.lr}
    if args.local_steps:  # the Client's optimizer and lr are the outer ones
        job = {"local_steps": args.local_steps, "inner_lr": args.lr,
               "optimizer": args.outer_optimizer, "lr": args.outer_lr}
    with ferry.Client(env.scheduler, env.rank, codec_push=args.codec_push,
                      codec_pull=args.codec_pull, **job) as client:
        def make(net, device):
            if args.local_steps:
                inner = make_inner(args, net.parameters())
                opt = ferry.torch.LocalSteps(net.parameters(), client, inner,
                                             n_samples=args.batch)
                return net, opt, {"local_steps": args.local_steps, "inner": args.inner,
                                  "outer_optimizer": args.outer_optimizer,
                                  "outer_lr": args.outer_lr,
                                  "outer_rounds": lambda: opt.rounds}
            # The one line a DDP loop changes: the servers apply SGD.
            opt = ferry.torch.Optimizer(net.parameters(), client, n_samples=args.batch,
                                        overlap=args.overlap, **bucket)
            return net, opt, {"overlap": args.overlap, "bucket_mb": args.bucket_mb,
                              "codec": f"{args.codec_push}/{args.codec_pull}"}

        train(args, env.rank, env.trainers, make)


def make_inner(args, params):
    """The inner optimizer of a local-steps job, at --lr."""
    if args.inner == "adamw":
        return torch.optim.AdamW(params, lr=args.lr)
    return torch.optim.SGD(params, lr=args.lr, momentum=0.9 if args.inner == "momentum" else 0.0)


def run_ddp(rank, world, args):
    """One DDP rank (MASTER_ADDR/MASTER_PORT in the environment)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    # NCCL wants a GPU per rank; ranks sharing one GPU go through gloo,
    # which reduces CUDA tensors too.
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    backend = "nccl" if gpus >= world else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)

    def make(net, device):
        model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
        dist.barrier()
        return model, torch.optim.SGD(model.parameters(), lr=args.lr), {"dist": backend}

    try:
        train(args, rank, world, make)
    finally:
        dist.destroy_process_group()


def ddp_spawned(rank, world, args):
    run_ddp(rank, world, args)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["ferry", "ddp"], default="ferry")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many (0: epochs)")
    ap.add_argument("--batch", type=int, default=64, help="per trainer")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--overlap", action="store_true",
                    help="ferry: push each gradient from backward's hooks")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="ferry --overlap: MiB of gradients per push (default the Optimizer's)")
    ap.add_argument("--codec-push", default="none", help="ferry: gradient codec")
    ap.add_argument("--codec-pull", default="none", help="ferry: weight-delta codec")
    ap.add_argument("--local-steps", type=int, default=0,
                    help="ferry: inner steps per outer round (0: a push per step)")
    ap.add_argument("--inner", choices=["sgd", "momentum", "adamw"], default="sgd",
                    help="ferry --local-steps: the trainers' optimizer, at --lr")
    ap.add_argument("--outer-optimizer", choices=["sgd", "momentum", "nesterov"],
                    default="nesterov", help="ferry --local-steps: the servers' optimizer")
    ap.add_argument("--outer-lr", type=float, default=0.7,
                    help="ferry --local-steps: the servers' lr")
    ap.add_argument("--ddp-world", type=int, default=2,
                    help="ddp: ranks to spawn (not under torch.distributed.run)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--log-interval", type=int, default=0, help="rank 0's train loss every N")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    if args.backend == "ferry":
        run_ferry(args)
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torch.distributed.run
        run_ddp(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        import torch.multiprocessing as mp
        mp.spawn(ddp_spawned, args=(args.ddp_world, args), nprocs=args.ddp_world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
