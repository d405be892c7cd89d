# SPDX-License-Identifier: Apache-2.0
"""The conformance checker's factory hook for the example adopters (one
shape of API for all five: ``make(code, bits, lanes, shape, data, flags)``,
``from_dlpack(x, /, *, device=None, copy=None)``, and a ``Tensor`` with
``data_ptr``, ``readonly`` and a free ``meta`` slot). The adopters never
import dlpack-ref; this glue runs inside the checker, which does."""

from __future__ import annotations

import ctypes

import dlpack_ref as dr
from dlpack_ref.testing import FLAG_IS_SUBBYTE_TYPE_PADDED as PADDED, FLAG_READ_ONLY as READ_ONLY
from dlpack_ref.harness.registry import subject
from dlpack_ref.harness.subject import Consumer, NotSupported, Producer



def conformance(module, spec: str):
    """The checker's (Producer, Consumer) of an adopter module.

    Parameters
    ----------
    module : module
        The adopter: ``make``, ``from_dlpack`` and ``Tensor`` as above.
    spec : str
        The name of the module whose ``__dlpack_conformance__`` calls this,
        which the checker's child processes import again.

    Returns
    -------
    tuple of Producer and Consumer
        Arrays are made by ``module.make`` from the bytes of dlpack-ref's own
        arrays of each dtype and shape, and read back through ``meta``.
    """
    reference = subject("dlpack_ref").producer

    def factory(dtype, shape, readonly=False):
        a = reference.factory(dtype, shape)
        info = dr.inspect(a.__dlpack__(max_version=(1, 3)))
        data = ctypes.string_at(info["data"], a.nbytes) if a.nbytes else b""
        x = module.make(*info["dtype"], tuple(shape), data, (info["flags"] & PADDED) | (READ_ONLY if readonly else 0))
        x.meta = a.tolist()
        return x

    def tolist(x):
        if x.meta is None:
            raise NotSupported("no own reading of this array")
        return x.meta

    def views():
        import numpy as np
        x = np.arange(6.0)
        m = x.reshape(2, 3)
        out = {}
        for name, v in {"offset x[1:]": x[1:], "reversed x[::-1]": x[::-1], "strided x[::2]": x[::2],
                        "transposed m.T": m.T}.items():
            t = module.from_dlpack(v)   # zero-copy: the adopter holds numpy's strided view
            t.meta = v.tolist()
            out[name] = t
        return out

    producer = Producer(spec, factory, tolist=tolist, views=views, unexportable=lambda: {})
    consumer = Consumer(spec, module.from_dlpack, data_ptr=lambda r: r.data_ptr, readonly=lambda r: r.readonly,
                        cpu_device=(1, 0), spec=spec)
    return producer, consumer
