"""Stream values as DLPack spells them, and the consumer's current stream.

DLPack's ``stream`` for CUDA: None = the legacy default stream, 1 = the
legacy default stream, 2 = the per-thread default stream, > 2 = a
``CUstream`` handle, -1 = do not synchronize, 0 = refused (ambiguous).
Objects with ``__cuda_stream__`` (the cuda.core protocol, returning
``(0, handle)``) stand for their handle. The values 1 and 2 are exactly the
driver's ``CU_STREAM_LEGACY`` and ``CU_STREAM_PER_THREAD``, so a stream
value is a driver handle once None is mapped to 1.
"""

from __future__ import annotations

import contextvars

from ._cuda_driver import LEGACY_STREAM, PER_THREAD_STREAM, runtime

NO_SYNC = -1

# (handle, device of the handle or None for 1, 2 and -1) set by `stream`.
_current: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("dlpack_ref_cuda_stream", default=None)


def stream_handle(stream) -> int:
    """The driver handle a DLPack ``stream`` value names: 1 for None, -1
    (NO_SYNC) kept as is. ValueError for 0 and other bad values, TypeError
    for a wrong type."""
    if stream is None:
        return LEGACY_STREAM
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int or an object with __cuda_stream__, not bool")
    if isinstance(stream, int):
        if stream == 0:
            raise ValueError(
                "stream=0 is ambiguous and not allowed (use 1 for the legacy default stream, 2 for "
                "the per-thread default stream, or a CUstream handle > 2)")
        if stream < -1:
            raise ValueError(f"stream={stream} is not valid: expected None, -1, 1, 2 or a CUstream handle > 2")
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is None:
        raise TypeError(
            f"stream must be None, an int or an object with __cuda_stream__, not {type(stream).__name__}")
    info = proto()
    if (not isinstance(info, tuple) or len(info) != 2 or info[0] != 0
            or isinstance(info[1], bool) or not isinstance(info[1], int) or info[1] < 0):
        raise ValueError(
            f"{type(stream).__name__}.__cuda_stream__() returned {info!r}; expected (0, handle) with "
            "an int handle >= 0 (protocol version 0)")
    # Handle 0 from the protocol is CUDA's NULL stream: the legacy default.
    return info[1] or LEGACY_STREAM


def normalize(handle: int) -> int:
    """An Array's ``_stream`` as a driver handle (0, its default, is the legacy stream)."""
    return handle or LEGACY_STREAM


class stream:
    """Set the consumer's current CUDA stream for this thread (or task:
    a contextvar), as a context manager::

        with dlpack_ref.cuda.stream(s):          # s: int handle, 1, 2, -1,
            a = dlpack_ref.from_dlpack(x)        # or __cuda_stream__ object

    Inside, ``from_dlpack`` passes ``s`` to producers whose data is on the
    stream's device (so the producer orders its pending work before ``s``,
    or enqueues a requested copy on it), waits for exchange-API producers on
    ``s``, and the Array's exchange API reports ``s`` as its current work
    stream. ``-1`` asks producers not to synchronize. A handle > 2 applies
    to its own device only; on other devices the legacy default stream is
    used. Nestable; the previous stream is restored on exit.
    """

    __slots__ = ("_value", "_tokens")

    def __init__(self, s):
        handle = stream_handle(s)
        self._value = (handle, None)
        self._tokens = []

    def __enter__(self):
        handle, _ = self._value
        if handle > PER_THREAD_STREAM and self._value[1] is None:
            rt = runtime()
            self._value = (handle, rt.stream_device(handle, 0))
        self._tokens.append(_current.set(self._value))
        _core()._stream_context_entered(1)
        return self

    def __exit__(self, *exc):
        _current.reset(self._tokens.pop())
        _core()._stream_context_entered(-1)
        return False


def _core():
    from . import _dlpack_ref
    return _dlpack_ref


def current_stream(device_id: int | None):
    """The consumer's stream for data on CUDA device ``device_id`` (None:
    a device-agnostic location such as pinned host memory): the handle set
    with ``stream`` when it applies there, -1 when no sync was asked, else
    None (the legacy default stream)."""
    value = _current.get()
    if value is None:
        return None
    handle, dev = value
    if dev is not None and device_id is not None and dev != device_id:
        return None
    return handle
