"""ferry.local: the inner loop of a local-steps job (DiLoCo) in PyTorch.

In a job declared with Client(local_steps=H, inner_lr=eta) each trainer
takes H steps of its own INNER optimizer (any torch.optim.Optimizer:
SGD, momentum, AdamW) on its own copy of the weights, then sends the
servers its pseudo-gradient and pulls the new global weights; the servers
average the pseudo-gradients and apply the job's OUTER optimizer (the
Client's optimizer and lr: Nesterov, lr 0.7, momentum 0.9 by default in
such a job). docs/algorithms.md §8 has the method.

    model = Net()
    with ferry.Client(url, rank, local_steps=8, inner_lr=1e-3) as c:
        inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
        opt = ferry.torch.LocalSteps(model.parameters(), c, inner,
                                     n_samples=batch, module=model)
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step(n_samples=len(x))    # inner step; every 8th: a round

The pseudo-gradient is in gradient units, the summed units of every other
Ferry push: over an outer phase of n samples (the n_samples of its steps)
that moved the weights from theta_start to theta,

    P = (theta_start - theta) * (n / inner_lr)

pushed with n_samples = n. The servers' update is the job's optimizer at
lr * inner_lr on sum(P) / sum(n): with outer SGD that is the
samples-weighted mean of the trainers' weight changes times the outer lr,
whatever units the inner optimizer works in, and with inner SGD, outer
SGD at lr 1 and H = 1 it is today's sync step at lr inner_lr (up to float
rounding: P comes back from a difference of weights, not from the
gradients themselves). After the pull the local weights are the global
ones and theta_start follows them; the inner optimizer's state (momentum,
AdamW's moments) is kept across rounds, as in DiLoCo.

LocalStepsBase holds the loop; ferry.torch.LocalSteps gives it the
exchange engine (CPU tensors in place; device tensors through one flat
buffer, moved by libferry_cuda or page-locked staging), which is the only
part that knows where the tensors live. The engine interface used here:
declare(), open(), init_weights(), pull(), send(n), local_slots(),
stage_buffers(n), copy_buffers(), buffers, params.
"""
import torch

from .client import Client
from .errors import InvalidArgument, StateError, UnsupportedError

__all__ = ["LocalStepsBase"]


def _inner_lr(inner):
    """The inner optimizer's base lr (its first param group's), checked
    to be a number > 0."""
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError(f"inner must be a torch.optim.Optimizer, got {type(inner).__name__}")
    lr = inner.param_groups[0].get("lr")
    if isinstance(lr, torch.Tensor):
        lr = lr.item()
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise InvalidArgument("declare", f"inner_lr: the inner optimizer's lr must be > 0 "
                              f"(param_groups[0]['lr']), got {lr!r}")
    return float(lr)


def check_job(client, inner, local_steps):
    """The phase length H of client's job, checked against local_steps
    (None: the job's) and inner's lr against the job's inner_lr;
    InvalidArgument naming the field that does not fit."""
    if not isinstance(client, Client):
        raise TypeError(f"client must be a ferry.Client, got {type(client).__name__}")
    lr = _inner_lr(inner)
    h = client.local_steps
    if h <= 0:
        raise InvalidArgument("declare", "local_steps: the client's job has no local steps; "
                              "open it with ferry.Client(local_steps=H, inner_lr=...)")
    if local_steps is not None and local_steps != h:
        raise InvalidArgument("declare", f"local_steps={local_steps!r} but the client's job "
                              f"has local_steps={h}")
    if client.inner_lr != lr:
        raise InvalidArgument("declare", f"inner_lr: the client's job has inner_lr="
                              f"{client.inner_lr!r}, the inner optimizer lr={lr!r}")
    if client.fragments > 1:
        raise UnsupportedError("declare", f"fragments={client.fragments}: streaming "
                               "fragments are not in the Python binding (use the trainer)")
    return h


