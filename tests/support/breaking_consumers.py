"""Consumers made to break one rule each (tests/support/breakers.py):
dlpack-ref's ``from_dlpack`` in steps (:class:`Importer`), one of which a
subclass breaks: the keywords it imports with, its ``__dlpack__`` call, what
it does with the capsule before importing it, with a refusal, or with the
result."""

from __future__ import annotations

import ctypes
import dataclasses
import math
import weakref

import dlpack_ref as dr
from dlpack_ref.conformance import Consumer
from dlpack_ref.testing import (
    DLPACK_VERSION, FLAG_READ_ONLY, INT64_MAX, NAME_LEGACY, NAME_USED_LEGACY, NAME_USED_VERSIONED, NAME_VERSIONED,
    PyCapsule_GetPointer, PyCapsule_SetName, capsule_name, read_capsule,
)

from .breaking_producers import is_capsule, managed, own, set_flag


class Substitute(Exception):
    """Raised within an import: the consumer returns ``result`` instead."""

    def __init__(self, result):
        super().__init__("substituted")
        self.result = result


def tensor_address(capsule) -> int:
    """The address a capsule of any name holds (0 for a NULL name)."""
    name = capsule_name(capsule)
    return 0 if name is None else PyCapsule_GetPointer(id(capsule), name) or 0


class _Asked:
    """The producer as an Importer's import calls it: each request goes
    through ``importer.ask``, each capsule through ``importer.edit``, with
    the address it holds and, for an unconsumed DLPack capsule, its fields
    (``info``; None for any other name, whose struct need not match it)."""

    def __init__(self, x, importer):
        self.x, self.importer = x, importer
        self.capsule, self.info, self.address, self.fell_back = None, None, 0, False

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        got = self.importer.ask(self, kwargs)
        if not is_capsule(got):
            return got
        self.capsule, self.address = got, tensor_address(got)
        self.info = read_capsule(got) if capsule_name(got) in (NAME_VERSIONED, NAME_LEGACY) else None
        return self.importer.edit(got, self.info, kwargs)


class Importer:
    """dlpack-ref's ``from_dlpack`` in steps, each of which a subclass
    breaks: the keywords it imports with, its ``__dlpack__`` call, what it
    does with the capsule before importing it, with a refusal, with the result."""

    def keywords(self, device, copy):
        return device, copy

    def ask(self, asked: _Asked, kwargs: dict):
        try:
            return asked.x.__dlpack__(**kwargs)
        except TypeError:
            asked.fell_back = asked.fell_back or "max_version" in kwargs
            raise

    def edit(self, capsule, info, kwargs):
        return capsule

    def refused(self, error: Exception, asked: _Asked):
        raise error

    def result(self, r, asked: _Asked, device, copy):
        return r

    def __call__(self, x, /, *, device=None, copy=None):
        device, copy = self.keywords(device, copy)
        asked = _Asked(x, self)
        try:
            r = dr.from_dlpack(asked, device=device, copy=copy)
        except Substitute as s:
            return s.result
        except Exception as e:
            return self.refused(e, asked)
        return self.result(r, asked, device, copy)


def importing(importer: Importer) -> Consumer:
    """dlpack-ref's consumer with ``importer`` as its from_dlpack."""
    return dataclasses.replace(own().consumer, name=f"dlpack_ref's from_dlpack as {type(importer).__name__}",
                               from_dlpack=importer, spec=None)


def on_host(r) -> bool:
    """Whether a result of dlpack-ref's from_dlpack is in (plain) host memory."""
    return int(r.device.type) == int(dr.DeviceType.CPU)


def take_without_release(capsule) -> None:
    """Rename ``capsule`` as a consumer that took it, and never call its deleter (a leak)."""
    versioned = capsule_name(capsule) == NAME_VERSIONED
    PyCapsule_SetName(id(capsule), NAME_USED_VERSIONED if versioned else NAME_USED_LEGACY)


class CopiesPlainImports(Importer):
    """An import without keywords copies host data it could share (read-only data excepted)."""

    def result(self, r, asked, device, copy):
        plain = device is None and copy is None
        return r.copy() if plain and on_host(r) and not r.readonly else r


