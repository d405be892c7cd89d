# The Array: its metadata, Python scalars, views and indexing, allocation,
# copies and assignment. Strides count elements, as DLPack does.

cdef enum:
    # ndim up to this many keeps shape and strides inside the Array (no malloc).
    SMALL_NDIM = 4


class CopyForbiddenError(BufferError, ValueError):
    """Raised when ``copy=False`` and only a copy could satisfy the request.

    It is both a BufferError and a ValueError because the array API standard
    names both for this case (``__dlpack__`` says BufferError, ``from_dlpack``
    and ``asarray`` say ValueError); catching either works.
    """


cimport cython


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
    # Host memory allocated here (256-byte aligned), freed in __dealloc__.
    cdef void* _host_alloc
    # CUDA-family memory: the record of its pending work (dlpack_ref.cuda's
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
        if self._host_alloc != NULL:
            dlref_aligned_free(self._host_alloc)
            self._host_alloc = NULL

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
        return _copy_to(self, self._device, None)

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
        return _copy_to(self, target, stream)

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

# Below this many elements a copy or conversion keeps the GIL (releasing it
# costs more than the work).
cdef enum:
    _NOGIL_ELEMENTS = 1 << 14


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


cdef dict _dldtype_cache = {}

cdef DLDataType _dldtype(object dtype) except *:
    """The DLDataType of anything as_dtype accepts (cached per hashable key)."""
    cdef DLDataType dt
    if type(dtype) is _DType:
        # Read as it is: hashing a DType for the cache runs its Python __hash__.
        dt.code = <uint8_t>dtype.code
        dt.bits = <uint8_t>dtype.bits
        dt.lanes = <uint16_t>dtype.lanes
        return dt
    try:
        triple = _dldtype_cache.get(dtype)
    except TypeError:
        triple = None
    if triple is None:
        triple = _as_dtype(dtype).__dlpack_data_type__()
        try:
            _dldtype_cache[dtype] = triple
        except TypeError:
            pass
    dt.code = <uint8_t>triple[0]
    dt.bits = <uint8_t>triple[1]
    dt.lanes = <uint16_t>triple[2]
    return dt


cdef dict _dtype_names = {}

cdef bytes _dtype_name_bytes(DLDataType dt):
    """The dtype's name for the kernels' messages (cached)."""
    cdef uint32_t key = (<uint32_t>dt.code << 24) | (<uint32_t>dt.bits << 16) | dt.lanes
    name = _dtype_names.get(key)
    if name is None:
        name = _dtype_from_triple(dt.code, dt.bits, dt.lanes).name.encode()
        _dtype_names[key] = name
    return name


cdef Array _host_readable(Array a):
    """a itself when the host may read it now, else a host copy (packed
    sub-byte data is unpacked to one code per byte)."""
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    cdef Array out
    if not dlpack_ref_device_host_accessible(a._device.device_type):
        a = _copy_to(a, cpu, None)
    elif a._device.device_type != kDLCPU:
        _host_wait(a)
    if _is_packed(a._dtype, a._flags):
        out = _empty_dims(a._shape, a._ndim, a._dtype, cpu)
        _host_convert(out, a)
        return out
    return a


cdef object _scalar_of(Array a):
    if _size_of(a) != 1:
        raise TypeError(f"only size-1 Arrays convert to Python scalars; this one has shape {a.shape}")
    cdef Array c = _host_readable(a)
    return dlref_element_object(_type_id(c._dtype), c._data)


