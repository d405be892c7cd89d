"""Ownership: the deleter runs exactly once, a consumed capsule is renamed
and never consumed again, a NULL deleter is allowed."""

from __future__ import annotations

import ctypes
import gc
import sys

from dlpack_ref.harness.observe import exc_name
from dlpack_ref.harness.subject import NotSupported, keywords_taken
from dlpack_ref.testing.abi import (
    DELETER_T, DLManagedTensor, DLManagedTensorVersioned, DLPACK_VERSION, NAME_LEGACY, NAME_VERSIONED,
    PyCapsule_SetName,
)
from dlpack_ref.testing.factory import ForeignProducer
from dlpack_ref.testing.reader import Consumed, capsule_name, read_capsule

from ..breaking.consumers import USED_NAMES, Importer, Remembering, Substitute, live_result
from ..breaking.producers import Wrapped
from ..breaking.surgery import rewrapped
from ..consumer_cases import F64, KeepingProducer, V123, attempt, f64, import_made, judged, recorded_calls
from ..consumer_judges import accepts, refuses_second_import, renames
from ..producer_cases import made
from ..support import CheckFailed, must_succeed
from ..table import breaks, rule


# --- producers ----------------------------------------------------------------------------

_SPIES: list = []  # ctypes callbacks must outlive every call through them


class DeleterSpy:
    """Counts calls of a capsule's deleter by putting a counting trampoline in
    its ``deleter`` field; the original deleter still runs."""

    def __init__(self, capsule):
        info = read_capsule(capsule)
        struct_type = DLManagedTensorVersioned if info["versioned"] else DLManagedTensor
        self.original = info["deleter"]
        self.calls = 0
        original = DELETER_T(self.original) if self.original else None

        def counted(address):
            self.calls += 1
            if original is not None:
                original(address)

        self._callback = DELETER_T(counted)
        _SPIES.append(self._callback)
        struct_type.from_address(info["address"]).deleter = ctypes.cast(self._callback, ctypes.c_void_p).value


def references(box: list) -> int:
    """References to box[0], counted alike on every CPython: a subscript is
    always a new reference, while sys.getrefcount(local) counts one less on
    3.14 wherever the compiler loads the local borrowed."""
    return sys.getrefcount(box[0])


@rule(side="producer", source="python",
      where="Python spec: PyCapsule destructor and 'used_dltensor' renaming; header: deleter")
def deleter_once(p) -> str:
    """the deleter runs exactly once: when the consumer is done, or from the capsule destructor of an unconsumed
    capsule, never from the destructor of a consumed (renamed) one"""
    x = made(p, "float64", (2, 3))
    box = [x]
    notes = []
    counted = False
    versioned = "max_version" in keywords_taken(x)
    for kind, kwargs in (("versioned", {"max_version": DLPACK_VERSION}), ("legacy", {})):
        if kind == "versioned" and not versioned:
            notes.append("versioned: not available (a pre-1.0 producer)")
            continue
        if p.exports_once():
            box[0] = x = made(p, "float64", (2, 3))
        try:
            refs = references(box)
            cap = x.__dlpack__(**kwargs)
        except Exception as e:
            notes.append(f"{kind}: not exported ({exc_name(e)})")
            continue
        if kind == "versioned" and capsule_name(cap) != NAME_VERSIONED:
            notes.append("versioned: not available")
            continue
        spy = DeleterSpy(cap)
        if not spy.original:
            notes.append(f"{kind}: NULL deleter (allowed)")
            continue
        counted = True
        consumed = must_succeed(f"consuming the {kind} capsule", lambda cap=cap: Consumed(cap))
        if spy.calls:
            raise CheckFailed(f"{kind}: deleter ran {spy.calls} time(s) while the consumer still used the data")
        del consumed
        gc.collect()
        del cap
        gc.collect()
        if spy.calls != 1:
            raise CheckFailed(f"{kind}, consumed: deleter ran {spy.calls} times, expected once")
        if p.exports_once():
            box[0] = x = made(p, "float64", (2, 3))
            refs = references(box)
        cap = x.__dlpack__(**kwargs)
        spy = DeleterSpy(cap)
        del cap
        gc.collect()
        if spy.calls > 1:
            raise CheckFailed(f"{kind}, dropped unconsumed: deleter ran {spy.calls} times, expected once")
        # 0 here: the capsule destructor frees the tensor without going
        # through its deleter field, which cannot be counted from outside.
        dropped = "once (dropped)" if spy.calls else "dropped: freed without calling DLManagedTensor.deleter"
        leaked = references(box) - refs
        if leaked > 0:
            raise CheckFailed(f"{kind}: the array holds {leaked} more reference(s) after the exports ended")
        notes.append(f"{kind}: once (consumed), {dropped}")
    if not counted:
        raise NotSupported("no capsule with a deleter to count: " + "; ".join(notes))
    return "; ".join(notes)


