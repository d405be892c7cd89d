"""DLPack's ``stream`` argument, for the core's CUDA layer.

For memory of the CUDA family: None = the legacy default stream, 1 = the
legacy default stream, 2 = the per-thread default stream, > 2 = a
``CUstream`` handle, -1 = do not synchronize, 0 = refused (ambiguous).
Objects with ``__cuda_stream__`` (the cuda.core protocol, returning
``(0, handle)``) stand for their handle; handle 0 from the protocol is
CUDA's NULL stream, the legacy default. 1 and 2 are exactly the driver's
``CU_STREAM_LEGACY`` and ``CU_STREAM_PER_THREAD``, so a checked value is a
driver handle. CPU memory accepts only None.

The rule itself is written once, in C (``dlpack_ref_stream_value`` of
include/dlpack_ref.h, which the producer call and every vendoring library
use); ``stream_handle`` calls the core's binding of it, which the core
registers when it loads (``set_rule``): this module imports nothing of
dlpack-ref, so the core can import it.
"""

from __future__ import annotations

__all__ = ["LEGACY_STREAM", "PER_THREAD_STREAM", "NO_SYNC", "set_rule", "stream_handle"]

LEGACY_STREAM = 1        # CU_STREAM_LEGACY
PER_THREAD_STREAM = 2    # CU_STREAM_PER_THREAD
NO_SYNC = -1


_rule = None


def set_rule(rule) -> None:
    """Register the core's ``_stream_handle`` (the header's C rule), which
    ``stream_handle`` calls; the core does it once, when it loads."""
    global _rule
    _rule = rule


def stream_handle(stream) -> int:
    """The driver handle a DLPack ``stream`` value names for memory of the
    CUDA family (CPU memory, which accepts only None, is the producer
    call's to refuse).

    Parameters
    ----------
    stream
        None, an int or an object with ``__cuda_stream__``.

    Returns
    -------
    int
        1 for None, -1 (NO_SYNC) as is, else the handle (1, 2 or > 2).

    Raises
    ------
    ValueError
        0, values below -1, a bad ``__cuda_stream__`` answer.
    TypeError
        Any other type (bool included).
    """
    return _rule(stream)
