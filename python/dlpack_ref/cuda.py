"""CUDA through cuda-python (``cuda.bindings.driver``): device, managed and
pinned memory, stream-ordered synchronization and cross-device copies.

The public CUDA API: ``stream`` (set the consumer's current stream),
``is_available``, ``require``, ``CUDAUnavailableError``, ``CUDAError``. The
calls the compiled core makes into the CUDA layer are in
``dlpack_ref._cuda_layer`` (documented in docs/cuda.md).

Importing this module needs neither cuda-python nor a driver; the first
CUDA request loads them.
"""

from ._cuda_driver import CUDAError, CUDAUnavailableError, runtime
from ._cuda_streams import enter_stream, leave_stream
from ._dlpack_ref import _stream_context_entered, _stream_fields
from ._streams import PER_THREAD_STREAM

__all__ = ["CUDAError", "CUDAUnavailableError", "is_available", "require", "stream"]


def require() -> None:
    """Load the driver; CUDAUnavailableError says whether cuda-python, the
    NVIDIA driver or a CUDA device is missing."""
    runtime()


def is_available() -> bool:
    """Whether CUDA can be used here (cuda-python, a driver and a device)."""
    try:
        runtime()
    except CUDAUnavailableError:
        return False
    return True


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

    ``s`` is parsed here, once, by the stream rule of include/dlpack_ref.h
    (ValueError or TypeError as ``__dlpack__`` gives them).
    """

    __slots__ = ("_value", "_tokens")

    def __init__(self, s):
        sync, handle = _stream_fields(s)
        self._value = (sync, handle, None)
        self._tokens = []

    def __enter__(self):
        sync, handle, device = self._value
        if handle > PER_THREAD_STREAM and device is None:
            self._value = (sync, handle, runtime().stream_device(handle, 0))
        self._tokens.append(enter_stream(self._value))
        # The core's from_dlpack keeps its fast path while no context is open.
        _stream_context_entered(1)
        return self

    def __exit__(self, *exc):
        leave_stream(self._tokens.pop())
        _stream_context_entered(-1)
        return False
