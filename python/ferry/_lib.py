"""Finding and describing libferry.so for ctypes.

This module owns the one place where the Python binding meets the C ABI of
<ferry/ferry.h>: where the shared library is found, the ctypes mirrors of
its structs (struct ferry_opts, struct ferry_stats, the sparse tables')
and the argument and return types of every function the binding calls.
Nothing here knows about NumPy or PyTorch; client.py (and tables.py) turn
arrays into the pointers declared here.

The library is looked up, in this order:
  1. $FERRY_LIB, the path of a libferry.so (an error if it does not load);
  2. the build tree this package sits in: <repo>/build/clients/libferry.so,
     so that `PYTHONPATH=python python3 -c "import ferry"` works from a
     checkout after `scripts/setup.sh` (or any build into build/);
  3. the prefix `cmake --install` put this package in (ferry/_prefix.py,
     written at install time: <prefix>/<libdir>/libferry.so.1);
  4. pkg-config's libdir of ferry (`pkg-config --variable=libdir ferry`:
     PKG_CONFIG_PATH names a prefix installed elsewhere), which is how a
     package installed with `pip install ./python` finds a libferry that
     `cmake --install` put in a prefix the loader does not search;
  5. the system loader (libferry.so.1, then libferry.so), for an installed
     libferry (LD_LIBRARY_PATH, ld.so.conf).
"""
import ctypes
import os

# The SONAME's major version this binding speaks (clients/CMakeLists.txt
# sets SOVERSION 1).
ABI_MAJOR = 1

# enum ferry_mode
MODE_SYNC = 0
MODE_ASYNC = 1
MODE_SSP = 2


