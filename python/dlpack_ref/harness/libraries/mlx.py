"""MLX (the CPU build, ``mlx[cpu]``): arrays (no read-only ones), views by
indexing; ``mx.from_dlpack``."""

from __future__ import annotations

import math

from ..subject import Consumer, NotSupported, Producer
from ._common import arange_values, Known, own_values

KNOWN = Known("mlx", module="mlx.core", distribution="mlx", order=9,
              lane="ecosystem", requirements=("mlx[cpu]",))


def producer():
    import mlx.core as mx

    def make(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("mlx has no read-only arrays")
        t = getattr(mx, "bool_" if dtype == "bool" else dtype, None)
        if not isinstance(t, mx.Dtype):
            raise NotSupported(f"mlx has no {dtype}")
        return mx.array(arange_values(math.prod(shape), dtype), dtype=t).reshape(shape)

    def views():
        x = mx.arange(6, dtype=mx.float64)
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": x.reshape(2, 3).T}

    return Producer("mlx", make, tolist=own_values, views=views, unexportable=lambda: {})


def consumer():
    import mlx.core as mx

    return Consumer("mlx", mx.from_dlpack, tolist=own_values, readonly=lambda r: False, spec="mlx")
