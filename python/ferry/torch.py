"""ferry.torch: a torch.nn.Module's parameters kept on a Ferry job.

Two ways in, sharing one engine:

ferry.torch.Optimizer is a drop-in torch.optim.Optimizer: an existing loop
changes only the line that builds its optimizer.

    model = Net().to(device)
    with ferry.Client(url, rank, lr=0.1) as c:
        opt = ferry.torch.Optimizer(model.parameters(), c, n_samples=batch,
                                    module=model)   # declares, pulls v0
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step(n_samples=len(x))              # push grads, pull v+1

FerryParameterServer is the explicit form (CPU parameters only):

    ps = FerryParameterServer(model, c)   # declares
    ps.start()                            # rank 0 offers, all pull v0
    for x, y in loader:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        ps.step(len(x))                   # push grads, pull v+1

The servers apply the job's optimizer (Client(optimizer=...), SGD by
default) with its lr: the torch side only moves tensors.

Ferry sums gradients: a push carries the SUM over its samples and the
servers divide by the job's total samples. PyTorch losses default to the
mean, so by default (grad_is_mean=True) each gradient is multiplied by
n_samples before it is pushed (CPU parameters: .grad in place); with a loss
of reduction="sum", pass grad_is_mean=False and the gradients go as they
are.

Writing a pull into a parameter's storage is what an optimizer's `p.data`
update does: it is invisible to autograd, so pull between steps, not
between a forward pass and its backward.

How a step moves the tensors depends on where the parameters are:
- CPU: every tensor in place (its storage's address goes to libferry), no
  copy. overlap=True pushes buckets of gradients from autograd hooks while
  backward goes on (Client.push_pull_start) and step() waits for the rest.
- CUDA: the parameters are moved into one flat device buffer (each becomes
  a view of it; do not replace them afterwards) and their gradients into
  another. ferry.cuda.DeviceExchange moves them when libferry_cuda loads
  (with a codec, quantized on the device: only codes cross PCIe); else
  page-locked host staging buffers do (one copy each way per step).
Embedding tables: ferry.torch.Embedding and EmbeddingBag (ferry/embedding.py)
keep their rows in a Ferry sparse table (ferry.Table); FerryParameterServer
finds them in the model, declares their tables beside the parameters and
sends their row gradients (and the prefetched next batch's rows) in the
same client.step as the dense tensors.
Module buffers (module=, buffers="mean") are declared after the
parameters as AVERAGE tensors: each step pushes them (value * n_samples)
and the servers keep the samples-weighted mean of what the trainers
pushed, copied into the module's buffers every buffers_every steps.
Integer buffers (BatchNorm's num_batches_tracked) stay local.
"""
import warnings

import torch

from .client import Client
from .embedding import Embedding, EmbeddingBag, find as _find_embeddings
from .errors import InvalidArgument, StateError
from .local import LocalStepsBase

__all__ = ["FerryParameterServer", "Optimizer", "LocalSteps", "Embedding", "EmbeddingBag"]

_WHAT = "Ferry holds contiguous float32 tensors, all on one device"


def _check(named, kind, device=None, only=None):
    """The device of the (name, tensor) pairs, or InvalidArgument naming the
    first one Ferry cannot hold: not float32, not dense and contiguous, or
    on another device than the others (device: the one they must be on;
    only: the one device this caller takes)."""
    for name, t in named:
        why = None
        if t.layout != torch.strided:
            why = f"layout {t.layout} (sparse?), want torch.strided"
        elif t.dtype != torch.float32:
            why = f"dtype {t.dtype}"
        elif only is not None and t.device != only:
            why = f"on {t.device}, want {only} (ferry.torch.Optimizer takes GPU parameters)"
        elif device is not None and t.device != device:
            why = f"on {t.device}, the others on {device} (mixed devices)"
        elif t.device.type not in ("cpu", "cuda"):
            why = f"on {t.device}"
        elif not t.is_contiguous():
            why = "not contiguous"
        if why:
            raise InvalidArgument("declare", f"{kind} {name!r}: {why}; {_WHAT}")
        device = t.device
    return device


