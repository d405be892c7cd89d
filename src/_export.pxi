# Export: the arguments of __dlpack__, the buffer protocol, and the one
# allocation of each capsule (built by dlpack_ref_api.pxd's
# dlpack_ref_api_versioned_block / dlpack_ref_api_new_legacy, whose deleters
# and capsule destructors are the ones vendoring libraries use too).

cdef bint _wants_versioned(object max_version) except -1:
    if type(max_version) is not tuple or len(<tuple>max_version) != 2:
        raise TypeError(f"max_version must be None or a (major, minor) tuple of ints, not {max_version!r}")
    major, minor = <tuple>max_version
    if type(major) is not int or type(minor) is not int:
        if not (isinstance(major, int) and isinstance(minor, int)) or isinstance(major, bool) or isinstance(minor, bool):
            raise TypeError(f"max_version must be None or a (major, minor) tuple of ints, not {max_version!r}")
    return major >= 1


cdef object _export(Array a, object stream, object max_version, object dl_device, object copy):
    """Array.__dlpack__."""
    cdef bint versioned = False
    cdef Array src = a
    cdef uint64_t flags = 0
    cdef DLDevice target
    if max_version is not None:
        versioned = _wants_versioned(max_version)
    if copy is not None and copy is not True and copy is not False:
        raise TypeError(f"copy must be True, False or None, not {copy!r}")
    cdef bint cuda_family = dlpack_ref_device_cuda_family(a._device.device_type)
    if stream is not None:
        _stream_handle(stream, cuda_memory=cuda_family, where=str(a.device))
    if dl_device is None and copy is not True:
        # Nothing to order when no work is pending.
        if cuda_family and not _work_of(a).idle:
            _cuda().export_sync(_work_of(a), a._device.device_type, a._device.device_id, stream)
    else:
        target = a._device if dl_device is None else _parse_device(dl_device)
        if copy is True or not _can_access(target, a._device):
            if copy is False:
                raise CopyForbiddenError(
                    f"copy=False, but memory on {a.device} cannot be used in place on "
                    f"{_device_object(target)}: a copy is needed")
            src = _copy_to(a, target, stream)
            flags |= DLPACK_FLAG_BITMASK_IS_COPIED
            if dlpack_ref_device_cuda_family(src._device.device_type):
                # The copy ran on a stream of the source's device; the
                # consumer's stream is one of the target's (another GPU, or
                # the host for managed memory with stream=None).
                _cuda().export_copy(_work_of(src), src._device.device_type, src._device.device_id, stream)
        elif cuda_family and not _work_of(a).idle:
            # Pinned or managed memory read in place by the host with
            # stream=None is readable on return (export_sync waits).
            _cuda().export_sync(_work_of(a), a._device.device_type, a._device.device_id, stream)
    if versioned:
        return _export_versioned(src, flags | (src._flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)))
    if src._flags & DLPACK_FLAG_BITMASK_READ_ONLY:
        raise BufferError(
            "a read-only Array cannot be exported as a legacy 'dltensor' capsule (it has no "
            "read-only flag); pass max_version=(1, 0) or newer, or copy=True")
    if src._dtype.bits * src._dtype.lanes < 8 and (src._flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED):
        # Legacy capsules have no flags, so their sub-byte data is packed.
        raise BufferError(
            f"a {a.dtype} Array stored one element per byte cannot be exported as a legacy "
            "'dltensor' capsule (legacy sub-byte data is packed); pass max_version=(1, 0) or newer")
    return _export_legacy(src)


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
    """The single allocation of a versioned export, owning one reference to a."""
    cdef DLTensor t
    _borrow_dltensor(a, &t)
    return dlpack_ref_api_versioned_block(&t, <PyObject*>a, flags)


cdef object _export_versioned(Array a, uint64_t flags):
    return dlpack_ref_api_wrap_versioned(_versioned_block(a, flags))


cdef object _export_legacy(Array a):
    cdef DLTensor t
    _borrow_dltensor(a, &t)
    return dlpack_ref_api_new_legacy(&t, <PyObject*>a)
