# cython: language_level=3, freethreading_compatible=True
# SPDX-License-Identifier: Apache-2.0
# A minimal array library in Cython that adopts DLPack by vendoring
# dlpack.pxd, dlpack_ref_api.pxd and the three headers (dlpack.h,
# dlpack_ref.h, dlpack_ref_tables.h): its own memory, its own type, and glue
# that forwards __dlpack__, __dlpack_device__ and from_dlpack to the header.
# Built with only the folder of `dlpack-ref-config --includedir` on the
# Cython and C include paths (the commands: docs/vendoring.md); dlpack-ref
# is not imported at build or run time. Same Python API as c_adopter.c
# (make, from_dlpack, Tensor with data_ptr, readonly, meta), so
# adopter_hook.py serves it too.

cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t, uint8_t, uint16_t, uintptr_t
from libc.stdlib cimport malloc, free
from posix.stdlib cimport posix_memalign
from libc.string cimport memcpy, memcmp
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from dlpack cimport *
from dlpack_ref_api cimport *


# --- the array type: memory of its own, or a tensor held zero-copy -----------

cdef enum:
    INLINE_NDIM = 8
    # Our memory's alignment, dlpack-ref's own: JAX imports host memory
    # zero-copy only when it is 64-byte aligned, and copies it otherwise.
    ALIGNMENT = 256


