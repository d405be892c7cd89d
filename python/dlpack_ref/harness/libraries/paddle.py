"""PaddlePaddle: CPU tensors (no read-only ones), views by indexing, tensors
that require grad and sparse ones DLPack cannot carry; ``paddle.from_dlpack``."""

from __future__ import annotations

import math

from ..subject import Consumer, NotSupported, Producer
from ._common import arange_values, Known

KNOWN = Known("paddle", module="paddle", distribution="paddlepaddle", order=10,
              lane="ecosystem", requirements=("paddlepaddle",))


def producer():
    import numpy as np
    import paddle

    def make(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("paddle has no read-only tensors")
        values = np.array(arange_values(math.prod(shape), dtype))
        source = "float32" if dtype.startswith(("float8", "bfloat16")) else dtype
        return paddle.to_tensor(values.astype(source), place=paddle.CPUPlace()).astype(dtype).reshape(list(shape))

    def views():
        x = paddle.arange(6, dtype="float64")
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": x.reshape([2, 3]).T}

    def unexportable():
        indices, values = paddle.to_tensor([[0, 1], [1, 0]]), paddle.to_tensor([1.0, 2.0])
        return {"tensor that requires grad": paddle.to_tensor([1.0], stop_gradient=False),
                "sparse COO tensor": paddle.sparse.sparse_coo_tensor(indices, values, [2, 2])}

    return Producer("paddle", make, tolist=_tolist, views=views, unexportable=unexportable)


def consumer():
    import paddle

    return Consumer("paddle", paddle.from_dlpack, tolist=_tolist, data_ptr=lambda r: r.data_ptr(),
                    readonly=lambda r: False, cpu_device="cpu", spec="paddle")


def _tolist(x):
    # paddle's tolist of bfloat16 and float8 gives their bit patterns
    narrow = str(x.dtype).startswith(("paddle.bfloat16", "paddle.float8"))
    return (x.astype("float32") if narrow else x).tolist()