cdef Array _integer_index(Array a, tuple key):
    """a[i, j, ...] with one int per axis: a 0-d view, without the general
    indexing walk. Other keys of that length go to _basic_index."""
    cdef int i
    cdef int64_t offset = 0
    cdef int64_t size, idx
    for k in key:
        if type(k) is not int:
            return _basic_index(a, key)
    if _is_packed(a._dtype, a._flags):
        return _basic_index(a, key)
    for i in range(a._ndim):
        k = key[i]
        size = a._shape[i]
        if not -size <= k < size:
            raise IndexError(f"index {k} is out of bounds for axis {i} with size {size}")
        idx = k
        if idx < 0:
            idx += size
        offset += idx * a._strides[i]
    cdef Array v = _view(a, 0)
    v._data = a._data + offset * (dlpack_ref_storage_bits(a._dtype, a._flags) // 8)
    return v


cdef Array _as_array(object obj):
    """A zero-copy Array of a DLPack or buffer-protocol object."""
    if isinstance(obj, Array):
        return obj
    if hasattr(obj, "__dlpack__"):
        return _import_plain(obj)
    return _from_buffer(obj)


cdef Array _from_python(object obj, DLDataType dt, bint infer=False):
    """A new host Array of a Python scalar or nested list/tuple, written in C
    (dtype inferred when infer: bool, int64, float64 or complex128)."""
    cdef int64_t shape[DLPACK_REF_MAX_NDIM]
    cdef int kind = DLREF_KIND_NONE
    cdef int nd = dlref_seq_shape(obj, shape)
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    dlref_seq_check(obj, 0, nd, shape, &kind)
    cdef list found
    if kind == DLREF_KIND_OTHER:
        # Leaves of other libraries: read one by one (the rare path).
        found = []
        obj = _other_leaves(obj, nd, found)
        if infer:
            dt = _dldtype(_result_type(found))
            infer = False
    if infer:
        dt.lanes = 1
        if kind == DLREF_KIND_OF_BOOL:
            dt.code = kDLBool; dt.bits = 8
        elif kind == DLREF_KIND_OF_INT:
            dt.code = kDLInt; dt.bits = 64
        elif kind == DLREF_KIND_OF_COMPLEX:
            dt.code = kDLComplex; dt.bits = 128
        else:
            dt.code = kDLFloat; dt.bits = 64
    cdef int out_nd = nd
    if dt.lanes > 1:
        if nd == 0 or shape[nd - 1] != dt.lanes:
            raise ValueError(
                f"a {_dtype_from_triple(dt.code, dt.bits, dt.lanes)} element is a sequence of {dt.lanes} "
                f"values (one per lane); got a sequence of shape {tuple([shape[i] for i in range(nd)])}")
        out_nd = nd - 1
    cdef Array a = _empty_dims(shape, out_nd, dt, cpu)
    name = _dtype_name_bytes(dt)
    dlref_seq_fill(obj, nd, a._data, _type_id(dt), name)
    return a


cdef object _DT_BOOL = _as_dtype("bool")
cdef object _DT_INT64 = _as_dtype("int64")
cdef object _DT_FLOAT64 = _as_dtype("float64")
cdef object _DT_COMPLEX128 = _as_dtype("complex128")


cdef object _other_leaves(object o, int levels, list found):
    """o (a nested sequence `levels` deep, or a leaf) with every leaf that
    carries a dtype -- a NumPy or ml_dtypes scalar, a 0-d array of any
    library -- replaced by its Python value, and the dtype of each leaf
    appended to `found`: its own for those, the default one for Python
    scalars and for other numbers (__index__: int64, __float__: float64,
    __complex__: complex128), as NumPy reads them (docs/semantics.md)."""
    if levels:
        return [_other_leaves(item, levels - 1, found) for item in o]
    if isinstance(o, bool):
        found.append(_DT_BOOL)
    elif isinstance(o, int):
        found.append(_DT_INT64)
    elif isinstance(o, float):
        found.append(_DT_FLOAT64)
    elif isinstance(o, complex):
        found.append(_DT_COMPLEX128)
    else:
        dtype = getattr(o, "dtype", None)
        if dtype is not None and getattr(o, "shape", None) == ():
            found.append(_as_dtype(dtype))
            return o.tolist()
        kind = dlref_other_leaf_kind(o)
        found.append(_DT_INT64 if kind == DLREF_KIND_OF_INT else
                     _DT_FLOAT64 if kind == DLREF_KIND_OF_FLOAT else _DT_COMPLEX128)
    return o


def _from_values(obj, dtype=None):
    """A new host Array of a Python scalar or a nested list/tuple (for
    asarray): shape and dtype found in one walk, values written in C."""
    cdef DLDataType dt
    if dtype is None:
        return _from_python(obj, dt, True)
    return _from_python(obj, _dldtype(dtype))


def _rows(Array a, int64_t n):
    """a[0], a[1], ...: what NumPy's iteration yields (0-d Arrays for a 1-d a,
    where NumPy yields its scalars)."""
    cdef int64_t i
    for i in range(n):
        yield a[i]


def _from_bytes(const unsigned char[::1] data not None, dtype, int64_t count, bint padded=True):
    """A 1-d host Array of ``count`` elements whose storage is ``data``
    (sub-byte types one code per byte when ``padded``, else packed)."""
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    cdef Array a = _empty((count,), _dldtype(dtype), cpu, padded)
    cdef int64_t n = _nbytes_of(a)
    if data.shape[0] != n:
        raise ValueError(f"{count} elements of {a.dtype} take {n} bytes, got {data.shape[0]}")
    if n:
        memcpy(a._data, &data[0], <size_t>n)
    return a


def _minifloat_params():
    """name -> (exponent bits, mantissa bits, bias, style) of the float8/6/4
    types, from the kernels' table."""
    return {(<bytes>dlref_minifloats[i].name).decode(): (
        dlref_minifloats[i].exp_bits, dlref_minifloats[i].man_bits, dlref_minifloats[i].bias,
        (<bytes>dlref_style_names[dlref_minifloats[i].style]).decode()) for i in range(11)}



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
    if dlpack_ref_device_cuda_family(src._device.device_type):
        v._work = _work_of(src)
    v._base = src
    return v


cdef object _work_of(Array a):
    """The pending-work record of a's memory, made on first use. Memory
    that was not allocated here was handed over ordered on the legacy
    default stream of its device (DLPack's stream=None)."""
    w = a._work
    if w is not None:       # set once, never replaced: safe to read unlocked
        return w
    # Without the GIL two threads could each make a record and one write
    # would be recorded in the record the other replaced.
    with cython.critical_section(a):
        if a._work is None:
            a._work = _PendingWork(a._device.device_id)
        return a._work


cdef int _host_wait(Array a) except -1:
    """Before the host reads a's memory in place: the pending work is done."""
    if dlpack_ref_device_cuda_family(a._device.device_type):
        w = _work_of(a)
        if not w.idle:
            _cuda().host_wait(w)
    return 0


cdef tuple _block(Array a, int64_t itemsize):
    """The description of a's memory that dlpack_ref.cuda copies from/to
    (CPU Arrays on pinned memory, from a copy to the host on a stream, keep
    the record of that memory, so its free waits for the copy)."""
    return (<uintptr_t>a._data, a._device.device_type, a._device.device_id,
            _work_of(a) if dlpack_ref_device_cuda_family(a._device.device_type) else a._work,
            tuple([dlref_byte_stride(a._strides[i], itemsize) for i in range(a._ndim)]), _is_c_contiguous(a))


cdef int _device_copy(Array dst, Array src, object stream) except -1:
    """Copy src into dst (same shape) through dlpack_ref.cuda."""
    cdef int64_t bits = dlpack_ref_storage_bits(src._dtype, src._flags)
    cdef int64_t itemsize = bits // 8 if bits >= 8 else 0
    if itemsize and src._device.device_type == kDLCPU and dst._device.device_type != kDLCPU \
            and not _is_c_contiguous(src):
        # Gather pageable host data on the host: one transfer instead of many.
        src = _copy_to(src, src._device, None)
    cuda = _cuda()
    cuda.copy_array(cuda.Block(*_block(dst, itemsize)), cuda.Block(*_block(src, itemsize)), src.shape,
                    itemsize, <size_t>((_size_of(src) * bits + 7) // 8), stream)
    return 0


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


# --- allocation, copies and views ------------------------------------------

cdef Array _empty(tuple shape, DLDataType dt, DLDevice device, bint padded_subbyte=True):
    """A new C-contiguous Array; host memory is 256-byte aligned."""
    cdef int32_t nd = len(shape)
    if nd > DLPACK_REF_MAX_NDIM:
        raise ValueError(f"ndim={nd} exceeds the maximum of {DLPACK_REF_MAX_NDIM}")
    cdef int64_t dims[DLPACK_REF_MAX_NDIM]
    cdef int i
    for i in range(nd):
        if not -INT64_MAX <= shape[i] <= INT64_MAX:
            raise ValueError(f"dimension {shape[i]} in shape {shape!r} does not fit int64")
        dims[i] = shape[i]
    return _empty_dims(dims, nd, dt, device, padded_subbyte)


cdef Array _empty_dims(const int64_t* dims, int32_t nd, DLDataType dt, DLDevice device, bint padded_subbyte=True,
                       tuple copy_from=None):
    """_empty of a shape given as a C array (no tuple made: copies of
    existing Arrays call this). ``copy_from``: (device type, device id,
    stream) of the source when the memory is the destination of a device
    copy issued next (dlpack_ref.cuda allocates it in that copy's stream
    order)."""
    dlpack_check_dtype(dt)
    cdef Array a = _new_array(nd)
    cdef int i
    for i in range(nd):
        a._shape[i] = dims[i]
    # The documented rule: the product of the extents fits int64 (an empty
    # shape's product is 0, whatever its other extents).
    cdef int64_t n = dlpack_ref_element_count(a._shape, nd)
    if n == -1:
        raise ValueError(f"negative dimension {min([dims[j] for j in range(nd)])} in shape "
                         f"{tuple([dims[j] for j in range(nd)])!r}")
    if n == -2:
        raise ValueError(f"shape {tuple([dims[j] for j in range(nd)])!r} has more elements than fit in int64")
    _set_c_strides(a)
    a._dtype = dt
    a._device = device
    if padded_subbyte and dt.bits * dt.lanes < 8:
        a._flags = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
    cdef int64_t bits = dlpack_ref_storage_bits(dt, a._flags)
    if n > (INT64_MAX - 7) // bits:
        raise ValueError(f"shape {tuple([dims[j] for j in range(nd)])!r} needs more than 2**63 bytes")
    cdef size_t nbytes = <size_t>dlpack_ref_nbytes(n, bits)
    if device.device_type == kDLCPU:
        a._host_alloc = dlref_aligned_alloc(nbytes)
        if a._host_alloc == NULL:
            raise MemoryError(f"cannot allocate {nbytes} bytes for an Array of shape {tuple([dims[j] for j in range(nd)])!r}")
        a._data = <char*>a._host_alloc
    elif dlpack_ref_device_supported(device.device_type):
        owner = _cuda().allocate(_device_object(device), nbytes, copy_from)
        a._base = owner
        a._work = owner.work
        a._data = <char*><uintptr_t>owner.ptr
    else:
        raise BufferError(
            f"dlpack-ref cannot allocate memory on {_device_object(device)}; supported: cpu, cuda, "
            "cuda_managed, cpu_pinned")
    return a


cdef Array _copy_to(Array src, DLDevice target, object stream):
    """A C-contiguous copy of src on target; device transfers go through
    dlpack_ref.cuda, ordered on `stream`."""
    cdef DLDevice memory = target
    cdef tuple copy_from = None
    if target.device_type == kDLCPU and src._device.device_type != kDLCPU and (
            not dlpack_ref_device_host_accessible(src._device.device_type)
            or (stream is not None and not (type(stream) is int and stream == -1))):
        # A copy of device memory to the host lands in page-locked memory:
        # it runs at pinned bandwidth (a copy into pageable memory is staged
        # by the driver) and, on a stream, does not block (one into pageable
        # memory returns only when done). It is still host memory, so the
        # Array says CPU. See docs/cuda.md, "The allocation model".
        memory.device_type = kDLCUDAHost
        memory.device_id = 0
    if src._device.device_type != kDLCPU or target.device_type != kDLCPU:
        copy_from = (src._device.device_type, src._device.device_id, stream)
    cdef Array dst = _empty_dims(src._shape, src._ndim, src._dtype, memory,
                                 (src._flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0, copy_from)
    dst._device = target
    if src._device.device_type == kDLCPU and target.device_type == kDLCPU:
        _host_copy(dst, src)
    else:
        _device_copy(dst, src, stream)
    return dst


cdef int _host_copy(Array dst, Array src) except -1:
    """Copy src into dst (same shape) on the host."""
    cdef int64_t bits = dlpack_ref_storage_bits(src._dtype, src._flags)
    cdef int64_t itemsize
    cdef int64_t src_b[DLPACK_REF_MAX_NDIM]
    cdef int i
    if _size_of(src) == 0:
        return 0
    if bits < 8:
        if not (_is_c_contiguous(src) and _is_c_contiguous(dst)):
            raise BufferError(f"strided copies of packed sub-byte {src.dtype} data are not supported")
        memcpy(dst._data, src._data, <size_t>_nbytes_of(src))
        return 0
    itemsize = bits // 8
    for i in range(src._ndim):
        src_b[i] = dlref_byte_stride(src._strides[i], itemsize)
    return _host_copy_from(dst, src._data, src_b, itemsize)


cdef int _host_copy_from(Array dst, const char* src, const int64_t* src_b, int64_t itemsize) except -1:
    """Copy host memory at src (dst's shape, byte strides src_b, itemsize
    bytes an item) into dst: small copies with the GIL held, the rest
    without it, shared out over the worker pool."""
    cdef int64_t dst_b[DLPACK_REF_MAX_NDIM]
    cdef int64_t count = _size_of(dst)
    cdef int i, threads
    if count == 0:
        return 0
    for i in range(dst._ndim):
        dst_b[i] = dlref_byte_stride(dst._strides[i], itemsize)
    if count < _NOGIL_ELEMENTS:
        dlref_strided_copy(dst._data, dst_b, src, src_b, dst._shape, dst._ndim, <size_t>itemsize, 1)
    else:
        threads = _pool_threads()
        with nogil:
            dlref_strided_copy(dst._data, dst_b, src, src_b, dst._shape, dst._ndim, <size_t>itemsize, threads)
    return 0


cdef int _host_convert(Array dst, Array src) except -1:
    """Copy src into dst (same shape, host memory, dst not packed) changing
    the dtype element by element in C (src/dlref_kernels.h)."""
    cdef int64_t src_bits = dlpack_ref_storage_bits(src._dtype, src._flags)
    cdef int64_t dst_item = dlpack_ref_storage_bits(dst._dtype, dst._flags) // 8
    cdef int64_t dst_b[DLPACK_REF_MAX_NDIM]
    cdef int64_t src_b[DLPACK_REF_MAX_NDIM]
    cdef int64_t refused
    cdef int i
    cdef int dt = _type_id(dst._dtype)
    cdef int st = _type_id(src._dtype)
    if src_bits < 8 and not _is_c_contiguous(src):
        raise BufferError(f"strided conversions of packed sub-byte {src.dtype} data are not supported")
    for i in range(src._ndim):
        dst_b[i] = dlref_byte_stride(dst._strides[i], dst_item)
        src_b[i] = dlref_byte_stride(src._strides[i], src_bits // 8)
    cdef int threads
    if _size_of(src) < _NOGIL_ELEMENTS:
        refused = dlref_convert(dst._data, dst_b, dt, src._data, src_b, st, <int>src_bits, src._shape, src._ndim, 1)
    else:
        threads = _pool_threads()
        with nogil:
            refused = dlref_convert(dst._data, dst_b, dt, src._data, src_b, st, <int>src_bits, src._shape,
                                    src._ndim, threads)
    if refused < 0:
        raise TypeError(f"no element conversion from {src.dtype} to {dst.dtype}: a {src.dtype if src._dtype.lanes > 1 else dst.dtype} "
                        "element holds several values (one per lane)")
    if refused:
        raise ValueError(f"{dst.dtype} has no NaN: {refused} NaN value(s) cannot be stored")
    return 0


cdef Array _converted(Array src, DLDataType dt):
    """src as a new C-contiguous Array of dtype dt on src's device (a copy)."""
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    cdef Array host = _host_readable(src)
    cdef Array out = _empty_dims(src._shape, src._ndim, dt, cpu)
    _host_convert(out, host)
    if src._device.device_type != kDLCPU:
        return _copy_to(out, src._device, None)
    return out




cdef int _assign(Array dst, Array src) except -1:
    """dst[...] = src with broadcasting of size-1 / missing leading dims.

    Overlap-safe as NumPy is: when the bytes src reads and the bytes dst
    writes intersect (a reversed, shifted or transposed view of the same
    memory), src is copied to a temporary first."""
    if _overlaps(dst, src):
        src = src.copy()
    cdef Array b = _broadcast_to(src, dst)
    if dlpack_ref_device_host_accessible(dst._device.device_type) and dlpack_ref_device_host_accessible(b._device.device_type) \
            and dst._device.device_type == kDLCPU and b._device.device_type == kDLCPU:
        _host_copy(dst, b)
    else:
        _device_copy(dst, b, None)
    return 0


cdef inline void _byte_range(Array a, uintptr_t* low, uintptr_t* high) noexcept:
    """[low, high): the bytes a non-empty Array's elements occupy."""
    cdef int64_t itemsize = (dlpack_ref_storage_bits(a._dtype, a._flags) + 7) // 8
    cdef int64_t below = 0
    cdef int64_t above = 0
    cdef int i
    for i in range(a._ndim):
        if a._shape[i] > 1:
            if a._strides[i] < 0:
                below += a._strides[i] * (a._shape[i] - 1)
            else:
                above += a._strides[i] * (a._shape[i] - 1)
    low[0] = <uintptr_t>(a._data + below * itemsize)
    high[0] = <uintptr_t>(a._data + (above + 1) * itemsize)


cdef bint _overlaps(Array a, Array b) noexcept:
    """Whether two Arrays on one device share any byte (empty ones share none)."""
    cdef uintptr_t a_low, a_high, b_low, b_high
    if a._device.device_type != b._device.device_type or a._device.device_id != b._device.device_id:
        return False
    if _size_of(a) == 0 or _size_of(b) == 0:
        return False
    _byte_range(a, &a_low, &a_high)
    _byte_range(b, &b_low, &b_high)
    return a_low < b_high and b_low < a_high


cdef Array _broadcast_to(Array src, Array like):
    if src._ndim > like._ndim:
        raise ValueError(f"cannot broadcast shape {src.shape} to {like.shape}")
    cdef Array v = _view(src, like._ndim)
    cdef int lead = like._ndim - src._ndim
    cdef int i
    for i in range(like._ndim):
        v._shape[i] = like._shape[i]
        if i < lead:
            v._strides[i] = 0
        elif src._shape[i - lead] == like._shape[i]:
            v._strides[i] = src._strides[i - lead]
        elif src._shape[i - lead] == 1:
            v._strides[i] = 0
        else:
            raise ValueError(f"cannot broadcast shape {src.shape} to {like.shape}")
    return v


cdef Array _basic_index(Array a, object key):
    """Integers, slices (any step), Ellipsis and None: always a view."""
    if _is_packed(a._dtype, a._flags):
        raise TypeError(f"indexing packed sub-byte {a.dtype} data is not supported; copy it to a padded Array first")
    if type(key) is not tuple:
        key = (key,)
    cdef int n_real = 0
    cdef bint seen_ellipsis = False
    for k in key:
        if k is Ellipsis:
            if seen_ellipsis:
                raise IndexError("an index can only have a single ellipsis ('...')")
            seen_ellipsis = True
        elif k is not None:
            n_real += 1
    if n_real > a._ndim:
        raise IndexError(f"too many indices for an Array of ndim {a._ndim}: {n_real} given")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (a._ndim - n_real))
        else:
            expanded.append(k)
    if not seen_ellipsis:
        expanded.extend([slice(None)] * (a._ndim - n_real))
    out_shape = []
    out_strides = []
    cdef int64_t offset = 0
    cdef int axis = 0
    cdef int64_t size, stride, idx, length
    # In a non-empty Array every element's offset fits int64 (checked when it
    # was made), so offsets and strides of its views do too; an empty one
    # addresses no element, so none is computed (its extents and strides may
    # be anything the product rule allows).
    cdef bint empty = _size_of(a) == 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        size = a._shape[axis]
        stride = a._strides[axis]
        if isinstance(k, slice):
            # Python ints: a step or bound of any size is clamped as NumPy does.
            start, stop, step = (<slice>k).indices(size)
            length = len(range(start, stop, step))
            if length > 0 and not empty:
                offset += <int64_t>start * stride
            out_shape.append(length)
            # One element or none: the stride never addresses memory; it is
            # NumPy's stride * step when that fits int64, else the axis's own.
            if length <= 1:
                out_strides.append(stride * step if -INT64_MAX <= stride * step <= INT64_MAX else stride)
            elif empty:
                out_strides.append(<int64_t>(<uint64_t>stride * <uint64_t><int64_t>step))
            else:
                out_strides.append(stride * <int64_t>step)
        elif isinstance(k, bool) or not hasattr(k, "__index__"):
            raise IndexError(
                f"only integers, slices, Ellipsis and None are valid indices (basic indexing), not {type(k).__name__}")
        else:
            index = k.__index__()  # a Python int: any size is compared, none overflows
            if index < -size or index >= size:
                raise IndexError(f"index {index} is out of bounds for axis {axis} with size {size}")
            idx = index
            if idx < 0:
                idx += size
            if not empty:
                offset += idx * stride
        axis += 1
    if len(out_shape) > DLPACK_REF_MAX_NDIM:
        raise IndexError(
            f"the index {key!r} makes an Array of {len(out_shape)} dimensions; the maximum is "
            f"{DLPACK_REF_MAX_NDIM}")
    cdef Array v = _view(a, len(out_shape))
    cdef int i
    for i in range(v._ndim):
        v._shape[i] = out_shape[i]
        v._strides[i] = out_strides[i]
    v._data = a._data + offset * (dlpack_ref_storage_bits(a._dtype, a._flags) // 8)
    return v


def empty(shape, *, dtype=None, device=None):
    """An uninitialized C-contiguous Array (host memory 256-byte aligned).
    ``dtype`` defaults to float64, ``device`` to the CPU."""
    return _empty_of(shape, dtype, device)


cdef Array _empty_of(object shape, object dtype, object device):
    """empty(shape, dtype=dtype, device=device), for the core's own callers."""
    cdef DLDevice dev
    cdef DLDataType dt
    if device is None:
        dev.device_type = kDLCPU
        dev.device_id = 0
    else:
        dev = _parse_device(device)
    if dtype is None:
        dt.code = kDLFloat
        dt.bits = 64
        dt.lanes = 1
    else:
        dt = _dldtype(dtype)
    return _empty(_shape_tuple(shape), dt, dev)


cdef tuple _shape_tuple(object shape):
    if isinstance(shape, int) and not isinstance(shape, bool):
        return (shape,)
    try:
        t = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, not {type(shape).__name__}") from None
    for s in t:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"shape entries must be ints, got {s!r} in {shape!r}")
    return t
