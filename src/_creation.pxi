# Creation: asarray's dispatch over Python values, DLPack producers, buffers
# and nested sequences, and zeros. Written in the core so that a small call
# costs what NumPy's does: no Python frame, dtypes compared as DLDataTypes.


cdef inline bint _is_python_value(object obj) noexcept:
    """Exactly a float, int, bool, complex, list or tuple (not a subclass:
    NumPy's float64 is a float and takes the general path)."""
    t = type(obj)
    return t is float or t is int or t is bool or t is list or t is tuple or t is complex


cdef inline bint _may_export_buffer(object obj) noexcept:
    # Asks the type, not the exporter: taking a buffer to find out would
    # hand a malformed one to memoryview, whose own checks are not the
    # import's (ndim=-1 is a SystemError there); _from_buffer checks it.
    if isinstance(obj, (list, tuple, int, float, complex, str)):
        return False
    return _has_buffer(obj)


cdef object _always_copies(object obj):
    return CopyForbiddenError(f"copy=False, but an Array made from a {type(obj).__name__} always needs a copy")


cdef Array _cast(Array a, DLDataType want, bint has_want, object copy):
    """a converted to want (a new Array) unless it has that dtype already."""
    if not has_want or _same_dtype(want, a._dtype):
        return a
    if copy is False:
        raise CopyForbiddenError(
            f"copy=False, but converting {a.dtype} to {_dtype_from_triple(want.code, want.bits, want.lanes)} "
            "needs a copy")
    return _converted(a, want)


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
    cdef DLDataType want
    want.code = 0
    want.bits = 0
    want.lanes = 0
    cdef bint has_want = dtype is not None
    cdef Array a
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    if _is_python_value(obj):
        # The refusal comes before the argument checks: a Python value can
        # never be shared, whatever else is asked.
        if copy is False:
            raise _always_copies(obj)
        dlpack_ref_check_copy_arg(copy)
        a = _from_python(obj, _dldtype(dtype) if has_want else want, not has_want)
        return a if device is None else a.to_device(device)
    dlpack_ref_check_copy_arg(copy)
    if has_want:
        want = _dldtype(dtype)
    if copy is True and device is None and not has_want and not isinstance(obj, Array) \
            and type(obj) is _ndarray_type():
        a = _ndarray_copy(obj)
        if a is not None:
            return a
    if isinstance(obj, Array) or hasattr(obj, _DLPACK_NAME):
        if copy is True and device is None and not has_want:
            a = obj if isinstance(obj, Array) else _import_plain(obj)
            if a._device.device_type == kDLCPU:
                return _copy_to(a, cpu, &_STREAM_NONE)
            # Device data: let go (a producer's deleter runs now), then
            # imported again below with copy=True, copied on its device.
            a = None
        if isinstance(obj, Array):
            a = <Array>obj
            if copy is not True and (not has_want or _same_dtype(want, a._dtype)) and (
                    device is None or _same_device(_parse_device(device), a._device)):
                return a
            if has_want and not _same_dtype(want, a._dtype):
                copy_asked = None
            else:
                copy_asked = copy
            return _cast(_from_dlpack(obj, device, copy_asked), want, has_want, copy)
        # A producer's element type is its tensor's, known once it is taken
        # (no attribute of the producer, such as a .dtype, is read): with
        # dtype= and copy=True it is taken as it is, then converted, or
        # copied when it has that type already.
        if has_want and copy is True:
            a = _from_dlpack(obj, device, None)
            return _copy_to(a, a._device, &_STREAM_NONE) if _same_dtype(want, a._dtype) else _converted(a, want)
        return _cast(_from_dlpack(obj, device, copy), want, has_want, copy)
    if _may_export_buffer(obj):
        if copy is True and device is None and not has_want:
            return _buffer_copy(obj)
        a = _from_buffer(obj)
        if device is not None and not _can_access(_parse_device(device), a._device):
            if copy is False:
                raise CopyForbiddenError(f"copy=False, but moving host memory to {device} needs a copy")
            return _cast(a, want, has_want, copy).to_device(device)
        if copy is True and (not has_want or _same_dtype(want, a._dtype)):
            a = _copy_to(a, cpu, &_STREAM_NONE)
        return _cast(a, want, has_want, copy)
    if copy is False:
        raise _always_copies(obj)
    a = _from_python(obj, want, not has_want)
    return a if device is None else a.to_device(device)


cdef inline bint _same_device(DLDevice a, DLDevice b) noexcept:
    return a.device_type == b.device_type and a.device_id == b.device_id


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
    cdef Array a = _empty_of(shape, dtype, device)
    cdef size_t n = <size_t>_nbytes_of(a)
    if a._device.device_type == kDLCPU:
        memset(a._data, 0, n)
    else:
        _cuda().memset(<uintptr_t>a._data, a._device.device_type, a._device.device_id, _work_of(a), 0, n)
    return a
