# The Array: its fields and metadata, Python scalars, the dunder methods
# (which call the other concept files), and the helpers that read its
# layout and make views of it. Strides count elements, as DLPack does.

cdef enum:
    # ndim up to this many keeps shape and strides inside the Array (no malloc).
    SMALL_NDIM = 4


class CopyForbiddenError(BufferError, ValueError):
    """Raised when ``copy=False`` and only a copy could satisfy the request.

    It is both a BufferError and a ValueError because the array API standard
    names both for this case (``__dlpack__`` says BufferError, ``from_dlpack``
    and ``asarray`` say ValueError); catching either works.
    """


# Recycled Array objects: every import and view makes one (Cython keeps no
# free list in free-threaded builds).
@cython.freelist(16)
cdef class Array:
    """An n-d array of any DLPack 1.3 dtype on a CPU or CUDA-family device.

    Made by ``asarray``, ``from_dlpack``, ``empty``, ``zeros`` and indexing;
    not by calling the class. Strides count elements, as DLPack does.
    """
    cdef char* _data
    cdef int64_t* _shape
    cdef int64_t* _strides
    cdef int64_t _small[2 * SMALL_NDIM]
    cdef int32_t _ndim
    cdef DLDataType _dtype
    cdef DLDevice _device
    # READ_ONLY and IS_SUBBYTE_TYPE_PADDED, as DLPack spells them.
    cdef uint64_t _flags
    # Keeps the memory alive: the viewed Array, a buffer owner, a device allocation.
    cdef object _base
    # An imported DLManagedTensor[Versioned]; its deleter runs in __dealloc__.
    cdef void* _managed
    cdef bint _managed_versioned
    # Host memory allocated here is owned by a C reference count (see
    # _allocation.pxi): the Array that allocated it holds one count
    # (_own_count, given back in __dealloc__); it and every view of it know
    # the count (_counted; NULL for memory a Python object owns), and each
    # export of that memory holds a count of its own, not the Array.
    cdef dlpack_ref_counted* _own_count
    cdef dlpack_ref_counted* _counted
    # CUDA-family memory: the record of its pending work (dlpack_ref._cuda_streams'
    # PendingWork), one object shared by the Array owning the memory and all
    # its views; None until needed (see _work_of).
    cdef object _work
    cdef object __weakref__

    def __init__(self, *args, **kwargs):
        raise TypeError("Array cannot be created directly; use asarray, from_dlpack, empty or zeros")

    def __dealloc__(self):
        if self._managed != NULL:
            _call_deleter(self._managed, self._managed_versioned)
            self._managed = NULL
        if self._shape != NULL and self._shape != &self._small[0]:
            free(self._shape)
        self._shape = NULL
        if self._own_count != NULL:
            dlpack_ref_counted_release(self._own_count)
            self._own_count = NULL

    # --- metadata ---------------------------------------------------------

    @property
    def shape(self):
        return tuple([self._shape[i] for i in range(self._ndim)])

    @property
    def strides(self):
        """Strides in elements (DLPack's unit), not bytes."""
        return tuple([self._strides[i] for i in range(self._ndim)])

    @property
    def ndim(self):
        return self._ndim

    @property
    def size(self):
        return _size_of(self)

    @property
    def nbytes(self):
        return _nbytes_of(self)

    @property
    def itemsize(self):
        """Bytes per element; 0 for packed sub-byte storage (see ``dtype.bits``)."""
        cdef int64_t bits = dlpack_ref_storage_bits(self._dtype, self._flags)
        return bits // 8 if bits >= 8 else 0

    @property
    def dtype(self):
        return _dtype_from_triple(self._dtype.code, self._dtype.bits, self._dtype.lanes)

    @property
    def device(self):
        return _device_object(self._device)

    @property
    def readonly(self):
        return (self._flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0

    @property
    def subbyte_padded(self):
        """For sub-byte dtypes: True when one element takes a whole byte,
        False when elements are packed (little bit-endian)."""
        return (self._flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0

    @property
    def data_ptr(self):
        """Address of the first element."""
        return <uintptr_t>self._data

    @property
    def base(self):
        return self._base

    @property
    def T(self):
        if self._ndim != 2:
            raise ValueError(f"Array.T needs a 2-d array; this one has ndim={self._ndim}")
        return self.permute_dims((1, 0))

    @property
    def mT(self):
        if self._ndim < 2:
            raise ValueError(f"Array.mT needs ndim >= 2; this one has ndim={self._ndim}")
        axes = list(range(self._ndim))
        n = self._ndim
        axes[n - 1], axes[n - 2] = axes[n - 2], axes[n - 1]
        return self.permute_dims(tuple(axes))

    def permute_dims(self, axes):
        """A view with the axes reordered (no copy)."""
        axes = tuple(axes)
        if sorted(axes) != list(range(self._ndim)):
            raise ValueError(f"axes {axes!r} are not a permutation of range({self._ndim})")
        cdef Array v = _view(self, self._ndim)
        for i, ax in enumerate(axes):
            v._shape[i] = self._shape[ax]
            v._strides[i] = self._strides[ax]
        return v

    def __len__(self):
        if self._ndim == 0:
            raise TypeError("len() of a 0-d Array")
        return self._shape[0]

    def __iter__(self):
        # Without __iter__, Python iterates through __getitem__ until
        # IndexError, which a 0-d Array raises at once: an empty iteration
        # where NumPy raises TypeError (docs/semantics.md, "Iteration").
        if self._ndim == 0:
            raise TypeError("iteration over a 0-d Array")
        return _rows(self, self._shape[0])

    def __repr__(self):
        extras = ""
        if self._device.device_type != kDLCPU:
            extras += f", device={str(self.device)!r}"
        if self._flags & DLPACK_FLAG_BITMASK_READ_ONLY:
            extras += ", readonly=True"
        try:
            body = f"<{_size_of(self)} elements>" if _size_of(self) > 1000 else repr(self.tolist())
        except Exception as exc:  # e.g. CUDA data without a driver
            body = f"<unreadable: {type(exc).__name__}>"
        return f"Array({body}, shape={self.shape}, dtype={self.dtype.name}{extras})"

    def __bool__(self):
        if _size_of(self) != 1:
            raise ValueError(f"the truth value of an Array with {_size_of(self)} elements is ambiguous")
        return bool(_scalar_of(self))

    def __int__(self):
        return int(_scalar_of(self))

    def __float__(self):
        return float(_scalar_of(self))

    def __complex__(self):
        return complex(_scalar_of(self))

    def __index__(self):
        if self._dtype.code != kDLInt and self._dtype.code != kDLUInt:
            raise TypeError(f"only integer Arrays can be used as an index, not {self.dtype}")
        return int(_scalar_of(self))

    def __reduce__(self):
        raise TypeError("Array does not pickle; exchange it through DLPack or copy it with tolist()")

    # --- DLPack producer ----------------------------------------------------

    def __dlpack_device__(self):
        """``(DeviceType, device_id)``: where the memory truly lives."""
        return _dlpack_device_tuple(self._device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule.

        ``max_version``: None or a major below 1 gives a legacy ``dltensor``;
        otherwise a ``dltensor_versioned`` stamped (1, 3). ``dl_device``: where
        the consumer wants the data; memory it can use in place is exported
        without a copy under its true device type. ``copy``: True always
        copies (IS_COPIED is set), False never does (CopyForbiddenError, a
        BufferError and a ValueError), None copies only when needed.
        ``stream``: None, 1, 2, a CUstream handle > 2, -1 or an object with
        ``__cuda_stream__`` for CUDA memory; only None for CPU memory.
        """
        return _export(self, stream, max_version, dl_device, copy)

    # --- buffer protocol (CPU-accessible memory; filled by _export) ---------

    def __getbuffer__(self, Py_buffer* view, int flags):
        _fill_buffer(self, view, flags)

    def __releasebuffer__(self, Py_buffer* view):
        free(view.internal)

    # --- indexing ----------------------------------------------------------

    def __getitem__(self, key):
        if type(key) is tuple and len(<tuple>key) == self._ndim:
            return _integer_index(self, <tuple>key)
        return _basic_index(self, key)

    def __setitem__(self, key, value):
        cdef Array dst = _basic_index(self, key)
        if dst._flags & DLPACK_FLAG_BITMASK_READ_ONLY:
            raise ValueError("assignment destination is read-only")
        cdef Array src
        if isinstance(value, Array):
            src = value
            if not _same_dtype(src._dtype, dst._dtype):
                src = _converted(src, dst._dtype)
        elif hasattr(value, "__dlpack__") or _has_buffer(value):
            src = _converted(_as_array(value), dst._dtype)
        else:
            src = _from_python(value, dst._dtype)
        _assign(dst, src)

    # --- copies and transfers ---------------------------------------------

    def copy(self):
        """A C-contiguous, writable copy on the same device."""
        return _copy_to(self, self._device, &_STREAM_NONE)

    def to_device(self, device, /, *, stream=None):
        """This array on ``device``: ``self`` when already there, else a copy.

        ``stream`` (CUDA, as in ``__dlpack__``: None or 1 = legacy default,
        2 = per-thread default, a CUstream handle > 2, -1, or an object with
        ``__cuda_stream__``; a stream of the source's device, or of the
        target's for a copy from the host): the copy is enqueued on it after
        the work pending on this array. A copy to the CPU with ``stream``
        None is complete on return; with a stream it is not (synchronize the
        stream before reading). See docs/cuda.md."""
        cdef DLDevice target = _parse_device(device)
        if target.device_type == self._device.device_type and (
                target.device_id == self._device.device_id or target.device_type == kDLCPU):
            return self
        cdef dlpack_ref_stream parsed
        _parse_stream(stream, &parsed)
        return _copy_to(self, target, &parsed)

    def tolist(self):
        """Nested Python lists of Python scalars (a scalar for 0-d)."""
        cdef Array c = _host_readable(self)
        cdef int64_t strides[DLPACK_REF_MAX_NDIM]
        cdef int64_t itemsize = dlpack_ref_storage_bits(c._dtype, c._flags) // 8
        cdef int i
        for i in range(c._ndim):
            strides[i] = dlref_byte_stride(c._strides[i], itemsize)
        return dlref_tolist(c._data, strides, c._shape, c._ndim, _type_id(c._dtype))

    def _host_bytes(self):
        """The elements in C order as bytes (copied to the host if needed)."""
        cdef Array c = self
        if not dlpack_ref_device_host_accessible(self._device.device_type):
            c = self.to_device((kDLCPU, 0))
        elif not _is_c_contiguous(self):
            c = self.copy()
        else:
            _host_wait(self)
        return (<char*>c._data)[:_nbytes_of(c)]


# Array.__new__(Array) from Python would make an Array with NULL data, dtype
# (0, 0, 0) and device (0, 0) that exports as such. The core makes Arrays
# by calling the type's C constructor directly (Cython compiles
# Array.__new__(Array) to that call), so the type's tp_new slot, which
# Python-level construction goes through, can refuse.
cdef extern from *:
    """
    static PyObject* dlref_refuse_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
        PyErr_Format(PyExc_TypeError,
                     "%s cannot be created directly; use asarray, from_dlpack, empty or zeros",
                     type->tp_name);
        return NULL;
    }
    static void dlref_refuse_python_new(PyObject* type) {
        ((PyTypeObject*)type)->tp_new = dlref_refuse_new;
        PyType_Modified((PyTypeObject*)type);
    }
    """
    void dlref_refuse_python_new(object type)

dlref_refuse_python_new(Array)


# --- small helpers of the Array --------------------------------------------


cdef inline int _type_id(DLDataType dt) noexcept nogil:
    return dlref_type_id(dt.code, dt.bits, dt.lanes)


cdef inline bint _same_dtype(DLDataType a, DLDataType b) noexcept nogil:
    return a.code == b.code and a.bits == b.bits and a.lanes == b.lanes


cdef inline int64_t _nbytes_of(Array a) noexcept:
    return dlpack_ref_nbytes(_size_of(a), dlpack_ref_storage_bits(a._dtype, a._flags))


cdef extern from *:
    """
    /* The checked span bounds every stride an element is reached through, so
       its byte stride fits int64; an axis of extent 0 or 1, or any axis of an
       empty array, never steps, and its stride may be any int64: where the
       bytes would overflow (undefined in C), 0 stands for it. */
    static inline int64_t dlref_byte_stride(int64_t stride, int64_t itemsize) {
        int64_t bytes;
        return __builtin_mul_overflow(stride, itemsize, &bytes) ? 0 : bytes;
    }
    """
    int64_t dlref_byte_stride(int64_t stride, int64_t itemsize) nogil


cdef object _scalar_of(Array a):
    if _size_of(a) != 1:
        raise TypeError(f"only size-1 Arrays convert to Python scalars; this one has shape {a.shape}")
    cdef Array c = _host_readable(a)
    return dlref_element_object(_type_id(c._dtype), c._data)


cdef inline Array _new_array(int32_t ndim):
    cdef Array a = Array.__new__(Array)
    _set_ndim(a, ndim)
    return a


cdef inline int _set_ndim(Array a, int32_t ndim) except -1:
    """Room for shape and strides: inside the object up to SMALL_NDIM."""
    if ndim <= SMALL_NDIM:
        a._shape = &a._small[0]
        a._strides = &a._small[SMALL_NDIM]
    else:
        a._shape = <int64_t*>malloc(sizeof(int64_t) * 2 * ndim)
        if a._shape == NULL:
            raise MemoryError()
        a._strides = a._shape + ndim
    a._ndim = ndim
    return 0


cdef void _call_deleter(void* managed, bint versioned) noexcept:
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    if versioned:
        mv = <DLManagedTensorVersioned*>managed
        if mv.deleter != NULL:
            mv.deleter(mv)
    else:
        ml = <DLManagedTensor*>managed
        if ml.deleter != NULL:
            ml.deleter(ml)


cdef Array _view(Array src, int32_t ndim):
    """A new Array on src's memory (metadata to be filled by the caller)."""
    cdef Array v = _new_array(ndim)
    v._data = src._data
    v._dtype = src._dtype
    v._device = src._device
    v._flags = src._flags
    v._counted = src._counted
    if dlpack_ref_device_cuda_family(src._device.device_type):
        v._work = _work_of(src)
    v._base = src
    return v


cdef inline int64_t _size_of(Array a) noexcept:
    # An empty array's extents may multiply past int64 (the product rule
    # counts a zero extent first), so a zero is looked for before multiplying.
    cdef int64_t n = 1
    cdef int i
    for i in range(a._ndim):
        if a._shape[i] == 0:
            return 0
    for i in range(a._ndim):
        n *= a._shape[i]
    return n


cdef bint _is_dense(Array a, bint row_major) noexcept:
    """Whether a's elements are packed without gaps in row-major (C) or
    column-major (Fortran) order; size-1 axes may have any stride and an
    empty array is dense in both orders, as NumPy has it."""
    cdef int64_t expected = 1
    cdef int i, axis
    if _size_of(a) == 0:
        return True
    for i in range(a._ndim):
        axis = a._ndim - 1 - i if row_major else i
        if a._shape[axis] != 1 and a._strides[axis] != expected:
            return False
        expected *= a._shape[axis]
    return True


cdef inline bint _is_c_contiguous(Array a) noexcept:
    return _is_dense(a, True)


cdef inline bint _is_f_contiguous(Array a) noexcept:
    return _is_dense(a, False)


cdef inline void _set_c_strides(Array a) noexcept:
    # Unsigned: an empty array with huge extents has strides that overflow
    # int64 (never used to address memory), and signed overflow is undefined.
    cdef uint64_t s = 1
    cdef int i
    for i in range(a._ndim - 1, -1, -1):
        a._strides[i] = <int64_t>s
        s *= <uint64_t>(a._shape[i] if a._shape[i] > 0 else 1)
