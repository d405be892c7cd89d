"""Producers made to break one rule each (tests/support/breakers.py): a
dlpack-ref array behind a small class of a library's own (:class:`Wrapped`)
whose ``__dlpack__`` or ``__dlpack_device__`` misbehaves in one way, or a
type publishing an exchange table with one defect; and the capsule surgery
they (and the breaking consumers and CUDA producers) share, done through the
ctypes mirror of :mod:`dlpack_ref.testing`."""

from __future__ import annotations

import ctypes
import dataclasses
import math

import dlpack_ref as dr
from dlpack_ref.conformance import Producer
from dlpack_ref.conformance.rules.producer import DTYPE_TRIPLES
from dlpack_ref.harness import registry
from dlpack_ref.testing import (
    DELETER_T, DLPACK_VERSION, FLAG_IS_COPIED, FLAG_READ_ONLY, FROM_PY_T, NAME_EXCHANGE_API, NAME_LEGACY,
    NAME_VERSIONED, STREAM_T, VIEW_T, Consumed, DLManagedTensor, DLManagedTensorVersioned, DLPackExchangeAPI,
    PyCapsule_GetName, PyCapsule_New, capsule_name, exchange_api_of, read_capsule,
)

# ctypes objects that C holds addresses of (callbacks, structs, tables): alive for the process
KEPT: list = []


def own():
    """dlpack-ref's own subject, as the checker builds it."""
    return registry.subject("dlpack_ref")


# --- capsule surgery --------------------------------------------------------------------------

def managed(capsule):
    """(the managed struct behind a DLPack capsule, writable through ctypes, and its fields read)."""
    info = read_capsule(capsule)
    kind = DLManagedTensorVersioned if info["versioned"] else DLManagedTensor
    return kind.from_address(info["address"]), info


def is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def row_major(shape) -> tuple:
    """The C-contiguous strides (in elements) of ``shape``."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


_ONE = (ctypes.c_int64 * 1)(1)  # the shape and strides of a 1-element vector


def as_vector(capsule):
    """``capsule`` altered to describe its one element as a (1,) vector."""
    m, _ = managed(capsule)
    m.dl_tensor.ndim = 1
    m.dl_tensor.shape = m.dl_tensor.strides = ctypes.addressof(_ONE)
    return capsule


def set_flag(capsule, bit: int, on: bool):
    """``capsule`` with a flag bit set or cleared (a legacy capsule has none)."""
    m, info = managed(capsule)
    if info["versioned"]:
        m.flags = (m.flags | bit) if on else (m.flags & ~bit)
    return capsule


_DESTRUCTOR_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def rewrapped(capsule, *, legacy: bool, honours_rename: bool = True):
    """A new capsule, legacy or versioned, over a struct of its own that
    holds ``capsule``'s tensor (taken as a consumer takes it). Its deleter
    releases that tensor once however often it is called, so a wrong extra
    call frees nothing twice. Its destructor calls the deleter of an
    unconsumed capsule; with ``honours_rename=False``, of a consumed
    (renamed) one too."""
    taken = Consumed(capsule)
    source = (DLManagedTensorVersioned if taken.info["versioned"] else DLManagedTensor).from_address(
        taken.info["address"])
    struct = (DLManagedTensor if legacy else DLManagedTensorVersioned)()
    struct.dl_tensor = source.dl_tensor
    if not legacy:
        struct.version.major, struct.version.minor = DLPACK_VERSION
        struct.flags = source.flags if taken.info["versioned"] else 0
    release = DELETER_T(lambda address: taken.release())
    struct.deleter = ctypes.cast(release, ctypes.c_void_p).value
    name = NAME_LEGACY if legacy else NAME_VERSIONED

    def destroy(capsule_address):
        if honours_rename and ctypes.string_at(PyCapsule_GetName(capsule_address)) != name:
            return  # consumed: the consumer calls the deleter
        if struct.deleter:  # the field as it is now (a checker may have put a counter there)
            DELETER_T(struct.deleter)(ctypes.addressof(struct))

    destructor = _DESTRUCTOR_T(destroy)
    KEPT.append((taken, struct, release, destructor))
    return PyCapsule_New(ctypes.addressof(struct), name, ctypes.cast(destructor, ctypes.c_void_p).value)


# --- producers: dlpack-ref arrays behind a class of the library's own ---------------------------

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


class VersionedWithoutMaxVersion(Wrapped):
    """Answers __dlpack__() without max_version with a versioned capsule
    (read-only data is still refused there, as a legacy export must)."""

    def __dlpack__(self, **kwargs):
        if "max_version" not in kwargs:
            if self._a.readonly:
                raise BufferError("read-only data cannot be exported as a legacy capsule")
            kwargs["max_version"] = DLPACK_VERSION
        return self._a.__dlpack__(**kwargs)


class StampsMajorTwo(Wrapped):
    """Stamps version 2.0 on the capsule it returns for max_version=(1, m)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if info["versioned"] and kwargs.get("max_version", (0,))[0] == 1:
            m.version.major, m.version.minor = 2, 0
        return capsule


