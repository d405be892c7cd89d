"""Capsule surgery for the breakers, done through the ctypes mirror of
:mod:`dlpack_ref.testing`: a field rewritten, a flag set or cleared, a
tensor rewrapped in a capsule of another kind."""

from __future__ import annotations

import ctypes

from dlpack_ref.testing.abi import (
    DELETER_T, DLPACK_VERSION, NAME_LEGACY, NAME_VERSIONED, DLManagedTensor, DLManagedTensorVersioned,
    PyCapsule_GetName, PyCapsule_New,
)
from dlpack_ref.testing.reader import Consumed, read_capsule

__all__ = ["KEPT", "as_vector", "is_capsule", "managed", "rewrapped", "set_flag"]

# ctypes objects that C holds addresses of (callbacks, structs, tables): alive for the process
KEPT: list = []


def managed(capsule):
    """(the managed struct behind a DLPack capsule, writable through ctypes, and its fields read)."""
    info = read_capsule(capsule)
    kind = DLManagedTensorVersioned if info["versioned"] else DLManagedTensor
    return kind.from_address(info["address"]), info


def is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


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
