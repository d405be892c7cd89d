"""Producer checks: what any ``__dlpack__`` / ``__dlpack_device__`` must do.

A producer is described by a :class:`Producer`: a factory of arrays and,
optionally, the library's own reading of values, views, a scalar and objects
that cannot be exported. Capsules are read with
:func:`dlpack_ref.testing.read_capsule` and consumed with dlpack-ref, so the
checks rely on nothing but DLPack itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import gc
import sys
from typing import Callable

import dlpack_ref
from dlpack_ref import DLPACK_VERSION as V13, DeviceType
from dlpack_ref._dtypes import DTYPES
from dlpack_ref.testing import (
    ALLOCATOR_T, DELETER_T, FLAG_IS_COPIED as IS_COPIED, FLAG_READ_ONLY as READ_ONLY, FROM_PY_T, NAME_LEGACY,
    NAME_VERSIONED, SET_ERROR_T, STREAM_T, TO_PY_T, VIEW_T, DLManagedTensor, DLManagedTensorVersioned,
    DLPackExchangeAPI, DLTensor, c_api, capsule_name, exchange_api_of, read_capsule,
)

from .model import (
    CheckFailed, NotSupported, Producer, Result, Rule, RuleTable, ask, data_pointer, dlpack_values, exc_name,
    export_any, first_element, flag_set, keywords_taken, same_values, short,
)

_DEVICE_TYPES = frozenset(int(m) for m in DeviceType)
# A device no CPU library can export to: kDLOpenCL.
UNSUPPORTED_DEVICE = (4, 0)


_TABLE = RuleTable()
CHECKS: list[tuple[Rule, Callable[[Producer], str]]] = _TABLE.checks
RULES: dict[str, Rule] = _TABLE.rules
_check = _TABLE.rule


# --- helpers -------------------------------------------------------------------

def _export(x, **kwargs):
    return x.__dlpack__(**kwargs)


def _must_succeed(what: str, fn):
    try:
        return fn()
    except NotSupported:
        raise
    except Exception as e:
        raise CheckFailed(f"{what} raised", e) from e


def _table_call(what: str, fn) -> None:
    """A call into an exchange table that must work: an exception it sets
    (ctypes raises it) or a nonzero status without one fails the check."""
    status = _must_succeed(what, fn)
    if status != 0:
        raise CheckFailed(f"{what} returned {status} without setting an exception")


def _read_export(what: str, fn) -> dict:
    """The fields of the capsule ``fn`` exports; CheckFailed naming ``what``
    when it raises or returns something that is no DLPack capsule."""
    capsule = _must_succeed(what, fn)
    try:
        return read_capsule(capsule)
    except (TypeError, ValueError) as e:
        raise CheckFailed(f"{what} returned {short(repr(capsule), 80)}, not a DLPack capsule", e) from e


def _device_of(x) -> tuple:
    """``x.__dlpack_device__()``, which must answer for an array that exports."""
    return _must_succeed("__dlpack_device__()", x.__dlpack_device__)


def _plain_export(x) -> dict:
    """The fields of the plain export of an array the check goes on with."""
    return _read_export("the plain export __dlpack__()", lambda: export_any(x))


def _values_read(x):
    """The values of ``x`` as dlpack-ref imports them: the check's reading
    of the library's export, which must work for a valid array."""
    return _must_succeed("dlpack_ref.from_dlpack of the export", lambda: dlpack_values(x))


def _refused_with_buffererror(what: str, fn) -> str:
    try:
        capsule = fn()
    except NotSupported:
        raise
    except BufferError as e:
        return f"{what}: BufferError ({short(e, 120)})"
    except Exception as e:
        raise CheckFailed(f"{what} raised {exc_name(e)}, not BufferError", e) from e
    del capsule
    raise CheckFailed(f"{what} was accepted; it must raise BufferError")


# --- versions and capsule layout ------------------------------------------------

@_check("producer.legacy_without_max_version",
        "__dlpack__() without max_version returns a legacy capsule named 'dltensor'",
        "array-api", "array.__dlpack__, max_version")
