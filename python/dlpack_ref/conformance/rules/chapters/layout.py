"""Layout: shapes, strides and offsets, 0-d and empty arrays, scalars and
views, as a producer exports them and a consumer reads them."""

from __future__ import annotations

import ctypes

import dlpack_ref as dr
from dlpack_ref.harness.observe import exc_name, same_values, short
from dlpack_ref.harness.subject import NotSupported, export_any

from ..breaking.consumers import Importer, take_without_release
from ..breaking.producers import Scalar, Wrapped, completed
from ..breaking.surgery import as_vector, managed
from ..consumer_cases import F64, SQUARE, V123, f64, import_made, judged
from ..consumer_judges import accepts, accepts_or_refuses
from ..producer_cases import exported_values, readable, row_major, shaped, values_by_its_own_means
from ..support import CheckFailed, must_succeed, plain_export, read_export
from ..table import breaks, rule


# --- producers ----------------------------------------------------------------------------

@rule(side="producer", source="header", where="DLTensor.strides (required non-NULL since DLPack 1.2)")
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


@breaks(strides_not_null, shows="NULL strides in a version (1, 3) capsule")
class NullStrides(Wrapped):
    """Writes NULL strides for C-contiguous data in versioned capsules (forbidden since 1.2)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        m, info = managed(capsule)
        if info["versioned"] and info["ndim"] and info["strides"] == row_major(info["shape"]):
            m.dl_tensor.strides = None
        return capsule


@rule(side="producer", source="array-api", where="from_dlpack / __dlpack__ (any array, including 0-d)")
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


@breaks(zero_dim, shows="ndim 1 for a 0-d array")
class ZeroDimAsVector(Wrapped):
    """Exports a 0-d array as a (1,) vector."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        return as_vector(capsule) if self._a.ndim == 0 else capsule


@rule(side="producer", source="array-api", where="from_dlpack / __dlpack__ (any array, including empty)")
def size_zero(p) -> str:
    """a size-0 array (shape (0, 3)) exports with its shape"""
    x, shape = shaped(p, "float32", (0, 3))
    cap = must_succeed(f"__dlpack__ of a {shape} array", lambda: export_any(x))
    info = read_export(f"__dlpack__ of a {shape} array", lambda: cap)
    if info["shape"] != shape:
        raise CheckFailed(f"shape {info['shape']}, expected {shape}")
    readable("the export", cap)
    return f"shape {info['shape']}, data {'NULL' if not info['data'] else 'non-NULL'}"


@breaks(size_zero, shows="shape (0,), expected (0, 3)")
class EmptyFlattened(Wrapped):
    """Exports a size-0 array of ndim > 1 with its first extent only: (0, 3) as (0,)."""

    def __dlpack__(self, **kwargs):
        capsule = self._a.__dlpack__(**kwargs)
        if self._a.size == 0 and self._a.ndim > 1:
            managed(capsule)[0].dl_tensor.ndim = 1
        return capsule


@rule(side="producer", source="array-api",
      where="from_dlpack accepts any object with __dlpack__, a library's scalars included")
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


@breaks(scalar, shows="scalar exported with ndim 1", subject=lambda cls: completed(scalar=cls))
class ScalarAsVector(Scalar):
    """A scalar exporting as a (1,) vector."""

    def __dlpack__(self, **kwargs):
        return as_vector(self._a.__dlpack__(**kwargs))


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


@rule(side="producer", source="array-api", where="array.__dlpack__ (the exported tensor is the array)")
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


@breaks(view_values, shows="reversed x[::-1]: exported [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]")
class ReversalDropped(Wrapped):
    """A view with a negative stride exports the array it views (the reversal dropped)."""

    def __dlpack__(self, **kwargs):
        reversed_view = isinstance(self._a.base, dr.Array) and any(s < 0 for s in self._a.strides)
        return (self._a.base if reversed_view else self._a).__dlpack__(**kwargs)


# --- consumers ----------------------------------------------------------------------------

