"""What the tests marked ``cuda`` share: the skip mark with the reason CUDA
cannot be used here, and a stream object of the cuda.core protocol."""

from __future__ import annotations

import pytest

from dlpack_ref import cuda


def unavailable() -> str | None:
    """Why CUDA cannot be used in this process (None when it can)."""
    try:
        cuda.require()
    except cuda.CUDAUnavailableError as exc:
        return str(exc)
    return None


def marks() -> list:
    """``pytestmark`` of a test file whose tests all need CUDA."""
    why = unavailable()
    return [pytest.mark.cuda, pytest.mark.skipif(why is not None, reason=f"no CUDA here: {why}")]


class CudaStream:
    """A stream object of the cuda.core protocol (``__cuda_stream__``)."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)
