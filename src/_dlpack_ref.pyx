# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: freethreading_compatible=True, embedsignature=True
"""The dlpack-ref core: the Array type, capsules out (export), capsules in
(import) and the DLPack 1.3 C exchange API table, in one extension built
from the ordered list of concept files below.

Every DLPack rule is written once, in include/dlpack_ref.h, the vendorable
protocol in C; this module calls those very functions through their Cython
declarations in dlpack_ref_api.pxd, so libraries that vendor the header get
the reference's own checks. Capsule names, flags, the version and the limits
are spelled once, in the header, and declared for Cython in dlpack.pxd.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t, INT64_MAX
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

cimport cython

from dlpack cimport *
from dlpack_ref_api cimport *

# C-only helpers: the C kernels' declarations (src/dlref_kernels.h), the pool's threads, testing trampolines.
include "_capi.pxi"
# Devices: Device objects, parsing, the device families, the in-place access table.
include "_devices.pxi"
# Dtypes: element sizes, buffer-protocol formats, the DLDataType of any dtype object.
include "_dtypes.pxi"
# The Array: its fields, metadata, Python scalars, and the views the other files make.
include "_array.pxi"
# Allocation: new C-contiguous Arrays on the host or a device of the CUDA family.
include "_allocation.pxi"
# Indexing: integers, slices, Ellipsis and None as views; iteration.
include "_indexing.pxi"
# Copies: a copy on any device, host copies and conversions on the pool, assignment.
include "_copies.pxi"
# CUDA copies: pending work of CUDA-family memory, host waits, device transfers.
include "_cuda_copies.pxi"
# Python values in: scalars and nested sequences, written by the C kernels.
include "_values.pxi"
# Export: __dlpack__ arguments, the buffer protocol, the one allocation per capsule.
include "_export.pxi"
# NumPy's ndarray read from its head, with no export: the copies asarray and from_dlpack make of one.
include "_ndarray.pxi"
# Import: capsule intake, from_dlpack, inspect, buffer import.
include "_import.pxi"
# Creation: asarray's dispatch over every kind of input, and zeros.
include "_creation.pxi"
# The DLPack 1.3 C exchange API: our table, and other types' tables looked up once.
include "_exchange_api.pxi"

#: (major, minor) of the DLPack ABI this core implements, read from dlpack.h.
DLPACK_VERSION = (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)
#: The most dimensions an Array or an imported tensor may have.
MAX_NDIM = DLPACK_REF_MAX_NDIM
#: The bits of DLManagedTensorVersioned.flags, by their dlpack.h names.
FLAGS = {
    "DLPACK_FLAG_BITMASK_READ_ONLY": DLPACK_FLAG_BITMASK_READ_ONLY,
    "DLPACK_FLAG_BITMASK_IS_COPIED": DLPACK_FLAG_BITMASK_IS_COPIED,
    "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED": DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
}
#: The names a DLPack capsule carries, for Python code (one spelling: dlpack.pxd).
CAPSULE_NAMES = {
    "versioned": DLPACK_REF_CAPSULE_VERSIONED.decode(),
    "legacy": DLPACK_REF_CAPSULE_LEGACY.decode(),
    "used_versioned": DLPACK_REF_CAPSULE_USED_VERSIONED.decode(),
    "used_legacy": DLPACK_REF_CAPSULE_USED_LEGACY.decode(),
    "exchange_api": DLPACK_REF_CAPSULE_EXCHANGE_API.decode(),
}
