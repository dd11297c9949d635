#!/usr/bin/python3
"""torch_ferry.py - PyTorch trainers with Ferry as their parameter server.

The same training loop as torch_mlp.py's rpc mode (its data loading, MLP,
partitions, epoch order, progress lines and summary are imported from it,
not copied: Fashion-MNIST, MLP 784-256-128-10, batch 64 per worker, lr 0.1,
one thread per process), with one difference: the parameter server is a
Ferry job (ps-server scheduler + servers, SGD applied by the servers in
sync mode) reached through the Python binding, python/ferry. Each trainer
pushes its parameters' .grad and pulls the next version straight into the
parameters (ferry.torch.FerryParameterServer: pointers, no tensor copies).

By default it starts the whole job itself: a scheduler and --servers
ps-server processes from --build (default $FERRY_BUILD_DIR, else build/;
built by scripts/setup.sh when missing) as a ferry.run.LocalJob, then
--world trainer processes.
With --scheduler URL --rank R it is one trainer of a job started elsewhere.

Output is torch_mlp.py's: progress lines from rank 0, then one
`{"summary": {...}}` line per trainer with the same keys ("system":
"torch-ferry"; bytes_pushed/bytes_pulled as libferry counted them on the
wire). --curve FILE as in torch_mlp.py.

Usage: /usr/bin/python3 bench/peers/torch_ferry.py --epochs 3
"""
import argparse
import os
import subprocess
import sys

import torch

import torch_mlp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def trainer(rank, args):
    """One rank: torch_mlp's loop, with Ferry doing the update."""
    import ferry
    from ferry.torch import FerryParameterServer

    torch.set_num_threads(1)
    model = torch_mlp.MLP(args.seed)
    with ferry.Client(args.scheduler, rank, lr=args.lr, codec_push=args.codec_push,
                      codec_pull=args.codec_pull, timeout_ms=args.timeout_ms) as c:
        ps = FerryParameterServer(model, c)  # declares; waits for the job
        ps.start()  # rank 0 offers its initial weights; all pull version 0
        params = ps.params

        def step(loss):
            for p in params:
                p.grad = None
            loss.backward()
            ps.step(args.batch)  # .grad * batch up, version v+1 into params

        def traffic():
            st = c.stats()
            return st.bytes_pushed, st.bytes_pulled

        torch_mlp.train_loop(args, rank, args.world, "ferry", model, step, traffic)


def ps_server(build):
    """The ps-server binary of build, building it first if it is missing."""
    path = os.path.join(build, "ps", "ps-server")
    if not os.access(path, os.X_OK):
        env = dict(os.environ, FERRY_BUILD_DIR=build)
        subprocess.run([os.path.join(ROOT, "scripts", "setup.sh")], env=env, check=True,
                       stdout=sys.stderr)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    torch_mlp.add_job_args(ap)
    ap.add_argument("--servers", type=int, default=1, help="ps-server servers (own job only)")
    ap.add_argument("--shard-bytes", type=int, default=1048576, help="(own job only)")
    ap.add_argument("--codec-push", default="none")
    ap.add_argument("--codec-pull", default="none")
    ap.add_argument("--timeout-ms", type=int, default=600000, help="deadline of each call")
    ap.add_argument("--build", default=os.environ.get("FERRY_BUILD_DIR")
                    or os.path.join(ROOT, "build"), help="build tree with ps-server, libferry")
    ap.add_argument("--scheduler", default=None, help="join this job as --rank (no own job)")
    ap.add_argument("--rank", type=int, default=0)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    # The children import ferry from this checkout and load this build's
    # libferry (unless the caller chose one).
    sys.path.insert(0, os.path.join(ROOT, "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    os.environ.setdefault("FERRY_LIB", os.path.join(args.build, "clients", "libferry.so"))
    if args.scheduler:
        trainer(args.rank, args)
        return 0
    if not os.path.exists(os.environ["FERRY_LIB"]):
        ps_server(args.build)
    import torch.multiprocessing as mp
    from ferry.run import LocalJob
    with LocalJob(args.world, args.servers, shard_bytes=args.shard_bytes,
                  member_flags=["--log-level=warn"], ps_server=ps_server(args.build)) as job:
        args.scheduler = job.url
        mp.spawn(trainer, args=(args,), nprocs=args.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