class AsksWithoutMaxVersion(Importer):
    """Calls __dlpack__ without max_version: legacy capsules only."""

    def ask(self, asked, kwargs):
        kwargs.pop("max_version", None)
        return super().ask(asked, kwargs)


class ProbesAfterFallback(Importer):
    """After a legacy fallback, asks the producer once more with max_version
    (its TypeError swallowed): the last call is not the legacy one."""

    def result(self, r, asked, device, copy):
        if asked.fell_back:
            try:
                asked.x.__dlpack__(max_version=DLPACK_VERSION)
            except TypeError:
                pass
        return r


_CONSUMED_NAME = b"consumed_dltensor"


class RenamesOtherwise(Importer):
    """Renames a capsule it consumed 'consumed_dltensor', not the standard's used_ names."""

    def result(self, r, asked, device, copy):
        PyCapsule_SetName(id(asked.capsule), _CONSUMED_NAME)
        return r


#: address of a managed tensor imported here -> a weak reference to its result
_LIVE: dict[int, weakref.ref] = {}


def remember(r, asked: _Asked) -> None:
    """Keep the address of ``asked``'s tensor while its result ``r`` lives."""
    address = asked.address

    def forget(ref):
        if _LIVE.get(address) is ref:  # not a later import's entry at a reused address
            del _LIVE[address]

    _LIVE[address] = weakref.ref(r, forget)


def live_result(capsule):
    """The live result of an import here of the tensor ``capsule`` holds, or None."""
    ref = _LIVE.get(tensor_address(capsule))
    return ref() if ref is not None else None


USED_NAMES = (NAME_USED_VERSIONED, NAME_USED_LEGACY)


class SharesLiveImports(Importer):
    """A capsule it consumed, handed over again while its first result
    lives, is imported again: the first result is returned."""

    def edit(self, capsule, info, kwargs):
        if capsule_name(capsule) in USED_NAMES and live_result(capsule) is not None:
            raise Substitute(live_result(capsule))
        return capsule

    def result(self, r, asked, device, copy):
        remember(r, asked)
        return r


class IgnoresByteOffset(Importer):
    """Reads the elements from data, ignoring byte_offset."""

    def edit(self, capsule, info, kwargs):
        if info is not None:
            managed(capsule)[0].dl_tensor.byte_offset = 0
        return capsule


class StridesMadePositive(Importer):
    """Reads a negative stride as positive, from the lowest address (memory order)."""

    def edit(self, capsule, info, kwargs):
        if info is None or not any(s < 0 for s in info["strides"] or ()):
            return capsule
        m, _ = managed(capsule)
        strides = (ctypes.c_int64 * info["ndim"]).from_address(info["strides_ptr"])
        itemsize = info["dtype"][1] * info["dtype"][2] // 8
        for axis, stride in enumerate(info["strides"]):
            if stride < 0:
                m.dl_tensor.data += (info["shape"][axis] - 1) * stride * itemsize
                strides[axis] = -stride
        return capsule


def null_strides(info) -> bool:
    """Whether a capsule read into ``info`` has NULL strides and ndim > 0."""
    return info is not None and info["ndim"] > 0 and info["strides"] is None


class RefusesNullStridesVersioned(Importer):
    """Refuses NULL strides in any versioned capsule (they were allowed before 1.2)."""

    def edit(self, capsule, info, kwargs):
        if null_strides(info) and info["versioned"]:
            raise BufferError("NULL strides in a versioned capsule")
        return capsule


class RefusesNullStridesLegacy(Importer):
    """Refuses NULL strides in a legacy capsule."""

    def edit(self, capsule, info, kwargs):
        if null_strides(info) and not info["versioned"]:
            raise BufferError("NULL strides in a legacy capsule")
        return capsule


class RefusesLegacyAnswer(Importer):
    """Refuses a legacy capsule when it asked for max_version."""

    def edit(self, capsule, info, kwargs):
        if "max_version" in kwargs and capsule_name(capsule) == NAME_LEGACY:
            raise BufferError("asked for a versioned capsule, got a legacy one")
        return capsule


