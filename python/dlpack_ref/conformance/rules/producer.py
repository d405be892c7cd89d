"""Producer rules: what any ``__dlpack__`` / ``__dlpack_device__`` must do.

Each check takes a :class:`~dlpack_ref.harness.subject.Producer`. Capsules
are read with :func:`dlpack_ref.testing.reader.read_capsule` and consumed
with :class:`~dlpack_ref.testing.reader.Consumed` (ctypes, never dlpack-ref's
core), so that the checks rely on nothing but DLPack itself, and each runs
as written with the library alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import gc
import math
import sys

from dlpack_ref import DeviceType
from dlpack_ref._dtypes import DTYPES
from dlpack_ref.harness.observe import exc_name, same_values, short
from dlpack_ref.harness.subject import NotSupported, ask, data_pointer, export_any, first_element, keywords_taken
from dlpack_ref.testing.abi import (
    ALLOCATOR_T, DELETER_T, DLPACK_VERSION, FLAG_IS_COPIED, FLAG_READ_ONLY, FROM_PY_T, NAME_LEGACY,
    NAME_VERSIONED, SET_ERROR_T, STREAM_T, TO_PY_T, VIEW_T, DLManagedTensor, DLManagedTensorVersioned,
    DLPackExchangeAPI, DLTensor, PyCapsule_New, PyErr_Occurred, Py_DecRef, exchange_api_of,
)
from dlpack_ref.testing.reader import Consumed, capsule_name, read_capsule, read_values

from .table import rule
from .support import (
    CheckFailed, device_value, flag_set, must_succeed, plain_export, read_export, refused_streams,
    refused_with_buffererror,
)

#: The DLDeviceType values (dlpack_ref.DeviceType).
DEVICE_TYPES = frozenset(int(m) for m in DeviceType)
#: dtype name -> its (code, bits, lanes), from dlpack-ref's dtype table.
DTYPE_TRIPLES = {name: dt.__dlpack_data_type__() for name, dt in DTYPES.items()}
# A device no CPU library can export to: kDLOpenCL.
UNSUPPORTED_DEVICE = (4, 0)


def shaped(p, dtype: str, shape: tuple, readonly: bool = False) -> tuple:
    """``(array, its shape)``: ``p.make(dtype, shape)``, or, for a library
    that cannot hold that shape (a 1-D-only one), its 1-D flattening. Only
    the rules whose point holds in 1-D ask through this."""
    try:
        return p.make(dtype, shape, readonly), shape
    except NotSupported as e:
        if len(shape) < 2:
            raise
        flat = (math.prod(shape),)
        try:
            return p.make(dtype, flat, readonly), flat
        except NotSupported:
            raise e from None


def made(p, dtype: str, shape: tuple, readonly: bool = False):
    """The array of :func:`shaped`."""
    return shaped(p, dtype, shape, readonly)[0]


def row_major(shape: tuple) -> tuple:
    """The strides, in elements, of a C-contiguous array of ``shape``."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def readable(what: str, capsule):
    """The values of an exported capsule, read by the checker: a capsule
    without a shape is the library's failure, memory or elements the reader
    does not read are the checker's blindness (not supported), never the
    library's."""
    info = read_capsule(capsule)
    if info["ndim"] and info["shape"] is None:
        raise CheckFailed(f"{what}: NULL shape with ndim {info['ndim']}")
    try:
        return read_values(capsule)
    except Exception as e:
        raise NotSupported(f"the checker cannot read {what} ({exc_name(e)}: {short(e, 100)})", e) from e


def nbytes(info: dict) -> int:
    """The bytes of the elements of a tensor read by read_capsule."""
    code, bits, lanes = info["dtype"]
    n = 1
    for extent in info["shape"] or ():
        n *= extent
    return (n * bits * lanes + 7) // 8


def beside_plain_export(p, x, what: str, **kwargs) -> tuple[dict, int]:
    """(the fields of ``ask(x, **kwargs)``, the first element of x's plain
    export): two exports of one array, both of which must succeed (the
    plain one held while the other is made)."""
    p.twice(f"comparing {what} with the plain export")
    plain = must_succeed("the plain export __dlpack__()", lambda: export_any(x))
    base = first_element(read_export("the plain export __dlpack__()", lambda: plain))
    return read_export(what, lambda: ask(x, **kwargs)), base


