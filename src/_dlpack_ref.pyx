# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: freethreading_compatible=True, embedsignature=True
"""The dlpack-ref core: capsules out (producer), capsules in (consumer),
validation, the Array type and the DLPack 1.3 C exchange API table.

Three kinds of state are kept apart on purpose:
- C structs handed to other libraries (one malloc per export, see _export);
- the deleters and capsule destructors that end their life (C helpers below,
  safe without the GIL and after interpreter finalization);
- Python objects (Array, the owners that keep memory alive).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t, uintptr_t, INT64_MAX
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset, strcmp

from cpython.buffer cimport (
    PyObject_GetBuffer, PyBuffer_Release, PyBUF_RECORDS_RO, PyBUF_WRITABLE, PyBUF_FORMAT,
    PyBUF_ND, PyBUF_STRIDES, PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS,
)
from cpython.object cimport PyObject
from cpython.pycapsule cimport (
    PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer, PyCapsule_GetName,
    PyCapsule_SetName, PyCapsule_CheckExact,
)
from cpython.ref cimport Py_INCREF, Py_DECREF

from dlpack cimport *

include "_runtime.pxi"
include "_core_array.pxi"
include "_consumer.pxi"
include "_exchange_api.pxi"
