"""ferry.torch's embeddings: torch modules whose rows live in a Ferry
sparse table (ferry.Table) instead of an nn.Parameter.

    emb = ferry.torch.EmbeddingBag(16, mode="sum",
                                   table=ferry.Table("user", 16, init="uniform",
                                                     init_scale=0.05, optimizer="adagrad"))
    model = Net(emb)                      # any module tree holding it
    ps = FerryParameterServer(model, c)   # declares the dense tensors AND the table
    ps.start()
    for x, keys, offsets, y in loader:
        model.zero_grad(set_to_none=True)
        loss(model(x, keys, offsets), y).backward()
        emb.prefetch(next_keys)           # optional: the next batch's rows ride the step
        ps.step(len(x))                   # dense grads + row grads in ONE client.step

A forward takes the batch's keys (an int64 CPU tensor, read as uint64:
negative ids are simply large keys), de-duplicates them (torch.unique) and
puts the rows of the distinct keys into one fresh leaf tensor: pulled with
client.rows_pull at the version the client holds, or already written by the
previous step's pull when prefetch() named these keys. F.embedding /
F.embedding_bag then run over the remapped indices, so backward leaves the
leaf's .grad: one gradient per distinct key. FerryParameterServer.step
pushes those (times n_samples when grad_is_mean, as the dense gradients)
beside the dense ones, and the servers run the table's row optimizer.

The modules hold no nn.Parameter: model.parameters() (and so the dense
table, DDP, torch optimizers) never see them. A forward in eval mode or
under torch.no_grad() pulls rows and records nothing to push.
"""
import dataclasses

import torch
import torch.nn.functional as F

from .errors import InvalidArgument, StateError
from .tables import Table


def _spec(table, dim, op):
    """table (a ferry.Table, a dict of its fields or a name) as a Table of
    dim floats a row (dim 0 in the spec: this module's)."""
    if isinstance(table, str):
        table = Table(table, dim)
    elif isinstance(table, dict):
        try:
            table = Table(**table)
        except TypeError as e:
            raise InvalidArgument(op, f"table: {e}") from None
    if not isinstance(table, Table):
        raise InvalidArgument(op, f"table must be a ferry.Table, a dict of its fields or a "
                              f"name, got a {type(table).__name__}")
    if not isinstance(dim, int) or dim < 1:
        raise InvalidArgument(op, f"table {table.name!r}: embedding_dim must be an int >= 1, "
                              f"got {dim!r}")
    if not table.dim:
        table = dataclasses.replace(table, dim=dim)
    if table.dim != dim:
        raise InvalidArgument(op, f"table {table.name!r}: dim {table.dim} but embedding_dim "
                              f"{dim}")
    return table


class _State:
    """A module's mutable per-step state, outside nn.Module's __setattr__
    (which costs a few microseconds a write, 26 tables a step)."""

    __slots__ = ("client", "tid", "pending", "want", "next")

    def __init__(self):
        self.client = self.tid = self.want = self.next = None
        self.pending = []


class _Rows(torch.nn.Module):
    """What Embedding and EmbeddingBag share: the table, and in _st the
    client it is attached to (and the table's id), this step's (keys,
    leaf) pairs (pending) and the prefetched batch:

    want: (keys, inverse, rows) of the input prefetch() named, pulled by
    the next step; next: the same once that step wrote its rows (the
    version the client then holds), used by a forward before another step
    whose input is keys[inverse] (checked by value: a loader may have
    reused the prefetched tensor's storage)."""

    def __init__(self, embedding_dim, table):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.table = _spec(table, embedding_dim, type(self).__name__)
        self._st = _State()

    def extra_repr(self):
        return f"{self.embedding_dim}, table={self.table.name!r}"

    # ---- FerryParameterServer's side ------------------------------------
    def _attach(self, client, tid):
        self._st.client, self._st.tid = client, tid
        self._reset()

    def _reset(self):
        """Forget this step's pushes and every prefetch (a failed step, a
        pull: the rows no longer match the version held)."""
        self._st.pending = []
        self._st.want = self._st.next = None

    def _push_blocks(self, n_samples, grad_is_mean):
        """This step's (table, keys, row grads) blocks; the grads scaled in
        place by n_samples when grad_is_mean. A leaf backward did not reach
        pushes nothing."""
        out = []
        for keys, leaf in self._st.pending:
            g = leaf.grad
            if g is None or keys.numel() == 0:
                continue
            if g.layout != torch.strided or not g.is_contiguous():
                g = g.to_dense().contiguous()
            if grad_is_mean:
                g.mul_(n_samples)
            out.append((self._st.tid, keys, g))
        return out

    def _pull_blocks(self):
        """The prefetched keys' (table, keys, rows) block, if any."""
        self._st.next = None  # rows of a version before this step's
        if self._st.want is None:
            return []
        keys, _, rows = self._st.want
        return [(self._st.tid, keys, rows)]

    def _stepped(self):
        """The step went through: its pushes are done, the prefetched rows
        are at the new version."""
        self._st.pending = []
        self._st.next, self._st.want = self._st.want, None

    # ---- the user's side -------------------------------------------------
    def _keys(self, input, op):
        if not isinstance(input, torch.Tensor):
            raise InvalidArgument(op, f"table {self.table.name!r}: input must be a torch "
                                  f"int64 tensor, got a {type(input).__name__}")
        if input.dtype != torch.int64:
            raise InvalidArgument(op, f"table {self.table.name!r}: input dtype {input.dtype}, "
                                  "want torch.int64 (keys are read as uint64)")
        if input.device.type != "cpu":
            raise InvalidArgument(op, f"table {self.table.name!r}: input on {input.device}, "
                                  "want a CPU tensor (the keys go to libferry in place)")
        if self._st.client is None:
            raise StateError(op, f"table {self.table.name!r}: not attached to a job: build "
                             "ferry.torch.FerryParameterServer over the model first")

    def prefetch(self, input):
        """Name the keys of the next forward (input as forward's: the keys,
        1-D or 2-D; offsets play no part): the next step pulls their rows
        at the version it makes, in the same round as its push, and a
        forward over an equal input before another step uses them instead
        of a rows_pull of its own."""
        self._keys(input, "prefetch")
        keys, inv = torch.unique(input, return_inverse=True)
        rows = torch.empty(keys.numel(), self.embedding_dim)
        self._st.want = (keys, inv, rows)

    def _lookup(self, input, checked=False):
        """(inverse indices, rows leaf) for the keys in input (checked:
        the caller ran _keys on it)."""
        if not checked:
            self._keys(input, "forward")
        nx = self._st.next
        if nx is not None and nx[1].shape == input.shape and torch.equal(nx[0][nx[1]], input):
            keys, inv, rows = nx
            self._st.next = None
        else:
            keys, inv = torch.unique(input, return_inverse=True)
            rows = torch.empty(keys.numel(), self.embedding_dim)
            if keys.numel():
                self._st.client.rows_pull(self._st.tid, keys, rows)
        if self.training and torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._st.pending.append((keys, rows))
        return inv, rows