class LocalStepsBase(torch.optim.Optimizer):
    """The local-steps loop over an exchange engine (ferry.torch.LocalSteps
    builds it: see its documentation). Subclasses define _make_engine()."""

    def __init__(self, params, client, inner, *, local_steps=None, n_samples=1,
                 module=None, buffers="mean", exchange="auto"):
        self.H = check_job(client, inner, local_steps)
        if buffers not in ("mean", "local"):
            raise InvalidArgument("declare", f"buffers must be 'mean' or 'local', got {buffers!r}")
        named, eng, tables = self._make_engine(params, client, module, buffers, exchange)
        if tables:
            raise InvalidArgument("declare", "Ferry embeddings do not take local steps: "
                                  "their rows step with ferry.torch.Optimizer")
        ids = {id(p) for _, p in named}
        for g in inner.param_groups:
            for p in g["params"]:
                if id(p) not in ids:
                    raise InvalidArgument("declare", "the inner optimizer holds a tensor "
                                          "that is not among params (pass the same "
                                          "parameters to both)")
        super().__init__([p for _, p in named], {})
        self.client = client
        self.inner = inner
        self.inner_lr = client.inner_lr
        self.n_samples = n_samples
        self.steps = 0  # inner steps taken
        self.rounds = 0  # outer rounds this trainer took part in
        self._eng = eng
        eng.declare()
        eng.open()
        if client.rank == 0:
            eng.init_weights()
        eng.pull()
        eng.copy_buffers()
        self._slots = eng.local_slots()
        self._start = [w.detach().clone() for w, _ in self._slots]
        self._k = 0  # inner steps of this phase
        self._n = 0  # samples of this phase

    def _make_engine(self, params, client, module, buffers, exchange):
        """(named parameters, engine, embedding tables) for these
        arguments: ferry.torch's."""
        raise NotImplementedError

    def add_param_group(self, param_group):
        """Only while constructing: the job's table is fixed once declared."""
        if hasattr(self, "_eng"):
            raise StateError("add_param_group", "the job's tensor table is fixed once "
                             "declared: pass every parameter to the constructor")
        super().add_param_group(param_group)

    @property
    def phase_steps(self):
        """Inner steps taken since the last outer round (0..H-1)."""
        return self._k

    def step(self, closure=None, n_samples=None):
        """One inner step (inner.step(closure)) over n_samples samples
        (None: opt.n_samples); the H-th of a phase then ends it with an
        outer round (round()). Returns the closure's loss."""
        n = self.n_samples if n_samples is None else n_samples
        if not isinstance(n, int) or n <= 0:
            raise InvalidArgument("push", f"n_samples must be an int > 0, got {n!r}")
        loss = self.inner.step(closure)
        self.steps += 1
        self._k += 1
        self._n += n
        if self._k == self.H:
            self.round()
        return loss

    @torch.no_grad()
    def round(self):
        """The outer round: push the phase's pseudo-gradient
        P = (theta_start - theta) * (n / inner_lr) with n_samples = n and
        pull the new global weights into the parameters (and the averaged
        buffers into the module's). step() calls it every H inner steps.
        After a failure (ferry.Behind, a timeout) call pull()."""
        if self._k == 0:
            raise StateError("push", "no inner step since the last outer round")
        n = self._n
        scale = n / self.inner_lr
        for (w, p), s in zip(self._slots, self._start):
            torch.sub(s, w, out=p)
            p.mul_(scale)
        eng = self._eng
        eng.stage_buffers(n)
        self._k = self._n = 0
        eng.send(n)
        self._restart()
        self.rounds += 1

    def _restart(self):
        """theta_start = the pulled weights; the buffers' mean copied in."""
        for (w, _), s in zip(self._slots, self._start):
            s.copy_(w)
        if self._eng.buffers:
            self._eng.copy_buffers()

    @torch.no_grad()
    def pull(self):
        """Pull the version this client is due into the parameters and
        start a new phase from it: after a failed round libferry has
        abandoned it, and the phase's local steps are lost."""
        self._k = self._n = 0
        self._eng.pull()
        self._restart()

    def zero_grad(self, set_to_none=True):
        """The inner optimizer's zero_grad."""
        self.inner.zero_grad(set_to_none=set_to_none)

    def close(self):
        """Close the device exchange (libferry_cuda), if any."""
        close = getattr(self._eng, "close", None)
        if close is not None:
            close()
