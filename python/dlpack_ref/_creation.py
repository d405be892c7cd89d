"""Creation functions: ``asarray`` and ``zeros`` (``empty`` lives in the core).

Every value conversion happens in the core's C kernels (src/dlref_kernels.h):
nested sequences and scalars are read in one walk and written straight into
the result, dtype changes run element loops over the strided source.
"""

from __future__ import annotations

from . import _dlpack_ref as _core
from ._devices import as_device
from ._dtypes import as_dtype

Array = _core.Array
CopyForbiddenError = _core.CopyForbiddenError

_PYTHON_VALUES = frozenset((float, int, bool, complex, list, tuple))  # a set: `type(x) in` hashes, a tuple compares each


def zeros(shape, *, dtype=None, device=None):
    """A C-contiguous Array of zeros.

    Parameters
    ----------
    shape : int or sequence of int
    dtype : dtype-like, optional
        float64 by default.
    device : device-like, optional
        The CPU by default.

    Returns
    -------
    Array
        All-zero bytes, which is 0 for every DLPack dtype except
        float8_e8m0fnu, where it is 2**-127.
    """
    a = _core.empty(shape, dtype=dtype, device=device)
    _core._fill_zero(a)
    return a


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """An Array from a DLPack object, a buffer-protocol object, a Python
    scalar or a nested sequence.

    Parameters
    ----------
    obj : object
        A DLPack producer, a buffer, a Python scalar or nested lists/tuples.
    dtype : dtype-like, optional
        Converted to when given (a copy); inferred otherwise as NumPy infers
        it (bool, int64, float64 or complex128 for Python values; NumPy
        scalars and 0-d arrays in a sequence count with their own dtypes).
    device : device-like, optional
        Where the result must live.
    copy : bool or None
        None shares memory when it can; True always copies; False never does.

    Returns
    -------
    Array

    Raises
    ------
    CopyForbiddenError
        ``copy=False`` and a copy is needed (Python values and any dtype
        change always need one); it is a ValueError and a BufferError.
    ValueError
        A ragged or too deeply nested sequence (more than 64 levels, which
        a list containing itself always is), or NaN into a type without NaN.
    TypeError
        An object of none of these kinds, or a value the dtype cannot hold
        without losing it (a float into an integer dtype).
    OverflowError
        A Python int out of the integer dtype's range.
    """
    if type(obj) in _PYTHON_VALUES:
        if copy is False:
            raise CopyForbiddenError(
                f"copy=False, but an Array made from a {type(obj).__name__} always needs a copy")
        if copy is not None and copy is not True:
            raise TypeError(f"copy must be True, False or None, not {copy!r}")
        a = _core._from_values(obj, dtype)
        return a if device is None else a.to_device(device)
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be True, False or None, not {copy!r}")
    want = None if dtype is None else as_dtype(dtype)
    if isinstance(obj, Array) or hasattr(obj, "__dlpack__"):
        if copy is True and device is None:
            # Host data is copied here, by the core's copy routine.
            a = _core._copied(obj) if want is None else None
            if a is not None:
                return a
        if isinstance(obj, Array) and copy is not True and (want is None or want == obj.dtype) and (
                device is None or as_device(device) == obj.device):
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
    a = _core._from_values(obj, want)
    return a if device is None else a.to_device(device)


def _dtype_of(obj):
    try:
        return obj.dtype if isinstance(obj, Array) else as_dtype(getattr(obj, "dtype", None))
    except TypeError:
        return None


def _cast(a, want, copy):
    if want is None or want == a.dtype:
        return a
    if copy is False:
        raise CopyForbiddenError(f"copy=False, but converting {a.dtype} to {want} needs a copy")
    return _core._astype(a, want)


def _has_buffer(obj) -> bool:
    # Asks the type, not the exporter: taking a buffer to find out would
    # hand a malformed one to memoryview, whose own checks are not the
    # import's (ndim=-1 is a SystemError there); _from_buffer checks it.
    if isinstance(obj, (list, tuple, int, float, complex, bool, str)):
        return False
    return _core._has_buffer(obj)