class Embedding(_Rows):
    """nn.Embedding over a Ferry sparse table: Embedding(embedding_dim,
    table=...) maps an int64 tensor of keys (any shape) to their rows,
    shape input.shape + (embedding_dim,). table: a ferry.Table (dim 0 or
    embedding_dim), a dict of its fields, or a name (a table with
    libferry's defaults: zero rows, sgd)."""

    def __init__(self, embedding_dim, table):
        super().__init__(embedding_dim, table)

    def forward(self, input):
        inv, rows = self._lookup(input)
        return F.embedding(inv, rows)


class EmbeddingBag(_Rows):
    """nn.EmbeddingBag over a Ferry sparse table: EmbeddingBag(
    embedding_dim, mode="mean", table=..., include_last_offset=False).

    forward(input, offsets=None, per_sample_weights=None) as
    nn.EmbeddingBag's: a 1-D input of keys cut into bags by offsets, or a
    2-D input (B, L) of B bags of L keys; per_sample_weights (float32, the
    shape of input) with mode "sum" only. Returns (bags, embedding_dim)."""

    def __init__(self, embedding_dim, mode="mean", table=None, include_last_offset=False):
        if mode not in ("sum", "mean"):
            raise InvalidArgument("EmbeddingBag", f"mode must be 'sum' or 'mean', got {mode!r}")
        if table is None:
            raise InvalidArgument("EmbeddingBag", "table= is required (a ferry.Table)")
        super().__init__(embedding_dim, table)
        self.mode = mode
        self.include_last_offset = include_last_offset

    def extra_repr(self):
        return super().extra_repr() + f", mode={self.mode!r}"

    def forward(self, input, offsets=None, per_sample_weights=None):
        self._keys(input, "forward")
        name = self.table.name
        if input.dim() == 1 and offsets is None:
            raise InvalidArgument("forward", f"table {name!r}: a 1-D input needs offsets")
        if input.dim() == 2 and offsets is not None:
            raise InvalidArgument("forward", f"table {name!r}: offsets with a 2-D input "
                                  "(each row is a bag)")
        if input.dim() not in (1, 2):
            raise InvalidArgument("forward", f"table {name!r}: input must be 1-D (with "
                                  f"offsets) or 2-D, got {input.dim()}-D")
        if offsets is not None and (not isinstance(offsets, torch.Tensor)
                                    or offsets.dtype != torch.int64):
            raise InvalidArgument("forward", f"table {self.table.name!r}: offsets must be a "
                                  "torch int64 tensor")
        if per_sample_weights is not None and self.mode != "sum":
            raise InvalidArgument("forward", f"table {self.table.name!r}: per_sample_weights "
                                  "need mode='sum'")
        inv, rows = self._lookup(input, True)
        return F.embedding_bag(inv, rows, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset)


def find(model):
    """The Ferry embedding modules in model (in module order) and the
    tables they name: a list of Table specs, one per distinct name
    (modules naming one table share it; their specs must be equal)."""
    mods = [m for m in model.modules() if isinstance(m, _Rows)]
    tables = {}
    for m in mods:
        t = tables.setdefault(m.table.name, m.table)
        if t != m.table:
            raise InvalidArgument("declare", f"table {t.name!r}: two modules name it with "
                                  f"different specs ({t} and {m.table})")
    return mods, list(tables.values())
