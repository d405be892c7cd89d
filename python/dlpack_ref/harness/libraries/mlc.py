"""MLC (mlc-python): ``mlc.Tensor``, a pre-1.0 producer (``__dlpack__``
takes ``stream`` only), made from NumPy arrays; the constructor
``mlc.Tensor(x)`` is its import of any object with ``__dlpack__``."""

from __future__ import annotations

from ..subject import Consumer, Producer
from ._common import NUMPY_DTYPES, Known, made_from_numpy

KNOWN = Known("mlc", module="mlc", distribution="mlc-python", order=15,
              lane="ecosystem", requirements=("mlc-python",))


def producer():
    import mlc

    return Producer("mlc", made_from_numpy(mlc.Tensor, "mlc", NUMPY_DTYPES), tolist=_tolist, views=lambda: {},
                    unexportable=lambda: {})


def consumer():
    import mlc

    return Consumer("mlc", mlc.Tensor, tolist=_tolist, data_ptr=lambda r: r.data.value + r.byte_offset, spec="mlc")


def _tolist(x):
    return x.numpy().tolist()
