# cython: language_level=3, freethreading_compatible=True
"""A consumer of memory as bytes built on dlpack-ref's Cython API (the way a
message or I/O library would use it), for tests/test_consumer_buffer.py:
dlpack_ref_get_buffer into a Py_buffer held by a View, and the header's other
imports whose refusals must leave no error pending when a capsule dies."""

from cpython.buffer cimport PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.object cimport PyObject
from dlpack cimport DLDataType, DLDevice
from dlpack_ref_api cimport (
    DLPACK_REF_DTYPES_AS_BYTES, DLPACK_REF_DTYPES_DLPACK, DLPackRefTensor, dlpack_ref_get_buffer, dlpack_ref_import,
    dlpack_ref_release,
)


cdef class View:
    """The Py_buffer dlpack_ref_get_buffer filled, until release()."""
    cdef Py_buffer view
    cdef DLDevice device
    cdef DLDataType dtype
    cdef bint held

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)

    def release(self):
        if self.held:
            self.held = False
            PyBuffer_Release(&self.view)

    @property
    def address(self):
        return <size_t>self.view.buf

    @property
    def nbytes(self):
        return self.view.len

    @property
    def readonly(self):
        return bool(self.view.readonly)

    @property
    def owner(self):
        return self.view.obj

    @property
    def device(self):
        return (<int>self.device.device_type, self.device.device_id)

    @property
    def dtype(self):
        return (self.dtype.code, self.dtype.bits, self.dtype.lanes)


def get_buffer(x, *, bint writable=False, bint as_bytes=True, stream=-1):
    """dlpack_ref_get_buffer(x): a View of x's memory (writable asks
    PyBUF_WRITABLE; as_bytes: any data type with a size)."""
    cdef View v = View.__new__(View)
    dlpack_ref_get_buffer(x, &v.view, PyBUF_WRITABLE if writable else PyBUF_SIMPLE,
                          DLPACK_REF_DTYPES_AS_BYTES if as_bytes else DLPACK_REF_DTYPES_DLPACK, stream,
                          &v.device, &v.dtype)
    v.held = True
    return v


def import_and_release(x):
    """dlpack_ref_import(x), then its deleter."""
    cdef DLPackRefTensor t
    dlpack_ref_import(x, &t)
    dlpack_ref_release(&t)
    return True
