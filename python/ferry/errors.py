"""The ferry.Error hierarchy: one class per ferry_err code.

libferry returns a positive ferry_err and keeps the message of the failed
call (often the server's own words) in ferry_client_last_error. The binding
raises the class of that code carrying both, so callers can catch what they
can handle (ferry.TimedOut, ferry.Behind) and let the rest propagate. Where
a Python built-in exception means the same thing, the class also derives
from it (TimedOut is a TimeoutError, ConnectError a ConnectionError,
InvalidArgument a ValueError), so generic handlers keep working.

The codes mirror enum ferry_err in <ferry/ferry.h>, which is append-only:
a code this binding does not know yet is raised as plain ferry.Error.
"""


class Error(Exception):
    """A failed libferry call.

    Attributes: code (the ferry_err number), op (the call, e.g. "push"),
    message (the library's or the server's reason; may be empty).
    """

    code = None  # set on each subclass

    def __init__(self, op="", message="", code=None):
        if code is None:
            code = type(self).code
        self.code = code
        self.op = op
        self.message = message
        what = _STRERROR.get(code, f"ferry error {code}")
        text = f"{op}: {what}" if op else what
        if message:
            text += f": {message}"
        super().__init__(text)


class InvalidArgument(Error, ValueError):
    """FERRY_EINVAL: a bad argument or option (also raised by the binding
    itself for an array of the wrong dtype, layout or length)."""


class OutOfMemory(Error, MemoryError):
    """FERRY_ENOMEM: the library could not allocate."""


class ConnectError(Error, ConnectionError):
    """FERRY_ECONNECT: the scheduler or a server cannot be reached."""


class TimedOut(Error, TimeoutError):
    """FERRY_ETIMEDOUT: the call's deadline (timeout_ms) passed."""


class RemoteError(Error):
    """FERRY_EREMOTE: a server or the scheduler answered an error status;
    message holds its words."""


class ProtocolError(Error):
    """FERRY_EPROTO: a malformed reply from a peer."""


class MismatchError(Error):
    """FERRY_EMISMATCH: this trainer's tensor table differs from the job's."""


class StateError(Error):
    """FERRY_ESTATE: a call out of order (e.g. push before declare)."""


class CorruptError(Error):
    """FERRY_ECORRUPT: a checksum (the pull reference's CRC) failed."""


class ClosedError(Error):
    """FERRY_ECLOSED: the job or this client is closed."""


class UnsupportedError(Error):
    """FERRY_EUNSUPP: an option this build of libferry does not support."""


class Behind(Error):
    """FERRY_EBEHIND: a sync push for a version the job has passed; pull
    and compute the step again."""


class SinkError(Error):
    """FERRY_ESINK: the pull sink failed."""


class RolledBack(Error):
    """FERRY_EROLLBACK: the job rolled back to a snapshot (a server
    restarted without replicas); pull and go on from the job's version."""


# enum ferry_err, in order (FERRY_OK = 0 is not an error).
_CLASSES = [None, InvalidArgument, OutOfMemory, ConnectError, TimedOut,
            RemoteError, ProtocolError, MismatchError, StateError,
            CorruptError, ClosedError, UnsupportedError, Behind, SinkError,
            RolledBack]
for _code, _cls in enumerate(_CLASSES):
    if _cls is not None:
        _cls.code = _code
# Filled from ferry_strerror when the library loads (client.py).
_STRERROR = {}


def error_class(code):
    """The Error subclass for a ferry_err code (Error for an unknown one)."""
    if 0 < code < len(_CLASSES):
        return _CLASSES[code]
    return Error


def make_error(code, op="", message=""):
    """An instance of the right Error subclass for code."""
    return error_class(code)(op, message, code=code)