class LeaksNullStridesRefusal(Importer):
    """Refuses NULL strides in a 1.2+ capsule after taking it: its deleter never runs."""

    def edit(self, capsule, info, kwargs):
        if null_strides(info) and info["versioned"] and info["version"] >= (1, 2):
            take_without_release(capsule)
            raise BufferError("NULL strides are forbidden since DLPack 1.2")
        return capsule


class LeaksNewerMinorRefusal(Importer):
    """Refuses a minor version newer than its own after taking the capsule: its deleter never runs."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["versioned"] and info["version"][0] == 1 and \
                info["version"][1] > DLPACK_VERSION[1]:
            take_without_release(capsule)
            raise BufferError(f"DLPack {info['version']} is newer than this consumer")
        return capsule


class DropsReadOnly(Importer):
    """Clears READ_ONLY before importing: the result is writable."""

    def edit(self, capsule, info, kwargs):
        return capsule if info is None else set_flag(capsule, FLAG_READ_ONLY, False)


class RefusesNullDeleter(Importer):
    """Refuses a tensor with a NULL deleter."""

    def edit(self, capsule, info, kwargs):
        if info is not None and not info["deleter"]:
            raise BufferError("a tensor without a deleter")
        return capsule


class LeaksEmptyNullData(Importer):
    """Refuses a size-0 tensor with NULL data after taking it: its deleter never runs."""

    def edit(self, capsule, info, kwargs):
        if info is not None and not info["data"] and 0 in (info["shape"] or ()):
            take_without_release(capsule)
            raise BufferError("NULL data")
        return capsule


def widening(name: str, doc: str, table: dict) -> type:
    """An Importer converting results of the dtypes of ``table`` to the dtype it maps them to."""

    def result(self, r, asked, device, copy):
        return dr.asarray(r, dtype=table[str(r.dtype)]) if str(r.dtype) in table else r

    return type(name, (Importer,), {"result": result, "__doc__": doc})


WidensSigned = widening("WidensSigned", "Widens int8, int16 and int32 results to int64.",
                        {"int8": "int64", "int16": "int64", "int32": "int64"})
WidensNarrowFloats = widening("WidensNarrowFloats", "Widens float16, bfloat16 and float32 results to float64.",
                              {"float16": "float64", "bfloat16": "float64", "float32": "float64"})


class UnsignedAsSigned(Importer):
    """Reads unsigned integers as signed ones of the same width."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["dtype"][0] == 1:
            managed(capsule)[0].dl_tensor.dtype.code = 0
        return capsule


class IgnoresCopyTrue(Importer):
    """Ignores copy=True (imports in place)."""

    def keywords(self, device, copy):
        return device, None if copy else copy


class CopiesForCopyFalseImport(Importer):
    """Copies the result of a copy=False import (a producer's copy is still refused)."""

    def result(self, r, asked, device, copy):
        return r.copy() if copy is False else r


class CopyFalseAsNone(Importer):
    """Takes copy=False as copy=None: a producer's copy is accepted."""

    def keywords(self, device, copy):
        return device, None if copy is False else copy


class CopiesForDevice(Importer):
    """Copies whenever a device is given, its data's own included."""

    def keywords(self, device, copy):
        return device, True if device is not None else copy


class ProducerErrorWrapped(Importer):
    """Wraps the producer's BufferError in a RuntimeError."""

    def ask(self, asked, kwargs):
        try:
            return super().ask(asked, kwargs)
        except BufferError as e:
            raise RuntimeError(f"the producer failed: {e}") from e


class AsarrayOfNonCapsule(Importer):
    """Takes what a __dlpack__ returned that is no capsule as values (dlpack_ref.asarray of it)."""

    def ask(self, asked, kwargs):
        got = super().ask(asked, kwargs)
        if not is_capsule(got):
            raise Substitute(dr.asarray(got))
        return got


_DLPACK_NAMES = (NAME_VERSIONED, NAME_LEGACY, NAME_USED_VERSIONED, NAME_USED_LEGACY)


