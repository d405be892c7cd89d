"""Versions and capsules: which capsule a producer returns for which
``max_version``, and what a consumer asks for and accepts."""

from __future__ import annotations

from dlpack_ref.harness.subject import NotSupported, ask
from dlpack_ref.testing.abi import DLPACK_VERSION, NAME_LEGACY, NAME_VERSIONED
from dlpack_ref.testing.reader import capsule_name

from ..breaking.consumers import Importer, take_without_release
from ..breaking.producers import Wrapped
from ..breaking.surgery import managed
from ..consumer_cases import F64, V123, f64, import_asked, import_made, judged
from ..consumer_judges import accepts, accepts_or_refuses, asks_max_version, falls_back_to_legacy
from ..producer_cases import made
from ..support import CheckFailed, must_succeed, read_export
from ..table import breaks, rule


# --- producers ----------------------------------------------------------------------------

@rule(side="producer", source="array-api", where="array.__dlpack__, max_version")
def legacy_without_max_version(p) -> str:
    """__dlpack__() without max_version returns a legacy capsule named 'dltensor'"""
    x = made(p, "float32", (2, 3))
    cap = must_succeed("__dlpack__()", lambda: x.__dlpack__())
    name = capsule_name(cap)
    if name != NAME_LEGACY:
        raise CheckFailed(f"capsule named {name!r}, expected b'dltensor'")
    return "capsule 'dltensor'"


@breaks(legacy_without_max_version, shows="capsule named b'dltensor_versioned', expected b'dltensor'")
class VersionedWithoutMaxVersion(Wrapped):
    """Answers __dlpack__() without max_version with a versioned capsule
    (read-only data is still refused there, as a legacy export must)."""

    def __dlpack__(self, **kwargs):
        if "max_version" not in kwargs:
            if self._a.readonly:
                raise BufferError("read-only data cannot be exported as a legacy capsule")
            kwargs["max_version"] = DLPACK_VERSION
        return self._a.__dlpack__(**kwargs)


@rule(side="producer", source="python", where="Python spec, __dlpack__ max_version; header: DLManagedTensorVersioned")
def versioned_capsule(p) -> str:
    """__dlpack__(max_version=(1, m)) returns a 'dltensor_versioned' capsule with version.major 1 (a producer may
    answer with another version; a legacy answer means DLPack 1.x is not implemented)"""
    seen, legacy = [], []
    for mv in ((1, 0), (1, 3)):
        x = made(p, "float32", (2, 3))
        info = read_export(f"__dlpack__(max_version={mv})", lambda: ask(x, max_version=mv))
        if info["name"] == NAME_LEGACY:
            legacy.append(mv)
            continue
        if info["name"] != NAME_VERSIONED:
            raise CheckFailed(f"max_version={mv}: capsule named {info['name']!r}")
        if info["version"][0] != 1:
            raise CheckFailed(f"max_version={mv}: stamped version {info['version']}, major must be 1")
        seen.append(f"{mv} -> stamped {info['version']}")
    if legacy:
        raise NotSupported(f"returns legacy 'dltensor' capsules for max_version={legacy}: versioned "
                           "capsules (DLPack >= 1.0, with flags) are not implemented")
    return "; ".join(seen)


@breaks(versioned_capsule, shows="stamped version (2, 0), major must be 1")
class StampsMajorTwo(Wrapped):
    """Stamps version 2.0 on the capsule it returns for max_version=(1, m)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if info["versioned"] and kwargs.get("max_version", (0,))[0] == 1:
            m.version.major, m.version.minor = 2, 0
        return capsule


@rule(side="producer", source="array-api", where="array.__dlpack__, max_version")
def newer_major_requested(p) -> str:
    """__dlpack__(max_version=(2, 0)) still returns a capsule the producer supports (major 1 or legacy), never an
    error: the consumer checks the version it gets"""
    x = made(p, "float32", (2, 3))
    info = read_export("__dlpack__(max_version=(2, 0))", lambda: ask(x, max_version=(2, 0)))
    if info["versioned"] and info["version"][0] > 2:
        raise CheckFailed(f"stamped {info['version']}, newer than asked")
    return f"capsule {info['name'].decode()} version {info['version']}"


@breaks(newer_major_requested, shows="__dlpack__(max_version=(2, 0)) raised")
class RefusesNewerMajor(Wrapped):
    """Refuses a max_version newer than 1.x instead of answering with what it has."""

    def __dlpack__(self, **kwargs):
        asked = kwargs.get("max_version")
        if asked is not None and asked[0] > 1:
            raise BufferError(f"max_version={tuple(asked)}: only DLPack 1.x is exported")
        return self._a.__dlpack__(**kwargs)


# --- consumers ----------------------------------------------------------------------------

@rule(side="consumer", source="array-api", where="from_dlpack: 'consumers ... must pass max_version'")
def max_version_passed(c):
    """from_dlpack calls __dlpack__(max_version=(1, m)) to ask for a versioned capsule"""
    return judged(c, lambda f: import_asked(c, f, {}, shape=(3,), dtype=F64, fill=f64(V123)), asks_max_version,
                  asks_producer=True, control=None)


@breaks(max_version_passed, shows="no max_version >= (1, 0)")
class AsksWithoutMaxVersion(Importer):
    """Calls __dlpack__ without max_version: legacy capsules only."""

    def ask(self, asked, kwargs):
        kwargs.pop("max_version", None)
        return super().ask(asked, kwargs)


@rule(side="consumer", source="python", where="Python spec: fallback for pre-1.0 producers")
def legacy_fallback(c):
    """a producer rejecting max_version (TypeError) is asked again without it"""
    return judged(c, lambda f: import_asked(c, f, {}, legacy_only=True, shape=(3,), dtype=F64, fill=f64(V123)),
                  falls_back_to_legacy, want=V123, asks_producer=True)


@breaks(legacy_fallback, shows="no call without max_version after the TypeError")
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


@rule(side="consumer", source="python",
      where="Python spec: __dlpack__ max_version (a producer may return a capsule of an older version)")
def legacy_answer(c):
    """a legacy 'dltensor' capsule answering a max_version request (from a producer without DLPack 1.x) is imported"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, versioned=False, fill=f64(V123)),
                  accepts, want=V123, needs_versioned=True)


@breaks(legacy_answer, shows="refused")
class RefusesLegacyAnswer(Importer):
    """Refuses a legacy capsule when it asked for max_version."""

    def edit(self, capsule, info, kwargs):
        if "max_version" in kwargs and capsule_name(capsule) == NAME_LEGACY:
            raise BufferError("asked for a versioned capsule, got a legacy one")
        return capsule


@rule(side="consumer", source="header", where="DLPackVersion: minor changes keep the ABI")
def minor_version_newer(c):
    """a capsule of version 1.99 (newer minor) is usable or refused cleanly"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, version=(1, 99), fill=f64(V123),
                                           versioned=True),
                  accepts_or_refuses, want=V123, needs_versioned=True)


@breaks(minor_version_newer, shows="deleter ran 0 times, expected 1")
class LeaksNewerMinorRefusal(Importer):
    """Refuses a minor version newer than its own after taking the capsule: its deleter never runs."""

    def edit(self, capsule, info, kwargs):
        if info is not None and info["versioned"] and info["version"][0] == 1 and \
                info["version"][1] > DLPACK_VERSION[1]:
            take_without_release(capsule)
            raise BufferError(f"DLPack {info['version']} is newer than this consumer")
        return capsule