class _Tensors:
    """The engine behind Optimizer and FerryParameterServer: the declared
    table (parameters, then the module's float buffers) and the step's
    exchange of CPU tensors in place. _Flat and its subclasses override the
    exchange for device tensors.

    params: (name, parameter) pairs; buffers: (name, buffer) pairs declared
    AVERAGE. Buffers go through scratch tensors (buf_g pushed, buf_w
    pulled), so the module's own are only written when copy_buffers().
    """

    def __init__(self, client, params, buffers, grad_is_mean):
        self.client = client
        self.grad_is_mean = grad_is_mean
        self.names = [n for n, _ in params]
        self.params = [p for _, p in params]
        self.buf_names = [n for n, _ in buffers]
        self.buffers = [b for _, b in buffers]
        self.np = len(self.params)
        self._zeros = [None] * self.np  # pushed for a missing .grad
        self._setup()
        self.grad_list = [None] * self.np + list(self.buf_g)  # what a push sends

    def _setup(self):
        """The tensors pulls write (weights) and the buffers' scratch."""
        self.buf_w = [torch.empty_like(b, memory_format=torch.contiguous_format)
                      for b in self.buffers]
        self.buf_g = [torch.empty_like(b, memory_format=torch.contiguous_format)
                      for b in self.buffers]
        self.weights = self.params + self.buf_w

    def open(self):
        """Ready the exchange once the table is declared (the device
        engine opens libferry_cuda here)."""

    def declare(self, tables=()):
        """client.declare: the parameters, then the buffers as AVERAGE,
        and the sparse tables (ferry.Table specs) beside them."""
        table = [(n, p.numel()) for n, p in zip(self.names, self.params)]
        table += [(n, b.numel()) for n, b in zip(self.buf_names, self.buffers)]
        self.client.declare(table, average=self.buf_names, tables=tables)

    # ---- the exchange (CPU tensors in place) ------------------------------
    def init_weights(self):
        """Offer the current parameters and buffers as version 0."""
        self.client.init_weights(self.params + self.buffers)

    def pull(self):
        """Pull the version this client is due into the parameters (and
        the buffers' scratch)."""
        self.client.pull(self.weights)

    def grad(self, i, n_samples):
        """Parameter i's gradient as pushed: .grad scaled in place by
        n_samples when grad_is_mean, or zeros when it has none."""
        p = self.params[i]
        g = p.grad
        if g is None:
            if self._zeros[i] is None:
                self._zeros[i] = torch.zeros_like(p, memory_format=torch.contiguous_format)
            return self._zeros[i]
        if self.grad_is_mean:
            g.mul_(n_samples)
        return g

    def grads(self, n_samples):
        """The tensors a push sends: one gradient per parameter (grad()),
        then each buffer * n_samples."""
        for i in range(self.np):
            self.grad_list[i] = self.grad(i, n_samples)
        self.stage_buffers(n_samples)
        return self.grad_list

    def stage_buffers(self, n_samples):
        """Each buffer * n_samples into the scratch a push sends: the
        servers divide the sum by the samples."""
        for b, g in zip(self.buffers, self.buf_g):
            g.copy_(b).mul_(n_samples)

    def copy_buffers(self):
        """The pulled mean into the module's buffers."""
        with torch.no_grad():
            for b, w in zip(self.buffers, self.buf_w):
                b.copy_(w)

    def push(self, n_samples):
        self.client.push(self.grads(n_samples), n_samples)

    def push_pull(self, n_samples):
        self.grads(n_samples)
        self.send(n_samples)

    def send(self, n_samples):
        """Push what grad_list holds and pull the next version into the
        weights: push_pull without gathering the gradients."""
        self.client.push_pull(self.grad_list, n_samples, self.weights)

    def local_slots(self):
        """(weights, pushed) tensor pairs for ferry.local's pseudo-
        gradients: each parameter and a scratch tensor that grad_list now
        sends in place of its gradient."""
        slots = []
        for i, p in enumerate(self.params):
            g = torch.empty_like(p, memory_format=torch.contiguous_format)
            self.grad_list[i] = g
            slots.append((p, g))
        return slots


