"""dlpack-ref itself: the Array, views by indexing, ``from_dlpack``; in CUDA
memory, device, managed and pinned arrays."""

from __future__ import annotations

import math

from ..subject import Consumer, CudaProducer, NotSupported, Producer
from ._common import arange_values, Known, nested, own_values

KNOWN = Known("dlpack_ref", module="dlpack_ref", distribution="dlpack-ref", order=0)


def producer():
    import dlpack_ref as dr

    def make(dtype, shape, readonly=False):
        n = math.prod(shape)
        a = dr.zeros(shape, dtype=dtype) if n == 0 else dr.asarray(nested(arange_values(n, dtype), shape),
                                                                    dtype=dtype)
        if readonly:
            fmt = dr.DTYPES[dtype].format
            if fmt is None or len(fmt) != 1:
                raise NotSupported(f"read-only dlpack_ref arrays of {dtype} are not made here")
            # a read-only buffer: asarray keeps it read-only, in place
            a = dr.asarray(memoryview(memoryview(a).tobytes()).cast(fmt, shape))
        return a

    def views():
        x = dr.asarray([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        m = dr.asarray([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": m.T}

    return Producer("dlpack_ref", make, tolist=own_values, views=views, unexportable=lambda: {})


def consumer():
    import dlpack_ref as dr

    return Consumer("dlpack_ref", dr.from_dlpack, tolist=own_values, data_ptr=lambda r: r.data_ptr,
                    readonly=lambda r: r.readonly, cpu_device="cpu", spec="dlpack_ref")


def cuda():
    import dlpack_ref as dr

    devices = {"cuda": "cuda:0", "managed": "cuda_managed:0", "pinned": "cpu_pinned"}

    def make(kind, values):
        return dr.asarray(values, device=devices[kind])

    def write(kind, values, stream):
        return dr.asarray(values).to_device(devices[kind], stream=stream)

    return CudaProducer("dlpack_ref", make, write)