class Opts(ctypes.Structure):
    """struct ferry_opts, field for field (FERRY_OPTS_INIT in Opts.init)."""

    _fields_ = [
        ("scheduler_url", ctypes.c_char_p),
        ("rank", ctypes.c_int),
        ("timeout_ms", ctypes.c_uint32),
        ("mode", ctypes.c_int),
        ("lr", ctypes.c_double),
        ("codec_push", ctypes.c_char_p),
        ("codec_pull", ctypes.c_char_p),
        ("bucket", ctypes.c_uint32),
        ("warmup_steps", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        # The C struct goes on: every field must be here, or libferry
        # reads past the end of this one.
        ("log", ctypes.c_void_p),
        ("log_arg", ctypes.c_void_p),
        ("heartbeat_ms", ctypes.c_uint32),
        ("staleness", ctypes.c_uint32),
        ("sync_quorum", ctypes.c_uint32),
        # the servers' optimizer, lr schedule and clipping (issue 13)
        ("optimizer", ctypes.c_char_p),
        ("momentum", ctypes.c_double),
        ("beta1", ctypes.c_double),
        ("beta2", ctypes.c_double),
        ("eps", ctypes.c_double),
        ("weight_decay", ctypes.c_double),
        ("lr_schedule", ctypes.c_char_p),
        ("lr_warmup", ctypes.c_uint64),
        ("lr_step_every", ctypes.c_uint64),
        ("lr_gamma", ctypes.c_double),
        ("lr_min", ctypes.c_double),
        ("lr_total_steps", ctypes.c_uint64),
        ("clip_norm", ctypes.c_double),
        ("link_budget", ctypes.c_double),  # codec "auto" (0: 1.0)
        # mutual TLS (issue 12): PEM files, all None = plain tcp
        ("tls_cert", ctypes.c_char_p),
        ("tls_key", ctypes.c_char_p),
        ("tls_ca", ctypes.c_char_p),
        # local steps (issue 28): the job's fields; the optimizer and lr
        # above are then the servers' OUTER ones
        ("local_steps", ctypes.c_uint32),  # 0 = off
        ("inner_lr", ctypes.c_double),  # the trainers' base inner lr
        ("fragments", ctypes.c_uint32),  # 0, 1 = the whole model at once
        # untrusted trainers (issue 31): the attack this trainer runs
        # (benchmarks and tests only; None: honest)
        ("attack", ctypes.c_char_p),
    ]

    @classmethod
    def init(cls):
        """An Opts holding FERRY_OPTS_INIT's values."""
        return cls(None, 0, 0, MODE_SYNC, 0.1, None, None, 0, 0, 0, None, None,
                   0, 0, 0, None, 0.9, 0.9, 0.999, 1e-8, 0.0, None, 0, 1000,
                   0.1, 0.0, 0, 0.0, 0.0, None, None, None, 0, 0.0, 0,
                   None)


class TensorDesc(ctypes.Structure):
    """struct ferry_tensor_desc (ferry_client_declare: every tensor WEIGHTS)."""

    _fields_ = [("name", ctypes.c_char_p), ("len", ctypes.c_size_t)]


class TensorSpec(ctypes.Structure):
    """struct ferry_tensor_spec (libferry 0.2); kind is WEIGHTS or AVERAGE
    (enum ferry_tensor_kind)."""

    WEIGHTS = 0  # FERRY_TENSOR_WEIGHTS: the servers' optimizer applies the pushes
    AVERAGE = 1  # FERRY_TENSOR_AVERAGE: updates set the pushes' samples-weighted mean

    # init / init_scale (libferry 1.0: seeded version-0 weights) stay 0:
    # the binding offers its tensors' values as before.
    _fields_ = [("name", ctypes.c_char_p), ("len", ctypes.c_size_t), ("kind", ctypes.c_uint32),
                ("init", ctypes.c_uint32), ("init_scale", ctypes.c_float)]


class CStats(ctypes.Structure):
    """struct ferry_stats."""

    _fields_ = [
        ("bytes_pushed", ctypes.c_uint64),
        ("bytes_pulled", ctypes.c_uint64),
        ("requests", ctypes.c_uint64),
        ("version", ctypes.c_uint64),
        ("resyncs", ctypes.c_uint64),
        ("map_changes", ctypes.c_uint64),
        ("reprobes", ctypes.c_uint64),
        ("pulls", ctypes.c_uint64),
        ("staleness_last", ctypes.c_uint64),
        ("staleness_max", ctypes.c_uint64),
        ("staleness_sum", ctypes.c_uint64),
    ]


class TableSpec(ctypes.Structure):
    """struct ferry_table_spec (libferry 0.3): one sparse table."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dim", ctypes.c_uint32),
        ("init", ctypes.c_uint32),
        ("init_scale", ctypes.c_float),
        ("optimizer", ctypes.c_char_p),
        ("lr", ctypes.c_double),
        ("beta1", ctypes.c_double),
        ("beta2", ctypes.c_double),
        ("eps", ctypes.c_double),
        ("adagrad_init", ctypes.c_double),
        ("ftrl_beta", ctypes.c_double),
        ("ftrl_l1", ctypes.c_double),
        ("ftrl_l2", ctypes.c_double),
        ("shards", ctypes.c_uint32),
        ("expected_rows", ctypes.c_uint64),
        ("admit_count", ctypes.c_uint32),
        ("admit_prob", ctypes.c_double),
        ("evict_after", ctypes.c_uint64),
        ("codec_push", ctypes.c_char_p),
        ("codec_pull", ctypes.c_char_p),
    ]


class Rows(ctypes.Structure):
    """struct ferry_rows: one table's keys of a rows call."""

    _fields_ = [
        ("table", ctypes.c_uint32),
        ("keys", ctypes.c_void_p),
        ("n", ctypes.c_size_t),
        ("rows", ctypes.c_void_p),
        ("grads", ctypes.c_void_p),
    ]


class TableStats(ctypes.Structure):
    """struct ferry_table_stats."""

    _fields_ = [
        ("keys_pulled", ctypes.c_uint64),
        ("rows_pulled", ctypes.c_uint64),
        ("keys_pushed", ctypes.c_uint64),
        ("rows_pushed", ctypes.c_uint64),
    ]


_vp = ctypes.c_void_p
_ptrs = ctypes.POINTER(ctypes.c_void_p)  # float *const * and const float *const *
# name: (restype, argtypes)
_PROTOS = {
    "ferry_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "ferry_opts_check": (ctypes.c_int, [ctypes.POINTER(Opts), ctypes.c_char_p, ctypes.c_size_t]),
    "ferry_client_open": (ctypes.c_int, [ctypes.POINTER(Opts), ctypes.POINTER(_vp)]),
    "ferry_client_close": (None, [_vp]),
    "ferry_client_declare": (ctypes.c_int, [_vp, ctypes.POINTER(TensorDesc), ctypes.c_size_t]),
    "ferry_client_declare_specs": (ctypes.c_int, [_vp, ctypes.POINTER(TensorSpec),
                                                  ctypes.c_size_t]),
    "ferry_client_init_weights": (ctypes.c_int, [_vp, _ptrs]),
    "ferry_client_pull": (ctypes.c_int, [_vp, _ptrs]),
    "ferry_client_push": (ctypes.c_int, [_vp, _ptrs, ctypes.c_uint32]),
    "ferry_client_push_pull": (ctypes.c_int, [_vp, _ptrs, ctypes.c_uint32, _ptrs]),
    "ferry_client_leave": (ctypes.c_int, [_vp]),
    "ferry_client_stats": (None, [_vp, ctypes.POINTER(CStats)]),
    "ferry_client_last_error": (ctypes.c_char_p, [_vp]),
    "ferry_client_trainers": (ctypes.c_int, [_vp]),
    "ferry_client_set_secret_file": (ctypes.c_int, [_vp, ctypes.c_char_p]),
    "ferry_client_lr": (ctypes.c_double, [_vp]),
    # layer-wise push-pull (overlap with backward)
    "ferry_client_push_pull_start": (ctypes.c_int, [_vp, _ptrs, ctypes.c_uint32, _ptrs,
                                                    ctypes.c_size_t, ctypes.c_size_t]),
    "ferry_client_wait": (ctypes.c_int, [_vp, ctypes.c_size_t, ctypes.c_size_t]),
}

_rows = ctypes.POINTER(Rows)
# The sparse tables (libferry 0.3). Not required to load: a 0.2 library
# still serves dense jobs, and the table calls then say what is missing.
TABLE_PROTOS = {
    "ferry_client_declare_tables": (ctypes.c_int, [_vp, ctypes.POINTER(TensorSpec),
                                                   ctypes.c_size_t, ctypes.POINTER(TableSpec),
                                                   ctypes.c_size_t]),
    "ferry_client_rows_pull": (ctypes.c_int, [_vp, _rows, ctypes.c_size_t]),
    "ferry_client_rows_push_pull": (ctypes.c_int, [_vp, _rows, ctypes.c_size_t, ctypes.c_uint32,
                                                   _rows, ctypes.c_size_t]),
    "ferry_client_step": (ctypes.c_int, [_vp, _ptrs, ctypes.c_uint32, _ptrs, _rows,
                                         ctypes.c_size_t, _rows, ctypes.c_size_t]),
    "ferry_client_table_stats": (ctypes.c_int, [_vp, ctypes.c_uint32,
                                                ctypes.POINTER(TableStats)]),
}


class CLease(ctypes.Structure):
    """struct ferry_lease (libferry 0.4): a data lease."""

    _fields_ = [
        ("id", ctypes.c_uint64),
        ("epoch", ctypes.c_uint32),
        ("start", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("done", ctypes.c_int),
        ("retry_ms", ctypes.c_uint32),
    ]


class Span(ctypes.Structure):
    """struct ferry_span (libferry 1.0): floats [offset, offset + len) of
    tensor `tensor`, one run of a fragment's elements."""

    _fields_ = [
        ("tensor", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("len", ctypes.c_uint64),
    ]


# Streaming local steps (libferry 1.0), optional as the tables are.
FRAGMENT_PROTOS = {
    "ferry_client_fragment_spans": (ctypes.c_int, [_vp, ctypes.c_uint32,
                                                   ctypes.POINTER(Span), ctypes.c_size_t,
                                                   ctypes.POINTER(ctypes.c_size_t)]),
    "ferry_client_fragment_start": (ctypes.c_int, [_vp, ctypes.c_uint32, _ptrs,
                                                   ctypes.c_uint32, _ptrs]),
    "ferry_client_fragment_wait": (ctypes.c_int, [_vp]),
    "ferry_client_fragment_pull": (ctypes.c_int, [_vp, ctypes.c_uint32, _ptrs]),
}


# FERRY_RANK_ANY: the scheduler gives the rank (elastic jobs).
RANK_ANY = -1

# Elastic jobs (libferry 0.4). Optional as the tables are: an older
# library serves jobs of fixed ranks, and these calls then say so.
ELASTIC_PROTOS = {
    "ferry_client_rank": (ctypes.c_int, [_vp]),
    "ferry_client_elastic": (ctypes.c_int, [_vp]),
    "ferry_client_members": (ctypes.c_int, [_vp]),
    "ferry_client_rejoin": (ctypes.c_int, [_vp]),
    "ferry_client_lease_next": (ctypes.c_int, [_vp, ctypes.c_uint64, ctypes.c_uint32,
                                               ctypes.c_uint64, ctypes.c_uint64,
                                               ctypes.POINTER(CLease)]),
    "ferry_client_lease_mark": (None, [_vp, ctypes.c_uint64, ctypes.c_uint64]),
    "ferry_client_lease_release": (ctypes.c_int, [_vp]),
    "ferry_data_permutation": (None, [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64,
                                      ctypes.c_void_p]),
}


def set_optional(lib, protos):
    """Declares the prototypes of protos that lib has; returns whether it
    has them all."""
    have = all(hasattr(lib, n) for n in protos)
    for name, (res, args) in protos.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
    return have


def _candidates():
    """Yields the (path, why) pairs to try, in order: a generator, so that
    pkg-config runs only when the places before it did not load."""
    env = os.environ.get("FERRY_LIB")
    if env:
        yield env, "$FERRY_LIB"
        return
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    soname = "libferry.so.%d" % ABI_MAJOR
    yield os.path.join(repo, "build", "clients", "libferry.so"), "build tree"
    try:
        from . import _prefix  # only in a copy `cmake --install` wrote
    except ImportError:
        _prefix = None
    if _prefix:
        yield os.path.join(_prefix.PREFIX, _prefix.LIBDIR, soname), "cmake --install prefix"
    libdir = _pkg_config_libdir()
    if libdir:
        yield os.path.join(libdir, soname), "pkg-config ferry"
    yield soname, "system loader"
    yield "libferry.so", "system loader"


def _pkg_config_libdir():
    """`pkg-config --variable=libdir ferry`, or None (no pkg-config, no
    ferry.pc)."""
    import shutil
    import subprocess
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "--variable=libdir", "ferry"], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def open_first(candidates, protos):
    """The first of candidates ((path, why) pairs) that loads and has every
    function of protos (name -> (restype, argtypes)), with those types set:
    (CDLL, path, tried), or (None, None, tried); tried says why each other
    candidate was passed over. libferry and libferry_cuda load through it."""
    tried = []
    for path, why in candidates:
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({why}: no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({why}: {e})")
            continue
        missing = [n for n in protos if not hasattr(lib, n)]
        if missing:
            tried.append(f"{path} ({why}: lacks {', '.join(missing)})")
            continue
        for name, (res, args) in protos.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        return lib, path, tried
    return None, None, tried


def load():
    """Load libferry and declare its prototypes; returns (CDLL, path).

    Raises ImportError naming every place tried when none loads. ctypes.CDLL
    releases the GIL around each call, so clients in different threads
    block independently.
    """
    lib, path, tried = open_first(_candidates(), _PROTOS)
    if lib is not None:
        return lib, path
    raise ImportError("ferry: cannot load libferry.so; tried " + "; ".join(tried)
                      + ". Build it (scripts/setup.sh) or set FERRY_LIB=/path/to/libferry.so")
