"""cuda.core: ``StridedMemoryView.from_dlpack`` as the consumer (no stream
ordering: ``stream_ptr=-1``, as no stream exists for CPU data) and the
views it makes of NumPy arrays as the producer."""

from __future__ import annotations

from ..subject import Consumer, Producer
from ._common import Known, numpy_array

KNOWN = Known("cuda.core", module="cuda.core", distribution="cuda-core", order=7)


def subject():
    import numpy as np
    from cuda.core.utils import StridedMemoryView

    def from_dlpack(x, **kwargs):
        if kwargs:
            raise TypeError(f"StridedMemoryView.from_dlpack has no keyword argument {next(iter(kwargs))!r}")
        return StridedMemoryView.from_dlpack(x, stream_ptr=-1)

    def make(dtype, shape, readonly=False):
        return from_dlpack(numpy_array(dtype, shape, readonly))

    def tolist(v):
        return np.from_dlpack(v).tolist()

    producer = Producer("cuda.core", make, tolist=tolist, views=lambda: {})
    consumer = Consumer("cuda.core", from_dlpack, tolist=tolist, data_ptr=lambda r: r.ptr,
                        readonly=lambda r: bool(r.readonly), spec="cuda.core")
    return producer, consumer