def exported_values(x):
    """The values of ``x``'s plain export (which must work), as the checker reads them."""
    return readable("the values of the export", must_succeed("the plain export __dlpack__()", lambda: export_any(x)))


def values_by_its_own_means(p, x):
    """The library's own reading of x's values; NotSupported when it
    raises (there is then nothing to compare the export with)."""
    try:
        return p.values(x)
    except Exception as e:
        raise NotSupported(f"the library cannot read its own values ({exc_name(e)}: {short(e, 80)})", e) from e


def device_of(x) -> tuple:
    """``x.__dlpack_device__()``, which must answer for an array that exports."""
    return must_succeed("__dlpack_device__()", x.__dlpack_device__)


def device_pair(device) -> tuple:
    """A ``__dlpack_device__`` answer as two numbers where they are numbers."""
    return tuple(device_value(v) for v in device)


# --- versions and capsule layout ------------------------------------------------

@rule("array-api", "array.__dlpack__, max_version")
def legacy_without_max_version(p) -> str:
    """__dlpack__() without max_version returns a legacy capsule named 'dltensor'"""
    x = made(p, "float32", (2, 3))
    cap = must_succeed("__dlpack__()", lambda: x.__dlpack__())
    name = capsule_name(cap)
    if name != NAME_LEGACY:
        raise CheckFailed(f"capsule named {name!r}, expected b'dltensor'")
    return "capsule 'dltensor'"


@rule("python", "Python spec, __dlpack__ max_version; header: DLManagedTensorVersioned")
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


@rule("array-api", "array.__dlpack__, max_version")
def newer_major_requested(p) -> str:
    """__dlpack__(max_version=(2, 0)) still returns a capsule the producer supports (major 1 or legacy), never an
    error: the consumer checks the version it gets"""
    x = made(p, "float32", (2, 3))
    info = read_export("__dlpack__(max_version=(2, 0))", lambda: ask(x, max_version=(2, 0)))
    if info["versioned"] and info["version"][0] > 2:
        raise CheckFailed(f"stamped {info['version']}, newer than asked")
    return f"capsule {info['name'].decode()} version {info['version']}"


@rule("header", "DLTensor.strides (required non-NULL since DLPack 1.2)")
def strides_not_null(p) -> str:
    """strides are not NULL when ndim > 0 in capsules of version >= 1.2, and count elements"""
    x, shape = shaped(p, "float32", (2, 3))
    info = plain_export(x)
    new = info["versioned"] and info["version"] >= (1, 2)
    if info["strides"] is None:
        if new:
            raise CheckFailed(f"NULL strides in a version {info['version']} capsule")
        return f"NULL strides, allowed in a {'legacy' if not info['versioned'] else info['version']} capsule"
    if info["strides"] != row_major(shape):
        raise CheckFailed(f"strides {info['strides']} for a C-contiguous {shape} array; expected "
                          f"{row_major(shape)} elements")
    return f"strides {info['strides']} (capsule version {info['version'] or 'legacy'})"


@rule("array-api", "from_dlpack / __dlpack__ (any array, including 0-d)")
def zero_dim(p) -> str:
    """a 0-d array exports with ndim 0 and its value"""
    x = p.make("float64", ())
    info = read_export("__dlpack__ of a 0-d array", lambda: export_any(x))
    if info["ndim"] != 0:
        raise CheckFailed(f"ndim {info['ndim']} for a 0-d array")
    p.twice("reading the exported value")
    got, want = exported_values(x), values_by_its_own_means(p, x)
    if not same_values(got, want):
        raise CheckFailed(f"exported value {got!r}, the library reports {want!r}")
    return f"ndim 0, value {got!r}"