class _Flat(_Tensors):
    """Parameters on a device, moved into one flat buffer (flat_w; each
    parameter becomes a view of it) with one for their gradients (flat_g),
    the buffers' scratch at the end of both: tensor t at the sum of the
    lengths before it, as libferry_cuda wants. A step gathers the
    gradients into flat_g (nothing to copy for a .grad that is still the
    view zero_grad() left) and scales them there: such a .grad is scaled
    in place, as on the CPU, so zero_grad() before each backward.
    Subclasses move flat_g out and flat_w in."""

    def _setup(self):
        lens = [p.numel() for p in self.params] + [b.numel() for b in self.buffers]
        dev = self.params[0].device
        total = sum(lens)
        self.flat_w = torch.empty(total, dtype=torch.float32, device=dev)
        self.flat_g = torch.zeros(total, dtype=torch.float32, device=dev)
        self.n_param_elems = sum(lens[:self.np])
        self.w_views, self.g_views, off = [], [], 0
        for n in lens:
            self.w_views.append(self.flat_w[off:off + n])
            self.g_views.append(self.flat_g[off:off + n])
            off += n
        with torch.no_grad():
            for i, p in enumerate(self.params):
                self.w_views[i].copy_(p.detach().reshape(-1))
                p.data = self.w_views[i].view_as(p)
                self.g_views[i] = self.g_views[i].view_as(p)
        self.buf_w = self.w_views[self.np:]
        self.buf_g = self.g_views[self.np:]
        self.weights = self.w_views

    def zero_grad(self):
        """Zero flat_g and make each .grad its view again: backward then
        accumulates straight into flat_g."""
        self.flat_g[:self.n_param_elems].zero_()
        for p, g in zip(self.params, self.g_views):
            p.grad = g

    def gather(self, n_samples):
        """Every gradient into flat_g (zeros for a missing .grad), scaled
        by n_samples when grad_is_mean, and the buffers' scratch staged."""
        with torch.no_grad():
            for p, g in zip(self.params, self.g_views):
                pg = p.grad
                if pg is None:
                    g.zero_()
                elif pg.data_ptr() != g.data_ptr():
                    g.copy_(pg)
            if self.grad_is_mean:
                self.flat_g[:self.n_param_elems].mul_(n_samples)
            self.stage_buffers(n_samples)

    def init_weights(self):
        with torch.no_grad():
            for b, w in zip(self.buffers, self.buf_w):
                w.copy_(b.reshape(-1))
        self._init_weights()

    def copy_buffers(self):
        with torch.no_grad():
            for b, w in zip(self.buffers, self.buf_w):
                b.copy_(w.view_as(b))

    def stage_buffers(self, n_samples):
        for b, g in zip(self.buffers, self.buf_g):
            g.copy_(b.reshape(-1)).mul_(n_samples)

    def push(self, n_samples):
        raise StateError("push", "device parameters go through push_pull (step())")

    def push_pull(self, n_samples):
        self.gather(n_samples)
        self.send(n_samples)

    def local_slots(self):
        """One (weights, pushed) pair: the parameters' part of flat_w and
        of flat_g (so .grad must not be a view of flat_g: the local loop's
        zero_grad is the inner optimizer's)."""
        n = self.n_param_elems
        return [(self.flat_w[:n], self.flat_g[:n])]


class _Staged(_Flat):
    """Flat device buffers through page-locked host staging: flat_g is
    copied to host memory, pushed with Client.push_pull, and the pulled
    weights copied back (asynchronously: later work on the stream is
    ordered after it). Works with CPU tensors too (pin=False), which is
    how the tests drive it without a GPU. Allocates nothing per step."""

    def _setup(self):
        super()._setup()
        dev = self.flat_w.device
        pin = dev.type == "cuda"
        self.host_w = torch.empty(self.flat_w.numel(), dtype=torch.float32, pin_memory=pin)
        self.host_g = torch.empty(self.flat_w.numel(), dtype=torch.float32, pin_memory=pin)
        self.hw_views, self.hg_views, off = [], [], 0
        for v in self.w_views:
            n = v.numel()
            self.hw_views.append(self.host_w[off:off + n])
            self.hg_views.append(self.host_g[off:off + n])
            off += n
        if pin:
            # the stream the step's gather ran on, whichever is current
            self._sync = lambda: torch.cuda.current_stream(dev).synchronize()
        else:
            self._sync = lambda: None

    def _init_weights(self):
        self.host_w.copy_(self.flat_w)
        self.client.init_weights(self.hw_views)

    def pull(self):
        self.client.pull(self.hw_views)
        self.flat_w.copy_(self.host_w, non_blocking=True)

    def send(self, n_samples):
        self.host_g.copy_(self.flat_g, non_blocking=True)
        self._sync()  # the gradients are on the host
        self.client.push_pull(self.hg_views, n_samples, self.hw_views)
        self.flat_w.copy_(self.host_w, non_blocking=True)


