#!/usr/bin/python3
"""torch_dlrm.py - the DLRM-style CTR model of trainer/include/tr/ctr.h in PyTorch,
trained in one process, with DDP, or on a Ferry job.

The model (tr/ctr.h's definition): a bottom MLP over the 13 dense
features (ReLU after every layer), one embedding per categorical field (26
tables emb0..emb25, rows uniform(-0.05, 0.05)), the interaction (dot: the
bottom output then <z_i, z_j> for i = 1..26, j = 0..i-1; cat: all 27
vectors side by side), a top MLP (ReLU after every layer but the last, of
width 1) and the logistic loss. Dense weights Xavier-uniform, biases 0.
With --init ferry (the default) every system starts from the very weights
and rows the C trainer and a Ferry job start from (the same splitmix64
stream and row hashes), so runs differ only in arithmetic order.

  --system single  one process, nn.EmbeddingBag(sparse=True) tables with a
                   row per distinct key of train and test (np.unique per
                   field: unbounded, no hashing), torch.optim.Adagrad for
                   the dense part and row-wise Adagrad by hand for the rows
  --system ddp     the same, on --ranks gloo processes it spawns itself;
                   DistributedDataParallel over the whole model (DDP
                   allreduces the sparse row gradients too)
  --system ferry   one trainer of a Ferry job: the dense part through
                   ferry.torch.FerryParameterServer (job optimizer
                   "adagrad"), the tables as ferry.torch.EmbeddingBag on
                   the job's sparse tables (row-wise "adagrad" on the
                   servers), dense and row gradients and the next batch's
                   rows in one client.step. Start it with the launcher:
                     python3 -m ferry.run --trainers 2 --servers 2 \\
                         examples/torch_dlrm.py --system ferry --data ...
                   or join a job with --scheduler URL --rank R --trainers T.

Optimizers (the same in all three): dense Adagrad (G += g^2; x -= lr g /
(sqrt(G) + 1e-8)); rows row-wise Adagrad (a += mean_j g_j^2; w -= lr g /
(sqrt(a) + 1e-8)), g the mean gradient over the job's batch. The data
(--data, --test-data): Criteo TSV (label, I1..I13, C1..C26; keys and dense
transform as tr_ctr_key / tr_ctr_dense_value) or the binary form
(tr/ctr.h: a 32-byte header, 264-byte records). Partition as the C
trainer's: job step k covers samples [k B T, (k+1) B T), rank r its slice
[k B T + r B, k B T + (r+1) B), no shuffle. Rank 0 evaluates on the test
set every --log-interval steps (--eval-rows rows; 0: all) and at the end
(all rows), evaluation time left out of wall_s; its last stdout line is
{"system", "samples_per_s", "auc", "logloss", "wall_s", "samples", ...}.

--make-data DIR --rows N writes DIR/train.bin and DIR/test.bin (a small
synthetic CTR set: Zipf keys, labels from a hidden logistic model) for
trying it out without ferry-ctrgen.
"""
import argparse
import gzip
import json
import math
import os
import socket
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_DENSE, N_CAT = 13, 26
MAGIC = b"FERRYCTR"
HEADER = 32
RECORD = np.dtype([("label", "<f4"), ("dense", "<f4", (N_DENSE,)), ("keys", "<u8", (N_CAT,))])
KEY_MISSING = (1 << 64) - 1
EPS = 1e-8


# ---- data ---------------------------------------------------------------------
def ctr_key(s):
    """tr_ctr_key: "" -> 2^64-1; 1..16 hex digits -> their value; else
    the FNV-1a-64 hash of the bytes with the top bit set."""
    if not s:
        return KEY_MISSING
    if len(s) <= 16 and all(c in "0123456789abcdefABCDEF" for c in s):
        return int(s, 16)
    return _fnv(s)


