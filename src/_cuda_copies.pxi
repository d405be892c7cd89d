# CUDA copies: memory of the CUDA family, the record of its pending work
# (shared by an Array and its views), the host's wait before it reads such
# memory in place, and transfers through dlpack_ref's CUDA layer.


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


cdef object _block(Array a, tuple byte_strides):
    """The description of a's memory that the CUDA layer copies from/to,
    with the strides of the copy's coalesced shape (CPU Arrays on pinned
    memory, from a copy to the host on a stream, keep the record of that
    memory, so its free waits for the copy)."""
    return _cuda().Block(<uintptr_t>a._data, a._device.device_type, a._device.device_id,
                         _work_of(a) if dlpack_ref_device_cuda_family(a._device.device_type) else a._work,
                         byte_strides, _is_c_contiguous(a))


cdef tuple _coalesced(Array dst, Array src, int64_t itemsize):
    """(shape, dst byte strides, src byte strides) of a copy from src to dst,
    coalesced by the kernels (dlref_coalesce); an empty copy is (0,) long.
    Packed sub-byte data (itemsize 0) is copied as whole bytes: ()."""
    cdef int64_t db[DLPACK_REF_MAX_NDIM]
    cdef int64_t sb[DLPACK_REF_MAX_NDIM]
    cdef int64_t sh[DLPACK_REF_MAX_NDIM]
    cdef int64_t ds[DLPACK_REF_MAX_NDIM]
    cdef int64_t ss[DLPACK_REF_MAX_NDIM]
    cdef int i, k
    if itemsize == 0:
        return ((), (), ())
    for i in range(src._ndim):
        db[i] = dlref_byte_stride(dst._strides[i], itemsize)
        sb[i] = dlref_byte_stride(src._strides[i], itemsize)
    k = dlref_coalesce(src._ndim, src._shape, db, sb, sh, ds, ss)
    if k < 0:
        return ((0,), (0,), (0,))
    return (tuple([sh[i] for i in range(k)]), tuple([ds[i] for i in range(k)]), tuple([ss[i] for i in range(k)]))


def _coalesce(shape, dst_strides, src_strides):
    """(shape, dst_strides, src_strides) coalesced by the kernels'
    dlref_coalesce, as the core hands a device copy to the CUDA layer; None
    for an empty shape. For the tests of the CUDA layer's copy plans."""
    cdef int64_t a[DLPACK_REF_MAX_NDIM]
    cdef int64_t b[DLPACK_REF_MAX_NDIM]
    cdef int64_t c[DLPACK_REF_MAX_NDIM]
    cdef int64_t sh[DLPACK_REF_MAX_NDIM]
    cdef int64_t ds[DLPACK_REF_MAX_NDIM]
    cdef int64_t ss[DLPACK_REF_MAX_NDIM]
    cdef int i, k, n = len(shape)
    if n > DLPACK_REF_MAX_NDIM or len(dst_strides) != n or len(src_strides) != n:
        raise ValueError(f"shape and strides of up to {DLPACK_REF_MAX_NDIM} equal lengths expected")
    for i in range(n):
        a[i] = shape[i]
        b[i] = dst_strides[i]
        c[i] = src_strides[i]
    k = dlref_coalesce(n, a, b, c, sh, ds, ss)
    if k < 0:
        return None
    return (tuple([sh[i] for i in range(k)]), tuple([ds[i] for i in range(k)]), tuple([ss[i] for i in range(k)]))


cdef int _device_copy(Array dst, Array src, const dlpack_ref_stream* stream) except -1:
    """Copy src into dst (same shape) through the CUDA layer, with their
    dimensions coalesced here (the CUDA layer plans its driver copies on
    them and merges nothing itself)."""
    cdef int64_t bits = dlpack_ref_storage_bits(src._dtype, src._flags)
    cdef int64_t itemsize = bits // 8 if bits >= 8 else 0
    if itemsize and src._device.device_type == kDLCPU and dst._device.device_type != kDLCPU \
            and not _is_c_contiguous(src):
        # Gather pageable host data on the host: one transfer instead of many.
        src = _copy_to(src, src._device, &_STREAM_NONE)
    shape, dst_strides, src_strides = _coalesced(dst, src, itemsize)
    _cuda().copy_array(_block(dst, dst_strides), _block(src, src_strides), shape, itemsize,
                       <size_t>((_size_of(src) * bits + 7) // 8), stream.given, stream.sync, stream.handle)
    return 0