@rule("array-api", "from_dlpack / __dlpack__ (any array, including empty)")
def size_zero(p) -> str:
    """a size-0 array (shape (0, 3)) exports with its shape"""
    x, shape = shaped(p, "float32", (0, 3))
    cap = must_succeed(f"__dlpack__ of a {shape} array", lambda: export_any(x))
    info = read_export(f"__dlpack__ of a {shape} array", lambda: cap)
    if info["shape"] != shape:
        raise CheckFailed(f"shape {info['shape']}, expected {shape}")
    readable("the export", cap)
    return f"shape {info['shape']}, data {'NULL' if not info['data'] else 'non-NULL'}"


# --- read-only data ---------------------------------------------------------------

@rule("header", "DLPACK_FLAG_BITMASK_READ_ONLY; DLManagedTensorVersioned.flags")
def read_only_flag(p) -> str:
    """read-only data is exported with DLPACK_FLAG_BITMASK_READ_ONLY"""
    x = made(p, "float64", (2, 3), readonly=True)
    if "max_version" not in keywords_taken(x):
        raise NotSupported("a pre-1.0 producer (__dlpack__ takes no max_version): only legacy capsules, "
                           "which cannot carry READ_ONLY")
    info = read_export("__dlpack__(max_version=(1, 3))", lambda: ask(x))
    return flag_set(info, FLAG_READ_ONLY, "only legacy capsules, which cannot carry READ_ONLY",
                    "READ_ONLY not set for read-only data")


@rule("python", "Python spec: legacy DLManagedTensor has no flags; DLPack 1.0 added READ_ONLY for this")
def read_only_legacy_refused(p) -> str:
    """read-only data is not exported as a legacy capsule (which cannot say read-only): BufferError"""
    x = made(p, "float64", (2, 3), readonly=True)
    return refused_with_buffererror("__dlpack__() of read-only data", lambda: x.__dlpack__())


# --- copies and devices -----------------------------------------------------------

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


@rule("array-api", "array.__dlpack__, copy")
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


@rule("header", "DLPACK_FLAG_BITMASK_IS_COPIED")
def copy_true_flag(p) -> str:
    """a copy made for copy=True carries DLPACK_FLAG_BITMASK_IS_COPIED"""
    x = made(p, "float64", (2, 3))
    cap, refusal = copy_request(x)
    if refusal is not None:
        raise NotSupported(f"copy=True is refused with {exc_name(refusal)}, so there is no copy to flag "
                           "(producer.copy_true_copies judges the refusal)", refusal)
    return flag_set(read_export("__dlpack__(copy=True)", lambda: cap), FLAG_IS_COPIED,
                    "legacy capsule: no flags to set", "IS_COPIED not set on a copy")


@rule("array-api", "array.__dlpack__, copy")
def copy_false_no_copy(p) -> str:
    """copy=False never copies: same data pointer as a plain export, IS_COPIED not set"""
    x = made(p, "float64", (2, 3))
    info, base = beside_plain_export(p, x, "copy=False of memory exportable in place", copy=False)
    if first_element(info) != base:
        raise CheckFailed(f"copy=False exported {first_element(info):#x}, the array is at {base:#x}")
    if info["versioned"] and info["flags"] & FLAG_IS_COPIED:
        raise CheckFailed("IS_COPIED set with copy=False")
    return f"same pointer {base:#x}"


@rule("array-api", "array.__dlpack__, dl_device")
def dl_device_own(p) -> str:
    """dl_device equal to __dlpack_device__() is accepted and exports in place"""
    x = made(p, "float32", (2, 3))
    dev = device_of(x)
    info, base = beside_plain_export(p, x, f"dl_device={device_pair(dev)} (its own __dlpack_device__())",
                                     dl_device=dev)
    if info["device"] != device_pair(dev):
        raise CheckFailed(f"exported on {info['device']}, asked for {device_pair(dev)}")
    if first_element(info) != base:
        raise CheckFailed("dl_device equal to the array's own device made a copy")
    return f"dl_device={info['device']} in place"


@rule("array-api", "array.__dlpack__, dl_device: 'must raise BufferError'")
def dl_device_unsupported(p) -> str:
    """a dl_device the producer cannot handle (kDLOpenCL) is refused with BufferError"""
    x = made(p, "float32", (2, 3))
    return refused_with_buffererror(f"dl_device={UNSUPPORTED_DEVICE}", lambda: ask(x, dl_device=UNSUPPORTED_DEVICE))


