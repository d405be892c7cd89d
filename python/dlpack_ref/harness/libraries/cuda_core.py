"""cuda.core: ``StridedMemoryView.from_dlpack`` as the consumer (no stream
ordering: ``stream_ptr=-1``, as no stream exists for CPU data) and the
views it makes of NumPy arrays as the producer."""

from __future__ import annotations

from ..subject import Consumer, Producer
from ._common import Known, numpy_array

KNOWN = Known("cuda.core", module="cuda.core", distribution="cuda-core", order=7)


def producer():
    from_dlpack = _strided_memory_view()

    def make(dtype, shape, readonly=False):
        return from_dlpack(numpy_array(dtype, shape, readonly))

    return Producer("cuda.core", make, tolist=_tolist, views=lambda: {})


def consumer():
    return Consumer("cuda.core", _strided_memory_view(), tolist=_tolist, data_ptr=lambda r: r.ptr,
                    readonly=lambda r: bool(r.readonly), spec="cuda.core")


def _strided_memory_view():
    from cuda.core.utils import StridedMemoryView

    def from_dlpack(x, **kwargs):
        if kwargs:
            raise TypeError(f"StridedMemoryView.from_dlpack has no keyword argument {next(iter(kwargs))!r}")
        return StridedMemoryView.from_dlpack(x, stream_ptr=-1)

    return from_dlpack


def _tolist(v):
    import numpy as np
    return np.from_dlpack(v).tolist()
