# Export: __dlpack__ through the producer call of include/dlpack_ref.h (the
# one place its rules are written, which vendoring libraries call too), the
# buffer protocol, and the one allocation of each capsule: it holds a count
# of host memory allocated here (a deleter with no Python), else the Array.

# The core's forbidden copies raise its public CopyForbiddenError.
dlpack_ref_set_copy_forbidden_error(CopyForbiddenError)


cdef int _order_for_consumer(void* ctx, const DLTensor* t, const dlpack_ref_stream* stream) except -1:
    """The producer call's stream-order callback: the consumer's stream
    (as the header parsed it, its fields handed on as they are) waits for
    the Array's pending work (none: nothing to order)."""
    cdef Array a = <Array>ctx
    if not _work_of(a).idle:
        _cuda().export_sync(_work_of(a), a._device.device_type, a._device.device_id,
                            stream.given, stream.sync, stream.handle)
    return 0


cdef int _copy_for_consumer(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream* stream,
                            DLTensor* out, PyObject** out_owner) except -1:
    """The producer call's copy callback: a copy on target, ordered on the
    consumer's stream (as the header parsed it)."""
    cdef Array c = _copy_to(<Array>ctx, target, stream)
    if dlpack_ref_device_cuda_family(c._device.device_type):
        # The copy ran on a stream of the source's device; the consumer's
        # stream is one of the target's (another GPU, or the host for
        # managed memory with stream=None).
        _cuda().export_copy(_work_of(c), c._device.device_type, c._device.device_id,
                            stream.given, stream.sync, stream.handle)
    _borrow_dltensor(c, out)
    Py_INCREF(c)
    out_owner[0] = <PyObject*>c
    return 0


cdef object _export(Array a, object stream, object max_version, object dl_device, object copy):
    """Array.__dlpack__: the header's producer call (every rule of the
    arguments, the capsule kind, the flags, copies and stream order) on this
    Array. dl_device may be anything as_device accepts (a core extension of
    the standard's tuple): resolved here to its (type, id) tuple first."""
    cdef dlpack_ref_producer p
    cdef dlpack_ref_export_plan plan
    cdef dlpack_ref_counted* memory
    _borrow_dltensor(a, &p.tensor)
    p.owner = <PyObject*>a
    p.read_only = (a._flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0
    p.flags = a._flags
    p.ctx = <void*>a
    p.copy = _copy_for_consumer
    p.order = _order_for_consumer
    if dl_device is not None:
        dl_device = _dlpack_device_tuple(_parse_device(dl_device))
    dlpack_ref_producer_plan(&p, stream, max_version, dl_device, copy, &plan)
    # Host memory allocated here (the Array's, or the copy's) is exported
    # holding a count of it, not the Array: its deleter needs no Python.
    memory = a._counted if plan.copy_owner == NULL else (<Array><object>plan.copy_owner)._counted
    if memory != NULL:
        return dlpack_ref_export_plan_capsule_counted(&plan, memory)
    return dlpack_ref_export_plan_capsule(&plan)


cdef int _fill_buffer(Array a, Py_buffer* view, int flags) except -1:
    """Array.__getbuffer__: host-accessible memory with a buffer format."""
    cdef const char* fmt = _buffer_format(a._dtype)
    if fmt == NULL:
        raise BufferError(f"dtype {a.dtype} has no buffer-protocol format; use from_dlpack to share it")
    if not dlpack_ref_device_host_accessible(a._device.device_type):
        raise BufferError(f"the buffer protocol serves CPU-accessible memory only; this Array is on {a.device}")
    if (flags & PyBUF_WRITABLE) and (a._flags & DLPACK_FLAG_BITMASK_READ_ONLY):
        raise BufferError("this Array is read-only; a writable buffer was requested")
    _host_wait(a)
    cdef Py_ssize_t itemsize = a._dtype.bits // 8
    cdef Py_ssize_t* meta = <Py_ssize_t*>malloc(sizeof(Py_ssize_t) * 2 * (a._ndim + 1))
    if meta == NULL:
        raise MemoryError()
    cdef int i
    for i in range(a._ndim):
        meta[i] = <Py_ssize_t>a._shape[i]
        meta[a._ndim + i] = <Py_ssize_t>dlref_byte_stride(a._strides[i], itemsize)
    if (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS or (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS:
        if not _is_c_contiguous(a):
            free(meta)
            raise BufferError("a C-contiguous buffer was requested but this Array is strided")
    if (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and (flags & PyBUF_ANY_CONTIGUOUS) != PyBUF_ANY_CONTIGUOUS:
        if not _is_f_contiguous(a):
            free(meta)
            raise BufferError("a Fortran-contiguous buffer was requested but this Array is not")
    if (flags & PyBUF_STRIDES) != PyBUF_STRIDES and not _is_c_contiguous(a):
        free(meta)
        raise BufferError("this Array is strided; the consumer must accept strides")
    view.buf = a._data
    view.obj = a
    view.len = _size_of(a) * itemsize
    view.readonly = 1 if (a._flags & DLPACK_FLAG_BITMASK_READ_ONLY) else 0
    view.itemsize = itemsize
    view.format = <char*>fmt if (flags & PyBUF_FORMAT) else NULL
    view.ndim = a._ndim
    view.shape = meta if (flags & PyBUF_ND) else NULL
    view.strides = &meta[a._ndim] if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
    view.suboffsets = NULL
    view.internal = meta
    return 0


cdef inline void _borrow_dltensor(Array a, DLTensor* t) noexcept:
    """t describes a's memory with a's own shape and strides (valid while a lives)."""
    t.data = a._data
    t.device = a._device
    t.ndim = a._ndim
    t.dtype = a._dtype
    t.shape = a._shape
    t.strides = a._strides
    t.byte_offset = 0


cdef DLManagedTensorVersioned* _versioned_block(Array a, uint64_t flags) except NULL:
    """The single allocation of a versioned export, holding a count of a's
    memory where it was allocated here, else one reference to a."""
    cdef DLTensor t
    _borrow_dltensor(a, &t)
    if a._counted != NULL:
        return dlpack_ref_api_counted_block(&t, a._counted, flags)
    return dlpack_ref_api_versioned_block(&t, <PyObject*>a, flags)


def _stream_fields(stream):
    """``(sync, handle)`` of a DLPack ``stream`` value for CUDA-family
    memory, parsed by the header's one stream rule (the handle 1 for None
    and for -1, whose sync is 0). For the Python entry that takes a stream
    (dlpack_ref.cuda.stream)."""
    cdef dlpack_ref_stream s
    dlpack_ref_stream_converter(stream, &s)
    return s.sync, s.handle


cdef inline int _parse_stream(object stream, dlpack_ref_stream* parsed) except -1:
    """A `stream` argument of the core's own (to_device), parsed where it
    enters into the struct the copy receives."""
    dlpack_ref_stream_converter(stream, parsed)
    return 0