@rule("array-api", "array.__dlpack__, stream: 'On CPU and other device types without streams, only None is accepted'")
def stream_cpu(p) -> str:
    """for CPU data only stream=None is accepted (stream=1 and -1 are refused)"""
    x = made(p, "float32", (2, 3))
    if device_pair(device_of(x))[0] != 1:
        raise NotSupported("the array is not on the CPU")
    def array():
        return made(p, "float32", (2, 3)) if p.exports_once() else x
    must_succeed("stream=None", lambda: ask(array(), stream=None))
    return "; ".join(refused_streams(lambda stream: ask(array(), stream=stream), (1, -1), "CPU data"))


@rule("array-api", "from_dlpack / array.__dlpack__, Raises: BufferError")
def buffererror_for_unexportable(p) -> str:
    """what cannot be exported raises BufferError from __dlpack__ (and __dlpack_device__ does not raise another type)"""
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
            export_any(obj)  # a SIGABRT or SIGSEGV here is the library's
        except BufferError:
            notes.append(f"{label}: BufferError")
            continue
        except Exception as e:
            bad.append(f"{label}: __dlpack__ raised {exc_name(e)}: {short(e, 100)}")
            continue
        bad.append(f"{label}: exported")
    if bad:
        raise CheckFailed("; ".join(bad))
    return "; ".join(notes)


@rule("array-api", "array.__dlpack_device__, Returns")
def dlpack_device_type(p) -> str:
    """__dlpack_device__() returns a 2-tuple (device_type, device_id): device_type an Enum member with the DLDeviceType
    value, device_id an int"""
    x = made(p, "float32", (2, 3))
    dev = must_succeed("__dlpack_device__()", x.__dlpack_device__)
    if not isinstance(dev, tuple) or len(dev) != 2:
        raise CheckFailed(f"returned {dev!r} ({type(dev).__name__}), not a 2-tuple")
    kind, ident = dev
    if not isinstance(ident, int) or isinstance(ident, bool):
        raise CheckFailed(f"device_id {ident!r} is a {type(ident).__name__}, not an int")
    if not isinstance(kind, enum.Enum):
        raise CheckFailed(f"device_type {kind!r} is a plain {type(kind).__name__}, not an Enum member "
                          "(the standard types the result Tuple[Enum, int])")
    if device_value(kind) not in DEVICE_TYPES:
        raise CheckFailed(f"device_type {kind!r} is not a DLDeviceType value (dlpack_ref.DeviceType)")
    return f"({type(kind).__name__}.{kind.name}={device_value(kind)}, {ident})"


@rule("array-api", "from_dlpack accepts any object with __dlpack__, a library's scalars included")
def scalar(p) -> str:
    """a scalar of the library (if it has a scalar type) exports as a 0-d tensor"""
    s = p.scalar() if p.scalar is not None else None
    if s is None:
        raise NotSupported("the library has no scalar type separate from 0-d arrays")
    if not hasattr(s, "__dlpack__"):
        raise NotSupported(f"{type(s).__module__}.{type(s).__name__} scalars have no __dlpack__")
    cap = must_succeed("__dlpack__ of a scalar", lambda: export_any(s))
    info = read_export("__dlpack__ of a scalar", lambda: cap)
    if info["ndim"] != 0:
        raise CheckFailed(f"scalar exported with ndim {info['ndim']}")
    return f"0-d, value {readable('the value of the export', cap)!r}"


# --- dtypes ------------------------------------------------------------------------

def exported_dtypes(p, names: list[str]) -> str:
    """The check of a dtype rule: each array of ``names`` the library makes
    exports with the DLPack (code, bits, lanes) of that name, or is refused
    with BufferError."""
    done, refused, bad = [], [], []
    for name in names:
        try:
            x = p.make(name, (4,))
        except NotSupported:
            continue
        want = DTYPE_TRIPLES[name]
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


