# Allocation: new C-contiguous Arrays, on the host (256-byte aligned, from
# the kernels' dlref_aligned_alloc, owned by a C reference count) or on a
# device of the CUDA family (through dlpack_ref's CUDA layer); empty().

cdef extern from *:
    """
    /* Host memory of an Array, owned by a C reference count (the header's
       dlpack_ref_counted) kept in the DLREF_HEAD bytes that
       dlref_aligned_alloc leaves before the data: the Array that allocated
       it holds one count and each export of it another, so an export's
       deleter only gives its count back and the last one frees the block,
       on any thread, with no Python. */
    typedef char dlref_head_fits[sizeof(dlpack_ref_counted) <= DLREF_HEAD_OWNER ? 1 : -1];

    static void dlref_host_release(dlpack_ref_counted* c) { dlref_aligned_free((char*)c + DLREF_HEAD); }

    /* A new block of n bytes with its count at 1 (the caller's), NULL when
       out of memory. */
    static inline dlpack_ref_counted* dlref_host_alloc(size_t n) {
        char* data = (char*)dlref_aligned_alloc(n);
        dlpack_ref_counted* c;
        if (data == NULL) return NULL;
        c = (dlpack_ref_counted*)(data - DLREF_HEAD);
        c->refs = 1;
        c->release = dlref_host_release;
        return c;
    }
    static inline char* dlref_host_data(dlpack_ref_counted* c) { return (char*)c + DLREF_HEAD; }
    static inline int64_t dlref_host_refs(dlpack_ref_counted* c) { return __atomic_load_n(&c->refs, __ATOMIC_RELAXED); }
    """
    dlpack_ref_counted* dlref_host_alloc(size_t n) nogil
    char* dlref_host_data(dlpack_ref_counted* c) nogil
    int64_t dlref_host_refs(dlpack_ref_counted* c) nogil


def _host_memory_holders(Array a):
    """How many holders (the Array that allocated it, each export) the
    count of a's host memory has; None for memory a Python object owns. For
    the tests."""
    return None if a._counted == NULL else dlref_host_refs(a._counted)


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
    sync, handle) of the source and the copy's stream when the memory is the
    destination of a device copy issued next (the CUDA layer allocates it in
    that copy's stream order)."""
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
        a._own_count = dlref_host_alloc(nbytes)
        if a._own_count == NULL:
            raise MemoryError(f"cannot allocate {nbytes} bytes for an Array of shape {tuple([dims[j] for j in range(nd)])!r}")
        a._counted = a._own_count
        a._data = dlref_host_data(a._own_count)
    elif dlpack_ref_device_cuda_family(device.device_type):
        owner = _cuda().allocate(_device_object(device), nbytes, copy_from)
        a._base = owner
        a._work = owner.work
        a._data = <char*><uintptr_t>owner.ptr
    else:
        raise BufferError(
            f"dlpack-ref cannot allocate memory on {_device_object(device)}; supported: cpu, cuda, "
            "cuda_managed, cpu_pinned")
    return a


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
