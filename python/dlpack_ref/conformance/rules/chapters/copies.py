"""Copies of CPU memory: ``copy=True`` copies (and flags IS_COPIED),
``copy=False`` and a plain exchange share the memory, on both sides. The
copies of CUDA memory are :mod:`.device_copies`."""

from __future__ import annotations

import ctypes

from dlpack_ref.harness.observe import exc_name
from dlpack_ref.harness.subject import NotSupported, ask, export_any, first_element
from dlpack_ref.testing.abi import FLAG_IS_COPIED
from dlpack_ref.testing.reader import Consumed

from ..breaking.consumers import Importer, on_host
from ..breaking.producers import Wrapped
from ..breaking.surgery import set_flag
from ..consumer_cases import F64, V123, f64, import_asked, import_or_why_copied, judged
from ..consumer_judges import accepts_in_place, copies, refuses_copy
from ..producer_cases import beside_plain_export, made, nbytes
from ..support import CheckFailed, flag_set, must_succeed, read_export
from ..table import breaks, rule


# --- producers ----------------------------------------------------------------------------

def copy_request(x):
    """``(capsule, None)`` of ``__dlpack__(copy=True)``, or ``(None, the
    exception)`` it was refused with (NotSupported when the producer takes
    no copy keyword)."""
    try:
        return ask(x, copy=True), None
    except NotSupported:
        raise
    except Exception as e:
        return None, e


@rule(side="producer", source="array-api", where="array.__dlpack__, copy")
def copy_true_copies(p) -> str:
    """copy=True always copies: another data pointer, and writes to the copy leave the array unchanged"""
    x = made(p, "float64", (2, 3))
    p.twice("comparing copy=True with the array")
    plain_cap = must_succeed("the plain export __dlpack__()", lambda: export_any(x))
    plain = read_export("the plain export __dlpack__()", lambda: plain_cap)
    base, n = first_element(plain), nbytes(plain)
    before = ctypes.string_at(base, n)
    cap, refusal = copy_request(x)
    if isinstance(refusal, BufferError):
        raise NotSupported("copy=True is refused with BufferError (the standard says it must copy)", refusal)
    if refusal is not None:
        raise CheckFailed(f"copy=True refused with {exc_name(refusal)}: it must copy (or raise BufferError "
                          "when it cannot)", refusal)
    info = read_export("__dlpack__(copy=True)", lambda: cap)
    ptr = first_element(info)
    if ptr == base:
        raise CheckFailed(f"copy=True exported the same data pointer {ptr:#x}")
    if info["device"] != plain["device"]:
        raise CheckFailed(f"copy=True exported on device {info['device']}, the array is on {plain['device']}")
    copied = must_succeed("consuming the copy", lambda: Consumed(cap))
    if ctypes.string_at(ptr, n) != before:
        raise CheckFailed("the copy's bytes differ from the array's when __dlpack__ returns")
    ctypes.memset(ptr, 0x5A, n)
    if ctypes.string_at(base, n) != before:
        raise CheckFailed("writing to the copy changed the array")
    copied.release()
    return f"pointer {ptr:#x} != {base:#x}; writes to the copy do not reach the array"


@breaks(copy_true_copies, shows="copy=True exported the same data pointer")
class InPlaceCopy(Wrapped):
    """copy=True exports the array in place and flags it IS_COPIED."""

    def __dlpack__(self, copy=None, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, True) if copy else capsule


@rule(side="producer", source="header", where="DLPACK_FLAG_BITMASK_IS_COPIED")
def copy_true_flag(p) -> str:
    """a copy made for copy=True carries DLPACK_FLAG_BITMASK_IS_COPIED"""
    x = made(p, "float64", (2, 3))
    cap, refusal = copy_request(x)
    if refusal is not None:
        raise NotSupported(f"copy=True is refused with {exc_name(refusal)}, so there is no copy to flag "
                           "(producer.copy_true_copies judges the refusal)", refusal)
    return flag_set(read_export("__dlpack__(copy=True)", lambda: cap), FLAG_IS_COPIED,
                    "legacy capsule: no flags to set", "IS_COPIED not set on a copy")