def _fnv(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h | (1 << 63)


def read_text(path, opener):
    """A Criteo TSV file as (label, dense, keys) arrays (the slow path)."""
    labels, dense, keys = [], [], []
    with opener(path, "rt", newline="") as f:
        for ln, line in enumerate(f, 1):
            cols = line.rstrip("\r\n").split("\t")
            if len(cols) != 1 + N_DENSE + N_CAT:
                sys.exit(f"{path}:{ln}: {len(cols)} columns, want {1 + N_DENSE + N_CAT}")
            if cols[0] not in ("0", "1"):
                sys.exit(f"{path}:{ln}: column 1 (label) is {cols[0]!r}, want 0 or 1")
            labels.append(float(cols[0]))
            row = []
            for j, c in enumerate(cols[1:1 + N_DENSE]):
                if c and not (c.isascii() and c.removeprefix("-").isdigit()):
                    sys.exit(f"{path}:{ln}: column {j + 2} (I{j + 1}) is {c!r}, not an integer")
                row.append(math.log1p(max(int(c), 0)) if c else 0.0)
            dense.append(row)
            keys.append([ctr_key(c) for c in cols[1 + N_DENSE:]])
    return (np.array(labels, np.float32), np.array(dense, np.float32),
            np.array(keys, np.uint64).reshape(-1, N_CAT))


def load(path):
    """(label (n,), dense (n, 13), keys (26, n) field-major uint64) of a
    binary or text (maybe gzipped) file."""
    with open(path, "rb") as f:
        head = f.read(HEADER)
    if head[:8] == MAGIC:
        _, ver, nd, nc, _, n = struct.unpack("<8sIIIIQ", head)
        if (ver, nd, nc) != (1, N_DENSE, N_CAT):
            sys.exit(f"{path}: binary header version {ver}, {nd} dense, {nc} fields; want 1, "
                     f"{N_DENSE}, {N_CAT}")
        rec = np.fromfile(path, dtype=RECORD, offset=HEADER)
        if len(rec) < n:
            sys.exit(f"{path}: {len(rec)} records, the header says {n}")
        rec = rec[:n]
        label, dense, keys = rec["label"], rec["dense"], rec["keys"]
    else:
        opener = gzip.open if head[:2] == b"\x1f\x8b" else open
        label, dense, keys = read_text(path, opener)
    if len(label) == 0:
        sys.exit(f"{path}: no samples")
    return (np.ascontiguousarray(label), np.ascontiguousarray(dense),
            np.ascontiguousarray(keys.T))


def write_bin(path, label, dense, keys):
    """The binary form of (label, dense, keys (n, 26))."""
    rec = np.empty(len(label), RECORD)
    rec["label"], rec["dense"], rec["keys"] = label, dense, keys
    with open(path, "wb") as f:
        f.write(MAGIC + np.array([1, N_DENSE, N_CAT, 0], "<u4").tobytes()
                + np.array([len(label)], "<u8").tobytes())
        rec.tofile(f)


def make_data(out, rows, test_rows, seed):
    """A small synthetic CTR set: field f's keys Zipf over a vocabulary of
    10..~20k, labels Bernoulli(sigmoid(hidden per-key weights + a dense
    part)), so a model that learns the keys gets a clear AUC."""
    rng = np.random.default_rng(seed)
    vocab = np.unique(np.geomspace(10, 20000, N_CAT).astype(np.int64))
    vocab = np.resize(vocab, N_CAT)
    wkey = [rng.normal(0, 0.6, v) for v in vocab]
    wdense = rng.normal(0, 0.3, N_DENSE)
    salt = rng.integers(1, 1 << 62, N_CAT, dtype=np.int64)
    os.makedirs(out, exist_ok=True)
    for name, n in (("train", rows), ("test", test_rows)):
        ranks = np.empty((n, N_CAT), np.int64)
        for f in range(N_CAT):
            ranks[:, f] = np.minimum(rng.zipf(1.2, n), vocab[f]) - 1
        raw = rng.poisson(3.0, (n, N_DENSE)) * (rng.random((n, N_DENSE)) < 0.8)
        dense = np.log1p(raw).astype(np.float32)
        logit = sum(wkey[f][ranks[:, f]] for f in range(N_CAT)) / 2 + dense @ wdense - 1.0
        label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        keys = (ranks * 2654435761 + salt).astype(np.uint64)  # spread, not 0..v
        write_bin(os.path.join(out, name + ".bin"), label, dense, keys)
    print(json.dumps({"out": out, "rows": rows, "test_rows": test_rows}))


# ---- model --------------------------------------------------------------------
class DLRM(nn.Module):
    """tr/ctr.h's DLRM; emb(f) makes field f's embedding module (called
    with a (B, 1) int64 tensor of keys, returning (B, dim))."""

    def __init__(self, bottom, top, dim, interaction, emb):
        super().__init__()
        self.interaction = interaction
        widths = [N_DENSE] + bottom
        for i in range(len(bottom)):
            setattr(self, f"bot{i + 1}", nn.Linear(widths[i], widths[i + 1]))
        if interaction == "dot":
            if bottom[-1] != dim:
                sys.exit(f"--interaction dot needs the last --bottom width ({bottom[-1]}) == "
                         f"--emb-dim ({dim})")
            width = dim + (N_CAT + 1) * N_CAT // 2
        else:
            width = bottom[-1] + N_CAT * dim
        if top[-1] != 1:
            sys.exit(f"--top must end with 1 (the logit), got {top}")
        widths = [width] + top
        for i in range(len(top)):
            setattr(self, f"top{i + 1}", nn.Linear(widths[i], widths[i + 1]))
        self.nb, self.nt = len(bottom), len(top)
        for f in range(N_CAT):
            setattr(self, f"emb{f}", emb(f))
        # The lower triangle's places in a flattened 27 x 27 Gram matrix:
        # index_select's backward is an index_add, cheaper than advanced
        # indexing's (about 2 ms a step of 1024 samples).
        li, lj = torch.tril_indices(N_CAT + 1, N_CAT + 1, offset=-1)
        self.register_buffer("tril", li * (N_CAT + 1) + lj, persistent=False)

    def forward(self, dense, keys):
        """dense (B, 13); keys: 26 tensors (B, 1) of field f's ids."""
        z = dense
        for i in range(self.nb):
            z = F.relu(getattr(self, f"bot{i + 1}")(z))
        embs = [getattr(self, f"emb{f}")(keys[f]) for f in range(N_CAT)]
        if self.interaction == "dot":
            t = torch.stack([z] + embs, 1)
            gram = torch.bmm(t, t.transpose(1, 2)).flatten(1)
            x = torch.cat([z, gram.index_select(1, self.tril)], 1)
        else:
            x = torch.cat([z] + embs, 1)
        for i in range(self.nt):
            x = getattr(self, f"top{i + 1}")(x)
            if i < self.nt - 1:
                x = F.relu(x)
        return x.squeeze(1)


GOLDEN = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1


def mix64(x):
    """splitmix64's finalizer on a uint64 array (tr_rng_next's and
    tbl_key_hash's), wrapping like C's uint64_t."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def unit24(h):
    """24 random bits of h as a float32 in [0, 1) (tr_rng_uniform's)."""
    return (h >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)


def init_dense(model, seed, how):
    """--init ferry: the C trainer's weights bit for bit
    (tr_dlrm_params_randomize: one splitmix64 stream seeded with seed,
    weight tensors in order, Xavier-uniform, biases 0); --init torch:
    torch's generator."""
    if how == "torch":
        torch.manual_seed(seed)
    drawn = 0
    with torch.no_grad():
        for n, p in model.named_parameters():
            if not n.startswith(("bot", "top")):
                continue
            if n.endswith("bias"):
                nn.init.zeros_(p)
            elif how == "torch":
                nn.init.xavier_uniform_(p)
            else:
                out, inp = p.shape
                k = np.arange(drawn + 1, drawn + p.numel() + 1, dtype=np.uint64)
                with np.errstate(over="ignore"):
                    h = mix64(np.uint64(seed & M64) + k * np.uint64(GOLDEN))
                bound = np.float32(math.sqrt(6.0 / (inp + out)))
                w = (np.float32(2) * unit24(h) - np.float32(1)) * bound
                p.copy_(torch.from_numpy(w.reshape(out, inp)))
                drawn += p.numel()


def ferry_rows(keys, seed, table, dim, scale):
    """The rows a Ferry table of uniform init makes for keys (uint64):
    tbl_row_init's values from (seed, table, key), bit for bit."""
    with np.errstate(over="ignore"):
        s = mix64(np.array([(seed + GOLDEN * (table + 1)) & M64], np.uint64))[0]
        base = mix64(keys.astype(np.uint64) ^ s)
        j = np.arange(1, dim + 1, dtype=np.uint64) * np.uint64(GOLDEN)
        u = unit24(mix64(base[:, None] + j[None, :]))
    return (np.float32(2) * u - np.float32(1)) * np.float32(scale)


# ---- quality ------------------------------------------------------------------
def auc(score, label):
    """Exact ROC AUC: the Mann-Whitney statistic over midranks."""
    _, inv, counts = np.unique(score, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    mid = ends - (counts - 1) / 2.0  # 1-based midrank of each distinct score
    pos = label > 0.5
    npos, nneg = int(pos.sum()), int((~pos).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    return float((mid[inv][pos].sum() - npos * (npos + 1) / 2.0) / (npos * nneg))


def logloss(p, label):
    p = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    return float(-np.mean(label * np.log(p) + (1 - label) * np.log(1 - p)))


def evaluate(model, test, rows, key_fn, chunk=8192):
    """(auc, logloss) over the first rows test samples (0: all)."""
    label, dense, keys = test
    n = len(label) if not rows else min(rows, len(label))
    probs = np.empty(n, np.float32)
    was = model.training
    model.eval()
    with torch.no_grad():
        for s in range(0, n, chunk):
            e = min(s + chunk, n)
            z = model(torch.from_numpy(dense[s:e]), key_fn(keys, s, e))
            probs[s:e] = torch.sigmoid(z).numpy()
    model.train(was)
    return auc(probs, label[:n]), logloss(probs, label[:n].astype(np.float64))


# ---- the loop -----------------------------------------------------------------
def train(args, rank, world, model, train_set, test, key_fn, step_fn, system):
    """The loop every system runs: step_fn(n, next (s, e) or None) does
    what follows backward."""
    label, dense, keys = train_set
    b = args.batch
    spe = len(label) // (b * world)
    steps = spe * args.epochs
    if args.max_steps:
        steps = min(steps, args.max_steps)
    if steps == 0:
        sys.exit(f"{len(label)} samples make no step of {b} x {world}")
    curve = open(args.curve, "w") if args.curve and rank == 0 else None
    if curve:
        curve.write("step,wall_s,samples,auc,logloss\n")

    def span(k):
        s = (k % spe) * b * world + rank * b
        return s, s + b

    t0 = time.perf_counter()
    paused = 0.0
    lab = torch.from_numpy(label)
    den = torch.from_numpy(dense)
    for k in range(steps):
        s, e = span(k)
        model.zero_grad(set_to_none=True)
        z = model(den[s:e], key_fn(keys, s, e))
        F.binary_cross_entropy_with_logits(z, lab[s:e]).backward()
        step_fn(b, span(k + 1) if k + 1 < steps else None)
        if rank == 0 and args.log_interval and (k + 1) % args.log_interval == 0 \
                and k + 1 < steps:
            t1 = time.perf_counter()
            a, ll = evaluate(model, test, args.eval_rows, key_fn)
            wall = t1 - t0 - paused
            print(f"step {k + 1} | samples {(k + 1) * b * world} | wall_s {wall:.2f} | "
                  f"auc {a:.4f} | logloss {ll:.4f}", flush=True)
            if curve:
                curve.write(f"{k + 1},{wall:.3f},{(k + 1) * b * world},{a:.6f},{ll:.6f}\n")
            paused += time.perf_counter() - t1
    wall = time.perf_counter() - t0 - paused
    if rank != 0:
        return
    a, ll = evaluate(model, test, 0, key_fn)
    samples = steps * b * world
    if curve:
        curve.write(f"{steps},{wall:.3f},{samples},{a:.6f},{ll:.6f}\n")
        curve.close()
    print(json.dumps({"system": system, "samples_per_s": round(samples / wall, 1),
                      "auc": round(a, 6), "logloss": round(ll, 6), "wall_s": round(wall, 3),
                      "samples": samples, "steps": steps, "trainers": world, "batch": b,
                      "threads": args.threads}), flush=True)


def widths(s, flag):
    try:
        w = [int(x) for x in s.split(",")]
    except ValueError:
        w = []
    if not w or min(w) < 1:
        sys.exit(f"{flag}: want comma-separated widths >= 1, got {s!r}")
    return w


def make_model(args, emb):
    return DLRM(widths(args.bottom, "--bottom"), widths(args.top, "--top"), args.emb_dim,
                args.interaction, emb)


# ---- single and ddp -----------------------------------------------------------
def dense_ids(train_keys, test_keys):
    """Each field's keys as row ids over the union of train and test keys
    (np.unique + searchsorted); returns (train ids, test ids, each field's
    distinct keys in row order), ids int64 field-major."""
    tr = np.empty(train_keys.shape, np.int64)
    te = np.empty(test_keys.shape, np.int64)
    uniq = []
    for f in range(N_CAT):
        u = np.unique(np.concatenate([train_keys[f], test_keys[f]]))
        tr[f] = np.searchsorted(u, train_keys[f])
        te[f] = np.searchsorted(u, test_keys[f])
        uniq.append(u)
    return tr, te, uniq


def local_ids(keys, s, e):
    return [torch.from_numpy(keys[f, s:e]).view(-1, 1) for f in range(N_CAT)]


def run_local(rank, world, args):
    """single (world 1) or one DDP rank."""
    torch.set_num_threads(args.threads)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world)
    label, dense, keys = load(args.data)
    tlabel, tdense, tkeys = load(args.test_data)
    keys, tkeys, uniq = dense_ids(keys, tkeys)
    net = make_model(args, lambda f: nn.EmbeddingBag(len(uniq[f]), args.emb_dim, mode="sum",
                                                     sparse=True))
    init_dense(net, args.seed, args.init)
    with torch.no_grad():
        for f in range(N_CAT):
            w = getattr(net, f"emb{f}").weight
            if args.init == "torch":
                w.uniform_(-args.table_init_scale, args.table_init_scale)
            else:  # the rows a Ferry job starts from (table f = field f)
                w.copy_(torch.from_numpy(ferry_rows(uniq[f], args.seed, f, args.emb_dim,
                                                    args.table_init_scale)))
    tables = [getattr(net, f"emb{f}").weight for f in range(N_CAT)]
    acc = [torch.zeros(w.shape[0]) for w in tables]
    dense_params = [p for n, p in net.named_parameters() if not n.startswith("emb")]
    opt = torch.optim.Adagrad(dense_params, lr=args.lr, eps=EPS)
    tlr = args.table_lr or args.lr
    model = net
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net, broadcast_buffers=False)

    @torch.no_grad()
    def step(n, nxt):
        opt.step()
        for w, a in zip(tables, acc):
            g = w.grad.coalesce()
            idx, v = g.indices()[0], g.values()
            a.index_add_(0, idx, (v * v).mean(1))
            w.index_add_(0, idx, v / (a[idx].sqrt_().add_(EPS)).unsqueeze(1), alpha=-tlr)

    try:
        train(args, rank, world, model, (label, dense, keys), (tlabel, tdense, tkeys),
              local_ids, step, "torch-ddp" if world > 1 else "torch-single")
    finally:
        if world > 1:
            dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- ferry --------------------------------------------------------------------
def run_ferry(args):
    import ferry
    import ferry.torch as ft

    url, rank, world = args.scheduler, args.rank, args.trainers
    if url is None:
        import ferry.run
        env = ferry.run.env()
        url, rank, world = env.scheduler, env.rank, env.trainers
    torch.set_num_threads(args.threads)
    label, dense, keys = load(args.data)
    test = load(args.test_data)
    # keys as int64 tensors over the same bytes (read as uint64 by libferry)
    keys = keys.view(np.int64)
    test = (test[0], test[1], test[2].view(np.int64))

    def table(f):
        return ferry.Table(f"emb{f}", args.emb_dim, init="uniform",
                           init_scale=args.table_init_scale, optimizer="adagrad",
                           lr=args.table_lr, eps=EPS)

    net = make_model(args, lambda f: ft.EmbeddingBag(args.emb_dim, mode="sum", table=table(f)))
    init_dense(net, args.seed, args.init)
    embs = [getattr(net, f"emb{f}") for f in range(N_CAT)]
    with ferry.Client(url, rank, lr=args.lr, optimizer="adagrad", eps=EPS, seed=args.seed,
                      timeout_ms=args.timeout_ms) as c:
        ps = ft.FerryParameterServer(net, c)
        if c.trainers != world:
            sys.exit(f"--trainers {world} but the job has {c.trainers}")
        ps.start()

        def step(n, nxt):
            if nxt is not None:  # the next batch's rows come back with this step
                s, e = nxt
                for f, m in enumerate(embs):
                    m.prefetch(torch.from_numpy(keys[f, s:e]).view(-1, 1))
            ps.step(n)

        train(args, rank, world, net, (label, dense, keys), test, local_ids, step, "ferry-torch")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=["single", "ddp", "ferry"], default="single")
    ap.add_argument("--data", help="training file (Criteo TSV or binary)")
    ap.add_argument("--test-data", help="test file (Criteo TSV or binary)")
    ap.add_argument("--batch", type=int, default=64, help="per trainer")
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--bottom", default="64,16", help="bottom MLP widths after the 13 inputs")
    ap.add_argument("--top", default="64,1", help="top MLP widths, the last 1")
    ap.add_argument("--interaction", choices=["dot", "cat"], default="dot")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--table-lr", type=float, default=0.0, help="0: --lr")
    ap.add_argument("--table-init-scale", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many (0: epochs)")
    ap.add_argument("--eval-rows", type=int, default=0,
                    help="test rows of progress evaluations (0: all)")
    ap.add_argument("--log-interval", type=int, default=0, help="evaluate every N steps")
    ap.add_argument("--curve", help="CSV step,wall_s,samples,auc,logloss (rank 0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init", choices=["ferry", "torch"], default="ferry",
                    help="initial weights: the C trainer's and a Ferry job's rows, bit for "
                    "bit (ferry), or torch's generator (torch)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--ranks", type=int, default=2, help="ddp: gloo ranks to spawn")
    ap.add_argument("--scheduler", help="ferry: the job's URL (default: ferry.run's)")
    ap.add_argument("--rank", type=int, default=0, help="ferry, with --scheduler")
    ap.add_argument("--trainers", type=int, default=1, help="ferry, with --scheduler")
    ap.add_argument("--timeout-ms", type=int, default=120000, help="ferry: per call")
    ap.add_argument("--make-data", metavar="DIR",
                    help="write DIR/train.bin, DIR/test.bin (--rows, --test-rows) and exit")
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--test-rows", type=int, default=0, help="0: max(rows/10, 1000)")
    args = ap.parse_args(argv)
    if args.make_data:
        make_data(args.make_data, args.rows, args.test_rows or max(args.rows // 10, 1000),
                  args.seed)
        return 0
    if not args.data or not args.test_data:
        ap.error("--data and --test-data are required")
    if args.batch < 1 or args.emb_dim < 1 or args.threads < 1:
        ap.error("--batch, --emb-dim and --threads must be >= 1")
    if args.system == "ferry":
        run_ferry(args)
    elif args.system == "single":
        run_local(0, 1, args)
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        import torch.multiprocessing as mp
        mp.spawn(run_local, args=(args.ranks, args), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