@breaks(deleter_once, shows="versioned, consumed: deleter ran 2 times, expected once")
class DeletesConsumed(Wrapped):
    """Its capsules' destructor calls the deleter even after a consumer
    renamed the capsule (the deleter frees once: nothing is freed twice)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        return rewrapped(capsule, legacy=capsule_name(capsule) == NAME_LEGACY, honours_rename=False)


# --- consumers ----------------------------------------------------------------------------

@rule(side="consumer", source="python", where="Python spec: capsule renaming")
def capsule_renamed(c):
    """a consumed capsule is renamed 'used_dltensor_versioned' / 'used_dltensor'"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, fill=f64(V123), names=True), renames)


_CONSUMED_NAME = b"consumed_dltensor"


@breaks(capsule_renamed, shows="capsule named 'consumed_dltensor' after import, expected 'used_dltensor_versioned'")
class RenamesOtherwise(Importer):
    """Renames a capsule it consumed 'consumed_dltensor', not the standard's used_ names."""

    def result(self, r, asked, device, copy):
        PyCapsule_SetName(id(asked.capsule), _CONSUMED_NAME)
        return r


def import_twice(c, f) -> dict:
    """An import, then the same capsule handed over again."""
    p = KeepingProducer(f, shape=(3,), dtype=F64, fill=f64([1, 2, 3]))
    first = attempt(c, p)
    cap = p.capsule
    name = capsule_name(cap) if cap is not None else None
    second = attempt(c, ForeignProducer(f, returns=cap)) if cap is not None else {"outcome": "none"}
    second.pop("result", None)
    return {"outcome": first["outcome"], "name_after": name.decode() if name else None, "second": second,
            "exc": second.get("exc") or first.get("exc"), "result": first.get("result"),
            "calls": recorded_calls(p)}


@rule(side="consumer", source="python", where="Python spec: a capsule is consumed exactly once")
def consumed_twice(c):
    """a capsule is consumed once; handing it over again is refused"""
    return judged(c, lambda f: import_twice(c, f), refuses_second_import)


@breaks(consumed_twice, shows="the same capsule was imported twice")
class SharesLiveImports(Remembering):
    """A capsule it consumed, handed over again while its first result
    lives, is imported again: the first result is returned."""

    def edit(self, capsule, info, kwargs):
        if capsule_name(capsule) in USED_NAMES and live_result(capsule) is not None:
            raise Substitute(live_result(capsule))
        return capsule


@rule(side="consumer", source="header", where="DLManagedTensorVersioned.deleter 'can be NULL'")
def null_deleter(c):
    """a NULL deleter is allowed (nothing to call)"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, deleter=False, fill=f64(V123)), accepts,
                  want=V123, deleters=0)


@breaks(null_deleter, shows="refused")
class RefusesNullDeleter(Importer):
    """Refuses a tensor with a NULL deleter."""

    def edit(self, capsule, info, kwargs):
        if info is not None and not info["deleter"]:
            raise BufferError("a tensor without a deleter")
        return capsule
