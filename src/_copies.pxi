# Copies: a copy of an Array on any device, host copies and dtype
# conversions (the C kernels, on the worker pool for large arrays),
# assignment with broadcasting, and what the host may read in place.


# Below this many elements a copy or conversion keeps the GIL (releasing it
# costs more than the work).
cdef enum:
    _NOGIL_ELEMENTS = 1 << 14


# A copy the caller orders on no stream of its own: stream=None, as the
# header parses it (the legacy default stream; a copy to the host is done on
# return).
cdef dlpack_ref_stream _STREAM_NONE = dlpack_ref_stream_none()


cdef Array _copy_to(Array src, DLDevice target, const dlpack_ref_stream* stream):
    """A C-contiguous copy of src on target; device transfers go through
    the CUDA layer, ordered on `stream` (parsed where it entered; its fields
    are handed on as they are)."""
    cdef DLDevice memory = target
    cdef tuple copy_from = None
    # Host memory that no CUDA runtime orders (CPU, TPU_PINNED) is copied to
    # the CPU by the CPU: no driver is needed, or may exist, for it.
    cdef bint on_host = target.device_type == kDLCPU and dlpack_ref_device_host_accessible(
        src._device.device_type) and not dlpack_ref_device_cuda_family(src._device.device_type)
    if target.device_type == kDLCPU and not on_host and (
            not dlpack_ref_device_host_accessible(src._device.device_type)
            or (stream.given and stream.sync)):
        # A copy of device memory to the host lands in page-locked memory:
        # it runs at pinned bandwidth (a copy into pageable memory is staged
        # by the driver) and, on a stream, does not block (one into pageable
        # memory returns only when done). It is still host memory, so the
        # Array says CPU. See docs/cuda.md, "The allocation model".
        memory.device_type = kDLCUDAHost
        memory.device_id = 0
    if not on_host:
        copy_from = (src._device.device_type, src._device.device_id, stream.sync, stream.handle)
    cdef Array dst = _empty_dims(src._shape, src._ndim, src._dtype, memory,
                                 (src._flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0, copy_from)
    dst._device = target
    if on_host:
        _host_copy(dst, src, True)
    else:
        _device_copy(dst, src, stream)
    return dst


cdef Array _host_readable(Array a):
    """a itself when the host may read it now, else a host copy (packed
    sub-byte data is unpacked to one code per byte)."""
    cdef DLDevice cpu
    cpu.device_type = kDLCPU
    cpu.device_id = 0
    cdef Array out
    if not dlpack_ref_device_host_accessible(a._device.device_type):
        a = _copy_to(a, cpu, &_STREAM_NONE)
    elif a._device.device_type != kDLCPU:
        _host_wait(a)
    if _is_packed(a._dtype, a._flags):
        out = _empty_dims(a._shape, a._ndim, a._dtype, cpu)
        _host_convert(out, a)
        return out
    return a


cdef int _host_copy(Array dst, Array src, bint fresh) except -1:
    """Copy src into dst (same shape) on the host; `fresh`: dst was just
    allocated (dlref_strided_copy)."""
    cdef int64_t bits = dlpack_ref_storage_bits(src._dtype, src._flags)
    cdef int64_t itemsize
    cdef int64_t src_b[DLPACK_REF_MAX_NDIM]
    cdef int i
    if _size_of(src) == 0:
        return 0
    if fresh and _size_of(src) < _NOGIL_ELEMENTS and _is_c_contiguous(src):
        # A small dense copy into a new (C-contiguous) Array: one memcpy, no
        # strides to coalesce and walk.
        memcpy(dst._data, src._data, <size_t>_nbytes_of(src))
        return 0
    if bits < 8:
        if not (_is_c_contiguous(src) and _is_c_contiguous(dst)):
            raise BufferError(f"strided copies of packed sub-byte {src.dtype} data are not supported")
        memcpy(dst._data, src._data, <size_t>_nbytes_of(src))
        return 0
    itemsize = bits // 8
    for i in range(src._ndim):
        src_b[i] = dlref_byte_stride(src._strides[i], itemsize)
    return _host_copy_from(dst, src._data, src_b, itemsize, fresh)


cdef int _host_copy_from(Array dst, const char* src, const int64_t* src_b, int64_t itemsize, bint fresh) except -1:
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
        dlref_strided_copy(dst._data, dst_b, src, src_b, dst._shape, dst._ndim, <size_t>itemsize, 1, fresh)
    else:
        threads = _pool_threads()
        with nogil:
            dlref_strided_copy(dst._data, dst_b, src, src_b, dst._shape, dst._ndim, <size_t>itemsize, threads,
                               fresh)
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
        return _copy_to(out, src._device, &_STREAM_NONE)
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
        _host_copy(dst, b, False)
    else:
        _device_copy(dst, b, &_STREAM_NONE)
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
