"""DLPack's ``stream`` argument: the one place its values are checked.

For memory of the CUDA family: None = the legacy default stream, 1 = the
legacy default stream, 2 = the per-thread default stream, > 2 = a
``CUstream`` handle, -1 = do not synchronize, 0 = refused (ambiguous).
Objects with ``__cuda_stream__`` (the cuda.core protocol, returning
``(0, handle)``) stand for their handle; handle 0 from the protocol is
CUDA's NULL stream, the legacy default. 1 and 2 are exactly the driver's
``CU_STREAM_LEGACY`` and ``CU_STREAM_PER_THREAD``, so a checked value is a
driver handle. CPU memory accepts only None.

A leaf module: the core and the CUDA layer both import it; it imports
nothing of dlpack-ref.
"""

from __future__ import annotations

__all__ = ["LEGACY_STREAM", "PER_THREAD_STREAM", "NO_SYNC", "stream_handle"]

LEGACY_STREAM = 1        # CU_STREAM_LEGACY
PER_THREAD_STREAM = 2    # CU_STREAM_PER_THREAD
NO_SYNC = -1


def stream_handle(stream, *, cuda_memory: bool = True, where: str = "") -> int:
    """The driver handle a DLPack ``stream`` value names.

    Parameters
    ----------
    stream
        None, an int or an object with ``__cuda_stream__``.
    cuda_memory
        Whether the memory is of the CUDA family; other memory accepts only
        None.
    where
        The device, for the message when a stream is refused for it.

    Returns
    -------
    int
        1 for None, -1 (NO_SYNC) as is, else the handle (1, 2 or > 2).

    Raises
    ------
    ValueError
        0, values below -1, a stream for non-CUDA memory, a bad
        ``__cuda_stream__`` answer.
    TypeError
        Any other type (bool included).
    """
    if stream is None:
        return LEGACY_STREAM
    if not cuda_memory:
        if isinstance(stream, int) or hasattr(stream, "__cuda_stream__"):
            raise ValueError(
                f"stream={stream!r} was passed for an Array on {where or 'the CPU'}; only stream=None "
                "is accepted for CPU memory")
        raise TypeError(f"stream must be None for CPU memory, not {type(stream).__name__}")
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int or an object with __cuda_stream__, not bool")
    if isinstance(stream, int):
        if stream == 0:
            raise ValueError(
                "stream=0 is ambiguous and not allowed (use 1 for the legacy default stream, 2 for "
                "the per-thread default stream, or a CUstream handle > 2)")
        if stream < NO_SYNC:
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
    return info[1] or LEGACY_STREAM
