#!/usr/bin/python3
"""torch_transformer.py - a small character-level transformer language model,
trained through Ferry or DDP.

A decoder-only transformer (learned token and position embeddings, --layers
pre-norm blocks of causal self-attention and a ReLU MLP, no dropout) learns
to predict the next character of a text that every Debian system ships
(--text, default /usr/share/common-licenses/GPL-3): the first 90% trains,
the last 10% validates. A plain PyTorch loop with SGD and two ways to run
it on several processes:

  ferry  the servers of a Ferry job apply SGD: the loop is the standard one
         with only its optimizer line changed, to
             opt = ferry.torch.Optimizer(model.parameters(), client)
         Start it with the launcher (scheduler, servers and trainers):
             python3 -m ferry.run --trainers 2 examples/torch_transformer.py
  ddp    torch.distributed + DistributedDataParallel + torch.optim.SGD
         (gloo on CPU, nccl on CUDA). It spawns its own --ddp-world ranks
         on loopback, or runs as one rank under torch.distributed.run:
             python3 examples/torch_transformer.py --backend ddp --ddp-world 2

Both use the same model and initial weights (--seed), the same batches
(rank r draws --batch windows of --context characters at random offsets
of the training text from a generator seeded by --seed and r), the same
--lr: the update is the same mean gradient times lr, so the two train
alike. An epoch is as many steps as it takes the job to draw as many
characters as the training text holds; --max-steps caps it (default
300). Rank 0 computes the loss on every --context window of the
validation text after the last step and prints, as its last stdout
line, {"summary": {...}} with val_loss (nats per character),
samples_per_s (windows of the job, all ranks, over the training wall
time), tokens_per_s, trainers, device, backend, epochs and steps.
One thread per process on CPU (--threads).
"""
import argparse
import json
import math
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CharLM(nn.Module):
    def __init__(self, vocab, context, dim, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self._mask = None  # causal; not a buffer (nothing to share)

    def forward(self, idx):
        t = idx.shape[1]
        if self._mask is None or self._mask.shape[0] != t or self._mask.device != idx.device:
            self._mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), 1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.norm(self.blocks(x, mask=self._mask)))


def load_text(path):
    """(train ids, validation ids, vocabulary size): the text's characters
    as indices into its sorted character set."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    chars = sorted(set(text))
    code = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([code[c] for c in text], dtype=torch.int64)
    cut = len(ids) * 9 // 10
    return ids[:cut], ids[cut:], len(chars)


def val_loss(model, val, context):
    """Mean next-character loss over every whole window of val."""
    n = (len(val) - 1) // context
    x = val[:n * context].view(n, context)
    y = val[1:n * context + 1].view(n, context)
    loss = 0.0
    with torch.no_grad():
        for i in range(0, n, 64):
            out = model(x[i:i + 64])
            loss += F.cross_entropy(out.flatten(0, 1), y[i:i + 64].flatten(),
                                    reduction="sum").item()
    return loss / (n * context)


def train(args, rank, world, make_optimizer):
    """The loop every backend runs; make_optimizer(model) wraps the model
    (DDP) and returns (model to call, optimizer, extra summary keys)."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    tr, va, vocab = load_text(args.text)
    tr, va = tr.to(device), va.to(device)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    net = CharLM(vocab, args.context, args.dim, args.heads, args.layers).to(device)
    model, opt, extra = make_optimizer(net, device)
    spe = max(1, len(tr) // (args.context * args.batch * world))  # steps per epoch
    steps = spe * args.epochs if args.epochs else args.max_steps
    if args.max_steps:
        steps = min(steps, args.max_steps)
    g = torch.Generator().manual_seed(args.seed * 1000003 + rank)
    span = torch.arange(args.context + 1)
    iv_loss = 0.0
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        at = torch.randint(len(tr) - args.context - 1, (args.batch, 1), generator=g)
        win = tr[(at + span).to(device)]
        x, y = win[:, :-1], win[:, 1:]
        opt.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        if args.log_interval:
            iv_loss += loss.item()
            if step % args.log_interval == 0 and rank == 0:
                print(f"step {step} | train_loss {iv_loss / args.log_interval:.4f}"
                      f" | {time.perf_counter() - t0:.1f} s", flush=True)
                iv_loss = 0.0
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    if rank != 0:
        return
    vl = val_loss(net, va, args.context)
    sps = steps * args.batch * world / train_s
    s = {"system": f"torch-{args.backend}", "model": "transformer", "backend": args.backend,
         "val_loss": round(vl, 4), "val_bits_per_char": round(vl / math.log(2), 4),
         "samples_per_s": round(sps, 1), "tokens_per_s": round(sps * args.context, 1),
         "train_s": round(train_s, 3), "trainers": world, "device": device.type,
         "epochs": round(steps / spe, 3), "steps": steps, "batch": args.batch,
         "context": args.context, "params": sum(p.numel() for p in net.parameters()),
         "lr": args.lr, "seed": args.seed, "threads": args.threads}
    s.update(extra)
    print(json.dumps({"summary": s}), flush=True)


def run_ferry(args):
    """One trainer of a Ferry job started by python3 -m ferry.run."""
    import ferry
    import ferry.run
    import ferry.torch

    env = ferry.run.env()  # FERRY_SCHEDULER, FERRY_RANK, FERRY_TRAINERS
    bucket = {} if args.bucket_mb is None else {"bucket_mb": args.bucket_mb}
    with ferry.Client(env.scheduler, env.rank, lr=args.lr, codec_push=args.codec_push,
                      codec_pull=args.codec_pull) as client:
        def make(net, device):
            # The one line a DDP loop changes: the servers apply SGD.
            opt = ferry.torch.Optimizer(net.parameters(), client, n_samples=args.batch,
                                        overlap=args.overlap, **bucket)
            return net, opt, {"overlap": args.overlap, "bucket_mb": args.bucket_mb,
                              "codec": f"{args.codec_push}/{args.codec_pull}"}

        train(args, env.rank, env.trainers, make)


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
    ap.add_argument("--epochs", type=int, default=0, help="0: --max-steps steps")
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32, help="windows per trainer")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--overlap", action="store_true",
                    help="ferry: push each gradient from backward's hooks")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="ferry --overlap: MiB of gradients per push (default the Optimizer's)")
    ap.add_argument("--codec-push", default="none", help="ferry: gradient codec")
    ap.add_argument("--codec-pull", default="none", help="ferry: weight-delta codec")
    ap.add_argument("--ddp-world", type=int, default=2,
                    help="ddp: ranks to spawn (not under torch.distributed.run)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--log-interval", type=int, default=0, help="rank 0's train loss every N")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--context", type=int, default=64, help="characters per window")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    if not args.epochs and not args.max_steps:
        ap.error("give --epochs or --max-steps")
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