class RefusesNewerMajor(Wrapped):
    """Refuses a max_version newer than 1.x instead of answering with what it has."""

    def __dlpack__(self, **kwargs):
        asked = kwargs.get("max_version")
        if asked is not None and asked[0] > 1:
            raise BufferError(f"max_version={tuple(asked)}: only DLPack 1.x is exported")
        return self._a.__dlpack__(**kwargs)


class NullStrides(Wrapped):
    """Writes NULL strides for C-contiguous data in versioned capsules (forbidden since 1.2)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if info["versioned"] and info["ndim"] and info["strides"] == row_major(info["shape"]):
            m.dl_tensor.strides = None
        return capsule


class ZeroDimAsVector(Wrapped):
    """Exports a 0-d array as a (1,) vector."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        return as_vector(capsule) if self._a.ndim == 0 else capsule


class EmptyFlattened(Wrapped):
    """Exports a size-0 array of ndim > 1 with its first extent only: (0, 3) as (0,)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        if self._a.size == 0 and self._a.ndim > 1:
            managed(capsule)[0].dl_tensor.ndim = 1
        return capsule


class ReadOnlyUnflagged(Wrapped):
    """Exports read-only data without the READ_ONLY flag."""

    def __dlpack__(self, **kwargs):
        return set_flag(self._a.__dlpack__(**kwargs), FLAG_READ_ONLY, False)


class ReadOnlyAsLegacy(Wrapped):
    """Exports read-only data in place as a legacy capsule, which cannot say read-only."""

    def __dlpack__(self, **kwargs):
        if "max_version" in kwargs or not self._a.readonly:
            return self._a.__dlpack__(**kwargs)
        return rewrapped(self._a.__dlpack__(max_version=DLPACK_VERSION, **kwargs), legacy=True)


class InPlaceCopy(Wrapped):
    """copy=True exports the array in place and flags it IS_COPIED."""

    def __dlpack__(self, copy=None, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, True) if copy else capsule


class UnflaggedCopy(Wrapped):
    """copy=True copies, with the IS_COPIED flag cleared."""

    def __dlpack__(self, copy=None, **kwargs):
        capsule = self._a.__dlpack__(copy=copy, **kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, False) if copy else capsule


class CopiesForCopyFalse(Wrapped):
    """copy=False exports a copy (flagged IS_COPIED)."""

    def __dlpack__(self, copy=None, **kwargs):
        return self._a.__dlpack__(copy=True if copy is False else copy, **kwargs)


class CopiesForOwnDevice(Wrapped):
    """A dl_device equal to its own device makes a copy."""

    def __dlpack__(self, dl_device=None, copy=None, **kwargs):
        own_device = dl_device is not None and tuple(map(int, dl_device)) == tuple(map(int, self.__dlpack_device__()))
        return self._a.__dlpack__(dl_device=dl_device, copy=True if own_device else copy, **kwargs)


class IgnoresDlDevice(Wrapped):
    """Ignores a dl_device it cannot handle and exports on its own device."""

    def __dlpack__(self, dl_device=None, **kwargs):
        return self._a.__dlpack__(**kwargs)


class AcceptsAnyStream(Wrapped):
    """Accepts any stream for CPU data (ignores it)."""

    def __dlpack__(self, stream=None, **kwargs):
        return self._a.__dlpack__(**kwargs)


class PlainIntDevice(Wrapped):
    """__dlpack_device__() answers plain ints, not an Enum member."""

    def __dlpack_device__(self):
        kind, ident = self._a.__dlpack_device__()
        return int(kind), ident


def retyping(name: str, doc: str, table: dict) -> type:
    """A wrapper exporting the dtypes (code, bits, lanes) of ``table`` as the triples it maps them to."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if info["dtype"] in table:
            m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits, m.dl_tensor.dtype.lanes = table[info["dtype"]]
        return capsule

    return type(name, (Wrapped,), {"__dlpack__": __dlpack__, "__doc__": doc})


