# The Array type and the producer side (__dlpack__, __dlpack_device__, the
# buffer protocol), plus the small C-level helpers they share.

from dlpack_ref._dtypes import from_triple as _dtype_from_triple, as_dtype as _as_dtype
from dlpack_ref._devices import Device as _Device, DeviceType as _DeviceType, as_device as _as_device

cdef dict _device_cache = {}
cdef dict _dlpack_device_cache = {}
cdef tuple _CPU_DLPACK_DEVICE = (_DeviceType.CPU, 0)


cdef object _device_object(DLDevice d):
    key = (<int>d.device_type, d.device_id)
    dev = _device_cache.get(key)
    if dev is None:
        dev = _Device(<int>d.device_type, d.device_id)
        _device_cache[key] = dev
    return dev


cdef object _dlpack_device_tuple(DLDevice d):
    if d.device_type == kDLCPU and d.device_id == 0:
        return _CPU_DLPACK_DEVICE
    key = (<int>d.device_type, d.device_id)
    t = _dlpack_device_cache.get(key)
    if t is None:
        t = (_DeviceType(<int>d.device_type), d.device_id)
        _dlpack_device_cache[key] = t
    return t


cdef DLDevice _parse_device(object device) except *:
    """A DLDevice from anything as_device accepts; the common (type, id)
    tuples of ints skip the Python layer."""
    cdef DLDevice d
    if type(device) is tuple and len(<tuple>device) == 2:
        t, i = <tuple>device
        if type(t) is int or isinstance(t, _DeviceType):
            if type(i) is int and 0 <= i <= 0x7FFFFFFF and _is_dlpack_device_type(t):
                d.device_type = <DLDeviceType><int>t
                d.device_id = <int32_t>i
                return d
    dev = _as_device(device)
    d.device_type = <DLDeviceType><int>dev.type
    d.device_id = <int32_t>dev.id
    return d


cdef bint _is_dlpack_device_type(object t):
    # DLPack 1.3 enumerates 1-18 except 5 and 6 (never assigned).
    return 1 <= t <= 18 and t != 5 and t != 6


cdef bint _can_access(DLDevice dev, DLDevice mem) noexcept nogil:
    # The one table of in-place access; docs/semantics.md prints it.
    cdef int32_t d = dev.device_type
    cdef int32_t m = mem.device_type
    if d == m and (dev.device_id == mem.device_id or d == kDLCPU):
        return True
    if m == kDLCUDAHost:
        return d == kDLCPU or d == kDLCUDA or d == kDLCUDAHost
    if m == kDLCUDAManaged:
        return d == kDLCPU or d == kDLCUDA or d == kDLCUDAManaged
    if m == kDLROCMHost:
        return d == kDLCPU or d == kDLROCM or d == kDLROCMHost
    return False


def can_access(device, memory_device):
    """Whether code on ``device`` can use memory that lives on
    ``memory_device`` in place, without a copy.

    CPU reads CPU, CPU_PINNED, CUDA_MANAGED and ROCM_PINNED memory in place;
    CUDA:k reads CUDA:k, CUDA_MANAGED and CPU_PINNED memory; every device
    reads its own memory. CPU device ids carry no meaning (there is one host).
    """
    return _can_access(_parse_device(device), _parse_device(memory_device))