class _Device(_Flat):
    """Flat device buffers exchanged by libferry_cuda
    (ferry.cuda.DeviceExchange): with a codec the gradient is quantized on
    the device and the pulled delta decoded there."""

    def __init__(self, client, params, buffers, grad_is_mean, cuda):
        self._cuda = cuda
        self.dx = None
        super().__init__(client, params, buffers, grad_is_mean)

    def open(self):
        dev = self.flat_w.device
        self._stream = torch.cuda.current_stream(dev) if dev.type == "cuda" else None
        stream = self._stream.cuda_stream if self._stream is not None else 0
        self.dx = self._cuda.DeviceExchange(self.client, self.flat_w.data_ptr(),
                                            self.flat_g.data_ptr(), stream)

    def _init_weights(self):
        self.dx.init_weights()

    def pull(self):
        self.dx.pull()

    def send(self, n_samples):
        if self._stream is not None:
            # libferry_cuda works on the stream of open(); a loop under
            # another stream gathered on that one: order the two.
            cur = torch.cuda.current_stream(self._stream.device)
            if cur != self._stream:
                self._stream.wait_stream(cur)
        self.dx.push_pull(n_samples)

    def close(self):
        if self.dx is not None:
            self.dx.close()
            self.dx = None


def _device_cuda():
    """ferry.cuda when libferry_cuda loads and sees a device, else None
    (then device parameters go through host staging)."""
    try:
        from . import cuda
        return cuda if cuda.available() else None
    except (ImportError, OSError, AttributeError):
        return None


def _engine(client, params, buffers, grad_is_mean, exchange):
    """The engine for these tensors: exchange "auto" (in place on CPU,
    else libferry_cuda, else staging), "host", "staged" or "device"."""
    dev = params[0][1].device
    if exchange == "auto":
        exchange = "host" if dev.type == "cpu" else "device"
    if exchange == "host":
        if dev.type != "cpu":
            raise InvalidArgument("declare", f"exchange='host' needs CPU parameters, not {dev}")
        return _Tensors(client, params, buffers, grad_is_mean)
    if exchange == "staged":
        return _Staged(client, params, buffers, grad_is_mean)
    if exchange == "device":
        if dev.type != "cuda":
            raise InvalidArgument("declare", f"exchange='device' needs CUDA parameters, not {dev}")
        cuda = _device_cuda()
        if cuda is None:
            return _Staged(client, params, buffers, grad_is_mean)
        return _Device(client, params, buffers, grad_is_mean, cuda)
    raise InvalidArgument("declare", f"exchange must be 'auto', 'host', 'staged' or 'device', "
                          f"got {exchange!r}")