@breaks(copy_true_flag, shows="IS_COPIED not set on a copy")
class UnflaggedCopy(Wrapped):
    """copy=True copies, with the IS_COPIED flag cleared."""

    def __dlpack__(self, copy=None, **kwargs):
        capsule = self._a.__dlpack__(copy=copy, **kwargs)
        return set_flag(capsule, FLAG_IS_COPIED, False) if copy else capsule


@rule(side="producer", source="array-api", where="array.__dlpack__, copy")
def copy_false_no_copy(p) -> str:
    """copy=False never copies: same data pointer as a plain export, IS_COPIED not set"""
    x = made(p, "float64", (2, 3))
    info, base = beside_plain_export(p, x, "copy=False of memory exportable in place", copy=False)
    if first_element(info) != base:
        raise CheckFailed(f"copy=False exported {first_element(info):#x}, the array is at {base:#x}")
    if info["versioned"] and info["flags"] & FLAG_IS_COPIED:
        raise CheckFailed("IS_COPIED set with copy=False")
    return f"same pointer {base:#x}"


@breaks(copy_false_no_copy, shows=", the array is at ")
class CopiesForCopyFalse(Wrapped):
    """copy=False exports a copy (flagged IS_COPIED)."""

    def __dlpack__(self, copy=None, **kwargs):
        return self._a.__dlpack__(copy=True if copy is False else copy, **kwargs)


# --- consumers ----------------------------------------------------------------------------

@rule(side="consumer", source="array-api", where="from_dlpack")
def zero_copy_import(c):
    """a valid versioned capsule is imported in place with its values"""
    return judged(c, lambda f: import_or_why_copied(c, f, shape=(3,), dtype=F64, fill=f64(V123)),
                  accepts_in_place, want=V123)


@breaks(zero_copy_import, shows="copied (pointer")
class CopiesPlainImports(Importer):
    """An import without keywords copies host data it could share (read-only data excepted)."""

    def result(self, r, asked, device, copy):
        plain = device is None and copy is None
        return r.copy() if plain and on_host(r) and not r.readonly else r


@rule(side="consumer", source="array-api", where="from_dlpack, copy: 'must always copy'")
def copy_true(c):
    """from_dlpack(x, copy=True) returns a copy (another pointer, same values), also from a pre-1.0 producer that
    cannot copy"""
    return judged(c, lambda f: import_asked(c, f, {"copy": True}, legacy_only=True, shape=(3,), dtype=F64,
                                            fill=f64(V123)),
                  copies, want=V123, control={"legacy_only": True})


@breaks(copy_true, shows="copy=True imported in place (same pointer)")
class IgnoresCopyTrue(Importer):
    """Ignores copy=True (imports in place)."""

    def keywords(self, device, copy):
        return device, None if copy else copy


@rule(side="consumer", source="array-api", where="from_dlpack, copy")
def copy_false(c):
    """from_dlpack(x, copy=False) imports in place"""
    return judged(c, lambda f: import_asked(c, f, {"copy": False}, shape=(3,), dtype=F64, fill=f64(V123)),
                  accepts_in_place, want=V123)


@breaks(copy_false, shows="copied (pointer")
class CopiesForCopyFalseImport(Importer):
    """Copies the result of a copy=False import (a producer's copy is still refused)."""

    def result(self, r, asked, device, copy):
        return r.copy() if copy is False else r


@rule(side="consumer", source="array-api",
      where="from_dlpack, copy: 'must never copy'; header, DLPACK_FLAG_BITMASK_IS_COPIED")
def copy_false_is_copied(c):
    """from_dlpack(x, copy=False) refuses (BufferError or ValueError) a tensor flagged IS_COPIED, which a producer that
    copied anyway returns, and calls its deleter once"""
    return judged(c, lambda f: import_asked(c, f, {"copy": False}, read_values=False, shape=(3,), dtype=F64,
                                            flags=FLAG_IS_COPIED, fill=f64(V123), versioned=True),
                  refuses_copy, needs_versioned=True)


@breaks(copy_false_is_copied, shows="accepted a tensor flagged IS_COPIED for copy=False")
class CopyFalseAsNone(Importer):
    """Takes copy=False as copy=None: a producer's copy is accepted."""

    def keywords(self, device, copy):
        return device, None if copy is False else copy