cdef int _check_dtype(DLDataType dt) except -1:
    cdef int code = dt.code
    cdef int bits = dt.bits
    cdef int lanes = dt.lanes
    cdef bint ok
    if lanes != 1:
        # The one vector type in use: PyTorch's float4_e2m1fn_x2.
        ok = code == kDLFloat4_e2m1fn and bits == 4 and lanes == 2
    elif code == kDLInt or code == kDLUInt:
        ok = bits == 8 or bits == 16 or bits == 32 or bits == 64
    elif code == kDLFloat:
        ok = bits == 16 or bits == 32 or bits == 64
    elif code == kDLBfloat:
        ok = bits == 16
    elif code == kDLComplex:
        ok = bits == 64 or bits == 128
    elif code == kDLBool:
        ok = bits == 8
    elif kDLFloat8_e3m4 <= code <= kDLFloat8_e8m0fnu:
        ok = bits == 8
    elif code == kDLFloat6_e2m3fn or code == kDLFloat6_e3m2fn:
        ok = bits == 6
    elif code == kDLFloat4_e2m1fn:
        ok = bits == 4
    else:
        ok = False
    if not ok:
        raise BufferError(
            f"unsupported DLDataType(code={code}, bits={bits}, lanes={lanes}): not a DLPack 1.3 "
            "data type (bool, int/uint 8-64, float 16-64, bfloat16, complex 64/128, float8/6/4 "
            "with lanes=1, or float4_e2m1fn with lanes=2)")
    return 0


cdef inline int64_t _storage_bits(DLDataType dt, uint64_t flags) noexcept nogil:
    """Bits one element occupies in memory."""
    cdef int64_t bits = <int64_t>dt.bits * dt.lanes
    if bits < 8 and (flags & FLAG_SUBBYTE_PADDED):
        return 8
    return bits


