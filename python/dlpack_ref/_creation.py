"""Creation functions: ``asarray`` and ``zeros`` (``empty`` lives in the core)."""

from __future__ import annotations

from . import _dlpack_ref as _core
from ._devices import as_device
from ._dtypes import as_dtype, DTYPES
from ._format import encode

Array = _core.Array
CopyForbiddenError = _core.CopyForbiddenError


def zeros(shape, *, dtype=None, device=None):
    """A C-contiguous Array of zeros (all-zero bytes, which is 0 for every
    DLPack dtype except float8_e8m0fnu, where it is 2**-127)."""
    a = _core.empty(shape, dtype=dtype, device=device)
    _core._fill_zero(a)
    return a


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """An Array from a DLPack object, a buffer-protocol object, a Python
    scalar or a nested sequence.

    ``copy=None`` shares memory when it can; ``copy=True`` always copies;
    ``copy=False`` never does (CopyForbiddenError, a ValueError and a
    BufferError, when a copy is needed, which Python scalars and sequences
    and any dtype change always need).
    """
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be True, False or None, not {copy!r}")
    want = None if dtype is None else as_dtype(dtype)
    if isinstance(obj, Array) or hasattr(obj, "__dlpack__"):
        if isinstance(obj, Array) and copy is not True and (want is None or want == obj.dtype) and (
                device is None or _same_device(obj, device)):
            return obj
        a = _core.from_dlpack(obj, device=device, copy=copy if want is None or want == _dtype_of(obj) else None)
        return _cast(a, want, copy)
    if _has_buffer(obj):
        a = _core._from_buffer(obj)
        if device is not None and not _core.can_access(device, a.device):
            if copy is False:
                raise CopyForbiddenError(f"copy=False, but moving host memory to {device} needs a copy")
            return _cast(a, want, copy).to_device(device)
        if copy is True and (want is None or want == a.dtype):
            a = a.copy()
        return _cast(a, want, copy)
    if copy is False:
        raise CopyForbiddenError(
            f"copy=False, but an Array made from a {type(obj).__name__} always needs a copy")
    flat, shape = _flatten(obj)
    if want is None:
        want = _infer_dtype(flat)
    if want.lanes > 1:
        flat, shape = _fold_lanes(flat, shape, want)
    a = _core.empty(shape, dtype=want)
    _core._write_host_bytes(a, encode(want, flat))
    if device is not None:
        a = a.to_device(device)
    return a


def _dtype_of(obj):
    try:
        return obj.dtype if isinstance(obj, Array) else as_dtype(getattr(obj, "dtype", None))
    except TypeError:
        return None


def _same_device(a, device):
    return as_device(device) == a.device


def _cast(a, want, copy):
    if want is None or want == a.dtype:
        return a
    if copy is False:
        raise CopyForbiddenError(f"copy=False, but converting {a.dtype} to {want} needs a copy")
    out = _core.empty(a.shape, dtype=want)
    values = a.tolist()
    flat, _ = _flatten(values) if a.ndim else ([values], ())
    _core._write_host_bytes(out, encode(want, flat))
    if a.device.type != 1:
        out = out.to_device(a.device)
    return out


def _has_buffer(obj) -> bool:
    # Asks the type, not the exporter: taking a buffer to find out would
    # hand a malformed one to memoryview, whose own checks are not the
    # import's (ndim=-1 is a SystemError there); _from_buffer checks it.
    if isinstance(obj, (list, tuple, int, float, complex, bool, str)):
        return False
    return _core._has_buffer(obj)


def _flatten(obj):
    """(flat list of scalars, shape) of a nested sequence; ValueError when ragged."""
    if isinstance(obj, (bool, int, float, complex)) or _is_scalar_like(obj):
        return [obj], ()
    if not isinstance(obj, (list, tuple)):
        raise TypeError(
            f"asarray cannot read a {type(obj).__name__}: expected a DLPack object, a buffer, "
            "a Python scalar or a nested sequence")
    if not obj:
        return [], (0,)
    parts = [_flatten(x) for x in obj]
    inner = parts[0][1]
    for _, s in parts:
        if s != inner:
            raise ValueError(f"ragged nested sequence: sub-shapes {inner} and {s} differ")
    flat = [v for p, _ in parts for v in p]
    return flat, (len(obj),) + inner


def _fold_lanes(flat, shape, dtype):
    """Vector dtypes (float4_e2m1fn_x2): tolist() gives each element as a
    tuple of its lanes, so the innermost axis of a sequence holds the lanes."""
    if not shape or shape[-1] != dtype.lanes:
        raise ValueError(
            f"a {dtype} element is a sequence of {dtype.lanes} values (one per lane); "
            f"got a sequence of shape {shape}")
    lanes = dtype.lanes
    return [tuple(flat[i:i + lanes]) for i in range(0, len(flat), lanes)], shape[:-1]


def _is_scalar_like(obj) -> bool:
    return hasattr(obj, "__index__") or hasattr(obj, "__float__") and not hasattr(obj, "__len__")


def _infer_dtype(flat):
    if flat and all(isinstance(v, bool) for v in flat):
        return DTYPES["bool"]
    if any(isinstance(v, complex) for v in flat):
        return DTYPES["complex128"]
    if any(isinstance(v, float) for v in flat) or not flat:
        return DTYPES["float64"]
    if all(isinstance(v, int) or hasattr(v, "__index__") for v in flat):
        return DTYPES["int64"]
    return DTYPES["float64"]
