"""array-api-strict: the array API's minimal arrays (wrapping NumPy's),
views by indexing; ``xp.from_dlpack``."""

from __future__ import annotations

from ..subject import Consumer, NotSupported, Producer
from ._common import Known, numpy_array

KNOWN = Known("array_api_strict", module="array_api_strict", distribution="array-api-strict", order=5)


def producer():
    import array_api_strict as xp

    def make(dtype, shape, readonly=False):
        if not hasattr(xp, dtype):
            raise NotSupported(f"array-api-strict has no {dtype}")
        a = xp.asarray(numpy_array(dtype, shape))
        if readonly:
            a._array.flags.writeable = False  # array-api-strict wraps a NumPy array
        return a

    def views():
        x = xp.arange(6.0)
        return {"offset x[1:]": x[1:], "strided x[::2]": x[::2], "transposed m.T": xp.reshape(x, (2, 3)).T}

    return Producer("array_api_strict", make, tolist=_tolist, views=views)


def consumer():
    import array_api_strict as xp

    return Consumer("array_api_strict", xp.from_dlpack, tolist=_tolist,
                    data_ptr=lambda r: r._array.__array_interface__["data"][0],
                    readonly=lambda r: not r._array.flags.writeable, cpu_device=xp.Device("CPU_DEVICE"),
                    spec="array_api_strict")


def _tolist(x):
    import numpy as np
    return np.asarray(x._array).tolist()