@rule(side="consumer", source="header", where="DLTensor.byte_offset")
def byte_offset(c):
    """byte_offset is honoured (data + byte_offset is the first element)"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, byte_offset=8, fill=f64(V123)), accepts,
                  want=V123)


@breaks(byte_offset, shows="values [0.0, 1.0, 2.0], expected [1.0, 2.0, 3.0]")
class IgnoresByteOffset(Importer):
    """Reads the elements from data, ignoring byte_offset."""

    def edit(self, capsule, info, kwargs):
        if info is not None:
            managed(capsule)[0].dl_tensor.byte_offset = 0
        return capsule


@rule(side="consumer", source="header", where="DLTensor.strides (in elements, signed)")
def negative_strides(c):
    """a negative stride (a reversed view) is honoured: the values are read backwards from the first element, or the
    tensor is refused"""
    return judged(c, lambda f: import_made(c, f, shape=(3,), dtype=F64, strides=(-1,), elements=V123),
                  accepts_or_refuses, want=V123)


@breaks(negative_strides, shows="values [3.0, 2.0, 1.0], expected [1.0, 2.0, 3.0]")
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


@rule(side="consumer", source="header", where="DLTensor.strides (NULL = row-major before 1.2)")
def null_strides_v1_1(c):
    """NULL strides in a version 1.1 capsule mean row-major"""
    return judged(c, lambda f: import_made(c, f, shape=(2, 2), dtype=F64, version=(1, 1), strides="null",
                                           fill=f64([1, 2, 3, 4]), versioned=True),
                  accepts, want=[[1.0, 2.0], [3.0, 4.0]], needs_versioned=True, control=SQUARE)


@breaks(null_strides_v1_1, shows="refused")
class RefusesNullStridesVersioned(Importer):
    """Refuses NULL strides in any versioned capsule (they were allowed before 1.2)."""

    def edit(self, capsule, info, kwargs):
        if null_strides(info) and info["versioned"]:
            raise BufferError("NULL strides in a versioned capsule")
        return capsule


@rule(side="consumer", source="header", where="DLTensor.strides (NULL = row-major before 1.2)")
def null_strides_legacy(c):
    """NULL strides in a legacy capsule (of a pre-1.0 producer) mean row-major"""
    return judged(c, lambda f: import_made(c, f, shape=(2, 2), dtype=F64, legacy_only=True, strides="null",
                                           fill=f64([1, 2, 3, 4])),
                  accepts, want=[[1.0, 2.0], [3.0, 4.0]], control={**SQUARE, "legacy_only": True})


@breaks(null_strides_legacy, shows="refused")
class RefusesNullStridesLegacy(Importer):
    """Refuses NULL strides in a legacy capsule."""

    def edit(self, capsule, info, kwargs):
        if null_strides(info) and not info["versioned"]:
            raise BufferError("NULL strides in a legacy capsule")
        return capsule


@rule(side="consumer", source="header", where="DLTensor.strides (non-NULL required since 1.2)")
def null_strides_v1_3(c):
    """NULL strides in a version 1.3 capsule (forbidden since 1.2) are refused or read as row-major"""
    return judged(c, lambda f: import_made(c, f, shape=(2, 2), dtype=F64, strides="null", fill=f64([1, 2, 3, 4]),
                                           versioned=True),
                  accepts_or_refuses, want=[[1.0, 2.0], [3.0, 4.0]], needs_versioned=True, control=SQUARE)


@breaks(null_strides_v1_3, shows="deleter ran 0 times, expected 1")
class LeaksNullStridesRefusal(Importer):
    """Refuses NULL strides in a 1.2+ capsule after taking it: its deleter never runs."""

    def edit(self, capsule, info, kwargs):
        if null_strides(info) and info["versioned"] and info["version"] >= (1, 2):
            take_without_release(capsule)
            raise BufferError("NULL strides are forbidden since DLPack 1.2")
        return capsule


@rule(side="consumer", source="header", where="DLTensor.data")
def size_zero_null_data(c):
    """a size-0 tensor with NULL data is accepted"""
    return judged(c, lambda f: import_made(c, f, shape=(0,), dtype=F64, data=None), accepts_or_refuses)


@breaks(size_zero_null_data, shows="deleter ran 0 times, expected 1")
class LeaksEmptyNullData(Importer):
    """Refuses a size-0 tensor with NULL data after taking it: its deleter never runs."""

    def edit(self, capsule, info, kwargs):
        if info is not None and not info["data"] and 0 in (info["shape"] or ()):
            take_without_release(capsule)
            raise BufferError("NULL data")
        return capsule