def _legacy_without_max_version(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    cap = _must_succeed("__dlpack__()", lambda: _export(x))
    name = capsule_name(cap)
    if name != NAME_LEGACY:
        raise CheckFailed(f"capsule named {name!r}, expected b'dltensor'")
    return "capsule 'dltensor'"


@_check("producer.versioned_capsule",
        "__dlpack__(max_version=(1, m)) returns a 'dltensor_versioned' capsule with version.major 1 "
        "(a producer may answer with another version; a legacy answer means DLPack 1.x is not implemented)",
        "python", "Python spec, __dlpack__ max_version; header: DLManagedTensorVersioned")
def _versioned_capsule(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    seen = []
    legacy = []
    for mv in ((1, 0), (1, 3)):
        info = _read_export(f"__dlpack__(max_version={mv})", lambda: ask(x, max_version=mv))
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


@_check("producer.newer_major_requested",
        "__dlpack__(max_version=(2, 0)) still returns a capsule the producer supports (major 1 or legacy), "
        "never an error: the consumer checks the version it gets",
        "array-api", "array.__dlpack__, max_version")
def _newer_major(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    info = _read_export("__dlpack__(max_version=(2, 0))", lambda: ask(x, max_version=(2, 0)))
    if info["versioned"] and info["version"][0] > 2:
        raise CheckFailed(f"stamped {info['version']}, newer than asked")
    return f"capsule {info['name'].decode()} version {info['version']}"


@_check("producer.strides_not_null",
        "strides are not NULL when ndim > 0 in capsules of version >= 1.2, and count elements",
        "header", "DLTensor.strides (required non-NULL since DLPack 1.2)")
def _strides_not_null(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    info = _plain_export(x)
    new = info["versioned"] and info["version"] >= (1, 2)
    if info["strides"] is None:
        if new:
            raise CheckFailed(f"NULL strides in a version {info['version']} capsule")
        return f"NULL strides, allowed in a {'legacy' if not info['versioned'] else info['version']} capsule"
    if info["strides"] != (3, 1):
        raise CheckFailed(f"strides {info['strides']} for a C-contiguous (2, 3) array; expected (3, 1) elements")
    return f"strides {info['strides']} (capsule version {info['version'] or 'legacy'})"


@_check("producer.zero_dim", "a 0-d array exports with ndim 0 and its value",
        "array-api", "from_dlpack / __dlpack__ (any array, including 0-d)")
def _zero_dim(p: Producer) -> str:
    x = p.make("float64", ())
    info = _read_export("__dlpack__ of a 0-d array", lambda: export_any(x))
    if info["ndim"] != 0:
        raise CheckFailed(f"ndim {info['ndim']} for a 0-d array")
    got, want = _values_read(x), p.values(x)
    if not same_values(got, want):
        raise CheckFailed(f"exported value {got!r}, the library reports {want!r}")
    return f"ndim 0, value {got!r}"


@_check("producer.size_zero", "a size-0 array (shape (0, 3)) exports with its shape",
        "array-api", "from_dlpack / __dlpack__ (any array, including empty)")
def _size_zero(p: Producer) -> str:
    x = p.make("float32", (0, 3))
    info = _read_export("__dlpack__ of a (0, 3) array", lambda: export_any(x))
    if info["shape"] != (0, 3):
        raise CheckFailed(f"shape {info['shape']}, expected (0, 3)")
    a = _must_succeed("dlpack_ref.from_dlpack of it", lambda: dlpack_ref.from_dlpack(x))
    return f"shape {a.shape}, data {'NULL' if not info['data'] else 'non-NULL'}"


# --- read-only data ---------------------------------------------------------------

@_check("producer.read_only_flag", "read-only data is exported with DLPACK_FLAG_BITMASK_READ_ONLY",
        "header", "DLPACK_FLAG_BITMASK_READ_ONLY; DLManagedTensorVersioned.flags")
def _read_only_flag(p: Producer) -> str:
    x = p.make("float64", (2, 3), readonly=True)
    if "max_version" not in keywords_taken(x):
        raise NotSupported("a pre-1.0 producer (__dlpack__ takes no max_version): only legacy capsules, "
                           "which cannot carry READ_ONLY")
    info = _read_export("__dlpack__(max_version=(1, 3))", lambda: ask(x))
    return flag_set(info, READ_ONLY, "only legacy capsules, which cannot carry READ_ONLY",
                     "READ_ONLY not set for read-only data")


@_check("producer.read_only_legacy_refused",
        "read-only data is not exported as a legacy capsule (which cannot say read-only): BufferError",
        "python", "Python spec: legacy DLManagedTensor has no flags; DLPack 1.0 added READ_ONLY for this")
def _read_only_legacy(p: Producer) -> str:
    x = p.make("float64", (2, 3), readonly=True)
    return _refused_with_buffererror("__dlpack__() of read-only data", lambda: _export(x))


# --- copies and devices -----------------------------------------------------------

def _nbytes(info: dict) -> int:
    code, bits, lanes = info["dtype"]
    n = 1
    for extent in info["shape"] or ():
        n *= extent
    return (n * bits * lanes + 7) // 8


def _source_bytes(x, n: int) -> bytes:
    return ctypes.string_at(data_pointer(x), n)


def _copy_request(x):
    """``(capsule, None)`` of ``__dlpack__(copy=True)``, or ``(None, the
    exception)`` it was refused with (NotSupported when the producer takes
    no copy keyword)."""
    try:
        return ask(x, copy=True), None
    except NotSupported:
        raise
    except Exception as e:
        return None, e


@_check("producer.copy_true_copies",
        "copy=True always copies: another data pointer, and writes to the copy leave the array unchanged",
        "array-api", "array.__dlpack__, copy")
def _copy_true(p: Producer) -> str:
    x = p.make("float64", (2, 3))
    plain = _plain_export(x)
    base, n = first_element(plain), _nbytes(plain)
    before = _source_bytes(x, n)
    cap, refusal = _copy_request(x)
    if isinstance(refusal, BufferError):
        raise NotSupported("copy=True is refused with BufferError (the standard says it must copy)", refusal)
    if refusal is not None:
        raise CheckFailed(f"copy=True refused with {exc_name(refusal)}: it must copy (or raise BufferError "
                          "when it cannot)", refusal)
    info = _read_export("__dlpack__(copy=True)", lambda: cap)
    ptr = first_element(info)
    if ptr == base:
        raise CheckFailed(f"copy=True exported the same data pointer {ptr:#x}")
    copied = _must_succeed("dlpack_ref.from_dlpack of the copy", lambda: dlpack_ref.from_dlpack(cap))
    if ctypes.string_at(copied.data_ptr, n) != before:
        raise CheckFailed("the copy's bytes differ from the array's when __dlpack__ returns")
    ctypes.memset(copied.data_ptr, 0x5A, n)
    if _source_bytes(x, n) != before:
        raise CheckFailed("writing to the copy changed the array")
    return f"pointer {ptr:#x} != {base:#x}; writes to the copy do not reach the array"


@_check("producer.copy_true_flag", "a copy made for copy=True carries DLPACK_FLAG_BITMASK_IS_COPIED",
        "header", "DLPACK_FLAG_BITMASK_IS_COPIED")
def _copy_true_flag(p: Producer) -> str:
    x = p.make("float64", (2, 3))
    cap, refusal = _copy_request(x)
    if refusal is not None:
        raise NotSupported(f"copy=True is refused with {exc_name(refusal)}, so there is no copy to flag "
                           "(producer.copy_true_copies judges the refusal)", refusal)
    return flag_set(_read_export("__dlpack__(copy=True)", lambda: cap), IS_COPIED,
                    "legacy capsule: no flags to set", "IS_COPIED not set on a copy")


@_check("producer.copy_false_no_copy",
        "copy=False never copies: same data pointer as a plain export, IS_COPIED not set",
        "array-api", "array.__dlpack__, copy")
def _copy_false(p: Producer) -> str:
    x = p.make("float64", (2, 3))
    base = first_element(_plain_export(x))
    info = _export_in_place(x, "copy=False of memory exportable in place", copy=False)
    if first_element(info) != base:
        raise CheckFailed(f"copy=False exported {first_element(info):#x}, the array is at {base:#x}")
    if info["versioned"] and info["flags"] & IS_COPIED:
        raise CheckFailed("IS_COPIED set with copy=False")
    return f"same pointer {base:#x}"


def _export_in_place(x, what: str, **kwargs) -> dict:
    """The fields of ``ask(x, **kwargs)``, an export that must succeed
    (CheckFailed "``what`` raised"; NotSupported from :func:`ask` for a
    keyword the producer does not take)."""
    return _read_export(what, lambda: ask(x, **kwargs))


def _ints(device) -> tuple:
    """A device pair with each part as an int where it is one (repr otherwise)."""
    return tuple(int(v) if isinstance(v, int) else v for v in device)


@_check("producer.dl_device_own",
        "dl_device equal to __dlpack_device__() is accepted and exports in place",
        "array-api", "array.__dlpack__, dl_device")
def _dl_device_own(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    dev = _device_of(x)
    base = first_element(_plain_export(x))
    info = _export_in_place(x, f"dl_device={_ints(dev)} (its own __dlpack_device__())", dl_device=dev)
    if info["device"] != _ints(dev):
        raise CheckFailed(f"exported on {info['device']}, asked for {_ints(dev)}")
    if first_element(info) != base:
        raise CheckFailed("dl_device equal to the array's own device made a copy")
    return f"dl_device={info['device']} in place"


@_check("producer.dl_device_unsupported",
        "a dl_device the producer cannot handle (kDLOpenCL) is refused with BufferError",
        "array-api", "array.__dlpack__, dl_device: 'must raise BufferError'")
def _dl_device_unsupported(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    return _refused_with_buffererror(f"dl_device={UNSUPPORTED_DEVICE}",
                                     lambda: ask(x, dl_device=UNSUPPORTED_DEVICE))


@_check("producer.stream_cpu", "for CPU data only stream=None is accepted (stream=1 and -1 are refused)",
        "array-api", "array.__dlpack__, stream: 'On CPU and other device types without streams, only None is accepted'")
def _stream_cpu(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    if _ints(_device_of(x))[0] != 1:
        raise NotSupported("the array is not on the CPU")
    _must_succeed("stream=None", lambda: ask(x, stream=None))
    notes = []
    for stream in (1, -1):
        try:
            ask(x, stream=stream)
        except AssertionError as e:
            raise CheckFailed(f"stream={stream} refused by an assert (gone under python -O)", e) from e
        except Exception as e:
            notes.append(f"stream={stream}: {exc_name(e)}")
            continue
        raise CheckFailed(f"stream={stream} was accepted for CPU data")
    return "; ".join(notes)


@_check("producer.buffererror_for_unexportable",
        "what cannot be exported raises BufferError from __dlpack__ (and __dlpack_device__ does not raise "
        "another type)", "array-api", "from_dlpack / array.__dlpack__, Raises: BufferError")
def _unexportable(p: Producer) -> str:
    if p.unexportable is None:
        raise NotSupported("no unexportable objects given for this library")
    cases = p.unexportable()
    if not cases:
        raise NotSupported("the library has no arrays that cannot be exported")
    notes, bad = [], []
    for label, obj in cases.items():
        try:
            obj.__dlpack_device__()
        except BufferError:
            pass
        except Exception as e:
            bad.append(f"{label}: __dlpack_device__ raised {exc_name(e)}: {short(e, 100)}")
        try:
            export_any(obj)
        except BufferError as e:
            notes.append(f"{label}: BufferError")
            continue
        except Exception as e:
            bad.append(f"{label}: __dlpack__ raised {exc_name(e)}: {short(e, 100)}")
            continue
        bad.append(f"{label}: exported")
    if bad:
        raise CheckFailed("; ".join(bad))
    return "; ".join(notes)


@_check("producer.dlpack_device_type",
        "__dlpack_device__() returns a 2-tuple (device_type, device_id): device_type an Enum member with "
        "the DLDeviceType value, device_id an int", "array-api", "array.__dlpack_device__, Returns")
def _dlpack_device_type(p: Producer) -> str:
    x = p.make("float32", (2, 3))
    dev = _must_succeed("__dlpack_device__()", x.__dlpack_device__)
    if not isinstance(dev, tuple) or len(dev) != 2:
        raise CheckFailed(f"returned {dev!r} ({type(dev).__name__}), not a 2-tuple")
    kind, ident = dev
    if not isinstance(ident, int) or isinstance(ident, bool):
        raise CheckFailed(f"device_id {ident!r} is a {type(ident).__name__}, not an int")
    if not isinstance(kind, enum.Enum):
        raise CheckFailed(f"device_type {kind!r} is a plain {type(kind).__name__}, not an Enum member "
                          "(the standard types the result Tuple[Enum, int])")
    if int(kind) not in _DEVICE_TYPES:
        raise CheckFailed(f"device_type {kind!r} is not a DLDeviceType value (dlpack_ref.DeviceType)")
    return f"({type(kind).__name__}.{kind.name}={int(kind)}, {ident})"


@_check("producer.scalar", "a scalar of the library (if it has a scalar type) exports as a 0-d tensor",
        "array-api", "seed 000: scalars; from_dlpack accepts any object with __dlpack__")
def _scalar(p: Producer) -> str:
    s = p.scalar() if p.scalar is not None else None
    if s is None:
        raise NotSupported("the library has no scalar type separate from 0-d arrays")
    if not hasattr(s, "__dlpack__"):
        raise NotSupported(f"{type(s).__module__}.{type(s).__name__} scalars have no __dlpack__")
    info = _read_export("__dlpack__ of a scalar", lambda: export_any(s))
    if info["ndim"] != 0:
        raise CheckFailed(f"scalar exported with ndim {info['ndim']}")
    return f"0-d, value {dlpack_values(s)!r}"


# --- dtypes ------------------------------------------------------------------------

def _dtype_group(names: list[str]):
    def body(p: Producer) -> str:
        done, refused, bad = [], [], []
        for name in names:
            try:
                x = p.make(name, (4,))
            except NotSupported:
                continue
            want = DTYPES[name].__dlpack_data_type__()
            try:
                info = read_capsule(export_any(x))
            except BufferError:
                refused.append(name)
                continue
            except Exception as e:
                bad.append(f"{name}: export raised {exc_name(e)}: {short(e, 100)}")
                continue
            if info["dtype"] != want:
                bad.append(f"{name}: exported (code, bits, lanes)={info['dtype']}, expected {want}")
            else:
                done.append(f"{name}={want}")
        if bad:
            raise CheckFailed("; ".join(bad + [f"ok: {', '.join(done)}"] if done else bad))
        if not done:
            extra = f" (refused with BufferError: {', '.join(refused)})" if refused else ""
            raise NotSupported(f"none of {', '.join(names)} can be made and exported{extra}")
        return ", ".join(done) + (f"; refused with BufferError: {', '.join(refused)}" if refused else "")
    return body


_FLOAT8 = [n for n in DTYPES if n.startswith("float8")]
#: rule id -> the dtype names its check makes and exports.
DTYPE_GROUPS: dict[str, list[str]] = {}
for _group, _names, _where in [
        ("bool", ["bool"], "kDLBool (bits 8)"),
        ("complex", ["complex64", "complex128"], "kDLComplex"),
        ("bfloat16", ["bfloat16"], "kDLBfloat (bits 16)"),
        ("float8", _FLOAT8, "kDLFloat8_* (DLPack 1.1)"),
        ("float4", ["float4_e2m1fn", "float4_e2m1fn_x2"], "kDLFloat4_e2m1fn: bits 4, lanes 1 or 2 (x2)")]:
    _check(f"producer.dtype_{_group}",
           f"{_group} arrays export with the DLPack type code ({', '.join(_names)})",
           "header", f"DLDataTypeCode, {_where}")(_dtype_group(_names))
    DTYPE_GROUPS[f"producer.dtype_{_group}"] = _names


# --- ownership ------------------------------------------------------------------------

_SPIES: list = []  # ctypes callbacks must outlive every call through them


class _DeleterSpy:
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


def _references(box: list) -> int:
    """References to box[0], counted alike on every CPython: a subscript is
    always a new reference, while sys.getrefcount(local) counts one less on
    3.14 wherever the compiler loads the local borrowed."""
    return sys.getrefcount(box[0])


@_check("producer.deleter_once",
        "the deleter runs exactly once: when the consumer is done, or from the capsule destructor of an "
        "unconsumed capsule, never from the destructor of a consumed (renamed) one",
        "python", "Python spec: PyCapsule destructor and 'used_dltensor' renaming; header: deleter")
def _deleter_once(p: Producer) -> str:
    x = p.make("float64", (2, 3))
    box = [x]
    notes = []
    counted = False
    versioned = "max_version" in keywords_taken(x)
    for kind, kwargs in (("versioned", {"max_version": V13}), ("legacy", {})):
        if kind == "versioned" and not versioned:
            notes.append("versioned: not available (a pre-1.0 producer)")
            continue
        try:
            refs = _references(box)
            cap = x.__dlpack__(**kwargs)
        except Exception as e:
            notes.append(f"{kind}: not exported ({exc_name(e)})")
            continue
        if kind == "versioned" and capsule_name(cap) != NAME_VERSIONED:
            notes.append("versioned: not available")
            continue
        spy = _DeleterSpy(cap)
        if not spy.original:
            notes.append(f"{kind}: NULL deleter (allowed)")
            continue
        counted = True
        a = _must_succeed(f"dlpack_ref.from_dlpack of the {kind} capsule", lambda cap=cap: dlpack_ref.from_dlpack(cap))
        if spy.calls:
            raise CheckFailed(f"{kind}: deleter ran {spy.calls} time(s) while the consumer still used the data")
        del a
        gc.collect()
        del cap
        gc.collect()
        if spy.calls != 1:
            raise CheckFailed(f"{kind}, consumed: deleter ran {spy.calls} times, expected once")
        cap = x.__dlpack__(**kwargs)
        spy = _DeleterSpy(cap)
        del cap
        gc.collect()
        if spy.calls > 1:
            raise CheckFailed(f"{kind}, dropped unconsumed: deleter ran {spy.calls} times, expected once")
        # 0 here: the capsule destructor frees the tensor without going
        # through its deleter field, which cannot be counted from outside.
        dropped = "once (dropped)" if spy.calls else "dropped: freed without calling DLManagedTensor.deleter"
        leaked = _references(box) - refs
        if leaked > 0:
            raise CheckFailed(f"{kind}: the array holds {leaked} more reference(s) after the exports ended")
        notes.append(f"{kind}: once (consumed), {dropped}")
    if not counted:
        raise NotSupported("no capsule with a deleter to count: " + "; ".join(notes))
    return "; ".join(notes)


# --- views --------------------------------------------------------------------------------

@_check("producer.view_values",
        "views (negated, conjugated, offset, reversed, ...) export the values the library itself reports, "
        "or are refused with BufferError", "array-api", "array.__dlpack__ (the exported tensor is the array)")
def _view_values(p: Producer) -> str:
    if p.views is None:
        x = p.make("float64", (6,))
        try:
            cases = {"offset x[1:]": x[1:]}
        except Exception as e:
            raise NotSupported("no views given, and x[1:] does not make one", e) from e
    else:
        cases = p.views()
    if not cases:
        raise NotSupported("the library has no views to export")
    notes, bad = [], []
    for label, v in cases.items():
        try:
            got = dlpack_values(export_any(v))
        except BufferError as e:
            notes.append(f"{label}: refused with BufferError ({short(e, 80)})")
            continue
        except Exception as e:
            bad.append(f"{label}: export raised {exc_name(e)}: {short(e, 100)}")
            continue
        want = p.values(v)
        if not same_values(got, want):
            bad.append(f"{label}: exported {got!r}, the library reports {want!r}")
        else:
            notes.append(f"{label}: equal")
    if bad:
        raise CheckFailed("; ".join(bad + notes))
    return "; ".join(notes)


# --- the C exchange API ------------------------------------------------------------------------

_decref = c_api("Py_DecRef", None, ctypes.c_void_p)
# Called through PYFUNCTYPE, which raises an exception a C call left set (the
# allocator is called like C; ctypes may also raise SystemError for it itself).
_raise_pending = c_api("PyErr_Occurred", ctypes.c_void_p)
_new_capsule = c_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)


def _call_deleter(address: int) -> None:
    m = DLManagedTensorVersioned.from_address(address)
    if m.deleter:
        DELETER_T(m.deleter)(address)


@contextlib.contextmanager
def _freed_on_failure(out: ctypes.c_void_p):
    """A table call that fails may still have handed out a tensor through
    ``out`` (the contract leaves it to the caller): its deleter runs once,
    here, so that a failing table is reported without a leak."""
    try:
        yield
    except BaseException:
        if out.value:
            _call_deleter(out.value)
            out.value = None
        raise


def _table_of(x) -> DLPackExchangeAPI:
    try:
        api = exchange_api_of(type(x))
    except TypeError as e:
        raise CheckFailed(str(e)) from e
    if api is None:
        raise NotSupported(f"{type(x).__name__} has no __dlpack_c_exchange_api__")
    version = (api.header.version.major, api.header.version.minor)
    if version[0] != 1:
        raise NotSupported(f"table version {version}; this checker reads major 1")
    return api


@_check("producer.exchange_api",
        "type(x).__dlpack_c_exchange_api__, when present: a 'dlpack_exchange_api' capsule, version major 1, "
        "every required function non-NULL, and a round trip through it keeps the data pointer and values",
        "exchange-api", "DLPackExchangeAPI, DLPackExchangeAPIHeader")
def _exchange_api(p: Producer) -> str:
    x = p.make("float64", (2, 3))
    api = _table_of(x)
    version = (api.header.version.major, api.header.version.minor)
    missing = [f for f, _ in DLPackExchangeAPI._fields_[1:]
               if f != "dltensor_from_py_object_no_sync" and not getattr(api, f)]
    if missing:
        raise CheckFailed(f"NULL function pointers in a version {version} table: {', '.join(missing)}")
    want_ptr, want_values = data_pointer(x), dlpack_values(export_any(x))
    out = ctypes.c_void_p()
    with _freed_on_failure(out):
        _table_call("managed_tensor_from_py_object_no_sync",
                    lambda: FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(x), ctypes.byref(out)))
    m = DLManagedTensorVersioned.from_address(out.value)
    t = m.dl_tensor
    got = (m.version.major, t.data + t.byte_offset, t.ndim)
    if got != (1, want_ptr, 2):
        _call_deleter(out.value)
        raise CheckFailed(f"from_py_object gave (major, data, ndim)={got}, expected (1, {want_ptr:#x}, 2)")
    obj = ctypes.c_void_p()
    _table_call("managed_tensor_to_py_object_no_sync",
                  lambda: TO_PY_T(api.managed_tensor_to_py_object_no_sync)(out.value, ctypes.byref(obj)))
    back = ctypes.cast(obj, ctypes.py_object).value
    _decref(obj.value)
    if data_pointer(back) != want_ptr or not same_values(dlpack_values(export_any(back)), want_values):
        raise CheckFailed(f"to_py_object gave a {type(back).__name__} with other data or values")
    notes = [f"version {version}", f"round trip to {type(back).__name__} in place"]
    del back
    if api.dltensor_from_py_object_no_sync:
        view = DLTensor()
        _table_call("dltensor_from_py_object_no_sync",
                      lambda: VIEW_T(api.dltensor_from_py_object_no_sync)(id(x), ctypes.byref(view)))
        if view.data + view.byte_offset != want_ptr:
            raise CheckFailed("dltensor_from_py_object_no_sync: another data pointer")
        notes.append("DLTensor view in place")
    stream = ctypes.c_void_p(1)
    _table_call("current_work_stream(kDLCPU, 0)",
                  lambda: STREAM_T(api.current_work_stream)(1, 0, ctypes.byref(stream)))
    if stream.value == 1:
        raise CheckFailed("current_work_stream(kDLCPU, 0) returned without storing a stream: "
                          "*out_current_stream still holds the 0x1 the checker put there, expected NULL")
    if stream.value:
        raise CheckFailed(f"current_work_stream(kDLCPU, 0) gave {stream.value:#x}, expected NULL")
    notes.append(_check_allocator(api))
    return "; ".join(notes)


def _check_allocator(api: DLPackExchangeAPI) -> str:
    errors = []
    shape = (ctypes.c_int64 * 2)(2, 3)
    proto = DLTensor()
    proto.device.device_type, proto.ndim, proto.shape = 1, 2, ctypes.addressof(shape)
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
    alloc = ctypes.c_void_p()
    set_error = SET_ERROR_T(lambda ctx, kind, msg: errors.append((kind, msg)))
    try:
        rc = ALLOCATOR_T(api.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(alloc), None, set_error)
        _raise_pending()
    except Exception as e:
        # ctypes' SystemError names the stray exception as its cause
        raise CheckFailed("managed_tensor_allocator (required) set a Python exception instead of "
                          "working or calling SetError", e.__cause__ or e) from e
    if rc != 0 or not alloc.value:
        raise CheckFailed(f"managed_tensor_allocator failed (rc={rc}, errors={errors})")
    m = DLManagedTensorVersioned.from_address(alloc.value)
    got = (m.dl_tensor.ndim, tuple(ctypes.cast(m.dl_tensor.shape, ctypes.POINTER(ctypes.c_int64))[:2]),
           (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits))
    _call_deleter(alloc.value)
    if got != (2, (2, 3), (2, 32)):
        raise CheckFailed(f"managed_tensor_allocator made (ndim, shape, dtype)={got}")
    return "allocator ok"


def _outcome(export) -> tuple[str, object]:
    """("values", the values dlpack-ref reads) or ("refused", the exception's type name)."""
    try:
        capsule = export()
    except Exception as e:
        return "refused", exc_name(e)
    try:
        return "values", dlpack_values(capsule)
    except Exception as e:
        return "unreadable", f"{exc_name(e)}: {short(e, 80)}"


def _export_through_table(api: DLPackExchangeAPI, x):
    """What managed_tensor_from_py_object_no_sync gives for x, in a capsule
    that dlpack-ref consumes (its deleter runs when the import ends)."""
    out = ctypes.c_void_p()
    with _freed_on_failure(out):
        status = FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(x), ctypes.byref(out))
        if status != 0 and out.value:
            raise SystemError(f"managed_tensor_from_py_object_no_sync returned {status} without setting an "
                              "exception, and handed out a tensor")
    if status != 0 or not out.value:
        # Not the header's failure (that sets an exception, which ctypes raised).
        raise SystemError(f"managed_tensor_from_py_object_no_sync returned {status} and tensor "
                          f"{out.value or 0:#x} without setting an exception")
    return _new_capsule(out.value, NAME_VERSIONED, None)


@_check("producer.exchange_api_matches_dlpack",
        "for every array and view, the exchange-API table's managed_tensor_from_py_object_no_sync and "
        "__dlpack__ give the same values or the same refusal (the table is a fast path, not another meaning)",
        "exchange-api", "DLPackExchangeAPI: 'exchanges tensors ... without going through __dlpack__'")
def _exchange_api_matches_dlpack(p: Producer) -> str:
    cases = {"float64 (2, 3)": p.make("float64", (2, 3))}
    x = cases["float64 (2, 3)"]
    _table_of(x)
    cases.update(p.views() if p.views is not None else {})
    cases.update(p.unexportable() if p.unexportable is not None else {})
    notes, bad = [], []
    for label, v in cases.items():
        if type(v) is not type(x) and exchange_api_of(type(v)) is None:
            continue
        plain = _outcome(lambda: export_any(v))
        table = _outcome(lambda: _export_through_table(exchange_api_of(type(v)), v))
        if plain == table:
            notes.append(f"{label}: same {plain[0]}")
        else:
            bad.append(f"{label}: __dlpack__ {plain[0]} {plain[1]!r}, the table {table[0]} {table[1]!r}")
    if bad:
        raise CheckFailed("; ".join(bad))
    return "; ".join(notes)


# --- running ---------------------------------------------------------------------------------------

def check_ids() -> list[str]:
    return [rule.id for rule, _ in CHECKS]


def run_producer_check(p: Producer, check_id: str) -> Result:
    return _TABLE.run_one(p, check_id, p.name)


def check_producer(p: Producer, only: list[str] | None = None) -> list[Result]:
    """Run every producer check (or those named in ``only``) in this process."""
    return _TABLE.run_all(p, p.name, only)
