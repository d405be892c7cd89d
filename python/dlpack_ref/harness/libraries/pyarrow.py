"""Apache Arrow (pyarrow): 1-D immutable arrays (every one is read-only
data), slices as views, arrays with nulls or strings DLPack cannot carry;
a producer only."""

from __future__ import annotations

from ..subject import NotSupported, Producer
from ._common import arange_values, Known, numpy_dtype

KNOWN = Known("pyarrow", module="pyarrow", distribution="pyarrow", order=8)


def producer():
    import numpy as np
    import pyarrow as pa

    def make(dtype, shape, readonly=False):
        if len(shape) != 1:
            raise NotSupported(f"pyarrow arrays are 1-D; no array of shape {shape}")
        try:
            arrow_type = pa.from_numpy_dtype(numpy_dtype(dtype))
        except (NotImplementedError, pa.ArrowNotImplementedError, TypeError) as e:
            raise NotSupported(f"pyarrow has no {dtype}", e) from e
        return pa.array(np.asarray(arange_values(shape[0], dtype)).astype(numpy_dtype(dtype)), type=arrow_type)

    def views():
        x = pa.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        return {"offset x.slice(1)": x.slice(1), "offset x.slice(2, 3)": x.slice(2, 3)}

    def unexportable():
        return {"with nulls": pa.array([1.0, None]), "strings": pa.array(["a", "b"])}

    return Producer("pyarrow", make, tolist=lambda x: x.to_pylist(), views=views, unexportable=unexportable)