@rule("header", "DLDataTypeCode, kDLBool (bits 8)")
def dtype_bool(p) -> str:
    """bool arrays export with the DLPack type code (bool)"""
    return exported_dtypes(p, ["bool"])


@rule("header", "DLDataTypeCode, kDLComplex; kDLBcomplex (bits 32)")
def dtype_complex(p) -> str:
    """complex arrays export with the DLPack type code (complex64, complex128; bcomplex32, two bfloat16, with
    kDLBcomplex, not as kDLComplex of 32 bits)"""
    return exported_dtypes(p, ["complex64", "complex128", "bcomplex32"])


@rule("header", "DLDataTypeCode, kDLBfloat (bits 16)")
def dtype_bfloat16(p) -> str:
    """bfloat16 arrays export with the DLPack type code (bfloat16)"""
    return exported_dtypes(p, ["bfloat16"])


@rule("header", "DLDataTypeCode, kDLFloat8_* (DLPack 1.1)")
def dtype_float8(p) -> str:
    """float8 arrays export with the DLPack type code (float8_e3m4, float8_e4m3, float8_e4m3b11fnuz, float8_e4m3fn,
    float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu)"""
    return exported_dtypes(p, [name for name in DTYPE_TRIPLES if name.startswith("float8")])


@rule("header", "DLDataTypeCode, kDLFloat4_e2m1fn: bits 4, lanes 1 or 2 (x2)")
def dtype_float4(p) -> str:
    """float4 arrays export with the DLPack type code (float4_e2m1fn, float4_e2m1fn_x2)"""
    return exported_dtypes(p, ["float4_e2m1fn", "float4_e2m1fn_x2"])


# --- ownership ------------------------------------------------------------------------

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


@rule("python", "Python spec: PyCapsule destructor and 'used_dltensor' renaming; header: deleter")
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


# --- views --------------------------------------------------------------------------------

def views_of(p) -> dict:
    """The library's views, or ``x[1:]`` of one of its arrays when it names
    none; NotSupported when it has none."""
    if p.views is not None:
        cases = p.views()
    else:
        x = p.make("float64", (6,))
        try:
            cases = {"offset x[1:]": x[1:]}
        except Exception as e:
            raise NotSupported("no views given, and x[1:] does not make one", e) from e
    if not cases:
        raise NotSupported("the library has no views to export")
    return cases


@rule("array-api", "array.__dlpack__ (the exported tensor is the array)")
def view_values(p) -> str:
    """views (negated, conjugated, offset, reversed, ...) export the values the library itself reports, or are
    refused with BufferError"""
    cases = views_of(p)
    notes, bad, untold = [], [], []
    for label, v in cases.items():
        try:
            capsule = export_any(v)
        except BufferError as e:
            notes.append(f"{label}: refused with BufferError ({short(e, 80)})")
            continue
        except Exception as e:
            bad.append(f"{label}: export raised {exc_name(e)}: {short(e, 100)}")
            continue
        # what the checker or the library cannot read is no verdict on the export
        try:
            got = readable(f"the export of {label}", capsule)
            want = p.values(v)
        except CheckFailed as e:
            bad.append(e.detail)
            continue
        except NotSupported as e:
            untold.append(f"{label}: not compared ({e.detail})")
            continue
        except Exception as e:
            untold.append(f"{label}: not compared (the library cannot read its own values: {exc_name(e)}: "
                          f"{short(e, 80)})")
            continue
        if not same_values(got, want):
            bad.append(f"{label}: exported {got!r}, the library reports {want!r}")
        else:
            notes.append(f"{label}: equal")
    if bad:
        raise CheckFailed("; ".join(bad + notes))
    if untold and not notes:
        raise NotSupported("; ".join(untold))
    return "; ".join(notes + untold)


# --- the C exchange API ------------------------------------------------------------------------

def call_deleter(address: int) -> None:
    """The deleter of the DLManagedTensorVersioned at ``address``, if it has one."""
    m = DLManagedTensorVersioned.from_address(address)
    if m.deleter:
        DELETER_T(m.deleter)(address)


