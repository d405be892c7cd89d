"""CuPy: GPU arrays (a CPU-only machine has none to make) and
``cp.from_dlpack``; device and managed memory for the CUDA rules."""

from __future__ import annotations

from ..subject import Consumer, CudaProducer, NotSupported, Producer
from ._common import Known, made_from_numpy

KNOWN = Known("cupy", module="cupy", distribution="cupy", order=4, lane=None)


def producer():
    import cupy as cp

    return Producer("cupy", made_from_numpy(cp.asarray, "cupy"), tolist=lambda x: x.get().tolist())


def consumer():
    import cupy as cp

    return Consumer("cupy", cp.from_dlpack, tolist=lambda r: r.get().tolist(), data_ptr=lambda r: r.data.ptr,
                    readonly=lambda r: False, spec="cupy")


def cuda():
    import cupy as cp

    def make(kind, values):
        if kind == "pinned":
            raise NotSupported("CuPy has no pinned ndarray (its pinned allocations are NumPy arrays)")
        if kind == "managed":
            with cp.cuda.using_allocator(cp.cuda.malloc_managed):
                a = cp.asarray(values)
        else:
            a = cp.asarray(values)
        cp.cuda.get_current_stream().synchronize()
        return a

    def write(kind, values, stream):
        if kind != "cuda":
            raise NotSupported(f"the CuPy adapter writes only device memory on a stream, not {kind}")
        s = cp.cuda.ExternalStream(stream)
        with s:
            a = cp.empty(values.shape, dtype=values.dtype)
            a.set(values, stream=s)
        return a

    return CudaProducer("cupy", make, write, export_scope=cp.cuda.ExternalStream)
