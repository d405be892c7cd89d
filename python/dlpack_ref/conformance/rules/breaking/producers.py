"""The bases of the breaking producers: a dlpack-ref array behind a small
class of a library's own (:class:`Wrapped`) whose ``__dlpack__`` or
``__dlpack_device__`` misbehaves in one way, dlpack-ref's producer with
such arrays (:func:`wrapping`) or with a scalar type and an array that
cannot be exported (:func:`completed`), and a type publishing an exchange
table of its own (:func:`publishing`)."""

from __future__ import annotations

import ctypes
import dataclasses

import dlpack_ref as dr
from dlpack_ref.harness import registry
from dlpack_ref.harness.subject import Producer
from dlpack_ref.testing.abi import (
    FROM_PY_T, NAME_EXCHANGE_API, VIEW_T, DLPackExchangeAPI, PyCapsule_New, exchange_api_of,
)

from .surgery import KEPT, managed

__all__ = ["Retyped", "Scalar", "Unexportable", "Wrapped", "completed", "own", "publishing", "wrapping"]


def own():
    """dlpack-ref's own subject, as the checker builds it."""
    return registry.subject("dlpack_ref")


class Wrapped:
    """A dlpack-ref array behind a class of a library's own, exporting it
    as it is; each subclass breaks one promise."""

    def __init__(self, a):
        self._a = a

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def tolist(self):
        return self._a.tolist()


def wrapping(cls, **options) -> Producer:
    """dlpack-ref's producer with each array and view behind ``cls``."""
    p = own().producer

    def make(dtype, shape, readonly=False):
        return cls(p.factory(dtype, shape, readonly))

    def views():
        return {label: cls(v) for label, v in p.views().items()}

    return Producer(f"dlpack_ref behind {cls.__name__}", make, tolist=lambda x: x.tolist(), views=views,
                    unexportable=lambda: {}, **options)


class Retyped(Wrapped):
    """Exports the dtypes (code, bits, lanes) of its ``retyped`` table as the triples it maps them to."""

    retyped: dict = {}

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if info["dtype"] in self.retyped:
            m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits, m.dl_tensor.dtype.lanes = self.retyped[info["dtype"]]
        return capsule


class Scalar(Wrapped):
    """A scalar of the library: a 0-d value of a type of its own."""


class Unexportable:
    """An array of Python objects, which DLPack cannot describe: __dlpack__ refuses it."""

    error = BufferError

    def __dlpack_device__(self):
        return dr.DeviceType.CPU, 0

    def __dlpack__(self, **kwargs):
        raise self.error("an array of Python objects cannot be exported")


def completed(scalar: type = Scalar, unexportable: type = Unexportable) -> Producer:
    """dlpack-ref's producer with a scalar type and an array that cannot be
    exported, which dlpack-ref itself has not. Called without arguments it
    passes every producer rule: the control beside the breakers."""
    return dataclasses.replace(own().producer, name=f"dlpack_ref with {scalar.__name__} and {unexportable.__name__}",
                               scalar=lambda: scalar(dr.asarray(1.5)),
                               unexportable=lambda: {"an array of Python objects": unexportable()})


# --- the C exchange API: a type publishing a table of its own ----------------------------------

def _unwrapping(fn_type, original: int):
    """A table function calling dlpack-ref's ``original`` with the dlpack-ref
    array behind the Wrapped object it is handed."""
    def call(py_object, out):
        return fn_type(original)(id(ctypes.cast(py_object, ctypes.py_object).value._a), out)
    return fn_type(call)


def published_table(**replaced) -> object:
    """A ``dlpack_exchange_api`` capsule of dlpack-ref's table, its two
    functions taking an object unwrapping :class:`Wrapped` arrays, and the
    functions of ``replaced`` (field -> ctypes callback) put in."""
    ours = exchange_api_of(dr.Array)
    api = DLPackExchangeAPI.from_buffer_copy(ours)
    api.header.prev_api = None
    functions = {"managed_tensor_from_py_object_no_sync": _unwrapping(FROM_PY_T,
                                                                      ours.managed_tensor_from_py_object_no_sync),
                 "dltensor_from_py_object_no_sync": _unwrapping(VIEW_T, ours.dltensor_from_py_object_no_sync),
                 **replaced}
    for field, fn in functions.items():
        setattr(api, field, ctypes.cast(fn, ctypes.c_void_p).value)
    KEPT.append((api, functions))
    return PyCapsule_New(ctypes.addressof(api), NAME_EXCHANGE_API, None)


def publishing(base: type, **replaced) -> type:
    """A subclass of ``base`` (of its name) whose type publishes :func:`published_table`."""
    return type(base.__name__, (base,), {"__dlpack_c_exchange_api__": published_table(**replaced),
                                         "__doc__": base.__doc__})
