"""ferry.Client: one trainer's connection to a Ferry job, over libferry.

A Client wraps one ferry_client. It checks its options with
ferry_opts_check (so a bad codec fails in the constructor with the
library's reason), and every later call forwards to the C function of the
same name, raising the ferry.Error subclass of the returned code with
ferry_client_last_error's message.

Arrays cross without copying: for each declared tensor the caller passes a
NumPy array (anything with __array_interface__) or a PyTorch CPU tensor
that is C-contiguous float32 holding exactly the tensor's length (any
shape), and the binding hands libferry its data pointer. Anything else is
an InvalidArgument naming the tensor and what was wrong; nothing is ever
converted behind the caller's back. The two pointer tables a call needs are
allocated once per client, so a step allocates nothing on the C side.

Threading: like ferry_client, a Client is used by one thread at a time.
ctypes releases the GIL during each call, so clients in different threads
(several ranks in one process, or a trainer beside a data loader) run in
parallel.
"""
import ctypes
import dataclasses
import numbers
import sys

from . import _lib, tables as _tables
from .errors import (ClosedError, Error, InvalidArgument, StateError, UnsupportedError, make_error,
                     _STRERROR)

LIB, LIB_PATH = _lib.load()
# libferry 0.3's sparse tables (a 0.2 library serves dense jobs only)
HAS_TABLES = _lib.set_optional(LIB, _lib.TABLE_PROTOS)
# libferry 0.4's elastic jobs: given ranks, rejoin, data leases
HAS_ELASTIC = _lib.set_optional(LIB, _lib.ELASTIC_PROTOS)
# libferry 1.0's fragment calls (streaming local steps): typed for callers
# of LIB; ferry.torch.LocalSteps syncs the whole model (fragments 1)
HAS_FRAGMENTS = _lib.set_optional(LIB, _lib.FRAGMENT_PROTOS)
for _code in range(1, 64):
    _s = LIB.ferry_strerror(_code).decode()
    if _s == "unknown error":
        break
    _STRERROR[_code] = _s

_MODES = {"sync": _lib.MODE_SYNC, "async": _lib.MODE_ASYNC, "ssp": _lib.MODE_SSP}
_U32 = 0xFFFFFFFF


def strerror(code):
    """ferry_strerror(code): the library's description of a ferry_err."""
    return LIB.ferry_strerror(int(code)).decode()


