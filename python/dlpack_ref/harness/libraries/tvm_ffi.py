"""Apache TVM FFI: ``tvm_ffi.Tensor`` (made from NumPy arrays through its
own ``from_dlpack``, no read-only tensors, no views of its own)."""

from __future__ import annotations

from ..subject import Consumer, Producer
from ._common import Known, made_from_numpy

KNOWN = Known("tvm_ffi", module="tvm_ffi", distribution="apache-tvm-ffi", order=6)


def producer():
    import tvm_ffi

    return Producer("tvm_ffi", made_from_numpy(tvm_ffi.from_dlpack, "tvm_ffi"), tolist=_tolist, views=lambda: {})


def consumer():
    import tvm_ffi

    return Consumer("tvm_ffi", tvm_ffi.from_dlpack, tolist=_tolist, spec="tvm_ffi")


def _tolist(x):
    import numpy as np
    return np.from_dlpack(x).tolist()