# A free list: CPython's allocator and the zeroing of a new object are a
# tenth of an import (Cython keeps no free list on free-threaded builds).
@cython.freelist(8)
cdef class Tensor:
    cdef DLTensor t                 # shape and strides point at the extents below
    # Shape then strides, inside the object up to 8 dimensions (where the
    # exchange table's view borrows them, and small enough that CPython's
    # small-object allocator serves the object), malloc'd beyond.
    cdef int64_t inline_extents[2 * INLINE_NDIM]
    cdef int64_t* heap_extents
    cdef uint64_t flags             # READ_ONLY, IS_SUBBYTE_TYPE_PADDED
    cdef void* own                  # our memory (ALIGNMENT-aligned), or NULL
    cdef DLPackRefTensor imported   # a taken tensor held zero-copy, or empty
    cdef public object meta         # anything the user attaches

    def __dealloc__(self):
        dlpack_ref_release(&self.imported)
        free(self.own)
        free(self.heap_extents)

    cdef int set_ndim(self, int ndim) except -1:
        """Room for `ndim` extents and strides."""
        if ndim > INLINE_NDIM:
            self.heap_extents = <int64_t*>malloc(2 * <size_t>ndim * sizeof(int64_t))
            if self.heap_extents == NULL:
                raise MemoryError()
        self.t.ndim = ndim
        self.t.shape = self.heap_extents if self.heap_extents != NULL else self.inline_extents
        self.t.strides = self.t.shape + ndim
        return 0

    cdef void hold(self, DLPackRefTensor* taken) noexcept:
        """Keep `taken` (zero-copy) as this tensor's memory (set_ndim done)."""
        cdef const DLTensor* src = taken.dl_tensor
        self.imported = taken[0]
        self.t.data = src.data
        self.t.device = src.device
        self.t.dtype = src.dtype
        self.t.byte_offset = src.byte_offset
        memcpy(self.t.shape, src.shape, <size_t>src.ndim * sizeof(int64_t))
        if src.strides != NULL:
            memcpy(self.t.strides, src.strides, <size_t>src.ndim * sizeof(int64_t))
        else:
            row_major(self.t.strides, self.t.shape, src.ndim)
        self.flags = taken.flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)

    @property
    def data_ptr(self):
        return <uintptr_t>self.t.data + <uintptr_t>self.t.byte_offset

    @property
    def readonly(self):
        return (self.flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0

    # --- glue: the producer protocol ----------------------------------------
    cdef void describe(self, dlpack_ref_producer* p) noexcept:
        """The one description of this tensor: __dlpack__ and the exchange
        table both export from it, so they cannot disagree."""
        p.tensor = self.t
        p.owner = <PyObject*>self
        p.read_only = (self.flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0
        p.flags = self.flags
        p.ctx = <void*>self
        p.copy = copy_cb
        p.order = NULL              # CPU memory: nothing is ever pending

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        cdef dlpack_ref_producer p
        self.describe(&p)
        return dlpack_ref_producer_export(&p, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        return dlpack_ref_dlpack_device(self.t.device)
    # --- end of glue --------------------------------------------------------


cdef void row_major(int64_t* strides, const int64_t* shape, int ndim) noexcept:
    cdef int64_t k = 1
    cdef int d
    for d in range(ndim - 1, -1, -1):
        strides[d] = k
        k *= shape[d] if shape[d] > 0 else 1


cdef Tensor copy_to_host(const DLTensor* src, uint64_t flags, type cls=Tensor):
    """A row-major copy of `src` in new memory of ours, on the CPU, as a `cls`."""
    cdef int64_t bits = dlpack_ref_storage_bits(src.dtype, flags)
    cdef int64_t count = dlpack_ref_element_count(src.shape, src.ndim)
    cdef int64_t n = dlpack_ref_nbytes(count, bits), i, rest, off
    cdef const char* base = <const char*>src.data + src.byte_offset
    cdef int d
    if not dlpack_ref_device_host_accessible(<int>src.device.device_type):
        raise BufferError("cython_adopter copies host-accessible memory only")
    cdef Tensor c = cls.__new__(cls)
    c.set_ndim(src.ndim)
    c.t.dtype = src.dtype
    c.t.device.device_type = kDLCPU
    c.flags = flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
    memcpy(c.t.shape, src.shape, <size_t>src.ndim * sizeof(int64_t))
    row_major(c.t.strides, c.t.shape, src.ndim)
    if posix_memalign(&c.own, ALIGNMENT, <size_t>(n if n else 1)) != 0:
        raise MemoryError()
    c.t.data = c.own
    if src.strides == NULL or memcmp(src.strides, c.t.strides, <size_t>src.ndim * sizeof(int64_t)) == 0:
        memcpy(c.own, base, <size_t>n)
        return c
    if bits % 8:
        raise BufferError("strided sub-byte copy")
    for i in range(count):          # element by element
        rest, off = i, 0
        for d in range(src.ndim - 1, -1, -1):
            off += (rest % src.shape[d]) * src.strides[d]
            rest //= src.shape[d]
        memcpy(<char*>c.own + i * (bits // 8), base + off * (bits // 8), <size_t>(bits // 8))
    return c


def make(int code, int bits, int lanes, tuple shape, data, unsigned long long flags=0, type cls=Tensor):
    """make(code, bits, lanes, shape, data: bytes, flags=0, cls=Tensor): a
    row-major tensor of ours (of class `cls`, a subclass of Tensor) holding
    `data`."""
    if not issubclass(cls, Tensor):
        raise TypeError("cls must be a subclass of Tensor")
    cdef DLTensor desc
    cdef int64_t dims[DLPACK_REF_MAX_NDIM]
    cdef Py_buffer view
    cdef int d
    desc.ndim = len(shape)
    desc.dtype.code = <uint8_t>code
    desc.dtype.bits = <uint8_t>bits
    desc.dtype.lanes = <uint16_t>lanes
    desc.device.device_type = kDLCPU
    desc.device.device_id = 0
    desc.shape = dims
    desc.strides = NULL
    desc.byte_offset = 0
    for d in range(min(desc.ndim, DLPACK_REF_MAX_NDIM)):
        dims[d] = shape[d]
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        desc.data = view.buf
        dlpack_check_tensor(&desc, flags, 1)
        if dlpack_ref_nbytes(dlpack_ref_element_count(dims, desc.ndim), dlpack_ref_storage_bits(desc.dtype, flags)) != view.len:
            raise ValueError("data has the wrong size for the shape and dtype")
        r = copy_to_host(&desc, flags, cls)
    finally:
        PyBuffer_Release(&view)
    r.flags |= flags & DLPACK_FLAG_BITMASK_READ_ONLY
    return r


# --- glue: the copy callback and the consumer protocol -----------------------

CopyForbiddenError = <object>dlpack_ref_copy_forbidden_error()
# The version of dlpack-ref whose files this module vendors (a real library gives its own).
__version__ = DLPACK_REF_VERSION.decode()


cdef int copy_cb(void* ctx, const DLTensor* src, DLDevice target, const dlpack_ref_stream* stream,
                 DLTensor* out, PyObject** owner) except -1:
    if target.device_type != kDLCPU:
        raise BufferError(f"cython_adopter cannot copy to device ({target.device_type}, {target.device_id}); "
                          "it has CPU memory only")
    cdef Tensor c = copy_to_host(src, (<Tensor>ctx).flags)
    out[0] = c.t
    Py_INCREF(c)
    owner[0] = <PyObject*>c
    return 0


cdef Tensor wrap_taken(DLPackRefTensor* taken):
    """A tensor of ours holding `taken` zero-copy; consumes it (released on
    failure). from_dlpack and the exchange table both use it."""
    cdef Tensor r
    try:
        if not dlpack_ref_device_host_accessible(<int>taken.dl_tensor.device.device_type):
            raise BufferError("cython_adopter holds host-accessible memory only")
        r = Tensor.__new__(Tensor)
        r.set_ndim(taken.dl_tensor.ndim)
    except BaseException:
        dlpack_ref_release(taken)
        raise
    r.hold(taken)
    return r


def from_dlpack(x, /, *, device=None, copy=None):
    """from_dlpack(x, /, *, device=None, copy=None): the header decides, we copy."""
    cdef DLPackRefTensor t
    cdef DLDevice target
    cdef int must_copy
    dlpack_ref_consumer_take(x, device, copy, None, &t, &target, &must_copy)
    if not must_copy:
        return wrap_taken(&t)
    try:
        if target.device_type != kDLCPU:
            raise BufferError(f"cython_adopter cannot copy to device ({target.device_type}, {target.device_id})")
        return copy_to_host(t.dl_tensor, t.flags)
    finally:
        dlpack_ref_release(&t)


# --- glue: __dlpack_c_exchange_api__ of Tensor, from the same describe and wrap
# (the builder's host allocator and "no stream": CPU memory only); table
# functions take no context, so each forwards to the builder with the static spec.

cdef dlpack_ref_exchange_spec tensor_spec
cdef DLPackExchangeAPI tensor_api


cdef int spec_describe(PyObject* obj, dlpack_ref_producer* out) except -1:
    (<Tensor>obj).describe(out)
    return 0


cdef PyObject* spec_wrap(DLPackRefTensor* taken) except NULL:
    r = wrap_taken(taken)
    Py_INCREF(r)
    return <PyObject*>r


cdef int api_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* ctx,
                       void (*set_error)(void*, const char*, const char*) noexcept nogil) noexcept nogil:
    return dlpack_ref_exchange_allocator_of(&tensor_spec, prototype, out, ctx, set_error)


cdef int api_from_py(void* obj, DLManagedTensorVersioned** out) except -1:
    return dlpack_ref_exchange_from_py(&tensor_spec, <PyObject*>obj, out)


cdef int api_to_py(DLManagedTensorVersioned* tensor, void** out) except -1:
    return dlpack_ref_exchange_to_py(&tensor_spec, tensor, out)


cdef int api_view(void* obj, DLTensor* out) except -1:
    return dlpack_ref_exchange_view(&tensor_spec, <PyObject*>obj, out)


cdef int api_stream(DLDeviceType device_type, int32_t device_id, void** out) except -1:
    return dlpack_ref_exchange_stream_of(&tensor_spec, device_type, device_id, out)


tensor_spec.type = <PyTypeObject*>Tensor
tensor_spec.describe = spec_describe
tensor_spec.wrap = spec_wrap
tensor_spec.allocator = NULL
tensor_spec.current_work_stream = NULL
dlpack_ref_exchange_table_init(&tensor_api, api_allocator, api_from_py, api_to_py, api_view, api_stream)
dlpack_ref_publish_exchange_api(<PyTypeObject*>Tensor, &tensor_api)