def _float8() -> list[str]:
    return [name for name in DTYPE_TRIPLES if name.startswith("float8")]


BoolAsUint8 = retyping("BoolAsUint8", "Exports bool as uint8 (1, 8, 1).", {DTYPE_TRIPLES["bool"]: (1, 8, 1)})
ComplexAsFloatPairs = retyping(
    "ComplexAsFloatPairs", "Exports complex64 / complex128 as 2-lane float32 / float64.",
    {DTYPE_TRIPLES["complex64"]: (2, 32, 2), DTYPE_TRIPLES["complex128"]: (2, 64, 2)})
BfloatAsFloat16 = retyping("BfloatAsFloat16", "Exports bfloat16 with the float16 code (2, 16, 1).",
                           {DTYPE_TRIPLES["bfloat16"]: (2, 16, 1)})
Float8AsUint8 = retyping("Float8AsUint8", "Exports every float8 dtype as its bytes, uint8 (1, 8, 1).",
                         {DTYPE_TRIPLES[name]: (1, 8, 1) for name in _float8()})
Float4AsFloatCode = retyping(
    "Float4AsFloatCode", "Exports float4_e2m1fn with the plain float code, (2, 4, lanes).",
    {DTYPE_TRIPLES["float4_e2m1fn"]: (2, 4, 1), DTYPE_TRIPLES["float4_e2m1fn_x2"]: (2, 4, 2)})


class DeletesConsumed(Wrapped):
    """Its capsules' destructor calls the deleter even after a consumer
    renamed the capsule (the deleter frees once: nothing is freed twice)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        return rewrapped(capsule, legacy=capsule_name(capsule) == NAME_LEGACY, honours_rename=False)


class ReversalDropped(Wrapped):
    """A view with a negative stride exports the array it views (the reversal dropped)."""

    def __dlpack__(self, **kwargs):
        reversed_view = isinstance(self._a.base, dr.Array) and any(s < 0 for s in self._a.strides)
        return (self._a.base if reversed_view else self._a).__dlpack__(**kwargs)


class Scalar(Wrapped):
    """A scalar of the library: a 0-d value of a type of its own."""


class ScalarAsVector(Scalar):
    """A scalar exporting as a (1,) vector."""

    def __dlpack__(self, **kwargs):
        return as_vector(self._a.__dlpack__(**kwargs))


class Unexportable:
    """An array of Python objects, which DLPack cannot describe: __dlpack__ refuses it."""

    error = BufferError

    def __dlpack_device__(self):
        return dr.DeviceType.CPU, 0

    def __dlpack__(self, **kwargs):
        raise self.error("an array of Python objects cannot be exported")


class UnexportableTypeError(Unexportable):
    """Refuses an export with TypeError, not BufferError."""

    error = TypeError


def completed(scalar: type = Scalar, unexportable: type = Unexportable) -> Producer:
    """dlpack-ref's producer with a scalar type and an array that cannot be
    exported, which dlpack-ref itself has not."""
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


def publishing(name: str, base: type = Wrapped, **replaced) -> type:
    """A subclass of ``base`` whose type publishes :func:`published_table`."""
    return type(name, (base,), {"__dlpack_c_exchange_api__": published_table(**replaced)})


def _stores_no_stream(device_type, device_id, out):
    return 0  # success, *out left as it was


class RefusesViews(Wrapped):
    """__dlpack__ refuses views with BufferError (the table exports them)."""

    def __dlpack__(self, **kwargs):
        if isinstance(self._a.base, dr.Array):
            raise BufferError("views are exported through the C exchange API only")
        return self._a.__dlpack__(**kwargs)


def table_without_stream() -> type:
    """A type whose table's current_work_stream succeeds without storing a stream."""
    return publishing("StreamlessTable", current_work_stream=STREAM_T(_stores_no_stream))


def table_exporting_views() -> type:
    """A type whose table exports views that its __dlpack__ refuses."""
    return publishing("ViewsThroughTableOnly", RefusesViews)
