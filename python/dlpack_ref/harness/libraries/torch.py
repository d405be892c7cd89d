"""PyTorch: tensors (no read-only ones), views with the negative and
conjugate bits, meta and sparse tensors DLPack cannot carry;
``torch.from_dlpack``; on a GPU, device and pinned tensors."""

from __future__ import annotations

import math

from ..subject import Consumer, CudaProducer, NotSupported, Producer
from ._common import arange_values, Known

KNOWN = Known("torch", module="torch", distribution="torch", order=2)


def producer():
    import torch

    def make(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("torch has no read-only tensors")
        t = getattr(torch, dtype, None)
        if not isinstance(t, torch.dtype):
            raise NotSupported(f"torch has no {dtype}")
        n = math.prod(shape)
        if dtype == "float4_e2m1fn_x2":
            return torch.zeros(shape, dtype=torch.uint8).view(t)
        if dtype.startswith("float8"):
            return torch.tensor(arange_values(n, dtype), dtype=torch.float32).to(t).reshape(shape)
        return torch.tensor(arange_values(n, dtype)).to(t).reshape(shape)

    def views():
        x = torch.arange(6.0, dtype=torch.float64)
        z = torch.tensor([1 + 2j, 3 - 4j, -5 + 6j])
        return {"negated torch._neg_view(x)": torch._neg_view(x), "conjugated z.conj()": z.conj(),
                "conjugated, resolved z.conj().resolve_conj()": z.conj().resolve_conj(),
                "offset x[1:]": x[1:], "strided x[::2]": x[::2], "transposed m.T": x.reshape(2, 3).T,
                "imaginary part z.imag": z.imag}

    def unexportable():
        return {"meta tensor": torch.empty(3, device="meta"), "sparse COO tensor": torch.eye(2).to_sparse()}

    return Producer("torch", make, tolist=_tolist, views=views, unexportable=unexportable)


def consumer():
    import torch

    return Consumer("torch", torch.from_dlpack, tolist=_tolist, data_ptr=lambda r: r.data_ptr(),
                    readonly=lambda r: False, cpu_device=torch.device("cpu"), spec="torch")


def _tolist(x):
    return x.resolve_conj().resolve_neg().tolist()


def cuda():
    import torch

    def usable(kind):
        if not torch.cuda.is_available():
            raise NotSupported("torch has no CUDA device here (a CPU build, or no GPU)")
        if kind == "managed":
            raise NotSupported("PyTorch does not allocate tensors in managed memory")

    def make(kind, values):
        usable(kind)
        t = torch.from_numpy(values.copy())
        out = t.pin_memory() if kind == "pinned" else t.to("cuda:0")
        torch.cuda.synchronize()
        return out

    def write(kind, values, stream):
        usable(kind)
        if kind != "cuda":
            raise NotSupported(f"the PyTorch adapter writes only device memory on a stream, not {kind}")
        src = torch.from_numpy(values.copy()).pin_memory()
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            return src.to("cuda:0", non_blocking=True)

    def export_scope(stream):
        return torch.cuda.stream(torch.cuda.ExternalStream(stream))

    return CudaProducer("torch", make, write, export_scope)
