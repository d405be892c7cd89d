"""DLPack's ``stream`` values, as the CUDA layer receives them.

For memory of the CUDA family: None = the legacy default stream, 1 = the
legacy default stream, 2 = the per-thread default stream, > 2 = a
``CUstream`` handle, -1 = do not synchronize, 0 = refused (ambiguous).
Objects with ``__cuda_stream__`` (the cuda.core protocol, returning
``(0, handle)``) stand for their handle; handle 0 from the protocol is
CUDA's NULL stream, the legacy default. 1 and 2 are exactly the driver's
``CU_STREAM_LEGACY`` and ``CU_STREAM_PER_THREAD``, so a checked value is a
driver handle. CPU memory accepts only None.

The rule is written once, in C (``dlpack_ref_stream_parse`` of
include/dlpack_ref.h), and a value is parsed once, where it enters, into a
``dlpack_ref_stream`` struct (given, sync, handle): by the producer call of
``Array.__dlpack__``, by the core for ``Array.to_device``, and by
``dlpack_ref.cuda.stream``. The CUDA layer receives the struct's fields as
they are, plain ints: ``sync`` (0: nothing is to be ordered) and ``handle``
(1, 2 or > 2: always a stream a copy can run on, 1 where the argument was
None or -1), and ``given`` (0: the argument was None, so a host reader
waits for the data) only where that matters. It never parses or
reinterprets a stream argument.
"""

from __future__ import annotations

__all__ = ["LEGACY_STREAM", "PER_THREAD_STREAM"]

LEGACY_STREAM = 1        # CU_STREAM_LEGACY
PER_THREAD_STREAM = 2    # CU_STREAM_PER_THREAD