class _Overlap:
    """Pushes buckets of CPU gradients from autograd hooks while backward
    goes on, like DDP's buckets: the parameters, last first, cut into runs
    of at most bucket_bytes (a run is a range of tensor ids, as
    Client.push_pull_start wants). A bucket starts when the hook of each of
    its parameters has fired; finish() starts what backward left (unused
    parameters push zeros), then the buffers, and waits for the step."""

    def __init__(self, eng, bucket_bytes, n_samples):
        self.eng = eng
        self.want = n_samples  # () -> the n_samples a start pushes with
        self.buckets = []  # (first, count), last parameters first
        self.bucket_of = [0] * eng.np
        end, size = eng.np, 0
        for i in reversed(range(eng.np)):
            nb = eng.params[i].numel() * 4
            if i + 1 < end and size + nb > bucket_bytes:
                self.buckets.append((i + 1, end - i - 1))
                end, size = i + 1, 0
            size += nb
        self.buckets.append((0, end))
        for b, (first, count) in enumerate(self.buckets):
            for i in range(first, first + count):
                self.bucket_of[i] = b
        self.n_samples = None  # the step's, fixed by its first start
        self.fired = [False] * eng.np
        self.left = [c for _, c in self.buckets]  # hooks still to fire
        self.started = [False] * len(self.buckets)
        self.handles = []
        for i, p in enumerate(eng.params):
            if p.requires_grad:  # a frozen one's bucket waits for step()
                self.handles.append(self._hook(p, i))

    def _hook(self, p, i):
        if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
            return p.register_post_accumulate_grad_hook(lambda _p: self.ready(i))
        # torch < 2.1: a post hook on the parameter's AccumulateGrad node,
        # which runs once .grad holds the step's gradient. The node must
        # be kept alive, or a later expand_as makes another one.
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        h = acc.register_hook(lambda _gi, _go: self.ready(i))
        return (acc, h)

    def ready(self, i):
        """Parameter i's gradient is accumulated (an autograd hook)."""
        if self.fired[i]:
            raise StateError("backward", f"parameter {self.eng.names[i]!r} got a second "
                             "gradient before step(): overlap=True pushes each gradient "
                             "once, so call step() after every backward (or use "
                             "overlap=False to accumulate gradients)")
        self.fired[i] = True
        b = self.bucket_of[i]
        self.left[b] -= 1
        if self.left[b] == 0:
            self.start(b)

    def start(self, b):
        eng = self.eng
        if self.n_samples is None:
            self.n_samples = self.want()
        first, count = self.buckets[b]
        for i in range(first, first + count):
            eng.grad_list[i] = eng.grad(i, self.n_samples)
        self.started[b] = True
        try:
            eng.client.push_pull_start(eng.grad_list, self.n_samples, eng.weights, first, count)
        except BaseException:
            # libferry abandoned the step: the next one starts afresh
            self.reset()
            raise

    def finish(self, n_samples):
        """Start what backward did not, then the buffers, and wait for
        the step's weights."""
        eng = self.eng
        if self.n_samples is not None and n_samples != self.n_samples:
            # Buckets already left with backward's n_samples and libferry
            # takes one per step: the step ends with that one, whole.
            warnings.warn(f"ferry.torch: step(n_samples={n_samples}) ignored: backward's "
                          f"pushes went with n_samples={self.n_samples}; with overlap=True "
                          "set opt.n_samples before backward", stacklevel=3)
            n_samples = self.n_samples
        self.n_samples = n_samples
        try:
            for b in range(len(self.buckets)):
                if not self.started[b]:
                    self.start(b)
            nb = len(eng.buffers)
            if nb:
                eng.stage_buffers(n_samples)
                eng.client.push_pull_start(eng.grad_list, n_samples, eng.weights, eng.np, nb)
            eng.client.wait(0, eng.np + nb)
        finally:
            self.reset()

    def reset(self):
        self.n_samples = None
        for i in range(len(self.fired)):
            self.fired[i] = False
        for b, (_, c) in enumerate(self.buckets):
            self.left[b] = c
            self.started[b] = False

    def remove(self):
        for h in self.handles:
            (h[1] if isinstance(h, tuple) else h).remove()
        self.handles = []


def _attach(embeddings, client):
    """Bind each embedding module to its table's id in client."""
    for m in embeddings:
        if m.table.name not in client.tables:
            raise InvalidArgument("declare", f"unknown table {m.table.name!r}: the "
                                  f"client declared {list(client.tables)}")
        m._attach(client, client.tables.index(m.table.name))


def _step_tables(eng, embeddings, n_samples):
    """One client.step: eng's dense gradients (scaled as eng.grads does),
    each embedding's row gradients and prefetched rows. A failure drops
    the embeddings' step state (pull before going on)."""
    grads = eng.grads(n_samples)
    push, pull = [], []
    for m in embeddings:
        push += m._push_blocks(n_samples, eng.grad_is_mean)
        pull += m._pull_blocks()
    try:
        eng.client.step(grads, n_samples, eng.weights, push, pull)
    except BaseException:
        for m in embeddings:
            m._reset()
        raise
    for m in embeddings:
        m._stepped()


