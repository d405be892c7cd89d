# -----------------------------------------------------------------------------

# DLPack import on dlpack-ref's vendored header (dlpack_ref.h, through its
# Cython declarations dlpack_ref_api.pxd): the protocol, the checks and the
# ownership of the tensor are the header's; what stays here is mpi4py's own
# policy, the element format a message derives its MPI datatype from.

from dlpack cimport DLDataType, DLDevice, kDLBool, kDLComplex, kDLCPU, kDLCUDA, kDLCUDAHost
from dlpack cimport kDLCUDAManaged, kDLFloat, kDLInt, kDLROCMHost, kDLUInt
from dlpack_ref_api cimport DLPACK_REF_DTYPES_AS_BYTES, dlpack_ref_get_buffer, dlpack_ref_py_buffer

# A message buffer is never ordered on a stream here: the MPI library that
# reads device memory does (stream=-1 asks the producer not to synchronize).
cdef object DLPACK_NO_SYNC = -1

# -----------------------------------------------------------------------------

cdef inline char *dlpack_get_format(DLDataType dtype) noexcept nogil:
    cdef unsigned int code = dtype.code
    cdef unsigned int bits = dtype.bits
    if dtype.lanes != 1:
        if code == kDLFloat and dtype.lanes == 2:
            if bits == 8*sizeof(float):       return b"Zf"
            if bits == 8*sizeof(double):      return b"Zd"
            if bits == 8*sizeof(long double): return b"Zg"
        return b"B"
    if code == kDLBool:
        if bits == 8: return b"?"
    if code == kDLInt or code == kDLUInt:  # signed: lower case, unsigned: upper
        if bits == 8*sizeof(char):      return b"b" if code == kDLInt else b"B"
        if bits == 8*sizeof(short):     return b"h" if code == kDLInt else b"H"
        if bits == 8*sizeof(int):       return b"i" if code == kDLInt else b"I"
        if bits == 8*sizeof(long):      return b"l" if code == kDLInt else b"L"
        if bits == 8*sizeof(long long): return b"q" if code == kDLInt else b"Q"  # ~> long
    if code == kDLFloat:
        if bits ==  8*sizeof(float)//2:    return b"e"
        if bits ==  8*sizeof(float):       return b"f"
        if bits ==  8*sizeof(double):      return b"d"
        if bits ==  8*sizeof(long double): return b"g"
    if code == kDLComplex:
        if bits ==  8*2*sizeof(float)//2:    return b"Ze"
        if bits ==  8*2*sizeof(float):       return b"Zf"
        if bits ==  8*2*sizeof(double):      return b"Zd"
        if bits ==  8*2*sizeof(long double): return b"Zg"  # ~> uncovered
    return BYTE_FMT

cdef inline Py_ssize_t dlpack_get_itemsize(DLDataType dtype) noexcept nogil:
    cdef unsigned int code = dtype.code
    cdef unsigned int bits = dtype.bits
    if dtype.lanes != 1:
        if code == kDLFloat and dtype.lanes == 2:
            if (
                bits == 8*sizeof(float) or
                bits == 8*sizeof(double) or
                bits == 8*sizeof(long double)
            ):
                return <Py_ssize_t> bits // 8 * 2
        bits = 1
    return <Py_ssize_t> (bits + 7) // 8

# -----------------------------------------------------------------------------

cdef int Py_CheckDLPackBuffer(object obj) noexcept:
    try:    return <bint>hasattr(obj, '__dlpack__')
    except: return 0  # ~> uncovered  # noqa

cdef int Py_GetDLPackBuffer(object obj, Py_buffer *view, int flags) except -1:
    cdef DLDevice device
    cdef DLDataType dtype
    cdef char *format
    try:
        # the producer's own memory (copy=False), any device, any data type
        # as bytes; view.obj runs the deleter once when the buffer goes
        dlpack_ref_get_buffer(obj, <dlpack_ref_py_buffer*> view, flags, DLPACK_REF_DTYPES_AS_BYTES,
                              DLPACK_NO_SYNC, &device, &dtype)
    except TypeError:
        if not (hasattr(obj, '__dlpack__') and hasattr(obj, '__dlpack_device__')):
            raise NotImplementedError("dlpack: missing support")
        raise
    if (flags & PyBUF_FORMAT) == PyBUF_FORMAT:
        format = dlpack_get_format(dtype)
        view.format = format
        if format != BYTE_FMT:
            view.itemsize = dlpack_get_itemsize(dtype)
    return <int> device.device_type

# -----------------------------------------------------------------------------
