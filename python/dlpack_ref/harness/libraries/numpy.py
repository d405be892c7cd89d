"""NumPy: arrays made from Python values (ml_dtypes for the narrow floats),
views (offsets, strides, transposes, the real and imaginary parts), a
scalar, objects DLPack cannot carry; ``np.from_dlpack``."""

from __future__ import annotations

from ..subject import Consumer, Producer
from ._common import Known, numpy_array, own_values

KNOWN = Known("numpy", module="numpy", distribution="numpy", order=1)


def producer():
    import numpy as np

    def views():
        x = np.arange(6.0)
        z = np.array([1 + 2j, 3 - 4j, -5 + 6j])
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": x.reshape(2, 3).T, "imaginary part z.imag": z.imag,
                "real part z.real": z.real}

    def unexportable():
        return {"big-endian int32": np.arange(3, dtype=">i4"),
                "datetime64": np.array([1], dtype="M8[s]"),
                "object": np.array([None, 1], dtype=object)}

    return Producer("numpy", numpy_array, tolist=own_values, views=views, scalar=lambda: np.float64(1.5),
                    unexportable=unexportable)


def consumer():
    import numpy as np

    return Consumer("numpy", np.from_dlpack, tolist=own_values, data_ptr=lambda r: r.__array_interface__["data"][0],
                    readonly=lambda r: not r.flags.writeable, cpu_device="cpu", spec="numpy")
