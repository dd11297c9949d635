"""Sparse embedding tables in the Python binding (libferry 0.3).

A Table describes one sparse table for Client.declare(..., tables=[...]);
the Client's rows_pull, rows_push_pull and step calls pass keys and rows
through the helpers here. Keys are NumPy uint64 (or int64) arrays or
PyTorch int64 CPU tensors, read in place (int64 reinterpreted as uint64);
rows and row gradients are NumPy float32 arrays or PyTorch float32 CPU
tensors, C-contiguous, holding n * dim values (shape (n, dim) or flat),
written or read in place. Anything else is an InvalidArgument (a
ValueError) naming the table and what was wrong: nothing is ever copied.
"""
import ctypes
import dataclasses
import sys

from . import _lib
from .errors import InvalidArgument

_INITS = {"zeros": 0, "uniform": 1, "normal": 2}
_U8 = ("<u8", "<i8") if sys.byteorder == "little" else (">u8", ">i8")
_F32 = "<f4" if sys.byteorder == "little" else ">f4"


@dataclasses.dataclass
class Table:
    """One sparse table (struct ferry_table_spec): rows of dim float32
    keyed by uint64, created on first (admitted) update from (seed,
    table, key). Zero / None fields take libferry's defaults."""

    name: str
    dim: int
    init: str = "zeros"  # "zeros", "uniform" (in [-init_scale, init_scale)), "normal"
    init_scale: float = 0.0
    optimizer: str = None  # "sgd" (None), "adagrad", "adam", "ftrl"
    lr: float = 0.0  # 0: the job's lr and schedule
    beta1: float = 0.0
    beta2: float = 0.0
    eps: float = 0.0
    adagrad_init: float = 0.0
    ftrl_beta: float = 0.0
    ftrl_l1: float = 0.0
    ftrl_l2: float = 0.0
    shards: int = 0  # hash ranges (0: one per server)
    expected_rows: int = 0
    admit_count: int = 0
    admit_prob: float = 0.0
    evict_after: int = 0
    codec_push: str = None  # "none" (None), "fp16", "bf16", "q8"
    codec_pull: str = None


def table_specs(tables, keep):
    """The ctypes array of struct ferry_table_spec for tables (Table
    objects or dicts of its fields); the byte strings go into keep (they
    must outlive the declare). Returns (array, names, dims)."""
    tables = list(tables)
    arr = (_lib.TableSpec * max(len(tables), 1))()
    names, dims = [], []
    for i, t in enumerate(tables):
        if isinstance(t, dict):
            try:
                t = Table(**t)
            except TypeError as e:
                raise InvalidArgument("declare", f"table {i}: {e}") from None
        if not isinstance(t, Table):
            raise InvalidArgument("declare", f"table {i}: want a ferry.Table or a dict, "
                                  f"got a {type(t).__name__}")
        if t.init not in _INITS:
            raise InvalidArgument("declare", f"table {i} ({t.name!r}): init must be 'zeros', "
                                  f"'uniform' or 'normal', got {t.init!r}")
        s = arr[i]
        try:
            for f in ("name", "optimizer", "codec_push", "codec_pull"):
                v = getattr(t, f)
                b = v.encode() if isinstance(v, str) else v
                keep.append(b)
                setattr(s, f, b)
            s.dim = int(t.dim)
            s.init = _INITS[t.init]
            for f in ("init_scale", "lr", "beta1", "beta2", "eps", "adagrad_init",
                      "ftrl_beta", "ftrl_l1", "ftrl_l2", "admit_prob"):
                setattr(s, f, float(getattr(t, f)))
            for f in ("shards", "expected_rows", "admit_count", "evict_after"):
                setattr(s, f, int(getattr(t, f)))
        except (TypeError, ValueError, AttributeError) as e:
            raise InvalidArgument("declare", f"table {i} ({t.name!r}): {e}") from None
        names.append(str(t.name))
        dims.append(int(t.dim))
    return arr, tuple(names), tuple(dims)


def _torch():
    return sys.modules.get("torch")


def keys_ptr(k, op, tname):
    """(address, n) of keys k, read in place."""
    torch = _torch()
    if torch is not None and isinstance(k, torch.Tensor):
        if k.dtype not in (torch.int64, getattr(torch, "uint64", torch.int64)):
            why = f"dtype {k.dtype}, want torch.int64"
        elif k.device.type != "cpu":
            why = f"on {k.device}, want a CPU tensor"
        elif not k.is_contiguous():
            why = "not contiguous (the binding never copies)"
        else:
            return k.data_ptr(), k.numel()
        raise InvalidArgument(op, f"table {tname!r}: keys {why}")
    ai = getattr(k, "__array_interface__", None)
    if ai is None:
        raise InvalidArgument(op, f"table {tname!r}: keys must be a NumPy uint64 array or a "
                              f"torch int64 tensor, got a {type(k).__name__}")
    n = _size(ai)
    if ai["typestr"] not in _U8:
        why = f"dtype {ai['typestr']}, want uint64 (or int64)"
    elif not _contiguous(ai, n, 8):
        why = "not C-contiguous (the binding never copies)"
    else:
        return ai["data"][0], n
    raise InvalidArgument(op, f"table {tname!r}: keys {why}")


def rows_ptr(a, n, dim, writable, op, tname, what):
    """The address of a's n * dim float32 values, in place."""
    want = n * dim
    torch = _torch()
    if torch is not None and isinstance(a, torch.Tensor):
        if a.dtype != torch.float32:
            why = f"dtype {a.dtype}, want torch.float32"
        elif a.device.type != "cpu":
            why = f"on {a.device}, want a CPU tensor"
        elif not a.is_contiguous():
            why = "not contiguous (the binding never copies)"
        elif a.numel() != want:
            why = f"{a.numel()} values, want {n} keys x dim {dim} = {want}"
        else:
            return a.data_ptr()
        raise InvalidArgument(op, f"table {tname!r}: {what} {why}")
    ai = getattr(a, "__array_interface__", None)
    if ai is None:
        raise InvalidArgument(op, f"table {tname!r}: {what} must be a NumPy float32 array or "
                              f"a torch float32 CPU tensor, got a {type(a).__name__}")
    size = _size(ai)
    ptr, readonly = ai["data"]
    if ai["typestr"] != _F32:
        why = f"dtype {ai['typestr']}, want float32"
    elif not _contiguous(ai, size, 4):
        why = "not C-contiguous (the binding never copies)"
    elif size != want:
        why = f"{size} values, want {n} keys x dim {dim} = {want}"
    elif writable and readonly:
        why = "read-only, but rows are written into it"
    else:
        return ptr
    raise InvalidArgument(op, f"table {tname!r}: {what} {why}")


def new_rows(n, dim, op):
    """A fresh (n, dim) float32 NumPy array for pulled rows."""
    try:
        import numpy
    except ImportError:
        raise InvalidArgument(op, "pass the output arrays (NumPy is not installed)") from None
    return numpy.empty((n, dim), dtype=numpy.float32)


def _size(ai):
    n = 1
    for d in ai["shape"]:
        n *= d
    return n


def _contiguous(ai, size, item):
    st = ai.get("strides")
    if st is None or size <= 1:
        return True
    want = item
    for d, s in zip(reversed(ai["shape"]), reversed(st)):
        if d != 1 and s != want:
            return False
        want *= d
    return True