class AnyNameIsVersioned(Importer):
    """Takes a capsule of any other name for a versioned one."""

    def edit(self, capsule, info, kwargs):
        if capsule_name(capsule) not in _DLPACK_NAMES:
            PyCapsule_SetName(id(capsule), NAME_VERSIONED)
        return capsule


class AcceptsUsedName(Importer):
    """Imports a capsule named used_* as if unconsumed, unless it consumed
    that tensor itself (it remembers its own imports)."""

    def edit(self, capsule, info, kwargs):
        name = capsule_name(capsule)
        if name in USED_NAMES and live_result(capsule) is None:
            PyCapsule_SetName(id(capsule), NAME_VERSIONED if name == NAME_USED_VERSIONED else NAME_LEGACY)
        return capsule

    def result(self, r, asked, device, copy):
        remember(r, asked)
        return r


class MajorTwoAsOne(Importer):
    """Reads version 2.x as 1.x."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["versioned"] and info["version"][0] == 2:
            managed(capsule)[0].version.major = 1
        return capsule


class NegativeNdimAsZero(Importer):
    """Reads a negative ndim as 0 (a 0-d array)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["ndim"] < 0:
            managed(capsule)[0].dl_tensor.ndim = 0
        return capsule


class NegativeExtentAsZero(Importer):
    """Reads a negative extent as 0 (an empty array)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["shape"] and any(n < 0 for n in info["shape"]):
            shape = (ctypes.c_int64 * info["ndim"]).from_address(info["shape_ptr"])
            for axis, n in enumerate(info["shape"]):
                shape[axis] = max(n, 0)
        return capsule


class EmptyForNullShape(Importer):
    """Returns an empty array for a NULL shape."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["ndim"] > 0 and not info["shape_ptr"]:
            raise Substitute(dr.asarray([]))
        return capsule


class ZerosForNullData(Importer):
    """Returns zeros for NULL data."""

    def edit(self, capsule, info, kwargs):
        if info is not None and not info["data"] and info["shape"] and 0 not in info["shape"]:
            raise Substitute(dr.zeros(info["shape"]))
        return capsule


class EmptyForOverflow(Importer):
    """Takes a shape whose size overflows int64 as an empty array (its size wrapped to 0)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["shape"] and math.prod(info["shape"]) > INT64_MAX:
            raise Substitute(dr.zeros((0,)))
        return capsule


class TypeErrorForUnknownCode(Importer):
    """Refuses an unknown dtype code with TypeError, not BufferError."""

    def refused(self, error, asked):
        if asked.info is not None and asked.info["dtype"][0] not in set(map(int, dr.DTypeCode)):
            raise TypeError(f"unknown dtype code {asked.info['dtype'][0]}") from error
        raise error


class ValueErrorForBadBits(Importer):
    """Refuses a float of an unknown width with ValueError, not BufferError."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["dtype"][0] == 2 and info["dtype"][1] not in (8, 16, 32, 64):
            raise ValueError(f"no float of {info['dtype'][1]} bits")
        return capsule


class IgnoresLanes(Importer):
    """Reads a vector dtype (lanes > 1) as its scalar type."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["dtype"][2] > 1:
            managed(capsule)[0].dl_tensor.dtype.lanes = 1
        return capsule


class ValueErrorForOpenCL(Importer):
    """Refuses an OpenCL tensor with ValueError, not BufferError."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["device"][0] == int(dr.DeviceType.OPENCL):
            raise ValueError("OpenCL tensors are not supported")
        return capsule


class CudaAsHost(Importer):
    """Takes CUDA memory for host memory and copies it on the host: a device
    pointer dereferenced (the process dies)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["device"][0] == int(dr.DeviceType.CUDA):
            managed(capsule)[0].dl_tensor.device.device_type = int(dr.DeviceType.CPU)
        return capsule

    def result(self, r, asked, device, copy):
        cuda = asked.info is not None and asked.info["device"][0] == int(dr.DeviceType.CUDA)
        return r.copy() if cuda else r
