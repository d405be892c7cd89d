"""Open3D: ``open3d.core.Tensor`` (made from NumPy arrays; no float16 or
complex, no read-only tensors), views by indexing; its device type is a
plain ``enum.Enum``; ``Tensor.from_dlpack`` (``device=`` takes only None)."""

from __future__ import annotations

from ..subject import Consumer, Producer
from ._common import NUMPY_DTYPES, Known, made_from_numpy

KNOWN = Known("open3d", module="open3d", distribution="open3d", order=16,
              lane="ecosystem", requirements=("open3d",))


def producer():
    import open3d.core as o3c

    def views():
        import numpy as np
        x = o3c.Tensor(np.arange(6.0))
        return {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                "transposed m.T()": x.reshape((2, 3)).T()}

    return Producer("open3d", made_from_numpy(o3c.Tensor, "open3d", NUMPY_DTYPES), tolist=_tolist, views=views,
                    unexportable=lambda: {})


def consumer():
    import open3d.core as o3c

    return Consumer("open3d", o3c.Tensor.from_dlpack, tolist=_tolist, spec="open3d")


def _tolist(x):
    return x.numpy().tolist()