class FerryParameterServer:
    """Drive model's parameters from a Ferry job through client.

    FerryParameterServer(model, client, grad_is_mean=True, declare=True)
    declares the parameters (client.declare) unless declare=False (the
    caller declared the same table). Every parameter must be a contiguous
    float32 CPU tensor (InvalidArgument naming it otherwise). Parameters
    without a .grad at push time (unused in this step) push zeros.

    The model's ferry.torch.Embedding / EmbeddingBag modules (which hold no
    parameters) are found and their tables declared beside the parameters
    (declare=False: client must have declared them, InvalidArgument naming
    one it did not); step() then pushes their rows' gradients, and pulls
    the rows they prefetch(), in the same client.step as the dense
    tensors.
    """

    def __init__(self, model, client, *, grad_is_mean=True, declare=True):
        if not isinstance(client, Client):
            raise TypeError(f"client must be a ferry.Client, got {type(client).__name__}")
        self.model = model
        self.client = client
        self.grad_is_mean = grad_is_mean
        named = list(model.named_parameters())
        if not named:
            raise InvalidArgument("declare", "the model has no parameters")
        _check(named, "parameter", only=torch.device("cpu"))
        self.embeddings, tables = _find_embeddings(model)
        self._eng = _Tensors(client, named, (), grad_is_mean)
        self.names = self._eng.names
        self.params = self._eng.params
        if declare:
            self._eng.declare(tables)
        _attach(self.embeddings, client)

    def init_weights(self):
        """Offer the model's current parameters as the job's version 0
        (client.init_weights; the first offer to reach a server wins)."""
        self._eng.init_weights()

    def pull(self):
        """Pull the version this client is due into the parameters, in
        place (their storage; no autograd record). The embeddings'
        prefetched rows are dropped (forwards pull theirs)."""
        self._eng.pull()
        for m in self.embeddings:
            m._reset()

    def start(self):
        """The opening of a loop: rank 0 offers the model's weights, then
        every rank pulls version 0, so all ranks start from rank 0's."""
        if self.client.rank == 0:
            self.init_weights()
        self.pull()

    def grads(self, n_samples):
        """The tensors a push sends: each parameter's .grad (scaled in place
        by n_samples when grad_is_mean), or zeros when it has none."""
        return list(self._eng.grads(n_samples))

    def push(self, n_samples):
        """Push the gradients of a step over n_samples samples (client.push).
        With grad_is_mean, .grad is left multiplied by n_samples. Dense
        only: a model with embeddings steps with step()."""
        if self.embeddings:
            raise StateError("push", "the model has Ferry embeddings: use step()")
        self._eng.push(n_samples)

    def step(self, n_samples):
        """Push the gradients and pull the next version into the
        parameters in one round trip (client.push_pull). With
        grad_is_mean, .grad is left multiplied by n_samples.

        With embeddings it is one client.step: the dense tensors, each
        embedding's row gradients of this step's forwards (one per
        distinct key, scaled as the dense ones) and the rows of the keys
        each embedding's prefetch() named, at the new version. After a
        failure (ferry.Behind, a timeout) call pull() before going on."""
        if self.embeddings:
            _step_tables(self._eng, self.embeddings, n_samples)
        else:
            self._eng.push_pull(n_samples)

    def zero_grad(self, set_to_none=True):
        """model.zero_grad(set_to_none): for loops written around an
        optimizer's zero_grad()."""
        self.model.zero_grad(set_to_none=set_to_none)


class Optimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer whose step is a Ferry push-pull.

    Optimizer(params, client, *, n_samples=1, grad_is_mean=True,
              declare=True, overlap=False, bucket_mb=1.0, module=None,
              buffers="mean", buffers_every=1, exchange="auto")

    params: model.parameters() (named "param<i>", or after the names in
    module.named_parameters() when module= is given), or
    model.named_parameters(). The constructor declares the table
    (parameters, then module's floating buffers as AVERAGE tensors when
    module= is given and buffers="mean"; declare=False: the caller
    declared that same table), rank 0 offers the current values as
    version 0 and every rank pulls it, so all ranks start from rank 0's
    weights. Parameters must be contiguous float32 tensors on one device
    (InvalidArgument naming the first that is not).

    step(closure=None, n_samples=None) pushes the gradients of a step over
    n_samples samples (None: opt.n_samples) and pulls the next version
    into the parameters. The servers run the job's optimizer and lr
    (ferry.Client's options): the param groups here hold no
    hyper-parameters.

    overlap=True (CPU parameters): each bucket of about bucket_mb MiB of
    parameters (last layers first) is pushed from autograd hooks as soon as
    backward has produced its gradients; step() pushes what is left
    (zeros for parameters that got no gradient) and waits. The pushes
    leave during backward, so they use opt.n_samples: set it before
    backward when the batch size changes (a step(n_samples=) naming
    another count is warned about and ignored). One backward per step.
    Gradients are gone before backward returns, so nothing may change them
    between backward and step(): no torch.cuda.amp.GradScaler unscaling,
    no clip_grad_norm_ (the servers clip: Client(clip_norm=)); use
    overlap=False for those. After a failed step (ferry.Behind, a
    rollback, a timeout) call opt.pull() before computing it again.
    On a GPU overlap is not available (one device exchange per step) and
    is ignored with a warning.

    module's ferry.torch.Embedding / EmbeddingBag modules (module= given)
    have their tables declared beside the parameters and step in the same
    client.step (CPU parameters, overlap=False only; InvalidArgument
    otherwise), as with FerryParameterServer.

    buffers: "mean" (the samples-weighted mean over the trainers, copied
    into the module's buffers every buffers_every steps) or "local" (not
    shared). exchange: "auto", or "staged" to force page-locked host
    staging for device parameters (also usable with CPU tensors).
    """

    def __init__(self, params, client, *, n_samples=1, grad_is_mean=True, declare=True,
                 overlap=False, bucket_mb=1.0, module=None, buffers="mean", buffers_every=1,
                 exchange="auto"):
        if not isinstance(client, Client):
            raise TypeError(f"client must be a ferry.Client, got {type(client).__name__}")
        if buffers not in ("mean", "local"):
            raise InvalidArgument("declare", f"buffers must be 'mean' or 'local', got {buffers!r}")
        if not isinstance(buffers_every, int) or buffers_every < 1:
            raise InvalidArgument("declare", f"buffers_every must be an int >= 1, "
                                  f"got {buffers_every!r}")
        named, bufs, device = _tensors(params, module, buffers)
        super().__init__([p for _, p in named], {})
        self.client = client
        self.n_samples = n_samples
        self.buffers_every = buffers_every
        self.steps = 0
        self._embeddings, tables = _find_embeddings(module) if module is not None else ([], [])
        self._eng = _engine(client, named, bufs, grad_is_mean, exchange)
        self._overlap = None
        if self._embeddings and (overlap or isinstance(self._eng, _Flat)):
            raise InvalidArgument("declare", "Ferry embeddings step with CPU parameters and "
                                  "overlap=False (one client.step of dense and row "
                                  "gradients); use FerryParameterServer's form")
        if declare:
            self._eng.declare(tables)
        _attach(self._embeddings, client)
        self._eng.open()
        if client.rank == 0:
            self._eng.init_weights()
        self._eng.pull()
        self._eng.copy_buffers()
        if overlap and isinstance(self._eng, _Flat):
            warnings.warn("ferry.torch.Optimizer: overlap=True is for CPU parameters; "
                          f"parameters on {device} go in one exchange per step",
                          stacklevel=2)
        elif overlap:
            self._overlap = _Overlap(self._eng, int(bucket_mb * (1 << 20)),
                                     lambda: self.n_samples)

    def add_param_group(self, param_group):
        """Only while constructing: the job's table is fixed once declared."""
        if hasattr(self, "_eng"):
            raise StateError("add_param_group", "the job's tensor table is fixed once "
                             "declared: pass every parameter to the constructor")
        super().add_param_group(param_group)

    @property
    def exchange(self):
        """How a step moves the tensors: "host" (CPU tensors in place),
        "device" (libferry_cuda) or "staged" (page-locked host staging)."""
        return {_Device: "device", _Staged: "staged"}.get(type(self._eng), "host")

    @property
    def names(self):
        """The declared tensor names: the parameters', then the buffers'."""
        return self._eng.names + self._eng.buf_names

    @torch.no_grad()
    def step(self, closure=None, n_samples=None):
        """Push this step's gradients (over n_samples samples; None:
        opt.n_samples) and pull the next version into the parameters;
        returns closure()'s loss when a closure is given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        n = self.n_samples if n_samples is None else n_samples
        if self._overlap is not None:
            self._overlap.finish(n)
        elif self._embeddings:
            _step_tables(self._eng, self._embeddings, n)
        else:
            self._eng.push_pull(n)
        self.steps += 1
        if self._eng.buffers and self.steps % self.buffers_every == 0:
            self._eng.copy_buffers()
        return loss

    def pull(self):
        """Pull the version this client is due into the parameters (and
        the averaged buffers into the module's): after a step failed
        (ferry.Behind, a rollback, a timeout) libferry has abandoned it,
        and the loop pulls before it computes the step again."""
        self._eng.pull()
        for m in self._embeddings:
            m._reset()
        if self._eng.buffers:
            self._eng.copy_buffers()

    def zero_grad(self, set_to_none=True):
        """Clear the gradients (None, or zeros with set_to_none=False). For
        device parameters each .grad becomes a view of the flat gradient
        buffer again, zeroed, so backward accumulates straight into it."""
        if isinstance(self._eng, _Flat):
            self._eng.zero_grad()
            return
        for p in self._eng.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def close(self):
        """Remove the overlap hooks and close the device exchange."""
        if self._overlap is not None:
            self._overlap.remove()
            self._overlap = None
        if isinstance(self._eng, _Device):
            self._eng.close()


class LocalSteps(LocalStepsBase):
    """A local-steps job's inner loop (DiLoCo; ferry/local.py has the
    maths) as a torch.optim.Optimizer.

    LocalSteps(params, client, inner, *, local_steps=None, n_samples=1,
               module=None, buffers="mean", exchange="auto")

    client: a ferry.Client opened with local_steps=H and inner_lr equal
    to inner's lr (param_groups[0]['lr']); its optimizer and lr are the
    servers' outer ones. inner: a torch.optim.Optimizer over the same
    parameters. params, module, buffers and exchange are as for
    Optimizer: the constructor declares the table, rank 0 offers version
    0 and every rank pulls it. step(closure=None, n_samples=None) runs
    inner.step; every H-th step pushes the phase's pseudo-gradient and
    pulls the new global weights into the parameters (round()), keeping
    inner's state. zero_grad() is inner's. local_steps, if given, must be
    the client's H; a mismatch, an inner lr <= 0 or one that is not the
    job's inner_lr raise InvalidArgument naming the field.
    """

    def _make_engine(self, params, client, module, buffers, exchange):
        named, bufs, _ = _tensors(params, module, buffers)
        tables = _find_embeddings(module)[1] if module is not None else []
        return named, _engine(client, named, bufs, True, exchange), tables

    @property
    def exchange(self):
        """As Optimizer.exchange: "host", "device" or "staged"."""
        return {_Device: "device", _Staged: "staged"}.get(type(self._eng), "host")


def _tensors(params, module, buffers):
    """(named parameters, named floating-point buffers shared as means,
    their device) of an optimizer's arguments, checked: at least one
    parameter, all on one device, buffers only with buffers="mean"."""
    named = _named(params, module)
    if not named:
        raise InvalidArgument("declare", "no parameters")
    device = _check(named, "parameter")
    bufs = []
    if module is not None and buffers == "mean":
        bufs = [(n, b) for n, b in module.named_buffers() if b.is_floating_point()]
        _check(bufs, "buffer", device)
    return named, bufs, device


def _named(params, module):
    """(name, parameter) pairs: params may be tensors (named after module's
    named_parameters() when given, else "param<i>"), (name, tensor) pairs,
    or param-group dicts holding either under "params"."""
    items = []
    for it in params:
        if isinstance(it, dict):
            items.extend(it["params"])
        else:
            items.append(it)
    by_id = {id(p): n for n, p in module.named_parameters()} if module is not None else {}
    out = []
    for i, it in enumerate(items):
        if isinstance(it, tuple) and len(it) == 2 and isinstance(it[0], str):
            out.append(it)
        elif isinstance(it, torch.Tensor):
            out.append((by_id.get(id(it), f"param{i}"), it))
        else:
            raise TypeError(f"params: item {i} is a {type(it).__name__}, want a tensor or "
                            "a (name, tensor) pair")
    return out
