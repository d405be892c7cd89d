"""NumKong: ``numkong.Tensor`` (made by ``nk.iota``; no bool, no read-only
tensors, no item assignment), views by indexing; ``nk.from_dlpack``. Its
narrow floats have names of their own (``e4m3`` is DLPack's
``float8_e4m3fn``)."""

from __future__ import annotations

from ..subject import Consumer, NotSupported, Producer
from ._common import Known

KNOWN = Known("numkong", module="numkong", distribution="numkong", order=14,
              lane="ecosystem", requirements=("numkong",))


def producer():
    import numkong as nk
    import numpy as np

    own_names = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "float6_e2m3fn": "e2m3", "float6_e3m2fn": "e3m2"}
    aliases = {"float8_e4m3"}  # numkong reads this name as e4m3, which is float8_e4m3fn

    def make(dtype, shape, readonly=False):
        if readonly:
            raise NotSupported("numkong has no read-only tensors")
        if dtype in aliases:
            raise NotSupported(f"numkong has no {dtype} (its e4m3 is float8_e4m3fn)")
        try:
            return nk.iota(tuple(shape), dtype=own_names.get(dtype, dtype))
        except ValueError as e:
            raise NotSupported(f"numkong has no {dtype}", e) from e

    def tolist(x):
        return np.asarray(x).tolist()

    def views():
        x = nk.iota((6,), dtype="float64")
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T": x.reshape((2, 3)).T}

    return Producer("numkong", make, tolist=tolist, views=views, unexportable=lambda: {})


def consumer():
    import numkong as nk

    # the results' values are read through their own export: NumPy reads numkong's narrow floats as bits
    return Consumer("numkong", nk.from_dlpack, data_ptr=lambda r: r.data_ptr, spec="numkong")