cdef inline bint _is_packed(DLDataType dt, uint64_t flags) noexcept nogil:
    return _storage_bits(dt, flags) < 8


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
    # CUDA stream (CUstream handle; 0 = legacy default) that orders this memory.
    cdef public uintptr_t _stream
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
        return (_size_of(self) * _storage_bits(self._dtype, self._flags) + 7) // 8

    @property
    def itemsize(self):
        """Bytes per element; 0 for packed sub-byte storage (see ``dtype.bits``)."""
        cdef int64_t bits = _storage_bits(self._dtype, self._flags)
        return bits // 8 if bits >= 8 else 0

    @property
    def dtype(self):
        return _dtype_from_triple(self._dtype.code, self._dtype.bits, self._dtype.lanes)

    @property
    def device(self):
        return _device_object(self._device)

    @property
    def readonly(self):
        return (self._flags & FLAG_READ_ONLY) != 0

    @property
    def subbyte_padded(self):
        """For sub-byte dtypes: True when one element takes a whole byte,
        False when elements are packed (little bit-endian)."""
        return (self._flags & FLAG_SUBBYTE_PADDED) != 0

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

    def __repr__(self):
        from dlpack_ref._format import array_repr
        return array_repr(self)

    def __bool__(self):
        if _size_of(self) != 1:
            raise ValueError(f"the truth value of an Array with {_size_of(self)} elements is ambiguous")
        return bool(self._scalar())

    def __int__(self):
        return int(self._scalar())

    def __float__(self):
        return float(self._scalar())

    def __complex__(self):
        return complex(self._scalar())

    def __index__(self):
        if self._dtype.code != kDLInt and self._dtype.code != kDLUInt:
            raise TypeError(f"only integer Arrays can be used as an index, not {self.dtype}")
        return int(self._scalar())

    def _scalar(self):
        if _size_of(self) != 1:
            raise TypeError(f"only size-1 Arrays convert to Python scalars; this one has shape {self.shape}")
        value = self.tolist()
        while isinstance(value, list):
            value = value[0]
        return value

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
        cdef bint versioned = False
        cdef Array src = self
        cdef uint64_t flags = 0
        cdef DLDevice target
        if max_version is not None:
            versioned = _wants_versioned(max_version)
        if copy is not None and copy is not True and copy is not False:
            raise TypeError(f"copy must be True, False or None, not {copy!r}")
        if stream is not None:
            _check_stream(self, stream)
        if dl_device is None and copy is not True:
            # stream=None is the legacy default stream: nothing to order
            # unless this array's work is on another stream.
            if _cuda_family(self._device.device_type) and (stream is not None or self._stream > 1):
                _cuda().export_sync(self, stream)
        else:
            target = self._device if dl_device is None else _parse_device(dl_device)
            if copy is True or not _can_access(target, self._device):
                if copy is False:
                    raise CopyForbiddenError(
                        f"copy=False, but memory on {self.device} cannot be used in place on "
                        f"{_device_object(target)}: a copy is needed")
                src = _copy_to(self, target, stream)
                flags |= FLAG_IS_COPIED
            elif _cuda_family(self._device.device_type):
                if target.device_type == kDLCPU and stream is None:
                    # Pinned or managed memory read in place by the host: the
                    # data must be readable on return (a stream sync).
                    _cuda().synchronize_for_host(self)
                elif stream is not None or self._stream > 1:
                    _cuda().export_sync(self, stream)
        if versioned:
            return _export_versioned(src, flags | (src._flags & (FLAG_READ_ONLY | FLAG_SUBBYTE_PADDED)))
        if src._flags & FLAG_READ_ONLY:
            raise BufferError(
                "a read-only Array cannot be exported as a legacy 'dltensor' capsule (it has no "
                "read-only flag); pass max_version=(1, 0) or newer, or copy=True")
        if src._dtype.bits * src._dtype.lanes < 8 and (src._flags & FLAG_SUBBYTE_PADDED):
            # Legacy capsules have no flags, so their sub-byte data is packed.
            raise BufferError(
                f"a {self.dtype} Array stored one element per byte cannot be exported as a legacy "
                "'dltensor' capsule (legacy sub-byte data is packed); pass max_version=(1, 0) or newer")
        return _export_legacy(src)

    # --- buffer protocol (CPU-accessible memory) ---------------------------

    def __getbuffer__(self, Py_buffer* view, int flags):
        cdef const char* fmt = _buffer_format(self._dtype)
        if fmt == NULL:
            raise BufferError(f"dtype {self.dtype} has no buffer-protocol format; use from_dlpack to share it")
        if not _host_accessible(self._device.device_type):
            raise BufferError(f"the buffer protocol serves CPU-accessible memory only; this Array is on {self.device}")
        if (flags & PyBUF_WRITABLE) and (self._flags & FLAG_READ_ONLY):
            raise BufferError("this Array is read-only; a writable buffer was requested")
        cdef Py_ssize_t itemsize = self._dtype.bits // 8
        cdef Py_ssize_t* meta = <Py_ssize_t*>malloc(sizeof(Py_ssize_t) * 2 * (self._ndim + 1))
        if meta == NULL:
            raise MemoryError()
        cdef int i
        for i in range(self._ndim):
            meta[i] = <Py_ssize_t>self._shape[i]
            meta[self._ndim + i] = <Py_ssize_t>(self._strides[i] * itemsize)
        if (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS or (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS:
            if not _is_c_contiguous(self):
                free(meta)
                raise BufferError("a C-contiguous buffer was requested but this Array is strided")
        if (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and (flags & PyBUF_ANY_CONTIGUOUS) != PyBUF_ANY_CONTIGUOUS:
            if not _is_f_contiguous(self):
                free(meta)
                raise BufferError("a Fortran-contiguous buffer was requested but this Array is not")
        if (flags & PyBUF_STRIDES) != PyBUF_STRIDES and not _is_c_contiguous(self):
            free(meta)
            raise BufferError("this Array is strided; the consumer must accept strides")
        view.buf = self._data
        view.obj = self
        view.len = _size_of(self) * itemsize
        view.readonly = 1 if (self._flags & FLAG_READ_ONLY) else 0
        view.itemsize = itemsize
        view.format = <char*>fmt if (flags & PyBUF_FORMAT) else NULL
        view.ndim = self._ndim
        view.shape = meta if (flags & PyBUF_ND) else NULL
        view.strides = &meta[self._ndim] if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = meta

    def __releasebuffer__(self, Py_buffer* view):
        free(view.internal)

    # --- indexing ----------------------------------------------------------

    def __getitem__(self, key):
        return _basic_index(self, key)

    def __setitem__(self, key, value):
        cdef Array dst = _basic_index(self, key)
        if dst._flags & FLAG_READ_ONLY:
            raise ValueError("assignment destination is read-only")
        cdef Array src
        if isinstance(value, Array):
            src = value
        else:
            from dlpack_ref._creation import asarray
            src = asarray(value, dtype=dst.dtype)
        if src._dtype.code != dst._dtype.code or src._dtype.bits != dst._dtype.bits or src._dtype.lanes != dst._dtype.lanes:
            from dlpack_ref._creation import asarray
            src = asarray(src.tolist(), dtype=dst.dtype)
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
        from dlpack_ref._format import to_list
        return to_list(self)

    def _host_bytes(self):
        """The elements in C order as bytes (copied to the host if needed)."""
        cdef Array c = self
        if not _host_accessible(self._device.device_type):
            c = self.to_device((kDLCPU, 0))
        elif not _is_c_contiguous(self):
            c = self.copy()
        elif self._device.device_type != kDLCPU:
            _cuda().synchronize_for_host(self)
        return (<char*>c._data)[:(_size_of(c) * _storage_bits(c._dtype, c._flags) + 7) // 8]

    def __array_namespace__(self, *, api_version=None):
        import dlpack_ref
        return dlpack_ref


# --- small helpers of the Array --------------------------------------------

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
    v._stream = src._stream
    v._base = src
    return v


cdef inline int64_t _size_of(Array a) noexcept:
    cdef int64_t n = 1
    cdef int i
    for i in range(a._ndim):
        n *= a._shape[i]
    return n


cdef bint _is_c_contiguous(Array a) noexcept:
    cdef int64_t expected = 1
    cdef int i
    for i in range(a._ndim - 1, -1, -1):
        if a._shape[i] == 0:
            return True
        if a._shape[i] != 1 and a._strides[i] != expected:
            return False
        expected *= a._shape[i]
    return True


cdef bint _is_f_contiguous(Array a) noexcept:
    cdef int64_t expected = 1
    cdef int i
    for i in range(a._ndim):
        if a._shape[i] == 0:
            return True
        if a._shape[i] != 1 and a._strides[i] != expected:
            return False
        expected *= a._shape[i]
    return True


cdef inline void _set_c_strides(Array a) noexcept:
    # Unsigned: an empty array with huge extents has strides that overflow
    # int64 (never used to address memory), and signed overflow is undefined.
    cdef uint64_t s = 1
    cdef int i
    for i in range(a._ndim - 1, -1, -1):
        a._strides[i] = <int64_t>s
        s *= <uint64_t>(a._shape[i] if a._shape[i] > 0 else 1)


cdef bint _wants_versioned(object max_version) except -1:
    if type(max_version) is not tuple or len(<tuple>max_version) != 2:
        raise TypeError(f"max_version must be None or a (major, minor) tuple of ints, not {max_version!r}")
    major, minor = <tuple>max_version
    if type(major) is not int or type(minor) is not int:
        if not (isinstance(major, int) and isinstance(minor, int)) or isinstance(major, bool) or isinstance(minor, bool):
            raise TypeError(f"max_version must be None or a (major, minor) tuple of ints, not {max_version!r}")
    return major >= 1


cdef int _check_stream(Array a, object stream) except -1:
    """Validate a non-None stream argument of __dlpack__ for this array."""
    if not _cuda_family(a._device.device_type):
        if isinstance(stream, int) or hasattr(stream, "__cuda_stream__"):
            raise ValueError(
                f"stream={stream!r} was passed for an Array on {a.device}; only stream=None is "
                "accepted for CPU memory")
        raise TypeError(f"stream must be None for CPU memory, not {type(stream).__name__}")
    if isinstance(stream, bool):
        raise TypeError("stream must be an int, None or an object with __cuda_stream__, not bool")
    if isinstance(stream, int):
        if stream == 0:
            raise ValueError(
                "stream=0 is ambiguous and not allowed (use 1 for the legacy default stream, 2 for "
                "the per-thread default stream, or a CUstream handle > 2)")
        if stream < -1:
            raise ValueError(f"stream={stream} is not valid: expected None, -1, 1, 2 or a CUstream handle > 2")
        return 0
    if hasattr(stream, "__cuda_stream__"):
        return 0
    raise TypeError(
        f"stream must be None, an int or an object with __cuda_stream__, not {type(stream).__name__}")


cdef object _export_versioned(Array a, uint64_t flags):
    return _versioned_capsule(_versioned_block(a, flags))


cdef object _export_legacy(Array a):
    cdef size_t nd = <size_t>a._ndim
    cdef DLManagedTensor* m = <DLManagedTensor*>PyMem_Malloc(sizeof(DLManagedTensor) + 2 * nd * sizeof(int64_t))
    if m == NULL:
        raise MemoryError()
    cdef int64_t* shape = <int64_t*>(<char*>m + sizeof(DLManagedTensor))
    _fill_dltensor(&m.dl_tensor, a, shape)
    m.manager_ctx = <void*>a
    m.deleter = _delete_legacy
    Py_INCREF(a)
    return _legacy_capsule(m)


cdef inline void _fill_dltensor(DLTensor* t, Array a, int64_t* storage) noexcept:
    # shape and strides live right after the managed struct: one allocation.
    cdef int32_t nd = a._ndim
    t.data = a._data
    t.device = a._device
    t.ndim = nd
    t.dtype = a._dtype
    t.shape = storage
    t.strides = storage + nd
    t.byte_offset = 0
    if nd:
        memcpy(storage, a._shape, nd * sizeof(int64_t))
        memcpy(storage + nd, a._strides, nd * sizeof(int64_t))


cdef extern from *:
    """
    /* The PEP 3118 format of a DLPack dtype, or NULL when it has none. */
    static const char* dlref_buffer_format(int code, int bits, int lanes) {
        if (lanes != 1) return NULL;
        switch (code) {
        case 6: return bits == 8 ? "?" : NULL;
        case 0: return bits == 8 ? "b" : bits == 16 ? "h" : bits == 32 ? "i" : bits == 64 ? "q" : NULL;
        case 1: return bits == 8 ? "B" : bits == 16 ? "H" : bits == 32 ? "I" : bits == 64 ? "Q" : NULL;
        case 2: return bits == 16 ? "e" : bits == 32 ? "f" : bits == 64 ? "d" : NULL;
        case 5: return bits == 64 ? "Zf" : bits == 128 ? "Zd" : NULL;
        default: return NULL;
        }
    }
    """
    const char* dlref_buffer_format(int code, int bits, int lanes) noexcept nogil


cdef inline const char* _buffer_format(DLDataType dt) noexcept:
    return dlref_buffer_format(dt.code, dt.bits, dt.lanes)


# --- allocation, copies and views ------------------------------------------

cdef Array _empty(tuple shape, DLDataType dt, DLDevice device, bint padded_subbyte=True):
    """A new C-contiguous Array; host memory is 256-byte aligned."""
    cdef int32_t nd = len(shape)
    if nd > MAX_NDIM:
        raise ValueError(f"ndim={nd} exceeds the maximum of {MAX_NDIM}")
    _check_dtype(dt)
    cdef Array a = _new_array(nd)
    cdef int64_t n = 1
    cdef int i
    cdef int64_t extent
    for i in range(nd):
        extent = shape[i]
        if extent < 0:
            raise ValueError(f"negative dimension {extent} in shape {shape!r}")
        if extent and n > INT64_MAX // extent:
            raise ValueError(f"shape {shape!r} has more elements than fit in int64")
        n *= extent
        a._shape[i] = extent
    _set_c_strides(a)
    a._dtype = dt
    a._device = device
    if padded_subbyte and dt.bits * dt.lanes < 8:
        a._flags = FLAG_SUBBYTE_PADDED
    cdef int64_t bits = _storage_bits(dt, a._flags)
    if n > (INT64_MAX - 7) // bits:
        raise ValueError(f"shape {shape!r} needs more than 2**63 bytes")
    cdef size_t nbytes = <size_t>((n * bits + 7) // 8)
    if device.device_type == kDLCPU:
        a._host_alloc = dlref_aligned_alloc(nbytes)
        if a._host_alloc == NULL:
            raise MemoryError(f"cannot allocate {nbytes} bytes for an Array of shape {shape!r}")
        a._data = <char*>a._host_alloc
    elif _supported_device_type(device.device_type):
        owner = _cuda().allocate(_device_object(device), nbytes)
        a._base = owner
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
    if target.device_type == kDLCPU and src._device.device_type != kDLCPU and stream is not None \
            and not (type(stream) is int and stream == -1):
        # A copy to the host that must not block needs page-locked memory (a
        # copy into pageable memory returns only when done); it is still
        # host memory, so the Array says CPU.
        memory.device_type = kDLCUDAHost
        memory.device_id = 0
    cdef Array dst = _empty(src.shape, src._dtype, memory, (src._flags & FLAG_SUBBYTE_PADDED) != 0)
    dst._device = target
    if src._device.device_type == kDLCPU and target.device_type == kDLCPU:
        _host_copy(dst, src)
    else:
        _cuda().copy_array(dst, src, stream)
    return dst


cdef int _host_copy(Array dst, Array src) except -1:
    """Copy src into dst (same shape) on the host."""
    cdef int64_t bits = _storage_bits(src._dtype, src._flags)
    cdef int64_t itemsize
    cdef int64_t dst_b[MAX_NDIM]
    cdef int64_t src_b[MAX_NDIM]
    cdef int i
    if bits < 8:
        if not (_is_c_contiguous(src) and _is_c_contiguous(dst)):
            raise BufferError(f"strided copies of packed sub-byte {src.dtype} data are not supported")
        memcpy(dst._data, src._data, <size_t>((_size_of(src) * bits + 7) // 8))
        return 0
    itemsize = bits // 8
    for i in range(src._ndim):
        dst_b[i] = dst._strides[i] * itemsize
        src_b[i] = src._strides[i] * itemsize
    with nogil:
        dlref_strided_copy(dst._data, dst_b, src._data, src_b, src._shape, src._ndim, <size_t>itemsize)
    return 0


cdef int _assign(Array dst, Array src) except -1:
    """dst[...] = src with broadcasting of size-1 / missing leading dims."""
    cdef Array b = _broadcast_to(src, dst)
    if _host_accessible(dst._device.device_type) and _host_accessible(b._device.device_type) \
            and dst._device.device_type == kDLCPU and b._device.device_type == kDLCPU:
        _host_copy(dst, b)
    else:
        _cuda().copy_array(dst, b, None, dst_is_new=False)
    return 0


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
    cdef int64_t size, stride, idx
    cdef Py_ssize_t start, stop, step, length
    for k in expanded:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        size = a._shape[axis]
        stride = a._strides[axis]
        if isinstance(k, slice):
            start, stop, step = (<slice>k).indices(size)
            length = len(range(start, stop, step))
            if length > 0:
                offset += start * stride
            out_shape.append(length)
            out_strides.append(stride * step)
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
            offset += idx * stride
        axis += 1
    cdef Array v = _view(a, len(out_shape))
    cdef int i
    for i in range(v._ndim):
        v._shape[i] = out_shape[i]
        v._strides[i] = out_strides[i]
    v._data = a._data + offset * (_storage_bits(a._dtype, a._flags) // 8)
    return v