@contextlib.contextmanager
def freed_on_failure(out: ctypes.c_void_p):
    """A table call that fails may still have handed out a tensor through
    ``out`` (the contract leaves it to the caller): its deleter runs once,
    here, so that a failing table is reported without a leak."""
    try:
        yield
    except BaseException:
        if out.value:
            call_deleter(out.value)
            out.value = None
        raise


def table_call(what: str, fn) -> None:
    """A call into an exchange table that must work: an exception it sets
    (ctypes raises it) or a nonzero status without one fails the check."""
    status = must_succeed(what, fn)
    if status != 0:
        raise CheckFailed(f"{what} returned {status} without setting an exception")


def table_of(x) -> DLPackExchangeAPI:
    """The exchange table of x's type, version major 1."""
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


def allocator_works(api: DLPackExchangeAPI) -> str:
    """The pass note of a table's managed_tensor_allocator, asked for a float32 (2, 3) CPU tensor."""
    errors = []
    shape = (ctypes.c_int64 * 2)(2, 3)
    proto = DLTensor()
    proto.device.device_type, proto.ndim, proto.shape = 1, 2, ctypes.addressof(shape)
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
    alloc = ctypes.c_void_p()
    set_error = SET_ERROR_T(lambda ctx, kind, msg: errors.append((kind, msg)))
    try:
        rc = ALLOCATOR_T(api.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(alloc), None, set_error)
        # PyErr_Occurred is called through PYFUNCTYPE, which raises an
        # exception the C call left set (the allocator is called like C)
        PyErr_Occurred()
    except Exception as e:
        # ctypes' SystemError names the stray exception as its cause
        raise CheckFailed("managed_tensor_allocator (required) set a Python exception instead of "
                          "working or calling SetError", e.__cause__ or e) from e
    if rc != 0 or not alloc.value:
        raise CheckFailed(f"managed_tensor_allocator failed (rc={rc}, errors={errors})")
    m = DLManagedTensorVersioned.from_address(alloc.value)
    got = (m.dl_tensor.ndim, tuple(ctypes.cast(m.dl_tensor.shape, ctypes.POINTER(ctypes.c_int64))[:2]),
           (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits))
    call_deleter(alloc.value)
    if got != (2, (2, 3), (2, 32)):
        raise CheckFailed(f"managed_tensor_allocator made (ndim, shape, dtype)={got}")
    return "allocator ok"


@rule("exchange-api", "DLPackExchangeAPI, DLPackExchangeAPIHeader")
def exchange_api(p) -> str:
    """type(x).__dlpack_c_exchange_api__, when present: a 'dlpack_exchange_api' capsule, version major 1, every
    required function non-NULL, and a round trip through it keeps the data pointer and values"""
    x, shape = shaped(p, "float64", (2, 3))
    api = table_of(x)
    version = (api.header.version.major, api.header.version.minor)
    missing = [f for f, _ in DLPackExchangeAPI._fields_[1:]
               if f != "dltensor_from_py_object_no_sync" and not getattr(api, f)]
    if missing:
        raise CheckFailed(f"NULL function pointers in a version {version} table: {', '.join(missing)}")
    p.twice("comparing the table's export with __dlpack__")
    plain = export_any(x)
    want_ptr, want_values = first_element(read_capsule(plain)), readable("the export", plain)
    out = ctypes.c_void_p()
    with freed_on_failure(out):
        table_call("managed_tensor_from_py_object_no_sync",
                   lambda: FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(x), ctypes.byref(out)))
    m = DLManagedTensorVersioned.from_address(out.value)
    t = m.dl_tensor
    got = (m.version.major, t.data + t.byte_offset, t.ndim)
    if got != (1, want_ptr, len(shape)):
        call_deleter(out.value)
        raise CheckFailed(f"from_py_object gave (major, data, ndim)={got}, expected (1, {want_ptr:#x}, "
                          f"{len(shape)})")
    obj = ctypes.c_void_p()
    table_call("managed_tensor_to_py_object_no_sync",
               lambda: TO_PY_T(api.managed_tensor_to_py_object_no_sync)(out.value, ctypes.byref(obj)))
    back = ctypes.cast(obj, ctypes.py_object).value
    Py_DecRef(obj.value)
    if data_pointer(back) != want_ptr or not same_values(read_values(export_any(back)), want_values):
        raise CheckFailed(f"to_py_object gave a {type(back).__name__} with other data or values")
    notes = [f"version {version}", f"round trip to {type(back).__name__} in place"]
    del back
    if api.dltensor_from_py_object_no_sync:
        view = DLTensor()
        table_call("dltensor_from_py_object_no_sync",
                   lambda: VIEW_T(api.dltensor_from_py_object_no_sync)(id(x), ctypes.byref(view)))
        if view.data + view.byte_offset != want_ptr:
            raise CheckFailed("dltensor_from_py_object_no_sync: another data pointer")
        notes.append("DLTensor view in place")
    stream = ctypes.c_void_p(1)
    table_call("current_work_stream(kDLCPU, 0)",
               lambda: STREAM_T(api.current_work_stream)(1, 0, ctypes.byref(stream)))
    if stream.value == 1:
        raise CheckFailed("current_work_stream(kDLCPU, 0) returned without storing a stream: "
                          "*out_current_stream still holds the 0x1 the checker put there, expected NULL")
    if stream.value:
        raise CheckFailed(f"current_work_stream(kDLCPU, 0) gave {stream.value:#x}, expected NULL")
    notes.append(allocator_works(api))
    return "; ".join(notes)


