# cython: language_level=3, freethreading_compatible=True
"""A small extension built against dlpack-ref's Cython API (the way a library
that vendors or depends on dlpack-ref would use it), for tests/test_cython_api.py."""

from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free
from dlpack cimport DLDevice, DLDeviceType, DLManagedTensorVersioned, DLTensor, kDLCPU, kDLFloat, DLPACK_FLAG_BITMASK_READ_ONLY
from dlpack_ref_api cimport (
    DLPackRefTensor, dlpack_ref_claim, dlpack_ref_consumer_take, dlpack_ref_dlpack_args, dlpack_ref_dlpack_device,
    dlpack_ref_export_legacy, dlpack_ref_export_legacy_released, dlpack_ref_export_plan_capsule_released,
    dlpack_ref_export_plan, dlpack_ref_export_versioned, dlpack_ref_export_versioned_released, dlpack_ref_import,
    dlpack_ref_producer, dlpack_ref_producer_plan, dlpack_ref_release, dlpack_ref_take, dlpack_ref_to_array,
    dlpack_ref_view,
)
from cpython.object cimport PyObject
from libc.string cimport memset

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    int pthread_create(pthread_t* thread, void* attr, void* (*start)(void*) noexcept nogil, void* arg)
    int pthread_join(pthread_t thread, void** result)

freed = 0


cdef class Buffer:
    """float64 memory of this extension; counts its frees in `freed`."""
    cdef double* data
    cdef int64_t n

    def __dealloc__(self):
        global freed
        if self.data != NULL:
            free(self.data)
            freed += 1

    @property
    def address(self):
        return <size_t>self.data


cdef void _cpu_float64(DLTensor* t, double* data, int ndim) noexcept:
    """t describes float64 CPU memory at data (shape and strides left NULL)."""
    t.data = data
    t.device.device_type = kDLCPU
    t.device.device_id = 0
    t.ndim = ndim
    t.dtype.code = kDLFloat
    t.dtype.bits = 64
    t.dtype.lanes = 1
    t.shape = NULL
    t.strides = NULL
    t.byte_offset = 0


def export(int64_t rows, int64_t cols, *, bint versioned=True, bint read_only=False, bint transposed=False):
    """(capsule, buffer): rows x cols float64 values 0, 1.5, 3, ... owned by
    buffer; transposed exports the cols x rows view with swapped strides."""
    cdef Buffer buf = Buffer.__new__(Buffer)
    buf.n = rows * cols
    buf.data = <double*>malloc(sizeof(double) * (buf.n if buf.n else 1))
    if buf.data == NULL:
        raise MemoryError()
    cdef int64_t i
    for i in range(buf.n):
        buf.data[i] = 1.5 * i
    cdef int64_t shape[2]
    cdef int64_t strides[2]
    cdef DLTensor t
    _cpu_float64(&t, buf.data, 2)
    if transposed:
        shape[0], shape[1], strides[0], strides[1] = cols, rows, 1, cols
        t.strides = strides
    else:
        shape[0], shape[1] = rows, cols
        t.strides = NULL   # row-major, filled in by the export
    t.shape = shape
    if versioned:
        cap = dlpack_ref_export_versioned(&t, buf, DLPACK_FLAG_BITMASK_READ_ONLY if read_only else 0)
    else:
        cap = dlpack_ref_export_legacy(&t, buf)
    return cap, buf


cdef list _describe(DLPackRefTensor* t):
    cdef DLTensor* d = t.dl_tensor
    cdef int i
    return [<size_t>d.data + d.byte_offset, tuple([d.shape[i] for i in range(d.ndim)]),
            tuple([d.strides[i] for i in range(d.ndim)]) if d.strides != NULL else None,
            (d.dtype.code, d.dtype.bits, d.dtype.lanes), t.flags, t.versioned]


def describe(obj):
    """Import obj (producer or capsule), report (data address, shape, strides,
    dtype, flags, versioned), release it."""
    cdef DLPackRefTensor t
    dlpack_ref_import(obj, &t)
    try:
        return _describe(&t)
    finally:
        dlpack_ref_release(&t)


def consume(x, device=None, copy=None):
    """from_dlpack(x, device=device, copy=copy) up to the tensor, through the
    header's consumer: [describe's list, (target device), must_copy]; the
    tensor is released."""
    cdef DLPackRefTensor t
    cdef DLDevice target
    cdef int must_copy = 0
    dlpack_ref_consumer_take(x, device, copy, None, &t, &target, &must_copy)
    try:
        return [_describe(&t), (<int>target.device_type, target.device_id), bool(must_copy)]
    finally:
        dlpack_ref_release(&t)


cdef double _one = 1.0


def export_owned(owner):
    """A versioned capsule of a 0-d float64 tensor (1.0, static memory)
    whose export holds `owner` until its deleter runs."""
    cdef DLTensor t
    _cpu_float64(&t, &_one, 0)
    return dlpack_ref_export_versioned(&t, owner, 0)


cdef void* _call_deleter(void* managed) noexcept nogil:
    cdef DLManagedTensorVersioned* m = <DLManagedTensorVersioned*>managed
    m.deleter(m)
    return NULL


def release_on_a_new_thread(capsule):
    """Take a versioned capsule's tensor and call its deleter from a thread
    Python never saw, waited for without the GIL."""
    cdef bint versioned = False
    cdef void* managed = dlpack_ref_claim(capsule, &versioned)
    cdef pthread_t thread
    if not versioned:
        raise TypeError("release_on_a_new_thread takes versioned capsules")
    with nogil:
        if pthread_create(&thread, NULL, _call_deleter, managed) == 0:
            pthread_join(thread, NULL)
        else:
            _call_deleter(managed)


