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


cdef tuple _block(Array a, int64_t itemsize):
    """The description of a's memory that the CUDA layer copies from/to
    (CPU Arrays on pinned memory, from a copy to the host on a stream, keep
    the record of that memory, so its free waits for the copy)."""
    return (<uintptr_t>a._data, a._device.device_type, a._device.device_id,
            _work_of(a) if dlpack_ref_device_cuda_family(a._device.device_type) else a._work,
            tuple([dlref_byte_stride(a._strides[i], itemsize) for i in range(a._ndim)]), _is_c_contiguous(a))


cdef int _device_copy(Array dst, Array src, object stream) except -1:
    """Copy src into dst (same shape) through the CUDA layer."""
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