@dataclasses.dataclass(frozen=True)
class Stats:
    """A client's counters (struct ferry_stats). Bytes are as on the wire."""

    bytes_pushed: int  # sent to servers by push / push_pull
    bytes_pulled: int  # received from servers by pull / push_pull
    requests: int  # requests sent (all kinds)
    version: int  # version of the weights this client holds
    resyncs: int  # full pulls after a reference CRC mismatch
    map_changes: int  # placement maps re-fetched (shards moved)
    reprobes: int  # link re-measurements sent to the scheduler
    pulls: int  # pulls whose staleness is counted below
    staleness_last: int  # the last pull's (clocks behind the puller)
    staleness_max: int  # the largest
    staleness_sum: int  # their sum (mean = sum / pulls)

    def as_dict(self):
        """The counters as a plain dict (e.g. for a JSON summary)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Lease:
    """A data lease (struct ferry_lease): positions [start, start+count) of
    epoch `epoch`'s sample order, data_permutation(seed, epoch, n). id 0:
    none now, and then done (every sample of every epoch consumed: leave)
    or retry_ms (ask again after that long). False when id is 0."""

    id: int
    epoch: int
    start: int
    count: int
    seed: int
    done: bool
    retry_ms: int

    def __bool__(self):
        return self.id != 0


def _need_elastic(op):
    if not HAS_ELASTIC:
        raise StateError(op, f"{LIB_PATH} has no elastic jobs (libferry 0.4 or later needed)")


def data_permutation(seed, epoch, n):
    """ferry_data_permutation: epoch `epoch`'s sample order of a data set of
    n samples under data seed `seed`, as a NumPy uint32 array (a
    permutation of 0..n-1, the same as every trainer's, C or Python)."""
    _need_elastic("data_permutation")
    import numpy
    try:
        seed, epoch, n = _u64("seed", seed), _u32("epoch", epoch), _u64("n", n)
    except (TypeError, OverflowError) as e:
        raise InvalidArgument("data_permutation", str(e)) from None
    if n > 1 << 32:
        raise InvalidArgument("data_permutation", f"n must be at most 2**32, got {n}")
    out = numpy.empty(n, dtype=numpy.uint32)
    if n:
        LIB.ferry_data_permutation(seed, epoch, n, out.ctypes.data)
    return out


def _torch_tensor_type():
    mod = sys.modules.get("torch")
    return getattr(mod, "Tensor", None) if mod is not None else None


class Client:
    """One trainer of a Ferry job (a ferry_client).

    Client(scheduler, rank=None, mode="sync", lr=None, codec_push=None,
           codec_pull=None, bucket=0, warmup_steps=0, seed=0, timeout_ms=0,
           staleness=0, sync_quorum=0, secret_file=None,
           optimizer=None, momentum=0.9, beta1=0.9, beta2=0.999, eps=1e-8,
           weight_decay=0.0, lr_schedule="constant", lr_warmup=0,
           lr_step_every=1000, lr_gamma=0.1, lr_min=0.0, lr_total_steps=0,
           clip_norm=0.0, link_budget=0.0, tls_cert=None, tls_key=None,
           tls_ca=None, local_steps=0, inner_lr=0.0, fragments=0)

    rank None asks the scheduler for one (FERRY_RANK_ANY: the lowest free
    rank of an elastic job, ps-server --trainers MIN:MAX); client.rank is
    the rank given once declare() returned (None before).
    The keyword arguments are struct ferry_opts' fields with
    FERRY_OPTS_INIT's defaults: mode "sync", "async" or "ssp" (or 0/1/2;
    "ssp" reads at most `staleness` clocks stale, `sync_quorum` closes a
    sync round on its Q-th push); codecs as
    the servers spell them ("none", "fp16", "q8", "q4:sr", "topk:0.01",
    ...; None = "none"); timeout_ms the deadline of each call (0 = 60 s);
    secret_file the job's key file when the job signs its requests
    (ps-server --secret-file; docs/security.md); tls_cert, tls_key and
    tls_ca (PEM files, all three or none) run every connection over mutual
    TLS (ps-server --tls-cert, --tls-key, --tls-ca; docs/security.md).
    The servers run `optimizer` ("sgd", "momentum", "nesterov", "adam",
    "adamw", "adagrad") with the lr of `lr_schedule` ("constant", "step",
    "cosine"; lr_warmup updates of linear ramp first); clip_norm > 0 clips
    each pushed gradient's global norm per sample (docs/algorithms.md §5).
    With codec_push/codec_pull "auto", link_budget (0: 1.0) is the share
    of the compute time a step's exchange may take on each server link
    (docs/algorithms.md §2.8).
    local_steps=H > 0 makes a local-steps job (DiLoCo, docs/algorithms.md
    §7): each trainer takes H steps of its own inner optimizer, whose base
    lr is inner_lr (> 0), and pushes a pseudo-gradient every H steps
    (ferry.torch.LocalSteps drives it); optimizer and lr are then the
    servers' OUTER ones, by default "nesterov" (momentum 0.9) at lr 0.7,
    else "sgd" at lr 0.1. fragments > 1 (streaming) is the C trainer's.
    The job options (mode, lr, codecs, bucket, warmup_steps, staleness,
    sync_quorum and these) are fixed by the first trainer to declare;
    later ones must match.

    Opening connects nothing yet: call declare() first, then (rank 0)
    init_weights(), pull(), and loop push_pull(). Use it as a context
    manager, or call close(); leave() first when stopping a sync job early
    (the with-block does that itself when it exits on a non-ferry
    exception, e.g. KeyboardInterrupt).
    Raises InvalidArgument with the library's reason for bad options.
    """

    def __init__(self, scheduler, rank=None, *, mode="sync", lr=None, codec_push=None,
                 codec_pull=None, bucket=0, warmup_steps=0, seed=0, timeout_ms=0,
                 staleness=0, sync_quorum=0, secret_file=None,
                 optimizer=None, momentum=0.9, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=0.0, lr_schedule="constant", lr_warmup=0,
                 lr_step_every=1000, lr_gamma=0.1, lr_min=0.0, lr_total_steps=0,
                 clip_norm=0.0, link_budget=0.0, tls_cert=None, tls_key=None,
                 tls_ca=None, local_steps=0, inner_lr=0.0, fragments=0):
        self._c = None
        self._rank = -1
        self._n = 0
        self._lens = ()
        self._names = ()
        self._in = self._out = None  # pointer tables, sized by declare
        self._tables, self._dims = (), ()  # sparse tables: names, dims
        # the layer-wise push-pull's tables (one step passes the same
        # ones to every start), the weights list _ax_w was filled from,
        # and the grads the started tensors read
        self._ax_g = self._ax_w = self._ax_wobj = None
        self._ax_keep = None
        # the arrays pulls wrote since the last one that succeeded:
        # libferry keeps pointers to them (the copy it offers when a lost
        # shard is re-seeded), so they must live on when the caller drops
        # them
        self._held = []
        if isinstance(mode, str):
            if mode not in _MODES:
                raise InvalidArgument("open", f"mode must be 'sync', 'async' or 'ssp', got {mode!r}")
            mode = _MODES[mode]
        local = _local_opts(local_steps, inner_lr, fragments)
        if optimizer is None:  # a local-steps job's outer optimizer: DiLoCo's
            optimizer = "nesterov" if local[0] else "sgd"
        if lr is None:
            lr = 0.7 if local[0] else 0.1
        self.local_steps, self.inner_lr, self.fragments = local
        o = _lib.Opts.init()
        # The byte strings must outlive the call: keep them on self.
        self._keep = [s.encode() if isinstance(s, str) else s
                      for s in (scheduler, codec_push, codec_pull, optimizer,
                                lr_schedule, tls_cert, tls_key, tls_ca)]
        (o.scheduler_url, o.codec_push, o.codec_pull, o.optimizer,
         o.lr_schedule, o.tls_cert, o.tls_key, o.tls_ca) = self._keep
        try:
            if rank is None:
                _need_elastic("open")
            elif int(rank) < 0:  # None, not -1, asks for one
                raise InvalidArgument("open", f"rank must be >= 0 (None: the scheduler gives "
                                      f"one), got {rank!r}")
            o.rank = _lib.RANK_ANY if rank is None else int(rank)
            o.timeout_ms = _u32("timeout_ms", timeout_ms)
            o.mode = int(mode)
            o.lr = float(lr)
            o.bucket = _u32("bucket", bucket)
            o.warmup_steps = _u32("warmup_steps", warmup_steps)
            o.seed = int(seed)
            o.staleness = _u32("staleness", staleness)
            o.sync_quorum = _u32("sync_quorum", sync_quorum)
            o.momentum = float(momentum)
            o.beta1 = float(beta1)
            o.beta2 = float(beta2)
            o.eps = float(eps)
            o.weight_decay = float(weight_decay)
            o.lr_warmup = _u64("lr_warmup", lr_warmup)
            o.lr_step_every = _u64("lr_step_every", lr_step_every)
            o.lr_gamma = float(lr_gamma)
            o.lr_min = float(lr_min)
            o.lr_total_steps = _u64("lr_total_steps", lr_total_steps)
            o.clip_norm = float(clip_norm)
            o.link_budget = float(link_budget)
            if any(local):
                o.local_steps, o.inner_lr, o.fragments = local
        except (TypeError, OverflowError) as e:
            raise InvalidArgument("open", str(e)) from None
        why = ctypes.create_string_buffer(256)
        if LIB.ferry_opts_check(ctypes.byref(o), why, len(why)) != 0:
            raise InvalidArgument("open", why.value.decode(errors="replace"))
        h = ctypes.c_void_p()
        rv = LIB.ferry_client_open(ctypes.byref(o), ctypes.byref(h))
        if rv != 0:
            raise make_error(rv, "open", f"scheduler {scheduler}")
        self._c = h
        self._rank = o.rank
        self.scheduler = scheduler
        if secret_file is not None:
            path = secret_file.encode() if isinstance(secret_file, str) else secret_file
            rv = LIB.ferry_client_set_secret_file(h, path)
            if rv != 0:
                err = self._fail(rv, "open")
                self.close()
                raise err

    # ---- lifecycle ---------------------------------------------------------
    def close(self):
        """Close the connections and free the client (ferry_client_close).
        Sends nothing: call leave() first to stop a sync job early.
        Idempotent; later calls raise ClosedError."""
        c, self._c = self._c, None
        if c is not None:
            LIB.ferry_client_close(c)

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        # A trainer stopping on its own error (or Ctrl-C) tells the job, so
        # the other ranks do not wait out their deadlines; after a ferry
        # error the link itself is suspect, and leave would only wait.
        if etype is not None and not issubclass(etype, Error) and self._n:
            try:
                self.leave()
            except Error:
                pass
        self.close()
        return False

    def __del__(self):
        self.close()

    def _handle(self, op):
        if self._c is None:
            raise ClosedError(op, "the client is closed")
        return self._c

    def _fail(self, rv, op):
        msg = LIB.ferry_client_last_error(self._c) or b""
        return make_error(rv, op, msg.decode(errors="replace"))

    # ---- the job -----------------------------------------------------------
    def declare(self, tensors, average=(), tables=()):
        """Register this trainer with its tensor table and wait for the job.

        tensors: a dict name -> length or array (its number of elements),
        or a sequence of (name, length-or-array) pairs. Ids follow this
        order, which later calls' sequences use. average: names of the
        table's tensors the servers average rather than train (module
        buffers such as BatchNorm's running statistics,
        FERRY_TENSOR_AVERAGE): push value * n_samples for them and pull
        the samples-weighted mean of the trainers' values; no optimizer,
        lr or clipping applies. Every rank declares the same table, kinds
        included (else MismatchError). Blocks until every trainer and
        server has joined and the placement is published.

        tables: the job's sparse tables (ids in this order), each a
        ferry.Table or a dict of its fields, e.g. {"name": "user",
        "dim": 16, "init": "normal", "init_scale": 0.01, "optimizer":
        "adagrad", "lr": 0.05}; see rows_pull, rows_push_pull and step.
        """
        c = self._handle("declare")
        if self._n:
            raise StateError("declare", "already declared")
        items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
        if not items:
            raise InvalidArgument("declare", "no tensors")
        avg = {average} if isinstance(average, str) else {str(a) for a in average}
        specs = (_lib.TensorSpec * len(items))()
        names, lens = [], []
        for i, it in enumerate(items):
            try:
                name, spec = it
            except (TypeError, ValueError):
                raise InvalidArgument("declare", f"item {i}: want (name, length), got {it!r}") from None
            n = int(spec) if isinstance(spec, numbers.Integral) else _numel(spec)
            if n is None or n <= 0:
                raise InvalidArgument("declare", f"tensor {name!r}: length must be a positive int or an array, got {spec!r}")
            names.append(str(name))
            lens.append(n)
            specs[i].len = n
            specs[i].kind = _lib.TensorSpec.AVERAGE if str(name) in avg else _lib.TensorSpec.WEIGHTS
        unknown = sorted(avg.difference(names))
        if unknown:
            raise InvalidArgument("declare", f"average: {unknown[0]!r} is not a declared tensor")
        enc = [s.encode() for s in names]
        for i, b in enumerate(enc):
            specs[i].name = b
        tables = list(tables)
        if tables:
            if not HAS_TABLES:
                raise StateError("declare", f"{LIB_PATH} has no sparse tables (libferry 0.3 "
                                 "or later needed)")
            keep = []
            tspecs, tnames, tdims = _tables.table_specs(tables, keep)
            rv = LIB.ferry_client_declare_tables(c, specs, len(items), tspecs, len(tables))
        else:
            tnames, tdims = (), ()
            rv = LIB.ferry_client_declare_specs(c, specs, len(items))
        if rv != 0:
            raise self._fail(rv, "declare")
        self._tables, self._dims = tnames, tdims
        self._names, self._lens, self._n = tuple(names), tuple(lens), len(items)
        self._in = (ctypes.c_void_p * self._n)()
        self._out = (ctypes.c_void_p * self._n)()

    @property
    def names(self):
        """The declared tensor names, in id order (empty before declare)."""
        return self._names

    @property
    def lengths(self):
        """The declared tensor lengths (float32 elements), in id order."""
        return self._lens

    @property
    def trainers(self):
        """Trainers in the job (known after declare; 0 before)."""
        return LIB.ferry_client_trainers(self._handle("trainers"))

    def lr(self):
        """The learning rate the servers apply to the next update
        (ferry_client_lr: the job's schedule at this client's version)."""
        return LIB.ferry_client_lr(self._handle("lr"))

    def init_weights(self, weights):
        """Offer the initial weights (one array per tensor, read only). The
        first offer to reach each server becomes version 0; later ones are
        ignored. Blocks until the servers acknowledged."""
        c = self._handle("init_weights")
        self._fill(self._in, weights, False, "init_weights")
        rv = LIB.ferry_client_init_weights(c, self._in)
        if rv != 0:
            raise self._fail(rv, "init_weights")

    def _hold(self, weights, rv):
        """Keeps the arrays a pull wrote alive (see self._held): a call
        that succeeded wrote every shard, so only its arrays are left."""
        self._held = [weights] if rv == 0 else self._held + [weights]

    def pull(self, weights=None):
        """Fill weights (one writable array per tensor) with the version
        this client is due, waiting until it exists; returns weights.
        weights=None allocates NumPy arrays (1-D float32)."""
        c = self._handle("pull")
        weights = self._outputs(weights, "pull")
        self._fill(self._out, weights, True, "pull")
        rv = LIB.ferry_client_pull(c, self._out)
        self._hold(weights, rv)
        if rv != 0:
            raise self._fail(rv, "pull")
        return weights

    def push(self, grads, n_samples):
        """Push gradients for the current version: grads holds, per tensor,
        the SUM of the per-sample gradients over n_samples samples (the
        servers divide by the job's total). Does not wait for other ranks."""
        c = self._handle("push")
        self._fill(self._in, grads, False, "push")
        rv = LIB.ferry_client_push(c, self._in, _samples(n_samples, "push"))
        if rv != 0:
            raise self._fail(rv, "push")

    def push_pull(self, grads, n_samples, weights=None):
        """push(grads, n_samples) and pull(weights) in one round trip;
        returns weights. grads and weights may be the same arrays if the
        gradients are no longer needed."""
        c = self._handle("push_pull")
        weights = self._outputs(weights, "push_pull")
        self._fill(self._in, grads, False, "push_pull")
        self._fill(self._out, weights, True, "push_pull")
        rv = LIB.ferry_client_push_pull(c, self._in, _samples(n_samples, "push_pull"), self._out)
        self._hold(weights, rv)
        if rv != 0:
            raise self._fail(rv, "push_pull")
        return weights

    # ---- layer-wise push-pull (overlap with backward) ----------------------
    def push_pull_start(self, grads, n_samples, weights, first, count):
        """Start the push-pull of tensors [first, first + count) and return
        without waiting (ferry_client_push_pull_start): a trainer pushes
        each layer's gradient as soon as backward produced it.

        grads: one array per declared tensor (or a dict name -> array);
        only the entries of the range are read, the others may be None.
        weights: one writable array per declared tensor, the same ones for
        every start of a step, as is n_samples. Each tensor of a step is
        started once; the grads of the range must stay unchanged until the
        step ends. The step ends with the wait() after which every tensor
        has been waited for; the weights are those push_pull gives, bit for
        bit. Any error abandons the step: pull() before going on.
        """
        c = self._handle("push_pull_start")
        first, count = self._range(first, count, "push_pull_start")
        if self._ax_g is None:
            self._ax_g = (ctypes.c_void_p * self._n)()
            self._ax_w = (ctypes.c_void_p * self._n)()
            self._ax_keep = [None] * self._n
        if weights is not self._ax_wobj:
            # a new weights list: check it (the same list is checked once)
            self._fill(self._ax_w, weights, True, "push_pull_start")
            self._ax_wobj = weights
        self._fill_range(self._ax_g, grads, first, count, "push_pull_start")
        rv = LIB.ferry_client_push_pull_start(c, self._ax_g, _samples(n_samples, "push_pull_start"),
                                              self._ax_w, first, count)
        if rv != 0:
            self._ax_wobj = None
            raise self._fail(rv, "push_pull_start")
        if not self._held or self._held[-1] is not weights:
            self._held = self._held + [weights]

    def wait(self, first, count):
        """Block until the new weights of tensors [first, first + count),
        all started in this step, are in the weights push_pull_start was
        given (ferry_client_wait); the other tensors' requests keep
        travelling meanwhile."""
        c = self._handle("wait")
        first, count = self._range(first, count, "wait")
        rv = LIB.ferry_client_wait(c, first, count)
        if rv != 0:
            self._ax_wobj = None
            raise self._fail(rv, "wait")

    def _range(self, first, count, op):
        if not self._n:
            raise StateError(op, "declare first")
        if (not isinstance(first, numbers.Integral) or not isinstance(count, numbers.Integral)
                or first < 0 or count <= 0 or first + count > self._n):
            raise InvalidArgument(op, f"tensors [{first!r}, +{count!r}) are not within the "
                                  f"{self._n} declared")
        return int(first), int(count)

    def _fill_range(self, table, arrays, first, count, op):
        """_fill for the entries [first, first + count) only; arrays holds
        one entry per declared tensor (or is a dict name -> array)."""
        if isinstance(arrays, dict):
            try:
                arrays = [arrays[k] if first <= i < first + count else None
                          for i, k in enumerate(self._names)]
            except KeyError as e:
                raise InvalidArgument(op, f"no array for tensor {e.args[0]!r}") from None
        elif self._n == 1 and _is_array(arrays):
            arrays = (arrays,)
        if not hasattr(arrays, "__len__") or not hasattr(arrays, "__getitem__"):
            raise InvalidArgument(op, f"want a list of {self._n} arrays or a dict name -> array, "
                                  f"got a {type(arrays).__name__}")
        if len(arrays) != self._n:
            raise InvalidArgument(op, f"{len(arrays)} arrays for {self._n} declared tensors")
        tt = _torch_tensor_type()
        for i in range(first, first + count):
            table[i] = _data_ptr(arrays[i], self._lens[i], False, tt, op, self._names[i])
            self._ax_keep[i] = arrays[i]  # read until the step ends

    # ---- sparse tables -------------------------------------------------
    @property
    def tables(self):
        """The declared sparse tables' names, in id order."""
        return self._tables

    def _table(self, t, op):
        if isinstance(t, str):
            if t in self._tables:
                return self._tables.index(t)
        elif isinstance(t, numbers.Integral) and 0 <= t < len(self._tables):
            return int(t)
        raise InvalidArgument(op, f"unknown table {t!r} (declared: {list(self._tables)})")

    def _blocks(self, items, pull, op):
        """The struct ferry_rows array of items ((table, keys, rows or
        grads) triples) and the arrays written or read (pull: None makes
        an (n, dim) float32 NumPy array)."""
        if not self._n:
            raise StateError(op, "declare first")
        items = list(items)
        arr = (_lib.Rows * max(len(items), 1))()
        arrays = []
        what = "out" if pull else "grads"
        for j, it in enumerate(items):
            try:
                t, keys, a = it
            except (TypeError, ValueError):
                raise InvalidArgument(op, f"block {j}: want (table, keys, {what}), "
                                      f"got {it!r}") from None
            ti = self._table(t, op)
            name, dim = self._tables[ti], self._dims[ti]
            kp, n = _tables.keys_ptr(keys, op, name)
            if a is None and pull:
                a = _tables.new_rows(n, dim, op)
            p = _tables.rows_ptr(a, n, dim, pull, op, name, what)
            arr[j].table, arr[j].keys, arr[j].n = ti, kp, n
            if pull:
                arr[j].rows = p
            else:
                arr[j].grads = p
            arrays.append(a)
        return arr, len(items), arrays

    def rows_pull(self, table, keys, out=None):
        """The rows of keys (repeats and any order) of table (id or name)
        at the version this client holds, written into out (float32,
        n * dim values, e.g. shape (n, dim); None: a new NumPy array);
        returns out. Absent rows come back as their initial values."""
        c = self._handle("rows_pull")
        arr, n, outs = self._blocks([(table, keys, out)], True, "rows_pull")
        rv = LIB.ferry_client_rows_pull(c, arr, n)
        if rv != 0:
            raise self._fail(rv, "rows_pull")
        return outs[0]

    def rows_push_pull(self, push, n_samples, pull=()):
        """Push row gradients (push: (table, keys, grads) triples; grads
        n * dim float32, a key's occurrences summed) for n_samples samples,
        then pull the rows of the pull triples ((table, keys, out); out
        None: a new array) as the push left them; returns the outs. In a
        sync job every trainer calls this each step, with no push triples
        when it has no keys."""
        c = self._handle("rows_push_pull")
        parr, np_, _ = self._blocks(push, False, "rows_push_pull")
        qarr, nq, outs = self._blocks(pull, True, "rows_push_pull")
        rv = LIB.ferry_client_rows_push_pull(c, parr, np_, _samples(n_samples, "rows_push_pull"),
                                             qarr, nq)
        if rv != 0:
            raise self._fail(rv, "rows_push_pull")
        return outs

    def step(self, grads, n_samples, weights=None, push=(), pull=()):
        """One step of dense tensors and sparse tables in one round
        (ferry_client_step): push_pull(grads, n_samples, weights) and
        rows_push_pull(push, n_samples, pull), the requests of both in
        flight together. Returns (weights, outs)."""
        c = self._handle("step")
        weights = self._outputs(weights, "step")
        self._fill(self._in, grads, False, "step")
        self._fill(self._out, weights, True, "step")
        parr, np_, _ = self._blocks(push, False, "step")
        qarr, nq, outs = self._blocks(pull, True, "step")
        rv = LIB.ferry_client_step(c, self._in, _samples(n_samples, "step"), self._out,
                                   parr, np_, qarr, nq)
        self._hold(weights, rv)
        if rv != 0:
            raise self._fail(rv, "step")
        return weights, outs

    def table_stats(self, table):
        """This client's counters of table (id or name): keys_pulled,
        rows_pulled (distinct), keys_pushed, rows_pushed (distinct)."""
        c = self._handle("table_stats")
        st = _lib.TableStats()
        rv = LIB.ferry_client_table_stats(c, self._table(table, "table_stats"), ctypes.byref(st))
        if rv != 0:
            raise self._fail(rv, "table_stats")
        return {f: getattr(st, f) for f, _ in _lib.TableStats._fields_}

    def leave(self):
        """Tell the job this trainer leaves: sync rounds stop waiting for
        its pushes. Call before close() when stopping early."""
        rv = LIB.ferry_client_leave(self._handle("leave"))
        if rv != 0:
            raise self._fail(rv, "leave")

    # ---- elastic jobs ------------------------------------------------------
    @property
    def rank(self):
        """This trainer's rank: the one passed, or the one the scheduler gave
        (rank=None) once declare() returned; None before that."""
        if self._c is not None and HAS_ELASTIC:
            self._rank = LIB.ferry_client_rank(self._c)
        return None if self._rank < 0 else self._rank

    @property
    def elastic(self):
        """Whether the job's membership can change (--trainers MIN:MAX with
        MIN < MAX): its trainers should take their data from lease_next()."""
        return HAS_ELASTIC and bool(LIB.ferry_client_elastic(self._handle("elastic")))

    @property
    def members(self):
        """Trainers live in the job by this client's map (0 before declare):
        a hook for learning-rate rules that scale with the trainer count."""
        _need_elastic("members")
        return int(LIB.ferry_client_members(self._handle("members")))

    def rejoin(self):
        """Register again, under the same rank, after leave() (an idle trainer
        that found work again); the next pull joins the sync rounds."""
        _need_elastic("rejoin")
        rv = LIB.ferry_client_rejoin(self._handle("rejoin"))
        if rv != 0:
            raise self._fail(rv, "rejoin")

    def lease_next(self, dataset_size, epochs, seed, want):
        """Give back the lease held (consumed up to the last lease_mark) and
        ask for the next one of up to `want` positions of a data set of
        dataset_size samples trained for `epochs` epochs under data seed
        `seed` (the first trainer to ask fixes the three). Returns a Lease,
        false (id 0) when none is free now: see its done and retry_ms."""
        _need_elastic("lease_next")
        try:
            args = (_u64("dataset_size", dataset_size), _u32("epochs", epochs),
                    _u64("seed", seed), _u64("want", want))
        except (TypeError, OverflowError) as e:
            raise InvalidArgument("lease_next", str(e)) from None
        out = _lib.CLease()
        rv = LIB.ferry_client_lease_next(self._handle("lease_next"), *args, ctypes.byref(out))
        if rv != 0:
            raise self._fail(rv, "lease_next")
        return Lease(out.id, out.epoch, out.start, out.count, out.seed, bool(out.done),
                     out.retry_ms)

    def lease_mark(self, lease_id, end):
        """Say that the samples of the next push (push, push_pull, step) end
        at position `end` of lease `lease_id`: the pushes carry it, so a
        trainer killed mid-lease gives back exactly what was not pushed."""
        _need_elastic("lease_mark")
        try:
            args = (_u64("lease_id", lease_id), _u64("end", end))
        except (TypeError, OverflowError) as e:
            raise InvalidArgument("lease_mark", str(e)) from None
        LIB.ferry_client_lease_mark(self._handle("lease_mark"), *args)

    def lease_release(self):
        """Give back the lease held (consumed up to the last lease_mark)
        without asking for another: before leave() when stopping early."""
        _need_elastic("lease_release")
        rv = LIB.ferry_client_lease_release(self._handle("lease_release"))
        if rv != 0:
            raise self._fail(rv, "lease_release")

    def stats(self):
        """The client's counters, as a Stats."""
        st = _lib.CStats()
        LIB.ferry_client_stats(self._handle("stats"), ctypes.byref(st))
        return Stats(*(getattr(st, f) for f, _ in _lib.CStats._fields_))

    def last_error(self):
        """ferry_client_last_error: the message of the last failed call."""
        return (LIB.ferry_client_last_error(self._handle("last_error")) or b"").decode(errors="replace")

    # ---- arrays -> pointers ------------------------------------------------
    def _outputs(self, weights, op):
        if weights is not None:
            return weights
        if not self._n:
            raise StateError(op, "declare first")
        try:
            import numpy
        except ImportError:
            raise InvalidArgument(op, "pass the output arrays (NumPy is not installed)") from None
        return [numpy.empty(n, dtype=numpy.float32) for n in self._lens]

    def _fill(self, table, arrays, writable, op):
        """Write the data pointers of arrays (one per declared tensor, in id
        order, or a dict name -> array; a bare array when one tensor is
        declared) into table, checking each one."""
        n = self._n
        if not n:
            raise StateError(op, "declare first")
        if isinstance(arrays, dict):
            try:
                arrays = [arrays[k] for k in self._names]
            except KeyError as e:
                raise InvalidArgument(op, f"no array for tensor {e.args[0]!r}") from None
        elif n == 1 and _is_array(arrays):
            arrays = (arrays,)
        if not hasattr(arrays, "__len__") or not hasattr(arrays, "__getitem__"):
            raise InvalidArgument(op, f"want a list of {n} arrays or a dict name -> array, "
                                  f"got a {type(arrays).__name__}")
        if len(arrays) != n:
            raise InvalidArgument(op, f"{len(arrays)} arrays for {n} declared tensors")
        tt = _torch_tensor_type()
        for i in range(n):
            table[i] = _data_ptr(arrays[i], self._lens[i], writable, tt, op, self._names[i])


def _local_opts(local_steps, inner_lr, fragments):
    """(local_steps, inner_lr, fragments) as ferry_opts holds them;
    UnsupportedError when they are set and this binding's struct has no
    such fields (so they are never dropped without a word)."""
    try:
        local = (_u32("local_steps", local_steps), float(inner_lr), _u32("fragments", fragments))
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidArgument("open", str(e)) from None
    if any(local) and "local_steps" not in dict(_lib.Opts._fields_):
        raise UnsupportedError("open", "local_steps, inner_lr, fragments: this libferry "
                               "binding's ferry_opts has no local-steps fields")
    return local


def _u64(what, v):
    v = int(v)
    if not 0 <= v < 1 << 64:
        raise OverflowError(f"{what} must be in 0..2**64-1, got {v}")
    return v


def _u32(what, v):
    v = int(v)
    if not 0 <= v <= _U32:
        raise OverflowError(f"{what} must be in 0..{_U32}, got {v}")
    return v


def _samples(n, op):
    if not isinstance(n, int) or not 0 < n <= _U32:
        raise InvalidArgument(op, f"n_samples must be an int in 1..{_U32}, got {n!r}")
    return n


def _is_array(a):
    tt = _torch_tensor_type()
    return hasattr(a, "__array_interface__") or (tt is not None and isinstance(a, tt))


def _numel(a):
    tt = _torch_tensor_type()
    if tt is not None and isinstance(a, tt):
        return a.numel()
    ai = getattr(a, "__array_interface__", None)
    if ai is None:
        return None
    n = 1
    for d in ai["shape"]:
        n *= d
    return n


def _data_ptr(a, n, writable, tt, op, name):
    """The address of a's n float32 elements, or InvalidArgument saying why
    a cannot be used in place."""
    if tt is not None and isinstance(a, tt):
        if a.dtype != sys.modules["torch"].float32:
            why = f"dtype {a.dtype}, want torch.float32"
        elif a.device.type != "cpu":
            why = f"on {a.device}, want a CPU tensor (copy it to the host yourself)"
        elif a.layout != sys.modules["torch"].strided or not a.is_contiguous():
            why = "not contiguous (call .contiguous() yourself: the binding never copies)"
        elif a.numel() != n:
            why = f"{a.numel()} elements, want {n}"
        else:
            return a.data_ptr()
        raise InvalidArgument(op, f"tensor {name!r}: {why}")
    ai = getattr(a, "__array_interface__", None)
    if ai is None:
        raise InvalidArgument(op, f"tensor {name!r}: a {type(a).__name__} is not an array; "
                              "pass a NumPy array or a PyTorch CPU tensor")
    ptr, readonly = ai["data"]
    size = 1
    for d in ai["shape"]:
        size *= d
    if ai["typestr"] != _F32:
        why = f"dtype {ai['typestr']}, want float32 ({_F32})"
    elif ai.get("strides") is not None and not _c_contiguous(ai, size):
        why = "not C-contiguous (use numpy.ascontiguousarray yourself: the binding never copies)"
    elif size != n:
        why = f"{size} elements, want {n}"
    elif writable and readonly:
        why = "read-only, but pull writes into it"
    elif size and not ptr:
        why = "has no data pointer"
    else:
        return ptr
    raise InvalidArgument(op, f"tensor {name!r}: {why}")


_F32 = "<f4" if sys.byteorder == "little" else ">f4"


def _c_contiguous(ai, size):
    # numpy reports strides=None for C-contiguous arrays; other exporters
    # may spell them out, so check them against the C layout.
    if size <= 1:
        return True
    want = 4
    for d, s in zip(reversed(ai["shape"]), reversed(ai["strides"])):
        if d != 1 and s != want:
            return False
        want *= d
    return True
