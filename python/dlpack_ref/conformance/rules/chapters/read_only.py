"""Read-only data: flagged READ_ONLY when exported, never exported as a
legacy capsule, never imported as a writable array."""

from __future__ import annotations

from dlpack_ref.harness.subject import NotSupported, ask, keywords_taken
from dlpack_ref.testing.abi import DLPACK_VERSION, FLAG_READ_ONLY

from ..breaking.consumers import Importer
from ..breaking.producers import Wrapped
from ..breaking.surgery import rewrapped, set_flag
from ..consumer_cases import F64, V123, f64, import_made, judged
from ..consumer_judges import keeps_read_only
from ..producer_cases import made
from ..support import flag_set, read_export, refused_with_buffererror
from ..table import breaks, rule


@rule(side="producer", source="header", where="DLPACK_FLAG_BITMASK_READ_ONLY; DLManagedTensorVersioned.flags")
def read_only_flag(p) -> str:
    """read-only data is exported with DLPACK_FLAG_BITMASK_READ_ONLY"""
    x = made(p, "float64", (2, 3), readonly=True)
    if "max_version" not in keywords_taken(x):
        raise NotSupported("a pre-1.0 producer (__dlpack__ takes no max_version): only legacy capsules, "
                           "which cannot carry READ_ONLY")
    info = read_export("__dlpack__(max_version=(1, 3))", lambda: ask(x))
    return flag_set(info, FLAG_READ_ONLY, "only legacy capsules, which cannot carry READ_ONLY",
                    "READ_ONLY not set for read-only data")


@breaks(read_only_flag, shows="READ_ONLY not set for read-only data")
class ReadOnlyUnflagged(Wrapped):
    """Exports read-only data without the READ_ONLY flag."""

    def __dlpack__(self, **kwargs):
        return set_flag(self._a.__dlpack__(**kwargs), FLAG_READ_ONLY, False)


@rule(side="producer", source="python",
      where="Python spec: legacy DLManagedTensor has no flags; DLPack 1.0 added READ_ONLY for this")
def read_only_legacy_refused(p) -> str:
    """read-only data is not exported as a legacy capsule (which cannot say read-only): BufferError"""
    x = made(p, "float64", (2, 3), readonly=True)
    return refused_with_buffererror("__dlpack__() of read-only data", lambda: x.__dlpack__())


@breaks(read_only_legacy_refused, shows="__dlpack__() of read-only data was accepted")
class ReadOnlyAsLegacy(Wrapped):
    """Exports read-only data in place as a legacy capsule, which cannot say read-only."""

    def __dlpack__(self, **kwargs):
        if "max_version" in kwargs or not self._a.readonly:
            return self._a.__dlpack__(**kwargs)
        return rewrapped(self._a.__dlpack__(max_version=DLPACK_VERSION, **kwargs), legacy=True)


@rule(side="consumer", source="header", where="DLPACK_FLAG_BITMASK_READ_ONLY")
def read_only(c):
    """READ_ONLY data gives a read-only array or is refused (never a writable one)"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, flags=FLAG_READ_ONLY, fill=f64(V123),
                                           versioned=True),
                  keeps_read_only, want=V123, needs_versioned=True)


@breaks(read_only, shows="imported READ_ONLY data as a writable array")
class DropsReadOnly(Importer):
    """Clears READ_ONLY before importing: the result is writable."""

    def edit(self, capsule, info, kwargs):
        return capsule if info is None else set_flag(capsule, FLAG_READ_ONLY, False)
