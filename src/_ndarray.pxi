# NumPy's ndarray read from its head (data, shape, strides, dtype) with no
# export: the copies asarray(ndarray, copy=True) and from_dlpack(ndarray,
# copy=True) make of an exact ndarray in host memory.


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
    _count_head_copy()
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


# -1: not yet asked; 1: NumPy's __dlpack__ takes max_version (NumPy 2.1 on)
# and so exports read-only arrays, flagged; 0: an older NumPy, whose legacy
# export refuses them (BufferError).
cdef int _numpy_versioned = -1


cdef bint _numpy_exports_read_only() except -1:
    """Whether NumPy's own __dlpack__ exports every array the head read
    copies (read-only ones included): decided once, from NumPy's version."""
    global _numpy_versioned
    if _numpy_versioned < 0:
        try:
            release = _sys_modules["numpy"].__version__.split(".")
            _numpy_versioned = 1 if (int(release[0]), int(release[1])) >= (2, 1) else 0
        except (KeyError, AttributeError, ValueError, IndexError):
            _numpy_versioned = 0   # a version not read is taken as old: the DLPack route
    return _numpy_versioned == 1


cdef Array _ndarray_dlpack_copy(object obj):
    """from_dlpack(ndarray, copy=True), on the CPU: the copy the DLPack route
    makes (NumPy's tensor exported in place, then copied here) read from the
    exact ndarray's head, with no export. None wherever NumPy's export could
    answer otherwise (a type, byte order or strides the head read leaves to
    it; a read-only array under a NumPy that refuses to export one): the
    caller then takes the DLPack route, with NumPy's own result or refusal."""
    if not _numpy_exports_read_only():
        return None
    return _ndarray_read_copy(obj)


# Copies read from an ndarray's head, for the tests: proof that a call took
# the head read (its result is the same as the other routes'). Added to
# atomically: threads copy at once without the GIL on free-threaded builds.
cdef int64_t _head_copies = 0


cdef inline void _count_head_copy() noexcept:
    dlref_atomic_add(&_head_copies, 1)


def _ndarray_head_copies():
    """How many copies were read from an ndarray's head. For the tests."""
    return _head_copies
