"""ferry.cuda: weights and gradients on a CUDA GPU through libferry_cuda.

libferry_cuda.so (<ferry/ferry_cuda.h>, docs/libferry.md "Weights on a GPU")
exchanges two device buffers with a Ferry job: w, the weights, and g, the
gradient, each holding every declared tensor back to back in declare order.
With a push or pull codec the device can handle (fp16, bf16, q8, q4, q2) the
gradient is encoded and the pulled deltas decoded on the GPU, with the C
trainer's kernels, so only codes cross PCIe; otherwise the data goes through
one page-locked host buffer.

    import ferry, ferry.cuda
    c = ferry.Client(url, rank, codec_push="q8", codec_pull="q8")
    c.declare({"w": n})
    w = torch.zeros(n, device="cuda"); g = torch.zeros_like(w)
    with ferry.cuda.DeviceExchange(c, w.data_ptr(), g.data_ptr(),
                                   torch.cuda.current_stream().cuda_stream) as x:
        if rank == 0:
            x.init_weights()
        x.pull()
        for batch in data:
            ...                           # g = SUM of the batch's gradients
            x.push_pull(len(batch))       # w holds the next version

The library is found from $FERRY_CUDA_LIB, else beside the libferry.so the
package loaded (ferry.library_path()), else the build tree
(<repo>/build/clients/cuda), else the system loader. available() says
whether it loads and sees a device; it never raises.
"""
import ctypes
import os

from . import errors
from . import _lib as _lib_mod
from .client import LIB_PATH

_vp = ctypes.c_void_p
_PROTOS = {
    "ferry_cuda_available": (ctypes.c_int, []),
    "ferry_cuda_open": (ctypes.c_int, [_vp, _vp, _vp, _vp, ctypes.POINTER(_vp)]),
    "ferry_cuda_init_weights": (ctypes.c_int, [_vp]),
    "ferry_cuda_pull": (ctypes.c_int, [_vp]),
    "ferry_cuda_push_pull": (ctypes.c_int, [_vp, ctypes.c_uint32]),
    "ferry_cuda_last_error": (ctypes.c_char_p, [_vp]),
    "ferry_cuda_close": (None, [_vp]),
}

_lib = None    # the CDLL once loaded
_path = None   # where it came from
_tried = None  # why each place failed, when none loaded


def _libferry_dir():
    """The folder of the libferry.so this package loaded, or None."""
    if os.sep in LIB_PATH:
        return os.path.dirname(os.path.abspath(LIB_PATH))
    # Loaded by soname through the system loader: ask the process's maps.
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if os.path.basename(p).startswith("libferry.so"):
                    return os.path.dirname(p)
    except OSError:
        pass
    return None


def _candidates():
    """The (path, why) pairs tried, in order."""
    env = os.environ.get("FERRY_CUDA_LIB")
    if env:
        return [(env, "$FERRY_CUDA_LIB")]
    out = []
    d = _libferry_dir()
    if d:
        out.append((os.path.join(d, "libferry_cuda.so"), "beside libferry.so"))
        out.append((os.path.join(d, "cuda", "libferry_cuda.so"), "libferry's build tree"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out.append((os.path.join(repo, "build", "clients", "cuda", "libferry_cuda.so"),
                "build tree"))
    out += [("libferry_cuda.so.%d" % _lib_mod.ABI_MAJOR, "system loader"),
            ("libferry_cuda.so", "system loader")]
    return out


def _load():
    """The libferry_cuda CDLL, or None (the reasons in _tried)."""
    global _lib, _path, _tried
    if _lib is not None or _tried is not None:
        return _lib
    lib, path, tried = _lib_mod.open_first(_candidates(), _PROTOS)
    if lib is not None:
        _lib, _path = lib, path
        return lib
    _tried = tried
    return None


def library_path():
    """The path (or soname) of the libferry_cuda.so loaded, or None."""
    _load()
    return _path


def available():
    """True when libferry_cuda loads and a CUDA device is usable."""
    try:
        lib = _load()
        return lib is not None and lib.ferry_cuda_available() == 1
    except Exception:  # noqa: BLE001 - a probe: never raises
        return False


class DeviceExchange:
    """One trainer's step exchange for device buffers (ferry_cuda_*).

    client: a declared ferry.Client; w_ptr, g_ptr: device addresses (ints,
    e.g. tensor.data_ptr()) of float32 buffers holding every declared tensor
    back to back in declare order; stream_ptr: a cudaStream_t as an int (0:
    the legacy default stream). Open it before the first pull. Each call
    returns when w holds the new weights (g may then be overwritten).
    Close it (or leave its `with` block) before closing the client.
    """

    def __init__(self, client, w_ptr, g_ptr, stream_ptr=0):
        lib = _load()
        if lib is None:
            raise errors.UnsupportedError(
                "cuda_open", "cannot load libferry_cuda.so; tried " + "; ".join(_tried or [])
                + ". Build with CUDA or set FERRY_CUDA_LIB=/path/to/libferry_cuda.so")
        if not w_ptr or not g_ptr:
            raise errors.InvalidArgument("cuda_open", "w_ptr and g_ptr must be device addresses")
        self._lib = lib
        self._client = client  # the client must outlive the exchange
        h = _vp()
        rv = lib.ferry_cuda_open(client._handle("cuda_open"), w_ptr, g_ptr, stream_ptr or None,
                                 ctypes.byref(h))
        if rv != 0:
            msg = (lib.ferry_cuda_last_error(None) or b"").decode(errors="replace")
            raise errors.make_error(rv, "cuda_open", msg)
        self._x = h.value

    def _call(self, op, rv):
        if rv != 0:
            msg = (self._lib.ferry_cuda_last_error(self._x) or b"").decode(errors="replace")
            raise errors.make_error(rv, op, msg)

    def _handle(self, op):
        if self._x is None:
            raise errors.ClosedError(op, "the DeviceExchange is closed")
        return self._x

    def init_weights(self):
        """Offer the values in w as the job's version 0 (rank 0 does)."""
        self._call("cuda_init_weights", self._lib.ferry_cuda_init_weights(
            self._handle("cuda_init_weights")))

    def pull(self):
        """Pull the version the client is due into w."""
        self._call("cuda_pull", self._lib.ferry_cuda_pull(self._handle("cuda_pull")))

    def push_pull(self, n_samples):
        """Push g (the SUM over n_samples samples), pull the next version into w."""
        self._call("cuda_push_pull", self._lib.ferry_cuda_push_pull(
            self._handle("cuda_push_pull"), int(n_samples)))

    def close(self):
        """Free the device state and remove the pull sink; idempotent."""
        x, self._x = getattr(self, "_x", None), None
        if x is not None:
            self._lib.ferry_cuda_close(x)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
