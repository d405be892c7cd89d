"""Malformed input: what a consumer must refuse, and refuse cleanly (the
deleter called once, nothing read): a non-capsule, another or a used
capsule name, another major version, a negative ndim or extent, a NULL
shape or data pointer, a size that overflows."""

from __future__ import annotations

import ctypes
import math

import dlpack_ref as dr
from dlpack_ref.testing.abi import (
    INT64_MAX, NAME_LEGACY, NAME_USED_LEGACY, NAME_USED_VERSIONED, NAME_VERSIONED, PyCapsule_SetName,
)
from dlpack_ref.testing.reader import capsule_name

from ..breaking.consumers import USED_NAMES, Importer, Remembering, Substitute, live_result
from ..breaking.surgery import is_capsule, managed
from ..consumer_cases import F64, SQUARE, import_asked, import_made, judged
from ..consumer_judges import refuses
from ..table import breaks, rule

#: What the breakers of this chapter's rules show: the malformed input imported as an array.
ACCEPTED = "accepted (result Array on device_type 1, device_id 0)"


@rule(side="consumer", source="python", where="Python spec: __dlpack__ returns a PyCapsule")
def producer_returns_non_capsule(c):
    """__dlpack__ returning a non-capsule is refused, no crash"""
    return judged(c, lambda f: import_asked(c, f, {}, returns=42), refuses, deleters=0)


@breaks(producer_returns_non_capsule, shows=ACCEPTED)
class AsarrayOfNonCapsule(Importer):
    """Takes what a __dlpack__ returned that is no capsule as values (dlpack_ref.asarray of it)."""

    def ask(self, asked, kwargs):
        got = super().ask(asked, kwargs)
        if not is_capsule(got):
            raise Substitute(dr.asarray(got))
        return got


_DLPACK_NAMES = (NAME_VERSIONED, NAME_LEGACY, NAME_USED_VERSIONED, NAME_USED_LEGACY)


@rule(side="consumer", source="python", where="Python spec: capsule names")
def bad_name(c):
    """a capsule with another name is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, name=b"not_a_dltensor"), refuses)


@breaks(bad_name, shows=ACCEPTED)
class AnyNameIsVersioned(Importer):
    """Takes a capsule of any other name for a versioned one."""

    def edit(self, capsule, info, kwargs):
        if capsule_name(capsule) not in _DLPACK_NAMES:
            PyCapsule_SetName(id(capsule), NAME_VERSIONED)
        return capsule


@rule(side="consumer", source="python", where="Python spec: capsule renaming")
def used_name(c):
    """a capsule already named 'used_dltensor_versioned' is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, name=NAME_USED_VERSIONED), refuses)


@breaks(used_name, shows=ACCEPTED)
class AcceptsUsedName(Remembering):
    """Imports a capsule named used_* as if unconsumed, unless it consumed
    that tensor itself (it remembers its own imports)."""

    def edit(self, capsule, info, kwargs):
        name = capsule_name(capsule)
        if name in USED_NAMES and live_result(capsule) is None:
            PyCapsule_SetName(id(capsule), NAME_VERSIONED if name == NAME_USED_VERSIONED else NAME_LEGACY)
        return capsule


@rule(side="consumer", source="header", where="DLPackVersion: 'the consumer must call the deleter'")
def major_version_2(c):
    """version.major 2 is refused and the deleter called"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, version=(2, 0), versioned=True), refuses,
                  needs_versioned=True)


@breaks(major_version_2, shows=ACCEPTED)
class MajorTwoAsOne(Importer):
    """Reads version 2.x as 1.x."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["versioned"] and info["version"][0] == 2:
            managed(capsule)[0].version.major = 1
        return capsule


@rule(side="consumer", source="header", where="DLTensor.ndim")
def ndim_negative(c):
    """ndim -1 is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, ndim=-1), refuses)


@breaks(ndim_negative, shows=ACCEPTED)
class NegativeNdimAsZero(Importer):
    """Reads a negative ndim as 0 (a 0-d array)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["ndim"] < 0:
            managed(capsule)[0].dl_tensor.ndim = 0
        return capsule


@rule(side="consumer", source="header", where="DLTensor.shape")
def shape_negative(c):
    """a negative extent is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(-3,), dtype=F64), refuses)


@breaks(shape_negative, shows=ACCEPTED)
class NegativeExtentAsZero(Importer):
    """Reads a negative extent as 0 (an empty array)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["shape"] and any(n < 0 for n in info["shape"]):
            shape = (ctypes.c_int64 * info["ndim"]).from_address(info["shape_ptr"])
            for axis, n in enumerate(info["shape"]):
                shape[axis] = max(n, 0)
        return capsule


@rule(side="consumer", source="header", where="DLTensor.shape")
def shape_null(c):
    """a NULL shape with ndim > 0 is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, shape_null=True), refuses)


@breaks(shape_null, shows=ACCEPTED)
class EmptyForNullShape(Importer):
    """Returns an empty array for a NULL shape."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["ndim"] > 0 and not info["shape_ptr"]:
            raise Substitute(dr.asarray([]))
        return capsule


@rule(side="consumer", source="header", where="DLTensor.data")
def data_null(c):
    """NULL data for a non-empty tensor is refused, never dereferenced"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, data=None), refuses)


@breaks(data_null, shows=ACCEPTED)
class ZerosForNullData(Importer):
    """Returns zeros for NULL data."""

    def edit(self, capsule, info, kwargs):
        if info is not None and not info["data"] and info["shape"] and 0 not in info["shape"]:
            raise Substitute(dr.zeros(info["shape"]))
        return capsule


@rule(side="consumer", source="header", where="DLTensor.shape")
def extent_overflow(c):
    """a shape whose size overflows int64 is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(2 ** 62, 8), dtype=F64), refuses, control=SQUARE)


@breaks(extent_overflow, shows=ACCEPTED)
class EmptyForOverflow(Importer):
    """Takes a shape whose size overflows int64 as an empty array (its size wrapped to 0)."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["shape"] and math.prod(info["shape"]) > INT64_MAX:
            raise Substitute(dr.zeros((0,)))
        return capsule
