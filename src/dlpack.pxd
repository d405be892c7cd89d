# cython: language_level=3
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: dlpack-ref developers
#
# Cython declarations of include/dlpack.h (DLPack ABI 1.3).
#
# Every name is the C name; nothing is renamed, so this file can be
# compiled against our include/dlpack.h or the upstream dlpack.h alike.
# Usage:   from dlpack cimport *     (or cimport the names you need)
#
# Exception and GIL specifications of the function pointers, which decide
# what Cython lets you assign to them:
#
#   * deleters and the allocator's SetError callback: `noexcept nogil`;
#     they may run on any thread, without the GIL, with no way to report an
#     error.
#   * DLPackManagedTensorAllocator: `noexcept nogil`; it reports errors
#     through SetError, not through a Python exception, and may be called
#     without the GIL.
#   * the other four exchange functions: `except -1`, called with the GIL
#     held.  Their C contract is "return -1 with a Python exception set",
#     which is exactly what a Cython `except -1` function does when it
#     raises, and a Cython caller propagates the exception on -1.
#
# DLPACK_EXTERN_C and DLPACK_DLL expand to linkage keywords (or nothing) and
# cannot be declared as values; everything else in the header is here, and
# after it the names the DLPack protocol gives the capsules (not in the C
# header; spelled once in dlpack_ref.h and declared here).

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef extern from "dlpack.h" nogil:

    # ------------------------------------------------------------------
    # Macros
    # ------------------------------------------------------------------
    const int DLPACK_MAJOR_VERSION       # 1
    const int DLPACK_MINOR_VERSION       # 3

    # Bits of DLManagedTensorVersioned.flags (unsigned long in C)
    const unsigned long DLPACK_FLAG_BITMASK_READ_ONLY               # 1 << 0
    const unsigned long DLPACK_FLAG_BITMASK_IS_COPIED               # 1 << 1
    const unsigned long DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED  # 1 << 2

    # ------------------------------------------------------------------
    # Version, device, data type
    # ------------------------------------------------------------------
    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor

    ctypedef enum DLDeviceType:
        kDLCPU = 1
        kDLCUDA = 2
        kDLCUDAHost = 3
        kDLOpenCL = 4
        kDLVulkan = 7
        kDLMetal = 8
        kDLVPI = 9
        kDLROCM = 10
        kDLROCMHost = 11
        kDLExtDev = 12
        kDLCUDAManaged = 13
        kDLOneAPI = 14
        kDLWebGPU = 15
        kDLHexagon = 16
        kDLMAIA = 17
        kDLTrn = 18
        # Upstream's main branch, after the 1.3 release (a dlpack.h of that
        # release lacks these names: use them only with this project's header)
        kDLTPU = 19
        kDLTPUHost = 20
        kDLAscend = 21

    ctypedef struct DLDevice:
        DLDeviceType device_type
        int32_t device_id

    ctypedef enum DLDataTypeCode:
        kDLInt = 0
        kDLUInt = 1
        kDLFloat = 2
        kDLOpaqueHandle = 3
        kDLBfloat = 4
        kDLComplex = 5
        kDLBool = 6
        kDLFloat8_e3m4 = 7
        kDLFloat8_e4m3 = 8
        kDLFloat8_e4m3b11fnuz = 9
        kDLFloat8_e4m3fn = 10
        kDLFloat8_e4m3fnuz = 11
        kDLFloat8_e5m2 = 12
        kDLFloat8_e5m2fnuz = 13
        kDLFloat8_e8m0fnu = 14
        kDLFloat6_e2m3fn = 15
        kDLFloat6_e3m2fn = 16
        kDLFloat4_e2m1fn = 17
        kDLBcomplex = 18    # upstream's main branch, after the 1.3 release

    ctypedef struct DLDataType:
        uint8_t code        # a DLDataTypeCode value
        uint8_t bits
        uint16_t lanes

    # ------------------------------------------------------------------
    # Tensors
    # ------------------------------------------------------------------
    ctypedef struct DLTensor:
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor* self) noexcept nogil

    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned* self) noexcept nogil
        uint64_t flags
        DLTensor dl_tensor

    # ------------------------------------------------------------------
    # C exchange API (__dlpack_c_exchange_api__)
    # ------------------------------------------------------------------
    ctypedef int (*DLPackManagedTensorAllocator)(
        DLTensor* prototype,
        DLManagedTensorVersioned** out,
        void* error_ctx,
        void (*SetError)(void* error_ctx, const char* kind,
                         const char* message) noexcept nogil,
    ) noexcept nogil


# The four functions that report failure as a Python exception are called
# with the GIL held, so they are declared outside a `nogil` block (inside
# one, Cython would make the pointer types nogil and refuse Cython functions
# that touch Python objects).
cdef extern from "dlpack.h":

    ctypedef int (*DLPackManagedTensorFromPyObjectNoSync)(
        void* py_object,
        DLManagedTensorVersioned** out,
    ) except -1

    ctypedef int (*DLPackDLTensorFromPyObjectNoSync)(
        void* py_object,
        DLTensor* out,
    ) except -1

    ctypedef int (*DLPackCurrentWorkStream)(
        DLDeviceType device_type,
        int32_t device_id,
        void** out_current_stream,
    ) except -1

    ctypedef int (*DLPackManagedTensorToPyObjectNoSync)(
        DLManagedTensorVersioned* tensor,
        void** out_py_object,
    ) except -1


cdef extern from "dlpack.h" nogil:

    ctypedef struct DLPackExchangeAPIHeader:
        DLPackVersion version
        DLPackExchangeAPIHeader* prev_api

    ctypedef struct DLPackExchangeAPI:
        DLPackExchangeAPIHeader header
        DLPackManagedTensorAllocator managed_tensor_allocator
        DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync
        DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync
        DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync
        DLPackCurrentWorkStream current_work_stream


# ----------------------------------------------------------------------
# Capsule names and limits of the Python protocol
# ----------------------------------------------------------------------
# Written once, in include/dlpack_ref.h (the vendorable protocol in C, which
# needs them too); declared here. The Python spelling of each name is this
# one too: the core exports them (dlpack_ref.CAPSULE_NAMES) for Python code,
# so nothing retypes them.
cdef extern from "dlpack_ref.h":
    const char* DLPACK_REF_CAPSULE_VERSIONED
    const char* DLPACK_REF_CAPSULE_LEGACY
    const char* DLPACK_REF_CAPSULE_USED_VERSIONED
    const char* DLPACK_REF_CAPSULE_USED_LEGACY
    const char* DLPACK_REF_CAPSULE_EXCHANGE_API
    enum:
        DLPACK_REF_MAX_NDIM
        DLPACK_REF_MAX_API_CHAIN
