"""What the producer rules share: how a case asks a library for an array
(:func:`shaped`, :func:`made`) and reads what it exports, through
:func:`dlpack_ref.testing.reader.read_capsule` (ctypes, never dlpack-ref's
core), so that the checks rely on nothing but DLPack itself, and each runs
as written with the library alone. Each producer check takes a
:class:`~dlpack_ref.harness.subject.Producer`."""

from __future__ import annotations

import math

from dlpack_ref.harness.observe import exc_name, short
from dlpack_ref.harness.subject import NotSupported, ask, export_any, first_element
from dlpack_ref.testing.reader import read_capsule, read_values

from .support import CheckFailed, device_value, must_succeed, read_export


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