def take(capsule):
    cdef DLPackRefTensor t
    dlpack_ref_take(capsule, &t)
    dlpack_ref_release(&t)
    dlpack_ref_release(&t)   # a second release is a no-op
    return True


def total(obj):
    """The sum of a float64 2-d producer, walking its strides."""
    cdef DLPackRefTensor t
    dlpack_ref_import(obj, &t)
    cdef DLTensor* d = t.dl_tensor
    cdef double s = 0
    cdef int64_t i, j
    try:
        if d.ndim != 2 or d.dtype.code != kDLFloat or d.dtype.bits != 64:
            raise TypeError("total() wants a 2-d float64 array")
        for i in range(d.shape[0]):
            for j in range(d.shape[1]):
                s += (<double*>(<char*>d.data + d.byte_offset))[i * d.strides[0] + j * d.strides[1]]
        return s
    finally:
        dlpack_ref_release(&t)


def to_array(obj):
    """obj imported here, then handed to dlpack-ref as an Array."""
    cdef DLPackRefTensor t
    dlpack_ref_import(obj, &t)
    return dlpack_ref_to_array(&t)


def capsule_to_array(capsule):
    cdef DLPackRefTensor t
    dlpack_ref_take(capsule, &t)
    return dlpack_ref_to_array(&t)


def view(array):
    """(data address, shape) of a dlpack_ref.Array, borrowed through its table."""
    cdef DLTensor d
    dlpack_ref_view(array, &d)
    cdef int i
    return <size_t>d.data, tuple([d.shape[i] for i in range(d.ndim)])


# --- memory with its own release function: a C buffer with a C count, no
# Python object per buffer ------------------------------------------------------

ctypedef struct CBuffer:
    int64_t holds       # the library's own count: its handle, each export
    int64_t n
    double* data

cdef int64_t _released_calls = 0   # every call of _cbuffer_release
cdef int64_t _cbuffers_freed = 0


cdef void _cbuffer_release(void* ctx) noexcept nogil:
    """The library's release function: one hold fewer, the memory freed at 0."""
    global _released_calls, _cbuffers_freed
    cdef CBuffer* b = <CBuffer*>ctx
    _released_calls += 1
    b.holds -= 1
    if b.holds == 0:
        free(b.data)
        free(b)
        _cbuffers_freed += 1


def released_counts():
    """(calls of the release function, buffers freed)."""
    return _released_calls, _cbuffers_freed


cdef CBuffer* _cbuffer(int64_t n) except NULL:
    cdef CBuffer* b = <CBuffer*>malloc(sizeof(CBuffer))
    if b == NULL:
        raise MemoryError()
    b.data = <double*>malloc(sizeof(double) * (n if n else 1))
    b.holds = 1
    b.n = n
    cdef int64_t i
    for i in range(n):
        b.data[i] = 2.0 * i
    return b


def export_released(int64_t n, *, bint versioned=True, int ndim=1):
    """(capsule, address) of n float64 values 0, 2, 4, ... in a C buffer
    with its own count: the handle's hold is given back at once, so the
    export's hold alone keeps the memory. ndim=-1 makes a bad description."""
    cdef CBuffer* b = _cbuffer(n)
    cdef int64_t shape[1]
    cdef DLTensor t
    address = <size_t>b.data
    _cpu_float64(&t, b.data, ndim)
    shape[0] = n
    t.shape = shape
    b.holds += 1                 # the export's hold, handed over below
    try:
        if versioned:
            return dlpack_ref_export_versioned_released(&t, b, _cbuffer_release, 0), address
        return dlpack_ref_export_legacy_released(&t, b, _cbuffer_release), address
    finally:
        _cbuffer_release(b)      # the handle's hold


class CArray:
    """What released_dlpack's messages call the buffer."""


_NAMED = CArray()


def released_dlpack(int64_t n, *, bint read_only=False, **kwargs):
    """(capsule, address): __dlpack__(**kwargs) of a C buffer of n float64,
    as a C library whose buffers are no Python objects would write it: the
    arguments unpacked by dlpack_ref_dlpack_args, the plan, then one hold on
    the buffer handed to the plan's capsule."""
    cdef CBuffer* b = _cbuffer(n)
    cdef int64_t shape[1]
    cdef dlpack_ref_producer p
    cdef dlpack_ref_export_plan plan
    cdef PyObject* v[4]
    cdef tuple names = tuple(kwargs)
    cdef list values = list(kwargs.values())
    cdef PyObject* argv[4]
    cdef Py_ssize_t i
    address = <size_t>b.data
    try:
        for i in range(len(values)):
            argv[i] = <PyObject*>values[i]
        dlpack_ref_dlpack_args(argv, 0, <PyObject*>names if names else NULL, v)
        memset(&p, 0, sizeof(p))
        _cpu_float64(&p.tensor, b.data, 1)
        shape[0] = n
        p.tensor.shape = shape
        p.owner = <PyObject*>_NAMED   # names the array in messages; the capsule does not hold it
        p.read_only = read_only
        dlpack_ref_producer_plan(&p, <object>v[0], <object>v[1], <object>v[2], <object>v[3], &plan)
        b.holds += 1
        return dlpack_ref_export_plan_capsule_released(&plan, b, _cbuffer_release), address
    finally:
        _cbuffer_release(b)


def dlpack_device(int device_type, int device_id):
    """__dlpack_device__'s answer for a device, as the header makes it."""
    cdef DLDevice d
    d.device_type = <DLDeviceType>device_type
    d.device_id = device_id
    return dlpack_ref_dlpack_device(d)
