"""ferry: the Python binding of libferry, Ferry's C client library.

A PyTorch or NumPy training loop uses a Ferry job as its parameter server:

    import ferry
    with ferry.Client("tcp://127.0.0.1:7000", rank, lr=0.1) as c:
        c.declare({"w": w})              # name -> array (or length)
        if rank == 0:
            c.init_weights([w])
        c.pull([w])                      # version 0, into w in place
        for step in range(steps):
            g = grad(w, batch)           # SUM over the batch's samples
            c.push_pull([g], len(batch), [w])

Arrays (NumPy float32 or PyTorch CPU float32 tensors, C-contiguous) are
passed to libferry by address, never copied. Errors are ferry.Error
subclasses carrying the ferry_err code and the server's message.
ferry.torch.FerryParameterServer drives a torch.nn.Module's parameters, and
ferry.torch.Embedding / EmbeddingBag keep embedding rows in the job's sparse
tables (ferry.Table) in the same step.

The package is ctypes over libferry.so: no compiled extension. It finds the
library through $FERRY_LIB, else the build tree it sits in
(<repo>/build/clients), else the system loader; from a checkout,
`PYTHONPATH=python python3 -c "import ferry"`. See python/README.md.
"""
from ._lib import MODE_ASYNC, MODE_SSP, MODE_SYNC
from .client import LIB_PATH, Client, Lease, Stats, data_permutation, strerror
from .tables import Table
from .errors import (Behind, ClosedError, ConnectError, CorruptError, Error, InvalidArgument,
                     MismatchError, OutOfMemory, ProtocolError, RemoteError, SinkError, StateError,
                     TimedOut, UnsupportedError, error_class)

__version__ = "1.0.0"

__all__ = ["Client", "Stats", "Table", "Lease", "data_permutation", "strerror", "library_path", "error_class", "MODE_SYNC",
           "MODE_ASYNC", "MODE_SSP", "Error", "InvalidArgument", "OutOfMemory", "ConnectError", "TimedOut",
           "RemoteError", "ProtocolError", "MismatchError", "StateError", "CorruptError",
           "ClosedError", "UnsupportedError", "Behind", "SinkError"]


def library_path():
    """The path (or soname) of the libferry.so this package loaded."""
    return LIB_PATH