def export_outcome(export) -> tuple[str, object]:
    """("values", the values read) or ("refused", the exception's type name)."""
    try:
        capsule = export()
    except Exception as e:
        return "refused", exc_name(e)
    try:
        return "values", read_values(capsule)
    except Exception as e:
        return "unreadable", f"{exc_name(e)}: {short(e, 80)}"


def export_through_table(api: DLPackExchangeAPI, x):
    """What managed_tensor_from_py_object_no_sync gives for x, in a capsule
    (its deleter runs when the capsule goes)."""
    out = ctypes.c_void_p()
    with freed_on_failure(out):
        status = FROM_PY_T(api.managed_tensor_from_py_object_no_sync)(id(x), ctypes.byref(out))
        if status != 0 and out.value:
            raise SystemError(f"managed_tensor_from_py_object_no_sync returned {status} without setting an "
                              "exception, and handed out a tensor")
    if status != 0 or not out.value:
        # Not the header's failure (that sets an exception, which ctypes raised).
        raise SystemError(f"managed_tensor_from_py_object_no_sync returned {status} and tensor "
                          f"{out.value or 0:#x} without setting an exception")
    return PyCapsule_New(out.value, NAME_VERSIONED, None)


@rule("exchange-api", "DLPackExchangeAPI: 'exchanges tensors ... without going through __dlpack__'")
def exchange_api_matches_dlpack(p) -> str:
    """for every array and view, the exchange-API table's managed_tensor_from_py_object_no_sync and __dlpack__ give the
    same values or the same refusal (the table is a fast path, not another meaning)"""
    x, shape = shaped(p, "float64", (2, 3))
    cases = {f"float64 {shape}": x}
    table_of(x)
    p.twice("comparing the table's export with __dlpack__")
    cases.update(p.views() if p.views is not None else {})
    cases.update(p.unexportable() if p.unexportable is not None else {})
    notes, bad, unread = [], [], []
    for label, v in cases.items():
        if type(v) is not type(x) and exchange_api_of(type(v)) is None:
            continue
        plain = export_outcome(lambda: export_any(v))
        table = export_outcome(lambda: export_through_table(exchange_api_of(type(v)), v))
        blind = [what for kind, what in (plain, table) if kind == "unreadable"]
        if blind:  # the checker's reader failed, not the library: nothing to compare
            unread.append(f"{label}: not compared, the checker cannot read {blind[0]}")
        elif plain == table:
            notes.append(f"{label}: same {plain[0]}")
        else:
            bad.append(f"{label}: __dlpack__ {plain[0]} {plain[1]!r}, the table {table[0]} {table[1]!r}")
    if bad:
        raise CheckFailed("; ".join(bad))
    if unread and not notes:
        raise NotSupported("; ".join(unread))
    return "; ".join(notes + unread)
