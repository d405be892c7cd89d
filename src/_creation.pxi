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
                return _copy_to(a, cpu, None)
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
            return _copy_to(a, a._device, None) if _same_dtype(want, a._dtype) else _converted(a, want)
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
            a = _copy_to(a, cpu, None)
        return _cast(a, want, has_want, copy)
    if copy is False:
        raise _always_copies(obj)
    a = _from_python(obj, want, not has_want)
    return a if device is None else a.to_device(device)


cdef object _numpy_ndarray = None


cdef inline object _ndarray_type():
    """numpy.ndarray once NumPy is imported (never imported here), else None."""
    global _numpy_ndarray
    if _numpy_ndarray is None:
        numpy = _sys_modules.get("numpy")   # a dict lookup in C
        if numpy is not None:
            _numpy_ndarray = getattr(numpy, "ndarray", None)
    return _numpy_ndarray


cdef dict _sys_modules = __import__("sys").modules


cdef extern from *:
    """
    /* The heads of NumPy's ndarray and dtype objects, as far as they are
       read here: PyArrayObject_fields and PyArray_Descr, the same from
       NumPy 1.7 through 2.x (NumPy's inline accessors, compiled into every
       extension that uses its C API, read these very fields, so NumPy
       cannot move them). Trusted only after one array's fields have been
       found equal to what its buffer export says (_numpy_layout_checked). */
    typedef struct {
        PyObject_HEAD
        char* data;
        int nd;
        Py_ssize_t* dimensions;
        Py_ssize_t* strides;
        PyObject* base;
        PyObject* descr;
    } dlref_ndarray_head;
    typedef struct {
        PyObject_HEAD
        PyTypeObject* typeobj;
        char kind, type, byteorder, former_flags;
        int type_num;
    } dlref_descr_head;
    #define dlref_ndarray(o) ((dlref_ndarray_head*)(o))
    #define dlref_descr_type_num(d) (((dlref_descr_head*)(d))->type_num)
    #define dlref_descr_byteorder(d) (((dlref_descr_head*)(d))->byteorder)
    /* NumPy's type numbers of the types read directly (NPY_BOOL to
       NPY_CDOUBLE, NPY_HALF) as DLPack (code, bits); bits 0: not read here
       (long double, object, strings, datetimes, user types). C's int and
       long have the platform's sizes. */
    #define DLREF_NUMPY_TYPE_NUMS 24
    static const unsigned char dlref_numpy_code[DLREF_NUMPY_TYPE_NUMS] = {6, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 2, 5, 5, 5,
                                                       0, 0, 0, 0, 0, 0, 2};
    static const unsigned char dlref_numpy_bits[DLREF_NUMPY_TYPE_NUMS] = {8, 8, 8, 16, 16, 8 * sizeof(int), 8 * sizeof(int),
                                                       8 * sizeof(long), 8 * sizeof(long), 64, 64, 32, 64, 0,
                                                       64, 128, 0, 0, 0, 0, 0, 0, 0, 16};
    """
    ctypedef struct dlref_ndarray_head:
        char* data
        int nd
        Py_ssize_t* dimensions
        Py_ssize_t* strides
        PyObject* descr
    dlref_ndarray_head* dlref_ndarray(object o)
    int dlref_descr_type_num(PyObject* d)
    char dlref_descr_byteorder(PyObject* d)
    enum: DLREF_NUMPY_TYPE_NUMS
    const unsigned char* dlref_numpy_code
    const unsigned char* dlref_numpy_bits


# -1: not yet checked; 1: the ndarray head reads as NumPy's buffer export
# says; 0: it does not, and every ndarray goes through the buffer protocol.
cdef int _numpy_layout = -1


cdef bint _numpy_layout_checked(object obj) except -1:
    """Whether the ndarray head can be read directly: checked once, on the
    first non-empty array, against its own buffer export. The data pointer,
    ndim and dtype object are compared before any pointer in the head is
    followed; strides only along extents above 1 (NumPy's export may give
    the others any value)."""
    global _numpy_layout
    cdef Py_buffer view
    cdef dlref_ndarray_head* head = dlref_ndarray(obj)
    cdef int i
    cdef bint same
    if _numpy_layout >= 0:
        return _numpy_layout == 1
    try:
        _acquire_buffer(obj, &view)
    except Exception:
        return False   # this array has no buffer; a later one decides
    try:
        if view.len == 0:
            return False   # nothing to compare a data pointer with
        descr = obj.dtype
        same = head.data == <char*>view.buf and head.nd == view.ndim and head.descr == <PyObject*>descr
        for i in range(view.ndim if same else 0):
            same = same and head.dimensions[i] == view.shape[i] and (
                view.shape[i] <= 1 or view.strides == NULL or head.strides[i] == view.strides[i])
    finally:
        PyBuffer_Release(&view)
    _numpy_layout = 1 if same else 0
    return same


def _numpy_head_read():
    """Whether exact ndarrays are read from their heads (1), through the
    buffer protocol (0), or not yet checked (-1). For the tests."""
    return _numpy_layout


cdef Array _ndarray_read_copy(object obj):
    """A C-contiguous copy of an exact ndarray read from its head, with no
    export: NumPy's buffer export alone costs about 60 % of its own
    np.array(x, copy=True) at 1 KiB. None when the head cannot be read
    (unchecked layout, a type not in the table, non-native byte order,
    strides that are no multiple of the item size, more dimensions than
    DLPack's limit): the caller then takes the buffer or DLPack route."""
    cdef dlref_ndarray_head* head = dlref_ndarray(obj)
    cdef int type_num, i
    cdef int nd = head.nd
    cdef DLDataType dt
    cdef DLDevice cpu
    cdef int64_t itemsize
    cdef int64_t src_b[DLPACK_REF_MAX_NDIM]
    cdef int64_t dims[DLPACK_REF_MAX_NDIM]
    if not _numpy_layout_checked(obj) or nd < 0 or nd > DLPACK_REF_MAX_NDIM:
        return None
    type_num = dlref_descr_type_num(head.descr)
    if type_num < 0 or type_num >= DLREF_NUMPY_TYPE_NUMS or dlref_numpy_bits[type_num] == 0:
        return None
    if dlref_descr_byteorder(head.descr) != b"=" and dlref_descr_byteorder(head.descr) != b"|":
        return None
    dt.code = dlref_numpy_code[type_num]
    dt.bits = dlref_numpy_bits[type_num]
    dt.lanes = 1
    itemsize = dt.bits // 8
    for i in range(nd):
        if head.strides[i] % itemsize:
            return None
        dims[i] = head.dimensions[i]
        src_b[i] = head.strides[i]
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    cdef Array a = _empty_dims(dims, nd, dt, cpu)
    _host_copy_from(a, head.data, src_b, itemsize, True)
    return a


cdef Array _ndarray_copy(object obj):
    """asarray(ndarray, copy=True): read from the array's head when it can
    be (_ndarray_read_copy), else through the buffer protocol, which costs
    a third of __dlpack__ and __dlpack_device__ and reads the same memory,
    shape, strides and dtype; None when neither can describe the array (its
    dtype, byte order, strides), and then the DLPack import answers, with
    its own result or refusal."""
    cdef Array a = _ndarray_read_copy(obj)
    if a is not None:
        return a
    try:
        return _buffer_copy(obj)
    except Exception:
        return None


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
